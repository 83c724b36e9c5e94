// Encrypts every payload (workflow and activity inputs and results, signals, queries, heartbeats, memos) before it
// leaves the process, so the Temporal server and its database only ever hold ciphertext (nothing secret in workflow
// history in clear). The wire format is that of Temporal's encryption samples (a serialized Payload,
// AES-256-GCM, IV first; metadata `encoding: binary/encrypted` and `encryption-key-id`), so their codec server can
// decrypt for the Temporal UI with the same keys.
import { METADATA_ENCODING_KEY, type Payload, type PayloadCodec } from '@temporalio/common';
import proto from '@temporalio/proto';
import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';

export const ENCRYPTED_ENCODING = 'binary/encrypted';
export const KEY_ID_METADATA_KEY = 'encryption-key-id';

const ProtoPayload = proto.temporal.api.common.v1.Payload;
const IV_BYTES = 12;
const TAG_BYTES = 16;
const KEY_BYTES = 32;

/** One AES-256 key and the id written next to what it encrypted. */
export interface EncryptionKey {
  id: string;
  key: Buffer;
}

const utf8 = (s: string) => new TextEncoder().encode(s);
const text = (b: Uint8Array | null | undefined) => (b ? new TextDecoder().decode(b) : undefined);

/**
 * AES-256-GCM payload codec with key rotation: encodes with the first (current) key, decodes with whichever key
 * the payload names. Payloads that were never encrypted pass through decode untouched, so encryption can be turned
 * on for an existing namespace.
 */
export class AesGcmPayloadCodec implements PayloadCodec {
  private readonly current: EncryptionKey;
  private readonly byId: Map<string, Buffer>;

  constructor(keys: EncryptionKey[]) {
    const [current] = keys;
    if (!current) throw new Error('the payload codec needs at least one key');
    for (const k of keys) {
      if (k.key.length !== KEY_BYTES) throw new Error(`payload encryption key ${k.id} is ${k.key.length} bytes; AES-256 needs ${KEY_BYTES}`);
    }
    this.current = current;
    this.byId = new Map(keys.map((k) => [k.id, k.key]));
    if (this.byId.size !== keys.length) throw new Error('two payload encryption keys share an id');
  }

  /** Id of the key new payloads are encrypted with. */
  get currentKeyId(): string {
    return this.current.id;
  }

  // The work is synchronous; the executor turns a throw into a rejection, as the interface promises.
  encode(payloads: Payload[]): Promise<Payload[]> {
    return new Promise((resolve) => resolve(payloads.map((p) => this.encrypt(p))));
  }

  decode(payloads: Payload[]): Promise<Payload[]> {
    return new Promise((resolve) => resolve(payloads.map((p) => this.decrypt(p))));
  }

  private encrypt(payload: Payload): Payload {
    const iv = randomBytes(IV_BYTES);
    const cipher = createCipheriv('aes-256-gcm', this.current.key, iv);
    const plain = ProtoPayload.encode(payload).finish();
    return {
      metadata: { [METADATA_ENCODING_KEY]: utf8(ENCRYPTED_ENCODING), [KEY_ID_METADATA_KEY]: utf8(this.current.id) },
      data: Buffer.concat([iv, cipher.update(plain), cipher.final(), cipher.getAuthTag()]),
    };
  }

  private decrypt(payload: Payload): Payload {
    if (text(payload.metadata?.[METADATA_ENCODING_KEY]) !== ENCRYPTED_ENCODING) return payload;
    const keyId = text(payload.metadata?.[KEY_ID_METADATA_KEY]);
    if (!keyId) throw new Error(`an encrypted payload has no ${KEY_ID_METADATA_KEY}`);
    const key = this.byId.get(keyId);
    if (!key) throw new Error(`a payload is encrypted with key ${keyId}, which is not among the configured keys (${[...this.byId.keys()].join(', ')})`);
    const data = payload.data ?? new Uint8Array();
    if (data.length < IV_BYTES + TAG_BYTES) throw new Error(`an encrypted payload (key ${keyId}) is too short`);
    const decipher = createDecipheriv('aes-256-gcm', key, data.subarray(0, IV_BYTES));
    decipher.setAuthTag(data.subarray(data.length - TAG_BYTES));
    let plain: Buffer;
    try {
      plain = Buffer.concat([decipher.update(data.subarray(IV_BYTES, data.length - TAG_BYTES)), decipher.final()]);
    } catch {
      throw new Error(`an encrypted payload (key ${keyId}) failed authentication: it was altered, or the key with that id is not the one that encrypted it`);
    }
    return ProtoPayload.decode(plain);
  }
}

/** The id a key gets when none is given: a short fingerprint, so that the key itself never appears anywhere. */
export function keyFingerprint(key: Buffer): string {
  return `sha256-${createHash('sha256').update(key).digest('hex').slice(0, 16)}`;
}

/**
 * Parses a key list: entries separated by newlines or commas, current key first, each `base64` or `id:base64` of
 * exactly 32 bytes; blank lines and `#` comments are ignored. Errors name the entry, never its content.
 */
export function parseKeys(source: string, where: string): EncryptionKey[] {
  const entries = source.split('\n').map((l) => l.replace(/#.*/, '')).flatMap((l) => l.split(',')).map((e) => e.trim()).filter(Boolean);
  if (entries.length === 0) throw new Error(`${where} holds no payload encryption key`);
  return entries.map((entry, i) => {
    const colon = entry.indexOf(':');
    const b64 = colon >= 0 ? entry.slice(colon + 1).trim() : entry;
    if (!/^[A-Za-z0-9+/_-]+={0,2}$/.test(b64)) throw new Error(`payload encryption key #${i + 1} in ${where} is not base64`);
    const key = Buffer.from(b64, b64.includes('-') || b64.includes('_') ? 'base64url' : 'base64');
    if (key.length !== KEY_BYTES) throw new Error(`payload encryption key #${i + 1} in ${where} is ${key.length} bytes; AES-256 needs ${KEY_BYTES} (e.g. \`openssl rand -base64 32\`)`);
    const id = colon >= 0 ? entry.slice(0, colon).trim() : keyFingerprint(key);
    if (!/^[\w.-]{1,64}$/.test(id)) throw new Error(`payload encryption key #${i + 1} in ${where} has an invalid id (letters, digits, '.', '_', '-')`);
    return { id, key };
  });
}

/** The configured keys, from a file (a mounted Secret) or the PAYLOAD_ENCRYPTION_KEY value; null when encryption is off. */
export async function loadPayloadKeys(source: { file?: string | undefined; value?: string | undefined }): Promise<EncryptionKey[] | null> {
  if (source.file && source.value) throw new Error('set either --payload-encryption-key-file or PAYLOAD_ENCRYPTION_KEY, not both');
  if (source.file) return parseKeys(await readFile(source.file, 'utf8'), source.file);
  if (source.value) return parseKeys(source.value, 'PAYLOAD_ENCRYPTION_KEY');
  return null;
}

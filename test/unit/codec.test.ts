import { defaultPayloadConverter, type Payload } from '@temporalio/common';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { AesGcmPayloadCodec, ENCRYPTED_ENCODING, KEY_ID_METADATA_KEY, keyFingerprint, loadPayloadKeys, parseKeys, type EncryptionKey } from '../../operator/codec.ts';
import { dataConverterFor } from '../../operator/temporal.ts';

const key = (id: string): EncryptionKey => ({ id, key: randomBytes(32) });
const secret = 'hunter2-db-password';
const payload = (): Payload => defaultPayloadConverter.toPayload({ user: 'app', password: secret, tags: ['a', 'b'] });
const str = (b: Uint8Array | null | undefined) => Buffer.from(b ?? []).toString('utf8');
const one = async (p: Promise<Payload[]>) => (await p)[0]!;

describe('AesGcmPayloadCodec', () => {
  test('round-trips payloads, metadata included, and leaves nothing readable in the encoded form', async () => {
    const codec = new AesGcmPayloadCodec([key('k1')]);
    const originals = [payload(), defaultPayloadConverter.toPayload(undefined), defaultPayloadConverter.toPayload(new Uint8Array([0, 1, 2])), defaultPayloadConverter.toPayload('')];
    const encoded = await codec.encode(originals);
    assert.equal(encoded.length, originals.length);
    for (const e of encoded) {
      assert.equal(str(e.metadata?.['encoding']), ENCRYPTED_ENCODING);
      assert.equal(str(e.metadata?.[KEY_ID_METADATA_KEY]), 'k1');
      assert.ok(!str(e.data).includes(secret) && !str(e.data).includes('json/plain'), 'no plaintext data or metadata');
    }
    const decoded = await codec.decode(encoded);
    assert.deepEqual(decoded.map((p) => defaultPayloadConverter.fromPayload(p)), [{ user: 'app', password: secret, tags: ['a', 'b'] }, undefined, new Uint8Array([0, 1, 2]), '']);
    assert.deepEqual(decoded.map((p) => str(p.metadata?.['encoding'])), originals.map((p) => str(p.metadata?.['encoding'])));
    assert.deepEqual(await codec.encode([]), []);
  });

  test('uses a fresh IV every time: the same payload never encrypts to the same bytes', async () => {
    const codec = new AesGcmPayloadCodec([key('k1')]);
    const [a, b] = await codec.encode([payload(), payload()]);
    assert.notDeepEqual(Buffer.from(a!.data!), Buffer.from(b!.data!));
  });

  test('passes through payloads that were never encrypted (histories from before encryption was on)', async () => {
    const codec = new AesGcmPayloadCodec([key('k1')]);
    const plain = payload();
    assert.equal(await one(codec.decode([plain])), plain);
  });

  const tampers: [string, (p: Payload) => Payload][] = [
    ['a flipped ciphertext byte', (p) => ({ ...p, data: flip(p.data!, 20) })],
    ['a flipped IV byte', (p) => ({ ...p, data: flip(p.data!, 0) })],
    ['a flipped tag byte', (p) => ({ ...p, data: flip(p.data!, p.data!.length - 1) })],
    ['a truncated body', (p) => ({ ...p, data: p.data!.subarray(0, p.data!.length - 1) })],
    ['bytes appended', (p) => ({ ...p, data: Buffer.concat([p.data!, Buffer.from([0])]) })],
  ];
  for (const [what, tamper] of tampers) {
    test(`detects ${what}`, async () => {
      const codec = new AesGcmPayloadCodec([key('k1')]);
      const encoded = await one(codec.encode([payload()]));
      await assert.rejects(codec.decode([tamper(encoded)]), /failed authentication/);
    });
  }

  test('rejects a payload too short to hold an IV and a tag', async () => {
    const codec = new AesGcmPayloadCodec([key('k1')]);
    const encoded = await one(codec.encode([payload()]));
    await assert.rejects(codec.decode([{ ...encoded, data: encoded.data!.subarray(0, 20) }]), /too short/);
  });

  test('a different key under the same id fails authentication, and an unknown id says which key is missing', async () => {
    const encoded = await one(new AesGcmPayloadCodec([key('k1')]).encode([payload()]));
    await assert.rejects(new AesGcmPayloadCodec([key('k1')]).decode([encoded]), /failed authentication/);
    await assert.rejects(new AesGcmPayloadCodec([key('k2')]).decode([encoded]), /encrypted with key k1, which is not among the configured keys \(k2\)/);
    const noId = { ...encoded, metadata: { encoding: encoded.metadata!['encoding']! } };
    await assert.rejects(new AesGcmPayloadCodec([key('k1')]).decode([noId]), /has no encryption-key-id/);
  });

  test('a relabelled key id does not make another key decrypt it', async () => {
    const k1 = key('k1');
    const k2 = key('k2');
    const encoded = await one(new AesGcmPayloadCodec([k1]).encode([payload()]));
    const relabelled = { ...encoded, metadata: { ...encoded.metadata, [KEY_ID_METADATA_KEY]: Buffer.from('k2') } };
    await assert.rejects(new AesGcmPayloadCodec([k1, k2]).decode([relabelled]), /failed authentication/);
  });

  test('rotation: encodes with the current key, decodes what older keys encrypted', async () => {
    const old = key('2025-q4');
    const current = key('2026-q1');
    const before = await one(new AesGcmPayloadCodec([old]).encode([payload()]));
    const rotated = new AesGcmPayloadCodec([current, old]);
    assert.equal(rotated.currentKeyId, '2026-q1');
    const after = await one(rotated.encode([payload()]));
    assert.equal(str(after.metadata?.[KEY_ID_METADATA_KEY]), '2026-q1');
    const decoded = await rotated.decode([before, after]);
    assert.deepEqual(decoded.map((p) => defaultPayloadConverter.fromPayload<{ password: string }>(p).password), [secret, secret]);
    // Once the old key is dropped, what it encrypted can no longer be read.
    await assert.rejects(new AesGcmPayloadCodec([current]).decode([before]), /not among the configured keys/);
  });

  test('refuses keys that are not 32 bytes, an empty key list and duplicate ids', () => {
    assert.throws(() => new AesGcmPayloadCodec([{ id: 'short', key: randomBytes(16) }]), /16 bytes; AES-256 needs 32/);
    assert.throws(() => new AesGcmPayloadCodec([]), /at least one key/);
    const k = key('same');
    assert.throws(() => new AesGcmPayloadCodec([k, { ...key('same') }]), /share an id/);
  });
});

describe('parseKeys', () => {
  const k1 = randomBytes(32);
  const k2 = randomBytes(32);
  test('one base64 key gets a fingerprint id', () => {
    assert.deepEqual(parseKeys(k1.toString('base64'), 'env'), [{ id: keyFingerprint(k1), key: k1 }]);
    assert.match(keyFingerprint(k1), /^sha256-[0-9a-f]{16}$/);
  });
  test('a file: current first, ids, comments, blank lines, base64url', () => {
    const file = `# rotated 2026-01\nnew:${k2.toString('base64url')}\n\n  old:${k1.toString('base64')}  # retire after 2026-03\n`;
    assert.deepEqual(parseKeys(file, 'keys'), [{ id: 'new', key: k2 }, { id: 'old', key: k1 }]);
  });
  test('a comma-separated list (an environment variable)', () => {
    assert.deepEqual(parseKeys(`${k2.toString('base64')},${k1.toString('base64')}`, 'env').map((k) => k.key), [k2, k1]);
  });
  const bad: [string, string, RegExp][] = [
    ['empty', ' \n# nothing\n', /holds no payload encryption key/],
    ['not base64', 'this is not a key!', /#1 in src is not base64/],
    ['16 bytes', randomBytes(16).toString('base64'), /#1 in src is 16 bytes; AES-256 needs 32/],
    ['a bad id', `bad id:${k1.toString('base64')}`, /#1 in src has an invalid id/],
  ];
  for (const [what, source, error] of bad) {
    test(`rejects ${what} without echoing it`, () => {
      assert.throws(() => parseKeys(source, 'src'), (err: Error) => error.test(err.message) && !err.message.includes(source.trim()));
    });
  }
});

describe('dataConverterFor', () => {
  test('is the default converter when no key is configured', async () => {
    assert.deepEqual(await dataConverterFor({}, {}), {});
  });
  test('reads keys from PAYLOAD_ENCRYPTION_KEY or from a file, not both', async () => {
    const k = randomBytes(32);
    const fromEnv = await dataConverterFor({}, { PAYLOAD_ENCRYPTION_KEY: k.toString('base64') });
    assert.equal((fromEnv.payloadCodecs?.[0] as AesGcmPayloadCodec).currentKeyId, keyFingerprint(k));
    const dir = await mkdtemp(join(tmpdir(), 'codec-'));
    await writeFile(join(dir, 'keys'), `cur:${k.toString('base64')}\n`);
    const fromFile = await dataConverterFor({ payloadEncryptionKeyFile: join(dir, 'keys') }, {});
    assert.equal((fromFile.payloadCodecs?.[0] as AesGcmPayloadCodec).currentKeyId, 'cur');
    await assert.rejects(dataConverterFor({ payloadEncryptionKeyFile: join(dir, 'keys') }, { PAYLOAD_ENCRYPTION_KEY: k.toString('base64') }), /not both/);
    assert.equal(await loadPayloadKeys({}), null);
  });
});

function flip(data: Uint8Array, at: number): Uint8Array {
  const copy = Buffer.from(data);
  copy[at] = copy[at]! ^ 0x01;
  return copy;
}

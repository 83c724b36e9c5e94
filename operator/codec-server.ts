// A codec server: Temporal's remote codec protocol over HTTP, so that the Temporal UI and CLI can show (and send)
// the payloads the operator encrypts. POST .../decode and .../encode take `{"payloads":[...]}` with each Payload in
// its proto3 JSON form (metadata values and data in base64) and answer the same shape, run through the operator's
// own AesGcmPayloadCodec with the same keys. Any path prefix is accepted, so the CLI's `{namespace}` templating of
// its endpoint works. A payload the keys cannot decrypt fails the request with 422 and a message: nothing is ever
// answered half-decoded, so a wrong key shows up as an error instead of as ciphertext that looks like data.
import type { Payload, PayloadCodec } from '@temporalio/common';
import proto from '@temporalio/proto';
import { Command, Option } from 'commander';
import { createHash, timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { z } from 'zod';
import { AesGcmPayloadCodec, loadPayloadKeys } from './codec.ts';
import { payloadKeyFileOption } from './config.ts';
import { createLogger, type Logger } from './log.ts';

const ProtoPayload = proto.temporal.api.common.v1.Payload;

/** The headers the Temporal UI sends to a codec server, which a browser asks about in its CORS preflight. */
export const allowedRequestHeaders = ['Content-Type', 'X-Namespace', 'Authorization'];
/** Requests larger than this are refused (Temporal's own limit is 2 MiB a payload; the UI sends a few at a time). */
const MAX_BODY_BYTES = 16 << 20;

/** How the codec server is run: `application-operator codec-server` flags, each with an environment variable. */
export interface CodecServerConfig {
  /** host:port to listen on. */
  listen: string;
  /** Browser origins (the Temporal UI's) allowed to call it; none: only non-browser clients such as the CLI. */
  corsOrigins: string[];
  /** When set, every encode and decode must carry `Authorization: Bearer <token>`. */
  authToken?: string;
  payloadEncryptionKeyFile?: string;
  logLevel: string;
}

/** Adds the codec server's options to a commander command. */
export function withCodecServerOptions(cmd: Command): Command {
  return cmd
    .addOption(new Option('--listen <host:port>', 'address to serve /encode, /decode and /healthz on').env('CODEC_LISTEN').default('127.0.0.1:8888'))
    .addOption(new Option('--cors-origin <origins>', 'comma-separated browser origins allowed to call it, e.g. the Temporal UI\'s http://localhost:8080').env('CODEC_CORS_ORIGINS').default(''))
    .addOption(new Option('--codec-auth-token <token>', 'require `Authorization: Bearer <token>` on /encode and /decode').env('CODEC_AUTH_TOKEN'))
    .addOption(payloadKeyFileOption())
    .addOption(new Option('--log-level <level>', 'trace, debug, info, warn or error').env('LOG_LEVEL').default('info'));
}

/** The parsed options of a command built with withCodecServerOptions. */
export function codecServerConfig(opts: Record<string, unknown>): CodecServerConfig {
  const str = (k: string) => (typeof opts[k] === 'string' && opts[k] !== '' ? opts[k] : undefined);
  const corsOrigins = (str('corsOrigin') ?? '').split(',').map((o) => o.trim().replace(/\/+$/, '')).filter(Boolean);
  for (const o of corsOrigins) {
    if (!/^https?:\/\/[^/\s]+$/.test(o)) throw new Error(`--cors-origin ${o}: an origin is scheme://host[:port], e.g. http://localhost:8080`);
  }
  const cfg: CodecServerConfig = { listen: str('listen') ?? '127.0.0.1:8888', corsOrigins, logLevel: str('logLevel') ?? 'info' };
  const token = str('codecAuthToken');
  if (token) cfg.authToken = token;
  const keyFile = str('payloadEncryptionKeyFile');
  if (keyFile) cfg.payloadEncryptionKeyFile = keyFile;
  return cfg;
}

const base64 = z.string().regex(/^[A-Za-z0-9+/_-]*={0,2}$/, 'is not base64');
// Fields besides metadata and data (say, a newer Payload's) are kept and handed back as they came.
const payloadsBody = z.object({ payloads: z.array(z.looseObject({ metadata: z.record(z.string(), base64).optional(), data: base64.optional() })) });

/** The payloads of a request body in proto3 JSON, or what is wrong with it (for a 400). */
export function parsePayloads(body: string): { ok: true; payloads: Payload[] } | { ok: false; message: string } {
  let json: unknown;
  try {
    json = JSON.parse(body);
  } catch (err) {
    return { ok: false, message: `the body is not JSON: ${(err as Error).message}` };
  }
  const parsed = payloadsBody.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const at = issue?.path.map((p) => (typeof p === 'number' ? `[${p}]` : `.${String(p)}`)).join('').replace(/^\./, '') || 'the body';
    return { ok: false, message: `${at} ${issue?.message ?? 'is invalid'}; expected {"payloads":[{"metadata":{"<key>":"<base64>"},"data":"<base64>"}]}` };
  }
  return {
    ok: true,
    payloads: parsed.data.payloads.map(({ metadata, data, ...rest }) => {
      const payload: Payload = ProtoPayload.fromObject(rest);
      payload.metadata = Object.fromEntries(Object.entries(metadata ?? {}).map(([k, v]) => [k, Buffer.from(v, 'base64')]));
      payload.data = Buffer.from(data ?? '', 'base64');
      return payload;
    }),
  };
}

/** The response body for payloads: proto3 JSON, bytes in standard base64. */
export function payloadsJson(payloads: Payload[]): string {
  return JSON.stringify({ payloads: payloads.map((p) => ProtoPayload.toObject(ProtoPayload.create(p), { bytes: String, longs: String })) });
}

/** CORS response headers for a request from `origin`: none unless it is one of the allowed origins. */
export function corsHeaders(origin: string | undefined, allowed: string[]): Record<string, string> {
  if (!origin || !allowed.includes(origin)) return {};
  // Credentials too: the UI's "include cross-origin credentials" setting sends cookies to a codec server behind SSO.
  return { 'Access-Control-Allow-Origin': origin, 'Access-Control-Allow-Credentials': 'true', Vary: 'Origin' };
}

/** Whether an Authorization header carries the bearer token; compares in constant time, whatever the lengths. */
export function bearerMatches(header: string | undefined, token: string): boolean {
  const m = /^Bearer\s+(.+)$/i.exec(header ?? '');
  if (!m?.[1]) return false;
  const digest = (s: string) => createHash('sha256').update(s).digest();
  return timingSafeEqual(digest(m[1].trim()), digest(token));
}

/** A running codec server. */
export interface RunningCodecServer {
  server: Server;
  /** http://host:port it serves on. */
  url: string;
  close(): Promise<void>;
}

class HttpError extends Error {
  readonly status: number;
  constructor(status: number, message: string) {
    super(message);
    this.status = status;
  }
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_BODY_BYTES) {
        // Paused, not destroyed: the 413 still has to reach the client (Connection: close ends the socket after it).
        req.pause();
        reject(new HttpError(413, `the body is larger than ${MAX_BODY_BYTES} bytes`));
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

/** Serves the codec protocol with `codec`; resolves once listening. */
export function startCodecServer(cfg: Omit<CodecServerConfig, 'payloadEncryptionKeyFile' | 'logLevel'>, codec: PayloadCodec, log: Logger = createLogger('silent')): Promise<RunningCodecServer> {
  const handle = async (req: IncomingMessage, res: ServerResponse, cors: Record<string, string>) => {
    // Not new URL(): a path such as //encode (the CLI's endpoint with an empty {namespace}) would read as a host.
    const path = (req.url ?? '/').split('?')[0] ?? '/';
    const op = /\/(encode|decode)$/.exec(path)?.[1] as 'encode' | 'decode' | undefined;
    if (req.method === 'OPTIONS') {
      // A preflight carries no credentials, so it is answered without the token; the browser sends the real request
      // only if the allow-origin header came back.
      const preflight = cors['Access-Control-Allow-Origin']
        ? { 'Access-Control-Allow-Methods': 'POST, OPTIONS', 'Access-Control-Allow-Headers': allowedRequestHeaders.join(', '), 'Access-Control-Max-Age': '600' }
        : {};
      res.writeHead(204, { ...cors, ...preflight }).end();
      return;
    }
    if (path === '/healthz' && req.method === 'GET') {
      res.writeHead(200, { 'Content-Type': 'text/plain' }).end('ok\n');
      return;
    }
    if (!op) throw new HttpError(404, `no such endpoint ${path}; the codec server answers POST .../encode and .../decode`);
    if (req.method !== 'POST') throw new HttpError(405, `${path} takes POST`);
    if (cfg.authToken && !bearerMatches(req.headers.authorization, cfg.authToken)) throw new HttpError(401, 'a valid `Authorization: Bearer <token>` is required');
    const parsed = parsePayloads(await readBody(req));
    if (!parsed.ok) throw new HttpError(400, parsed.message);
    let out: Payload[];
    try {
      out = await codec[op](parsed.payloads);
    } catch (err) {
      throw new HttpError(422, `cannot ${op}: ${(err as Error).message}`);
    }
    log.debug({ op, namespace: req.headers['x-namespace'], payloads: out.length }, `${op}d payloads`);
    res.writeHead(200, { ...cors, 'Content-Type': 'application/json' }).end(payloadsJson(out));
  };

  const server = createServer((req, res) => {
    const cors = corsHeaders(req.headers.origin, cfg.corsOrigins);
    handle(req, res, cors).catch((err: unknown) => {
      const status = err instanceof HttpError ? err.status : 500;
      const message = err instanceof Error ? err.message : String(err);
      log[status >= 500 ? 'error' : 'warn']({ status, method: req.method, url: req.url, namespace: req.headers['x-namespace'] }, message);
      if (res.headersSent) return;
      res.writeHead(status, {
        ...cors, 'Content-Type': 'application/json',
        ...(status === 401 ? { 'WWW-Authenticate': 'Bearer' } : {}), ...(status === 405 ? { Allow: 'POST, OPTIONS' } : {}),
        ...(status === 413 ? { Connection: 'close' } : {}),
      }).end(JSON.stringify({ message }));
    });
  });
  const colon = cfg.listen.lastIndexOf(':');
  const host = colon > 0 ? cfg.listen.slice(0, colon).replace(/^\[(.*)\]$/, '$1') : '127.0.0.1';
  const port = Number(cfg.listen.slice(colon + 1));
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`--listen ${cfg.listen}: expected host:port`);
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      const addr = server.address();
      const bound = typeof addr === 'object' && addr ? addr.port : port;
      resolve({
        server,
        url: `http://${host.includes(':') ? `[${host}]` : host}:${bound}`,
        close: () => new Promise<void>((r) => {
          server.closeAllConnections();
          server.close(() => r());
        }),
      });
    });
  });
}

/** Loads the keys the operator uses and serves the codec protocol with them. */
export async function runCodecServer(cfg: CodecServerConfig, env: NodeJS.ProcessEnv = process.env): Promise<RunningCodecServer> {
  const log = createLogger(cfg.logLevel, { component: 'codec-server' });
  const keys = await loadPayloadKeys({ file: cfg.payloadEncryptionKeyFile, value: env['PAYLOAD_ENCRYPTION_KEY'] });
  if (!keys) throw new Error('the codec server needs the operator\'s payload keys: --payload-encryption-key-file or PAYLOAD_ENCRYPTION_KEY');
  const codec = new AesGcmPayloadCodec(keys);
  const running = await startCodecServer(cfg, codec, log);
  log.info({ url: running.url, corsOrigins: cfg.corsOrigins, auth: cfg.authToken ? 'bearer token' : 'none', currentKeyId: codec.currentKeyId, keys: keys.length },
    `codec server on ${running.url}`);
  return running;
}

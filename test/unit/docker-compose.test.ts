// docker-compose.yml parses, and its Temporal UI is wired to its codec server: the endpoint the browser calls is the
// port the codec server publishes, the UI's origin is one the codec server allows, every setting is a variable the
// codec server reads, and it gets the operator's key.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { Command } from 'commander';
import { parse } from 'yaml';
import { withCodecServerOptions } from '../../operator/codec-server.ts';

interface Service {
  image?: string;
  build?: string;
  entrypoint?: string[];
  environment?: Record<string, string>;
  ports?: string[];
}

const compose = parse(readFileSync(new URL('../../docker-compose.yml', import.meta.url), 'utf8')) as { services: Record<string, Service> };
const { 'temporal-ui': ui, 'codec-server': codec, operator } = compose.services;
/** The host port a service publishes for a container port ("[ip:]host:container"). */
const hostPort = (s: Service, container: number) => s.ports?.map((p) => p.split(':')).find((p) => p.at(-1) === String(container))?.at(-2);

test('docker-compose.yml: the Temporal UI calls the codec server, which runs the operator\'s image with its key', () => {
  assert.ok(ui && codec && operator, `services: ${Object.keys(compose.services).join(', ')}`);
  assert.equal(codec.image, operator.image, 'the codec server is the operator\'s image');
  assert.deepEqual(codec.entrypoint?.slice(-2), ['bin/application-operator.ts', 'codec-server']);
  const env = codec.environment ?? {};
  const read = withCodecServerOptions(new Command()).options.flatMap((o) => (o.envVar ? [o.envVar] : []));
  assert.deepEqual(Object.keys(env).filter((k) => !read.includes(k) && k !== 'PAYLOAD_ENCRYPTION_KEY'), [], 'variables the codec server does not read');
  const listenPort = Number(env['CODEC_LISTEN']?.split(':').at(-1));
  const endpoint = new URL(ui.environment?.['TEMPORAL_CODEC_ENDPOINT'] ?? '');
  assert.equal(endpoint.port, hostPort(codec, listenPort), 'the UI\'s codec endpoint is the port the codec server publishes');
  const uiOrigin = `http://localhost:${hostPort(ui, 8080)}`;
  assert.ok(env['CODEC_CORS_ORIGINS']?.split(',').includes(uiOrigin), `the codec server allows the UI's origin ${uiOrigin}`);
  assert.equal(env['PAYLOAD_ENCRYPTION_KEY'], operator.environment?.['PAYLOAD_ENCRYPTION_KEY'], 'the same key as the operator');
});

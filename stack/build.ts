import { spawn } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import { access, mkdir, readFile, rename, rm, writeFile, copyFile, readdir } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { artifactPaths, cacheRoot, prometheusRelease, versions } from './versions.ts';

const kubernetesStagingModules = [
  'api', 'apiextensions-apiserver', 'apimachinery', 'apiserver', 'cli-runtime', 'client-go', 'cloud-provider',
  'cluster-bootstrap', 'code-generator', 'component-base', 'component-helpers', 'controller-manager', 'cri-api',
  'cri-client', 'csi-translation-lib', 'dynamic-resource-allocation', 'endpointslice', 'externaljwt', 'kms',
  'kube-aggregator', 'kube-controller-manager', 'kube-proxy', 'kube-scheduler', 'kubectl', 'kubelet', 'metrics',
  'mount-utils', 'pod-security-admission', 'sample-apiserver', 'sample-cli-plugin', 'sample-controller',
];

const kubernetesCommands = ['kube-apiserver', 'kube-controller-manager', 'kube-scheduler', 'kubectl'];

/** Istio kinds the operator writes or a user may reference; the rest of Istio's CRDs are not needed. */
const istioKinds = new Set(['VirtualService', 'DestinationRule', 'Gateway']);

/** The kwok stage files (from the kwok module) the local stack runs with. */
const kwokStageFiles = [
  'node/fast/node-initialize.yaml',
  'node/heartbeat/node-heartbeat.yaml',
  'pod/general/pod-create.yaml',
  'pod/general/pod-init-container-running.yaml',
  'pod/general/pod-init-container-completed.yaml',
  'pod/general/pod-ready.yaml',
  'pod/general/pod-complete.yaml',
  'pod/general/pod-delete.yaml',
];

/**
 * Components built only when asked for, by name: the data plane (`up --data-plane`), Prometheus (`metrics`: `stack
 * up` and the test runner build it; the demo builds it after its app runs) and helm (`stack build`, the test runner).
 * Without them the stack runs the control plane and Temporal, which is all the demo waits for.
 */
export const optionalGroups = ['data-plane', 'metrics', 'helm', 'tracing'] as const;
export type OptionalGroup = (typeof optionalGroups)[number];

interface Component {
  name: string;
  outputs: string[];
  /** Left out unless its group is asked for. */
  group?: OptionalGroup;
  /** How long a build from an empty cache took on a 2-core machine, for the estimate before the first build here. */
  typicalSeconds: number;
  build(log: Logger): Promise<void>;
}

type Logger = (chunk: string) => void;

/** Whether a file is there. */
export async function exists(path: string): Promise<boolean> {
  try {
    await access(path);
    return true;
  } catch {
    return false;
  }
}

function run(cmd: string, args: string[], opts: { cwd?: string; env?: Record<string, string> }, log: Logger): Promise<string> {
  log(`$ ${cmd} ${args.join(' ')}\n`);
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, {
      cwd: opts.cwd,
      env: { ...process.env, CGO_ENABLED: '0', GOFLAGS: '-trimpath', ...opts.env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    child.stdout.on('data', (d: Buffer) => {
      stdout += d.toString();
      log(d.toString());
    });
    child.stderr.on('data', (d: Buffer) => log(d.toString()));
    child.on('error', (err) => reject(new Error(`${cmd}: ${err.message}`)));
    child.on('close', (code) => {
      if (code === 0) resolve(stdout);
      else reject(new Error(`${cmd} ${args.slice(0, 2).join(' ')} exited with ${code}`));
    });
  });
}

async function moduleDir(module: string, version: string, log: Logger): Promise<string> {
  const out = await run('go', ['mod', 'download', '-json', `${module}@${version}`], { cwd: cacheRoot() }, log);
  const info = JSON.parse(out) as { Dir?: string; Error?: string };
  if (!info.Dir) throw new Error(`go mod download ${module}@${version}: ${info.Error ?? 'no Dir'}`);
  return info.Dir;
}

/**
 * The `replace` and `exclude` directives of a go.mod that a wrapper module requiring it must repeat (they apply only
 * in the main module), one per line; a replace pointing at a local path is left out, as the wrapper has no such path.
 */
export function wrapperDirectives(goMod: string): string[] {
  const out: string[] = [];
  let block: 'replace' | 'exclude' | null = null;
  for (const raw of goMod.split('\n')) {
    const line = raw.replace(/\/\/.*$/, '').trim();
    if (!line) continue;
    if (block) {
      if (line === ')') block = null;
      else out.push(`${block} ${line}`);
      continue;
    }
    const m = /^(replace|exclude)\s*(\(|.+)$/.exec(line);
    if (!m) continue;
    if (m[2] === '(') block = m[1] as 'replace' | 'exclude';
    else out.push(`${m[1]} ${m[2]!.trim()}`);
  }
  return out.filter((d) => {
    const target = d.startsWith('replace ') ? d.split('=>')[1]?.trim() ?? '' : '';
    return !/^(\.{1,2}\/|\/)/.test(target);
  });
}

/** `go install pkg@version` into a staging folder renamed to outDir once complete, so a killed build never looks cached. */
async function goInstall(pkg: string, outDir: string, ldflags: string, log: Logger): Promise<void> {
  const staging = `${outDir}.tmp`;
  await rm(staging, { recursive: true, force: true });
  await run('go', ['install', ...(ldflags ? ['-ldflags', ldflags] : []), pkg], { env: { GOBIN: staging } }, log);
  await rm(outDir, { recursive: true, force: true });
  await rename(staging, outDir);
}

function components(): Component[] {
  const root = cacheRoot();
  const paths = artifactPaths(root);
  return [
    {
      name: `temporal CLI ${versions.temporalCli} (dev server + UI)`,
      typicalSeconds: 343,
      outputs: [paths.temporal],
      async build(log) {
        await goInstall(`github.com/temporalio/cli/cmd/temporal@${versions.temporalCli}`, dirname(paths.temporal), '', log);
      },
    },
    {
      name: `etcd ${versions.etcd}`,
      typicalSeconds: 53,
      outputs: [paths.etcd],
      async build(log) {
        const src = join(root, 'src', `etcd-${versions.etcd}`);
        await mkdir(src, { recursive: true });
        await writeFile(join(src, 'go.mod'), `module local/etcd-build\n\ngo 1.25\n\nrequire go.etcd.io/etcd/server/v3 ${versions.etcd}\n`);
        await writeFile(join(src, 'tools.go'), '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n');
        await run('go', ['mod', 'tidy'], { cwd: src }, log);
        await run('go', ['build', '-o', `${paths.etcd}.tmp`, 'go.etcd.io/etcd/server/v3'], { cwd: src }, log);
        await rename(`${paths.etcd}.tmp`, paths.etcd);
      },
    },
    {
      name: `kwok ${versions.kwok} and its stages`,
      typicalSeconds: 149,
      outputs: [paths.kwok, ...kwokStageFiles.map((f) => join(paths.kwokStages, f.replaceAll('/', '_')))],
      async build(log) {
        const out = dirname(paths.kwok);
        const staging = `${out}.tmp`;
        await rm(staging, { recursive: true, force: true });
        await run('go', ['install', `sigs.k8s.io/kwok/cmd/kwok@${versions.kwok}`], { env: { GOBIN: staging } }, log);
        // v0.8.0 ships no default stages in the binary; they live in the module's kustomize folder.
        const dir = await moduleDir('sigs.k8s.io/kwok', versions.kwok, log);
        await mkdir(join(staging, 'stages'), { recursive: true });
        for (const f of kwokStageFiles) await copyFile(join(dir, 'kustomize', 'stage', f), join(staging, 'stages', f.replaceAll('/', '_')));
        await rm(out, { recursive: true, force: true });
        await rename(staging, out);
      },
    },
    {
      name: `Istio networking CRDs from istio.io/api ${versions.istioApi}`,
      typicalSeconds: 10,
      outputs: [paths.istioCrds],
      async build(log) {
        const dir = await moduleDir('istio.io/api', versions.istioApi, log);
        const all = await readFile(join(dir, 'kubernetes', 'customresourcedefinitions.gen.yaml'), 'utf8');
        const docs = parseAllDocuments(all).filter((d) => istioKinds.has(String(d.getIn(['spec', 'names', 'kind']))));
        if (docs.length !== istioKinds.size) throw new Error(`expected ${istioKinds.size} Istio CRDs, found ${docs.length}`);
        await mkdir(dirname(paths.istioCrds), { recursive: true });
        await writeFile(paths.istioCrds, docs.map((d) => d.toString()).join('---\n'));
      },
    },
    {
      name: `kubernetes ${versions.kubernetes} (kube-apiserver, kube-controller-manager, kube-scheduler, kubectl)`,
      typicalSeconds: 480,
      outputs: [paths.kubeApiserver, paths.kubeControllerManager, paths.kubeScheduler, paths.kubectl],
      async build(log) {
        const src = join(root, 'src', `kubernetes-${versions.kubernetes}`);
        await mkdir(src, { recursive: true });
        const replaces = kubernetesStagingModules.map((m) => `\tk8s.io/${m} => k8s.io/${m} ${versions.kubernetesStaging}`).join('\n');
        await writeFile(join(src, 'go.mod'), [
          'module local/kubernetes-build', '', 'go 1.25', '',
          // k/k's own go.mod pins this; without it the binaries change behaviour under newer Go defaults.
          'godebug default=go1.25', '',
          `require k8s.io/kubernetes ${versions.kubernetes}`, '',
          `replace (\n${replaces}\n)`, '',
        ].join('\n'));
        await writeFile(join(src, 'tools.go'), `//go:build tools\n\npackage tools\n\nimport (\n${kubernetesCommands.map((c) => `\t_ "k8s.io/kubernetes/cmd/${c}"`).join('\n')}\n)\n`);
        await run('go', ['mod', 'tidy'], { cwd: src }, log);
        const [major, minor] = versions.kubernetes.slice(1).split('.');
        const ldflags = [
          `-X k8s.io/component-base/version.gitVersion=${versions.kubernetes}`,
          `-X k8s.io/component-base/version.gitMajor=${major}`,
          `-X k8s.io/component-base/version.gitMinor=${minor}`,
          '-s -w',
        ].join(' ');
        const out = dirname(paths.kubeApiserver);
        const staging = `${out}.tmp`;
        await rm(staging, { recursive: true, force: true });
        await mkdir(staging, { recursive: true });
        await run('go', ['build', '-ldflags', ldflags, '-o', `${staging}/`, ...kubernetesCommands.map((c) => `k8s.io/kubernetes/cmd/${c}`)], { cwd: src }, log);
        await rm(out, { recursive: true, force: true });
        await rename(staging, out);
      },
    },
    {
      name: `prometheus ${versions.prometheus} (Prometheus ${prometheusRelease()})`,
      typicalSeconds: 494,
      group: 'metrics',
      outputs: [paths.prometheus],
      async build(log) {
        // A module build has no release ldflags; without this the binary and /api/v1/status/buildinfo report no version.
        const ldflags = `-s -w -X github.com/prometheus/common/version.Version=${prometheusRelease()}`;
        await goInstall(`github.com/prometheus/prometheus/cmd/prometheus@${versions.prometheus}`, dirname(paths.prometheus), ldflags, log);
      },
    },
    {
      name: `helm ${versions.helm}`,
      typicalSeconds: 131,
      group: 'helm',
      outputs: [paths.helm],
      async build(log) {
        // Helm's source says only "v4.3"; its release build sets the full version the same way.
        const ldflags = `-s -w -X helm.sh/helm/v4/internal/version.version=${versions.helm}`;
        await goInstall(`helm.sh/helm/v4/cmd/helm@${versions.helm}`, dirname(paths.helm), ldflags, log);
      },
    },
    {
      name: `traefik ${versions.traefik} (the data plane's proxy, Kubernetes Gateway provider)`,
      typicalSeconds: 780,
      outputs: [paths.traefik],
      group: 'data-plane',
      async build(log) {
        // `go install` refuses a module with replace directives, hence a wrapper module repeating them.
        const src = join(root, 'src', `traefik-${versions.traefik}`);
        await rm(src, { recursive: true, force: true });
        await mkdir(src, { recursive: true });
        const module = 'github.com/traefik/traefik/v3';
        const dir = await moduleDir(module, versions.traefik, log);
        const goMod = await readFile(join(dir, 'go.mod'), 'utf8');
        const goLine = /^go .+$/m.exec(goMod)?.[0] ?? 'go 1.25';
        await writeFile(join(src, 'go.mod'), ['module local/traefik-build', '', goLine, '', ...wrapperDirectives(goMod), ''].join('\n'));
        await run('go', ['get', `${module}/cmd/traefik@${versions.traefik}`], { cwd: src }, log);
        const ldflags = `-s -w -X ${module}/pkg/version.Version=${versions.traefik}`;
        const out = dirname(paths.traefik);
        const staging = `${out}.tmp`;
        await rm(staging, { recursive: true, force: true });
        await mkdir(staging, { recursive: true });
        await run('go', ['build', '-ldflags', ldflags, '-o', join(staging, 'traefik'), `${module}/cmd/traefik`], { cwd: src }, log);
        await rm(out, { recursive: true, force: true });
        await rename(staging, out);
      },
    },
    {
      name: `traefik-crds ${versions.traefik} (Traefik's CRDs: TraefikService and the rest of traefik.io)`,
      typicalSeconds: 10,
      outputs: [paths.traefikCrds],
      group: 'data-plane',
      async build(log) {
        const dir = await moduleDir('github.com/traefik/traefik/v3', versions.traefik, log);
        const file = join(dir, 'docs', 'content', 'reference', 'dynamic-configuration', 'kubernetes-crd-definition-v1.yml');
        const docs = parseAllDocuments(await readFile(file, 'utf8')).filter((d) => d.contents !== null);
        if (!docs.some((d) => d.getIn(['spec', 'names', 'kind']) === 'TraefikService')) throw new Error(`${file} holds no TraefikService CRD`);
        await mkdir(dirname(paths.traefikCrds), { recursive: true });
        await writeFile(`${paths.traefikCrds}.tmp`, docs.map((d) => d.toString()).join('---\n'));
        await rename(`${paths.traefikCrds}.tmp`, paths.traefikCrds);
      },
    },
    {
      name: `jaeger ${versions.jaeger} (the trace backend: OTLP in, traces in memory, the query API)`,
      outputs: [paths.jaeger],
      typicalSeconds: 300,
      group: 'tracing',
      async build(log) {
        // Jaeger is a program in a module of many: a wrapper module takes it as a tool (go get -tool), then builds it.
        const src = join(root, 'src', `jaeger-${versions.jaeger}`);
        await rm(src, { recursive: true, force: true });
        await mkdir(src, { recursive: true });
        await writeFile(join(src, 'go.mod'), 'module local/jaeger-build\n\ngo 1.25\n');
        const pkg = 'github.com/jaegertracing/jaeger/cmd/jaeger';
        await run('go', ['get', '-tool', `${pkg}@${versions.jaeger}`], { cwd: src }, log);
        const out = dirname(paths.jaeger);
        const staging = `${out}.tmp`;
        await rm(staging, { recursive: true, force: true });
        await mkdir(staging, { recursive: true });
        await run('go', ['build', '-ldflags', '-s -w', '-o', join(staging, 'jaeger'), pkg], { cwd: src }, log);
        await rm(out, { recursive: true, force: true });
        await rename(staging, out);
      },
    },
    {
      name: `Gateway API standard-channel CRDs from sigs.k8s.io/gateway-api ${versions.gatewayApi}`,
      typicalSeconds: 10,
      outputs: [paths.gatewayApiCrds],
      group: 'data-plane',
      async build(log) {
        const dir = join(await moduleDir('sigs.k8s.io/gateway-api', versions.gatewayApi, log), 'config', 'crd', 'standard');
        const files = (await readdir(dir)).filter((f) => f.endsWith('.yaml')).sort();
        const docs = [];
        for (const f of files) docs.push(...parseAllDocuments(await readFile(join(dir, f), 'utf8')).filter((d) => d.contents !== null));
        const kinds = new Set(docs.map((d) => String(d.getIn(['spec', 'names', 'kind']))));
        for (const kind of ['GatewayClass', 'Gateway', 'HTTPRoute']) if (!kinds.has(kind)) throw new Error(`${dir} holds no ${kind} CRD`);
        await mkdir(dirname(paths.gatewayApiCrds), { recursive: true });
        await writeFile(`${paths.gatewayApiCrds}.tmp`, docs.map((d) => d.toString()).join('---\n'));
        await rename(`${paths.gatewayApiCrds}.tmp`, paths.gatewayApiCrds);
      },
    },
  ];
}

/** The components a build or a start needs: every one outside a group, and those of the groups asked for. */
function wanted(groups: readonly OptionalGroup[] = []): Component[] {
  return components().filter((c) => !c.group || groups.includes(c.group));
}

/** Each component's last build time here (seconds, by the first word of its name), for the next estimate. */
const buildTimesFile = (root: string) => join(root, 'logs', 'build-times.json');

async function readBuildTimes(root: string): Promise<Record<string, number>> {
  return JSON.parse(await readFile(buildTimesFile(root), 'utf8').catch(() => '{}')) as Record<string, number>;
}

const keyOf = (c: Component) => c.name.split(' ')[0]!.toLowerCase();
const minutes = (seconds: number) => (seconds < 90 ? `${Math.round(seconds)} s` : `${Math.round(seconds / 60)} min`);

/**
 * Builds every missing stack component into the cache, two at a time (a Go build leaves a core idle while it
 * downloads modules and links), printing each with an estimate from its last build here (else from a typical
 * 2-core machine) and its time; throws naming the first that failed once the others in flight are done.
 */
export async function buildAll(opts: { force?: boolean; with?: readonly OptionalGroup[]; print?: (line: string) => void; concurrency?: number } = {}): Promise<void> {
  const print = opts.print ?? ((line: string) => console.log(line));
  const root = cacheRoot();
  await mkdir(join(root, 'logs'), { recursive: true });
  const started = Date.now();
  const times = await readBuildTimes(root);
  const todo: Component[] = [];
  for (const c of wanted(opts.with)) {
    const present = (await Promise.all(c.outputs.map(exists))).every(Boolean);
    if (present && !opts.force) print(`  cached   ${c.name}`);
    else todo.push(c);
  }
  const estimate = (c: Component) => times[keyOf(c)] ?? c.typicalSeconds;
  const lanes = Math.max(1, opts.concurrency ?? 2);
  // Two lanes end no sooner than the longest build in them.
  const total = Math.max(todo.reduce((n, c) => n + estimate(c), 0) / lanes, ...todo.map(estimate));
  if (todo.length) print(`  ${todo.length} to build, about ${minutes(total)}${lanes > 1 && todo.length > 1 ? ` ${lanes} at a time` : ''} (estimates from earlier builds here, else a typical 2-core machine)`);
  // The longest first, so the two lanes end together.
  const queue = [...todo].sort((a, b) => estimate(b) - estimate(a));
  const failures: Error[] = [];
  const lane = async () => {
    for (let c = queue.shift(); c && failures.length === 0; c = queue.shift()) {
      const logFile = join(root, 'logs', `build-${keyOf(c)}.log`);
      const stream = createWriteStream(logFile);
      print(`  building ${c.name} (about ${minutes(estimate(c))}; log: ${logFile})`);
      const t0 = Date.now();
      try {
        await c.build((chunk) => stream.write(chunk));
      } catch (err) {
        stream.end();
        const tail = (await readFile(logFile, 'utf8').catch(() => '')).split('\n').slice(-25).join('\n');
        failures.push(new Error(`building ${c.name} failed: ${(err as Error).message}\n--- last lines of ${logFile} ---\n${tail}`, { cause: err }));
        return;
      }
      stream.end();
      const seconds = (Date.now() - t0) / 1000;
      times[keyOf(c)] = Math.round(seconds);
      await writeFile(buildTimesFile(root), JSON.stringify(times, null, 2));
      print(`  built    ${c.name} in ${seconds.toFixed(0)} s`);
    }
  };
  await Promise.all(Array.from({ length: lanes }, lane));
  if (failures[0]) throw failures[0];
  print(`stack build done in ${((Date.now() - started) / 1000).toFixed(0)} s; cache: ${root}`);
}

/** Throws with the command to run when some artifact is missing. */
export async function assertBuilt(groups: readonly OptionalGroup[] = []): Promise<void> {
  const missing: string[] = [];
  for (const c of wanted(groups)) {
    for (const o of c.outputs) if (!(await exists(o))) missing.push(o);
  }
  const flags = groups.map((g) => ` --with ${g}`).join('');
  if (missing.length) throw new Error(`local stack is not built (missing ${missing.join(', ')}); run: npm run stack -- build${flags}`);
}

/** Lists the files of the kwok stage folder. */
export async function kwokStageFilesIn(dir: string): Promise<string[]> {
  return (await readdir(dir)).filter((f) => f.endsWith('.yaml')).map((f) => join(dir, f));
}

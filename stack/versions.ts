import { homedir } from 'node:os';
import { join } from 'node:path';

/** Pinned versions of every server the local stack builds from its Go module. */
export const versions = {
  temporalCli: 'v1.5.1',
  etcd: 'v3.6.16',
  kubernetes: 'v1.35.4',
  kubernetesStaging: 'v0.35.4',
  kwok: 'v0.8.0',
  istioApi: 'v1.32.0',
  // Prometheus 3.x is published as Go module versions v0.3xx.y: v0.316.0 is Prometheus 3.16.0.
  prometheus: 'v0.316.0',
  helm: 'v4.3.1',
  // The data plane (built only when asked: `stack build --with data-plane`, `up --data-plane`, and `npm test`).
  traefik: 'v3.6.12',
  // v1.7.0 needs Go >= 1.27; v1.6.3 is the newest that builds with the Go this project requires (1.26).
  gatewayApi: 'v1.6.3',
  // The trace backend (built only when asked: `stack build --with tracing`, `up --tracing`, and `npm test`):
  // Jaeger v2, published as Go module versions v1.x (v1.76.0).
  jaeger: 'v1.76.0',
} as const;

/** Where built binaries are cached, outside the repo, keyed by version. */
export function cacheRoot(): string {
  const base = process.env['APPLICATION_OPERATOR_CACHE'] ?? join(process.env['XDG_CACHE_HOME'] ?? join(homedir(), '.cache'), 'application-operator');
  return base;
}

/** Paths of the cached artifacts for the pinned versions. */
export function artifactPaths(root = cacheRoot()) {
  const k8s = join(root, `kubernetes-${versions.kubernetes}`);
  return {
    temporal: join(root, `temporal-cli-${versions.temporalCli}`, 'temporal'),
    etcd: join(root, `etcd-${versions.etcd}`, 'etcd'),
    kubeApiserver: join(k8s, 'kube-apiserver'),
    kubeControllerManager: join(k8s, 'kube-controller-manager'),
    kubeScheduler: join(k8s, 'kube-scheduler'),
    kubectl: join(k8s, 'kubectl'),
    kwok: join(root, `kwok-${versions.kwok}`, 'kwok'),
    kwokStages: join(root, `kwok-${versions.kwok}`, 'stages'),
    istioCrds: join(root, `istio-api-${versions.istioApi}`, 'networking-crds.yaml'),
    prometheus: join(root, `prometheus-${versions.prometheus}`, 'prometheus'),
    helm: join(root, `helm-${versions.helm}`, 'helm'),
    traefik: join(root, `traefik-${versions.traefik}`, 'traefik'),
    traefikCrds: join(root, `traefik-crds-${versions.traefik}`, 'crds.yaml'),
    gatewayApiCrds: join(root, `gateway-api-${versions.gatewayApi}`, 'standard-crds.yaml'),
    jaeger: join(root, `jaeger-${versions.jaeger}`, 'jaeger'),
  };
}

export type ArtifactPaths = ReturnType<typeof artifactPaths>;

/** The Prometheus release the pinned module version stands for (v0.316.0 is 3.16.0), as Prometheus reports it. */
export function prometheusRelease(): string {
  const m = /^v0\.(\d+)(\d\d)\.(\d+)$/.exec(versions.prometheus);
  if (!m) throw new Error(`unexpected Prometheus module version ${versions.prometheus}; expected v0.3xx.y`);
  return `${m[1]}.${Number(m[2])}.${m[3]}`;
}

// Member clusters of a fleet Release: each is registered with a Secret in the operator's namespace, labelled
// myapp.example.com/cluster=<name>, holding a kubeconfig (and the Temporal namespace its own operator runs in). This
// reads them into clients, and probes their health onto the Secret (a label and annotations kubectl shows).
// docs/architecture.md ("Fleet releases") tells why the hub reaches members this way.
import {
  CLUSTER_HEALTH_LABEL, CLUSTER_KUBECONFIG_KEY, CLUSTER_LABEL, CLUSTER_MESSAGE_ANNOTATION, CLUSTER_SINCE_ANNOTATION, CLUSTER_TEMPORAL_NAMESPACE_KEY,
  CLUSTER_VERSION_ANNOTATION, ClusterHealth, GROUP, KIND, RELEASE_PLURAL,
} from '../api/constants.ts';
import { Kube, KubeError, type KubeObject } from './client.ts';
import { kubeconfigFromText } from './config.ts';

/** A registered member cluster, ready to be talked to. */
export interface MemberCluster {
  name: string;
  kube: Kube;
  server: string;
  /** The Temporal namespace of the member's own operator, where its canaries' workflows run. */
  temporalNamespace?: string;
  /** The Secret it was read from, `namespace/name`. */
  secret: string;
}

/** No Secret registers a cluster of this name (or the one that does is unusable). */
export class ClusterNotRegistered extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ClusterNotRegistered';
  }
}

type Secret = KubeObject & {
  metadata: KubeObject['metadata'] & { labels?: Record<string, string>; annotations?: Record<string, string> };
  data?: Record<string, string>;
};

const secrets = (namespace: string) => ({ apiVersion: 'v1', kind: 'Secret', namespace });
const decode = (data: Record<string, string> | undefined, key: string): string | undefined => (data?.[key] ? Buffer.from(data[key], 'base64').toString('utf8') : undefined);

/** Reads member clusters from their Secrets, keeping one client per Secret version (its connection pool is reused). */
export class MemberClusters {
  readonly namespace: string;
  private readonly hub: Kube;
  private readonly clients = new Map<string, { version: string; cluster: MemberCluster }>();

  constructor(hub: Kube, namespace: string) {
    this.hub = hub;
    this.namespace = namespace;
  }

  /** The registration Secrets, by cluster name (the first by name wins when two claim one). */
  async secrets(): Promise<Map<string, Secret>> {
    const list = await this.hub.list<Secret>(secrets(this.namespace), CLUSTER_LABEL);
    const out = new Map<string, Secret>();
    for (const s of [...list.items].sort((a, b) => a.metadata.name.localeCompare(b.metadata.name))) {
      const name = s.metadata.labels?.[CLUSTER_LABEL];
      if (name && !out.has(name)) out.set(name, s);
    }
    return out;
  }

  /** The member cluster `name`; throws ClusterNotRegistered saying what is missing. */
  async get(name: string): Promise<MemberCluster> {
    const list = await this.hub.list<Secret>(secrets(this.namespace), `${CLUSTER_LABEL}=${name}`);
    const secret = [...list.items].sort((a, b) => a.metadata.name.localeCompare(b.metadata.name))[0];
    if (!secret) throw new ClusterNotRegistered(`cluster ${name} is not registered: no Secret labelled ${CLUSTER_LABEL}=${name} in namespace ${this.namespace}`);
    return this.fromSecret(name, secret);
  }

  /** A client for the cluster a Secret registers (the same one while the Secret does not change). */
  fromSecret(name: string, secret: Secret): MemberCluster {
    const version = `${secret.metadata.uid ?? ''}/${secret.metadata.resourceVersion ?? ''}`;
    const cached = this.clients.get(name);
    if (cached?.version === version) return cached.cluster;
    const where = `${this.namespace}/${secret.metadata.name}`;
    const text = decode(secret.data, CLUSTER_KUBECONFIG_KEY);
    if (!text) throw new ClusterNotRegistered(`cluster ${name}: Secret ${where} has no ${CLUSTER_KUBECONFIG_KEY} key`);
    let kube: Kube;
    let server: string;
    try {
      const kc = kubeconfigFromText(text, `the kubeconfig of Secret ${where}`);
      server = kc.getCurrentCluster()?.server ?? '?';
      kube = new Kube(kc);
    } catch (err) {
      throw new ClusterNotRegistered(`cluster ${name}: ${err instanceof Error ? err.message : String(err)}`);
    }
    const temporalNamespace = decode(secret.data, CLUSTER_TEMPORAL_NAMESPACE_KEY)?.trim();
    const cluster: MemberCluster = { name, kube, server, secret: where, ...(temporalNamespace ? { temporalNamespace } : {}) };
    this.clients.set(name, { version, cluster });
    return cluster;
  }
}

/** What a probe found of one member. */
export interface ClusterProbe {
  health: ClusterHealth;
  version?: string;
  message: string;
}

/** Probes one member: reachable (its /version), and serving the Application and Release kinds. */
export async function probeCluster(clusters: MemberClusters, name: string, secret: Secret): Promise<ClusterProbe> {
  let member: MemberCluster;
  try {
    member = clusters.fromSecret(name, secret);
  } catch (err) {
    return { health: ClusterHealth.InvalidKubeconfig, message: err instanceof Error ? err.message : String(err) };
  }
  try {
    const v = await member.kube.request<{ gitVersion?: string }>('GET', '/version');
    const version = v?.gitVersion ?? 'unknown';
    const [apps, releases] = await Promise.all([member.kube.serves(`${GROUP}/v1`, `${KIND.toLowerCase()}s`), member.kube.serves(`${GROUP}/v1`, RELEASE_PLURAL)]);
    if (!apps || !releases) {
      return { health: ClusterHealth.MissingCRDs, version, message: `${member.server} serves no ${[apps ? '' : 'applications', releases ? '' : 'releases'].filter(Boolean).join(' and ')}.${GROUP}: install the operator's CRDs there` };
    }
    return { health: ClusterHealth.Ready, version, message: `${member.server} answers (Kubernetes ${version})` };
  } catch (err) {
    const why = err instanceof KubeError ? `${err.status} ${err.message}` : err instanceof Error ? err.message : String(err);
    return { health: ClusterHealth.Unreachable, message: `${member.server}: ${why}` };
  }
}

/**
 * Probes every registered member and writes what changed onto its Secret: the health label, the version, the message
 * and since when. A steady fleet costs reads only. Returns each member's probe.
 */
export async function probeClusters(clusters: MemberClusters, hub: Kube, now: () => Date = () => new Date()): Promise<Map<string, ClusterProbe>> {
  const found = await clusters.secrets();
  const out = new Map<string, ClusterProbe>();
  await Promise.all([...found].map(async ([name, secret]) => {
    const probe = await probeCluster(clusters, name, secret);
    out.set(name, probe);
    const labels = secret.metadata.labels ?? {};
    const annotations = secret.metadata.annotations ?? {};
    const healthChanged = labels[CLUSTER_HEALTH_LABEL] !== probe.health;
    if (!healthChanged && annotations[CLUSTER_MESSAGE_ANNOTATION] === probe.message && (probe.version === undefined || annotations[CLUSTER_VERSION_ANNOTATION] === probe.version)) return;
    await hub.mergePatch({ apiVersion: 'v1', kind: 'Secret', namespace: clusters.namespace, name: secret.metadata.name }, {
      metadata: {
        labels: { [CLUSTER_HEALTH_LABEL]: probe.health },
        annotations: {
          [CLUSTER_MESSAGE_ANNOTATION]: probe.message,
          ...(probe.version ? { [CLUSTER_VERSION_ANNOTATION]: probe.version } : {}),
          ...(healthChanged ? { [CLUSTER_SINCE_ANNOTATION]: now().toISOString() } : {}),
        },
      },
    }).catch((err: unknown) => {
      // Deleted meanwhile: nothing to say.
      if (!(err instanceof KubeError && err.status === 404)) throw err;
    });
  }));
  return out;
}

// The operator as the chart deploys it: a ServiceAccount bound to roles, and a kubeconfig that authenticates as it,
// so a test can run the operator with exactly the permissions it gives (deploy/clusterrole.yaml, or fewer).
import { readFileSync } from 'node:fs';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parse } from 'yaml';
import { kubeApi } from './apps.ts';
import { testEnv } from './env.ts';

export interface Rule {
  apiGroups: string[];
  resources: string[];
  verbs: string[];
  resourceNames?: string[];
}

/** The rules of a role in deploy/ (`clusterrole.yaml`, `leader-election-role.yaml`). */
export const readRules = (file: string): Rule[] => (parse(readFileSync(new URL(`../deploy/${file}`, import.meta.url), 'utf8')) as { rules: Rule[] }).rules;

export const SA = 'application-operator';

export const rbacPath = (plural: string, name?: string, namespace?: string) => `/apis/rbac.authorization.k8s.io/v1/${namespace ? `namespaces/${namespace}/` : ''}${plural}${name ? `/${name}` : ''}`;

const admin = () => kubeApi();

/** A kubeconfig that authenticates with a bound ServiceAccount token (TokenRequest), trusting the stack's CA. */
export async function serviceAccountKubeconfig(ns: string): Promise<string> {
  const env = await testEnv();
  const cluster = env.kc.getCurrentCluster();
  if (!cluster) throw new Error('admin kubeconfig has no cluster');
  const ca = cluster.caData ?? (cluster.caFile ? readFileSync(cluster.caFile).toString('base64') : undefined);
  // TokenRequest, as `kubectl create token` does: a bound token, valid for an hour.
  const review = await (await admin()).request<{ status: { token: string } }>('POST', `/api/v1/namespaces/${ns}/serviceaccounts/${SA}/token`, {
    body: { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenRequest', spec: { expirationSeconds: 3600 } },
  });
  const token = review!.status.token;
  const file = join(await mkdtemp(join(tmpdir(), 'rbac-')), 'kubeconfig');
  await writeFile(file, JSON.stringify({
    apiVersion: 'v1', kind: 'Config', 'current-context': 'sa',
    clusters: [{ name: 'stack', cluster: { server: cluster.server, ...(ca ? { 'certificate-authority-data': ca } : {}) } }],
    users: [{ name: SA, user: { token } }],
    contexts: [{ name: 'sa', context: { cluster: 'stack', user: SA, namespace: ns } }],
  }), { mode: 0o600 });
  return file;
}

/** Creates the run's ServiceAccount, the ClusterRole under a name of its own, and the leader-election Role in the run's namespace, with their bindings. */
export async function createRbac(ns: string, roleName: string, cluster: Rule[], leader: Rule[]): Promise<void> {
  const api = await admin();
  const subjects = [{ kind: 'ServiceAccount', name: SA, namespace: ns }];
  const rbac = 'rbac.authorization.k8s.io/v1';
  const leaderRole = 'application-operator-leader-election';
  await api.request('POST', `/api/v1/namespaces/${ns}/serviceaccounts`, { body: { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: SA, namespace: ns } } });
  await api.request('POST', rbacPath('clusterroles'), { body: { apiVersion: rbac, kind: 'ClusterRole', metadata: { name: roleName }, rules: cluster } });
  await api.request('POST', rbacPath('clusterrolebindings'), { body: { apiVersion: rbac, kind: 'ClusterRoleBinding', metadata: { name: roleName }, roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: roleName }, subjects } });
  await api.request('POST', rbacPath('roles', undefined, ns), { body: { apiVersion: rbac, kind: 'Role', metadata: { name: leaderRole, namespace: ns }, rules: leader } });
  await api.request('POST', rbacPath('rolebindings', undefined, ns), { body: { apiVersion: rbac, kind: 'RoleBinding', metadata: { name: leaderRole, namespace: ns }, roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: leaderRole }, subjects } });
}


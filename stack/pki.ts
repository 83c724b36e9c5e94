import { execFile } from 'node:child_process';
import { access, mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';

const exec = promisify(execFile);

/** Files of the local control plane's throwaway PKI. */
export interface Pki {
  caCert: string;
  caKey: string;
  servingCert: string;
  servingKey: string;
  adminCert: string;
  adminKey: string;
  serviceAccountKey: string;
  serviceAccountPub: string;
}

async function openssl(args: string[], cwd: string): Promise<void> {
  try {
    await exec('openssl', args, { cwd });
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Error(`openssl ${args[0]} failed: ${e.stderr ?? e.message}`, { cause: err });
  }
}

/** Creates (once) a CA, the API server's serving cert, an admin client cert (system:masters) and the service-account key pair. */
export async function ensurePki(dir: string): Promise<Pki> {
  await mkdir(dir, { recursive: true });
  const p = (f: string) => join(dir, f);
  const pki: Pki = {
    caCert: p('ca.crt'), caKey: p('ca.key'),
    servingCert: p('apiserver.crt'), servingKey: p('apiserver.key'),
    adminCert: p('admin.crt'), adminKey: p('admin.key'),
    serviceAccountKey: p('sa.key'), serviceAccountPub: p('sa.pub'),
  };
  const done = await access(pki.serviceAccountPub).then(() => true, () => false);
  if (done) return pki;

  const ec = ['genpkey', '-algorithm', 'EC', '-pkeyopt', 'ec_paramgen_curve:P-256', '-out'];
  await openssl([...ec, pki.caKey], dir);
  await openssl(['req', '-x509', '-new', '-key', pki.caKey, '-subj', '/CN=application-operator-local-ca', '-days', '3650', '-out', pki.caCert], dir);

  const leaf = async (key: string, cert: string, subj: string, ext: string) => {
    await openssl([...ec, key], dir);
    const csr = `${cert}.csr`;
    const extFile = `${cert}.ext`;
    await writeFile(extFile, ext);
    await openssl(['req', '-new', '-key', key, '-subj', subj, '-out', csr], dir);
    await openssl(['x509', '-req', '-in', csr, '-CA', pki.caCert, '-CAkey', pki.caKey, '-CAcreateserial', '-days', '3650', '-extfile', extFile, '-out', cert], dir);
  };
  await leaf(pki.servingKey, pki.servingCert, '/CN=kube-apiserver',
    'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:10.0.0.1\nextendedKeyUsage=serverAuth\nkeyUsage=digitalSignature,keyEncipherment\n');
  await leaf(pki.adminKey, pki.adminCert, '/O=system:masters/CN=admin',
    'extendedKeyUsage=clientAuth\nkeyUsage=digitalSignature,keyEncipherment\n');
  await openssl(['genpkey', '-algorithm', 'RSA', '-pkeyopt', 'rsa_keygen_bits:2048', '-out', pki.serviceAccountKey], dir);
  await openssl(['pkey', '-in', pki.serviceAccountKey, '-pubout', '-out', pki.serviceAccountPub], dir);
  return pki;
}

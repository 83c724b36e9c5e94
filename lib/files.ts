import { randomUUID } from 'node:crypto';
import { rename, writeFile } from 'node:fs/promises';

/**
 * Writes a file aside and renames it into place, so a process reading it meanwhile (a server reloading its
 * configuration, a test polling for the file) never sees it empty or half written.
 */
export async function writeWhole(path: string, content: string | Uint8Array): Promise<void> {
  // Named for this process and this call, so two writers of one file never share an aside file.
  const tmp = `${path}.${process.pid}.${randomUUID()}.tmp`;
  await writeFile(tmp, content);
  await rename(tmp, path);
}

// Finding the hpcdap adapter binary: the hpcdap.path setting, else the binary bundled with the
// extension (bin/hpcdap), else hpcdap on PATH.

import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';

/** Where the adapter was found, or why it was not. */
export type AdapterLocation = { path: string; source: 'setting' | 'bundled' | 'PATH' } | { error: string };

/** Whether p is a regular file this process may execute. */
export function isExecutable(p: string): boolean {
  try {
    const st = fs.statSync(p);
    if (!st.isFile()) {
      return false;
    }
    fs.accessSync(p, fs.constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** Looks a command name up in a PATH value, as a shell would. */
export function lookPath(name: string, pathEnv: string | undefined): string | undefined {
  for (const dir of (pathEnv ?? '').split(path.delimiter)) {
    if (dir === '') {
      continue;
    }
    const p = path.join(dir, name);
    if (isExecutable(p)) {
      return p;
    }
  }
  return undefined;
}

/**
 * Resolves the adapter binary. setting is hpcdap.path ("" when unset): a path (absolute, "~/…",
 * or relative to baseDir) or a bare command name looked up in PATH. extensionDir is where the
 * extension is installed.
 */
export function resolveAdapterPath(
  setting: string | undefined,
  extensionDir: string,
  pathEnv: string | undefined,
  baseDir?: string,
): AdapterLocation {
  const s = (setting ?? '').trim();
  if (s !== '') {
    if (!s.includes('/')) {
      const found = lookPath(s, pathEnv);
      return found ? { path: found, source: 'setting' } : { error: `hpcdap.path: ${JSON.stringify(s)} is not a command on PATH` };
    }
    let p = s.startsWith('~/') ? path.join(os.homedir(), s.slice(2)) : s;
    if (!path.isAbsolute(p)) {
      p = path.resolve(baseDir ?? process.cwd(), p);
    }
    if (!fs.existsSync(p)) {
      return { error: `hpcdap.path: ${p} does not exist` };
    }
    if (!isExecutable(p)) {
      return { error: `hpcdap.path: ${p} is not an executable file` };
    }
    return { path: p, source: 'setting' };
  }
  const bundled = path.join(extensionDir, 'bin', 'hpcdap');
  if (isExecutable(bundled)) {
    return { path: bundled, source: 'bundled' };
  }
  const found = lookPath('hpcdap', pathEnv);
  if (found) {
    return { path: found, source: 'PATH' };
  }
  return {
    error:
      'hpcdap: the adapter binary was not found (no bin/hpcdap in the extension and no hpcdap on PATH). ' +
      'Set "hpcdap.path" to the hpcdap binary, or "hpcdap.server" to the host:port of a running "hpcdap serve".',
  };
}

// Locations the tests need: the extension's directory, the repository around it, and the Go
// toolchain.

import * as fs from 'fs';
import * as path from 'path';
import { isExecutable, lookPath } from '../../src/core/adapterPath';

/** The extension's directory (the one holding its package.json). */
export const extensionDir: string = (() => {
  for (let d = __dirname; d !== path.dirname(d); d = path.dirname(d)) {
    const p = path.join(d, 'package.json');
    if (fs.existsSync(p) && JSON.parse(fs.readFileSync(p, 'utf8')).name === 'hpcdap') {
      return d;
    }
  }
  throw new Error(`no hpcdap package.json above ${__dirname}`);
})();

/** The hpcdap repository: the extension's parent directory, which holds go.mod. */
export const repoRoot: string = path.dirname(extensionDir);

/** The extension's package.json. */
export function packageJson(): any {
  return JSON.parse(fs.readFileSync(path.join(extensionDir, 'package.json'), 'utf8'));
}

/** The go command: on PATH, or the standard install in /usr/local/go. */
export function goBinary(): string {
  const found = lookPath('go', process.env.PATH) ?? (isExecutable('/usr/local/go/bin/go') ? '/usr/local/go/bin/go' : undefined);
  if (!found) {
    throw new Error('the go toolchain is needed (not on PATH, not in /usr/local/go/bin): install Go 1.26');
  }
  return found;
}

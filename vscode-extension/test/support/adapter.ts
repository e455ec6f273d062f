// Finding the hpcdap adapter for the tests that need a running "hpcdap dap": $HPCDAP_BIN if
// set, else a fresh build of the repository's cmd/hpcdap. The DAP adapter is a later part of
// hpcdap than this extension; until the binary has a "dap" command these tests are skipped
// with the reason "adapter not built".

import { spawnSync } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';
import { isExecutable } from '../../src/core/adapterPath';
import { extensionDir, goBinary, repoRoot } from './paths';

/** The adapter binary to test, or why there is none. */
export type AdapterProbe = { path: string } | { skip: string };

let cached: AdapterProbe | undefined;

/**
 * Returns the adapter binary, building it if needed. A failed build is an error (the tests fail);
 * a binary without a "dap" command means the adapter is not built yet (the tests skip).
 */
export function findAdapter(): AdapterProbe {
  if (cached) {
    return cached;
  }
  let bin = process.env.HPCDAP_BIN;
  if (bin) {
    if (!isExecutable(bin)) {
      throw new Error(`HPCDAP_BIN=${bin} is not an executable file`);
    }
  } else {
    bin = path.join(extensionDir, 'out', 'hpcdap-test', 'hpcdap');
    fs.mkdirSync(path.dirname(bin), { recursive: true });
    const b = spawnSync(goBinary(), ['build', '-o', bin, './cmd/hpcdap'], { cwd: repoRoot, encoding: 'utf8' });
    if (b.status !== 0) {
      throw new Error(`go build ./cmd/hpcdap in ${repoRoot} failed (${b.status}): ${b.stderr || b.error}`);
    }
  }
  // "hpcdap dap --help" exits 0 once the command exists; today's binary answers
  // 'unknown command "dap"' with status 2.
  const probe = spawnSync(bin, ['dap', '--help'], { encoding: 'utf8', timeout: 30_000 });
  const out = `${probe.stdout}${probe.stderr}`;
  if (probe.status === 0) {
    cached = { path: bin };
  } else if (/unknown command "dap"/.test(out)) {
    cached = { skip: `adapter not built (${bin} has no "dap" command)` };
  } else {
    throw new Error(`${bin} dap --help: status ${probe.status}: ${out.trim() || probe.error}`);
  }
  return cached;
}

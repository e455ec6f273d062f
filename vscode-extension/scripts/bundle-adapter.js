#!/usr/bin/env node
// Copies the hpcdap adapter binary into the extension (bin/hpcdap) so that the .vsix carries
// it. The source is $HPCDAP_BIN, else the repository's build output ../bin/hpcdap (make build).
// Without either, the extension is packaged without an adapter and uses hpcdap.path or PATH.
'use strict';
const fs = require('fs');
const path = require('path');

const ext = path.resolve(__dirname, '..');
const src = process.env.HPCDAP_BIN || path.join(ext, '..', 'bin', 'hpcdap');
const dst = path.join(ext, 'bin', 'hpcdap');

if (!fs.existsSync(src)) {
  if (process.env.HPCDAP_BIN) {
    console.error(`bundle-adapter: HPCDAP_BIN=${src} does not exist`);
    process.exit(1);
  }
  const stale = fs.existsSync(dst) ? ` (keeping the existing ${path.relative(ext, dst)})` : '';
  console.log(`bundle-adapter: no ${src} (run "make build" in the repository to bundle the adapter)${stale}`);
  process.exit(0);
}
fs.mkdirSync(path.dirname(dst), { recursive: true });
fs.copyFileSync(src, dst);
fs.chmodSync(dst, 0o755);
console.log(`bundle-adapter: ${src} -> ${path.relative(ext, dst)} (${fs.statSync(dst).size} bytes)`);

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import { resolveAdapterPath } from '../../src/core/adapterPath';
import { compareHtml, compareRows, compareText, escapeHtml } from '../../src/core/compare';
import { isLauncher, parsePs, parseSqueueSteps } from '../../src/core/processes';

test('compare rows: outliers first, then errors', () => {
  const rows = compareRows({
    groups: [
      { value: '0', ranks: '0-2,4-7', count: 7 },
      { value: '1', ranks: '3', count: 1 },
      { value: '2', ranks: '9', count: 1 },
    ],
    errors: [{ message: 'no symbol "x" in current context', ranks: '8' }],
  });
  assert.deepEqual(rows.map((r) => r.value), ['1', '2', '0', 'no symbol "x" in current context']);
  assert.equal(rows[3].isError, true);
  assert.equal(rows[3].count, 1);
  const text = compareText('rank % 2', rows);
  assert.match(text, /^rank % 2:\n/);
  assert.match(text, /\n {5}7 {2}0-2,4-7 {2}0$/m);
  assert.match(text, /error: no symbol/);
});

test('compare HTML escapes values', () => {
  assert.equal(escapeHtml(`<a href="x">&'`), '&lt;a href=&quot;x&quot;&gt;&amp;&#39;');
  const html = compareHtml('s', 'all ranks', compareRows({ groups: [{ value: '"<script>"', ranks: '0', count: 1 }], errors: [] }));
  assert.ok(!html.includes('<script>'));
  assert.match(html, /<td class="value">&quot;&lt;script&gt;&quot;<\/td><td class="ranks">0<\/td><td class="count">1<\/td>/);
});

test('ps listing of this machine: finds this process and no launcher among test processes', () => {
  const out = execFileSync('ps', ['-eo', 'pid=,ppid=,comm=,args='], { encoding: 'utf8' });
  const procs = parsePs(out);
  const me = procs.find((p) => p.pid === process.pid);
  assert.ok(me, `pid ${process.pid} not in ps output`);
  assert.equal(me!.ppid, process.ppid);
  assert.equal(me!.comm, 'node');
  assert.equal(isLauncher({ pid: 1, ppid: 0, comm: 'mpirun', args: 'mpirun -np 4 ./a.out' }), true);
  assert.equal(isLauncher({ pid: 1, ppid: 0, comm: 'hydra_pmi_proxy', args: '' }), false);
  assert.equal(isLauncher(me!), false);
});

test('squeue step listing', () => {
  const steps = parseSqueueSteps('42.0|ring|node[1-4]|alice\n42.batch|batch|node1|alice\n\n43.1|app|node5|bob\n');
  assert.deepEqual(steps.map((s) => s.step), ['42.0', '43.1']);
  assert.deepEqual(steps[0], { step: '42.0', name: 'ring', nodes: 'node[1-4]', user: 'alice' });
});

test('adapter path: setting, then bundled binary, then PATH', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hpcdap-path-'));
  try {
    const ext = path.join(dir, 'ext');
    const onPath = path.join(dir, 'pathdir');
    fs.mkdirSync(path.join(ext, 'bin'), { recursive: true });
    fs.mkdirSync(onPath);
    const exe = (p: string) => fs.writeFileSync(p, '#!/bin/sh\n', { mode: 0o755 });

    assert.match((resolveAdapterPath('', ext, onPath) as { error: string }).error, /hpcdap\.path.*hpcdap\.server/);
    exe(path.join(onPath, 'hpcdap'));
    assert.deepEqual(resolveAdapterPath('', ext, onPath), { path: path.join(onPath, 'hpcdap'), source: 'PATH' });
    fs.writeFileSync(path.join(ext, 'bin', 'hpcdap'), 'not executable', { mode: 0o644 });
    assert.equal((resolveAdapterPath('', ext, onPath) as { source: string }).source, 'PATH', 'a non-executable bundle is skipped');
    fs.chmodSync(path.join(ext, 'bin', 'hpcdap'), 0o755);
    assert.deepEqual(resolveAdapterPath('', ext, onPath), { path: path.join(ext, 'bin', 'hpcdap'), source: 'bundled' });
    const custom = path.join(dir, 'custom-hpcdap');
    exe(custom);
    assert.deepEqual(resolveAdapterPath(custom, ext, onPath), { path: custom, source: 'setting' });
    assert.deepEqual(resolveAdapterPath('custom-hpcdap', ext, onPath, dir), { error: 'hpcdap.path: "custom-hpcdap" is not a command on PATH' });
    assert.deepEqual(resolveAdapterPath('./custom-hpcdap', ext, onPath, dir), { path: custom, source: 'setting' });
    assert.match((resolveAdapterPath(path.join(dir, 'nope'), ext, onPath) as { error: string }).error, /does not exist/);
    assert.match((resolveAdapterPath(onPath, ext, onPath) as { error: string }).error, /not an executable file/);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

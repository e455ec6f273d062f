// hpcdap driven by the official DAP test client, @vscode/debugadapter-testsupport: the same
// scenarios as the Go conversation tests (launch, breakpoints, stacks, variables, stepping,
// watchpoint, signal, exit codes, four ranks stopping together, attach/detach, core file).
// Run by the Go test TestOfficialClient, which builds hpcdap and sets HPCDAP_BIN; the test
// programs are compiled here with gcc from the Go tests' sources.
//
// The client drops reverse requests (runInTerminal, startDebugging); hpcdap sends none.

'use strict';

const assert = require('assert');
const cp = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');
const { DebugClient } = require('@vscode/debugadapter-testsupport');

const BIN = process.env.HPCDAP_BIN;
const TESTDATA = path.resolve(__dirname, '..', '..');
const RING_SRC = path.resolve(__dirname, '..', '..', '..', '..', 'examples', 'ring', 'ring.c');

if (!BIN) {
  throw new Error('HPCDAP_BIN must name the hpcdap binary (the Go test TestOfficialClient sets it)');
}

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'hpcdap-js-'));

/** Compiles a C source into the work directory and returns its paths and MARK: lines. */
function build(src, name) {
  const dst = path.join(work, name + '.c');
  fs.copyFileSync(src, dst);
  const bin = path.join(work, name);
  const flags = ['-g', '-O0', '-o', bin, dst];
  if (fs.readFileSync(dst, 'utf8').includes('pthread')) {
    flags.push('-pthread');
  }
  const r = cp.spawnSync('gcc', flags, { encoding: 'utf8' });
  if (r.status !== 0) {
    throw new Error(`gcc ${name}: ${r.stderr || r.error}`);
  }
  const marks = {};
  fs.readFileSync(dst, 'utf8').split('\n').forEach((l, i) => {
    const m = l.match(/MARK:([\w-]+)/);
    if (m) {
      marks[m[1]] = i + 1;
    }
    if (l.includes('the last rank closes the ring')) {
      marks.close = i + 1;
    }
  });
  return { bin, src: dst, marks };
}

const stacks = build(path.join(TESTDATA, 'stacks.c'), 'stacks');
const spin = build(path.join(TESTDATA, 'spin.c'), 'spin');
const ring = build(RING_SRC, 'ring');

/** Waits until cond() holds, looking every 10 ms, and fails naming what after 20 s. */
async function waitFor(what, cond) {
  const deadline = Date.now() + 20000;
  while (!cond()) {
    assert.ok(Date.now() < deadline, `timed out waiting for ${what()}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** Returns a field of /proc/PID/status ('' if the process is gone). */
function procStatus(pid, field) {
  let text;
  try {
    text = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  } catch {
    return '';
  }
  const m = text.match(new RegExp(`^${field}:\\s*(.*)$`, 'm'));
  return m ? m[1] : '';
}

function client() {
  const dc = new DebugClient(BIN, 'dap', 'hpcdap');
  dc.defaultTimeout = 30000;
  return dc;
}

async function launchAndStop(dc, args, src, line) {
  await Promise.all([
    dc.waitForEvent('initialized').then(() => dc.setBreakpointsRequest({ source: { path: src }, breakpoints: [{ line }] }))
      .then(() => dc.configurationDoneRequest()),
    dc.initializeRequest(),
    dc.launchRequest(args),
  ]);
  return dc.waitForEvent('stopped');
}

describe('hpcdap with the official DAP client', function () {
  let dc;
  beforeEach(async () => {
    dc = client();
    await dc.start();
  });
  afterEach(async () => {
    if (dc) {
      await dc.stop();
    }
  });

  it('announces its capabilities', async () => {
    const r = await dc.initializeRequest();
    const c = r.body;
    for (const k of ['supportsConfigurationDoneRequest', 'supportsFunctionBreakpoints', 'supportsConditionalBreakpoints',
      'supportsHitConditionalBreakpoints', 'supportsLogPoints', 'supportsDataBreakpoints', 'supportsInstructionBreakpoints',
      'supportsReadMemoryRequest', 'supportsWriteMemoryRequest', 'supportsDisassembleRequest', 'supportsSteppingGranularity',
      'supportsSetVariable', 'supportsExceptionInfoRequest', 'supportsModulesRequest', 'supportsTerminateRequest',
      'supportTerminateDebuggee', 'supportsSingleThreadExecutionRequests', 'supportsLoadedSourcesRequest']) {
      assert.strictEqual(c[k], true, k);
    }
  });

  it('stops at a breakpoint with the stack and variables of the frame', async () => {
    const line = stacks.marks['leaf-write'];
    await dc.hitBreakpoint({ program: stacks.bin }, { path: stacks.src, line });
    const threads = (await dc.threadsRequest()).body.threads;
    assert.strictEqual(threads.length, 1);
    assert.match(threads[0].name, /^rank 0 · main \(LWP \d+\) 0x[0-9a-f]+$/);
    const st = (await dc.stackTraceRequest({ threadId: threads[0].id })).body;
    assert.deepStrictEqual(st.stackFrames.map((f) => f.name), ['leaf', 'middle', 'middle', 'main']);
    assert.strictEqual(st.stackFrames[0].line, line);
    assert.strictEqual(st.stackFrames[1].line, stacks.marks['middle-call-leaf']);
    const scopes = (await dc.scopesRequest({ frameId: st.stackFrames[0].id })).body.scopes;
    assert.deepStrictEqual(scopes.map((s) => s.name), ['Locals', 'Arguments', 'Registers', 'Globals']);
    const args = (await dc.variablesRequest({ variablesReference: scopes[1].variablesReference })).body.variables;
    const depth = args.find((v) => v.name === 'depth');
    assert.strictEqual(depth.value, '0');
    const s = args.find((v) => v.name === 's');
    assert.ok(s.variablesReference > 0);
    const members = (await dc.variablesRequest({ variablesReference: s.variablesReference })).body.variables;
    assert.deepStrictEqual(members.map((m) => m.name), ['name', 'corner', 'scale']);
    const ev = (await dc.evaluateRequest({ expression: 's->corner[1].x * 2', frameId: st.stackFrames[0].id, context: 'watch' })).body;
    const x = (await dc.evaluateRequest({ expression: 's->corner[1].x', frameId: st.stackFrames[0].id, context: 'watch' })).body;
    assert.strictEqual(Number(ev.result), 2 * Number(x.result));
  });

  it('steps over, into and out', async () => {
    const start = stacks.marks['main-call'];
    await dc.hitBreakpoint({ program: stacks.bin }, { path: stacks.src, line: start });
    const tid = (await dc.threadsRequest()).body.threads[0].id;
    await Promise.all([dc.stepInRequest({ threadId: tid }), dc.assertStoppedLocation('step', { path: stacks.src })]);
    let top = (await dc.stackTraceRequest({ threadId: tid })).body.stackFrames[0];
    assert.strictEqual(top.name, 'middle');
    await Promise.all([dc.stepOutRequest({ threadId: tid }), dc.assertStoppedLocation('step', { path: stacks.src, line: start })]);
    top = (await dc.stackTraceRequest({ threadId: tid })).body.stackFrames[0];
    assert.strictEqual(top.name, 'main');
    await Promise.all([dc.nextRequest({ threadId: tid, granularity: 'instruction' }), dc.assertStoppedLocation('step', {})]);
  });

  it('stops on a data breakpoint', async () => {
    await dc.hitBreakpoint({ program: stacks.bin }, { path: stacks.src, line: stacks.marks['main-start'] });
    const tid = (await dc.threadsRequest()).body.threads[0].id;
    const frame = (await dc.stackTraceRequest({ threadId: tid })).body.stackFrames[0];
    const info = (await dc.dataBreakpointInfoRequest({ name: 'counter', frameId: frame.id })).body;
    assert.ok(info.dataId);
    const set = (await dc.setDataBreakpointsRequest({ breakpoints: [{ dataId: info.dataId, accessType: 'write' }] })).body;
    assert.strictEqual(set.breakpoints[0].verified, true);
    await dc.setBreakpointsRequest({ source: { path: stacks.src }, breakpoints: [] });
    await Promise.all([dc.continueRequest({ threadId: tid }), dc.assertStoppedLocation('data breakpoint', { path: stacks.src })]);
    const top = (await dc.stackTraceRequest({ threadId: tid })).body.stackFrames[0];
    assert.strictEqual(top.name, 'leaf');
  });

  it('reports a fault as an exception', async () => {
    await Promise.all([
      dc.configurationSequence(),
      dc.launch({ program: stacks.bin, args: ['segv'] }),
      dc.assertStoppedLocation('exception', { path: stacks.src, line: stacks.marks.segv }),
    ]);
    const tid = (await dc.threadsRequest()).body.threads[0].id;
    const ei = (await dc.exceptionInfoRequest({ threadId: tid })).body;
    assert.strictEqual(ei.exceptionId, 'SIGSEGV');
    assert.match(ei.description, /0x40/);
  });

  it('reports each rank\'s exit code', async () => {
    // The client hears an event only if it waits for it already: wait for both at once.
    const ended = Promise.all([dc.waitForEvent('exited'), dc.waitForEvent('terminated')]);
    await Promise.all([dc.configurationSequence(), dc.launch({ program: stacks.bin, np: 3 })]);
    const [exited] = await ended;
    assert.strictEqual(exited.body.exitCode, 3);
    const ranks = (await dc.customRequest('hpcdap/ranks', {})).body.ranks;
    assert.deepStrictEqual(ranks.map((r) => r.exitCode), [0, 3, 0]);
  });

  it('stops four ranks together and merges their stacks', async () => {
    const dir = fs.mkdtempSync(path.join(work, 'ring-'));
    const st = await launchAndStop(dc, { program: ring.bin, args: [dir], np: 4, cwd: dir }, ring.src, ring.marks.close);
    assert.strictEqual(st.body.reason, 'breakpoint');
    assert.strictEqual(st.body.allThreadsStopped, true);
    const ranks = (await dc.customRequest('hpcdap/ranks', {})).body;
    assert.strictEqual(ranks.focus, '0-3');
    assert.deepStrictEqual(ranks.ranks.map((r) => r.state), ['stopped', 'stopped', 'stopped', 'stopped']);
    assert.strictEqual(st.body.threadId, ranks.ranks[3].threadId);
    const threads = (await dc.threadsRequest()).body.threads;
    assert.deepStrictEqual(threads.map((t) => t.name.replace(/\(LWP \d+\) 0x[0-9a-f]+$/, '')),
      ['rank 0 · main ', 'rank 1 · main ', 'rank 2 · main ', 'rank 3 · main ']);
    const ps = (await dc.customRequest('hpcdap/parallelStacks', {})).body;
    assert.strictEqual(ps.total, 4);
    assert.strictEqual(ps.roots.length, 1);
    assert.strictEqual(ps.roots[0].name, 'main');
    assert.strictEqual(ps.roots[0].ranks, '0-3');
    // Every node's representative frame is that frame of its thread's stackTrace.
    const walk = async (n) => {
      const frames = (await dc.stackTraceRequest({ threadId: n.threadId })).body.stackFrames;
      assert.strictEqual(frames[n.frameLevel].name, n.name);
      assert.strictEqual(frames[n.frameLevel].line, n.line ?? 0); // 0: no source on this machine
      for (const c of n.children) {
        await walk(c);
      }
    };
    await walk(ps.roots[0]);
    const cmp = (await dc.customRequest('hpcdap/compareExpression', { expression: 'local' })).body;
    assert.strictEqual(cmp.groups.length, 4);
    await dc.setBreakpointsRequest({ source: { path: ring.src }, breakpoints: [] });
    await Promise.all([dc.continueRequest({ threadId: st.body.threadId }), dc.waitForEvent('terminated')]);
  });

  it('attaches to a running process and detaches leaving it running', async () => {
    const proc = cp.spawn(spin.bin, [], { stdio: ['ignore', 'pipe', 'ignore'] });
    let ticks = 0;
    proc.stdout.on('data', (d) => { ticks += d.toString().split('\n').length - 1; });
    try {
      await waitFor(() => 'the process to tick', () => ticks > 0);
      await Promise.all([dc.configurationSequence(), dc.initializeRequest().then(() => dc.attachRequest({ pid: proc.pid }))]);
      const tid = (await dc.threadsRequest()).body.threads[0].id;
      await Promise.all([dc.pauseRequest({ threadId: tid }), dc.assertStoppedLocation('pause', {})]);
      await dc.disconnectRequest({ terminateDebuggee: false });
      dc = undefined; // the session is over: the adapter exits after disconnect
      // It runs on, untraced: it ticks again, however long a loaded machine takes to run it.
      const before = ticks;
      await waitFor(() => `the process to tick after the detach (${before} → ${ticks})`, () => ticks > before + 5);
      assert.strictEqual(procStatus(proc.pid, 'TracerPid'), '0', 'the process is still traced after the detach');
      assert.doesNotMatch(procStatus(proc.pid, 'State'), /^[tT]/, 'the process is stopped after the detach');
    } finally {
      proc.kill('SIGKILL');
    }
  });

  it('debugs a core file', async () => {
    const core = path.join(work, 'stacks.core');
    const g = cp.spawnSync('gdb', ['-batch', '-nx', '-ex', 'run', '-ex', `generate-core-file ${core}`, '-ex', 'kill',
      '--args', stacks.bin, 'segv'], { encoding: 'utf8', env: { ...process.env, HPCDAP_RANK: '0' } });
    assert.ok(fs.existsSync(core), `gdb wrote no core: ${g.stderr}`);
    await Promise.all([
      dc.configurationSequence(),
      dc.launch({ program: stacks.bin, coreFile: core }),
      dc.assertStoppedLocation('exception', { path: stacks.src, line: stacks.marks.segv }),
    ]);
  });
});

// DAP-level tests of "hpcdap dap" with the official DAP test client: a 4-rank launch of a real
// program, the custom requests and events of the README contract, and the configurations the
// extension offers (every snippet, and the configurations its checks refuse) against the
// adapter's own argument checking. Oracles: /proc (pids, executables, each rank's environment),
// the breakpoint line found in the source, and the standard stackTrace requests (for the merged
// stacks). Skipped with "adapter not built" while the hpcdap binary has no "dap" command.

import { DebugClient } from '@vscode/debugadapter-testsupport';
import { DebugProtocol } from '@vscode/debugprotocol';
import assert from 'assert';
import { ChildProcess, spawn, spawnSync } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { DebugConfig, checkConfig } from '../../src/core/config';
import { CompareExpressionResponse, FocusResponse, ParallelStacksResponse, RankState, RanksResponse } from '../../src/core/protocol';
import { RankSet } from '../../src/core/rankset';
import { materializeSnippet, substituteVariables } from '../../src/core/snippets';
import { RankStack, ViewNode, canonicalTree, checkStackTree, mergeByFunction, mergeStacks, walk } from '../../src/core/stacks';
import { findAdapter } from '../support/adapter';
import { buildRing, functionLines, markerLine } from '../support/fixture';
import { packageJson } from '../support/paths';

/**
 * The error id the adapter gives a request whose arguments fail its checks ("arguments decoded
 * but invalid"), which tells "refused these arguments" from "the job failed" or "not yet
 * supported" (3002).
 */
const invalidArgumentsId = 1003;
const notYetSupportedId = 3002;

/** Sends a request and returns the whole response, including a failure's error body. */
function rawRequest(dc: DebugClient, command: string, args: unknown): Promise<DebugProtocol.Response> {
  return new Promise((resolve) => (dc as unknown as { doSend(c: string, a: unknown, cb: (r: DebugProtocol.Response) => void): void }).doSend(command, args, resolve));
}

/** The rank a process was started as, read from its environment (the launcher's contract). */
function rankOfPid(pid: number): number {
  const env = fs.readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0');
  const v = env.find((e) => e.startsWith('HPCDAP_RANK='));
  assert.ok(v, `process ${pid} has no HPCDAP_RANK`);
  return Number(v!.slice('HPCDAP_RANK='.length));
}

/**
 * Ends a client after its own disconnect: DebugClient.stop() would send a second disconnect and
 * wait for an answer that an adapter which has already ended the session never gives.
 */
function kill(dc: DebugClient): void {
  (dc as unknown as { stopAdapter(): void }).stopAdapter();
}

/** Fails with a message naming what hung instead of letting a request hang the suite. */
function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise<T>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what}: no answer in ${ms} ms`)), ms))),
  ]);
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function waitUntil(what: string, cond: () => boolean, ms = 20_000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) {
      throw new Error(`timed out waiting for ${what}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe('hpcdap dap', function () {
  this.timeout(120_000);
  let adapter = '';
  let dir = '';
  let ring = { source: '', program: '' };

  before(function () {
    const probe = findAdapter();
    if ('skip' in probe) {
      console.log(`      skipped: ${probe.skip}`);
      this.skip();
    }
    adapter = probe.path;
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hpcdap-dap-'));
    ring = buildRing(dir);
  });

  after(() => {
    if (dir) {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  /** A client of a fresh "hpcdap dap" process. */
  async function client(): Promise<DebugClient> {
    const dc = new DebugClient(adapter, 'dap', 'hpcdap', { cwd: dir }, true);
    dc.defaultTimeout = 30_000;
    await dc.start();
    return dc;
  }

  describe('a 4-rank local launch stopped at a breakpoint', function () {
    let dc: DebugClient;
    let bpLine = 0;
    let stopped: DebugProtocol.StoppedEvent;
    let ranks: RankState[] = [];
    const changed: RankState[][] = [];

    before(async function () {
      bpLine = markerLine(ring.source, 'MARK: compute-loop');
      const ready = path.join(dir, 'ready');
      fs.mkdirSync(ready);
      dc = await client();
      dc.on('hpcdap/ranksChanged', (e: DebugProtocol.Event) => changed.push(e.body.ranks));
      await Promise.all([
        dc.waitForEvent('initialized').then(() => dc.configurationDoneRequest()),
        dc.launch({ program: ring.program, np: 4, launcher: 'local', env: { HPCDAP_TEST_READY_DIR: ready } }),
      ]);
      // Every rank is past its start-up (rank 0 waits, ranks 1-3 compute) before the breakpoint
      // is planted, so that where each rank stops depends on the program, not on timing.
      await waitUntil('4 ranks ready', () => [0, 1, 2, 3].every((r) => fs.existsSync(path.join(ready, `ready.${r}`))), 60_000);
      const stoppedEvent = dc.waitForEvent('stopped', 60_000);
      const bp = await dc.setBreakpointsRequest({ source: { path: ring.source }, breakpoints: [{ line: bpLine }] });
      assert.equal(bp.body.breakpoints[0].verified, true, 'breakpoint verified');
      assert.equal(bp.body.breakpoints[0].line, bpLine);
      stopped = (await stoppedEvent) as DebugProtocol.StoppedEvent;
    });

    after(async () => {
      const pids = ranks.map((r) => r.pid);
      try {
        await within(dc.disconnectRequest({ terminateDebuggee: true }), 30_000, 'disconnect');
      } finally {
        kill(dc);
      }
      // Nothing of the job may survive the session.
      await waitUntil(`ranks ${pids} to exit`, () => pids.every((p) => !alive(p)));
    });

    it('stops at the breakpoint line in compute', async () => {
      assert.equal(stopped.body.reason, 'breakpoint');
      const st = await dc.stackTraceRequest({ threadId: stopped.body.threadId! });
      const top = st.body.stackFrames[0];
      assert.equal(top.name.replace(/\(.*$/, ''), 'compute');
      assert.equal(top.line, bpLine);
      assert.equal(top.source?.path, ring.source);
    });

    it('names one thread per rank "rank N · …" and reports every rank in hpcdap/ranks', async () => {
      const threads = (await dc.threadsRequest()).body.threads;
      const threadRanks = threads.map((t) => Number(/^rank (\d+) · /.exec(t.name)?.[1] ?? NaN));
      assert.deepEqual([...new Set(threadRanks)].sort(), [0, 1, 2, 3], threads.map((t) => t.name).join(', '));
      const body = (await dc.customRequest('hpcdap/ranks', {})).body as RanksResponse;
      ranks = body.ranks;
      assert.deepEqual(ranks.map((r) => r.rank).sort(), [0, 1, 2, 3]);
      assert.equal(body.focus, '0-3');
      for (const r of ranks) {
        assert.equal(r.state, 'stopped', `rank ${r.rank}`);
        // Oracles from /proc: the process runs the program, and was started as this rank.
        assert.equal(fs.readlinkSync(`/proc/${r.pid}/exe`), ring.program);
        assert.equal(rankOfPid(r.pid), r.rank);
        assert.equal(r.host, os.hostname());
        const t = threads.find((x) => x.id === r.threadId);
        assert.ok(t && t.name.startsWith(`rank ${r.rank} · `), `thread ${r.threadId} of rank ${r.rank}: ${t?.name}`);
      }
    });

    it('merges the ranks stacks as their stackTrace requests do', async () => {
      const threads = new Map(ranks.map((r) => [r.threadId, r.rank]));
      const stacks: RankStack[] = [];
      for (const r of ranks) {
        const st = await dc.stackTraceRequest({ threadId: r.threadId });
        stacks.push({ rank: r.rank, threadId: r.threadId, frames: st.body.stackFrames.map((f) => ({ name: f.name, source: f.source, line: f.line })) });
      }
      const tree = (await dc.customRequest('hpcdap/parallelStacks', {})).body as ParallelStacksResponse;
      assert.equal(tree.total, 4);
      assert.deepEqual(checkStackTree(tree, threads), []);
      assert.deepEqual(canonicalTree(tree.roots), canonicalTree(mergeStacks(stacks).roots));
      // The program's shape: ranks 1-3 are in compute, rank 0 (wherever it is) is not.
      const compute = functionLines(ring.source, 'compute');
      const inCompute = stacks.filter((s) => s.frames.some((f) => f.source?.path === ring.source && f.line !== undefined && f.line >= compute.first && f.line <= compute.last));
      assert.deepEqual(inCompute.map((s) => s.rank).sort(), [1, 2, 3], JSON.stringify(stacks));
      // Every node's representative frame is what stackTrace returns at frameLevel.
      const check = async (nodes: ParallelStacksResponse['roots']) => {
        for (const n of nodes) {
          const st = await dc.stackTraceRequest({ threadId: n.threadId, startFrame: n.frameLevel, levels: 1 });
          assert.equal(st.body.stackFrames[0].name, n.name);
          await check(n.children);
        }
      };
      await check(tree.roots);
      // The view's merge by function of that tree is the adapter's own merge by function (with
      // the same representatives' lines), and its lines name where each rank is.
      const byFunction = (await dc.customRequest('hpcdap/parallelStacks', { byFunction: true })).body as ParallelStacksResponse;
      const merged = mergeByFunction(tree.roots);
      assert.deepEqual(checkStackTree({ total: tree.total, roots: merged }, threads), []);
      assert.deepEqual(canonicalTree(merged), canonicalTree(byFunction.roots));
      assert.deepEqual(merged.map((n) => n.name), ['main'], 'one main');
      await check(merged);
      walk(merged, (n, depth) => {
        for (const l of (n as ViewNode).lines ?? []) {
          for (const r of RankSet.parse(l.ranks, 4).ranks()) {
            const outer = [...stacks.find((s) => s.rank === r)!.frames].reverse();
            assert.equal(outer[depth].name, n.name);
            assert.equal(outer[depth].line || undefined, l.line, `rank ${r} in ${n.name}`);
          }
        }
      });
    });

    it('compares an expression across ranks', async () => {
      const body = (await dc.customRequest('hpcdap/compareExpression', { expression: 'rank', ranks: '1-3' })).body as CompareExpressionResponse;
      const want = ranks.filter((r) => r.rank >= 1).map((r) => ({ value: String(rankOfPid(r.pid)), ranks: String(r.rank), count: 1 }));
      assert.deepEqual([...body.groups].sort((a, b) => a.ranks.localeCompare(b.ranks)), want.sort((a, b) => a.ranks.localeCompare(b.ranks)));
      assert.deepEqual(body.errors, []);
      const bad = (await dc.customRequest('hpcdap/compareExpression', { expression: 'no_such_variable', ranks: '1-3' })).body as CompareExpressionResponse;
      assert.deepEqual(bad.groups, []);
      assert.equal(RankSet.parse(bad.errors.map((e) => e.ranks).join(','), 4).toString(), '1-3');
    });

    it('sets the focus, resumes only the focus, and reports the change as ranksChanged', async () => {
      const focus = (await dc.customRequest('hpcdap/focus', { ranks: '2 1' })).body as FocusResponse;
      assert.deepEqual(focus, { focus: '1-2', count: 2 });
      assert.equal(((await dc.customRequest('hpcdap/ranks', {})).body as RanksResponse).focus, '1-2');
      await assert.rejects(dc.customRequest('hpcdap/focus', { ranks: '4' }), /out of range/);
      assert.deepEqual((await dc.customRequest('hpcdap/focus', { ranks: '2' })).body, { focus: '2', count: 1 });
      // The loop counter of ranks 1-3 (in compute) before and after continuing the focus.
      const loopCounters = async () => {
        const body = (await dc.customRequest('hpcdap/compareExpression', { expression: 'i', ranks: '1-3' })).body as CompareExpressionResponse;
        assert.deepEqual(body.errors, []);
        const byRank = new Map<number, number>();
        for (const g of body.groups) {
          RankSet.parse(g.ranks, 4).ranks().forEach((r) => byRank.set(r, Number(g.value)));
        }
        return byRank;
      };
      const before = await loopCounters();
      const rank2 = ranks.find((r) => r.rank === 2)!;
      changed.length = 0;
      const next = dc.waitForEvent('stopped', 60_000);
      await dc.continueRequest({ threadId: rank2.threadId });
      const stopped = (await next) as DebugProtocol.StoppedEvent;
      // Rank 2 ran to the breakpoint: one more round of the loop if it was stopped there, or the
      // same round if the all-stop caught it just before the breakpoint line. Ranks 1 and 3
      // never resumed.
      assert.equal(stopped.body.reason, 'breakpoint');
      assert.equal(stopped.body.threadId, rank2.threadId);
      const after = await loopCounters();
      const i2 = after.get(2)!;
      assert.ok(i2 === before.get(2)! || i2 === before.get(2)! + 1, `rank 2: i ${before.get(2)} → ${i2}`);
      assert.equal(after.get(1), before.get(1));
      assert.equal(after.get(3), before.get(3));
      const events = changed.flat();
      assert.ok(events.some((r) => r.rank === 2), `no ranksChanged for rank 2: ${JSON.stringify(changed)}`);
      assert.ok(!events.some((r) => r.rank !== 2 && r.state === 'running'), `a rank outside the focus ran: ${JSON.stringify(changed)}`);
      const now = ((await dc.customRequest('hpcdap/ranks', {})).body as RanksResponse).ranks;
      assert.ok(now.every((r) => r.state === 'stopped'), JSON.stringify(now));
    });
  });

  describe('configurations the extension writes', function () {
    const sleepers: ChildProcess[] = [];
    let vars: Record<string, unknown> = {};

    before(function () {
      // The snippets' defaults name ${workspaceFolder}/a.out and …/core.
      fs.copyFileSync(ring.program, path.join(dir, 'a.out'));
      fs.copyFileSync(ring.source, path.join(dir, 'a.c'));
      const p = spawn(path.join(dir, 'a.out'), [], { env: { ...process.env, HPCDAP_RANK: '0' }, stdio: 'ignore' });
      sleepers.push(p);
      const core = spawnSync('gcore', ['-o', path.join(dir, 'core'), String(p.pid)], { encoding: 'utf8' });
      assert.equal(core.status, 0, `gcore: ${core.stderr}`);
      fs.renameSync(path.join(dir, `core.${p.pid}`), path.join(dir, 'core'));
      vars = { workspaceFolder: dir, 'command:pickProcess': String(p.pid), 'command:pickLauncherPid': String(p.pid), 'command:pickSlurmStep': '1.0' };
    });

    after(() => sleepers.forEach((p) => p.kill('SIGKILL')));

    /** Starts a session with a configuration and returns the launch/attach response. */
    async function start(c: DebugConfig): Promise<DebugProtocol.Response> {
      const dc = await client();
      try {
        await within(dc.initializeRequest(), 30_000, `${c.name}: initialize`);
        return await within(rawRequest(dc, c.request as string, c), 60_000, `${c.name}: ${c.request}`);
      } finally {
        await within(dc.disconnectRequest({ terminateDebuggee: c.request === 'launch' }), 30_000, `${c.name}: disconnect`).catch(() => undefined);
        kill(dc);
      }
    }

    it('accepts the arguments of every snippet', async () => {
      const snippets = packageJson().contributes.debuggers[0].configurationSnippets as { label: string; body: unknown }[];
      for (const s of snippets) {
        const c = checkConfig(substituteVariables(materializeSnippet(s.body), vars) as DebugConfig);
        assert.deepEqual(c.errors, [], s.label);
        const resp = await start(c.config!);
        // The job itself may fail here (no Slurm, no MPI launcher running, an x86 program for the
        // Power snippet), but not the arguments.
        const id = (resp.body as { error?: { id?: number } } | undefined)?.error?.id;
        const notPower = /not a 64-bit Power executable/.test(resp.message ?? '');
        assert.ok(resp.success || id !== invalidArgumentsId || notPower, `${s.label}: arguments refused: ${resp.message}`);
      }
    });

    it('refuses what the extension refuses, as invalid arguments', async () => {
      const bad: DebugConfig[] = [
        { type: 'hpcdap', request: 'launch', name: 'no program', np: 2 },
        { type: 'hpcdap', request: 'launch', name: 'np 0', program: ring.program, np: 0 },
        { type: 'hpcdap', request: 'launch', name: 'launcher', program: ring.program, launcher: 'mpich' },
        { type: 'hpcdap', request: 'launch', name: 'ranks', program: ring.program, np: 4, ranks: '0-4' },
        { type: 'hpcdap', request: 'launch', name: 'stopMode', program: ring.program, stopMode: 'job' },
        { type: 'hpcdap', request: 'launch', name: 'launcherArgs', program: ring.program, launcherArgs: ['-x'] },
        { type: 'hpcdap', request: 'launch', name: 'np limit', program: ring.program, np: 5000 },
        { type: 'hpcdap', request: 'launch', name: 'callTimeout 0', program: ring.program, callTimeout: 0 },
        { type: 'hpcdap', request: 'launch', name: 'callTimeout over an hour', program: ring.program, callTimeout: 3601 },
        { type: 'hpcdap', request: 'attach', name: 'two targets', pid: 1, pids: { '0': 1 } },
        { type: 'hpcdap', request: 'attach', name: 'no target' },
        { type: 'hpcdap', request: 'attach', name: 'slurm', slurmJob: '42' },
      ];
      for (const c of bad) {
        assert.ok(checkConfig(c).errors.length > 0, `the extension accepts ${c.name}`);
        const resp = await start(c);
        assert.equal(resp.success, false, `${c.name}: accepted by the adapter`);
        // An argument of a back end that does not exist yet may be refused as "not yet
        // supported" before its form is checked.
        const id = (resp.body as { error?: { id?: number } })?.error?.id;
        assert.ok(id === invalidArgumentsId || id === notYetSupportedId, `${c.name}: error ${id}: ${resp.message}`);
      }
    });
  });
});

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { RankState } from '../../src/core/protocol';
import { pageRows } from '../../src/core/paging';
import { RankModel, RankRow, rankPageLabel, rankRows, rankDescription, representativeThread, statusText, statusTooltip } from '../../src/core/ranks';

const states: RankState['state'][] = ['starting', 'running', 'stopped', 'exited'];

function job(n: number, stateOf: (r: number) => RankState['state']): RankState[] {
  return Array.from({ length: n }, (_, rank) => ({ rank, state: stateOf(rank), pid: 1000 + rank, host: `node${rank % 4}`, threadId: 10 + rank }));
}

test('status text counts ranks by state', () => {
  const m = new RankModel();
  m.reset(job(64, (r) => (r === 63 ? 'running' : 'stopped')), '0-63');
  assert.equal(statusText(m), '64 ranks · 63 stopped · 1 running');
  assert.equal(statusTooltip(m), 'stopped: 0-62\nrunning: 63\nfocus: 0-63');
  m.reset(job(1, () => 'stopped'));
  assert.equal(statusText(m), '1 rank · 1 stopped');
  // Counts of a random job against a direct count.
  const pick = (r: number) => states[(r * 7919) % 4];
  m.reset(job(1000, pick));
  const counts = new Map<string, number>();
  for (let r = 0; r < 1000; r++) {
    counts.set(pick(r), (counts.get(pick(r)) ?? 0) + 1);
  }
  const want = ['1000 ranks', ...['stopped', 'running', 'starting', 'exited'].filter((s) => counts.has(s)).map((s) => `${counts.get(s)} ${s}`)];
  assert.equal(statusText(m), want.join(' · '));
});

test('ranksChanged merges into the model', () => {
  const m = new RankModel();
  m.reset(job(4, () => 'running'), '0-3');
  assert.equal(m.update([{ ...m.get(2)!, state: 'stopped', stopReason: 'breakpoint' }]), 1);
  assert.equal(m.update([{ ...m.get(2)! }]), 0, 'an unchanged rank is not a change');
  assert.equal(m.update([{ rank: 5, state: 'starting', pid: 0, host: '', threadId: 0 }]), 1, 'a new rank is a change');
  assert.equal(statusText(m), '5 ranks · 1 stopped · 3 running · 1 starting');
  assert.equal(m.get(2)!.host, 'node2');
  m.clear();
  assert.equal(m.size, 0);
  assert.equal(m.focus, '');
});

test('rank descriptions', () => {
  const r: RankState = { rank: 3, state: 'stopped', pid: 4242, host: 'node2', threadId: 17, stopReason: 'breakpoint' };
  assert.equal(rankDescription(r), 'stopped (breakpoint) · node2 · pid 4242');
  assert.equal(rankDescription({ ...r, state: 'exited', exitCode: 0, stopReason: undefined }), 'exited 0 · node2 · pid 4242');
  assert.equal(rankDescription({ ...r, state: 'exited', signal: 'SIGSEGV' }), 'killed by SIGSEGV · node2 · pid 4242');
  assert.equal(rankDescription({ ...r, state: 'starting', pid: 0, host: '' }), 'starting');
});

/**
 * Walks the Ranks view's rows as the tree view asks for them (each level only when its parent is
 * expanded), checking that no level makes more than pageSize rows and that the rank rows come
 * out once each, in order. Returns the rows made at each depth.
 */
function walkRankRows(ranks: RankState[], pageSize: number): { perDepth: number[]; leaves: number[]; maxLevel: number } {
  const perDepth: number[] = [];
  const leaves: number[] = [];
  let maxLevel = 0;
  const visit = (rows: RankRow[], depth: number) => {
    maxLevel = Math.max(maxLevel, rows.length);
    perDepth[depth] = (perDepth[depth] ?? 0) + rows.length;
    for (const row of rows) {
      if (row.kind === 'rank') {
        leaves.push(row.state.rank);
      } else {
        assert.ok(row.page.end - row.page.start > 0, 'an empty page');
        visit(rankRows(row.ranks, row.page, pageSize), depth + 1);
      }
    }
  };
  visit(rankRows(ranks, undefined, pageSize), 0);
  return { perDepth, leaves, maxLevel };
}

test('the Ranks view of 1,024 ranks makes at most a page of rows per level', () => {
  const ranks = job(1024, (r) => (r % 3 ? 'stopped' : 'running'));
  const { perDepth, leaves, maxLevel } = walkRankRows(ranks, 128);
  // Opening the view makes 8 rows (ranges of 128 ranks), expanding one of them 128 more.
  assert.deepEqual(perDepth, [8, 1024]);
  assert.equal(maxLevel, 128);
  assert.deepEqual(leaves, ranks.map((r) => r.rank));
  const top = rankRows(ranks);
  assert.deepEqual(
    top.map((r) => (r.kind === 'page' ? rankPageLabel(r) : `rank ${r.state.rank}`)),
    ['0-127', '128-255', '256-383', '384-511', '512-639', '640-767', '768-895', '896-1023'],
  );
});

test('paged rows cover every rank once, in order, at any size', () => {
  for (const [n, pageSize, depth] of [
    [0, 128, 1],
    [1, 128, 1],
    [128, 128, 1],
    [129, 128, 2],
    [16384, 128, 2],
    [16385, 128, 3],
    [100000, 128, 3],
    [1000, 2, 10],
  ]) {
    const ranks = job(n, () => 'stopped');
    const { perDepth, leaves, maxLevel } = walkRankRows(ranks, pageSize);
    assert.ok(maxLevel <= pageSize, `${n} ranks: a level of ${maxLevel} rows`);
    assert.equal(perDepth.length, depth, `${n} ranks in pages of ${pageSize}: depth ${perDepth.length}`);
    assert.deepEqual(leaves, ranks.map((r) => r.rank), `${n} ranks`);
  }
  // Scattered ranks: a page names its ranks in MPIR notation, or its bounds.
  const even = job(512, () => 'stopped').map((r) => ({ ...r, rank: 2 * r.rank }));
  const top = rankRows(even, undefined, 128).map((r) => (r.kind === 'page' ? rankPageLabel(r) : ''));
  assert.deepEqual(top, ['0-254:2', '256-510:2', '512-766:2', '768-1022:2']);
  const odd = [0, 5, 6, 11, 100, 101, 102, 250].map((rank) => ({ rank, state: 'stopped' as const, pid: 1, host: '', threadId: 1 }));
  assert.deepEqual(
    rankRows(odd, undefined, 2).map((r) => (r.kind === 'page' ? rankPageLabel(r) : '')),
    ['0,5-6,11', '100-102,250'],
  );
  assert.throws(() => pageRows([], 1), /page size/);
});

test('the thread named in a run-control request', () => {
  const ranks = job(4, (r) => (r < 2 ? 'running' : 'stopped'));
  assert.equal(representativeThread(ranks, 'continue'), 12, 'continue names a stopped rank');
  assert.equal(representativeThread(ranks, 'next'), 12);
  assert.equal(representativeThread(ranks, 'pause'), 10, 'pause names a running rank');
  assert.equal(representativeThread(job(2, () => 'exited'), 'continue'), undefined);
  assert.equal(representativeThread([], 'pause'), undefined);
});

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { RankState } from '../../src/core/protocol';
import { RankModel, chunkRanks, rankDescription, representativeThread, statusText, statusTooltip } from '../../src/core/ranks';

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

test('chunks cover every rank once, in order', () => {
  for (const n of [0, 1, 255, 256, 257, 1000]) {
    const ranks = job(n, () => 'stopped');
    const chunks = chunkRanks(ranks, 256);
    assert.equal(chunks.length, Math.ceil(n / 256));
    assert.deepEqual(chunks.flatMap((c) => c.ranks.map((r) => r.rank)), ranks.map((r) => r.rank));
    for (const c of chunks) {
      assert.equal(c.first, c.ranks[0].rank);
      assert.equal(c.last, c.ranks[c.ranks.length - 1].rank);
    }
  }
  assert.throws(() => chunkRanks([], 0), /not positive/);
});

test('the thread named in a run-control request', () => {
  const ranks = job(4, (r) => (r < 2 ? 'running' : 'stopped'));
  assert.equal(representativeThread(ranks, 'continue'), 12, 'continue names a stopped rank');
  assert.equal(representativeThread(ranks, 'next'), 12);
  assert.equal(representativeThread(ranks, 'pause'), 10, 'pause names a running rank');
  assert.equal(representativeThread(job(2, () => 'exited'), 'continue'), undefined);
  assert.equal(representativeThread([], 'pause'), undefined);
});

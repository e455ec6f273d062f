// The extension's picture of a job's ranks: built from hpcdap/ranks, updated by
// hpcdap/ranksChanged, and summarised for the Ranks view and the status bar.

import { Page, defaultPageSize, pageRows } from './paging';
import { RankState } from './protocol';
import { RankSet } from './rankset';

/** The rank states in the order the summaries list them. */
export const stateOrder: readonly RankState['state'][] = ['stopped', 'running', 'starting', 'exited'];

/** Ranks of one job, by rank number, and the adapter's focus set. */
export class RankModel {
  private byRank = new Map<number, RankState>();
  /** The focus set as the adapter last reported it ("" when unknown). */
  focus = '';

  /** Replaces every rank with a full hpcdap/ranks answer. */
  reset(ranks: RankState[], focus?: string): void {
    this.byRank = new Map(ranks.map((r) => [r.rank, { ...r }]));
    if (focus !== undefined) {
      this.focus = focus;
    }
  }

  /** Merges the ranks of an hpcdap/ranksChanged event; returns how many ranks it changed. */
  update(changed: RankState[]): number {
    let n = 0;
    for (const r of changed) {
      const old = this.byRank.get(r.rank);
      if (!old || !sameState(old, r)) {
        n++;
      }
      // An event may carry only some fields of a rank it already reported.
      this.byRank.set(r.rank, old ? { ...old, ...r } : { ...r });
    }
    return n;
  }

  /** Forgets everything (the session ended). */
  clear(): void {
    this.byRank.clear();
    this.focus = '';
  }

  /** The number of ranks known. */
  get size(): number {
    return this.byRank.size;
  }

  /** The ranks in increasing rank order. */
  list(): RankState[] {
    return [...this.byRank.values()].sort((a, b) => a.rank - b.rank);
  }

  /** One rank, if known. */
  get(rank: number): RankState | undefined {
    return this.byRank.get(rank);
  }

  /** The set of ranks in each state. */
  byState(): Map<RankState['state'], RankSet> {
    const lists = new Map<RankState['state'], number[]>();
    for (const r of this.byRank.values()) {
      const l = lists.get(r.state) ?? [];
      l.push(r.rank);
      lists.set(r.state, l);
    }
    const out = new Map<RankState['state'], RankSet>();
    for (const s of stateOrder) {
      const l = lists.get(s);
      if (l) {
        out.set(s, RankSet.of(...l));
      }
    }
    return out;
  }

  /** The focus as a set, or undefined when it is unknown or does not parse for this job. */
  focusSet(): RankSet | undefined {
    if (this.focus === '') {
      return undefined;
    }
    return RankSet.tryParse(this.focus, -1).set;
  }
}

function sameState(a: RankState, b: RankState): boolean {
  return (
    a.state === b.state &&
    a.pid === b.pid &&
    a.host === b.host &&
    a.threadId === b.threadId &&
    a.exitCode === b.exitCode &&
    a.signal === b.signal &&
    a.stopReason === b.stopReason
  );
}

/** The status bar text: "64 ranks · 63 stopped · 1 running". */
export function statusText(model: RankModel): string {
  const n = model.size;
  const parts = [`${n} ${n === 1 ? 'rank' : 'ranks'}`];
  for (const [state, set] of model.byState()) {
    parts.push(`${set.size} ${state}`);
  }
  return parts.join(' · ');
}

/** A longer summary for tooltips: the rank set in each state and the focus. */
export function statusTooltip(model: RankModel): string {
  const lines: string[] = [];
  for (const [state, set] of model.byState()) {
    lines.push(`${state}: ${set.toString()}`);
  }
  if (model.focus !== '') {
    lines.push(`focus: ${model.focus}`);
  }
  return lines.join('\n');
}

/** The description of a rank in the Ranks view: "stopped (breakpoint) · node2 · pid 4242". */
export function rankDescription(r: RankState): string {
  let state: string = r.state;
  if (r.state === 'stopped' && r.stopReason) {
    state = `stopped (${r.stopReason})`;
  } else if (r.state === 'exited') {
    if (r.signal) {
      state = `killed by ${r.signal}`;
    } else if (r.exitCode !== undefined) {
      state = `exited ${r.exitCode}`;
    }
  }
  const parts = [state];
  if (r.host) {
    parts.push(r.host);
  }
  if (r.pid > 0) {
    parts.push(`pid ${r.pid}`);
  }
  return parts.join(' · ');
}

/** A row of the Ranks view: one rank, or a page standing for ranks[page.start:page.end]. */
export type RankRow = { kind: 'rank'; state: RankState } | { kind: 'page'; ranks: readonly RankState[]; page: Page };

/**
 * The rows of the Ranks view under a page of ranks (sorted by rank), or at the top without one:
 * at most pageSize rows, the ranks themselves or ranges of them (see pageRows).
 */
export function rankRows(ranks: readonly RankState[], page?: Page, pageSize = defaultPageSize): RankRow[] {
  return pageRows(ranks, pageSize, page?.start, page?.end).map((r) => (r.kind === 'item' ? { kind: 'rank', state: r.item } : { kind: 'page', ranks, page: r }));
}

/** The ranks of a page row in MPIR notation: "0-127", "0-254:2". */
export function rankPageLabel(row: { ranks: readonly RankState[]; page: Page }): string {
  const { start, end } = row.page;
  const first = row.ranks[start].rank;
  const last = row.ranks[end - 1].rank;
  if (last - first === end - start - 1) {
    return first === last ? `${first}` : `${first}-${last}`;
  }
  const s = end - start <= 4096 ? RankSet.of(...row.ranks.slice(start, end).map((r) => r.rank)).toString() : '';
  // A page of scattered ranks would print as a long list: name its bounds instead.
  return s !== '' && s.length <= 24 ? s : `${first}…${last}`;
}

/**
 * The thread to name in a continue/pause/step request that acts on the focus: the DAP thread of
 * the lowest selected rank that can take the request (stopped ranks for steps and continue,
 * running ranks for pause), else of the lowest selected rank.
 */
export function representativeThread(
  selected: RankState[],
  action: 'continue' | 'pause' | 'next' | 'stepIn' | 'stepOut',
): number | undefined {
  const sorted = [...selected].sort((a, b) => a.rank - b.rank);
  const wanted = action === 'pause' ? 'running' : 'stopped';
  const pick = sorted.find((r) => r.state === wanted) ?? sorted.find((r) => r.state !== 'exited');
  return pick?.threadId;
}

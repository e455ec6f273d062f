// Helpers for the merged prefix tree of all ranks' stacks (hpcdap/parallelStacks): the merge
// by function the Parallel Stacks view shows by default, labels and stable ids for the view, a
// consistency check of an adapter's answer, and a reference merge of per-rank stack traces that
// tests use as the oracle for that answer.

import { ParallelStacksResponse, StackNode, StackSource } from './protocol';
import { RankSet } from './rankset';

/** One frame of a rank's stack, as DAP's stackTrace returns it. */
export interface FrameInfo {
  name: string;
  source?: StackSource;
  line?: number;
}

/** One rank's stack, innermost frame first (stackTrace order). */
export interface RankStack {
  rank: number;
  threadId: number;
  frames: FrameInfo[];
}

/** Calls f for every node, parents before children, with the node's depth (roots: 0). */
export function walk(roots: StackNode[], f: (node: StackNode, depth: number, parent?: StackNode) => void): void {
  const visit = (n: StackNode, depth: number, parent?: StackNode) => {
    f(n, depth, parent);
    for (const c of n.children ?? []) {
      visit(c, depth + 1, n);
    }
  };
  for (const r of roots) {
    visit(r, 0);
  }
}

/** How many nodes the tree has. */
export function countNodes(roots: StackNode[]): number {
  let n = 0;
  walk(roots, () => n++);
  return n;
}

/**
 * The frame identity used to merge and to key nodes: function, file and line (as the adapter
 * merges). DAP's stackTrace says line 0 for a frame without a line, where a tree node omits it.
 */
export function frameKey(f: FrameInfo): string {
  return `${f.name}\u0000${f.source?.path ?? f.source?.name ?? ''}\u0000${f.line || ''}`;
}

/** The function identity that a merge by function keys nodes on: name and file, not line. */
export function functionKey(f: FrameInfo): string {
  return `${f.name}\u0000${f.source?.path ?? f.source?.name ?? ''}`;
}

/**
 * Ids for every node that stay the same across refreshes while the frames on the path from the
 * root stay the same (as key names them), so that a tree view keeps what the user expanded.
 * Nodes whose paths are equal (which a well-formed tree never has) get a numeric suffix.
 */
export function stableIds(roots: StackNode[], key: (f: FrameInfo) => string = frameKey): Map<StackNode, string> {
  const ids = new Map<StackNode, string>();
  const used = new Set<string>();
  const assign = (nodes: StackNode[], prefix: string) => {
    for (const n of nodes) {
      let id = `${prefix}/${key(n)}`;
      for (let i = 2; used.has(id); i++) {
        id = `${prefix}/${key(n)}#${i}`;
      }
      used.add(id);
      ids.set(n, id);
      assign(n.children ?? [], id);
    }
  };
  assign(roots, '');
  return ids;
}

/** The label of a node: its function name, or a placeholder for a frame without a name. */
export function nodeLabel(n: StackNode): string {
  return n.name && n.name.trim() !== '' ? n.name : '??';
}

/** The description of a node: its rank set and count, "0-511,513-1023 · 1023 ranks". */
export function nodeDescription(n: StackNode): string {
  return `${n.ranks} · ${n.count} ${n.count === 1 ? 'rank' : 'ranks'}`;
}

/** Where a node's frame is: "ring.c:42", or "" without a source. */
export function nodeLocation(n: StackNode): string {
  const file = n.source?.name ?? (n.source?.path ? n.source.path.split('/').pop() : undefined);
  if (!file) {
    return '';
  }
  return n.line ? `${file}:${n.line}` : file;
}

/**
 * Which nodes a view opens expanded: every node of a small tree, and in a large one only the
 * first levels and the chains where all ranks of the parent continue into one child.
 */
export function initiallyExpanded(n: StackNode, depth: number, parent: StackNode | undefined, totalNodes: number): boolean {
  if ((n.children ?? []).length === 0) {
    return false;
  }
  if (totalNodes <= 200) {
    return true;
  }
  return depth < 2 || (parent !== undefined && parent.count === n.count);
}

/**
 * Checks the invariants every hpcdap/parallelStacks answer must hold and returns the problems
 * found (none for a well-formed tree): each rank set parses and matches its count; a child's
 * ranks are a subset of its parent's; siblings are disjoint; roots name at most total ranks;
 * frameLevel is not negative; and, given the ranks' threads, the representative thread belongs
 * to a rank of the node.
 */
export function checkStackTree(resp: ParallelStacksResponse, threadRank?: Map<number, number>): string[] {
  const problems: string[] = [];
  const sets = new Map<StackNode, RankSet>();
  walk(resp.roots, (n) => {
    const p = RankSet.tryParse(n.ranks ?? '', -1);
    if (!p.set) {
      problems.push(`node ${n.id} (${n.name}): ranks ${JSON.stringify(n.ranks)}: ${p.error}`);
      return;
    }
    sets.set(n, p.set);
    if (p.set.size !== n.count) {
      problems.push(`node ${n.id} (${n.name}): count ${n.count} but ranks ${n.ranks} name ${p.set.size}`);
    }
    if (!Number.isInteger(n.frameLevel) || n.frameLevel < 0) {
      problems.push(`node ${n.id} (${n.name}): bad frameLevel ${n.frameLevel}`);
    }
    if (threadRank) {
      const r = threadRank.get(n.threadId);
      if (r === undefined || !p.set.has(r)) {
        problems.push(`node ${n.id} (${n.name}): thread ${n.threadId} is not a thread of ranks ${n.ranks}`);
      }
    }
  });
  const checkSiblings = (nodes: StackNode[], parent: StackNode | undefined) => {
    let seen = RankSet.empty;
    for (const c of nodes) {
      const s = sets.get(c);
      if (!s) {
        continue;
      }
      if (!s.intersect(seen).isEmpty) {
        problems.push(`node ${c.id} (${c.name}): ranks ${s.intersect(seen)} also appear in a sibling`);
      }
      seen = seen.union(s);
      const ps = parent && sets.get(parent);
      if (ps && !s.isSubsetOf(ps)) {
        problems.push(`node ${c.id} (${c.name}): ranks ${s.minus(ps)} are not in its parent ${parent!.id}`);
      }
      checkSiblings(c.children ?? [], c);
    }
    if (!parent && seen.size > resp.total) {
      problems.push(`roots name ${seen.size} ranks but total is ${resp.total}`);
    }
  };
  checkSiblings(resp.roots, undefined);
  return problems;
}

/**
 * Merges per-rank stacks into the prefix tree that hpcdap/parallelStacks describes: outermost
 * frame first, one node per distinct frame (frameKey) after the same path, with the ranks that
 * pass through it. The representative of a node is its lowest rank. Node ids number the nodes
 * in depth-first order from 1; siblings are ordered by their lowest rank.
 */
export function mergeStacks(stacks: RankStack[], maxFrames = Infinity): ParallelStacksResponse {
  interface Building {
    frame: FrameInfo;
    ranks: number[];
    threadId: number;
    frameLevel: number;
    children: Map<string, Building>;
  }
  const roots = new Map<string, Building>();
  const sorted = [...stacks].sort((a, b) => a.rank - b.rank);
  for (const s of sorted) {
    const frames = s.frames.slice(0, Math.min(s.frames.length, maxFrames));
    let level = roots;
    for (let i = frames.length - 1; i >= 0; i--) {
      const f = frames[i];
      const key = frameKey(f);
      let b = level.get(key);
      if (!b) {
        b = { frame: f, ranks: [], threadId: s.threadId, frameLevel: i, children: new Map() };
        level.set(key, b);
      }
      b.ranks.push(s.rank);
      level = b.children;
    }
  }
  let nextId = 1;
  const build = (m: Map<string, Building>): StackNode[] =>
    [...m.values()]
      .sort((a, b) => a.ranks[0] - b.ranks[0])
      .map((b) => {
        const set = RankSet.of(...b.ranks);
        const node: StackNode = {
          id: nextId++,
          name: b.frame.name,
          ranks: set.toString(),
          count: set.size,
          threadId: b.threadId,
          frameLevel: b.frameLevel,
          children: [],
        };
        if (b.frame.source) {
          node.source = b.frame.source;
        }
        if (b.frame.line !== undefined) {
          node.line = b.frame.line;
        }
        node.children = build(b.children);
        return node;
      });
  return { total: stacks.length, roots: build(roots) };
}

/**
 * A canonical form of a tree for comparing two of them: ids, representatives and sibling order
 * are dropped, since different rank orders may pick them differently; nodes are named by key.
 */
export function canonicalTree(roots: StackNode[], key: (f: FrameInfo) => string = frameKey): unknown[] {
  const canon = (nodes: StackNode[]): unknown[] =>
    nodes
      .map((n) => ({ key: key(n), ranks: RankSet.parse(n.ranks, -1).toString(), children: canon(n.children ?? []) }))
      .sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : a.ranks < b.ranks ? -1 : 1));
  return canon(roots);
}

/** The ranks of a function-merged node that are at one line of it. */
export interface LineRanks {
  /** The line, absent for frames without one. */
  line?: number;
  ranks: string;
  count: number;
}

/**
 * A node of the tree the Parallel Stacks view shows. Merged by function, lines lists the ranks
 * at each line of the function, in line order; line, threadId and frameLevel are those of the
 * node's lowest rank.
 */
export interface ViewNode extends StackNode {
  children: ViewNode[];
  lines?: LineRanks[];
}

/**
 * Merges a tree merged by frame (function, file and line: the adapter's default answer) into
 * one merged by function, as STAT and DDT draw it: siblings of the same function become one
 * node with the union of their ranks, the ranks at each line (lines), and the merge of their
 * children. It is the tree hpcdap/parallelStacks returns with byFunction, plus the lines.
 * Siblings are ordered by their lowest rank and ids number the nodes depth-first from 1.
 */
export function mergeByFunction(roots: StackNode[]): ViewNode[] {
  const merge = (nodes: StackNode[]): ViewNode[] => {
    const groups = new Map<string, { nodes: StackNode[]; sets: RankSet[] }>();
    for (const n of nodes) {
      const k = functionKey(n);
      let g = groups.get(k);
      if (!g) {
        g = { nodes: [], sets: [] };
        groups.set(k, g);
      }
      g.nodes.push(n);
      g.sets.push(RankSet.tryParse(n.ranks ?? '', -1).set ?? RankSet.empty);
    }
    const out: { node: ViewNode; min: number }[] = [];
    for (const g of groups.values()) {
      let union = RankSet.empty;
      let rep = 0;
      const byLine = new Map<number | undefined, RankSet>();
      g.sets.forEach((set, i) => {
        union = union.union(set);
        if (set.min >= 0 && (g.sets[rep].min < 0 || set.min < g.sets[rep].min)) {
          rep = i;
        }
        const line = g.nodes[i].line || undefined;
        byLine.set(line, (byLine.get(line) ?? RankSet.empty).union(set));
      });
      const r = g.nodes[rep];
      const node: ViewNode = {
        id: 0,
        name: r.name,
        ranks: union.toString(),
        count: union.size,
        threadId: r.threadId,
        frameLevel: r.frameLevel,
        children: merge(g.nodes.flatMap((n) => n.children ?? [])),
        lines: [...byLine.entries()]
          .sort((a, b) => (a[0] ?? -1) - (b[0] ?? -1))
          .map(([line, set]) => (line === undefined ? { ranks: set.toString(), count: set.size } : { line, ranks: set.toString(), count: set.size })),
      };
      if (r.source) {
        node.source = r.source;
      }
      if (r.line !== undefined) {
        node.line = r.line;
      }
      out.push({ node, min: union.min });
    }
    return out.sort((a, b) => a.min - b.min).map((x) => x.node);
  };
  const merged = merge(roots);
  let next = 1;
  walk(merged, (n) => {
    n.id = next++;
  });
  return merged;
}

/**
 * The lines of a function-merged node for its row: "line 42" when all its ranks are at one
 * line, else each line with its ranks, "lines 42 (0), 45 (1-3)", at most max of them and then
 * how many more; "" for a node without lines.
 */
export function nodeLines(n: ViewNode, max = 4): string {
  const lines = (n.lines ?? []).filter((l) => l.line !== undefined);
  if (lines.length === 0) {
    return '';
  }
  if (lines.length === 1 && lines[0].count === n.count) {
    return `line ${lines[0].line}`;
  }
  const shown = lines.slice(0, max).map((l) => `${l.line} (${l.ranks})`);
  const more = lines.length - shown.length;
  return `lines ${shown.join(', ')}${more > 0 ? `, +${more} more` : ''}`;
}

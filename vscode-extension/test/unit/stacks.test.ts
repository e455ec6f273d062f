import assert from 'node:assert/strict';
import { test } from 'node:test';
import { StackNode } from '../../src/core/protocol';
import { RankSet } from '../../src/core/rankset';
import { pageRows } from '../../src/core/paging';
import {
  FrameInfo,
  RankStack,
  ViewNode,
  canonicalTree,
  checkStackTree,
  countNodes,
  frameKey,
  functionKey,
  initiallyExpanded,
  mergeByFunction,
  mergeStacks,
  nodeDescription,
  nodeLabel,
  nodeLines,
  nodeLocation,
  stableIds,
  walk,
} from '../../src/core/stacks';

function rng(seed: number): () => number {
  let x = seed >>> 0;
  return () => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return x / 2 ** 32;
  };
}

/** Random stacks drawn from a small call graph, so that ranks share prefixes and diverge. */
function randomStacks(seed: number, nranks: number): RankStack[] {
  const rand = rng(seed);
  const fns: FrameInfo[] = [
    { name: 'compute', source: { name: 'ring.c', path: '/src/ring.c' }, line: 12 },
    { name: 'compute', source: { name: 'ring.c', path: '/src/ring.c' }, line: 14 },
    { name: 'exchange', source: { name: 'ring.c', path: '/src/ring.c' }, line: 30 },
    { name: 'wait_all', source: { name: 'ring.c', path: '/src/ring.c' }, line: 41 },
    { name: 'nanosleep' },
    { name: 'step', source: { name: 'solver.f90', path: '/src/solver.f90' }, line: 7 },
  ];
  const main: FrameInfo = { name: 'main', source: { name: 'ring.c', path: '/src/ring.c' }, line: 60 };
  return Array.from({ length: nranks }, (_, rank) => {
    const depth = 1 + Math.floor(rand() * 4);
    const outer = [main];
    for (let i = 0; i < depth; i++) {
      outer.push(fns[Math.floor(rand() * (rand() < 0.7 ? 2 : fns.length))]);
    }
    return { rank, threadId: 100 + rank, frames: outer.reverse() };
  });
}

test('mergeStacks: every node names exactly the ranks whose stack starts with its path', () => {
  for (let seed = 1; seed <= 40; seed++) {
    const stacks = randomStacks(seed, 1 + (seed % 37));
    const tree = mergeStacks(stacks);
    assert.equal(tree.total, stacks.length);
    const paths = new Map<StackNode, string[]>();
    walk(tree.roots, (n, _d, parent) => paths.set(n, [...(parent ? paths.get(parent)! : []), frameKey(n)]));
    let nodes = 0;
    walk(tree.roots, (n) => {
      nodes++;
      const path = paths.get(n)!;
      // Brute force: the ranks whose outermost-first frames begin with the path.
      const want = stacks
        .filter((s) => {
          const outer = [...s.frames].reverse().map(frameKey);
          return path.every((k, i) => outer[i] === k);
        })
        .map((s) => s.rank);
      assert.equal(n.ranks, RankSet.of(...want).toString(), `seed ${seed}: node ${path.join(' > ')}`);
      assert.equal(n.count, want.length);
      // The representative frame is the node's frame in its thread's stack.
      const rep = stacks.find((s) => s.threadId === n.threadId)!;
      assert.ok(want.includes(rep.rank));
      assert.equal(frameKey(rep.frames[n.frameLevel]), frameKey(n), `seed ${seed}: representative frame of ${n.name}`);
    });
    // The number of nodes is the number of distinct prefixes.
    const prefixes = new Set<string>();
    for (const s of stacks) {
      const outer = [...s.frames].reverse().map(frameKey);
      outer.forEach((_, i) => prefixes.add(outer.slice(0, i + 1).join('\u0001')));
    }
    assert.equal(nodes, prefixes.size, `seed ${seed}`);
    assert.equal(countNodes(tree.roots), nodes);
    assert.deepEqual(checkStackTree(tree, new Map(stacks.map((s) => [s.threadId, s.rank]))), [], `seed ${seed}`);
  }
});

test('mergeStacks: maxFrames keeps the innermost frames', () => {
  const stacks = randomStacks(3, 8);
  const tree = mergeStacks(stacks, 2);
  walk(tree.roots, (_n, depth) => assert.ok(depth < 2));
  const inner = mergeStacks(stacks.map((s) => ({ ...s, frames: s.frames.slice(0, 2) })));
  assert.deepEqual(canonicalTree(tree.roots), canonicalTree(inner.roots));
});

test('canonicalTree ignores ids, representatives and sibling order', () => {
  const stacks = randomStacks(5, 16);
  const a = mergeStacks(stacks);
  const b = mergeStacks([...stacks].reverse().map((s) => ({ ...s, threadId: s.threadId + 1000 })));
  assert.deepEqual(canonicalTree(a.roots), canonicalTree(b.roots));
  const c = mergeStacks(stacks.slice(1));
  assert.notDeepEqual(canonicalTree(a.roots), canonicalTree(c.roots));
});

test('checkStackTree finds broken trees', () => {
  const good = (): { total: number; roots: StackNode[] } => ({
    total: 4,
    roots: [
      {
        id: 1, name: 'main', ranks: '0-3', count: 4, threadId: 1, frameLevel: 1,
        children: [
          { id: 2, name: 'compute', ranks: '1-3', count: 3, threadId: 2, frameLevel: 0, children: [] },
          { id: 3, name: 'wait', ranks: '0', count: 1, threadId: 1, frameLevel: 0, children: [] },
        ],
      },
    ],
  });
  const threads = new Map([[1, 0], [2, 1], [3, 2], [4, 3]]);
  assert.deepEqual(checkStackTree(good(), threads), []);
  const cases: [string, (t: ReturnType<typeof good>) => void, RegExp][] = [
    ['count', (t) => (t.roots[0].count = 5), /count 5 but ranks 0-3 name 4/],
    ['syntax', (t) => (t.roots[0].children[0].ranks = '3-1'), /reversed/],
    ['subset', (t) => (t.roots[0].ranks = '0-2') && (t.roots[0].count = 3), /ranks 3 are not in its parent/],
    ['siblings', (t) => (t.roots[0].children[1].ranks = '0-1') && (t.roots[0].children[1].count = 2), /ranks 1 also appear in a sibling/],
    ['total', (t) => (t.total = 3), /total is 3/],
    ['frameLevel', (t) => (t.roots[0].frameLevel = -1), /bad frameLevel/],
    ['thread', (t) => (t.roots[0].children[0].threadId = 1), /thread 1 is not a thread of ranks 1-3/],
  ];
  for (const [name, breakIt, want] of cases) {
    const t = good();
    breakIt(t);
    const problems = checkStackTree(t, threads);
    assert.ok(problems.some((p) => want.test(p)), `${name}: ${problems.join('; ')}`);
  }
});

test('stableIds: unique, and unchanged when the tree is fetched again', () => {
  const stacks = randomStacks(11, 64);
  const a = mergeStacks(stacks);
  const b = mergeStacks([...stacks].reverse());
  const ida = stableIds(a.roots);
  const idb = stableIds(b.roots);
  assert.equal(new Set(ida.values()).size, countNodes(a.roots));
  const byId = (ids: Map<StackNode, string>) => new Map([...ids].map(([n, id]) => [id, n.ranks]));
  assert.deepEqual(byId(ida), byId(idb));
  // Duplicate siblings (a malformed tree) still get distinct ids.
  const dup: StackNode = { id: 9, name: 'f', ranks: '0', count: 1, threadId: 1, frameLevel: 0, children: [] };
  assert.equal(new Set(stableIds([dup, { ...dup, id: 10 }]).values()).size, 2);
});

test('labels and expansion', () => {
  const n: StackNode = { id: 1, name: 'compute', source: { path: '/src/ring.c' }, line: 42, ranks: '0-511,513-1023', count: 1023, threadId: 17, frameLevel: 2, children: [] };
  assert.equal(nodeDescription(n), '0-511,513-1023 · 1023 ranks');
  assert.equal(nodeDescription({ ...n, ranks: '5', count: 1 }), '5 · 1 rank');
  assert.equal(nodeLocation(n), 'ring.c:42');
  assert.equal(nodeLocation({ ...n, source: undefined }), '');
  const parent = { ...n, children: [n] };
  assert.equal(initiallyExpanded(n, 0, undefined, 10), false, 'a leaf does not expand');
  assert.equal(initiallyExpanded(parent, 5, undefined, 10), true, 'a small tree expands fully');
  assert.equal(initiallyExpanded(parent, 5, { ...n, count: 2000 }, 1000), false, 'deep splits of a large tree stay closed');
  assert.equal(initiallyExpanded(parent, 5, parent, 1000), true, 'chains that keep all ranks open');
});

test('mergeByFunction: the tree merged with lines dropped, and the ranks at each line', () => {
  for (let seed = 1; seed <= 40; seed++) {
    const stacks = randomStacks(seed, 1 + ((seed * 7) % 53));
    const merged = mergeByFunction(mergeStacks(stacks).roots);
    // The same tree as merging stacks whose frames have no line, named by function.
    const lineless = mergeStacks(stacks.map((s) => ({ ...s, frames: s.frames.map((f) => ({ name: f.name, source: f.source })) })));
    assert.deepEqual(canonicalTree(merged, functionKey), canonicalTree(lineless.roots, functionKey), `seed ${seed}`);
    assert.deepEqual(checkStackTree({ total: stacks.length, roots: merged }, new Map(stacks.map((s) => [s.threadId, s.rank]))), [], `seed ${seed}`);
    // Brute force: the ranks whose function path begins with the node's, by line of its frame.
    const paths = new Map<ViewNode, string[]>();
    walk(merged, (n, _d, parent) => paths.set(n as ViewNode, [...(parent ? paths.get(parent as ViewNode)! : []), functionKey(n)]));
    const ids: number[] = [];
    walk(merged, (node) => {
      const n = node as ViewNode;
      ids.push(n.id);
      const path = paths.get(n)!;
      const byLine = new Map<number | undefined, number[]>();
      for (const s of stacks) {
        const outer = [...s.frames].reverse();
        if (outer.length >= path.length && path.every((k, i) => functionKey(outer[i]) === k)) {
          const line = outer[path.length - 1].line;
          byLine.set(line, [...(byLine.get(line) ?? []), s.rank]);
        }
      }
      const want = [...byLine.entries()]
        .sort((a, b) => (a[0] ?? -1) - (b[0] ?? -1))
        .map(([line, ranks]) => ({ line, ranks: RankSet.of(...ranks).toString(), count: ranks.length }));
      assert.deepEqual(
        n.lines!.map((l) => ({ line: l.line, ranks: l.ranks, count: l.count })),
        want,
        `seed ${seed}: lines of ${path.join(' > ')}`,
      );
      // The node's line is its lowest rank's.
      const lowest = RankSet.parse(n.ranks, -1).min;
      assert.equal(n.line, want.find((l) => RankSet.parse(l.ranks, -1).has(lowest))!.line);
    });
    assert.deepEqual(ids, ids.map((_, i) => i + 1), 'ids number the nodes depth-first');
  }
});

test('mergeByFunction: one main over 1,024 ranks at two lines, and a bounded description', () => {
  const file = { name: 'ring.c', path: '/src/ring.c' };
  const stacks: RankStack[] = Array.from({ length: 1024 }, (_, rank) => ({
    rank,
    threadId: 100 + rank,
    frames: [
      { name: 'compute', source: file, line: rank % 2 ? 45 : 42 },
      { name: 'main', source: file, line: rank < 512 ? 60 : 61 },
    ],
  }));
  const byLine = mergeStacks(stacks).roots;
  assert.deepEqual(byLine.map((n) => `${n.name} ${n.ranks}`), ['main 0-511', 'main 512-1023'], 'merged by line, main shows twice');
  const [main, ...rest] = mergeByFunction(byLine);
  assert.deepEqual(rest, []);
  assert.equal(`${nodeLabel(main)} ${nodeDescription(main)} · ${nodeLines(main)}`, 'main 0-1023 · 1024 ranks · lines 60 (0-511), 61 (512-1023)');
  assert.equal(main.children.length, 1);
  const compute = main.children[0];
  assert.equal(`${nodeLabel(compute)} ${nodeDescription(compute)} · ${nodeLines(compute)}`, 'compute 0-1023 · 1024 ranks · lines 42 (0-1022:2), 45 (1-1023:2)');
  assert.equal(compute.threadId, 100, 'the representative is rank 0');
  // Every rank at its own line: the description names four of them and how many more.
  const scattered = mergeByFunction(mergeStacks(stacks.map((s) => ({ ...s, frames: [{ ...s.frames[0], line: 1000 + s.rank }, s.frames[1]] }))).roots);
  const c = scattered[0].children[0];
  assert.equal(c.lines!.length, 1024);
  assert.equal(nodeLines(c), 'lines 1000 (0), 1001 (1), 1002 (2), 1003 (3), +1020 more');
  assert.equal(nodeLines({ ...c, lines: [{ line: 7, ranks: '0-1023', count: 1024 }] }), 'line 7');
  assert.equal(nodeLines({ ...c, lines: [{ ranks: '0-1023', count: 1024 }] }), '');
  // Merged by line the 1,024 nodes of that level come in pages of 128.
  const level = mergeStacks(stacks.map((s) => ({ ...s, frames: [{ ...s.frames[0], line: 1000 + s.rank }, { ...s.frames[1], line: 60 }] }))).roots[0].children;
  assert.equal(level.length, 1024);
  const rows = pageRows(level, 128);
  assert.equal(rows.length, 8);
  for (const r of rows) {
    assert.equal(r.kind, 'page');
    if (r.kind === 'page') {
      assert.equal(pageRows(level, 128, r.start, r.end).length, 128);
    }
  }
});

test('stableIds by function: unchanged when the ranks move to other lines', () => {
  const stacks = randomStacks(13, 64);
  const moved = stacks.map((s) => ({ ...s, frames: s.frames.map((f) => (f.line ? { ...f, line: f.line + 1 } : f)) }));
  const a = stableIds(mergeByFunction(mergeStacks(stacks).roots), functionKey);
  const b = stableIds(mergeByFunction(mergeStacks(moved).roots), functionKey);
  assert.deepEqual([...a.values()].sort(), [...b.values()].sort());
  assert.notDeepEqual([...stableIds(mergeStacks(stacks).roots).values()].sort(), [...stableIds(mergeStacks(moved).roots).values()].sort());
});

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { test } from 'node:test';
import { RankSet, checkRankSetSyntax } from '../../src/core/rankset';
import { goBinary, repoRoot } from '../support/paths';

test('parse: compressed form of MPIR subset notation', () => {
  const cases: [string, number, string][] = [
    ['', 8, ''],
    ['3', 8, '3'],
    ['1 2 4-6', 8, '1-2,4-6'],
    ['1,2,4-6', 8, '1-2,4-6'],
    ['7-$max:2', 16, '7-15:2'],
    ['1 2 4-6 7-$max:2', 12, '1-2,4-7,9,11'],
    ['$max', 4, '3'],
    ['all', 4, '0-3'],
    ['*', 3, '0-2'],
    ['0-3 2-5', 8, '0-5'],
    ['5 1 3 2 4', 8, '1-5'],
    ['0-511,513-1023', 1024, '0-511,513-1023'],
    ['10-20:5', -1, '10-20:5'],
    ['0-62:2', 64, '0-62:2'],
    ['0 2 4', 8, '0,2,4'],
    ['1,3', 8, '1,3'],
    ['0-3,8,12,16,20,31', -1, '0-3,8-20:4,31'],
    ['0 3 6 9 11 13 15 17', -1, '0-9:3,11-17:2'],
    ['0,2,4,6-7', -1, '0,2,4,6-7'],
    ['0,2,4,6,8-9', -1, '0-6:2,8-9'],
    ['0-9 20-40:10 41-50', -1, '0-9,20,30,40-50'],
    ['0-56:8 1-57:8', -1, '0-56:8,1-57:8'],
    ['0-3,16-19,32-35,48-51', -1, '0-3,16-19,32-35,48-51'],
    ['0-1,4-5', -1, '0-1,4-5'],
    ['0-3 8-40:8 9-41:8', -1, '0-3,8-40:8,9-41:8'],
    ['0-248:8 1-249:8 256-300', 1024, '0-248:8,1-249:8,256-300'],
    ['  4  ,, 6 ', 8, '4,6'],
  ];
  for (const [s, size, want] of cases) {
    assert.equal(RankSet.parse(s, size).toString(), want, `parse(${JSON.stringify(s)}, ${size})`);
  }
});

test('toString stays within what parse expands from strided items', () => {
  const maxExpand = 1 << 22; // the bound of both packages
  // Pairs of ranks four apart, as many as parse expands and one more pair: the strided items
  // stop at the bound and the last pair is listed, as the Go package prints it.
  const lastLo = 4 * (maxExpand / 2);
  const pairs = RankSet.parse(`0-${lastLo}:4`, -1).union(RankSet.parse(`1-${lastLo + 1}:4`, -1));
  const out = pairs.toString();
  const last = 4 * (maxExpand / 2 - 1);
  assert.equal(out, `0-${last}:4,1-${last + 1}:4,${last + 4}-${last + 5}`);
  assert.ok(RankSet.parse(out, -1).equals(pairs));
});

test('parse: errors name the problem', () => {
  const cases: [string, number, string][] = [
    ['8', 8, 'out of range'],
    ['$max', -1, 'needs the job size'],
    ['all', -1, 'needs the job size'],
    ['5-3', 8, 'reversed'],
    ['a', 8, 'bad rank'],
    ['-3', 8, 'bad rank'],
    ['1-', 8, 'bad rank'],
    ['1-4:0', 8, 'bad stride'],
    ['4:2', 8, 'stride needs a range'],
    ['99999999999', -1, 'bad rank'],
    ['0-2000000000:2', -1, 'more than'],
    ['$max', 0, 'no ranks'],
  ];
  for (const [s, size, want] of cases) {
    assert.throws(() => RankSet.parse(s, size), (e: Error) => e.message.includes(want), `parse(${JSON.stringify(s)}, ${size}) should fail with ${want}`);
  }
});

/** A random generator with a fixed seed, so a failure reproduces. */
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

test('set algebra agrees with a plain bitmap', () => {
  const n = 200;
  const rand = rng(1);
  const random = (): [boolean[], RankSet] => {
    const bits = Array.from({ length: n }, () => rand() < 1 / 3);
    return [bits, RankSet.of(...bits.flatMap((b, i) => (b ? [i] : [])))];
  };
  const check = (name: string, bits: boolean[], s: RankSet) => {
    bits.forEach((b, r) => assert.equal(s.has(r), b, `${name}: has(${r}) in ${s}`));
    assert.equal(s.size, bits.filter(Boolean).length, `${name}: size of ${s}`);
    assert.ok(RankSet.parse(s.toString(), n).equals(s), `${name}: ${s} parses back`);
    assert.deepEqual(s.ranks(), bits.flatMap((b, i) => (b ? [i] : [])), `${name}: ranks()`);
  };
  for (let i = 0; i < 300; i++) {
    const [a, sa] = random();
    const [b, sb] = random();
    check('a', a, sa);
    check('union', a.map((x, r) => x || b[r]), sa.union(sb));
    check('intersect', a.map((x, r) => x && b[r]), sa.intersect(sb));
    check('minus', a.map((x, r) => x && !b[r]), sa.minus(sb));
    assert.equal(sa.intersect(sb).isSubsetOf(sa), true);
  }
});

test('accessors', () => {
  const s = RankSet.parse('3-5,9', 10);
  assert.deepEqual([s.min, s.max, s.size, s.isEmpty], [3, 9, 4, false]);
  assert.deepEqual([RankSet.empty.min, RankSet.empty.max, RankSet.empty.isEmpty], [-1, -1, true]);
  assert.equal(RankSet.all(4).minus(RankSet.of(2)).union(RankSet.of(7)).toString(), '0-1,3,7');
  assert.ok(RankSet.range(5, 4).isEmpty);
  assert.equal(RankSet.range(-3, 1).toString(), '0-1');
});

test('syntax check for a job of unknown size accepts $max and all', () => {
  for (const ok of ['all', '*', '0-$max:2', '$max', '1 2 4-6 7-$max:2', '$max-$max', '0-3,8']) {
    assert.equal(checkRankSetSyntax(ok), undefined, ok);
  }
  for (const [bad, want] of [['5-3', 'reversed'], ['x', 'bad rank'], ['4:2', 'stride'], ['1-4:0', 'bad stride'], ['99999999999', 'bad rank']]) {
    assert.match(checkRankSetSyntax(bad) ?? '', new RegExp(want), bad);
  }
});

/**
 * The Go package is the definition of the notation: random strings (valid and broken, with
 * every separator and symbol) and sizes are parsed by both, and must agree on whether they
 * parse and on the set they name.
 */
test('parse agrees with the Go rankset package', () => {
  const rand = rng(7);
  const pick = <T>(xs: T[]) => xs[Math.floor(rand() * xs.length)];
  const atoms = ['0', '1', '2', '3', '7', '15', '63', '64', '1023', '$max', 'all', '*', 'x', '', '00', '2147483647', '2147483648', '99999999999'];
  const queries: { s: string; size: number }[] = [];
  for (const s of ['1 2 4-6 7-$max:2', '0-511,513-1023', '4:2', '1-4:+2', '1-4:-1', '0-3:99999999999999999999', '0-3:9223372036854775807', '0-2000000000:2', '-3', '1-2-3', '3-$max', '$max-3', 'all,5', ' \t\n,']) {
    for (const size of [-1, 0, 1, 4, 16, 1024]) {
      queries.push({ s, size });
    }
  }
  for (let i = 0; i < 2000; i++) {
    const items: string[] = [];
    const k = 1 + Math.floor(rand() * 4);
    for (let j = 0; j < k; j++) {
      let item = pick(atoms);
      if (rand() < 0.5) {
        item += '-' + pick(atoms);
      }
      if (rand() < 0.25) {
        item += ':' + pick(['1', '2', '3', '0', 'x', '', '-2', '+3', '1000']);
      }
      items.push(item);
    }
    const seps = [' ', ',', '\t', '\n', ', ', '  '];
    queries.push({ s: items.map((x, j) => (j ? pick(seps) : '') + x).join(''), size: pick([-1, 0, 1, 4, 16, 64, 1024, 4096]) });
  }
  // Sets of evenly spaced single ranks, runs and ranges mixed, which print in strided form.
  for (let i = 0; i < 500; i++) {
    const items: string[] = [];
    const k = 1 + Math.floor(rand() * 5);
    for (let j = 0; j < k; j++) {
      const lo = Math.floor(rand() * 200);
      const hi = lo + Math.floor(rand() * 120);
      items.push(rand() < 0.7 ? `${lo}-${hi}:${2 + Math.floor(rand() * 6)}` : rand() < 0.5 ? `${lo}` : `${lo}-${lo + Math.floor(rand() * 4)}`);
    }
    queries.push({ s: items.join(' '), size: pick([-1, 1024]) });
  }
  // Evenly spaced ranges of one width (blocks of ranks per node), which print in strided form.
  for (let i = 0; i < 300; i++) {
    const period = 2 + Math.floor(rand() * 16);
    const width = 1 + Math.floor(rand() * (period - 1));
    const lo = Math.floor(rand() * 50);
    const blocks = 1 + Math.floor(rand() * 40);
    const items: string[] = [];
    for (let k = 0; k < width; k++) {
      items.push(`${lo + k}-${lo + k + (blocks - 1) * period}:${period}`);
    }
    if (rand() < 0.3) {
      items.push(`${lo + blocks * period + Math.floor(rand() * 10)}`);
    }
    // A rank in a gap widens one block, which breaks the run there.
    const widened = rand() < 0.3 ? ` ${lo + Math.floor(rand() * blocks) * period + width}` : '';
    queries.push({ s: items.join(' ') + widened, size: pick([-1, 4096]) });
  }
  const go = spawnSync(goBinary(), ['run', './vscode-extension/test/testdata/ranksetoracle'], {
    cwd: repoRoot,
    input: queries.map((q) => JSON.stringify(q)).join('\n') + '\n',
    encoding: 'utf8',
    maxBuffer: 64 << 20,
  });
  assert.equal(go.status, 0, `go run ranksetoracle failed: ${go.stderr}`);
  const answers = go.stdout.trim().split('\n').map((l) => JSON.parse(l));
  assert.equal(answers.length, queries.length);
  let parsed = 0;
  queries.forEach((q, i) => {
    const want = answers[i];
    const got = RankSet.tryParse(q.s, q.size);
    const where = `parse(${JSON.stringify(q.s)}, ${q.size})`;
    assert.equal(got.set !== undefined, want.ok, `${where}: Go says ${want.ok ? want.set : want.err}, TS says ${got.set ?? got.error}`);
    if (want.ok) {
      parsed++;
      assert.equal(got.set!.toString(), want.set, where);
      assert.equal(got.set!.size, want.len, where);
    }
  });
  // Both outcomes must be well represented, or the comparison proves little.
  assert.ok(parsed > queries.length / 10 && parsed < queries.length * 0.9, `${parsed} of ${queries.length} parsed`);
});

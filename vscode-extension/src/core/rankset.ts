// Sets of MPI ranks in the MPIR subset notation, with the semantics of hpcdap's Go package
// `rankset`: the adapter and the extension must agree on what "0-3 8" or "1-$max:2" names.
//
// The notation is a list of items separated by spaces, commas, tabs or newlines. An item is a
// rank ("5"), an inclusive range ("4-6"), or a range with a stride ("0-$max:2"). "$max" is the
// largest rank of the job; "all" and "*" name every rank. Sets print compactly, as
// "0-511,513-1023", "0-62:2" or "0-56:8,1-57:8", which parses back to the same set.

/** An inclusive range of ranks. */
interface Interval {
  lo: number;
  hi: number;
}

/** Bounds how many ranks strided items may produce in one parse, as the Go package does. */
const maxExpand = 1 << 22;
const maxRank = 2 ** 31 - 1;

/** An error in rank-set notation; the message names the input and the offending item. */
export class RankSetError extends Error {}

/** An immutable set of non-negative ranks, kept as sorted, disjoint, non-adjacent intervals. */
export class RankSet {
  private constructor(private readonly iv: readonly Interval[]) {}

  /** The empty set. */
  static readonly empty = new RankSet([]);

  /**
   * Parses a set in MPIR subset notation. size is the number of ranks of the job: "$max" is
   * size-1, "all" every rank, and a rank ≥ size is an error. With size < 0 the job size is
   * unknown: ranks are not range-checked, and "$max" and "all" are errors.
   */
  static parse(s: string, size: number): RankSet {
    const fields = s.split(/[ ,\t\n]+/).filter((f) => f !== '');
    const ivs: Interval[] = [];
    let expanded = 0;
    for (const f of fields) {
      if (f === 'all' || f === '*') {
        if (size < 0) {
          throw new RankSetError(`rankset: parse ${quote(s)}: ${quote(f)} needs the job size`);
        }
        if (size > 0) {
          ivs.push({ lo: 0, hi: size - 1 });
        }
        continue;
      }
      let item: { lo: number; hi: number; stride: number };
      try {
        item = parseItem(f, size);
      } catch (e) {
        throw new RankSetError(`rankset: parse ${quote(s)}: ${(e as Error).message}`);
      }
      if (item.stride === 1) {
        ivs.push({ lo: item.lo, hi: item.hi });
        continue;
      }
      const n = Math.floor((item.hi - item.lo) / item.stride) + 1;
      expanded += n;
      if (expanded > maxExpand) {
        throw new RankSetError(`rankset: parse ${quote(s)}: strided items name more than ${maxExpand} ranks`);
      }
      for (let r = item.lo; r <= item.hi; r += item.stride) {
        ivs.push({ lo: r, hi: r });
      }
    }
    return RankSet.normalize(ivs);
  }

  /** Like parse, but returns the error message instead of throwing. */
  static tryParse(s: string, size: number): { set?: RankSet; error?: string } {
    try {
      return { set: RankSet.parse(s, size) };
    } catch (e) {
      return { error: (e as Error).message };
    }
  }

  /** The set of the given ranks; negative ranks are ignored. */
  static of(...ranks: number[]): RankSet {
    return RankSet.normalize(ranks.filter((r) => r >= 0).map((r) => ({ lo: r, hi: r })));
  }

  /** The ranks lo … hi inclusive (empty if hi < lo). */
  static range(lo: number, hi: number): RankSet {
    if (hi < lo || hi < 0) {
      return RankSet.empty;
    }
    return new RankSet([{ lo: Math.max(lo, 0), hi }]);
  }

  /** Every rank of a job of the given size. */
  static all(size: number): RankSet {
    return RankSet.range(0, size - 1);
  }

  /** How many ranks the set holds. */
  get size(): number {
    let n = 0;
    for (const v of this.iv) {
      n += v.hi - v.lo + 1;
    }
    return n;
  }

  /** Whether the set holds no rank. */
  get isEmpty(): boolean {
    return this.iv.length === 0;
  }

  /** The smallest rank, or -1 for the empty set. */
  get min(): number {
    return this.iv.length ? this.iv[0].lo : -1;
  }

  /** The largest rank, or -1 for the empty set. */
  get max(): number {
    return this.iv.length ? this.iv[this.iv.length - 1].hi : -1;
  }

  /** Whether rank r is in the set. */
  has(r: number): boolean {
    let lo = 0;
    let hi = this.iv.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (this.iv[mid].hi >= r) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    return lo < this.iv.length && this.iv[lo].lo <= r;
  }

  /** The ranks in increasing order. */
  ranks(): number[] {
    const out: number[] = [];
    for (const v of this.iv) {
      for (let r = v.lo; r <= v.hi; r++) {
        out.push(r);
      }
    }
    return out;
  }

  /** The ranks in s or t. */
  union(t: RankSet): RankSet {
    return RankSet.normalize([...this.iv, ...t.iv]);
  }

  /** The ranks in both s and t. */
  intersect(t: RankSet): RankSet {
    const out: Interval[] = [];
    let i = 0;
    let j = 0;
    while (i < this.iv.length && j < t.iv.length) {
      const a = this.iv[i];
      const b = t.iv[j];
      const lo = Math.max(a.lo, b.lo);
      const hi = Math.min(a.hi, b.hi);
      if (lo <= hi) {
        out.push({ lo, hi });
      }
      if (a.hi < b.hi) {
        i++;
      } else {
        j++;
      }
    }
    return new RankSet(out);
  }

  /** The ranks in s that are not in t. */
  minus(t: RankSet): RankSet {
    const out: Interval[] = [];
    let j = 0;
    for (const a of this.iv) {
      let lo = a.lo;
      while (j < t.iv.length && t.iv[j].hi < lo) {
        j++;
      }
      let k = j;
      while (k < t.iv.length && t.iv[k].lo <= a.hi) {
        if (t.iv[k].lo > lo) {
          out.push({ lo, hi: t.iv[k].lo - 1 });
        }
        lo = t.iv[k].hi + 1;
        k++;
      }
      if (lo <= a.hi) {
        out.push({ lo, hi: a.hi });
      }
    }
    return new RankSet(out);
  }

  /** Whether both sets hold the same ranks. */
  equals(t: RankSet): boolean {
    return this.iv.length === t.iv.length && this.iv.every((v, i) => v.lo === t.iv[i].lo && v.hi === t.iv[i].hi);
  }

  /** Whether every rank of this set is in t. */
  isSubsetOf(t: RankSet): boolean {
    return this.minus(t).isEmpty;
  }

  /** Builds a set from intervals in any order, merging overlapping and adjacent ones. */
  private static normalize(ivs: Interval[]): RankSet {
    if (ivs.length === 0) {
      return RankSet.empty;
    }
    const sorted = [...ivs].sort((x, y) => x.lo - y.lo);
    const out: Interval[] = [{ ...sorted[0] }];
    for (const v of sorted.slice(1)) {
      const last = out[out.length - 1];
      if (v.lo <= last.hi + 1) {
        if (v.hi > last.hi) {
          last.hi = v.hi;
        }
        continue;
      }
      out.push({ ...v });
    }
    return new RankSet(out);
  }

  /**
   * The compact MPIR form, which parse reads back to the same set (and the Go package prints
   * the same): ranges as "lo-hi", and a run of evenly spaced single ranks as "lo-hi:stride"
   * where that is shorter than listing them ("0,2,4,…,62" prints as "0-62:2"), as in
   * "0-3,8-20:4,31". Evenly spaced ranges of one width print as one strided item per offset
   * in the range where that is shorter ("0-1,8-9,…,56-57" prints as "0-56:8,1-57:8"). Runs are
   * taken greedily from the lowest rank; a run not shorter in strided form is listed whole (a
   * run starting inside it would not be shorter either). The empty set prints as "".
   */
  toString(): string {
    const items: string[] = [];
    let strided = 0; // ranks printed in strided items, which parse bounds by maxExpand
    const iv = this.iv;
    const printed = (v: Interval) => (v.lo === v.hi ? `${v.lo}` : `${v.lo}-${v.hi}`);
    const digits = (x: number) => String(x).length;
    for (let i = 0; i < iv.length; ) {
      const v = iv[i];
      const width = v.hi - v.lo + 1;
      const sameWidth = (w: Interval) => w.hi - w.lo + 1 === width;
      let end = i + 1;
      if (end < iv.length && sameWidth(iv[end])) {
        const period = iv[end].lo - v.lo;
        end++;
        while (end < iv.length && sameWidth(iv[end]) && iv[end].lo - iv[end - 1].lo === period) {
          end++;
        }
        // Parse expands at most maxExpand ranks from strided items: a longer run is cut.
        end = Math.min(end, i + Math.floor((maxExpand - strided) / width));
        const n = end - i;
        if (n > 1) {
          let listed = n - 1;
          for (let k = i; k < end; k++) {
            listed += digits(iv[k].lo) + (iv[k].hi === iv[k].lo ? 0 : 1 + digits(iv[k].hi));
          }
          // The strided form's length, measured up to the listed one's (not printed to be measured).
          const last = iv[end - 1].lo;
          let stridedLen = width - 1;
          for (let k = 0; k < width && stridedLen < listed; k++) {
            stridedLen += digits(v.lo + k) + 1 + digits(last + k) + 1 + digits(period);
          }
          if (stridedLen < listed) {
            for (let k = 0; k < width; k++) {
              items.push(`${v.lo + k}-${last + k}:${period}`);
            }
            strided += n * width;
          } else {
            for (let k = i; k < end; k++) {
              items.push(printed(iv[k]));
            }
          }
          i = end;
          continue;
        }
      }
      items.push(printed(v));
      i++;
    }
    return items.join(',');
  }
}

/**
 * Checks the notation of a set whose job size is not known yet (an attach to a running job):
 * "$max" and "all" are accepted, ranks are not range-checked. Returns an error message, or
 * undefined when the notation is valid.
 */
export function checkRankSetSyntax(s: string): string | undefined {
  const fields = s.split(/[ ,\t\n]+/).filter((f) => f !== '');
  for (const f of fields) {
    if (f === 'all' || f === '*') {
      continue;
    }
    try {
      // With a symbolic $max the range can only be checked for order once the size is known;
      // a size just above every literal rank keeps the other checks exact.
      parseItem(f, maxRank, true);
    } catch (e) {
      return `rankset: parse ${quote(s)}: ${(e as Error).message}`;
    }
  }
  return undefined;
}

function parseItem(f: string, size: number, symbolicMax = false): { lo: number; hi: number; stride: number } {
  let stride = 1;
  const colon = f.indexOf(':');
  if (colon >= 0) {
    const st = f.slice(colon + 1);
    stride = atoi(st);
    if (Number.isNaN(stride) || stride < 1) {
      throw new Error(`item ${quote(f)}: bad stride ${quote(st)}`);
    }
    f = f.slice(0, colon);
  }
  const dash = f.indexOf('-');
  const a = dash >= 0 ? f.slice(0, dash) : f;
  const lo = parseRank(a, size, symbolicMax);
  let hi = lo;
  if (dash >= 0) {
    hi = parseRank(f.slice(dash + 1), size, symbolicMax);
  } else if (stride !== 1) {
    throw new Error(`item ${quote(f)}: a stride needs a range`);
  }
  // A symbolic "$max" may still turn out larger than the other end once the size is known.
  const symbolic = symbolicMax && (a === '$max' || (dash >= 0 && f.slice(dash + 1) === '$max'));
  if (hi < lo && !symbolic) {
    throw new Error(`item ${quote(f)}: range is reversed`);
  }
  return { lo, hi, stride };
}

function parseRank(s: string, size: number, symbolicMax: boolean): number {
  if (s === '$max') {
    if (symbolicMax) {
      return maxRank;
    }
    if (size < 0) {
      throw new Error(`${quote(s)} needs the job size`);
    }
    if (size === 0) {
      throw new Error(`${quote(s)}: the job has no ranks`);
    }
    return size - 1;
  }
  if (!/^[0-9]+$/.test(s)) {
    throw new Error(`bad rank ${quote(s)}`);
  }
  const r = Number(s);
  if (r > maxRank) {
    throw new Error(`bad rank ${quote(s)}`);
  }
  if (!symbolicMax && size >= 0 && r >= size) {
    throw new Error(`rank ${r} is out of range (the job has ${size} ranks)`);
  }
  return r;
}

/**
 * Go's strconv.Atoi on a 64-bit machine: an optional sign, decimal digits, and a value that fits
 * in an int64 (NaN otherwise). Values beyond any rank stay exact enough: they only ever mean
 * "one rank per range".
 */
function atoi(s: string): number {
  if (!/^[+-]?[0-9]+$/.test(s)) {
    return NaN;
  }
  const n = BigInt(s);
  if (n > 9223372036854775807n || n < -9223372036854775808n) {
    return NaN;
  }
  return Number(n);
}

/** Quotes like Go's %q for the printable ASCII that rank sets are made of. */
function quote(s: string): string {
  return JSON.stringify(s);
}

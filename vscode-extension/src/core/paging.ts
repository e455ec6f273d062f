// Paging of long lists in tree views: a level of a view never shows more than a page of rows,
// so a job of thousands of ranks (or a stack node with thousands of children) opens as a few
// collapsible ranges whose rows are made only when the user expands them.

/** How many rows a level of the extension's tree views shows at most. */
export const defaultPageSize = 128;

/** A row standing for items[start:end) of a list, expanded into pageRows of that range. */
export interface Page {
  kind: 'page';
  start: number;
  end: number;
}

/** A row showing one item of a list. */
export interface Item<T> {
  kind: 'item';
  item: T;
}

/**
 * The rows that show items[start:end) with at most pageSize rows: the items themselves when they
 * fit, else pages of pageSize^k consecutive items each (the last one may be shorter), for the
 * smallest k that makes them fit. Only the returned rows are made: expanding a page calls
 * pageRows again on its range, so a list of n items costs O(pageSize · log n) rows to reach any
 * item.
 */
export function pageRows<T>(items: readonly T[], pageSize = defaultPageSize, start = 0, end = items.length): (Item<T> | Page)[] {
  if (!Number.isInteger(pageSize) || pageSize < 2) {
    throw new RangeError(`pageRows: page size ${pageSize} is not an integer of at least 2`);
  }
  start = Math.max(0, start);
  end = Math.min(items.length, end);
  const n = end - start;
  if (n <= pageSize) {
    const out: Item<T>[] = [];
    for (let i = start; i < end; i++) {
      out.push({ kind: 'item', item: items[i] });
    }
    return out;
  }
  let span = pageSize;
  while (Math.ceil(n / span) > pageSize) {
    span *= pageSize;
  }
  const out: Page[] = [];
  for (let i = start; i < end; i += span) {
    out.push({ kind: 'page', start: i, end: Math.min(end, i + span) });
  }
  return out;
}

// Presentation of an hpcdap/compareExpression answer: groups ordered for reading, as a text
// table for the output channel and as HTML for the comparison panel.

import { CompareExpressionResponse, CompareGroup } from './protocol';
import { RankSet } from './rankset';

/** One row of the comparison: a value (or an error) and the ranks that have it. */
export interface CompareRow {
  value: string;
  ranks: string;
  count: number;
  isError: boolean;
}

/**
 * The rows to show: values shared by the fewest ranks first (the outliers a user looks for),
 * ties by lowest rank; then the errors.
 */
export function compareRows(resp: CompareExpressionResponse): CompareRow[] {
  const low = (g: { ranks: string }) => RankSet.tryParse(g.ranks, -1).set?.min ?? Number.MAX_SAFE_INTEGER;
  const groups = [...(resp.groups ?? [])].sort((a: CompareGroup, b: CompareGroup) => a.count - b.count || low(a) - low(b));
  const rows: CompareRow[] = groups.map((g) => ({ value: g.value, ranks: g.ranks, count: g.count, isError: false }));
  for (const e of resp.errors ?? []) {
    const set = RankSet.tryParse(e.ranks, -1).set;
    rows.push({ value: e.message, ranks: e.ranks, count: set ? set.size : 0, isError: true });
  }
  return rows;
}

/** A plain-text table, one row per line: "count  ranks  value". */
export function compareText(expression: string, rows: CompareRow[]): string {
  const w = Math.max(5, ...rows.map((r) => r.ranks.length));
  const lines = [`${expression}:`, `${'count'.padStart(6)}  ${'ranks'.padEnd(w)}  value`];
  for (const r of rows) {
    lines.push(`${String(r.count).padStart(6)}  ${r.ranks.padEnd(w)}  ${r.isError ? `error: ${r.value}` : r.value}`);
  }
  return lines.join('\n');
}

/** Escapes text for HTML element content and attribute values. */
export function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
}

/** The comparison as an HTML table (a fragment; the panel supplies page and styles). */
export function compareHtml(expression: string, where: string, rows: CompareRow[]): string {
  const body = rows
    .map(
      (r) =>
        `<tr class="${r.isError ? 'error' : 'value'}"><td class="value">${escapeHtml(r.isError ? `error: ${r.value}` : r.value)}</td>` +
        `<td class="ranks">${escapeHtml(r.ranks)}</td><td class="count">${r.count}</td></tr>`,
    )
    .join('\n');
  return (
    `<h2 id="expression">${escapeHtml(expression)}</h2>\n<p id="where">${escapeHtml(where)}</p>\n` +
    `<table id="compare"><thead><tr><th>Value</th><th>Ranks</th><th>Count</th></tr></thead>\n<tbody>\n${body}\n</tbody></table>`
  );
}

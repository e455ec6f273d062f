// The Ranks view: every rank of the shown session with its state, host and pid. Ranks can be
// selected (several at once) to set the adapter's focus and to continue, pause or step them.

import * as vscode from 'vscode';
import { RankState } from '../core/protocol';
import { RankRow, rankPageLabel, rankRows, rankDescription, representativeThread } from '../core/ranks';
import { RankSet, checkRankSetSyntax } from '../core/rankset';
import { HpcSession, SessionManager, errorText } from '../session';

/** A row of the Ranks view: a rank, a range of ranks (a page), or a message. */
export type RankNode = RankRow | { kind: 'message'; text: string };

/** The run-control actions the view offers on selected ranks; each is a standard DAP request. */
export type RankAction = 'continue' | 'pause' | 'next' | 'stepIn' | 'stepOut';

/** Feeds the Ranks tree view from the session manager. */
export class RanksView implements vscode.TreeDataProvider<RankNode>, vscode.Disposable {
  private readonly changed = new vscode.EventEmitter<void>();
  readonly onDidChangeTreeData = this.changed.event;
  readonly view: vscode.TreeView<RankNode>;
  private readonly disposables: vscode.Disposable[] = [];

  constructor(private readonly sessions: SessionManager) {
    this.view = vscode.window.createTreeView('hpcdapRanks', { treeDataProvider: this, canSelectMany: true, showCollapseAll: false });
    this.disposables.push(this.view, this.changed, sessions.onDidChange(() => this.redraw()));
    this.redraw();
  }

  private redraw(): void {
    const s = this.sessions.active;
    this.view.description = s && s.ranks.focus !== '' ? `focus ${s.ranks.focus}` : undefined;
    this.changed.fire();
  }

  getChildren(node?: RankNode): RankNode[] {
    const s = this.sessions.active;
    if (!node) {
      if (!s) {
        return [{ kind: 'message', text: 'No hpcdap debug session.' }];
      }
      const ranks = s.ranks.list();
      if (ranks.length === 0) {
        return [{ kind: 'message', text: s.ranksError ? `hpcdap/ranks: ${s.ranksError}` : s.ended ? 'The session has ended.' : 'Waiting for ranks…' }];
      }
      return rankRows(ranks);
    }
    if (node.kind === 'page') {
      return rankRows(node.ranks, node.page);
    }
    return [];
  }

  getTreeItem(node: RankNode): vscode.TreeItem {
    if (node.kind === 'message') {
      const item = new vscode.TreeItem(node.text);
      item.contextValue = 'hpcdapMessage';
      return item;
    }
    if (node.kind === 'page') {
      const { start, end } = node.page;
      const item = new vscode.TreeItem(`ranks ${rankPageLabel(node)}`, vscode.TreeItemCollapsibleState.Collapsed);
      let stopped = 0;
      for (let i = start; i < end; i++) {
        stopped += node.ranks[i].state === 'stopped' ? 1 : 0;
      }
      item.description = `${end - start} ranks · ${stopped} stopped`;
      item.id = `page:${node.ranks[start].rank}-${node.ranks[end - 1].rank}`;
      item.contextValue = 'hpcdapRankPage';
      return item;
    }
    const r = node.state;
    const item = new vscode.TreeItem(`rank ${r.rank}`);
    item.id = `rank:${r.rank}`;
    const focus = this.sessions.active?.ranks.focusSet();
    const inFocus = !focus || focus.has(r.rank);
    item.description = rankDescription(r) + (inFocus ? '' : ' · not in focus');
    item.tooltip = new vscode.MarkdownString(
      `**rank ${r.rank}** — ${rankDescription(r)}\n\nthread ${r.threadId}${inFocus ? '' : '\n\nnot in the focus set'}`,
    );
    item.iconPath = stateIcon(r, inFocus);
    item.contextValue = `hpcdapRank.${r.state}`;
    return item;
  }

  /**
   * The ranks an action applies to: the rows it was invoked on (a context menu passes the row
   * and the whole selection), else the view's selection; groups stand for all their ranks.
   */
  selectedRanks(node?: RankNode, nodes?: RankNode[]): RankState[] {
    const picked = nodes && nodes.length ? nodes : node ? [node] : [...this.view.selection];
    const out = new Map<number, RankState>();
    for (const n of picked) {
      if (n.kind === 'rank') {
        out.set(n.state.rank, n.state);
      } else if (n.kind === 'page') {
        for (let i = n.page.start; i < n.page.end; i++) {
          out.set(n.ranks[i].rank, n.ranks[i]);
        }
      }
    }
    return [...out.values()].sort((a, b) => a.rank - b.rank);
  }

  dispose(): void {
    vscode.Disposable.from(...this.disposables).dispose();
  }
}

function stateIcon(r: RankState, inFocus: boolean): vscode.ThemeIcon {
  const dim = inFocus ? undefined : new vscode.ThemeColor('disabledForeground');
  switch (r.state) {
    case 'stopped':
      return new vscode.ThemeIcon('debug-pause', dim ?? new vscode.ThemeColor('debugIcon.pauseForeground'));
    case 'running':
      return new vscode.ThemeIcon('play', dim ?? new vscode.ThemeColor('debugIcon.startForeground'));
    case 'starting':
      return new vscode.ThemeIcon('loading~spin', dim);
    case 'exited':
      return new vscode.ThemeIcon(r.signal ? 'error' : 'pass', dim ?? (r.signal ? new vscode.ThemeColor('errorForeground') : undefined));
  }
}

/** The session commands act on, or an error message for the user. */
export function requireSession(sessions: SessionManager): HpcSession | undefined {
  const s = sessions.active;
  if (!s || s.ended) {
    void vscode.window.showErrorMessage('hpcdap: no hpcdap debug session is running.');
    return undefined;
  }
  return s;
}

/**
 * Runs a continue/pause/step on ranks: makes them the adapter's focus (hpcdap/focus), then sends
 * the standard DAP request with the thread of one of them, which the adapter applies to the
 * whole focus. With no ranks given, acts on the current focus.
 */
export async function runOnRanks(sessions: SessionManager, action: RankAction, ranks: RankState[]): Promise<void> {
  const s = requireSession(sessions);
  if (!s) {
    return;
  }
  let targets = ranks;
  if (targets.length === 0) {
    const focus = s.ranks.focusSet();
    targets = s.ranks.list().filter((r) => !focus || focus.has(r.rank));
  }
  const set = RankSet.of(...targets.map((r) => r.rank));
  if (set.isEmpty) {
    void vscode.window.showErrorMessage(`hpcdap: ${action}: no ranks are known yet.`);
    return;
  }
  try {
    const focus = s.ranks.focusSet();
    if (!focus || !focus.equals(set)) {
      await s.setFocus(set.toString());
      sessions.notify(s);
    }
    const threadId = representativeThread(targets, action);
    if (threadId === undefined) {
      throw new Error('none of these ranks is alive');
    }
    await s.session.customRequest(action, { threadId });
  } catch (e) {
    void vscode.window.showErrorMessage(`hpcdap: ${action} ranks ${set.toString()}: ${errorText(e)}`);
  }
}

/** Asks for a rank set and makes it the adapter's focus. */
export async function promptFocus(sessions: SessionManager): Promise<void> {
  const s = requireSession(sessions);
  if (!s) {
    return;
  }
  const size = s.ranks.size > 0 ? s.ranks.size : -1;
  const value = await vscode.window.showInputBox({
    title: 'hpcdap: rank focus',
    prompt: 'Ranks in MPIR subset notation, e.g. "0-3 8", "1-$max:2" or "all". Run control and breakpoints apply to them.',
    value: s.ranks.focus || 'all',
    validateInput: (v) => {
      if (size < 0) {
        return checkRankSetSyntax(v);
      }
      const p = RankSet.tryParse(v, size);
      return p.error ?? (p.set!.isEmpty ? 'The set names no rank.' : undefined);
    },
  });
  if (value === undefined) {
    return;
  }
  await setFocusTo(sessions, s, value);
}

/** Sets the focus and reports failures to the user. */
export async function setFocusTo(sessions: SessionManager, s: HpcSession, ranks: string): Promise<void> {
  try {
    await s.setFocus(ranks);
    sessions.notify(s);
  } catch (e) {
    void vscode.window.showErrorMessage(`hpcdap: focus ranks ${ranks}: ${errorText(e)}`);
  }
}

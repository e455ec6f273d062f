// The Parallel Stacks view: the merged prefix tree of all stopped ranks' stacks, with the rank
// set and count at every node. By default a function is one node whatever line its ranks are at
// (the lines and their ranks are shown on it); hpcdap.parallelStacks.mergeBy "line" shows one
// node per line instead. A level with more nodes than a page is shown in pages. Clicking a node
// shows the frame of its representative rank.

import * as vscode from 'vscode';
import { Page, defaultPageSize, pageRows } from '../core/paging';
import { RankSet } from '../core/rankset';
import {
  ViewNode,
  countNodes,
  frameKey,
  functionKey,
  initiallyExpanded,
  mergeByFunction,
  nodeDescription,
  nodeLabel,
  nodeLines,
  nodeLocation,
  stableIds,
  walk,
} from '../core/stacks';
import { SessionManager, errorText, stacksMergeBy } from '../session';

/** A row of the Parallel Stacks view: a node, a page of a level's nodes, or a message. */
export type StackRow =
  | { kind: 'node'; node: ViewNode; sessionId: string }
  | { kind: 'page'; siblings: ViewNode[]; page: Page; parentId: string; sessionId: string }
  | { kind: 'message'; text: string };

/** Feeds the Parallel Stacks tree view from the session manager. */
export class StacksView implements vscode.TreeDataProvider<StackRow>, vscode.Disposable {
  private readonly changed = new vscode.EventEmitter<void>();
  readonly onDidChangeTreeData = this.changed.event;
  readonly view: vscode.TreeView<StackRow>;
  private roots: ViewNode[] = [];
  private ids = new Map<ViewNode, string>();
  private meta = new Map<ViewNode, { depth: number; parent?: ViewNode }>();
  private total = 0;
  private readonly disposables: vscode.Disposable[] = [];

  constructor(private readonly sessions: SessionManager) {
    this.view = vscode.window.createTreeView('hpcdapParallelStacks', { treeDataProvider: this, showCollapseAll: true });
    this.disposables.push(
      this.view,
      this.changed,
      sessions.onDidChange(() => this.redraw()),
      this.view.onDidChangeVisibility((e) => sessions.setStacksWanted(e.visible)),
    );
    sessions.setStacksWanted(this.view.visible);
    this.redraw();
  }

  private redraw(): void {
    const s = this.sessions.active;
    const byFunction = stacksMergeBy() === 'function';
    const raw = (s?.stacks?.roots ?? []) as ViewNode[];
    this.roots = byFunction ? mergeByFunction(raw) : raw;
    this.ids = stableIds(this.roots, byFunction ? functionKey : frameKey);
    this.meta = new Map();
    walk(this.roots, (n, depth, parent) => this.meta.set(n as ViewNode, { depth, parent: parent as ViewNode | undefined }));
    this.total = countNodes(this.roots);
    if (!s || s.stacksStale) {
      clearFrameHighlight();
    }
    this.view.description = s?.stacks && !s.stacksStale ? `${s.stacks.total} ${s.stacks.total === 1 ? 'rank' : 'ranks'}` : undefined;
    this.changed.fire();
  }

  getChildren(row?: StackRow): StackRow[] {
    const s = this.sessions.active;
    if (!row) {
      if (!s) {
        return [{ kind: 'message', text: 'No hpcdap debug session.' }];
      }
      if (s.stacksError) {
        return [{ kind: 'message', text: `hpcdap/parallelStacks: ${s.stacksError}` }];
      }
      if (s.ended) {
        return [{ kind: 'message', text: 'The session has ended.' }];
      }
      if (s.stacksStale || !s.stacks) {
        const stopped = s.ranks.list().some((r) => r.state === 'stopped');
        return [{ kind: 'message', text: stopped ? 'Reading stacks…' : 'Stacks are shown when ranks stop.' }];
      }
      if (this.roots.length === 0) {
        return [{ kind: 'message', text: 'No stopped ranks.' }];
      }
      return stackRows(this.roots, '', s.session.id);
    }
    if (row.kind === 'node') {
      return stackRows(row.node.children ?? [], this.ids.get(row.node) ?? `#${row.node.id}`, row.sessionId);
    }
    if (row.kind === 'page') {
      return stackRows(row.siblings, row.parentId, row.sessionId, row.page);
    }
    return [];
  }

  getTreeItem(row: StackRow): vscode.TreeItem {
    if (row.kind === 'message') {
      const item = new vscode.TreeItem(row.text);
      item.contextValue = 'hpcdapMessage';
      return item;
    }
    if (row.kind === 'page') {
      const { start, end } = row.page;
      const item = new vscode.TreeItem(`${start + 1}-${end} of ${row.siblings.length}`, vscode.TreeItemCollapsibleState.Collapsed);
      let ranks = RankSet.empty;
      for (let i = start; i < end; i++) {
        ranks = ranks.union(RankSet.tryParse(row.siblings[i].ranks, -1).set ?? RankSet.empty);
      }
      item.description = `${ranks} · ${ranks.size} ${ranks.size === 1 ? 'rank' : 'ranks'}`;
      item.id = `${row.sessionId}${row.parentId}/page:${start}-${end}`;
      item.contextValue = 'hpcdapStackPage';
      return item;
    }
    const n = row.node;
    const m = this.meta.get(n);
    const expand = initiallyExpanded(n, m?.depth ?? 0, m?.parent, this.total);
    const hasChildren = (n.children ?? []).length > 0;
    const item = new vscode.TreeItem(
      nodeLabel(n),
      !hasChildren ? vscode.TreeItemCollapsibleState.None : expand ? vscode.TreeItemCollapsibleState.Expanded : vscode.TreeItemCollapsibleState.Collapsed,
    );
    item.id = `${row.sessionId}${this.ids.get(n) ?? `#${n.id}`}`;
    const lines = n.lines ? nodeLines(n) : n.line ? `line ${n.line}` : '';
    item.description = nodeDescription(n) + (lines ? ` · ${lines}` : '');
    const loc = nodeLocation(n);
    const file = loc.replace(/:\d+$/, '');
    const perLine = (n.lines ?? [])
      .filter((l) => l.line !== undefined)
      .slice(0, 32)
      .map((l) => `- ${file}:${l.line} — ranks ${l.ranks} (${l.count})`);
    const more = (n.lines?.length ?? 0) - perLine.length;
    item.tooltip = new vscode.MarkdownString(
      `**${nodeLabel(n)}**${loc && !n.lines ? ` — ${loc}` : file && n.lines ? ` — ${file}` : ''}\n\nranks ${n.ranks} (${n.count})` +
        (perLine.length ? `\n\n${perLine.join('\n')}${more > 0 ? `\n- … ${more} more` : ''}` : '') +
        `\n\nshown: frame ${n.frameLevel} of thread ${n.threadId}`,
    );
    item.iconPath = new vscode.ThemeIcon(hasChildren ? 'debug-stackframe-dot' : 'debug-stackframe');
    item.contextValue = 'hpcdapStackNode';
    item.command = { command: 'hpcdap.revealStackNode', title: 'Show Frame', arguments: [row] };
    return item;
  }

  dispose(): void {
    vscode.Disposable.from(...this.disposables).dispose();
  }
}

/** The rows of one level of the tree (or of a page of it): at most a page of them. */
function stackRows(siblings: ViewNode[], parentId: string, sessionId: string, page?: Page): StackRow[] {
  return pageRows(siblings, defaultPageSize, page?.start, page?.end).map((r) =>
    r.kind === 'item' ? { kind: 'node', node: r.item, sessionId } : { kind: 'page', siblings, page: r, parentId, sessionId },
  );
}

const frameHighlight = vscode.window.createTextEditorDecorationType({
  isWholeLine: true,
  backgroundColor: new vscode.ThemeColor('editor.focusedStackFrameHighlightBackground'),
});

/** Removes the highlight of a shown frame from every editor (its ranks moved on). */
export function clearFrameHighlight(): void {
  for (const e of vscode.window.visibleTextEditors) {
    e.setDecorations(frameHighlight, []);
  }
}

/**
 * Shows the frame a node stands for: asks the adapter for frame frameLevel of the node's
 * representative thread (DAP stackTrace) and opens its source at its line, highlighted. Falls
 * back to the node's own source and line when the frame has none.
 */
export async function revealStackNode(sessions: SessionManager, row: StackRow | undefined): Promise<void> {
  if (!row || row.kind !== 'node') {
    return;
  }
  const s = sessions.active;
  if (!s || s.session.id !== row.sessionId || s.ended) {
    void vscode.window.showErrorMessage('hpcdap: that debug session is no longer running.');
    return;
  }
  const n = row.node;
  let source = n.source as { path?: string; name?: string; sourceReference?: number } | undefined;
  let line = n.line;
  let column = 1;
  try {
    const body = (await s.session.customRequest('stackTrace', { threadId: n.threadId, startFrame: n.frameLevel, levels: 1 })) as {
      stackFrames?: { source?: { path?: string; name?: string; sourceReference?: number }; line?: number; column?: number }[];
    };
    const f = body?.stackFrames?.[0];
    if (f?.source && (f.source.path || f.source.sourceReference)) {
      source = f.source;
      line = f.line;
      column = f.column && f.column > 0 ? f.column : 1;
    }
  } catch (e) {
    void vscode.window.showWarningMessage(`hpcdap: stackTrace of thread ${n.threadId}: ${errorText(e)}`);
  }
  let uri: vscode.Uri | undefined;
  if (source?.path) {
    // Paths in standard DAP answers come back from the workbench as URIs under VS Code Remote
    // and code-server ("vscode-remote://host/…"); paths in hpcdap's own answers stay paths.
    uri = /^[a-zA-Z][a-zA-Z0-9+.-]+:\/\//.test(source.path) ? vscode.Uri.parse(source.path) : vscode.Uri.file(source.path);
  } else if (source?.sourceReference) {
    // VS Code loads "debug:" documents from the session through the DAP source request.
    const q = `session=${encodeURIComponent(s.session.id)}&ref=${source.sourceReference}`;
    uri = vscode.Uri.from({ scheme: 'debug', path: source.name ?? `source ${source.sourceReference}`, query: q });
  }
  if (!uri || !line) {
    void vscode.window.showInformationMessage(`hpcdap: ${nodeLabel(n)} (ranks ${n.ranks}) has no source.`);
    return;
  }
  try {
    const doc = await vscode.workspace.openTextDocument(uri);
    const pos = new vscode.Position(Math.max(0, line - 1), Math.max(0, column - 1));
    const editor = await vscode.window.showTextDocument(doc, { selection: new vscode.Range(pos, pos), preview: true });
    editor.revealRange(new vscode.Range(pos, pos), vscode.TextEditorRevealType.InCenterIfOutsideViewport);
    editor.setDecorations(frameHighlight, [new vscode.Range(pos, pos)]);
  } catch (e) {
    void vscode.window.showErrorMessage(`hpcdap: open ${uri.fsPath || uri.toString()}: ${errorText(e)}`);
  }
}

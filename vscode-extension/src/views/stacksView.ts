// The Parallel Stacks view: the merged prefix tree of all stopped ranks' stacks, with the rank
// set and count at every node. Clicking a node shows the frame of its representative rank.

import * as vscode from 'vscode';
import { StackNode } from '../core/protocol';
import { countNodes, initiallyExpanded, nodeDescription, nodeLabel, nodeLocation, stableIds, walk } from '../core/stacks';
import { SessionManager, errorText } from '../session';

/** A row of the Parallel Stacks view. */
export type StackRow = { kind: 'node'; node: StackNode; sessionId: string } | { kind: 'message'; text: string };

/** Feeds the Parallel Stacks tree view from the session manager. */
export class StacksView implements vscode.TreeDataProvider<StackRow>, vscode.Disposable {
  private readonly changed = new vscode.EventEmitter<void>();
  readonly onDidChangeTreeData = this.changed.event;
  readonly view: vscode.TreeView<StackRow>;
  private ids = new Map<StackNode, string>();
  private meta = new Map<StackNode, { depth: number; parent?: StackNode }>();
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
    const roots = s?.stacks?.roots ?? [];
    this.ids = stableIds(roots);
    this.meta = new Map();
    walk(roots, (n, depth, parent) => this.meta.set(n, { depth, parent }));
    this.total = countNodes(roots);
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
      if (s.stacks.roots.length === 0) {
        return [{ kind: 'message', text: 'No stopped ranks.' }];
      }
      return s.stacks.roots.map((node) => ({ kind: 'node', node, sessionId: s.session.id }));
    }
    if (row.kind === 'node') {
      return (row.node.children ?? []).map((node) => ({ kind: 'node', node, sessionId: row.sessionId }));
    }
    return [];
  }

  getTreeItem(row: StackRow): vscode.TreeItem {
    if (row.kind === 'message') {
      const item = new vscode.TreeItem(row.text);
      item.contextValue = 'hpcdapMessage';
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
    item.description = nodeDescription(n);
    const loc = nodeLocation(n);
    item.tooltip = new vscode.MarkdownString(
      `**${nodeLabel(n)}**${loc ? ` — ${loc}` : ''}\n\nranks ${n.ranks} (${n.count})\n\nshown: frame ${n.frameLevel} of thread ${n.threadId}`,
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

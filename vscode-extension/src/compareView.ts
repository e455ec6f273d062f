// The "Compare Expression Across Ranks" command: evaluates an expression on many ranks with
// hpcdap/compareExpression and shows which ranks have which value, in a panel and as text in the
// hpcdap output channel.

import * as vscode from 'vscode';
import { compareHtml, compareRows, compareText, escapeHtml } from './core/compare';
import { CompareExpressionArguments, CompareExpressionResponse, Requests } from './core/protocol';
import { SessionManager, errorText } from './session';
import { requireSession } from './views/ranksView';

/** Where to evaluate: a rank set and a frame, when invoked on a Parallel Stacks node. */
export interface CompareScope {
  ranks?: string;
  frameLevel?: number;
  /** The Parallel Stacks node the scope comes from (see the README's proposed extension). */
  stackNode?: number;
  label?: string;
}

let panel: vscode.WebviewPanel | undefined;
let lastExpression = '';

/** Asks for an expression, compares it across ranks and shows the result. */
export async function compareExpression(sessions: SessionManager, log: vscode.LogOutputChannel, scope: CompareScope = {}): Promise<void> {
  const s = requireSession(sessions);
  if (!s) {
    return;
  }
  const editor = vscode.window.activeTextEditor;
  const selected = editor && !editor.selection.isEmpty ? editor.document.getText(editor.selection).trim() : '';
  const where = scope.label ?? (scope.ranks ? `ranks ${scope.ranks}` : s.ranks.focus ? `focus ranks ${s.ranks.focus}` : 'all ranks');
  const expression = await vscode.window.showInputBox({
    title: 'hpcdap: Compare Expression Across Ranks',
    prompt: `An expression to evaluate on ${where}`,
    value: selected.includes('\n') ? lastExpression : selected || lastExpression,
    validateInput: (v) => (v.trim() === '' ? 'Enter an expression.' : undefined),
  });
  if (expression === undefined) {
    return;
  }
  lastExpression = expression.trim();
  const args: CompareExpressionArguments & { stackNode?: number } = { expression: lastExpression };
  if (scope.ranks !== undefined) {
    args.ranks = scope.ranks;
  }
  if (scope.frameLevel !== undefined) {
    args.frameLevel = scope.frameLevel;
  }
  if (scope.stackNode !== undefined) {
    args.stackNode = scope.stackNode;
  }
  let body: CompareExpressionResponse;
  try {
    body = (await s.session.customRequest(Requests.compareExpression, args)) as CompareExpressionResponse;
  } catch (e) {
    void vscode.window.showErrorMessage(`hpcdap: compare ${lastExpression} across ${where}: ${errorText(e)}`);
    return;
  }
  const rows = compareRows(body);
  log.info(`${compareText(lastExpression, rows)}\n(${where})`);
  show(lastExpression, where, compareHtml(lastExpression, where, rows));
}

function show(expression: string, where: string, fragment: string): void {
  if (!panel) {
    panel = vscode.window.createWebviewPanel('hpcdapCompare', 'Compare', { viewColumn: vscode.ViewColumn.Beside, preserveFocus: true }, {
      enableScripts: false,
      retainContextWhenHidden: false,
    });
    panel.onDidDispose(() => (panel = undefined));
  }
  panel.title = `Compare: ${expression}`;
  panel.webview.html = page(fragment, where);
  panel.reveal(undefined, true);
}

function page(fragment: string, where: string): string {
  return `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline';">
<title>Compare</title>
<style>
body { font-family: var(--vscode-font-family); font-size: var(--vscode-font-size); color: var(--vscode-foreground); }
h2 { font-family: var(--vscode-editor-font-family); font-weight: normal; margin: 0.4em 0; }
table { border-collapse: collapse; }
th, td { text-align: left; padding: 2px 12px 2px 4px; border-bottom: 1px solid var(--vscode-panel-border, #8884); vertical-align: top; }
td.value { font-family: var(--vscode-editor-font-family); white-space: pre-wrap; }
td.count { text-align: right; }
tr.error td.value { color: var(--vscode-errorForeground); }
</style></head>
<body data-where="${escapeHtml(where)}">
${fragment}
</body></html>`;
}

/** The last comparison panel, for the commands that close it with the session. */
export function disposeComparePanel(): void {
  panel?.dispose();
}

// Entry point of the hpcdap extension: registers the debugger (adapter descriptors and
// configuration checking), the Ranks and Parallel Stacks views, the status bar item and the
// commands.

import * as vscode from 'vscode';
import { AdapterFactory } from './adapterFactory';
import { compareExpression } from './compareView';
import { ConfigProvider } from './configProvider';
import { statusText, statusTooltip } from './core/ranks';
import { RankSet } from './core/rankset';
import { pickProcess, pickSlurmStep } from './pickers';
import { SessionManager } from './session';
import { RankNode, RanksView, promptFocus, requireSession, runOnRanks, setFocusTo } from './views/ranksView';
import { StackRow, StacksView, revealStackNode } from './views/stacksView';

/** The context key that shows the views: set once the workspace or a session uses hpcdap. */
const viewsKey = 'hpcdap.viewsEnabled';

export function activate(context: vscode.ExtensionContext): void {
  const log = vscode.window.createOutputChannel('hpcdap', { log: true });
  const sessions = new SessionManager(log);
  const ranks = new RanksView(sessions);
  const stacks = new StacksView(sessions);
  const status = vscode.window.createStatusBarItem('hpcdap.status', vscode.StatusBarAlignment.Left, 50);
  status.name = 'hpcdap ranks';
  status.command = 'hpcdapRanks.focus';

  const updateStatus = () => {
    const s = sessions.active;
    if (!s || s.ended || s.ranks.size === 0) {
      status.hide();
      return;
    }
    status.text = `$(server-process) ${statusText(s.ranks)}`;
    status.tooltip = `${s.name}\n${statusTooltip(s.ranks)}`;
    status.show();
  };

  let viewsEnabled = false;
  const enableViews = (on: boolean) => {
    if (on && !viewsEnabled) {
      viewsEnabled = true;
      void vscode.commands.executeCommand('setContext', viewsKey, true);
    }
  };
  const workspaceUsesHpcdap = () => {
    const configs = vscode.workspace.getConfiguration('launch').get<{ type?: string }[]>('configurations', []);
    return Array.isArray(configs) && configs.some((c) => c?.type === 'hpcdap');
  };
  enableViews(workspaceUsesHpcdap());

  const rankAction = (action: 'continue' | 'pause' | 'next' | 'stepIn' | 'stepOut') => (node?: RankNode, nodes?: RankNode[]) =>
    runOnRanks(sessions, action, ranks.selectedRanks(node, nodes));

  context.subscriptions.push(
    log,
    sessions,
    ranks,
    stacks,
    status,
    vscode.debug.registerDebugAdapterDescriptorFactory('hpcdap', new AdapterFactory(context.extensionPath, log)),
    vscode.debug.registerDebugConfigurationProvider('hpcdap', new ConfigProvider(log)),
    sessions.onDidChange(updateStatus),
    vscode.debug.onDidStartDebugSession((s) => enableViews(s.type === 'hpcdap')),
    vscode.workspace.onDidChangeConfiguration((e) => {
      if (e.affectsConfiguration('launch')) {
        enableViews(workspaceUsesHpcdap());
      }
      if (e.affectsConfiguration('hpcdap.parallelStacks')) {
        void sessions.refresh();
      }
    }),
    vscode.commands.registerCommand('hpcdap.continueRanks', rankAction('continue')),
    vscode.commands.registerCommand('hpcdap.pauseRanks', rankAction('pause')),
    vscode.commands.registerCommand('hpcdap.nextRanks', rankAction('next')),
    vscode.commands.registerCommand('hpcdap.stepInRanks', rankAction('stepIn')),
    vscode.commands.registerCommand('hpcdap.stepOutRanks', rankAction('stepOut')),
    vscode.commands.registerCommand('hpcdap.setFocus', () => promptFocus(sessions)),
    vscode.commands.registerCommand('hpcdap.focusSelectedRanks', async (node?: RankNode, nodes?: RankNode[]) => {
      const s = requireSession(sessions);
      const picked = ranks.selectedRanks(node, nodes);
      if (s && picked.length) {
        await setFocusTo(sessions, s, RankSet.of(...picked.map((r) => r.rank)).toString());
      }
    }),
    vscode.commands.registerCommand('hpcdap.focusAllRanks', async () => {
      const s = requireSession(sessions);
      if (s) {
        await setFocusTo(sessions, s, 'all');
      }
    }),
    vscode.commands.registerCommand('hpcdap.refresh', () => sessions.refresh()),
    vscode.commands.registerCommand('hpcdap.revealStackNode', (row?: StackRow) => revealStackNode(sessions, row)),
    vscode.commands.registerCommand('hpcdap.focusStackNodeRanks', async (row?: StackRow) => {
      const s = requireSession(sessions);
      if (s && row?.kind === 'node') {
        await setFocusTo(sessions, s, row.node.ranks);
      }
    }),
    vscode.commands.registerCommand('hpcdap.compareExpression', () => compareExpression(sessions, log)),
    vscode.commands.registerCommand('hpcdap.compareAtStackNode', (row?: StackRow) =>
      row?.kind === 'node'
        ? compareExpression(sessions, log, {
            ranks: row.node.ranks,
            frameLevel: row.node.frameLevel,
            stackNode: row.node.id,
            label: `${row.node.name} on ranks ${row.node.ranks}`,
          })
        : compareExpression(sessions, log),
    ),
    vscode.commands.registerCommand('hpcdap.pickProcess', () => pickProcess(false)),
    vscode.commands.registerCommand('hpcdap.pickLauncherProcess', () => pickProcess(true)),
    vscode.commands.registerCommand('hpcdap.pickSlurmStep', () => pickSlurmStep()),
  );
}

export function deactivate(): void {}

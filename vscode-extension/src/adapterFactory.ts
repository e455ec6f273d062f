// Starts or connects to the hpcdap adapter for each debug session: "hpcdap dap" on stdio (the
// configured, bundled or PATH binary), or a running "hpcdap serve" over TCP.

import * as vscode from 'vscode';
import { resolveAdapterPath } from './core/adapterPath';
import { parseServerAddress } from './core/config';

/** Chooses the transport for a new session from the hpcdap.* settings. */
export class AdapterFactory implements vscode.DebugAdapterDescriptorFactory {
  constructor(
    private readonly extensionDir: string,
    private readonly log: vscode.LogOutputChannel,
  ) {}

  createDebugAdapterDescriptor(session: vscode.DebugSession): vscode.DebugAdapterDescriptor {
    const cfg = vscode.workspace.getConfiguration('hpcdap', session.workspaceFolder);
    const server = cfg.get<string>('server', '').trim();
    if (server !== '') {
      const a = parseServerAddress(server);
      if ('error' in a) {
        throw new Error(a.error);
      }
      this.log.info(`${session.name}: connecting to hpcdap serve at ${a.host}:${a.port}`);
      return new vscode.DebugAdapterServer(a.port, a.host);
    }
    const loc = resolveAdapterPath(cfg.get<string>('path', ''), this.extensionDir, process.env.PATH, session.workspaceFolder?.uri.fsPath);
    if ('error' in loc) {
      throw new Error(loc.error);
    }
    const args = ['dap', ...cfg.get<string[]>('adapterArgs', [])];
    this.log.info(`${session.name}: starting ${loc.path} ${args.join(' ')} (${loc.source})`);
    return new vscode.DebugAdapterExecutable(loc.path, args, { cwd: session.workspaceFolder?.uri.fsPath });
  }
}

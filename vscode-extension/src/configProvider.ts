// Completes and checks hpcdap debug configurations before a session starts.

import * as vscode from 'vscode';
import { checkConfig, defaultLaunchConfig } from './core/config';

const sourceLanguages = new Set(['c', 'cpp', 'fortran', 'FortranFreeForm', 'FortranFixedForm', 'fortran-modern', 'fortran_free-form', 'fortran_fixed-form', 'fortran90']);

/** Fills defaults and rejects invalid configurations with messages that name the field. */
export class ConfigProvider implements vscode.DebugConfigurationProvider {
  constructor(private readonly log: vscode.LogOutputChannel) {}

  /** F5 without launch.json: debug the program built from the C/C++/Fortran file in the editor. */
  resolveDebugConfiguration(_folder: vscode.WorkspaceFolder | undefined, config: vscode.DebugConfiguration): vscode.DebugConfiguration | undefined {
    if (!config.type && !config.request && !config.name) {
      const lang = vscode.window.activeTextEditor?.document.languageId;
      if (!lang || !sourceLanguages.has(lang)) {
        void vscode.window.showErrorMessage('hpcdap: open a C, C++ or Fortran file, or add an hpcdap configuration to launch.json.');
        return undefined;
      }
      return defaultLaunchConfig() as vscode.DebugConfiguration;
    }
    return config;
  }

  /** After variables are substituted: the adapter's argument rules, checked here first. */
  resolveDebugConfigurationWithSubstitutedVariables(
    _folder: vscode.WorkspaceFolder | undefined,
    config: vscode.DebugConfiguration,
  ): vscode.DebugConfiguration | null | undefined {
    const r = checkConfig(config);
    if (r.errors.length) {
      const msg = `hpcdap: ${r.errors.join('; ')}`;
      this.log.error(msg);
      void vscode.window.showErrorMessage(msg);
      // undefined stops the start silently after the message; null would open launch.json.
      return undefined;
    }
    return r.config as vscode.DebugConfiguration;
  }
}

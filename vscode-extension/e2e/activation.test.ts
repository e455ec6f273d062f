// The packaged extension in a real VS Code (code-server) before any adapter runs: it activates
// in a workspace with hpcdap configurations, shows its views in Run and Debug, offers its
// configuration snippets for launch.json, and refuses an invalid configuration with its own
// message.

import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import { checkConfig } from '../src/core/config';
import { ringSource } from '../test/support/fixture';
import { packageJson } from '../test/support/paths';
import { norm, withWorkbench } from './harness';

const validName = 'hpcdap: 4 ranks';
const invalidName = 'invalid: two attach targets';
const invalidConfig = { type: 'hpcdap', request: 'attach', name: invalidName, pid: 4242, pids: { '0': 4242 } };
// A configuration the launch.json schema (configurationAttributes) flags while it is typed.
const schemaConfig = { type: 'hpcdap', request: 'launch', name: 'schema: np 0', program: '${workspaceFolder}/ring', np: 0, ranks: '0-x' };

const missingAdapter = '/nonexistent/bin/hpcdap';

function workspace(): string {
  const ws = fs.mkdtempSync(path.join(os.tmpdir(), 'hpcdap-e2e-ws-'));
  fs.copyFileSync(ringSource, path.join(ws, 'ring.c'));
  fs.mkdirSync(path.join(ws, '.vscode'));
  const launch = {
    version: '0.2.0',
    configurations: [{ type: 'hpcdap', request: 'launch', name: validName, program: '${workspaceFolder}/ring', np: 4 }, invalidConfig, schemaConfig],
  };
  fs.writeFileSync(path.join(ws, '.vscode', 'launch.json'), JSON.stringify(launch, null, 2));
  return ws;
}

test('the extension activates in code-server: views, snippets, configuration checks', { timeout: 240_000 }, async () => {
  const ws = workspace();
  try {
    await withWorkbench('activation', ws, 'ring.c', async (wb) => {
      const page = wb.page;
      await wb.openRunAndDebug(validName);

      // The views exist only once the extension has activated and set hpcdap.viewsEnabled
      // (activation event workspaceContains:.vscode/launch.json, launch.json has hpcdap).
      await wb.expandView('Ranks');
      await wb.expandView('Parallel Stacks');
      await wb.pane('Ranks').locator('.customview-tree .monaco-list-row').first().waitFor();
      await wb.pane('Parallel Stacks').locator('.customview-tree .monaco-list-row').first().waitFor();
      assert.deepEqual(await wb.treeRows('Ranks'), [{ label: 'No hpcdap debug session.', description: '' }]);
      assert.deepEqual(await wb.treeRows('Parallel Stacks'), [{ label: 'No hpcdap debug session.', description: '' }]);
      await wb.screenshot('views');

      // An invalid configuration is stopped by the configuration provider, with its message.
      const expected = `hpcdap: ${checkConfig(invalidConfig).errors.join('; ')}`;
      await wb.startDebugging(invalidName);
      const toast = page.locator('.notifications-toasts .notification-toast', { hasText: 'takes exactly one of' }).first();
      await toast.waitFor({ state: 'visible' });
      assert.equal(norm(await toast.locator('.notification-list-item-message').innerText()), norm(expected));
      await wb.screenshot('invalid-config');
      assert.equal(await page.locator('.debug-toolbar').count(), 0, 'no session started');
      await page.keyboard.press('Escape');

      // A valid configuration whose adapter binary is missing: the descriptor factory says which
      // setting points where (hpcdap.path is set to a path that does not exist).
      await wb.startDebugging(validName);
      const dialog = page.locator('.monaco-dialog-box');
      await dialog.waitFor({ state: 'visible' });
      assert.match(norm(await dialog.innerText()), new RegExp(`hpcdap\\.path: ${missingAdapter} does not exist`));
      await wb.screenshot('adapter-missing');
      await dialog.locator('.monaco-button', { hasText: 'Cancel' }).click();
      await dialog.waitFor({ state: 'hidden' });

      // The launch.json schema from configurationAttributes reaches the JSON language server:
      // its problems for the schema configuration show (which also means the server is ready).
      await page.keyboard.press('Control+P');
      await page.locator('.quick-input-widget input.input').fill('launch.json');
      await page.locator('.quick-input-list .monaco-list-row', { hasText: 'launch.json' }).first().click();
      await page.keyboard.press('Control+Shift+M');
      const problems = page.locator('.markers-panel .monaco-list-row');
      await problems.filter({ hasText: 'Value is below the minimum of 1.' }).first().waitFor();
      const rankPattern = packageJson().contributes.debuggers[0].configurationAttributes.launch.properties.ranks.patternErrorMessage;
      await problems.filter({ hasText: rankPattern }).first().waitFor();
      await wb.unhover();
      await wb.screenshot('schema-problems');

      // The hpcdap debug type is offered: "Debug: Add Configuration..." in launch.json suggests
      // every snippet, and accepting one inserts its body.
      await wb.runCommand('Debug: Add Configuration...');
      const suggest = page.locator('.editor-widget.suggest-widget .monaco-list-row');
      await suggest.first().waitFor({ state: 'visible' });
      const labels: string[] = packageJson().contributes.debuggers[0].configurationSnippets.map((s: { label: string }) => s.label);
      await page.keyboard.type('hpcdap');
      for (const label of labels) {
        await page.locator(`.editor-widget.suggest-widget .monaco-list-row[aria-label^="${label},"]`).first().waitFor({ state: 'attached' });
      }
      await wb.screenshot('snippets');
      const mpirun = labels.find((l) => l.includes('mpirun -np 4'))!;
      await page.keyboard.type(' mpirun -np');
      await page.locator(`.editor-widget.suggest-widget .monaco-list-row.focused[aria-label^="${mpirun},"]`).waitFor();
      await page.keyboard.press('Enter');
      await page.keyboard.press('Escape');
      await page.locator('.monaco-editor .view-lines', { hasText: '"launcher": "mpirun"' }).first().waitFor();
      await wb.unhover();
      await wb.screenshot('snippet-inserted');
    }, { settings: { 'hpcdap.path': missingAdapter } });
  } finally {
    fs.rmSync(ws, { recursive: true, force: true });
  }
});

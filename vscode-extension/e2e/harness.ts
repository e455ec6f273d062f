// Runs the packaged extension in a real VS Code workbench: code-server on a free loopback port
// with a fresh profile, driven in Debian's headless Chromium through playwright-core. The
// recipe, the settings and the readiness rules follow the project's VS Code e2e spec.

import { ChildProcess, spawn, spawnSync } from 'child_process';
import * as fs from 'fs';
import * as http from 'http';
import * as net from 'net';
import * as os from 'os';
import * as path from 'path';
import { BrowserContext, Locator, Page, chromium } from 'playwright-core';
import { extensionDir } from '../test/support/paths';

/** The code-server version the selectors are written for (see e2e/setup.sh). */
export const codeServerVersion = '4.100.3';

/** The code-server launcher installed by e2e/setup.sh. */
export function codeServerBinary(): string {
  const cache = process.env.HPCDAP_E2E_CACHE ?? path.join(process.env.XDG_CACHE_HOME ?? path.join(os.homedir(), '.cache'), 'hpcdap-e2e');
  const bin = path.join(cache, `code-server-${codeServerVersion}`, 'node_modules', '.bin', 'code-server');
  if (!fs.existsSync(bin)) {
    throw new Error(`code-server ${codeServerVersion} is not installed at ${bin}: run e2e/setup.sh (as root) first`);
  }
  return bin;
}

/** The browser: Debian's Chromium. */
export function chromiumBinary(): string {
  const bin = process.env.HPCDAP_E2E_CHROMIUM ?? '/usr/bin/chromium';
  if (!fs.existsSync(bin)) {
    throw new Error(`Chromium is not installed at ${bin}: run e2e/setup.sh (apt-get install chromium)`);
  }
  return bin;
}

/** The packaged extension that "npm run package" writes. */
export function vsixPath(): string {
  const p = process.env.HPCDAP_VSIX ?? path.join(extensionDir, 'hpcdap.vsix');
  if (!fs.existsSync(p)) {
    throw new Error(`${p} does not exist: run "npm run package" first (npm run test:e2e does)`);
  }
  return p;
}

/** The user settings that keep welcome pages, prompts and panels off the UI (spec §3.2). */
export const testSettings = {
  'security.workspace.trust.enabled': false,
  'workbench.startupEditor': 'none',
  'workbench.tips.enabled': false,
  'workbench.welcomePage.walkthroughs.openOnInstall': false,
  'workbench.enableExperiments': false,
  'telemetry.telemetryLevel': 'off',
  'update.mode': 'none',
  'extensions.autoCheckUpdates': false,
  'extensions.autoUpdate': false,
  'extensions.ignoreRecommendations': true,
  'git.enabled': false,
  'debug.openDebug': 'openOnSessionStart',
  'debug.internalConsoleOptions': 'neverOpen',
  'debug.showInStatusBar': 'never',
  'window.restoreWindows': 'none',
  'editor.minimap.enabled': false,
  // The agents' ports would otherwise pop up "application running on port" notifications.
  'remote.autoForwardPorts': false,
  'chat.commandCenter.enabled': false,
  'chat.disableAIFeatures': true,
  'workbench.secondarySideBar.defaultVisibility': 'hidden',
};

/** A free TCP port on the loopback interface. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const port = (srv.address() as net.AddressInfo).port;
      srv.close(() => resolve(port));
    });
  });
}

function healthz(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const req = http.get({ host: '127.0.0.1', port, path: '/healthz', timeout: 1000 }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    });
    req.on('error', () => resolve(false));
    req.on('timeout', () => {
      req.destroy();
      resolve(false);
    });
  });
}

/** Extra environment (reaches the extension host and the adapter) and machine settings. */
export interface WorkbenchOptions {
  env?: NodeJS.ProcessEnv;
  settings?: Record<string, unknown>;
}

/** One scenario's workbench: server, browser, page, and where its files go. */
export class Workbench {
  readonly shots: string[] = [];
  readonly consoleErrors: string[] = [];
  private server?: ChildProcess;
  private context?: BrowserContext;
  private browserProfile?: string;
  page!: Page;
  port = 0;

  private constructor(
    /** The scenario's private directory (profile, extensions, logs). */
    readonly run: string,
    /** Where screenshots and logs are kept after the scenario. */
    readonly artifacts: string,
    /** The workspace folder that is opened. */
    readonly workspace: string,
  ) {}

  /**
   * Starts code-server with the extension installed and the workspace open, and waits until the
   * workbench shows the file waitForFile in the Explorer.
   */
  static async open(name: string, workspace: string, waitForFile: string, opts: WorkbenchOptions = {}): Promise<Workbench> {
    const run = fs.mkdtempSync(path.join(os.tmpdir(), `hpcdap-e2e-${name}-`));
    const root = process.env.HPCDAP_E2E_ARTIFACTS ?? path.join(extensionDir, 'e2e-artifacts');
    const artifacts = path.join(root, name);
    fs.rmSync(artifacts, { recursive: true, force: true });
    fs.mkdirSync(artifacts, { recursive: true });
    for (const d of ['udd/User', 'udd/Machine', 'exts', 'xdg-config', 'xdg-data']) {
      fs.mkdirSync(path.join(run, d), { recursive: true });
    }
    fs.writeFileSync(path.join(run, 'udd/User/settings.json'), JSON.stringify(testSettings, null, 2));
    // code-server runs extensions as on a remote machine, where machine-scoped settings such as
    // hpcdap.path come from the machine's settings, not the user's.
    fs.writeFileSync(path.join(run, 'udd/Machine/settings.json'), JSON.stringify(opts.settings ?? {}, null, 2));
    const env = { ...process.env, XDG_CONFIG_HOME: path.join(run, 'xdg-config'), XDG_DATA_HOME: path.join(run, 'xdg-data'), ...opts.env };
    const wb = new Workbench(run, artifacts, workspace);
    const bin = codeServerBinary();
    const dirs = ['--user-data-dir', path.join(run, 'udd'), '--extensions-dir', path.join(run, 'exts')];
    const inst = spawnSync(bin, [...dirs, '--install-extension', vsixPath()], { env, encoding: 'utf8', timeout: 120_000 });
    if (inst.status !== 0 || !/successfully installed/.test(inst.stdout)) {
      throw new Error(`code-server --install-extension ${vsixPath()}: status ${inst.status}: ${inst.stdout}${inst.stderr}`);
    }
    wb.port = await freePort();
    const log = fs.openSync(path.join(run, 'code-server.log'), 'w');
    wb.server = spawn(
      bin,
      [
        '--bind-addr', `127.0.0.1:${wb.port}`, '--auth', 'none', '--disable-telemetry', '--disable-update-check',
        '--disable-workspace-trust', '--disable-getting-started-override', '--ignore-last-opened', ...dirs, workspace,
      ],
      { env, stdio: ['ignore', log, log] },
    );
    fs.closeSync(log);
    const deadline = Date.now() + 30_000;
    while (!(await healthz(wb.port))) {
      if (wb.server.exitCode !== null || Date.now() > deadline) {
        await wb.close(true);
        throw new Error(`code-server did not answer /healthz on port ${wb.port} (exit ${wb.server.exitCode}); see ${artifacts}`);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    wb.browserProfile = fs.mkdtempSync(path.join(os.tmpdir(), 'hpcdap-e2e-chromium-'));
    wb.context = await chromium.launchPersistentContext(wb.browserProfile, {
      executablePath: chromiumBinary(),
      headless: true,
      args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
      viewport: { width: 1400, height: 900 },
    });
    wb.page = wb.context.pages()[0] ?? (await wb.context.newPage());
    wb.page.setDefaultTimeout(60_000);
    wb.page.on('console', (m) => {
      if (m.type() === 'error') {
        wb.consoleErrors.push(m.text());
      }
    });
    wb.page.on('pageerror', (e) => wb.consoleErrors.push(String(e)));
    await wb.page.goto(`http://127.0.0.1:${wb.port}/?folder=${encodeURIComponent(workspace)}`, { waitUntil: 'domcontentloaded' });
    await wb.page.locator('.monaco-workbench').waitFor({ state: 'attached' });
    await wb.page.locator('.part.statusbar').waitFor({ state: 'visible' });
    await wb.page.locator('.explorer-folders-view .monaco-list-row', { hasText: waitForFile }).first().waitFor({ state: 'visible' });
    return wb;
  }

  /** Saves a screenshot of the whole window as <artifacts>/<n>-<name>.png. */
  async screenshot(name: string): Promise<string> {
    // Only cosmetic: the UI finishes fading colours and hover states.
    await this.page.waitForTimeout(500);
    const file = path.join(this.artifacts, `${String(this.shots.length + 1).padStart(2, '0')}-${name}.png`);
    await this.page.screenshot({ path: file });
    this.shots.push(file);
    return file;
  }

  /** Moves the pointer away so no hover tooltip covers the next screenshot. */
  async unhover(): Promise<void> {
    await this.page.mouse.move(1000, 700);
  }

  /** Opens Run and Debug and waits until the launch configuration is listed (spec §5.3). */
  async openRunAndDebug(configName: string): Promise<void> {
    await this.page.locator('.part.activitybar .action-label[aria-label^="Run and Debug"]').click();
    await this.unhover();
    await this.configOption(configName).waitFor({ state: 'attached' });
  }

  /** The launch-configuration entry of the dropdown: a <select> on 1.100, a label on 1.139. */
  configOption(configName: string): Locator {
    return this.page
      .locator(
        `.start-debug-action-item select option[value="${configName}"], ` +
          `.start-debug-action-item .start-debug-action-item-label:text-is("${configName}")`,
      )
      .first();
  }

  /** Selects a launch configuration in the dropdown and clicks the green start button once. */
  async startDebugging(configName: string): Promise<void> {
    const select = this.page.locator('.start-debug-action-item select');
    if ((await select.count()) > 0) {
      await select.selectOption(configName);
    } else {
      await this.page.locator('.start-debug-action-item .start-debug-action-item-label').click();
      await this.page.locator('.quick-input-list .monaco-list-row', { hasText: configName }).first().click();
    }
    await this.page.locator('.start-debug-action-item .codicon-debug-start').click();
    await this.unhover();
  }

  /**
   * The header of a view in the side bar: its aria-label is "<name> Section", or
   * "<name> - <description> Section" while the view has a description.
   */
  header(viewName: string, extra = ''): Locator {
    return this.page.locator(
      `.pane-header[aria-label="${viewName} Section"]${extra}, .pane-header[aria-label^="${viewName} - "][aria-label$=" Section"]${extra}`,
    );
  }

  /** The pane of a view in the side bar, by its name. */
  pane(viewName: string): Locator {
    return this.page.locator('.pane:visible', { has: this.header(viewName) });
  }

  /** Expands a collapsed view and waits until it is expanded. */
  async expandView(viewName: string): Promise<void> {
    const header = this.header(viewName).first();
    await header.waitFor({ state: 'visible' });
    if ((await header.getAttribute('aria-expanded')) !== 'true') {
      await header.click({ position: { x: 8, y: 10 } });
    }
    await this.header(viewName, '[aria-expanded="true"]').first().waitFor();
    await this.unhover();
  }

  /** Collapses a view if it is expanded (to give the side bar's height to other views). */
  async collapseView(viewName: string): Promise<void> {
    const header = this.header(viewName).first();
    if ((await header.count()) > 0 && (await header.getAttribute('aria-expanded')) === 'true') {
      // On the twistie: the middle of a header may hold the view's title actions.
      await header.click({ position: { x: 8, y: 10 } });
      await this.header(viewName, '[aria-expanded="false"]').first().waitFor();
    }
    await this.unhover();
  }

  /** The rows of a contributed tree view: label and description, whitespace normalised. */
  async treeRows(viewName: string): Promise<{ label: string; description: string }[]> {
    const rows = this.pane(viewName).locator('.customview-tree .monaco-list-row');
    const out: { label: string; description: string }[] = [];
    for (const row of await rows.all()) {
      const label = norm(await row.locator('.label-name').first().innerText().catch(() => ''));
      const description = norm(await row.locator('.label-description').first().innerText().catch(() => ''));
      out.push({ label, description });
    }
    return out;
  }

  /**
   * Waits until the rows of a tree view satisfy ok (polled; views redraw asynchronously) and
   * returns them; on timeout the error shows the last rows seen.
   */
  async waitForTreeRows(
    viewName: string,
    ok: (rows: { label: string; description: string }[]) => boolean,
    what: string,
    ms = 60_000,
  ): Promise<{ label: string; description: string }[]> {
    const end = Date.now() + ms;
    let rows: { label: string; description: string }[] = [];
    for (;;) {
      rows = await this.treeRows(viewName);
      if (ok(rows)) {
        return rows;
      }
      if (Date.now() > end) {
        throw new Error(`${viewName}: timed out waiting for ${what}; rows: ${JSON.stringify(rows)}`);
      }
      await this.page.waitForTimeout(200);
    }
  }

  /** Runs a command from the palette, waiting for its exact row (never a near match). */
  async runCommand(title: string): Promise<void> {
    const input = this.page.locator('.quick-input-widget input.input');
    const row = this.page
      .locator(`.quick-input-list .monaco-list-row[aria-label^="${title}, "], .quick-input-list .monaco-list-row[aria-label="${title}"]`)
      .first();
    for (let i = 0; ; i++) {
      await this.page.keyboard.press('F1');
      await input.fill(`>${title}`);
      try {
        await row.waitFor({ state: 'visible', timeout: 1500 });
        break;
      } catch (e) {
        if (i >= 19) {
          throw e;
        }
        await this.page.keyboard.press('Escape');
        await this.page.waitForTimeout(250);
      }
    }
    await row.click();
  }

  /**
   * The messages of the error notifications raised so far, toasts that went away included: read
   * from the notification center, which is closed again.
   */
  async errorNotifications(): Promise<string[]> {
    await this.runCommand('Notifications: Show Notifications');
    const center = this.page.locator('.notifications-center');
    await center.waitFor({ state: 'visible' });
    const errors = center.locator('.notification-list-item', { has: this.page.locator('.notification-list-item-icon.codicon-error') });
    const messages = (await errors.locator('.notification-list-item-message').allInnerTexts()).map(norm);
    await this.page.keyboard.press('Escape');
    await center.waitFor({ state: 'hidden' });
    return messages;
  }

  /**
   * Opens target's context menu and chooses item, until shown (what the action opens) is
   * visible. The workbench's menu sometimes drops a click that comes right after it opened (on
   * a loaded machine): the click is repeated while the menu is still up, never once it closed.
   */
  async chooseFromContextMenu(target: Locator, item: string, shown: Locator): Promise<void> {
    const entry = this.page.locator('.context-view .action-label', { hasText: item }).first();
    await target.click({ button: 'right' });
    for (let i = 0; ; i++) {
      await entry.click();
      try {
        await shown.waitFor({ state: 'visible', timeout: 3000 });
        return;
      } catch {
        if (i >= 4 || !(await entry.isVisible())) {
          break;
        }
        console.log(`context menu: "${item}" still open 3 s after a click; clicking again`);
      }
    }
    await shown.waitFor({ state: 'visible' });
  }

  /** Ends the scenario: browser, server, and the private directory; keeps logs in artifacts. */
  async close(keepLogs: boolean): Promise<void> {
    await this.context?.close().catch(() => undefined);
    if (this.server && this.server.exitCode === null) {
      const exited = new Promise((r) => this.server!.once('exit', r));
      this.server.kill('SIGTERM');
      await Promise.race([exited, new Promise((r) => setTimeout(r, 10_000))]);
      if (this.server.exitCode === null) {
        this.server.kill('SIGKILL');
      }
    }
    if (keepLogs) {
      copyLogs(this.run, this.artifacts);
      if (this.consoleErrors.length) {
        fs.writeFileSync(path.join(this.artifacts, 'console-errors.txt'), this.consoleErrors.join('\n'));
      }
    }
    if (this.browserProfile) {
      fs.rmSync(this.browserProfile, { recursive: true, force: true });
    }
    fs.rmSync(this.run, { recursive: true, force: true });
  }
}

/** Keeps code-server's log and the extension host's and output channels' logs. */
function copyLogs(run: string, artifacts: string): void {
  const dst = path.join(artifacts, 'logs');
  fs.mkdirSync(dst, { recursive: true });
  const serverLog = path.join(run, 'code-server.log');
  if (fs.existsSync(serverLog)) {
    fs.copyFileSync(serverLog, path.join(dst, 'code-server.log'));
  }
  const logs = path.join(run, 'udd', 'logs');
  if (fs.existsSync(logs)) {
    fs.cpSync(logs, path.join(dst, 'udd-logs'), { recursive: true });
  }
}

/** Collapses whitespace as the spec's selectors expect. */
export function norm(s: string): string {
  return s.replace(/\s+/g, ' ').trim();
}

/** Runs a scenario with a workbench, keeping logs and a failure screenshot when it fails. */
export async function withWorkbench(
  name: string,
  workspace: string,
  waitForFile: string,
  body: (wb: Workbench) => Promise<void>,
  opts: WorkbenchOptions = {},
): Promise<void> {
  const wb = await Workbench.open(name, workspace, waitForFile, opts);
  let ok = false;
  try {
    await body(wb);
    ok = true;
  } finally {
    if (!ok) {
      await wb.screenshot('failure').catch(() => undefined);
    }
    await wb.close(!ok || process.env.HPCDAP_E2E_KEEP_LOGS === '1');
  }
}

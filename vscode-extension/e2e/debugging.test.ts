// A debugging session in a real VS Code (code-server) with the hpcdap adapter: a 4-rank local
// launch of the MPI-style ring program, paused from the Ranks view; the Call Stack shows the
// four ranks, Parallel Stacks the merged tree; clicking the compute node opens the source at a
// line of compute(); a watch of an unknown name shows its error in place; the session ends with
// no rank left running, and no error notification was raised through a hover, a watch, a step,
// a continue and a pause. Oracles: the program's source (which ranks run which function, the
// lines of compute) and /proc.
//
// Needs the DAP adapter ("hpcdap dap"), a later part of hpcdap than the extension: until the
// binary has that command this test reports "skipped: adapter not built".

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import { RankSet } from '../src/core/rankset';
import { findAdapter } from '../test/support/adapter';
import { buildRing, functionLines } from '../test/support/fixture';
import { norm, withWorkbench } from './harness';

const configName = 'ring: 4 ranks';

/** Pids of processes running program (the ranks), from /proc. */
function ranksRunning(program: string): number[] {
  const out = spawnSync('pgrep', ['-f', `^${program}( |$)`], { encoding: 'utf8' });
  return out.stdout.split('\n').filter(Boolean).map(Number);
}

test('debugging a 4-rank job: Call Stack, Ranks, Parallel Stacks, jump to a frame', { timeout: 300_000 }, async (t) => {
  const probe = findAdapter();
  if ('skip' in probe) {
    console.log(`skipped: ${probe.skip}`);
    t.skip(`skipped: ${probe.skip}`);
    return;
  }
  const ws = fs.mkdtempSync(path.join(os.tmpdir(), 'hpcdap-e2e-ws-'));
  const { source, program } = buildRing(ws);
  // Each rank creates ready.<rank> here once in compute or wait_for_peers (see ring.c).
  const ready = fs.mkdtempSync(path.join(os.tmpdir(), 'hpcdap-e2e-ready-'));
  fs.mkdirSync(path.join(ws, '.vscode'));
  fs.writeFileSync(
    path.join(ws, '.vscode', 'launch.json'),
    JSON.stringify(
      {
        version: '0.2.0',
        configurations: [
          { type: 'hpcdap', request: 'launch', name: configName, program: '${workspaceFolder}/ring', np: 4, launcher: 'local', env: { HPCDAP_TEST_READY_DIR: ready } },
        ],
      },
      null,
      2,
    ),
  );
  const compute = functionLines(source, 'compute');
  let pids: number[] = [];
  try {
    await withWorkbench(
      'debugging',
      ws,
      'ring.c',
      async (wb) => {
        const page = wb.page;
        await wb.openRunAndDebug(configName);
        await wb.expandView('Ranks');
        await wb.expandView('Parallel Stacks');
        await wb.startDebugging(configName);
        await page.locator('.debug-toolbar').waitFor({ state: 'visible' });

        // Ranks: four rows "rank N", running.
        const allRanks = (state: string) => (rows: { label: string; description: string }[]) =>
          rows.length === 4 && rows.every((row, r) => row.label === `rank ${r}` && row.description.startsWith(`${state} `));
        await wb.waitForTreeRows('Ranks', allRanks('running'), 'four running ranks');
        pids = ranksRunning(program);
        assert.equal(pids.length, 4, `processes of ${program}: ${pids}`);
        const readyBy = Date.now() + 60_000;
        while (![0, 1, 2, 3].every((r) => fs.existsSync(path.join(ready, `ready.${r}`)))) {
          assert.ok(Date.now() < readyBy, 'the ranks did not all get past their start-up');
          await page.waitForTimeout(100);
        }
        await wb.screenshot('running');

        // Pause every rank from the Ranks view's title bar.
        await wb.pane('Ranks').hover();
        await wb.header('Ranks').locator('.action-label[aria-label="Pause Selected Ranks"]').first().click();
        await wb.unhover();

        // Call Stack: one thread per rank.
        const threadNames = page.locator('.debug-call-stack .monaco-list-row .thread .name');
        for (let r = 0; r < 4; r++) {
          await threadNames.filter({ hasText: new RegExp(`^rank ${r} · `) }).first().waitFor();
        }
        await wb.waitForTreeRows('Ranks', allRanks('stopped'), 'four stopped ranks');
        await page.locator('.statusbar-item', { hasText: '4 ranks · 4 stopped' }).first().waitFor();

        // Tree views render only the rows in sight: give Parallel Stacks the side bar.
        for (const v of ['Variables', 'Watch', 'Call Stack', 'Loaded Scripts', 'Breakpoints', 'Ranks']) {
          await wb.collapseView(v);
        }

        // Parallel Stacks, merged by function: one main on all ranks (rank 0 and ranks 1-3 are at
        // different lines of it), compute on ranks 1-3, wait_for_peers on rank 0; each node's
        // description names its ranks and the ranks at each line ("0-3 · 4 ranks · lines 70 (0),
        // 72 (1-3)"). The view refreshes a moment after the ranks stop, so a tree read from fewer
        // stopped ranks may show first: wait for the whole one.
        const stackRows = wb.pane('Parallel Stacks').locator('.customview-tree .monaco-list-row');
        const nodeOf = (rows: { label: string; description: string }[], name: string) => {
          const named = rows.filter((r) => r.label === name);
          assert.equal(named.length, 1, `one ${name} node: ${JSON.stringify(rows)}`);
          const m = /^(\S*) · (\d+) ranks? · (.*)$/.exec(named[0].description);
          assert.ok(m, `description of the ${name} node: ${named[0].description}`);
          const ranks = RankSet.parse(m![1], 4);
          assert.equal(ranks.size, Number(m![2]), `${name}: ${named[0].description}`);
          // "line 45" or "lines 45 (1), 46 (2-3)": the lines' rank sets split the node's.
          const lines = new Map<number, RankSet>();
          const one = /^line (\d+)$/.exec(m![3]);
          if (one) {
            lines.set(Number(one[1]), ranks);
          } else {
            assert.match(m![3], /^lines \d+ \(\S+\)(, \d+ \(\S+\))+$/, `${name}: ${named[0].description}`);
            for (const [, line, set] of m![3].matchAll(/(\d+) \(([^)]+)\)/g)) {
              lines.set(Number(line), RankSet.parse(set, 4));
            }
          }
          let union = RankSet.empty;
          for (const set of lines.values()) {
            assert.ok(union.intersect(set).isEmpty, `${name}: a rank at two lines: ${named[0].description}`);
            union = union.union(set);
          }
          assert.ok(union.equals(ranks), `${name}: the lines name ${union}, the node ${ranks}`);
          return { ranks: ranks.toString(), lines };
        };
        const want: Record<string, string> = { main: '0-3', compute: '1-3', wait_for_peers: '0' };
        const stacks = await wb.waitForTreeRows(
          'Parallel Stacks',
          (rs) => Object.keys(want).every((name) => rs.some((r) => r.label === name && r.description.startsWith(`${want[name]} · `))),
          'main on ranks 0-3, compute on 1-3 and wait_for_peers on 0',
        );
        for (const [name, ranks] of Object.entries(want)) {
          assert.equal(nodeOf(stacks, name).ranks, ranks, name);
        }
        for (const line of nodeOf(stacks, 'compute').lines.keys()) {
          assert.ok(line >= compute.first && line <= compute.last, `compute's line ${line} is not in compute (${compute.first}-${compute.last})`);
        }
        assert.equal(nodeOf(stacks, 'main').lines.size, 2, 'rank 0 and ranks 1-3 are at two lines of main');
        await wb.screenshot('stopped');
        const node = (name: string) => stackRows.filter({ has: page.locator('.label-name', { hasText: name }) }).first();

        // Clicking the compute node opens ring.c at a line of compute().
        await node('compute').click();
        await wb.unhover();
        await page.locator('.tabs-container .tab.active', { hasText: 'ring.c' }).waitFor();
        // ring.c may already be open where the session stopped: wait for the cursor to move.
        const position = page.locator('.statusbar-item[id="status.editor.selection"]');
        await position.filter({ hasText: /Ln \d+/ }).waitFor();
        const inCompute = (l: number) => l >= compute.first && l <= compute.last;
        // A click the tree drops while it redraws is given again after 5 s, twice at most.
        let line = 0;
        for (let start = Date.now(), clicks = 1; ; await page.waitForTimeout(100)) {
          line = Number(/Ln (\d+)/.exec(await position.innerText())?.[1] ?? 0);
          if (inCompute(line) || Date.now() - start > 15_000) break;
          if (Date.now() - start > 5_000 * clicks && clicks < 3) {
            console.log(`the cursor is at line ${line} 5 s after a click on compute; clicking again`);
            await node('compute').click();
            clicks++;
          }
        }
        assert.ok(inCompute(line), `line ${line} is not in compute (${compute.first}-${compute.last})`);
        await wb.screenshot('frame');

        // Compare "rank" across the ranks of a compute node: one value per rank, as the launcher
        // numbered them (rank i runs with HPCDAP_RANK=i).
        const computeRanks = RankSet.parse(/^(\S*) ·/.exec(norm(await node('compute').locator('.label-description').innerText()))![1], 4);
        const input = page.locator('.quick-input-widget input.input');
        await wb.chooseFromContextMenu(node('compute'), 'Compare Expression Across These Ranks', input);
        await input.fill('rank');
        await page.keyboard.press('Enter');
        const table = page.frameLocator('iframe.webview').first().frameLocator('iframe#active-frame').locator('#compare tbody tr');
        await table.first().waitFor();
        const rows = (await table.allInnerTexts()).map((r) => norm(r)).sort();
        assert.deepEqual(rows, computeRanks.ranks().map((r) => `${r} ${r} 1`), 'value, ranks, count per row');
        await wb.unhover();
        await wb.screenshot('compare');

        // A watch of a name the stopped frame does not know shows its error in the Watch view and
        // raises no notification (as no failed hover does where the pointer happens to rest):
        // VS Code notifies every error the adapter marks showUser.
        await wb.expandView('Watch');
        await wb.pane('Watch').hover();
        await wb.header('Watch').locator('.action-label[aria-label="Add Expression"]').first().click();
        await page.locator('.debug-watch .monaco-inputbox input').fill('no_such_name');
        await page.keyboard.press('Enter');
        await wb.unhover();
        const watchRow = page.locator('.debug-watch .monaco-list-row', { hasText: 'no_such_name' }).first();
        await watchRow.locator('.value.error', { hasText: 'no_such_name' }).waitFor();
        await wb.screenshot('watch');
        assert.deepEqual(await wb.errorNotifications(), [], 'error notifications in a normal session');

        // Hover: the global counter, in ring.c where the compute node opened it, shows its value
        // whichever frame is focused.
        // Tokens of one colour share a span ("counter = sum;"): the pointer goes to the
        // middle of the name's own characters in it.
        const counterSpan = page.locator('.monaco-editor .view-lines .view-line span:not(:has(span))', { hasText: /\bcounter\b/ }).first();
        const at = await counterSpan.evaluate((el) => {
          const text = el.firstChild!;
          const i = text.textContent!.indexOf('counter');
          const range = el.ownerDocument.createRange();
          range.setStart(text, i);
          range.setEnd(text, i + 'counter'.length);
          const b = range.getBoundingClientRect();
          return { x: b.x + b.width / 2, y: b.y + b.height / 2 };
        });
        await page.mouse.move(at.x, at.y);
        await page.locator('.debug-hover-widget', { hasText: /\d/ }).first().waitFor();
        await wb.screenshot('hover');
        await wb.unhover();
        await page.keyboard.press('Escape');

        // Step over, continue and pause again, from the debug toolbar and the Ranks view: every
        // rank stops after the step (the ranks on the stepped thread's line stepped with it, the
        // others, paused elsewhere, ran free and stopped with the job), runs after the continue,
        // and stops at the pause.
        await wb.collapseView('Watch');
        await wb.collapseView('Parallel Stacks');
        await wb.expandView('Ranks');
        const allStopped = (reason: string) => (rows: { label: string; description: string }[]) =>
          rows.length === 4 && rows.every((row, r) => row.label === `rank ${r}` && row.description.startsWith(`stopped (${reason})`));
        await page.locator('.debug-toolbar .action-label[aria-label^="Step Over"]').click();
        await wb.unhover();
        const steppedAndStopped = (rows: { label: string; description: string }[]) =>
          rows.length === 4 &&
          rows.every((row, r) => row.label === `rank ${r}` && /^stopped \((step|pause)\)/.test(row.description)) &&
          rows.some((row) => row.description.startsWith('stopped (step)'));
        await wb.waitForTreeRows('Ranks', steppedAndStopped, 'four ranks stopped after a step, one of them by it');
        await page.locator('.debug-toolbar .action-label[aria-label^="Continue"]').click();
        await wb.unhover();
        await wb.waitForTreeRows('Ranks', allRanks('running'), 'four running ranks after continue');
        await wb.pane('Ranks').hover();
        await wb.header('Ranks').locator('.action-label[aria-label="Pause Selected Ranks"]').first().click();
        await wb.unhover();
        await wb.waitForTreeRows('Ranks', allStopped('pause'), 'four ranks paused again');
        await wb.screenshot('stepped');
        assert.deepEqual(await wb.errorNotifications(), [], 'error notifications after hover, step, continue and pause');

        // End the session: toolbar gone, call stack empty, no rank left.
        await page.keyboard.press('Shift+F5');
        await page.locator('.debug-toolbar').waitFor({ state: 'hidden' });
        await page.locator('.debug-call-stack .monaco-list-row').first().waitFor({ state: 'detached' });
        const end = Date.now() + 20_000;
        while (ranksRunning(program).length && Date.now() < end) {
          await page.waitForTimeout(100);
        }
        assert.deepEqual(ranksRunning(program), [], 'ranks left running after the session');
        await wb.screenshot('ended');
        assert.deepEqual(await wb.errorNotifications(), [], 'error notifications at the end of the session');
      },
      { settings: { 'hpcdap.path': probe.path } },
    );
  } finally {
    // A failed run must not leave its ranks behind.
    for (const pid of pids) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    fs.rmSync(ws, { recursive: true, force: true });
    fs.rmSync(ready, { recursive: true, force: true });
  }
});

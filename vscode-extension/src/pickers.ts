// The "${command:…}" pickers of attach configurations: a process, a running MPI launcher, or a
// running Slurm job step. They list what runs where the extension host runs (the remote host
// under VS Code Remote), which is where "hpcdap dap" runs too.

import { execFile } from 'child_process';
import * as vscode from 'vscode';
import { isLauncher, parsePs, parseSqueueSteps } from './core/processes';

function run(cmd: string, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(cmd, args, { maxBuffer: 16 << 20 }, (err, stdout, stderr) => {
      if (err) {
        reject(new Error(`${cmd} ${args.join(' ')}: ${stderr.trim() || err.message}`));
      } else {
        resolve(stdout);
      }
    });
  });
}

/** Lets the user pick a process; returns its pid as a string, or undefined to cancel. */
export async function pickProcess(launchersOnly: boolean): Promise<string | undefined> {
  let procs;
  try {
    procs = parsePs(await run('ps', ['-eo', 'pid=,ppid=,comm=,args=']));
  } catch (e) {
    void vscode.window.showErrorMessage(`hpcdap: list processes: ${(e as Error).message}`);
    return undefined;
  }
  const self = process.pid;
  const shown = procs.filter((p) => p.pid !== self && (!launchersOnly || isLauncher(p)));
  if (launchersOnly && shown.length === 0) {
    void vscode.window.showErrorMessage('hpcdap: no mpirun, mpiexec or srun is running on this host.');
    return undefined;
  }
  const pick = await vscode.window.showQuickPick(
    shown.map((p) => ({ label: p.comm, description: `pid ${p.pid}`, detail: p.args, pid: p.pid })),
    { title: launchersOnly ? 'hpcdap: attach to an MPI launcher' : 'hpcdap: attach to a process', matchOnDescription: true, matchOnDetail: true },
  );
  return pick ? String(pick.pid) : undefined;
}

/** Lets the user pick a running Slurm job step; returns "JOB.STEP", or undefined to cancel. */
export async function pickSlurmStep(): Promise<string | undefined> {
  let steps;
  try {
    steps = parseSqueueSteps(await run('squeue', ['--steps', '--noheader', '--format=%i|%j|%N|%u']));
  } catch (e) {
    void vscode.window.showErrorMessage(`hpcdap: list Slurm job steps (is this a Slurm login node?): ${(e as Error).message}`);
    return undefined;
  }
  if (steps.length === 0) {
    void vscode.window.showErrorMessage('hpcdap: squeue lists no running job steps.');
    return undefined;
  }
  const pick = await vscode.window.showQuickPick(
    steps.map((s) => ({ label: s.step, description: s.name, detail: `${s.user} on ${s.nodes}` })),
    { title: 'hpcdap: attach to a Slurm job step', matchOnDescription: true },
  );
  return pick?.label;
}

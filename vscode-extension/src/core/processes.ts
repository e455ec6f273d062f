// Parsing the process and job listings behind the attach pickers: `ps` for local processes and
// MPI launchers, `squeue` for running Slurm job steps.

/** One process of `ps -eo pid=,ppid=,comm=,args=`. */
export interface ProcessInfo {
  pid: number;
  ppid: number;
  comm: string;
  args: string;
}

/** Parses `ps -eo pid=,ppid=,comm=,args=` output (comm holds no spaces on Linux ps). */
export function parsePs(out: string): ProcessInfo[] {
  const procs: ProcessInfo[] = [];
  for (const line of out.split('\n')) {
    const m = /^\s*([0-9]+)\s+([0-9]+)\s+(\S+)\s*(.*)$/.exec(line);
    if (m) {
      procs.push({ pid: Number(m[1]), ppid: Number(m[2]), comm: m[3], args: m[4] });
    }
  }
  return procs;
}

/** Command names of the launchers whose MPIR process table hpcdap can read. */
export const launcherCommands = ['mpirun', 'mpiexec', 'orterun', 'prterun', 'prun', 'srun', 'mpiexec.hydra', 'hydra_pmi_proxy', 'runjob'];

/** Whether a process is an MPI or Slurm launcher. */
export function isLauncher(p: ProcessInfo): boolean {
  return launcherCommands.includes(p.comm) && p.comm !== 'hydra_pmi_proxy';
}

/** One running job step of `squeue --steps --noheader --format=%i|%j|%N|%u`. */
export interface SlurmStep {
  step: string;
  name: string;
  nodes: string;
  user: string;
}

/** Parses the squeue step listing; lines that are not "JOB.STEP|…" are skipped. */
export function parseSqueueSteps(out: string): SlurmStep[] {
  const steps: SlurmStep[] = [];
  for (const line of out.split('\n')) {
    const [step, name = '', nodes = '', user = ''] = line.trim().split('|');
    if (/^[0-9]+\.[0-9]+$/.test(step)) {
      steps.push({ step, name, nodes, user });
    }
  }
  return steps;
}

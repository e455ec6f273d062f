// Checking and completing hpcdap launch and attach configurations before a session starts, with
// the rules of the adapter's argument checking (README "DAP interface"), so that a mistake in
// launch.json is reported by name in the editor instead of as a failed session.

import { RankSet, checkRankSetSyntax } from './rankset';

/** The launchers hpcdap can start ranks with. */
export const launchers = ['local', 'mpirun', 'prterun', 'prun', 'mpiexec.hydra', 'srun', 'runjob'] as const;
/** Every launcher name the adapter accepts, alone or as the last element of a path. */
export const launcherNames = ['mpirun', 'mpiexec', 'orterun', 'mpirun.openmpi', 'mpiexec.openmpi', 'prterun', 'prte', 'prun',
  'mpiexec.hydra', 'hydra', 'mpirun.mpich', 'mpiexec.mpich', 'srun', 'runjob', 'hpcdap-runjob'] as const;
/** How the ranks of an MPI launcher are reached, when the configuration says. */
export const launchProtocols = ['mpir', 'pmix', 'follow'] as const;
/** What stops when one thread stops. */
export const stopModes = ['all', 'rank', 'thread'] as const;
/** The QEMU user-mode emulators for Power executables. */
export const emulators = ['qemu-ppc64', 'qemu-ppc64le'] as const;
/** The most ranks the local launcher starts (one agent per 64 ranks). */
export const maxLocalRanks = 4096;
/** The bounds of callTimeout, in seconds, as the adapter checks them. */
export const minCallTimeout = 0.001;
export const maxCallTimeout = 3600;
/** The attach targets, of which a configuration names exactly one. */
export const attachTargets = ['pid', 'pids', 'launcherPid', 'slurmJob', 'pmixNamespace', 'processName', 'joinSession'] as const;
/** What a session name may be, as the adapter checks sessionName and joinSession. */
export const sessionNamePattern = /^[A-Za-z0-9._-]{1,64}$/;

/** A debug configuration as launch.json holds it (after variable substitution). */
export type DebugConfig = Record<string, unknown>;

/** The result of checking a configuration: the completed configuration, or what is wrong. */
export interface CheckResult {
  config?: DebugConfig;
  errors: string[];
}

/**
 * Checks one configuration and fills the defaults the adapter would apply, so the arguments the
 * adapter receives are explicit. Numbers that variable substitution left as strings (a pid from
 * a "${command:…}" picker) are converted. The input is not modified.
 */
export function checkConfig(input: DebugConfig): CheckResult {
  const c: DebugConfig = { ...input };
  const errors: string[] = [];
  const name = typeof c.name === 'string' && c.name !== '' ? `"${c.name}"` : 'the configuration';
  const err = (msg: string) => errors.push(`${name}: ${msg}`);

  if (c.type !== undefined && c.type !== 'hpcdap') {
    err(`type is ${JSON.stringify(c.type)}, not "hpcdap"`);
  }
  if (c.request === 'launch') {
    checkLaunch(c, err);
  } else if (c.request === 'attach') {
    checkAttach(c, err);
  } else {
    err(`request must be "launch" or "attach", not ${JSON.stringify(c.request)}`);
  }
  checkSubstitutePath(c, err);
  for (const k of ['sessionName', 'joinSession'] as const) {
    if (c[k] !== undefined && !(typeof c[k] === 'string' && sessionNamePattern.test(c[k] as string))) {
      err(`"${k}" must be 1 to 64 letters, digits, ".", "_" and "-", not ${describe(c[k])}`);
    }
  }
  return errors.length ? { errors } : { config: c, errors };
}

/** Checks "substitutePath": rules of two absolute directories, as the adapter wants them. */
function checkSubstitutePath(c: DebugConfig, err: (m: string) => void): void {
  if (c.substitutePath === undefined) {
    return;
  }
  if (!Array.isArray(c.substitutePath)) {
    err(`"substitutePath" must be a list of {"from": ..., "to": ...} rules, not ${describe(c.substitutePath)}`);
    return;
  }
  c.substitutePath.forEach((r: unknown, i: number) => {
    const rule = r as { from?: unknown; to?: unknown };
    if (!isPlainObject(r) || typeof rule.from !== 'string' || typeof rule.to !== 'string') {
      err(`"substitutePath"[${i}] must be {"from": "/dir/here", "to": "/dir/as/built"}, not ${describe(r)}`);
    } else if (!rule.from.startsWith('/') || !rule.to.startsWith('/')) {
      err(`"substitutePath"[${i}]: "from" and "to" must be absolute paths, not ${JSON.stringify(rule.from)} and ${JSON.stringify(rule.to)}`);
    }
  });
}

function checkLaunch(c: DebugConfig, err: (m: string) => void): void {
  if (typeof c.program !== 'string' || c.program.trim() === '') {
    err('launch needs "program": the executable every rank runs');
  }
  checkStringArray(c, 'args', err);
  checkStringArray(c, 'launcherArgs', err);
  if (c.cwd !== undefined && typeof c.cwd !== 'string') {
    err(`"cwd" must be a string, not ${describe(c.cwd)}`);
  }
  if (c.env !== undefined) {
    if (!isPlainObject(c.env)) {
      err(`"env" must be an object of "NAME": "value" pairs, not ${describe(c.env)}`);
    } else {
      for (const [k, v] of Object.entries(c.env)) {
        if (typeof v !== 'string' && v !== null) {
          err(`"env": the value of ${k} must be a string (or null to remove it), not ${describe(v)}`);
        }
        if (k === '' || k.includes('=')) {
          err(`"env": ${JSON.stringify(k)} is not a variable name`);
        }
      }
    }
  }
  if (c.np === undefined) {
    c.np = 1;
  }
  const np = toInteger(c.np);
  if (np === undefined || np < 1) {
    err(`"np" must be an integer ≥ 1, not ${describe(c.np)}`);
  } else {
    c.np = np;
  }
  if (c.launcher === undefined) {
    c.launcher = 'local';
  }
  const launcherName = typeof c.launcher === 'string' ? c.launcher.slice(c.launcher.lastIndexOf('/') + 1) : '';
  if (c.launcher !== 'local' && !(launcherNames as readonly string[]).includes(launcherName)) {
    err(`"launcher" must be one of ${launchers.map((a) => `"${a}"`).join(', ')} (or ${['mpirun.openmpi', 'mpiexec.mpich'].map((a) => `"${a}"`).join(', ')}, a path to one of them), not ${describe(c.launcher)}`);
  }
  if (c.launchProtocol !== undefined) {
    checkEnum(c, 'launchProtocol', launchProtocols, err);
  }
  if (c.launcher === 'local') {
    if (Array.isArray(c.launcherArgs) && c.launcherArgs.length > 0) {
      err('"launcherArgs" has no meaning for the local launcher');
    }
    if (c.launchProtocol !== undefined) {
      err('"launchProtocol" has no meaning for the local launcher');
    }
    if (typeof c.np === 'number' && c.np > maxLocalRanks) {
      err(`"np" ${c.np} exceeds the local launcher's limit of ${maxLocalRanks} ranks`);
    }
  }
  for (const k of ['stopAtEntry', 'disableASLR', 'noDebug']) {
    if (c[k] !== undefined && typeof c[k] !== 'boolean') {
      err(`"${k}" must be true or false, not ${describe(c[k])}`);
    }
  }
  if (c.callTimeout !== undefined && !(typeof c.callTimeout === 'number' && c.callTimeout >= minCallTimeout && c.callTimeout <= maxCallTimeout)) {
    err(`"callTimeout" must be a number of seconds between ${minCallTimeout} and ${maxCallTimeout}, not ${describe(c.callTimeout)}`);
  }
  checkStopMode(c, err);
  if (c.emulator !== undefined) {
    checkEnum(c, 'emulator', emulators, err);
  }
  if (c.coreFile !== undefined) {
    if (typeof c.coreFile !== 'string' || c.coreFile.trim() === '') {
      err(`"coreFile" must be the path of a core file, not ${describe(c.coreFile)}`);
    } else if (typeof c.np === 'number' && c.np !== 1) {
      err(`"coreFile" debugs one process post mortem: "np" must be 1, not ${c.np}`);
    } else if (c.launcher !== 'local') {
      err(`"coreFile" runs nothing: "launcher" must be "local", not ${JSON.stringify(c.launcher)}`);
    }
  }
  checkRanks(c, typeof c.np === 'number' && c.np >= 1 ? c.np : undefined, err);
}

function checkAttach(c: DebugConfig, err: (m: string) => void): void {
  const given = attachTargets.filter((k) => c[k] !== undefined);
  if (given.length === 0) {
    err('attach needs one of "pid", "pids", "launcherPid", "slurmJob", "pmixNamespace", "processName" or "joinSession"');
  } else if (given.length > 1) {
    err(`attach takes exactly one of "pid", "pids", "launcherPid", "slurmJob", "pmixNamespace", "processName" and "joinSession", not ${given.map((k) => `"${k}"`).join(' and ')}`);
  }
  if (c.joinSession !== undefined) {
    const extra = ['sessionName', 'stopMode', 'ranks', 'stopAtEntry'].filter((k) => c[k] !== undefined);
    if (extra.length > 0) {
      err(`"joinSession" joins a running job as it is: ${extra.map((k) => `"${k}"`).join(' and ')} cannot come with it`);
    }
  }
  if (c.processName !== undefined && (typeof c.processName !== 'string' || c.processName.trim() === '')) {
    err(`"processName" must be a program's name or path, not ${describe(c.processName)}`);
  }
  if (c.waitFor !== undefined && typeof c.waitFor !== 'boolean') {
    err(`"waitFor" must be true or false, not ${describe(c.waitFor)}`);
  }
  if (c.waitFor === true && c.processName === undefined) {
    err('"waitFor" waits for a process by "processName": give one');
  }
  if (c.timeout !== undefined && c.waitFor !== true) {
    err('"timeout" bounds "waitFor": give both or neither');
  }
  if (c.timeout !== undefined && !(typeof c.timeout === 'number' && c.timeout > 0 && c.timeout <= 3600)) {
    err(`"timeout" must be a number of seconds up to 3600, not ${describe(c.timeout)}`);
  }
  let size: number | undefined;
  for (const k of ['pid', 'launcherPid'] as const) {
    if (c[k] === undefined) {
      continue;
    }
    const pid = toInteger(c[k]);
    if (pid === undefined || pid < 1) {
      err(`"${k}" must be a process id (an integer ≥ 1), not ${describe(c[k])}`);
    } else {
      c[k] = pid;
    }
    if (k === 'pid') {
      size = 1;
    }
  }
  if (c.pids !== undefined) {
    if (!isPlainObject(c.pids) || Object.keys(c.pids).length === 0) {
      err(`"pids" must map ranks to process ids, like {"0": 4242, "1": 4243}, not ${describe(c.pids)}`);
    } else {
      const out: Record<string, number> = {};
      const rankOfPid = new Map<number, string>();
      let maxRank = -1;
      for (const [k, v] of Object.entries(c.pids)) {
        if (!/^[0-9]+$/.test(k) || Number(k) > 2 ** 31 - 1) {
          err(`"pids": ${JSON.stringify(k)} is not a rank`);
          continue;
        }
        const pid = toInteger(v);
        if (pid === undefined || pid < 1) {
          err(`"pids": rank ${k} must map to a process id (an integer ≥ 1), not ${describe(v)}`);
          continue;
        }
        const other = rankOfPid.get(pid);
        if (other !== undefined) {
          err(`"pids": process ${pid} is given for ranks ${other} and ${k}`);
        }
        rankOfPid.set(pid, k);
        out[String(Number(k))] = pid;
        maxRank = Math.max(maxRank, Number(k));
      }
      c.pids = out;
      size = maxRank + 1;
    }
  }
  if (c.slurmJob !== undefined) {
    if (typeof c.slurmJob !== 'string' || !/^[0-9]+\.[0-9]+$/.test(c.slurmJob.trim())) {
      err(`"slurmJob" must be a job step "JOBID.STEPID" such as "42.0", not ${describe(c.slurmJob)}`);
    } else {
      c.slurmJob = c.slurmJob.trim();
    }
  }
  if (c.pmixNamespace !== undefined) {
    if (typeof c.pmixNamespace !== 'string' || c.pmixNamespace.trim() === '') {
      err(`"pmixNamespace" must be a PMIx namespace such as "prterun-node1-4242@1", not ${describe(c.pmixNamespace)}`);
    } else {
      c.pmixNamespace = c.pmixNamespace.trim();
    }
  }
  if (c.program !== undefined && (typeof c.program !== 'string' || c.program.trim() === '')) {
    err(`"program" must be the path of the ranks' executable, not ${describe(c.program)}`);
  }
  if (c.stopAtEntry !== undefined && typeof c.stopAtEntry !== 'boolean') {
    err(`"stopAtEntry" must be true or false, not ${describe(c.stopAtEntry)}`);
  }
  for (const k of ['np', 'launcher', 'launcherArgs', 'args', 'coreFile', 'emulator']) {
    if (c[k] !== undefined) {
      err(`"${k}" belongs to launch configurations; attach does not use it`);
    }
  }
  checkStopMode(c, err);
  checkRanks(c, size, err);
}

function checkStopMode(c: DebugConfig, err: (m: string) => void): void {
  if (c.stopMode === undefined) {
    c.stopMode = 'all';
  }
  checkEnum(c, 'stopMode', stopModes, err);
}

/** Checks "ranks" against the job size when it is known, and only its notation otherwise. */
function checkRanks(c: DebugConfig, size: number | undefined, err: (m: string) => void): void {
  if (c.ranks === undefined) {
    c.ranks = 'all';
  }
  if (typeof c.ranks !== 'string') {
    err(`"ranks" must be a rank set such as "0-3 8", not ${describe(c.ranks)}`);
    return;
  }
  if (size === undefined) {
    const e = checkRankSetSyntax(c.ranks);
    if (e) {
      err(`"ranks": ${e}`);
    } else if (c.ranks.trim() === '') {
      err('"ranks" names no rank');
    }
    return;
  }
  const p = RankSet.tryParse(c.ranks, size);
  if (!p.set) {
    err(`"ranks": ${p.error}`);
  } else if (p.set.isEmpty) {
    err('"ranks" names no rank');
  }
}

function checkEnum(c: DebugConfig, key: string, allowed: readonly string[], err: (m: string) => void): void {
  if (!allowed.includes(c[key] as string)) {
    err(`"${key}" must be one of ${allowed.map((a) => `"${a}"`).join(', ')}, not ${describe(c[key])}`);
  }
}

function checkStringArray(c: DebugConfig, key: string, err: (m: string) => void): void {
  const v = c[key];
  if (v === undefined) {
    return;
  }
  if (!Array.isArray(v) || v.some((x) => typeof x !== 'string')) {
    err(`"${key}" must be an array of strings, not ${describe(v)}`);
  }
}

/** An integer from a number or a decimal string, or undefined. */
function toInteger(v: unknown): number | undefined {
  if (typeof v === 'number') {
    return Number.isSafeInteger(v) ? v : undefined;
  }
  if (typeof v === 'string' && /^\s*[0-9]+\s*$/.test(v)) {
    const n = Number(v);
    return Number.isSafeInteger(n) ? n : undefined;
  }
  return undefined;
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function describe(v: unknown): string {
  if (v === undefined) {
    return 'nothing';
  }
  const s = JSON.stringify(v);
  return s.length > 60 ? `${s.slice(0, 57)}...` : s;
}

/**
 * The configuration for F5 without a launch.json: debug the executable built from the file in
 * the editor (same directory, same name without extension), as one process stopped at main.
 */
export function defaultLaunchConfig(): DebugConfig {
  return {
    type: 'hpcdap',
    request: 'launch',
    name: 'hpcdap: Launch',
    program: '${fileDirname}/${fileBasenameNoExtension}',
    args: [],
    stopAtEntry: true,
  };
}

/**
 * Parses a "host:port" server address ("127.0.0.1:4711", "[::1]:4711", "login1:4711"). Returns
 * an error message for anything else.
 */
export function parseServerAddress(s: string): { host: string; port: number } | { error: string } {
  const m = /^\s*(?:\[([0-9A-Fa-f:.]+)\]|([^\s:[\]]+)):([0-9]{1,5})\s*$/.exec(s);
  if (!m) {
    return { error: `hpcdap.server: ${JSON.stringify(s)} is not "host:port" (e.g. "127.0.0.1:4711")` };
  }
  const port = Number(m[3]);
  if (port < 1 || port > 65535) {
    return { error: `hpcdap.server: port ${port} is out of range 1-65535` };
  }
  return { host: m[1] ?? m[2], port };
}

import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { DebugConfig, checkConfig, parseServerAddress } from '../../src/core/config';
import { checkRankSetSyntax } from '../../src/core/rankset';
import { expandSnippetText, materializeSnippet, substituteVariables } from '../../src/core/snippets';
import { packageJson, repoRoot } from '../support/paths';

const launch = (extra: DebugConfig): DebugConfig => ({ type: 'hpcdap', request: 'launch', name: 'L', program: '/bin/true', ...extra });
const attach = (extra: DebugConfig): DebugConfig => ({ type: 'hpcdap', request: 'attach', name: 'A', ...extra });

function rejects(c: DebugConfig, want: RegExp): void {
  const r = checkConfig(c);
  assert.equal(r.config, undefined, `${JSON.stringify(c)} was accepted`);
  assert.ok(r.errors.some((e) => want.test(e)), `${JSON.stringify(c)}: errors ${JSON.stringify(r.errors)} do not match ${want}`);
}

test('launch: defaults are filled', () => {
  const r = checkConfig(launch({}));
  assert.deepEqual(r.errors, []);
  assert.deepEqual(r.config, { type: 'hpcdap', request: 'launch', name: 'L', program: '/bin/true', np: 1, launcher: 'local', stopMode: 'all', ranks: 'all' });
});

test('launch: invalid fields are named', () => {
  rejects(launch({ program: undefined }), /needs "program"/);
  rejects(launch({ program: '  ' }), /needs "program"/);
  rejects(launch({ np: 0 }), /"np" must be an integer ≥ 1, not 0/);
  rejects(launch({ np: 2.5 }), /"np" must be an integer/);
  rejects(launch({ np: 'four' }), /"np" must be an integer/);
  rejects(launch({ launcher: 'mpich' }), /"launcher" must be one of "local", "mpirun", "prterun", "prun", "mpiexec.hydra", "srun", "runjob" \(or "mpirun.openmpi", "mpiexec.mpich", a path to one of them\), not "mpich"/);
  rejects(launch({ launcher: '/opt/bin/mpich' }), /"launcher" must be one of/);
  assert.deepEqual(checkConfig(launch({ launcher: '/opt/openmpi-5/bin/mpirun', np: 4 })).errors, []);
  assert.deepEqual(checkConfig(launch({ launcher: 'mpirun.openmpi', launchProtocol: 'pmix', np: 4 })).errors, []);
  rejects(launch({ launcher: 'mpirun', launchProtocol: 'tcp' }), /"launchProtocol" must be one of "mpir", "pmix", "follow", not "tcp"/);
  rejects(launch({ launchProtocol: 'pmix' }), /"launchProtocol" has no meaning for the local launcher/);
  rejects(launch({ stopMode: 'job' }), /"stopMode" must be one of/);
  rejects(launch({ emulator: 'qemu-x86_64' }), /"emulator" must be one of "qemu-ppc64", "qemu-ppc64le"/);
  rejects(launch({ args: 'a b' }), /"args" must be an array of strings/);
  rejects(launch({ launcherArgs: [1] }), /"launcherArgs" must be an array of strings/);
  rejects(launch({ env: { A: 1 } }), /the value of A must be a string/);
  rejects(launch({ launcherArgs: ['-x'] }), /"launcherArgs" has no meaning for the local launcher/);
  rejects(launch({ np: 4097 }), /"np" 4097 exceeds the local launcher's limit of 4096 ranks/);
  rejects(launch({ env: ['A=1'] }), /"env" must be an object/);
  rejects(launch({ cwd: 3 }), /"cwd" must be a string/);
  rejects(launch({ stopAtEntry: 'yes' }), /"stopAtEntry" must be true or false/);
  rejects(launch({ disableASLR: 0 }), /"disableASLR" must be true or false/);
  rejects(launch({ noDebug: 'true' }), /"noDebug" must be true or false/);
  rejects(launch({ callTimeout: 0 }), /"callTimeout" must be a number of seconds between 0.001 and 3600, not 0/);
  rejects(launch({ callTimeout: 3601 }), /"callTimeout" must be a number/);
  rejects(launch({ callTimeout: '10' }), /"callTimeout" must be a number/);
  assert.deepEqual(checkConfig(launch({ callTimeout: 0.5 })).errors, [], 'callTimeout 0.5');
  assert.deepEqual(checkConfig(launch({ callTimeout: 3600 })).errors, [], 'callTimeout 3600');
  rejects(launch({ substitutePath: { from: '/a', to: '/b' } }), /"substitutePath" must be a list/);
  rejects(launch({ substitutePath: [{ from: 'src', to: '/build' }] }), /"substitutePath"\[0\]: "from" and "to" must be absolute/);
  rejects(launch({ substitutePath: [{ from: '/src' }] }), /"substitutePath"\[0\] must be/);
  rejects(launch({ np: 4, ranks: '0-4' }), /"ranks": .*rank 4 is out of range \(the job has 4 ranks\)/);
  rejects(launch({ np: 4, ranks: '3-1' }), /reversed/);
  rejects(launch({ np: 4, ranks: '' }), /names no rank/);
  rejects(launch({ np: 4, ranks: 5 }), /"ranks" must be a rank set/);
  rejects(launch({ coreFile: '/tmp/core', np: 2 }), /"coreFile" debugs one process/);
  rejects(launch({ coreFile: '/tmp/core', launcher: 'mpirun' }), /"launcher" must be "local"/);
  rejects({ type: 'hpcdap', request: 'debug', name: 'X' }, /request must be "launch" or "attach"/);
  rejects({ type: 'cppdbg', request: 'launch', name: 'X', program: 'a' }, /type is "cppdbg"/);
});

test('launch: ranks are checked against np', () => {
  const r = checkConfig(launch({ np: 16, ranks: '1-$max:2' }));
  assert.deepEqual(r.errors, []);
  assert.equal(checkConfig(launch({ np: '8', ranks: 'all' })).config?.np, 8, 'a number from a variable becomes a number');
  assert.deepEqual(checkConfig(launch({ env: { A: 'x', B: null } })).errors, [], 'null removes a variable');
  assert.deepEqual(checkConfig(launch({ np: 4096, launcher: 'local' })).errors, []);
  assert.deepEqual(checkConfig(launch({ np: 8192, launcher: 'srun', launcherArgs: ['-N', '64'] })).errors, []);
});

test('attach: exactly one target', () => {
  rejects(attach({}), /needs one of "pid", "pids", "launcherPid", "slurmJob", "pmixNamespace", "processName" or "joinSession"/);
  rejects(attach({ pmixNamespace: 'prterun-n1-42@1', launcherPid: 5 }), /not "launcherPid" and "pmixNamespace"/);
  rejects(attach({ pmixNamespace: ' ' }), /"pmixNamespace" must be a PMIx namespace/);
  assert.equal(checkConfig(attach({ pmixNamespace: ' prterun-n1-42@1 ' })).config?.pmixNamespace, 'prterun-n1-42@1');
  assert.deepEqual(checkConfig(attach({ processName: 'solver', waitFor: true, timeout: 5 })).errors, []);
  rejects(attach({ processName: 'solver', pid: 4 }), /exactly one of .* not "pid" and "processName"/);
  rejects(attach({ pid: 4, waitFor: true }), /"waitFor" waits for a process by "processName"/);
  rejects(attach({ processName: 'solver', timeout: 5 }), /"timeout" bounds "waitFor"/);
  rejects(attach({ processName: 'solver', waitFor: true, timeout: 0 }), /"timeout" must be a number of seconds/);
  rejects(attach({ processName: '' }), /"processName" must be a program's name/);
  rejects(attach({ pid: 5, pids: { 0: 6 } }), /exactly one of .* not "pid" and "pids"/);
  rejects(attach({ launcherPid: 5, slurmJob: '1.0' }), /not "launcherPid" and "slurmJob"/);
  rejects(attach({ pid: 0 }), /"pid" must be a process id/);
  rejects(attach({ pid: '${command:pickProcess}' }), /"pid" must be a process id/);
  rejects(attach({ pids: {} }), /"pids" must map ranks/);
  rejects(attach({ pids: { a: 5 } }), /"a" is not a rank/);
  rejects(attach({ pids: { 0: 5, 1: 5 } }), /process 5 is given for ranks 0 and 1/);
  rejects(attach({ pids: { 0: -5 } }), /rank 0 must map to a process id/);
  rejects(attach({ slurmJob: '42' }), /"slurmJob" must be a job step "JOBID.STEPID"/);
  rejects(attach({ pid: 5, np: 4 }), /"np" belongs to launch configurations/);
  rejects(attach({ pid: 5, ranks: '1' }), /rank 1 is out of range \(the job has 1 ranks\)/);
  rejects(attach({ pids: { 0: 5, 3: 6 }, ranks: '4' }), /out of range \(the job has 4 ranks\)/);
  rejects(attach({ slurmJob: '1.0', ranks: '$max-0x' }), /bad rank/);
});

test('shared sessions: sessionName and joinSession', () => {
  assert.deepEqual(checkConfig(launch({ sessionName: 'solver-1.x_y' })).errors, []);
  assert.deepEqual(checkConfig(attach({ pid: 5, sessionName: 'solver' })).errors, []);
  assert.deepEqual(checkConfig(attach({ joinSession: 'solver' })).errors, []);
  rejects(launch({ sessionName: 'two words' }), /"sessionName" must be 1 to 64 letters/);
  rejects(launch({ sessionName: 'x'.repeat(65) }), /"sessionName" must be 1 to 64 letters/);
  rejects(attach({ joinSession: '' }), /"joinSession" must be 1 to 64 letters/);
  rejects(attach({ joinSession: 'solver', pid: 5 }), /exactly one of .* not "pid" and "joinSession"/);
  rejects(attach({ joinSession: 'solver', stopMode: 'rank' }), /"joinSession" joins a running job as it is: "stopMode" cannot/);
});

test('attach: accepted forms', () => {
  assert.deepEqual(checkConfig(attach({ pid: '4242' })).config?.pid, 4242);
  assert.deepEqual(checkConfig(attach({ pids: { '0': 4242, '01': 4243 } })).config?.pids, { 0: 4242, 1: 4243 });
  assert.equal(checkConfig(attach({ launcherPid: 77 })).errors.length, 0);
  assert.deepEqual(checkConfig(attach({ pid: 77, stopAtEntry: true })).errors, []);
  rejects(attach({ pid: 77, stopAtEntry: 'no' }), /"stopAtEntry" must be true or false/);
  const r = checkConfig(attach({ slurmJob: ' 42.0 ', ranks: '0-$max:2', stopMode: 'rank' }));
  assert.deepEqual(r.errors, []);
  assert.equal(r.config?.slurmJob, '42.0');
});

test('server address', () => {
  assert.deepEqual(parseServerAddress('127.0.0.1:4711'), { host: '127.0.0.1', port: 4711 });
  assert.deepEqual(parseServerAddress('login1.cluster:4711'), { host: 'login1.cluster', port: 4711 });
  assert.deepEqual(parseServerAddress('[::1]:9'), { host: '::1', port: 9 });
  for (const bad of ['4711', 'host:', 'host:70000', 'host:0', 'a b:1', ':1']) {
    assert.ok('error' in parseServerAddress(bad), bad);
  }
});

test('snippet syntax expands to the defaults', () => {
  assert.equal(expandSnippetText('"\\${workspaceFolder}/${2:a.out}"'), '"${workspaceFolder}/a.out"');
  assert.equal(expandSnippetText('${3|qemu-ppc64,qemu-ppc64le|}'), 'qemu-ppc64');
  assert.equal(expandSnippetText('${1:outer ${2:inner}} $0'), 'outer inner ');
  assert.deepEqual(materializeSnippet({ np: '^${3:4}', name: '${1:x}' }), { np: 4, name: 'x' });
  assert.deepEqual(substituteVariables({ p: '${a}/b', q: '${n}', r: ['${a}'] }, { a: '/w', n: 5 }), { p: '/w/b', q: 5, r: ['/w'] });
  assert.throws(() => substituteVariables('${nope}', {}), /no value for \$\{nope\}/);
});

/** The values a user's pickers and workspace give the snippets' variables. */
const snippetVars = { workspaceFolder: '/work/app', 'command:pickSlurmStep': '42.0', 'command:pickLauncherPid': '4242', 'command:pickProcess': '4243' };

test('every configuration snippet and initial configuration passes validation', () => {
  const dbg = packageJson().contributes.debuggers[0];
  const labels: string[] = dbg.configurationSnippets.map((s: { label: string }) => s.label);
  // The snippets the extension promises (README of the extension lists the same).
  for (const want of [/single process/, /locally/, /Open MPI mpirun -np 4/, /MPICH mpiexec/, /Slurm srun inside an allocation/, /running Slurm job step/, /mpirun by pid/, /Core file/, /Power code under QEMU/]) {
    assert.ok(labels.some((l) => want.test(l)), `no snippet matches ${want}: ${labels.join(', ')}`);
  }
  const configs = [
    ...dbg.configurationSnippets.map((s: { label: string; body: unknown }) => [s.label, materializeSnippet(s.body)]),
    ...dbg.initialConfigurations.map((c: { name: string }) => [c.name, c]),
  ];
  for (const [label, raw] of configs) {
    const c = substituteVariables(raw, snippetVars) as DebugConfig;
    const r = checkConfig(c);
    assert.deepEqual(r.errors, [], label);
    assert.equal(r.config!.type, 'hpcdap', label);
    for (const k of ['pid', 'launcherPid', 'np']) {
      if (r.config![k] !== undefined) {
        assert.equal(typeof r.config![k], 'number', `${label}: ${k}`);
      }
    }
  }
});

/** The field names of one argument table under a "### <heading>" of the README contract. */
function contractFields(readme: string, heading: string): string[] {
  const start = readme.indexOf(`### ${heading}`);
  assert.ok(start >= 0, `README has no "### ${heading}"`);
  const section = readme.slice(start + 4, readme.indexOf('\n### ', start + 4));
  return [...section.matchAll(/^\| `([A-Za-z]+)` \|/gm)].map((m) => m[1]);
}

test('package.json declares exactly the launch and attach arguments of the README contract', () => {
  const readme = fs.readFileSync(path.join(repoRoot, 'README.md'), 'utf8');
  const launchFields = contractFields(readme, 'launch arguments');
  const attachFields = contractFields(readme, 'attach arguments');
  assert.ok(launchFields.length >= 10 && attachFields.length >= 4, `${launchFields} / ${attachFields}`);
  const attrs = packageJson().contributes.debuggers[0].configurationAttributes;
  assert.deepEqual(Object.keys(attrs.launch.properties).sort(), [...launchFields].sort());
  // Attach takes its own targets plus program, stopMode, ranks, substitutePath, fanout,
  // ranksPerAgent and toolPriority of launch.
  assert.deepEqual(Object.keys(attrs.attach.properties).sort(),
    [...attachFields, 'program', 'stopMode', 'ranks', 'substitutePath', 'fanout', 'ranksPerAgent', 'toolPriority'].sort());
  for (const [req, props] of Object.entries(attrs) as [string, { properties: Record<string, { description?: string; markdownDescription?: string }> }][]) {
    for (const [k, v] of Object.entries(props.properties)) {
      assert.ok((v.description ?? v.markdownDescription ?? '').length > 10, `${req}.${k} has no description`);
    }
  }
});

test('the launch.json schema pattern for ranks accepts what the parser accepts', () => {
  const attrs = packageJson().contributes.debuggers[0].configurationAttributes;
  const pattern = new RegExp(attrs.launch.properties.ranks.pattern, 'u');
  assert.equal(attrs.attach.properties.ranks.pattern, attrs.launch.properties.ranks.pattern);
  const samples = ['all', '*', '0', '0-3 8', '1-$max:2', '0-511,513-1023', ' 4 ,, 6 ', '$max', '1 2 4-6 7-$max:2'];
  for (const s of samples) {
    assert.equal(checkRankSetSyntax(s), undefined, s);
    assert.ok(pattern.test(s), `pattern rejects ${JSON.stringify(s)}`);
  }
  for (const s of ['', 'x', '1-', '-3', '4;5', '0-3:', 'all-3']) {
    assert.ok(!pattern.test(s), `pattern accepts ${JSON.stringify(s)}`);
  }
});

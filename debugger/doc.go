// Package debugger is hpcdap's debugger engine: the model of a parallel job under debug — one
// process or thousands of MPI ranks — and everything done to it: taking control of the ranks,
// run control, breakpoints, stepping, symbols per rank, memory and registers, merged parallel
// stacks, a value compared across ranks, function calls in expressions, watchpoints. It knows
// nothing of the Debug Adapter Protocol (package adapter translates DAP into calls on a Job):
// it reports what happens while the job runs — output, stops, threads running again, its end,
// changed breakpoints and ranks, the end of a rank's stop, new modules — through the Events
// interface its user implements (events.go), and answers calls with its own types (Thread,
// Breakpoint snapshots, ThreadStack, RankStatus, TreeFrame). Paths are the debug
// information's; mapping them to the editor's is the user's.
//
// A Job is the rank table of the README's contract: rank → (agent connection, pid, host,
// executable), with threads as (rank, LWP) pairs of stable ids (the DAP thread ids) named
// "rank 3 · main (LWP 4242) 0x7f…" (role, LWP, pthread_t once the thread library knows the
// thread). Package launch produces the agents of the table (launch.Agents): without a
// launcher, launch.LocalSpawn starts this very binary as `hpcdap agent` in spawn mode (one
// agent per 64 ranks, a random token in HPCDAP_TOKEN, CDTI over loopback); attach by pid,
// launch.LocalAttach, starts agents in attach mode.
//
// The launchers "mpirun" (Open MPI; or mpirun.openmpi, orterun), "mpiexec.hydra" (MPICH) and
// "srun" (Slurm), and the attach arguments launcherPid (a running mpirun, hydra or srun of this
// host) and slurmJob ("J.S"), go through package launch (wlmjob.go; package adapter builds the
// launch request): the launcher runs under an agent that does MPIR (or attaches to it and reads
// its proctable), and launch starts one agent per node of the job, in attach mode, through the
// workload manager. The job takes control of every rank through them (each phase bounded,
// failures named per rank: "7 of 8 ranks attached; rank 5 on node2: ..."), and only then lets
// the launcher go, so it never stays stopped while ranks run. Open MPI and hydra hold their
// ranks inside MPI_Init, after main began: stopAtEntry then stops them there and says so. srun
// holds them at exec; they get SIGCONT from the job with the release. The launcher's output
// (labelled by rank with --tag-output, -prepend-rank or --label) is reported as its rank's
// Output, and its exit status as a console line; each rank's exit code comes from its agent. A
// disconnect with terminateDebuggee kills the ranks and the launcher; without, the ranks are
// detached and the job runs on. If the front end dies, its agents lose their connection and
// detach, removing every breakpoint.
//
// # Run control
//
// The agents give every rank the Blue Gene/Q CNK's contract over CDTI: a signal in the
// job's notify set suspends the whole rank and sends one Notify; ContinueProcess and
// StepThread resume it. The job builds its stops on top (runctl.go): all-stop by default (the
// first rank to stop is the primary; every other running rank is stopped with the StopProcess
// extension, SIGSTOP where the agent cannot interrupt, and the stop is reported once all have
// reported), or per rank or per thread (StopMode). Continue (resume.go), pause and steps
// apply to the focus set (SetFocus); a step steps every focus rank's main thread, gdb's
// way (step.go; each rank's stepper, stepper.go, walks the lines, stepline.go). In stop mode
// thread a stopped thread is held (HoldThread) while its rank runs; stepping it stops the rank
// for the step and holds the thread again after it. Taking control of the ranks is start.go,
// sharing it with the other tools of a rank by their priorities (waiting for a holder of lower
// priority to give way, giving way to one of higher priority) authority.go, and
// their end and the job's (exit, kill, detach) end.go. Breakpoints are resolved once per
// binary and planted at each rank's load bias with batched SetBreakpoint Updates; conditions,
// hit counts and log points are evaluated on the front end when a rank reports the trap. Data
// breakpoints are CDTI watchpoints propagated to every thread.
//
// # Symbols
//
// The front end reads symbols (package symbols): each rank's modules come from its auxiliary
// vector and the dynamic linker's link map, read through CDTI; memory is read through a
// per-stop cache of 512-byte blocks fetched by page, trimmed to what was used once a stack is
// unwound (memcache.go; read-only file segments come from the files); registers through
// GetRegisterSet; thread-local storage and thread names through package threaddb, the
// thread library's data that one rank's labelling read being read for the other ranks of its
// module layout together with their thread lists (threadnames.go). Parallel stacks take the bulk
// of their work from the agents' GetTraceback and unwind one representative per
// distinct traceback on the front end (pstacks.go). Against a Blue Gene/Q CNK, which answers
// every extension with CmdInval, the machine comes from the executable's ELF header, registers
// from the v6 register queries (shown by their BG/Q names), every stack is unwound here, and
// function calls in expressions are refused (bgq.go). A core file is debugged as a stopped rank 0
// with the same code: it is the Job's back end instead of the agents (backend.go, core.go),
// and refuses what would run or change its process with one error (Frozen).
package debugger

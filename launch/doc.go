// Package launch is hpcdap's job layer, in the shape of HPE's Common Tools Interface front end:
// it starts a parallel job (or finds a running one) through its launcher and workload manager,
// tells where every rank runs, stages files on the job's nodes and starts one tool daemon per
// node, and cleans all of it up.
//
// # Objects
//
// Frontend owns a workload manager (WLM, chosen by name: HPCDAP_WLM, else Slurm when it is
// configured here, else "local") and every App it made; Close ends them.
//
// App is one job: Frontend.Launch, LaunchBarrier (ranks held until Release) or Attach
// (a running launcher by pid, or a Slurm job step "J.S"). It gives the placement (hosts, ranks
// per host, rank → host → pid), Release, Kill, Wait, LetGo (the job outlives the front end)
// and Deregister.
//
// Session is a staging directory with a unique name on every node of an App, with bin/, lib/
// and tmp/. A Manifest lists binaries (with the shared libraries they need, resolved as the
// dynamic linker does: see Resolver), libraries, library directories and files; Session.Ship
// sends only what the session lacks. ExecToolDaemon starts one daemon per node with PATH,
// LD_LIBRARY_PATH and TMPDIR pointing into the session. App.StartAgents does all of this for
// hpcdap's own node agents, which register with a rendezvous listener of the front end.
//
// # Launchers
//
// The launcher is a process like any other (DESIGN decision 4): it runs under a local hpcdap
// agent. Open MPI's mpirun and Slurm's srun export their MPIR symbols, and package launch/mpir
// drives them over CDTI. Open MPI 5's mpirun and PRRTE's prterun and prun have no MPIR: they
// serve the PMIx tool interface, which package launch/pmix speaks from a tool process of its
// own (`hpcdap pmix-tool`, one per job: libpmix allows one tool per process), spawning the
// launcher with the ranks held at their exec and reading the proc table. chooseProtocol picks
// MPIR, PMIx or fork following from what the launcher offers (Request.Protocol overrides it),
// and refuses at once, saying what it tried, a launcher that offers none. MPICH's mpiexec.hydra is launched by fork/exec following instead: the
// agent (`hpcdap agent --follow-exec`) follows the launcher's forks, holds every process that
// execs the program right after that exec, numbers it by PMI_RANK and serves it, so that this
// agent is also the job's node agent (StartAgents returns it, Owned). A running hydra found by
// its pid is read through MPIR at the offsets known for Debian's build (its build ID). How the
// ranks are held until Release depends on the launcher (Hold): in MPI_Init for Open MPI 4, in a
// job-control stop at exec for srun and PMIx launchers, at exec by the agent for hydra.
//
// # Workload managers
//
// "local" reaches only this host (commands run directly, files are copied, daemons are
// children). Without a launcher, its agents are the job: LocalSpawn starts agents that spawn
// a program's ranks, LocalAttach agents that attach to processes of this host by pid; both
// return the Agents a job through a launcher gets from Start (or Open). "slurm" reaches the job's nodes with steps that overlap the job's allocation
// (srun --jobid=J --overlap), ships with sbcast, and signals with scancel.
//
// Every phase is bounded by Options.Timeout and reports partial success (which nodes failed
// and why); a launcher is never left stopped after a failure.
package launch

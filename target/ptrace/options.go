package ptrace

// SpawnOptions choose how a spawned process is traced beyond what Spawn does.
type SpawnOptions struct {
	// FollowForks adds PTRACE_O_TRACEFORK and PTRACE_O_TRACEVFORK: every process the program
	// creates (and, once adopted with FollowForks, every process those create) is traced from
	// its first instruction, held stopped, and announced by an EventFork on its parent's
	// stream. This is how a launcher without MPIR (MPICH's hydra) is followed down to its
	// ranks.
	FollowForks bool
	// ExitKill adds PTRACE_O_EXITKILL: the process, and the children held for it, are killed
	// when the tracer's thread ends (the tracer's program dies). Meant for a launcher the
	// tool started; never for ranks, which must outlive a crashed tool. Adopt drops it.
	ExitKill bool
}

// AdoptOptions choose how an adopted child is traced.
type AdoptOptions struct {
	// FollowForks keeps following the child's own forks (a launcher's proxy), instead of
	// leaving them untraced (a rank).
	FollowForks bool
}

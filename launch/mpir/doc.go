// Package mpir implements the tool side of the MPIR Process Acquisition Interface for launchers
// that ship without debug information (Open MPI's mpirun, Slurm's srun, MPICH's hydra).
//
// The launcher is a process like any other: it runs under an hpcdap agent and this package
// drives it over CDTI (Conn, satisfied by *cdti.Client). Nothing here uses ptrace or /proc.
//
// The steps, each usable on its own:
//
//   - Objects walks the dynamic linker's list of loaded objects with package procimage (auxv →
//     program headers → PT_DYNAMIC → DT_DEBUG → r_debug → link_map) through a Memory, giving
//     every ELF file the launcher has mapped and its load bias.
//   - LookupFile and Resolve find the MPIR symbols in those files: .dynsym first (Open MPI
//     exports them from libopen-rte, srun from its executable), then .symtab, then a separate
//     debug file under /usr/lib/debug/.build-id, then a table of offsets known for stripped
//     builds, keyed by GNU build ID (Debian's mpiexec.hydra).
//   - ReadTable reads MPIR_proctable, entries {char *host_name; char *executable_name; int pid;}
//     in the launcher's pointer size (24 bytes on LP64, 12 on ILP32), the strings separately.
//   - Starter runs the whole protocol over CDTI: launch mode (take control at the launcher's
//     entry point, set MPIR_being_debugged, plant a breakpoint on MPIR_Breakpoint, continue
//     until MPIR_debug_state is MPIR_DEBUG_SPAWNED) and attach mode (read a table that is
//     already filled). Release lets the launcher go.
//
// Every wait is bounded by the caller's context; on failure the launcher is never left
// stopped (Starter.Abandon resumes it).
package mpir

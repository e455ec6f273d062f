// Package bgq is an emulated Blue Gene/Q system on one Linux host, for the tools written
// against CDTI v6 (shared/spec/cdti-v6.md) to be proven against the same paths a real BG/Q
// gives them: runjob's MPIR interface, I/O nodes with jobctld's /jobs/<id>/ directory and
// tool start, one toolctld per compute node behind AF_UNIX sockets, and compute nodes whose
// kernel (the CNK) is the hpcdap agent controlling real Power programs under QEMU.
//
// The pieces and what stands for what:
//
//   - A compute node's CNK is one `hpcdap agent` process, started by exec of the hpcdap
//     binary (never linked in), serving that node's ranks: static big-endian Power programs
//     under qemu-ppc64 through the agent's RSP back end. The agent is told its session token
//     in its environment, never in its arguments.
//   - Its toolctld is a goroutine set of the emulator holding one link to the CNK (the RDMA
//     connection of a real system, here the agent's CDTI port, authenticated with the token
//     as every hpcdap client is) and listening at <ion>/var/cios/toolcontrol.data.<node>.
//     It relays every tool message unaltered, one request outstanding per compute node with a
//     FIFO (§2.7), routes Notify by tool id and answers the CNK's Notify itself (§2.8).
//   - An I/O node is a directory, <root>/ion<k>/, holding jobs/ (what /jobs is on a real I/O
//     node) and var/cios/. Its jobctld writes /jobs/<id>/ and starts tools there with
//     BG_JOBID and BG_TOOLID, and HPCDAP_BGQ_JOBS naming the I/O node's jobs directory, which
//     a tool on a real I/O node finds at /jobs.
//   - runjob is the emulator process (Runjob); its MPIR symbols live in a small C program
//     beside the hpcdap binary (hpcdap-runjob, HelperSource), the process a tool starts or
//     attaches to, which runs the emulator as its child and does what it asks over pipes
//     (MPIR). start_tool and end_tool reach a running runjob through its control socket,
//     <root>/runjob.<jobId>.
//
// What the emulated control system does that a real one does through the CNK's job messages
// it does over the CNK link with a tool id no runjob hands out (controlToolID): it starts a
// held job (StartJob) by attaching and detaching that id, which starts a rank no tool holds,
// and learns of a rank's exit from the CNK's answer to a Query of that id.
//
// Where the agent's rules differ from a real CNK's, the emulation follows the agent's: a
// rank starts when a tool is granted control of it (its sndSignal delivered at the first
// instruction), even before StartJob; a rank whose last tool detaches before StartJob starts
// then; and a tool attached without control at StartJob keeps its ranks loaded until it takes
// control or detaches.
package bgq

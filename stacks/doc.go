// Package stacks samples the stacks of a whole job from the command line and merges them into
// one prefix tree, as `hpcdap stacks` prints it: attach to a running job (its launcher's pid,
// a Slurm job step, or the ranks' pids) or launch one and let it run, stop every rank, read
// the stack of every thread of every rank, let the ranks go, and after the last sample detach
// (or end a job it launched).
//
// The tree merges call paths by function from the outermost frame. Every thread of every
// rank in every sample is one path (one observation): a node's rank set names the ranks of
// the observations through it, its count is how many observations pass through it. With one
// sample of single-threaded ranks the count is the number of ranks; a rank with three
// threads counts three at the root of its process; with N samples (STAT's 3D view, trace ×
// space × time) a rank that stayed in one function counts N there, and a rank seen in two
// places over time appears under both, each counted for the samples it was seen there.
package stacks

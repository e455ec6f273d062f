// Package examples bundles the example programs of hpcdap, so that the binary can build and
// debug them anywhere (`hpcdap demo`).
package examples

import _ "embed"

// RingSource is ring/ring.c: the demo's job, whose ranks integrate slices of pi and pass their
// sums around a ring of named pipes.
//
//go:embed ring/ring.c
var RingSource []byte

// RingFileName is the name RingSource is written under.
const RingFileName = "ring.c"

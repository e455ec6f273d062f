//go:build !race

package agent

// raceEnabled: the race detector slows every hit tenfold; long counting tests count less.
const raceEnabled = false

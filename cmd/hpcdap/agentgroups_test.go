package main

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// A node's attach list longer than one agent serves is split in rank order into groups of at
// most --ranks-per-agent ranks, each group's agent given the other arguments unchanged.
func TestAgentGroups(t *testing.T) {
	pids := map[uint32]int{}
	for r := range 130 {
		pids[uint32(1000-r)] = 5000 + r // ranks 871-1000, listed out of order
	}
	groups := agentGroups(pids, 64)
	if len(groups) != 3 || len(groups[0]) != 64 || len(groups[1]) != 64 || len(groups[2]) != 2 {
		t.Fatalf("groups of %d, %d, ... ranks, want 64, 64, 2", len(groups[0]), len(groups[1]))
	}
	if g := groupRanks(groups[0]) + " " + groupRanks(groups[1]) + " " + groupRanks(groups[2]); g != "871-934 935-998 999-1000" {
		t.Errorf("groups %s, want 871-934 935-998 999-1000", g)
	}
	if groups[2][1] != "1000=5000" {
		t.Errorf("last pair %q, want 1000=5000", groups[2][1])
	}
	args := []string{"--connect", "h:1", "--attach", "1=2", "--ranks-per-agent=8", "--supervise", "--attach=3=4", "--ranks-per-agent", "2"}
	if got := strings.Join(withoutFlags(args, "attach", "ranks-per-agent"), " "); got != "--connect h:1 --supervise" {
		t.Errorf("withoutFlags: %q", got)
	}
}

// More ranks than one agent serves need --connect, where each group's agent registers on its
// own; a --ranks-per-agent outside 1-64 is refused. Both are usage errors before anything is
// attached.
func TestAgentGroupsUsage(t *testing.T) {
	var pairs []string
	for r := range 65 {
		pairs = append(pairs, fmt.Sprintf("%d=%d", r, 1<<22+r))
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--listen", "127.0.0.1:0", "--attach", strings.Join(pairs, ",")}, "--attach lists 65 ranks, more than one agent serves (64): give --connect"},
		{[]string{"--listen", "127.0.0.1:0", "--attach", "1=2,3=4", "--ranks-per-agent", "1"}, "--attach lists 2 ranks, more than one agent serves (1)"},
		{[]string{"--connect", "127.0.0.1:1", "--attach", "1=2", "--ranks-per-agent", "65"}, "--ranks-per-agent 65: want 1 to 64"},
		{[]string{"--connect", "127.0.0.1:1", "--attach", "1=2", "--ranks-per-agent", "0"}, "--ranks-per-agent 0: want 1 to 64"},
	} {
		var out, errOut bytes.Buffer
		err := runAgent(c.args, &out, &errOut)
		if !errors.Is(err, errUsage) || !strings.Contains(errOut.String(), c.want) {
			t.Errorf("agent %s: %v, %q; want a usage error saying %q", strconv.Quote(strings.Join(c.args, " ")), err, errOut.String(), c.want)
		}
	}
}

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// agentGroups splits an attach list into groups of at most per ranks, in rank order: one
// agent serves at most cdti.MaxRanksPerNode ranks (a CDTI Attach lists no more), so a node
// with more ranks gets an agent per group.
func agentGroups(pids map[uint32]int, per int) [][]string {
	ranks := make([]uint32, 0, len(pids))
	for r := range pids {
		ranks = append(ranks, r)
	}
	slices.Sort(ranks)
	var groups [][]string
	for i := 0; i < len(ranks); i += per {
		var g []string
		for _, r := range ranks[i:min(i+per, len(ranks))] {
			g = append(g, strconv.FormatUint(uint64(r), 10)+"="+strconv.Itoa(pids[r]))
		}
		groups = append(groups, g)
	}
	return groups
}

// runAgentGroups is `hpcdap agent --connect ... --attach` with more ranks than one agent
// serves: it runs one agent per group of ranks as its children (the same arguments, each
// with its group's --attach list and no --ranks-per-agent), each registering with the front
// end on its own, forwards SIGTERM, SIGINT and SIGHUP to them, and ends when every one has
// ended, with an error naming those that failed. A workload manager that starts one daemon
// per node so starts them all, and ends them all by ending it.
func runAgentGroups(args []string, groups [][]string, stdout, stderr io.Writer) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("agent: find this executable: %w", err)
	}
	// The node's agents share one session directory: this process removes it, not they.
	base := withoutBool(withoutFlags(args, "attach", "ranks-per-agent"), "remove-staging")
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	var mu sync.Mutex
	var started []*exec.Cmd
	forward := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				mu.Lock()
				for _, c := range started {
					c.Process.Signal(s)
				}
				mu.Unlock()
			case <-forward:
				return
			}
		}
	}()
	defer close(forward)
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for i, g := range groups {
		c := exec.Command(exe, append(append([]string{"agent"}, base...), "--attach", strings.Join(g, ","))...)
		c.Stdin, c.Stdout, c.Stderr = os.Stdin, stdout, stderr
		// Killed outright, this process takes its agents with it: each then gives its ranks
		// back as at any SIGTERM.
		c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
		mu.Lock()
		err := c.Start()
		if err == nil {
			started = append(started, c)
		}
		mu.Unlock()
		if err != nil {
			errs[i] = fmt.Errorf("agent: start the agent of ranks %s: %w", groupRanks(g), err)
			continue
		}
		wg.Go(func() {
			if err := c.Wait(); err != nil {
				errs[i] = fmt.Errorf("agent: the agent of ranks %s (pid %d): %w", groupRanks(g), c.Process.Pid, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// groupRanks names a group's ranks: its first and last.
func groupRanks(g []string) string {
	first, _, _ := strings.Cut(g[0], "=")
	last, _, _ := strings.Cut(g[len(g)-1], "=")
	return first + "-" + last
}

// withoutFlags drops the named flags (in any of their spellings, with their values) from the
// agent's arguments before the program or "--".
func withoutFlags(args []string, names ...string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && slices.Contains(names, name) {
			if !hasValue {
				i++ // the value is the next argument
			}
			continue
		}
		out = append(out, a)
	}
	return out
}

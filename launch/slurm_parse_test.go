package launch

import (
	"fmt"
	"strings"
	"testing"
)

// Outputs of Slurm 22.05's scontrol, recorded on the test cluster (srun -N2 -n5 sleep 30):
// listpids on node1 while the tasks start (no pids yet) and once they run, on node2, and show
// step.
const (
	listPidsStarting = "PID      JOBID    STEPID   LOCALID GLOBALID\n" +
		"-1       1        0        0       0       \n" +
		"-1       1        0        1       1       \n" +
		"-1       1        0        2       2       \n" +
		"-1       1        0        3       3       \n"
	listPidsNode1 = "PID      JOBID    STEPID   LOCALID GLOBALID\n" +
		"32318    1        0        0       0       \n" +
		"32319    1        0        1       1       \n" +
		"32320    1        0        2       2       \n" +
		"32321    1        0        3       3       \n"
	listPidsNode2 = "PID      JOBID    STEPID   LOCALID GLOBALID\n" +
		"32317    1        0        0       4       \n"
	showStep = "StepId=1.0 UserId=0 StartTime=2026-11-21T17:35:23 TimeLimit=UNLIMITED\n" +
		"   State=RUNNING Partition=debug NodeList=node[1-2]\n" +
		"   Nodes=2 CPUs=5 Tasks=5 Name=sleep Network=(null)\n" +
		"   TRES=cpu=5,mem=0,node=2\n" +
		"   ResvPorts=(null)\n" +
		"   CPUFreqReq=Default Dist=Block\n" +
		"   SrunHost:Pid=vm:32267\n"
)

func TestParseListPids(t *testing.T) {
	for _, c := range []struct {
		name, out string
		want      string // fmt of the procs
		starting  int
		err       string
	}{
		{"running", listPidsNode1, "[{0 node1 32318 } {1 node1 32319 } {2 node1 32320 } {3 node1 32321 }]", 0, ""},
		{"one task", listPidsNode2, "[{4 node1 32317 }]", 0, ""},
		{"starting", listPidsStarting, "[]", 4, ""},
		{"not a task", "PID JOBID STEPID LOCALID GLOBALID\n4242 1 0 - -\n77 1 0 0 0\n", "[{0 node1 77 }]", 0, ""},
		{"empty", "", "[]", 0, ""},
		{"short line", "PID JOBID\n12 1 0\n", "", 0, "3 columns"},
		{"bad pid", "x 1 0 0 0\n", "", 0, `pid "x"`},
		{"zero pid", "0 1 0 0 0\n", "", 0, `pid "0"`},
		{"negative rank", "12 1 0 0 -3\n", "", 0, `global task id "-3"`},
		{"twice", "12 1 0 0 0\n13 1 0 1 0\n", "", 0, "task 0 listed twice"},
	} {
		t.Run(c.name, func(t *testing.T) {
			procs, starting, err := parseListPids(c.out, "node1")
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want one containing %q", err, c.err)
				}
				return
			}
			if err != nil || starting != c.starting {
				t.Fatalf("starting %d, err %v; want %d, nil", starting, err, c.starting)
			}
			if got := fmt.Sprint(procs); got != c.want && !(len(procs) == 0 && c.want == "[]") {
				t.Errorf("procs %s, want %s", got, c.want)
			}
		})
	}
}

func TestStepNodeList(t *testing.T) {
	if got, err := stepNodeList(showStep, "1.0"); err != nil || got != "node[1-2]" {
		t.Errorf("stepNodeList: %q, %v", got, err)
	}
	if _, err := stepNodeList(showStep, "1.1"); err == nil || !strings.Contains(err.Error(), `step "1.0", not 1.1`) {
		t.Errorf("another step's record: %v", err)
	}
	if _, err := stepNodeList("StepId=2.0 NodeList=(null)\n", "2.0"); err == nil {
		t.Errorf("a step without nodes: no error")
	}
	if _, err := stepNodeList("", "2.0"); err == nil {
		t.Errorf("empty output: no error")
	}
}

// Whatever scontrol prints, the parser returns tasks with a pid and a rank, each rank once,
// or an error; it never panics.
func FuzzParseListPids(f *testing.F) {
	for _, s := range []string{listPidsStarting, listPidsNode1, listPidsNode2, "4242 1 0 - -\n", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, out string) {
		procs, starting, err := parseListPids(out, "node1")
		if err != nil {
			if procs != nil || starting != 0 {
				t.Fatalf("error %v with results %v, %d", err, procs, starting)
			}
			return
		}
		seen := map[int]bool{}
		for _, p := range procs {
			if p.Pid <= 0 || p.Rank < 0 || p.Host != "node1" || seen[p.Rank] {
				t.Fatalf("bad task %+v in %v", p, procs)
			}
			seen[p.Rank] = true
		}
		if starting < 0 {
			t.Fatalf("starting %d", starting)
		}
	})
}

// The node list comes back only from the named step's record, never empty.
func FuzzStepNodeList(f *testing.F) {
	f.Add(showStep, "1.0")
	f.Add("StepId=2.0 NodeList=(null)", "2.0")
	f.Add("", "")
	f.Fuzz(func(t *testing.T, out, ref string) {
		nodes, err := stepNodeList(out, ref)
		if err == nil && (nodes == "" || nodes == "(null)" || !strings.Contains(out, "StepId="+ref)) {
			t.Fatalf("stepNodeList(%q, %q) = %q without error", out, ref, nodes)
		}
	})
}

// A staging step's output as the test cluster printed it (srun --label, four nodes sharing
// the directory but node3, which failed), and a daemon step's with node2's agent exiting.
const (
	stagingLog = "0: step 3.2\n1: step 3.2\n0: staged node1\n1: staged node2 in node1\n" +
		"2: step 3.2\n2: failed node3: mkdir: cannot create directory '/l/hpcdap-x': Read-only file system\n" +
		"srun: error: node3: task 2: Exited with exit code 1\n3: step 3.2\n3: staged node4 in node1\n"
	daemonLog = "0: step 1.6\n1: step 1.6\n1: node node2\n1: agent on node2: refused\n0: node node1\n" +
		"0: listening on [::]:35899\nsrun: error: node2: task 1: Exited with exit code 3\n"
)

// parseStaging reads each node's verdict and, for a shared directory, the node that made it;
// storesOf groups the nodes by it; endedTasks maps srun's report of a task to its node and
// adds what the task wrote.
func TestParseStagingAndEndedTasks(t *testing.T) {
	r := parseStaging(stagingLog)
	if got := fmt.Sprint(r.creator); got != "map[node1:node1 node2:node1 node4:node1]" {
		t.Errorf("creators %s", got)
	}
	if got := fmt.Sprint(r.failed); got != "map[node3:mkdir: cannot create directory '/l/hpcdap-x': Read-only file system]" {
		t.Errorf("failures %s", got)
	}
	r.creator["node3"] = "node3"
	if got := fmt.Sprint(storesOf([]string{"node1", "node2", "node3", "node4"}, r.creator)); got != "[[node1 node2 node4] [node3]]" {
		t.Errorf("stores %s", got)
	}
	// A task that ended without saying why is failed with srun's words.
	r = parseStaging("0: step 3.2\nsrun: error: node1: task 0: Killed\n")
	if r.failed["node1"] != "staging task: Killed" || !r.unsaid["node1"] {
		t.Errorf("failures %v, unsaid %v", r.failed, r.unsaid)
	}
	// The task's own words, arriving after srun's report of its end, are its reason.
	r = parseStaging("2: step 3.2\nsrun: error: node3: task 2: Exited with exit code 1\n2: failed node3: Read-only file system\n")
	if r.failed["node3"] != "Read-only file system" || len(r.unsaid) != 0 {
		t.Errorf("failures %v, unsaid %v", r.failed, r.unsaid)
	}
	if got := fmt.Sprint(endedTasks(daemonLog)); got != "map[node2:Exited with exit code 3: agent on node2: refused]" {
		t.Errorf("ended %s", got)
	}
	if got := endedTasks("0: step 1.6\n0: node node1\n"); len(got) != 0 {
		t.Errorf("ended %v with no task ended", got)
	}
}

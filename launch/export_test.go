package launch

import (
	"slices"
	"strings"
	"testing"
)

// TestDaemonStepExportsToken: whatever SLURM_EXPORT_ENV the user has, the srun step that
// starts the agents names the session token in --export, carries its value in the environment
// only, never in an argument, and keeps the user's own export choice.
func TestDaemonStepExportsToken(t *testing.T) {
	const token = "s3cr3t-token-value"
	n := newSlurmNodes(nil, "42", "", []string{"node1", "node2"})
	argv := func(h string) []string { return []string{"/stage/hpcdap", "agent", "--connect", "fe:1", "--node", h} }
	for _, tt := range []struct{ user, want string }{
		{"", "--export=ALL"},
		{"ALL", "--export=ALL"},
		{"NONE", "--export=HPCDAP_TOKEN"},
		{"none", "--export=HPCDAP_TOKEN"},
		{"PATH,HOME", "--export=PATH,HOME,HPCDAP_TOKEN"},
		{"ALL,OMP_NUM_THREADS=4", "--export=ALL,OMP_NUM_THREADS=4"},
	} {
		t.Setenv("SLURM_EXPORT_ENV", tt.user)
		cmd := n.daemonStep(n.hosts(), argv, []string{"HPCDAP_TOKEN=" + token})
		if cmd.Args[0] != "srun" {
			t.Fatalf("daemon step runs %q", cmd.Args)
		}
		var exports []string
		for _, a := range cmd.Args {
			if strings.Contains(a, token) {
				t.Errorf("SLURM_EXPORT_ENV=%q: the token is in srun's arguments: %q", tt.user, a)
			}
			if strings.HasPrefix(a, "--export") {
				exports = append(exports, a)
			}
		}
		if len(exports) != 1 || exports[0] != tt.want {
			t.Errorf("SLURM_EXPORT_ENV=%q: srun %q, want the one option %s", tt.user, exports, tt.want)
		}
		if !slices.Contains(cmd.Env, "HPCDAP_TOKEN="+token) {
			t.Errorf("SLURM_EXPORT_ENV=%q: srun's environment lacks the token", tt.user)
		}
		// --export is an srun option: it must come before the command srun runs.
		if i, j := slices.Index(cmd.Args, exports[0]), slices.Index(cmd.Args, "sh"); i < 0 || j < 0 || i > j {
			t.Errorf("SLURM_EXPORT_ENV=%q: --export after the command: %q", tt.user, cmd.Args)
		}
	}
}

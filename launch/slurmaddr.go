package launch

import (
	"context"
	"strings"
	"time"
)

// nodeAddrs returns the addresses Slurm reaches nodes at (NodeAddr, which is the node name
// unless configured otherwise), in the order of nodes; a node it cannot tell keeps its name.
func (slurmWLM) nodeAddrs(nodes []string) []string {
	out := append([]string(nil), nodes...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	text, err := slurmOutput(ctx, "scontrol", "--oneliner", "show", "node", strings.Join(nodes, ","))
	if err != nil {
		return out
	}
	addr := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		var name, a string
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "NodeName="); ok {
				name = v
			} else if v, ok := strings.CutPrefix(f, "NodeAddr="); ok {
				a = v
			}
		}
		if name != "" && a != "" {
			addr[name] = a
		}
	}
	for i, n := range out {
		if a, ok := addr[n]; ok {
			out[i] = a
		}
	}
	return out
}

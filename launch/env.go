package launch

import "strings"

// withoutVars returns env without the named variables.
func withoutVars(env []string, names ...string) []string {
	out := make([]string, 0, len(env))
next:
	for _, kv := range env {
		for _, n := range names {
			if strings.HasPrefix(kv, n+"=") {
				continue next
			}
		}
		out = append(out, kv)
	}
	return out
}

// mergeEnv returns base with the "K=V" entries of extra added, replacing same-named ones.
func mergeEnv(base, extra []string) []string {
	names := make([]string, 0, len(extra))
	for _, kv := range extra {
		if k, _, ok := strings.Cut(kv, "="); ok {
			names = append(names, k)
		}
	}
	return append(withoutVars(base, names...), extra...)
}

// exportFlag is the srun --export option that gives a step's tasks the variables of env (by
// name only: the values stay in srun's environment, out of every process listing) on top of
// what the user's SLURM_EXPORT_ENV, userExport, exports: everything when it is empty or starts
// with ALL, only SLURM_* when it is NONE, or its own list.
func exportFlag(userExport string, env []string) string {
	var names []string
	for _, kv := range env {
		if k, _, ok := strings.Cut(kv, "="); ok && k != "" {
			names = append(names, k)
		}
	}
	u := strings.TrimSpace(userExport)
	up := strings.ToUpper(u)
	switch {
	case u == "":
		return "--export=ALL"
	case up == "ALL" || strings.HasPrefix(up, "ALL,"):
		return "--export=" + u
	case up == "NONE" || up == "NIL":
		if len(names) == 0 {
			return "--export=NONE"
		}
		return "--export=" + strings.Join(names, ",")
	default:
		return "--export=" + strings.Join(append([]string{u}, names...), ",")
	}
}

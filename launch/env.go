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

package adapter

import (
	"sort"

	"github.com/hpcdap/hpcdap/launch"
)

// launchRequest turns a launch plan with an MPI launcher into the job layer's request.
func launchRequest(p *launchPlan) launch.Request {
	var env, unset []string
	for k, v := range p.userEnv {
		if v != nil {
			env = append(env, k+"="+*v)
		} else {
			unset = append(unset, k)
		}
	}
	sort.Strings(env)
	sort.Strings(unset)
	return launch.Request{Launcher: p.launcher, LauncherArgs: p.launcherArgs, LabelOutput: true, NP: p.np,
		Program: p.program, Args: p.args, Env: env, Unset: unset, NoASLR: p.noASLR, Dir: p.cwd,
		Protocol: p.protocol}
}

package adapter

import (
	"sort"
	"strings"

	"github.com/hpcdap/hpcdap/debugger"
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
	req := launch.Request{Launcher: p.launcher, LauncherArgs: p.launcherArgs, LabelOutput: true, NP: p.np,
		Program: p.program, Args: p.args, Env: env, Unset: unset, NoASLR: p.noASLR, Dir: p.cwd,
		Protocol: p.protocol}
	if launch.TakesSubset(p.launcher) && p.focus != "" {
		// runjob starts the agents for the focus ranks alone; its subset notation separates
		// items with spaces.
		if set, err := debugger.ParseFocus(p.focus, p.np); err == nil {
			req.Subset = strings.ReplaceAll(set.String(), ",", " ")
		}
	}
	return req
}

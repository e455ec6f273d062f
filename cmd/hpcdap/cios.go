package main

import (
	"errors"
	"io"
	"log"
	"os"

	"github.com/hpcdap/hpcdap/agent"
)

// bgqJobsEnv names the directory that holds an emulated I/O node's jobs (what /jobs is on a
// real one), set by the emulated system's jobctld.
const bgqJobsEnv = "HPCDAP_BGQ_JOBS"

// ciosJob returns the job of a CIOS tool (the agent started by a BG/Q jobctld: BG_JOBID and
// BG_TOOLID set), read from its I/O node's jobs directory; nil when the agent is not one.
func ciosJob() (*agent.CIOSJob, error) {
	id, tool, ok, err := agent.CIOSEnv()
	if !ok || err != nil {
		return nil, err
	}
	jobs := os.Getenv(bgqJobsEnv)
	if jobs == "" {
		jobs = "/jobs"
	}
	return agent.ReadCIOSJob(jobs, id, tool)
}

// agentToken is the session token: from the token file when one is named, else from
// HPCDAP_TOKEN.
func agentToken(tokenFile string) (string, error) {
	if tokenFile != "" {
		return agent.ReadTokenFile(tokenFile)
	}
	if t := os.Getenv("HPCDAP_TOKEN"); t != "" {
		return t, nil
	}
	return "", errors.New("no session token: set HPCDAP_TOKEN or give --token-file (the token is never taken from the command line)")
}

// runCIOSAgent runs the agent as job's CIOS tool: it relays CDTI to the job's toolctld
// sockets, touches its status file, and on SIGTERM (jobctld's end_tool) or when the front end
// goes, gives every rank back before it ends.
func runCIOSAgent(job *agent.CIOSJob, token, listen, connect, logFile string, stdout, stderr io.Writer) error {
	logOut := stderr
	if logFile != "" {
		f, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return err
		}
		defer f.Close()
		logOut = f
	}
	logger := log.New(logOut, "", log.LstdFlags|log.Lmicroseconds)
	a, err := agent.New(agent.Config{Token: token, JobID: job.ID, Version: buildVersion(), Logger: logger,
		CIOS: job, EndWithFrontEnd: connect != ""})
	if err != nil {
		return err
	}
	logger.Printf("agent: CIOS tool %d of job %d: %d rank(s) on %d compute node(s)", job.ToolID, job.ID, len(job.Ranks), len(job.Nodes))
	return serveAgent(a, listen, connect, false, logger, stdout)
}

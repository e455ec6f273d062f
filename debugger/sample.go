package debugger

import (
	"context"
	"time"
)

// StopAll stops every running rank of the job (an all-stop) and waits until each has stopped
// or ended, or ctx ends. It returns the ranks that were still not stopped then.
func (j *Job) StopAll(ctx context.Context) []*Rank {
	j.pause(j.ranks)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		var running []*Rank
		j.mu.Lock()
		for _, r := range j.ranks {
			if r.state == RankRunning || r.state == RankStarting {
				running = append(running, r)
			}
		}
		j.mu.Unlock()
		if len(running) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return running
		case <-tick.C:
		}
	}
}

package bgq

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"github.com/hpcdap/hpcdap/cdti"
)

// BenchmarkQuery measures one Query round trip (GetProcessData of one rank) through a
// toolctld socket and, beside it, straight to the node's agent over TCP. The rank spins, so
// that it outlives the tools, whose leaving starts it.
func BenchmarkQuery(b *testing.B) {
	hpcdap, exe := built(b)
	root := b.TempDir()
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer null.Close()
	j, err := Load(context.Background(), Config{Hpcdap: hpcdap, Emulator: "qemu-ppc64", Root: root + "/r",
		NP: 1, RanksPerNode: 1, CNPerION: 1, Exe: exe, Args: []string{"spin"}, JobID: 5, Output: null})
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	cn := j.ions[0].nodes[0]
	run := func(b *testing.B, c *cdti.Client) {
		ctx := context.Background()
		if ack, err := c.Attach(ctx, 0, cdti.RankInHeader, cdti.NewTag("bench"), 0); err != nil || ack.ReturnCode != cdti.Success {
			b.Fatalf("attach: %v %+v", err, ack)
		}
		b.ResetTimer()
		for range b.N {
			if _, err := c.Query(ctx, 0, &cdti.GetProcessData{}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("toolctld", func(b *testing.B) {
		conn, err := net.Dial("unix", cn.ctl.path)
		if err != nil {
			b.Fatal(err)
		}
		c := cdti.NewClient(conn, cdti.ClientOptions{ToolID: 1, JobID: 5, Serialize: true, Timeout: time.Minute})
		defer c.Close()
		run(b, c)
	})
	b.Run("agent", func(b *testing.B) {
		c, err := cdti.Dial(context.Background(), "tcp", cn.cnk.addr, cdti.ClientOptions{ToolID: 2, JobID: 5,
			Token: []byte(cn.cnk.token), Serialize: true, Timeout: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		run(b, c)
	})
}

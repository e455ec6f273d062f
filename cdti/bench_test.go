package cdti

import (
	"context"
	"net"
	"testing"
)

func query16() *Query {
	cmds := []Command{&GetSpecialRegs{ThreadID: 1}, &GetGeneralRegs{ThreadID: 1}, &GetDebugRegs{ThreadID: 1},
		&GetAuxVectors{}, &GetProcessData{}, &GetPreferences{}, &GetFileStatData{Pathname: "/x"}}
	for i := range 9 {
		cmds = append(cmds, &GetMemory{ThreadID: 2, Addr: 0x10000 + uint64(i)*64, Length: 64})
	}
	return &Query{Header: hdr(1), Commands: cmds}
}

// BenchmarkQuery16Codec: encode and decode a Query of 16 commands.
func BenchmarkQuery16Codec(b *testing.B) {
	q := query16()
	b.ReportAllocs()
	for b.Loop() {
		buf, err := Encode(q)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := DecodeMessage(buf); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGetMemoryAckCodec: a QueryAck carrying one GetMemoryAck of MaxMemorySize bytes,
// encoded and decoded; MB/s counts the memory bytes carried.
func BenchmarkGetMemoryAckCodec(b *testing.B) {
	data := memPattern(0x1000, MaxMemorySize)
	m := &QueryAck{Header: hdr(1), Results: []Result{{Code: CmdSuccess,
		Ack: &GetMemoryAck{ThreadID: 1, Addr: 0x1000, Length: MaxMemorySize, Data: data}}}}
	b.SetBytes(MaxMemorySize)
	b.ReportAllocs()
	for b.Loop() {
		buf, err := Encode(m)
		if err != nil {
			b.Fatal(err)
		}
		r, err := DecodeMessage(buf)
		if err != nil || len(r.(*QueryAck).Results[0].Ack.(*GetMemoryAck).Data) != MaxMemorySize {
			b.Fatal(err)
		}
	}
}

func benchClient(b *testing.B) (*Client, *memAgent) {
	a := newMemAgent(1 << 20)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &Server{Handler: a, Token: []byte(testToken)}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Close() })
	c, err := Dial(context.Background(), "tcp", ln.Addr().String(), ClientOptions{ToolID: 1, Token: []byte(testToken)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c, a
}

// BenchmarkQueryRoundTripTCP: one Query (GetMemory of 64 bytes) at a time through Client and
// Server over loopback TCP.
func BenchmarkQueryRoundTripTCP(b *testing.B) {
	c, a := benchClient(b)
	ctx := context.Background()
	for b.Loop() {
		if _, err := c.Query(ctx, 1, &GetMemory{Addr: a.base, Length: 64}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "roundtrips/s")
}

// BenchmarkQueryPipelinedTCP: the same Query from many goroutines sharing the connection.
func BenchmarkQueryPipelinedTCP(b *testing.B) {
	c, a := benchClient(b)
	ctx := context.Background()
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.Query(ctx, 1, &GetMemory{Addr: a.base, Length: 64}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "roundtrips/s")
}

// BenchmarkReadMemoryTCP: Client.ReadMemory of 1 MiB (17 GetMemory commands in 17 pipelined
// Queries) over loopback TCP.
func BenchmarkReadMemoryTCP(b *testing.B) {
	c, a := benchClient(b)
	ctx := context.Background()
	const n = 1<<20 - 4096
	b.SetBytes(n)
	for b.Loop() {
		if _, err := c.ReadMemory(ctx, 1, 0, a.base, n, SpecAccessUseThreadState); err != nil {
			b.Fatal(err)
		}
	}
}

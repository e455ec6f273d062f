// Command ranksetoracle parses rank sets with hpcdap's Go rankset package, for the extension's
// tests: each stdin line is a JSON object {"s": string, "size": int}; each stdout line is
// {"ok": bool, "set": string, "len": int, "err": string}.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"

	"github.com/hpcdap/hpcdap/rankset"
)

type query struct {
	S    string `json:"s"`
	Size int    `json:"size"`
}

type answer struct {
	OK  bool   `json:"ok"`
	Set string `json:"set"`
	Len int    `json:"len"`
	Err string `json:"err"`
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<24)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	enc := json.NewEncoder(out)
	for in.Scan() {
		var q query
		if err := json.Unmarshal(in.Bytes(), &q); err != nil {
			fmt.Fprintf(os.Stderr, "ranksetoracle: decode %q: %v\n", in.Text(), err)
			os.Exit(1)
		}
		var a answer
		if s, err := rankset.Parse(q.S, q.Size); err != nil {
			a.Err = err.Error()
		} else {
			a = answer{OK: true, Set: s.String(), Len: s.Len()}
		}
		if err := enc.Encode(a); err != nil {
			fmt.Fprintf(os.Stderr, "ranksetoracle: write: %v\n", err)
			os.Exit(1)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "ranksetoracle: read: %v\n", err)
		os.Exit(1)
	}
}

package stacks

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/hpcdap/hpcdap/adapter"
)

// Formats are the output formats WriteTree knows.
var Formats = []string{"text", "dot", "json"}

// WriteTree writes r's tree in format: "text", "dot" or "json".
func WriteTree(w io.Writer, r *Result, format string) error {
	switch format {
	case "text":
		return writeText(w, r)
	case "dot":
		return writeDOT(w, r)
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r.Tree)
	}
	return fmt.Errorf("unknown format %q (want %s)", format, strings.Join(Formats, ", "))
}

// writeText writes the tree indented two spaces a level, each node as
// "function  [ranks] count".
func writeText(w io.Writer, r *Result) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%d rank(s) [%s], %d sample(s), %d stack(s); count = threads × samples seen there\n",
		r.Ranks.Len(), r.Ranks, r.Samples, r.Tree.Total)
	var walk func(nodes []*adapter.StackNode, depth int)
	walk = func(nodes []*adapter.StackNode, depth int) {
		for _, n := range nodes {
			fmt.Fprintf(&b, "%s%s  [%s] %d\n", strings.Repeat("  ", depth), n.Name, n.Ranks, n.Count)
			walk(n.Children, depth+1)
		}
	}
	walk(r.Tree.Roots, 0)
	_, err := io.WriteString(w, b.String())
	return err
}

// writeDOT writes the tree as a Graphviz digraph in STAT's manner: a root node "/", one node
// per tree node labelled with its function and "count:[ranks]", and edges parent → child
// labelled with the child's "count:[ranks]".
func writeDOT(w io.Writer, r *Result) error {
	var b strings.Builder
	b.WriteString("digraph G {\n")
	b.WriteString("\tnode [shape=box, style=\"rounded,filled\", fillcolor=\"#dde8f7\", fontname=\"Helvetica\"];\n")
	b.WriteString("\tedge [fontname=\"Helvetica\"];\n")
	fmt.Fprintf(&b, "\t0 [label=%s];\n", dotQuote("/"))
	var walk func(parent int, nodes []*adapter.StackNode)
	walk = func(parent int, nodes []*adapter.StackNode) {
		for _, n := range nodes {
			set := fmt.Sprintf("%d:[%s]", n.Count, n.Ranks)
			fmt.Fprintf(&b, "\t%d [label=%s];\n", n.ID, dotQuote(n.Name+"\n"+set))
			fmt.Fprintf(&b, "\t%d -> %d [label=%s];\n", parent, n.ID, dotQuote(set))
			walk(n.ID, n.Children)
		}
	}
	walk(0, r.Tree.Roots)
	b.WriteString("}\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// dotQuote quotes s as a DOT string: quotes and backslashes escaped, newlines as "\n".
func dotQuote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}

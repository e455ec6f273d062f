package rsp

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
)

// register is one register of the target description.
type register struct {
	Name    string
	Num     int // the protocol's number, for p and P
	Bits    int
	Type    string
	Group   string
	Feature string
	Offset  int // byte offset in the g packet, by regnum order
}

// Size returns the register's size in bytes.
func (r *register) Size() int { return (r.Bits + 7) / 8 }

// tdesc is a parsed target description: target.xml with its includes.
type tdesc struct {
	Arch   string
	Regs   []*register // by Num
	byName map[string]*register
	seen   map[string]bool // documents read, each at most once
}

// reg returns the register called name, or nil.
func (d *tdesc) reg(name string) *register { return d.byName[name] }

// maxIncludeDepth bounds xi:include nesting, against a stub that includes a file in itself.
const maxIncludeDepth = 4

// parseTdesc parses the description document named annex; fetch returns a document by name.
func parseTdesc(annex string, fetch func(annex string) ([]byte, error)) (*tdesc, error) {
	d := &tdesc{byName: make(map[string]*register), seen: make(map[string]bool)}
	next := 0
	if err := d.parse(annex, fetch, &next, 0); err != nil {
		return nil, err
	}
	if len(d.Regs) == 0 {
		return nil, fmt.Errorf("target description %s: no registers", annex)
	}
	sort.Slice(d.Regs, func(i, j int) bool { return d.Regs[i].Num < d.Regs[j].Num })
	off := 0
	for i, r := range d.Regs {
		if i > 0 && r.Num == d.Regs[i-1].Num {
			return nil, fmt.Errorf("target description %s: register number %d used twice", annex, r.Num)
		}
		r.Offset = off
		off += r.Size()
	}
	return d, nil
}

func (d *tdesc) parse(annex string, fetch func(string) ([]byte, error), next *int, depth int) error {
	if depth > maxIncludeDepth {
		return fmt.Errorf("target description %s: includes nested too deeply", annex)
	}
	if d.seen[annex] {
		return fmt.Errorf("target description %s: included twice", annex)
	}
	d.seen[annex] = true
	doc, err := fetch(annex)
	if err != nil {
		return fmt.Errorf("target description %s: %w", annex, err)
	}
	dec := xml.NewDecoder(bytes.NewReader(doc))
	dec.Strict = false
	dec.Entity = xml.HTMLEntity
	// The documents name a DTD ("gdb-target.dtd") that is not fetched.
	var feature string
	var inArch bool
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("target description %s: %w", annex, err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			switch t.Name.Local {
			case "architecture":
				inArch = true
			case "include":
				href := attr(t, "href")
				if href == "" {
					return fmt.Errorf("target description %s: include without href", annex)
				}
				if err := d.parse(href, fetch, next, depth+1); err != nil {
					return err
				}
			case "feature":
				feature = attr(t, "name")
			case "reg":
				r, err := parseReg(t, next)
				if err != nil {
					return fmt.Errorf("target description %s: %w", annex, err)
				}
				r.Feature = feature
				d.Regs = append(d.Regs, r)
				d.byName[r.Name] = r
			}
		case xml.EndElement:
			if t.Name.Local == "architecture" {
				inArch = false
			}
		case xml.CharData:
			if inArch {
				d.Arch += string(bytes.TrimSpace(t))
			}
		}
	}
}

// parseReg reads a <reg> element; registers without regnum follow the previous one.
func parseReg(t xml.StartElement, next *int) (*register, error) {
	r := &register{Name: attr(t, "name"), Type: attr(t, "type"), Group: attr(t, "group")}
	if r.Name == "" {
		return nil, errors.New("register without a name")
	}
	bits, err := strconv.Atoi(attr(t, "bitsize"))
	if err != nil || bits <= 0 || bits > 4096 {
		return nil, fmt.Errorf("register %s: bad bitsize %q", r.Name, attr(t, "bitsize"))
	}
	r.Bits = bits
	r.Num = *next
	if s := attr(t, "regnum"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("register %s: bad regnum %q", r.Name, s)
		}
		r.Num = n
	}
	*next = r.Num + 1
	return r, nil
}

func attr(t xml.StartElement, name string) string {
	for _, a := range t.Attr {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

package adapter

import (
	"testing"

	"github.com/google/go-dap"
)

// TestSetVariableThenVariables: after setVariable on a child of a reference (an array element,
// a struct member, a member of an element of an array inside a struct), a variables request on
// the same reference and on its parents shows the new value, as evaluate does; a pointer's
// new value comes with its memory reference.
func TestSetVariableThenVariables(t *testing.T) {
	t.Parallel()
	p := compileC(t, "stacks")
	d := newDAP(t, viaPipe)
	defer d.close()
	_, frames, _ := stopAtLeaf(t, d, p, 1)
	fid := frames[0].Id
	eval := func(e string) string {
		var ev dap.EvaluateResponseBody
		d.call("evaluate", map[string]any{"expression": e, "frameId": fid, "context": "watch"}, &ev)
		return ev.Result
	}
	set := func(ref int, name, value string) dap.SetVariableResponseBody {
		t.Helper()
		var sv dap.SetVariableResponseBody
		d.call("setVariable", map[string]any{"variablesReference": ref, "name": name, "value": value}, &sv)
		return sv
	}

	// An array element: the global values[0].
	globals := d.scopeVars(fid, "Globals")
	valuesRef := globals["values"].VariablesReference
	if valuesRef == 0 {
		t.Fatalf("values has no children: %+v", globals["values"])
	}
	if got := d.vars(valuesRef)["[0]"].Value; got != "1" {
		t.Fatalf("values[0] = %q before the write", got)
	}
	if sv := set(valuesRef, "[0]", "100"); sv.Value != "100" {
		t.Errorf("setVariable values[0] answered %q", sv.Value)
	}
	if got := d.vars(valuesRef)["[0]"].Value; got != "100" {
		t.Errorf("variables on values after setting [0] to 100: [0] = %q (evaluate: %q)", got, eval("values[0]"))
	}
	if got, want := d.scopeVars(fid, "Globals")["values"].Value, eval("values"); got != want || got[:5] != "{100," {
		t.Errorf("Globals scope shows values = %q, evaluate %q", got, want)
	}

	// A struct member through the pointer argument s.
	sRef := d.scopeVars(fid, "Arguments")["s"].VariablesReference
	members := d.vars(sRef)
	if got := members["scale"].Value; got != eval("s->scale") {
		t.Fatalf("s->scale %q, evaluate %q", got, eval("s->scale"))
	}
	set(sRef, "scale", "2.5")
	if got := d.vars(sRef)["scale"].Value; got != "2.5" {
		t.Errorf("variables on s after setting scale to 2.5: %q (evaluate: %q)", got, eval("s->scale"))
	}

	// Nested: s->corner[1].x, set through the reference of corner[1], read back through it
	// and through its parents.
	cornerRef := d.vars(sRef)["corner"].VariablesReference
	c1Ref := d.vars(cornerRef)["[1]"].VariablesReference
	if c1Ref == 0 {
		t.Fatalf("corner[1] has no children")
	}
	set(c1Ref, "x", "77")
	if got := d.vars(c1Ref)["x"].Value; got != "77" {
		t.Errorf("variables on corner[1] after setting x to 77: %q (evaluate: %q)", got, eval("s->corner[1].x"))
	}
	if got, want := d.vars(cornerRef)["[1]"].Value, eval("s->corner[1]"); got != want || want != "{x = 77, y = 4}" {
		t.Errorf("corner[1] reads %q through its parent, evaluate %q", got, want)
	}
	if got, want := d.vars(sRef)["corner"].Value, eval("s->corner"); got != want {
		t.Errorf("s->corner reads %q through s, evaluate %q", got, want)
	}
}

// TestSetVariablePointerMemoryReference: setVariable on a pointer answers with the new value's
// memory reference (where it now points), the one a following variables request shows.
func TestSetVariablePointerMemoryReference(t *testing.T) {
	t.Parallel()
	p := compileC(t, "stacks")
	d := newDAP(t, viaPipe)
	defer d.close()
	_, frames, _ := stopAtLeaf(t, d, p, 1)
	fid := frames[0].Id
	var sc dap.ScopesResponseBody
	d.call("scopes", map[string]any{"frameId": fid}, &sc)
	globalsRef := 0
	for _, s := range sc.Scopes {
		if s.Name == "Globals" {
			globalsRef = s.VariablesReference
		}
	}
	before := d.vars(globalsRef)["greeting"]
	var ev dap.EvaluateResponseBody
	d.call("evaluate", map[string]any{"expression": "greeting + 7", "frameId": fid, "context": "watch"}, &ev)
	if ev.MemoryReference == "" || ev.MemoryReference == before.MemoryReference {
		t.Fatalf("greeting %+v, greeting + 7 %+v", before, ev)
	}
	var raw struct {
		Value           string `json:"value"`
		MemoryReference string `json:"memoryReference"`
	}
	d.call("setVariable", map[string]any{"variablesReference": globalsRef, "name": "greeting", "value": "greeting + 7"}, &raw)
	after := d.vars(globalsRef)["greeting"]
	if after.Value != ev.Result {
		t.Errorf("greeting after the write: %q, want %q", after.Value, ev.Result)
	}
	if raw.MemoryReference != ev.MemoryReference || raw.MemoryReference != after.MemoryReference {
		t.Errorf("setVariable greeting answered memoryReference %q; it points at %s, variables shows %q",
			raw.MemoryReference, ev.MemoryReference, after.MemoryReference)
	}
	if raw.Value != after.Value {
		t.Errorf("setVariable answered %q, variables shows %q", raw.Value, after.Value)
	}
}

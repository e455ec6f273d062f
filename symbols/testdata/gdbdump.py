# gdb-side half of the differential tests of package symbols.
#
# Run as: gdb -batch -nx -x gdbdump.py PROGRAM   (or with a core file for
# post-mortem dumps).  Input and output are JSON files named by environment
# variables:
#   SYMTEST_MODE   "live"  - run PROGRAM, stop at each marked line, dump a core
#                            and gdb's view of the stack, variables and
#                            expressions;
#                  "core"  - the same dump for an existing core file
#                            (SYMTEST_CORE);
#                  "lines" - static: where gdb places breakpoints for lines
#                            and functions.
#   SYMTEST_IN     JSON input (stops, or lines and functions)
#   SYMTEST_OUT    JSON output
#   SYMTEST_DIR    directory for core files (live mode)
import json
import os

import gdb

MAX_FRAMES = 40


def setup():
    # gdb 13 asserts in its repeat detection on arrays read through garbage descriptors
    # (optimized Fortran); without these it aborts the whole dump. With them the internal
    # error surfaces as a Quit in the one command, which text() records as an error.
    for cmd in ("maint set internal-error quit no", "maint set internal-error corefile no",
                "maint set internal-error backtrace off",
                "set pagination off", "set confirm off", "set width 0",
                "disable pretty-printer",
                "set height 0", "set print pretty off",
                "set print frame-arguments scalars",
                "set debuginfod enabled off", "set breakpoint pending off"):
        try:
            gdb.execute(cmd, to_string=True)
        except gdb.error:
            pass


def text(cmd):
    try:
        return gdb.execute(cmd, to_string=True)
    except (gdb.error, KeyboardInterrupt) as e:
        return "ERROR: " + str(e)


def frame_type(f):
    t = f.type()
    names = {gdb.NORMAL_FRAME: "normal", gdb.INLINE_FRAME: "inline",
             gdb.SIGTRAMP_FRAME: "sigtramp", gdb.DUMMY_FRAME: "dummy", gdb.TAILCALL_FRAME: "tailcall"}
    return names.get(t, str(t))


def dump_frames():
    frames = []
    f = gdb.newest_frame()
    level = 0
    while f is not None and level < MAX_FRAMES:
        sal = f.find_sal()
        fr = {"level": level, "pc": f.pc(), "name": f.name() or "",
              "type": frame_type(f), "file": "", "line": 0}
        if sal is not None and sal.symtab is not None:
            fr["file"] = sal.symtab.filename
            fr["line"] = sal.line
        f.select()
        fr["locals"] = text("info locals")
        fr["args"] = text("info args")
        frames.append(fr)
        try:
            f = f.older()
        except gdb.error:
            break
        level += 1
    gdb.newest_frame().select()
    return frames


def children(v):
    """The first children of a value as an IDE lists them: members (base classes
    as <Base>), array elements by index (from the lower bound), or the object a
    pointer points to."""
    t = v.type.strip_typedefs()
    kids = []
    if t.code in (gdb.TYPE_CODE_STRUCT, gdb.TYPE_CODE_UNION):
        for f in t.fields():
            if f.type is not None and f.type.strip_typedefs().code == gdb.TYPE_CODE_FUNC:
                continue
            name = f.name if f.name else "<anonymous>"
            if f.is_base_class:
                name = "<" + str(f.type) + ">"
            try:
                kids.append([name, str(v[f])])
            except (gdb.error, KeyboardInterrupt) as e:
                kids.append([name, "ERROR: " + str(e)])
    elif t.code == gdb.TYPE_CODE_ARRAY:
        lo, hi = t.range()
        fortran = gdb.current_language() == "fortran"
        if not fortran and t.target().strip_typedefs().code == gdb.TYPE_CODE_INT and t.target().sizeof == 1:
            return kids
        for i in range(lo, min(hi, lo + 9) + 1):
            name = ("(%d)" if fortran else "[%d]") % i
            if fortran and t.target().strip_typedefs().code == gdb.TYPE_CODE_ARRAY:
                name = "(:," + str(i) + ")"
            kids.append([name, str(v[i])])
    elif t.code == gdb.TYPE_CODE_PTR:
        tt = t.target().strip_typedefs()
        if tt.code not in (gdb.TYPE_CODE_VOID, gdb.TYPE_CODE_FUNC) and not (
                tt.code == gdb.TYPE_CODE_INT and tt.sizeof == 1) and int(v) != 0:
            try:
                kids.append(["*", str(v.dereference())])
            except (gdb.error, KeyboardInterrupt) as e:
                kids.append(["*", "ERROR: " + str(e)])
    return kids


def dump_prints(exprs):
    out = []
    # Assignments ("set LHS = RHS") run last; gdb prints the assigned value, then the
    # variable is printed again.
    exprs = [e for e in exprs if not e.startswith("set ")] + \
        [e for e in exprs if e.startswith("set ")]
    for e in exprs:
        if e.startswith("set "):
            assign = e[4:]
            lhs = assign.split("=")[0].rstrip("+-*/ ")
            out.append({"expr": e, "out": text("print " + assign),
                        "after": text("print " + lhs), "children": []})
            continue
        r = text("print " + e)
        kids = []
        try:
            kids = children(gdb.parse_and_eval(e))
        except (Exception, KeyboardInterrupt):
            pass
        out.append({"expr": e, "out": r, "children": kids})
    return out


def dump_stop(name, exprs, core):
    if core:
        gdb.execute("generate-core-file " + core, to_string=True)
    return {"name": name, "core": core or "", "bt": text("bt"),
            "frames": dump_frames(), "prints": dump_prints(exprs)}


last_stop = []


def on_stop(ev):
    last_stop.append(ev)


def live(spec, outdir):
    stops = {}
    for s in spec["stops"]:
        bp = gdb.Breakpoint("%s:%d" % (s["file"], s["line"]), internal=False)
        stops[bp.number] = (s, bp)
    for sig in spec.get("pass_signals", []):
        gdb.execute("handle %s nostop noprint pass" % sig, to_string=True)
    gdb.events.stop.connect(on_stop)
    results = []
    gdb.execute("run", to_string=True)
    while gdb.selected_inferior().pid != 0:
        ev = last_stop[-1] if last_stop else None
        hit = None
        if isinstance(ev, gdb.BreakpointEvent):
            for b in ev.breakpoints:
                if b.number in stops:
                    hit = stops[b.number]
        if hit is not None:
            s, bp = hit
            core = os.path.join(outdir, "core." + s["name"])
            results.append(dump_stop(s["name"], s.get("exprs", []), core))
            bp.enabled = False
        del last_stop[:]
        gdb.execute("continue", to_string=True)
    return {"stops": results}


def core_mode(spec):
    res = dump_stop(spec.get("name", "core"), [], "")
    # Print the expressions in the frame of the named function.
    f = gdb.newest_frame()
    while f is not None and f.name() != spec.get("function"):
        f = f.older()
    if f is not None:
        f.select()
        res["prints"] = dump_prints(spec.get("exprs", []))
    return {"stops": [res]}


def lines(spec):
    out = {"lines": [], "functions": []}
    for loc in spec.get("lines", []):
        addrs = []
        try:
            bp = gdb.Breakpoint(loc, internal=True)
            for l in bp.locations:
                sym = l.source
                addrs.append({"addr": l.address,
                              "line": sym[1] if sym else 0})
            bp.delete()
        except gdb.error as e:
            addrs = None
        except RuntimeError:
            addrs = None
        out["lines"].append({"loc": loc, "addrs": addrs})
    for fn in spec.get("functions", []):
        addrs = []
        try:
            bp = gdb.Breakpoint(fn, internal=True)
            for l in bp.locations:
                addrs.append({"addr": l.address,
                              "line": l.source[1] if l.source else 0})
            bp.delete()
        except (gdb.error, RuntimeError):
            addrs = None
        out["functions"].append({"loc": fn, "addrs": addrs})
    out["pcs"] = []
    for pc in spec.get("pcs", []):
        sal = gdb.find_pc_line(pc)
        r = {"pc": pc, "line": sal.line, "file": "", "start": 0, "end": 0}
        if sal.symtab is not None:
            r["file"] = sal.symtab.fullname()
            r["start"] = sal.pc
            r["end"] = sal.last + 1 if sal.last is not None else 0
        out["pcs"].append(r)
    return out


def main():
    setup()
    mode = os.environ["SYMTEST_MODE"]
    with open(os.environ["SYMTEST_IN"]) as f:
        spec = json.load(f)
    if mode == "live":
        gdb.execute("set breakpoint pending off", to_string=True)
        res = live(spec, os.environ["SYMTEST_DIR"])
    elif mode == "core":
        res = core_mode(spec)
    else:
        res = lines(spec)
    with open(os.environ["SYMTEST_OUT"], "w") as f:
        json.dump(res, f, indent=1)


main()

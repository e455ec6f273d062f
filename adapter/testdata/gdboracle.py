# gdb as the oracle of the adapter's tests. Loaded with gdb -batch -nx -x gdboracle.py; it
# defines the command "oracle-dump", which prints one line
#   ORACLE {"frames": [...], "locals": {...}, "args": {...}, "signal": ..., "siaddr": ...}
# describing where the selected thread stands: every frame (function, file, line), the
# innermost frame's local variables and arguments as gdb prints them, and the signal that
# stopped it.
import json
import os

import gdb

# Expressions to evaluate at each dump, a JSON list in ORACLE_EXPRS.
EXPRS = json.loads(os.environ.get("ORACLE_EXPRS", "[]"))

for cmd in ("set pagination off", "set confirm off", "set width 0", "set height 0",
            "set print pretty off", "set debuginfod enabled off", "set breakpoint pending off",
            "set disable-randomization on"):
    try:
        gdb.execute(cmd, to_string=True)
    except gdb.error:
        pass


def frames():
    out = []
    f = gdb.newest_frame()
    while f is not None and len(out) < 64:
        sal = f.find_sal()
        fr = {"name": f.name() or "", "file": "", "line": 0, "pc": f.pc()}
        if sal is not None and sal.symtab is not None:
            fr["file"] = sal.symtab.filename
            fr["line"] = sal.line
        out.append(fr)
        if fr["name"] == "main":
            break
        f = f.older()
    return out


def variables(frame):
    locs, args = {}, {}
    try:
        block = frame.block()
    except RuntimeError:
        return locs, args
    while block is not None:
        for sym in block:
            if not (sym.is_variable or sym.is_argument):
                continue
            target = args if sym.is_argument else locs
            if sym.name in target:
                continue  # shadowed by an inner block
            try:
                target[sym.name] = str(sym.value(frame))
            except gdb.error as e:
                target[sym.name] = "<error: %s>" % e
        if block.function is not None:
            break
        block = block.superblock
    return locs, args


class OracleDump(gdb.Command):
    def __init__(self):
        super().__init__("oracle-dump", gdb.COMMAND_USER)

    def invoke(self, arg, from_tty):
        out = {"frames": [], "locals": {}, "args": {}, "signal": 0, "siaddr": None, "exprs": {}}
        try:
            out["frames"] = frames()
            locs, args = variables(gdb.selected_frame())
            out["locals"], out["args"] = locs, args
        except gdb.error as e:
            out["error"] = str(e)
        for e in EXPRS:
            try:
                out["exprs"][e] = str(gdb.parse_and_eval(e))
            except gdb.error as err:
                out["exprs"][e] = "<error: %s>" % err
        try:
            sig = gdb.parse_and_eval("$_siginfo.si_signo")
            out["signal"] = int(sig)
            out["siaddr"] = int(gdb.parse_and_eval("(unsigned long)$_siginfo._sifields._sigfault.si_addr"))
        except gdb.error:
            pass
        print("ORACLE " + json.dumps(out))


OracleDump()

# gdb as the tool of the emulated runjob (hpcdap-runjob): writes the tool arrays and
# MPIR_being_debugged, stops at MPIR_Breakpoint and prints what runjob's MPIR symbols hold as
# one "ORACLE {json}" line, then lets runjob go on.
#
# Environment: MPIR_MODE "launch" (run the program given with --args) or "attach" (the
# process gdb was attached to with -p); MPIR_TOOL_PATH, MPIR_TOOL_ARGS (a JSON list),
# MPIR_SUBSET (each written raw, as bytes: a path of 256 bytes has no NUL).
import json
import os

import gdb

gdb.execute("set breakpoint pending on")
gdb.execute("set confirm off")
gdb.execute("set pagination off")
mode = os.environ["MPIR_MODE"]
if mode == "launch":
    gdb.execute("break main")
    gdb.execute("run")


def addr(sym):
    return int(gdb.parse_and_eval("&" + sym).cast(gdb.lookup_type("long")))


inf = gdb.selected_inferior()
path = os.environ["MPIR_TOOL_PATH"].encode()
inf.write_memory(addr("MPIR_executable_path"), path[:256] if len(path) >= 256 else path + b"\0")
args = json.loads(os.environ["MPIR_TOOL_ARGS"])
if isinstance(args, str):  # raw bytes, as given
    raw = args.encode()
else:
    raw = b"".join(a.encode() + b"\0" for a in args) + b"\0"
inf.write_memory(addr("MPIR_server_arguments"), raw)
inf.write_memory(addr("MPIR_subset_attach"), os.environ.get("MPIR_SUBSET", "").encode() + b"\0")
gdb.execute("set var MPIR_being_debugged = 1")
gdb.execute("break MPIR_Breakpoint")
gdb.execute("continue")

state = int(gdb.parse_and_eval("MPIR_debug_state"))
out = {"state": state, "table": []}
if state == 2:
    out["abort"] = gdb.parse_and_eval("MPIR_debug_abort_string").string()
else:
    for i in range(int(gdb.parse_and_eval("MPIR_proctable_size"))):
        e = gdb.parse_and_eval("MPIR_proctable[%d]" % i)
        out["table"].append({"host": e["host_name"].string(), "exe": e["executable_name"].string(),
                             "pid": int(e["pid"])})
print("ORACLE " + json.dumps(out), flush=True)
gdb.execute("delete")
if mode == "launch":
    gdb.execute("continue")
else:
    gdb.execute("detach")

# The instructions one read executes, row by row: a gdb script that
# single-steps each row's one call in `clockhal_bench::count::traced_call`.
#
#   cargo build -p clockhal-bench --release --bin clockhal-read-count
#   gdb -q -batch -x bench/trace-read.py target/release/clockhal-read-count
#
# Writes target/bench/trace/<n>.txt per row (every executed instruction, in
# order, with its symbol) and target/bench/trace/summary.txt (instructions,
# memory reads/writes, conditional branches per row, classified from the
# Intel-syntax disassembly). The trace covers the batch loop once around
# the read (a handful of instructions; `loop overhead` in the
# clockhal-read-count table). For reading the generated code only: the
# exact per-read counts are valgrind's (clockhal-read-count).
import os
import re

import gdb

OUT = os.path.join(
    os.environ.get("CARGO_TARGET_DIR", "target"), "bench", "trace"
)
os.makedirs(OUT, exist_ok=True)
NAMES = os.path.join(OUT, "rows.txt")
# A seqlock read that single-stepping stretches over a kernel timekeeping
# update retries for as long as it is stepped (the vDSO's does): stop there.
MAX_STEPS = 3000

gdb.execute("set pagination off")
gdb.execute("set confirm off")
gdb.execute("set disassembly-flavor intel")
gdb.execute("set print asm-demangle on")
gdb.execute("rbreak ^clockhal_bench::count::traced_call")
gdb.execute("run --trace-calls > " + NAMES)
gdb.execute("set scheduler-locking step")


def classify(text):
    """(reads, writes, cond_branch) of one Intel-syntax instruction."""
    m = re.search(r":\s+(?:lock\s+)?(\w+)\s*(.*)$", text)
    if not m:
        return 0, 0, 0
    op, args = m.group(1), m.group(2)
    args = re.sub(r"\s*#.*$", "", args)
    args = re.sub(r"<[^>]*>", "", args)
    operands = [a.strip() for a in re.split(r",(?![^\[]*\])", args) if a.strip()]
    mem = [i for i, a in enumerate(operands) if "[" in a]
    if op in ("lea", "nop", "prefetcht0", "prefetchnta"):
        return 0, 0, 0
    if op == "call":
        return (1 if mem else 0), 1, 0
    if op == "ret":
        return 1, 0, 0
    if op == "push":
        return (1 if mem else 0), 1, 0
    if op == "pop":
        return 1, (1 if mem else 0), 0
    cond = 1 if (op.startswith("j") and op != "jmp") else 0
    if not mem:
        return 0, 0, cond
    if op in ("cmp", "test", "bt") or op.startswith("j") or op == "jmp":
        return 1, 0, cond
    if 0 in mem:
        # Destination in memory: a plain mov only writes; others read too.
        pure_store = op in ("mov", "movq", "movd", "movups", "movaps", "movdqa", "movdqu")
        return (0 if pure_store else 1), 1, cond
    return 1, 0, cond


summary = []
row = 0
while True:
    try:
        frame = gdb.selected_frame()
    except gdb.error:
        break
    names = [
        l.split("\t", 1)[1].strip()
        for l in open(NAMES).read().splitlines()
        if l.startswith("TRACE\t")
    ]
    name = names[-1] if names else "?"
    sp0 = int(gdb.parse_and_eval("$sp"))
    lines, reads, writes, branches = [], 0, 0, 0
    done = False
    for _ in range(MAX_STEPS):
        text = gdb.execute("x/i $pc", to_string=True).strip().lstrip("=> ")
        lines.append(text)
        r, w, b = classify(text)
        reads, writes, branches = reads + r, writes + w, branches + b
        gdb.execute("stepi", to_string=True)
        if int(gdb.parse_and_eval("$sp")) > sp0:
            done = True
            break
    row += 1
    note = "" if done else " (INCOMPLETE: a retry loop while single-stepping)"
    with open(os.path.join(OUT, "%02d.txt" % row), "w") as f:
        f.write("# %s: %d instructions%s\n" % (name, len(lines), note))
        f.write("\n".join(lines) + "\n")
    summary.append(
        "%-66s %5d instr %4d reads %4d writes %4d cond. branches%s"
        % (name, len(lines), reads, writes, branches, note)
    )
    try:
        gdb.execute("continue")
    except gdb.error:
        break

with open(os.path.join(OUT, "summary.txt"), "w") as f:
    f.write("\n".join(summary) + "\n")
print("\n".join(summary))
print("traces in " + OUT)

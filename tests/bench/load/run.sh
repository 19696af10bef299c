#!/bin/sh
# run.sh - checkpoint loading speed and memory: ptc against torch.load(weights_only=True), against
# torch.load(weights_only=True, mmap=True) followed by a read of every byte, and against a plain
# read() of the same file, measured in the same run. The verdicts compare ptc with the faster of the
# two torch rows. See README.md beside this.
#
#   make bench                                  (builds bench_load, then runs this)
#   top_builddir=BUILD tests/bench/load/run.sh  (directly; top_builddir defaults to this tree)
#
# Environment: TORCH_PYTHON (default python3) must import torch and torchvision; BENCH_REPEAT (or
# BENCH_REPEATS; default 7, at least 5) runs per measurement, medians reported; BENCH_OUT, when
# set, a file that receives the markdown tables and verdicts too; BENCH_PTC the ptc binary timed
# as a whole process by `ptc inspect --json` (default: the build tree's, the binary itself rather
# than libtool's wrapper script); BENCH_TMPDIR (default $TMPDIR or /tmp) holds the three inputs,
# about 1.1 GiB, with 3 GiB required free; BENCH_CASES (default "a b c") picks cases. Exit status
# is 0 when every measurement ran, whatever the numbers: the targets are reported, never asserted.

here=$(cd "$(dirname "$0")" && pwd)
: "${top_srcdir:=$(cd "$here/../../.." && pwd)}"
# make runs recipes in the build tree, so a build tree in the current directory wins.
if [ -z "$top_builddir" ] && [ -e "./tests/bench/load/bench_load" ]; then top_builddir=$(pwd); fi
: "${top_builddir:=$top_srcdir}"
py=${TORCH_PYTHON:-python3}
repeats=${BENCH_REPEAT:-${BENCH_REPEATS:-7}}
cases=${BENCH_CASES:-a b c}
bench="$top_builddir/tests/bench/load/bench_load"

case $repeats in
'' | *[!0-9]*) echo "run.sh: BENCH_REPEAT must be a number" >&2; exit 2 ;;
esac
if [ "$repeats" -lt 5 ]; then
    echo "run.sh: BENCH_REPEAT=$repeats raised to 5 (medians of fewer runs are noise)" >&2
    repeats=5
fi
if [ ! -x "$bench" ]; then
    echo "run.sh: $bench is not built (make tests/bench/load/bench_load, or make bench)" >&2
    exit 1
fi
# The ptc that `ptc inspect --json` times as a whole process: in a libtool build tree tools/ptc is
# a shell script that sets up the library path and execs tools/.libs/ptc, which would be timed
# with it; the binary itself runs with the build tree's libptc instead, as an installed one would
# with the installed library.
ptc_bin=${BENCH_PTC:-}
if [ -z "$ptc_bin" ]; then
    if [ -x "$top_builddir/tools/.libs/ptc" ]; then
        ptc_bin="$top_builddir/tools/.libs/ptc"
        LD_LIBRARY_PATH="$top_builddir/lib/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        export LD_LIBRARY_PATH
    else
        ptc_bin="$top_builddir/tools/ptc"
    fi
fi
if [ ! -x "$ptc_bin" ]; then
    echo "run.sh: $ptc_bin is not built (make tools/ptc, or set BENCH_PTC)" >&2
    exit 1
fi
case $ptc_bin in /*) ;; *) ptc_bin="$(pwd)/$ptc_bin" ;; esac
if ! "$py" -c 'import torch, torchvision' 2>/dev/null; then
    echo "run.sh: $py cannot import torch and torchvision (set TORCH_PYTHON)" >&2
    exit 1
fi

base=${BENCH_TMPDIR:-${TMPDIR:-/tmp}}
free_kib=$(df -Pk "$base" | awk 'NR == 2 { print $4 }')
if [ -n "$free_kib" ] && [ "$free_kib" -lt $((3 * 1024 * 1024)) ]; then
    echo "run.sh: $base has $((free_kib / 1024)) MiB free; 3 GiB are needed (set BENCH_TMPDIR)" >&2
    exit 1
fi
tmp=$(mktemp -d "$base/ptc-bench.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

# ---- inputs, written by the PyTorch peer ------------------------------------------------------
echo "making inputs in $tmp with $py ..."
"$py" - "$tmp" "$cases" <<'EOF' || exit 1
import sys, torch
out, cases = sys.argv[1], sys.argv[2].split()
torch.manual_seed(0)
if "a" in cases:
    import torchvision
    torch.save(torchvision.models.resnet18(num_classes=10).state_dict(), out + "/a.pth")
if "b" in cases:
    # 16 tensors of 64 MiB: 1 GiB of float32.
    torch.save({"t%02d" % i: torch.rand(16 << 20) for i in range(16)}, out + "/b.pth")
if "c" in cases:
    # 20,000 tensors of 128 floats: about 10 MB of data, dominated by per-tensor costs.
    torch.save({"p%05d" % i: torch.rand(128) for i in range(20000)}, out + "/c.pth")
EOF

# Timing snippets for the peer: the median of several loads in one process (after one warm-up
# load that pays for imports and first use), and, in a fresh process, the peak RSS of one load.
torch_time='
import statistics, sys, time, torch
path, n = sys.argv[1], int(sys.argv[2])
torch.load(path, weights_only=True)
times = []
for _ in range(n):
    t0 = time.perf_counter()
    obj = torch.load(path, weights_only=True)
    times.append(time.perf_counter() - t0)
    del obj
print("median_s=%.6f" % statistics.median(times))
'
# The mmap peer: torch maps the file and, like `bench_load read`, every byte of every storage is
# then read once (a sum of 64-bit words where the storage size allows, else of bytes), so that the
# pages a lazy load leaves untouched are paid for as ptc pays for them.
torch_mmap_time='
import statistics, sys, time, torch
path, n = sys.argv[1], int(sys.argv[2])
def touch(obj, seen):
    if isinstance(obj, torch.Tensor):
        s = obj.untyped_storage()
        if s.data_ptr() in seen or s.nbytes() == 0:
            return
        seen.add(s.data_ptr())
        b = torch.empty(0, dtype=torch.uint8).set_(s)
        if b.numel() % 8 == 0 and b.data_ptr() % 8 == 0:
            b = b.view(torch.int64)
        b.sum()
    elif isinstance(obj, dict):
        for v in obj.values():
            touch(v, seen)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            touch(v, seen)
def load():
    obj = torch.load(path, weights_only=True, mmap=True)
    touch(obj, set())
    return obj
load()
times = []
for _ in range(n):
    t0 = time.perf_counter()
    obj = load()
    times.append(time.perf_counter() - t0)
    del obj
print("median_s=%.6f" % statistics.median(times))
'
# torch.load(mmap=True) alone, nothing read: the peer of an open that reads no tensor data
# (`bench_load open`, `ptc inspect`), which is compared with the faster of this and torch.load.
torch_mmap_open='
import statistics, sys, time, torch
path, n = sys.argv[1], int(sys.argv[2])
torch.load(path, weights_only=True, mmap=True)
times = []
for _ in range(n):
    t0 = time.perf_counter()
    obj = torch.load(path, weights_only=True, mmap=True)
    times.append(time.perf_counter() - t0)
    del obj
print("median_s=%.6f" % statistics.median(times))
'
torch_rss='
import resource, sys, torch
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
obj = torch.load(sys.argv[1], weights_only=True)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print("peak_rss_kib=%d import_rss_kib=%d" % (after, before))
'

results="$tmp/results"
: >"$results"
for c in $cases; do
    f="$tmp/$c.pth"
    [ -f "$f" ] || continue
    size=$(wc -c <"$f" | tr -d ' ')
    echo "case $c: $f ($size bytes)"
    # Warm the page cache so every contender reads from memory, not from the disk.
    cat "$f" >/dev/null
    cat "$f" >/dev/null
    for mode in open read plain; do
        line=$("$bench" "$mode" "$f" "$repeats") || exit 1
        echo "  $line"
        echo "case=$c size=$size $line" >>"$results"
    done
    line=$("$py" -c "$torch_time" "$f" "$repeats") || exit 1
    line2=$("$py" -c "$torch_rss" "$f") || exit 1
    echo "  torch $line $line2"
    echo "case=$c size=$size mode=torch $line $line2" >>"$results"
    line=$("$py" -c "$torch_mmap_time" "$f" "$repeats") || exit 1
    echo "  torch-mmap+read $line"
    echo "case=$c size=$size mode=torch_mmap $line" >>"$results"
    line=$("$py" -c "$torch_mmap_open" "$f" "$repeats") || exit 1
    echo "  torch-mmap $line"
    echo "case=$c size=$size mode=torch_mmap_open $line" >>"$results"
    if [ "$c" != b ]; then
        line=$("$bench" inspect "$f" "$repeats" "$ptc_bin") || exit 1
        echo "  $line"
        echo "case=$c size=$size $line" >>"$results"
    fi
done

# ---- the tables -------------------------------------------------------------------------------
load=$(uptime | sed 's/.*load average: //')
"$py" - "$results" "$repeats" "$load" "${BENCH_OUT:-}" <<'EOF'
import sys
rows = {}
for line in open(sys.argv[1]):
    kv = dict(w.split("=", 1) for w in line.split() if "=" in w)
    rows.setdefault(kv["case"], {})[kv["mode"]] = kv
repeats, load, out_path = sys.argv[2], sys.argv[3], sys.argv[4]
names = {"a": "(a) resnet18 state dict", "b": "(b) 1 GiB, 16 tensors",
         "c": "(c) 20,000 small tensors"}
MiB = 1024.0
lines = []
def emit(s=""):
    lines.append(s)
def table(hdr, body):
    emit("| " + " | ".join(hdr) + " |")
    emit("|" + "|".join("---" if i == 0 else "---:" for i in range(len(hdr))) + "|")
    for r in body:
        emit("| " + " | ".join(r) + " |")
def ms(r):
    return float(r["median_s"]) * 1e3
verdicts = []
def judge(ok, text):
    verdicts.append("%-6s %s" % ("met" if ok else "MISSED", text))

hdr = ("case", "size MiB", "ptc open ms", "ptc read ms", "plain read ms", "torch ms",
       "torch mmap+read ms", "torch/ptc-read", "ptc-read/plain", "ptc peak RSS MiB", "ptc anon MiB",
       "torch peak RSS MiB")
body = []
for c in sorted(rows):
    r = rows[c]
    o, rd, pl = ms(r["open"]), ms(r["read"]), ms(r["plain"])
    tl, tm = ms(r["torch"]), ms(r["torch_mmap"])
    # The verdicts use the faster torch row: ptc must beat torch as a user would best run it.
    t, tname = (tl, "torch.load") if tl <= tm else (tm, "torch.load(mmap=True)+read")
    anon = int(r["read"]["peak_anon_kib"])
    body.append((names.get(c, c), "%.1f" % (int(r["read"]["size"]) / 1048576.0),
                 "%.2f" % o, "%.2f" % rd, "%.2f" % pl, "%.2f" % tl, "%.2f" % tm,
                 "%.1fx%s" % (t / rd, " (mmap)" if tm < tl else ""), "%.2fx" % (rd / pl),
                 "%.0f" % (int(r["read"]["peak_rss_kib"]) / MiB),
                 "%.1f" % (anon / MiB) if anon >= 0 else "?",
                 "%.0f (%.0f import)" % (int(r["torch"]["peak_rss_kib"]) / MiB,
                                        int(r["torch"]["import_rss_kib"]) / MiB)))
    if c == "c":
        judge(t / rd >= 50, "(c) ptc read >= 50x faster than the faster torch, %s: %.1fx"
              % (tname, t / rd))
    if c in ("a", "b"):
        judge(rd / pl <= 1.5, "(%s) ptc read within 1.5x of plain read: %.2fx" % (c, rd / pl))
        judge(t / rd >= 3, "(%s) ptc read >= 3x faster than the faster torch, %s: %.1fx"
              % (c, tname, t / rd))
    if c == "b":
        judge(0 <= anon < 64 * 1024,
              "(b) ptc peak RSS under 64 MiB plus page cache: %s MiB anonymous"
              % ("%.1f" % (anon / MiB) if anon >= 0 else "unknown"))
emit("Loading: medians of %s runs, load average %s." % (repeats, load))
emit()
table(hdr, body)
emit()
emit("torch/ptc-read (against the faster torch row, marked (mmap) when that is torch.load(mmap=True)")
emit("plus a read of every byte) above 1 favours ptc; ptc-read/plain is the overhead over the")
emit("page-cache read limit.")

# Opening and `ptc inspect --json` against torch.load in-process: the faster of torch.load and
# torch.load(mmap=True), which reads no tensor data either.
hdr2 = ("case", "ptc open ms, in-process", "torch.load ms", "torch.load(mmap) ms", "open ratio",
        "ptc inspect --json ms, whole process (CPU ms)", "inspect ratio (by CPU)")
body2 = []
for c in sorted(rows):
    r = rows[c]
    if "inspect" not in r or "torch_mmap_open" not in r:
        continue
    o, tl, tmo = ms(r["open"]), ms(r["torch"]), ms(r["torch_mmap_open"])
    t = min(tl, tmo)
    tname = "torch.load" if tl <= tmo else "torch.load(mmap=True)"
    ins = ms(r["inspect"])
    cpu = float(r["inspect"]["cpu_median_s"]) * 1e3
    body2.append((names.get(c, c), "%.2f" % o, "%.2f" % tl, "%.2f" % tmo, "%.1fx" % (t / o),
                  "%.2f (%.2f)" % (ins, cpu),
                  "%.1fx (%s)" % (t / ins, "%.1fx" % (t / cpu) if cpu > 0 else "?")))
    if c == "c":
        judge(t / o >= 50, "(c) ptc open in-process >= 50x the faster torch, %s: %.1fx (%.2f ms)"
              % (tname, t / o, o))
        judge(t / ins >= 20, "(c) ptc inspect --json, whole process, >= 20x the faster torch, "
              "%s in-process: %.1fx (%.2f ms)" % (tname, t / ins, ins))
    if c == "a":
        judge(t / ins >= 10, "(a) ptc inspect --json, whole process, >= 10x the faster torch, "
              "%s in-process: %.1fx (%.2f ms)" % (tname, t / ins, ins))
if body2:
    emit()
    table(hdr2, body2)
    emit()
    emit("`ptc inspect --json` runs the ptc binary as a new process, its output to /dev/null; the")
    emit("CPU figure is its user + system time, which waiting for a core does not inflate.")
emit()
emit("Targets:")
for v in verdicts:
    emit("- " + v)
text = "\n".join(lines) + "\n"
sys.stdout.write("\n" + text)
if out_path:
    with open(out_path, "w") as f:
        f.write(text)
EOF

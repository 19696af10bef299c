#!/bin/sh
# run.sh - one-image inference latency: ptc's public model API (ptc_model_classify, and
# ptc_model_forward for the network alone) on every backend that is built, against torch eager
# (torchvision resnet18, eval(), torch.no_grad(), torch.set_num_threads(1)), both on one thread, in
# the same invocation; and the fraction of this core's float32 GEMM ceiling (a oneDNN sgemm) the
# forward reaches. See README.md beside this.
#
#   make bench-infer                              (builds bench_infer, then runs this)
#   top_builddir=BUILD tests/bench/infer/run.sh   (directly; top_builddir defaults to this tree)
#
# Environment: TORCH_PYTHON (default python3) must import torch and torchvision; BENCH_REPEAT
# (default 3) rounds, each timing every contender in turn, BENCH_CALLS (default 1000) timed calls
# per contender and round after 50 untimed ones; BENCH_OUT, a file that receives the markdown
# table as well; BENCH_BACKENDS (default: ref, and dnnl where its module is built). Exit status 0
# when every measurement ran, whatever the numbers: targets are reported, never asserted.

here=$(cd "$(dirname "$0")" && pwd)
: "${top_srcdir:=$(cd "$here/../../.." && pwd)}"
# make runs recipes in the build tree, so a build tree in the current directory wins.
if [ -z "$top_builddir" ] && [ -e "./tests/bench/infer/bench_infer" ]; then top_builddir=$(pwd); fi
: "${top_builddir:=$top_srcdir}"
py=${TORCH_PYTHON:-python3}
rounds=${BENCH_REPEAT:-3}
calls=${BENCH_CALLS:-1000}
bench="$top_builddir/tests/bench/infer/bench_infer"
peer="$here/bench_infer_torch.py"
# The modules of the build tree, not an installed copy.
: "${PTC_PLUGIN_PATH:=$top_builddir/lib/.libs}"
export PTC_PLUGIN_PATH

for v in "$rounds" "$calls"; do
    case $v in
    '' | *[!0-9]* | 0) echo "run.sh: BENCH_REPEAT and BENCH_CALLS must be positive numbers" >&2; exit 2 ;;
    esac
done
if [ ! -x "$bench" ]; then
    echo "run.sh: $bench is not built (make tests/bench/infer/bench_infer, or make bench-infer)" >&2
    exit 1
fi
if ! "$py" -c 'import torch, torchvision' 2>/dev/null; then
    echo "run.sh: $py cannot import torch and torchvision (set TORCH_PYTHON)" >&2
    exit 1
fi
if [ -z "$BENCH_BACKENDS" ]; then
    BENCH_BACKENDS=ref
    [ -e "$PTC_PLUGIN_PATH/backend-dnnl.so" ] && BENCH_BACKENDS="ref dnnl"
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ptc-bench-infer.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM
"$py" "$peer" make "$tmp" || exit 1
w="$tmp/weights.pth"
img="$tmp/image.rgb"
results="$tmp/results"
: >"$results"

echo "load before: $(uptime)"
echo "load_before=$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' ,)" >>"$results"
# Rounds alternate the contenders, so that a change in the machine's load falls on all of them.
r=1
while [ "$r" -le "$rounds" ]; do
    for mode in classify forward; do
        for be in $BENCH_BACKENDS; do
            line=$("$bench" "$mode" "$w" "$img" "$be" "$calls") || exit 1
            echo "  round $r: $line"
            echo "round=$r $line" >>"$results"
        done
        line=$("$py" "$peer" "$mode" "$w" "$img" "$calls") || exit 1
        echo "  round $r: $line"
        echo "round=$r $line" >>"$results"
    done
    # The GEMM ceiling, best over the rounds: needs oneDNN in bench_infer (configure --with-dnnl);
    # absent, the fraction is not printed.
    if line=$("$bench" gemm 2048 3 2>/dev/null); then
        echo "  round $r: $line"
        echo "round=$r $line" >>"$results"
    fi
    r=$((r + 1))
done
echo "load after: $(uptime)"
echo "load_after=$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' ,)" >>"$results"

"$py" - "$results" "$rounds" "$calls" <<'EOF' >"$tmp/table.md" || exit 1
import statistics, sys

rows, gemm, load = [], None, {}
for line in open(sys.argv[1]):
    kv = dict(w.split("=", 1) for w in line.split() if "=" in w)
    if "load_before" in kv or "load_after" in kv:
        load.update(kv)
    elif kv.get("mode") == "gemm":
        if not gemm or float(kv["gflops"]) > float(gemm["gflops"]):
            gemm = kv
    else:
        rows.append(kv)
rounds, calls = sys.argv[2], sys.argv[3]


def side(h, k, s, p):
    """Output size and, summed over the outputs, the kernel taps that read input (not padding)."""
    o = (h + 2 * p - k) // s + 1
    taps = sum(sum(1 for r in range(k) if 0 <= i * s - p + r < h) for i in range(o))
    return o, taps


# torchvision resnet18 at 32x32: (cin, cout, kernel, stride, pad, input side) of every conv, fc.
convs, h = [(3, 64, 7, 2, 3, 32)], 8
for cin, cout in ((64, 64), (64, 128), (128, 256), (256, 512)):
    s = 1 if cin == cout else 2
    convs += [(cin, cout, 3, s, 1, h), (cout, cout, 3, 1, 1, (h - 1) // s + 1)]
    if s == 2:
        convs.append((cin, cout, 1, 2, 0, h))
    h = (h - 1) // s + 1
    convs += [(cout, cout, 3, 1, 1, h)] * 2
nominal = useful = 512 * 10
for cin, cout, k, s, p, hh in convs:
    o, t = side(hh, k, s, p)
    nominal += cin * cout * k * k * o * o
    useful += cin * cout * t * t

by = {}
for r in rows:
    by.setdefault((r["mode"], r["backend"]), []).append(r)


def stat(mode, be):
    rs = by.get((mode, be))
    if not rs:
        return None
    med = [float(r["median_us"]) for r in rs]
    return {"median": statistics.median(med), "lo": min(med), "hi": max(med),
            "p99": statistics.median(float(r["p99_us"]) for r in rs),
            "min": min(float(r["min_us"]) for r in rs), "class": rs[-1]["class"],
            "prob": float(rs[-1].get("prob", 0))}


backends = [b for b in dict.fromkeys(r["backend"] for r in rows) if b != "torch"]
out = []
out.append("| path | contender | median us | p99 us | min us | medians over rounds | "
           "torch/ptc median | torch/ptc p99 | torch/ptc min | top-1 (prob) | target >= 5x |")
out.append("|---|---|---|---|---|---|---|---|---|---|---|")
verdicts = []
for mode in ("classify", "forward"):
    t = stat(mode, "torch")
    for be in backends + ["torch"]:
        s = stat(mode, be)
        if not s:
            continue
        top = s["class"] + (" (%.4f)" % s["prob"] if mode == "classify" else "")
        if be == "torch" or not t:
            ratio = ratio99 = ratiomin = verdict = "-"
        else:
            x = t["median"] / s["median"]
            ratio, ratio99 = "%.2fx" % x, "%.2fx" % (t["p99"] / s["p99"])
            ratiomin = "%.2fx" % (t["min"] / s["min"])
            verdict = "met" if x >= 5 else "MISSED"
            if s["class"] != t["class"]:
                top += " differs from torch's"
            if mode == "classify":
                verdicts.append("%s: ptc %s median %.0f us, torch %.0f us: %.2fx (p99 %.0f / %.0f "
                                "us: %s): %s" % (mode, be, s["median"], t["median"], x, s["p99"],
                                                 t["p99"], ratio99, verdict))
        out.append("| %s | %s | %.0f | %.0f | %.0f | %.0f-%.0f | %s | %s | %s | %s | %s |" % (
            mode, "ptc " + be if be != "torch" else "torch eager", s["median"], s["p99"],
            s["min"], s["lo"], s["hi"], ratio, ratio99, ratiomin, top, verdict))
out.append("")
out.append("%s rounds of %s timed calls per contender (after 50 untimed), one thread each; the "
           "median and p99 are the medians over the rounds of each round's; min over all calls." %
           (rounds, calls))
out.append("Load average (1, 5, 15 min) before: %s; after: %s." % (
    load.get("load_before", "?").replace(",", " "), load.get("load_after", "?").replace(",", " ")))
out.append("")
out.append("Target (issue 17, item 6): ptc's median at most a fifth of torch eager's, on "
           "ptc_model_classify:")
for v in verdicts:
    out.append("- " + v)
if gemm:
    ceil = float(gemm["gflops"])
    out.append("")
    out.append("GEMM ceiling: dnnl_sgemm %sx%s on one thread, best of the rounds: %.1f GFLOP/s." % (
        gemm["n"], gemm["n"], ceil))
    for be in backends:
        s = stat("forward", be)
        if s:
            sec = s["median"] * 1e-6
            out.append("- forward, ptc %s: %.1f M MAC nominal (%.3f GFLOP) in %.0f us = %.1f "
                       "GFLOP/s, %.0f%% of the ceiling; counting only the %.1f M MAC whose taps "
                       "read input (not padding): %.1f GFLOP/s, %.0f%%." % (
                           be, nominal / 1e6, 2 * nominal / 1e9, s["median"],
                           2 * nominal / sec / 1e9, 100 * 2 * nominal / sec / 1e9 / ceil,
                           useful / 1e6, 2 * useful / sec / 1e9,
                           100 * 2 * useful / sec / 1e9 / ceil))
print("\n".join(out))
EOF

echo
cat "$tmp/table.md"
if [ -n "$BENCH_OUT" ]; then
    cp "$tmp/table.md" "$BENCH_OUT" || exit 1
fi
exit 0

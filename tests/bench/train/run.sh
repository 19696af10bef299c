#!/bin/sh
# run.sh - `ptc train` against PyTorch 2.6 running the same recipe (recipe_torch.py beside this):
# training and inference images/s, their fraction of the fp32 GEMM ceiling, peak memory, and the
# test accuracy of the full Fashion-MNIST recipe, ptc and torch alternating in the same run, and
# the accuracy parity of the two over several seeds. See README.md beside this. Never run by make
# check.
#
#   tests/bench/train/run.sh [throughput]   training/inference images/s, GEMM fraction, memory;
#                                           and bf16: ptc --precision bf16 against torch autocast
#   tests/bench/train/run.sh recipe         full Fashion-MNIST runs of BENCH_EPOCHS epochs each
#   tests/bench/train/run.sh all            both
#   tests/bench/train/run.sh parity         BENCH_SEEDS seeds of each on a training subset: mean
#                                           and sd of the test accuracies, difference of the means
#                                           against its standard error (target: within 3 SE)
#   (top_builddir=BUILD to use another build tree; it defaults to this tree)
#
# Environment: TORCH_PYTHON (default python3) must import torch and torchvision; BENCH_REPEAT
# (default 3) repetitions of every throughput measurement, medians reported; BENCH_BF16 (default 1;
# 0 leaves them out) the bf16 runs of each repetition (`ptc train --precision bf16` and the recipe
# under torch.autocast("cpu", dtype=torch.bfloat16)); BENCH_PRECISION (default f32; bf16) the
# precision of both sides' recipe and parity runs; BENCH_STEPS (default
# 60, at least 20) training steps per throughput run, the first 10 not timed; BENCH_THREADS (2);
# BENCH_BATCH (128); BENCH_ARCH (resnet18, ptc's default; or resnet18-cifar); BENCH_EPOCHS (default
# "1 10") the recipe runs; BENCH_RECIPE_REPEAT (default 1) runs of each; BENCH_RECIPE_SAMPLES
# (default 0: all) a prefix of each split for the recipe runs, to try the script; BENCH_DATA (default
# /usr/share/datasets/fashion-mnist); BENCH_IDLE_WAIT (default 0) seconds to wait, before each
# measurement, for the rest of the machine to go idle; BENCH_OPS_ARGS (default "--stat min --min-ms 100") extra
# options of bench_ops; parity: BENCH_SEEDS (default "0 1 2 3 4") the seeds, each run by both,
# BENCH_PARITY_SAMPLES (default 12000) the prefix of each split (the test split, 10,000 images,
# stays whole from 10000 on), BENCH_PARITY_EPOCHS (default 3); BENCH_TMPDIR (default $TMPDIR or /tmp) holds
# the logs, kept when BENCH_KEEP=1; BENCH_OUT, if set, receives the Markdown tables (parity mode
# writes them to a new file under BENCH_TMPDIR when it is not set, and prints its path); PTC names
# a ptc to use instead of the build tree's. Exit status 0 when every measurement ran, whatever the
# numbers: the targets (training >= 1.2x, inference >= 1.3x, bf16 training >= 1.5x torch autocast,
# accuracy within 0.5 percentage points, parity within 3 standard errors) are reported, never
# asserted.
#
# On a machine shared with other work run it under `nice` and expect noise: two OpenMP threads on
# two cores stall whenever anything else runs. Every measurement prints how many CPUs the rest of
# the machine kept busy while it ran ("others 0.00 CPU" on an idle machine).

here=$(cd "$(dirname "$0")" && pwd)
: "${top_srcdir:=$(cd "$here/../../.." && pwd)}"
if [ -z "${top_builddir:-}" ] && [ -e "./tools/ptc" ]; then top_builddir=$(pwd); fi
: "${top_builddir:=$top_srcdir}"
py=${TORCH_PYTHON:-python3}
repeat=${BENCH_REPEAT:-3}
steps=${BENCH_STEPS:-60}
threads=${BENCH_THREADS:-2}
batch=${BENCH_BATCH:-128}
arch=${BENCH_ARCH:-resnet18}
epochs_list=${BENCH_EPOCHS:-1 10}
recipe_repeat=${BENCH_RECIPE_REPEAT:-1}
recipe_samples=${BENCH_RECIPE_SAMPLES:-0}
idle_wait=${BENCH_IDLE_WAIT:-0}
data=${BENCH_DATA:-/usr/share/datasets/fashion-mnist}
seeds=${BENCH_SEEDS:-0 1 2 3 4}
parity_samples=${BENCH_PARITY_SAMPLES:-12000}
parity_epochs=${BENCH_PARITY_EPOCHS:-3}
ops_args=${BENCH_OPS_ARGS:---stat min --min-ms 100}
bf16=${BENCH_BF16:-1}
precision=${BENCH_PRECISION:-f32}
case $precision in
f32 | bf16) ;;
*) echo "run.sh: BENCH_PRECISION must be f32 or bf16" >&2; exit 2 ;;
esac
ptc=${PTC:-$top_builddir/tools/ptc}
bench_ops=$top_builddir/tests/bench/train/bench_ops
recipe="$here/recipe_torch.py"
mode=${1:-throughput}

case $mode in
throughput | recipe | all | parity) ;;
*) echo "usage: run.sh [throughput|recipe|all|parity]" >&2; exit 2 ;;
esac
for v in "$repeat" "$steps" "$threads" "$batch" "$recipe_repeat" "$recipe_samples" "$idle_wait" \
    "$parity_samples" "$parity_epochs" $epochs_list $seeds; do
    case $v in
    '' | *[!0-9]*)
        echo "run.sh: BENCH_REPEAT, BENCH_STEPS, BENCH_THREADS, BENCH_BATCH, BENCH_RECIPE_REPEAT," \
            "BENCH_RECIPE_SAMPLES, BENCH_IDLE_WAIT, BENCH_EPOCHS, BENCH_SEEDS," \
            "BENCH_PARITY_SAMPLES and BENCH_PARITY_EPOCHS must be numbers" >&2
        exit 2
        ;;
    esac
done
if [ "$repeat" -lt 1 ] || [ "$steps" -lt 20 ] || [ "$threads" -lt 1 ] || [ "$batch" -lt 1 ]; then
    echo "run.sh: BENCH_REPEAT, BENCH_THREADS and BENCH_BATCH must be at least 1, BENCH_STEPS 20" >&2
    exit 2
fi
if [ "$mode" = parity ]; then
    if [ "$parity_samples" -lt 1 ] || [ "$parity_epochs" -lt 1 ] || [ -z "$seeds" ]; then
        echo "run.sh: BENCH_PARITY_SAMPLES and BENCH_PARITY_EPOCHS must be at least 1," \
            "BENCH_SEEDS not empty" >&2
        exit 2
    fi
    # As decimal numbers (no leading zeros for either program to read as octal). A seed given twice
    # would count one run twice and shrink the standard deviation.
    seeds=$(echo "$seeds" | awk '{ for (i = 1; i <= NF; i++) printf "%s%d", (i > 1 ? " " : ""), $i }')
    if echo "$seeds" | awk '{ for (i = 1; i <= NF; i++) if (seen[$i + 0]++) d = 1 } END { exit !d }'; then
        echo "run.sh: BENCH_SEEDS has a seed twice: $seeds" >&2
        exit 2
    fi
fi
case $arch in
resnet18) stem=tv ;;
resnet18-cifar) stem=cifar ;;
*) echo "run.sh: BENCH_ARCH must be resnet18 or resnet18-cifar" >&2; exit 2 ;;
esac
if ! "$py" -c 'import torch, torchvision' 2>/dev/null; then
    echo "run.sh: $py cannot import torch and torchvision (set TORCH_PYTHON)" >&2
    exit 1
fi
if ! "$ptc" train --help >/dev/null 2>&1; then
    echo "run.sh: $ptc cannot run \`ptc train\` (build the tree, or set PTC)" >&2
    exit 1
fi
if { [ "$mode" = throughput ] || [ "$mode" = all ]; } && [ ! -x "$bench_ops" ]; then
    echo "run.sh: $bench_ops is not built (it needs oneDNN): no GEMM ceiling" >&2
    exit 1
fi

base=${BENCH_TMPDIR:-${TMPDIR:-/tmp}}
tmp=$(mktemp -d "$base/ptc-bench-train.XXXXXX") || exit 1
out=${BENCH_OUT:-}
if [ "$mode" = parity ] && [ -z "$out" ]; then
    # Parity takes long enough that its figures should outlive the terminal.
    out=$(mktemp "$base/ptc-bench-parity.XXXXXX") || exit 1
fi
if [ "${BENCH_KEEP:-0}" = 1 ]; then
    trap 'echo "logs kept in $tmp"' EXIT
else
    trap 'rm -rf "$tmp"' EXIT
fi
trap 'exit 130' INT TERM

# The CPU time all processes have used so far, in clock ticks (user, nice, system, irq, softirq,
# steal of /proc/stat's first line), and the ticks per second.
hz=$(getconf CLK_TCK 2>/dev/null || echo 100)
cpu_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat 2>/dev/null || echo 0; }

# wait_idle: with BENCH_IDLE_WAIT=S, waits (at most S seconds) until the other processes of the
# machine use less than 0.25 of a CPU over 3 seconds.
wait_idle() {
    [ "$idle_wait" -gt 0 ] || return 0
    waited=0
    while [ "$waited" -lt "$idle_wait" ]; do
        t1=$(cpu_ticks)
        sleep 3
        t2=$(cpu_ticks)
        [ $((t2 - t1)) -lt $((hz * 3 / 4)) ] && return 0
        waited=$((waited + 3))
    done
    echo "  (the machine stayed busy for BENCH_IDLE_WAIT=$idle_wait s; measuring anyway)"
}

# measure NAME COMMAND...: runs COMMAND with its stdout in $tmp/NAME.out and stderr in
# $tmp/NAME.err; writes its peak resident set size (KiB) to $tmp/NAME.rss and to $tmp/NAME.other
# how many CPUs the rest of the machine kept busy meanwhile (all CPU time used during the run less
# the command's own, over its wall time: 0.00 on an otherwise idle machine). On failure prints the
# end of its stderr and returns its status.
if [ -x /usr/bin/time ] && /usr/bin/time -f %M -o /dev/null true 2>/dev/null; then
    gnu_time=1
else
    gnu_time=0
fi
measure() {
    name=$1
    shift
    wait_idle
    t1=$(cpu_ticks)
    if [ "$gnu_time" = 1 ]; then
        /usr/bin/time -f '%M %e %U %S' -o "$tmp/$name.time" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
    else
        "$py" -c '
import resource, subprocess, sys, time
t0 = time.monotonic()
rc = subprocess.call(sys.argv[2:])
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
with open(sys.argv[1], "w") as f:
    f.write("%d %.2f %.2f %.2f\n" % (ru.ru_maxrss, time.monotonic() - t0, ru.ru_utime, ru.ru_stime))
sys.exit(rc)' "$tmp/$name.time" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
    fi
    status=$?
    t2=$(cpu_ticks)
    # GNU time puts "Command exited with non-zero status N" first when it fails.
    tail -n 1 "$tmp/$name.time" | awk -v d=$((t2 - t1)) -v hz="$hz" -v rss="$tmp/$name.rss" \
        -v other="$tmp/$name.other" '{
            print $1 > rss
            o = $2 > 0 ? (d / hz - $3 - $4) / $2 : 0
            printf "%.2f\n", (o < 0 ? 0 : o) > other
        }'
    if [ "$status" -ne 0 ]; then
        echo "run.sh: $name failed (exit $status): $*" >&2
        tail -n 20 "$tmp/$name.err" >&2
        return "$status"
    fi
    return 0
}

ptc_train() { # NAME OPTIONS...: ptc train with the common options, metrics in $tmp/NAME.metrics
    name=$1
    shift
    measure "$name" "$ptc" train --dataset fashion-mnist --data "$data" --arch "$arch" \
        --threads "$threads" --batch-size "$batch" --no-progress --metrics "$tmp/$name.metrics" \
        --save "$tmp/$name.pth" --precision "$precision" "$@"
}
torch_recipe() { # NAME OPTIONS...: recipe_torch.py with the common options, JSON in $tmp/NAME.out
    name=$1
    shift
    measure "$name" "$py" "$recipe" --data "$data" --arch "$arch" --threads "$threads" \
        --batch-size "$batch" --precision "$precision" --json "$@"
}

echo "ptc: $ptc ($("$ptc" --version 2>&1 | head -n 1)); PyTorch: $("$py" -c \
    'import torch, torchvision; print(torch.__version__, "torchvision", torchvision.__version__)')"
echo "arch $arch, batch $batch, $threads threads, data $data; $(nproc 2>/dev/null) CPUs," \
    "load average $(cut -d ' ' -f 1-3 /proc/loadavg 2>/dev/null)"
"$py" "$recipe" --mode flops --arch "$arch" --json >"$tmp/flops.json" || exit 1
failed=0

if [ "$mode" = throughput ] || [ "$mode" = all ]; then
    # The throughput runs: one epoch of exactly BENCH_STEPS full batches (the prefix of
    # steps x batch images of each split), then the evaluation of as many test images.
    n=$((steps * batch))
    echo
    echo "== throughput: $repeat x (bench_ops, ptc train, torch recipe, torch fixed data);" \
        "$steps steps of $batch on $n images, evaluation of $n test images"
    r=1
    while [ "$r" -le "$repeat" ]; do
        # shellcheck disable=SC2086
        measure "tp.$r.ops" "$bench_ops" --threads "$threads" --stem "$stem" $ops_args || failed=1
        printf '  [%d/%d] bench_ops: %s (others %s CPU)\n' "$r" "$repeat" \
            "$(tail -n 1 "$tmp/tp.$r.ops.out" | cut -d ' ' -f 1)" "$(cat "$tmp/tp.$r.ops.other")"
        ptc_train "tp.$r.ptc" --epochs 1 --max-steps "$steps" --max-samples "$n" --eval-every 0 ||
            failed=1
        printf '  [%d/%d] ptc train: %s (others %s CPU)\n' "$r" "$repeat" \
            "$(grep -h '"summary"' "$tmp/tp.$r.ptc.metrics" 2>/dev/null)" "$(cat "$tmp/tp.$r.ptc.other")"
        torch_recipe "tp.$r.torch" --epochs 1 --max-steps "$steps" --max-samples "$n" \
            --eval-every 0 || failed=1
        printf '  [%d/%d] torch recipe: %s (others %s CPU)\n' "$r" "$repeat" \
            "$(cut -c 1-160 "$tmp/tp.$r.torch.out")" "$(cat "$tmp/tp.$r.torch.other")"
        torch_recipe "tp.$r.fixed" --mode throughput --steps $((steps - 10)) --warmup 10 \
            --infer-batches "$steps" || failed=1
        printf '  [%d/%d] torch fixed data: %s (others %s CPU)\n' "$r" "$repeat" \
            "$(cut -c 1-160 "$tmp/tp.$r.fixed.out")" "$(cat "$tmp/tp.$r.fixed.other")"
        if [ "$bf16" = 1 ]; then # the same runs in bf16 (the later options win)
            ptc_train "tp.$r.ptcbf" --epochs 1 --max-steps "$steps" --max-samples "$n" \
                --eval-every 0 --precision bf16 || failed=1
            printf '  [%d/%d] ptc train bf16: %s (others %s CPU)\n' "$r" "$repeat" \
                "$(grep -h '"summary"' "$tmp/tp.$r.ptcbf.metrics" 2>/dev/null)" \
                "$(cat "$tmp/tp.$r.ptcbf.other")"
            torch_recipe "tp.$r.torchbf" --epochs 1 --max-steps "$steps" --max-samples "$n" \
                --eval-every 0 --precision bf16 || failed=1
            printf '  [%d/%d] torch recipe autocast bf16: %s (others %s CPU)\n' "$r" "$repeat" \
                "$(cut -c 1-160 "$tmp/tp.$r.torchbf.out")" "$(cat "$tmp/tp.$r.torchbf.other")"
        fi
        r=$((r + 1))
    done
fi

if [ "$mode" = recipe ] || [ "$mode" = all ]; then
    echo
    echo "== recipe: full Fashion-MNIST, epochs: $epochs_list; seed 0, evaluation every 2 epochs" \
        "and after the last"
    limit=""
    if [ "$recipe_samples" -gt 0 ]; then
        limit="--max-samples $recipe_samples"
        echo "   (only the first $recipe_samples images of each split: BENCH_RECIPE_SAMPLES)"
    fi
    for e in $epochs_list; do
        r=1
        while [ "$r" -le "$recipe_repeat" ]; do
            # shellcheck disable=SC2086
            ptc_train "rc.$e.$r.ptc" --epochs "$e" $limit || failed=1
            printf '  [%s epochs, %d] ptc train: %s (others %s CPU)\n' "$e" "$r" \
                "$(grep -h '"summary"' "$tmp/rc.$e.$r.ptc.metrics" 2>/dev/null)" \
                "$(cat "$tmp/rc.$e.$r.ptc.other")"
            # shellcheck disable=SC2086
            torch_recipe "rc.$e.$r.torch" --epochs "$e" $limit || failed=1
            printf '  [%s epochs, %d] torch recipe: %s (others %s CPU)\n' "$e" "$r" \
                "$(cut -c 1-200 "$tmp/rc.$e.$r.torch.out")" "$(cat "$tmp/rc.$e.$r.torch.other")"
            r=$((r + 1))
        done
    done
fi

if [ "$mode" = parity ]; then
    # final_accuracy KIND PATH: "test accuracy A% (T test images, S steps)" of a finished run, from
    # ptc's metrics (its summary and last evaluation) or the torch recipe's JSON line.
    final_accuracy() {
        "$py" - "$1" "$2" <<'PYEOF'
import json, sys
kind, path = sys.argv[1:3]
try:
    rows = [json.loads(l) for l in open(path) if l.strip().startswith("{")]
    if kind == "ptc":
        s = [r for r in rows if r.get("event") == "summary"][-1]
        n = [r for r in rows if r.get("event") == "eval"][-1]["images"]
    else:
        s = rows[-1]
        n = s["test_samples"]
    print("test accuracy %.2f%% (%d test images, %d steps)" % (100 * s["test_accuracy"], n, s["steps"]))
except (OSError, ValueError, IndexError, KeyError):
    print("no result")
PYEOF
    }
    wall() { tail -n 1 "$tmp/$1.time" 2>/dev/null | cut -d ' ' -f 2; }
    echo
    echo "== parity ($precision): seeds $seeds, each run by ptc then torch; the first $parity_samples images of" \
        "each split (all 10,000 test images from 10000 on), $parity_epochs epoch(s)," \
        "evaluation every 2 epochs and after the last"
    for sd in $seeds; do
        ptc_train "par.$sd.ptc" --epochs "$parity_epochs" --max-samples "$parity_samples" \
            --seed "$sd" || failed=1
        printf '  [seed %s] ptc train: %s, %s s (others %s CPU)\n' "$sd" \
            "$(final_accuracy ptc "$tmp/par.$sd.ptc.metrics")" "$(wall "par.$sd.ptc")" \
            "$(cat "$tmp/par.$sd.ptc.other")"
        torch_recipe "par.$sd.torch" --epochs "$parity_epochs" --max-samples "$parity_samples" \
            --seed "$sd" || failed=1
        printf '  [seed %s] torch recipe: %s, %s s (others %s CPU)\n' "$sd" \
            "$(final_accuracy torch "$tmp/par.$sd.torch.out")" "$(wall "par.$sd.torch")" \
            "$(cat "$tmp/par.$sd.torch.other")"
    done
fi

# ---- the tables ----------------------------------------------------------------------------------
"$py" - "$tmp" "$mode" "$repeat" "$steps" "$batch" "$recipe_repeat" "$epochs_list" \
    "$recipe_samples" "$out" "$seeds" "$parity_samples" "$parity_epochs" "$precision" <<'EOF' || failed=1
import json, math, os, statistics, sys

tmp, mode, repeat, steps, batch, recipe_repeat, epochs_list, samples, out = sys.argv[1:10]
seeds, parity_samples, parity_epochs = sys.argv[10].split(), sys.argv[11], sys.argv[12]
precision = sys.argv[13]
repeat, steps, batch, recipe_repeat = int(repeat), int(steps), int(batch), int(recipe_repeat)
WARMUP = 10
flops = json.load(open(os.path.join(tmp, "flops.json")))
lines = []


def emit(s=""):
    print(s)
    lines.append(s)


def jsonl(path):
    try:
        return [json.loads(l) for l in open(path) if l.strip()]
    except (OSError, ValueError):
        return []


def last_json(path):
    rows = [r for r in jsonl(path)]
    return rows[-1] if rows else None


def rss_mib(name):
    try:
        return int(open(os.path.join(tmp, name + ".rss")).read().split()[-1]) / 1024.0
    except (OSError, ValueError, IndexError):
        return None


def other(name):
    try:
        return float(open(os.path.join(tmp, name + ".other")).read())
    except (OSError, ValueError):
        return None


def kv(path):
    try:
        last = open(path).read().strip().splitlines()[-1]
        return {k: float(v) for k, v in (t.split("=") for t in last.split() if "=" in t)}
    except (OSError, ValueError, IndexError):
        return {}


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def f(x, fmt="%.1f"):
    return "n/a" if x is None else fmt % x


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def verdict(r, target):
    return "n/a" if r is None else ("met" if r >= target else "missed")


def ptc_train_ips(events):
    """ptc's summary train_images_per_sec: the images after the warm-up steps over the training
    time (evaluations and saves left out)."""
    summ = [e for e in events if e.get("event") == "summary"]
    if not summ or summ[0]["train_images_per_sec"] <= 0:
        return None
    return summ[0]["train_images_per_sec"]


if mode in ("throughput", "all"):
    rows = []
    for r in range(1, repeat + 1):
        ev = jsonl(os.path.join(tmp, f"tp.{r}.ptc.metrics"))
        ptc_ips = ptc_train_ips(ev)
        evals = [e for e in ev if e.get("event") == "eval"]
        tj = last_json(os.path.join(tmp, f"tp.{r}.torch.out")) or {}
        fj = last_json(os.path.join(tmp, f"tp.{r}.fixed.out")) or {}
        ops = kv(os.path.join(tmp, f"tp.{r}.ops.out"))
        rows.append(dict(
            ceil=ops.get("gemm_gflops"), ops_train=ops.get("train_img_s"),
            ops_infer=ops.get("infer_img_s"),
            ptc_train=ptc_ips,
            ptc_infer=evals[-1]["images_per_sec"] if evals else None,
            torch_train=tj.get("train_images_per_sec"), torch_infer=tj.get("eval_images_per_sec"),
            fixed_train=fj.get("train_images_per_sec"), fixed_infer=fj.get("eval_images_per_sec"),
            ptcbf_train=ptc_train_ips(jsonl(os.path.join(tmp, f"tp.{r}.ptcbf.metrics"))),
            torchbf_train=(last_json(os.path.join(tmp, f"tp.{r}.torchbf.out")) or {}).get(
                "train_images_per_sec"),
            ptcbf_other=other(f"tp.{r}.ptcbf"), torchbf_other=other(f"tp.{r}.torchbf"),
            ptc_rss=rss_mib(f"tp.{r}.ptc"), torch_rss=rss_mib(f"tp.{r}.torch"),
            fixed_rss=rss_mib(f"tp.{r}.fixed"), ptc_other=other(f"tp.{r}.ptc"),
            torch_other=other(f"tp.{r}.torch"), fixed_other=other(f"tp.{r}.fixed"),
            ops_other=other(f"tp.{r}.ops")))
    QUIET = 0.1  # CPUs others may use before a measurement counts as disturbed

    def source(k):  # the measurement a figure comes from
        return k.split("_")[0] if k.split("_")[0] in ("ptc", "torch", "fixed", "ptcbf",
                                                      "torchbf") else "ops"

    def quiet(row, k):
        o = row[source(k) + "_other"]
        return o is not None and o < QUIET

    M_all = {k: med([row[k] for row in rows]) for k in rows[0]}
    M_quiet = {k: med([row[k] for row in rows if quiet(row, k)]) for k in rows[0]}
    # The targets use the undisturbed runs when every figure has at least one, else all runs.
    use_quiet = all(M_quiet[k] is not None for k in ("ptc_train", "torch_train", "ptc_infer",
                                                      "torch_infer", "ceil"))
    M = M_quiet if use_quiet else M_all
    tf, ff = flops["train_flops_per_image"], flops["forward_flops_per_image"]
    tfe = flops["train_flops_nopad_per_image"]
    ffe = flops["forward_flops_nopad_per_image"]

    def frac(ips, per_image):
        return None if ips is None or not M["ceil"] else 100.0 * ips * per_image / (M["ceil"] * 1e9)

    emit()
    emit(f"### Throughput: {flops['arch']}, batch {batch}, {steps} steps ({WARMUP} untimed), "
         f"medians of {repeat}")
    emit()
    emit("| run | " + " | ".join(f"#{i + 1}" for i in range(repeat)) +
         f" | median | median of the undisturbed (others < {QUIET}) |")
    emit("|---|" + "---:|" * (repeat + 2))
    names = [("ptc train, training images/s (its summary line)", "ptc_train"),
             ("torch recipe, training images/s", "torch_train"),
             ("torch fixed data, training images/s", "fixed_train"),
             ("ptc train --precision bf16, training images/s", "ptcbf_train"),
             ("torch recipe under autocast bf16, training images/s", "torchbf_train"),
             ("ptc eval of the test prefix, images/s", "ptc_infer"),
             ("torch recipe eval, images/s", "torch_infer"),
             ("torch fixed data, eval forward images/s", "fixed_infer"),
             ("bench_ops backend bound, training images/s", "ops_train"),
             ("bench_ops backend bound, inference images/s", "ops_infer"),
             ("fp32 GEMM ceiling (dnnl_sgemm 1024^3), GFLOP/s", "ceil"),
             ("peak RSS MiB, ptc train", "ptc_rss"),
             ("peak RSS MiB, torch recipe", "torch_rss"),
             ("peak RSS MiB, torch fixed data", "fixed_rss"),
             ("CPUs other processes kept busy: ptc train", "ptc_other"),
             ("CPUs other processes kept busy: torch recipe", "torch_other"),
             ("CPUs other processes kept busy: torch fixed data", "fixed_other"),
             ("CPUs other processes kept busy: ptc train bf16", "ptcbf_other"),
             ("CPUs other processes kept busy: torch recipe autocast bf16", "torchbf_other")]
    if not any(row["ptcbf_train"] or row["torchbf_train"] for row in rows):  # BENCH_BF16=0
        names = [(label, k) for label, k in names if "bf_" not in k]
    for label, k in names:
        fmt = "%.2f" if k.endswith("other") else "%.1f"
        q = f(M_quiet[k], fmt) if not k.endswith("other") else ""
        emit(f"| {label} | " + " | ".join(f(row[k], fmt) + ("" if k.endswith("other") or
                                                             quiet(row, k) else " *")
                                          for row in rows) + f" | {f(M_all[k], fmt)} | {q} |")
    emit()
    emit(f"\\* disturbed: other processes kept at least {QUIET} CPU busy during that measurement.")
    emit()
    emit(f"FLOPs per image ({flops['arch']}, 3x32x32, convolutions + linear, 2 per multiply-add): "
         f"forward {ff / 1e6:.2f} M, training {tf / 1e6:.2f} M (3x forward), counting every "
         f"kernel tap; without the taps that fall on zero padding {ffe / 1e6:.2f} M and "
         f"{tfe / 1e6:.2f} M.")
    emit()
    emit("Targets from the " + ("medians of the undisturbed runs." if use_quiet else
                                "medians of all runs (no undisturbed run for some figure)."))
    emit()
    r_train = ratio(M["ptc_train"], M["torch_train"])
    r_infer = ratio(M["ptc_infer"], M["torch_infer"])
    emit("| target | ptc | PyTorch 2.6 | ratio | target | verdict |")
    emit("|---|---:|---:|---:|---:|---|")
    emit(f"| training images/s (whole step with data, same recipe) | {f(M['ptc_train'])} | "
         f"{f(M['torch_train'])} | {f(r_train, '%.2fx')} | >= 1.2x | {verdict(r_train, 1.2)} |")
    r_fix = ratio(M["ptc_train"], M["fixed_train"])
    emit(f"| training images/s vs torch on fixed random data (model only) | {f(M['ptc_train'])} | "
         f"{f(M['fixed_train'])} | {f(r_fix, '%.2fx')} | (>= 1.2x) | {verdict(r_fix, 1.2)} |")
    emit(f"| inference images/s (test split: batches made + forward + loss) | {f(M['ptc_infer'])} | "
         f"{f(M['torch_infer'])} | {f(r_infer, '%.2fx')} | >= 1.3x | {verdict(r_infer, 1.3)} |")
    if any(k == "ptcbf_train" for _, k in names):
        # bf16: its own medians (undisturbed where both sides have such a run)
        Mb = M_quiet if M_quiet["ptcbf_train"] and M_quiet["torchbf_train"] else M_all
        r_bf = ratio(Mb["ptcbf_train"], Mb["torchbf_train"])
        emit(f"| bf16 training images/s: ptc --precision bf16 vs torch autocast bf16 (same recipe) "
             f"| {f(Mb['ptcbf_train'])} | {f(Mb['torchbf_train'])} | {f(r_bf, '%.2fx')} | "
             f">= 1.5x | {verdict(r_bf, 1.5)} |")
    r_ifix = ratio(M["ptc_infer"], M["fixed_infer"])
    emit(f"| inference images/s vs torch eval forward on fixed data | {f(M['ptc_infer'])} | "
         f"{f(M['fixed_infer'])} | {f(r_ifix, '%.2fx')} | (>= 1.3x) | {verdict(r_ifix, 1.3)} |")
    emit(f"| training, % of the fp32 GEMM ceiling ({f(M['ceil'])} GFLOP/s), all taps / "
         f"padding taps left out | {f(frac(M['ptc_train'], tf), '%.1f%%')} / "
         f"{f(frac(M['ptc_train'], tfe), '%.1f%%')} | {f(frac(M['torch_train'], tf), '%.1f%%')} / "
         f"{f(frac(M['torch_train'], tfe), '%.1f%%')} | | (report) | |")
    emit(f"| inference, % of the fp32 GEMM ceiling, all taps / padding taps left out | "
         f"{f(frac(M['ptc_infer'], ff), '%.1f%%')} / {f(frac(M['ptc_infer'], ffe), '%.1f%%')} | "
         f"{f(frac(M['torch_infer'], ff), '%.1f%%')} / {f(frac(M['torch_infer'], ffe), '%.1f%%')} "
         f"| | (report) | |")
    emit(f"| peak RSS, MiB (training run of {steps * batch} images) | {f(M['ptc_rss'], '%.0f')} | "
         f"{f(M['torch_rss'], '%.0f')} | {f(ratio(M['ptc_rss'], M['torch_rss']), '%.2fx')} | "
         f"(report) | |")
    if not use_quiet:
        emit()
        emit("Other processes were busy during every run of some figure: the figures above are "
             "disturbed and their ratios are not the machine's.")

if mode in ("recipe", "all"):
    emit()
    split = (f"the first {samples} images of each split" if int(samples) > 0
             else "full Fashion-MNIST (60,000 train, 10,000 test)")
    emit(f"### Recipe: {split}, seed 0, {flops['arch']}, batch {batch}")
    emit()
    emit("| epochs | run | ptc test acc | torch test acc | ptc - torch (pp) | target | verdict | "
         "ptc s/epoch | torch s/epoch | ptc test loss | torch test loss | ptc peak MiB | "
         "torch peak MiB | others' CPUs ptc / torch |")
    emit("|---:|---:|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---|")
    details = []
    for e in epochs_list.split():
        for r in range(1, recipe_repeat + 1):
            ev = jsonl(os.path.join(tmp, f"rc.{e}.{r}.ptc.metrics"))
            summ = next((x for x in ev if x.get("event") == "summary"), None)
            p_ep = [x["seconds"] for x in ev if x.get("event") == "epoch"]
            p_ev = [(x["epoch"], x["test_accuracy"]) for x in ev if x.get("event") == "eval"]
            tj = last_json(os.path.join(tmp, f"rc.{e}.{r}.torch.out")) or {}
            t_ep = tj.get("epoch_seconds", [])
            t_ev = [(x["epoch"], x["test_accuracy"]) for x in tj.get("evals", [])]
            pa = summ["test_accuracy"] * 100 if summ else None
            ta = tj["test_accuracy"] * 100 if "test_accuracy" in tj else None
            d = None if pa is None or ta is None else pa - ta
            v = "n/a" if d is None else ("met" if abs(d) <= 0.5 else "missed")
            emit(f"| {e} | {r} | {f(pa, '%.2f')} | {f(ta, '%.2f')} | {f(d, '%+.2f')} | "
                 f"within 0.5 | {v} | {f(med(p_ep))} | {f(med(t_ep))} | "
                 f"{f(summ['test_loss'] if summ else None, '%.4f')} | "
                 f"{f(tj.get('test_loss'), '%.4f')} | {f(rss_mib(f'rc.{e}.{r}.ptc'), '%.0f')} | "
                 f"{f(rss_mib(f'rc.{e}.{r}.torch'), '%.0f')} | "
                 f"{f(other(f'rc.{e}.{r}.ptc'), '%.2f')} / {f(other(f'rc.{e}.{r}.torch'), '%.2f')} |")
            details.append(f"- {e} epoch(s), run {r}: epoch seconds ptc "
                           f"{[round(s, 1) for s in p_ep]}, torch {[round(s, 1) for s in t_ep]}; "
                           f"test accuracy by epoch ptc {[(k, round(100 * a, 2)) for k, a in p_ev]}, "
                           f"torch {[(k, round(100 * a, 2)) for k, a in t_ev]}")
    emit()
    for dl in details:
        emit(dl)
    emit()
    emit("Epoch times are disturbed when the last column is above about 0.1; accuracies are not.")

if mode == "parity":
    def wall_s(name):
        """The wall seconds of a measured command (GNU time's or the fallback's last line)."""
        try:
            return float(open(os.path.join(tmp, name + ".time")).read().strip().splitlines()[-1].split()[1])
        except (OSError, ValueError, IndexError):
            return None

    per_seed, acc, problems = [], {"ptc": [], "torch": []}, []
    test_n, train_n, nsteps = set(), set(), set()
    for sd in seeds:
        ev = jsonl(os.path.join(tmp, f"par.{sd}.ptc.metrics"))
        summ = next((x for x in ev if x.get("event") == "summary"), None)
        p_ev = [x for x in ev if x.get("event") == "eval"]
        tj = last_json(os.path.join(tmp, f"par.{sd}.torch.out")) or {}
        pa = 100 * summ["test_accuracy"] if summ else None
        ta = 100 * tj["test_accuracy"] if "test_accuracy" in tj else None
        if pa is not None:
            acc["ptc"].append(pa)
            test_n.add(p_ev[-1]["images"])
            nsteps.add(summ["steps"])
        else:
            problems.append(f"ptc seed {sd}")
        if ta is not None:
            acc["torch"].append(ta)
            test_n.add(tj["test_samples"])
            train_n.add(tj["train_samples"])
            nsteps.add(tj["steps"])
        else:
            problems.append(f"torch seed {sd}")
        per_seed.append((sd, pa, ta, wall_s(f"par.{sd}.ptc"), wall_s(f"par.{sd}.torch"),
                         other(f"par.{sd}.ptc"), other(f"par.{sd}.torch"),
                         [round(100 * x["test_accuracy"], 2) for x in p_ev],
                         [round(100 * x["test_accuracy"], 2) for x in tj.get("evals", [])]))
    ntrain = "/".join(str(n) for n in sorted(train_n)) or parity_samples
    ntest = "/".join(str(n) for n in sorted(test_n)) or "n/a"
    emit()
    emit(f"### Accuracy parity ({'bf16: ptc --precision bf16, torch autocast bf16' if precision == 'bf16' else 'float32'}): "
         f"{flops['arch']}, Fashion-MNIST, the first {ntrain} training "
         f"images, {ntest} test images, {parity_epochs} epoch(s), batch {batch}, seeds "
         f"{' '.join(seeds)}")
    emit()
    emit("| seed | ptc test acc | torch test acc | ptc - torch (pp) | ptc s | torch s | "
         "ptc evals | torch evals | others' CPUs ptc / torch |")
    emit("|---:|---:|---:|---:|---:|---:|---|---|---|")
    for sd, pa, ta, pw, tw, po, to, pe, te in per_seed:
        d = None if pa is None or ta is None else pa - ta
        emit(f"| {sd} | {f(pa, '%.2f')} | {f(ta, '%.2f')} | {f(d, '%+.2f')} | {f(pw)} | {f(tw)} | "
             f"{pe} | {te} | {f(po, '%.2f')} / {f(to, '%.2f')} |")
    emit()
    emit("| side | runs | mean test accuracy | sd | min | max |")
    emit("|---|---:|---:|---:|---:|---:|")
    mean, sdev = {}, {}
    for side in ("ptc", "torch"):
        xs = acc[side]
        mean[side] = statistics.mean(xs) if xs else None
        sdev[side] = statistics.stdev(xs) if len(xs) > 1 else None
        emit(f"| {side} | {len(xs)} | {f(mean[side], '%.2f%%')} | {f(sdev[side], '%.2f')} | "
             f"{f(min(xs) if xs else None, '%.2f%%')} | {f(max(xs) if xs else None, '%.2f%%')} |")
    emit()
    d = se = z = None
    if mean["ptc"] is not None and mean["torch"] is not None:
        d = mean["ptc"] - mean["torch"]
    if d is not None and sdev["ptc"] is not None and sdev["torch"] is not None:
        se = math.sqrt(sdev["ptc"] ** 2 / len(acc["ptc"]) + sdev["torch"] ** 2 / len(acc["torch"]))
        z = abs(d) / se if se > 0 else (0.0 if d == 0 else math.inf)
    v = "n/a" if z is None else ("met" if z <= 3 else "missed")
    emit(f"Difference of the means, ptc - torch: {f(d, '%+.2f')} percentage points; standard error "
         f"{f(se, '%.2f')} (sqrt(sd_ptc^2/{len(acc['ptc'])} + sd_torch^2/{len(acc['torch'])})); "
         f"|difference| = {f(z, '%.2f')} SE; target: within 3 SE: {v}")
    emit()
    emit("sd: the sample standard deviation (n - 1) of the final test accuracies, in percentage "
         "points. The two sides share the recipe and the seed policy, not the random streams: seed "
         "S of ptc and seed S of torch are two independent draws, so the per-seed difference is "
         "not a paired one.")
    if len(test_n) > 1 or len(nsteps) > 1:
        emit()
        emit(f"The runs differ in test images ({ntest}) or steps "
             f"({'/'.join(str(n) for n in sorted(nsteps))}): they are not the same recipe.")
    if problems:
        emit()
        emit("No result from: " + ", ".join(problems) + ".")
    emit()
    emit(f"parity ptc_runs={len(acc['ptc'])} torch_runs={len(acc['torch'])} "
         f"ptc_mean={f(mean['ptc'], '%.4f')} ptc_sd={f(sdev['ptc'], '%.4f')} "
         f"torch_mean={f(mean['torch'], '%.4f')} torch_sd={f(sdev['torch'], '%.4f')} "
         f"diff_pp={f(d, '%.4f')} se_pp={f(se, '%.4f')} z={f(z, '%.3f')} verdict={v}")

if out:
    with open(out, "a") as fo:
        fo.write("\n".join(lines) + "\n")
EOF
if [ -n "$out" ]; then
    echo
    echo "tables written to $out"
fi
exit "$failed"

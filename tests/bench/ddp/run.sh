#!/bin/sh
# run.sh - data-parallel training speed: ptc with 2 ranks x 1 thread (mpirun) against ptc in one
# process x 2 threads at the same global batch, and against PyTorch 2.6 DistributedDataParallel
# (gloo, 2 processes x 1 thread), all measured in the same run, alternating. See README.md beside
# this. Never run by make check.
#
#   top_builddir=BUILD tests/bench/ddp/run.sh   (top_builddir defaults to this tree)
#
# Environment: TORCH_PYTHON (default python3) runs the PyTorch peer and reads the results;
# BENCH_REPEAT (default 3) rounds of the three runs, medians reported; BENCH_STEPS (default 30)
# steps per run, of which the first 10 (ptc's warm-up) are not timed, in torch neither;
# BENCH_BATCH (default 64) images per rank (the single process gets 2 x that); BENCH_BACKEND
# (default dnnl when ptc has it, else ref); BENCH_MPIRUN_ARGS (default "--bind-to none") extra
# mpirun options for ptc's 2 ranks; BENCH_PTC_ARGS (default --no-augment, since torch's
# pre-built batches are not augmented either; set it empty to keep ptc's crop and flip) extra
# `ptc train` options for both ptc runs; BENCH_DATA (default /usr/share/datasets/fashion-mnist; synthetic CIFAR-10
# files are written when it has no Fashion-MNIST); BENCH_OUT, if set, receives the table;
# BENCH_TMPDIR (default $TMPDIR or /tmp) holds metrics and logs; PTC names a ptc binary to use
# instead of the build tree's; MPIRUN (default mpirun from PATH). Exit status 0 when every
# measurement ran, whatever the numbers: the targets (ptc 2 ranks >= 0.95 x ptc 1 process and
# >= 1.3 x PyTorch DDP) are reported, never asserted.
set -u

here=$(cd "$(dirname "$0")" && pwd)
: "${top_srcdir:=$(cd "$here/../../.." && pwd)}"
if [ -z "${top_builddir:-}" ] && [ -e "./tools/ptc" ]; then top_builddir=$(pwd); fi
: "${top_builddir:=$top_srcdir}"
py=${TORCH_PYTHON:-python3}
repeat=${BENCH_REPEAT:-3}
steps=${BENCH_STEPS:-30}
batch=${BENCH_BATCH:-64}
mpi_args=${BENCH_MPIRUN_ARGS---bind-to none}
data=${BENCH_DATA:-/usr/share/datasets/fashion-mnist}
ptc=${PTC:-$top_builddir/tools/ptc}
mpirun=${MPIRUN:-$(command -v mpirun 2>/dev/null)}
warmup=10 # ptc's WARMUP_STEPS (lib/train/train.c); torch skips as many

for v in "$repeat" "$steps" "$batch"; do
    case $v in
    '' | *[!0-9]*) echo "run.sh: BENCH_REPEAT, BENCH_STEPS and BENCH_BATCH must be numbers" >&2; exit 2 ;;
    esac
done
if [ "$repeat" -lt 1 ] || [ "$batch" -lt 1 ] || [ "$steps" -le $((warmup + 1)) ]; then
    echo "run.sh: BENCH_REPEAT and BENCH_BATCH must be at least 1, BENCH_STEPS more than $((warmup + 1))" >&2
    exit 2
fi
if ! "$py" -c 'import torch, torchvision' 2>/dev/null; then
    echo "run.sh: $py cannot import torch and torchvision (set TORCH_PYTHON)" >&2
    exit 1
fi
if [ ! -x "$ptc" ]; then
    echo "run.sh: $ptc is not built (make, or set PTC)" >&2
    exit 1
fi
if [ -z "$mpirun" ] || ! "$ptc" train --help 2>/dev/null | grep -q -- '--nproc'; then
    echo "run.sh: ${mpirun:-mpirun} missing, or this ptc has no data-parallel training (no --nproc)" >&2
    exit 1
fi
# mpirun refuses root unless told; the same for every launch below.
# (--oversubscribe as `ptc train --nproc` has it: a machine with fewer cores still runs.)
root_args="--oversubscribe"
[ "$(id -u)" = 0 ] && root_args="--allow-run-as-root $root_args"

base=${BENCH_TMPDIR:-${TMPDIR:-/tmp}}
tmp=$(mktemp -d "$base/ptc-bench-ddp.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

# Both ptc runs read the same images: the first global-batch x steps of the training split (a
# prefix, so the 2 ranks' shards together are the single process's batches).
samples=$((2 * batch * steps))
if [ -f "$data/train-images-idx3-ubyte.gz" ]; then
    data_args="--dataset fashion-mnist --data $data"
    torch_data="--data $data"
    kind="Fashion-MNIST ($data)"
else
    "$py" - "$tmp/cifar" "$samples" <<'EOF' || exit 1
import os, sys
import numpy as np
out, n = sys.argv[1], int(sys.argv[2])
os.makedirs(out)
rng = np.random.default_rng(0)
for name, count in (("data_batch_1.bin", n), ("test_batch.bin", 256)):
    rec = rng.integers(0, 256, size=(count, 1 + 3 * 32 * 32), dtype=np.uint8)
    rec[:, 0] %= 10
    rec.tofile(os.path.join(out, name))
EOF
    data_args="--dataset cifar10 --data $tmp/cifar"
    torch_data="--synthetic"
    kind="synthetic CIFAR-10 ($data has no Fashion-MNIST)"
fi
backend=${BENCH_BACKEND:-}
if [ -z "$backend" ]; then
    # `ptc train --backend X --help` succeeds for any X; ptc eval names a backend it lacks first.
    # shellcheck disable=SC2086
    case $("$ptc" eval --weights "$tmp/none.pth" $data_args --max-samples 1 --batch-size 1 \
        --backend dnnl 2>&1) in
    *"not built"*) backend=ref ;;
    *) backend=dnnl ;;
    esac
fi
common="train $data_args --max-steps $steps --epochs 1 --eval-every 0 --max-samples $samples --backend $backend --no-progress --save $tmp/model.pth ${BENCH_PTC_ARGS---no-augment}"

echo "ptc: $ptc ($("$ptc" --version 2>&1 | head -n 1)), backend $backend"
echo "mpirun: $mpirun ($("$mpirun" --version 2>&1 | head -n 1)), options: $root_args $mpi_args"
echo "torch: $("$py" -c 'import torch; print(torch.__version__)') under $py"
echo "data: $kind; $steps steps of $((2 * batch)) images (global), the first $warmup not timed; $(nproc) cores"

results="$tmp/results"
: >"$results"
# run NAME LOG CMD...: runs CMD, keeps its output in LOG, says how long it took.
run() {
    name=$1 log=$2
    shift 2
    t0=$(date +%s)
    if ! "$@" >"$log" 2>&1; then
        echo "run.sh: $name failed; the end of its output:" >&2
        tail -n 20 "$log" >&2
        exit 1
    fi
    echo "  $name: $(($(date +%s) - t0)) s"
}
# summary FILE: the last line of a metrics file (ptc's summary), as one line.
summary() { tail -n 1 "$1"; }

i=1
while [ "$i" -le "$repeat" ]; do
    echo "round $i of $repeat"
    # shellcheck disable=SC2086
    run "ptc 2 ranks x 1 thread" "$tmp/ptc2-$i.log" \
        "$mpirun" $root_args $mpi_args -np 2 "$ptc" $common --threads 1 --batch-size "$batch" \
        --metrics "$tmp/ptc2-$i.jsonl"
    echo "ptc2 $(summary "$tmp/ptc2-$i.jsonl")" >>"$results"
    # shellcheck disable=SC2086
    run "ptc 1 process x 2 threads" "$tmp/ptc1-$i.log" \
        "$ptc" $common --threads 2 --batch-size $((2 * batch)) --metrics "$tmp/ptc1-$i.jsonl"
    echo "ptc1 $(summary "$tmp/ptc1-$i.jsonl")" >>"$results"
    # shellcheck disable=SC2086
    run "PyTorch DDP 2 x 1 thread" "$tmp/torch-$i.log" \
        "$py" "$here/ddp_torch.py" --world 2 --threads 1 --batch "$batch" --steps "$steps" \
        --warmup "$warmup" $torch_data
    echo "torch $(grep '^{' "$tmp/torch-$i.log" | tail -n 1)" >>"$results"
    i=$((i + 1))
done

# ---- the table -----------------------------------------------------------------------------------
"$py" - "$results" "$repeat" "${BENCH_OUT:-}" <<'EOF'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    name, _, rest = line.partition(" ")
    runs.setdefault(name, []).append(json.loads(rest))
med = lambda name, key: statistics.median(r[key] for r in runs[name])
ptc2 = med("ptc2", "train_images_per_sec")
ptc1 = med("ptc1", "train_images_per_sec")
torch = med("torch", "images_per_sec")
def spread(name, key):
    v = [r[key] for r in runs[name]]
    return "%.1f .. %.1f" % (min(v), max(v))
rows = [("ptc, 2 ranks x 1 thread (mpirun)", ptc2, spread("ptc2", "train_images_per_sec")),
        ("ptc, 1 process x 2 threads", ptc1, spread("ptc1", "train_images_per_sec")),
        ("PyTorch %s DDP gloo, 2 x 1 thread" % runs["torch"][0]["torch"], torch,
         spread("torch", "images_per_sec"))]
out = ["| run | images/s (median) | range |", "|---|---:|---|"]
out += ["| %s | %.1f | %s |" % r for r in rows]
ar = [r.get("allreduce_ms_per_step") for r in runs["ptc2"]]
if all(a is not None for a in ar):
    ex = [r["allreduce_exposed_ms_per_step"] for r in runs["ptc2"]]
    hid = [r["allreduce_hidden_fraction"] for r in runs["ptc2"]]
    out += ["", "ptc's all-reduce (2 ranks, medians): %.1f ms per step if run alone, %.1f ms per "
            "step exposed after backward: %.0f%% hidden behind backward (range %.0f%% .. %.0f%%)"
            % (statistics.median(ar), statistics.median(ex), 100 * statistics.median(hid),
               100 * min(hid), 100 * max(hid))]
else:
    out += ["", "ptc's summary has no all-reduce figures (allreduce_ms_per_step missing)"]
def judge(ok, text):
    return "  %-6s %s" % ("met" if ok else "MISSED", text)
out += ["", "medians of %s rounds; targets:" % sys.argv[2],
        judge(ptc2 >= 0.95 * ptc1, "ptc 2 ranks >= 0.95 x ptc 1 process: %.3f" % (ptc2 / ptc1)),
        judge(ptc2 >= 1.3 * torch, "ptc 2 ranks >= 1.3 x PyTorch DDP: %.2fx" % (ptc2 / torch))]
text = "\n".join(out)
print()
print(text)
if sys.argv[3]:
    with open(sys.argv[3], "w") as f:
        f.write(text + "\n")
EOF

#!/bin/sh
# run.sh - the GPU tier: one command, on a machine with an NVIDIA GPU, that checks the cuda
# backend, its kernels, the nccl communicator and the monitoring against ref, dnnl and PyTorch on
# the same GPU, and measures speed and memory against torch. Prints ONE table at the end (part,
# check, figure, PASS/FAIL/MISS/MET/not run); exits 1 on any FAIL, 77 where no GPU is found (every
# CI run: `make check` runs it and it skips), 0 otherwise. docs/gpu.md says how to prepare the
# machine (tests/gpu/prepare.sh makes _gpu/carry on a CPU machine) and what each part checks:
#
#   a  test_kernels_gpu; cuda_layers (every layer, cuda vs ref, float32 TF32 off, 1e-4); nccl_check
#   b  bf16 layers vs torch autocast on the same GPU, bounded by a float64 oracle
#   c  3 and 10 free-running training steps vs torch on the same GPU and a float64 oracle
#      (float32; and bf16 against torch autocast)
#   d  the short recipe's test accuracy within 1 point of the dnnl backend's (prepare.sh's)
#   e  images/s and peak GPU memory vs torch eager / channels_last bf16 / torch.compile
#      (targets of issue 14 section 6: MET or MISS; a FAIL only with PTC_GPU_PERF_STRICT=1)
#   f  the monitoring fields in the metrics and the progress line (of part d's run)
#   g  nccl at world 2 (needs 2 GPUs and mpirun)
#
# Every part runs under its own timeout, inside a global deadline of PTC_GPU_DEADLINE seconds
# (470): a part that would start past it is reported "not run: out of time".
#
# Options: --build  build the tree here into _gpu/build when _gpu/carry is missing (needs the
#                   libraries prepare.sh would carry); --only a,b,...  run those parts only.
# Environment: PTC_GPU_CARRY (default <source>/_gpu/carry); PTC_GPU_BUILD (a build tree to use
# instead: the programs' libtool wrappers work there); OUT (logs copied there);
# PTC_GPU_SELFTEST=1 checks the plumbing on a CPU machine: no GPU wanted, ptc on the dnnl backend,
# torch on the CPU, tiny sizes. Its figures mean nothing.
set -u
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
selftest=${PTC_GPU_SELFTEST:-0}
deadline=${PTC_GPU_DEADLINE:-470}
start=$(date +%s)
only=
want_build=0
while [ $# -gt 0 ]; do
    case "$1" in
    --build) want_build=1 ;;
    --only) only=$2; shift ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done

# ---- is there a GPU? ------------------------------------------------------------------------------
if [ "$selftest" != 1 ]; then
    if ! command -v nvidia-smi >/dev/null 2>&1; then
        echo "SKIP: no NVIDIA GPU found (no nvidia-smi)"
        exit 77
    fi
    ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
    if [ "$ngpu" -lt 1 ]; then
        echo "SKIP: no NVIDIA GPU found (nvidia-smi lists none)"
        exit 77
    fi
else
    ngpu=0
    echo "run.sh: PTC_GPU_SELFTEST=1: plumbing check on the CPU (ptc dnnl, torch cpu); figures mean nothing"
fi

work=${PTC_GPU_WORK:-$(mktemp -d "${TMPDIR:-/tmp}/ptc-gpu.XXXXXX")}
# an empty $work would put logs/, bin/ptc (a wrapper) and results.tsv at the root of the machine
[ -n "$work" ] && mkdir -p "$work/logs" "$work/bin" ||
    { echo "run.sh: error: no work folder (mktemp -d in ${TMPDIR:-/tmp} failed, or PTC_GPU_WORK is unusable)" >&2; exit 99; }
results="$work/results.tsv"
: >"$results"
export PTC_GPU_RESULTS="$results" PTC_GPU_WORK="$work" PTC_GPU_SELFTEST="$selftest"
row() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$results"; }
log() { printf '[%4ds] %s\n' $(( $(date +%s) - start )) "$*"; }
# (defined here, before the setup below uses it on its own failures)
why() { # why LOG: the line that says why a run failed: its first error line, else its last line
    l=$(grep -m1 -i 'error\|cannot\|failed\|unknown\|invalid\|not built' "$1" 2>/dev/null)
    [ -n "$l" ] || l=$(grep -v '^[-= ]*$' "$1" 2>/dev/null | tail -1)
    printf '%s' "$l" | cut -c1-200
}

# ---- where the programs are ---------------------------------------------------------------------
carry=${PTC_GPU_CARRY:-$src/_gpu/carry}
if [ -z "${PTC_GPU_BUILD:-}" ] && [ ! -x "$carry/build/tools/ptc" ] && [ $want_build = 1 ]; then
    log "no $carry: building the tree here into $src/_gpu/build (--build)"
    mkdir -p "$src/_gpu/build"
    if ( [ -x "$src/configure" ] || (cd "$src" && ./bootstrap) ) >"$work/logs/build.log" 2>&1 &&
       (cd "$src/_gpu/build" && "$src/configure" --with-cuda --with-cudnn --with-nccl &&
        make -j16 && for p in cuda_layers test_kernels_gpu nccl_check; do
            make -n "tests/gpu/$p" >/dev/null 2>&1 && make -j16 "tests/gpu/$p" || true; done) \
        >>"$work/logs/build.log" 2>&1; then
        PTC_GPU_BUILD="$src/_gpu/build"
    else
        row setup "build here (--build)" "see logs/build.log: $(why "$work/logs/build.log")" FAIL
    fi
fi
# nvidia.* Python packages: cuDNN, cuBLAS, NCCL and cudart live only there on the GPU machine
nvlibs=$(python3 - <<'PY' 2>/dev/null
import os
try:
    import nvidia
except ImportError:
    raise SystemExit(0)
dirs = []
for base in list(getattr(nvidia, '__path__', [])):
    for root, _, files in os.walk(base):
        if any(f.startswith('lib') and '.so' in f for f in files) and root not in dirs:
            dirs.append(root)
print(':'.join(dirs))
PY
)
if [ -n "${PTC_GPU_BUILD:-}" ]; then
    b=$(cd "$PTC_GPU_BUILD" && pwd)
    libdir="$b/lib/.libs"
    ptc_real="$b/tools/ptc"
    progs_dir="$b/tests/gpu"
    sysroot=
elif [ -x "$carry/build/tools/ptc" ]; then
    libdir="$carry/build/lib"
    ptc_real="$carry/build/tools/ptc"
    progs_dir="$carry/build/tests/gpu"
    sysroot="$carry/sysroot/lib"
else
    libdir= ptc_real= progs_dir= sysroot=
    row setup "programs" "no $carry/build/tools/ptc: run tests/gpu/prepare.sh on a CPU machine and carry _gpu/carry (or --build, or PTC_GPU_BUILD)" FAIL
fi
# the CUDA toolkit's own folder last: cudart from there if no package has it (no cuDNN there)
cudalib=
for d in "${CUDA_HOME:-/usr/local/cuda}/lib64" /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && cudalib="${cudalib:+$cudalib:}$d"
done
ldpath="$libdir${sysroot:+:$sysroot}${nvlibs:+:$nvlibs}${cudalib:+:$cudalib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# Wrappers that set the library path for ptc's programs alone: python and torch keep their own.
wrap() { # wrap NAME REAL
    cat >"$work/bin/$1" <<W
#!/bin/sh
LD_LIBRARY_PATH='$ldpath' PTC_PLUGIN_PATH='$libdir' exec '$2' "\$@"
W
    chmod +x "$work/bin/$1"
}
[ -n "$ptc_real" ] && [ -x "$ptc_real" ] && wrap ptc "$ptc_real"
for p in cuda_layers test_kernels_gpu nccl_check; do
    [ -n "$progs_dir" ] && [ -x "$progs_dir/$p" ] && wrap "$p" "$progs_dir/$p"
done
export PTC_GPU_PTC="$work/bin/ptc" PTC_GPU_BIN="$work/bin" PTC_GPU_CARRY="$carry"
log "work folder $work; library path $ldpath"
if [ -x "$work/bin/ptc" ]; then
    "$work/bin/ptc" --version >"$work/logs/version.log" 2>&1 ||
        row setup "ptc --version" "exit $?: $(why "$work/logs/version.log")" FAIL
    sed 's/^/    /' "$work/logs/version.log"
fi
if [ "$selftest" = 1 ]; then
    backend="--backend dnnl"
    export PTC_GPU_BACKEND_ARGS="--backend dnnl" PTC_GPU_TORCH_DEVICE=cpu
else
    backend="--backend cuda --device cuda:0"
    export PTC_GPU_BACKEND_ARGS="$backend" PTC_GPU_TORCH_DEVICE=cuda
fi

# ---- running a part under the deadline -------------------------------------------------------------
# part NAME CHECK BUDGET CMD...: runs CMD with its output in logs/NAME.log under
# timeout min(BUDGET, time left); a part that cannot get 10 s is not run. Returns CMD's status
# (124 on a timeout, 200 when not run); the caller records the verdict, except for timeouts and
# "not run", recorded here.
part() {
    name=$1 check=$2 budget=$3; shift 3
    wanted "$name" || return 200
    left=$(( deadline - ($(date +%s) - start) ))
    if [ $left -lt 10 ]; then
        row "$name" "$check" "" "not run: out of time"
        return 200
    fi
    t=$budget; [ $t -gt $left ] && t=$left
    log "$name: $check (at most $t s)"
    timeout --kill-after=5 "$t" "$@" >"$work/logs/$name.log" 2>&1
    rc=$?
    tail -n 15 "$work/logs/$name.log" | sed 's/^/    /'
    if [ $rc = 124 ] || [ $rc = 137 ]; then
        row "$name" "$check" "no result after $t s (logs/$name.log)" FAIL
    fi
    return $rc
}
wanted() { # wanted PART: whether --only (if given) names the part or its letter
    case ",${only:-$1}," in *",$(echo "$1" | cut -c1),"*|*",$1,"*) return 0 ;; esac
    return 1
}
need() { # need PROG PART CHECK: FAIL the check when a program is missing (and the part wanted)
    wanted "$2" || return 1
    [ -x "$work/bin/$1" ] && return 0
    row "$2" "$3" "tests/gpu/$1 not built or not carried" FAIL
    return 1
}

# ---- a: kernels, layers, nccl at world 1 ------------------------------------------------------------
if need test_kernels_gpu a1 "kernels vs host math"; then
    part a1 "kernels vs host math" 40 "$work/bin/test_kernels_gpu"
    rc=$?
    case $rc in 0) row a1 "kernels vs host math" "$(tail -1 "$work/logs/a1.log" | cut -c1-200)" PASS ;;
                124|137|200) ;; 77) row a1 "kernels vs host math" "skipped (77)" FAIL ;;
                *) row a1 "kernels vs host math" "exit $rc: $(why "$work/logs/a1.log")" FAIL ;; esac
fi
if need cuda_layers a2 "layers cuda vs ref, f32 TF32 off, 1e-4"; then
    part a2 "layers cuda vs ref, f32 TF32 off, 1e-4" 60 "$work/bin/cuda_layers"
    rc=$?
    fig=$(grep -o 'cuda_layers: [0-9]* checks, [0-9]* failed' "$work/logs/a2.log" | tail -1)
    case $rc in 124|137|200) ;;
        0) if [ -n "$fig" ] && echo "$fig" | grep -q ', 0 failed'; then
               row a2 "layers cuda vs ref, f32 TF32 off, 1e-4" "$fig" PASS
           else row a2 "layers cuda vs ref, f32 TF32 off, 1e-4" "exit 0 but no summary line '${fig:-none}'" FAIL; fi ;;
        *) row a2 "layers cuda vs ref, f32 TF32 off, 1e-4" "exit $rc: ${fig:-$(why "$work/logs/a2.log")}" FAIL ;;
    esac
fi
if need nccl_check a3 "nccl communicator, world 1"; then
    part a3 "nccl communicator, world 1" 30 "$work/bin/nccl_check"
    rc=$?
    case $rc in 0) row a3 "nccl communicator, world 1" "$(tail -1 "$work/logs/a3.log" | cut -c1-200)" PASS ;;
                124|137|200) ;;
                *) row a3 "nccl communicator, world 1" "exit $rc: $(why "$work/logs/a3.log")" FAIL ;; esac
fi

# ---- b: bf16 layers ----------------------------------------------------------------------------------
bcheck="bf16 layers vs torch autocast (f64 oracle)"
if [ "$selftest" = 1 ]; then
    part b "$bcheck" 120 python3 "$here/check_bf16_layers.py" --selftest "$work/bf16dump"
    rc=$?
    [ $rc = 0 ] || [ $rc = 1 ] || [ $rc -ge 124 ] || row b "$bcheck" "exit $rc: $(why "$work/logs/b.log")" FAIL
elif need cuda_layers b "$bcheck"; then
    part b0 "bf16 dump (cuda_layers --bf16-dump)" 40 "$work/bin/cuda_layers" --bf16-dump "$work/bf16dump"
    rc=$?
    case $rc in
    0)  part b "$bcheck" 60 python3 "$here/check_bf16_layers.py" "$work/bf16dump"
        rc=$?
        # the script writes its rows itself, a FAIL row included when it fails (exit 1)
        [ $rc = 0 ] || [ $rc = 1 ] || [ $rc -ge 124 ] || row b "$bcheck" "exit $rc: $(why "$work/logs/b.log")" FAIL ;;
    124|137|200) ;;
    *)  row b0 "bf16 dump (cuda_layers --bf16-dump)" "exit $rc: $(why "$work/logs/b0.log")" FAIL ;;
    esac
fi

# ---- c: free-running steps ---------------------------------------------------------------------------
if ! wanted c; then :
elif [ -x "$work/bin/ptc" ]; then
    part c "free-running steps vs torch (f64 oracle)" 150 python3 "$here/check_free_run.py"
    rc=$?
    [ $rc = 0 ] || [ $rc = 1 ] || [ $rc -ge 124 ] || row c "free-running steps" "exit $rc: $(why "$work/logs/c.log")" FAIL
else
    row c "free-running steps vs torch (f64 oracle)" "no ptc" FAIL
fi

# ---- d and f: the recipe's accuracy; monitoring in the same run ----------------------------------
if ! wanted d && ! wanted f; then :
elif [ -x "$work/bin/ptc" ] && [ -f "$carry/recipe.txt" ]; then
    recipe=$(cat "$carry/recipe.txt")
    data="$carry/data/fashion-mnist"
    if [ "$selftest" = 1 ]; then recipe="$recipe --max-samples 512"; fi
    # --progress: the progress line on a file as on a terminal (it carries the gpu field); a file
    # has no width, so COLUMNS gives one wide enough that the gpu field is not left out
    part d "recipe accuracy vs dnnl (1 point)" 90 env COLUMNS=200 "$work/bin/ptc" train $recipe \
        --data "$data" \
        $backend --save "$work/recipe.pth" --metrics "$work/recipe.metrics" --progress
    rc=$?
    acc=$(sed -n 's/.*test accuracy \([0-9.]*\)%.*/\1/p' "$work/logs/d.log" 2>/dev/null | tail -1)
    ref=$(cat "$carry/dnnl_accuracy.txt" 2>/dev/null)
    case $rc in 124|137|200) ;;
        0) if [ -z "$acc" ]; then row d "recipe accuracy vs dnnl (1 point)" "no test accuracy in logs/d.log" FAIL
           elif [ -z "$ref" ]; then row d "recipe accuracy vs dnnl (1 point)" "cuda $acc%; no dnnl_accuracy.txt (prepare.sh)" FAIL
           else
               v=$(awk -v a="$acc" -v r="$ref" 'BEGIN { d = a - r; if (d < 0) d = -d; print (d <= 1.0 ? "PASS" : "FAIL") }')
               row d "recipe accuracy vs dnnl (1 point)" "$(echo "$backend" | cut -d' ' -f2) $acc%, dnnl $ref% ($recipe)" "$v"
           fi ;;
        *) row d "recipe accuracy vs dnnl (1 point)" "exit $rc: $(why "$work/logs/d.log")" FAIL ;;
    esac
    if [ $rc = 0 ]; then
        case ",${only:-f}," in *,f,*)
            python3 "$here/check_monitoring.py" "$work/recipe.metrics" "$work/logs/d.log" \
                >"$work/logs/f.log" 2>&1 || true
            sed 's/^/    /' "$work/logs/f.log" ;;
        esac
    elif [ $rc != 200 ]; then
        row f "monitoring fields" "part d's run did not complete" FAIL
    elif wanted f; then
        row f "monitoring fields" "" "not run: part d (its run) not run"
    fi
else
    row d "recipe accuracy vs dnnl (1 point)" "no ptc or no $carry/recipe.txt (prepare.sh)" FAIL
fi

# ---- e: speed and memory -------------------------------------------------------------------------
if ! wanted e; then :
elif [ -x "$work/bin/ptc" ]; then
    # the script keeps its own clock: it gets what is left, less 30 s for g and the table
    left=$(( deadline - ($(date +%s) - start) - 30 ))
    export PTC_GPU_BENCH_SECONDS=$(( left - 10 ))  # ends before part's timeout below
    part e "images/s and peak memory vs torch" $(( left > 10 ? left : 10 )) python3 "$here/bench_gpu.py"
    rc=$?
    [ $rc = 0 ] || [ $rc = 1 ] || [ $rc -ge 124 ] || row e "speed and memory" "exit $rc: $(why "$work/logs/e.log")" FAIL
else
    row e "images/s and peak memory vs torch" "no ptc" FAIL
fi

# ---- g: nccl at world 2 ------------------------------------------------------------------------------
if ! wanted g; then :
elif [ "$ngpu" -ge 2 ] && command -v mpirun >/dev/null 2>&1 && [ -x "$work/bin/ptc" ]; then
    root=; [ "$(id -u)" = 0 ] && root=--allow-run-as-root
    part g "nccl, world 2" 60 mpirun -np 2 $root \
        "$work/bin/ptc" train $(cat "$carry/recipe.txt") --data "$carry/data/fashion-mnist" \
        --backend cuda --max-steps 40 --save "$work/nccl2.pth" --no-progress
    rc=$?
    # each rank takes the GPU of its local rank; the communicator must be nccl (the default there)
    fig=$(grep -o '[0-9]* processes ([a-z]*' "$work/logs/g.log" | head -1)
    case $rc in 0) case "$fig" in *nccl*) row g "nccl, world 2" "$fig" PASS ;;
                                  *) row g "nccl, world 2" "communicator: '${fig:-none}', not nccl" FAIL ;; esac ;;
                124|137|200) ;; *) row g "nccl, world 2" "exit $rc: $(why "$work/logs/g.log")" FAIL ;; esac
else
    why="one GPU"; [ "$ngpu" -ge 2 ] && why=
    command -v mpirun >/dev/null 2>&1 || why="${why:+$why / }no MPI"
    row g "nccl, world 2" "" "not run: ${why:-no ptc}"
fi

# ---- the table ----------------------------------------------------------------------------------------
elapsed=$(( $(date +%s) - start ))
echo
gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
echo "GPU tier on ${gpu:-no GPU (self-test)}: $elapsed s of a $deadline s deadline"
# verdicts "not run: WHY" and "left out: WHY" print as "not run" / "left out" with WHY as figure
LC_ALL=C sort -s -t"$(printf '\t')" -k1,1 "$results" | awk -F'\t' '
    BEGIN { printf "%-5s %-46s %-8s %s\n", "part", "check", "verdict", "figure";
            printf "%-5s %-46s %-8s %s\n", "----", "-----", "-------", "------" }
    { v = $4; f = $3
      if (match(v, /^(not run|left out): /)) { w = substr(v, RLENGTH + 1); v = substr(v, 1, RLENGTH - 2)
                                              f = (f == "" ? w : w "; " f) }
      printf "%-5s %-46s %-8s %s\n", $1, substr($2, 1, 46), v, f }'
fails=$(awk -F'\t' '$4 == "FAIL"' "$results" | wc -l)
misses=$(awk -F'\t' '$4 == "MISS"' "$results" | wc -l)
echo "$(wc -l <"$results") rows: $fails FAIL, $misses MISS (targets), $(grep -c 'not run' "$results") not run"
if [ -n "${OUT:-}" ]; then
    mkdir -p "$OUT/gpu-logs" && cp -r "$work/logs" "$results" "$OUT/gpu-logs/" 2>/dev/null
    [ -f "$work/recipe.metrics" ] && cp "$work/recipe.metrics" "$OUT/gpu-logs/"
fi
[ "$fails" -eq 0 ] || exit 1
exit 0

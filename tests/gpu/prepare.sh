#!/bin/sh
# prepare.sh - makes, on a CPU machine, everything tests/gpu/run.sh needs on a GPU machine that has
# no compiler toolchain for ptc's dependencies (no minizip, jansson or oneDNN, no network), and
# puts it in ONE ignored folder, _gpu/carry, to travel with the source tree (docs/gpu.md):
#
#   _gpu/build/                 the out-of-tree build (configure --with-cuda --with-cudnn
#                               --with-nccl; dnnl and MPI as found); stays here, too big to carry
#   _gpu/carry/build/           what of it runs: lib/.libs/*.so* (libptc and the modules),
#                               tools/ptc and the tests/gpu programs as real binaries (not
#                               libtool's wrapper scripts, which name this machine's paths),
#                               config.h
#   _gpu/carry/sysroot/lib/     the shared libraries those need that a GPU machine may lack
#                               (minizip, jansson, zlib, ...: found with ldd, system and CUDA
#                               libraries left out)
#   _gpu/carry/data/fashion-mnist/  a Fashion-MNIST subset in IDX .gz form (same file names)
#   _gpu/carry/dnnl_accuracy.txt    the test accuracy of the short recipe on the dnnl backend
#                               here, that run.sh's accuracy part repeats on cuda
#   _gpu/carry/recipe.txt       that recipe's options, read by run.sh so both use the same
#
# Options: --skip-build (reuse _gpu/build), --skip-accuracy (keep dnnl_accuracy.txt), -j N.
# Environment: PTC_GPU_TRAIN_IMAGES / PTC_GPU_TEST_IMAGES (10000 / 10000), PTC_GPU_EPOCHS (2).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
top="$src/_gpu"
build="$top/build"
carry="$top/carry"
jobs=2
skip_build=0
skip_acc=0
while [ $# -gt 0 ]; do
    case "$1" in
    --skip-build) skip_build=1 ;;
    --skip-accuracy) skip_acc=1 ;;
    -j) jobs=$2; shift ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "prepare.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
say() { printf 'prepare.sh: %s\n' "$*"; }
die() { printf 'prepare.sh: error: %s\n' "$*" >&2; exit 1; }

FASHION=/usr/share/datasets/fashion-mnist
NTRAIN=${PTC_GPU_TRAIN_IMAGES:-10000}
NTEST=${PTC_GPU_TEST_IMAGES:-10000}
EPOCHS=${PTC_GPU_EPOCHS:-2}
BATCH=128
SEED=0

mkdir -p "$top"
# ---- 1. build -------------------------------------------------------------------------------------
if [ $skip_build = 0 ]; then
    [ -x "$src/configure" ] || (cd "$src" && ./bootstrap) || die "bootstrap failed"
    mkdir -p "$build"
    if [ ! -f "$build/config.status" ]; then
        say "configure --with-cuda --with-cudnn --with-nccl (in $build)"
        (cd "$build" && "$src/configure" --with-cuda --with-cudnn --with-nccl >configure.out 2>&1) ||
            { tail -20 "$build/configure.out"; die "configure failed ($build/configure.out)"; }
    fi
    say "make -j$jobs"
    (cd "$build" && make -j"$jobs" >make.out 2>&1) || { tail -30 "$build/make.out"; die "make failed ($build/make.out)"; }
    for prog in cuda_layers test_kernels_gpu nccl_check; do
        # a program whose rule is not in the Makefile yet is left out, and said so
        if (cd "$build" && make -n "tests/gpu/$prog" >/dev/null 2>&1); then
            (cd "$build" && make -j"$jobs" "tests/gpu/$prog" >>make.out 2>&1) ||
                { tail -30 "$build/make.out"; die "make tests/gpu/$prog failed"; }
            say "built tests/gpu/$prog"
        else
            say "tests/gpu/$prog: no rule in this tree's Makefile: not built (run.sh reports it missing)"
        fi
    done
fi
[ -f "$build/lib/.libs/libptc.so" ] || die "$build/lib/.libs/libptc.so is missing: build first"

# ---- 2. the build's runnable part ------------------------------------------------------------------
rm -rf "$carry/build" "$carry/sysroot"
mkdir -p "$carry/build/lib" "$carry/build/tools" "$carry/build/tests/gpu" "$carry/sysroot/lib"
# each shared object once, under its SONAME (what the loader asks for): no symbolic links travel
for f in "$build"/lib/.libs/*.so*; do
    [ -L "$f" ] && continue
    soname=$(objdump -p "$f" 2>/dev/null | awk '$1 == "SONAME" { print $2 }')
    cp "$f" "$carry/build/lib/${soname:-$(basename "$f")}"
done
cp "$build/config.h" "$carry/build/"
real_bin() { # the ELF behind a libtool wrapper (.libs/NAME or .libs/lt-NAME), or the file itself
    d=$(dirname "$1"); n=$(basename "$1")
    for c in "$d/.libs/$n" "$d/.libs/lt-$n" "$1"; do
        if [ -f "$c" ] && head -c 4 "$c" | grep -q ELF; then echo "$c"; return 0; fi
    done
    return 1
}
b=$(real_bin "$build/tools/ptc") || die "tools/ptc is not built"
cp "$b" "$carry/build/tools/ptc"
for prog in cuda_layers test_kernels_gpu nccl_check; do
    if b=$(real_bin "$build/tests/gpu/$prog"); then cp "$b" "$carry/build/tests/gpu/$prog"; fi
done
strip --strip-unneeded "$carry"/build/lib/*.so* "$carry"/build/tools/ptc 2>/dev/null || true

# ---- 3. the libraries they need that a GPU machine may lack ------------------------------------------
# Left out: glibc's, the compiler runtime's (the GPU machine's glibc is at least Debian 12's) and
# CUDA's (the driver's and the nvidia.* Python packages' are used there). Others are copied, with
# what they need in turn, unless larger than 16 MiB (oneDNN, ~100 MiB: a module that needs it
# cannot load on the GPU machine, and says so; the cuda backend does not need it).
system_lib() {
    case "$1" in
    linux-vdso*|ld-linux*|libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libutil.so*) return 0 ;;
    libgcc_s.so*|libstdc++.so*|libresolv.so*) return 0 ;;
    libcuda.so*|libcudart.so*|libcudnn*|libcublas*|libnccl.so*|libnvidia-ml.so*|libnvrtc*|libnvJitLink*) return 0 ;;
    esac
    return 1
}
: >"$top/skipped.txt"
for elf in "$carry"/build/lib/*.so* "$carry"/build/tools/ptc "$carry"/build/tests/gpu/*; do
    [ -f "$elf" ] && [ ! -L "$elf" ] || continue
    LD_LIBRARY_PATH="$carry/build/lib" ldd "$elf" 2>/dev/null | while read -r name arrow path rest; do
        [ "$arrow" = "=>" ] || continue
        system_lib "$name" && continue
        case "$path" in "$carry"/*|not) continue ;; esac
        [ -f "$carry/sysroot/lib/$name" ] && continue
        size=$(stat -L -c %s "$path")
        if [ "$size" -gt 16777216 ]; then
            grep -q "^$name " "$top/skipped.txt" || echo "$name $((size / 1048576)) MiB, needed by $(basename "$elf")" >>"$top/skipped.txt"
            continue
        fi
        cp -L "$path" "$carry/sysroot/lib/$name"
    done
done
if [ -s "$top/skipped.txt" ]; then
    say "not carried (too large; what needs them will not load on the GPU machine):"
    sed 's/^/    /' "$top/skipped.txt"
fi
say "sysroot: $(cd "$carry/sysroot/lib" && ls | tr '\n' ' ')"

# ---- 4. data -------------------------------------------------------------------------------------
mkdir -p "$carry/data/fashion-mnist"
python3 - "$FASHION" "$carry/data/fashion-mnist" "$NTRAIN" "$NTEST" <<'PY'
# The first n images and labels of each split, as IDX .gz files under the same names (the counts
# in the headers changed); mtime 0 so the files are the same at every run.
import gzip, struct, sys, os
src, dst, ntrain, ntest = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
for split, n in (('train', ntrain), ('t10k', ntest)):
    for kind, item in (('images-idx3', 784), ('labels-idx1', 1)):
        name = '%s-%s-ubyte.gz' % (split, kind)
        with gzip.open(os.path.join(src, name)) as f:
            raw = f.read()
        hdr = 16 if item == 784 else 8
        total = struct.unpack('>I', raw[4:8])[0]
        if n > total:
            sys.exit('%s has %d items, %d asked' % (name, total, n))
        out = raw[:4] + struct.pack('>I', n) + raw[8:hdr] + raw[hdr:hdr + n * item]
        with open(os.path.join(dst, name), 'wb') as f:
            with gzip.GzipFile(fileobj=f, mode='wb', mtime=0) as g:
                g.write(out)
PY
say "data: $NTRAIN training and $NTEST test images in $carry/data/fashion-mnist"

# ---- 5. the recipe on dnnl ---------------------------------------------------------------------------
recipe="--dataset fashion-mnist --epochs $EPOCHS --batch-size $BATCH --seed $SEED --eval-every 0 --lr 0.01"
echo "$recipe" >"$carry/recipe.txt"
if [ $skip_acc = 0 ] || [ ! -f "$carry/dnnl_accuracy.txt" ]; then
    say "the recipe on dnnl here: ptc train $recipe (a few minutes)"
    mkdir -p "$top/tmp"
    t0=$(date +%s)
    if "$build/tools/ptc" train $recipe --data "$carry/data/fashion-mnist" --backend dnnl \
        --save "$top/tmp/dnnl.pth" --no-progress >"$top/dnnl_recipe.log" 2>&1; then
        acc=$(sed -n 's/.*test accuracy \([0-9.]*\)%.*/\1/p' "$top/dnnl_recipe.log" | tail -1)
        [ -n "$acc" ] || die "no test accuracy in $top/dnnl_recipe.log"
        echo "$acc" >"$carry/dnnl_accuracy.txt"
        say "dnnl test accuracy $acc% ($(( $(date +%s) - t0 )) s)"
    else
        tail -5 "$top/dnnl_recipe.log"
        say "the dnnl recipe failed (is dnnl built?): no dnnl_accuracy.txt; run.sh's accuracy part will say so"
        rm -f "$carry/dnnl_accuracy.txt"
    fi
fi

# ---- 6. size ---------------------------------------------------------------------------------------
carried=$(du -sb "$carry" | cut -f1)
tracked=$(cd "$src" && git ls-files -z | xargs -0 stat -c %s 2>/dev/null | awk '{s+=$1} END {print s+0}')
total=$((carried + tracked))
say "carry: $((carried / 1024)) KiB in _gpu/carry + $((tracked / 1024)) KiB tracked = $((total / 1048576)) MiB (limit 64 MiB)"
[ $total -lt 60000000 ] || die "what travels is $total bytes: too close to 64 MiB"
say "done: carry the ignored path _gpu/carry with the tree and run tests/gpu/run.sh on the GPU machine"

#!/bin/sh
# replay.sh - run the fuzz targets, built as replay programs, over their seed corpus and over every
# file in testdata/ (fixtures and hostile files alike) and over the packed fixtures that make check
# unpacks into the build tree (testdata/torch/unpack.sh), and fail if any input crashes a target.
#
# Run by make check (which sets top_srcdir and top_builddir to absolute paths), or by hand from the
# build tree:  top_srcdir=/path/to/src top_builddir=. sh tests/fuzz/replay.sh
# A directory that does not exist yet is skipped. When a target fails, it is run again file by file
# (FUZZ_REPLAY_VERBOSE) so that the log names the input that crashed it; reproduce with
#   tests/fuzz/fuzz_<target> FILE
# Under an ASan build (configure --enable-sanitizers) this is also the sanitizer pass of the corpus.

here=$(cd "$(dirname "$0")" && pwd)
: "${top_srcdir:=$(cd "$here/../.." && pwd)}"
# make runs recipes in the build tree, so a build tree in the current directory wins.
if [ -z "$top_builddir" ] && [ -e "./tests/fuzz/fuzz_archive" ]; then top_builddir=$(pwd); fi
: "${top_builddir:=$top_srcdir}"

# A hang is a failure too, but it must not stall make check forever.
if command -v timeout >/dev/null 2>&1; then
    run_limited() { timeout "${FUZZ_REPLAY_TIMEOUT:-600}" "$@"; }
else
    run_limited() { "$@"; }
fi

status=0
for target in archive pickle load walk salvage; do
    bin="$top_builddir/tests/fuzz/fuzz_$target"
    if [ ! -x "$bin" ]; then
        echo "FAIL: $bin is missing (make check builds it)"
        status=1
        continue
    fi
    set --
    for dir in "$top_srcdir/tests/fuzz/corpus/$target" "$top_srcdir/testdata"; do
        if [ -d "$dir" ]; then
            set -- "$@" "$dir"
        else
            echo "skip: $dir does not exist"
        fi
    done
    # In a build tree of its own, the unpacked files are the plain files there (the rest are
    # links to the source tree, replayed above); in the source tree they are under testdata/.
    if [ "$(cd "$top_builddir" && pwd)" != "$(cd "$top_srcdir" && pwd)" ]; then
        for f in "$top_builddir"/testdata/torch/v*/*; do
            if [ -f "$f" ] && [ ! -L "$f" ]; then set -- "$@" "$f"; fi
        done
    fi
    if [ $# -eq 0 ]; then
        echo "skip: fuzz_$target has no inputs"
        continue
    fi

    run_limited "$bin" "$@"
    rc=$?
    if [ $rc -eq 0 ]; then
        echo "ok: fuzz_$target over $*"
        continue
    fi
    status=1
    if [ $rc -gt 128 ]; then
        why="killed by signal $((rc - 128))"
    elif [ $rc -eq 124 ]; then
        why="timed out"
    else
        why="exit status $rc"
    fi
    echo "FAIL: fuzz_$target: $why; running it again naming each input:"
    log="${TMPDIR:-/tmp}/ptc-replay-$target.$$.log"
    FUZZ_REPLAY_VERBOSE=1 run_limited "$bin" "$@" >"$log" 2>&1
    # The last input named before the report is the one that crashed (or hung).
    culprit=$(grep '^[^ ]*: running ' "$log" | tail -n 1 |
        sed -e 's/^[^ ]*: running //' -e 's/ ([0-9]* bytes)$//')
    echo "crashing input: ${culprit:-unknown}"
    grep -v '^[^ ]*: running ' "$log" | tail -n 40
    rm -f "$log"
done
exit $status

#!/bin/sh
# run.sh - a time-boxed libFuzzer campaign on each fuzz target (archive, pickle, load, walk,
# salvage).
#
# make check runs it with a short budget (FUZZ_SECONDS, default 60 seconds per target); longer local
# campaigns use the same script:
#   FUZZ_SECONDS=600 tests/fuzz/run.sh                    ten minutes per target
#   FUZZ_SECONDS=600 FUZZ_KEEP=$HOME/ptc-corpus tests/fuzz/run.sh
#                                                         and keep the grown corpus in
#                                                         $HOME/ptc-corpus/<target>/
#   FUZZ_TARGETS="pickle" tests/fuzz/run.sh               only some targets
# Outside make check set top_srcdir and top_builddir (default: the tree this script lives in) and
# FUZZ_CC (clang), e.g. FUZZ_CC=clang-14.
#
# Exits 77 (skipped) only when there is no clang at all (FUZZ_CC empty; make check registers this
# script only where configure found clang's libFuzzer, so there it never skips). When `make fuzz`
# cannot build the libFuzzer binaries, that is a failure (exit 1): a target that no longer builds
# must not pass as skipped. Each target fuzzes a copy of its seed corpus in a temporary
# directory, so the source tree is never written. Any crash, leak, timeout (-timeout=5 seconds per
# input) or out-of-memory (-rss_limit_mb=2048) fails the run; the temporary directory is then kept
# and the failing input's path printed with the fuzzer's report. Reproduce with
#   tests/fuzz/libfuzzer_<target> CRASH_FILE        (or tests/fuzz/fuzz_<target> CRASH_FILE)

here=$(cd "$(dirname "$0")" && pwd)
: "${top_srcdir:=$(cd "$here/../.." && pwd)}"
# make runs recipes in the build tree, so a build tree in the current directory wins.
if [ -z "$top_builddir" ] && [ -e "./config.status" ]; then top_builddir=$(pwd); fi
: "${top_builddir:=$top_srcdir}"
seconds=${FUZZ_SECONDS:-60}
targets=${FUZZ_TARGETS:-archive pickle load walk salvage}

case $seconds in
'' | *[!0-9]*)
    echo "FAIL: FUZZ_SECONDS must be a whole number of seconds, not '$seconds'"
    exit 1
    ;;
esac

if [ -z "$FUZZ_CC" ]; then
    echo "SKIP: FUZZ_CC is empty: configure found no clang (set FUZZ_CC=clang-14 to fuzz)"
    exit 77
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ptc-fuzz.XXXXXX") || exit 1
keep_tmp=0
cleanup() {
    if [ "$keep_tmp" -eq 0 ]; then rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if ! ${MAKE:-make} -C "$top_builddir" fuzz FUZZ_CC="$FUZZ_CC" >"$tmp/build.log" 2>&1; then
    echo "FAIL: 'make -C $top_builddir fuzz' with FUZZ_CC=$FUZZ_CC failed; its last lines:"
    tail -n 20 "$tmp/build.log"
    exit 1
fi

# The load, walk and salvage targets see both a container and pickles, so they get both
# dictionaries.
cat "$top_srcdir/tests/fuzz/zip.dict" "$top_srcdir/tests/fuzz/pickle.dict" >"$tmp/load.dict"

status=0
for target in $targets; do
    case $target in
    archive) dict="$top_srcdir/tests/fuzz/zip.dict" ;;
    pickle) dict="$top_srcdir/tests/fuzz/pickle.dict" ;;
    load | walk | salvage) dict="$tmp/load.dict" ;;
    *)
        echo "FAIL: unknown target '$target' (archive, pickle, load, walk, salvage)"
        status=1
        continue
        ;;
    esac
    bin="$top_builddir/tests/fuzz/libfuzzer_$target"
    corpus="$tmp/corpus-$target"
    artifacts="$tmp/artifacts-$target"
    mkdir -p "$corpus" "$artifacts"
    seeds="$top_srcdir/tests/fuzz/corpus/$target"
    if [ -d "$seeds" ]; then
        cp -R "$seeds/." "$corpus/"
    fi
    # Salvage reads every file the strict load accepts as well: the walk corpus seeds it too.
    if [ "$target" = salvage ]; then
        cp -R "$top_srcdir/tests/fuzz/corpus/walk/." "$corpus/"
    fi

    # -max_total_time=0 would mean "forever": zero seconds only replays the corpus.
    if [ "$seconds" -eq 0 ]; then
        budget="-runs=0"
    else
        budget="-max_total_time=$seconds"
    fi
    echo "fuzzing $target for $seconds s ($(ls "$corpus" | wc -l | tr -d ' ') seeds)"
    "$bin" "$budget" -rss_limit_mb=2048 -timeout=5 -max_len=1048576 -dict="$dict" \
        -artifact_prefix="$artifacts/" -print_final_stats=1 "$corpus" >"$tmp/$target.log" 2>&1
    rc=$?
    found=$(ls "$artifacts")
    if [ $rc -ne 0 ] || [ -n "$found" ]; then
        status=1
        keep_tmp=1
        echo "FAIL: libfuzzer_$target exited with status $rc"
        for f in $found; do
            echo "failing input: $artifacts/$f"
        done
        echo "--- last lines of $tmp/$target.log"
        tail -n 60 "$tmp/$target.log"
        echo "---"
    else
        grep -E '^stat::(number_of_executed_units|peak_rss_mb)|^Done ' "$tmp/$target.log"
        echo "ok: $target"
    fi

    if [ -n "$FUZZ_KEEP" ]; then
        kept="$FUZZ_KEEP/$target"
        mkdir -p "$kept" && cp -R "$corpus/." "$kept/" &&
            echo "corpus kept in $kept ($(ls "$kept" | wc -l | tr -d ' ') files)"
    fi
done

if [ $keep_tmp -ne 0 ]; then
    echo "kept $tmp for inspection"
fi
exit $status

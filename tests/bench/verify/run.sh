#!/bin/sh
# run.sh - `ptc verify` against the Python pickle scanners picklescan, modelscan and fickling: what
# each says about the hostile corpus (testdata/hostile, expected verdicts read from its manifest.json
# at run time) and about benign checkpoints written by real torch (testdata/torch/v2.6,
# testdata/torch/v1.13, testdata/vectors), and how many files per second each gets through, all
# measured in the same run. See README.md beside this. Never run by make check.
#
#   top_builddir=BUILD tests/bench/verify/run.sh   (top_builddir defaults to this tree)
#
# Environment: BENCH_PYTHON (default python3) runs the peers: from its own packages when they are
# at the pinned versions below, else pip-installed at those versions into BENCH_PEER_DIR (default
# ~/.cache/ptc-bench-verify/pythonX.Y), which only this script puts on PYTHONPATH
# (BENCH_PIP_INSTALL=0: install nothing, use what is there); BENCH_REPEAT (default 3; BENCH_REPEATS
# is read when it is unset) timed runs per tool, medians reported; BENCH_PEERS (default
# "picklescan modelscan fickling"); BENCH_TIMEOUT (default 60) seconds per tool and file;
# BENCH_PEER_MEM_MB (default 4096, 0 for none) address-space limit of the peer processes;
# BENCH_OUT, if set, receives the markdown tables and BENCH_TSV every file's verdicts;
# BENCH_TMPDIR (default $TMPDIR or /tmp) holds logs; PTC names a ptc binary to use instead of the
# build tree's. Exit status 0 when every measurement ran, whatever the numbers: the target (ptc
# >= 50x the fastest peer's files/s) is reported, never asserted.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
: "${top_srcdir:=$(cd "$here/../../.." && pwd)}"
if [ -z "${top_builddir:-}" ] && [ -e "./tools/ptc" ]; then top_builddir=$(pwd); fi
: "${top_builddir:=$top_srcdir}"
py=${BENCH_PYTHON:-python3}
repeat=${BENCH_REPEAT:-${BENCH_REPEATS:-3}}
peers=${BENCH_PEERS:-picklescan modelscan fickling}
timeout=${BENCH_TIMEOUT:-60}
mem_mb=${BENCH_PEER_MEM_MB:-4096}
left_out=""
orig_pythonpath=${PYTHONPATH:-}

for v in "$repeat" "$timeout" "$mem_mb"; do
    case $v in
    '' | *[!0-9]*) echo "run.sh: BENCH_REPEAT, BENCH_TIMEOUT and BENCH_PEER_MEM_MB must be numbers" >&2; exit 2 ;;
    esac
done
if [ "$repeat" -lt 1 ] || [ "$timeout" -lt 1 ]; then
    echo "run.sh: BENCH_REPEAT and BENCH_TIMEOUT must be at least 1" >&2
    exit 2
fi
if ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 9))' 2>/dev/null; then
    echo "run.sh: $py is not a Python 3.9 or later (set BENCH_PYTHON)" >&2
    exit 1
fi

# ---- the peers, at pinned versions ----------------------------------------------------------------
# Used from $py's own packages when they are at the pinned versions; otherwise pip-installed into a
# folder of their own that only this script puts on PYTHONPATH, so that their dependencies (numpy 2
# for modelscan) never replace what $py has (a Debian numpy 1 under a Debian torch). fickling
# imports typing_extensions.Buffer before Python 3.12 without declaring the dependency.
pins_for() {
    case $1 in
    picklescan) echo "picklescan==1.0.5" ;;
    modelscan) echo "modelscan==0.8.8" ;;
    fickling) echo "fickling==0.1.12 typing_extensions==4.15.0" ;;
    *) return 1 ;;
    esac
}
# not_pinned PEER...: prints the pins of these peers that are not installed at their version.
not_pinned() {
    want=""
    for p in "$@"; do want="$want $(pins_for "$p")"; done
    # shellcheck disable=SC2086
    "$py" -c '
import sys
from importlib import metadata
for spec in sys.argv[1:]:
    name, version = spec.split("==")
    try:
        have = metadata.version(name)
    except metadata.PackageNotFoundError:
        have = None
    if have != version:
        print(spec)
' $want
}
for p in $peers; do
    pins_for "$p" >/dev/null || {
        echo "run.sh: unknown peer '$p' in BENCH_PEERS (picklescan, modelscan, fickling)" >&2
        exit 2
    }
done
# shellcheck disable=SC2086
if [ -n "$(not_pinned $peers)" ]; then
    pyver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    peer_dir=${BENCH_PEER_DIR:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/ptc-bench-verify/python$pyver}
    PYTHONPATH="$peer_dir${PYTHONPATH:+:$PYTHONPATH}"
    export PYTHONPATH
    # shellcheck disable=SC2086
    need=$(not_pinned $peers)
    if [ -n "$need" ] && [ "${BENCH_PIP_INSTALL:-1}" != 0 ]; then
        echo "installing into $peer_dir with $py -m pip:" $need
        mkdir -p "$peer_dir"
        # One peer at a time, so that a peer pip cannot install for this Python (modelscan 0.8.8
        # wants Python < 3.13) leaves out that peer only. As .ci/run installs torch, a Debian pip
        # may want --break-system-packages.
        kept=""
        for p in $peers; do
            pins=$(pins_for "$p")
            # shellcheck disable=SC2086
            if [ -z "$(not_pinned "$p")" ] ||
                PYTHONPATH=$orig_pythonpath "$py" -m pip install -q --upgrade --target "$peer_dir" \
                    $pins 2>/dev/null ||
                PYTHONPATH=$orig_pythonpath "$py" -m pip install -q --upgrade --target "$peer_dir" \
                    --break-system-packages $pins; then
                kept="$kept $p"
            else
                echo "run.sh: pip could not install $pins for $py: $p is left out" >&2
                left_out="$left_out${left_out:+,}$p"
            fi
        done
        peers=$kept
    elif [ -n "$need" ]; then
        echo "run.sh: not at the pinned versions (BENCH_PIP_INSTALL=0, using what is there):" $need >&2
    fi
fi
for p in $peers; do
    if ! "$py" -c "import $p" 2>/dev/null; then
        echo "run.sh: $py cannot import $p" >&2
        exit 1
    fi
done
# shellcheck disable=SC2086
"$py" -c '
import sys
from importlib import metadata
for p in sys.argv[1:]:
    print("peer: %s %s from %s" % (p, metadata.version(p), metadata.distribution(p).locate_file("")))
' $peers

# ---- ptc -----------------------------------------------------------------------------------------
# The binary itself, not libtool's wrapper script in the build tree: a shell that execs the binary
# would be timed with every per-file run.
ptc=${PTC:-$top_builddir/tools/ptc}
ptc_exe=""
ptc_libpath=""
if [ -x "$ptc" ] && "$ptc" help verify >/dev/null 2>&1; then
    ptc_exe=$ptc
    if [ -x "$top_builddir/libtool" ] && head -n 3 "$ptc" 2>/dev/null | grep -q 'wrapper script'; then
        # libtool --mode=execute swaps the wrapper for the binary and sets the library path.
        # shellcheck disable=SC2016
        resolved=$("$top_builddir/libtool" --mode=execute sh -c \
            'printf "%s\n%s\n" "$1" "${LD_LIBRARY_PATH:-}"' sh "$ptc") || resolved=""
        exe=$(printf '%s\n' "$resolved" | sed -n 1p)
        if [ -n "$exe" ] && [ -x "$exe" ]; then
            ptc_exe=$exe
            ptc_libpath=$(printf '%s\n' "$resolved" | sed -n 2p)
        fi
    fi
    echo "ptc: $ptc_exe ($("$ptc" --version 2>&1 | head -n 1))"
else
    echo "run.sh: \`$ptc verify\` is not built: only the peers are measured" >&2
fi

# The torch-written fixtures as make check lays them out (the resnet18 files are packed in the tree).
sh "$top_srcdir/testdata/torch/unpack.sh" "$top_srcdir/testdata/torch" "$top_builddir/testdata/torch"

base=${BENCH_TMPDIR:-${TMPDIR:-/tmp}}
tmp=$(mktemp -d "$base/ptc-bench-verify.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

parts=${BENCH_VERIFY_PARTS:-verdicts speed}
case " $parts " in
*" verdicts "*) ;;
*) if [ -n "${BENCH_OUT:-}" ]; then : >"$BENCH_OUT"; fi ;;
esac
case " $parts " in
*" verdicts "*)
# shellcheck disable=SC2086
"$py" "$here/compare.py" run --srcdir "$top_srcdir" --builddir "$top_builddir" --work "$tmp" \
    --ptc "$ptc_exe" --ptc-libpath "$ptc_libpath" --repeat "$repeat" --timeout "$timeout" \
    --mem-mb "$mem_mb" --peers "$(echo $peers | tr ' ' ',')" --left-out "$left_out" \
    --out "${BENCH_OUT:-}" --tsv "${BENCH_TSV:-}" || {
    status=$?
    for log in "$tmp"/*.stderr; do
        [ -s "$log" ] || continue
        echo "--- $log (last lines)" >&2
        tail -n 20 "$log" >&2
    done
    exit "$status"
}
;;
esac

# ---- throughput on the two corpora of the targets (speed.py): pickle-heavy and mixed ----------
# torch writes the corpora under the caller's PYTHONPATH (the peers' folder may hold a numpy
# that the installed torch cannot use); picklescan runs under the peers' PYTHONPATH.
case " $parts " in
*" speed "*)
    if [ -z "$ptc_exe" ]; then
        echo "run.sh: ptc is not built: no throughput against the targets" >&2
    elif ! "$py" -c "import picklescan" 2>/dev/null; then
        echo "run.sh: $py cannot import picklescan: no throughput against the targets" >&2
    else
        peer_path=${PYTHONPATH:-}
        PYTHONPATH=$orig_pythonpath "$py" "$here/speed.py" run --srcdir "$top_srcdir" \
            --builddir "$top_builddir" --work "$tmp" --ptc "$ptc_exe" --ptc-libpath "$ptc_libpath" \
            --repeat "$repeat" --timeout "$timeout" --mem-mb "$mem_mb" --out "${BENCH_OUT:-}" \
            --peer-path "$peer_path"
    fi
    ;;
esac

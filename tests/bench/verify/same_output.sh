#!/bin/sh
# same_output.sh - two builds of `ptc verify` must say the same thing: `ptc verify --json` of every
# file, one process per file and then one process over all of them, compared byte for byte with
# the exit status. Run it before and after a change to the verifier (a speed change must change
# no finding, offset or status).
#
#   tests/bench/verify/same_output.sh OLD_PTC NEW_PTC [FILE_OR_FOLDER...]
#
# OLD_PTC and NEW_PTC are ptc executables (a build tree's tools/ptc wrapper is fine). Without
# files: the hostile corpus, testdata/ and shared/reference/vectors where there is one. Prints
# every file whose output differs and the count; exit status 0 when none differs, 1 otherwise.
set -u
here=$(cd "$(dirname "$0")" && pwd)
top_srcdir=${top_srcdir:-$(cd "$here/../../.." && pwd)}
[ $# -ge 2 ] || { echo "usage: $0 OLD_PTC NEW_PTC [FILE_OR_FOLDER...]" >&2; exit 2; }
old=$1
new=$2
shift 2
if [ $# -eq 0 ]; then
    set -- "$top_srcdir/testdata"
    [ -d "$top_srcdir/shared/reference/vectors" ] && set -- "$@" "$top_srcdir/shared/reference/vectors"
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ptc-same.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
find "$@" -type f | LC_ALL=C sort >"$tmp/list"
n=0
bad=0
while IFS= read -r f; do
    n=$((n + 1))
    "$old" verify --json "$f" >"$tmp/old" 2>&1
    ro=$?
    "$new" verify --json "$f" >"$tmp/new" 2>&1
    rn=$?
    if [ "$ro" != "$rn" ] || ! cmp -s "$tmp/old" "$tmp/new"; then
        bad=$((bad + 1))
        echo "differs: $f (exit $ro, then $rn)"
    fi
done <"$tmp/list"
# One process over every file: what a file leaves behind must not change the next one's report.
tr '\n' '\0' <"$tmp/list" | xargs -0 "$old" verify --json >"$tmp/old" 2>&1
ro=$?
tr '\n' '\0' <"$tmp/list" | xargs -0 "$new" verify --json >"$tmp/new" 2>&1
rn=$?
if [ "$ro" != "$rn" ] || ! cmp -s "$tmp/old" "$tmp/new"; then
    bad=$((bad + 1))
    echo "differs: one process over all $n files (exit $ro, then $rn)"
fi
echo "same_output: $n files, $bad differ"
[ "$bad" -eq 0 ]

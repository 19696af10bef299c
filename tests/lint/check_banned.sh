#!/bin/sh
# check_banned.sh - the library's source hygiene: banned functions, then formatting.
#
# 1. Banned functions (always a hard failure). lib/ must not call
#      sprintf vsprintf strcpy strcat atoi atol gets   (unbounded or unchecked: use snprintf,
#                                                       ptc__buf_*, memcpy with checked lengths,
#                                                       strtoll with its end pointer)
#      exit abort                                      (the library never ends the process; the
#                                                       one abort allowed is ptc__assert_fail in
#                                                       lib/base/error.c, for programmer errors)
#      malloc calloc realloc free                      (every allocation goes through the
#                                                       replaceable allocator; only
#                                                       lib/base/alloc.c may call the C library)
#      getenv secure_getenv ptc__getenv                (the library reads the environment only to
#                                                       discover modules and launchers, in
#                                                       lib/base/env.[ch], plugin.c, module.c and
#                                                       lib/dist/comm.c; anything else a caller
#                                                       tunes is a parameter: lib/base/env.h)
#    Matching is on whole words followed by '(', after comments and string and character
#    literals are removed, so ptc__malloc(, "free(" in a message and ops->free( are fine.
# 2. clang-format --dry-run over the C and CUDA sources of lib/ tools/ tests/ examples/ kernels/:
#    a file clang-format 14 would change fails (see below). CLANG_FORMAT selects the binary
#    (default: clang-format-14, then clang-format).
#
# Run by make check, or by hand: sh tests/lint/check_banned.sh  (top_srcdir defaults to this tree).

here=$(cd "$(dirname "$0")" && pwd)
: "${top_srcdir:=$(cd "$here/../.." && pwd)}"
cd "$top_srcdir" || exit 1

status=0

# ---- 1. banned functions -----------------------------------------------------------------------
lib_files=$(find lib -type f \( -name '*.c' -o -name '*.h' \) | LC_ALL=C sort)
if [ -z "$lib_files" ]; then
    echo "FAIL: no C sources under $top_srcdir/lib"
    exit 1
fi

# The awk program strips comments and literals (keeping line numbers; block comments may span
# lines), then reports each banned call as "file:line: name(  <source line>".
# shellcheck disable=SC2086 # the file list is split on purpose; paths under lib/ have no spaces
hits=$(awk '
FNR == 1 { in_comment = 0; in_assert = 0 }
{
    line = $0; out = ""; i = 1; n = length(line)
    while (i <= n) {
        c = substr(line, i, 1); c2 = substr(line, i, 2)
        if (in_comment) {
            if (c2 == "*/") { in_comment = 0; i += 2 } else i++
            continue
        }
        if (c2 == "/*") { in_comment = 1; out = out " "; i += 2; continue }
        if (c2 == "//") break
        if (c == "\"" || c == "\047") {
            # Skip to the matching quote, honouring backslash escapes.
            q = c; i++
            while (i <= n) {
                d = substr(line, i, 1)
                if (d == "\\") { i += 2; continue }
                i++
                if (d == q) break
            }
            out = out q q
            continue
        }
        out = out c; i++
    }

    # The body of ptc__assert_fail in lib/base/error.c may call abort().
    is_error_c = FILENAME ~ /(^|\/)lib\/base\/error\.c$/
    if (is_error_c && out ~ /^[A-Za-z].*[^A-Za-z0-9_]ptc__assert_fail[ \t]*\(/ && out !~ /;[ \t]*$/)
        in_assert = 1

    banned = "sprintf|vsprintf|strcpy|strcat|atoi|atol|gets|exit|abort"
    if (FILENAME !~ /(^|\/)lib\/base\/alloc\.c$/)
        banned = banned "|malloc|calloc|realloc|free"
    if (FILENAME !~ /(^|\/)lib\/(base\/(env\.[ch]|plugin\.c|module\.c)|dist\/comm\.c)$/)
        banned = banned "|getenv|secure_getenv|ptc__getenv"
    rest = out
    while (match(rest, "(^|[^A-Za-z0-9_.>])(" banned ")[ \t]*\\(")) {
        call = substr(rest, RSTART, RLENGTH)
        sub(/^[^A-Za-z]/, "", call)
        sub(/[ \t]*\($/, "", call)
        rest = substr(rest, RSTART + RLENGTH)
        if (call == "abort" && in_assert)
            continue
        printf "%s:%d: %s(  %s\n", FILENAME, FNR, call, $0
    }

    if (in_assert && out ~ /^}/)
        in_assert = 0
}' $lib_files)

if [ -n "$hits" ]; then
    echo "FAIL: banned functions in lib/:"
    echo "$hits"
    status=1
else
    echo "ok: no banned functions in $(echo "$lib_files" | wc -l | tr -d ' ') files under lib/"
fi

# ---- 2. formatting -----------------------------------------------------------------------------
# The whole tree was formatted once with clang-format 14 (Debian bookworm's) and is kept so: a C or
# CUDA file under lib/ tools/ tests/ examples/ kernels/ that clang-format 14 would change fails
# the check. Other major versions format some constructs differently, so with them the files are
# only listed. Without clang-format the check fails in CI (CI=true: .ci/run installs it) and is
# reported as not done elsewhere.
format_bin=
if [ -n "$CLANG_FORMAT" ]; then
    format_bin=$CLANG_FORMAT
elif command -v clang-format-14 >/dev/null 2>&1; then
    format_bin=clang-format-14
elif command -v clang-format >/dev/null 2>&1; then
    format_bin=clang-format
fi

if [ ! -f .clang-format ]; then
    echo "FAIL: no .clang-format at the top of the tree"
    status=1
elif [ -z "$format_bin" ]; then
    if [ "$CI" = true ]; then
        echo "FAIL: clang-format is not installed (CI installs clang-format)"
        status=1
    else
        echo "note: formatting not checked: clang-format is not installed"
    fi
else
    major=$("$format_bin" --version | sed -n 's/.*clang-format version \([0-9]*\).*/\1/p')
    unformatted=
    nfiles=0
    for f in $(find lib tools tests examples kernels -type f \( -name '*.c' -o -name '*.h' -o \
        -name '*.cu' \) 2>/dev/null | LC_ALL=C sort); do
        nfiles=$((nfiles + 1))
        if ! "$format_bin" --dry-run -Werror "$f" >/dev/null 2>&1; then
            unformatted="$unformatted $f"
        fi
    done
    if [ -z "$unformatted" ]; then
        echo "ok: $nfiles files match .clang-format ($format_bin, version $major)"
    else
        count=$(echo "$unformatted" | wc -w | tr -d ' ')
        echo "$count of $nfiles files differ from .clang-format (see: $format_bin --dry-run FILE," \
            "fix: $format_bin -i FILE):"
        for f in $unformatted; do echo "  $f"; done
        if [ "$major" = 14 ]; then
            echo "FAIL: formatting"
            status=1
        else
            echo "note: clang-format $major is not the tree's 14: reported only"
        fi
    fi
fi

exit $status

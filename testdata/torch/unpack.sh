#!/bin/sh
# unpack.sh SRC OUT - lays out the checkpoints written by real PyTorch as the tests read them.
#
# SRC is testdata/torch of the source tree, OUT testdata/torch of the build tree; `make check` runs
# this first (target torch-fixtures). The three resnet18 files (44.8 MB each, a few hundred KB
# once gzipped) are kept in the tree as SRC/vX.Y/NAME.gz; each is unpacked to OUT/vX.Y/NAME, whose
# SHA-256 must be the one SRC/packed.sha256 lists for vX.Y/NAME, or this fails, naming both hashes,
# and leaves no file under that name. A file unpacked and checked by an earlier run is kept while it
# is newer than its .gz and packed.sha256 (else it is hashed again, and kept if right).
# Every other file of SRC/vX.Y/ is linked into OUT/vX.Y/, so that OUT/vX.Y/ is the whole folder as
# gen_fixtures.py wrote it (nothing to link when OUT is SRC, an in-tree build).
#
# unpack.sh --clean SRC OUT removes what an earlier run made in OUT, and nothing else.
# Needs gzip and sha256sum (or shasum -a 256). Exit status 0, or 1 with the reason on stderr.
set -u

clean=0
if [ "${1:-}" = --clean ]; then
    clean=1
    shift
fi
if [ $# -ne 2 ]; then
    echo "usage: $0 [--clean] SRC OUT" >&2
    exit 1
fi
die() {
    echo "unpack.sh: $*" >&2
    exit 1
}
src=$(cd "$1" && pwd) || die "no folder $1"
sums=$src/packed.sha256
[ -f "$sums" ] || die "$sums is missing"
if [ $clean -eq 0 ]; then
    mkdir -p "$2" || die "cannot create $2"
elif [ ! -d "$2" ]; then
    exit 0
fi
out=$(cd "$2" && pwd) || die "no folder $2"

if command -v sha256sum >/dev/null 2>&1; then
    sha256() { sha256sum <"$1" | cut -d' ' -f1; }
elif command -v shasum >/dev/null 2>&1; then
    sha256() { shasum -a 256 <"$1" | cut -d' ' -f1; }
else
    die "neither sha256sum nor shasum is installed: cannot check the unpacked fixtures"
fi

for dir in "$src"/v*/; do
    dir=${dir%/}
    sub=${dir##*/}
    if [ $clean -eq 1 ]; then
        [ -d "$out/$sub" ] || continue
        for f in "$dir"/*; do
            name=${f##*/}
            case $name in
            *.gz) rm -f "$out/$sub/${name%.gz}" "$out/$sub/${name%.gz}.tmp" ;;
            *) [ "$out" = "$src" ] || { [ -L "$out/$sub/$name" ] && rm -f "$out/$sub/$name"; } ;;
            esac
        done
        [ "$out" = "$src" ] || rmdir "$out/$sub" 2>/dev/null
        continue
    fi
    mkdir -p "$out/$sub" || die "cannot create $out/$sub"
    for f in "$out/$sub"/*; do # links left by an earlier run to files since removed
        [ -L "$f" ] && [ ! -e "$f" ] && rm -f "$f"
    done
    for f in "$dir"/*; do
        name=${f##*/}
        case $name in
        *.gz) ;;
        *)
            # A file that also has a packed form is the packed form's to make.
            [ "$out" = "$src" ] || [ -e "$f.gz" ] || ln -sf "$f" "$out/$sub/$name" ||
                die "cannot link $f into $out/$sub"
            continue
            ;;
        esac
        name=${name%.gz}
        dst=$out/$sub/$name
        want=$(awk -v n="$sub/$name" '$2 == n || $2 == "*" n { print $1 }' "$sums")
        case $want in
        [0-9a-f]*) [ ${#want} -eq 64 ] || want= ;;
        *) want= ;;
        esac
        [ -n "$want" ] || die "$sums lists no SHA-256 for $sub/$name (one line: HASH  $sub/$name)"
        # Kept: a file this script unpacked and checked since the .gz and the list last changed
        # (rehashing 134 MB on every make check would cost a second), or one with the right hash.
        if [ -f "$dst" ] && [ ! -L "$dst" ]; then
            [ -n "$(find "$dst" -newer "$f" -newer "$sums" 2>/dev/null)" ] && continue
            [ "$(sha256 "$dst")" = "$want" ] && touch "$dst" && continue
        fi
        rm -f "$dst" "$dst.tmp"
        gzip -dc "$f" >"$dst.tmp" || { rm -f "$dst.tmp"; die "gzip -dc $f failed"; }
        got=$(sha256 "$dst.tmp")
        if [ "$got" != "$want" ]; then
            rm -f "$dst.tmp"
            die "$f unpacks to SHA-256 $got, but $sums wants $want for $sub/$name:" \
                "not the file the tests and manifests were written for"
        fi
        mv -f "$dst.tmp" "$dst" || die "cannot write $dst"
    done
done
if [ $clean -eq 1 ] && [ "$out" != "$src" ]; then
    rmdir "$out" "${out%/*}" 2>/dev/null
fi
exit 0

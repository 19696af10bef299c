#!/bin/sh
# run.sh - the interop tier of make check for ptc's writer: files ptc writes, read by real PyTorch.
#
#   roundtrip.py      every torch-written fixture rewritten by ptc loads equal in torch
#   state_dicts.py    resnet18 state dicts load into torchvision; training resumes bit-identically
#   byte_identity.py  ptc writes the same bytes as torch.save (serialization id aside)
#   kill_save.py      a save killed by SIGKILL leaves the old or the new file, never a mix
#
# Each script's output is printed; the status is 1 if any failed, 77 (skipped) only when
# $TORCH_PYTHON (default python3) cannot import torch or has one older than 2.6, 0 otherwise.
# kill_save.py needs about 1 GiB free in $TMPDIR (default /tmp). A script that needs
# torchvision and cannot import it reports SKIP and does not fail the tier. make check sets
# top_srcdir and top_builddir (absolute); by hand both default to this source tree.
# INTEROP_SCRIPTS="roundtrip byte_identity" runs a subset.

here=$(cd "$(dirname "$0")" && pwd) || exit 99
: "${top_srcdir:=$(cd "$here/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
export top_srcdir top_builddir

py=${TORCH_PYTHON:-}
[ -n "$py" ] && [ "$py" != ":" ] || py=python3
if ! why=$("$py" -c 'import torch' 2>&1); then
    echo "SKIP: '$py' cannot import torch (set TORCH_PYTHON, or configure --with-torch=PYTHON):"
    echo "$why" | tail -n 1
    exit 77
fi
# The tier checks against what torch 2.6 reads and writes (mmap loading, uint16, the 2.6 container).
ver=$("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null)
case $ver in
[01].* | 2.[0-5] | 2.[0-5].* | 2.[0-5][!0-9]*)
    echo "SKIP: '$py' has torch $ver; this tier needs torch 2.6 or later (set TORCH_PYTHON)"
    exit 77
    ;;
esac
echo "interop: torch $ver under $("$py" -c 'import sys; print("Python", sys.version.split()[0])')"

scripts=${INTEROP_SCRIPTS:-"roundtrip state_dicts byte_identity kill_save check_safetensors check_casts check_sampler check_backend_ref train_golden ddp_golden"}
failed= skipped= passed=
for s in $scripts; do
    echo
    echo "=== $s.py"
    "$py" "$top_srcdir/tests/interop/$s.py"
    rc=$?
    case $rc in
    0) passed="$passed $s" ;;
    77) skipped="$skipped $s" ;;
    *) echo "=== $s.py exited $rc"; failed="$failed $s" ;;
    esac
done

echo
echo "interop: passed:${passed:- none}; skipped:${skipped:- none}; failed:${failed:- none}"
[ -z "$failed" ] || exit 1
exit 0

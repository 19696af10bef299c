#!/bin/sh
# run.sh - the distributed tier of make check: lib/dist's unit test under mpirun, over shared
# memory and again over TCP only (standing in for processes on separate machines).
#
#   mpirun -np 2 test_dist ref,dnnl                 the collectives and the DDP reducer
#   mpirun -np 2 --mca btl tcp,self test_dist dnnl  the same over TCP
#   mpirun -np 3 test_dist dnnl                     an odd world (reduction order is MPI's)
#
# Exit 77 (skipped) when ptc was built without MPI or mpirun is missing; CI has both.
here=$(cd "$(dirname "$0")" && pwd) || exit 99
: "${top_srcdir:=$(cd "$here/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/dist/mpi_env.sh" || exit 99
test_dist=$top_builddir/tests/dist/test_dist
[ -x "$test_dist" ] || { echo "SKIP: ptc was built without MPI (no tests/dist/test_dist)"; exit 77; }
status=0
run() { # run LABEL MPIRUN-ARGS...
    label=$1
    shift
    echo "=== $label: mpirun $*"
    # shellcheck disable=SC2086
    # the limit is only there so that a hang fails instead of blocking make check (the ref
    # backend under the sanitizer build takes minutes)
    timeout 1500 $MPIRUN_CMD "$@"
    rc=$?
    [ $rc -eq 124 ] && echo "=== $label: no result after 1500 s"
    [ $rc -eq 0 ] || { echo "=== $label: FAILED (exit $rc)"; status=1; }
}
# The reducer on ref (the oracle backend, slow) once; the other runs on dnnl (ref when absent).
run "2 ranks, shared memory" -np 2 "$test_dist" ref,dnnl
run "2 ranks, TCP only" -np 2 --mca btl tcp,self "$test_dist" dnnl
run "3 ranks" -np 3 "$test_dist" dnnl
exit $status

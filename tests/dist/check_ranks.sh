#!/bin/sh
# Checks that every rank of `mpirun -np W ptc train` (2 and 3 ranks, ref and dnnl) holds the same
# parameters and momentum buffers, bit for bit. The work is done by check_ranks.py.
# Exit status: 0 all held, 1 a failure, 77 skipped (no mpirun, no MPI in ptc, no Python 3).
here=$(cd "$(dirname "$0")" && pwd) || exit 99
: "${top_srcdir:=$(cd "$here/../.." && pwd)}"
. "$top_srcdir/tests/dist/mpi_env.sh" || exit 99
export MPIRUN_CMD
exec sh "$top_srcdir/tests/fixtures/run_python.sh" ../dist/check_ranks.py "$@"

#!/bin/sh
# Checks multi-process `ptc train` under mpirun: output from rank 0 alone, sharded evaluation,
# --nproc, a killed rank ending the job, resume after it, one rank failing alone, world-size
# mismatches. The work is done by check_ddp_cli.py.
# Exit status: 0 all held, 1 a failure, 77 skipped (no mpirun, no MPI in ptc, no Python 3).
here=$(cd "$(dirname "$0")" && pwd) || exit 99
: "${top_srcdir:=$(cd "$here/../.." && pwd)}"
. "$top_srcdir/tests/dist/mpi_env.sh" || exit 99
export MPIRUN_CMD
exec sh "$top_srcdir/tests/fixtures/run_python.sh" ../dist/check_ddp_cli.py "$@"

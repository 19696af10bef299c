# mpi_env.sh - sourced by the distributed tests: finds mpirun and sets MPIRUN_CMD to it with the
# options a test on one machine needs (several ranks per core; root is allowed in CI containers),
# and the sanitizer options MPI needs under an ASan build. Exits 77 when mpirun is missing.
MPIRUN=${MPIRUN:-$(command -v mpirun)}
if [ -z "$MPIRUN" ]; then
    echo "SKIP: mpirun not found (apt-get install openmpi-bin)"
    exit 77
fi
MPIRUN_CMD="$MPIRUN --oversubscribe --bind-to none"
[ "$(id -u)" = 0 ] && MPIRUN_CMD="$MPIRUN_CMD --allow-run-as-root"
# OpenMPI keeps allocations for the life of the process and frees them at exit only in part;
# those are its own, so LeakSanitizer is told to ignore them (ptc's own leaks still fail). For
# the suppressions to match, a leak's stack must name its library: MPI's components stay mapped
# after MPI_Finalize, and stacks are unwound fully (OpenMPI is built without frame pointers).
LSAN_OPTIONS="suppressions=$top_srcdir/tests/dist/lsan-mpi.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
ASAN_OPTIONS="fast_unwind_on_malloc=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
OMPI_MCA_mca_base_component_disable_dlclose=1
export LSAN_OPTIONS ASAN_OPTIONS OMPI_MCA_mca_base_component_disable_dlclose
# Shared-memory transports look for a writable session folder; keep it inside the test's TMPDIR.
export OMPI_MCA_orte_tmpdir_base="${TMPDIR:-/tmp}"

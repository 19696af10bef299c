/*
 * env.h - the one place where libptc reads the environment. Nothing else in lib/ calls getenv;
 * modules reach this through their host table (lib/base/plugin.h). Only discovery reads it:
 * where the modules are (lib/base/plugin.c) and what a launcher says about this process
 * (lib/dist/comm.c). Everything else a caller may tune is a parameter (PTC_DNNL_WINOGRAD and
 * CUDA_VISIBLE_DEVICES are read by the ptc command, tools/, into ptc_train_params). The lint test
 * (tests/lint/check_banned.sh) fails on getenv or ptc__getenv anywhere else in lib/.
 *
 * Variables read:
 *   PTC_PLUGIN_PATH              ':'-separated directories searched for modules, instead of the
 *                                default places (lib/base/plugin.h)
 *   OMPI_COMM_WORLD_LOCAL_RANK,  the rank of this process among those of its machine, set by
 *   SLURM_LOCALID, MPI_LOCALRANKID   mpirun (OpenMPI), srun and MPICH/Hydra: picks the GPU
 *   OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_SIZE, MPI_LOCALNRANKS
 *                                set by MPI launchers: the process was started by one
 */
#ifndef PTC_BASE_ENV_H
#define PTC_BASE_ENV_H

/* getenv, for the variables listed above. */
const char *ptc__getenv(const char *name);

/* This process's rank among the processes of its machine, from the launcher's variables; -1 when
 * no launcher set one. */
int ptc__env_local_rank(void);

#endif /* PTC_BASE_ENV_H */

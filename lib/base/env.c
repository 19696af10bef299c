/*
 * env.c - the one reader of the environment in libptc (the variables are listed in env.h).
 */
#include "base/env.h"

#include <errno.h>
#include <stdlib.h>

const char *ptc__getenv(const char *name)
{
    return getenv(name);
}

int ptc__env_local_rank(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID",
                                       "MPI_LOCALRANKID"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *v = ptc__getenv(vars[i]);
        if (!v || !*v)
            continue;
        char *end;
        errno = 0;
        long r = strtol(v, &end, 10);
        if (errno == 0 && *end == '\0' && r >= 0 && r < 1 << 20)
            return (int)r;
    }
    return -1;
}

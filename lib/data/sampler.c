/*
 * sampler.c - the random streams of the data layer (SplitMix64, specified in data.h) and the
 * sample order of torch.utils.data.distributed.DistributedSampler, plus the evaluation sharding.
 *
 * torch's DistributedSampler (torch/utils/data/distributed.py, unchanged from 1.x to 2.6):
 *
 *     if drop_last and n % world != 0: num_samples = ceil((n - world) / world)   # = floor(n/world)
 *     else:                            num_samples = ceil(n / world)
 *     total_size = num_samples * world
 *     indices = randperm(n) if shuffle else range(n)
 *     if not drop_last: pad with indices[:padding] when padding <= n, else with
 *                       (indices * ceil(padding / n))[:padding]       # entry i is indices[i % n]
 *     else:             indices = indices[:total_size]
 *     return indices[rank:total_size:world]
 *
 * In both cases entry i of the padded or truncated list is order[i mod n], so rank r's k-th index
 * is order[(r + k * world) mod n] for k < num_samples. (With drop_last and n < world every rank
 * gets nothing, as torch's ceil of a negative fraction gives 0.)
 */
#include "data/data.h"

#include <string.h>

static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void ptc__rng_init(ptc__rng *r, uint64_t tag, const uint64_t *words, int nwords)
{
    uint64_t s = mix(tag);
    for (int i = 0; i < nwords; i++)
        s = mix(s ^ words[i]);
    r->s = s;
}

uint64_t ptc__rng_next(ptc__rng *r)
{
    r->s += 0x9e3779b97f4a7c15ull;
    return mix(r->s);
}

uint64_t ptc__rng_below(ptc__rng *r, uint64_t bound)
{
    /* Rejecting the 2^64 mod bound smallest values leaves a whole number of copies of [0, bound):
     * no modulo bias. */
    uint64_t t = (0 - bound) % bound;
    for (;;) {
        uint64_t x = ptc__rng_next(r);
        if (x >= t)
            return x % bound;
    }
}

int64_t ptc__sampler_count(int64_t n, int world, bool drop_last)
{
    if (n < 0 || world < 1)
        return -1;
    return drop_last ? n / world : n / world + (n % world != 0);
}

static int new_indices(int64_t count, int64_t **out, ptc_error *err)
{
    uint64_t bytes;
    if (!ptc__mul_u64_ok((uint64_t)count, sizeof(int64_t), &bytes) || bytes > SIZE_MAX)
        return ptc__err(err, PTC_ENOMEM, "", -1, "%lld indices do not fit in memory",
                        (long long)count);
    *out = ptc__malloc((size_t)bytes);
    if (!*out)
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory for %lld indices",
                        (long long)count);
    return 0;
}

int ptc__sampler_indices(const ptc__sampler_params *p, uint64_t epoch, int64_t **out,
                         int64_t *count, ptc_error *err)
{
    if (!p || !out || !count)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc__sampler_indices: NULL argument");
    *out = NULL;
    *count = 0;
    if (p->n < 0 || p->world < 1 || p->rank < 0 || p->rank >= p->world)
        return ptc__err(err, PTC_EINVAL, "", -1,
                        "sampler: invalid n %lld, world %d, rank %d (need n >= 0, world >= 1, "
                        "0 <= rank < world)",
                        (long long)p->n, p->world, p->rank);
    int64_t num = ptc__sampler_count(p->n, p->world, p->drop_last);
    int64_t *idx = NULL;
    int rc = new_indices(num, &idx, err);
    if (rc < 0)
        return rc;
    if (!p->shuffle) {
        for (int64_t k = 0; k < num; k++)
            idx[k] = (p->rank + k * p->world) % p->n;
    } else {
        int64_t *perm = NULL;
        if ((rc = new_indices(p->n, &perm, err)) < 0) {
            ptc__free(idx);
            return rc;
        }
        for (int64_t i = 0; i < p->n; i++)
            perm[i] = i;
        ptc__rng rng;
        uint64_t words[2] = {p->seed, epoch};
        ptc__rng_init(&rng, PTC__RNG_TAG_SHUFFLE, words, 2);
        for (int64_t i = p->n - 1; i > 0; i--) {
            int64_t j = (int64_t)ptc__rng_below(&rng, (uint64_t)i + 1);
            int64_t t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
        for (int64_t k = 0; k < num; k++)
            idx[k] = perm[(p->rank + k * p->world) % p->n];
        ptc__free(perm);
    }
    *out = idx;
    *count = num;
    return 0;
}

int ptc__eval_shard(int64_t n, int world, int rank, int64_t **out, int64_t *count, ptc_error *err)
{
    if (!out || !count)
        return ptc__err(err, PTC_EINVAL, "", -1, "ptc__eval_shard: NULL argument");
    *out = NULL;
    *count = 0;
    if (n < 0 || world < 1 || rank < 0 || rank >= world)
        return ptc__err(err, PTC_EINVAL, "", -1, "eval shard: invalid n %lld, world %d, rank %d",
                        (long long)n, world, rank);
    int64_t num = n > rank ? (n - rank + world - 1) / world : 0;
    int64_t *idx = NULL;
    int rc = new_indices(num, &idx, err);
    if (rc < 0)
        return rc;
    for (int64_t k = 0; k < num; k++)
        idx[k] = rank + k * world;
    *out = idx;
    *count = num;
    return 0;
}

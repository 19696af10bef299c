/*
 * digest.c - SHA-256 through OpenSSL's libcrypto (EVP_Digest*), for the tensor digests of
 * `ptc inspect --hash` / ptc_tensor_sha256 and the fixture checks of the tests.
 *
 * Why libcrypto: it uses the processor's SHA extensions (SHA-NI) or its best vector code, about
 * 2 GB/s here where a portable C SHA-256 runs at 270-400 MB/s (tests/bench/hash/README.md).
 *
 * Why dlopen and not a link: libcrypto is 4.5 MB of relocations; linking it into libptc costs
 * every process that loads libptc about 0.6 ms at start (measured: 0.63 ms -> 1.24 ms for an
 * empty program), paid by `ptc inspect` of a small file that never hashes anything, whose whole
 * budget is a few milliseconds. So it is loaded on the first digest and kept (DESIGN.md decision
 * 11: heavy dependencies are reached at run time, a missing one is a clear error). configure
 * requires its headers (libssl-dev) and names the library's soname, PTC_LIBCRYPTO_SONAME.
 *
 * The digest method is fetched once (EVP_MD_fetch) and kept: an implicit fetch on every
 * EVP_DigestInit_ex would take the provider lock once per tensor, 20,000 times for a file of
 * small tensors. Thread-safe: loading happens once under pthread_once; each ptc__sha256 is one
 * caller's.
 */
#include "config.h"

#include "base/base.h"

#include <dlfcn.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <string.h>

/* The libcrypto functions used, resolved from the loaded library. */
static struct {
    __typeof__(&EVP_MD_fetch) md_fetch;
    __typeof__(&EVP_MD_CTX_new) ctx_new;
    __typeof__(&EVP_MD_CTX_free) ctx_free;
    __typeof__(&EVP_DigestInit_ex) init;
    __typeof__(&EVP_DigestUpdate) update;
    __typeof__(&EVP_DigestFinal_ex) final;
    EVP_MD *sha256;
    char why[256]; /* when sha256 is NULL: why libcrypto is unusable */
} crypto;

static pthread_once_t crypto_once = PTHREAD_ONCE_INIT;

static void crypto_load(void)
{
    dlerror();
    void *h = dlopen(PTC_LIBCRYPTO_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(crypto.why, sizeof crypto.why, "cannot load %s (%s)", PTC_LIBCRYPTO_SONAME,
                 e ? e : "no reason given");
        return;
    }
    /* Kept loaded for the life of the process: the fetched method points into it. */
    void *sym[6];
    static const char *const names[6] = {"EVP_MD_fetch",     "EVP_MD_CTX_new",
                                         "EVP_MD_CTX_free",  "EVP_DigestInit_ex",
                                         "EVP_DigestUpdate", "EVP_DigestFinal_ex"};
    for (int i = 0; i < 6; i++) {
        if (!(sym[i] = dlsym(h, names[i]))) {
            snprintf(crypto.why, sizeof crypto.why, "%s has no %s", PTC_LIBCRYPTO_SONAME, names[i]);
            return;
        }
    }
    /* POSIX lets a data pointer become a function pointer through memcpy (dlsym's own advice). */
    memcpy(&crypto.md_fetch, &sym[0], sizeof sym[0]);
    memcpy(&crypto.ctx_new, &sym[1], sizeof sym[1]);
    memcpy(&crypto.ctx_free, &sym[2], sizeof sym[2]);
    memcpy(&crypto.init, &sym[3], sizeof sym[3]);
    memcpy(&crypto.update, &sym[4], sizeof sym[4]);
    memcpy(&crypto.final, &sym[5], sizeof sym[5]);
    crypto.sha256 = crypto.md_fetch(NULL, "SHA256", NULL);
    if (!crypto.sha256)
        snprintf(crypto.why, sizeof crypto.why, "%s offers no SHA256 (EVP_MD_fetch failed)",
                 PTC_LIBCRYPTO_SONAME);
}

int ptc__sha256_init(ptc__sha256 *s, ptc_error *err)
{
    s->ctx = NULL;
    s->failed = false;
    pthread_once(&crypto_once, crypto_load);
    if (!crypto.sha256)
        return ptc__err(err, PTC_EUNSUPPORTED, "", -1,
                        "SHA-256 needs OpenSSL's libcrypto: %s (Debian: apt-get install libssl3)",
                        crypto.why);
    EVP_MD_CTX *c = crypto.ctx_new();
    if (!c)
        return ptc__err(err, PTC_ENOMEM, "", -1, "out of memory starting a SHA-256 digest");
    if (crypto.init(c, crypto.sha256, NULL) != 1) {
        crypto.ctx_free(c);
        return ptc__err(err, PTC_EUNSUPPORTED, "", -1, "libcrypto cannot start a SHA-256 digest");
    }
    s->ctx = c;
    return 0;
}

void ptc__sha256_update(ptc__sha256 *s, const void *data, size_t n)
{
    if (!s->ctx || s->failed || n == 0)
        return;
    if (crypto.update(s->ctx, data, n) != 1)
        s->failed = true;
}

int ptc__sha256_final(ptc__sha256 *s, uint8_t digest[32], ptc_error *err)
{
    int rc = 0;
    unsigned len = 0;
    if (!s->ctx)
        rc = ptc__err(err, PTC_EINVAL, "", -1, "SHA-256 digest finished without a start");
    else if (s->failed || crypto.final(s->ctx, digest, &len) != 1 || len != 32)
        rc = ptc__err(err, PTC_EUNSUPPORTED, "", -1, "libcrypto failed computing a SHA-256 digest");
    ptc__sha256_discard(s);
    return rc;
}

void ptc__sha256_discard(ptc__sha256 *s)
{
    if (s->ctx)
        crypto.ctx_free(s->ctx);
    s->ctx = NULL;
}

/*
 * test_base.c - the base layer: error names and messages, checked arithmetic, escaping and UTF-8
 * validation, SHA-256 against the FIPS 180-4 examples, arenas, buffers, budgets and the
 * replaceable allocator.
 */
#include "base/base.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "check.h"

static void hex(const uint8_t d[32], char out[65])
{
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static void test_errors(void)
{
    CHECK_STR(ptc_err_name(PTC_EFORMAT), "EFORMAT");
    CHECK_STR(ptc_err_name(PTC_EUNSAFE), "EUNSAFE");
    CHECK_STR(ptc_err_name(0), "OK");
    CHECK_STR(ptc_err_name(-999), "EUNKNOWN");
    CHECK_STR(ptc_strerror(PTC_ENOMEM), "out of memory");
    ptc_error err;
    CHECK_INT(ptc__err(&err, PTC_EFORMAT, "data.pkl", 0x1c4, "BINGET %u before BINPUT", 5u),
              PTC_EFORMAT);
    CHECK_STR(err.message, "data.pkl+0x1c4: BINGET 5 before BINPUT");
    CHECK_STR(err.member, "data.pkl");
    CHECK_INT(err.offset, 0x1c4);
    ptc__err(&err, PTC_EIO, "", -1, "cannot open");
    CHECK_STR(err.message, "cannot open");
    ptc__err_prefix(&err, "%s: ", "model.pth");
    CHECK_STR(err.message, "model.pth: cannot open");
    CHECK_INT(ptc__err(NULL, PTC_ELIMIT, "x", 1, "ignored"), PTC_ELIMIT);
}

static void test_arith(void)
{
    uint64_t u;
    int64_t i;
    CHECK(ptc__add_u64_ok(1, 2, &u) && u == 3);
    CHECK(!ptc__add_u64_ok(UINT64_MAX, 1, &u));
    CHECK(!ptc__mul_u64_ok(1ull << 32, 1ull << 32, &u));
    CHECK(!ptc__mul_i64_ok(0x4000000000000001LL, 4, &i));
    CHECK(ptc__mul_i64_ok(-3, 4, &i) && i == -12);
    CHECK(ptc__range_ok(10, 5, 15));
    CHECK(!ptc__range_ok(10, 6, 15));
    CHECK(!ptc__range_ok(UINT64_MAX, 2, 15));
    uint8_t b[8];
    ptc__put_le64(b, 0x0102030405060708ull);
    CHECK(ptc__le64(b) == 0x0102030405060708ull && b[0] == 8);
}

static void test_text(void)
{
    char out[64];
    CHECK_STR(ptc__escape(out, sizeof out, "a\x1b[31m\"b\\", 9, false), "a\\x1b[31m\\\"b\\\\");
    CHECK_STR(ptc__escape(out, sizeof out, "\xc3\xa9\xff", 3, true), "\xc3\xa9\\xff");
    CHECK_STR(ptc__escape(out, sizeof out, "\xc3\xa9", 2, false), "\\xc3\\xa9");
    /* C1 controls and bidi overrides are escaped even when UTF-8 is kept. */
    CHECK_STR(ptc__escape(out, sizeof out, "\xc2\x9b" "1m", 4, true), "\\xc2\\x9b1m");
    CHECK_STR(ptc__escape(out, sizeof out, "a\xe2\x80\xae" "b", 5, true), "a\\xe2\\x80\\xaeb");
    /* Invisible characters that make two texts look alike: zero-width space, a tag. */
    CHECK_STR(ptc__escape(out, sizeof out, "cpu\xe2\x80\x8b", 6, true), "cpu\\xe2\\x80\\x8b");
    CHECK_STR(ptc__escape(out, sizeof out, "a\xf3\xa0\x80\x81", 5, true), "a\\xf3\\xa0\\x80\\x81");
    CHECK_STR(ptc__escape(out, sizeof out, "\xf0\x9f\x98\x80", 4, true), "\xf0\x9f\x98\x80");
    char small[8];
    CHECK_STR(ptc__escape(small, sizeof small, "abcdefghijkl", 12, false), "abcd...");
    CHECK(ptc__utf8_valid((const uint8_t *)"h\xc3\xa9llo", 6));
    CHECK(!ptc__utf8_valid((const uint8_t *)"\xed\xa0\x80", 3));     /* surrogate */
    CHECK(!ptc__utf8_valid((const uint8_t *)"\xc0\x80", 2));         /* overlong NUL */
    CHECK(!ptc__utf8_valid((const uint8_t *)"\xf4\x90\x80\x80", 4)); /* beyond U+10FFFF */
    CHECK(!ptc__utf8_valid((const uint8_t *)"\xe2\x82", 2));         /* truncated */
}

static void test_sha256(void)
{
    static const struct {
        const char *msg, *digest;
    } v[] = {
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
    };
    for (size_t k = 0; k < sizeof v / sizeof *v; k++) {
        ptc__sha256 s;
        uint8_t d[32];
        char h[65];
        ptc__sha256_init(&s);
        /* Feed byte by byte to exercise the block buffering. */
        for (size_t i = 0; i < strlen(v[k].msg); i++)
            ptc__sha256_update(&s, v[k].msg + i, 1);
        ptc__sha256_final(&s, d);
        hex(d, h);
        CHECK_STR(h, v[k].digest);
    }
    /* One million 'a' in uneven pieces. */
    char *a = malloc(1000000);
    memset(a, 'a', 1000000);
    ptc__sha256 s;
    uint8_t d[32];
    char h[65];
    ptc__sha256_init(&s);
    ptc__sha256_update(&s, a, 333);
    ptc__sha256_update(&s, a + 333, 1000000 - 333);
    ptc__sha256_final(&s, d);
    hex(d, h);
    CHECK_STR(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    free(a);
}

/* ptc__crc32 must equal zlib's crc32 for every length, alignment, starting value and split. */
static void test_crc32(void)
{
    size_t n = 1 << 20;
    uint8_t *b = malloc(n + 64);
    uint32_t seed = 12345;
    for (size_t i = 0; i < n + 64; i++) {
        seed = seed * 1103515245u + 12345u;
        b[i] = (uint8_t)(seed >> 16);
    }
    int bad = 0;
    for (int t = 0; t < 4000; t++) {
        seed = seed * 1103515245u + 12345u;
        size_t off = seed % 64, len = (seed >> 8) % (t < 2000 ? 300 : 100000);
        uint32_t c0 = seed * 2654435761u;
        if ((uint32_t)crc32(c0, b + off, (uInt)len) != ptc__crc32(c0, b + off, len))
            bad++;
    }
    CHECK_INT(bad, 0);
    uint32_t inc = 0;
    for (size_t o = 0; o < n; o += 100003)
        inc = ptc__crc32(inc, b + o, n - o < 100003 ? n - o : 100003);
    CHECK(inc == (uint32_t)crc32(0, b, (uInt)n));
    CHECK(ptc__crc32(0, "123456789", 9) == 0xcbf43926u); /* the standard check value */
    free(b);
}

static size_t live_allocs;
static void *counting_realloc(void *ctx, void *p, size_t n)
{
    (void)ctx;
    if (n == 0) {
        if (p)
            live_allocs--;
        free(p);
        return NULL;
    }
    if (!p)
        live_allocs++;
    return realloc(p, n);
}

static void test_memory(void)
{
    ptc_set_allocator(counting_realloc, NULL);
    ptc__budget budget = {0, 300000};
    ptc__arena *a;
    CHECK_INT(ptc__arena_new(&a, &budget), 0);
    void *p1 = ptc__arena_alloc(a, 10), *p2 = ptc__arena_alloc(a, 10);
    CHECK(p1 && p2 && ((uintptr_t)p1 % 16) == 0 && ((uintptr_t)p2 % 16) == 0 && p1 != p2);
    CHECK(ptc__arena_alloc(a, 150000) != NULL); /* a large block of its own */
    CHECK(ptc__arena_alloc(a, 100000) == NULL); /* beyond the budget */
    CHECK(budget.used <= budget.limit);
    ptc__arena_free(a);
    CHECK_INT(budget.used, 0);
    ptc__buf b = {0};
    CHECK_INT(ptc__buf_printf(&b, "%d-%s", 42, "x"), 0);
    CHECK(b.len == 4 && memcmp(b.data, "42-x", 4) == 0);
    ptc__buf_free(&b);
    ptc_error err;
    ptc__budget small = {0, 100};
    CHECK_CODE(ptc__budget_take(&small, 101, &err, "data/0", -1), PTC_ELIMIT, &err);
    CHECK_INT(live_allocs, 0);
    ptc_set_allocator(NULL, NULL);
}

int main(void)
{
    test_errors();
    test_arith();
    test_text();
    test_sha256();
    test_crc32();
    test_memory();
    return check_exit("test_base");
}

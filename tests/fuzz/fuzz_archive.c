/*
 * fuzz_archive.c - fuzz target for the zip container parser alone (lib/archive).
 *
 * The input is treated as a whole file held in memory. It is opened with CRC verification (so every
 * record is read or inflated once), and when the container is accepted every record is read again
 * through ptc__zip_read and released. Beyond "no crash, no leak, no sanitizer report", the target
 * checks the guarantees archive.h documents for an accepted archive, so a parser that accepts a
 * file it describes inconsistently is a finding too: entries lie inside the file in the order
 * header < data <= end, stored records have equal sizes, names are unique (ptc__zip_find returns
 * the entry itself), in-place spans point into the input, every buffer ptc__zip_read charges to
 * the budget is given back by ptc__zip_release, and the budget is back to zero after a failed open
 * or a close.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "archive/archive.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A broken invariant is a bug in the library, not in the input: report it the way libFuzzer and
 * the replay program both recognise as a crash. */
#define FUZZ_REQUIRE(cond)                                                                         \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: invariant violated: %s\n", __FILE__, __LINE__, #cond);         \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* Large enough for any honest record of a 1 MiB input, small enough that a hostile size claim
 * hits the budget long before the fuzzer's RSS limit. */
#define FUZZ_BUDGET_BYTES (256ull << 20)

static void check_entry(ptc__zip *z, const ptc__zip_entry *e, const uint8_t *data, size_t size)
{
    FUZZ_REQUIRE(e != NULL && e->name != NULL && e->record != NULL);
    FUZZ_REQUIRE(e->record >= e->name && e->record <= e->name + strlen(e->name));
    FUZZ_REQUIRE(e->method == 0 || e->method == 8);
    FUZZ_REQUIRE(e->header_offset < e->data_offset);
    FUZZ_REQUIRE(e->data_offset <= e->end_offset && e->end_offset <= size);
    FUZZ_REQUIRE(e->comp_size <= e->end_offset - e->data_offset);
    if (e->method == 0)
        FUZZ_REQUIRE(e->comp_size == e->size);
    /* Names are unique, so an exact lookup must land on this very entry. */
    FUZZ_REQUIRE(ptc__zip_find(z, e->record) == e);

    const uint8_t *bytes = NULL;
    void *owned = NULL;
    ptc_error err;
    ptc__err_clear(&err);
    if (ptc__zip_read(z, e, &bytes, &owned, &err) < 0) {
        FUZZ_REQUIRE(err.code < 0);
        return;
    }
    FUZZ_REQUIRE(bytes != NULL || e->size == 0);
    if (owned == NULL && e->size > 0) {
        /* An in-place span must lie inside the caller's buffer, at the record's data. */
        FUZZ_REQUIRE(bytes == data + e->data_offset);
        FUZZ_REQUIRE(e->size <= size - e->data_offset);
    }
    if (e->size > 0) {
        /* Touch both ends so that a span shorter than claimed shows up under ASan. */
        volatile uint8_t sink = bytes[0];
        sink = bytes[e->size - 1];
        (void)sink;
    }
    ptc__zip_release(z, e, owned);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ptc__source *src = NULL;
    ptc__zip *z = NULL;
    ptc_limits limits;
    ptc__budget budget = {0, FUZZ_BUDGET_BYTES};
    ptc_error err;

    ptc_limits_default(&limits);
    ptc__err_clear(&err);
    if (ptc__source_open_memory(&src, data, size, &err) < 0)
        return 0;
    FUZZ_REQUIRE(ptc__source_size(src) == size);

    if (ptc__zip_open(&z, src, &limits, &budget, PTC_OPEN_VERIFY_CRC, &err) < 0) {
        /* Every failure carries its code and a message. */
        FUZZ_REQUIRE(err.code < 0 && err.message[0] != '\0');
        FUZZ_REQUIRE(budget.used == 0);
        ptc__source_close(src);
        return 0;
    }

    size_t n = ptc__zip_count(z);
    FUZZ_REQUIRE(n <= limits.max_records);
    FUZZ_REQUIRE(ptc__zip_prefix(z) != NULL);
    for (size_t i = 0; i < n; i++) {
        uint64_t used_before = budget.used;
        check_entry(z, ptc__zip_entry_at(z, i), data, size);
        FUZZ_REQUIRE(budget.used == used_before);
    }

    ptc__zip_close(z);
    /* Everything the zip charged, it gives back by close, on success and failure alike. */
    FUZZ_REQUIRE(budget.used == 0);
    ptc__source_close(src);
    return 0;
}

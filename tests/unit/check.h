/*
 * check.h - the few macros the unit tests use. A failed check prints both sides and the location,
 * and the test keeps going so that one run shows every failure; main returns check_exit().
 */
#ifndef PTC_TESTS_CHECK_H
#define PTC_TESTS_CHECK_H

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static int check_failures;
static int check_count;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        check_count++;                                                                             \
        if (!(cond)) {                                                                             \
            check_failures++;                                                                      \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
        }                                                                                          \
    } while (0)

#define CHECK_INT(a, b)                                                                            \
    do {                                                                                           \
        long long check_a_ = (long long)(a), check_b_ = (long long)(b);                            \
        check_count++;                                                                             \
        if (check_a_ != check_b_) {                                                                \
            check_failures++;                                                                      \
            fprintf(stderr, "%s:%d: CHECK_INT failed: %s == %s (%lld != %lld)\n", __FILE__,        \
                    __LINE__, #a, #b, check_a_, check_b_);                                         \
        }                                                                                          \
    } while (0)

#define CHECK_STR(a, b)                                                                            \
    do {                                                                                           \
        const char *check_a_ = (a), *check_b_ = (b);                                               \
        check_count++;                                                                             \
        if (!check_a_ || !check_b_ || strcmp(check_a_, check_b_) != 0) {                           \
            check_failures++;                                                                      \
            fprintf(stderr, "%s:%d: CHECK_STR failed: %s == %s (\"%s\" != \"%s\")\n", __FILE__,    \
                    __LINE__, #a, #b, check_a_ ? check_a_ : "(null)",                              \
                    check_b_ ? check_b_ : "(null)");                                               \
        }                                                                                          \
    } while (0)

static inline const char *check_msg_(const ptc_error *e)
{
    return e ? e->message : "";
}

/* An expected failure code, printing the error message when it differs. */
#define CHECK_CODE(rc, code, errp)                                                                 \
    do {                                                                                           \
        int check_rc_ = (rc);                                                                      \
        check_count++;                                                                             \
        if (check_rc_ != (code)) {                                                                 \
            check_failures++;                                                                      \
            fprintf(stderr, "%s:%d: CHECK_CODE failed: %s returned %s, expected %s (%s)\n",        \
                    __FILE__, __LINE__, #rc, ptc_err_name(check_rc_), ptc_err_name(code),          \
                    check_msg_(errp));                                                             \
        }                                                                                          \
    } while (0)

static inline int check_exit(const char *name)
{
    printf("%s: %d checks, %d failed\n", name, check_count, check_failures);
    return check_failures ? 1 : 0;
}

#endif

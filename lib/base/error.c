/*
 * error.c - status codes, their names and texts (generated from PTC_ERRNO_MAP), and the filling of
 * ptc_error. Messages have the form "<member>+0x<offset>: <text>", the form every layer uses.
 */
#include "base/base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *ptc_version(void)
{
    return PTC_VERSION_STRING;
}

const char *ptc_strerror(int code)
{
    switch (code) {
    case 0:
        return "success";
#define PTC_XX_TEXT(name, value, text)                                                             \
    case value:                                                                                    \
        return text;
        PTC_ERRNO_MAP(PTC_XX_TEXT)
#undef PTC_XX_TEXT
    default:
        return "unknown error";
    }
}

const char *ptc_err_name(int code)
{
    switch (code) {
    case 0:
        return "OK";
#define PTC_XX_NAME(name, value, text)                                                             \
    case value:                                                                                    \
        return "E" #name;
        PTC_ERRNO_MAP(PTC_XX_NAME)
#undef PTC_XX_NAME
    default:
        return "EUNKNOWN";
    }
}

void ptc__err_clear(ptc_error *err)
{
    if (!err)
        return;
    err->code = 0;
    err->offset = -1;
    err->member[0] = '\0';
    err->message[0] = '\0';
    err->flags = 0;
}

int ptc__verr(ptc_error *err, int code, const char *member, int64_t offset, const char *fmt,
              va_list ap)
{
    if (!err)
        return code;
    err->code = code;
    err->offset = offset;
    err->flags = 0;
    snprintf(err->member, sizeof err->member, "%s", member ? member : "");
    size_t n = 0;
    if (err->member[0] && offset >= 0)
        n = (size_t)snprintf(err->message, sizeof err->message, "%s+0x%llx: ", err->member,
                             (unsigned long long)offset);
    else if (err->member[0])
        n = (size_t)snprintf(err->message, sizeof err->message, "%s: ", err->member);
    else if (offset >= 0)
        n = (size_t)snprintf(err->message, sizeof err->message,
                             "offset 0x%llx: ", (unsigned long long)offset);
    if (n >= sizeof err->message)
        n = sizeof err->message - 1;
    vsnprintf(err->message + n, sizeof err->message - n, fmt, ap);
    return code;
}

int ptc__err(ptc_error *err, int code, const char *member, int64_t offset, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ptc__verr(err, code, member, offset, fmt, ap);
    va_end(ap);
    return code;
}

int ptc__err_stricter(ptc_error *err, int code, const char *member, int64_t offset, const char *fmt,
                      ...)
{
    va_list ap;
    va_start(ap, fmt);
    ptc__verr(err, code, member, offset, fmt, ap);
    va_end(ap);
    if (err)
        err->flags |= PTC_ERR_STRICTER;
    return code;
}

void ptc__verr_prefix(ptc_error *err, const char *fmt, va_list ap)
{
    if (!err)
        return;
    char head[256];
    vsnprintf(head, sizeof head, fmt, ap);
    size_t hn = strlen(head), cap = sizeof err->message;
    size_t on = strnlen(err->message, cap - 1);
    if (hn > cap - 1)
        hn = cap - 1;
    if (hn + on > cap - 1)
        on = cap - 1 - hn;
    memmove(err->message + hn, err->message, on);
    memcpy(err->message, head, hn);
    err->message[hn + on] = '\0';
}

void ptc__err_prefix(ptc_error *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ptc__verr_prefix(err, fmt, ap);
    va_end(ap);
}

void ptc__assert_fail(const char *expr, const char *file, int line)
{
    fprintf(stderr, "ptc: internal error: %s at %s:%d\n", expr, file, line);
    abort();
}

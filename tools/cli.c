/*
 * cli.c - helpers shared by the ptc subcommands: messages and exit codes, escaping of file text for
 * terminals, a growable string, number formatting and a progress line (see cli.h for contracts).
 *
 * The only mutable state is process-wide presentation state of the command (its name and the active
 * progress line); the library itself keeps none.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif

#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

static const char *g_prog = "ptc";
static cli_progress *g_active_progress;

/* ---- messages ------------------------------------------------------------------------------- */

void cli_set_prog(const char *prog)
{
    g_prog = prog ? prog : "ptc";
}

const char *cli_prog(void)
{
    return g_prog;
}

/* Starts a message line on stderr: "<prog>: ". */
static void message_start(void)
{
    if (g_active_progress)
        cli_progress_end(g_active_progress);
    fflush(stdout); /* keep the order of stdout and stderr when both go to one terminal */
    fprintf(stderr, "%s: ", g_prog);
}

static void verror(const char *fmt, va_list ap) CLI_PRINTF(1, 0);

static void verror(const char *fmt, va_list ap)
{
    message_start();
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

void cli_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    verror(fmt, ap);
    va_end(ap);
}

int cli_usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    verror(fmt, ap);
    va_end(ap);
    fprintf(stderr, "Try '%s --help' for more information.\n", g_prog);
    return CLI_EXIT_USAGE;
}

int cli_exit_code(int ptc_code)
{
    switch (ptc_code) {
    case PTC_OK:
        return CLI_EXIT_OK;
    case PTC_ENOMEM:
        return CLI_EXIT_NOMEM;
    case PTC_EIO:
        return CLI_EXIT_IO;
    case PTC_EINVAL:
        /* The tools validate what they pass, so an invalid argument can only come from the
         * command line (an empty path, say). */
        return CLI_EXIT_USAGE;
    default:
        /* FORMAT, UNSAFE, LIMIT, UNSUPPORTED, NOTFOUND, CRC, RANGE, NOTZIP, and any code appended
         * later: all are findings about the file, which is refused. */
        return CLI_EXIT_REFUSED;
    }
}

int cli_report(int code, const ptc_error *err)
{
    const char *msg = ptc_strerror(code);
    size_t len = strlen(msg);
    if (err && err->message[0] != '\0') {
        /* Bounded: the message is a fixed array, and a missing NUL must not run past it. */
        const char *end = memchr(err->message, '\0', sizeof err->message);
        msg = err->message;
        len = end ? (size_t)(end - msg) : sizeof err->message;
    }
    message_start();
    cli_escape_put(stderr, msg, len, CLI_ESC_RAW_BACKSLASH);
    fputc('\n', stderr);
    return cli_exit_code(code);
}

int cli_parse_budget(const char *arg, uint64_t *out)
{
    const char *p = arg;
    uint64_t v = 0;
    if (!(*p >= '0' && *p <= '9'))
        return cli_usage_error("--budget wants a byte count (4G, 512M, 1073741824), not '%s'", arg);
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
            return cli_usage_error("--budget %s is too large", arg);
        v = v * 10 + (uint64_t)(*p - '0');
    }
    unsigned shift = 0;
    if (*p) {
        const char *units = "KMGT";
        char c = *p >= 'a' && *p <= 'z' ? (char)(*p - 'a' + 'A') : *p; /* k m g t too */
        const char *u = c ? strchr(units, c) : NULL;
        if (!u || p[1] != '\0')
            return cli_usage_error("--budget wants a byte count (4G, 512M, 1073741824), not '%s'",
                                   arg);
        shift = 10u * (unsigned)(u - units + 1);
    }
    if (v == 0)
        return cli_usage_error("--budget must be more than 0 bytes");
    if (shift && v > (UINT64_MAX >> shift))
        return cli_usage_error("--budget %s is too large", arg);
    *out = v << shift;
    return CLI_EXIT_OK;
}

int cli_report_budget(int code, const ptc_error *err)
{
    int status = cli_report(code, err);
    if (code == PTC_ELIMIT && err && strstr(err->message, "work budget exceeded") &&
        strstr(err->message, " bytes "))
        cli_error("raise the byte budget with --budget BYTES (for example --budget 64G) if the "
                  "file is trusted");
    return status;
}

void cli_getopt_reset(void)
{
#ifdef __GLIBC__
    optind = 0; /* glibc: 0 also resets the scanner's internal state, not only the index */
#else
    optind = 1;
#endif
}

int cli_finish(int status)
{
    if (fflush(stdout) != 0 || ferror(stdout)) {
        int e = errno;
        cli_error("error writing standard output: %s", strerror(e));
        return status == CLI_EXIT_OK ? CLI_EXIT_IO : status;
    }
    return status;
}

/* ---- escaping ------------------------------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at s (n bytes available) with its code point in *cp; 0 when
 * invalid (overlong forms, surrogates and values past U+10FFFF are invalid). */
static size_t utf8_decode(const uint8_t *s, size_t n, uint32_t *cp)
{
    uint8_t c = s[0];
    size_t len;
    uint32_t v;
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        v = c & 0x1Fu;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        v = c & 0x0Fu;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        v = c & 0x07u;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        v = (v << 6) | (s[i] & 0x3Fu);
    }
    if ((len == 3 && v < 0x800) || (len == 4 && (v < 0x10000 || v > 0x10FFFF)))
        return 0;
    if (v >= 0xD800 && v <= 0xDFFF)
        return 0;
    *cp = v;
    return len;
}

/* Escapes s[0..n) with ptc_escape (or, for JSON, ptc_json_escape_hidden) and writes it to f: through
 * a stack buffer for short text, else one allocation; if that fails, piece by piece (a character
 * cut between two pieces is then escaped byte by byte: only under memory exhaustion). */
static void put_escaped(FILE *f, const void *s, size_t n, unsigned flags, int json)
{
    const char *p = s;
    char small[1024];
    size_t len = json ? ptc_json_escape_hidden(NULL, 0, p, n) : ptc_escape(NULL, 0, p, n, flags);
    char *out = len < sizeof small ? small : malloc(len + 1);
    if (!out) {
        for (size_t i = 0; i < n; i += 200) {
            size_t k = n - i < 200 ? n - i : 200;
            size_t m = json ? ptc_json_escape_hidden(small, sizeof small, p + i, k)
                            : ptc_escape(small, sizeof small, p + i, k, flags);
            fwrite(small, 1, m, f);
        }
        return;
    }
    if (json)
        ptc_json_escape_hidden(out, len + 1, p, n);
    else
        ptc_escape(out, len + 1, p, n, flags);
    fwrite(out, 1, len, f);
    if (out != small)
        free(out);
}

void cli_escape_put(FILE *f, const void *s, size_t n, unsigned flags)
{
    put_escaped(f, s, n, flags, 0);
}

void cli_put_json_text(FILE *f, const char *s, size_t n)
{
    put_escaped(f, s, n, 0, 1);
}

/* East Asian wide and emoji ranges, which terminals draw two columns wide (after Markus Kuhn's
 * wcwidth). Approximate by design: it only aligns columns. */
static int is_wide(uint32_t cp)
{
    return (cp >= 0x1100 && cp <= 0x115F) || (cp >= 0x2E80 && cp <= 0xA4CF && cp != 0x303F) ||
           (cp >= 0xAC00 && cp <= 0xD7A3) || (cp >= 0xF900 && cp <= 0xFAFF) ||
           (cp >= 0xFE30 && cp <= 0xFE4F) || (cp >= 0xFF00 && cp <= 0xFF60) ||
           (cp >= 0xFFE0 && cp <= 0xFFE6) || (cp >= 0x1F300 && cp <= 0x1F64F) ||
           (cp >= 0x1F900 && cp <= 0x1F9FF) || (cp >= 0x20000 && cp <= 0x3FFFD);
}

size_t cli_display_width(const char *s)
{
    const uint8_t *p = (const uint8_t *)s;
    size_t n = strlen(s), w = 0;
    uint32_t cp;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_decode(p + i, n - i, &cp);
        if (k == 0) { /* not expected in escaped text; count the byte and go on */
            w++;
            i++;
            continue;
        }
        w += is_wide(cp) ? 2 : 1;
        i += k;
    }
    return w;
}

/* ---- growable string ------------------------------------------------------------------------ */

static int buf_reserve(cli_buf *b, size_t extra)
{
    if (b->oom)
        return -1;
    if (extra >= SIZE_MAX - b->len) {
        b->oom = 1;
        return -1;
    }
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    char *p = realloc(b->data, cap);
    if (!p) {
        b->oom = 1;
        return -1;
    }
    b->data = p;
    b->cap = cap;
    return 0;
}

void cli_buf_putn(cli_buf *b, const void *p, size_t n)
{
    if (buf_reserve(b, n) < 0)
        return;
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void cli_buf_puts(cli_buf *b, const char *s)
{
    cli_buf_putn(b, s, strlen(s));
}

void cli_buf_printf(cli_buf *b, const char *fmt, ...)
{
    va_list ap;
    char small[128];
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->oom = 1;
        return;
    }
    if ((size_t)n < sizeof small) {
        cli_buf_putn(b, small, (size_t)n);
        return;
    }
    if (buf_reserve(b, (size_t)n) < 0)
        return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void cli_buf_escape(cli_buf *b, const void *s, size_t n, unsigned flags)
{
    size_t len = ptc_escape(NULL, 0, s, n, flags);
    if (buf_reserve(b, len) < 0)
        return;
    ptc_escape(b->data + b->len, len + 1, s, n, flags);
    b->len += len;
}

void cli_buf_truncate(cli_buf *b, size_t len)
{
    if (b->data && len < b->len) {
        b->len = len;
        b->data[len] = '\0';
    }
}

const char *cli_buf_str(const cli_buf *b)
{
    return b->data && !b->oom ? b->data : "";
}

void cli_buf_free(cli_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->oom = 0;
}

/* ---- numbers -------------------------------------------------------------------------------- */

void cli_format_bytes(char *dst, size_t dstsz, uint64_t n)
{
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (n < 1024) {
        snprintf(dst, dstsz, "%u B", (unsigned)n);
        return;
    }
    double v = (double)n / 1024.0;
    size_t u = 0;
    while (v >= 1024.0 && u + 1 < sizeof units / sizeof units[0]) {
        v /= 1024.0;
        u++;
    }
    snprintf(dst, dstsz, "%.1f %s", v, units[u]);
}

uint64_t cli_add_sat(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* ---- progress ------------------------------------------------------------------------------- */

static int64_t now_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
        return 0;
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int cli_terminal_width(void)
{
    struct winsize ws;
    if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        return ws.ws_col;
    const char *c = getenv("COLUMNS");
    char *end;
    long v = c ? strtol(c, &end, 10) : 0;
    if (c && *c && *end == '\0' && v > 0 && v <= 100000)
        return (int)v;
    return 80;
}

/* The first bytes of s that fill at most cols columns (whole UTF-8 characters). */
static size_t cut_to_columns(const char *s, size_t cols)
{
    const uint8_t *u = (const uint8_t *)s;
    size_t n = strlen(s), i = 0, w = 0;
    uint32_t cp;
    while (i < n) {
        size_t k = utf8_decode(u + i, n - i, &cp);
        size_t cw = k ? (size_t)(is_wide(cp) ? 2 : 1) : 1;
        if (w + cw > cols)
            break;
        w += cw;
        i += k ? k : 1;
    }
    return i;
}

#define PROGRESS_LINE_MAX 512 /* bytes of a drawn line: wider terminals get this much */

static void progress_draw(cli_progress *p)
{
    /* the parts: [0] "<prog>: <what> <percent>" (always), [1] the count, [2..] the fields */
    char head[256], count[64];
    const char *part[2 + CLI_PROGRESS_FIELDS];
    int rank[2 + CLI_PROGRESS_FIELDS], keep[2 + CLI_PROGRESS_FIELDS];
    size_t width[2 + CLI_PROGRESS_FIELDS];
    int n = 0;
    if (p->total > 0) {
        snprintf(head, sizeof head, "%s: %s %u%%", g_prog, p->what,
                 (unsigned)(p->done >= p->total ? 100 : p->done * 100.0 / p->total));
        snprintf(count, sizeof count, "(%llu/%llu)", (unsigned long long)p->done,
                 (unsigned long long)p->total);
    } else {
        snprintf(head, sizeof head, "%s: %s %llu", g_prog, p->what, (unsigned long long)p->done);
        count[0] = '\0';
    }
    part[n] = head, rank[n++] = INT_MAX;
    part[n] = count, rank[n++] = p->count_rank;
    for (int i = 0; i < p->nfields; i++)
        part[n] = p->fields[i] ? p->fields[i] : "", rank[n++] = p->ranks[i];
    size_t cols = (size_t)cli_terminal_width(), room = cols > 1 ? cols - 1 : 1, total = 0;
    for (int i = 0; i < n; i++) {
        keep[i] = part[i][0] != '\0';
        width[i] = cli_display_width(part[i]);
        total += keep[i] ? width[i] + (i > 0) : 0;
    }
    /* least important first, until the line fits or only the head is left */
    while (total > room) {
        int drop = -1;
        for (int i = 1; i < n; i++)
            if (keep[i] && (drop < 0 || rank[i] < rank[drop]))
                drop = i;
        if (drop < 0)
            break;
        keep[drop] = 0;
        total -= width[drop] + 1;
    }
    char line[PROGRESS_LINE_MAX];
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        if (!keep[i])
            continue;
        int k = snprintf(line + len, sizeof line - len, "%s%s", len ? " " : "", part[i]);
        if (k < 0 || (size_t)k >= sizeof line - len) {
            len = strlen(line);
            break;
        }
        len += (size_t)k;
    }
    len = cut_to_columns(line, room); /* a head wider than the terminal, cut */
    line[len] = '\0';
    size_t w = cli_display_width(line);
    /* Plain carriage return and space padding rather than terminal escape sequences, so the line
     * also works on terminals without ANSI support; the padding, too, stops short of the edge. */
    fprintf(stderr, "\r%s", line);
    for (size_t i = w; i < p->drawn && i < room; i++)
        fputc(' ', stderr);
    fflush(stderr);
    p->drawn = w > p->drawn ? w : p->drawn;
}

void cli_progress_set_fields(cli_progress *p, const char *const *fields, const int *ranks, int n,
                             int count_rank)
{
    p->nfields = n < 0 ? 0 : n > CLI_PROGRESS_FIELDS ? CLI_PROGRESS_FIELDS : n;
    for (int i = 0; i < p->nfields; i++) {
        p->fields[i] = fields[i];
        p->ranks[i] = ranks[i];
    }
    p->count_rank = count_rank;
}

void cli_progress_start(cli_progress *p, const char *what, uint64_t total)
{
    memset(p, 0, sizeof *p);
    p->what = what;
    p->total = total;
    p->enabled = isatty(STDERR_FILENO);
    if (p->enabled) {
        if (g_active_progress && g_active_progress != p)
            cli_progress_end(g_active_progress);
        g_active_progress = p;
        p->last_ns = now_ns();
    }
}

void cli_progress_update(cli_progress *p, uint64_t done)
{
    p->done = done;
    if (!p->enabled)
        return;
    int64_t t = now_ns();
    if (t - p->last_ns < 100000000)
        return;
    p->last_ns = t;
    progress_draw(p);
}

void cli_progress_end(cli_progress *p)
{
    if (p->enabled && p->drawn > 0) {
        size_t cols = (size_t)cli_terminal_width(), room = cols > 1 ? cols - 1 : 1;
        fputc('\r', stderr);
        for (size_t i = 0; i < p->drawn && i < room; i++)
            fputc(' ', stderr);
        fputc('\r', stderr);
        fflush(stderr);
    }
    p->drawn = 0;
    p->enabled = 0; /* a finished progress stays quiet even if updated again */
    if (g_active_progress == p)
        g_active_progress = NULL;
}

void cli_progress_start_mode(cli_progress *p, const char *what, uint64_t total, int mode)
{
    cli_progress_start(p, what, total);
    if (mode == CLI_PROGRESS_AUTO || p->enabled == (mode == CLI_PROGRESS_ALWAYS))
        return;
    if (mode == CLI_PROGRESS_NEVER) {
        cli_progress_end(p);
        return;
    }
    /* Asked for on a pipe or a file: register the line as cli_progress_start does on a terminal,
     * so that messages still clear it first. */
    if (g_active_progress && g_active_progress != p)
        cli_progress_end(g_active_progress);
    p->enabled = 1;
    g_active_progress = p;
    p->last_ns = now_ns();
}

/* ---- paths ---------------------------------------------------------------------------------- */

int cli_path_check(size_t len, size_t depth, ptc_error *err)
{
    if (len <= PTC_PATH_MAX)
        return 0;
    if (err) {
        err->code = PTC_ELIMIT;
        err->offset = -1;
        err->member[0] = '\0';
        /* ptc_walk_next's words where the depth is known (its capped path does not know the
         * length reached), the length otherwise */
        char where[64];
        if (depth)
            snprintf(where, sizeof where, "at depth %zu", depth);
        else
            snprintf(where, sizeof where, "%zu bytes", len);
        snprintf(err->message, sizeof err->message,
                 "path longer than %zu bytes (%s): the file's dict keys make paths far "
                 "longer than any checkpoint's; ptc refuses them",
                 (size_t)PTC_PATH_MAX, where);
    }
    return PTC_ELIMIT;
}

void cli_buf_msg_name(cli_buf *b, const char *s, size_t len)
{
    if (!s)
        s = "";
    cli_buf_escape(b, s, len > CLI_MSG_NAME_MAX ? CLI_MSG_NAME_MAX : len, 0);
    if (len > CLI_MSG_NAME_MAX)
        cli_buf_printf(b, "... (%zu bytes)", len);
}

void cli_key_text(cli_buf *b, const ptc_value *key)
{
    size_t len = ptc_key_text(key, NULL, 0);
    if (buf_reserve(b, len) < 0)
        return;
    ptc_key_text(key, b->data + b->len, len + 1);
    b->len += len;
}

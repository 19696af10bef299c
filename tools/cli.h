/*
 * cli.h - what every ptc subcommand shares: the exit status contract, error reporting in the form
 * "ptc CMD: message", the mapping from libptc error codes to exit codes, escaping of text that came
 * from a file before it reaches a terminal, a growable string buffer, byte-count formatting and a
 * progress line for long work.
 *
 * The tools are thin over the public API (<ptc/ptc.h>); nothing here reaches into lib/ internals.
 * Invariants:
 *   - every byte that came from a file reaches stdout or stderr through cli_escape_* (threat model:
 *     no raw control bytes on a terminal), including dict keys, str values and storage keys;
 *   - the exit codes below are documented in ptc(1) and never change meaning.
 */
#ifndef PTC_TOOLS_CLI_H
#define PTC_TOOLS_CLI_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <ptc/ptc.h>

#if defined(__GNUC__)
#define CLI_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define CLI_PRINTF(f, a)
#endif

/* Exit status of every subcommand (ptc(1), EXIT STATUS). Stable: scripts test for these. */
enum cli_exit {
    CLI_EXIT_OK = 0,      /* success */
    CLI_EXIT_REFUSED = 1, /* the file was refused, or a comparison found a difference */
    CLI_EXIT_USAGE = 2,   /* bad command line */
    CLI_EXIT_IO = 3,      /* the operating system failed to read or write a file */
    CLI_EXIT_NOMEM = 4    /* out of memory */
};

/* ---- subcommands ------------------------------------------------------------------------------
 * Each is called with argv[0] set to its display name ("ptc inspect"), so that getopt_long's own
 * messages and cli_error read the same. Each returns an exit status from enum cli_exit. */
int cmd_inspect(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_diff(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_load(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_predict(int argc, char **argv);
int cmd_plot(int argc, char **argv);

/* `ptc inspect --salvage [--json] FILE` (tools/cmd_salvage.c): the state dict ptc can take out of
 * FILE read symbolically, the symbolic globals met, and what ptc_verify says the file would run.
 * budget_bytes: --budget (0: the default). Returns an exit status. */
int cli_salvage_report(const char *path, int json, uint64_t budget_bytes);

/* ---- messages ---------------------------------------------------------------------------------
 * The program name that prefixes every message ("ptc" until a subcommand is chosen). The string is
 * borrowed and must outlive the process's use of it. */
void cli_set_prog(const char *prog);
const char *cli_prog(void);

/* "<prog>: <message>\n" on stderr. The message must already be safe to print (escape file text). */
void cli_error(const char *fmt, ...) CLI_PRINTF(1, 2);
/* A usage error: the message, then "Try '<prog> --help' for more information."; returns
 * CLI_EXIT_USAGE so call sites read `return cli_usage_error(...)`. */
int cli_usage_error(const char *fmt, ...) CLI_PRINTF(1, 2);

/* Exit status for a libptc code (0 or PTC_E*). */
int cli_exit_code(int ptc_code);
/* Prints a libptc failure (err->message when set, else ptc_strerror(code)) and returns
 * cli_exit_code(code). err may be NULL. The library escapes file bytes in its messages; the
 * message is escaped once more with CLI_ESC_RAW_BACKSLASH so that anything it lets through (a C1
 * control or bidi override in valid UTF-8, say) still never reaches the terminal raw. */
int cli_report(int code, const ptc_error *err);

/* ---- work budget -------------------------------------------------------------------------------
 * `--budget BYTES` (every command that walks a checkpoint): a byte count with an optional suffix
 * K, M, G or T, upper or lower case (powers of 1024; "4G", "512m", "1073741824"); 0 < BYTES. CLI_EXIT_USAGE with a
 * message on anything else. */
int cli_parse_budget(const char *arg, uint64_t *out);
/* cli_report for a failure that may be an exceeded work budget: a PTC_ELIMIT for the byte budget
 * (ptc_budget_charge's message) is followed by the hint to raise it with --budget BYTES. */
int cli_report_budget(int code, const ptc_error *err);

/* Makes the next getopt_long call start from argv[1] again with fresh internal state. */
void cli_getopt_reset(void);

/* Flushes stdout and reports a write error (a full disk, a closed pipe) as CLI_EXIT_IO; returns
 * status unchanged when the flush succeeds. main applies it to every subcommand's status, so the
 * commands themselves need not. */
int cli_finish(int status);

/* ---- escaping ---------------------------------------------------------------------------------
 * The library's ptc_escape (<ptc/ptc.h> says what it escapes and how), written to a FILE or a
 * cli_buf. The result never holds a byte a terminal would act on, and it is unambiguous. */
enum {
    CLI_ESC_QUOTE = PTC_ESC_QUOTE,                /* also escape '"' */
    CLI_ESC_RAW_BACKSLASH = PTC_ESC_RAW_BACKSLASH /* leave '\\' alone: text libptc escaped */
};

/* Writes s[0..n) escaped to f. */
void cli_escape_put(FILE *f, const void *s, size_t n, unsigned flags);

/* Writes JSON text to f as ptc_json_escape_hidden gives it (hidden characters as \uXXXX). */
void cli_put_json_text(FILE *f, const char *s, size_t n);

/* Columns a string of printable UTF-8 occupies on a terminal (East Asian wide characters and
 * emoji count two), for aligning columns. */
size_t cli_display_width(const char *s);

/* ---- growable string --------------------------------------------------------------------------
 * Appends never fail loudly: an allocation failure sets oom, later appends do nothing, and the
 * caller checks oom once at the end. data is always NUL-terminated once anything was appended. */
typedef struct cli_buf {
    char *data;
    size_t len;
    size_t cap;
    int oom;
} cli_buf;

void cli_buf_putn(cli_buf *b, const void *p, size_t n);
void cli_buf_puts(cli_buf *b, const char *s);
void cli_buf_printf(cli_buf *b, const char *fmt, ...) CLI_PRINTF(2, 3);
/* Appends s[0..n) escaped as cli_escape_put would write it. */
void cli_buf_escape(cli_buf *b, const void *s, size_t n, unsigned flags);
/* Cuts the content back to len bytes (len <= b->len). */
void cli_buf_truncate(cli_buf *b, size_t len);
/* The content, "" when nothing was appended; borrowed until the next append or free. */
const char *cli_buf_str(const cli_buf *b);
void cli_buf_free(cli_buf *b);

/* ---- numbers ----------------------------------------------------------------------------------
 * "40 B", "1.5 KiB", "44.7 MiB" (binary units, one decimal). */
void cli_format_bytes(char *dst, size_t dstsz, uint64_t n);
/* (A double as Python's repr spells it: ptc_float_text.) */
/* Saturating addition, for totals over counts a file controls. */
uint64_t cli_add_sat(uint64_t a, uint64_t b);

/* ---- progress ---------------------------------------------------------------------------------
 * A one-line progress display on stderr, redrawn at most ten times a second, only when stderr is a
 * terminal: in a pipe or a log it prints nothing. cli_error clears an active line first so that
 * messages never mix with it. Only one progress line is active at a time. */
#define CLI_PROGRESS_FIELDS 8
typedef struct cli_progress {
    int enabled;
    const char *what; /* "hashing", borrowed */
    uint64_t total;   /* 0 when unknown */
    uint64_t done;
    int64_t last_ns; /* monotonic time of the last redraw */
    size_t drawn;    /* characters on the line now */
    /* cli_progress_set_fields: texts drawn after the count, in order, each with a drop rank */
    const char *fields[CLI_PROGRESS_FIELDS];
    int ranks[CLI_PROGRESS_FIELDS];
    int nfields;
    int count_rank; /* the "(done/total)" part's drop rank (0 until set: dropped first) */
} cli_progress;

/* The line is "<prog>: <what> <percent> (<done>/<total>) <fields>..." and never wider than the
 * terminal (cli_terminal_width, less one column, so that the cursor never waits to wrap): when it
 * would be, the count and the fields are left out lowest rank first, and what is still too wide
 * is cut. <prog>: <what> <percent> is never left out. */
void cli_progress_start(cli_progress *p, const char *what, uint64_t total);
void cli_progress_update(cli_progress *p, uint64_t done);
/* Erases the line; safe to call twice or on a progress that never drew. */
void cli_progress_end(cli_progress *p);

/* cli_progress_start with the terminal test overridden, for commands with --progress and
 * --no-progress: mode 1 draws even when stderr is not a terminal, 0 never draws, -1 draws only on
 * a terminal (what cli_progress_start does). */
enum { CLI_PROGRESS_NEVER = 0, CLI_PROGRESS_ALWAYS = 1, CLI_PROGRESS_AUTO = -1 };
void cli_progress_start_mode(cli_progress *p, const char *what, uint64_t total, int mode);
/* After a start: n (at most CLI_PROGRESS_FIELDS) texts drawn after the count, in this order, such
 * as "1190 img/s" or "ETA 6m12s"; borrowed (the caller may rewrite them between updates; NULL or ""
 * is not drawn). ranks[i] orders what goes first when the line is too wide (lowest first), and
 * count_rank places the "(done/total)" part among them. */
void cli_progress_set_fields(cli_progress *p, const char *const *fields, const int *ranks, int n,
                             int count_rank);
/* Columns of the terminal on stderr (TIOCGWINSZ), else $COLUMNS, else 80. */
int cli_terminal_width(void);

/* ---- paths ------------------------------------------------------------------------------------
 * Appends ptc_key_text(key): the path segment ptc_walk_next writes for a dict key (raw; escape the
 * whole path when printing it). Commands that walk the tree themselves use it so that their paths
 * are the ones ptc_walk reports. */
void cli_key_text(cli_buf *b, const ptc_value *key);
/* 0 when a path of len bytes (depth levels deep; 0: not said) is within PTC_PATH_MAX, else PTC_ELIMIT with
 * err set to ptc_walk_next's message: commands that build paths refuse them where ptc_walk
 * would, before they grow further. err may be NULL. */
int cli_path_check(size_t len, size_t depth, ptc_error *err);
/* Appends a name from the file (a key, a path) for a message: escaped, and when longer than
 * CLI_MSG_NAME_MAX bytes only its first CLI_MSG_NAME_MAX, then "... (N bytes)". */
#define CLI_MSG_NAME_MAX 200
void cli_buf_msg_name(cli_buf *b, const char *s, size_t len);

#endif /* PTC_TOOLS_CLI_H */

/*
 * cmd_verify.c - `ptc verify [--json|--sarif] [--policy default|strict] [--allow-global MODULE.NAME]...
 * [--verbose] PATH...`: a verdict on each untrusted file, with every finding.
 *
 * Each PATH is a file or a folder, which is walked recursively in name order (symbolic links to
 * folders are not followed, so a link loop cannot make the walk endless; links to files are
 * verified). Each file is verified by ptc_verify (lib/pth/verify.c): nothing from it is executed.
 *
 * Output. Text: one line per file, "PATH: VERDICT (FORMAT; torch 2.6 loads|refuses it)", then one
 * indented line per finding; --verbose also lists every global referenced by any pickle. With
 * several files a last line counts the verdicts. --json: one JSON document, written file by file
 * as the work proceeds (memory stays flat over a folder of any size); its schema is in
 * ptc-verify(1). --sarif: one SARIF 2.1.0 log (ptc_sarif_*, lib/pth/report_sarif.c), also written
 * file by file. Every byte that came from a file or a file name is escaped.
 *
 * Exit status: 0 every file ok, 1 at least one file unsafe or malformed, 2 a usage error or a
 * file that could not be read (the other files are still verified and reported).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "cli.h"

#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#define MAX_DEPTH 64 /* folder nesting followed */
/* What the C library keeps of the memory one file's verification freed, for the next file: the
 * load builds every file's pickle in fresh allocations (tens of MB for a large state dict) and
 * frees them all at the end, and with glibc's defaults that memory goes back to the kernel and
 * comes back as page faults and zeroed pages for the next file (a fifth of the CPU time over a
 * folder of state dicts, measured with perf). Allocations up to REUSE_BYTES come from the heap,
 * which keeps up to REUSE_BYTES free at its top. */
#define REUSE_BYTES ((int)(256 << 20))

struct verify {
    int json;
    ptc_sarif *sarif; /* --sarif: the log being written */
    int verbose;
    ptc_verify_params params;
    const char *policy_name;
    uint64_t files, ok, unsafe, malformed, errors;
    int first_json; /* no file object written yet */
};

static int write_stdout(void *ctx, const void *p, size_t n)
{
    (void)ctx;
    return fwrite(p, 1, n, stdout) == n ? 0 : PTC_EIO;
}

/* One file's object, indented as an element of "files" (ptc_report_json writes it). A write
 * error shows at the end, in cli_finish; out of memory writes null in its place. */
static void json_file(struct verify *v, const char *path, const ptc_report *r, const ptc_error *err)
{
    fputs(v->first_json ? "\n    " : ",\n    ", stdout);
    v->first_json = 0;
    if (ptc_report_json(path, r, err, 4, write_stdout, NULL, NULL) == PTC_ENOMEM)
        fputs("null", stdout);
}

/* One file's results; a write error shows at the end (ptc_sarif_end, then cli_finish). */
static void sarif_file(struct verify *v, const char *path, const ptc_report *r,
                       const ptc_error *err)
{
    ptc_error e;
    if (ptc_sarif_file(v->sarif, path, r, err, &e) == PTC_ENOMEM)
        cli_error("%s", e.message);
}

static void text_location(const char *member, int64_t offset)
{
    if (member[0] && offset >= 0)
        printf("%s+0x%llx", member, (unsigned long long)offset);
    else if (member[0])
        printf("%s", member);
    else if (offset >= 0)
        printf("offset 0x%llx", (unsigned long long)offset);
    else
        printf("file");
}

static void text_file(struct verify *v, const char *path, const ptc_report *r, const ptc_error *err)
{
    cli_escape_put(stdout, path, strlen(path), 0);
    if (!r) {
        printf(": error: ");
        cli_escape_put(stdout, err->message[0] ? err->message : ptc_strerror(err->code),
                       strlen(err->message[0] ? err->message : ptc_strerror(err->code)),
                       CLI_ESC_RAW_BACKSLASH);
        putchar('\n');
        return;
    }
    ptc_torch_answer t = ptc_report_torch(r);
    printf(
        ": %s (%s; torch 2.6 %s)\n", ptc_verdict_name(ptc_report_verdict(r)), ptc_report_format(r),
        t == PTC_TORCH_LOADS     ? "loads it"
        : t == PTC_TORCH_REFUSES ? "refuses it"
                                 : "may load it: depends on which duplicate its zip reader picks");
    for (size_t i = 0; i < ptc_report_nfindings(r); i++) {
        const ptc_finding *f = ptc_report_finding(r, i);
        printf("  %-9s %-13s ", ptc_verdict_name(f->verdict), f->kind);
        text_location(f->member, f->offset);
        printf(": ");
        cli_escape_put(stdout, f->detail, strlen(f->detail), CLI_ESC_RAW_BACKSLASH);
        printf("%s\n", f->torch_refuses ? "" : " [torch 2.6 does not check this]");
    }
    if (ptc_report_dropped(r))
        printf("  ... and %llu more findings and references not listed\n",
               (unsigned long long)ptc_report_dropped(r));
    if (!v->verbose)
        return;
    for (size_t i = 0; i < ptc_report_nglobals(r); i++) {
        const ptc_global_ref *g = ptc_report_global(r, i);
        printf("  global    %-13s ", g->opcode);
        text_location(g->member, g->offset);
        printf(": ");
        const char *name = g->global ? g->global : "(computed at run time)";
        cli_escape_put(stdout, name, strlen(name), CLI_ESC_RAW_BACKSLASH);
        printf(" (%s%s)\n", g->allowed ? "allowed" : "not allowed",
               g->allowed == g->torch_allows ? ""
               : g->torch_allows             ? "; torch 2.6 allows it"
                                             : "; torch 2.6 refuses it");
    }
}

static int verify_file(struct verify *v, const char *path)
{
    ptc_report *r = NULL;
    ptc_error err;
    int rc = ptc_verify(&r, path, &v->params, &err);
    v->files++;
    if (rc < 0) {
        v->errors++;
        if (v->sarif)
            sarif_file(v, path, NULL, &err);
        else if (v->json)
            json_file(v, path, NULL, &err);
        else
            text_file(v, path, NULL, &err);
        return rc == PTC_ENOMEM ? CLI_EXIT_NOMEM : CLI_EXIT_USAGE;
    }
    ptc_verdict verdict = ptc_report_verdict(r);
    if (verdict == PTC_VERDICT_OK)
        v->ok++;
    else if (verdict == PTC_VERDICT_UNSAFE)
        v->unsafe++;
    else
        v->malformed++;
    if (v->sarif)
        sarif_file(v, path, r, &err);
    else if (v->json)
        json_file(v, path, r, &err);
    else
        text_file(v, path, r, &err);
    ptc_report_free(r);
    return verdict == PTC_VERDICT_OK ? CLI_EXIT_OK : CLI_EXIT_REFUSED;
}

static int worse(int a, int b)
{
    /* usage / I/O (2) and out of memory (4) outrank a refusal (1), which outranks success */
    int ra = a == CLI_EXIT_OK ? 0 : a == CLI_EXIT_REFUSED ? 1 : 2;
    int rb = b == CLI_EXIT_OK ? 0 : b == CLI_EXIT_REFUSED ? 1 : 2;
    return rb > ra ? b : a;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int report_path_error(struct verify *v, const char *path, int e)
{
    ptc_error err = {.code = PTC_EIO, .offset = -1};
    snprintf(err.message, sizeof err.message, "%s", strerror(e));
    v->files++;
    v->errors++;
    if (v->sarif)
        sarif_file(v, path, NULL, &err);
    else if (v->json)
        json_file(v, path, NULL, &err);
    else
        text_file(v, path, NULL, &err);
    return CLI_EXIT_USAGE;
}

static int verify_path(struct verify *v, const char *path, int depth)
{
    struct stat st;
    if (stat(path, &st) < 0)
        return report_path_error(v, path, errno);
    if (!S_ISDIR(st.st_mode))
        return verify_file(v, path);
    if (depth >= MAX_DEPTH)
        return report_path_error(v, path, ELOOP);
    DIR *d = opendir(path);
    if (!d)
        return report_path_error(v, path, errno);
    char **names = NULL;
    size_t n = 0, cap = 0;
    int status = CLI_EXIT_OK;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **nn = realloc(names, cap * sizeof *nn);
            if (!nn) {
                status = CLI_EXIT_NOMEM;
                break;
            }
            names = nn;
        }
        size_t len = strlen(path) + strlen(de->d_name) + 2;
        char *full = malloc(len);
        if (!full) {
            status = CLI_EXIT_NOMEM;
            break;
        }
        snprintf(full, len, "%s%s%s", path, path[strlen(path) - 1] == '/' ? "" : "/", de->d_name);
        names[n++] = full;
    }
    closedir(d);
    if (status == CLI_EXIT_NOMEM)
        cli_error("out of memory listing a folder");
    qsort(names, n, sizeof *names, by_name);
    for (size_t i = 0; i < n; i++) {
        struct stat lst;
        if (lstat(names[i], &lst) == 0 && S_ISLNK(lst.st_mode) && stat(names[i], &st) == 0 &&
            S_ISDIR(st.st_mode)) {
            free(names[i]);
            continue; /* a link to a folder: not followed */
        }
        status = worse(status, verify_path(v, names[i], depth + 1));
        free(names[i]);
    }
    free(names);
    return status;
}

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: ptc verify [OPTION]... PATH...\n"
            "Give a verdict on each untrusted checkpoint: ok, unsafe or malformed, with every\n"
            "finding (member, offset, detail). Nothing from the files is ever executed.\n"
            "A PATH that is a folder is verified recursively.\n"
            "\n"
            "  --json                   print one JSON document (schema in ptc-verify(1))\n"
            "  --sarif                  print one SARIF 2.1.0 log (rules in ptc-verify(1))\n"
            "  --policy default|strict  allowlist: torch 2.6's (default) or only what torch.save\n"
            "                           writes for tensors and containers (strict)\n"
            "  --allow-global MOD.NAME  also allow this global (repeatable)\n"
            "  -v, --verbose            also list every global each pickle references\n"
            "  -h, --help               show this help\n"
            "\n"
            "Exit status: 0 every file ok, 1 at least one file unsafe or malformed,\n"
            "2 a usage error or a file that could not be read.\n");
}

int cmd_verify(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"json", no_argument, NULL, 'j'},
        {"sarif", no_argument, NULL, 's'},
        {"policy", required_argument, NULL, 'p'},
        {"allow-global", required_argument, NULL, 'a'},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct verify v = {.policy_name = "default", .first_json = 1};
    ptc_verify_params_default(&v.params);
    ptc_policy_base base = PTC_POLICY_DEFAULT;
    const char **allow = NULL;
    size_t nallow = 0;
    int c, status = CLI_EXIT_OK, sarif = 0;
    cli_getopt_reset();
#if defined(__GLIBC__) && defined(M_MMAP_THRESHOLD) && defined(M_TRIM_THRESHOLD)
    /* Once per process, for every file after the first (see REUSE_BYTES). */
    mallopt(M_MMAP_THRESHOLD, REUSE_BYTES);
    mallopt(M_TRIM_THRESHOLD, REUSE_BYTES);
#endif
    while ((c = getopt_long(argc, argv, "vh", longopts, NULL)) != -1) {
        switch (c) {
        case 'j':
            v.json = 1;
            break;
        case 's':
            sarif = 1;
            break;
        case 'v':
            v.verbose = 1;
            break;
        case 'p':
            if (strcmp(optarg, "default") == 0) {
                base = PTC_POLICY_DEFAULT;
            } else if (strcmp(optarg, "strict") == 0) {
                base = PTC_POLICY_STRICT;
            } else {
                free(allow);
                return cli_usage_error("unknown policy '%s' (default or strict)", optarg);
            }
            v.policy_name = base == PTC_POLICY_STRICT ? "strict" : "default";
            break;
        case 'a': {
            const char **na = realloc(allow, (nallow + 1) * sizeof *na);
            if (!na) {
                free(allow);
                cli_error("out of memory");
                return CLI_EXIT_NOMEM;
            }
            allow = na;
            allow[nallow++] = optarg;
            break;
        }
        case 'h':
            free(allow);
            usage(stdout);
            return CLI_EXIT_OK;
        default:
            free(allow);
            return cli_usage_error("invalid option");
        }
    }
    if (optind >= argc) {
        free(allow);
        return cli_usage_error("missing PATH");
    }
    if (v.json && sarif) {
        free(allow);
        return cli_usage_error("--json and --sarif are exclusive: one document per run");
    }
    ptc_policy *policy;
    ptc_error err;
    if (ptc_policy_new(&policy, base, &err) < 0) {
        free(allow);
        return cli_report(err.code, &err);
    }
    for (size_t i = 0; i < nallow; i++) {
        if (ptc_policy_allow_global(policy, allow[i], &err) < 0) {
            ptc_policy_free(policy);
            free(allow);
            cli_error("%s", err.message);
            return CLI_EXIT_USAGE;
        }
    }
    free(allow);
    v.params.policy = policy;
    if (sarif) {
        ptc_sarif_params sp;
        ptc_sarif_params_default(&sp);
        sp.policy = v.policy_name;
        if (ptc_sarif_begin(&v.sarif, &sp, write_stdout, NULL, &err) < 0) {
            ptc_policy_free(policy);
            return cli_report(err.code, &err);
        }
    }
    if (v.json)
        printf("{\n  \"ptc_version\": \"%s\",\n  \"policy\": \"%s\",\n  \"files\": [",
               ptc_version(), v.policy_name);
    for (int i = optind; i < argc; i++)
        status = worse(status, verify_path(&v, argv[i], 0));
    if (v.sarif && ptc_sarif_end(v.sarif, &err) < 0)
        status = worse(status, cli_report(err.code, &err));
    if (v.json) {
        printf("%s],\n  \"summary\": {\"files\": %llu, \"ok\": %llu, \"unsafe\": %llu, "
               "\"malformed\": %llu, \"error\": %llu}\n}\n",
               v.first_json ? "" : "\n  ", (unsigned long long)v.files, (unsigned long long)v.ok,
               (unsigned long long)v.unsafe, (unsigned long long)v.malformed,
               (unsigned long long)v.errors);
    } else if (v.files > 1 && !sarif) {
        printf("%llu files: %llu ok, %llu unsafe, %llu malformed, %llu not readable\n",
               (unsigned long long)v.files, (unsigned long long)v.ok, (unsigned long long)v.unsafe,
               (unsigned long long)v.malformed, (unsigned long long)v.errors);
    }
    ptc_policy_free(policy);
    return status == CLI_EXIT_NOMEM ? CLI_EXIT_NOMEM : status;
}

/*
 * allowlist_dump.c - prints the globals ptc's default policy allows, for
 * tests/interop/check_corpus_torch.py to compare with torch 2.6's own list.
 *
 *   allowlist_dump
 *       one line per global of the built-in allowlist (lib/pth/policy.c), "module.name" then
 *       " strict" when the strict policy keeps it too, in the policy's order; each is checked
 *       with ptc_policy_allows on a default policy first, so a name listed here but refused by the
 *       lookup makes the program fail instead of printing it
 *   allowlist_dump --allows
 *       reads "module.name" lines from stdin and prints "1 module.name" or "0 module.name": what
 *       ptc_policy_allows answers for the default policy (module is everything before the last
 *       dot)
 *
 * Exit status 0, 1 on a library error or a listed name that the lookup refuses, 2 on a usage
 * error.
 */
#include "pth/pth.h"

#include <stdio.h>
#include <string.h>

static int usage(void)
{
    fprintf(stderr, "usage: allowlist_dump [--allows < names]\n");
    return 2;
}

static int print_one(void *ud, const char *module, const char *name, bool strict)
{
    const ptc_policy *p = ud;
    if (!ptc_policy_allows(p, module, name)) {
        fprintf(stderr, "allowlist_dump: %s.%s is listed but ptc_policy_allows refuses it\n",
                module, name);
        return 1;
    }
    printf("%s.%s%s\n", module, name, strict ? " strict" : "");
    return 0;
}

static int allows(const ptc_policy *p)
{
    char line[1024];
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\r\n")] = '\0';
        if (!line[0])
            continue;
        char *dot = strrchr(line, '.');
        int ok = 0;
        if (dot && dot != line && dot[1]) {
            *dot = '\0';
            ok = ptc_policy_allows(p, line, dot + 1);
            *dot = '.';
        }
        printf("%d %s\n", ok, line);
    }
    return ferror(stdin) ? 1 : 0;
}

int main(int argc, char **argv)
{
    int as_filter = 0;
    if (argc == 2 && strcmp(argv[1], "--allows") == 0)
        as_filter = 1;
    else if (argc != 1)
        return usage();
    ptc_policy *p = NULL;
    ptc_error err;
    if (ptc_policy_new(&p, PTC_POLICY_DEFAULT, &err) != 0) {
        fprintf(stderr, "allowlist_dump: %s\n", err.message);
        return 1;
    }
    int rc = as_filter ? allows(p) : ptc__policy_each_builtin(print_one, p);
    ptc_policy_free(p);
    if (fflush(stdout) != 0)
        rc = 1;
    return rc ? 1 : 0;
}

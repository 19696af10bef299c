/*
 * ptc.c - entry point of the ptc command: git-style subcommands ("ptc inspect FILE") chosen from
 * one table, plus "ptc help [CMD]", "ptc CMD --help" and "ptc --version".
 *
 * A subcommand is one function `int cmd_NAME(int argc, char **argv)` declared in cli.h and one row
 * in the table below; it receives its own arguments with argv[0] replaced by its display name
 * ("ptc inspect"), parses them with getopt_long and returns an exit status from enum cli_exit. The
 * exit codes are a documented interface (ptc(1)); main only adds 2 for a command line it cannot
 * dispatch.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "cli.h"

#include <stdio.h>
#include <string.h>

struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary; /* one line for `ptc help` */
};

/* Later commands (verify, convert, diff, load, train, eval, predict, plot) are added here, in the order
 * `ptc help` should list them. */
static const struct command commands[] = {
    {"inspect", cmd_inspect, "show the tensors, storages and values a checkpoint holds"},
    {"verify", cmd_verify, "give a verdict on untrusted checkpoints: ok, unsafe or malformed"},
    {"convert", cmd_convert, "rewrite a checkpoint: safetensors, key prefixes, subsets, dtype"},
    {"diff", cmd_diff, "compare two checkpoints tensor by tensor and value by value"},
    {"load", cmd_load, "check that a state dict loads into ResNet-18 as torch would load it"},
    {"train", cmd_train, "train torchvision's ResNet-18 as the PyTorch tutorial does"},
    {"eval", cmd_eval, "test accuracy and loss of a ResNet-18 state dict"},
    {"predict", cmd_predict, "classify PNG/JPEG images and dataset records with a state dict"},
    {"plot", cmd_plot, "draw the loss, accuracy and learning rate of training runs"},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static const struct command *find_command(const char *name)
{
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    return NULL;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: ptc <command> [options] [arguments]\n"
               "       ptc help [<command>]\n"
               "       ptc --version\n"
               "\n"
               "Commands:\n");
    for (size_t i = 0; i < NCOMMANDS; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n"
               "'ptc help <command>' or 'ptc <command> --help' describes a command's options.\n"
               "Exit status: 0 success, 1 file refused or comparison failed, 2 usage error,\n"
               "3 input/output error, 4 out of memory (see ptc(1)).\n");
}

/* The name is echoed from the command line, not from a file, but a stray control byte should not
 * reach the terminal either. */
static int unknown_command(const char *name)
{
    fprintf(stderr, "ptc: '");
    cli_escape_put(stderr, name, strlen(name), 0);
    fprintf(stderr, name[0] == '-' ? "' is not a ptc option\n" : "' is not a ptc command\n");
    usage(stderr);
    return CLI_EXIT_USAGE;
}

/* Runs cmd with argv[0] replaced by its display name "ptc NAME". */
static int run_command(const struct command *cmd, int argc, char **argv)
{
    char prog[64];
    snprintf(prog, sizeof prog, "ptc %s", cmd->name);
    argv[0] = prog;
    cli_set_prog(prog);
    cli_getopt_reset();
    /* Flushed here so that a write error is reported under the command's name. */
    int status = cli_finish(cmd->run(argc, argv));
    cli_set_prog("ptc");
    return status;
}

/* "ptc help [CMD]": the command's own --help, so that each command's usage text lives in one
 * place, next to its option parsing. */
static int help(int argc, char **argv)
{
    if (argc < 2) {
        usage(stdout);
        return cli_finish(CLI_EXIT_OK);
    }
    if (argc > 2)
        return cli_usage_error("help takes at most one command name");
    const struct command *cmd = find_command(argv[1]);
    if (!cmd)
        return unknown_command(argv[1]);
    char help_opt[] = "--help";
    char *sub_argv[] = {NULL, help_opt, NULL};
    return run_command(cmd, 2, sub_argv);
}

/* `ptc --version`: the library's version and every module it can find (the one command that
 * loads them all: listing them, and whether each can run here, is its job). */
static int version(void)
{
    printf("ptc %s\n", ptc_version());
    ptc_plugin_info mods[8];
    ptc_error err;
    int n = ptc_plugins_list(mods, (int)(sizeof mods / sizeof *mods), &err);
    if (n < 0)
        return cli_finish(cli_report(n, &err));
    printf("built in: backend ref, communicator single\n");
    printf("modules:\n");
    for (int i = 0; i < n && i < (int)(sizeof mods / sizeof *mods); i++) {
        const ptc_plugin_info *m = &mods[i];
        const char *kind = strcmp(m->kind, "backend") == 0 ? "backend"
                           : strcmp(m->kind, "image") == 0 ? "image codecs"
                           : strcmp(m->kind, "tool") == 0  ? "tool"
                                                           : "communicator";
        if (!m->found) {
            printf("  %-11s %-12s not installed\n        %s\n", m->name, kind, m->why);
            continue;
        }
        printf("  %-11s %-12s %s\n", m->name, kind, m->path);
        if (!m->loaded)
            printf("        cannot be loaded: %s\n", m->why);
        else
            printf("        %s%s%s\n",
                   m->can_run ? "can run here" : "cannot run here: ", m->can_run ? "" : m->why,
                   m->experimental ? " (experimental)" : "");
        if (m->loaded && m->summary[0])
            printf("        %s\n", m->summary);
    }
    return cli_finish(CLI_EXIT_OK);
}

int main(int argc, char **argv)
{
    cli_set_prog("ptc");
    if (argc < 2) {
        usage(stderr);
        return CLI_EXIT_USAGE;
    }
    const char *name = argv[1];
    if (strcmp(name, "--version") == 0)
        return version();
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) {
        usage(stdout);
        return cli_finish(CLI_EXIT_OK);
    }
    if (strcmp(name, "help") == 0)
        return help(argc - 1, argv + 1);

    const struct command *cmd = find_command(name);
    if (!cmd)
        return unknown_command(name);
    return run_command(cmd, argc - 1, argv + 1);
}

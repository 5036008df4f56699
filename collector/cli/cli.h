/*
 * Shared state and subcommands of the mkscope CLI.
 */
#ifndef MKS_CLI_H
#define MKS_CLI_H

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>

#include "mkscope/wire.h"

enum {
    MKS_EXIT_OK = 0,
    MKS_EXIT_ERROR = 1,
    MKS_EXIT_USAGE = 2,
    MKS_EXIT_UNREACHABLE = 3,
    MKS_EXIT_NODATA = 4,
    MKS_EXIT_BUSY = 5, /* a collector is there but did not answer in time */
};

/* A command line as mks_cli_parse leaves it: what the global options say,
 * the command with its positional arguments (pos[0] is the command) and its
 * options, each "--name=value" or "--name" (malloc()ed). */
#define MKS_CLI_MAX_ARGS 64
struct mks_cli_args {
    const char *collector, *job, *key_file, *outfile;
    int timeout_ms;
    bool json, dot, help, version;
    char *pos[MKS_CLI_MAX_ARGS];
    size_t np;
    char *named[MKS_CLI_MAX_ARGS];
    size_t nn;
};

/* Parse and check argv: 0, or MKS_EXIT_USAGE with the one line to print in
 * err ("" when the usage text is what to print).  No I/O.  Free with
 * mks_cli_args_free whatever it returned. */
int mks_cli_parse(int argc, char **argv, struct mks_cli_args *a, char *err, size_t errlen);
void mks_cli_args_free(struct mks_cli_args *a);

struct mks_cli {
    const char *collector;
    const char *job;
    int timeout_ms;
    bool json, dot;
    bool have_key;
    struct mks_wire_key key;
    FILE *out;
    const char *outfile; /* -o FILE, or NULL for stdout */
};

/* One request; *answer gets the JSON (caller decrefs).  Returns the exit
 * status, having printed the one-line error when it is not 0. */
int mks_cli_call(struct mks_cli *cli, const char *verb, char **args, size_t n_args,
                 const void *blob, size_t blob_len, json_t **answer);
void mks_cli_table(FILE *f, json_t *cols, json_t *rows);
/* ns as a duration with its unit (ns, µs, ms, s), or a wall-clock time
 * (ns since 1970) as local time. */
void mks_cli_ns(char *buf, size_t len, double ns);
/* One line on what of the job is rolled up (an answer's "rolled_up"). */
void mks_cli_rolled(FILE *f, json_t *rolled);
void mks_cli_value(FILE *f, json_t *v, int width);

int mks_cli_diagnose(struct mks_cli *cli, const char *cmd, char **args, size_t n);
int mks_cli_attach(struct mks_cli *cli, const char *cmd, char **args, size_t npos, size_t n);
int mks_cli_trace(struct mks_cli *cli, char **args, size_t n);
int mks_cli_top(struct mks_cli *cli, char **args, size_t n);
int mks_cli_verify(struct mks_cli *cli, size_t argc, char **argv);
int mks_cli_probe(struct mks_cli *cli, char **args, size_t npos, size_t n);

/* Help of one command; -1 when there is no such command. */
int mks_cli_help(FILE *f, const char *cmd);

#endif

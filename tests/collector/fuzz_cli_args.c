/*
 * Fuzz target: the mkscope command line and the collector's check of a
 * request's arguments.  The input is split at NUL bytes into words.
 *   - as argv after "mkscope": mks_cli_parse must return 0 or exit 2 with a
 *     one-line error, and what it accepts the collector must accept too
 *     (the CLI never sends what the collector refuses);
 *   - as a request (first word the verb, the rest its arguments, as they
 *     travel): mks_args_check must return 0 or -EINVAL with one line.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cli.h"

#define MAX_WORDS 200

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 16384)
        return 0;
    char *buf = malloc(size + 1);
    memcpy(buf, data, size);
    buf[size] = 0;
    char *words[MAX_WORDS + 2];
    int n = 0;
    words[n++] = "mkscope";
    for (size_t i = 0, start = 0; i <= size && n < MAX_WORDS; i++) {
        if (i == size || buf[i] == 0) {
            buf[i] = 0;
            words[n++] = buf + start;
            start = i + 1;
        }
    }
    words[n] = NULL;
    char err[700];
    struct mks_cli_args a;
    int rc = mks_cli_parse(n, words, &a, err, sizeof(err));
    if (rc != 0 && rc != MKS_EXIT_USAGE)
        abort();
    if (rc && (strchr(err, '\n') || (a.np && !err[0])))
        abort(); /* one line, or the usage text when there is no command */
    /* --help and --version end the parse wherever they stand: nothing is
     * sent. */
    if (!rc && !a.help && !a.version && a.np && strcmp(a.pos[0], "verify") &&
        strcmp(a.pos[0], "help") && strcmp(a.pos[0], "top") && strcmp(a.pos[0], "trace") &&
        strcmp(a.pos[0], "trigger") && strcmp(a.pos[0], "attach")) {
        /* What the CLI sends for a plain command, the collector takes. */
        char *args[2 * MKS_CLI_MAX_ARGS];
        size_t na = 0, lo, hi;
        for (size_t i = 1; i < a.np; i++)
            args[na++] = a.pos[i];
        for (size_t i = 0; i < a.nn; i++)
            args[na++] = a.named[i];
        if (mks_args_positional(a.pos[0], &lo, &hi) == 0 &&
            mks_args_check(a.pos[0], args, na, lo, hi, err, sizeof(err)))
            abort(); /* the CLI accepted what the collector refuses */
    }
    mks_cli_args_free(&a);
    if (n > 1) {
        size_t lo = 0, hi = 3;
        mks_args_positional(words[1], &lo, &hi);
        rc = mks_args_check(words[1], words + 2, (size_t)(n - 2), lo, hi, err, sizeof(err));
        if (rc && (rc != -EINVAL || !err[0] || strchr(err, '\n')))
            abort();
    }
    free(buf);
    return 0;
}

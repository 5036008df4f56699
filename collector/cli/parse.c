/*
 * The mkscope command line, parsed and checked in full before anything is
 * opened or sent: global options anywhere, then the command, its positional
 * arguments and its options (args.h says which a command takes and what
 * each value must be).  Every mistake is one line and exit 2; nothing here
 * does I/O, so the fuzzer runs it as is.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cli.h"

static const char *const commands[] = {
    "status",  "ranks",  "jobs", "programs", "metrics", "query", "sql", "diagnose", "waitchain",
    "attach",  "detach", "trigger",  "trace",   "top",   "survey", "verify",   "help",
    "probe",   "maps",
};

static int known(const char *cmd)
{
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (!strcmp(commands[i], cmd))
            return 1;
    return 0;
}

static int usage_fail(char *err, size_t errlen, const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int usage_fail(char *err, size_t errlen, const char *cmd, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (cmd)
        snprintf(err, errlen, "mkscope %s: %s; see mkscope %s --help", cmd, msg, cmd);
    else
        snprintf(err, errlen, "mkscope: %s; see mkscope --help", msg);
    mks_wire_one_line(err); /* it quotes what was given */
    return MKS_EXIT_USAGE;
}

void mks_cli_args_free(struct mks_cli_args *a)
{
    for (size_t i = 0; i < a->nn; i++)
        free(a->named[i]);
    a->nn = 0;
}

/* The table entry a command's options are under: trigger's depend on the
 * subcommand. */
static const char *opt_cmd(const struct mks_cli_args *a, char *buf, size_t len)
{
    if ((!strcmp(a->pos[0], "trigger") || (!strcmp(a->pos[0], "trace") &&
                                           !strcmp(a->np > 1 ? a->pos[1] : "", "list"))) &&
        a->np > 1) {
        snprintf(buf, len, "%s-%s", a->pos[0], a->pos[1]);
        return buf;
    }
    return a->pos[0];
}

static const char *named_value(const struct mks_cli_args *a, const char *name)
{
    size_t l = strlen(name);
    for (size_t i = 0; i < a->nn; i++)
        if (!strncmp(a->named[i] + 2, name, l) &&
            (a->named[i][2 + l] == '=' || a->named[i][2 + l] == 0))
            return a->named[i][2 + l] == '=' ? a->named[i] + 3 + l : "";
    return NULL;
}

/* A command option at argv[*i]: "--name=value", "--name value" (the value
 * taken whatever it looks like, "-1" included, so that it is checked rather
 * than mistaken for something else) or a flag. */
static int take_option(struct mks_cli_args *a, int argc, char **argv, int *i, char *err,
                       size_t errlen)
{
    const char *arg = argv[*i], *cmd = a->pos[0];
    char sub[64];
    const char *eq = strchr(arg, '=');
    size_t len = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
    char name[40];
    if (len >= sizeof(name))
        return usage_fail(err, errlen, cmd, "unknown option '%.40s...'", arg);
    memcpy(name, arg + 2, len);
    name[len] = 0;
    const struct mks_opt *o = mks_args_opt(opt_cmd(a, sub, sizeof(sub)), name);
    /* --job is a global option, handled before; here it would be twice. */
    if (!o || !strcmp(name, "job"))
        return usage_fail(err, errlen, cmd, "unknown option '--%s'", name);
    const char *value = NULL;
    if (eq)
        value = eq + 1;
    else if (o->kind != MKS_OPT_FLAG) {
        if (*i + 1 >= argc)
            return usage_fail(err, errlen, cmd, "--%s needs a value (%s)", name, o->what);
        value = argv[++*i];
    }
    char why[300];
    if (mks_args_value(o, value, why, sizeof(why)))
        return usage_fail(err, errlen, cmd, "%s", why);
    if (named_value(a, name))
        return usage_fail(err, errlen, cmd, "--%s given twice", name);
    if (a->nn == MKS_CLI_MAX_ARGS)
        return usage_fail(err, errlen, cmd, "more than %d options", MKS_CLI_MAX_ARGS);
    size_t n = len + 3 + (value ? strlen(value) + 1 : 0);
    char *buf = malloc(n);
    if (!buf)
        return usage_fail(err, errlen, cmd, "out of memory");
    if (value)
        snprintf(buf, n, "--%s=%s", name, value);
    else
        snprintf(buf, n, "--%s", name);
    a->named[a->nn++] = buf;
    return 0;
}

/* Digits only, 1..max. */
static int positive(const char *s, unsigned long long max)
{
    unsigned long long v = 0;
    if (!*s)
        return 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9' || v > (max - (unsigned)(*p - '0')) / 10)
            return 0;
        v = v * 10 + (unsigned)(*p - '0');
    }
    return v >= 1;
}

/* What each command wants of its positional arguments (pos[1..]). */
static int check_positional(const struct mks_cli_args *a, char *err, size_t errlen)
{
    const char *cmd = a->pos[0];
    size_t npos = a->np - 1;
    char *const *p = a->pos + 1;
    size_t max = 0;
    if (!strcmp(cmd, "query") || !strcmp(cmd, "sql")) {
        if (!npos)
            return usage_fail(err, errlen, cmd, "missing %s",
                              !strcmp(cmd, "sql") ? "a SELECT statement" : "a query");
        max = 1;
    } else if (!strcmp(cmd, "attach")) {
        int builtin = named_value(a, "builtin") != NULL;
        if (!npos && !builtin)
            return usage_fail(err, errlen, cmd, "give a BPF object file or --builtin NAME");
        if (npos && builtin)
            return usage_fail(err, errlen, cmd,
                              "give a BPF object file or --builtin NAME, not both");
        if (npos && !*p[0])
            return usage_fail(err, errlen, cmd, "the object file name is empty");
        max = 1;
    } else if (!strcmp(cmd, "detach")) {
        if (!npos)
            return usage_fail(err, errlen, cmd, "give the program's name");
        if (!mks_wire_prog_name_valid(p[0]))
            return usage_fail(err, errlen, cmd,
                              "'%.64s' is not a program name (" MKS_WIRE_PROG_GRAMMAR ")", p[0]);
        max = 1;
    } else if (!strcmp(cmd, "trigger")) {
        const char *sub = npos ? p[0] : NULL;
        if (!sub || (strcmp(sub, "add") && strcmp(sub, "list") && strcmp(sub, "rm")))
            return usage_fail(err, errlen, cmd, "say add 'SLO', list or rm ID");
        if (!strcmp(sub, "add") && npos < 2)
            return usage_fail(err, errlen, cmd, "missing an SLO");
        if (!strcmp(sub, "add") && !*p[1])
            return usage_fail(err, errlen, cmd, "the SLO is empty; e.g. 'p99(step) > 2ms'");
        if (!strcmp(sub, "rm") && npos < 2)
            return usage_fail(err, errlen, cmd, "missing a trigger id");
        if (!strcmp(sub, "rm") && !positive(p[1], 9223372036854775807ull))
            return usage_fail(err, errlen, cmd,
                              "give a trigger id (a positive number, see mkscope trigger list),"
                              " got '%.64s'",
                              p[1]);
        max = strcmp(sub, "list") ? 2 : 1;
    } else if (!strcmp(cmd, "trace")) {
        if (!npos || (strcmp(p[0], "export") && strcmp(p[0], "list")))
            return usage_fail(err, errlen, cmd,
                              "the subcommands are list and export (mkscope trace export -o"
                              " FILE)");
        if (!strcmp(p[0], "list") && npos > 1)
            return usage_fail(err, errlen, cmd, "list takes no argument ('%.64s')", p[1]);
        max = 1;
    } else if (!strcmp(cmd, "survey")) {
        if (npos && strcmp(p[0], "status") && strcmp(p[0], "coverage") &&
            strcmp(p[0], "programs") && strcmp(p[0], "maps"))
            return usage_fail(err, errlen, cmd,
                              "ask for status, coverage, programs or maps, got '%.64s'", p[0]);
        if (npos > 1 && !positive(p[1], 60000))
            return usage_fail(err, errlen, cmd,
                              "the deadline is milliseconds (1..60000), got '%.64s'", p[1]);
        max = 2;
    } else if (!strcmp(cmd, "probe")) {
        int id = named_value(a, "id") != NULL;
        if (!npos && !id)
            return usage_fail(err, errlen, cmd,
                              "give a probe, e.g. 'count() by class where event = task_end', or"
                              " --id N of one started before");
        if (npos && id)
            return usage_fail(err, errlen, cmd, "give a probe or --id N, not both");
        if (npos && !*p[0])
            return usage_fail(err, errlen, cmd, "the probe is empty");
        if (id && (named_value(a, "dry-run") || named_value(a, "for") ||
                   named_value(a, "groups") || named_value(a, "max-cost") ||
                   named_value(a, "ranks")))
            return usage_fail(err, errlen, cmd,
                              "--id follows a probe started before: it takes --interval only");
        max = 1;
    } else if (!strcmp(cmd, "maps")) {
        const char *sl = npos ? strrchr(p[0], '/') : NULL;
        if (!sl || sl == p[0] || !sl[1])
            return usage_fail(err, errlen, cmd,
                              "give PROG/MAP: a program of mkscope programs and one of its maps,"
                              " got '%.64s'",
                              npos ? p[0] : "");
        max = 1;
    } else if (!strcmp(cmd, "verify")) {
        return 0; /* its own options and files: mks_cmd_verify */
    } else if (!strcmp(cmd, "help")) {
        max = 1;
    }
    if (npos > max)
        return usage_fail(err, errlen, cmd, "unexpected argument '%.64s'", p[max]);
    return 0;
}

int mks_cli_parse(int argc, char **argv, struct mks_cli_args *a, char *err, size_t errlen)
{
    memset(a, 0, sizeof(*a));
    a->timeout_ms = 5000;
    err[0] = 0;
    int rc = 0;
    for (int i = 1; i < argc && !rc; i++) {
        const char *arg = argv[i];
        const char *val = NULL;
        const char *cmd = a->np ? a->pos[0] : NULL;
#define TAKE(opt)                                                                                  \
    (!strcmp(arg, opt) ? (i + 1 < argc ? (val = argv[++i], 1) : -1)                                \
                       : (!strncmp(arg, opt "=", strlen(opt) + 1) ? (val = arg + strlen(opt) + 1, 1) \
                                                                   : 0))
        int t;
        if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
            a->help = true;
            return 0;
        }
        if (!strcmp(arg, "--version")) {
            a->version = true;
            return 0;
        }
        if ((t = TAKE("--collector")) || (t = TAKE("-f")) || (t = TAKE("--format")) ||
            (t = TAKE("--job")) || (t = TAKE("--timeout")) || (t = TAKE("--key")) ||
            (t = TAKE("-o"))) {
            if (t < 0)
                return usage_fail(err, errlen, NULL, "%s needs a value", arg);
            if (!strncmp(arg, "--collector", 11)) {
                if (!*val)
                    return usage_fail(err, errlen, NULL, "--collector wants a URL, got ''");
                a->collector = val;
            } else if (!strncmp(arg, "-f", 2) || !strncmp(arg, "--format", 8)) {
                if (strcmp(val, "json") && strcmp(val, "text") && strcmp(val, "dot"))
                    return usage_fail(err, errlen, NULL,
                                      "-f takes text, json (or dot for waitchain), got '%.64s'",
                                      val);
                a->json = !strcmp(val, "json");
                a->dot = !strcmp(val, "dot");
            } else if (!strncmp(arg, "--job", 5)) {
                if (!mks_wire_job_valid(val))
                    return usage_fail(err, errlen, NULL,
                                      "--job '%.64s': a job name is " MKS_WIRE_JOB_GRAMMAR, val);
                a->job = val;
            } else if (!strncmp(arg, "--timeout", 9)) {
                if (!positive(val, 3600000))
                    return usage_fail(err, errlen, NULL,
                                      "--timeout wants milliseconds (1..3600000), got '%.64s'",
                                      val);
                a->timeout_ms = atoi(val);
            } else if (!strncmp(arg, "--key", 5)) {
                if (!*val)
                    return usage_fail(err, errlen, NULL, "--key wants a key file, got ''");
                a->key_file = val;
            } else {
                if (!*val)
                    return usage_fail(err, errlen, NULL, "-o wants a file name, got ''");
                a->outfile = val;
            }
            continue;
        }
#undef TAKE
        /* A bare "--" too: on the wire an argument that starts with "--" is
         * an option, so no positional may (the collector would refuse it). */
        if (cmd && strcmp(cmd, "verify") && !strncmp(arg, "--", 2)) {
            rc = take_option(a, argc, argv, &i, err, errlen);
            continue;
        }
        if (!cmd && !strncmp(arg, "-", 1) && arg[1])
            return usage_fail(err, errlen, NULL, "unknown option '%.64s'", arg);
        if (a->np == MKS_CLI_MAX_ARGS)
            return usage_fail(err, errlen, cmd, "more than %d arguments", MKS_CLI_MAX_ARGS);
        a->pos[a->np++] = argv[i];
        if (a->np == 1 && !known(argv[i]))
            return usage_fail(err, errlen, NULL, "unknown command '%.64s'", argv[i]);
    }
    if (rc)
        return rc;
    if (!a->np)
        return MKS_EXIT_USAGE; /* err "": the usage text */
    return check_positional(a, err, errlen);
}

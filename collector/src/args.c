/* The table of mkscope's command arguments and their checks (args.h). */
#include "args.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mkscope/wire.h"

#define END {NULL, MKS_OPT_FLAG, 0, 0, 0, 0, 0, NULL, NULL}
#define U(n, lo, hi, w) {n, MKS_OPT_UINT, lo, hi, 0, 0, 0, NULL, w}
#define R(n, lo, open, hi, w) {n, MKS_OPT_REAL, 0, 0, lo, hi, open, NULL, w}
#define K(n, kind, w) {n, kind, 0, 0, 0, 0, 0, NULL, w}
#define C(n, choices) {n, MKS_OPT_CHOICE, 0, 0, 0, 0, 0, choices, choices}

/* Milliseconds a command waits for agents: up to an hour. */
#define WAIT_OPT U("wait", 1, 3600000, "milliseconds")

static const struct mks_opt diagnose_opts[] = {
    U("step", 0, UINT32_MAX, "a step number"),
    K("steps", MKS_OPT_RANGE, "A-B (or A): a range of step numbers"),
    U("last", 1, UINT32_MAX, "a number of steps"),
    R("slow", 0, 1, 1000, "a fraction over the median, e.g. 0.2"),
    R("min-coverage", 0, 1, 1, "a ratio in (0, 1]"),
    U("min-steps", 1, 1000000, "a number of steps"),
    END,
};
static const struct mks_opt attach_opts[] = {
    K("builtin", MKS_OPT_NAME, "a built-in monitor's name"),
    K("name", MKS_OPT_NAME, "a program name"),
    K("replace", MKS_OPT_NAME, "the name of the program to replace"),
    K("hook", MKS_OPT_HOOK, "a hook"),
    K("ranks", MKS_OPT_RANKS, "'all' or ranks such as 0,2,3"),
    WAIT_OPT,
    END,
};
static const struct mks_opt detach_opts[] = {
    K("hook", MKS_OPT_HOOK, "a hook"),
    K("ranks", MKS_OPT_RANKS, "'all' or ranks such as 0,2,3"),
    WAIT_OPT,
    END,
};
static const struct mks_opt top_opts[] = {
    R("interval", 0, 1, 3600, "seconds (0 < S <= 3600)"),
    U("iterations", 1, 1000000000, "a positive count"),
    K("once", MKS_OPT_FLAG, NULL),
    END,
};
static const struct mks_opt trace_opts[] = {
    U("escalation", 0, INT64_MAX, "an escalation id"),
    C("as", "perfetto|json"),
    END,
};
static const struct mks_opt commands_opts[] = {
    K("ids", MKS_OPT_IDS, "command ids such as 4,5,9"),
    END,
};
static const struct mks_opt trigger_add_opts[] = {
    K("hold-off", MKS_OPT_DURATION, "a duration such as 90s, 5m or 1h (at most a week)"),
    {"probe", MKS_OPT_TEXT, 1, 4096, 0, 0, 0, NULL, "a probe such as 'count() by class where event = task_end'"},
    K("probe-for", MKS_OPT_DURATION, "a duration such as 10s or 5m (at most 1h)"),
    END,
};
static const struct mks_opt probe_opts[] = {
    K("for", MKS_OPT_DURATION, "a duration such as 10s or 5m (at most 1h)"),
    K("ranks", MKS_OPT_RANKS, "'all' or ranks such as 0,2,3"),
    U("groups", 1, 65536, "a number of groups"),
    U("max-cost", 1, 32768, "instructions per event"),
    K("dry-run", MKS_OPT_FLAG, NULL),
    R("interval", 0, 1, 3600, "seconds (0 < S <= 3600)"),
    U("id", 1, UINT32_MAX, "a probe id"),
    END,
};
static const struct mks_opt maps_opts[] = {
    K("ranks", MKS_OPT_RANKS, "'all' or ranks such as 0,2,3"),
    K("sum", MKS_OPT_FLAG, NULL),
    END,
};
static const struct mks_opt probe_id_opts[] = {
    U("id", 1, UINT32_MAX, "a probe id"),
    END,
};
static const struct mks_opt no_opts[] = {END};
static const struct mks_opt job_opt = K("job", MKS_OPT_JOB, "a job name");

struct cmd {
    const char *name;
    const struct mks_opt *opts;
    size_t min_pos, max_pos; /* of the collector verb */
};

static const struct cmd cmds[] = {
    {"status", no_opts, 0, 0},      {"ranks", no_opts, 0, 0},
    {"jobs", no_opts, 0, 0},
    {"programs", no_opts, 0, 0},    {"metrics", no_opts, 0, 0},
    {"query", no_opts, 1, 1},       {"sql", no_opts, 1, 1},
    {"diagnose", diagnose_opts, 0, 0}, {"waitchain", diagnose_opts, 0, 0},
    {"attach", attach_opts, 1, 1},  {"detach", detach_opts, 1, 1},
    {"commands", commands_opts, 0, 0}, {"trace", trace_opts, 0, 0},
    {"trigger-add", trigger_add_opts, 1, 1}, {"trigger-list", no_opts, 0, 0},
    {"trace-list", no_opts, 0, 0},
    {"trigger-rm", no_opts, 1, 1},  {"survey", no_opts, 0, 2},
    {"top", top_opts, 0, 0},
    {"probe", probe_opts, 1, 1},   {"probe-read", probe_id_opts, 0, 0},
    {"probe-stop", probe_id_opts, 0, 0},
    {"maps", maps_opts, 1, 1},
};

static const struct cmd *find_cmd(const char *name)
{
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
        if (!strcmp(cmds[i].name, name))
            return &cmds[i];
    return NULL;
}

const struct mks_opt *mks_args_opt(const char *cmd, const char *name)
{
    if (!strcmp(name, "job"))
        return &job_opt;
    const struct cmd *c = find_cmd(cmd);
    if (!c)
        return NULL;
    for (const struct mks_opt *o = c->opts; o->name; o++)
        if (!strcmp(o->name, name))
            return o;
    return NULL;
}

int mks_args_positional(const char *verb, size_t *min_p, size_t *max_p)
{
    const struct cmd *c = find_cmd(verb);
    if (!c)
        return -1;
    *min_p = c->min_pos;
    *max_p = c->max_pos;
    return 0;
}

static int fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
        mks_wire_one_line(err); /* it quotes what was given */
    }
    return -EINVAL;
}

/* Decimal digits only (no sign, space, 0x or exponent), at most max. */
static int parse_u64(const char *s, size_t len, uint64_t max, uint64_t *v_p)
{
    uint64_t v = 0;
    if (!len)
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (max - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *v_p = v;
    return 0;
}

/* A comma-separated list of distinct numbers up to max, at most 4096. */
static int check_list(const char *s, uint64_t max)
{
    enum { MAX_ITEMS = 4096 };
    static _Thread_local uint64_t seen[MAX_ITEMS];
    size_t n = 0;
    const char *p = s;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        uint64_t v;
        if (parse_u64(p, len, max, &v) || n == MAX_ITEMS)
            return -1;
        for (size_t i = 0; i < n; i++)
            if (seen[i] == v)
                return -1;
        seen[n++] = v;
        if (!comma)
            return 0;
        p = comma + 1;
    }
}

int mks_args_duration(const char *text, uint64_t *ns_p)
{
    size_t n = text ? strspn(text, "0123456789") : 0;
    uint64_t v, unit = 1000000000ull;
    if (!n || parse_u64(text, n, UINT64_MAX, &v))
        return -EINVAL;
    const char *u = text + n;
    if (!strcmp(u, "m"))
        unit *= 60;
    else if (!strcmp(u, "h"))
        unit *= 3600;
    else if (*u && strcmp(u, "s"))
        return -EINVAL;
    /* a week at most: longer is "never again", which trigger rm says */
    if (v > 7ull * 24 * 3600 * 1000000000ull / unit)
        return -EINVAL;
    *ns_p = v * unit;
    return 0;
}

/* "A-B" or "A", step numbers, A <= B. */
static int check_range(const char *s)
{
    const char *dash = strchr(s, '-');
    uint64_t lo, hi;
    size_t l = dash ? (size_t)(dash - s) : strlen(s);
    if (parse_u64(s, l, UINT32_MAX, &lo))
        return -1;
    if (!dash)
        return 0;
    return parse_u64(dash + 1, strlen(dash + 1), UINT32_MAX, &hi) || lo > hi ? -1 : 0;
}

int mks_args_value(const struct mks_opt *o, const char *value, char *err, size_t errlen)
{
    const char *v = value ? value : "";
    switch (o->kind) {
    case MKS_OPT_FLAG:
        if (value)
            return fail(err, errlen, "--%s takes no value, got '%.64s'", o->name, v);
        return 0;
    case MKS_OPT_UINT: {
        uint64_t x;
        if (parse_u64(v, strlen(v), o->umax, &x) || x < o->umin)
            return fail(err, errlen, "--%s wants %s (%llu..%llu), got '%.64s'", o->name, o->what,
                        (unsigned long long)o->umin, (unsigned long long)o->umax, v);
        return 0;
    }
    case MKS_OPT_REAL: {
        char *end;
        errno = 0;
        double x = *v ? strtod(v, &end) : NAN;
        if (!*v || *end || errno || !isfinite(x) || x < o->rmin || (o->min_open && x == o->rmin) ||
            x > o->rmax)
            return fail(err, errlen, "--%s wants %s, got '%.64s'", o->name, o->what, v);
        return 0;
    }
    case MKS_OPT_NAME:
        if (!mks_wire_prog_name_valid(v))
            return fail(err, errlen, "--%s wants %s, " MKS_WIRE_PROG_GRAMMAR ", got '%.64s'",
                        o->name, o->what, v);
        return 0;
    case MKS_OPT_JOB:
        if (!mks_wire_job_valid(v))
            return fail(err, errlen, "--%s wants a job name, " MKS_WIRE_JOB_GRAMMAR ", got '%.64s'",
                        o->name, v);
        return 0;
    case MKS_OPT_HOOK:
        if (mks_wire_hook_parse(v) < 0)
            return fail(err, errlen,
                        "--%s '%.64s' is not a hook: task_ready, task_assign, task_start, task_end,"
                        " dep_wait_begin, dep_wait_end, dep_release, comm_begin, comm_end,"
                        " gen_advance, queue_pressure (or 0..%u)",
                        o->name, v, MKS_WIRE_HOOK_LIMIT - 1);
        return 0;
    case MKS_OPT_RANKS:
        if (strcmp(v, "all") && check_list(v, MKS_WIRE_MAX_RANKS - 1))
            return fail(err, errlen,
                        "--%s wants 'all' or distinct ranks such as 0,2,3 (each below %u), got"
                        " '%.64s'",
                        o->name, MKS_WIRE_MAX_RANKS, v);
        return 0;
    case MKS_OPT_RANGE:
        if (check_range(v))
            return fail(err, errlen, "--%s wants %s with A <= B, got '%.64s'", o->name, o->what,
                        v);
        return 0;
    case MKS_OPT_DURATION: {
        uint64_t ns;
        if (mks_args_duration(v, &ns))
            return fail(err, errlen, "--%s wants %s, got '%.64s'", o->name, o->what, v);
        return 0;
    }
    case MKS_OPT_TEXT: {
        size_t n = strlen(v), i = 0;
        while (i < n && (unsigned char)v[i] >= 0x20 && v[i] != 0x7f)
            i++;
        if (n < o->umin || n > o->umax || i < n)
            return fail(err, errlen, "--%s wants %s: one line of %llu to %llu characters, got"
                        " '%.64s'",
                        o->name, o->what, (unsigned long long)o->umin,
                        (unsigned long long)o->umax, v);
        return 0;
    }
    case MKS_OPT_IDS:
        if (check_list(v, INT64_MAX))
            return fail(err, errlen, "--%s wants %s, got '%.64s'", o->name, o->what, v);
        return 0;
    case MKS_OPT_CHOICE: {
        size_t n = strlen(v);
        for (const char *c = o->choices; *c;) {
            size_t len = strcspn(c, "|");
            if (n && len == n && !strncmp(c, v, n))
                return 0;
            c += len + (c[len] == '|');
        }
        /* "a|b|c" said as "a, b or c" */
        char list[128];
        size_t k = 0;
        for (const char *c = o->choices; *c && k + 5 < sizeof(list); c++) {
            const char *sep = *c != '|' ? NULL : strchr(c + 1, '|') ? ", " : " or ";
            if (sep) {
                memcpy(list + k, sep, strlen(sep));
                k += strlen(sep);
            } else {
                list[k++] = *c;
            }
        }
        list[k] = 0;
        return fail(err, errlen, "--%s takes %s, got '%.64s'", o->name, list, v);
    }
    }
    return fail(err, errlen, "--%s: unknown kind of option", o->name);
}

/* More than any command line gives; bounds the work of a request. */
#define MAX_REQUEST_ARGS 256

int mks_args_check(const char *cmd, char *const *args, size_t n, size_t min_pos, size_t max_pos,
                   char *err, size_t errlen)
{
    size_t npos = 0;
    const char *extra = NULL;
    if (n > MAX_REQUEST_ARGS)
        return fail(err, errlen, "%zu arguments, at most %d", n, MAX_REQUEST_ARGS);
    for (size_t i = 0; i < n; i++) {
        const char *a = args[i];
        if (strncmp(a, "--", 2)) {
            if (npos++ == max_pos)
                extra = a;
            continue;
        }
        const char *eq = strchr(a + 2, '=');
        size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
        char name[40];
        if (len == 0 || len >= sizeof(name))
            return fail(err, errlen, "unknown option '%.40s'", a);
        memcpy(name, a + 2, len);
        name[len] = 0;
        const struct mks_opt *o = mks_args_opt(cmd, name);
        if (!o)
            return fail(err, errlen, "unknown option '--%s'", name);
        if (!eq && o->kind != MKS_OPT_FLAG)
            return fail(err, errlen, "--%s needs a value (%s)", name, o->what);
        int rc = mks_args_value(o, eq ? eq + 1 : NULL, err, errlen);
        if (rc)
            return rc;
        for (size_t k = 0; k < i; k++) {
            const char *b = args[k];
            if (!strncmp(b, "--", 2) && !strncmp(b + 2, name, len) &&
                (b[2 + len] == '=' || b[2 + len] == 0))
                return fail(err, errlen, "--%s given twice", name);
        }
    }
    if (npos < min_pos)
        return fail(err, errlen, "missing argument (%zu wanted, %zu given)", min_pos, npos);
    if (extra)
        return fail(err, errlen, "unexpected argument '%.64s'", extra);
    return 0;
}

/*
 * The arguments of every mkscope command, in one table that the CLI and the
 * collector both check against: which options a command takes, what each
 * value must be (a step number, a ratio, a rank list, a hook, a name), and
 * how many positional arguments it wants.  The CLI checks before it sends,
 * so a mistake is exit 2 with no collector needed; the collector checks
 * again, since a request is input from outside like any other.
 *
 * On the wire, named arguments travel as "--name=value" (flags as
 * "--name") after the positional ones.
 */
#ifndef MKS_COLLECTOR_ARGS_H
#define MKS_COLLECTOR_ARGS_H

#include <stddef.h>
#include <stdint.h>

enum mks_opt_kind {
    MKS_OPT_FLAG,   /* no value */
    MKS_OPT_UINT,   /* decimal digits, umin..umax */
    MKS_OPT_REAL,   /* a finite number, rmin (exclusive when min_open)..rmax */
    MKS_OPT_NAME,   /* a program or built-in name, MKS_WIRE_PROG_GRAMMAR */
    MKS_OPT_JOB,    /* a job name, MKS_WIRE_JOB_GRAMMAR */
    MKS_OPT_HOOK,   /* a hook name (task_end) or id (0..10) */
    MKS_OPT_RANKS,  /* "all" or distinct ranks: 0,2,3 */
    MKS_OPT_IDS,    /* distinct ids: 4,5,9 */
    MKS_OPT_CHOICE, /* one of choices, "a|b|c" */
    MKS_OPT_RANGE,  /* step numbers "A-B" (A <= B) or "A" */
    MKS_OPT_DURATION, /* "90", "90s", "5m", "1h": at most a week */
    MKS_OPT_TEXT,   /* one line of printable text, 1..umax bytes (a probe: the collector parses it) */
};

struct mks_opt {
    const char *name; /* without "--" */
    enum mks_opt_kind kind;
    uint64_t umin, umax;
    double rmin, rmax;
    int min_open;
    const char *choices;
    const char *what; /* for the error: "a step number" */
};

/* The options of a command ("diagnose", "trigger-add": the wire verb) or
 * NULL when it has none; every command takes --job. */
const struct mks_opt *mks_args_opt(const char *cmd, const char *name);
/* Is value right for o?  0, or -EINVAL with one line in err that names the
 * option, what it wants and what it got. */
int mks_args_value(const struct mks_opt *o, const char *value, char *err, size_t errlen);
/* Check a request's arguments: every "--name[=value]" an option of cmd,
 * given once, with a value when it takes one and a valid one; the
 * positional ones between min_pos and max_pos.  0, or -EINVAL with one line
 * in err. */
int mks_args_check(const char *cmd, char *const *args, size_t n, size_t min_pos, size_t max_pos,
                   char *err, size_t errlen);
/* A duration as MKS_OPT_DURATION takes it, in ns: 0 or -EINVAL. */
int mks_args_duration(const char *text, uint64_t *ns_p);
/* The positional arguments a collector verb takes; -1 for an unknown verb. */
int mks_args_positional(const char *verb, size_t *min_p, size_t *max_p);

#endif

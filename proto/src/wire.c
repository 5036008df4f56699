/*
 * Encoding, decoding and validation of mkscope.v1 envelopes.
 *
 * Validation has two layers.  A generic walk over the protobuf-c descriptors
 * bounds every string (length, UTF-8), bytes field and repeated field of any
 * message, so a new field added to the schema is bounded without anyone
 * remembering to.  Then per-message rules check what only the schema's
 * meaning knows: version, body present, enum ranges, histogram size, time
 * order, unique task class ids.
 *
 * The MAC covers the encoded envelope without its mac field; encode appends
 * the field (number 100, 32 bytes) after the body, decode requires it to be
 * the last 35 bytes and checks it over everything before.  That keeps the MAC
 * independent of how any encoder orders fields.
 */
#include "mkscope/wire.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Tag of field 100, wire type 2 (length-delimited), as a varint; then the
 * length byte 32. */
static const uint8_t mac_field_head[3] = {0xa2, 0x06, MKS_WIRE_MAC_BYTES};
#define MAC_FIELD_BYTES (sizeof(mac_field_head) + MKS_WIRE_MAC_BYTES)

static int fail(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int fail(char *err, size_t errlen, int code, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* ---- generic bounds ---------------------------------------------------- */

struct field_limit {
    const char *message; /* short message name, e.g. "CliReply" */
    const char *field;
    size_t max;
};

/* Fields allowed to exceed the defaults, with why. */
static const struct field_limit field_limits[] = {
    {"CliReply", "json", MKS_WIRE_MAX_TEXT},             /* query answers */
    {"CliReply", "error", MKS_WIRE_MAX_STR},
    {"CliRequest", "args", MKS_WIRE_MAX_TEXT},           /* raw SQL, predicates */
    {"CliRequest", "blob", MKS_WIRE_MAX_OBJECT},         /* BPF objects to attach */
    {"AttachProgram", "bpf_object", MKS_WIRE_MAX_OBJECT},
    {"CommandReply", "verifier_log", 65536},
    {"Escalate", "predicate", MKS_WIRE_MAX_STR},
    {"Hist", "buckets", MKS_WIRE_MAX_HIST_BUCKETS},
    {"Escalate", "filter_insns", 4096},                  /* MKS_BPF_MAX_INSNS */
    {"Escalate", "hooks", MKS_WIRE_HOOK_LIMIT},
    {"ProbeProgram", "insns", 4096},                     /* MKS_BPF_MAX_INSNS */
    {"ProbeStart", "programs", MKS_WIRE_HOOK_LIMIT},
    {"ProbeStart", "maps", 16},                          /* MKS_MAX_PROG_MAPS */
    {"ProbeResult", "hooks", MKS_WIRE_HOOK_LIMIT},
    {"ProbeRow", "key", 16},
    {"ProbeRow", "words", 4096},
};

static const char *short_name(const ProtobufCMessageDescriptor *d)
{
    return d->short_name ? d->short_name : d->name;
}

static size_t limit_lookup(const ProtobufCMessageDescriptor *d, const ProtobufCFieldDescriptor *f,
                           size_t dflt)
{
    for (size_t i = 0; i < sizeof(field_limits) / sizeof(field_limits[0]); i++)
        if (!strcmp(field_limits[i].message, short_name(d)) && !strcmp(field_limits[i].field, f->name))
            return field_limits[i].max;
    return dflt;
}

/* The bound of field f: looked up by name once per field and thread, then
 * by the descriptor's address (every value of every message asks). */
static size_t limit_for(const ProtobufCMessageDescriptor *d, const ProtobufCFieldDescriptor *f,
                        size_t dflt)
{
    static _Thread_local struct {
        const ProtobufCFieldDescriptor *f;
        size_t dflt, max;
    } cache[128];
    size_t h = ((uintptr_t)f >> 4) % (sizeof(cache) / sizeof(cache[0]));
    if (cache[h].f != f || cache[h].dflt != dflt) {
        cache[h].max = limit_lookup(d, f, dflt);
        cache[h].f = f;
        cache[h].dflt = dflt;
    }
    return cache[h].max;
}

/* Strict UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF. */
static bool utf8_valid(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t len;
        uint32_t cp, min;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            len = 2, cp = c & 0x1f, min = 0x80;
        } else if ((c & 0xf0) == 0xe0) {
            len = 3, cp = c & 0x0f, min = 0x800;
        } else if ((c & 0xf8) == 0xf0) {
            len = 4, cp = c & 0x07, min = 0x10000;
        } else {
            return false;
        }
        if (i + len > n)
            return false;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return false;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += len;
    }
    return true;
}

/* Where the walk is, for error messages: built with pointer stores only,
 * formatted only when something is wrong. */
#define WALK_DEPTH 10
struct wpath {
    const char *name[WALK_DEPTH + 1];
    long idx[WALK_DEPTH + 1]; /* -1: not an element of a repeated field */
    int n;
};

static int path_fail(char *err, size_t errlen, const struct wpath *p, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int path_fail(char *err, size_t errlen, const struct wpath *p, const char *fmt, ...)
{
    if (!err || !errlen)
        return -EBADMSG;
    size_t off = 0;
    err[0] = 0;
    for (int i = 0; i < p->n && off < errlen; i++) {
        int w = p->idx[i] >= 0 ? snprintf(err + off, errlen - off, "%s%s[%ld]", i ? "." : "",
                                          p->name[i], p->idx[i])
                               : snprintf(err + off, errlen - off, "%s%s", i ? "." : "",
                                          p->name[i]);
        if (w < 0)
            break;
        off += (size_t)w;
    }
    if (off < errlen) {
        int w = snprintf(err + off, errlen - off, ": ");
        off += w > 0 ? (size_t)w : 0;
    }
    if (off < errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err + off, errlen - off, fmt, ap);
        va_end(ap);
    }
    return -EBADMSG;
}

static int walk(const ProtobufCMessage *m, struct wpath *p, char *err, size_t errlen);

/* Bound of a 64-bit field by what it holds (see MKS_WIRE_MAX_COUNT): counts
 * and durations, times and sequence numbers, or an id (no bound).  Named by
 * field, so a counter added to the schema under a usual name is bounded. */
static uint64_t u64_bound_lookup(const ProtobufCFieldDescriptor *f)
{
    static const char *const counts[] = {
        "count",     "sum",       "max",         "buckets", "sum_run_ns",        "eligible",
        "ran",       "throttled", "lost",        "tasks",   "bytes",             "busy_ns",
        "idle_ns",   "dep_wait_ns", "over_threshold_ns", "queued_while_idle_ns", "sum_ns",
        "max_ns",    "lost_summaries", "waits_dropped", "unacked", "dropped", "cost",
        "undelivered", "cpu_wait_ns", "cpu_runs", "steps_withheld", "rows_withheld",
    };
    static const char *const stamps[] = {
        "agent_time_ns", "app_start_ns", "collector_time_ns", "applied_host_ns", "sent_ns",
        "issued_ns",     "epoch_ns",     "seq",               "last_seq",        "up_to_seq",
        "stored_seq",    "epoch",        "incarnation",       "heartbeat_ns",
    };
    const char *n = f->name;
    if (!strncmp(n, "t_", 2))
        return MKS_WIRE_MAX_TIME;
    for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++)
        if (!strcmp(n, counts[i]))
            return MKS_WIRE_MAX_COUNT;
    for (size_t i = 0; i < sizeof(stamps) / sizeof(stamps[0]); i++)
        if (!strcmp(n, stamps[i]))
            return MKS_WIRE_MAX_TIME;
    return UINT64_MAX;
}

/* u64_bound_lookup once per field and thread, then by the descriptor's
 * address: each of the thousands of 64-bit values of a summary asked by
 * name, which took a quarter of decoding one. */
static uint64_t u64_bound(const ProtobufCFieldDescriptor *f)
{
    static _Thread_local struct {
        const ProtobufCFieldDescriptor *f;
        uint64_t max;
    } cache[256];
    size_t h = ((uintptr_t)f >> 4) % (sizeof(cache) / sizeof(cache[0]));
    if (cache[h].f != f) {
        cache[h].max = u64_bound_lookup(f);
        cache[h].f = f;
    }
    return cache[h].max;
}

static int check_value(const ProtobufCMessageDescriptor *d, const ProtobufCFieldDescriptor *f,
                       const void *member, struct wpath *p, char *err, size_t errlen)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_STRING: {
        const char *s = *(char *const *)member;
        if (!s)
            return 0;
        size_t max = limit_for(d, f, MKS_WIRE_MAX_STR);
        size_t n = strnlen(s, max + 1);
        if (n > max)
            return path_fail(err, errlen, p, "string longer than %zu bytes", max);
        if (!utf8_valid((const unsigned char *)s, n))
            return path_fail(err, errlen, p, "string is not valid UTF-8");
        return 0;
    }
    case PROTOBUF_C_TYPE_BYTES: {
        const ProtobufCBinaryData *b = member;
        size_t max = limit_for(d, f, MKS_WIRE_MAX_BYTES);
        if (b->len > max)
            return path_fail(err, errlen, p, "%zu bytes, at most %zu allowed", b->len, max);
        return 0;
    }
    case PROTOBUF_C_TYPE_MESSAGE: {
        const ProtobufCMessage *sub = *(const ProtobufCMessage *const *)member;
        return sub ? walk(sub, p, err, errlen) : 0;
    }
    case PROTOBUF_C_TYPE_UINT64: {
        uint64_t v = *(const uint64_t *)member, max = u64_bound(f);
        if (v > max)
            return path_fail(err, errlen, p, "%llu above the bound 2^%d: a corrupt or forged %s",
                             (unsigned long long)v, max == MKS_WIRE_MAX_COUNT ? 53 : 62,
                             max == MKS_WIRE_MAX_COUNT ? "count" : "time or sequence number");
        return 0;
    }
    default:
        return 0;
    }
}

static int walk(const ProtobufCMessage *m, struct wpath *p, char *err, size_t errlen)
{
    const ProtobufCMessageDescriptor *d = m->descriptor;
    /* The schema nests at most a few levels; deeper means a corrupt struct. */
    if (p->n >= WALK_DEPTH)
        return path_fail(err, errlen, p, "messages nested too deeply");
    int at = p->n++;
    int rc = 0;
    /* Fields of a newer schema are kept as unknown and ignored; a field
     * number protobuf allows never exceeds 2^29 - 1 (protobuf-c keeps the
     * tag in 32 bits and would write a larger one back as field 0). */
    for (unsigned i = 0; i < m->n_unknown_fields; i++) {
        uint32_t tag = m->unknown_fields[i].tag;
        if (tag == 0 || tag > (1u << 29) - 1) {
            p->n = at;
            return path_fail(err, errlen, p, "field number %u out of range", tag);
        }
    }
    for (unsigned i = 0; i < d->n_fields && !rc; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        const char *base = (const char *)m;
        if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
            uint32_t which = *(const uint32_t *)(base + f->quantifier_offset);
            if (which != f->id)
                continue;
        }
        p->name[at] = f->name;
        p->idx[at] = -1;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *)(base + f->quantifier_offset);
            size_t max = limit_for(d, f, MKS_WIRE_MAX_REPEATED);
            if (n > max) {
                p->n = at + 1;
                return path_fail(err, errlen, p, "%zu elements, at most %zu allowed", n, max);
            }
            if (f->type == PROTOBUF_C_TYPE_UINT64) {
                /* one bound for every element (histogram buckets) */
                const uint64_t *v = *(const uint64_t *const *)(base + f->offset);
                uint64_t max = u64_bound(f);
                for (size_t k = 0; k < n && max != UINT64_MAX && !rc; k++) {
                    if (v[k] > max) {
                        p->idx[at] = (long)k;
                        p->n = at + 1;
                        rc = check_value(d, f, &v[k], p, err, errlen);
                    }
                }
                continue;
            }
            if (f->type != PROTOBUF_C_TYPE_STRING && f->type != PROTOBUF_C_TYPE_BYTES &&
                f->type != PROTOBUF_C_TYPE_MESSAGE)
                continue;
            const char *arr = *(char *const *)(base + f->offset);
            size_t esz = f->type == PROTOBUF_C_TYPE_BYTES ? sizeof(ProtobufCBinaryData)
                                                          : sizeof(void *);
            for (size_t k = 0; k < n && !rc; k++) {
                p->idx[at] = (long)k;
                p->n = at + 1;
                rc = check_value(d, f, arr + k * esz, p, err, errlen);
            }
        } else {
            p->n = at + 1;
            rc = check_value(d, f, base + f->offset, p, err, errlen);
        }
    }
    p->n = at;
    return rc;
}

/* ---- per-message rules ----------------------------------------------------- */

int mks_wire_job_valid(const char *job)
{
    size_t n = job ? strnlen(job, MKS_WIRE_MAX_JOB + 1) : 0;
    if (n == 0 || n > MKS_WIRE_MAX_JOB)
        return 0;
    /* ASCII classes by hand: isalnum() follows the locale. */
    for (size_t i = 0; i < n; i++) {
        char c = job[i];
        bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (!alnum && c != '_' && (i == 0 || (c != '.' && c != '-')))
            return 0;
    }
    return 1;
}

char *mks_wire_one_line(char *s)
{
    for (unsigned char *p = (unsigned char *)s; p && *p; p++)
        if (*p < 0x20 || *p == 0x7f)
            *p = '?';
    return s;
}

int mks_wire_prog_name_valid(const char *name)
{
    size_t n = name ? strnlen(name, MKS_WIRE_MAX_PROG_NAME + 1) : 0;
    if (n == 0 || n > MKS_WIRE_MAX_PROG_NAME)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.'))
            return 0;
    }
    return 1;
}

/* Hook ABI v1's events by id (enum mks_hook_event), as the wire carries
 * them. */
static const char *const hook_names[MKS_WIRE_HOOK_LIMIT] = {
    "task_ready",   "task_assign",    "task_start", "task_end",  "dep_wait_begin", "dep_wait_end",
    "dep_release",  "comm_begin",     "comm_end",   "gen_advance", "queue_pressure"};

const char *mks_wire_hook_name(uint32_t h)
{
    return h < MKS_WIRE_HOOK_LIMIT ? hook_names[h] : NULL;
}

int mks_wire_hook_parse(const char *s)
{
    if (!s || !*s)
        return -1;
    for (int h = 0; h < (int)MKS_WIRE_HOOK_LIMIT; h++)
        if (!strcmp(s, hook_names[h]))
            return h;
    /* A number, digits only: "3", not "3x", " 3" or "-0". */
    int v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9' || p - s > 2)
            return -1;
        v = v * 10 + (*p - '0');
    }
    return v < (int)MKS_WIRE_HOOK_LIMIT ? v : -1;
}

static bool job_valid(const char *job)
{
    return mks_wire_job_valid(job);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static int check_schema(const Mkscope__V1__TaskSchema *s, char *err, size_t errlen)
{
    if (!s)
        return 0;
    if (s->n_classes) {
        uint32_t *ids = malloc(s->n_classes * sizeof(*ids));
        if (!ids)
            return fail(err, errlen, -ENOMEM, "schema: out of memory");
        for (size_t i = 0; i < s->n_classes; i++) {
            const Mkscope__V1__TaskClass *c = s->classes[i];
            if (!c->name || !*c->name) {
                free(ids);
                return fail(err, errlen, -EBADMSG, "schema.classes[%zu]: task class %u has no name",
                            i, c->id);
            }
            ids[i] = c->id;
        }
        qsort(ids, s->n_classes, sizeof(*ids), cmp_u32);
        for (size_t i = 1; i < s->n_classes; i++) {
            if (ids[i] == ids[i - 1]) {
                uint32_t dup = ids[i];
                free(ids);
                return fail(err, errlen, -EBADMSG, "schema: task class id %u appears twice", dup);
            }
        }
        free(ids);
    }
    return 0;
}

static int check_hook(int64_t hook, bool allow_any, const char *what, char *err, size_t errlen)
{
    if ((allow_any && hook == -1) || (hook >= 0 && hook < MKS_WIRE_HOOK_LIMIT))
        return 0;
    return fail(err, errlen, -EBADMSG, "%s: hook %lld out of range (0..%u%s)", what,
                (long long)hook, MKS_WIRE_HOOK_LIMIT - 1, allow_any ? " or -1" : "");
}

static int check_interval(uint64_t b, uint64_t e, const char *what, size_t i, char *err,
                          size_t errlen)
{
    if (b && e && e < b)
        return fail(err, errlen, -EBADMSG, "%s[%zu]: ends (%llu) before it begins (%llu)", what, i,
                    (unsigned long long)e, (unsigned long long)b);
    return 0;
}

static int check_attach(const Mkscope__V1__AttachProgram *a, const char *what, char *err,
                        size_t errlen)
{
    if (!a)
        return fail(err, errlen, -EBADMSG, "%s: program missing", what);
    if (!a->name || !*a->name)
        return fail(err, errlen, -EBADMSG, "%s: program has no name", what);
    bool obj = a->bpf_object.len > 0, builtin = a->builtin && *a->builtin;
    if (obj == builtin)
        return fail(err, errlen, -EBADMSG, "%s: give exactly one of bpf_object and builtin", what);
    return check_hook(a->hook, true, what, err, errlen);
}

static int check_command(const Mkscope__V1__Command *c, size_t idx, char *err, size_t errlen)
{
    char what[48];
    snprintf(what, sizeof(what), "command %llu", (unsigned long long)c->id);
    (void)idx;
    switch (c->kind_case) {
    case MKSCOPE__V1__COMMAND__KIND_ATTACH:
        return check_attach(c->attach, what, err, errlen);
    case MKSCOPE__V1__COMMAND__KIND_DETACH:
        if (!c->detach->name || !*c->detach->name)
            return fail(err, errlen, -EBADMSG, "%s: detach names no program", what);
        return check_hook(c->detach->hook, true, what, err, errlen);
    case MKSCOPE__V1__COMMAND__KIND_REPLACE:
        if (!c->replace->old_name || !*c->replace->old_name)
            return fail(err, errlen, -EBADMSG, "%s: replace names no old program", what);
        return check_attach(c->replace->program, what, err, errlen);
    case MKSCOPE__V1__COMMAND__KIND_BUDGET:
        if (c->budget->sample_shift > 63)
            return fail(err, errlen, -EBADMSG, "%s: sample_shift %u above 63", what,
                        c->budget->sample_shift);
        return check_hook(c->budget->hook, true, what, err, errlen);
    case MKSCOPE__V1__COMMAND__KIND_ESCALATE:
        for (size_t i = 0; i < c->escalate->n_hooks; i++) {
            int rc = check_hook(c->escalate->hooks[i], false, what, err, errlen);
            if (rc)
                return rc;
        }
        return 0;
    case MKSCOPE__V1__COMMAND__KIND_PROBE: {
        const Mkscope__V1__ProbeStart *p = c->probe;
        if (!p->name || !mks_wire_prog_name_valid(p->name))
            return fail(err, errlen, -EBADMSG, "%s: probe name must be " MKS_WIRE_PROG_GRAMMAR,
                        what);
        if (!p->n_programs || !p->duration_ms)
            return fail(err, errlen, -EBADMSG, "%s: probe without programs or window", what);
        unsigned seen = 0;
        for (size_t i = 0; i < p->n_programs; i++) {
            int rc = check_hook(p->programs[i]->hook, false, what, err, errlen);
            if (rc)
                return rc;
            if (seen & (1u << p->programs[i]->hook))
                return fail(err, errlen, -EBADMSG, "%s: probe has two programs at hook %u", what,
                            p->programs[i]->hook);
            seen |= 1u << p->programs[i]->hook;
            if (!p->programs[i]->n_insns)
                return fail(err, errlen, -EBADMSG, "%s: probe program without instructions", what);
        }
        for (size_t i = 0; i < p->n_maps; i++)
            if (!p->maps[i]->name || !*p->maps[i]->name || strlen(p->maps[i]->name) >= 32)
                return fail(err, errlen, -EBADMSG, "%s: probe map %zu: a name of 1..31 bytes",
                            what, i);
        return 0;
    }
    default:
        return fail(err, errlen, -EBADMSG, "%s: no command kind set", what);
    }
}

static int check_summary(const Mkscope__V1__EpochSummary *s, char *err, size_t errlen)
{
    int rc;
    if ((rc = check_interval(s->t_begin_host_ns, s->t_end_host_ns, "epoch host time", 0, err,
                             errlen)) ||
        (rc = check_interval(s->t_begin_dev_ns, s->t_end_dev_ns, "epoch device time", 0, err,
                             errlen)))
        return rc;
    if (s->detail_tier > 3)
        return fail(err, errlen, -EBADMSG, "epoch_summary: detail_tier %u above 3", s->detail_tier);
    if (s->sample_shift > 63)
        return fail(err, errlen, -EBADMSG, "epoch_summary: sample_shift %u above 63",
                    s->sample_shift);
    for (size_t i = 0; i < s->n_steps; i++) {
        const Mkscope__V1__StepTime *t = s->steps[i];
        if ((rc = check_interval(t->t_begin_dev_ns, t->t_end_dev_ns, "steps", i, err, errlen)))
            return rc;
        /* The CPU wait is of a whole step's span, or absent: a value
         * without its flag would read as not measured, so it is refused
         * rather than dropped. */
        if (!t->cpu_wait_measured && (t->cpu_wait_ns || t->cpu_runs))
            return fail(err, errlen, -EBADMSG,
                        "steps[%zu]: cpu_wait_ns %llu, cpu_runs %llu without cpu_wait_measured", i,
                        (unsigned long long)t->cpu_wait_ns, (unsigned long long)t->cpu_runs);
        /* (a summary about to be sent in the compact form has its times in
         * dev_times, t_begin_dev_ns first; a decoded one is plain again) */
        bool begin = t->t_begin_dev_ns || (s->dev_time_base && t->n_dev_times && t->dev_times[0]);
        if (t->cpu_wait_measured && (!t->complete || !begin))
            return fail(err, errlen, -EBADMSG,
                        "steps[%zu]: cpu_wait_measured on a step without its whole span"
                        " (complete and t_begin_dev_ns)", i);
    }
    for (size_t i = 0; i < s->n_remote_waits; i++)
        if ((rc = check_interval(s->remote_waits[i]->t_begin_dev_ns,
                                 s->remote_waits[i]->t_end_dev_ns, "remote_waits", i, err, errlen)))
            return rc;
    for (size_t i = 0; i < s->n_releases; i++) {
        const Mkscope__V1__Release *r = s->releases[i];
        if ((rc = check_interval(r->t_start_dev_ns, r->t_end_dev_ns, "releases", i, err, errlen)) ||
            (rc = check_interval(r->t_ready_dev_ns, r->t_start_dev_ns, "releases (ready)", i, err,
                                 errlen)) ||
            (rc = check_interval(r->t_comm_begin_dev_ns, r->t_comm_end_dev_ns, "releases (comm)", i,
                                 err, errlen)))
            return rc;
    }
    for (size_t i = 0; i < s->n_coverage; i++) {
        const Mkscope__V1__Coverage *c = s->coverage[i];
        char what[32];
        snprintf(what, sizeof(what), "coverage[%zu]", i);
        if ((rc = check_hook(c->hook, false, what, err, errlen)))
            return rc;
        if (c->ran > c->eligible)
            return fail(err, errlen, -EBADMSG, "coverage[%zu]: ran %llu > eligible %llu", i,
                        (unsigned long long)c->ran, (unsigned long long)c->eligible);
    }
    for (size_t i = 0; i < s->n_probes; i++) {
        const Mkscope__V1__ProbeResult *p = s->probes[i];
        for (size_t k = 0; k < p->n_hooks; k++) {
            const Mkscope__V1__ProbeHook *h = p->hooks[k];
            char what[64];
            snprintf(what, sizeof(what), "probes[%zu].hooks[%zu]", i, k);
            if ((rc = check_hook(h->hook, false, what, err, errlen)))
                return rc;
            if (h->observed > h->eligible || h->matched > h->observed ||
                h->overflowed > h->matched || h->unknown > h->observed)
                return fail(err, errlen, -EBADMSG,
                            "%s: counts out of order (observed %llu of %llu eligible, %llu"
                            " matched, %llu unknown, %llu overflowed)",
                            what, (unsigned long long)h->observed,
                            (unsigned long long)h->eligible, (unsigned long long)h->matched,
                            (unsigned long long)h->unknown, (unsigned long long)h->overflowed);
        }
        /* every row of one probe has its layout: as many key and value words */
        for (size_t k = 1; k < p->n_rows; k++)
            if (p->rows[k]->n_key != p->rows[0]->n_key ||
                p->rows[k]->n_words != p->rows[0]->n_words)
                return fail(err, errlen, -EBADMSG, "probes[%zu].rows[%zu]: another layout", i, k);
    }
    return 0;
}

static bool needs_job(int body)
{
    switch (body) {
    case MKSCOPE__V1__ENVELOPE__BODY_REGISTER:
    case MKSCOPE__V1__ENVELOPE__BODY_HEARTBEAT:
    case MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY:
    case MKSCOPE__V1__ENVELOPE__BODY_COMMAND_REPLY:
    case MKSCOPE__V1__ENVELOPE__BODY_SURVEY_REPLY:
    case MKSCOPE__V1__ENVELOPE__BODY_RAW_EVENT_BATCH:
        return true;
    default:
        return false;
    }
}

static int check_envelope(const mks_envelope *env, char *err, size_t errlen)
{
    int rc;
    if (env->wire_version != MKS_WIRE_VERSION)
        return fail(err, errlen, -EPROTO,
                    "wire version %u not supported (this build speaks %u): upgrade the older side",
                    env->wire_version, MKS_WIRE_VERSION);
    const char *body = mks_wire_body_name(env->body_case);
    if (env->body_case == MKSCOPE__V1__ENVELOPE__BODY__NOT_SET || !strcmp(body, "?"))
        return fail(err, errlen, -EBADMSG, "envelope carries no message body");
    if (env->job && *env->job && !job_valid(env->job))
        return fail(err, errlen, -EBADMSG, "job name must match " MKS_WIRE_JOB_GRAMMAR);
    if (needs_job(env->body_case) && !job_valid(env->job))
        return fail(err, errlen, -EBADMSG, "%s from an agent must name its job", body);

    switch (env->body_case) {
    case MKSCOPE__V1__ENVELOPE__BODY_REGISTER: {
        const Mkscope__V1__Register *r = env->register_;
        if (r->n_ranks > MKS_WIRE_MAX_RANKS)
            return fail(err, errlen, -EBADMSG, "register: n_ranks %u above %u", r->n_ranks,
                        MKS_WIRE_MAX_RANKS);
        if (r->n_ranks == 0 || env->rank >= r->n_ranks)
            return fail(err, errlen, -EBADMSG, "register: rank %u not below n_ranks %u", env->rank,
                        r->n_ranks);
        if (r->hook_abi_version == 0)
            return fail(err, errlen, -EBADMSG, "register: hook_abi_version missing");
        if (r->n_workers == 0 || r->n_workers > 65536)
            return fail(err, errlen, -EBADMSG, "register: n_workers %u not in 1..65536",
                        r->n_workers);
        return check_schema(r->schema, err, errlen);
    }
    case MKSCOPE__V1__ENVELOPE__BODY_HEARTBEAT:
        for (size_t i = 0; i < env->heartbeat->n_programs; i++)
            if ((rc = check_hook(env->heartbeat->programs[i]->hook, false, "heartbeat program",
                                 err, errlen)))
                return rc;
        return 0;
    case MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY:
        return check_summary(env->epoch_summary, err, errlen);
    case MKSCOPE__V1__ENVELOPE__BODY_ACK:
        for (size_t i = 0; i < env->ack->n_commands; i++)
            if ((rc = check_command(env->ack->commands[i], i, err, errlen)))
                return rc;
        return 0;
    case MKSCOPE__V1__ENVELOPE__BODY_COMMAND:
        return check_command(env->command, 0, err, errlen);
    case MKSCOPE__V1__ENVELOPE__BODY_CLI_REQUEST:
        if (!env->cli_request->verb || !*env->cli_request->verb)
            return fail(err, errlen, -EBADMSG, "cli_request: no verb");
        return 0;
    case MKSCOPE__V1__ENVELOPE__BODY_SURVEY_REPLY:
        for (size_t i = 0; i < env->survey_reply->n_coverage; i++)
            if ((rc = check_hook(env->survey_reply->coverage[i]->hook, false, "survey coverage",
                                 err, errlen)))
                return rc;
        return 0;
    case MKSCOPE__V1__ENVELOPE__BODY_RAW_EVENT_BATCH:
        for (size_t i = 0; i < env->raw_event_batch->n_events; i++)
            if ((rc = check_hook(env->raw_event_batch->events[i]->event, false, "raw event", err,
                                 errlen)))
                return rc;
        return 0;
    default:
        return 0;
    }
}

int mks_wire_validate_message(const ProtobufCMessage *msg, char *err, size_t errlen)
{
    if (!msg || !msg->descriptor)
        return fail(err, errlen, -EINVAL, "no message");
    struct wpath path = {.n = 0};
    /* The envelope itself is not named in paths: "heartbeat.programs[0]". */
    int rc = walk(msg, &path, err, errlen);
    if (rc)
        return rc;
    if (msg->descriptor == &mkscope__v1__envelope__descriptor)
        return check_envelope((const mks_envelope *)msg, err, errlen);
    if (msg->descriptor == &mkscope__v1__task_schema__descriptor)
        return check_schema((const Mkscope__V1__TaskSchema *)msg, err, errlen);
    return 0;
}

int mks_wire_validate(const mks_envelope *env, char *err, size_t errlen)
{
    return mks_wire_validate_message(env ? &env->base : NULL, err, errlen);
}

/* ---- encode / decode ----------------------------------------------------------- */

static int sodium_ready(char *err, size_t errlen)
{
    if (sodium_init() < 0)
        return fail(err, errlen, -EIO, "libsodium failed to initialise");
    return 0;
}

void mks_wire_init(mks_envelope *env, const char *job, uint32_t rank, uint64_t seq)
{
    mkscope__v1__envelope__init(env);
    env->wire_version = MKS_WIRE_VERSION;
    env->job = (char *)(job ? job : "");
    env->rank = rank;
    env->seq = seq;
    /* libsodium's generator (getrandom underneath); without it the nonce
     * stays 0 and a receiver that requires one says so. */
    if (sodium_init() >= 0) {
        do
            randombytes_buf(&env->nonce, sizeof(env->nonce));
        while (!env->nonce);
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    env->sent_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int mks_wire_encode(const mks_envelope *env, const struct mks_wire_key *key, uint8_t **buf_p,
                    size_t *len_p, char *err, size_t errlen)
{
    if (!env || !buf_p || !len_p)
        return fail(err, errlen, -EINVAL, "encode: missing argument");
    if (env->mac.len)
        return fail(err, errlen, -EINVAL, "encode: mac must be empty, it is computed here");
    int rc = mks_wire_validate(env, err, errlen);
    if (rc)
        return rc;
    size_t n = mkscope__v1__envelope__get_packed_size(env);
    if (n + MAC_FIELD_BYTES > MKS_WIRE_MAX_MSG)
        return fail(err, errlen, -E2BIG, "encode: %s message of %zu bytes exceeds the %u limit",
                    mks_wire_body_name(env->body_case), n, MKS_WIRE_MAX_MSG);
    uint8_t *buf = malloc(n + MAC_FIELD_BYTES);
    if (!buf)
        return fail(err, errlen, -ENOMEM, "encode: out of memory");
    size_t got = mkscope__v1__envelope__pack(env, buf);
    if (got != n) {
        free(buf);
        return fail(err, errlen, -EIO, "encode: protobuf-c packed %zu bytes, expected %zu", got, n);
    }
    if (key) {
        if ((rc = sodium_ready(err, errlen))) {
            free(buf);
            return rc;
        }
        memcpy(buf + n, mac_field_head, sizeof(mac_field_head));
        crypto_auth(buf + n + sizeof(mac_field_head), buf, n, key->bytes);
        n += MAC_FIELD_BYTES;
    }
    *buf_p = buf;
    *len_p = n;
    return 0;
}

/* ---- decode: cheapest checks first ----------------------------------------- */

/* Largest encoded envelope per body: small for what is small, so that a
 * large message of a small kind is refused before anything is spent on it. */
size_t mks_wire_body_limit(int body_case)
{
    switch (body_case) {
    case MKSCOPE__V1__ENVELOPE__BODY_REGISTER: return 4u << 20; /* a runtime's task schema */
    case MKSCOPE__V1__ENVELOPE__BODY_REGISTER_ACK: return 64u << 10;
    case MKSCOPE__V1__ENVELOPE__BODY_HEARTBEAT: return 1u << 20; /* 64 programs */
    case MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY: return MKS_WIRE_MAX_MSG;
    case MKSCOPE__V1__ENVELOPE__BODY_ACK: return MKS_WIRE_MAX_MSG; /* commands with objects */
    case MKSCOPE__V1__ENVELOPE__BODY_COMMAND: return MKS_WIRE_MAX_OBJECT + (1u << 20);
    case MKSCOPE__V1__ENVELOPE__BODY_COMMAND_REPLY: return 256u << 10; /* a verifier log */
    case MKSCOPE__V1__ENVELOPE__BODY_SURVEY_REQUEST: return 64u << 10;
    case MKSCOPE__V1__ENVELOPE__BODY_SURVEY_REPLY: return 8u << 20; /* map dumps */
    case MKSCOPE__V1__ENVELOPE__BODY_CLI_REQUEST: return MKS_WIRE_MAX_OBJECT + (1u << 20);
    case MKSCOPE__V1__ENVELOPE__BODY_CLI_REPLY: return MKS_WIRE_MAX_MSG;
    case MKSCOPE__V1__ENVELOPE__BODY_RAW_EVENT_BATCH: return 4u << 20;
    default: return 0;
    }
}

uint32_t mks_wire_body_bit(int body_case)
{
    return mks_wire_body_limit(body_case) ? 1u << body_case : 0;
}

/* Largest message any body in accept may have. */
static size_t accept_limit(uint32_t accept)
{
    if (!accept)
        return MKS_WIRE_MAX_MSG;
    size_t max = 0;
    for (int b = 0; b < 32; b++)
        if (accept & (1u << b) && mks_wire_body_limit(b) > max)
            max = mks_wire_body_limit(b);
    return max;
}

static bool read_varint(const uint8_t *p, size_t n, size_t *at, uint64_t *v)
{
    uint64_t r = 0;
    for (unsigned shift = 0; shift < 64 && *at < n; shift += 7) {
        uint8_t b = p[(*at)++];
        r |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = r;
            return true;
        }
    }
    return false;
}

/* Walk the outer fields of an encoded message, tags and lengths only:
 * fn(field, varint value or length, arg) for each varint and
 * length-delimited field (fixed-width ones are skipped).  Returns 0, or -1
 * when the framing is broken (or a group, which our schema never has and
 * protobuf-c refuses). */
static int outer_fields(const uint8_t *p, size_t n, void (*fn)(uint64_t, int, uint64_t, void *),
                        void *arg)
{
    size_t at = 0;
    while (at < n) {
        uint64_t tag, v;
        if (!read_varint(p, n, &at, &tag) || (tag >> 3) == 0 || (tag >> 3) > UINT32_MAX)
            return -1;
        switch (tag & 7) {
        case 0:
            if (!read_varint(p, n, &at, &v))
                return -1;
            fn(tag >> 3, 0, v, arg);
            break;
        case 1:
            if (n - at < 8)
                return -1;
            at += 8;
            break;
        case 5:
            if (n - at < 4)
                return -1;
            at += 4;
            break;
        case 2:
            if (!read_varint(p, n, &at, &v) || v > n - at)
                return -1;
            at += (size_t)v;
            fn(tag >> 3, 2, v, arg);
            break;
        default:
            return -1;
        }
    }
    return 0;
}

static void body_field(uint64_t field, int wire_type, uint64_t v, void *arg)
{
    (void)v;
    if (wire_type == 2 && mks_wire_body_limit((int)field))
        *(int *)arg = (int)field; /* the last body field wins, as in the decoder */
}

/* The body of an encoded envelope, from its outer fields only: the body
 * case, 0 when there is none, -1 when the framing is broken. */
static int peek_body(const uint8_t *p, size_t n)
{
    int body = 0;
    return outer_fields(p, n, body_field, &body) ? -1 : body;
}

static void nonce_field(uint64_t field, int wire_type, uint64_t v, void *arg)
{
    if (wire_type == 0 && field == 6)
        *(uint64_t *)arg = v;
}

uint64_t mks_wire_nonce_of(const void *buf, size_t len)
{
    uint64_t nonce = 0;
    return buf && outer_fields(buf, len, nonce_field, &nonce) == 0 ? nonce : 0;
}

/* protobuf-c allocates through this while decoding one message: bump
 * allocation from chunks that belong to the message (the first one starts
 * with the arena's header, right before the envelope, which protobuf-c
 * allocates first), counted and stopped at a bound.  mks_wire_free hands
 * the chunks back at once: a summary decodes into a few hundred small
 * objects, whose malloc and free each were a tenth of ingest. */
#define ARENA_MAGIC 0x6d6b7361u /* "mksa" */
#define ARENA_ALIGN 16u

struct arena_chunk {
    struct arena_chunk *next;
    size_t cap, used;
    _Alignas(ARENA_ALIGN) unsigned char data[];
};

struct decode_arena {
    uint32_t magic;
    bool exceeded;
    size_t total, max; /* bytes handed out, and the bound */
    struct arena_chunk *head;
    _Alignas(ARENA_ALIGN) struct arena_chunk first; /* its data: the envelope, first */
};

static struct decode_arena *arena_new(size_t len, size_t max)
{
    size_t cap = 4 * len + 4096;
    if (cap > max)
        cap = max;
    struct decode_arena *a = malloc(sizeof(*a) + cap);
    if (!a)
        return NULL;
    a->magic = ARENA_MAGIC;
    a->exceeded = false;
    a->total = 0;
    a->max = max;
    a->first.next = NULL;
    a->first.cap = cap;
    a->first.used = 0;
    a->head = &a->first;
    return a;
}

static void arena_free(struct decode_arena *a)
{
    if (!a)
        return;
    for (struct arena_chunk *c = a->head, *n; c && c != &a->first; c = n) {
        n = c->next;
        free(c);
    }
    a->magic = 0;
    free(a);
}

static void *arena_alloc(void *data, size_t size)
{
    struct decode_arena *a = data;
    size = (size + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
    if (!size)
        size = ARENA_ALIGN;
    if (size > a->max - a->total) {
        a->exceeded = true;
        return NULL;
    }
    struct arena_chunk *c = a->head;
    if (c->cap - c->used < size) {
        size_t cap = a->total > size ? a->total : size;
        struct arena_chunk *n = malloc(sizeof(*n) + cap);
        if (!n)
            return NULL;
        n->cap = cap;
        n->used = 0;
        n->next = c;
        a->head = c = n;
    }
    void *p = c->data + c->used;
    c->used += size;
    a->total += size;
    return p;
}

/* protobuf-c frees what it allocated only when a decode fails; the arena
 * goes as a whole then as well. */
static void arena_nofree(void *data, void *ptr)
{
    (void)data, (void)ptr;
}

/* The arena of an envelope mks_wire_decode made. */
static struct decode_arena *arena_of(mks_envelope *env)
{
    struct decode_arena *a =
        (struct decode_arena *)((unsigned char *)env - offsetof(struct decode_arena, first.data));
    return a->magic == ARENA_MAGIC ? a : NULL;
}

/* The checks of decode that need no decoding, in order of cost (see
 * wire.h): with a key, everything before the MAC is verified fails with
 * -EACCES and nothing after it does. */
static int precheck(const uint8_t *b, size_t len, uint32_t accept, const struct mks_wire_key *key,
                    int *body_p, char *err, size_t errlen)
{
    if (len == 0)
        return fail(err, errlen, key ? -EACCES : -EBADMSG, "empty message");
    size_t most = accept_limit(accept);
    if (len > most)
        return fail(err, errlen, key ? -EACCES : -E2BIG,
                    "message of %zu bytes exceeds the %zu limit of what is received here", len,
                    most);
    if (key) {
        if (len < MAC_FIELD_BYTES ||
            memcmp(b + len - MAC_FIELD_BYTES, mac_field_head, sizeof(mac_field_head)))
            return fail(err, errlen, -EACCES,
                        "message carries no MAC but a key is configured: give the sender the key");
        int rc = sodium_ready(err, errlen);
        if (rc)
            return rc;
        if (crypto_auth_verify(b + len - MKS_WIRE_MAC_BYTES, b, len - MAC_FIELD_BYTES,
                               key->bytes) != 0)
            return fail(err, errlen, -EACCES,
                        "MAC mismatch: sender uses another key, or the message was altered");
    }
    /* From here on the sender is authenticated (or no key is in use): what
     * is wrong is said. */
    int body = peek_body(b, len);
    if (body < 0)
        return fail(err, errlen, -EBADMSG,
                    "not a valid mkscope.v1.Envelope (%zu bytes): truncated or corrupt", len);
    if (body == 0)
        return fail(err, errlen, -EBADMSG, "envelope carries no message body");
    if (accept && !(accept & mks_wire_body_bit(body)))
        return fail(err, errlen, -EPROTO, "%s is not taken here", mks_wire_body_name(body));
    if (len > mks_wire_body_limit(body))
        return fail(err, errlen, -E2BIG, "%s of %zu bytes exceeds its %zu limit",
                    mks_wire_body_name(body), len, mks_wire_body_limit(body));
    *body_p = body;
    return 0;
}

int mks_wire_decode_for(const void *buf, size_t len, uint32_t accept,
                        const struct mks_wire_key *key, mks_envelope **env_p, char *err,
                        size_t errlen)
{
    if (!buf || !env_p)
        return fail(err, errlen, -EINVAL, "decode: missing argument");
    int body = 0;
    int rc = precheck(buf, len, accept, key, &body, err, errlen);
    if (rc)
        return rc;
    size_t max = MKS_WIRE_DECODE_FACTOR * len + (1u << 20);
    if (max > MKS_WIRE_MAX_DECODED)
        max = MKS_WIRE_MAX_DECODED;
    struct decode_arena *arena = arena_new(len, max);
    if (!arena)
        return fail(err, errlen, -ENOMEM, "decode: out of memory");
    ProtobufCAllocator alloc = {.alloc = arena_alloc, .free = arena_nofree,
                                .allocator_data = arena};
    mks_envelope *env = mkscope__v1__envelope__unpack(&alloc, len, buf);
    if (!env || env != (mks_envelope *)(void *)arena->first.data) {
        bool exceeded = arena->exceeded;
        arena_free(arena);
        if (env) /* not the first allocation: protobuf-c changed, a bug here */
            return fail(err, errlen, -EIO, "decode: the envelope is not the arena's first object");
        if (exceeded)
            return fail(err, errlen, -E2BIG,
                        "%s of %zu bytes would take more than %zu bytes to decode: too many"
                        " small elements",
                        mks_wire_body_name(body), len, max);
        return fail(err, errlen, -EBADMSG,
                    "not a valid mkscope.v1.Envelope (%zu bytes): truncated or corrupt", len);
    }
    if ((int)env->body_case != body) {
        rc = fail(err, errlen, -EBADMSG, "envelope body %s differs from its outer fields (%s)",
                  mks_wire_body_name(env->body_case), mks_wire_body_name(body));
        goto out;
    }
    /* the compact form of a summary back to the plain one, which is what
     * validation and every reader see */
    if (env->body_case == MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY &&
        (rc = mks_wire_summary_expand(env->epoch_summary, err, errlen)))
        goto out;
    if ((rc = mks_wire_validate(env, err, errlen)))
        goto out;
    *env_p = env;
    return 0;
out:
    arena_free(arena);
    return rc;
}

int mks_wire_decode(const void *buf, size_t len, const struct mks_wire_key *key,
                    mks_envelope **env_p, char *err, size_t errlen)
{
    return mks_wire_decode_for(buf, len, MKS_WIRE_ACCEPT_ANY, key, env_p, err, errlen);
}

void mks_wire_free(mks_envelope *env)
{
    if (!env)
        return;
    struct decode_arena *a = arena_of(env);
    if (!a) {
        fprintf(stderr, "mks_wire_free: not an envelope mks_wire_decode made (a bug)\n");
        abort();
    }
    arena_free(a);
}

const char *mks_wire_body_name(int body_case)
{
    switch (body_case) {
    case MKSCOPE__V1__ENVELOPE__BODY__NOT_SET: return "none";
    case MKSCOPE__V1__ENVELOPE__BODY_REGISTER: return "register";
    case MKSCOPE__V1__ENVELOPE__BODY_REGISTER_ACK: return "register_ack";
    case MKSCOPE__V1__ENVELOPE__BODY_HEARTBEAT: return "heartbeat";
    case MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY: return "epoch_summary";
    case MKSCOPE__V1__ENVELOPE__BODY_ACK: return "ack";
    case MKSCOPE__V1__ENVELOPE__BODY_COMMAND: return "command";
    case MKSCOPE__V1__ENVELOPE__BODY_COMMAND_REPLY: return "command_reply";
    case MKSCOPE__V1__ENVELOPE__BODY_SURVEY_REQUEST: return "survey_request";
    case MKSCOPE__V1__ENVELOPE__BODY_SURVEY_REPLY: return "survey_reply";
    case MKSCOPE__V1__ENVELOPE__BODY_CLI_REQUEST: return "cli_request";
    case MKSCOPE__V1__ENVELOPE__BODY_CLI_REPLY: return "cli_reply";
    case MKSCOPE__V1__ENVELOPE__BODY_RAW_EVENT_BATCH: return "raw_event_batch";
    default: return "?";
    }
}

int mks_wire_schema_decode(const void *buf, size_t len, Mkscope__V1__TaskSchema **schema_p,
                           char *err, size_t errlen)
{
    if (!buf || !schema_p)
        return fail(err, errlen, -EINVAL, "schema decode: missing argument");
    if (len > MKS_WIRE_MAX_MSG)
        return fail(err, errlen, -E2BIG, "task schema of %zu bytes exceeds the %u limit", len,
                    MKS_WIRE_MAX_MSG);
    Mkscope__V1__TaskSchema *s = mkscope__v1__task_schema__unpack(NULL, len, buf);
    if (!s)
        return fail(err, errlen, -EBADMSG, "not a valid mkscope.v1.TaskSchema (%zu bytes)", len);
    int rc = mks_wire_validate_message(&s->base, err, errlen);
    if (rc) {
        mkscope__v1__task_schema__free_unpacked(s, NULL);
        return rc;
    }
    *schema_p = s;
    return 0;
}

void mks_wire_schema_free(Mkscope__V1__TaskSchema *schema)
{
    if (schema)
        mkscope__v1__task_schema__free_unpacked(schema, NULL);
}

/* ---- keys ------------------------------------------------------------------------ */

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = tolower(c);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* A key comes from a regular file or a pipe (--key <(kubectl get secret
 * ...)); opened O_NONBLOCK so that a FIFO nobody writes to, a device or a
 * directory ends in an error instead of blocking the daemon's start. */
#define KEY_READ_MS 2000

static long ms_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long)(t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

int mks_wire_key_load(const char *path, struct mks_wire_key *key, char *err, size_t errlen)
{
    if (!path || !key)
        return fail(err, errlen, -EINVAL, "key: missing argument");
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return fail(err, errlen, -errno, "key file %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int e = errno;
        close(fd);
        return fail(err, errlen, -e, "key file %s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode)) {
        close(fd);
        return fail(err, errlen, -EINVAL, "key file %s: %s", path,
                    S_ISDIR(st.st_mode) ? "is a directory" : "not a regular file or a pipe");
    }
    if (st.st_mode & (S_IRWXG | S_IRWXO)) {
        close(fd);
        return fail(err, errlen, -EPERM, "key file %s is accessible by others: chmod 600 it",
                    path);
    }
    uint8_t raw[160];
    ssize_t n = 0;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (n < (ssize_t)sizeof(raw)) {
        ssize_t r = read(fd, raw + n, sizeof(raw) - (size_t)n);
        if (r > 0) {
            n += r;
            continue;
        }
        if (r == 0)
            break;
        int e = errno;
        long left = KEY_READ_MS - ms_since(&t0);
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (e == EINTR || (e == EAGAIN && left > 0 && poll(&pfd, 1, (int)left) >= 0))
            continue;
        close(fd);
        if (e == EAGAIN)
            return fail(err, errlen, -ETIMEDOUT, "key file %s: nothing to read within %d s", path,
                        KEY_READ_MS / 1000);
        return fail(err, errlen, -e, "key file %s: %s", path, strerror(e));
    }
    uint8_t more;
    if (n == (ssize_t)sizeof(raw) && read(fd, &more, 1) != 0) {
        close(fd);
        return fail(err, errlen, -EINVAL,
                    "key file %s: want 32 raw bytes or 64 hex digits, found more than %zu bytes",
                    path, sizeof(raw));
    }
    close(fd);
    if (n == MKS_WIRE_KEY_BYTES) {
        memcpy(key->bytes, raw, MKS_WIRE_KEY_BYTES);
        return 0;
    }
    while (n > 0 && (raw[n - 1] == '\n' || raw[n - 1] == '\r'))
        n--;
    if (n == 2 * MKS_WIRE_KEY_BYTES) {
        for (unsigned i = 0; i < MKS_WIRE_KEY_BYTES; i++) {
            int hi = hexval(raw[2 * i]), lo = hexval(raw[2 * i + 1]);
            if (hi < 0 || lo < 0)
                return fail(err, errlen, -EINVAL, "key file %s: not hex at byte %u", path, 2 * i);
            key->bytes[i] = (uint8_t)(hi << 4 | lo);
        }
        return 0;
    }
    return fail(err, errlen, -EINVAL,
                "key file %s: want 32 raw bytes or 64 hex digits, found %zd bytes", path, n);
}

/* Random probe texts (probe_gen.h). */
#include "probe_gen.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

struct pg {
    uint64_t s;
    char *buf;
    size_t len, off;
};

static uint64_t next(struct pg *g)
{
    g->s ^= g->s << 13;
    g->s ^= g->s >> 7;
    g->s ^= g->s << 17;
    return g->s;
}

static unsigned pick(struct pg *g, unsigned n)
{
    return (unsigned)(next(g) % n);
}

static void put(struct pg *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct pg *g, const char *fmt, ...)
{
    if (g->off + 1 >= g->len)
        return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(g->buf + g->off, g->len - g->off, fmt, ap);
    va_end(ap);
    if (w > 0)
        g->off = g->off + (size_t)w < g->len ? g->off + (size_t)w : g->len - 1;
}

static const char *const quantities[] = {"run", "queue", "wait", "value", "queue_depth"};
static const char *const ordered[] = {"run",  "queue",  "wait",     "value", "queue_depth",
                                      "step", "worker", "tile_x",   "t_now", "t_start",
                                      "t_end", "dep_event", "req_gen", "comm_gen", "task_gen"};
static const char *const groupable[] = {"class", "step",      "tile_x", "tile_y",   "worker",
                                        "rank",  "dep_event", "peer",   "channel",  "comm_op",
                                        "event", "req_gen",   "sm",     "dep_class", "flags"};
static const char *const events[] = {"task_ready", "task_assign", "task_start", "task_end",
                                     "dep_wait_begin", "dep_wait_end", "dep_release",
                                     "comm_begin", "comm_end", "gen_advance", "queue_pressure"};
static const char *const numeric[] = {"step", "worker", "tile_x", "tile_y", "rank", "req_gen",
                                      "run",  "queue",  "wait",   "value", "queue_depth",
                                      "peer", "channel", "comm_op", "dep_class", "dep_event",
                                      "t_start", "t_end"};
#define N(a) (sizeof(a) / sizeof(a[0]))

static void value(struct pg *g, const char *field)
{
    static const char *const units[] = {"ns", "us", "ms", ""};
    if (!strcmp(field, "run") || !strcmp(field, "queue") || !strcmp(field, "wait"))
        put(g, "%u%s", pick(g, 100), units[pick(g, 3)]);
    else if (!strcmp(field, "dep_event"))
        put(g, pick(g, 2) ? "0x800000000001000%u" : "%u", pick(g, 4));
    else
        put(g, "%u", pick(g, 12));
}

static void pred(struct pg *g, int depth)
{
    unsigned k = depth > 0 ? pick(g, 10) : 9;
    if (k < 2) {
        put(g, "(");
        pred(g, depth - 1);
        put(g, pick(g, 2) ? " and " : " or ");
        pred(g, depth - 1);
        put(g, ")");
    } else if (k == 2) {
        put(g, "not ");
        pred(g, depth - 1);
    } else if (k < 6) {
        put(g, "event %s %s", pick(g, 4) ? "=" : "!=", events[pick(g, N(events))]);
    } else if (k == 6) {
        put(g, "class %s %s", pick(g, 2) ? "=" : "!=", pick(g, 2) ? "attention" : "\"expert.3\"");
    } else {
        static const char *const ops[] = {"=", "!=", "<", "<=", ">", ">="};
        const char *f = numeric[pick(g, N(numeric))];
        put(g, "%s %s ", f, ops[pick(g, N(ops))]);
        value(g, f);
    }
}

/* Events at which each field is carried, as probe.c's table says (so that
 * most texts compile; the rest test the refusals): bit e = event e. */
struct field_at {
    const char *name;
    unsigned events;
    int quantity, name_valued;
};
#define ALL  0x7ffu
#define TASK (ALL & ~(1u << 9))
#define STARTED 0x1fcu
#define COMM 0x1f0u
static const struct field_at fields[] = {
    {"rank", ALL, 0, 0},           {"worker", ALL, 0, 0},          {"sm", ALL, 0, 0},
    {"event", ALL, 0, 1},          {"flags", ALL, 0, 1},           {"t_now", ALL, 0, 0},
    {"class", TASK, 0, 1},         {"task_gen", TASK, 0, 0},       {"tile_x", TASK, 0, 0},
    {"tile_y", TASK, 0, 0},        {"t_ready", TASK, 0, 0},        {"step", ALL, 0, 0},
    {"req_gen", ALL, 0, 0},        {"dep_event", 0x71u, 0, 0},     {"dep_class", 0x71u, 0, 1},
    {"comm_gen", COMM, 0, 0},      {"peer", COMM, 0, 0},           {"channel", COMM, 0, 0},
    {"comm_op", COMM, 0, 0},       {"queue_depth", 0x406u, 1, 0},  {"t_start", STARTED, 0, 0},
    {"t_end", 0x48u, 0, 0},        {"value", 0x7b2u, 1, 0},        {"run", 0x48u, 1, 0},
    {"queue", STARTED, 1, 0},      {"wait", 0x20u, 1, 0},
};

/* A field carried at every event of mask with the wanted kind (quantity:
 * 1 must be, -1 must not name something), NULL if none after a few tries. */
static const char *field_for(struct pg *g, unsigned mask, int quantity)
{
    for (int t = 0; t < 40; t++) {
        const struct field_at *f = &fields[pick(g, N(fields))];
        if ((f->events & mask) != mask || (quantity > 0 && !f->quantity) ||
            (quantity < 0 && f->name_valued))
            continue;
        return f->name;
    }
    return NULL;
}

static void pred_at(struct pg *g, unsigned mask, int depth)
{
    unsigned k = depth > 0 ? pick(g, 8) : 7;
    if (k < 2) {
        put(g, "(");
        pred_at(g, mask, depth - 1);
        put(g, pick(g, 2) ? " and " : " or ");
        pred_at(g, mask, depth - 1);
        put(g, ")");
    } else if (k == 2) {
        put(g, "not ");
        pred_at(g, mask, depth - 1);
    } else if (k == 3 && (mask & TASK) == mask) {
        put(g, "class %s %s", pick(g, 2) ? "=" : "!=", pick(g, 2) ? "attention" : "\"expert.3\"");
    } else {
        static const char *const ops[] = {"=", "!=", "<", "<=", ">", ">="};
        const char *f = field_for(g, mask, -1);
        if (!f)
            f = "worker";
        put(g, "%s %s ", f, ops[pick(g, N(ops))]);
        value(g, f);
    }
}

/* A probe built around one or two events, from the fields they carry. */
static void probe_at(struct pg *g)
{
    unsigned e1 = pick(g, N(events)), e2 = pick(g, 3) ? e1 : pick(g, N(events));
    unsigned mask = 1u << e1 | 1u << e2;
    static const char *const aggs[] = {"count", "sum", "mean", "min", "max",
                                       "hist",  "p50", "p90",  "p99"};
    unsigned n_aggs = 1 + pick(g, 3), done = 0;
    for (unsigned i = 0; i < n_aggs; i++) {
        unsigned a = pick(g, N(aggs));
        const char *f = a == 0 ? "" : field_for(g, mask, a == 3 || a == 4 ? -1 : 1);
        if (!f)
            a = 0, f = "";
        put(g, "%s%s(%s)", done++ ? ", " : "", aggs[a], f);
    }
    unsigned n_keys = pick(g, 4);
    for (unsigned i = 0; i < n_keys; i++) {
        const char *f = field_for(g, mask, 0);
        if (f)
            put(g, "%s%s", i ? ", " : " by ", f);
    }
    put(g, " where (event = %s", events[e1]);
    if (e2 != e1)
        put(g, " or event = %s", events[e2]);
    put(g, ")");
    if (pick(g, 3)) {
        put(g, " and ");
        pred_at(g, mask, (int)pick(g, 4));
    }
}

void mks_test_probe_text(uint64_t seed, char *buf, size_t len)
{
    struct pg g = {.s = seed * 0x9e3779b97f4a7c15ull | 1, .buf = buf, .len = len};
    buf[0] = 0;
    for (int i = 0; i < 8; i++)
        next(&g);
    if (pick(&g, 5)) {
        probe_at(&g);
        return;
    }
    unsigned n_aggs = 1 + pick(&g, 3);
    for (unsigned i = 0; i < n_aggs; i++) {
        static const char *const aggs[] = {"count", "sum", "mean", "min", "max",
                                           "hist",  "p50", "p90",  "p99"};
        unsigned a = pick(&g, N(aggs));
        if (i)
            put(&g, ", ");
        if (a == 0)
            put(&g, "count()");
        else if (a == 3 || a == 4)
            put(&g, "%s(%s)", aggs[a], ordered[pick(&g, N(ordered))]);
        else
            put(&g, "%s(%s)", aggs[a], quantities[pick(&g, N(quantities))]);
    }
    unsigned n_keys = pick(&g, 4);
    for (unsigned i = 0; i < n_keys; i++)
        put(&g, "%s%s", i ? ", " : " by ", groupable[pick(&g, N(groupable))]);
    if (pick(&g, 6)) {
        put(&g, " where ");
        /* mostly one event first, so that fields have somewhere to be */
        if (pick(&g, 4)) {
            put(&g, "event = %s and ", events[pick(&g, N(events))]);
        }
        pred(&g, (int)pick(&g, 4));
    }
}

/*
 * Probes (mkscope/probe.h): parse, check against what each hook carries,
 * compile to OBSERVE programs, and the reference model in C.
 *
 * Which hooks.  For each event e the predicate is folded with `event`
 * known to be e (probe_fold: comparisons of event become true or false and
 * and/or/not simplify); the events whose folded predicate is not false are
 * the probe's.  When that is every event (the predicate says nothing of
 * the event) the derived fields decide: run and queue belong to task_end
 * (each task once, when it ends, as the query language's task statistics),
 * wait to dep_wait_end; a probe without one must name its events.  Every
 * field the probe reads at a hook (its aggregates, its groups and what is
 * left of the predicate there) must be carried there (field_events).
 *
 * The program at a hook e (r6 = context, r7 = e's stats row, r8 = the
 * group's value, r9 scratch; stack: fp-8 the u32 key e, fp-4 a u32 zero,
 * fp-16.. the derived fields, fp-96.. the group key):
 *
 *   stats[e].observed += 1
 *   [dep_wait_begin, wait read: begin[worker] = {dep_event, t_now}]
 *   derived fields, each checked: unknown -> stats.unknown += 1, exit
 *   predicate (folded for e), false -> exit
 *   stats.matched += 1; key = the group fields, one u64 word each
 *   v = lookup(groups, key), else insert the zero row and look again;
 *   the map full -> stats.overflowed += 1, v = other[0];
 *   neither (another worker mid-insert) -> stats.dropped += 1, exit
 *   v.count += 1; per field: sum += x; max and ~min by compare-and-swap
 *   (MKS_PROBE_CAS_TRIES, then stats.contended += 1); hist bucket += 1
 *
 * Every counter and sum is an atomic add: workers, and on the GPU the lanes
 * of a monitor warp, update one group at once.  The loops are bounded, so
 * the verifier states a cost for each program.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lang.h"
#include "mkscope/maps.h"
#include "mkscope/probe.h"

/* ---- what each event carries -------------------------------------------- */

#define EV(e)   (1u << (e))
#define EV_ALL  ((1u << MKS_EV_COUNT) - 1u)
/* events about a task: all but the generation advance */
#define EV_TASK (EV_ALL & ~EV(MKS_EV_GEN_ADVANCE))
/* events of a task that has started */
#define EV_STARTED                                                                                 \
    (EV(MKS_EV_TASK_START) | EV(MKS_EV_TASK_END) | EV(MKS_EV_DEP_WAIT_BEGIN) |                      \
     EV(MKS_EV_DEP_WAIT_END) | EV(MKS_EV_DEP_RELEASE) | EV(MKS_EV_COMM_BEGIN) |                    \
     EV(MKS_EV_COMM_END))
#define EV_COMM                                                                                    \
    (EV(MKS_EV_DEP_WAIT_BEGIN) | EV(MKS_EV_DEP_WAIT_END) | EV(MKS_EV_DEP_RELEASE) |                 \
     EV(MKS_EV_COMM_BEGIN) | EV(MKS_EV_COMM_END))

/* Events at which field f has a meaning (hook ABI v1, docs/devhooks.md and
 * docs/mpk.md: what the reference megakernel and MPK fill); 0: not a
 * context field at all. */
static uint32_t field_events(enum q_field f)
{
    switch (f) {
    case F_RANK:
    case F_WORKER:
    case F_SM:
    case F_EVENT:
    case F_FLAGS:
    case F_T_NOW: return EV_ALL;
    case F_CLASS:
    case F_TASK_GEN:
    case F_TILE_X:
    case F_TILE_Y:
    case F_T_READY: return EV_TASK;
    case F_STEP:
    case F_REQ_GEN: return EV_ALL;
    case F_DEP_EVENT:
    case F_DEP_CLASS:
        return EV(MKS_EV_TASK_READY) | EV(MKS_EV_DEP_WAIT_BEGIN) | EV(MKS_EV_DEP_WAIT_END) |
               EV(MKS_EV_DEP_RELEASE);
    case F_COMM_GEN:
    case F_PEER:
    case F_CHANNEL:
    case F_COMM_OP: return EV_COMM;
    case F_QUEUE_DEPTH:
        return EV(MKS_EV_TASK_ASSIGN) | EV(MKS_EV_TASK_START) | EV(MKS_EV_QUEUE_PRESSURE);
    case F_T_START: return EV_STARTED;
    case F_T_END: return EV(MKS_EV_TASK_END) | EV(MKS_EV_DEP_RELEASE);
    case F_VALUE:
        return EV(MKS_EV_TASK_ASSIGN) | EV_COMM | EV(MKS_EV_GEN_ADVANCE) |
               EV(MKS_EV_QUEUE_PRESSURE);
    case F_RUN: return EV(MKS_EV_TASK_END) | EV(MKS_EV_DEP_RELEASE);
    case F_QUEUE: return EV_STARTED;
    case F_WAIT: return EV(MKS_EV_DEP_WAIT_END);
    default: return 0; /* time, epoch */
    }
}

/* The event a derived field belongs to when the predicate names none. */
static int field_home(enum q_field f)
{
    switch (f) {
    case F_RUN:
    case F_QUEUE: return MKS_EV_TASK_END;
    case F_WAIT: return MKS_EV_DEP_WAIT_END;
    default: return -1;
    }
}

static bool derived(enum q_field f)
{
    return f == F_RUN || f == F_QUEUE || f == F_WAIT || f == F_CHANNEL || f == F_COMM_OP;
}

/* Derived fields in the order the programs compute them (and the model). */
static const enum q_field derived_order[] = {F_RUN, F_QUEUE, F_WAIT, F_CHANNEL, F_COMM_OP};
#define N_DERIVED 5

static int derived_slot(enum q_field f)
{
    for (int i = 0; i < N_DERIVED; i++)
        if (derived_order[i] == f)
            return i;
    return -1;
}

static const char *field_meaning(enum q_field f)
{
    switch (f) {
    case F_RUN: return "run is a task's start to its end";
    case F_QUEUE: return "queue is a task's ready to its start";
    case F_WAIT: return "wait is a dependency wait, dep_wait_begin to dep_wait_end";
    case F_CHANNEL:
    case F_COMM_OP: return "it is read from a communication generation";
    case F_T_END: return "a task has an end from task_end on";
    case F_QUEUE_DEPTH: return "only queue events carry a depth";
    default: return NULL;
    }
}

/* Fields that hold a quantity: what a sum, mean or histogram adds up. */
static bool quantity(enum q_field f)
{
    return f == F_RUN || f == F_QUEUE || f == F_WAIT || f == F_VALUE || f == F_QUEUE_DEPTH;
}

static bool name_valued(enum q_field f)
{
    return f == F_CLASS || f == F_EVENT || f == F_FLAGS || f == F_DEP_CLASS;
}

static uint32_t field_unit(enum q_field f)
{
    switch (f) {
    case F_RUN:
    case F_QUEUE:
    case F_WAIT:
    case F_T_NOW:
    case F_T_READY:
    case F_T_START:
    case F_T_END: return MKS_PROBE_UNIT_NS;
    case F_DEP_EVENT:
    case F_COMM_GEN:
    case F_TASK_GEN: return MKS_PROBE_UNIT_ID;
    case F_CLASS: return MKS_PROBE_UNIT_CLASS;
    case F_EVENT: return MKS_PROBE_UNIT_EVENT;
    default: return MKS_PROBE_UNIT_NUMBER;
    }
}

static uint32_t field_width(enum q_field f)
{
    if (derived(f))
        return 64;
    return (uint32_t)mks_q_fields[f].ctx_size * 8;
}

/* "task_end, dep_release" */
static void event_list(uint32_t mask, char *buf, size_t len)
{
    size_t off = 0;
    buf[0] = 0;
    for (int e = 0; e < MKS_EV_COUNT && off + 1 < len; e++)
        if (mask & EV(e)) {
            int w = snprintf(buf + off, len - off, "%s%s", off ? ", " : "", mks_q_event_name(e));
            if (w < 0)
                break;
            off += (size_t)w;
        }
}

/* ---- the parsed probe --------------------------------------------------- */

struct agg_item {
    enum mks_probe_agg agg;
    int field; /* -1 for count() */
    int pos, len;
};

struct mks_probe {
    struct agg_item aggs[MKS_PROBE_MAX_AGGS];
    int n_aggs;
    enum q_field keys[MKS_PROBE_MAX_KEYS];
    int kpos[MKS_PROBE_MAX_KEYS], klen[MKS_PROBE_MAX_KEYS];
    int n_keys;
    struct mks_pred *where;
    uint32_t hooks, helpers;
    bool pair; /* reads wait: dep_wait_begin keeps the begin */
    /* value words per field, 0 when the field has none (word 0 is the count) */
    uint32_t sum_w[F_COUNT], max_w[F_COUNT], min_w[F_COUNT], hist_w[F_COUNT];
    struct mks_probe_layout layout;
};

static const char *const agg_names[] = {
    [MKS_PROBE_COUNT] = "count", [MKS_PROBE_SUM] = "sum", [MKS_PROBE_MEAN] = "mean",
    [MKS_PROBE_MIN] = "min",     [MKS_PROBE_MAX] = "max", [MKS_PROBE_HIST] = "hist",
    [MKS_PROBE_P50] = "p50",     [MKS_PROBE_P90] = "p90", [MKS_PROBE_P99] = "p99",
};
#define N_AGG_NAMES (sizeof(agg_names) / sizeof(agg_names[0]))

static bool needs_hist(enum mks_probe_agg a)
{
    return a == MKS_PROBE_HIST || a == MKS_PROBE_P50 || a == MKS_PROBE_P90 || a == MKS_PROBE_P99;
}

void mks_probe_free(struct mks_probe *p)
{
    if (!p)
        return;
    mks_pred_free(p->where);
    free(p);
}

const struct mks_probe_layout *mks_probe_layout(const struct mks_probe *p)
{
    return p ? &p->layout : NULL;
}

uint32_t mks_probe_hooks(const struct mks_probe *p)
{
    return p ? p->hooks : 0;
}

uint32_t mks_probe_helper_hooks(const struct mks_probe *p)
{
    return p ? p->helpers : 0;
}

static int class_names(const struct mks_pred *p, mks_query_name_fn fn, void *arg)
{
    if (!p)
        return 0;
    if (p->kind != N_CMP) {
        int rc = class_names(p->a, fn, arg);
        return rc ? rc : class_names(p->b, fn, arg);
    }
    return p->field == F_CLASS && p->is_str ? fn(p->str, p->vpos, p->vlen, arg) : 0;
}

int mks_probe_class_names(const struct mks_probe *p, mks_query_name_fn fn, void *arg)
{
    return p && fn ? class_names(p->where, fn, arg) : 0;
}

/* ---- folding the predicate for one event ---------------------------------- */

enum fold { FOLD_FALSE, FOLD_TRUE, FOLD_TREE };

static struct mks_pred *pred_copy(const struct mks_pred *p)
{
    struct mks_pred *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    *c = *p;
    c->a = c->b = NULL;
    c->str = NULL;
    if (p->str && !(c->str = strdup(p->str))) {
        free(c);
        return NULL;
    }
    return c;
}

static bool cmp_holds(uint64_t a, enum q_op op, uint64_t b)
{
    switch (op) {
    case OP_EQ: return a == b;
    case OP_NE: return a != b;
    case OP_LT: return a < b;
    case OP_LE: return a <= b;
    case OP_GT: return a > b;
    default: return a >= b;
    }
}

/* p with `event` known to be ev: *out gets the simplified tree when the
 * result is FOLD_TREE.  -ENOMEM on allocation failure. */
static int probe_fold(const struct mks_pred *p, uint32_t ev, enum fold *k, struct mks_pred **out)
{
    *out = NULL;
    if (!p) {
        *k = FOLD_TRUE;
        return 0;
    }
    if (p->kind == N_CMP) {
        if (p->field == F_EVENT) {
            *k = cmp_holds(ev, p->op, (uint64_t)p->num) ? FOLD_TRUE : FOLD_FALSE;
            return 0;
        }
        if (!(*out = pred_copy(p)))
            return -ENOMEM;
        *k = FOLD_TREE;
        return 0;
    }
    enum fold ka, kb;
    struct mks_pred *a, *b;
    int rc = probe_fold(p->a, ev, &ka, &a);
    if (rc)
        return rc;
    if (p->kind == N_NOT) {
        if (ka != FOLD_TREE) {
            *k = ka == FOLD_TRUE ? FOLD_FALSE : FOLD_TRUE;
            return 0;
        }
        struct mks_pred *n = calloc(1, sizeof(*n));
        if (!n) {
            mks_pred_free(a);
            return -ENOMEM;
        }
        n->kind = N_NOT, n->a = a;
        *out = n, *k = FOLD_TREE;
        return 0;
    }
    /* and / or: a decided side may decide the whole */
    bool is_and = p->kind == N_AND;
    if ((is_and && ka == FOLD_FALSE) || (!is_and && ka == FOLD_TRUE)) {
        *k = ka;
        return 0;
    }
    if ((rc = probe_fold(p->b, ev, &kb, &b))) {
        mks_pred_free(a);
        return rc;
    }
    if (ka != FOLD_TREE) { /* the neutral value: the result is b */
        *k = kb, *out = b;
        return 0;
    }
    if ((is_and && kb == FOLD_FALSE) || (!is_and && kb == FOLD_TRUE)) {
        mks_pred_free(a);
        *k = kb;
        return 0;
    }
    if (kb != FOLD_TREE) {
        *k = FOLD_TREE, *out = a;
        return 0;
    }
    struct mks_pred *n = calloc(1, sizeof(*n));
    if (!n) {
        mks_pred_free(a);
        mks_pred_free(b);
        return -ENOMEM;
    }
    n->kind = p->kind, n->a = a, n->b = b;
    *out = n, *k = FOLD_TREE;
    return 0;
}

/* The first comparison of p (in text order) whose field is not carried at
 * ev, or NULL. */
static const struct mks_pred *missing_in(const struct mks_pred *p, uint32_t ev)
{
    if (!p)
        return NULL;
    if (p->kind != N_CMP) {
        const struct mks_pred *m = missing_in(p->a, ev);
        return m ? m : missing_in(p->b, ev);
    }
    return field_events(p->field) & EV(ev) ? NULL : p;
}

static void fields_of(const struct mks_pred *p, bool *used)
{
    if (!p)
        return;
    if (p->kind != N_CMP) {
        fields_of(p->a, used);
        fields_of(p->b, used);
        return;
    }
    used[p->field] = true;
}

/* Fields a probe's predicate may not compare: no context meaning. */
static int check_pred_fields(const struct mks_pred *p, struct mks_query_error *e)
{
    if (!p)
        return 0;
    if (p->kind != N_CMP) {
        int rc = check_pred_fields(p->a, e);
        return rc ? rc : check_pred_fields(p->b, e);
    }
    if (!field_events(p->field))
        return mks_q_err(e, p->fpos, p->flen,
                         "'%s' is not in the hook context: a probe's predicate tests each"
                         " event's fields",
                         mks_q_fields[p->field].name);
    return 0;
}

/* ---- parsing --------------------------------------------------------------- */

static int parse_agg(struct q_lexer *lx, struct agg_item *it)
{
    struct q_tok t = lx->cur;
    int rc;
    if (t.kind != T_IDENT)
        return mks_q_err(lx->e, t.pos, t.len,
                         t.kind == T_END ? "expected an aggregate such as count() or hist(run)"
                                         : "expected an aggregate such as count(), sum(run),"
                                           " hist(wait)");
    size_t a;
    for (a = 0; a < N_AGG_NAMES; a++)
        if (!strcmp(agg_names[a], t.text))
            break;
    if (!strcmp(t.text, "avg"))
        a = MKS_PROBE_MEAN;
    if (a == N_AGG_NAMES)
        return mks_q_err(lx->e, t.pos, t.len,
                         "unknown aggregate '%s' (count, sum, mean, min, max, hist, p50, p90,"
                         " p99)",
                         t.text);
    if ((rc = mks_q_lex_next(lx)))
        return rc;
    if (lx->cur.kind != T_LP)
        return mks_q_err(lx->e, lx->cur.pos, lx->cur.len, "expected '(' after '%s'", t.text);
    if ((rc = mks_q_lex_next(lx)))
        return rc;
    it->agg = (enum mks_probe_agg)a;
    it->field = -1;
    if (a == MKS_PROBE_COUNT) {
        if (lx->cur.kind != T_RP)
            return mks_q_err(lx->e, lx->cur.pos, lx->cur.len,
                             "count() takes nothing: it counts the events that match");
    } else {
        struct q_tok f = lx->cur;
        int id = f.kind == T_IDENT ? mks_q_field_lookup(f.text) : -1;
        if (f.kind != T_IDENT)
            return mks_q_err(lx->e, f.pos, f.len, "%s() takes a field, e.g. %s(run)", t.text,
                             t.text);
        if (id < 0)
            return mks_q_err(lx->e, f.pos, f.len, "unknown field '%s' (fields: %s)", f.text,
                             mks_q_field_list());
        if (!field_events((enum q_field)id))
            return mks_q_err(lx->e, f.pos, f.len,
                             "'%s' is not in the hook context: probes read the context of each"
                             " event",
                             f.text);
        if ((a == MKS_PROBE_MIN || a == MKS_PROBE_MAX) && name_valued((enum q_field)id))
            return mks_q_err(lx->e, f.pos, f.len,
                             "%s(%s): %s names something, it has no order; group by it instead",
                             t.text, f.text, f.text);
        if (a != MKS_PROBE_MIN && a != MKS_PROBE_MAX && !quantity((enum q_field)id))
            return mks_q_err(lx->e, f.pos, f.len,
                             "%s(%s): %s is not a quantity (%s() adds up run, queue, wait,"
                             " value, queue_depth); group by it, or take min() or max()",
                             t.text, f.text, f.text, t.text);
        it->field = id;
        if ((rc = mks_q_lex_next(lx)))
            return rc;
        if (lx->cur.kind != T_RP)
            return mks_q_err(lx->e, lx->cur.pos, lx->cur.len, "expected ')'");
    }
    it->pos = t.pos;
    it->len = lx->cur.pos + 1 - t.pos;
    return mks_q_lex_next(lx);
}

/* A field of the probe not carried at ev: the error that says so. */
static int not_carried(struct mks_query_error *e, enum q_field f, uint32_t ev, int pos, int len)
{
    char where[200];
    event_list(field_events(f), where, sizeof(where));
    const char *why = field_meaning(f);
    return mks_q_err(e, pos, len, "'%s' is not known at %s%s%s (it is at %s)",
                     mks_q_fields[f].name, mks_q_event_name((int)ev), why ? ": " : "",
                     why ? why : "", where);
}

/* Words of the value for each aggregate, and the layout the readers see. */
static int build_layout(struct mks_probe *p, struct mks_query_error *e)
{
    struct mks_probe_layout *l = &p->layout;
    uint32_t w = 1, hists = 0;
    memset(l->word_max, 0, sizeof(l->word_max));
    /* sums first (a mean or a histogram's sum reads them), then the
     * extremes, then the histograms */
    for (int i = 0; i < p->n_aggs; i++) {
        struct agg_item *it = &p->aggs[i];
        if (it->field >= 0 && (it->agg == MKS_PROBE_SUM || it->agg == MKS_PROBE_MEAN ||
                               needs_hist(it->agg)) &&
            !p->sum_w[it->field])
            p->sum_w[it->field] = w++;
    }
    for (int i = 0; i < p->n_aggs; i++) {
        struct agg_item *it = &p->aggs[i];
        if (it->agg == MKS_PROBE_MAX && !p->max_w[it->field]) {
            l->word_max[w] = 1;
            p->max_w[it->field] = w++;
        } else if (it->agg == MKS_PROBE_MIN && !p->min_w[it->field]) {
            l->word_max[w] = 1;
            p->min_w[it->field] = w++;
        }
    }
    for (int i = 0; i < p->n_aggs; i++) {
        struct agg_item *it = &p->aggs[i];
        if (!needs_hist(it->agg) || p->hist_w[it->field])
            continue;
        if (++hists > MKS_PROBE_MAX_HISTS)
            return mks_q_err(e, it->pos, it->len,
                             "histograms of at most %d fields in one probe (each is 64 words of"
                             " every group)",
                             MKS_PROBE_MAX_HISTS);
        p->hist_w[it->field] = w;
        w += MKS_HIST_BUCKETS;
    }
    l->n_words = w;
    l->n_cols = (uint32_t)p->n_aggs;
    for (int i = 0; i < p->n_aggs; i++) {
        struct agg_item *it = &p->aggs[i];
        struct mks_probe_column *c = &l->cols[i];
        memset(c, 0, sizeof(*c));
        c->agg = it->agg;
        if (it->field >= 0) {
            snprintf(c->field, sizeof(c->field), "%s", mks_q_fields[it->field].name);
            c->unit = field_unit((enum q_field)it->field);
        }
        snprintf(c->name, sizeof(c->name), "%s(%s)", agg_names[it->agg], c->field);
        switch (it->agg) {
        case MKS_PROBE_COUNT: c->word = 0, c->unit = MKS_PROBE_UNIT_NUMBER; break;
        case MKS_PROBE_SUM:
        case MKS_PROBE_MEAN: c->word = p->sum_w[it->field]; break;
        case MKS_PROBE_MIN: c->word = p->min_w[it->field]; break;
        case MKS_PROBE_MAX: c->word = p->max_w[it->field]; break;
        default:
            c->word = p->hist_w[it->field];
            c->sum_word = p->sum_w[it->field];
            if (it->agg == MKS_PROBE_HIST)
                c->unit = field_unit((enum q_field)it->field);
            break;
        }
    }
    l->n_keys = (uint32_t)p->n_keys;
    for (int i = 0; i < p->n_keys; i++) {
        snprintf(l->keys[i].name, sizeof(l->keys[i].name), "%s", mks_q_fields[p->keys[i]].name);
        l->keys[i].unit = field_unit(p->keys[i]);
        l->keys[i].width = field_width(p->keys[i]);
    }
    return 0;
}

/* Which hooks, and that each carries every field the probe reads there. */
static int analyse(struct mks_probe *p, const char *text, struct mks_query_error *e)
{
    uint32_t admitted = 0;
    for (uint32_t ev = 0; ev < MKS_EV_COUNT; ev++) {
        enum fold k;
        struct mks_pred *f;
        if (probe_fold(p->where, ev, &k, &f))
            return -ENOMEM;
        mks_pred_free(f);
        if (k != FOLD_FALSE)
            admitted |= EV(ev);
    }
    if (!admitted)
        return mks_q_err(e, 0, (int)strlen(text),
                         "the predicate holds at no event: nothing to probe");
    bool used[F_COUNT] = {false};
    for (int i = 0; i < p->n_aggs; i++)
        if (p->aggs[i].field >= 0)
            used[p->aggs[i].field] = true;
    for (int i = 0; i < p->n_keys; i++)
        used[p->keys[i]] = true;
    fields_of(p->where, used);
    if (admitted == EV_ALL) {
        /* The predicate names no event: the derived fields' home event. */
        int home = -1, home_field = -1;
        for (int f = 0; f < F_COUNT; f++) {
            int h = used[f] ? field_home((enum q_field)f) : -1;
            if (h < 0)
                continue;
            if (home >= 0 && h != home)
                return mks_q_err(e, 0, (int)strlen(text),
                                 "%s and %s are known at different events (%s, %s): name one"
                                 " with event = ...",
                                 mks_q_fields[home_field].name, mks_q_fields[f].name,
                                 mks_q_event_name(home), mks_q_event_name(h));
            home = h, home_field = f;
        }
        if (home < 0)
            return mks_q_err(e, 0, (int)strlen(text),
                             "which events? add event = task_end (one per task) or another"
                             " event to the where clause (task_ready ... queue_pressure), or"
                             " read run, queue or wait, which name theirs");
        admitted = EV(home);
    }
    for (uint32_t ev = 0; ev < MKS_EV_COUNT; ev++) {
        if (!(admitted & EV(ev)))
            continue;
        for (int i = 0; i < p->n_aggs; i++)
            if (p->aggs[i].field >= 0 && !(field_events((enum q_field)p->aggs[i].field) & EV(ev)))
                return not_carried(e, (enum q_field)p->aggs[i].field, ev, p->aggs[i].pos,
                                   p->aggs[i].len);
        for (int i = 0; i < p->n_keys; i++)
            if (!(field_events(p->keys[i]) & EV(ev)))
                return not_carried(e, p->keys[i], ev, p->kpos[i], p->klen[i]);
        enum fold k;
        struct mks_pred *f;
        if (probe_fold(p->where, ev, &k, &f))
            return -ENOMEM;
        const struct mks_pred *m = missing_in(f, ev);
        int rc = m ? not_carried(e, m->field, ev, m->fpos, m->flen) : 0;
        bool wait = false;
        if (k == FOLD_TREE) {
            bool u[F_COUNT] = {false};
            fields_of(f, u);
            wait = u[F_WAIT];
        }
        mks_pred_free(f);
        if (rc)
            return rc;
        for (int i = 0; i < p->n_aggs; i++)
            wait |= p->aggs[i].field == F_WAIT;
        for (int i = 0; i < p->n_keys; i++)
            wait |= p->keys[i] == F_WAIT;
        p->pair |= wait;
    }
    p->hooks = admitted;
    p->helpers = p->pair && !(admitted & EV(MKS_EV_DEP_WAIT_BEGIN)) ? EV(MKS_EV_DEP_WAIT_BEGIN)
                                                                     : 0;
    return build_layout(p, e);
}

static int probe_agg(struct q_lexer *lx, int i, void *arg)
{
    return parse_agg(lx, &((struct mks_probe *)arg)->aggs[i]);
}

/* A probe groups by what the hook context carries (derived fields too). */
static int probe_group(struct q_lexer *lx, int f, void *arg)
{
    (void)arg;
    if (f < 0 || !field_events((enum q_field)f))
        return mks_q_err(lx->e, lx->cur.pos, lx->cur.len,
                         f < 0 ? "cannot group by '%.*s': not a field (fields: %s)"
                               : "cannot group by '%.*s': not in the hook context (fields: %s)",
                         lx->cur.len, lx->s + lx->cur.pos, mks_q_field_list());
    return 0;
}

int mks_probe_parse(const char *text, struct mks_probe **p_p, struct mks_query_error *e)
{
    if (!text || !p_p)
        return mks_q_err(e, 0, 1, "no probe");
    struct q_lexer lx;
    int rc = mks_q_lexer_init(&lx, text, e);
    if (rc)
        return rc;
    struct mks_probe *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    /* the query's grammar, whose aggregates take a field; no limit */
    const struct q_clauses c = {
        .max_aggs = MKS_PROBE_MAX_AGGS,
        .aggs_in = " in a probe",
        .parse_agg = probe_agg,
        .max_groups = MKS_PROBE_MAX_KEYS,
        .check_group = probe_group,
        .unique_groups = true,
        .no_limit = "a probe has no limit: it keeps --groups groups, the rest counted as other",
        .expected = "',', by, where or",
        .arg = p,
        .n_aggs = &p->n_aggs,
        .groups = p->keys,
        .gpos = p->kpos,
        .glen = p->klen,
        .n_groups = &p->n_keys,
        .where = &p->where,
    };
    if ((rc = mks_q_parse_clauses(&lx, &c)) || (rc = check_pred_fields(p->where, e)) ||
        (rc = analyse(p, text, e))) {
        mks_probe_free(p);
        return rc;
    }
    *p_p = p;
    return 0;
}

/* ---- merging and reading ---------------------------------------------------- */

void mks_probe_merge(const struct mks_probe_layout *l, uint64_t *dst, const uint64_t *src)
{
    for (uint32_t i = 0; i < l->n_words; i++) {
        if (l->word_max[i])
            dst[i] = src[i] > dst[i] ? src[i] : dst[i];
        else
            dst[i] = dst[i] + src[i] < dst[i] ? UINT64_MAX : dst[i] + src[i];
    }
}

int mks_probe_value(const struct mks_probe_layout *l, uint32_t col, const uint64_t *words,
                    double *v_p)
{
    if (!l || col >= l->n_cols || !words || !v_p)
        return -EINVAL;
    const struct mks_probe_column *c = &l->cols[col];
    uint64_t n = words[0];
    switch (c->agg) {
    case MKS_PROBE_COUNT:
    case MKS_PROBE_HIST: *v_p = (double)n; return 0;
    case MKS_PROBE_SUM: *v_p = (double)words[c->word]; return 0;
    case MKS_PROBE_MEAN:
        if (!n)
            return -ENODATA;
        *v_p = (double)words[c->word] / (double)n;
        return 0;
    case MKS_PROBE_MIN:
        if (!n || !words[c->word])
            return -ENODATA;
        *v_p = (double)~words[c->word];
        return 0;
    case MKS_PROBE_MAX:
        if (!n)
            return -ENODATA;
        *v_p = (double)words[c->word];
        return 0;
    default: {
        double q = c->agg == MKS_PROBE_P50 ? 0.5 : c->agg == MKS_PROBE_P90 ? 0.9 : 0.99;
        double v = mks_hist_quantile_est(words + c->word, MKS_HIST_BUCKETS, q);
        if (isnan(v))
            return -ENODATA;
        *v_p = v;
        return 0;
    }
    }
}

/* ---- code generation ---------------------------------------------------------- */

/* Stack of a probe program (offsets from r10). */
#define ST_HOOK_KEY  (-8)  /* u32: the hook, the stats map's key */
#define ST_ZERO_KEY  (-4)  /* u32 0: key of other, zero and begin */
#define ST_DERIVED   (-16) /* derived field i at ST_DERIVED - 8 i */
#define ST_KEY       (-96) /* group key word i at ST_KEY + 8 i */
_Static_assert(ST_DERIVED - 8 * (N_DERIVED - 1) > ST_KEY + 8 * MKS_PROBE_MAX_KEYS,
               "probe stack slots overlap");

#define R_CTX   6
#define R_STATS 7
#define R_VAL   8
#define R_TMP   9

static void ins(struct q_gen *g, uint8_t code, uint8_t dst, uint8_t src, int16_t off,
                int32_t imm)
{
    mks_q_emit(g, code, dst, src, off, imm);
}

#define ALU64_K(g, op, dst, imm)   ins(g, MKS_BPF_ALU64 | (op) | MKS_BPF_K, dst, 0, 0, imm)
#define ALU64_X(g, op, dst, src)   ins(g, MKS_BPF_ALU64 | (op) | MKS_BPF_X, dst, src, 0, 0)
#define LDX_DW(g, dst, src, off)   ins(g, MKS_BPF_LDX | MKS_BPF_MEM | MKS_BPF_DW, dst, src, off, 0)
#define STX_DW(g, dst, src, off)   ins(g, MKS_BPF_STX | MKS_BPF_MEM | MKS_BPF_DW, dst, src, off, 0)
#define CALL(g, id)                ins(g, MKS_BPF_JMP | MKS_BPF_CALL, 0, 0, 0, id)

static void ld_map(struct q_gen *g, uint8_t dst, int map)
{
    ins(g, MKS_BPF_LD | MKS_BPF_IMM | MKS_BPF_DW, dst, MKS_PSEUDO_MAP_IDX, 0, map);
    ins(g, 0, 0, 0, 0, 0);
}

/* r0 = lookup(map, fp + key_off) */
static void lookup(struct q_gen *g, int map, int16_t key_off)
{
    ld_map(g, 1, map);
    ALU64_X(g, MKS_BPF_MOV, 2, 10);
    ALU64_K(g, MKS_BPF_ADD, 2, key_off);
    CALL(g, MKS_HELPER_MAP_LOOKUP);
}

/* *(u64 *)(ptr + off) += 1, atomically */
static void count_one(struct q_gen *g, uint8_t ptr, int16_t off, uint8_t tmp)
{
    ALU64_K(g, MKS_BPF_MOV, tmp, 1);
    ins(g, MKS_BPF_STX | MKS_BPF_ATOMIC | MKS_BPF_DW, ptr, tmp, off, MKS_BPF_ADD);
}

static uint8_t ldx_size(int size)
{
    return size == 2 ? MKS_BPF_H : size == 4 ? MKS_BPF_W : MKS_BPF_DW;
}

/* A field into dst: from the context, or a derived one from its slot. */
static void probe_load(struct q_gen *g, enum q_field f, uint8_t dst)
{
    int slot = derived_slot(f);
    if (slot >= 0) {
        LDX_DW(g, dst, 10, (int16_t)(ST_DERIVED - 8 * slot));
        return;
    }
    ins(g, MKS_BPF_LDX | MKS_BPF_MEM | ldx_size(mks_q_fields[f].ctx_size), dst, R_CTX,
        (int16_t)mks_q_fields[f].ctx_off, 0);
}

/* Compute derived field f into its slot; unknown -> jump to `unknown`. */
static void gen_derived(struct q_gen *g, enum q_field f, uint32_t ev, int unknown)
{
    int16_t slot = (int16_t)(ST_DERIVED - 8 * derived_slot(f));
    switch (f) {
    case F_RUN: {
        /* task_end: t_now - t_start, as the latency monitor; dep_release:
         * the releasing task's t_end - t_start */
        int16_t end = ev == MKS_EV_TASK_END ? 80 : 112;
        LDX_DW(g, 1, R_CTX, 96);
        mks_q_jump(g, MKS_BPF_JMP | MKS_BPF_JEQ | MKS_BPF_K, 1, 0, 0, unknown);
        LDX_DW(g, 2, R_CTX, end);
        mks_q_jump(g, MKS_BPF_JMP | MKS_BPF_JLT | MKS_BPF_X, 2, 1, 0, unknown);
        ALU64_X(g, MKS_BPF_SUB, 2, 1);
        STX_DW(g, 10, 2, slot);
        return;
    }
    case F_QUEUE:
        LDX_DW(g, 1, R_CTX, 88);
        mks_q_jump(g, MKS_BPF_JMP | MKS_BPF_JEQ | MKS_BPF_K, 1, 0, 0, unknown);
        LDX_DW(g, 2, R_CTX, 96);
        mks_q_jump(g, MKS_BPF_JMP | MKS_BPF_JLT | MKS_BPF_X, 2, 1, 0, unknown);
        ALU64_X(g, MKS_BPF_SUB, 2, 1);
        STX_DW(g, 10, 2, slot);
        return;
    case F_WAIT:
        /* the begin this worker noted, consumed; it must be the same wait */
        lookup(g, MKS_PROBE_MAP_BEGIN, ST_ZERO_KEY);
        mks_q_jump(g, MKS_BPF_JMP | MKS_BPF_JEQ | MKS_BPF_K, 0, 0, 0, unknown);
        LDX_DW(g, 1, 0, 8);
        ins(g, MKS_BPF_ST | MKS_BPF_MEM | MKS_BPF_DW, 0, 0, 8, 0);
        mks_q_jump(g, MKS_BPF_JMP | MKS_BPF_JEQ | MKS_BPF_K, 1, 0, 0, unknown);
        LDX_DW(g, 2, 0, 0);
        LDX_DW(g, 3, R_CTX, 56);
        mks_q_jump(g, MKS_BPF_JMP | MKS_BPF_JNE | MKS_BPF_X, 2, 3, 0, unknown);
        LDX_DW(g, 2, R_CTX, 80);
        mks_q_jump(g, MKS_BPF_JMP | MKS_BPF_JLT | MKS_BPF_X, 2, 1, 0, unknown);
        ALU64_X(g, MKS_BPF_SUB, 2, 1);
        STX_DW(g, 10, 2, slot);
        return;
    case F_CHANNEL:
    case F_COMM_OP:
        /* comm-ids kinds STEP (1) and REQ (2) carry a channel and an op */
        LDX_DW(g, 1, R_CTX, 64);
        ALU64_X(g, MKS_BPF_MOV, 2, 1);
        ALU64_K(g, MKS_BPF_RSH, 2, 62);
        mks_q_jump(g, MKS_BPF_JMP | MKS_BPF_JEQ | MKS_BPF_K, 2, 0, 0, unknown);
        mks_q_jump(g, MKS_BPF_JMP | MKS_BPF_JEQ | MKS_BPF_K, 2, 0, 3, unknown);
        ALU64_K(g, MKS_BPF_RSH, 1, f == F_CHANNEL ? 56 : 8);
        ALU64_K(g, MKS_BPF_AND, 1, f == F_CHANNEL ? 63 : 0xfff);
        STX_DW(g, 10, 1, slot);
        return;
    default: return;
    }
}

/* max into word w of the group value (r1 holds the value; for a minimum,
 * its complement) by compare-and-swap. */
static int gen_cas_max(struct q_gen *g, uint32_t w)
{
    int loop = mks_q_label(g), done = mks_q_label(g);
    if (loop < 0 || done < 0)
        return -E2BIG;
    int16_t off = (int16_t)(8 * w);
    ALU64_K(g, MKS_BPF_MOV, R_TMP, 0);
    mks_q_place(g, loop);
    LDX_DW(g, 0, R_VAL, off);
    mks_q_jump(g, MKS_BPF_JMP | MKS_BPF_JLE | MKS_BPF_X, 1, 0, 0, done);
    ALU64_X(g, MKS_BPF_MOV, 2, 0);
    ins(g, MKS_BPF_STX | MKS_BPF_ATOMIC | MKS_BPF_DW, R_VAL, 1, off, MKS_BPF_CMPXCHG);
    mks_q_jump(g, MKS_BPF_JMP | MKS_BPF_JEQ | MKS_BPF_X, 0, 2, 0, done);
    ALU64_K(g, MKS_BPF_ADD, R_TMP, 1);
    mks_q_jump(g, MKS_BPF_JMP | MKS_BPF_JLT | MKS_BPF_K, R_TMP, 0, MKS_PROBE_CAS_TRIES, loop);
    count_one(g, R_STATS, 8 * MKS_PROBE_ST_CONTENDED, 2);
    mks_q_place(g, done);
    return 0;
}

/* Bucket of field f (struct mks_hist's) += 1 in the 64 words from w. */
static int gen_hist(struct q_gen *g, enum q_field f, uint32_t w)
{
    int lb[6], bd = mks_q_label(g), bok = mks_q_label(g);
    for (int i = 0; i < 6; i++)
        lb[i] = mks_q_label(g);
    if (bd < 0 || bok < 0 || lb[5] < 0)
        return -E2BIG;
    static const int shifts[6] = {32, 16, 8, 4, 2, 1};
    probe_load(g, f, 2);
    ALU64_K(g, MKS_BPF_MOV, 3, 0);
    mks_q_jump(g, MKS_BPF_JMP | MKS_BPF_JEQ | MKS_BPF_K, 2, 0, 0, bd);
    ALU64_K(g, MKS_BPF_MOV, 3, 1);
    for (int i = 0; i < 6; i++) {
        ALU64_X(g, MKS_BPF_MOV, 4, 2);
        ALU64_K(g, MKS_BPF_RSH, 4, shifts[i]);
        mks_q_jump(g, MKS_BPF_JMP | MKS_BPF_JEQ | MKS_BPF_K, 4, 0, 0, i == 5 ? bd : lb[i]);
        if (i < 5)
            ALU64_X(g, MKS_BPF_MOV, 2, 4);
        ALU64_K(g, MKS_BPF_ADD, 3, shifts[i]);
        if (i < 5)
            mks_q_place(g, lb[i]);
    }
    mks_q_place(g, bd);
    mks_q_jump(g, MKS_BPF_JMP | MKS_BPF_JLE | MKS_BPF_K, 3, 0, MKS_HIST_BUCKETS - 1, bok);
    ALU64_K(g, MKS_BPF_MOV, 3, MKS_HIST_BUCKETS - 1);
    mks_q_place(g, bok);
    ALU64_K(g, MKS_BPF_LSH, 3, 3);
    ALU64_X(g, MKS_BPF_MOV, 4, R_VAL);
    ALU64_X(g, MKS_BPF_ADD, 4, 3);
    count_one(g, 4, (int16_t)(8 * w), 1);
    return 0;
}

/* Which derived fields the program at ev computes. */
static void derived_needed(const struct mks_probe *p, const struct mks_pred *folded,
                           bool need[N_DERIVED])
{
    bool used[F_COUNT] = {false};
    fields_of(folded, used);
    for (int i = 0; i < p->n_aggs; i++)
        if (p->aggs[i].field >= 0)
            used[p->aggs[i].field] = true;
    for (int i = 0; i < p->n_keys; i++)
        used[p->keys[i]] = true;
    for (int i = 0; i < N_DERIVED; i++)
        need[i] = used[derived_order[i]];
}

static int gen_program(struct q_gen *g, const struct mks_probe *p, uint32_t ev, bool aggregates,
                       const struct mks_pred *folded, bool folded_true,
                       struct mks_probe_prog *out)
{
    int out_l = mks_q_label(g), unknown = mks_q_label(g), match = mks_q_label(g);
    int have = mks_q_label(g), overflow = mks_q_label(g);
    if (have < 0 || overflow < 0)
        return -E2BIG;
    ALU64_X(g, MKS_BPF_MOV, R_CTX, 1);
    ins(g, MKS_BPF_ST | MKS_BPF_MEM | MKS_BPF_W, 10, 0, ST_HOOK_KEY, (int32_t)ev);
    ins(g, MKS_BPF_ST | MKS_BPF_MEM | MKS_BPF_W, 10, 0, ST_ZERO_KEY, 0);
    if (aggregates) {
        lookup(g, MKS_PROBE_MAP_STATS, ST_HOOK_KEY);
        mks_q_jump(g, MKS_BPF_JMP | MKS_BPF_JEQ | MKS_BPF_K, 0, 0, 0, out_l);
        ALU64_X(g, MKS_BPF_MOV, R_STATS, 0);
        count_one(g, R_STATS, 8 * MKS_PROBE_ST_OBSERVED, 1);
    }
    if (p->pair && ev == MKS_EV_DEP_WAIT_BEGIN) {
        int skip = mks_q_label(g);
        if (skip < 0)
            return -E2BIG;
        lookup(g, MKS_PROBE_MAP_BEGIN, ST_ZERO_KEY);
        mks_q_jump(g, MKS_BPF_JMP | MKS_BPF_JEQ | MKS_BPF_K, 0, 0, 0, skip);
        LDX_DW(g, 1, R_CTX, 56);
        STX_DW(g, 0, 1, 0);
        LDX_DW(g, 1, R_CTX, 80);
        STX_DW(g, 0, 1, 8);
        mks_q_place(g, skip);
    }
    if (!aggregates) {
        mks_q_place(g, out_l);
        ALU64_K(g, MKS_BPF_MOV, 0, 0);
        ins(g, MKS_BPF_JMP | MKS_BPF_EXIT, 0, 0, 0, 0);
        goto done;
    }
    bool need[N_DERIVED];
    derived_needed(p, folded, need);
    bool any_unknown = false;
    for (int i = 0; i < N_DERIVED; i++)
        if (need[i]) {
            gen_derived(g, derived_order[i], ev, unknown);
            any_unknown = true;
        }
    if (!folded_true) {
        int rc = mks_q_gen_pred(g, folded, match, out_l);
        if (rc)
            return rc;
    }
    mks_q_place(g, match);
    count_one(g, R_STATS, 8 * MKS_PROBE_ST_MATCHED, 1);
    if (!p->n_keys) {
        ins(g, MKS_BPF_ST | MKS_BPF_MEM | MKS_BPF_DW, 10, 0, ST_KEY, 0);
    }
    for (int i = 0; i < p->n_keys; i++) {
        probe_load(g, p->keys[i], 1);
        STX_DW(g, 10, 1, (int16_t)(ST_KEY + 8 * i));
    }
    lookup(g, MKS_PROBE_MAP_GROUPS, ST_KEY);
    mks_q_jump(g, MKS_BPF_JMP | MKS_BPF_JNE | MKS_BPF_K, 0, 0, 0, have);
    /* a new group starts as the zero row (the value is larger than any
     * stack could hold with a histogram) */
    lookup(g, MKS_PROBE_MAP_ZERO, ST_ZERO_KEY);
    mks_q_jump(g, MKS_BPF_JMP | MKS_BPF_JEQ | MKS_BPF_K, 0, 0, 0, out_l);
    ALU64_X(g, MKS_BPF_MOV, 3, 0);
    ld_map(g, 1, MKS_PROBE_MAP_GROUPS);
    ALU64_X(g, MKS_BPF_MOV, 2, 10);
    ALU64_K(g, MKS_BPF_ADD, 2, ST_KEY);
    ALU64_K(g, MKS_BPF_MOV, 4, MKS_MAP_NOEXIST);
    CALL(g, MKS_HELPER_MAP_UPDATE);
    ALU64_X(g, MKS_BPF_MOV, R_TMP, 0);
    lookup(g, MKS_PROBE_MAP_GROUPS, ST_KEY);
    mks_q_jump(g, MKS_BPF_JMP | MKS_BPF_JNE | MKS_BPF_K, 0, 0, 0, have);
    mks_q_jump(g, MKS_BPF_JMP | MKS_BPF_JEQ | MKS_BPF_K, R_TMP, 0, -E2BIG, overflow);
    count_one(g, R_STATS, 8 * MKS_PROBE_ST_DROPPED, 1);
    mks_q_jump(g, MKS_BPF_JMP | MKS_BPF_JA, 0, 0, 0, out_l);
    mks_q_place(g, overflow);
    count_one(g, R_STATS, 8 * MKS_PROBE_ST_OVERFLOWED, 1);
    lookup(g, MKS_PROBE_MAP_OTHER, ST_ZERO_KEY);
    mks_q_jump(g, MKS_BPF_JMP | MKS_BPF_JEQ | MKS_BPF_K, 0, 0, 0, out_l);
    mks_q_place(g, have);
    ALU64_X(g, MKS_BPF_MOV, R_VAL, 0);
    count_one(g, R_VAL, 0, 1);
    for (int f = 0; f < F_COUNT; f++) {
        if (p->sum_w[f]) {
            probe_load(g, (enum q_field)f, 1);
            ins(g, MKS_BPF_STX | MKS_BPF_ATOMIC | MKS_BPF_DW, R_VAL, 1, (int16_t)(8 * p->sum_w[f]),
                MKS_BPF_ADD);
        }
    }
    for (int f = 0; f < F_COUNT; f++) {
        int rc = 0;
        if (p->max_w[f]) {
            probe_load(g, (enum q_field)f, 1);
            rc = gen_cas_max(g, p->max_w[f]);
        }
        if (!rc && p->min_w[f]) {
            probe_load(g, (enum q_field)f, 1);
            ALU64_K(g, MKS_BPF_XOR, 1, -1);
            rc = gen_cas_max(g, p->min_w[f]);
        }
        if (!rc && p->hist_w[f])
            rc = gen_hist(g, (enum q_field)f, p->hist_w[f]);
        if (rc)
            return rc;
    }
    mks_q_place(g, out_l);
    ALU64_K(g, MKS_BPF_MOV, 0, 0);
    ins(g, MKS_BPF_JMP | MKS_BPF_EXIT, 0, 0, 0, 0);
    if (any_unknown) {
        mks_q_place(g, unknown);
        count_one(g, R_STATS, 8 * MKS_PROBE_ST_UNKNOWN, 1);
        mks_q_jump(g, MKS_BPF_JMP | MKS_BPF_JA, 0, 0, 0, out_l);
    }
done:
    out->hook = ev;
    out->aggregates = aggregates;
    return mks_q_gen_finish(g, 0, "probe program", &out->insns, &out->n_insns);
}

void mks_probe_code_free(struct mks_probe_code *c)
{
    if (!c)
        return;
    for (uint32_t i = 0; i < c->n_progs; i++)
        free(c->progs[i].insns);
    free(c);
}

static void map_spec(struct mks_map_spec *m, const char *name, uint32_t type, uint32_t key,
                     uint32_t value, uint32_t entries)
{
    memset(m, 0, sizeof(*m));
    snprintf(m->name, sizeof(m->name), "%s", name);
    m->type = type;
    m->key_size = key;
    m->value_size = value;
    m->max_entries = entries;
}

int mks_probe_compile(const struct mks_probe *p, const struct mks_probe_opts *opts,
                      mks_class_resolver resolve, void *arg, struct mks_probe_code **code_p,
                      struct mks_query_error *e)
{
    if (!p || !code_p)
        return mks_q_err(e, 0, 1, "nothing to compile");
    if (opts && opts->sz != sizeof(*opts))
        return mks_q_err(e, 0, 1, "probe options of another version");
    uint32_t groups = opts && opts->max_groups ? opts->max_groups : MKS_PROBE_GROUPS_DEFAULT;
    if (groups > MKS_PROBE_GROUPS_MAX)
        return mks_q_err(e, 0, 1, "at most %u groups", MKS_PROBE_GROUPS_MAX);
    int rc = 0;
    struct mks_probe_code *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    uint32_t key_bytes = 8u * (uint32_t)(p->n_keys ? p->n_keys : 1);
    uint32_t value_bytes = 8u * p->layout.n_words;
    map_spec(&c->maps[MKS_PROBE_MAP_GROUPS], "groups", MKS_MAP_HASH, key_bytes, value_bytes,
             groups);
    map_spec(&c->maps[MKS_PROBE_MAP_OTHER], "other", MKS_MAP_ARRAY, 4, value_bytes, 1);
    map_spec(&c->maps[MKS_PROBE_MAP_STATS], "stats", MKS_MAP_ARRAY, 4, 8 * MKS_PROBE_ST_WORDS,
             MKS_EV_COUNT);
    map_spec(&c->maps[MKS_PROBE_MAP_ZERO], "zero", MKS_MAP_ARRAY, 4, value_bytes, 1);
    c->n_maps = MKS_PROBE_MAP_BEGIN;
    if (p->pair) {
        map_spec(&c->maps[MKS_PROBE_MAP_BEGIN], "begin", MKS_MAP_PERWORKER_ARRAY, 4, 16, 1);
        c->n_maps = MKS_PROBE_MAPS;
    }
    for (uint32_t ev = 0; ev < MKS_EV_COUNT && !rc; ev++) {
        bool agg = p->hooks & EV(ev), helper = p->helpers & EV(ev);
        if (!agg && !helper)
            continue;
        enum fold k = FOLD_TRUE;
        struct mks_pred *folded = NULL;
        if (agg && probe_fold(p->where, ev, &k, &folded)) {
            rc = -ENOMEM;
            break;
        }
        struct q_gen g = {.resolve = resolve, .arg = arg, .e = e, .load = probe_load};
        rc = gen_program(&g, p, ev, agg, folded, k == FOLD_TRUE, &c->progs[c->n_progs]);
        if (rc) {
            free(g.insns);
            free(g.fix);
            if (rc == -E2BIG)
                rc = mks_q_err(e, 0, 1, "probe too complex for one program");
        } else {
            c->n_progs++;
        }
        mks_pred_free(folded);
    }
    if (rc) {
        mks_probe_code_free(c);
        return rc;
    }
    *code_p = c;
    return 0;
}

/* ---- the reference model ---------------------------------------------------- */

struct sim_group {
    uint64_t key[MKS_PROBE_MAX_KEYS];
    uint64_t w[MKS_PROBE_MAX_WORDS];
};

struct sim_begin {
    uint64_t dep, t;
};

struct mks_probe_sim {
    const struct mks_probe *p;
    uint32_t max;
    mks_class_resolver resolve;
    void *arg;
    struct mks_pred *folded[MKS_EV_COUNT];
    enum fold kind[MKS_EV_COUNT];
    struct sim_group *groups;
    uint32_t n;
    uint64_t other[MKS_PROBE_MAX_WORDS];
    uint64_t stats[MKS_EV_COUNT][MKS_PROBE_ST_WORDS];
    struct sim_begin *begin;
    uint32_t n_begin;
};

void mks_probe_sim_free(struct mks_probe_sim *s)
{
    if (!s)
        return;
    for (int i = 0; i < MKS_EV_COUNT; i++)
        mks_pred_free(s->folded[i]);
    free(s->groups);
    free(s->begin);
    free(s);
}

int mks_probe_sim_new(const struct mks_probe *p, uint32_t max_groups, mks_class_resolver resolve,
                      void *arg, struct mks_probe_sim **sim_p)
{
    if (!p || !sim_p)
        return -EINVAL;
    struct mks_probe_sim *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->p = p;
    s->max = max_groups ? max_groups : MKS_PROBE_GROUPS_DEFAULT;
    s->resolve = resolve;
    s->arg = arg;
    s->groups = calloc(s->max, sizeof(*s->groups));
    if (!s->groups) {
        mks_probe_sim_free(s);
        return -ENOMEM;
    }
    for (uint32_t ev = 0; ev < MKS_EV_COUNT; ev++)
        if ((p->hooks & EV(ev)) && probe_fold(p->where, ev, &s->kind[ev], &s->folded[ev])) {
            mks_probe_sim_free(s);
            return -ENOMEM;
        }
    *sim_p = s;
    return 0;
}

void mks_probe_sim_epoch(struct mks_probe_sim *s)
{
    s->n = 0;
    memset(s->other, 0, sizeof(s->other));
    memset(s->stats, 0, sizeof(s->stats));
    if (s->n_begin) /* no begin table when no predicate pairs begins */
        memset(s->begin, 0, s->n_begin * sizeof(*s->begin));
}

static uint64_t sim_field(const struct mks_hook_ctx *c, enum q_field f, const uint64_t *d)
{
    int slot = derived_slot(f);
    return slot >= 0 ? d[slot] : mks_q_ctx_field(c, f);
}

static int sim_pred(const struct mks_probe_sim *s, const struct mks_pred *p,
                    const struct mks_hook_ctx *c, const uint64_t *d)
{
    switch (p->kind) {
    case N_AND: return sim_pred(s, p->a, c, d) && sim_pred(s, p->b, c, d);
    case N_OR: return sim_pred(s, p->a, c, d) || sim_pred(s, p->b, c, d);
    case N_NOT: return !sim_pred(s, p->a, c, d);
    case N_CMP: break;
    }
    uint64_t v;
    if (mks_q_cmp_value(p, s->resolve, s->arg, &v))
        return 0; /* compile refuses an unknown class: never reached for a compiled probe */
    return cmp_holds(sim_field(c, p->field, d), p->op, v);
}

static struct sim_begin *sim_begin_of(struct mks_probe_sim *s, uint32_t worker)
{
    if (worker >= s->n_begin) {
        uint32_t n = worker + 1;
        struct sim_begin *b = realloc(s->begin, n * sizeof(*b));
        if (!b)
            return NULL;
        memset(b + s->n_begin, 0, (n - s->n_begin) * sizeof(*b));
        s->begin = b;
        s->n_begin = n;
    }
    return &s->begin[worker];
}

static void sim_add(uint64_t *w, uint64_t v)
{
    *w += v; /* the VM's atomic add wraps */
}

void mks_probe_sim_event(struct mks_probe_sim *s, const struct mks_hook_ctx *c)
{
    const struct mks_probe *p = s->p;
    uint32_t ev = c->event;
    if (ev >= MKS_EV_COUNT || !((p->hooks | p->helpers) & EV(ev)))
        return;
    bool agg = p->hooks & EV(ev);
    uint64_t *st = s->stats[ev];
    if (agg)
        st[MKS_PROBE_ST_OBSERVED]++;
    if (p->pair && ev == MKS_EV_DEP_WAIT_BEGIN) {
        struct sim_begin *b = sim_begin_of(s, c->worker);
        if (b)
            b->dep = c->dep_event, b->t = c->t_now;
    }
    if (!agg)
        return;
    bool need[N_DERIVED];
    derived_needed(p, s->folded[ev], need);
    uint64_t d[N_DERIVED] = {0};
    for (int i = 0; i < N_DERIVED; i++) {
        if (!need[i])
            continue;
        bool ok = true;
        switch (derived_order[i]) {
        case F_RUN: {
            uint64_t t0 = c->t_start, t1 = ev == MKS_EV_TASK_END ? c->t_now : c->t_end;
            ok = t0 && t1 >= t0;
            d[i] = t1 - t0;
            break;
        }
        case F_QUEUE:
            ok = c->t_ready && c->t_start >= c->t_ready;
            d[i] = c->t_start - c->t_ready;
            break;
        case F_WAIT: {
            struct sim_begin *b = sim_begin_of(s, c->worker);
            uint64_t t0 = b ? b->t : 0, dep = b ? b->dep : 0;
            if (b)
                b->t = 0;
            ok = b && t0 && dep == c->dep_event && c->t_now >= t0;
            d[i] = c->t_now - t0;
            break;
        }
        default: {
            uint64_t kind = c->comm_gen >> 62;
            ok = kind == 1 || kind == 2;
            d[i] = derived_order[i] == F_CHANNEL ? (c->comm_gen >> 56) & 63
                                                 : (c->comm_gen >> 8) & 0xfff;
            break;
        }
        }
        if (!ok) {
            st[MKS_PROBE_ST_UNKNOWN]++;
            return;
        }
    }
    if (s->kind[ev] == FOLD_TREE && !sim_pred(s, s->folded[ev], c, d))
        return;
    st[MKS_PROBE_ST_MATCHED]++;
    uint64_t key[MKS_PROBE_MAX_KEYS] = {0};
    for (int i = 0; i < p->n_keys; i++)
        key[i] = sim_field(c, p->keys[i], d);
    uint64_t *w = NULL;
    for (uint32_t g = 0; g < s->n && !w; g++)
        if (!memcmp(s->groups[g].key, key, sizeof(key)))
            w = s->groups[g].w;
    if (!w && s->n < s->max) {
        memset(&s->groups[s->n], 0, sizeof(s->groups[s->n]));
        memcpy(s->groups[s->n].key, key, sizeof(key));
        w = s->groups[s->n++].w;
    }
    if (!w) {
        st[MKS_PROBE_ST_OVERFLOWED]++;
        w = s->other;
    }
    w[0]++;
    for (int f = 0; f < F_COUNT; f++) {
        uint64_t v = p->sum_w[f] || p->max_w[f] || p->min_w[f] || p->hist_w[f]
                         ? sim_field(c, (enum q_field)f, d)
                         : 0;
        if (p->sum_w[f])
            sim_add(&w[p->sum_w[f]], v);
        if (p->max_w[f] && v > w[p->max_w[f]])
            w[p->max_w[f]] = v;
        if (p->min_w[f] && ~v > w[p->min_w[f]])
            w[p->min_w[f]] = ~v;
        if (p->hist_w[f])
            w[p->hist_w[f] + mks_hist_bucket(v)]++;
    }
}

uint32_t mks_probe_sim_groups(const struct mks_probe_sim *s)
{
    return s->n;
}

void mks_probe_sim_group(const struct mks_probe_sim *s, uint32_t i, const uint64_t **key_p,
                         const uint64_t **words_p)
{
    *key_p = s->groups[i].key;
    *words_p = s->groups[i].w;
}

const uint64_t *mks_probe_sim_other(const struct mks_probe_sim *s)
{
    return s->other;
}

const uint64_t *mks_probe_sim_stats(const struct mks_probe_sim *s, uint32_t hook)
{
    return hook < MKS_EV_COUNT ? s->stats[hook] : NULL;
}

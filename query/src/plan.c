/*
 * Planning a query to SQL over the collector's store (docs/collector.md),
 * and the SQL functions the plans use.
 *
 * A query reads one source: all its aggregates must be over metrics of the
 * same table (task statistics, steps, remote waits, local waits, workers).
 * The source is a subquery that joins the per-epoch table to `epochs` for
 * job, rank, epoch and time, so the predicate's fields mean the same thing
 * whatever the source.  Every user value becomes a bound parameter.
 */
#include <errno.h>
#include <math.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lang.h"

const char *mks_q_agg_name(int a);
const char *mks_q_metric_name(int m);

enum q_source { S_TASK, S_STEP, S_RWAIT, S_LWAIT, S_WORKER, S_COUNT };

static const char *const source_sql[S_COUNT] = {
    [S_TASK] = "SELECT e.job, e.rank, e.id AS epoch_id, e.epoch, e.received_ns AS time, t.class,"
               " t.step, t.req_gen, NULL AS worker, NULL AS peer, NULL AS comm_gen, t.count,"
               " t.queue_count, t.queue_sum, t.queue_max, t.queue_hist, t.run_count, t.run_sum,"
               " t.run_max, t.run_hist FROM task_stats t JOIN epochs e ON e.id = t.epoch_id"
               " WHERE e.job = ?1 AND e.id >= ?2",
    /* Step durations: from complete step rows with times; for ranks whose
     * step rows carry none, from generation advances (a step ends at its
     * last advance and begins where the previous step ended).  An older
     * genprog-only agent's rows hold a step's busy span within one epoch
     * and are never complete: its ranks' steps come from advances.  The
     * advances' epochs are read through the (job, id) index: left to
     * itself, SQLite took the (job, rank, id) one and read every epoch of
     * the job for each evaluation of a trigger (0.5 s a second on an hour
     * of four ranks). */
    [S_STEP] = "SELECT *, 1 AS n, v AS s, v AS mn, v AS mx, NULL AS h FROM ("
               "SELECT e.job, e.rank, e.id AS epoch_id, e.epoch, e.received_ns AS time,"
               " NULL AS class, s.step, NULL AS req_gen, NULL AS worker, NULL AS peer,"
               " NULL AS comm_gen, s.t_end_dev - s.t_begin_dev AS v FROM steps s JOIN epochs e"
               " ON e.id = s.epoch_id WHERE e.job = ?1 AND e.id >= ?2 AND s.complete"
               " AND s.t_begin_dev > 0"
               " AND s.t_end_dev >= s.t_begin_dev"
               " UNION ALL SELECT job, rank, epoch_id, epoch, time, NULL, step, NULL, NULL, NULL,"
               " NULL, t - prev_t FROM (SELECT ?1 AS job, rank, epoch_id, epoch, time, step, t,"
               " LAG(step) OVER (PARTITION BY rank ORDER BY step) AS prev_step,"
               " LAG(t) OVER (PARTITION BY rank ORDER BY step) AS prev_t FROM (SELECT e.rank,"
               " g.step, MAX(g.t_dev) AS t, MAX(e.id) AS epoch_id, MAX(e.epoch) AS epoch,"
               " MAX(e.received_ns) AS time FROM gens g JOIN epochs e INDEXED BY epochs_job ON"
               " e.id = g.epoch_id WHERE e.job = ?1 AND e.id >= ?2 AND g.t_dev > 0 AND e.rank NOT"
               " IN (SELECT DISTINCT x.rank FROM steps s2 JOIN epochs x INDEXED BY epochs_job ON"
               " x.id = s2.epoch_id WHERE x.job = ?1 AND"
               " x.id >= ?2 AND s2.complete AND s2.t_begin_dev > 0) GROUP BY e.rank, g.step))"
               " WHERE prev_step = step - 1 AND t >= prev_t)"
               /* minutes rolled up past the detail window: a histogram each */
               " UNION ALL SELECT e.job, e.rank, e.id, e.epoch, e.received_ns, NULL, NULL, NULL,"
               " NULL, NULL, NULL, NULL, r.count, r.sum_ns, r.min_ns, r.max_ns, r.hist FROM"
               " rollups r JOIN epochs e ON e.id = r.epoch_id WHERE r.kind = 0 AND r.count > 0"
               " AND e.job = ?1 AND e.id >= ?2",
    [S_RWAIT] = "SELECT e.job, e.rank, e.id AS epoch_id, e.epoch, e.received_ns AS time,"
                " w.waiter_class AS class, w.step, NULL AS req_gen, w.worker, w.peer_rank AS peer,"
                " w.comm_gen, w.t_end_dev - w.t_begin_dev AS v, 1 AS n,"
                " w.t_end_dev - w.t_begin_dev AS s, w.t_end_dev - w.t_begin_dev AS mn,"
                " w.t_end_dev - w.t_begin_dev AS mx, NULL AS h FROM waits w JOIN epochs e"
                " ON e.id = w.epoch_id WHERE e.job = ?1 AND e.id >= ?2 AND w.t_begin_dev > 0"
                " AND w.t_end_dev >= w.t_begin_dev"
                " UNION ALL SELECT e.job, e.rank, e.id, e.epoch, e.received_ns, r.class, NULL,"
                " NULL, NULL, r.peer_rank, NULL, NULL, r.count, r.sum_ns, r.min_ns, r.max_ns,"
                " r.hist FROM rollups r JOIN epochs e ON e.id = r.epoch_id WHERE r.kind = 1"
                " AND r.count > 0 AND e.job = ?1 AND e.id >= ?2",
    [S_LWAIT] = "SELECT e.job, e.rank, e.id AS epoch_id, e.epoch, e.received_ns AS time,"
                " l.class, l.step, NULL AS req_gen, NULL AS worker, NULL AS peer,"
                " NULL AS comm_gen, l.count, l.sum_ns, l.max_ns FROM local_waits l JOIN epochs e"
                " ON e.id = l.epoch_id WHERE e.job = ?1 AND e.id >= ?2",
    [S_WORKER] = "SELECT e.job, e.rank, e.id AS epoch_id, e.epoch, e.received_ns AS time,"
                 " NULL AS class, w.step, NULL AS req_gen, w.worker, NULL AS peer,"
                 " NULL AS comm_gen, w.busy_ns, w.idle_ns, w.max_queue_depth FROM workers w"
                 " JOIN epochs e ON e.id = w.epoch_id WHERE e.job = ?1 AND e.id >= ?2",
};

static const char *const source_name[S_COUNT] = {"task statistics", "steps", "remote waits",
                                                 "local waits", "worker statistics"};

/* Which source each group/filter field exists in. */
static bool field_in_source(enum q_field f, enum q_source s)
{
    switch (f) {
    case F_RANK:
    case F_STEP:
    case F_EPOCH:
    case F_TIME: return true;
    case F_CLASS: return s == S_TASK || s == S_RWAIT || s == S_LWAIT;
    case F_REQ_GEN: return s == S_TASK;
    case F_WORKER: return s == S_RWAIT || s == S_WORKER;
    case F_PEER:
    case F_COMM_GEN: return s == S_RWAIT;
    default: return false;
    }
}

static enum q_source metric_source(enum q_metric m)
{
    switch (m) {
    case M_TASK:
    case M_RUN:
    case M_QUEUE: return S_TASK;
    case M_STEP: return S_STEP;
    case M_REMOTE_WAIT: return S_RWAIT;
    case M_LOCAL_WAIT: return S_LWAIT;
    default: return S_WORKER;
    }
}

static double agg_q(enum q_agg a)
{
    return a == A_P50 ? 0.5 : a == A_P90 ? 0.9 : 0.99;
}

/* SQL of one aggregate; NULL with a reason when the metric does not keep
 * what the aggregate needs. */
static const char *agg_sql(const struct q_agg_item *it, char *buf, size_t len, const char **why)
{
    enum q_agg a = it->agg;
    bool quant = a == A_P50 || a == A_P90 || a == A_P99;
    const char *col = NULL;
    switch (it->metric) {
    case M_TASK:
        if (a != A_COUNT) {
            *why = "task counts only support count(task); use run or queue for latencies";
            return NULL;
        }
        return "SUM(count)";
    case M_RUN:
    case M_QUEUE: {
        const char *p = it->metric == M_RUN ? "run" : "queue";
        if (a == A_COUNT)
            snprintf(buf, len, "SUM(%s_count)", p);
        else if (a == A_SUM)
            snprintf(buf, len, "SUM(%s_sum)", p);
        else if (a == A_MEAN)
            snprintf(buf, len, "CAST(SUM(%s_sum) AS REAL) / NULLIF(SUM(%s_count), 0)", p, p);
        else if (a == A_MAX)
            snprintf(buf, len, "MAX(%s_max)", p);
        else if (quant)
            snprintf(buf, len, "mks_hist_quantile(%s_hist, %g)", p, agg_q(a));
        else {
            *why = "the minimum latency is not kept: use p50 or the histogram's quantiles";
            return NULL;
        }
        return buf;
    }
    case M_LOCAL_WAIT:
        if (a == A_COUNT)
            return "SUM(count)";
        if (a == A_SUM)
            return "SUM(sum_ns)";
        if (a == A_MEAN)
            return "CAST(SUM(sum_ns) AS REAL) / NULLIF(SUM(count), 0)";
        if (a == A_MAX)
            return "MAX(max_ns)";
        *why = "local waits are aggregated on the device: count, sum, mean, max";
        return NULL;
    case M_STEP:
    case M_REMOTE_WAIT:
        /* Rows of one value each and rolled-up rows of a minute's count,
         * sum, extremes and histogram (source columns n, s, mn, mx, h). */
        switch (a) {
        case A_COUNT: return "SUM(n)";
        case A_SUM: return "SUM(s)";
        case A_MEAN: return "CAST(SUM(s) AS REAL) / NULLIF(SUM(n), 0)";
        case A_MIN: return "MIN(mn)";
        case A_MAX: return "MAX(mx)";
        default: snprintf(buf, len, "mks_quantile_h(v, h, %g)", agg_q(a)); return buf;
        }
    case M_IDLE: col = "idle_ns"; break;
    case M_BUSY: col = "busy_ns"; break;
    case M_DEPTH: col = "max_queue_depth"; break;
    }
    switch (a) {
    case A_COUNT: snprintf(buf, len, "COUNT(%s)", col); break;
    case A_SUM: snprintf(buf, len, "SUM(%s)", col); break;
    case A_MEAN: snprintf(buf, len, "AVG(%s)", col); break;
    case A_MIN: snprintf(buf, len, "MIN(%s)", col); break;
    case A_MAX: snprintf(buf, len, "MAX(%s)", col); break;
    default: snprintf(buf, len, "mks_quantile(%s, %g)", col, agg_q(a)); break;
    }
    return buf;
}

/* ---- SQL text building ------------------------------------------------------ */

struct sb {
    char *s;
    size_t len, cap;
    bool oom;
};

static void sb_add(struct sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_add(struct sb *b, const char *fmt, ...)
{
    if (b->oom)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (b->len + (size_t)n + 1 > b->cap) {
        size_t cap = (b->cap ? b->cap * 2 : 256) + (size_t)n;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->oom = true;
            return;
        }
        b->s = s, b->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

struct planner {
    struct mks_sql_plan *plan;
    enum q_source src;
    uint64_t now_ns;
    struct mks_query_error *e;
};

static int add_param(struct planner *pl, bool text, int64_t i, const char *s)
{
    struct mks_sql_plan *p = pl->plan;
    struct mks_sql_param *np = realloc(p->params, (p->n_params + 1) * sizeof(*np));
    if (!np)
        return -ENOMEM;
    p->params = np;
    np[p->n_params].is_text = text;
    np[p->n_params].i = i;
    np[p->n_params].s = NULL;
    if (text && !(np[p->n_params].s = strdup(s)))
        return -ENOMEM;
    return (int)++p->n_params;
}

static const char *field_col(enum q_field f)
{
    switch (f) {
    case F_RANK: return "rank";
    case F_CLASS: return "class";
    case F_STEP: return "step";
    case F_REQ_GEN: return "req_gen";
    case F_EPOCH: return "epoch";
    case F_TIME: return "time";
    case F_WORKER: return "worker";
    case F_PEER: return "peer";
    case F_COMM_GEN: return "comm_gen";
    default: return NULL;
    }
}

static const char *const op_sql[] = {"=", "!=", "<", "<=", ">", ">="};

static int where_sql(struct planner *pl, const struct mks_pred *p, struct sb *b)
{
    int rc;
    switch (p->kind) {
    case N_AND:
    case N_OR:
        sb_add(b, "(");
        if ((rc = where_sql(pl, p->a, b)))
            return rc;
        sb_add(b, p->kind == N_AND ? " AND " : " OR ");
        if ((rc = where_sql(pl, p->b, b)))
            return rc;
        sb_add(b, ")");
        return 0;
    case N_NOT:
        sb_add(b, "NOT (");
        if ((rc = where_sql(pl, p->a, b)))
            return rc;
        sb_add(b, ")");
        return 0;
    case N_CMP:
        break;
    }
    const char *fname = mks_q_fields[p->field].name;
    if (!mks_q_fields[p->field].sql)
        return mks_q_err(pl->e, p->fpos, p->flen,
                         "'%s' exists only on the device (escalation filters), not in summaries",
                         fname);
    if (!field_in_source(p->field, pl->src))
        return mks_q_err(pl->e, p->fpos, p->flen, "%s have no '%s'", source_name[pl->src], fname);
    if (p->is_str) {
        /* Class by name: any class id this job's schemas give that name. */
        int idx = add_param(pl, true, 0, p->str);
        if (idx < 0)
            return idx;
        sb_add(b, "class %s (SELECT id FROM task_classes WHERE job = ?1 AND name = ?%d)",
               p->op == OP_EQ ? "IN" : "NOT IN", idx);
        return 0;
    }
    int64_t v = p->num;
    if (p->field == F_TIME && p->neg)
        v = (int64_t)pl->now_ns + v; /* relative to now */
    int idx = add_param(pl, false, v, NULL);
    if (idx < 0)
        return idx;
    sb_add(b, "%s %s ?%d", field_col(p->field), op_sql[p->op], idx);
    return 0;
}

void mks_sql_plan_free(struct mks_sql_plan *plan)
{
    if (!plan)
        return;
    for (uint32_t i = 0; i < plan->n_params; i++)
        free((char *)plan->params[i].s);
    free(plan->params);
    free(plan->sql);
    free(plan->coverage_sql);
    free(plan->source_sql);
    free(plan);
}

int mks_query_plan(const struct mks_query *q, const char *job, uint64_t now_ns,
                   struct mks_sql_plan **plan_p, struct mks_query_error *e)
{
    return mks_query_plan_from(q, job, now_ns, 0, plan_p, e);
}

int mks_query_plan_from(const struct mks_query *q, const char *job, uint64_t now_ns,
                        int64_t min_epoch_id, struct mks_sql_plan **plan_p,
                        struct mks_query_error *e)
{
    if (!q || !job || !plan_p)
        return mks_q_err(e, 0, 1, "nothing to plan");
    struct mks_sql_plan *plan = calloc(1, sizeof(*plan));
    if (!plan)
        return -ENOMEM;
    struct planner pl = {.plan = plan, .now_ns = now_ns, .e = e};
    struct sb sel = {0}, where = {0}, sql = {0}, cov = {0};
    int rc;
    pl.src = metric_source(q->aggs[0].metric);
    for (int i = 1; i < q->n_aggs; i++) {
        if (metric_source(q->aggs[i].metric) != pl.src) {
            rc = mks_q_err(e, q->aggs[i].pos, q->aggs[i].len,
                           "cannot mix %s and %s in one query: run two queries",
                           source_name[pl.src], source_name[metric_source(q->aggs[i].metric)]);
            goto out;
        }
    }
    if ((rc = add_param(&pl, true, 0, job)) < 0 ||
        (rc = add_param(&pl, false, min_epoch_id, NULL)) < 0)
        goto out;
    for (int i = 0; i < q->n_groups; i++) {
        enum q_field f = q->groups[i];
        if (!field_in_source(f, pl.src)) {
            rc = mks_q_err(e, q->gpos[i], q->glen[i], "%s have no '%s' to group by",
                           source_name[pl.src], mks_q_fields[f].name);
            goto out;
        }
        if (f == F_CLASS)
            sb_add(&sel, "%sCOALESCE((SELECT name FROM task_classes tc WHERE tc.job = ?1 AND"
                         " tc.id = src.class LIMIT 1), 'class' || src.class) AS class",
                   i ? ", " : "");
        else
            sb_add(&sel, "%s%s", i ? ", " : "", field_col(f));
    }
    for (int i = 0; i < q->n_aggs; i++) {
        char buf[160];
        const char *why = NULL;
        const char *a = agg_sql(&q->aggs[i], buf, sizeof(buf), &why);
        if (!a) {
            rc = mks_q_err(e, q->aggs[i].pos, q->aggs[i].len, "%s", why);
            goto out;
        }
        sb_add(&sel, "%s%s AS \"%s(%s)\"", (i || q->n_groups) ? ", " : "", a,
               mks_q_agg_name(q->aggs[i].agg), mks_q_metric_name(q->aggs[i].metric));
    }
    /* Task rows that carry only histograms (of steps the agent could not
     * keep apart, counted in their own steps' rows) matter to quantiles
     * only: elsewhere they would be groups of nothing. */
    bool quantiles = false;
    for (int i = 0; i < q->n_aggs; i++)
        quantiles |= q->aggs[i].agg == A_P50 || q->aggs[i].agg == A_P90 || q->aggs[i].agg == A_P99;
    bool hist_rows = pl.src == S_TASK && !quantiles;
    if (q->where || hist_rows)
        sb_add(&where, " WHERE ");
    if (hist_rows)
        sb_add(&where, "(count > 0 OR run_count > 0 OR queue_count > 0)%s",
               q->where ? " AND (" : "");
    if (q->where) {
        if ((rc = where_sql(&pl, q->where, &where)))
            goto out;
        if (hist_rows)
            sb_add(&where, ")");
    }
    sb_add(&sql, "SELECT %s FROM (%s) AS src%s", sel.s, source_sql[pl.src],
           where.s ? where.s : "");
    if (q->n_groups) {
        sb_add(&sql, " GROUP BY ");
        for (int i = 0; i < q->n_groups; i++)
            sb_add(&sql, "%s%d", i ? ", " : "", i + 1);
        sb_add(&sql, " ORDER BY ");
        for (int i = 0; i < q->n_groups; i++)
            sb_add(&sql, "%s%d", i ? ", " : "", i + 1);
    }
    sb_add(&sql, " LIMIT %lld", (long long)q->limit);
    /* Coverage of exactly the epochs the query read. */
    /* The epoch count is of the epochs read, also where one carried no
     * coverage rows. */
    sb_add(&cov,
           "WITH m AS MATERIALIZED (SELECT DISTINCT epoch_id FROM (%s) AS src%s)"
           " SELECT COALESCE(SUM(eligible), 0), COALESCE(SUM(ran), 0), COALESCE(SUM(throttled), 0),"
           " COALESCE(SUM(lost), 0), (SELECT COUNT(*) FROM m), COALESCE(SUM(undelivered), 0),"
           " (SELECT COALESCE(SUM(lost_summaries), 0) FROM epochs WHERE id IN m),"
           " (SELECT COUNT(*) FROM epochs WHERE id IN m AND compacted = 2) FROM coverage"
           " WHERE epoch_id IN m",
           source_sql[pl.src], where.s ? where.s : "");
    if (sel.oom || where.oom || sql.oom || cov.oom) {
        rc = -ENOMEM;
        goto out;
    }
    plan->sql = sql.s, sql.s = NULL;
    plan->coverage_sql = cov.s, cov.s = NULL;
    plan->source = (int)pl.src;
    plan->source_name = source_name[pl.src];
    if (!(plan->source_sql = strdup(source_sql[pl.src]))) {
        rc = -ENOMEM;
        goto out;
    }
    plan->n_group = (uint32_t)q->n_groups;
    plan->n_columns = (uint32_t)(q->n_groups + q->n_aggs);
    *plan_p = plan;
    plan = NULL;
    rc = 0;
out:
    free(sel.s);
    free(where.s);
    free(sql.s);
    free(cov.s);
    mks_sql_plan_free(plan);
    return rc < 0 ? rc : 0;
}

static int pred_names(const struct mks_pred *p, mks_query_name_fn fn, void *arg)
{
    if (!p)
        return 0;
    if (p->kind != N_CMP) {
        int rc = pred_names(p->a, fn, arg);
        return rc ? rc : pred_names(p->b, fn, arg);
    }
    return p->field == F_CLASS && p->is_str ? fn(p->str, p->vpos, p->vlen, arg) : 0;
}

int mks_query_class_names(const struct mks_query *q, mks_query_name_fn fn, void *arg)
{
    return q && fn ? pred_names(q->where, fn, arg) : 0;
}

int mks_sql_plan_bind(const struct mks_sql_plan *plan, sqlite3_stmt *stmt)
{
    int n = sqlite3_bind_parameter_count(stmt);
    for (uint32_t i = 0; i < plan->n_params && (int)i < n; i++) {
        int rc = plan->params[i].is_text
                     ? sqlite3_bind_text(stmt, (int)i + 1, plan->params[i].s, -1, SQLITE_TRANSIENT)
                     : sqlite3_bind_int64(stmt, (int)i + 1, plan->params[i].i);
        if (rc != SQLITE_OK)
            return -EINVAL;
    }
    return 0;
}

/* ---- SQL functions ------------------------------------------------------------- */

double mks_hist_quantile_est(const uint64_t *buckets, uint32_t n, double q)
{
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++)
        total += buckets[i];
    if (!total)
        return NAN;
    double rank = q * (double)total;
    uint64_t cum = 0;
    for (uint32_t b = 0; b < n; b++) {
        if (!buckets[b])
            continue;
        if ((double)(cum + buckets[b]) >= rank) {
            if (b == 0)
                return 0;
            /* Bucket b holds [2^(b-1), 2^b): interpolate linearly inside. */
            double lo = ldexp(1.0, (int)b - 1), hi = ldexp(1.0, (int)b);
            double frac = (rank - (double)cum) / (double)buckets[b];
            if (frac < 0)
                frac = 0;
            return lo + (hi - lo) * frac;
        }
        cum += buckets[b];
    }
    return ldexp(1.0, (int)n - 1);
}

struct hist_acc {
    uint64_t b[MKS_HIST_BUCKETS];
    double q;
    bool any;
};

static void hist_step(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    struct hist_acc *a = sqlite3_aggregate_context(ctx, sizeof(*a));
    if (!a)
        return;
    a->q = sqlite3_value_double(argv[1]);
    if (sqlite3_value_type(argv[0]) != SQLITE_BLOB)
        return;
    int n = sqlite3_value_bytes(argv[0]);
    const uint8_t *p = sqlite3_value_blob(argv[0]);
    for (int i = 0; i < n / 8 && i < MKS_HIST_BUCKETS; i++) {
        uint64_t v = 0;
        for (int k = 0; k < 8; k++)
            v |= (uint64_t)p[i * 8 + k] << (8 * k);
        a->b[i] += v;
        a->any = true;
    }
}

static void hist_final(sqlite3_context *ctx)
{
    struct hist_acc *a = sqlite3_aggregate_context(ctx, 0);
    if (!a || !a->any) {
        sqlite3_result_null(ctx);
        return;
    }
    double v = mks_hist_quantile_est(a->b, MKS_HIST_BUCKETS, a->q);
    if (isnan(v))
        sqlite3_result_null(ctx);
    else
        sqlite3_result_double(ctx, v);
}

struct exact_acc {
    double *v;
    size_t n, cap;
    double q;
    bool oom;
};

static void exact_step(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    struct exact_acc *a = sqlite3_aggregate_context(ctx, sizeof(*a));
    if (!a || a->oom)
        return;
    a->q = sqlite3_value_double(argv[1]);
    if (sqlite3_value_type(argv[0]) == SQLITE_NULL)
        return;
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 64;
        double *v = sqlite3_realloc64(a->v, cap * sizeof(*v));
        if (!v) {
            a->oom = true;
            return;
        }
        a->v = v, a->cap = cap;
    }
    a->v[a->n++] = sqlite3_value_double(argv[0]);
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

static void exact_final(sqlite3_context *ctx)
{
    struct exact_acc *a = sqlite3_aggregate_context(ctx, 0);
    if (!a || !a->n || a->oom) {
        if (a && a->oom)
            sqlite3_result_error_nomem(ctx);
        else
            sqlite3_result_null(ctx);
        if (a)
            sqlite3_free(a->v);
        return;
    }
    qsort(a->v, a->n, sizeof(double), cmp_double);
    /* Nearest rank: the smallest value with at least q of the data at or
     * below it. */
    size_t k = (size_t)ceil(a->q * (double)a->n);
    if (k < 1)
        k = 1;
    if (k > a->n)
        k = a->n;
    sqlite3_result_double(ctx, a->v[k - 1]);
    sqlite3_free(a->v);
}

/* ---- histograms of rolled-up rows (the store's roll-up, docs/collector.md) ---- */

/* The bucket of a value: 0 for 0, else b with 2^(b-1) <= v < 2^b, the last
 * bucket holding everything above (as the device's histograms, maps.c). */
static uint32_t hist_bucket(double v)
{
    if (!(v >= 1))
        return 0;
    if (v >= ldexp(1.0, MKS_HIST_BUCKETS - 1))
        return MKS_HIST_BUCKETS - 1;
    uint64_t u = (uint64_t)v;
    uint32_t b = 64u - (uint32_t)__builtin_clzll(u);
    return b < MKS_HIST_BUCKETS ? b : MKS_HIST_BUCKETS - 1;
}

static void hist_add_blob(uint64_t *b, sqlite3_value *v)
{
    if (sqlite3_value_type(v) != SQLITE_BLOB)
        return;
    int n = sqlite3_value_bytes(v);
    const uint8_t *p = sqlite3_value_blob(v);
    for (int i = 0; i < n / 8 && i < MKS_HIST_BUCKETS; i++) {
        uint64_t x = 0;
        for (int k = 0; k < 8; k++)
            x |= (uint64_t)p[i * 8 + k] << (8 * k);
        b[i] += x;
    }
}

/* A histogram as a blob, cut after its last non-empty bucket (readers take
 * missing buckets as empty): most hold a few decades of nanoseconds. */
static void hist_result(sqlite3_context *ctx, const uint64_t *b)
{
    int n = MKS_HIST_BUCKETS;
    while (n > 0 && !b[n - 1])
        n--;
    if (!n) {
        sqlite3_result_null(ctx);
        return;
    }
    uint8_t out[MKS_HIST_BUCKETS * 8];
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 8; k++)
            out[i * 8 + k] = (uint8_t)(b[i] >> (8 * k));
    sqlite3_result_blob(ctx, out, n * 8, SQLITE_TRANSIENT);
}

struct merge_acc {
    uint64_t b[MKS_HIST_BUCKETS];
};

/* mks_hist_merge(blob): the bucket-wise sum of histogram blobs. */
static void merge_step(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    struct merge_acc *a = sqlite3_aggregate_context(ctx, sizeof(*a));
    if (a)
        hist_add_blob(a->b, argv[0]);
}

/* mks_hist_of(value): the histogram of non-negative values. */
static void of_step(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    struct merge_acc *a = sqlite3_aggregate_context(ctx, sizeof(*a));
    if (a && sqlite3_value_type(argv[0]) != SQLITE_NULL)
        a->b[hist_bucket(sqlite3_value_double(argv[0]))]++;
}

static void merge_final(sqlite3_context *ctx)
{
    struct merge_acc *a = sqlite3_aggregate_context(ctx, 0);
    if (!a)
        sqlite3_result_null(ctx);
    else
        hist_result(ctx, a->b);
}

/* mks_quantile_h(value, hist, q): over rows that hold one value each and
 * rows that hold a histogram (a rolled-up minute), the exact nearest-rank
 * quantile while no histogram came, else the histogram estimate over all
 * of them (each value counted in its bucket). */
struct mixed_acc {
    struct exact_acc x;
    uint64_t b[MKS_HIST_BUCKETS];
    bool hist;
};

static void mixed_step(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    struct mixed_acc *a = sqlite3_aggregate_context(ctx, sizeof(*a));
    if (!a)
        return;
    a->x.q = sqlite3_value_double(argv[2]);
    if (sqlite3_value_type(argv[1]) == SQLITE_BLOB) {
        hist_add_blob(a->b, argv[1]);
        a->hist = true;
        return;
    }
    if (sqlite3_value_type(argv[0]) == SQLITE_NULL || a->x.oom)
        return;
    a->b[hist_bucket(sqlite3_value_double(argv[0]))]++;
    if (a->x.n == a->x.cap) {
        size_t cap = a->x.cap ? a->x.cap * 2 : 64;
        double *v = sqlite3_realloc64(a->x.v, cap * sizeof(*v));
        if (!v) {
            a->x.oom = true;
            return;
        }
        a->x.v = v, a->x.cap = cap;
    }
    a->x.v[a->x.n++] = sqlite3_value_double(argv[0]);
}

static void mixed_final(sqlite3_context *ctx)
{
    struct mixed_acc *a = sqlite3_aggregate_context(ctx, 0);
    if (!a || !a->hist) {
        exact_final(ctx); /* the same context: exact_acc leads mixed_acc */
        return;
    }
    sqlite3_free(a->x.v);
    double v = mks_hist_quantile_est(a->b, MKS_HIST_BUCKETS, a->x.q);
    if (isnan(v))
        sqlite3_result_null(ctx);
    else
        sqlite3_result_double(ctx, v);
}

int mks_query_register_sql(sqlite3 *db)
{
    const int f = SQLITE_UTF8 | SQLITE_DETERMINISTIC;
    if (sqlite3_create_function_v2(db, "mks_hist_quantile", 2, f, NULL, NULL, hist_step,
                                   hist_final, NULL) != SQLITE_OK ||
        sqlite3_create_function_v2(db, "mks_quantile", 2, f, NULL, NULL, exact_step, exact_final,
                                   NULL) != SQLITE_OK ||
        sqlite3_create_function_v2(db, "mks_quantile_h", 3, f, NULL, NULL, mixed_step,
                                   mixed_final, NULL) != SQLITE_OK ||
        sqlite3_create_function_v2(db, "mks_hist_merge", 1, f, NULL, NULL, merge_step,
                                   merge_final, NULL) != SQLITE_OK ||
        sqlite3_create_function_v2(db, "mks_hist_of", 1, f, NULL, NULL, of_step, merge_final,
                                   NULL) != SQLITE_OK)
        return -EIO;
    return 0;
}

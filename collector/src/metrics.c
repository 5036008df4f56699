/*
 * Prometheus text exposition (format 0.0.4) of what the collector knows per
 * rank.  From the store: summaries received, lost and replayed, the last
 * epoch, heartbeat age, coverage ratios per hook over the last epoch.  From
 * the in-memory registry (collector.h): histograms of step time, task run
 * time per class and remote wait per peer; counters of tasks per class,
 * coverage and loss per hook, remote waits dropped, trigger firings and
 * escalations.  Label values come from agents (job names, class names) and
 * are escaped.
 *
 * Histogram buckets are powers of two of nanoseconds, 2^10 ns (1.024 us) to
 * 2^30 ns (1.07 s), written in seconds: the agents' log2 histograms
 * (bucket b holds [2^(b-1), 2^b) ns) map onto them exactly, so run times
 * lose nothing that the summary had.  A bucket `le` counts values below its
 * bound (values are whole nanoseconds: within 1 ns of Prometheus' `<=`).
 */
#include <pthread.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collector.h"
#include "lost.h"
#include "mkscope/maps.h"
#include "mkscope/fresh.h"

struct out {
    char *buf;
    size_t len;
    FILE *f;
};

/* Escape a label value: backslash, double quote and newline. */
static void label(FILE *f, const char *s)
{
    fputc('"', f);
    for (; s && *s; s++) {
        if (*s == '\\' || *s == '"')
            fputc('\\', f), fputc(*s, f);
        else if (*s == '\n')
            fputs("\\n", f);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}

static void per_rank(FILE *f, sqlite3 *db, const char *name, const char *help, const char *type,
                     const char *sql, uint64_t now)
{
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) != SQLITE_OK)
        return;
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
    sqlite3_bind_int64(s, 1, (int64_t)now);
    while (sqlite3_step(s) == SQLITE_ROW) {
        fprintf(f, "%s{job=", name);
        label(f, (const char *)sqlite3_column_text(s, 0));
        fprintf(f, ",rank=\"%lld\"", (long long)sqlite3_column_int64(s, 1));
        int nc = sqlite3_column_count(s);
        /* Extra label columns sit between rank and the value. */
        for (int i = 2; i < nc - 1; i++) {
            const char *col = sqlite3_column_name(s, i);
            if (!strcmp(col, "hook")) {
                int h = sqlite3_column_int(s, i);
                fprintf(f, ",hook=");
                label(f, h >= 0 && mks_wire_hook_name((uint32_t)h) ? mks_wire_hook_name((uint32_t)h)
                                                                     : "unknown");
            } else {
                fprintf(f, ",%s=", col);
                label(f, (const char *)sqlite3_column_text(s, i));
            }
        }
        if (sqlite3_column_type(s, nc - 1) == SQLITE_FLOAT)
            fprintf(f, "} %.6g\n", sqlite3_column_double(s, nc - 1));
        else
            fprintf(f, "} %lld\n", (long long)sqlite3_column_int64(s, nc - 1));
    }
    sqlite3_finalize(s);
}

/* Each rank's state (lost.h), one series per state with 1 for the one it
 * is in: a rank whose application died or whose agent went silent shows
 * at the next scrape. */
static void rank_states(FILE *f, sqlite3 *db, uint64_t now)
{
    static const char *const states[] = {"running", "exited", "silent"};
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(db,
                           "SELECT job, rank, app_alive, last_seen_ns, heartbeat_ns, epoch_ns"
                           " FROM ranks ORDER BY job, rank",
                           -1, &s, NULL) != SQLITE_OK)
        return;
    fprintf(f, "# HELP mkscope_rank_state The rank's state: running, exited (its application"
               " ended) or silent (its agent unheard for two heartbeats)\n"
               "# TYPE mkscope_rank_state gauge\n");
    while (sqlite3_step(s) == SQLITE_ROW) {
        const char *st = mks_rank_state(
            sqlite3_column_type(s, 2) == SQLITE_NULL || sqlite3_column_int(s, 2),
            (uint64_t)sqlite3_column_int64(s, 3), (uint64_t)sqlite3_column_int64(s, 4),
            (uint64_t)sqlite3_column_int64(s, 5), now);
        for (int k = 0; k < 3; k++) {
            fprintf(f, "mkscope_rank_state{job=");
            label(f, (const char *)sqlite3_column_text(s, 0));
            fprintf(f, ",rank=\"%lld\",state=\"%s\"} %d\n", (long long)sqlite3_column_int64(s, 1),
                    states[k], !strcmp(st, states[k]));
        }
    }
    sqlite3_finalize(s);
}

/* ---- in-memory registry ------------------------------------------------------- */

#define HB_FIRST 10 /* le of bucket 0: 2^10 ns */
#define HB_N     21 /* 2^10 .. 2^30 ns, then +Inf */
/* Bounds on the series one collector keeps (the rest is counted in
 * mkscope_metrics_series_dropped_total rather than growing without end). */
#define MAX_RANKS   4096
#define MAX_CLASSES 256
#define MAX_PEERS   256
#define MAX_TRIGS   256
#define N_HOOKS     11

struct phist {
    uint64_t b[HB_N + 1]; /* per bucket, not cumulative; [HB_N] is +Inf */
    uint64_t count;
    double sum_ns;
};

struct mcls {
    uint32_t id;
    uint64_t tasks;
    struct phist run;
};

struct mpeer {
    uint32_t peer;
    struct phist wait;
};

struct mrank {
    char job[MKS_WIRE_MAX_JOB + 1];
    uint32_t rank;
    uint64_t incarnation, last_seq; /* replays up to last_seq are skipped */
    struct phist step;
    struct mcls *cls;
    size_t n_cls;
    struct mpeer *peers;
    size_t n_peers;
    uint64_t cov[N_HOOKS][5]; /* eligible (undelivered included), ran, throttled, lost,
                               * undelivered */
    uint64_t waits_dropped;
    /* Step times as the query language has them (query/src/plan.c): from
     * complete step rows, else from generation advances, a step lasting
     * from the previous step's last advance to its own; its last advance is
     * known once a later step's arrives. */
    bool complete_steps;
    uint64_t gen_step, gen_t, prev_step, prev_t;
    bool have_gen, have_prev;
};

struct mtrig {
    char job[MKS_WIRE_MAX_JOB + 1];
    int64_t id;
    uint64_t firings, escalations, escalated_ranks;
};

struct mks_metrics {
    pthread_mutex_t mu;
    struct mrank *ranks;
    size_t n_ranks;
    struct mtrig trigs[MAX_TRIGS];
    size_t n_trigs;
    uint64_t dropped; /* series not kept (bounds above) */
};

int mks_metrics_create(struct mks_metrics **m_p)
{
    struct mks_metrics *m = calloc(1, sizeof(*m));
    if (!m)
        return -ENOMEM;
    m->ranks = calloc(MAX_RANKS, sizeof(*m->ranks));
    if (!m->ranks) {
        free(m);
        return -ENOMEM;
    }
    pthread_mutex_init(&m->mu, NULL);
    *m_p = m;
    return 0;
}

void mks_metrics_destroy(struct mks_metrics *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n_ranks; i++) {
        free(m->ranks[i].cls);
        free(m->ranks[i].peers);
    }
    free(m->ranks);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

static void phist_add(struct phist *h, uint64_t v_ns)
{
    unsigned k = 0;
    while (k < HB_N && v_ns >= (1ull << (HB_FIRST + k)))
        k++;
    h->b[k]++;
    h->count++;
    h->sum_ns += (double)v_ns;
}

/* An agent's log2 histogram (bucket b: [2^(b-1), 2^b) ns). */
static void phist_add_log2(struct phist *h, const Mkscope__V1__Hist *src)
{
    if (!src)
        return;
    for (size_t b = 0; b < src->n_buckets; b++) {
        if (!src->buckets[b])
            continue;
        size_t k = b <= HB_FIRST ? 0 : b - HB_FIRST;
        h->b[k < HB_N ? k : HB_N] += src->buckets[b];
    }
    h->count += src->count;
    h->sum_ns += (double)src->sum;
}

static struct mrank *find_rank(struct mks_metrics *m, const char *job, uint32_t rank)
{
    for (size_t i = 0; i < m->n_ranks; i++)
        if (m->ranks[i].rank == rank && !strcmp(m->ranks[i].job, job))
            return &m->ranks[i];
    if (m->n_ranks == MAX_RANKS) {
        m->dropped++;
        return NULL;
    }
    struct mrank *r = &m->ranks[m->n_ranks++];
    snprintf(r->job, sizeof(r->job), "%s", job);
    r->rank = rank;
    return r;
}

static struct mcls *find_cls(struct mks_metrics *m, struct mrank *r, uint32_t id)
{
    for (size_t i = 0; i < r->n_cls; i++)
        if (r->cls[i].id == id)
            return &r->cls[i];
    if (r->n_cls == MAX_CLASSES) {
        m->dropped++;
        return NULL;
    }
    struct mcls *n = realloc(r->cls, (r->n_cls + 1) * sizeof(*n));
    if (!n)
        return NULL;
    r->cls = n;
    n[r->n_cls] = (struct mcls){.id = id};
    return &n[r->n_cls++];
}

static struct mpeer *find_peer(struct mks_metrics *m, struct mrank *r, uint32_t peer)
{
    for (size_t i = 0; i < r->n_peers; i++)
        if (r->peers[i].peer == peer)
            return &r->peers[i];
    if (r->n_peers == MAX_PEERS) {
        m->dropped++;
        return NULL;
    }
    struct mpeer *n = realloc(r->peers, (r->n_peers + 1) * sizeof(*n));
    if (!n)
        return NULL;
    r->peers = n;
    n[r->n_peers] = (struct mpeer){.peer = peer};
    return &n[r->n_peers++];
}

void mks_metrics_observe(struct mks_metrics *m, const mks_envelope *env)
{
    if (!m || !env || env->body_case != MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY)
        return;
    const Mkscope__V1__EpochSummary *s = env->epoch_summary;
    pthread_mutex_lock(&m->mu);
    struct mrank *r = find_rank(m, env->job, env->rank);
    if (!r)
        goto out;
    /* A replay (the agent resends what it had no ack for) was counted the
     * first time: sequence numbers grow within an incarnation. */
    if (env->incarnation == r->incarnation && env->seq <= r->last_seq && r->last_seq)
        goto out;
    r->incarnation = env->incarnation;
    r->last_seq = env->seq;
    for (size_t i = 0; i < s->n_steps; i++) {
        const Mkscope__V1__StepTime *st = s->steps[i];
        if (st->complete && st->t_begin_dev_ns && st->t_end_dev_ns >= st->t_begin_dev_ns) {
            phist_add(&r->step, st->t_end_dev_ns - st->t_begin_dev_ns);
            r->complete_steps = true;
        }
    }
    for (size_t i = 0; !r->complete_steps && i < s->n_gens; i++) {
        const Mkscope__V1__GenProgress *g = s->gens[i];
        if (!g->t_dev_ns)
            continue;
        if (r->have_gen && g->step == r->gen_step) {
            if (g->t_dev_ns > r->gen_t)
                r->gen_t = g->t_dev_ns;
        } else if (!r->have_gen || g->step > r->gen_step) {
            /* The step before is over: its duration from the one before it. */
            if (r->have_gen && r->have_prev && r->gen_step == r->prev_step + 1 &&
                r->gen_t >= r->prev_t)
                phist_add(&r->step, r->gen_t - r->prev_t);
            r->prev_step = r->gen_step, r->prev_t = r->gen_t, r->have_prev = r->have_gen;
            r->gen_step = g->step, r->gen_t = g->t_dev_ns, r->have_gen = true;
        }
    }
    for (size_t i = 0; i < s->n_task_stats; i++) {
        const Mkscope__V1__TaskStat *t = s->task_stats[i];
        struct mcls *c = find_cls(m, r, t->task_class);
        if (!c)
            continue;
        c->tasks += t->count;
        phist_add_log2(&c->run, t->run);
    }
    for (size_t i = 0; i < s->n_remote_waits; i++) {
        const Mkscope__V1__RemoteWait *w = s->remote_waits[i];
        if (!w->t_begin_dev_ns || w->t_end_dev_ns < w->t_begin_dev_ns)
            continue;
        struct mpeer *p = find_peer(m, r, w->peer_rank);
        if (p)
            phist_add(&p->wait, w->t_end_dev_ns - w->t_begin_dev_ns);
    }
    for (size_t i = 0; i < s->n_coverage; i++) {
        const Mkscope__V1__Coverage *c = s->coverage[i];
        if (c->hook >= N_HOOKS)
            continue;
        r->cov[c->hook][0] += c->eligible + c->undelivered;
        r->cov[c->hook][1] += c->ran;
        r->cov[c->hook][2] += c->throttled;
        r->cov[c->hook][3] += c->lost;
        r->cov[c->hook][4] += c->undelivered;
    }
    r->waits_dropped += s->waits_dropped;
out:
    pthread_mutex_unlock(&m->mu);
}

void mks_metrics_trigger(struct mks_metrics *m, const char *job, int64_t trigger,
                         uint64_t ranks_fired, uint64_t escalated_ranks)
{
    if (!m)
        return;
    pthread_mutex_lock(&m->mu);
    struct mtrig *t = NULL;
    for (size_t i = 0; i < m->n_trigs && !t; i++)
        if (m->trigs[i].id == trigger && !strcmp(m->trigs[i].job, job))
            t = &m->trigs[i];
    if (!t && m->n_trigs < MAX_TRIGS) {
        t = &m->trigs[m->n_trigs++];
        snprintf(t->job, sizeof(t->job), "%s", job);
        t->id = trigger;
    }
    if (t) {
        t->firings += ranks_fired;
        if (escalated_ranks) {
            t->escalations++;
            t->escalated_ranks += escalated_ranks;
        }
    } else {
        m->dropped++;
    }
    pthread_mutex_unlock(&m->mu);
}

/* Class names of the store's schemas, for the class label. */
static void class_name(sqlite3_stmt *s, const char *job, uint32_t rank, uint32_t id, char *buf,
                       size_t len)
{
    snprintf(buf, len, "class%u", id);
    if (!s)
        return;
    sqlite3_reset(s);
    sqlite3_bind_text(s, 1, job, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(s, 2, id);
    sqlite3_bind_int64(s, 3, rank);
    if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_text(s, 0))
        snprintf(buf, len, "%s", (const char *)sqlite3_column_text(s, 0));
}

static void hist_head(FILE *f, const char *name, const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
}

/* One histogram series; `labels` is the label list without braces. */
static void hist_series(FILE *f, const char *name, const char *labels, const struct phist *h)
{
    uint64_t cum = 0;
    for (unsigned k = 0; k < HB_N; k++) {
        cum += h->b[k];
        fprintf(f, "%s_bucket{%s,le=\"%.9g\"} %llu\n", name, labels,
                (double)(1ull << (HB_FIRST + k)) / 1e9, (unsigned long long)cum);
    }
    cum += h->b[HB_N];
    fprintf(f, "%s_bucket{%s,le=\"+Inf\"} %llu\n", name, labels, (unsigned long long)cum);
    fprintf(f, "%s_sum{%s} %.9g\n", name, labels, h->sum_ns / 1e9);
    fprintf(f, "%s_count{%s} %llu\n", name, labels, (unsigned long long)h->count);
}

/* job="J",rank="R" (escaped) into buf. */
static void rank_labels(char *buf, size_t len, const char *job, uint32_t rank)
{
    FILE *f = fmemopen(buf, len, "w");
    if (!f) {
        snprintf(buf, len, "rank=\"%u\"", rank);
        return;
    }
    fputs("job=", f);
    label(f, job);
    fprintf(f, ",rank=\"%u\"", rank);
    fclose(f);
}

/* A counter per (job, trigger): the uint64_t at offset `field` of each. */
static void trig_counter(FILE *f, const struct mks_metrics *m, const char *name, const char *help,
                         size_t field)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s counter\n", name, help, name);
    for (size_t i = 0; i < m->n_trigs; i++) {
        uint64_t v;
        memcpy(&v, (const char *)&m->trigs[i] + field, sizeof(v));
        fprintf(f, "%s{job=", name);
        label(f, m->trigs[i].job);
        fprintf(f, ",trigger=\"%lld\"} %llu\n", (long long)m->trigs[i].id, (unsigned long long)v);
    }
}

static void registry_render(FILE *f, struct mks_metrics *m, sqlite3 *db)
{
    sqlite3_stmt *cn = NULL;
    if (db && sqlite3_prepare_v2(db,
                                 "SELECT name FROM task_classes WHERE job = ?1 AND id = ?2"
                                 " ORDER BY rank = ?3 DESC LIMIT 1",
                                 -1, &cn, NULL) != SQLITE_OK)
        cn = NULL;
    pthread_mutex_lock(&m->mu);
    char lb[512], lb2[800], name[160];
    hist_head(f, "mkscope_step_duration_seconds",
              "Decode step time per rank (complete steps of the summaries)");
    for (size_t i = 0; i < m->n_ranks; i++) {
        const struct mrank *r = &m->ranks[i];
        if (!r->step.count)
            continue;
        rank_labels(lb, sizeof(lb), r->job, r->rank);
        hist_series(f, "mkscope_step_duration_seconds", lb, &r->step);
    }
    hist_head(f, "mkscope_task_run_seconds", "Task run time (start to end) per rank and task class");
    for (size_t i = 0; i < m->n_ranks; i++) {
        const struct mrank *r = &m->ranks[i];
        rank_labels(lb, sizeof(lb), r->job, r->rank);
        for (size_t k = 0; k < r->n_cls; k++) {
            if (!r->cls[k].run.count)
                continue;
            class_name(cn, r->job, r->rank, r->cls[k].id, name, sizeof(name));
            FILE *g = fmemopen(lb2, sizeof(lb2), "w");
            if (!g)
                continue;
            fprintf(g, "%s,class=", lb);
            label(g, name);
            fclose(g);
            hist_series(f, "mkscope_task_run_seconds", lb2, &r->cls[k].run);
        }
    }
    hist_head(f, "mkscope_remote_wait_seconds",
              "Remote dependency wait per waiting rank and the peer it waited on");
    for (size_t i = 0; i < m->n_ranks; i++) {
        const struct mrank *r = &m->ranks[i];
        rank_labels(lb, sizeof(lb), r->job, r->rank);
        for (size_t k = 0; k < r->n_peers; k++) {
            snprintf(lb2, sizeof(lb2), "%s,peer=\"%u\"", lb, r->peers[k].peer);
            hist_series(f, "mkscope_remote_wait_seconds", lb2, &r->peers[k].wait);
        }
    }
    fprintf(f, "# HELP mkscope_tasks_total Tasks that ended, by task class\n"
               "# TYPE mkscope_tasks_total counter\n");
    for (size_t i = 0; i < m->n_ranks; i++) {
        const struct mrank *r = &m->ranks[i];
        rank_labels(lb, sizeof(lb), r->job, r->rank);
        for (size_t k = 0; k < r->n_cls; k++) {
            class_name(cn, r->job, r->rank, r->cls[k].id, name, sizeof(name));
            fprintf(f, "mkscope_tasks_total{%s,class=", lb);
            label(f, name);
            fprintf(f, "} %llu\n", (unsigned long long)r->cls[k].tasks);
        }
    }
    static const char *const cov_name[5] = {"eligible", "ran", "throttled", "lost",
                                            "undelivered"};
    static const char *const cov_help[5] = {
        "Events that reached an attached program's hook (those of summaries the agent dropped"
        " included)",
        "Events the programs ran on",
        "Events skipped by sampling or the instruction budget",
        "Events lost (ring full, guard aborts)",
        "Eligible events of summaries the agent dropped (never delivered)"};
    for (int q = 0; q < 5; q++) {
        fprintf(f, "# HELP mkscope_events_%s_total %s, per rank and hook\n"
                   "# TYPE mkscope_events_%s_total counter\n",
                cov_name[q], cov_help[q], cov_name[q]);
        for (size_t i = 0; i < m->n_ranks; i++) {
            const struct mrank *r = &m->ranks[i];
            rank_labels(lb, sizeof(lb), r->job, r->rank);
            for (int h = 0; h < N_HOOKS; h++)
                if (r->cov[h][0] || r->cov[h][q])
                    fprintf(f, "mkscope_events_%s_total{%s,hook=\"%s\"} %llu\n", cov_name[q], lb,
                            mks_wire_hook_name((uint32_t)h), (unsigned long long)r->cov[h][q]);
        }
    }
    fprintf(f, "# HELP mkscope_remote_waits_dropped_total Remote waits and releases past the"
               " summary's record bound\n# TYPE mkscope_remote_waits_dropped_total counter\n");
    for (size_t i = 0; i < m->n_ranks; i++) {
        const struct mrank *r = &m->ranks[i];
        rank_labels(lb, sizeof(lb), r->job, r->rank);
        fprintf(f, "mkscope_remote_waits_dropped_total{%s} %llu\n", lb,
                (unsigned long long)r->waits_dropped);
    }
    trig_counter(f, m, "mkscope_trigger_firings_total",
                 "Ranks on which a trigger crossed its threshold, summed over evaluations",
                 offsetof(struct mtrig, firings));
    trig_counter(f, m, "mkscope_escalations_total", "Escalations (raw traces) a trigger started",
                 offsetof(struct mtrig, escalations));
    trig_counter(f, m, "mkscope_escalation_ranks_total",
                 "Ranks asked for raw events by escalations", offsetof(struct mtrig, escalated_ranks));
    fprintf(f, "# HELP mkscope_metrics_series_dropped_total Series not kept: past the bounds on"
               " ranks, classes, peers or triggers\n"
               "# TYPE mkscope_metrics_series_dropped_total counter\n"
               "mkscope_metrics_series_dropped_total %llu\n",
            (unsigned long long)m->dropped);
    pthread_mutex_unlock(&m->mu);
    sqlite3_finalize(cn);
}

const char *mks_refusal_name(enum mks_refusal r)
{
    static const char *const names[MKS_REFUSED_COUNT] = {
        "unauthenticated", "invalid", "replayed", "stale", "unregistered", "old_incarnation",
        "out_of_order"};
    return (unsigned)r < MKS_REFUSED_COUNT ? names[r] : "?";
}

enum mks_refusal mks_refusal_of_store(int rc)
{
    switch (rc) {
    case -ENOENT: return MKS_REFUSED_UNREGISTERED;
    case -ESTALE: return MKS_REFUSED_OLD_INCARNATION;
    case -EALREADY: return MKS_REFUSED_OUT_OF_ORDER;
    default: return MKS_REFUSED_COUNT;
    }
}

void mks_refused(struct mks_ingest_stats *stats, struct mks_ratelog *logs, enum mks_refusal why,
                 const char *what)
{
    if ((unsigned)why >= MKS_REFUSED_COUNT)
        return;
    if (stats)
        stats->refused[why]++;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t mono = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec, more = 0;
    if (mks_ratelog_due(&logs[why], mono, 10000000000ull, &more))
        fprintf(stderr, "mkscope-collector: refused (%s): %s%s\n", mks_refusal_name(why), what,
                more ? " (and more like it in the last 10 s: see mkscope_refused_total)" : "");
}

char *mks_metrics_render(const struct mks_serve_env *env)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return NULL;
    sqlite3 *db = mks_store_db(env->st);
    per_rank(f, db, "mkscope_summaries_received_total", "Epoch summaries stored", "counter",
             "SELECT job, rank, summaries FROM ranks WHERE ?1 IS NOT NULL ORDER BY job, rank",
             env->now_ns);
    per_rank(f, db, "mkscope_summaries_lost_total",
             "Summaries the agent dropped (buffer overflow)", "counter",
             "SELECT job, rank, lost_summaries FROM ranks WHERE ?1 IS NOT NULL ORDER BY job, rank",
             env->now_ns);
    per_rank(f, db, "mkscope_summaries_duplicate_total", "Replayed summaries already stored",
             "counter",
             "SELECT job, rank, duplicates FROM ranks WHERE ?1 IS NOT NULL ORDER BY job, rank",
             env->now_ns);
    per_rank(f, db, "mkscope_last_epoch", "Last epoch number received", "gauge",
             "SELECT job, rank, COALESCE(last_epoch, 0) FROM ranks WHERE ?1 IS NOT NULL"
             " ORDER BY job, rank",
             env->now_ns);
    per_rank(f, db, "mkscope_last_seen_seconds", "Seconds since the agent was last heard from",
             "gauge",
             "SELECT job, rank, (?1 - last_seen_ns) / 1e9 FROM ranks ORDER BY job, rank",
             env->now_ns);
    per_rank(f, db, "mkscope_coverage_ratio",
             "Events the programs ran on / eligible events, last epoch, per hook", "gauge",
             "SELECT e.job, e.rank, c.hook, CAST(c.ran AS REAL) / c.eligible FROM coverage c"
             " JOIN epochs e ON e.id = c.epoch_id WHERE ?1 IS NOT NULL AND c.eligible > 0 AND"
             " e.id = (SELECT MAX(id) FROM epochs x WHERE x.job = e.job AND x.rank = e.rank)"
             " ORDER BY e.job, e.rank, c.hook",
             env->now_ns);
    rank_states(f, db, env->now_ns);
    if (env->stats && env->stats->registry)
        registry_render(f, env->stats->registry, db);
    if (env->stats) {
        fprintf(f, "# HELP mkscope_ingest_pressure Ingest load the acks carry: 0 keeping up,"
                   " 1 busy, 2 behind\n"
                   "# TYPE mkscope_ingest_pressure gauge\n"
                   "mkscope_ingest_pressure %u\n"
                   "# HELP mkscope_ingest_batches_total Ingest transactions (batches of messages)\n"
                   "# TYPE mkscope_ingest_batches_total counter\n"
                   "mkscope_ingest_batches_total %llu\n"
                   "# HELP mkscope_summaries_pressured_total Summaries whose detail the collector's"
                   " pressure capped\n"
                   "# TYPE mkscope_summaries_pressured_total counter\n"
                   "mkscope_summaries_pressured_total %llu\n",
                (unsigned)env->stats->pressure, (unsigned long long)env->stats->batches,
                (unsigned long long)env->stats->summaries_pressured);
        fprintf(f, "# HELP mkscope_refused_total Messages refused or ignored, by reason\n"
                   "# TYPE mkscope_refused_total counter\n");
        for (int r = 0; r < MKS_REFUSED_COUNT; r++)
            fprintf(f, "mkscope_refused_total{reason=\"%s\"} %llu\n",
                    mks_refusal_name((enum mks_refusal)r),
                    (unsigned long long)env->stats->refused[r]);
        fprintf(f, "# HELP mkscope_ingest_messages_total Messages received from agents\n"
                   "# TYPE mkscope_ingest_messages_total counter\n"
                   "mkscope_ingest_messages_total %llu\n"
                   "# HELP mkscope_ingest_errors_total Messages rejected (decode or store)\n"
                   "# TYPE mkscope_ingest_errors_total counter\n"
                   "mkscope_ingest_errors_total{kind=\"decode\"} %llu\n"
                   "mkscope_ingest_errors_total{kind=\"store\"} %llu\n"
                   "# HELP mkscope_cli_requests_total CLI requests served\n"
                   "# TYPE mkscope_cli_requests_total counter\n"
                   "mkscope_cli_requests_total %llu\n"
                   "# HELP mkscope_cli_busy_total CLI requests answered busy (no worker free)\n"
                   "# TYPE mkscope_cli_busy_total counter\n"
                   "mkscope_cli_busy_total %llu\n"
                   "# HELP mkscope_ucx_raw_batches_total Raw event batches received over UCX\n"
                   "# TYPE mkscope_ucx_raw_batches_total counter\n"
                   "mkscope_ucx_raw_batches_total %llu\n",
                (unsigned long long)env->stats->messages,
                (unsigned long long)env->stats->decode_errors,
                (unsigned long long)env->stats->store_errors,
                (unsigned long long)env->stats->cli_requests,
                (unsigned long long)env->stats->cli_busy,
                (unsigned long long)env->stats->ucx_batches);
    }
    if (fclose(f)) {
        free(buf);
        return NULL;
    }
    return buf;
}

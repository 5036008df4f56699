/*
 * SLO triggers: "p99(step) > 2ms", "mean(queue) > 50us where class = attn",
 * "remote_wait(rank = 3) > 20us" (shorthand for max(remote_wait) where
 * rank = 3).  A trigger is rewritten into a query grouped by rank over the
 * epochs received since its last evaluation; every rank whose value crosses
 * the threshold fires it.  Firing records the value and escalates: one
 * escalation (one id, one trace) for the ranks that crossed and for the
 * ranks their remote waits lead to, transitively, so the trace shows both
 * ends of each wait on the chain.  A rank that crossed gets the trigger's
 * predicate compiled to an eBPF filter; a rank on its chain records its
 * waits, releases and transfers (the hooks that explain a wait).  A
 * trigger with a probe (trigger add --probe) starts that probe on the same
 * ranks instead, for its window: the question is asked only while the SLO
 * is at risk, and again only after the hold-off.  See serve_cmd.c for how
 * commands reach agents.
 */
#include <ctype.h>
#include <stdbool.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "mkscope/hook_abi.h"
#include "mkscope/query.h"
#include "serve.h"
#include "trigger.h"

/* Escalation window and budget asked of agents when a trigger fires. */
#define ESCALATE_MS     200u
#define ESCALATE_BYTES  (4u << 20)

struct trig {
    char query[1024];   /* the rewritten query */
    char pred[512];     /* the predicate alone ("" if none) */
    int op;             /* 0 >, 1 >=, 2 <, 3 <=, 4 =, 5 != */
    double threshold;
};

static int parse_value(const char *s, double *v)
{
    char *end;
    while (isspace((unsigned char)*s))
        s++;
    double x = strtod(s, &end);
    if (end == s)
        return -EINVAL;
    static const struct {
        const char *u;
        double m;
    } units[] = {{"ns", 1}, {"us", 1e3}, {"ms", 1e6}, {"s", 1e9}, {"", 1}};
    const char *u = end;
    while (isspace((unsigned char)*u))
        u++;
    size_t ul = 0;
    while (isalpha((unsigned char)u[ul]))
        ul++;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strlen(units[i].u) == ul && !strncmp(u, units[i].u, ul)) {
            const char *rest = u + ul;
            while (isspace((unsigned char)*rest))
                rest++;
            if (*rest)
                return -EINVAL;
            /* Every metric is a count or a duration: a negative, NaN or
             * infinite threshold is a mistake (one fires on every epoch,
             * the others never). */
            *v = x * units[i].m;
            if (!isfinite(*v) || *v < 0)
                return -ERANGE;
            return 0;
        }
    }
    return -EINVAL;
}

static int trig_parse(const char *expr, struct trig *t, char *err, size_t errlen)
{
    memset(t, 0, sizeof(*t));
    /* The comparison is the first operator outside parentheses. */
    int depth = 0;
    const char *op = NULL;
    for (const char *p = expr; *p; p++) {
        if (*p == '(')
            depth++;
        else if (*p == ')')
            depth--;
        else if (depth == 0 && strchr("<>=!", *p)) {
            op = p;
            break;
        }
    }
    if (!op)
        return mks_serve_fail(err, errlen, -EINVAL,
                              "trigger '%s': expected SLO OP VALUE, e.g. 'p99(step) > 2ms'", expr);
    size_t oplen = (op[1] == '=') ? 2 : 1;
    if (op[0] == '>')
        t->op = oplen == 2 ? 1 : 0;
    else if (op[0] == '<')
        t->op = oplen == 2 ? 3 : 2;
    else if (op[0] == '=')
        t->op = 4;
    else if (op[0] == '!' && oplen == 2)
        t->op = 5;
    else
        return mks_serve_fail(err, errlen, -EINVAL, "trigger: bad operator at '%s'", op);
    char lhs[512], rhs[512];
    size_t ll = (size_t)(op - expr);
    if (ll >= sizeof(lhs) || strlen(op + oplen) >= sizeof(rhs))
        return mks_serve_fail(err, errlen, -EINVAL, "trigger too long");
    memcpy(lhs, expr, ll);
    lhs[ll] = 0;
    snprintf(rhs, sizeof(rhs), "%s", op + oplen);
    /* rhs: VALUE [where PRED] */
    char *w = strstr(rhs, " where ");
    if (w) {
        snprintf(t->pred, sizeof(t->pred), "%s", w + 7);
        *w = 0;
    }
    if (parse_value(rhs, &t->threshold))
        return mks_serve_fail(err, errlen, -EINVAL,
                              "trigger: '%s' is not a value (a finite number >= 0, with ns, us, ms or s)", rhs);
    /* lhs: AGG(METRIC) or METRIC(PRED) */
    char *lp = strchr(lhs, '('), *rp = strrchr(lhs, ')');
    if (!lp || !rp || rp < lp)
        return mks_serve_fail(err, errlen, -EINVAL, "trigger: '%s' is not AGG(METRIC)", lhs);
    char head[64], inner[512];
    size_t hl = (size_t)(lp - lhs), il = (size_t)(rp - lp - 1);
    if (hl >= sizeof(head) || il >= sizeof(inner))
        return mks_serve_fail(err, errlen, -EINVAL, "trigger: '%s' too long", lhs);
    memcpy(head, lhs, hl);
    head[hl] = 0;
    memcpy(inner, lp + 1, il);
    inner[il] = 0;
    char *h = head;
    while (isspace((unsigned char)*h))
        h++;
    for (char *e = h + strlen(h); e > h && isspace((unsigned char)e[-1]); *--e = 0)
        ;
    static const char *const aggs[] = {"count", "sum", "mean", "avg", "min", "max", "p50", "p90",
                                       "p99"};
    bool is_agg = false;
    for (size_t i = 0; i < sizeof(aggs) / sizeof(aggs[0]); i++)
        if (!strcmp(h, aggs[i]))
            is_agg = true;
    if (is_agg) {
        snprintf(t->query, sizeof(t->query), "%s(%s) by rank", h, inner);
    } else {
        if (*t->pred)
            return mks_serve_fail(err, errlen, -EINVAL,
                                  "trigger: give the filter once, inside %s(...)", h);
        snprintf(t->pred, sizeof(t->pred), "%s", inner);
        snprintf(t->query, sizeof(t->query), "max(%s) by rank", h);
    }
    /* Check the query and the predicate now, with the language's errors. */
    char qtext[2048];
    snprintf(qtext, sizeof(qtext), "%s%s%s", t->query, *t->pred ? " where " : "", t->pred);
    struct mks_query *q = NULL;
    struct mks_query_error qe;
    if (mks_query_parse(qtext, &q, &qe)) {
        mks_query_error_format(qtext, &qe, err, errlen);
        return -EINVAL;
    }
    struct mks_sql_plan *plan = NULL;
    int rc = mks_query_plan(q, "job", 0, &plan, &qe);
    mks_query_free(q);
    mks_sql_plan_free(plan);
    if (rc) {
        mks_query_error_format(qtext, &qe, err, errlen);
        return -EINVAL;
    }
    return 0;
}

int mks_trigger_hold_off(const char *text, uint64_t *ns_p)
{
    return mks_args_duration(text, ns_p); /* as the CLI checks it (args.c) */
}

int mks_trigger_check(const char *expr, char *err, size_t errlen)
{
    struct trig t;
    return trig_parse(expr, &t, err, errlen);
}

static bool crosses(double v, int op, double th)
{
    switch (op) {
    case 0: return v > th;
    case 1: return v >= th;
    case 2: return v < th;
    case 3: return v <= th;
    case 4: return v == th;
    default: return v != th;
    }
}

struct resolve_ctx {
    sqlite3 *db;
    const char *job;
};

static int64_t resolve_class(const char *name, void *arg)
{
    struct resolve_ctx *r = arg;
    sqlite3_stmt *s;
    int64_t id = -1;
    if (sqlite3_prepare_v2(r->db, "SELECT id FROM task_classes WHERE job=? AND name=? LIMIT 1", -1,
                           &s, NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_text(s, 1, r->job, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 2, name, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(s) == SQLITE_ROW)
        id = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    return id;
}

/* Queue an Escalate command for one rank of escalation `esc_id`, with the
 * predicate compiled to a device filter ("" records every event of the
 * window). */
static void escalate(const struct mks_serve_env *env, const char *job, int64_t rank,
                     int64_t trigger_id, uint64_t esc_id, const char *ptext, bool chain_only)
{
    sqlite3 *db = mks_store_db(env->st);
    struct mks_insn *insns = NULL;
    uint32_t n = 0;
    struct mks_pred *p = NULL;
    struct mks_query_error qe;
    struct resolve_ctx rc = {db, job};
    if (*ptext && mks_pred_parse(ptext, &p, &qe) == 0 &&
        mks_pred_compile_bpf(p, resolve_class, &rc, &insns, &n, &qe) != 0) {
        /* Fields the device does not have (time, epoch): no device filter,
         * the agent records every event of the window. */
        insns = NULL, n = 0;
    }
    mks_pred_free(p);
    uint64_t *words = calloc(n ? n : 1, sizeof(uint64_t));
    for (uint32_t i = 0; i < n && words; i++)
        memcpy(&words[i], &insns[i], sizeof(uint64_t));
    free(insns);
    Mkscope__V1__Escalate esc = MKSCOPE__V1__ESCALATE__INIT;
    Mkscope__V1__Command cmd = MKSCOPE__V1__COMMAND__INIT;
    esc.escalation_id = esc_id;
    esc.predicate = (char *)ptext;
    esc.filter_insns = words;
    esc.n_filter_insns = words ? n : 0;
    esc.duration_ms = ESCALATE_MS;
    esc.budget_bytes = ESCALATE_BYTES;
    esc.ucx_endpoint = (char *)(env->ucx_endpoint ? env->ucx_endpoint : "");
    /* A rank on the chain records its side of the waits only: its own
     * waits, its releases and its transfers (the arrows' ends), not every
     * task, which would multiply the raw volume by the ranks. */
    uint32_t chain_hooks[] = {MKS_EV_DEP_WAIT_BEGIN, MKS_EV_DEP_WAIT_END, MKS_EV_DEP_RELEASE,
                              MKS_EV_COMM_BEGIN, MKS_EV_COMM_END};
    if (chain_only) {
        esc.hooks = chain_hooks;
        esc.n_hooks = sizeof(chain_hooks) / sizeof(chain_hooks[0]);
    }
    cmd.kind_case = MKSCOPE__V1__COMMAND__KIND_ESCALATE;
    cmd.escalate = &esc;
    size_t len = mkscope__v1__command__get_packed_size(&cmd);
    uint8_t *buf = malloc(len ? len : 1);
    if (buf) {
        mkscope__v1__command__pack(&cmd, buf);
        sqlite3_stmt *s;
        if (sqlite3_prepare_v2(db,
                               "INSERT INTO commands(job, rank, kind, name, hook, created_ns,"
                               " payload, escalation_id) VALUES(?, ?, 'escalate', ?, -1, ?, ?, ?)",
                               -1, &s, NULL) == SQLITE_OK) {
            char name[32];
            snprintf(name, sizeof(name), "trigger-%lld", (long long)trigger_id);
            sqlite3_bind_text(s, 1, job, -1, SQLITE_TRANSIENT);
            sqlite3_bind_int64(s, 2, rank);
            sqlite3_bind_text(s, 3, name, -1, SQLITE_TRANSIENT);
            sqlite3_bind_int64(s, 4, (int64_t)env->now_ns);
            sqlite3_bind_blob(s, 5, buf, (int)len, SQLITE_TRANSIENT);
            sqlite3_bind_int64(s, 6, (int64_t)esc_id);
            sqlite3_step(s);
            sqlite3_finalize(s);
        }
    }
    free(buf);
    free(words);
}

/* Ranks one escalation may cover: the collector's per-rank arrays. */
#define ESC_MAX_RANKS 4096

/* Start trigger id's probe on the ranks in[] for for_ns, as `mkscope probe
 * TEXT --for D --ranks R` would (serve_probe.c: compiled, verified, queued
 * per rank); its id into probe_id, or the reason it did not start into
 * why.  0 or -1. */
static int start_probe(const struct mks_serve_env *env, const char *job, const char *text,
                       uint64_t for_ns, const bool *in, char *probe_id, size_t id_len, char *why,
                       size_t why_len)
{
    char ranks[ESC_MAX_RANKS * 6 + 16];
    char job_arg[MKS_WIRE_MAX_JOB + 8], for_arg[40];
    size_t off = (size_t)snprintf(ranks, sizeof(ranks), "--ranks=");
    for (int r = 0; r < ESC_MAX_RANKS && off < sizeof(ranks) - 8; r++)
        if (in[r])
            off += (size_t)snprintf(ranks + off, sizeof(ranks) - off, "%s%d",
                                    ranks[off - 1] == '=' ? "" : ",", r);
    snprintf(job_arg, sizeof(job_arg), "--job=%s", job);
    /* whole seconds: trigger add took a duration in s, m or h */
    snprintf(for_arg, sizeof(for_arg), "--for=%llus",
             (unsigned long long)(for_ns / 1000000000ull ? for_ns / 1000000000ull : 1));
    char *args[] = {(char *)text, job_arg, for_arg, ranks};
    Mkscope__V1__CliRequest req = MKSCOPE__V1__CLI_REQUEST__INIT;
    req.verb = (char *)"probe";
    req.args = args;
    req.n_args = sizeof(args) / sizeof(args[0]);
    json_t *out = NULL;
    int rc = mks_serve_probe(env, &req, &out, why, why_len);
    if (rc == 0)
        snprintf(probe_id, id_len, "%s", json_string_value(json_object_get(out, "probe"))
                                             ? json_string_value(json_object_get(out, "probe"))
                                             : "");
    json_decref(out);
    return rc == 0 && *probe_id ? 0 : -1;
}

/* Add to in[] every rank the marked ones waited on (remote waits of the
 * epochs from since_epoch_id on), and the ranks those waited on, so that
 * the raw trace holds both ends of every wait on the chain: a stall seen
 * on one rank is often caused on another. */
static void chain_peers(sqlite3 *db, const char *job, int64_t since_epoch_id, bool *in)
{
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(db,
                           "SELECT DISTINCT e.rank, w.peer_rank FROM waits w JOIN epochs e ON"
                           " e.id = w.epoch_id WHERE e.job = ?1 AND e.id >= ?2 AND"
                           " w.peer_rank != e.rank AND w.peer_rank IN (SELECT rank FROM ranks"
                           " WHERE job = ?1)",
                           -1, &s, NULL) != SQLITE_OK)
        return;
    sqlite3_bind_text(s, 1, job, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(s, 2, since_epoch_id);
    struct edge {
        uint16_t from, to;
    } *edges = NULL;
    size_t n = 0, cap = 0;
    while (sqlite3_step(s) == SQLITE_ROW) {
        int64_t a = sqlite3_column_int64(s, 0), b = sqlite3_column_int64(s, 1);
        if (a < 0 || a >= ESC_MAX_RANKS || b < 0 || b >= ESC_MAX_RANKS)
            continue;
        if (n == cap) {
            struct edge *ne = realloc(edges, (cap = cap ? 2 * cap : 64) * sizeof(*edges));
            if (!ne)
                break;
            edges = ne;
        }
        edges[n++] = (struct edge){(uint16_t)a, (uint16_t)b};
    }
    sqlite3_finalize(s);
    /* Closure: at most one pass per rank added. */
    for (bool grew = true; grew;) {
        grew = false;
        for (size_t i = 0; i < n; i++)
            if (in[edges[i].from] && !in[edges[i].to])
                in[edges[i].to] = grew = true;
    }
    free(edges);
}

int mks_trigger_eval(const struct mks_serve_env *env, const char *job, int64_t since_epoch_id,
                     uint64_t hold_off_ns, json_t *fired)
{
    sqlite3 *db = mks_store_db(env->st);
    mks_query_register_sql(db);
    sqlite3_stmt *ts;
    if (sqlite3_prepare_v2(db,
                           "SELECT id, expr, hold_off_ns, last_escalated_ns, probe, probe_for_ns"
                           " FROM triggers WHERE enabled ORDER BY id",
                           -1, &ts, NULL) != SQLITE_OK)
        return -EIO;
    int n_fired = 0;
    while (sqlite3_step(ts) == SQLITE_ROW) {
        int64_t id = sqlite3_column_int64(ts, 0);
        const char *expr = (const char *)sqlite3_column_text(ts, 1);
        uint64_t hold = sqlite3_column_type(ts, 2) == SQLITE_NULL
                            ? hold_off_ns
                            : (uint64_t)sqlite3_column_int64(ts, 2);
        uint64_t last_esc = (uint64_t)sqlite3_column_int64(ts, 3);
        const char *probe = (const char *)sqlite3_column_text(ts, 4);
        uint64_t probe_for = (uint64_t)sqlite3_column_int64(ts, 5);
        /* One raw trace per incident: once a trigger escalated, it only
         * counts its firings until the hold-off has passed. */
        bool may_escalate = !last_esc || env->now_ns - last_esc >= hold;
        struct trig t;
        char err[512];
        if (!expr || trig_parse(expr, &t, err, sizeof(err)))
            continue;
        char qtext[2048];
        snprintf(qtext, sizeof(qtext), "%s%s%s", t.query, *t.pred ? " where " : "", t.pred);
        struct mks_query *q = NULL;
        struct mks_sql_plan *plan = NULL;
        struct mks_query_error qe;
        if (mks_query_parse(qtext, &q, &qe) ||
            mks_query_plan_from(q, job, env->now_ns, since_epoch_id, &plan, &qe)) {
            mks_query_free(q);
            continue;
        }
        mks_query_free(q);
        /* Every rank that crossed, then one escalation for all of them and
         * the ranks their waits lead to. */
        struct crossing {
            int64_t rank;
            double v;
            bool fresh;
        } *cr = NULL;
        size_t n_cr = 0, cap_cr = 0;
        sqlite3_stmt *s;
        if (sqlite3_prepare_v2(db, plan->sql, -1, &s, NULL) == SQLITE_OK) {
            mks_sql_plan_bind(plan, s);
            while (sqlite3_step(s) == SQLITE_ROW) {
                if (sqlite3_column_type(s, 1) == SQLITE_NULL)
                    continue;
                int64_t rank = sqlite3_column_int64(s, 0);
                double v = sqlite3_column_double(s, 1);
                if (!crosses(v, t.op, t.threshold) || rank < 0 || rank >= ESC_MAX_RANKS)
                    continue;
                if (n_cr == cap_cr) {
                    struct crossing *nc = realloc(cr, (cap_cr = cap_cr ? 2 * cap_cr : 16) *
                                                          sizeof(*cr));
                    if (!nc)
                        break;
                    cr = nc;
                }
                cr[n_cr++] = (struct crossing){rank, v, false};
            }
            sqlite3_finalize(s);
        }
        bool *in = n_cr ? calloc(ESC_MAX_RANKS, sizeof(bool)) : NULL;
        bool *filtered = n_cr ? calloc(ESC_MAX_RANKS, sizeof(bool)) : NULL;
        bool any_fresh = false;
        for (size_t i = 0; i < n_cr; i++) {
            n_fired++;
            sqlite3_stmt *u;
            if (sqlite3_prepare_v2(db,
                                   "UPDATE triggers SET fired = fired + 1, last_fired_ns = ?,"
                                   " last_value = ? WHERE id = ?",
                                   -1, &u, NULL) == SQLITE_OK) {
                sqlite3_bind_int64(u, 1, (int64_t)env->now_ns);
                sqlite3_bind_double(u, 2, cr[i].v);
                sqlite3_bind_int64(u, 3, id);
                sqlite3_step(u);
                sqlite3_finalize(u);
            }
            cr[i].fresh = may_escalate;
            if (cr[i].fresh && in && filtered) {
                in[cr[i].rank] = filtered[cr[i].rank] = true;
                any_fresh = true;
            }
        }
        uint64_t esc_id = (uint64_t)id << 32 | (env->now_ns / 1000000000ull & 0xffffffffu);
        json_t *esc_ranks = json_array();
        char probe_id[24] = "";
        if (any_fresh && probe && *probe) {
            /* The probe instead of a raw trace, on the ranks that crossed
             * and those their waits lead to; a probe that cannot start (a
             * class this job lacks, over the budget) is said in trigger
             * list, and the hold-off still applies. */
            chain_peers(db, job, since_epoch_id, in);
            char why[1024] = "";
            int ok = start_probe(env, job, probe, probe_for, in, probe_id, sizeof(probe_id), why,
                                 sizeof(why)) == 0;
            for (int64_t r = 0; r < ESC_MAX_RANKS; r++)
                if (in[r])
                    json_array_append_new(esc_ranks, json_integer(r));
            sqlite3_stmt *u;
            if (sqlite3_prepare_v2(db,
                                   "UPDATE triggers SET last_escalated_ns = ?1, probes ="
                                   " COALESCE(probes, 0) + ?2, last_probe = CASE WHEN ?2 THEN ?3"
                                   " ELSE last_probe END, probe_error = ?4 WHERE id = ?5",
                                   -1, &u, NULL) == SQLITE_OK) {
                sqlite3_bind_int64(u, 1, (int64_t)env->now_ns);
                sqlite3_bind_int(u, 2, ok);
                sqlite3_bind_int64(u, 3, ok ? strtoll(probe_id, NULL, 10) : 0);
                if (!ok)
                    sqlite3_bind_text(u, 4, *why ? why : "the probe did not start", -1,
                                      SQLITE_TRANSIENT);
                sqlite3_bind_int64(u, 5, id);
                sqlite3_step(u);
                sqlite3_finalize(u);
            }
            if (!ok)
                fprintf(stderr, "mkscope-collector: trigger %lld: its probe did not start: %s\n",
                        (long long)id, why);
        } else if (any_fresh) {
            chain_peers(db, job, since_epoch_id, in);
            for (int64_t r = 0; r < ESC_MAX_RANKS; r++) {
                if (!in[r])
                    continue;
                /* A rank that crossed records what the trigger names (by
                 * default everything of its own); a rank on its chain
                 * records its waits, releases and transfers. */
                char ptext[600] = "";
                if (filtered[r] && *t.pred)
                    snprintf(ptext, sizeof(ptext), "%s", t.pred);
                else if (filtered[r])
                    snprintf(ptext, sizeof(ptext), "rank = %lld", (long long)r);
                escalate(env, job, r, id, esc_id, ptext, !filtered[r]);
                json_array_append_new(esc_ranks, json_integer(r));
            }
            sqlite3_stmt *u;
            if (sqlite3_prepare_v2(db,
                                   "UPDATE triggers SET last_escalated_ns = ?, escalations ="
                                   " COALESCE(escalations, 0) + 1 WHERE id = ?",
                                   -1, &u, NULL) == SQLITE_OK) {
                sqlite3_bind_int64(u, 1, (int64_t)env->now_ns);
                sqlite3_bind_int64(u, 2, id);
                sqlite3_step(u);
                sqlite3_finalize(u);
            }
        }
        for (size_t i = 0; fired && i < n_cr; i++) {
            json_t *f = json_pack("{s:I, s:s, s:I, s:f, s:b}", "trigger", (json_int_t)id, "expr",
                                  expr, "rank", (json_int_t)cr[i].rank, "value", cr[i].v,
                                  "escalated", cr[i].fresh);
            if (cr[i].fresh && probe && *probe) {
                if (*probe_id)
                    json_object_set_new(f, "probe", json_string(probe_id));
                json_object_set(f, "probe_ranks", esc_ranks);
            } else if (cr[i].fresh) {
                char eid[24];
                snprintf(eid, sizeof(eid), "%llu", (unsigned long long)esc_id);
                json_object_set_new(f, "escalation", json_string(eid));
                json_object_set(f, "escalation_ranks", esc_ranks);
            }
            json_array_append_new(fired, f);
        }
        json_decref(esc_ranks);
        free(in);
        free(filtered);
        free(cr);
        mks_sql_plan_free(plan);
    }
    sqlite3_finalize(ts);
    return n_fired;
}

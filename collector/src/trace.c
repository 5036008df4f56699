/*
 * Raw events of an escalation as a Chrome JSON trace (the "Trace Event
 * Format", which Perfetto's UI and trace processor open): one process per
 * rank, one thread per worker, a complete ("X") slice per task (task_end
 * carries its start), per dependency wait and per transfer, and flow arrows
 * ("s" -> "f") from a producer's release of a communication generation to
 * the consumer's wait that ended on it.
 *
 * Device clocks differ per rank: each rank's events are shifted by its
 * latest host/device anchor (epoch begin) onto the host time line.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mkscope/commid.h"
#include "serve.h"
#include "trace.h"

enum { EV_TASK_START = 2, EV_TASK_END = 3, EV_WAIT_BEGIN = 4, EV_WAIT_END = 5, EV_RELEASE = 6,
       EV_COMM_BEGIN = 7, EV_COMM_END = 8 };

struct open_ev {
    uint32_t rank, worker;
    uint64_t t, gen;
    int kind;
};

/* Releases and waits by generation, for the flow arrows. */
struct flow {
    uint64_t gen;
    uint32_t rank, worker;
    int64_t t;
    int end; /* 0 release (start of the arrow), 1 wait end */
};

static int cmp_flow(const void *a, const void *b)
{
    const struct flow *x = a, *y = b;
    if (x->gen != y->gen)
        return x->gen < y->gen ? -1 : 1;
    if (x->end != y->end)
        return x->end - y->end;
    return x->t < y->t ? -1 : x->t > y->t;
}

static double us(int64_t ns)
{
    return (double)ns / 1000.0;
}

static json_t *rank_list(sqlite3 *db, const char *sql, const char *job, int64_t escalation)
{
    json_t *a = json_array();
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) == SQLITE_OK) {
        sqlite3_bind_text(s, 1, job, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(s, 2, escalation);
        while (sqlite3_step(s) == SQLITE_ROW)
            json_array_append_new(a, json_integer(sqlite3_column_int64(s, 0)));
        sqlite3_finalize(s);
    }
    return a;
}

void mks_trace_ranks(struct mks_store *st, const char *job, int64_t escalation, json_t **asked_p,
                     json_t **done_p)
{
    sqlite3 *db = mks_store_db(st);
    /* The escalation's commands: the trigger's id is the id's high half, the
     * second it fired the low half (trigger.c). */
    *asked_p = rank_list(db,
                         "SELECT DISTINCT rank FROM commands WHERE job = ?1 AND kind = 'escalate'"
                         " AND name = 'trigger-' || (?2 >> 32) AND (created_ns / 1000000000) %"
                         " 4294967296 = ?2 % 4294967296 ORDER BY rank",
                         job, escalation);
    *done_p = rank_list(db,
                        "SELECT DISTINCT rank FROM raw_batches WHERE job = ?1 AND"
                        " escalation_id = ?2 AND last ORDER BY rank",
                        job, escalation);
}

int mks_trace_build(struct mks_store *st, const char *job, int64_t escalation, json_t **out,
                    char *err, size_t errlen)
{
    sqlite3 *db = mks_store_db(st);
    sqlite3_stmt *s;
    if (escalation < 0) {
        if (sqlite3_prepare_v2(db, "SELECT MAX(escalation_id) FROM raw_events WHERE job = ?", -1,
                               &s, NULL) != SQLITE_OK)
            return mks_serve_fail(err, errlen, MKS_EXIT_ERROR, "store: %s", sqlite3_errmsg(db));
        sqlite3_bind_text(s, 1, job, -1, SQLITE_TRANSIENT);
        if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_type(s, 0) != SQLITE_NULL)
            escalation = sqlite3_column_int64(s, 0);
        sqlite3_finalize(s);
        if (escalation < 0)
            return mks_serve_fail(err, errlen, MKS_EXIT_NODATA,
                                  "no raw events stored for job %s: a trigger must fire (mkscope"
                                  " trigger add) before there is a trace",
                                  job);
    }
    /* Per-rank shift from device to host time: the latest anchor. */
    int64_t shift[4096] = {0};
    if (sqlite3_prepare_v2(db,
                           "SELECT rank, t_begin_host - t_begin_dev FROM epochs WHERE job = ? AND"
                           " t_begin_dev > 0 AND t_begin_host > 0 AND id IN (SELECT MAX(id) FROM"
                           " epochs WHERE job = ? AND t_begin_dev > 0 GROUP BY rank)",
                           -1, &s, NULL) == SQLITE_OK) {
        sqlite3_bind_text(s, 1, job, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(s, 2, job, -1, SQLITE_TRANSIENT);
        while (sqlite3_step(s) == SQLITE_ROW) {
            int64_t r = sqlite3_column_int64(s, 0);
            if (r >= 0 && r < 4096)
                shift[r] = sqlite3_column_int64(s, 1);
        }
        sqlite3_finalize(s);
    }
    if (sqlite3_prepare_v2(db,
                           /* The class name joined here, not looked up per
                            * task: a trace of every rank holds tens of
                            * thousands (any rank's schema will do when the
                            * rank published none). */
                           "SELECT r.rank, r.event, r.worker, r.class, r.step, r.comm_gen,"
                           " r.peer_rank, r.t_now, r.t_start, r.task_gen, COALESCE(tc.name,"
                           " (SELECT name FROM task_classes x WHERE x.job = r.job AND x.id ="
                           " r.class LIMIT 1)) FROM raw_events r LEFT JOIN task_classes tc ON"
                           " tc.job = r.job AND tc.rank = r.rank AND tc.id = r.class WHERE"
                           " r.job = ? AND r.escalation_id = ? ORDER BY r.rank, r.worker, r.t_now,"
                           " r.id",
                           -1, &s, NULL) != SQLITE_OK)
        return mks_serve_fail(err, errlen, MKS_EXIT_ERROR, "store: %s", sqlite3_errmsg(db));
    sqlite3_bind_text(s, 1, job, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(s, 2, escalation);
    json_t *evs = json_array();
    struct open_ev *open = NULL;
    size_t n_open = 0, cap_open = 0, n_raw = 0, n_flows = 0;
    int64_t t0 = INT64_MAX;
    struct flow *flows = NULL;
    size_t n_fl = 0, cap_fl = 0;
    bool seen_rank[4096] = {false};
    json_t *threads = json_object();
    while (sqlite3_step(s) == SQLITE_ROW) {
        n_raw++;
        uint32_t rank = (uint32_t)sqlite3_column_int64(s, 0);
        int ev = sqlite3_column_int(s, 1);
        uint32_t worker = (uint32_t)sqlite3_column_int64(s, 2);
        uint32_t cls = (uint32_t)sqlite3_column_int64(s, 3);
        uint64_t gen = (uint64_t)sqlite3_column_int64(s, 5);
        int64_t t = (int64_t)sqlite3_column_int64(s, 7) + (rank < 4096 ? shift[rank] : 0);
        int64_t ts = (int64_t)sqlite3_column_int64(s, 8);
        if (ts)
            ts += rank < 4096 ? shift[rank] : 0;
        if (t < t0)
            t0 = t;
        if (ts && ts < t0)
            t0 = ts;
        if (rank < 4096)
            seen_rank[rank] = true;
        char tk[48];
        snprintf(tk, sizeof(tk), "%u/%u", rank, worker);
        json_object_set_new(threads, tk, json_true());
        if (ev == EV_TASK_END && ts && ts <= t) {
            char name[128];
            const unsigned char *cn = sqlite3_column_text(s, 10);
            if (cn)
                snprintf(name, sizeof(name), "%s", (const char *)cn);
            else
                snprintf(name, sizeof(name), "class%u", cls);
            json_array_append_new(
                evs, json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:{s:I, s:I}}", "name", name,
                               "cat", "task", "ph", "X", "pid", (json_int_t)rank, "tid",
                               (json_int_t)worker, "ts", (json_int_t)ts, "dur",
                               (json_int_t)(t - ts), "args", "step",
                               (json_int_t)sqlite3_column_int64(s, 4), "task_gen",
                               (json_int_t)sqlite3_column_int64(s, 9)));
        } else if (ev == EV_WAIT_BEGIN || ev == EV_COMM_BEGIN) {
            if (n_open == cap_open) {
                cap_open = cap_open ? 2 * cap_open : 64;
                open = realloc(open, cap_open * sizeof(*open));
                if (!open)
                    break;
            }
            open[n_open++] = (struct open_ev){rank, worker, (uint64_t)t, gen, ev};
        } else if (ev == EV_WAIT_END || ev == EV_COMM_END) {
            int want = ev == EV_WAIT_END ? EV_WAIT_BEGIN : EV_COMM_BEGIN;
            for (size_t i = n_open; i-- > 0;) {
                if (open[i].rank != rank || open[i].worker != worker || open[i].kind != want)
                    continue;
                char comm[MKS_COMMID_TEXT_MAX] = "";
                if (gen && mks_commid_format(gen, comm, sizeof(comm)) < 0)
                    snprintf(comm, sizeof(comm), "0x%" PRIx64, gen);
                json_array_append_new(
                    evs, json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:{s:s, s:I}}", "name",
                                   ev == EV_WAIT_END ? "wait" : "transfer", "cat",
                                   ev == EV_WAIT_END ? "wait" : "comm", "ph", "X", "pid",
                                   (json_int_t)rank, "tid", (json_int_t)worker, "ts",
                                   (json_int_t)open[i].t, "dur", (json_int_t)(t - (int64_t)open[i].t),
                                   "args", "comm", comm, "peer",
                                   (json_int_t)sqlite3_column_int64(s, 6)));
                open[i] = open[--n_open];
                break;
            }
        }
        if (gen && (ev == EV_RELEASE || ev == EV_COMM_END || ev == EV_WAIT_END)) {
            if (n_fl == cap_fl) {
                cap_fl = cap_fl ? 2 * cap_fl : 64;
                flows = realloc(flows, cap_fl * sizeof(*flows));
                if (!flows)
                    break;
            }
            flows[n_fl++] = (struct flow){gen, rank, worker, t, ev == EV_WAIT_END};
        }
    }
    sqlite3_finalize(s);
    if (n_raw == 0) {
        free(open);
        free(flows);
        json_decref(evs);
        json_decref(threads);
        return mks_serve_fail(err, errlen, MKS_EXIT_NODATA,
                              "no raw events of escalation %lld for job %s (list them: mkscope"
                              " sql 'SELECT DISTINCT escalation_id FROM raw_batches')",
                              (long long)escalation, job);
    }
    /* An arrow for each wait end whose generation some other rank released:
     * sorted by generation, a wait end looks only at the releases of its
     * own generation (a trace of every rank holds many thousands). */
    if (flows)
        qsort(flows, n_fl, sizeof(*flows), cmp_flow);
    for (size_t i = 0, lo = 0; flows && i < n_fl; i++) {
        if (i == 0 || flows[i].gen != flows[i - 1].gen)
            lo = i; /* releases (end 0) of this generation sort first */
        if (!flows[i].end)
            continue;
        const struct flow *src = NULL;
        for (size_t k = lo; k < n_fl && flows[k].gen == flows[i].gen && !flows[k].end; k++)
            if (flows[k].rank != flows[i].rank && (!src || flows[k].t > src->t))
                src = &flows[k];
        if (!src)
            continue;
        char id[32];
        snprintf(id, sizeof(id), "0x%" PRIx64 ".%zu", flows[i].gen, i);
        json_array_append_new(evs, json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:I}", "name",
                                             "remote dependency", "cat", "dep", "ph", "s", "id",
                                             id, "pid", (json_int_t)src->rank, "tid",
                                             (json_int_t)src->worker, "ts", (json_int_t)src->t));
        json_array_append_new(evs, json_pack("{s:s, s:s, s:s, s:s, s:s, s:I, s:I, s:I}", "name",
                                             "remote dependency", "cat", "dep", "ph", "f", "bp",
                                             "e", "id", id, "pid", (json_int_t)flows[i].rank,
                                             "tid", (json_int_t)flows[i].worker, "ts",
                                             (json_int_t)flows[i].t));
        n_flows++;
    }
    free(open);
    free(flows);
    /* Timestamps in microseconds from the first event, as the format wants. */
    size_t i;
    json_t *e;
    json_array_foreach(evs, i, e)
    {
        int64_t ts = json_integer_value(json_object_get(e, "ts"));
        json_object_set_new(e, "ts", json_real(us(ts - t0)));
        if (json_object_get(e, "dur"))
            json_object_set_new(e, "dur", json_real(us(json_integer_value(json_object_get(e, "dur")))));
    }
    for (uint32_t r = 0; r < 4096; r++) {
        if (!seen_rank[r])
            continue;
        char name[32];
        snprintf(name, sizeof(name), "rank %u", r);
        json_array_append_new(evs, json_pack("{s:s, s:s, s:I, s:I, s:{s:s}}", "name",
                                             "process_name", "ph", "M", "pid", (json_int_t)r,
                                             "tid", (json_int_t)0, "args", "name", name));
    }
    const char *key;
    json_t *v;
    json_object_foreach(threads, key, v)
    {
        unsigned r, w;
        if (sscanf(key, "%u/%u", &r, &w) != 2)
            continue;
        char name[32];
        snprintf(name, sizeof(name), "worker %u", w);
        json_array_append_new(evs, json_pack("{s:s, s:s, s:I, s:I, s:{s:s}}", "name",
                                             "thread_name", "ph", "M", "pid", (json_int_t)r,
                                             "tid", (json_int_t)w, "args", "name", name));
    }
    json_decref(threads);
    json_t *asked, *done;
    mks_trace_ranks(st, job, escalation, &asked, &done);
    /* The id as a string: 64-bit ids lose digits as JSON numbers. */
    char eid[24];
    snprintf(eid, sizeof(eid), "%lld", (long long)escalation);
    *out = json_pack("{s:o, s:s, s:{s:s, s:s, s:I, s:I, s:o, s:o}}", "traceEvents", evs,
                     "displayTimeUnit", "ns", "otherData", "job", job, "escalation_id", eid,
                     "raw_events", (json_int_t)n_raw, "flows", (json_int_t)n_flows, "ranks_asked",
                     asked, "ranks_done", done);
    return 0;
}

int mks_serve_trace(const struct mks_serve_env *env, const Mkscope__V1__CliRequest *req,
                    json_t **out, char *err, size_t errlen)
{
    int64_t esc = -1;
    const char *a = mks_serve_arg(req, "escalation");
    if (a) {
        char *end;
        esc = strtoll(a, &end, 0);
        if (*end || end == a || esc < 0)
            return mks_serve_fail(err, errlen, MKS_EXIT_USAGE,
                                  "--escalation wants an escalation id (see mkscope sql 'SELECT"
                                  " DISTINCT escalation_id FROM raw_batches'), got '%s'",
                                  a);
    }
    char job[MKS_WIRE_MAX_JOB + 1];
    int rc = mks_serve_job(env, req, job, sizeof(job), err, errlen);
    if (rc)
        return rc;
    return mks_trace_build(env->st, job, esc, out, err, errlen);
}

/* Escalations of a job: those a trigger asked for (with the ranks asked
 * and whether each agent took it) and those whose raw events arrived, with
 * what arrived: events, dropped, batches, whether every rank sent its last
 * batch. */
int mks_serve_trace_list(const struct mks_serve_env *env, const Mkscope__V1__CliRequest *req,
                         json_t **out, char *err, size_t errlen)
{
    char job[MKS_WIRE_MAX_JOB + 1];
    int rc = mks_serve_job(env, req, job, sizeof(job), err, errlen);
    if (rc)
        return rc;
    sqlite3 *db = mks_store_db(env->st);
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(
            db,
            "WITH asked AS (SELECT escalation_id AS id, MIN(name) AS trig, MIN(created_ns) AS"
            "  asked_ns, COUNT(*) AS ranks_asked, SUM(ok = 1) AS ranks_ok, SUM(ok = 0) AS"
            "  ranks_failed, MIN(CASE WHEN ok = 0 THEN error END) AS error FROM commands"
            "  WHERE job = ?1 AND kind = 'escalate' AND escalation_id IS NOT NULL GROUP BY"
            "  escalation_id),"
            " got AS (SELECT escalation_id AS id, COUNT(DISTINCT rank) AS ranks_sent,"
            "  SUM(events) AS events, SUM(dropped) AS dropped, COUNT(*) AS batches,"
            "  COUNT(DISTINCT CASE WHEN last THEN rank END) AS ranks_done, MIN(received_ns) AS"
            "  first_ns, MAX(received_ns) AS last_ns FROM raw_batches WHERE job = ?1 GROUP BY"
            "  escalation_id),"
            " ids AS (SELECT id FROM asked UNION SELECT id FROM got)"
            " SELECT ids.id AS escalation, a.trig AS trigger, a.asked_ns,"
            "  COALESCE(a.ranks_asked, 0) AS ranks_asked, COALESCE(a.ranks_ok, 0) AS ranks_ok,"
            "  COALESCE(a.ranks_failed, 0) AS ranks_failed, COALESCE(g.ranks_sent, 0) AS"
            "  ranks_sent, COALESCE(g.events, 0) AS events, COALESCE(g.dropped, 0) AS dropped,"
            "  COALESCE(g.batches, 0) AS batches, g.ranks_done IS NOT NULL AND g.ranks_done ="
            "  g.ranks_sent AS complete, g.last_ns, a.error FROM ids LEFT JOIN asked a ON"
            "  a.id = ids.id LEFT JOIN got g ON g.id = ids.id ORDER BY ids.id",
            -1, &s, NULL) != SQLITE_OK)
        return mks_serve_fail(err, errlen, MKS_EXIT_ERROR, "store: %s", sqlite3_errmsg(db));
    sqlite3_bind_text(s, 1, job, -1, SQLITE_TRANSIENT);
    json_t *rows;
    if ((rc = mks_serve_rows(s, 100000, &rows, NULL, err, errlen)))
        return rc;
    *out = json_pack("{s:s, s:o}", "job", job, "escalations", rows);
    return 0;
}

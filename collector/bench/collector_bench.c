/*
 * collector_bench: how fast the collector's parts are on this machine.
 *
 *   decode   mks_wire_decode of a full-tier epoch summary (validation included)
 *   ingest   mks_store_ingest of such summaries into a WAL database on disk
 *   query    a grouped histogram-quantile query over everything stored
 *   diagnose mks_diagnose over all steps of all ranks
 *
 * usage: collector_bench [RANKS] [STEPS] [DBPATH]   (defaults 4 500 /tmp)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "diagnose.h"
#include "mkscope/query.h"
#include "mkscope/store.h"

#define CLASSES 32
#define WAITS   16
#define WORKERS 16

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* One summary: one step, CLASSES task classes with full histograms, remote
 * waits, releases, workers and coverage for every hook. */
static int encode(uint32_t rank, uint32_t step, uint8_t **buf, size_t *len)
{
    static uint64_t b[CLASSES][2][64];
    Mkscope__V1__EpochSummary s = MKSCOPE__V1__EPOCH_SUMMARY__INIT;
    Mkscope__V1__TaskStat ts[CLASSES], *tsp[CLASSES];
    Mkscope__V1__Hist h[CLASSES][2];
    for (int c = 0; c < CLASSES; c++) {
        mkscope__v1__task_stat__init(&ts[c]);
        for (int k = 0; k < 2; k++) {
            mkscope__v1__hist__init(&h[c][k]);
            for (int i = 0; i < 64; i++)
                b[c][k][i] = i > 8 && i < 24 ? (uint64_t)(rand() % 50) : 0;
            h[c][k].buckets = b[c][k], h[c][k].n_buckets = 24;
            h[c][k].count = 100, h[c][k].sum = 100000 + (uint64_t)(rand() % 1000);
        }
        ts[c].task_class = (uint32_t)c, ts[c].step = step, ts[c].count = 100;
        ts[c].sum_run_ns = h[c][1].sum, ts[c].queue = &h[c][0], ts[c].run = &h[c][1];
        tsp[c] = &ts[c];
    }
    s.task_stats = tsp, s.n_task_stats = CLASSES;
    Mkscope__V1__StepTime st = MKSCOPE__V1__STEP_TIME__INIT, *stp = &st;
    uint64_t base = 1000000000ull + step * 2000000ull;
    st.step = step, st.t_begin_dev_ns = base;
    st.t_end_dev_ns = base + 1000000 + (uint64_t)(rand() % 20000) + (step % 97 == 13 ? 500000 : 0);
    s.steps = &stp, s.n_steps = 1;
    Mkscope__V1__RemoteWait rw[WAITS], *rwp[WAITS];
    Mkscope__V1__Release rl[WAITS], *rlp[WAITS];
    for (int i = 0; i < WAITS; i++) {
        mkscope__v1__remote_wait__init(&rw[i]);
        rw[i].comm_gen = ((uint64_t)step << 20) | ((uint64_t)rank << 8) | (uint64_t)i | (1ull << 62);
        rw[i].peer_rank = (rank + 1) % 4, rw[i].step = step;
        rw[i].t_begin_dev_ns = base + 1000, rw[i].t_end_dev_ns = base + 3000 + (uint64_t)(rand() % 1000);
        rwp[i] = &rw[i];
        mkscope__v1__release__init(&rl[i]);
        rl[i].comm_gen = rw[i].comm_gen ^ 1, rl[i].consumer_rank = (rank + 3) % 4, rl[i].step = step;
        rl[i].t_end_dev_ns = base + 900, rl[i].t_comm_begin_dev_ns = base + 950;
        rl[i].t_comm_end_dev_ns = base + 990, rl[i].t_release_dev_ns = base + 1000;
        rlp[i] = &rl[i];
    }
    s.remote_waits = rwp, s.n_remote_waits = WAITS, s.releases = rlp, s.n_releases = WAITS;
    Mkscope__V1__WorkerStat ws[WORKERS], *wsp[WORKERS];
    for (int i = 0; i < WORKERS; i++) {
        mkscope__v1__worker_stat__init(&ws[i]);
        ws[i].worker = (uint32_t)i, ws[i].step = step, ws[i].busy_ns = 900000, ws[i].idle_ns = 50000;
        wsp[i] = &ws[i];
    }
    s.workers = wsp, s.n_workers = WORKERS;
    Mkscope__V1__Coverage cv[11], *cvp[11];
    for (int i = 0; i < 11; i++) {
        mkscope__v1__coverage__init(&cv[i]);
        cv[i].hook = (uint32_t)i, cv[i].eligible = 1000, cv[i].ran = 990, cvp[i] = &cv[i];
    }
    s.coverage = cvp, s.n_coverage = 11;
    s.epoch = step, s.t_begin_host_ns = base, s.t_end_host_ns = base + 2000000;
    s.t_begin_dev_ns = base, s.t_end_dev_ns = base + 2000000, s.detail_tier = 2;
    mks_envelope env;
    mks_wire_init(&env, "bench", rank, step);
    env.body_case = MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY;
    env.epoch_summary = &s;
    char err[256];
    int rc = mks_wire_encode(&env, NULL, buf, len, err, sizeof(err));
    if (rc)
        fprintf(stderr, "encode: %s\n", err);
    return rc;
}

int main(int argc, char **argv)
{
    uint32_t ranks = argc > 1 ? (uint32_t)atoi(argv[1]) : 4;
    uint32_t steps = argc > 2 ? (uint32_t)atoi(argv[2]) : 500;
    const char *dir = argc > 3 ? argv[3] : "/tmp";
    if (!ranks || !steps || ranks > 256) {
        fprintf(stderr, "usage: collector_bench [RANKS] [STEPS] [DBDIR]\n");
        return 2;
    }
    char path[512], err[256];
    snprintf(path, sizeof(path), "%s/mks-collector-bench-%d.db", dir, (int)getpid());
    struct mks_store_opts o = {.sz = sizeof(o), .path = path};
    struct mks_store *st;
    if (mks_store_open(&o, &st, err, sizeof(err))) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    srand(1);
    uint8_t *buf;
    size_t len;
    if (encode(0, 1, &buf, &len))
        return 1;
    /* decode */
    int n_dec = 2000;
    double t = now_s();
    for (int i = 0; i < n_dec; i++) {
        mks_envelope *e;
        if (mks_wire_decode(buf, len, NULL, &e, err, sizeof(err)))
            return 1;
        mks_wire_free(e);
    }
    double dec = (now_s() - t) / n_dec;
    free(buf);
    printf("summary size        %zu bytes (%d classes, %d waits, %d releases, %d workers)\n", len,
           CLASSES, WAITS, WAITS, WORKERS);
    printf("decode+validate     %.1f us/summary\n", dec * 1e6);
    /* ingest: the ranks register first, as agents do */
    for (uint32_t r = 0; r < ranks; r++) {
        mks_envelope env;
        Mkscope__V1__Register reg = MKSCOPE__V1__REGISTER__INIT;
        reg.n_ranks = ranks, reg.hook_abi_version = 1, reg.n_workers = WORKERS;
        mks_wire_init(&env, "bench", r, 0);
        env.body_case = MKSCOPE__V1__ENVELOPE__BODY_REGISTER;
        env.register_ = &reg;
        if (mks_store_ingest(st, &env, 1, NULL, err, sizeof(err))) {
            fprintf(stderr, "register: %s\n", err);
            return 1;
        }
    }
    double ing = 0;
    for (uint32_t s = 1; s <= steps; s++) {
        for (uint32_t r = 0; r < ranks; r++) {
            if (encode(r, s, &buf, &len))
                return 1;
            mks_envelope *e;
            if (mks_wire_decode(buf, len, NULL, &e, err, sizeof(err)))
                return 1;
            uint64_t seq;
            t = now_s();
            if (mks_store_ingest(st, e, (uint64_t)s * 1000000000ull, &seq, err, sizeof(err))) {
                fprintf(stderr, "%s\n", err);
                return 1;
            }
            ing += now_s() - t;
            mks_wire_free(e);
            free(buf);
        }
    }
    double n_sum = (double)ranks * steps;
    printf("ingest (WAL, disk)  %.0f summaries/s (%.1f us each), %u ranks x %u steps\n",
           n_sum / ing, ing / n_sum * 1e6, ranks, steps);
    /* query */
    sqlite3 *db = mks_store_db(st);
    mks_query_register_sql(db);
    const char *qt = "p99(run), mean(queue), count(task) by class where rank = 1";
    struct mks_query *q;
    struct mks_sql_plan *p;
    struct mks_query_error qe;
    if (mks_query_parse(qt, &q, &qe) || mks_query_plan(q, "bench", 0, &p, &qe)) {
        fprintf(stderr, "query: %s\n", qe.msg);
        return 1;
    }
    t = now_s();
    int rows = 0;
    for (int i = 0; i < 5; i++) {
        sqlite3_stmt *s;
        sqlite3_prepare_v2(db, p->sql, -1, &s, NULL);
        mks_sql_plan_bind(p, s);
        while (sqlite3_step(s) == SQLITE_ROW)
            rows++;
        sqlite3_finalize(s);
    }
    printf("query               %.1f ms ('%s', %d rows over %u epochs of rank 1)\n",
           (now_s() - t) / 5 * 1e3, qt, rows / 5, steps);
    mks_sql_plan_free(p);
    mks_query_free(q);
    /* diagnose */
    json_t *out;
    struct mks_diag_opts dopts = {.sz = sizeof(dopts), .only_step = -1};
    t = now_s();
    if (mks_diagnose(st, "bench", &dopts, &out, err, sizeof(err))) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    printf("diagnose            %.1f ms (%u ranks x %u steps, %lld slow steps, %zu groups)\n",
           (now_s() - t) * 1e3, ranks, steps,
           (long long)json_integer_value(json_object_get(out, "slow_steps")),
           json_array_size(json_object_get(out, "groups")));
    json_decref(out);
    mks_store_close(st);
    unlink(path);
    char wal[600];
    snprintf(wal, sizeof(wal), "%s-wal", path);
    unlink(wal);
    snprintf(wal, sizeof(wal), "%s-shm", path);
    unlink(wal);
    return 0;
}

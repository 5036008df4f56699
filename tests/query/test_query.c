/*
 * Query language tests.
 *  - Parse errors point at the offending token (position and length).
 *  - Plans run on a store filled with random summaries; every answer equals
 *    the aggregate this test computes itself from what it inserted.
 *  - User values are bound parameters: a hostile string is data, not SQL.
 *  - Predicates compiled to eBPF pass the devhooks verifier and, run in the
 *    devhooks VM on random contexts, agree with the C evaluation.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mkscope/query.h"
#include "mkscope/store.h"
#include "mkscope/verifier.h"
#include "mkscope/vm.h"

/* ---- parse errors ------------------------------------------------------- */

static void expect_error(const char *text, int pos, int len, const char *needle)
{
    struct mks_query *q = NULL;
    struct mks_query_error e;
    int rc = mks_query_parse(text, &q, &e);
    if (rc == 0) {
        /* Some errors are found by the planner (fields of another source). */
        struct mks_sql_plan *p = NULL;
        rc = mks_query_plan(q, "job", 0, &p, &e);
        mks_query_free(q);
        mks_sql_plan_free(p);
    }
    if (rc == 0)
        fail_msg("'%s' accepted", text);
    if (e.pos != pos || e.len != len || !strstr(e.msg, needle))
        fail_msg("'%s': error at %d+%d '%s', want %d+%d '%s'", text, e.pos, e.len, e.msg, pos, len,
                 needle);
    char buf[512];
    assert_int_equal(mks_query_error_format(text, &e, buf, sizeof(buf)), 0);
    /* The caret line: two spaces, pos spaces, len carets; a long text is
     * shown from 40 characters before the place, after "...". */
    const char *caret = strrchr(buf, '\n') + 1;
    int col = strlen(text) > 120 && pos > 40 ? 40 + 3 : pos;
    for (int i = 0; i < 2 + col; i++)
        assert_int_equal(caret[i], ' ');
    for (int i = 0; i < len; i++)
        assert_int_equal(caret[2 + col + i], '^');
}

static void test_parse_errors(void **state)
{
    (void)state;
    expect_error("count(task) by clas", 15, 4, "cannot group by 'clas'");
    expect_error("count(tsk)", 6, 3, "unknown metric 'tsk'");
    expect_error("cnt(task)", 0, 3, "unknown aggregate 'cnt'");
    expect_error("count(task) where rnk = 1", 18, 3, "unknown field 'rnk'");
    expect_error("count(task) where rank = ", 25, 1, "expected a value");
    expect_error("count(task) where rank 1", 23, 1, "expected a comparison");
    expect_error("count(task) where (rank = 1", 18, 1, "'(' is never closed");
    expect_error("count(task) where rank = 1 banana", 27, 6, "unexpected 'banana'");
    expect_error("count(task) where step > 3xs", 26, 2, "unknown unit 'xs'");
    expect_error("count(task) where class = \"attn", 26, 5, "string not closed");
    expect_error("count(task) where rank = attn", 25, 4, "compares with numbers");
    expect_error("count(task) where rank = -1", 25, 2, "negative value");
    expect_error("count(task), p99(step)", 13, 9, "cannot mix");
    expect_error("min(run)", 0, 8, "minimum latency is not kept");
    expect_error("count(task) where peer = 1", 18, 4, "task statistics have no 'peer'");
    expect_error("count(task) where t_now > 5", 18, 5, "exists only on the device");
    expect_error("count(task) limit 0", 18, 1, "limit wants");
    expect_error("count(task) @", 12, 1, "unexpected character '@'");
    /* a lexing error right after ')' (the tree inside was leaked) */
    expect_error("count(task) where (rank = 1) @", 29, 1, "unexpected character '@'");
    expect_error("", 0, 1, "expected an aggregate");
}

/* Nesting and length are bounded in the parser, so that no predicate takes
 * the stack of the parser or of what walks its tree later, and the error is
 * a usage error that points at the place. */
static void test_parse_bounds(void **state)
{
    (void)state;
    char q[4200];
    int n = snprintf(q, sizeof(q), "count(task) where ");
    for (int i = 0; i < 40; i++)
        q[n++] = '(';
    n += snprintf(q + n, sizeof(q) - (size_t)n, "rank = 1");
    for (int i = 0; i < 40; i++)
        q[n++] = ')';
    q[n] = 0;
    expect_error(q, 18 + 32, 1, "nested more than 32 deep");
    n = snprintf(q, sizeof(q), "count(task) where ");
    for (int i = 0; i < 40; i++)
        n += snprintf(q + n, sizeof(q) - (size_t)n, "not ");
    snprintf(q + n, sizeof(q) - (size_t)n, "rank = 1");
    expect_error(q, 18 + 4 * 32, 3, "nested more than 32 deep");
    /* 2000 '(' within the 4096-character bound: refused at the 33rd. */
    n = snprintf(q, sizeof(q), "count(task) where ");
    while (n < 2018)
        q[n++] = '(';
    q[n] = 0;
    expect_error(q, 18 + 32, 1, "nested more than 32 deep");
    n = snprintf(q, sizeof(q), "count(task) where rank = 1");
    for (int i = 0; i < 300; i++)
        n += snprintf(q + n, sizeof(q) - (size_t)n, " or rank=%d", i % 10);
    struct mks_query *qq = NULL;
    struct mks_query_error e;
    assert_int_equal(mks_query_parse(q, &qq, &e), -EINVAL);
    assert_non_null(strstr(e.msg, "more than 256 conditions"));
    /* 32 deep is fine, and so are 256 conditions. */
    n = snprintf(q, sizeof(q), "count(task) where ");
    for (int i = 0; i < 32; i++)
        q[n++] = '(';
    n += snprintf(q + n, sizeof(q) - (size_t)n, "rank = 1");
    for (int i = 0; i < 32; i++)
        q[n++] = ')';
    q[n] = 0;
    assert_int_equal(mks_query_parse(q, &qq, &e), 0);
    mks_query_free(qq);
}

/* ---- plans on a store ------------------------------------------------------- */

#define NR 3
#define NE 6
#define NC 4
static const char *const cnames[NC] = {"embed", "attn", "mlp", "moe-expert.3"};

struct truth {
    uint64_t count[NR][NC][NE + 1], run_sum[NR][NC][NE + 1], queue_sum[NR][NC][NE + 1];
    uint64_t run_max[NR][NC];
    uint64_t run_b[NC][MKS_HIST_BUCKETS];
    double wait[NR][NE + 1];
};
static struct truth T;
static struct mks_store *st;

/* Collector receive time of the next ingest (the "time" field). */
static uint64_t recv_ns = 1000;

static void ingest(mks_envelope *env)
{
    char err[256];
    uint64_t seq;
    uint8_t *buf;
    size_t len;
    /* Through the wire, as the collector receives it. */
    assert_int_equal(mks_wire_encode(env, NULL, &buf, &len, err, sizeof(err)), 0);
    mks_envelope *e = NULL;
    assert_int_equal(mks_wire_decode(buf, len, NULL, &e, err, sizeof(err)), 0);
    if (mks_store_ingest(st, e, recv_ns, &seq, err, sizeof(err)))
        fail_msg("ingest: %s", err);
    mks_wire_free(e);
    free(buf);
}

/* A rank of job "q" registers, as an agent does before it sends. */
static void register_rank(uint32_t rank)
{
    mks_envelope env;
    Mkscope__V1__Register reg = MKSCOPE__V1__REGISTER__INIT;
    reg.n_ranks = 10, reg.hook_abi_version = 1, reg.n_workers = 1;
    mks_wire_init(&env, "q", rank, 0);
    env.body_case = MKSCOPE__V1__ENVELOPE__BODY_REGISTER;
    env.register_ = &reg;
    ingest(&env);
}

/* The store's detail window (setup_rolled sets one). */
static uint64_t detail_age_ns;

static int setup_store(void **state)
{
    (void)state;
    struct mks_store_opts o = {.sz = sizeof(o), .path = ":memory:", .detail_age_ns = detail_age_ns};
    char err[256];
    if (mks_store_open(&o, &st, err, sizeof(err)))
        return -1;
    mks_query_register_sql(mks_store_db(st));
    memset(&T, 0, sizeof(T));
    srand(99);
    for (uint32_t r = 0; r < NR; r++) {
        mks_envelope env;
        Mkscope__V1__Register reg = MKSCOPE__V1__REGISTER__INIT;
        Mkscope__V1__TaskSchema sch = MKSCOPE__V1__TASK_SCHEMA__INIT;
        Mkscope__V1__TaskClass cls[NC], *cp[NC];
        for (int i = 0; i < NC; i++) {
            mkscope__v1__task_class__init(&cls[i]);
            cls[i].id = (uint32_t)i;
            cls[i].name = (char *)cnames[i];
            cp[i] = &cls[i];
        }
        sch.classes = cp, sch.n_classes = NC;
        reg.n_ranks = NR, reg.hook_abi_version = 1, reg.n_workers = 2, reg.schema = &sch;
        mks_wire_init(&env, "q", r, 0);
        env.body_case = MKSCOPE__V1__ENVELOPE__BODY_REGISTER;
        env.register_ = &reg;
        ingest(&env);
        for (uint32_t e = 1; e <= NE; e++) {
            Mkscope__V1__EpochSummary sum = MKSCOPE__V1__EPOCH_SUMMARY__INIT;
            Mkscope__V1__TaskStat ts[NC], *tsp[NC];
            Mkscope__V1__Hist hr[NC], hq[NC];
            uint64_t rb[NC][MKS_HIST_BUCKETS], qb[NC][MKS_HIST_BUCKETS];
            memset(rb, 0, sizeof(rb));
            memset(qb, 0, sizeof(qb));
            for (int c = 0; c < NC; c++) {
                mkscope__v1__task_stat__init(&ts[c]);
                mkscope__v1__hist__init(&hr[c]);
                mkscope__v1__hist__init(&hq[c]);
                ts[c].task_class = (uint32_t)c;
                ts[c].step = e;
                int n = 1 + rand() % 30;
                for (int k = 0; k < n; k++) {
                    uint64_t run = 1000 + (uint64_t)(rand() % 100000);
                    uint64_t q = (uint64_t)(rand() % 5000);
                    int b = 0;
                    while ((1ull << b) <= run)
                        b++;
                    rb[c][b]++;
                    T.run_b[c][b]++;
                    b = 0;
                    while ((1ull << b) <= q)
                        b++;
                    qb[c][b]++;
                    ts[c].count++;
                    ts[c].sum_run_ns += run;
                    hr[c].sum += run;
                    hq[c].sum += q;
                    if (run > hr[c].max)
                        hr[c].max = run;
                    T.queue_sum[r][c][e] += q;
                }
                hr[c].count = hq[c].count = ts[c].count;
                hr[c].buckets = rb[c], hr[c].n_buckets = MKS_HIST_BUCKETS;
                hq[c].buckets = qb[c], hq[c].n_buckets = MKS_HIST_BUCKETS;
                ts[c].run = &hr[c], ts[c].queue = &hq[c];
                tsp[c] = &ts[c];
                T.count[r][c][e] = ts[c].count;
                T.run_sum[r][c][e] = ts[c].sum_run_ns;
                if (hr[c].max > T.run_max[r][c])
                    T.run_max[r][c] = hr[c].max;
            }
            sum.task_stats = tsp, sum.n_task_stats = NC;
            sum.epoch = e;
            sum.t_begin_host_ns = 1000000000ull * e;
            sum.t_end_host_ns = 1000000000ull * e + 500;
            Mkscope__V1__RemoteWait rw = MKSCOPE__V1__REMOTE_WAIT__INIT, *rwp = &rw;
            rw.comm_gen = 77 + e, rw.peer_rank = (r + 1) % NR, rw.step = e;
            rw.t_begin_dev_ns = 5000;
            rw.t_end_dev_ns = 5000 + (uint64_t)(rand() % 9000);
            T.wait[r][e] = (double)(rw.t_end_dev_ns - rw.t_begin_dev_ns);
            sum.remote_waits = &rwp, sum.n_remote_waits = 1;
            mks_wire_init(&env, "q", r, e);
            recv_ns = 1000000000ull * e + 500;
            env.body_case = MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY;
            env.epoch_summary = &sum;
            ingest(&env);
        }
    }
    return 0;
}

static int teardown_store(void **state)
{
    (void)state;
    mks_store_close(st);
    return 0;
}

/* Run a query; returns rows as a flat array of doubles (NAN for NULL). */
static size_t run(const char *text, uint64_t now, double *out, size_t max, size_t *ncols)
{
    struct mks_query *q = NULL;
    struct mks_sql_plan *p = NULL;
    struct mks_query_error e;
    if (mks_query_parse(text, &q, &e) || mks_query_plan(q, "q", now, &p, &e))
        fail_msg("'%s': %s", text, e.msg);
    mks_query_free(q);
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(mks_store_db(st), p->sql, -1, &s, NULL) != SQLITE_OK)
        fail_msg("bad SQL %s: %s", p->sql, sqlite3_errmsg(mks_store_db(st)));
    assert_int_equal(mks_sql_plan_bind(p, s), 0);
    size_t n = 0;
    *ncols = (size_t)sqlite3_column_count(s);
    assert_int_equal(*ncols, p->n_columns);
    while (sqlite3_step(s) == SQLITE_ROW) {
        for (size_t c = 0; c < *ncols && n < max; c++)
            out[n++] = sqlite3_column_type(s, (int)c) == SQLITE_NULL
                           ? NAN
                           : sqlite3_column_double(s, (int)c);
    }
    sqlite3_finalize(s);
    mks_sql_plan_free(p);
    return n / *ncols;
}

static void test_count_by_class_where_rank(void **state)
{
    (void)state;
    double v[64];
    size_t nc;
    size_t rows = run("count(task), sum(run), mean(run) by class where rank = 1", 0, v, 64, &nc);
    assert_int_equal(rows, NC);
    /* The group column is a class name (not a number here): find each
     * class's row by its independent totals. */
    for (int c = 0; c < NC; c++) {
        uint64_t cnt = 0, sum = 0;
        for (int e = 1; e <= NE; e++)
            cnt += T.count[1][c][e], sum += T.run_sum[1][c][e];
        bool found = false;
        for (size_t i = 0; i < rows; i++)
            if (v[i * nc + 1] == (double)cnt && v[i * nc + 2] == (double)sum &&
                fabs(v[i * nc + 3] - (double)sum / (double)cnt) < 1e-6)
                found = true;
        if (!found)
            fail_msg("class %d: count %llu sum %llu not in the answer", c,
                     (unsigned long long)cnt, (unsigned long long)sum);
    }
}

static void test_filters(void **state)
{
    (void)state;
    double v[256];
    size_t nc;
    /* by rank, step range, class by name with a dash and dot in it */
    size_t rows = run("count(task), sum(queue) by rank where step >= 2 and step <= 4 and"
                      " class = \"moe-expert.3\"",
                      0, v, 256, &nc);
    assert_int_equal(rows, NR);
    for (int r = 0; r < NR; r++) {
        uint64_t cnt = 0, qs = 0;
        for (int e = 2; e <= 4; e++)
            cnt += T.count[r][3][e], qs += T.queue_sum[r][3][e];
        assert_int_equal((int)v[r * nc], r);
        assert_true(v[r * nc + 1] == (double)cnt);
        assert_true(v[r * nc + 2] == (double)qs);
    }
    /* or / not / != */
    rows = run("count(task) where not (rank = 0 or class != attn)", 0, v, 256, &nc);
    assert_int_equal(rows, 1);
    uint64_t cnt = 0;
    for (int r = 1; r < NR; r++)
        for (int e = 1; e <= NE; e++)
            cnt += T.count[r][1][e];
    assert_true(v[0] == (double)cnt);
    /* relative time: epochs received within the last 2.5 s of "now" */
    uint64_t now = 1000000000ull * NE + 500 + 1;
    rows = run("count(task) by step where time > -2500ms", now, v, 256, &nc);
    assert_int_equal(rows, 3);
    assert_int_equal((int)v[0], NE - 2);
    /* max over tasks by class */
    rows = run("max(run) by rank, class where rank = 2 and class = embed", 0, v, 256, &nc);
    assert_int_equal(rows, 1);
    assert_true(v[2] == (double)T.run_max[2][0]);
}

static void test_quantiles(void **state)
{
    (void)state;
    double v[64];
    size_t nc;
    /* Histogram quantile: must fall inside the power-of-two bucket that
     * holds the true quantile rank of the merged buckets. */
    size_t rows = run("p50(run), p90(run), p99(run) where class = mlp", 0, v, 64, &nc);
    assert_int_equal(rows, 1);
    uint64_t total = 0;
    for (int b = 0; b < MKS_HIST_BUCKETS; b++)
        total += T.run_b[2][b];
    const double qs[3] = {0.5, 0.9, 0.99};
    for (int i = 0; i < 3; i++) {
        double rank = qs[i] * (double)total, cum = 0;
        int b;
        for (b = 0; b < MKS_HIST_BUCKETS; b++) {
            cum += (double)T.run_b[2][b];
            if (cum >= rank)
                break;
        }
        double lo = ldexp(1, b - 1), hi = ldexp(1, b);
        if (v[i] < lo || v[i] > hi)
            fail_msg("p%g = %g outside bucket [%g, %g]", qs[i] * 100, v[i], lo, hi);
    }
    assert_true(v[0] <= v[1] && v[1] <= v[2]);
    /* Exact quantile of remote waits (nearest rank) */
    rows = run("p90(remote_wait), count(remote_wait), mean(remote_wait) where rank = 0", 0, v, 64,
               &nc);
    double w[NE];
    double mean = 0;
    for (int e = 1; e <= NE; e++)
        w[e - 1] = T.wait[0][e], mean += T.wait[0][e] / NE;
    for (int i = 0; i < NE; i++)
        for (int j = i + 1; j < NE; j++)
            if (w[j] < w[i]) {
                double t = w[i];
                w[i] = w[j];
                w[j] = t;
            }
    size_t k = (size_t)ceil(0.9 * NE);
    assert_true(v[0] == w[k - 1]);
    assert_true(v[1] == NE);
    assert_true(fabs(v[2] - mean) < 1e-6);
    /* a quantile over nothing is NULL, not 0 */
    rows = run("p99(run) where rank = 77", 0, v, 64, &nc);
    assert_int_equal(rows, 1);
    assert_true(isnan(v[0]));
}

static void test_step_from_generations(void **state)
{
    (void)state;
    /* Rank 9 reports no step times, only generation advances at each
     * step's end: steps 1..5 end at 10, 13, 20, 21, 29 ms. */
    static const uint64_t ends[] = {10, 13, 20, 21, 29};
    register_rank(9);
    for (uint32_t i = 0; i < 5; i++) {
        mks_envelope env;
        Mkscope__V1__EpochSummary sum = MKSCOPE__V1__EPOCH_SUMMARY__INIT;
        Mkscope__V1__StepTime st = MKSCOPE__V1__STEP_TIME__INIT, *stp = &st;
        Mkscope__V1__GenProgress gp = MKSCOPE__V1__GEN_PROGRESS__INIT, *gpp = &gp;
        st.step = i + 1, st.tasks = 3;
        gp.step = i + 1, gp.t_dev_ns = ends[i] * 1000000ull;
        sum.steps = &stp, sum.n_steps = 1, sum.gens = &gpp, sum.n_gens = 1, sum.epoch = i;
        mks_wire_init(&env, "q", 9, i + 1);
        recv_ns = 5000000000ull + i;
        env.body_case = MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY;
        env.epoch_summary = &sum;
        ingest(&env);
    }
    double v[16];
    size_t nc;
    size_t rows = run("count(step), max(step), min(step), p50(step) where rank = 9", 0, v, 16, &nc);
    assert_int_equal(rows, 1);
    /* durations of steps 2..5: 3, 7, 1, 8 ms; step 1 has no begin */
    assert_true(v[0] == 4);
    assert_true(v[1] == 8e6);
    assert_true(v[2] == 1e6);
    assert_true(v[3] == 3e6); /* nearest rank: 2nd of 1, 3, 7, 8 */
}

/* Rank 8 is what the standard genprog monitor sends: step rows with each
 * step's busy span in the epoch (first task start to last task end), not
 * complete, beside the advances.  Its step durations still come from the
 * advances (they returned nothing while any step row had times). */
static void test_step_busy_span(void **state)
{
    (void)state;
    static const uint64_t ends[] = {10, 13, 20, 21, 29};
    register_rank(8);
    for (uint32_t i = 0; i < 5; i++) {
        mks_envelope env;
        Mkscope__V1__EpochSummary sum = MKSCOPE__V1__EPOCH_SUMMARY__INIT;
        Mkscope__V1__StepTime st = MKSCOPE__V1__STEP_TIME__INIT, *stp = &st;
        Mkscope__V1__GenProgress gp = MKSCOPE__V1__GEN_PROGRESS__INIT, *gpp = &gp;
        st.step = i + 1, st.tasks = 3;
        st.t_begin_dev_ns = ends[i] * 1000000ull - 500000, st.t_end_dev_ns = ends[i] * 1000000ull;
        gp.step = i + 1, gp.t_dev_ns = ends[i] * 1000000ull;
        sum.steps = &stp, sum.n_steps = 1, sum.gens = &gpp, sum.n_gens = 1, sum.epoch = i;
        mks_wire_init(&env, "q", 8, i + 1);
        recv_ns = 5000000000ull + i;
        env.body_case = MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY;
        env.epoch_summary = &sum;
        ingest(&env);
    }
    double v[16];
    size_t nc;
    size_t rows = run("count(step), max(step), min(step) where rank = 8", 0, v, 16, &nc);
    assert_int_equal(rows, 1);
    assert_true(v[0] == 4);
    assert_true(v[1] == 8e6);
    assert_true(v[2] == 1e6);
}

static void test_injection_is_data(void **state)
{
    (void)state;
    double v[8];
    size_t nc;
    size_t rows = run("count(task) where class = \"x') OR 1=1 --\"", 0, v, 8, &nc);
    assert_int_equal(rows, 1);
    /* no class has that name: SUM over nothing is NULL */
    assert_true(isnan(v[0]));
    /* the SQL text holds no user value */
    struct mks_query *q;
    struct mks_sql_plan *p;
    struct mks_query_error e;
    assert_int_equal(mks_query_parse("count(task) where class = \"zzsecretzz\" and step = 424242",
                                     &q, &e),
                     0);
    assert_int_equal(mks_query_plan(q, "jobname-x", 0, &p, &e), 0);
    assert_null(strstr(p->sql, "zzsecretzz"));
    assert_null(strstr(p->sql, "424242"));
    assert_null(strstr(p->sql, "jobname-x"));
    mks_sql_plan_free(p);
    mks_query_free(q);
}

/* ---- eBPF filters ---------------------------------------------------------------- */

static int64_t resolve(const char *name, void *arg)
{
    (void)arg;
    for (int i = 0; i < NC; i++)
        if (!strcmp(cnames[i], name))
            return i;
    return -1;
}

static uint64_t rnd64(void)
{
    return ((uint64_t)rand() << 42) ^ ((uint64_t)rand() << 21) ^ (uint64_t)rand();
}

static void test_filter_agrees_with_c(void **state)
{
    (void)state;
    static const char *const preds[] = {
        "rank = 1",
        "rank = 1 and class = attn",
        "class != \"moe-expert.3\" or step >= 5",
        "not (worker < 2) and event = task_end",
        "run > 20us and queue <= 1ms",
        "comm_gen = 0xc000000000000001 or comm_gen > 0x7fffffffffffffff",
        "(step > 3 and step < 7) or (tile_x = 2 and tile_y != 3) or value >= 4294967296",
        "queue_depth > 3 and sm < 100 and req_gen = 5 and task_gen != 0 and dep_class = 2",
        "not not (peer = 3 || flags = 2) && !(t_now < 1000)",
    };
    srand(4242);
    for (size_t pi = 0; pi < sizeof(preds) / sizeof(preds[0]); pi++) {
        struct mks_pred *p = NULL;
        struct mks_query_error e;
        if (mks_pred_parse(preds[pi], &p, &e))
            fail_msg("'%s': %s", preds[pi], e.msg);
        struct mks_insn *insns;
        uint32_t n;
        if (mks_pred_compile_bpf(p, resolve, NULL, &insns, &n, &e))
            fail_msg("compile '%s': %s", preds[pi], e.msg);
        /* The verifier accepts it for any hook as an OBSERVE program. */
        struct mks_verify_opts vo = {.sz = sizeof(vo), .prog_type = MKS_PROG_OBSERVE,
                                     .abi_version = 1, .hook = -1};
        struct mks_verify_result vr;
        char log[512] = "";
        if (mks_verify(insns, n, &vo, &vr, log, sizeof(log)))
            fail_msg("verifier rejects '%s': %s", preds[pi], log);
        assert_true(vr.cost <= n);
        int kept = 0;
        for (int k = 0; k < 3000; k++) {
            struct mks_hook_ctx c;
            memset(&c, 0, sizeof(c));
            c.abi_version = 1, c.size = sizeof(c);
            /* small values so equality tests hit often */
            c.event = (uint16_t)(rand() % 11);
            c.flags = (uint16_t)(rand() % 4);
            c.rank = (uint32_t)(rand() % 4);
            c.worker = (uint32_t)(rand() % 4);
            c.sm = (uint32_t)(rand() % 200);
            c.task_class = (uint32_t)(rand() % 5);
            c.task_gen = (uint64_t)(rand() % 3);
            c.req_gen = (uint64_t)(rand() % 8);
            c.step = (uint32_t)(rand() % 10);
            c.dep_class = (uint32_t)(rand() % 3);
            c.tile_x = (uint32_t)(rand() % 4);
            c.tile_y = (uint32_t)(rand() % 4);
            c.comm_gen = rand() % 3 ? rnd64() : 0xc000000000000001ull;
            c.peer_rank = (uint32_t)(rand() % 5);
            c.queue_depth = (uint32_t)(rand() % 8);
            c.t_now = rnd64() % 3000000;
            c.t_start = rnd64() % 3000000;
            c.t_ready = rnd64() % 3000000;
            c.value = rand() % 2 ? rnd64() : (uint64_t)(rand() % 10);
            int want = mks_pred_eval(p, &c, resolve, NULL);
            assert_true(want == 0 || want == 1);
            struct mks_vm_env env = {.insns = insns, .n_insns = n, .insn_limit = 10000,
                                     .ctx = &c, .ctx_len = sizeof(c)};
            uint64_t r0 = 99;
            int rc = mks_vm_run(&env, (uint64_t)(uintptr_t)&c, 0, &r0, NULL);
            if (rc)
                fail_msg("'%s': VM error %s", preds[pi], mks_vm_strerror(rc));
            if ((int)r0 != want)
                fail_msg("'%s': VM says %llu, C says %d", preds[pi], (unsigned long long)r0,
                         want);
            kept += want;
        }
        /* each predicate keeps some contexts and drops some (the test can fail) */
        if (kept == 0 || kept == 3000)
            fail_msg("'%s' kept %d of 3000: not a useful test", preds[pi], kept);
        free(insns);
        mks_pred_free(p);
    }
}

static void test_filter_errors(void **state)
{
    (void)state;
    struct mks_pred *p = NULL;
    struct mks_query_error e;
    assert_int_equal(mks_pred_parse("rank = 1 and time > 5", &p, &e), 0);
    struct mks_insn *insns;
    uint32_t n;
    assert_true(mks_pred_compile_bpf(p, resolve, NULL, &insns, &n, &e) < 0);
    assert_int_equal(e.pos, 13);
    assert_non_null(strstr(e.msg, "'time' is not in the hook context"));
    mks_pred_free(p);
    assert_int_equal(mks_pred_parse("class = nosuch", &p, &e), 0);
    assert_true(mks_pred_compile_bpf(p, resolve, NULL, &insns, &n, &e) < 0);
    assert_int_equal(e.pos, 8);
    assert_non_null(strstr(e.msg, "unknown task class 'nosuch'"));
    mks_pred_free(p);
}

/* ---- rolled-up epochs ------------------------------------------------------- */

static int setup_rolled(void **state)
{
    detail_age_ns = 1000000000ull;
    int rc = setup_store(state);
    detail_age_ns = 0;
    return rc;
}

/* What each query answers before and after the roll-up: equal where the
 * roll-up keeps it exactly (counts, sums, extremes, means, the quantiles
 * of histograms), within the value's power-of-two bucket where a quantile
 * of single values becomes a histogram's estimate. */
static const struct {
    const char *text;
    bool estimate;
} rolled_q[] = {
    {"count(task) by rank, class", false},
    {"sum(run), max(run), mean(queue) by class", false},
    {"p99(run), p50(queue) by class", false},
    {"count(remote_wait), sum(remote_wait), max(remote_wait), min(remote_wait) by peer", false},
    {"mean(remote_wait) by rank", false},
    {"count(step), sum(step), max(step), min(step) by rank", false},
    {"mean(step)", false},
    {"sum(idle), sum(busy) by rank", false},
    {"p50(step), p90(step) by rank", true},
    {"p99(remote_wait) by peer", true},
    {"count(task) by rank where class = attn", false},
};

static void test_rolled_up(void **state)
{
    (void)state;
    /* Steps with times and worker rows on every rank (the store's own
     * summaries carry none): steps 1..6 of 1 + (r + s) % 5 ms. */
    for (uint32_t r = 0; r < NR; r++)
        for (uint32_t e = 1; e <= 6; e++) {
            mks_envelope env;
            Mkscope__V1__EpochSummary sum = MKSCOPE__V1__EPOCH_SUMMARY__INIT;
            Mkscope__V1__StepTime stt = MKSCOPE__V1__STEP_TIME__INIT, *stp = &stt;
            Mkscope__V1__WorkerStat wt = MKSCOPE__V1__WORKER_STAT__INIT, *wtp = &wt;
            stt.step = e, stt.tasks = 4, stt.complete = true;
            stt.t_begin_dev_ns = 1000000000ull * e;
            stt.t_end_dev_ns = stt.t_begin_dev_ns + 1000000ull * (1 + (r + e) % 5) + 17 * e;
            wt.worker = 0, wt.step = e, wt.busy_ns = 1000 * e, wt.idle_ns = 300 + e;
            sum.steps = &stp, sum.n_steps = 1, sum.workers = &wtp, sum.n_workers = 1;
            sum.epoch = NE + e;
            mks_wire_init(&env, "q", r, NE + e);
            recv_ns = 1000000000ull * (NE + e);
            env.body_case = MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY;
            env.epoch_summary = &sum;
            ingest(&env);
        }
    size_t nq = sizeof(rolled_q) / sizeof(rolled_q[0]);
    static double before[sizeof(rolled_q) / sizeof(rolled_q[0])][64];
    size_t nrows[sizeof(rolled_q) / sizeof(rolled_q[0])], nc;
    for (size_t i = 0; i < nq; i++) {
        nrows[i] = run(rolled_q[i].text, 0, before[i], 64, &nc);
        assert_true(nrows[i] > 0);
    }
    double v[64];
    assert_true(run("count(task) where step >= 3", 0, v, 64, &nc) == 1 && v[0] > 0);
    int64_t epochs = 0;
    sqlite3_stmt *s;
    assert_int_equal(sqlite3_prepare_v2(mks_store_db(st), "SELECT COUNT(*) FROM epochs", -1, &s,
                                        NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    epochs = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    assert_int_equal(epochs, NR * (NE + 6));

    /* An hour on, with a second of detail kept: all of it rolls up, each
     * rank's twelve epochs (received within one minute) into one. */
    assert_int_equal(mks_store_retain(st, 3600000000000ull), 0);
    assert_int_equal(sqlite3_prepare_v2(mks_store_db(st),
                                        "SELECT COUNT(*), SUM(compacted = 2) FROM epochs", -1,
                                        &s, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int64(s, 0), NR);
    assert_int_equal(sqlite3_column_int64(s, 1), NR);
    sqlite3_finalize(s);
    struct mks_store_rolled ru;
    assert_int_equal(mks_store_rolled(st, "q", &ru), 0);
    assert_int_equal(ru.epochs, NR);
    assert_int_equal(ru.step_hi, 6);
    assert_true(ru.until_ns == 1000000000ull * (NE + 6));

    for (size_t i = 0; i < nq; i++) {
        double after[64];
        size_t n = run(rolled_q[i].text, 0, after, 64, &nc);
        assert_int_equal(n, nrows[i]);
        for (size_t k = 0; k < n * nc; k++) {
            double b = before[i][k], a = after[k];
            if (!rolled_q[i].estimate || k % nc < (size_t)(strstr(rolled_q[i].text, " by ")
                                                                ? 1
                                                                : 0)) {
                if (!(fabs(a - b) <= 1e-9 * fabs(b)))
                    fail_msg("'%s' column %zu: %g before the roll-up, %g after",
                             rolled_q[i].text, k % nc, b, a);
            } else if (!(a >= b / 2 && a <= b * 2)) {
                fail_msg("'%s' column %zu: %g before the roll-up, estimate %g after",
                         rolled_q[i].text, k % nc, b, a);
            }
        }
    }
    /* No step survives: a step filter reads none of the rolled rows. */
    assert_true(run("count(task) where step >= 3", 0, v, 64, &nc) == 1 && isnan(v[0]));
    assert_int_equal(run("count(task) by step", 0, v, 64, &nc), 1);
    assert_true(isnan(v[0]));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_parse_bounds),
        cmocka_unit_test_setup_teardown(test_count_by_class_where_rank, setup_store,
                                        teardown_store),
        cmocka_unit_test_setup_teardown(test_filters, setup_store, teardown_store),
        cmocka_unit_test_setup_teardown(test_quantiles, setup_store, teardown_store),
        cmocka_unit_test_setup_teardown(test_injection_is_data, setup_store, teardown_store),
        cmocka_unit_test_setup_teardown(test_step_from_generations, setup_store, teardown_store),
        cmocka_unit_test_setup_teardown(test_step_busy_span, setup_store, teardown_store),
        cmocka_unit_test_setup_teardown(test_rolled_up, setup_rolled, teardown_store),
        cmocka_unit_test(test_filter_agrees_with_c),
        cmocka_unit_test(test_filter_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

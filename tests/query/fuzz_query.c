/*
 * Fuzz target: the query language end to end.  The input is a query (first
 * byte 'q') or a predicate (first byte 'p'), the rest its text.
 *   query:     parse; plan; prepare and run the plan's SQL and coverage SQL
 *              on a small store (a plan must always be valid SQL, and run);
 *              an error must be one line with a position inside the text.
 *   predicate: parse; compile to an eBPF filter, which the verifier must
 *              accept, and which must agree with the C evaluator on a few
 *              hook contexts when run in the VM.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "mkscope/query.h"
#include "mkscope/store.h"
#include "mkscope/verifier.h"
#include "mkscope/vm.h"

static struct mks_store *st;

static int64_t resolve(const char *name, void *arg)
{
    (void)arg;
    static const char *const names[] = {"embed", "attn", "mlp"};
    for (int i = 0; i < 3; i++)
        if (!strcmp(names[i], name))
            return i;
    return -1;
}

static void store_init(void)
{
    struct mks_store_opts o = {.sz = sizeof(o), .path = ":memory:"};
    char err[256];
    if (mks_store_open(&o, &st, err, sizeof(err)))
        abort();
    mks_query_register_sql(mks_store_db(st));
    /* a registered rank with one epoch of everything the planner reads */
    const char *sql =
        "INSERT INTO ranks(job, rank, n_ranks, incarnation, registered_ns) VALUES('j', 0, 1, 1, 1);"
        "INSERT INTO task_classes(job, rank, id, name) VALUES('j', 0, 1, 'attn');"
        "INSERT INTO epochs(id, job, rank, incarnation, seq, epoch, t_begin_host, t_end_host,"
        " t_begin_dev, t_end_dev, received_ns) VALUES(1, 'j', 0, 1, 1, 1, 10, 20, 10, 20, 30);"
        "INSERT INTO task_stats(epoch_id, class, step, req_gen, count, sum_run_ns, queue_count,"
        " queue_sum, queue_max, queue_hist, run_count, run_sum, run_max, run_hist)"
        " VALUES(1, 1, 3, 0, 5, 500, 5, 50, 20, x'0000000000000000"
        "0500000000000000', 5, 500, 200, x'000000000000000000000000000000000500000000000000');"
        "INSERT INTO steps(epoch_id, step, t_begin_dev, t_end_dev, tasks, complete) VALUES(1, 3, 10, 20,"
        " 5, 1);"
        "INSERT INTO waits(epoch_id, comm_gen, peer_rank, waiter_class, step, worker, t_begin_dev,"
        " t_end_dev, producer_class) VALUES(1, 77, 1, 1, 3, 0, 12, 15, 2);"
        "INSERT INTO local_waits(epoch_id, class, step, count, sum_ns, max_ns) VALUES(1, 1, 3, 2, 30,"
        " 20);"
        "INSERT INTO workers(epoch_id, worker, step, busy_ns, idle_ns, dep_wait_ns, max_queue_depth,"
        " over_threshold_ns, tasks) VALUES(1, 0, 3, 70, 10, 3, 9, 2, 5);"
        "INSERT INTO coverage(epoch_id, hook, eligible, ran, throttled, lost, prog_gen) VALUES(1, 3,"
        " 10, 9, 1, 0, 1);";
    char *msg = NULL;
    if (sqlite3_exec(mks_store_db(st), sql, NULL, NULL, &msg) != SQLITE_OK) {
        fprintf(stderr, "fuzz_query: the store's seed rows: %s\n", msg);
        abort();
    }
}

static void check_error(const char *text, const struct mks_query_error *e)
{
    if (!e->msg[0] || strchr(e->msg, '\n') || e->pos < 0 || e->pos > (int)strlen(text) ||
        e->len < 1)
        abort(); /* an error says what and where */
    char buf[1024];
    if (mks_query_error_format(text, e, buf, sizeof(buf)))
        abort();
}

static void run_sql(const struct mks_sql_plan *plan, const char *sql)
{
    sqlite3_stmt *s = NULL;
    if (sqlite3_prepare_v2(mks_store_db(st), sql, -1, &s, NULL) != SQLITE_OK)
        abort(); /* the planner wrote SQL that is not SQL */
    if (mks_sql_plan_bind(plan, s))
        abort();
    int rc, rows = 0;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW && rows++ < 1000)
        ;
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        abort(); /* a plan that fails to run */
    sqlite3_finalize(s);
}

static void fuzz_query(const char *text)
{
    struct mks_query *q = NULL;
    struct mks_query_error e;
    if (mks_query_parse(text, &q, &e)) {
        check_error(text, &e);
        return;
    }
    struct mks_sql_plan *plan = NULL;
    if (mks_query_plan(q, "j", 1000000000ull, &plan, &e)) {
        check_error(text, &e);
    } else {
        run_sql(plan, plan->sql);
        if (plan->coverage_sql)
            run_sql(plan, plan->coverage_sql);
        mks_sql_plan_free(plan);
    }
    mks_query_free(q);
}

static void fuzz_pred(const char *text)
{
    struct mks_pred *p = NULL;
    struct mks_query_error e;
    if (mks_pred_parse(text, &p, &e)) {
        check_error(text, &e);
        return;
    }
    struct mks_insn *insns = NULL;
    uint32_t n = 0;
    if (mks_pred_compile_bpf(p, resolve, NULL, &insns, &n, &e)) {
        check_error(text, &e);
        mks_pred_free(p);
        return;
    }
    struct mks_verify_opts vo = {.sz = sizeof(vo), .prog_type = MKS_PROG_OBSERVE,
                                 .abi_version = 1, .hook = -1};
    struct mks_verify_result vr;
    char log[256];
    if (mks_verify(insns, n, &vo, &vr, log, sizeof(log)))
        abort(); /* a compiled filter the verifier refuses */
    for (int k = 0; k < 8; k++) {
        struct mks_hook_ctx c;
        memset(&c, 0, sizeof(c));
        c.abi_version = 1, c.size = sizeof(c);
        c.event = (uint16_t)(k % 11), c.rank = (uint32_t)k % 3, c.task_class = (uint32_t)k % 4;
        c.step = (uint32_t)k, c.worker = (uint32_t)k / 2, c.t_now = 1000u * (uint64_t)k;
        c.t_start = 300, c.t_ready = 100, c.comm_gen = 0xc000000000000000ull + (uint64_t)k;
        c.value = (uint64_t)k << 33, c.queue_depth = (uint32_t)k;
        int want = mks_pred_eval(p, &c, resolve, NULL);
        struct mks_vm_env env = {.insns = insns, .n_insns = n, .insn_limit = 100000,
                                 .ctx = &c, .ctx_len = sizeof(c)};
        uint64_t r0 = 99;
        if (want < 0)
            continue;
        if (mks_vm_run(&env, (uint64_t)(uintptr_t)&c, 0, &r0, NULL) || (int)r0 != want)
            abort(); /* the filter and the evaluator disagree */
    }
    free(insns);
    mks_pred_free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 8192)
        return 0;
    if (!st)
        store_init();
    char *text = malloc(size);
    memcpy(text, data + 1, size - 1);
    text[size - 1] = 0;
    if (data[0] == 'p')
        fuzz_pred(text);
    else
        fuzz_query(text);
    free(text);
    return 0;
}

/*
 * End to end: a real mkscope-collector process on ipc:// sockets in a temp
 * directory, fake agents (C, in this test) registering and sending epoch
 * summaries over nanomsg, and the real mkscope CLI asked for status, query,
 * sql and metrics with -f json.  Every number the CLI shows is checked
 * against totals this test computes from what it sent.
 *
 * usage: test_collector_e2e COLLECTOR_BIN MKSCOPE_BIN
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <nanomsg/nn.h>
#include <nanomsg/reqrep.h>
#include <nanomsg/survey.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "fake_agent.h"
#include "mkscope/commid.h"
#include "mkscope/hook_abi.h"

static const char *collector_bin, *cli_bin;
static char dir[] = "/tmp/mks-e2e-XXXXXX";
static char ingest_url[128], cli_url[128], survey_url[128], db_path[128], log_path[128];
static pid_t collector_pid;

#define N_RANKS   2
#define N_EPOCHS  5
#define N_CLASSES 3
static const char *const class_names[N_CLASSES] = {"embed", "attn", "mlp"};

/* What the test sent, for the expected answers. */
static uint64_t sent_count[N_RANKS][N_CLASSES], sent_run_sum[N_RANKS][N_CLASSES];
static uint64_t sent_run_b[N_CLASSES][MKS_WIRE_MAX_HIST_BUCKETS];
static uint64_t cov_elig[N_RANKS], cov_ran[N_RANKS];
static double step_ns[N_RANKS * N_EPOCHS];
static int n_step_ns;

static int start_collector(void)
{
    collector_pid = fork();
    if (collector_pid == 0) {
        int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) {
            dup2(fd, 2);
            close(fd);
        }
        execl(collector_bin, collector_bin, "--ingest", ingest_url, "--cli", cli_url, "--survey",
              survey_url, "--metrics", "127.0.0.1:0", "--db", db_path, "--request-timeout",
              "3000", (char *)NULL);
        _exit(127);
    }
    return collector_pid > 0 ? 0 : -1;
}

/* Run the CLI; returns its exit status and its stdout (malloc'ed). */
static int run_cli(char **out, const char *fmt, ...)
{
    char args[2048], cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof(args), fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof(cmd), "%s --collector %s --timeout 5000 %s 2>%s/cli.err", cli_bin,
             cli_url, args, dir);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    size_t n;
    while ((n = fread(buf + len, 1, cap - len - 1, p)) > 0) {
        len += n;
        if (len + 1 >= cap)
            buf = realloc(buf, cap *= 2);
    }
    buf[len] = 0;
    int st = pclose(p);
    if (out)
        *out = buf;
    else
        free(buf);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char *cli_err(void)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/cli.err", dir);
    FILE *f = fopen(path, "r");
    static char buf[4096];
    buf[0] = 0;
    if (f) {
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        buf[n] = 0;
        fclose(f);
    }
    return buf;
}

static json_t *cli_json(const char *fmt, const char *arg)
{
    char *out;
    int rc = run_cli(&out, fmt, arg);
    if (rc)
        fail_msg("mkscope %s exited %d: %s", arg, rc, cli_err());
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    if (!j)
        fail_msg("not JSON (%s): %s", je.text, out);
    free(out);
    return j;
}

static int setup(void **state)
{
    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(ingest_url, sizeof(ingest_url), "ipc://%s/ingest", dir);
    snprintf(cli_url, sizeof(cli_url), "ipc://%s/cli", dir);
    snprintf(survey_url, sizeof(survey_url), "ipc://%s/survey", dir);
    snprintf(db_path, sizeof(db_path), "%s/store.db", dir);
    snprintf(log_path, sizeof(log_path), "%s/collector.log", dir);
    return start_collector();
}

static int teardown(void **state)
{
    (void)state;
    if (collector_pid > 0) {
        kill(collector_pid, SIGTERM);
        int st;
        waitpid(collector_pid, &st, 0);
    }
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        return -1;
    return 0;
}

static void test_ingest_and_status(void **state)
{
    (void)state;
    int s = nn_socket(AF_SP, NN_REQ);
    assert_true(s >= 0);
    int to = 5000;
    nn_setsockopt(s, NN_SOL_SOCKET, NN_RCVTIMEO, &to, sizeof(to));
    assert_true(nn_connect(s, ingest_url) >= 0);
    srand(7);
    for (uint32_t r = 0; r < N_RANKS; r++) {
        mks_envelope *rep = NULL;
        assert_int_equal(fa_send_register(s, "e2e", r, N_RANKS, 100 + r, class_names, N_CLASSES,
                                          &rep),
                         0);
        assert_int_equal(rep->body_case, MKSCOPE__V1__ENVELOPE__BODY_REGISTER_ACK);
        assert_true(rep->register_ack->accepted);
        assert_int_equal(rep->register_ack->stored_seq, 0);
        mks_wire_free(rep);
        for (uint64_t e = 1; e <= N_EPOCHS; e++) {
            struct fa_summary *sum = calloc(1, sizeof(*sum));
            sum->epoch = e;
            for (uint32_t c = 0; c < N_CLASSES; c++) {
                struct fa_taskstat *t = &sum->ts[sum->n_ts++];
                t->cls = c;
                t->step = (uint32_t)e;
                for (int k = 0; k < 20; k++) {
                    /* run time spread over a few power-of-two buckets */
                    int b = 10 + (int)c * 2 + rand() % 4;
                    uint64_t v = (1ull << (b - 1)) + (uint64_t)(rand() % (1 << (b - 1)));
                    t->run_b[b]++;
                    t->count++;
                    t->sum_run += v;
                    t->queue_b[5]++;
                    if (v > t->run_max)
                        t->run_max = v;
                }
                sent_count[r][c] += t->count;
                sent_run_sum[r][c] += t->sum_run;
                for (unsigned b = 0; b < MKS_WIRE_MAX_HIST_BUCKETS; b++)
                    sent_run_b[c][b] += t->run_b[b];
            }
            uint64_t dur = 1000000 + (uint64_t)(rand() % 500000);
            sum->steps[0].step = (uint32_t)e;
            sum->steps[0].t_begin = e * 10000000;
            sum->steps[0].t_end = e * 10000000 + dur;
            sum->n_steps = 1;
            step_ns[n_step_ns++] = (double)dur;
            sum->cov_eligible = 100 + e;
            sum->cov_ran = 90 + e;
            cov_elig[r] += sum->cov_eligible;
            cov_ran[r] += sum->cov_ran;
            rep = NULL;
            assert_int_equal(fa_send_summary(s, "e2e", r, 100 + r, e, sum, &rep), 0);
            assert_int_equal(rep->body_case, MKSCOPE__V1__ENVELOPE__BODY_ACK);
            assert_int_equal(rep->ack->up_to_seq, e);
            mks_wire_free(rep);
            free(sum);
        }
        /* A replay after a "reconnect": acked, not stored twice. */
        struct fa_summary *dup = calloc(1, sizeof(*dup));
        dup->epoch = 3;
        dup->n_ts = 1;
        dup->ts[0].count = 1000;
        rep = NULL;
        assert_int_equal(fa_send_summary(s, "e2e", r, 100 + r, 3, dup, &rep), 0);
        assert_int_equal(rep->ack->up_to_seq, N_EPOCHS);
        mks_wire_free(rep);
        free(dup);
        /* Re-registering reports what is stored so the agent can skip it. */
        rep = NULL;
        assert_int_equal(fa_send_register(s, "e2e", r, N_RANKS, 100 + r, class_names, N_CLASSES,
                                          &rep),
                         0);
        assert_int_equal(rep->register_ack->stored_seq, N_EPOCHS);
        mks_wire_free(rep);
        rep = NULL;
        assert_int_equal(fa_send_heartbeat(s, "e2e", r, 100 + r, N_EPOCHS, &rep), 0);
        assert_int_equal(rep->body_case, MKSCOPE__V1__ENVELOPE__BODY_ACK);
        mks_wire_free(rep);
    }
    /* Garbage on the ingest socket: rejected with a reason, collector lives on. */
    assert_int_equal(nn_send(s, "\xff\xff\xff", 3, 0), 3);
    void *msg;
    int n = nn_recv(s, &msg, NN_MSG, 0);
    assert_true(n > 0);
    mks_envelope *rej = NULL;
    char err[256];
    assert_int_equal(mks_wire_decode(msg, (size_t)n, NULL, &rej, err, sizeof(err)), 0);
    nn_freemsg(msg);
    assert_int_equal(rej->body_case, MKSCOPE__V1__ENVELOPE__BODY_REGISTER_ACK);
    assert_false(rej->register_ack->accepted);
    assert_true(strlen(rej->register_ack->reason) > 0);
    mks_wire_free(rej);
    nn_close(s);

    json_t *st = cli_json("status -f %s", "json");
    assert_string_equal(json_string_value(json_object_get(st, "job")), "e2e");
    assert_int_equal(json_integer_value(json_object_get(st, "n_ranks")), N_RANKS);
    assert_int_equal(json_integer_value(json_object_get(st, "epochs")), N_RANKS * N_EPOCHS);
    json_t *ranks = json_object_get(st, "ranks");
    assert_int_equal(json_array_size(ranks), N_RANKS);
    for (uint32_t r = 0; r < N_RANKS; r++) {
        json_t *jr = json_array_get(ranks, r);
        uint64_t tasks = 0;
        for (int c = 0; c < N_CLASSES; c++)
            tasks += sent_count[r][c];
        assert_int_equal(json_integer_value(json_object_get(jr, "rank")), r);
        assert_int_equal(json_integer_value(json_object_get(jr, "epochs")), N_EPOCHS);
        assert_int_equal(json_integer_value(json_object_get(jr, "tasks")), tasks);
        assert_string_equal(json_string_value(json_object_get(jr, "agent")), "up");
        json_t *cov = json_object_get(jr, "coverage");
        assert_int_equal(json_integer_value(json_object_get(cov, "eligible")), cov_elig[r]);
        assert_int_equal(json_integer_value(json_object_get(cov, "ran")), cov_ran[r]);
        assert_true(fabs(json_real_value(json_object_get(cov, "ratio")) -
                         (double)cov_ran[r] / (double)cov_elig[r]) < 1e-9);
    }
    json_decref(st);

    /* Text output names the job and every rank. */
    char *text;
    assert_int_equal(run_cli(&text, "status"), 0);
    assert_non_null(strstr(text, "job e2e"));
    assert_non_null(strstr(text, "RANK"));
    free(text);
}

static void test_query(void **state)
{
    (void)state;
    json_t *q = cli_json("query 'count(task), sum(run), mean(run), p90(run) by class where rank = 1'"
                         " -f %s",
                         "json");
    json_t *rows = json_object_get(q, "rows");
    assert_int_equal(json_array_size(rows), N_CLASSES);
    for (size_t i = 0; i < N_CLASSES; i++) {
        json_t *row = json_array_get(rows, i);
        const char *name = json_string_value(json_object_get(row, "class"));
        int c = -1;
        for (int k = 0; k < N_CLASSES; k++)
            if (!strcmp(class_names[k], name))
                c = k;
        assert_true(c >= 0);
        assert_int_equal(json_integer_value(json_object_get(row, "count(task)")), sent_count[1][c]);
        assert_int_equal(json_integer_value(json_object_get(row, "sum(run)")), sent_run_sum[1][c]);
        assert_true(fabs(json_real_value(json_object_get(row, "mean(run)")) -
                         (double)sent_run_sum[1][c] / (double)sent_count[1][c]) < 1e-6);
    }
    json_t *cov = json_object_get(q, "coverage");
    assert_int_equal(json_integer_value(json_object_get(cov, "epochs")), N_EPOCHS);
    assert_int_equal(json_integer_value(json_object_get(cov, "eligible")), cov_elig[1]);
    json_decref(q);

    /* Exact quantile of step durations across both ranks (nearest rank). */
    q = cli_json("query 'p50(step), count(step), max(step)' -f %s", "json");
    json_t *row = json_array_get(json_object_get(q, "rows"), 0);
    double sorted[N_RANKS * N_EPOCHS];
    memcpy(sorted, step_ns, sizeof(sorted));
    for (int i = 0; i < n_step_ns; i++)
        for (int j = i + 1; j < n_step_ns; j++)
            if (sorted[j] < sorted[i]) {
                double t = sorted[i];
                sorted[i] = sorted[j];
                sorted[j] = t;
            }
    size_t k = (size_t)ceil(0.5 * n_step_ns);
    assert_true(fabs(json_number_value(json_object_get(row, "p50(step)")) - sorted[k - 1]) < 1e-6);
    assert_int_equal(json_integer_value(json_object_get(row, "count(step)")), n_step_ns);
    assert_true(fabs(json_number_value(json_object_get(row, "max(step)")) -
                     sorted[n_step_ns - 1]) < 1e-6);
    json_decref(q);

    /* Class by name in the filter. */
    q = cli_json("query 'count(task) by rank where class = \"attn\"' -f %s", "json");
    rows = json_object_get(q, "rows");
    assert_int_equal(json_array_size(rows), N_RANKS);
    for (size_t r = 0; r < N_RANKS; r++)
        assert_int_equal(json_integer_value(json_object_get(json_array_get(rows, r),
                                                            "count(task)")),
                         sent_count[r][1]);
    json_decref(q);

    /* Query errors: exit 2 and a caret under the offending token. */
    assert_int_equal(run_cli(NULL, "query 'count(task) by clas'"), 2);
    const char *e = cli_err();
    assert_non_null(strstr(e, "cannot group by 'clas'"));
    assert_non_null(strstr(e, "^^^^"));
}

static void test_sql_and_errors(void **state)
{
    (void)state;
    json_t *j = cli_json("sql 'SELECT rank, COUNT(*) AS n FROM epochs GROUP BY rank' -f %s",
                         "json");
    json_t *rows = json_object_get(j, "rows");
    assert_int_equal(json_array_size(rows), N_RANKS);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(rows, 0), "n")), N_EPOCHS);
    json_decref(j);
    /* The store is read-only to the CLI. */
    assert_int_equal(run_cli(NULL, "sql 'DELETE FROM epochs'"), 2);
    assert_non_null(strstr(cli_err(), "read-only"));
    assert_int_equal(run_cli(NULL, "sql 'SELECT 1; DELETE FROM epochs'"), 2);
    /* Nothing was deleted. */
    j = cli_json("sql 'SELECT COUNT(*) AS n FROM epochs' -f %s", "json");
    assert_int_equal(json_integer_value(json_object_get(json_array_get(json_object_get(j, "rows"),
                                                                       0),
                                                        "n")),
                     N_RANKS * N_EPOCHS);
    json_decref(j);
    /* Usage errors and an unreachable collector. */
    assert_int_equal(run_cli(NULL, "nonsense"), 2);
    assert_int_equal(run_cli(NULL, "status -f yaml"), 2);
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "%s --collector ipc://%s/nobody --timeout 300 status 2>/dev/null",
             cli_bin, dir);
    int st = system(cmd);
    assert_int_equal(WEXITSTATUS(st), 3);
    /* Programs from heartbeats, metrics text. */
    j = cli_json("programs -f %s", "json");
    assert_int_equal(json_array_size(json_object_get(j, "programs")), N_RANKS);
    json_decref(j);
    char *text;
    assert_int_equal(run_cli(&text, "metrics"), 0);
    char want[128];
    snprintf(want, sizeof(want), "mkscope_summaries_received_total{job=\"e2e\",rank=\"1\"} %d",
             N_EPOCHS);
    assert_non_null(strstr(text, want));
    assert_non_null(strstr(text, "mkscope_summaries_duplicate_total{job=\"e2e\",rank=\"0\"} 1"));
    snprintf(want, sizeof(want), "mkscope_tasks_total{job=\"e2e\",rank=\"0\",class=\"mlp\"} %llu",
             (unsigned long long)sent_count[0][2]);
    assert_non_null(strstr(text, want));
    free(text);
    /* Diagnosis of a run whose steps are all alike: no fault named. */
    assert_int_equal(run_cli(&text, "diagnose -f json"), 0);
    j = json_loads(text, 0, NULL);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "cause")), "none");
    json_decref(j);
    free(text);
}

static int ingest_sock(void)
{
    int s = nn_socket(AF_SP, NN_REQ);
    assert_true(s >= 0);
    int to = 5000;
    nn_setsockopt(s, NN_SOL_SOCKET, NN_RCVTIMEO, &to, sizeof(to));
    assert_true(nn_connect(s, ingest_url) >= 0);
    return s;
}

static mks_envelope *send_raw(int s, uint32_t rank, uint64_t esc, Mkscope__V1__RawEvent **evs,
                              size_t n)
{
    mks_envelope env, *rep = NULL;
    Mkscope__V1__RawEventBatch b = MKSCOPE__V1__RAW_EVENT_BATCH__INIT;
    b.escalation_id = esc;
    b.events = evs;
    b.n_events = n;
    b.last = 1;
    mks_wire_init(&env, "e2e", rank, 0);
    env.incarnation = 100 + rank;
    env.body_case = MKSCOPE__V1__ENVELOPE__BODY_RAW_EVENT_BATCH;
    env.raw_event_batch = &b;
    uint8_t *buf;
    size_t len;
    char err[256];
    assert_int_equal(mks_wire_encode(&env, NULL, &buf, &len, err, sizeof(err)), 0);
    assert_int_equal(nn_send(s, buf, len, 0), (int)len);
    free(buf);
    void *msg;
    int got = nn_recv(s, &msg, NN_MSG, 0);
    assert_true(got > 0);
    assert_int_equal(mks_wire_decode(msg, (size_t)got, NULL, &rep, err, sizeof(err)), 0);
    nn_freemsg(msg);
    return rep;
}

static void test_trigger_and_trace(void **state)
{
    (void)state;
    char *out;
    /* A bad SLO is refused with the reason. */
    assert_int_equal(run_cli(NULL, "trigger add 'max(stepp) > 1ms'"), 2);
    assert_non_null(strstr(cli_err(), "unknown metric 'stepp'"));
    /* A negative threshold fired on every epoch, NaN and infinity never. */
    static const char *const bad[] = {"-2ms", "nan", "inf", "1e400s", "-0.5"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char cmd[96];
        snprintf(cmd, sizeof(cmd), "trigger add 'p99(step) > %s'", bad[i]);
        assert_int_equal(run_cli(NULL, cmd), 2);
        assert_non_null(strstr(cli_err(), "is not a value (a finite number >= 0"));
    }
    assert_int_equal(run_cli(&out, "trigger add 'max(step) > 1700us' -f json"), 0);
    json_t *j = json_loads(out, 0, NULL);
    free(out);
    assert_non_null(j);
    json_int_t tid = json_integer_value(json_object_get(j, "id"));
    assert_true(tid > 0);
    json_decref(j);

    /* Rank 0 reports a 2 ms step, most of it waiting on rank 1: the trigger
     * fires on rank 0 only, and the escalation covers rank 1 as well, the
     * other end of the wait. */
    int s = ingest_sock();
    struct fa_summary *sum = calloc(1, sizeof(*sum));
    sum->epoch = N_EPOCHS + 1;
    sum->steps[0].step = N_EPOCHS + 1;
    sum->steps[0].t_begin = 100000000;
    sum->steps[0].t_end = 102000000;
    sum->n_steps = 1;
    sum->waits[0] = (struct fa_wait){.comm_gen = mks_commid_for_transfer(1, 1, 0, 7, 0, 0),
                                     .peer = 1, .step = N_EPOCHS + 1, .worker = 2,
                                     .t_begin = 100100000, .t_end = 101900000};
    sum->n_waits = 1;
    mks_envelope *rep = NULL;
    assert_int_equal(fa_send_summary(s, "e2e", 0, 100, N_EPOCHS + 1, sum, &rep), 0);
    mks_wire_free(rep);
    free(sum);
    json_t *trig = NULL;
    for (int i = 0; i < 60; i++) {
        trig = cli_json("trigger list -f %s", "json");
        json_t *t = json_array_get(json_object_get(trig, "triggers"), 0);
        if (json_integer_value(json_object_get(t, "fired")) > 0)
            break;
        json_decref(trig);
        trig = NULL;
        usleep(100000);
    }
    assert_non_null(trig);
    json_t *t0 = json_array_get(json_object_get(trig, "triggers"), 0);
    assert_int_equal(json_integer_value(json_object_get(t0, "fired")), 1);
    assert_true(fabs(json_real_value(json_object_get(t0, "last_value")) - 2000000.0) < 1);
    json_decref(trig);

    /* The next Ack to rank 0 carries the escalation with a compiled filter. */
    rep = NULL;
    assert_int_equal(fa_send_heartbeat(s, "e2e", 0, 100, N_EPOCHS + 1, &rep), 0);
    assert_int_equal(rep->body_case, MKSCOPE__V1__ENVELOPE__BODY_ACK);
    assert_int_equal(rep->ack->n_commands, 1);
    Mkscope__V1__Command *cmd = rep->ack->commands[0];
    assert_int_equal(cmd->kind_case, MKSCOPE__V1__COMMAND__KIND_ESCALATE);
    assert_string_equal(cmd->escalate->predicate, "rank = 0");
    assert_true(cmd->escalate->n_filter_insns >= 4);
    assert_true(cmd->escalate->duration_ms > 0);
    uint64_t esc = cmd->escalate->escalation_id;
    mks_wire_free(rep);
    /* Rank 1, whose release rank 0 waited for, gets the same escalation
     * with no filter, for its waits, releases and transfers. */
    rep = NULL;
    assert_int_equal(fa_send_heartbeat(s, "e2e", 1, 101, N_EPOCHS, &rep), 0);
    assert_int_equal(rep->ack->n_commands, 1);
    cmd = rep->ack->commands[0];
    assert_int_equal(cmd->kind_case, MKSCOPE__V1__COMMAND__KIND_ESCALATE);
    assert_int_equal(cmd->escalate->escalation_id, esc);
    assert_string_equal(cmd->escalate->predicate, "");
    assert_int_equal(cmd->escalate->n_filter_insns, 0);
    assert_int_equal(cmd->escalate->n_hooks, 5);
    assert_int_equal(cmd->escalate->hooks[0], MKS_EV_DEP_WAIT_BEGIN);
    mks_wire_free(rep);

    /* Raw events of the escalation: rank 1 releases G, rank 0 waits on it. */
    uint64_t G = mks_commid_for_transfer(1, 1, 0, 7, 0, 0);
    Mkscope__V1__RawEvent e[5], *ep[5];
    for (int i = 0; i < 5; i++) {
        mkscope__v1__raw_event__init(&e[i]);
        ep[i] = &e[i];
    }
    e[0].event = 3, e[0].worker = 1, e[0].task_class = 1, e[0].t_start = 1000, e[0].t_now = 5000;
    e[1].event = 4, e[1].worker = 2, e[1].comm_gen = G, e[1].peer_rank = 1, e[1].t_now = 6000;
    e[2].event = 5, e[2].worker = 2, e[2].comm_gen = G, e[2].peer_rank = 1, e[2].t_now = 9000;
    rep = send_raw(s, 0, esc, ep, 3);
    mks_wire_free(rep);
    e[3].event = 7, e[3].worker = 0, e[3].comm_gen = G, e[3].t_now = 7000;
    e[4].event = 8, e[4].worker = 0, e[4].comm_gen = G, e[4].t_now = 8500;
    rep = send_raw(s, 1, esc, ep + 3, 2);
    mks_wire_free(rep);
    nn_close(s);

    char path[256];
    snprintf(path, sizeof(path), "%s/trace.json", dir);
    char args[512];
    snprintf(args, sizeof(args), "trace export -o %s", path);
    assert_int_equal(run_cli(NULL, "%s", args), 0);
    json_error_t je;
    json_t *tr = json_load_file(path, 0, &je);
    if (!tr)
        fail_msg("trace is not JSON: %s", je.text);
    /* One trace of the escalation's two ranks, both complete. */
    const json_t *od = json_object_get(tr, "otherData");
    assert_int_equal(json_array_size(json_object_get(od, "ranks_asked")), 2);
    assert_int_equal(json_array_size(json_object_get(od, "ranks_done")), 2);
    json_t *evs = json_object_get(tr, "traceEvents");
    int tasks = 0, waits = 0, xfers = 0, fs = 0, ff = 0, procs = 0;
    const char *sid = NULL, *fid = NULL;
    size_t i;
    json_t *ev;
    json_array_foreach(evs, i, ev)
    {
        const char *ph = json_string_value(json_object_get(ev, "ph"));
        const char *cat = json_string_value(json_object_get(ev, "cat"));
        const char *name = json_string_value(json_object_get(ev, "name"));
        assert_non_null(ph);
        if (!strcmp(ph, "X") && !strcmp(cat, "task")) {
            tasks++;
            assert_string_equal(name, "attn");
            assert_true(fabs(json_real_value(json_object_get(ev, "dur")) - 4.0) < 1e-9);
        } else if (!strcmp(ph, "X") && !strcmp(cat, "wait")) {
            waits++;
            assert_true(fabs(json_real_value(json_object_get(ev, "dur")) - 3.0) < 1e-9);
        } else if (!strcmp(ph, "X") && !strcmp(cat, "comm")) {
            xfers++;
        } else if (!strcmp(ph, "s")) {
            fs++;
            sid = json_string_value(json_object_get(ev, "id"));
            assert_int_equal(json_integer_value(json_object_get(ev, "pid")), 1);
        } else if (!strcmp(ph, "f")) {
            ff++;
            fid = json_string_value(json_object_get(ev, "id"));
            assert_int_equal(json_integer_value(json_object_get(ev, "pid")), 0);
        } else if (!strcmp(ph, "M") && !strcmp(name, "process_name")) {
            procs++;
        }
    }
    assert_int_equal(tasks, 1);
    assert_int_equal(waits, 1);
    assert_int_equal(xfers, 1);
    assert_int_equal(fs, 1);
    assert_int_equal(ff, 1);
    assert_string_equal(sid, fid);
    assert_int_equal(procs, 2);
    json_decref(tr);

    assert_int_equal(run_cli(NULL, "trigger rm 999"), 4);
    char rm[64];
    snprintf(rm, sizeof(rm), "trigger rm %lld", (long long)tid);
    assert_int_equal(run_cli(NULL, "%s", rm), 0);
}

/* A trigger with a probe: its probe is checked when it is added, and a
 * firing queues that probe (compiled for the job's classes, for its
 * window) to the rank that crossed instead of an escalation. */
static void test_trigger_probe(void **state)
{
    (void)state;
    char *out;
    assert_int_equal(run_cli(NULL, "trigger add 'max(step) > 1ms' --probe-for 5s"), 2);
    assert_non_null(strstr(cli_err(), "give both"));
    assert_int_equal(run_cli(NULL, "trigger add 'max(step) > 1ms' --probe 'count() by clas'"), 2);
    assert_non_null(strstr(cli_err(), "cannot group by 'clas'"));
    assert_int_equal(run_cli(NULL, "trigger add 'max(step) > 1ms' --probe ''"), 2);
    assert_int_equal(run_cli(&out, "trigger add 'max(step) > 1700us' --probe 'count() by class"
                                   " where event = task_end' --probe-for 3s -f json"),
                     0);
    json_t *j = json_loads(out, 0, NULL);
    free(out);
    assert_non_null(j);
    json_int_t tid = json_integer_value(json_object_get(j, "id"));
    assert_string_equal(json_string_value(json_object_get(j, "probe")),
                        "count() by class where event = task_end");
    json_decref(j);

    int s = ingest_sock();
    struct fa_summary *sum = calloc(1, sizeof(*sum));
    sum->epoch = N_EPOCHS + 3;
    sum->steps[0].step = N_EPOCHS + 3;
    sum->steps[0].t_begin = 200000000;
    sum->steps[0].t_end = 202500000;
    sum->n_steps = 1;
    mks_envelope *rep = NULL;
    assert_int_equal(fa_send_summary(s, "e2e", 0, 100, N_EPOCHS + 3, sum, &rep), 0);
    mks_wire_free(rep);
    free(sum);
    json_t *t = NULL;
    for (int i = 0; i < 60 && !t; i++) {
        json_t *trig = cli_json("trigger list -f %s", "json");
        size_t k;
        json_t *x;
        json_array_foreach(json_object_get(trig, "triggers"), k, x)
            if (json_integer_value(json_object_get(x, "id")) == tid &&
                json_integer_value(json_object_get(x, "probes")) > 0)
                t = json_incref(x);
        json_decref(trig);
        if (!t)
            usleep(100000);
    }
    assert_non_null(t);
    assert_int_equal(json_integer_value(json_object_get(t, "probes")), 1);
    assert_int_equal(json_integer_value(json_object_get(t, "escalations")), 0);
    assert_true(json_is_null(json_object_get(t, "probe_error")));
    uint64_t pid = strtoull(json_string_value(json_object_get(t, "last_probe")), NULL, 10);
    assert_true(pid > 0);
    json_decref(t);

    /* rank 0's next Ack carries the probe, not an escalation */
    rep = NULL;
    assert_int_equal(fa_send_heartbeat(s, "e2e", 0, 100, N_EPOCHS + 3, &rep), 0);
    assert_int_equal(rep->body_case, MKSCOPE__V1__ENVELOPE__BODY_ACK);
    assert_int_equal(rep->ack->n_commands, 1);
    Mkscope__V1__Command *cmd = rep->ack->commands[0];
    assert_int_equal(cmd->kind_case, MKSCOPE__V1__COMMAND__KIND_PROBE);
    assert_int_equal(cmd->probe->probe_id, pid);
    assert_int_equal(cmd->probe->duration_ms, 3000);
    assert_string_equal(cmd->probe->text, "count() by class where event = task_end");
    assert_int_equal(cmd->probe->n_programs, 1);
    assert_int_equal(cmd->probe->programs[0]->hook, MKS_EV_TASK_END);
    mks_wire_free(rep);
    /* rank 1 did not cross and waited on no one: nothing for it */
    rep = NULL;
    assert_int_equal(fa_send_heartbeat(s, "e2e", 1, 101, N_EPOCHS + 1, &rep), 0);
    assert_int_equal(rep->ack->n_commands, 0);
    mks_wire_free(rep);
    nn_close(s);
    char rm[64];
    snprintf(rm, sizeof(rm), "trigger rm %lld", (long long)tid);
    assert_int_equal(run_cli(NULL, "%s", rm), 0);
}

/* mkscope maps of a map no attach of this collector describes: the entry in
 * hex, and a note that says why; the errors of a bad PROG/MAP. */
static void test_maps_without_types(void **state)
{
    (void)state;
    int s = ingest_sock();
    struct fa_summary *sum = calloc(1, sizeof(*sum));
    sum->epoch = N_EPOCHS + 4;
    sum->map_prog = "mine/count";
    sum->map_name = "hits";
    sum->map_key[0] = 7;
    sum->map_key_len = 4;
    sum->map_value[0] = 0x2a;
    sum->map_value_len = 8;
    mks_envelope *rep = NULL;
    assert_int_equal(fa_send_summary(s, "e2e", 1, 101, N_EPOCHS + 4, sum, &rep), 0);
    mks_wire_free(rep);
    free(sum);
    nn_close(s);
    json_t *m = NULL;
    for (int i = 0; i < 50 && !m; i++) {
        char *out;
        if (run_cli(&out, "maps mine/hits -f json") == 0)
            m = json_loads(out, 0, NULL);
        free(out);
        if (!m)
            usleep(100000);
    }
    assert_non_null(m);
    assert_false(json_is_true(json_object_get(m, "decoded")));
    assert_non_null(strstr(json_string_value(json_object_get(m, "note")), "shown in hex"));
    json_t *r = json_array_get(json_object_get(m, "rows"), 0);
    assert_int_equal(json_integer_value(json_object_get(r, "rank")), 1);
    assert_string_equal(json_string_value(json_object_get(r, "key")), "0x07000000");
    assert_string_equal(json_string_value(json_object_get(r, "value")), "0x2a00000000000000");
    json_decref(m);
    /* the program by its full name too; a map it has no dump of; bad forms */
    assert_int_equal(run_cli(NULL, "maps mine/count/hits"), 0);
    assert_int_equal(run_cli(NULL, "maps mine/misses"), 4);
    assert_non_null(strstr(cli_err(), "no dump of mine/misses"));
    assert_int_equal(run_cli(NULL, "maps nosuch/hits"), 4);
    assert_non_null(strstr(cli_err(), "no program 'nosuch'"));
    assert_non_null(strstr(cli_err(), "mine/count"));
    assert_int_equal(run_cli(NULL, "maps hits"), 2);
    assert_int_equal(run_cli(NULL, "maps mine/"), 2);
}

/* The metrics port the collector logged ("metrics on http://H:P/metrics"). */
static int metrics_port(void)
{
    for (int tries = 0; tries < 50; tries++) {
        FILE *f = fopen(log_path, "r");
        char line[512];
        while (f && fgets(line, sizeof(line), f)) {
            const char *m = strstr(line, "metrics on http://127.0.0.1:");
            if (m)
                return fclose(f), atoi(m + strlen("metrics on http://127.0.0.1:"));
        }
        if (f)
            fclose(f);
        usleep(100000);
    }
    return -1;
}

static char *http_get(int port, const char *path)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(0x7f000001)};
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    char req[256];
    int n = snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: x\r\n\r\n", path);
    assert_int_equal(write(fd, req, (size_t)n), n);
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    ssize_t r;
    while ((r = read(fd, buf + len, cap - len - 1)) > 0) {
        len += (size_t)r;
        if (len + 1 >= cap)
            buf = realloc(buf, cap *= 2);
    }
    buf[len] = 0;
    close(fd);
    return buf;
}

/* The value of the series named exactly `series` (name and labels) in a
 * Prometheus exposition, or -1 when it is not there. */
static double series_value(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (!strncmp(l, series, n) && l[n] == ' ')
            return strtod(l + n + 1, NULL);
    return -1;
}

static void test_metrics_http(void **state)
{
    (void)state;
    int port = metrics_port();
    assert_true(port > 0);
    char *r = http_get(port, "/metrics");
    assert_non_null(strstr(r, "200 OK"));
    assert_non_null(strstr(r, "text/plain"));
    char want[128];
    /* rank 1: the trigger test sent rank 0 one more */
    snprintf(want, sizeof(want), "mkscope_summaries_received_total{job=\"e2e\",rank=\"1\"} %d",
             N_EPOCHS);
    assert_non_null(strstr(r, want));
    assert_non_null(strstr(r, "mkscope_coverage_ratio{job=\"e2e\",rank=\"1\",hook=\"task_end\"}"));
    /* Histograms: one step per summary (the replay not counted twice), the
     * run times of every task with the sum sent, cumulative buckets ending
     * at the count; the remote wait rank 0 reported on rank 1 (1.8 ms:
     * below 2^21 ns, above 2^20). */
    assert_int_equal(series_value(r, "mkscope_step_duration_seconds_count{job=\"e2e\",rank=\"1\"}"),
                     N_EPOCHS);
    assert_int_equal(series_value(r, "mkscope_step_duration_seconds_count{job=\"e2e\",rank=\"0\"}"),
                     N_EPOCHS + 1);
    for (uint32_t rk = 0; rk < N_RANKS; rk++) {
        for (uint32_t c = 0; c < N_CLASSES; c++) {
            char lb[128], series[256];
            snprintf(lb, sizeof(lb), "job=\"e2e\",rank=\"%u\",class=\"%s\"", rk, class_names[c]);
            snprintf(series, sizeof(series), "mkscope_task_run_seconds_count{%s}", lb);
            assert_int_equal(series_value(r, series), sent_count[rk][c]);
            snprintf(series, sizeof(series), "mkscope_task_run_seconds_sum{%s}", lb);
            assert_true(fabs(series_value(r, series) - (double)sent_run_sum[rk][c] / 1e9) <
                        1e-9 * (double)sent_run_sum[rk][c]);
            snprintf(series, sizeof(series), "mkscope_task_run_seconds_bucket{%s,le=\"+Inf\"}", lb);
            assert_int_equal(series_value(r, series), sent_count[rk][c]);
            double prev = 0;
            for (int k = 10; k <= 30; k++) {
                snprintf(series, sizeof(series), "mkscope_task_run_seconds_bucket{%s,le=\"%.9g\"}",
                         lb, (double)(1ull << k) / 1e9);
                double v = series_value(r, series);
                assert_true(v >= prev);
                prev = v;
            }
            snprintf(series, sizeof(series), "mkscope_tasks_total{%s}", lb);
            assert_int_equal(series_value(r, series), sent_count[rk][c]);
        }
        char series[160];
        snprintf(series, sizeof(series),
                 "mkscope_events_eligible_total{job=\"e2e\",rank=\"%u\",hook=\"task_end\"}", rk);
        assert_int_equal(series_value(r, series), cov_elig[rk]);
        snprintf(series, sizeof(series),
                 "mkscope_events_ran_total{job=\"e2e\",rank=\"%u\",hook=\"task_end\"}", rk);
        assert_int_equal(series_value(r, series), cov_ran[rk]);
    }
    const char *w = "mkscope_remote_wait_seconds_bucket{job=\"e2e\",rank=\"0\",peer=\"1\",le=";
    char series[200];
    snprintf(series, sizeof(series), "%s\"%.9g\"}", w, (double)(1ull << 20) / 1e9);
    assert_int_equal(series_value(r, series), 0);
    snprintf(series, sizeof(series), "%s\"%.9g\"}", w, (double)(1ull << 21) / 1e9);
    assert_int_equal(series_value(r, series), 1);
    assert_true(fabs(series_value(r, "mkscope_remote_wait_seconds_sum{job=\"e2e\",rank=\"0\",peer=\"1\"}") -
                     1.8e-3) < 1e-12);
    /* The trigger fired on rank 0 once and escalated ranks 0 and 1. */
    assert_int_equal(series_value(r, "mkscope_trigger_firings_total{job=\"e2e\",trigger=\"1\"}"), 1);
    assert_int_equal(series_value(r, "mkscope_escalations_total{job=\"e2e\",trigger=\"1\"}"), 1);
    assert_int_equal(series_value(r, "mkscope_escalation_ranks_total{job=\"e2e\",trigger=\"1\"}"),
                     2);
    free(r);
    r = http_get(port, "/healthz");
    assert_non_null(strstr(r, "200 OK"));
    assert_non_null(strstr(r, "\r\n\r\nok\n"));
    free(r);
    r = http_get(port, "/nope");
    assert_non_null(strstr(r, "404"));
    free(r);
}

static void test_survey(void **state)
{
    (void)state;
    /* Rank 0 answers live, rank 1 stays silent: the answer says so. */
    int s = nn_socket(AF_SP, NN_RESPONDENT);
    assert_true(s >= 0);
    assert_true(nn_connect(s, survey_url) >= 0);
    int to = 5000;
    nn_setsockopt(s, NN_SOL_SOCKET, NN_RCVTIMEO, &to, sizeof(to));
    usleep(300000); /* let the connection settle before the survey goes out */
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "%s --collector %s -f json survey coverage 700", cli_bin, cli_url);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    void *msg;
    int n = nn_recv(s, &msg, NN_MSG, 0);
    assert_true(n > 0);
    mks_envelope *req = NULL;
    char err[256];
    assert_int_equal(mks_wire_decode(msg, (size_t)n, NULL, &req, err, sizeof(err)), 0);
    nn_freemsg(msg);
    assert_int_equal(req->body_case, MKSCOPE__V1__ENVELOPE__BODY_SURVEY_REQUEST);
    assert_string_equal(req->survey_request->what, "coverage");
    assert_int_equal(req->survey_request->deadline_ms, 700);
    mks_envelope env;
    Mkscope__V1__SurveyReply rep = MKSCOPE__V1__SURVEY_REPLY__INIT;
    Mkscope__V1__Coverage cov = MKSCOPE__V1__COVERAGE__INIT, *cp = &cov;
    cov.hook = 3, cov.eligible = 10, cov.ran = 9;
    rep.id = req->survey_request->id, rep.ok = 1, rep.epoch = 42, rep.error = "";
    rep.coverage = &cp, rep.n_coverage = 1;
    mks_wire_free(req);
    mks_wire_init(&env, "e2e", 0, 0);
    env.body_case = MKSCOPE__V1__ENVELOPE__BODY_SURVEY_REPLY;
    env.survey_reply = &rep;
    uint8_t *buf;
    size_t len;
    assert_int_equal(mks_wire_encode(&env, NULL, &buf, &len, err, sizeof(err)), 0);
    assert_int_equal(nn_send(s, buf, len, 0), (int)len);
    free(buf);
    char out[8192];
    size_t got = fread(out, 1, sizeof(out) - 1, p);
    out[got] = 0;
    assert_int_equal(WEXITSTATUS(pclose(p)), 0);
    nn_close(s);
    json_t *j = json_loads(out, 0, NULL);
    if (!j)
        fail_msg("survey answer not JSON: %s", out);
    json_t *ans = json_object_get(j, "answers");
    assert_int_equal(json_array_size(ans), 1);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(ans, 0), "rank")), 0);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(ans, 0), "epoch")), 42);
    json_t *missing = json_object_get(j, "missing");
    assert_int_equal(json_array_size(missing), 1);
    assert_int_equal(json_integer_value(json_array_get(missing, 0)), 1);
    json_decref(j);
}

/* Raw SQL reads the store and nothing else, and is cut off at the
 * request's work limit; while a statement runs to that limit, summaries
 * are acknowledged and other requests answered. */
static void test_bounded_requests(void **state)
{
    (void)state;
    char evil[256];
    snprintf(evil, sizeof(evil), "%s/evil.db", dir);
    assert_int_equal(run_cli(NULL, "sql \"ATTACH DATABASE '%s' AS e\"", evil), 2);
    assert_non_null(strstr(cli_err(), "ATTACH is not allowed"));
    assert_int_equal(run_cli(NULL, "sql \"VACUUM INTO '%s'\"", evil), 2);
    assert_int_equal(access(evil, F_OK), -1);
    assert_int_equal(run_cli(NULL, "sql 'PRAGMA journal_mode = DELETE'"), 2);
    assert_non_null(strstr(cli_err(), "PRAGMA journal_mode = DELETE is not allowed"));
    assert_int_equal(run_cli(NULL, "sql \"SELECT * FROM pragma_journal_mode('off')\""), 2);
    assert_int_equal(run_cli(NULL, "sql \"SELECT load_extension('%s/x.so')\"", dir), 2);
    assert_non_null(strstr(cli_err(), "load_extension() is not allowed"));
    /* Reporting pragmas still work. */
    json_t *j = cli_json("sql 'PRAGMA table_info(epochs)' -f %s", "json");
    assert_true(json_array_size(json_object_get(j, "rows")) > 5);
    json_decref(j);
    /* One value of 1 GB was made before the progress handler could look
     * (1 GB and minutes of a worker): refused at once now. */
    assert_int_equal(run_cli(NULL, "sql 'SELECT randomblob(1000000000)'"), 1);
    assert_non_null(strstr(cli_err(), "string or blob too big"));
    /* Rows of 1 MiB each stop at about 6 MiB of answer, truncated. */
    j = cli_json("sql 'WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r LIMIT 40)"
                 " SELECT x, zeroblob(500000) AS b FROM r' -f %s", "json");
    assert_true(json_is_true(json_object_get(j, "truncated")));
    size_t got = json_array_size(json_object_get(j, "rows"));
    assert_true(got >= 5 && got <= 8);
    json_decref(j);

    /* A recursive CTE without an end, in the background. */
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "%s --collector %s --timeout 20000 sql 'WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL"
             " SELECT x + 1 FROM r) SELECT COUNT(*) FROM r' 2>%s/cte.err",
             cli_bin, cli_url, dir);
    pid_t cte = fork();
    assert_true(cte >= 0);
    if (cte == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    /* Wait until the collector works on it (the CLI server took it). */
    usleep(300000);
    int s = ingest_sock();
    mks_envelope *rep = NULL;
    assert_int_equal(fa_send_register(s, "bounded", 0, 1, 7, class_names, N_CLASSES, &rep), 0);
    assert_true(rep->register_ack->accepted);
    mks_wire_free(rep);
    for (uint64_t e = 1; e <= 3; e++) {
        struct fa_summary *sum = calloc(1, sizeof(*sum));
        sum->epoch = e;
        sum->n_ts = 1;
        sum->ts[0].count = 10;
        rep = NULL;
        assert_int_equal(fa_send_summary(s, "bounded", 0, 7, e, sum, &rep), 0);
        assert_int_equal(rep->body_case, MKSCOPE__V1__ENVELOPE__BODY_ACK);
        assert_int_equal(rep->ack->up_to_seq, e);
        mks_wire_free(rep);
        free(sum);
    }
    nn_close(s);
    j = cli_json("status --job bounded -f %s", "json");
    assert_int_equal(json_integer_value(json_object_get(j, "epochs")), 3);
    json_decref(j);
    /* All of that happened while the statement was still running. */
    int st;
    assert_int_equal(waitpid(cte, &st, WNOHANG), 0);
    assert_int_equal(waitpid(cte, &st, 0), cte);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 1);
    char path[256];
    snprintf(path, sizeof(path), "%s/cte.err", dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[1024] = "";
    assert_non_null(fgets(line, sizeof(line), f));
    fclose(f);
    assert_non_null(strstr(line, "stopped after 3.0 s"));
    assert_non_null(strstr(line, "recursive CTE"));

    /* A collector that is there but does not answer (stopped here) is
     * "busy", exit 5, not "no collector", exit 3. */
    kill(collector_pid, SIGSTOP);
    snprintf(cmd, sizeof(cmd), "%s --collector %s --timeout 500 status 2>%s/busy.err", cli_bin,
             cli_url, dir);
    st = system(cmd);
    kill(collector_pid, SIGCONT);
    assert_int_equal(WEXITSTATUS(st), 5);
    snprintf(path, sizeof(path), "%s/busy.err", dir);
    f = fopen(path, "r");
    assert_non_null(f);
    assert_non_null(fgets(line, sizeof(line), f));
    fclose(f);
    assert_non_null(strstr(line, "collector busy"));
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s COLLECTOR_BIN MKSCOPE_BIN\n", argv[0]);
        return 2;
    }
    collector_bin = argv[1];
    cli_bin = argv[2];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ingest_and_status),
        cmocka_unit_test(test_query),
        cmocka_unit_test(test_sql_and_errors),
        cmocka_unit_test(test_trigger_and_trace),
        cmocka_unit_test(test_metrics_http),
        cmocka_unit_test(test_trigger_probe),
        cmocka_unit_test(test_maps_without_types),
        cmocka_unit_test(test_survey),
        cmocka_unit_test(test_bounded_requests),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

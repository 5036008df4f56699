/*
 * The collector against a sender who is not what it claims: a real
 * mkscope-collector process started with --key, and this test as an
 * attacker and as honest agents and CLIs, all speaking raw nanomsg.
 *
 * Checked here: an unauthenticated 16 MiB message is answered with the one
 * generic refusal (nothing about what was wrong) and the collector goes on;
 * captured authenticated messages played again change nothing (a
 * registration, a heartbeat marking a live application dead, an attach, a
 * trigger add), an old incarnation cannot take a rank back, a request
 * outside the time window or without a nonce is refused; a summary from a
 * rank that never registered makes no phantom rank and is counted; counts
 * near 2^63 are refused and sums over what is stored never break status;
 * request arguments are checked by name (a hook by name), and without a
 * key a retried attach or trigger add with the same request id does
 * nothing twice.
 *
 * usage: test_trust COLLECTOR_BIN
 */
#include <errno.h>
#include <fcntl.h>
#include <nanomsg/nn.h>
#include <nanomsg/reqrep.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "fake_agent.h"

static const char *collector_bin;

struct coll {
    char dir[64], ingest[128], cli[128], db[128];
    pid_t pid;
    int in, cl; /* our REQ sockets to its ingest and CLI sockets */
    const struct mks_wire_key *key;
};

static struct mks_wire_key key;
static struct coll K, P; /* with --key, and plain */

static uint64_t real_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int req_socket(const char *url)
{
    int s = nn_socket(AF_SP, NN_REQ);
    int to = 10000, big = -1;
    nn_setsockopt(s, NN_SOL_SOCKET, NN_RCVTIMEO, &to, sizeof(to));
    nn_setsockopt(s, NN_SOL_SOCKET, NN_SNDTIMEO, &to, sizeof(to));
    nn_setsockopt(s, NN_SOL_SOCKET, NN_RCVMAXSIZE, &big, sizeof(big));
    if (s < 0 || nn_connect(s, url) < 0)
        return -1;
    return s;
}

static int start(struct coll *c, const char *key_path)
{
    snprintf(c->dir, sizeof(c->dir), "/tmp/mks-trust-XXXXXX");
    if (!mkdtemp(c->dir))
        return -1;
    snprintf(c->ingest, sizeof(c->ingest), "ipc://%s/ingest", c->dir);
    snprintf(c->cli, sizeof(c->cli), "ipc://%s/cli", c->dir);
    snprintf(c->db, sizeof(c->db), "%s/store.db", c->dir);
    char survey[128], log[128];
    snprintf(survey, sizeof(survey), "ipc://%s/survey", c->dir);
    snprintf(log, sizeof(log), "%s/collector.log", c->dir);
    c->pid = fork();
    if (c->pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0)
            dup2(fd, 2);
        const char *argv[20] = {collector_bin, "--ingest", c->ingest, "--cli", c->cli,
                                "--survey", survey, "--metrics", "off", "--db", c->db,
                                "--ucx-port", "off"};
        int n = 13;
        if (key_path)
            argv[n++] = "--key", argv[n++] = key_path;
        argv[n] = NULL;
        execv(collector_bin, (char *const *)argv);
        _exit(127);
    }
    c->in = req_socket(c->ingest);
    c->cl = req_socket(c->cli);
    return c->pid > 0 && c->in >= 0 && c->cl >= 0 ? 0 : -1;
}

static void stop(struct coll *c)
{
    nn_close(c->in);
    nn_close(c->cl);
    if (c->pid > 0) {
        kill(c->pid, SIGTERM);
        waitpid(c->pid, NULL, 0);
    }
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", c->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", c->dir);
}

static int setup(void **state)
{
    (void)state;
    for (int i = 0; i < 32; i++)
        key.bytes[i] = (uint8_t)(i * 7 + 1);
    char path[] = "/tmp/mks-trust-key-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0 || write(fd, key.bytes, 32) != 32)
        return -1;
    close(fd);
    K.key = &key;
    int rc = start(&K, path) || start(&P, NULL);
    /* The collectors read the key at start; wait until both answer. */
    for (int i = 0; i < 100 && !rc; i++) {
        struct stat st;
        char sock[160];
        snprintf(sock, sizeof(sock), "%s/cli", P.dir);
        if (stat(sock, &st) == 0) {
            snprintf(sock, sizeof(sock), "%s/cli", K.dir);
            if (stat(sock, &st) == 0)
                break;
        }
        usleep(50000);
    }
    unlink(path);
    return rc;
}

static int teardown(void **state)
{
    (void)state;
    stop(&K);
    stop(&P);
    return 0;
}

/* ---- messages ------------------------------------------------------------------ */

static void encode(const struct coll *c, const mks_envelope *env, uint8_t **buf, size_t *len)
{
    char err[256];
    if (mks_wire_encode(env, c->key, buf, len, err, sizeof(err)))
        fail_msg("encode: %s", err);
}

/* Send bytes on sock, decode the answer (with c's key). */
static mks_envelope *roundtrip(const struct coll *c, int sock, const void *buf, size_t len)
{
    assert_int_equal(nn_send(sock, buf, len, 0), (int)len);
    void *msg = NULL;
    int n = nn_recv(sock, &msg, NN_MSG, 0);
    if (n < 0)
        fail_msg("no answer: %s", nn_strerror(nn_errno()));
    mks_envelope *rep = NULL;
    char err[256];
    if (mks_wire_decode(msg, (size_t)n, c->key, &rep, err, sizeof(err)))
        fail_msg("the collector's answer does not decode: %s", err);
    nn_freemsg(msg);
    return rep;
}

static mks_envelope *send_env(const struct coll *c, int sock, const mks_envelope *env)
{
    uint8_t *buf;
    size_t len;
    encode(c, env, &buf, &len);
    mks_envelope *rep = roundtrip(c, sock, buf, len);
    free(buf);
    return rep;
}

/* A refusal on the ingest socket: its reason. */
static const char *refusal(const mks_envelope *rep)
{
    assert_int_equal(rep->body_case, MKSCOPE__V1__ENVELOPE__BODY_REGISTER_ACK);
    assert_false(rep->register_ack->accepted);
    return rep->register_ack->reason;
}

static void reg_env(mks_envelope *env, Mkscope__V1__Register *reg, const char *job, uint32_t rank,
                    uint64_t inc)
{
    fa_register_env(env, reg, job, rank, 4, inc);
}

static void hb_env(mks_envelope *env, Mkscope__V1__Heartbeat *hb, const char *job, uint32_t rank,
                   uint64_t inc, int alive)
{
    mkscope__v1__heartbeat__init(hb);
    hb->app_alive = alive;
    hb->agent_time_ns = real_ns();
    mks_wire_init(env, job, rank, 0);
    env->incarnation = inc;
    env->body_case = MKSCOPE__V1__ENVELOPE__BODY_HEARTBEAT;
    env->heartbeat = hb;
}

static void cli_env(mks_envelope *env, Mkscope__V1__CliRequest *r, const char *verb, char **args,
                    size_t n)
{
    mkscope__v1__cli_request__init(r);
    r->verb = (char *)verb;
    r->args = args;
    r->n_args = n;
    mks_wire_init(env, "", 0, 1);
    r->id = env->nonce;
    env->body_case = MKSCOPE__V1__ENVELOPE__BODY_CLI_REQUEST;
    env->cli_request = r;
}

static const Mkscope__V1__CliReply *cli_reply(const mks_envelope *rep)
{
    assert_int_equal(rep->body_case, MKSCOPE__V1__ENVELOPE__BODY_CLI_REPLY);
    return rep->cli_reply;
}

/* One integer from the collector's store (read beside it, WAL). */
static int64_t one(const struct coll *c, const char *sql)
{
    sqlite3 *db;
    assert_int_equal(sqlite3_open_v2(c->db, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) != SQLITE_OK)
        fail_msg("%s: %s", sql, sqlite3_errmsg(db));
    int64_t v = sqlite3_step(s) == SQLITE_ROW ? sqlite3_column_int64(s, 0) : -1;
    sqlite3_finalize(s);
    sqlite3_close(db);
    return v;
}

static void must_contain(const char *s, const char *needle)
{
    if (!s || !strstr(s, needle))
        fail_msg("'%s' does not say '%s'", s ? s : "(null)", needle);
}

/* ---- the cases -------------------------------------------------------------------- */

/* 16 MiB of empty coverage records with no valid MAC: the one generic
 * refusal, and the collector serves the next request as before. */
static void test_unauthenticated_refused_generically(void **state)
{
    (void)state;
    size_t len = (16u << 20) - 128, body = (len - 10) & ~(size_t)1;
    uint8_t *b = malloc(len + 35);
    size_t at = 0;
    b[at++] = 0x08, b[at++] = 0x01, b[at++] = 0x1a, b[at++] = 0x01, b[at++] = 'j', b[at++] = 0x6a;
    for (int i = 0; i < 4; i++)
        b[at++] = (uint8_t)(((body >> (7 * i)) & 0x7f) | (i < 3 ? 0x80 : 0));
    for (size_t i = 0; i < body / 2; i++)
        b[at++] = 0x72, b[at++] = 0x00;
    memcpy(b + at, "\xa2\x06\x20", 3);
    memset(b + at + 3, 0x42, 32);
    at += 35;
    mks_envelope *rep = roundtrip(&K, K.in, b, at);
    assert_string_equal(refusal(rep), MKS_WIRE_REFUSAL);
    mks_wire_free(rep);
    free(b);
    /* garbage, and a well-formed registration without a MAC: the same line */
    rep = roundtrip(&K, K.in, "\xff\xff\xff", 3);
    assert_string_equal(refusal(rep), MKS_WIRE_REFUSAL);
    mks_wire_free(rep);
    mks_envelope env;
    Mkscope__V1__Register reg;
    reg_env(&env, &reg, "trust", 0, 1);
    uint8_t *buf;
    encode(&P, &env, &buf, &len); /* no key */
    rep = roundtrip(&K, K.in, buf, len);
    assert_string_equal(refusal(rep), MKS_WIRE_REFUSAL);
    mks_wire_free(rep);
    /* and a CLI request without a MAC */
    rep = roundtrip(&K, K.cl, "\x08\x01", 2);
    assert_string_equal(cli_reply(rep)->error, MKS_WIRE_REFUSAL);
    mks_wire_free(rep);
    free(buf);
    /* still serving: a registration with the key */
    rep = send_env(&K, K.in, &env);
    assert_int_equal(rep->body_case, MKSCOPE__V1__ENVELOPE__BODY_REGISTER_ACK);
    assert_true(rep->register_ack->accepted);
    assert_int_equal(rep->reply_to, env.nonce);
    mks_wire_free(rep);
}

/* A captured registration played again, an older incarnation, an old
 * heartbeat. */
static void test_replayed_state_changes_nothing(void **state)
{
    (void)state;
    mks_envelope env, hb;
    Mkscope__V1__Register reg;
    Mkscope__V1__Heartbeat h;
    reg_env(&env, &reg, "replay", 1, 100);
    uint8_t *r100, *hb_dead;
    size_t r100_len, hb_len;
    encode(&K, &env, &r100, &r100_len);
    mks_envelope *rep = roundtrip(&K, K.in, r100, r100_len);
    assert_true(rep->register_ack->accepted);
    mks_wire_free(rep);
    /* the same bytes again */
    rep = roundtrip(&K, K.in, r100, r100_len);
    must_contain(refusal(rep), "a replay");
    mks_wire_free(rep);
    /* incarnation 100 says its application died (captured) ... */
    hb_env(&hb, &h, "replay", 1, 100, 0);
    encode(&K, &hb, &hb_dead, &hb_len);
    rep = roundtrip(&K, K.in, hb_dead, hb_len);
    mks_wire_free(rep);
    assert_int_equal(one(&K, "SELECT app_alive FROM ranks WHERE job='replay' AND rank=1"), 0);
    /* ... then the application came back (a new start): a new registration */
    reg_env(&env, &reg, "replay", 1, 100);
    reg.app_start_ns = 12345;
    rep = send_env(&K, K.in, &env);
    assert_true(rep->register_ack->accepted);
    mks_wire_free(rep);
    assert_int_equal(one(&K, "SELECT app_alive FROM ranks WHERE job='replay' AND rank=1"), 1);
    /* the captured heartbeat played again does not mark it dead */
    rep = roundtrip(&K, K.in, hb_dead, hb_len);
    mks_wire_free(rep);
    assert_int_equal(one(&K, "SELECT app_alive FROM ranks WHERE job='replay' AND rank=1"), 1);
    /* nor does one that is new but older than the registration applied */
    hb_env(&hb, &h, "replay", 1, 100, 0);
    hb.sent_ns -= 5000000000ull;
    rep = send_env(&K, K.in, &hb);
    assert_int_equal(rep->body_case, MKSCOPE__V1__ENVELOPE__BODY_ACK);
    mks_wire_free(rep);
    assert_int_equal(one(&K, "SELECT app_alive FROM ranks WHERE job='replay' AND rank=1"), 1);
    /* a new agent (incarnation 200) registers; 100's registration, captured
     * or made anew, does not take the rank back */
    reg_env(&env, &reg, "replay", 1, 200);
    rep = send_env(&K, K.in, &env);
    assert_true(rep->register_ack->accepted);
    mks_wire_free(rep);
    rep = roundtrip(&K, K.in, r100, r100_len);
    refusal(rep);
    mks_wire_free(rep);
    reg_env(&env, &reg, "replay", 1, 100);
    rep = send_env(&K, K.in, &env);
    must_contain(refusal(rep), "older than the registered incarnation 200");
    mks_wire_free(rep);
    assert_int_equal(one(&K, "SELECT incarnation FROM ranks WHERE job='replay' AND rank=1"), 200);
    free(r100);
    free(hb_dead);
}

static void test_window_and_nonce_required(void **state)
{
    (void)state;
    mks_envelope env;
    Mkscope__V1__Register reg;
    reg_env(&env, &reg, "window", 0, 5);
    env.sent_ns -= 120000000000ull; /* two minutes old */
    mks_envelope *rep = send_env(&K, K.in, &env);
    must_contain(refusal(rep), "outside the 60 s window");
    mks_wire_free(rep);
    reg_env(&env, &reg, "window", 0, 5);
    env.nonce = 0;
    rep = send_env(&K, K.in, &env);
    must_contain(refusal(rep), "no nonce");
    mks_wire_free(rep);
    assert_int_equal(one(&K, "SELECT COUNT(*) FROM ranks WHERE job='window'"), 0);
    Mkscope__V1__CliRequest r;
    cli_env(&env, &r, "status", NULL, 0);
    env.sent_ns += 3600000000000ull; /* an hour ahead */
    rep = send_env(&K, K.cl, &env);
    must_contain(cli_reply(rep)->error, "outside the 60 s window");
    assert_int_equal(cli_reply(rep)->status, 1);
    assert_int_equal(rep->reply_to, env.nonce);
    mks_wire_free(rep);
}

/* A summary from a rank that never registered. */
static void test_no_phantom_rank(void **state)
{
    (void)state;
    for (int k = 0; k < 2; k++) {
        struct coll *c = k ? &P : &K;
        struct fa_summary s;
        memset(&s, 0, sizeof(s));
        s.n_ts = 1, s.ts[0].count = 5;
        uint8_t *buf;
        size_t len;
        assert_int_equal(fa_encode_summary("ghost", 7, 1, 1, &s, &buf, &len), 0);
        mks_envelope *e = NULL;
        char err[256];
        assert_int_equal(mks_wire_decode(buf, len, NULL, &e, err, sizeof(err)), 0);
        mks_envelope *rep = send_env(c, c->in, e);
        must_contain(refusal(rep), "rank 7 of job ghost, which has not registered");
        mks_wire_free(rep);
        mks_wire_free(e);
        free(buf);
        assert_int_equal(one(c, "SELECT COUNT(*) FROM ranks WHERE job='ghost'"), 0);
        assert_int_equal(one(c, "SELECT COUNT(*) FROM epochs WHERE job='ghost'"), 0);
        /* counted */
        Mkscope__V1__CliRequest r;
        mks_envelope q;
        cli_env(&q, &r, "metrics", NULL, 0);
        rep = send_env(c, c->cl, &q);
        must_contain(cli_reply(rep)->json, "mkscope_refused_total{reason=\\\"unregistered\\\"} 1");
        mks_wire_free(rep);
    }
}

/* An authenticated attach and trigger add, captured and played again. */
static void test_replayed_commands_run_once(void **state)
{
    (void)state;
    mks_envelope env;
    Mkscope__V1__Register reg;
    reg_env(&env, &reg, "cmds", 0, 9);
    mks_envelope *rep = send_env(&K, K.in, &env);
    assert_true(rep->register_ack->accepted);
    mks_wire_free(rep);
    char *args[] = {"p99(step) > 2ms"};
    Mkscope__V1__CliRequest r;
    cli_env(&env, &r, "trigger-add", args, 1);
    uint8_t *buf;
    size_t len;
    encode(&K, &env, &buf, &len);
    for (int i = 0; i < 3; i++) {
        rep = roundtrip(&K, K.cl, buf, len);
        if (i == 0)
            assert_int_equal(cli_reply(rep)->status, 0);
        else
            must_contain(cli_reply(rep)->error, "a replay");
        mks_wire_free(rep);
    }
    free(buf);
    assert_int_equal(one(&K, "SELECT COUNT(*) FROM triggers"), 1);
    /* attach by hook name: the command is for hook 3 (task_end), not 0 */
    char *aargs[] = {"lat", "--builtin=latency", "--hook=task_end", "--job=cmds"};
    cli_env(&env, &r, "attach", aargs, 4);
    encode(&K, &env, &buf, &len);
    for (int i = 0; i < 2; i++) {
        rep = roundtrip(&K, K.cl, buf, len);
        if (i == 0 && cli_reply(rep)->status)
            fail_msg("attach: %s", cli_reply(rep)->error);
        mks_wire_free(rep);
    }
    free(buf);
    assert_int_equal(one(&K, "SELECT COUNT(*) FROM commands WHERE job='cmds'"), 1);
    assert_int_equal(one(&K, "SELECT hook FROM commands WHERE job='cmds'"), 3);
    /* the rank picks it up with its next heartbeat: with a nonce and the
     * time it left, in an ack naming the heartbeat */
    Mkscope__V1__Heartbeat h;
    hb_env(&env, &h, "cmds", 0, 9, 1);
    rep = send_env(&K, K.in, &env);
    assert_int_equal(rep->body_case, MKSCOPE__V1__ENVELOPE__BODY_ACK);
    assert_int_equal(rep->reply_to, env.nonce);
    assert_int_equal(rep->ack->n_commands, 1);
    assert_int_equal(rep->ack->commands[0]->attach->hook, 3);
    assert_true(rep->ack->commands[0]->nonce != 0);
    assert_true(rep->ack->commands[0]->issued_ns + 60000000000ull > real_ns());
    /* the same heartbeat again: acked, nothing handed out twice */
    mks_wire_free(rep);
}

/* Request arguments are checked at the collector as at the CLI. */
static void test_request_arguments_checked(void **state)
{
    (void)state;
    static char *cases[][3] = {
        {"diagnose", "--step=-1", NULL},     {"diagnose", "--slow=nan", NULL},
        {"diagnose", "--min-coverage=2", NULL}, {"status", "extra", NULL},
        {"status", "--job=../x", NULL},      {"attach", "p", "--hook=99"},
        {"attach", "p", "--ranks=0,0"},      {"detach", "p", "--frob=1"},
        {"survey", "bogus", NULL},           {"diagnose", "--step", NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *args[2] = {cases[i][1], cases[i][2]};
        mks_envelope env;
        Mkscope__V1__CliRequest r;
        cli_env(&env, &r, cases[i][0], args, cases[i][2] ? 2 : 1);
        mks_envelope *rep = send_env(&P, P.cl, &env);
        if (cli_reply(rep)->status != 2)
            fail_msg("%s %s: status %d (%s), want 2", cases[i][0], cases[i][1],
                     cli_reply(rep)->status, cli_reply(rep)->error);
        assert_non_null(strchr(cli_reply(rep)->error, ' '));
        mks_wire_free(rep);
    }
}

/* Counts near 2^63: refused at the door; sums of what is stored never
 * overflow into an empty answer. */
static void test_huge_counts(void **state)
{
    (void)state;
    mks_envelope env;
    Mkscope__V1__Register reg;
    reg_env(&env, &reg, "huge", 0, 3);
    mks_envelope *rep = send_env(&P, P.in, &env);
    assert_true(rep->register_ack->accepted);
    mks_wire_free(rep);
    struct fa_summary s;
    memset(&s, 0, sizeof(s));
    s.n_ts = 1, s.ts[0].count = (1ull << 63) - 1;
    uint8_t *buf;
    size_t len;
    assert_int_equal(fa_encode_summary("huge", 0, 3, 1, &s, &buf, &len), -EBADMSG);
    /* an agent would not send it; a forged one is refused with the reason */
    s.ts[0].count = 1;
    s.cov_eligible = s.cov_ran = 1ull << 52;
    for (uint64_t q = 1; q <= 4; q++) {
        assert_int_equal(fa_encode_summary("huge", 0, 3, q, &s, &buf, &len), 0);
        mks_envelope *e = NULL;
        char err[256];
        assert_int_equal(mks_wire_decode(buf, len, NULL, &e, err, sizeof(err)), 0);
        if (q == 4)
            e->epoch_summary->task_stats[0]->count = (1ull << 63) - 1;
        size_t n = mkscope__v1__envelope__get_packed_size(e);
        uint8_t *raw = malloc(n);
        mkscope__v1__envelope__pack(e, raw);
        rep = roundtrip(&P, P.in, raw, n);
        if (q == 4)
            must_contain(refusal(rep), "above the bound 2^53");
        else
            assert_int_equal(rep->body_case, MKSCOPE__V1__ENVELOPE__BODY_ACK);
        mks_wire_free(rep);
        mks_wire_free(e);
        free(raw);
        free(buf);
    }
    /* Stored values whose sum passes 2^63 (written beside the collector, as
     * an older collector may have stored them): status still answers. */
    sqlite3 *db;
    assert_int_equal(sqlite3_open(P.db, &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    assert_int_equal(sqlite3_exec(db,
                                  "UPDATE coverage SET eligible = 4611686018427387904, ran = 1"
                                  " WHERE epoch_id IN (SELECT id FROM epochs WHERE job='huge')",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    char *args[] = {"--job=huge"};
    Mkscope__V1__CliRequest r;
    cli_env(&env, &r, "status", args, 1);
    rep = send_env(&P, P.cl, &env);
    if (cli_reply(rep)->status)
        fail_msg("status: %s", cli_reply(rep)->error);
    must_contain(cli_reply(rep)->json, "\"rank\":0");
    mks_wire_free(rep);
    /* and a job nobody registered is "no data", not an empty success */
    char *none[] = {"--job=nobody"};
    cli_env(&env, &r, "status", none, 1);
    rep = send_env(&P, P.cl, &env);
    assert_int_equal(cli_reply(rep)->status, 4);
    mks_wire_free(rep);
}

/* Without a key: the same request id again is a retry, done once. */
static void test_retry_by_request_id(void **state)
{
    (void)state;
    mks_envelope env;
    Mkscope__V1__Register reg;
    reg_env(&env, &reg, "retry", 0, 4);
    mks_envelope *rep = send_env(&P, P.in, &env);
    assert_true(rep->register_ack->accepted);
    mks_wire_free(rep);
    char *args[] = {"p", "--builtin=latency", "--job=retry"};
    Mkscope__V1__CliRequest r;
    uint64_t id = 0;
    for (int i = 0; i < 2; i++) {
        cli_env(&env, &r, "attach", args, 3);
        if (i)
            r.id = id; /* a new envelope, the same request */
        id = r.id;
        rep = send_env(&P, P.cl, &env);
        assert_int_equal(cli_reply(rep)->status, 0);
        mks_wire_free(rep);
    }
    assert_int_equal(one(&P, "SELECT COUNT(*) FROM commands WHERE job='retry'"), 1);
    /* the same id with another request is refused, nothing done */
    char *other[] = {"q", "--builtin=latency", "--job=retry"};
    cli_env(&env, &r, "attach", other, 3);
    r.id = id;
    rep = send_env(&P, P.cl, &env);
    must_contain(cli_reply(rep)->error, "was used for another request");
    mks_wire_free(rep);
    assert_int_equal(one(&P, "SELECT COUNT(*) FROM commands WHERE job='retry'"), 1);
    /* the very same bytes twice: the second is a copy */
    char *targs[] = {"p99(run) > 5ms"};
    cli_env(&env, &r, "trigger-add", targs, 1);
    uint8_t *buf;
    size_t len;
    encode(&P, &env, &buf, &len);
    int64_t before = one(&P, "SELECT COUNT(*) FROM triggers");
    for (int i = 0; i < 3; i++)
        mks_wire_free(roundtrip(&P, P.cl, buf, len));
    free(buf);
    assert_int_equal(one(&P, "SELECT COUNT(*) FROM triggers"), before + 1);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_trust COLLECTOR_BIN\n");
        return 2;
    }
    collector_bin = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unauthenticated_refused_generically),
        cmocka_unit_test(test_replayed_state_changes_nothing),
        cmocka_unit_test(test_window_and_nonce_required),
        cmocka_unit_test(test_no_phantom_rank),
        cmocka_unit_test(test_replayed_commands_run_once),
        cmocka_unit_test(test_request_arguments_checked),
        cmocka_unit_test(test_huge_counts),
        cmocka_unit_test(test_retry_by_request_id),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

/*
 * mkscope-agent as a process, against a real control block (this test is the
 * application: it creates the block with mks_rt_create() and fires hooks) and
 * a small stand-in for the collector's ingest socket (an NN_REP socket that
 * answers the way docs/wire.md says and records what arrives).
 *
 * Checked here: per-class counts in the summaries equal the hooks fired and
 * coverage is complete; summaries are replayed in order without loss after
 * the collector was away; a budget keeps the bytes under it and the
 * summaries say they were coarsened; collector commands are verified and
 * answered; an application restart is followed; a killed agent's hooks fall
 * back to detached.
 *
 * argv[1] is the agent binary, argv[2] the directory of built-in monitors.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <nanomsg/nn.h>
#include <nanomsg/reqrep.h>
#include <ucp/api/ucp.h>

#include "../devhooks/btf_edit.h"
#include "mkscope/bpf_isa.h"
#include "mkscope/ctl.h"
#include "mkscope/runtime.h"
#include "mkscope/wire.h"

#define N_CLASSES 3

static const char *agent_bin, *monitors_dir;
static char tmpdir[64];

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- the stand-in collector ------------------------------------------------ */

#define MAX_SEQS 4096

struct fake_collector {
    char url[128];
    int sock, fd;
    uint64_t bytes;           /* request bytes received */
    uint64_t first_ns, last_ns;
    uint64_t counts[N_CLASSES];
    uint64_t other_counts;
    uint64_t eligible_end, ran_end, throttled_end;
    uint64_t throttled_wait;  /* at dep_wait_end */
    uint32_t max_shift;
    uint64_t seqs[MAX_SEQS];  /* first arrivals, in arrival order */
    int n_seqs;
    int duplicates;
    int registers;
    int heartbeats;
    size_t hb_programs; /* programs listed in the last heartbeat */
    uint32_t hb_max_per_hook; /* most programs at one hook in the last heartbeat */
    int hb_app_dead;    /* a heartbeat said the application ended */
    uint64_t last_app_start;
    uint32_t schema_classes;
    int tiers[4];
    int min_tier;
    uint64_t lost_reported;
    /* commands to hand out with the next ack of a summary */
    Mkscope__V1__Command *cmds[4];
    int n_cmds;
    int repeat_cmds;    /* hand the commands out with this many acks (0: one) */
    int wrong_reply_to; /* answer naming another request than the agent's */
    /* raw events of escalations */
    uint64_t raw_events, raw_other, raw_dropped;
    uint64_t raw_batches_ingest, raw_batches_ucx;
    uint32_t raw_class;     /* class the filter keeps */
    int raw_last;
    uint64_t raw_esc_id;
    Mkscope__V1__CommandReply replies[8];
    char reply_err[8][256];
    int n_replies;
    int compact;          /* the RegisterAck says compact_summaries */
    int compact_summaries; /* summaries that came in the compact form */
};

static void fc_bind(struct fake_collector *fc)
{
    fc->sock = nn_socket(AF_SP, NN_REP);
    assert_true(fc->sock >= 0);
    assert_true(nn_bind(fc->sock, fc->url) >= 0);
    size_t sz = sizeof(fc->fd);
    assert_int_equal(nn_getsockopt(fc->sock, NN_SOL_SOCKET, NN_RCVFD, &fc->fd, &sz), 0);
}

static void fc_init(struct fake_collector *fc, const char *name)
{
    memset(fc, 0, sizeof(*fc));
    snprintf(fc->url, sizeof(fc->url), "ipc://%s/%s", tmpdir, name);
    fc->min_tier = 99;
    fc_bind(fc);
}

static int seen(const struct fake_collector *fc, uint64_t seq)
{
    for (int i = 0; i < fc->n_seqs; i++)
        if (fc->seqs[i] == seq)
            return 1;
    return 0;
}

static void fc_reply(struct fake_collector *fc, mks_envelope *out)
{
    uint8_t *buf;
    size_t len;
    char err[256];
    assert_int_equal(mks_wire_encode(out, NULL, &buf, &len, err, sizeof(err)), 0);
    assert_true(nn_send(fc->sock, buf, len, 0) == (int)len);
    free(buf);
}

static void fc_raw(struct fake_collector *fc, const Mkscope__V1__RawEventBatch *b)
{
    fc->raw_esc_id = b->escalation_id;
    for (size_t i = 0; i < b->n_events; i++) {
        if (b->events[i]->task_class == fc->raw_class && b->events[i]->event == MKS_EV_TASK_END)
            fc->raw_events++;
        else
            fc->raw_other++;
    }
    fc->raw_dropped += b->dropped;
    fc->raw_last |= b->last;
}

/* ---- a UCX listener standing in for the collector's raw-event endpoint -------
 * Stream framing: 4-byte little-endian length, then an encoded Envelope. */

struct ucx_srv {
    ucp_context_h ctx;
    ucp_worker_h w;
    ucp_listener_h l;
    ucp_ep_h ep;
    uint16_t port;
    uint8_t *buf;
    size_t have, cap;
};

static void srv_err(void *arg, ucp_ep_h ep, ucs_status_t st)
{
    (void)arg;
    (void)ep;
    (void)st;
}

static void srv_conn(ucp_conn_request_h req, void *arg)
{
    struct ucx_srv *s = arg;
    ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST |
                                        UCP_EP_PARAM_FIELD_ERR_HANDLER |
                                        UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
                          .conn_request = req,
                          .err_mode = UCP_ERR_HANDLING_MODE_PEER,
                          .err_handler = {.cb = srv_err, .arg = s}};
    if (!s->ep)
        assert_int_equal(ucp_ep_create(s->w, &ep, &s->ep), UCS_OK);
}

static void srv_start(struct ucx_srv *s)
{
    memset(s, 0, sizeof(*s));
    ucp_params_t p = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_STREAM};
    assert_int_equal(ucp_init(&p, NULL, &s->ctx), UCS_OK);
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    assert_int_equal(ucp_worker_create(s->ctx, &wp, &s->w), UCS_OK);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    ucp_listener_params_t lp = {
        .field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
        .sockaddr = {.addr = (struct sockaddr *)&sa, .addrlen = sizeof(sa)},
        .conn_handler = {.cb = srv_conn, .arg = s}};
    assert_int_equal(ucp_listener_create(s->w, &lp, &s->l), UCS_OK);
    ucp_listener_attr_t la = {.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR};
    assert_int_equal(ucp_listener_query(s->l, &la), UCS_OK);
    s->port = ntohs(((struct sockaddr_in *)&la.sockaddr)->sin_port);
}

/* Progress, read whatever arrived and hand complete frames to fc. */
static void srv_poll(struct ucx_srv *s, struct fake_collector *fc)
{
    while (ucp_worker_progress(s->w))
        ;
    if (!s->ep)
        return;
    for (;;) {
        size_t len = 0;
        ucs_status_ptr_t data = ucp_stream_recv_data_nb(s->ep, &len);
        if (data == NULL || UCS_PTR_IS_ERR(data))
            break;
        if (s->have + len > s->cap) {
            s->cap = (s->have + len) * 2;
            s->buf = realloc(s->buf, s->cap);
            assert_non_null(s->buf);
        }
        memcpy(s->buf + s->have, data, len);
        s->have += len;
        ucp_stream_data_release(s->ep, data);
    }
    size_t off = 0;
    while (s->have - off >= 4) {
        const uint8_t *h = s->buf + off;
        uint32_t n = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 |
                     (uint32_t)h[3] << 24;
        if (s->have - off - 4 < n)
            break;
        mks_envelope *env;
        char err[256];
        if (mks_wire_decode(h + 4, n, NULL, &env, err, sizeof(err)))
            fail_msg("bad frame over UCX: %s", err);
        assert_int_equal(env->body_case, MKSCOPE__V1__ENVELOPE__BODY_RAW_EVENT_BATCH);
        fc->raw_batches_ucx++;
        fc_raw(fc, env->raw_event_batch);
        mks_wire_free(env);
        off += 4 + n;
    }
    if (off) {
        memmove(s->buf, s->buf + off, s->have - off);
        s->have -= off;
    }
}

static void srv_stop(struct ucx_srv *s)
{
    if (s->ep) {
        ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                  .flags = UCP_EP_CLOSE_FLAG_FORCE};
        ucs_status_ptr_t r = ucp_ep_close_nbx(s->ep, &rp);
        while (UCS_PTR_IS_PTR(r) && ucp_request_check_status(r) == UCS_INPROGRESS)
            ucp_worker_progress(s->w);
        if (UCS_PTR_IS_PTR(r))
            ucp_request_free(r);
    }
    ucp_listener_destroy(s->l);
    ucp_worker_destroy(s->w);
    ucp_cleanup(s->ctx);
    free(s->buf);
}

static void fc_handle(struct fake_collector *fc, const void *buf, size_t len)
{
    mks_envelope *env;
    char err[256];
    int rc = mks_wire_decode(buf, len, NULL, &env, err, sizeof(err));
    if (rc)
        fail_msg("agent sent an invalid message: %s", err);
    fc->bytes += len;
    if (env->body_case == MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY) {
        /* the form it came in: the decoder gives the plain one back */
        mks_envelope *raw = mkscope__v1__envelope__unpack(NULL, len, buf);
        assert_non_null(raw);
        fc->compact_summaries += raw->epoch_summary->dev_time_base != 0;
        mkscope__v1__envelope__free_unpacked(raw, NULL);
    }
    if (!fc->first_ns)
        fc->first_ns = now_ns();
    fc->last_ns = now_ns();
    mks_envelope out;
    mks_wire_init(&out, env->job, env->rank, env->seq);
    out.reply_to = env->nonce + (fc->wrong_reply_to ? 1 : 0);
    Mkscope__V1__RegisterAck rack = MKSCOPE__V1__REGISTER_ACK__INIT;
    Mkscope__V1__Ack ack = MKSCOPE__V1__ACK__INIT;
    uint64_t max_seq = 0;
    for (int i = 0; i < fc->n_seqs; i++)
        if (fc->seqs[i] > max_seq)
            max_seq = fc->seqs[i];
    switch (env->body_case) {
    case MKSCOPE__V1__ENVELOPE__BODY_REGISTER:
        fc->registers++;
        fc->last_app_start = env->register_->app_start_ns;
        fc->schema_classes = env->register_->schema ? (uint32_t)env->register_->schema->n_classes
                                                    : 0;
        rack.accepted = 1;
        rack.stored_seq = max_seq;
        rack.compact_summaries = fc->compact;
        out.body_case = MKSCOPE__V1__ENVELOPE__BODY_REGISTER_ACK;
        out.register_ack = &rack;
        break;
    case MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY: {
        const Mkscope__V1__EpochSummary *s = env->epoch_summary;
        if (seen(fc, env->seq)) {
            fc->duplicates++;
        } else {
            assert_true(fc->n_seqs < MAX_SEQS);
            fc->seqs[fc->n_seqs++] = env->seq;
            for (size_t i = 0; i < s->n_task_stats; i++) {
                uint32_t c = s->task_stats[i]->task_class;
                if (c < N_CLASSES)
                    fc->counts[c] += s->task_stats[i]->count;
                else
                    fc->other_counts += s->task_stats[i]->count;
            }
            if (s->sample_shift > fc->max_shift)
                fc->max_shift = s->sample_shift;
            for (size_t i = 0; i < s->n_coverage; i++) {
                if (s->coverage[i]->hook == MKS_EV_DEP_WAIT_END)
                    fc->throttled_wait += s->coverage[i]->throttled;
                if (s->coverage[i]->hook != MKS_EV_TASK_END)
                    continue;
                fc->eligible_end += s->coverage[i]->eligible;
                fc->ran_end += s->coverage[i]->ran;
                fc->throttled_end += s->coverage[i]->throttled;
            }
            if (s->detail_tier < 4)
                fc->tiers[s->detail_tier]++;
            if ((int)s->detail_tier < fc->min_tier)
                fc->min_tier = (int)s->detail_tier;
            fc->lost_reported += s->lost_summaries;
            if (env->seq > max_seq)
                max_seq = env->seq;
        }
        ack.up_to_seq = max_seq;
        ack.commands = fc->cmds;
        ack.n_commands = (size_t)fc->n_cmds;
        out.body_case = MKSCOPE__V1__ENVELOPE__BODY_ACK;
        out.ack = &ack;
        break;
    }
    case MKSCOPE__V1__ENVELOPE__BODY_HEARTBEAT:
        fc->heartbeats++;
        fc->hb_programs = env->heartbeat->n_programs;
        if (env->heartbeat->n_programs) {
            uint32_t per_hook[MKS_EV_COUNT] = {0};
            fc->hb_max_per_hook = 0;
            for (size_t i = 0; i < env->heartbeat->n_programs; i++) {
                uint32_t h = env->heartbeat->programs[i]->hook;
                if (h < MKS_EV_COUNT && ++per_hook[h] > fc->hb_max_per_hook)
                    fc->hb_max_per_hook = per_hook[h];
            }
        }
        fc->hb_app_dead |= !env->heartbeat->app_alive;
        ack.up_to_seq = max_seq;
        out.body_case = MKSCOPE__V1__ENVELOPE__BODY_ACK;
        out.ack = &ack;
        break;
    case MKSCOPE__V1__ENVELOPE__BODY_RAW_EVENT_BATCH:
        fc->raw_batches_ingest++;
        fc_raw(fc, env->raw_event_batch);
        ack.up_to_seq = max_seq;
        out.body_case = MKSCOPE__V1__ENVELOPE__BODY_ACK;
        out.ack = &ack;
        break;
    case MKSCOPE__V1__ENVELOPE__BODY_COMMAND_REPLY:
        if (fc->n_replies < 8) {
            Mkscope__V1__CommandReply *r = &fc->replies[fc->n_replies];
            *r = *env->command_reply;
            snprintf(fc->reply_err[fc->n_replies], 256, "%s", r->error ? r->error : "");
            r->error = r->verifier_log = NULL;
            fc->n_replies++;
        }
        /* fallthrough */
    default:
        ack.up_to_seq = max_seq;
        out.body_case = MKSCOPE__V1__ENVELOPE__BODY_ACK;
        out.ack = &ack;
        break;
    }
    fc_reply(fc, &out);
    if (env->body_case == MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY && --fc->repeat_cmds <= 0)
        fc->n_cmds = 0; /* handed out once (or repeat_cmds times) */
    mks_wire_free(env);
}

/* Serve requests for ms milliseconds. */
static void fc_serve(struct fake_collector *fc, int ms)
{
    uint64_t end = now_ns() + (uint64_t)ms * 1000000ull;
    for (;;) {
        uint64_t now = now_ns();
        if (now >= end)
            return;
        struct pollfd pf = {fc->fd, POLLIN, 0};
        int wait = (int)((end - now) / 1000000ull) + 1;
        if (poll(&pf, 1, wait) <= 0)
            continue;
        void *msg = NULL;
        int n = nn_recv(fc->sock, &msg, NN_MSG, NN_DONTWAIT);
        if (n < 0)
            continue;
        fc_handle(fc, msg, (size_t)n);
        nn_freemsg(msg);
    }
}

static void fc_close(struct fake_collector *fc)
{
    if (fc->sock >= 0)
        nn_close(fc->sock);
    fc->sock = -1;
}

/* ---- the application ----------------------------------------------------------- */

static int attached(struct mks_rt *rt, enum mks_hook_event ev)
{
    return (*((const struct mks_rt_hot *)(const void *)rt)->mask & (1u << ev)) != 0;
}

static struct mks_rt *app_create(const char *job)
{
    struct mks_rt_opts o = {.sz = sizeof(o), .job = job, .rank = 0, .n_ranks = 1, .n_workers = 2};
    struct mks_rt *rt = NULL;
    assert_int_equal(mks_rt_create(&o, &rt), 0);
    /* a schema of three classes, as a runtime publishes it */
    Mkscope__V1__TaskClass cls[N_CLASSES], *clsp[N_CLASSES];
    static const char *names[N_CLASSES] = {"rmsnorm", "qkv", "attn"};
    for (int i = 0; i < N_CLASSES; i++) {
        mkscope__v1__task_class__init(&cls[i]);
        cls[i].id = (uint32_t)i;
        cls[i].name = (char *)names[i];
        clsp[i] = &cls[i];
    }
    Mkscope__V1__TaskSchema schema = MKSCOPE__V1__TASK_SCHEMA__INIT;
    schema.classes = clsp;
    schema.n_classes = N_CLASSES;
    size_t len = mkscope__v1__task_schema__get_packed_size(&schema);
    uint8_t *buf = malloc(len);
    mkscope__v1__task_schema__pack(&schema, buf);
    assert_int_equal(mks_rt_publish_schema(rt, buf, len), 0);
    free(buf);
    return rt;
}

/* Run n tasks of class cls through start/end hooks. */
static void fire(struct mks_rt *rt, uint32_t cls, uint32_t n, uint32_t step)
{
    for (uint32_t i = 0; i < n; i++) {
        uint64_t t = now_ns();
        struct mks_hook_ctx ctx = {.event = MKS_EV_TASK_START,
                                   .worker = i % 2,
                                   .task_class = cls,
                                   .step = step,
                                   .t_now = t,
                                   .t_ready = t - 500,
                                   .t_start = t};
        MKS_HOOK(rt, &ctx);
        ctx.event = MKS_EV_TASK_END;
        ctx.t_now = t + 1000;
        MKS_HOOK(rt, &ctx);
    }
}

/* n remote dependency waits of class cls, each on its own transfer. */
static void fire_waits(struct mks_rt *rt, uint32_t cls, uint32_t n, uint64_t gen0)
{
    for (uint32_t i = 0; i < n; i++) {
        uint64_t t = now_ns();
        struct mks_hook_ctx ctx = {.event = MKS_EV_DEP_WAIT_BEGIN,
                                   .worker = i % 2,
                                   .task_class = cls,
                                   .dep_class = MKS_DEP_REMOTE,
                                   .comm_gen = gen0 + i,
                                   .peer_rank = 1,
                                   .t_now = t};
        MKS_HOOK(rt, &ctx);
        ctx.event = MKS_EV_DEP_WAIT_END;
        ctx.t_now = t + 2000;
        MKS_HOOK(rt, &ctx);
    }
}

/* ---- the agent --------------------------------------------------------------- */

static pid_t agent_start(const char *job, const char *url, const char *extra[])
{
    const char *argv[40];
    int n = 0;
    argv[n++] = agent_bin;
    argv[n++] = "--job";
    argv[n++] = job;
    argv[n++] = "--rank";
    argv[n++] = "0";
    argv[n++] = "--collector";
    argv[n++] = url;
    argv[n++] = "--monitors";
    argv[n++] = monitors_dir;
    argv[n++] = "--epoch-ms";
    argv[n++] = "20";
    argv[n++] = "--timeout-ms";
    argv[n++] = "200";
    argv[n++] = "--heartbeat-ms";
    argv[n++] = "200";
    argv[n++] = "--lease-ms"; /* later arguments may shorten it */
    argv[n++] = "2000";
    for (int i = 0; extra && extra[i]; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execv(agent_bin, (char *const *)argv);
        _exit(127);
    }
    return pid;
}

/* Serve until the agent exits (or the timeout); returns its wait status. */
static int serve_until_exit(struct fake_collector *fc, pid_t pid, int timeout_ms)
{
    int st = 0;
    for (int t = 0; t < timeout_ms; t += 20) {
        if (fc->sock >= 0)
            fc_serve(fc, 20);
        else
            usleep(20000);
        if (waitpid(pid, &st, WNOHANG) == pid)
            return st;
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    fail_msg("agent did not exit within %d ms", timeout_ms);
    return st;
}

/* Default monitors attached: the last one (genprog) is at gen_advance. */
#define ALL_MONITORS ((1u << MKS_EV_TASK_END) | (1u << MKS_EV_TASK_START) | (1u << MKS_EV_GEN_ADVANCE))

static void serve_until_mask(struct fake_collector *fc, struct mks_rt *rt, pid_t pid,
                             uint32_t mask)
{
    for (int t = 0; t < 5000; t += 10) {
        fc_serve(fc, 10);
        if ((*((const struct mks_rt_hot *)(const void *)rt)->mask & mask) == mask)
            return;
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid)
            fail_msg("agent exited early (status %d)", st);
    }
    kill(pid, SIGKILL);
    fail_msg("agent did not attach within 5 s");
}

static void serve_until_attached(struct fake_collector *fc, struct mks_rt *rt, pid_t pid)
{
    serve_until_mask(fc, rt, pid, ALL_MONITORS);
}

static char job[64];

static int setup(void **state)
{
    (void)state;
    static int n;
    snprintf(job, sizeof(job), "agtest%d-%d", (int)getpid(), n++);
    return 0;
}

/* Whatever a test left of its job in /dev/shm (a child application killed
 * with SIGKILL cannot remove its control block): tests leave nothing. */
static int teardown(void **state)
{
    (void)state;
    for (int r = 0; r < 4; r++) {
        char name[96];
        snprintf(name, sizeof(name), "/mkscope.%s.%d", job, r);
        shm_unlink(name);
    }
    return 0;
}

static void check_in_order(const struct fake_collector *fc)
{
    for (int i = 0; i < fc->n_seqs; i++)
        assert_int_equal(fc->seqs[i], (uint64_t)i + 1); /* 1, 2, 3 ... in order, no gap */
}

static void test_counts_equal_hooks_fired(void **state)
{
    (void)state;
    struct fake_collector fc;
    fc_init(&fc, "ingest-counts");
    fc.compact = 1; /* the counts below come through the compact form */
    struct mks_rt *rt = app_create(job);
    char stats[128];
    snprintf(stats, sizeof(stats), "%s/stats-counts.json", tmpdir);
    const char *extra[] = {"--exit-with-app", "--stats", stats, NULL};
    pid_t pid = agent_start(job, fc.url, extra);
    serve_until_attached(&fc, rt, pid);
    const uint32_t want[N_CLASSES] = {100, 250, 7};
    for (int round = 0; round < 5; round++) {
        for (uint32_t c = 0; c < N_CLASSES; c++)
            fire(rt, c, want[c] / 5 + (round == 0 ? want[c] % 5 : 0), (uint32_t)round);
        fc_serve(&fc, 60);
    }
    assert_true(fc.heartbeats >= 1);
    assert_int_equal(fc.hb_programs, 10);
    /* room at every hook for an escalation's filter */
    assert_true(fc.hb_max_per_hook >= 1);
    assert_true(fc.hb_max_per_hook <= MKS_MAX_PROGS_PER_HOOK - 1);
    mks_rt_destroy(rt);
    int st = serve_until_exit(&fc, pid, 10000);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    for (uint32_t c = 0; c < N_CLASSES; c++)
        assert_int_equal(fc.counts[c], want[c]);
    assert_int_equal(fc.other_counts, 0);
    /* coverage: every task_end while attached ran the programs */
    assert_int_equal(fc.eligible_end, 357);
    assert_int_equal(fc.ran_end, 357);
    assert_int_equal(fc.throttled_end, 0);
    assert_true(fc.registers >= 1);
    assert_int_equal(fc.schema_classes, N_CLASSES);
    assert_true(fc.n_seqs >= 2);
    check_in_order(&fc);
    assert_int_equal(fc.min_tier, 2); /* no budget: full detail */
    assert_true(fc.compact_summaries >= 1);
    /* heartbeats flow beside the summaries, list the 10 monitor programs
     * while attached, and the last one says the application ended */
    assert_true(fc.heartbeats >= 2);
    assert_true(fc.hb_app_dead);
    fc_close(&fc);
}

static void test_outage_replays_in_order(void **state)
{
    (void)state;
    struct fake_collector fc;
    fc_init(&fc, "ingest-outage");
    struct mks_rt *rt = app_create(job);
    const char *extra[] = {"--exit-with-app", NULL};
    pid_t pid = agent_start(job, fc.url, extra);
    serve_until_attached(&fc, rt, pid);
    fire(rt, 0, 50, 0);
    fc_serve(&fc, 100);
    int before = fc.n_seqs;
    /* the collector goes away for 1.5 s while the rank keeps working */
    fc_close(&fc);
    for (int i = 0; i < 15; i++) {
        fire(rt, 1, 10, 1);
        usleep(100000);
    }
    fc_bind(&fc);
    fire(rt, 2, 5, 2);
    fc_serve(&fc, 200);
    mks_rt_destroy(rt);
    int st = serve_until_exit(&fc, pid, 10000);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    assert_true(fc.n_seqs > before + 20); /* about 75 epochs went by unseen */
    check_in_order(&fc);
    assert_int_equal(fc.counts[0], 50);
    assert_int_equal(fc.counts[1], 150);
    assert_int_equal(fc.counts[2], 5);
    assert_int_equal(fc.lost_reported, 0);
    assert_true(fc.registers >= 2); /* registered again after the outage */
    /* a collector that does not say it reads the compact form gets none */
    assert_int_equal(fc.compact_summaries, 0);
    fc_close(&fc);
}

static void test_overflow_is_reported_as_lost(void **state)
{
    (void)state;
    struct fake_collector fc;
    fc_init(&fc, "ingest-overflow");
    struct mks_rt *rt = app_create(job);
    /* room for a handful of summaries only */
    const char *extra[] = {"--exit-with-app", "--buffer-bytes", "4096", "--drain-ms", "8000", NULL};
    pid_t pid = agent_start(job, fc.url, extra);
    serve_until_attached(&fc, rt, pid);
    /* 1.5 s away: some 75 epochs, and even on a loaded machine (late ticks
     * merge) far more summaries than 4 KiB hold */
    fc_close(&fc);
    for (int i = 0; i < 30; i++) {
        fire(rt, 0, 10, 0);
        usleep(50000);
    }
    fc_bind(&fc);
    fc_serve(&fc, 500); /* replay what is left before the final summary */
    mks_rt_destroy(rt);
    int st = serve_until_exit(&fc, pid, 10000);
    assert_true(WIFEXITED(st));
    /* seqs have a gap at the front, and the agent said how many it lost */
    uint64_t max = 0;
    for (int i = 0; i < fc.n_seqs; i++)
        if (fc.seqs[i] > max)
            max = fc.seqs[i];
    assert_true(max > (uint64_t)fc.n_seqs);
    assert_int_equal(fc.lost_reported, max - (uint64_t)fc.n_seqs);
    for (int i = 1; i < fc.n_seqs; i++)
        assert_true(fc.seqs[i] > fc.seqs[i - 1]);
    fc_close(&fc);
}

static void test_budget_bounds_bytes_and_says_so(void **state)
{
    (void)state;
    struct fake_collector fc;
    fc_init(&fc, "ingest-budget");
    struct mks_rt *rt = app_create(job);
    const uint64_t budget = 2000;
    const char *extra[] = {"--exit-with-app", "--budget", "2000", "--drain-ms", "6000", NULL};
    pid_t pid = agent_start(job, fc.url, extra);
    serve_until_attached(&fc, rt, pid);
    uint64_t t0 = now_ns();
    fc.bytes = 0;
    for (int round = 0; round < 40; round++) {
        for (uint32_t c = 0; c < N_CLASSES; c++)
            fire(rt, c, 20, (uint32_t)round);
        fire_waits(rt, 0, 50, (uint64_t)round * 1000 + 1);
        fc_serve(&fc, 50);
    }
    double secs = (double)(now_ns() - t0) / 1e9;
    uint64_t bytes = fc.bytes;
    /* the natural rate (50 full summaries a second) is far above the budget */
    assert_true((double)bytes <= (double)budget * secs + 2 * (double)budget * 0.02 + 1500);
    assert_true(fc.min_tier < 2); /* coarsened, and the summaries say so */
    /* the agent also stopped paying for wait records it could not ship:
     * dep_wait_end was sampled, and coverage and sample_shift say so */
    assert_true(fc.throttled_wait > 0);
    assert_true(fc.max_shift > 0);
    mks_rt_destroy(rt);
    int st = serve_until_exit(&fc, pid, 15000);
    assert_true(WIFEXITED(st));
    for (uint32_t c = 0; c < N_CLASSES; c++)
        assert_int_equal(fc.counts[c], 800); /* counts stay exact when detail goes */
    check_in_order(&fc);
    fc_close(&fc);
}

static Mkscope__V1__Command *cmd_attach_builtin(uint64_t id, const char *name, const char *builtin)
{
    Mkscope__V1__Command *c = calloc(1, sizeof(*c));
    Mkscope__V1__AttachProgram *a = calloc(1, sizeof(*a));
    mkscope__v1__command__init(c);
    mkscope__v1__attach_program__init(a);
    a->name = (char *)name;
    a->hook = -1;
    a->builtin = (char *)builtin;
    c->id = id;
    c->kind_case = MKSCOPE__V1__COMMAND__KIND_ATTACH;
    c->attach = a;
    return c;
}

/* A command runs once: the same command (one nonce) handed out with three
 * acks is installed and answered once; the commands of an ack that answers
 * another request than the agent's are not run at all. */
static void test_command_copies_run_once(void **state)
{
    (void)state;
    struct fake_collector fc;
    fc_init(&fc, "ingest-once");
    struct mks_rt *rt = app_create(job);
    const char *extra[] = {"--exit-with-app", "--attach", "count", NULL};
    pid_t pid = agent_start(job, fc.url, extra);
    serve_until_mask(&fc, rt, pid, 1u << MKS_EV_TASK_END);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t real = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    Mkscope__V1__Command *c1 = cmd_attach_builtin(1, "extra", "latency");
    c1->nonce = 0x1234abcd, c1->issued_ns = real;
    fc.cmds[0] = c1;
    fc.n_cmds = 1;
    fc.repeat_cmds = 3;
    for (int t = 0; t < 1500; t += 10)
        fc_serve(&fc, 10);
    assert_int_equal(fc.n_cmds, 0); /* all three acks went out */
    assert_int_equal(fc.n_replies, 1);
    assert_int_equal(fc.replies[0].id, 1);
    assert_true(fc.replies[0].ok);

    Mkscope__V1__Command *c2 = cmd_attach_builtin(2, "other", "latency");
    c2->nonce = 0x5678ef01, c2->issued_ns = real;
    fc.cmds[0] = c2;
    fc.n_cmds = 1;
    fc.repeat_cmds = 2;
    fc.wrong_reply_to = 1;
    int seqs = fc.n_seqs;
    for (int t = 0; t < 1000; t += 10)
        fc_serve(&fc, 10);
    assert_int_equal(fc.n_replies, 1); /* nothing answered: nothing run */
    fc.wrong_reply_to = 0;
    fc.n_cmds = 0;
    for (int t = 0; t < 1000 && fc.n_seqs == seqs; t += 10)
        fc_serve(&fc, 10);
    assert_true(fc.n_seqs > seqs); /* the agent goes on once answers are right again */
    mks_rt_destroy(rt);
    serve_until_exit(&fc, pid, 5000);
    fc_close(&fc);
    free(c1->attach);
    free(c1);
    free(c2->attach);
    free(c2);
}

static void test_commands_are_verified_and_answered(void **state)
{
    (void)state;
    struct fake_collector fc;
    fc_init(&fc, "ingest-cmd");
    struct mks_rt *rt = app_create(job);
    const char *extra[] = {"--exit-with-app", "--attach", "count", NULL};
    pid_t pid = agent_start(job, fc.url, extra);
    /* the runtime-side wait of runtime.h: attach happens without a collector */
    assert_int_equal(mks_rt_wait_attached(rt, 1u << MKS_EV_TASK_END, 5000000000ull), 0);
    assert_int_equal(mks_rt_wait_attached(rt, 1u << MKS_EV_COMM_BEGIN, 20000000ull), -ETIMEDOUT);
    serve_until_mask(&fc, rt, pid, 1u << MKS_EV_TASK_END);

    /* 1: attach a second copy of a built-in; 2: garbage object; 3: budget */
    Mkscope__V1__Command *c1 = cmd_attach_builtin(1, "extra", "latency");
    Mkscope__V1__Command *c2 = cmd_attach_builtin(2, "junk", "");
    static uint8_t junk[64] = {0x7f, 'E', 'L', 'F', 2, 1, 1};
    c2->attach->bpf_object.data = junk;
    c2->attach->bpf_object.len = sizeof(junk);
    Mkscope__V1__Command c3 = MKSCOPE__V1__COMMAND__INIT;
    Mkscope__V1__SetBudget sb = MKSCOPE__V1__SET_BUDGET__INIT;
    sb.hook = MKS_EV_TASK_END;
    sb.sample_shift = 1;
    c3.id = 3;
    c3.kind_case = MKSCOPE__V1__COMMAND__KIND_BUDGET;
    c3.budget = &sb;
    /* 4: a monitor whose map variable's type is a typedef of itself, on
     * which libbpf's open never returned: a refusal, and the agent goes on */
    char path[512];
    snprintf(path, sizeof(path), "%s/count.bpf.o", monitors_dir);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static uint8_t hostile[1 << 16];
    size_t hlen = fread(hostile, 1, sizeof(hostile), f);
    fclose(f);
    assert_true(hlen > 0 && hlen < sizeof(hostile));
    static struct btf_edit be;
    assert_int_equal(btf_edit_open(hostile, hlen, &be), 0);
    uint32_t td = btf_edit_find(&be, BTF_KIND_TYPEDEF, 0), ds = 0;
    for (uint32_t id = btf_edit_find(&be, BTF_KIND_DATASEC, 0); id; id = btf_edit_find(&be, BTF_KIND_DATASEC, id))
        if (strcmp(btf_edit_name(&be, id), ".maps") == 0)
            ds = id;
    assert_true(td > 0 && ds > 0);
    btf_edit_set(&be, td, 2, td);
    btf_edit_set(&be, btf_edit_xget(&be, ds, 0), 2, td);
    Mkscope__V1__Command *c4 = cmd_attach_builtin(4, "selfref", "");
    c4->attach->bpf_object.data = hostile;
    c4->attach->bpf_object.len = hlen;
    fc.cmds[0] = c1;
    fc.cmds[1] = c2;
    fc.cmds[2] = &c3;
    fc.cmds[3] = c4;
    fc.n_cmds = 4;
    for (int t = 0; t < 3000 && fc.n_replies < 4; t += 10)
        fc_serve(&fc, 10);
    assert_int_equal(fc.n_replies, 4);
    int hb = fc.heartbeats;
    for (int t = 0; t < 2000 && fc.heartbeats < hb + 2; t += 10)
        fc_serve(&fc, 10);
    assert_true(fc.heartbeats >= hb + 2); /* still heartbeating (every 200 ms) */
    for (int i = 0; i < 4; i++) {
        const Mkscope__V1__CommandReply *r = &fc.replies[i];
        if (r->id == 1) {
            assert_true(r->ok);
            assert_true(r->cost > 0);
            assert_true(r->n_insns > 0);
            assert_true(r->prog_gen > 0);
        } else if (r->id == 2) {
            assert_false(r->ok);
            assert_true(strlen(fc.reply_err[i]) > 0);
        } else if (r->id == 4) {
            assert_false(r->ok);
            if (!strstr(fc.reply_err[i], "corrupt BTF") || !strstr(fc.reply_err[i], "cyclic"))
                print_error("reply to the cyclic BTF: %s\n", fc.reply_err[i]);
            assert_non_null(strstr(fc.reply_err[i], "cyclic"));
        } else {
            assert_int_equal(r->id, 3);
            assert_true(r->ok);
        }
    }
    assert_true(attached(rt, MKS_EV_TASK_START)); /* the latency monitor's ready->start */
    /* A program by the name `mkscope programs` lists, attachment/function:
     * detached alone; a function the attachment lacks is refused. */
    Mkscope__V1__DetachProgram d5 = MKSCOPE__V1__DETACH_PROGRAM__INIT,
                               d6 = MKSCOPE__V1__DETACH_PROGRAM__INIT;
    Mkscope__V1__Command c5 = MKSCOPE__V1__COMMAND__INIT, c6 = MKSCOPE__V1__COMMAND__INIT;
    d5.name = "extra/lat_ready_prog", d5.hook = -1;
    d6.name = "extra/nosuch", d6.hook = -1;
    c5.id = 5, c5.kind_case = MKSCOPE__V1__COMMAND__KIND_DETACH, c5.detach = &d5;
    c6.id = 6, c6.kind_case = MKSCOPE__V1__COMMAND__KIND_DETACH, c6.detach = &d6;
    fc.cmds[0] = &c5;
    fc.cmds[1] = &c6;
    fc.n_cmds = 2;
    for (int t = 0; t < 3000 && fc.n_replies < 6; t += 10)
        fc_serve(&fc, 10);
    assert_int_equal(fc.n_replies, 6);
    for (int i = 4; i < 6; i++) {
        if (fc.replies[i].id == 5) {
            assert_true(fc.replies[i].ok);
        } else {
            assert_int_equal(fc.replies[i].id, 6);
            assert_false(fc.replies[i].ok);
        }
    }
    /* ready->start gone, the monitor's run time at task_end still there */
    assert_false(attached(rt, MKS_EV_TASK_START));
    assert_true(attached(rt, MKS_EV_TASK_END));
    /* sampling one in two at task_end is reported as throttled */
    uint64_t thr0 = fc.throttled_end;
    fire(rt, 0, 100, 0);
    fc_serve(&fc, 200);
    mks_rt_destroy(rt);
    int st = serve_until_exit(&fc, pid, 10000);
    assert_true(WIFEXITED(st));
    assert_true(fc.throttled_end - thr0 >= 40);
    assert_int_equal(fc.eligible_end, fc.ran_end + fc.throttled_end);
    free(c1->attach);
    free(c1);
    free(c2->attach);
    free(c2);
    free(c4->attach);
    free(c4);
    fc_close(&fc);
}

/* A filter keeping task_class == 1, as the query compiler would emit it:
 * r2 = ctx->task_class; r0 = (r2 == 1). */
static uint64_t insn_u64(uint8_t code, uint8_t dst, uint8_t src, int16_t off, int32_t imm)
{
    return (uint64_t)code | (uint64_t)((src << 4) | dst) << 8 | (uint64_t)(uint16_t)off << 16 |
           (uint64_t)(uint32_t)imm << 32;
}

static void escalation_run(int over_ucx)
{
    struct fake_collector fc;
    struct ucx_srv srv;
    char endpoint[64] = "";
    if (over_ucx) {
        srv_start(&srv);
        snprintf(endpoint, sizeof(endpoint), "127.0.0.1:%u", srv.port);
    }
    fc_init(&fc, "ingest-esc");
    fc.raw_class = 1;
    struct mks_rt *rt = app_create(job);
    const char *extra[] = {"--exit-with-app", NULL};
    pid_t pid = agent_start(job, fc.url, extra);
    serve_until_attached(&fc, rt, pid);
    fire(rt, 1, 25, 0); /* before the window: not in the trace */
    fc_serve(&fc, 60);

    uint64_t filter[] = {
        insn_u64(MKS_BPF_LDX | MKS_BPF_MEM | MKS_BPF_W, 2, 1, 20, 0),
        insn_u64(MKS_BPF_JMP | MKS_BPF_JNE | MKS_BPF_K, 2, 0, 2, 1),
        insn_u64(MKS_BPF_ALU64 | MKS_BPF_MOV | MKS_BPF_K, 0, 0, 0, 1),
        insn_u64(MKS_BPF_JMP | MKS_BPF_EXIT, 0, 0, 0, 0),
        insn_u64(MKS_BPF_ALU64 | MKS_BPF_MOV | MKS_BPF_K, 0, 0, 0, 0),
        insn_u64(MKS_BPF_JMP | MKS_BPF_EXIT, 0, 0, 0, 0),
    };
    uint32_t hooks[] = {MKS_EV_TASK_END};
    Mkscope__V1__Escalate esc = MKSCOPE__V1__ESCALATE__INIT;
    esc.escalation_id = 77;
    esc.predicate = "class = qkv";
    esc.filter_insns = filter;
    esc.n_filter_insns = 6;
    esc.duration_ms = 1000;
    esc.budget_bytes = 1u << 20;
    esc.hooks = hooks;
    esc.n_hooks = 1;
    esc.ucx_endpoint = endpoint;
    Mkscope__V1__Command c = MKSCOPE__V1__COMMAND__INIT;
    c.id = 9;
    c.kind_case = MKSCOPE__V1__COMMAND__KIND_ESCALATE;
    c.escalate = &esc;
    fc.cmds[0] = &c;
    fc.n_cmds = 1;
    for (int t = 0; t < 3000 && fc.n_replies < 1; t += 5)
        fc_serve(&fc, 5);
    assert_int_equal(fc.n_replies, 1);
    assert_true(fc.replies[0].ok);
    assert_true(fc.replies[0].cost > 0);
    /* inside the window: 40 tasks of class 1 among others */
    for (int i = 0; i < 4; i++) {
        fire(rt, 0, 7, 1);
        fire(rt, 1, 10, 1);
        fire(rt, 2, 3, 1);
    }
    for (int t = 0; t < 5000 && !fc.raw_last; t += 10) {
        fc_serve(&fc, 10);
        if (over_ucx)
            srv_poll(&srv, &fc);
    }
    assert_true(fc.raw_last);
    if (over_ucx) {
        assert_true(fc.raw_batches_ucx > 0);
        assert_int_equal(fc.raw_batches_ingest, 0);
    } else {
        assert_true(fc.raw_batches_ingest > 0);
    }
    assert_int_equal(fc.raw_esc_id, 77);
    assert_int_equal(fc.raw_events, 40);
    assert_int_equal(fc.raw_other, 0);
    assert_int_equal(fc.raw_dropped, 0);
    /* after the window the filter is gone */
    fire(rt, 1, 10, 2);
    fc_serve(&fc, 100);
    assert_int_equal(fc.raw_events, 40);
    mks_rt_destroy(rt);
    int st = serve_until_exit(&fc, pid, 10000);
    assert_true(WIFEXITED(st));
    assert_int_equal(fc.counts[1], 25 + 40 + 10); /* the monitors never stopped */
    fc_close(&fc);
    if (over_ucx)
        srv_stop(&srv);
}

static void test_escalation_raw_trace_of_one_class(void **state)
{
    (void)state;
    escalation_run(0);
}

static void test_escalation_over_ucx(void **state)
{
    (void)state;
    escalation_run(1);
}

static void test_restart_is_followed(void **state)
{
    (void)state;
    struct fake_collector fc;
    fc_init(&fc, "ingest-restart");
    struct mks_rt *rt = app_create(job);
    pid_t pid = agent_start(job, fc.url, NULL);
    serve_until_attached(&fc, rt, pid);
    fire(rt, 0, 10, 0);
    fc_serve(&fc, 100);
    uint64_t start1 = fc.last_app_start;
    mks_rt_destroy(rt);
    fc_serve(&fc, 100);
    /* the application comes back: the agent finds it and attaches again */
    rt = app_create(job);
    serve_until_attached(&fc, rt, pid);
    fire(rt, 1, 20, 0);
    fc_serve(&fc, 300);
    assert_true(fc.registers >= 2);
    assert_true(fc.last_app_start != start1);
    assert_int_equal(fc.counts[0], 10);
    assert_int_equal(fc.counts[1], 20);
    kill(pid, SIGTERM);
    int st = serve_until_exit(&fc, pid, 10000);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    assert_false(attached(rt, MKS_EV_TASK_END)); /* it left the rank as it found it */
    mks_rt_destroy(rt);
    fc_close(&fc);
}

static void test_agent_death_detaches_hooks(void **state)
{
    (void)state;
    struct fake_collector fc;
    fc_init(&fc, "ingest-death");
    struct mks_rt *rt = app_create(job);
    const char *extra[] = {"--lease-ms", "100", NULL};
    pid_t pid = agent_start(job, fc.url, extra);
    serve_until_attached(&fc, rt, pid);
    fire(rt, 0, 10, 0);
    /* the agent dies: the lease runs out, the hooks detach and the
     * application runs on */
    kill(pid, SIGKILL);
    int st;
    waitpid(pid, &st, 0);
    uint64_t t0 = now_ns();
    while (attached(rt, MKS_EV_TASK_END) && now_ns() - t0 < 2000000000ull)
        usleep(5000);
    assert_false(attached(rt, MKS_EV_TASK_END));
    assert_true(now_ns() - t0 < 1000000000ull); /* a lease of 100 ms, plus scheduling */
    fire(rt, 1, 20, 1);
    mks_rt_destroy(rt);
    fc_close(&fc);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s AGENT MONITORS_DIR\n", argv[0]);
        return 2;
    }
    agent_bin = argv[1];
    monitors_dir = argv[2];
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/mks-agent-test-XXXXXX");
    if (!mkdtemp(tmpdir))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_counts_equal_hooks_fired, setup, teardown),
        cmocka_unit_test_setup_teardown(test_outage_replays_in_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_overflow_is_reported_as_lost, setup, teardown),
        cmocka_unit_test_setup_teardown(test_budget_bounds_bytes_and_says_so, setup, teardown),
        cmocka_unit_test_setup_teardown(test_commands_are_verified_and_answered, setup, teardown),
        cmocka_unit_test_setup_teardown(test_command_copies_run_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_escalation_raw_trace_of_one_class, setup, teardown),
        cmocka_unit_test_setup_teardown(test_escalation_over_ucx, setup, teardown),
        cmocka_unit_test_setup_teardown(test_restart_is_followed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_agent_death_detaches_hooks, setup, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    return rc;
}

/*
 * Wire format tests: every body type survives encode -> decode -> encode
 * unchanged; malformed input (random bytes, every truncation, every single
 * bit flip, wrong version, no body, oversize and non-UTF-8 fields, bad enum
 * values, forged or missing MACs) is rejected with a one-line reason and
 * never crashes (this test runs under ASan+UBSan in the sanitizer build).
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
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

#include "mkscope/wire.h"

/* Storage for one envelope of each kind; the builders fill it. */
struct fixture {
    mks_envelope env;
    Mkscope__V1__Register reg;
    Mkscope__V1__TaskSchema schema;
    Mkscope__V1__TaskClass cls[2], *cls_p[2];
    Mkscope__V1__DepClass dep, *dep_p[1];
    Mkscope__V1__CommChannel ch, *ch_p[1];
    uint32_t dep_ids[2];
    Mkscope__V1__RegisterAck rack;
    Mkscope__V1__Heartbeat hb;
    Mkscope__V1__ProgramState ps, *ps_p[1];
    Mkscope__V1__EpochSummary sum;
    Mkscope__V1__TaskStat ts, *ts_p[1];
    Mkscope__V1__Hist hq, hr;
    uint64_t bq[8], br[12];
    Mkscope__V1__StepTime st, *st_p[1];
    Mkscope__V1__RemoteWait rw, *rw_p[1];
    Mkscope__V1__Release rel, *rel_p[1];
    Mkscope__V1__LocalWait lw, *lw_p[1];
    Mkscope__V1__WorkerStat ws, *ws_p[1];
    Mkscope__V1__GenProgress gp, *gp_p[1];
    Mkscope__V1__MapDump md, *md_p[1];
    Mkscope__V1__MapEntry me, *me_p[1];
    uint8_t key[4], val[8];
    Mkscope__V1__Coverage cov, *cov_p[1];
    Mkscope__V1__Ack ack;
    Mkscope__V1__Command cmd, *cmd_p[1];
    Mkscope__V1__AttachProgram att;
    Mkscope__V1__Escalate esc;
    uint64_t insns[3];
    uint32_t hooks[2];
    Mkscope__V1__CommandReply crep;
    Mkscope__V1__SurveyRequest sreq;
    Mkscope__V1__SurveyReply srep;
    Mkscope__V1__CliRequest creq;
    char *args[2];
    Mkscope__V1__CliReply cli_reply;
    Mkscope__V1__RawEventBatch batch;
    Mkscope__V1__RawEvent ev, *ev_p[1];
};

static struct fixture F;

static void build(int body)
{
    memset(&F, 0, sizeof(F));
    mks_wire_init(&F.env, "job-1", 2, 77);
    F.env.incarnation = 0x1234567890ull;
    F.env.body_case = body;
    switch (body) {
    case MKSCOPE__V1__ENVELOPE__BODY_REGISTER:
        mkscope__v1__register__init(&F.reg);
        mkscope__v1__task_schema__init(&F.schema);
        for (int i = 0; i < 2; i++) {
            mkscope__v1__task_class__init(&F.cls[i]);
            F.cls[i].id = (uint32_t)i;
            F.cls[i].name = i ? "attn" : "gemm";
            F.cls[i].source_op = "op";
            F.cls_p[i] = &F.cls[i];
        }
        F.dep_ids[0] = 0, F.dep_ids[1] = 1;
        F.cls[1].dep_classes = F.dep_ids, F.cls[1].n_dep_classes = 2;
        F.cls[1].comm = 1;
        mkscope__v1__dep_class__init(&F.dep);
        F.dep.id = 1, F.dep.name = "allgather", F.dep.remote = 1, F.dep_p[0] = &F.dep;
        mkscope__v1__comm_channel__init(&F.ch);
        F.ch.id = 3, F.ch.name = "ring", F.ch.peer_rank = 1, F.ch.kind = "p2p", F.ch_p[0] = &F.ch;
        F.schema.classes = F.cls_p, F.schema.n_classes = 2;
        F.schema.dep_classes = F.dep_p, F.schema.n_dep_classes = 1;
        F.schema.channels = F.ch_p, F.schema.n_channels = 1;
        F.reg.n_ranks = 4, F.reg.host = "node-a", F.reg.pid = 4242, F.reg.gpu_uuid = "";
        F.reg.hook_abi_version = 1, F.reg.schema = &F.schema, F.reg.agent_version = "0.1.0";
        F.reg.n_workers = 8, F.reg.epoch_ns = 100000000, F.reg.app_start_ns = 99;
        F.env.register_ = &F.reg;
        break;
    case MKSCOPE__V1__ENVELOPE__BODY_REGISTER_ACK:
        mkscope__v1__register_ack__init(&F.rack);
        F.rack.accepted = 1, F.rack.collector_time_ns = 5, F.rack.reason = "ok";
        F.rack.stored_seq = 12;
        F.env.register_ack = &F.rack;
        break;
    case MKSCOPE__V1__ENVELOPE__BODY_HEARTBEAT:
        mkscope__v1__heartbeat__init(&F.hb);
        mkscope__v1__program_state__init(&F.ps);
        F.ps.name = "count", F.ps.hook = 3, F.ps.prog_gen = 7, F.ps.cost = 31, F.ps_p[0] = &F.ps;
        F.hb.agent_time_ns = 1000, F.hb.last_seq = 76, F.hb.app_alive = 1;
        F.hb.programs = F.ps_p, F.hb.n_programs = 1, F.hb.unacked = 3, F.hb.lost_summaries = 1;
        F.env.heartbeat = &F.hb;
        break;
    case MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY:
        mkscope__v1__epoch_summary__init(&F.sum);
        F.sum.epoch = 9, F.sum.t_begin_host_ns = 100, F.sum.t_end_host_ns = 200;
        F.sum.t_begin_dev_ns = 1100, F.sum.t_end_dev_ns = 1200;
        mkscope__v1__hist__init(&F.hq);
        mkscope__v1__hist__init(&F.hr);
        for (int i = 0; i < 8; i++)
            F.bq[i] = (uint64_t)i;
        for (int i = 0; i < 12; i++)
            F.br[i] = (uint64_t)(i * 3);
        F.hq.count = 28, F.hq.sum = 1000, F.hq.buckets = F.bq, F.hq.n_buckets = 8, F.hq.max = 100;
        F.hr.count = 198, F.hr.sum = 99999, F.hr.buckets = F.br, F.hr.n_buckets = 12;
        mkscope__v1__task_stat__init(&F.ts);
        F.ts.task_class = 1, F.ts.step = 4, F.ts.req_gen = 2, F.ts.count = 198;
        F.ts.sum_run_ns = 99999, F.ts.queue = &F.hq, F.ts.run = &F.hr, F.ts_p[0] = &F.ts;
        F.sum.task_stats = F.ts_p, F.sum.n_task_stats = 1;
        mkscope__v1__step_time__init(&F.st);
        F.st.step = 4, F.st.t_begin_dev_ns = 1110, F.st.t_end_dev_ns = 1190, F.st.tasks = 198;
        F.st.complete = 1, F.st.queued_while_idle_ns = 5, F.st_p[0] = &F.st;
        F.sum.steps = F.st_p, F.sum.n_steps = 1;
        mkscope__v1__remote_wait__init(&F.rw);
        F.rw.comm_gen = 0xabcdef, F.rw.peer_rank = 3, F.rw.waiter_class = 1, F.rw.step = 4;
        F.rw.t_begin_dev_ns = 1120, F.rw.t_end_dev_ns = 1150, F.rw.producer_class = 0;
        F.rw.producer_class_known = 1, F.rw_p[0] = &F.rw;
        F.sum.remote_waits = F.rw_p, F.sum.n_remote_waits = 1;
        mkscope__v1__release__init(&F.rel);
        F.rel.comm_gen = 0xabc, F.rel.consumer_rank = 1, F.rel.task_class = 0, F.rel.step = 4;
        F.rel.t_ready_dev_ns = 1111, F.rel.t_start_dev_ns = 1112, F.rel.t_end_dev_ns = 1120;
        F.rel.t_comm_begin_dev_ns = 1121, F.rel.t_comm_end_dev_ns = 1130;
        F.rel.t_release_dev_ns = 1131, F.rel.bytes = 4096, F.rel_p[0] = &F.rel;
        F.sum.releases = F.rel_p, F.sum.n_releases = 1;
        mkscope__v1__local_wait__init(&F.lw);
        F.lw.waiter_class = 1, F.lw.step = 4, F.lw.count = 2, F.lw.sum_ns = 30, F.lw.max_ns = 20;
        F.lw_p[0] = &F.lw;
        F.sum.local_waits = F.lw_p, F.sum.n_local_waits = 1;
        mkscope__v1__worker_stat__init(&F.ws);
        F.ws.worker = 5, F.ws.step = 4, F.ws.busy_ns = 70, F.ws.idle_ns = 10, F.ws.dep_wait_ns = 3;
        F.ws.max_queue_depth = 9, F.ws.over_threshold_ns = 2, F.ws.tasks = 25, F.ws_p[0] = &F.ws;
        F.sum.workers = F.ws_p, F.sum.n_workers = 1;
        mkscope__v1__gen_progress__init(&F.gp);
        F.gp.req_gen = 2, F.gp.step = 4, F.gp.t_dev_ns = 1190, F.gp.value = 5, F.gp_p[0] = &F.gp;
        F.sum.gens = F.gp_p, F.sum.n_gens = 1;
        mkscope__v1__map_entry__init(&F.me);
        memcpy(F.key, "\x01\x00\x00\x00", 4);
        memcpy(F.val, "\x2a\x00\x00\x00\x00\x00\x00\x00", 8);
        F.me.key.data = F.key, F.me.key.len = 4, F.me.value.data = F.val, F.me.value.len = 8;
        F.me_p[0] = &F.me;
        mkscope__v1__map_dump__init(&F.md);
        F.md.prog_id = 1, F.md.prog_name = "count", F.md.map_name = "per_class";
        F.md.entries = F.me_p, F.md.n_entries = 1, F.md_p[0] = &F.md;
        F.sum.maps = F.md_p, F.sum.n_maps = 1;
        mkscope__v1__coverage__init(&F.cov);
        F.cov.hook = 3, F.cov.eligible = 200, F.cov.ran = 198, F.cov.throttled = 2;
        F.cov.prog_gen = 7, F.cov_p[0] = &F.cov;
        F.sum.coverage = F.cov_p, F.sum.n_coverage = 1;
        F.sum.detail_tier = 2, F.sum.sample_shift = 1, F.sum.lost_summaries = 1;
        F.sum.waits_dropped = 4;
        F.env.epoch_summary = &F.sum;
        break;
    case MKSCOPE__V1__ENVELOPE__BODY_ACK:
    case MKSCOPE__V1__ENVELOPE__BODY_COMMAND:
        mkscope__v1__command__init(&F.cmd);
        mkscope__v1__attach_program__init(&F.att);
        F.att.name = "count", F.att.hook = -1, F.att.builtin = "task_counts";
        F.cmd.id = 11, F.cmd.kind_case = MKSCOPE__V1__COMMAND__KIND_ATTACH, F.cmd.attach = &F.att;
        F.cmd_p[0] = &F.cmd;
        if (body == MKSCOPE__V1__ENVELOPE__BODY_ACK) {
            mkscope__v1__ack__init(&F.ack);
            F.ack.up_to_seq = 77, F.ack.commands = F.cmd_p, F.ack.n_commands = 1;
            F.env.ack = &F.ack;
        } else {
            mkscope__v1__escalate__init(&F.esc);
            F.insns[0] = 0xb7, F.insns[1] = 0x1234, F.insns[2] = 0x95;
            F.hooks[0] = 2, F.hooks[1] = 3;
            F.esc.escalation_id = 5, F.esc.predicate = "rank == 3 && class == \"attn\"";
            F.esc.filter_insns = F.insns, F.esc.n_filter_insns = 3, F.esc.duration_ms = 100;
            F.esc.budget_bytes = 1 << 20, F.esc.ucx_endpoint = "127.0.0.1:7404";
            F.esc.hooks = F.hooks, F.esc.n_hooks = 2;
            F.cmd.kind_case = MKSCOPE__V1__COMMAND__KIND_ESCALATE, F.cmd.escalate = &F.esc;
            F.env.command = &F.cmd;
        }
        break;
    case MKSCOPE__V1__ENVELOPE__BODY_COMMAND_REPLY:
        mkscope__v1__command_reply__init(&F.crep);
        F.crep.id = 11, F.crep.ok = 1, F.crep.error = "", F.crep.verifier_log = "accepted";
        F.crep.cost = 31, F.crep.n_insns = 20, F.crep.prog_gen = 8, F.crep.applied_host_ns = 3;
        F.env.command_reply = &F.crep;
        break;
    case MKSCOPE__V1__ENVELOPE__BODY_SURVEY_REQUEST:
        mkscope__v1__survey_request__init(&F.sreq);
        F.sreq.id = 3, F.sreq.deadline_ms = 500, F.sreq.what = "coverage", F.sreq.filter = "";
        F.env.survey_request = &F.sreq;
        break;
    case MKSCOPE__V1__ENVELOPE__BODY_SURVEY_REPLY:
        mkscope__v1__survey_reply__init(&F.srep);
        mkscope__v1__coverage__init(&F.cov);
        F.cov.hook = 2, F.cov.eligible = 5, F.cov.ran = 5, F.cov_p[0] = &F.cov;
        F.srep.id = 3, F.srep.ok = 1, F.srep.epoch = 4, F.srep.last_seq = 70;
        F.srep.coverage = F.cov_p, F.srep.n_coverage = 1;
        F.env.survey_reply = &F.srep;
        break;
    case MKSCOPE__V1__ENVELOPE__BODY_CLI_REQUEST:
        mkscope__v1__cli_request__init(&F.creq);
        F.args[0] = "count by rank", F.args[1] = "-f";
        F.creq.id = 1, F.creq.verb = "query", F.creq.args = F.args, F.creq.n_args = 2;
        F.env.cli_request = &F.creq;
        break;
    case MKSCOPE__V1__ENVELOPE__BODY_CLI_REPLY:
        mkscope__v1__cli_reply__init(&F.cli_reply);
        F.cli_reply.id = 1, F.cli_reply.status = 0, F.cli_reply.json = "{\"rows\":[]}";
        F.env.cli_reply = &F.cli_reply;
        break;
    case MKSCOPE__V1__ENVELOPE__BODY_RAW_EVENT_BATCH:
        mkscope__v1__raw_event_batch__init(&F.batch);
        mkscope__v1__raw_event__init(&F.ev);
        F.ev.event = 3, F.ev.worker = 1, F.ev.task_class = 2, F.ev.step = 4, F.ev.t_now = 999;
        F.ev.comm_gen = 77, F.ev_p[0] = &F.ev;
        F.batch.escalation_id = 5, F.batch.events = F.ev_p, F.batch.n_events = 1;
        F.batch.dropped = 2, F.batch.last = 1;
        F.env.raw_event_batch = &F.batch;
        break;
    }
}

static const int all_bodies[] = {
    MKSCOPE__V1__ENVELOPE__BODY_REGISTER,       MKSCOPE__V1__ENVELOPE__BODY_REGISTER_ACK,
    MKSCOPE__V1__ENVELOPE__BODY_HEARTBEAT,      MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY,
    MKSCOPE__V1__ENVELOPE__BODY_ACK,            MKSCOPE__V1__ENVELOPE__BODY_COMMAND,
    MKSCOPE__V1__ENVELOPE__BODY_COMMAND_REPLY,  MKSCOPE__V1__ENVELOPE__BODY_SURVEY_REQUEST,
    MKSCOPE__V1__ENVELOPE__BODY_SURVEY_REPLY,   MKSCOPE__V1__ENVELOPE__BODY_CLI_REQUEST,
    MKSCOPE__V1__ENVELOPE__BODY_CLI_REPLY,      MKSCOPE__V1__ENVELOPE__BODY_RAW_EVENT_BATCH,
};
#define N_BODIES (sizeof(all_bodies) / sizeof(all_bodies[0]))

static void encode_ok(const struct mks_wire_key *key, uint8_t **buf, size_t *len)
{
    char err[256] = "";
    int rc = mks_wire_encode(&F.env, key, buf, len, err, sizeof(err));
    if (rc)
        fail_msg("encode %s: %s", mks_wire_body_name(F.env.body_case), err);
}

/* A decode error must be negative and come with a one-line reason. */
static void expect_reject(const void *buf, size_t len, const struct mks_wire_key *key)
{
    char err[256] = "";
    mks_envelope *env = NULL;
    int rc = mks_wire_decode(buf, len, key, &env, err, sizeof(err));
    if (rc == 0) {
        mks_wire_free(env);
        fail_msg("decode of a malformed message succeeded");
    }
    assert_true(rc < 0);
    assert_null(env);
    assert_true(strlen(err) > 0);
    assert_null(strchr(err, '\n'));
}

static void test_round_trip_every_body(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_BODIES; i++) {
        build(all_bodies[i]);
        uint8_t *buf, *buf2;
        size_t len, len2;
        encode_ok(NULL, &buf, &len);
        char err[256] = "";
        mks_envelope *env = NULL;
        int rc = mks_wire_decode(buf, len, NULL, &env, err, sizeof(err));
        if (rc)
            fail_msg("decode %s: %s", mks_wire_body_name(all_bodies[i]), err);
        assert_int_equal(env->body_case, all_bodies[i]);
        assert_int_equal(env->wire_version, 1);
        assert_int_equal(env->seq, 77);
        assert_int_equal(env->rank, 2);
        assert_int_equal(env->incarnation, 0x1234567890ull);
        assert_string_equal(env->job, "job-1");
        /* Re-encoding the decoded message gives the same bytes: no field lost. */
        rc = mks_wire_encode(env, NULL, &buf2, &len2, err, sizeof(err));
        assert_int_equal(rc, 0);
        assert_int_equal(len, len2);
        assert_memory_equal(buf, buf2, len);
        free(buf2);
        mks_wire_free(env);
        free(buf);
    }
}

static void test_summary_fields(void **state)
{
    (void)state;
    build(MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY);
    uint8_t *buf;
    size_t len;
    encode_ok(NULL, &buf, &len);
    mks_envelope *env = NULL;
    char err[256];
    assert_int_equal(mks_wire_decode(buf, len, NULL, &env, err, sizeof(err)), 0);
    const Mkscope__V1__EpochSummary *s = env->epoch_summary;
    assert_int_equal(s->n_task_stats, 1);
    assert_int_equal(s->task_stats[0]->run->n_buckets, 12);
    assert_int_equal(s->task_stats[0]->run->buckets[11], 33);
    assert_int_equal(s->remote_waits[0]->comm_gen, 0xabcdef);
    assert_true(s->remote_waits[0]->producer_class_known);
    assert_int_equal(s->releases[0]->t_release_dev_ns, 1131);
    assert_int_equal(s->maps[0]->entries[0]->value.len, 8);
    assert_int_equal(s->maps[0]->entries[0]->value.data[0], 0x2a);
    assert_int_equal(s->coverage[0]->ran, 198);
    assert_int_equal(s->workers[0]->max_queue_depth, 9);
    /* an older agent's step: no CPU wait, read as not measured */
    assert_false(s->steps[0]->cpu_wait_measured);
    assert_int_equal(s->steps[0]->cpu_wait_ns, 0);
    mks_wire_free(env);
    free(buf);
    /* a measured one, zero included, arrives as sent */
    for (uint64_t w = 0; w <= 4000; w += 4000) {
        build(MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY);
        F.st.cpu_wait_measured = 1, F.st.cpu_wait_ns = w, F.st.cpu_runs = w / 100;
        encode_ok(NULL, &buf, &len);
        assert_int_equal(mks_wire_decode(buf, len, NULL, &env, err, sizeof(err)), 0);
        assert_true(env->epoch_summary->steps[0]->cpu_wait_measured);
        assert_int_equal(env->epoch_summary->steps[0]->cpu_wait_ns, w);
        assert_int_equal(env->epoch_summary->steps[0]->cpu_runs, w / 100);
        mks_wire_free(env);
        free(buf);
    }
}

static void test_random_bytes(void **state)
{
    (void)state;
    srand(12345);
    uint8_t buf[512];
    int accepted = 0;
    for (int iter = 0; iter < 20000; iter++) {
        size_t len = 1 + (size_t)rand() % sizeof(buf);
        for (size_t i = 0; i < len; i++)
            buf[i] = (uint8_t)rand();
        char err[256] = "";
        mks_envelope *env = NULL;
        int rc = mks_wire_decode(buf, len, NULL, &env, err, sizeof(err));
        if (rc == 0) {
            /* Whatever decodes must be a fully valid envelope. */
            accepted++;
            assert_int_equal(mks_wire_validate(env, err, sizeof(err)), 0);
            mks_wire_free(env);
        } else {
            assert_true(rc < 0);
            assert_true(strlen(err) > 0);
        }
    }
    /* Random bytes essentially never form a version-1 envelope with a body. */
    assert_true(accepted < 20);
}

static void test_truncations(void **state)
{
    (void)state;
    for (size_t b = 0; b < N_BODIES; b++) {
        build(all_bodies[b]);
        uint8_t *buf;
        size_t len;
        encode_ok(NULL, &buf, &len);
        for (size_t cut = 0; cut < len; cut++) {
            char err[256] = "";
            mks_envelope *env = NULL;
            uint8_t *copy = malloc(cut ? cut : 1);
            memcpy(copy, buf, cut);
            int rc = mks_wire_decode(copy, cut, NULL, &env, err, sizeof(err));
            /* A prefix can end on a field boundary and still be a valid
             * message (protobuf has no length header); it must then be valid. */
            if (rc == 0) {
                assert_int_equal(mks_wire_validate(env, err, sizeof(err)), 0);
                mks_wire_free(env);
            } else {
                assert_true(strlen(err) > 0);
            }
            free(copy);
        }
        free(buf);
    }
}

static void test_bit_flips(void **state)
{
    (void)state;
    for (size_t b = 0; b < N_BODIES; b++) {
        build(all_bodies[b]);
        uint8_t *buf;
        size_t len;
        encode_ok(NULL, &buf, &len);
        for (size_t bit = 0; bit < len * 8; bit++) {
            buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
            char err[256] = "";
            mks_envelope *env = NULL;
            int rc = mks_wire_decode(buf, len, NULL, &env, err, sizeof(err));
            if (rc == 0) {
                assert_int_equal(mks_wire_validate(env, err, sizeof(err)), 0);
                mks_wire_free(env);
            } else {
                assert_true(rc < 0);
                assert_true(strlen(err) > 0);
            }
            buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        }
        free(buf);
    }
}

/* Encode bypassing validation, as a buggy or hostile peer would. */
static uint8_t *raw_pack(size_t *len)
{
    *len = mkscope__v1__envelope__get_packed_size(&F.env);
    uint8_t *buf = malloc(*len);
    mkscope__v1__envelope__pack(&F.env, buf);
    return buf;
}

static void expect_raw_reject(const char *needle)
{
    size_t len;
    uint8_t *buf = raw_pack(&len);
    char err[256] = "";
    mks_envelope *env = NULL;
    int rc = mks_wire_decode(buf, len, NULL, &env, err, sizeof(err));
    if (rc == 0) {
        mks_wire_free(env);
        fail_msg("accepted, expected an error containing '%s'", needle);
    }
    if (!strstr(err, needle))
        fail_msg("error '%s' does not mention '%s'", err, needle);
    /* The encoder refuses the same message. */
    uint8_t *out;
    size_t outlen;
    assert_true(mks_wire_encode(&F.env, NULL, &out, &outlen, err, sizeof(err)) < 0);
    free(buf);
}

static void test_semantic_rejects(void **state)
{
    (void)state;
    char big[MKS_WIRE_MAX_STR + 2];
    uint64_t many[MKS_WIRE_MAX_HIST_BUCKETS + 1] = {0};

    build(MKSCOPE__V1__ENVELOPE__BODY_HEARTBEAT);
    F.env.wire_version = 2;
    expect_raw_reject("wire version 2");

    build(MKSCOPE__V1__ENVELOPE__BODY_HEARTBEAT);
    F.env.body_case = MKSCOPE__V1__ENVELOPE__BODY__NOT_SET;
    expect_raw_reject("no message body");

    build(MKSCOPE__V1__ENVELOPE__BODY_HEARTBEAT);
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = 0;
    F.ps.name = big;
    expect_raw_reject("heartbeat.programs[0].name: string longer than");

    build(MKSCOPE__V1__ENVELOPE__BODY_HEARTBEAT);
    F.ps.name = "bad\xc3\x28utf8";
    expect_raw_reject("not valid UTF-8");

    build(MKSCOPE__V1__ENVELOPE__BODY_HEARTBEAT);
    F.ps.hook = 11;
    expect_raw_reject("hook 11 out of range");

    build(MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY);
    F.hr.buckets = many, F.hr.n_buckets = MKS_WIRE_MAX_HIST_BUCKETS + 1;
    expect_raw_reject("65 elements, at most 64");

    build(MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY);
    F.cov.ran = F.cov.eligible + 1;
    expect_raw_reject("ran 201 > eligible 200");

    build(MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY);
    F.rw.t_end_dev_ns = F.rw.t_begin_dev_ns - 1;
    expect_raw_reject("remote_waits[0]: ends");

    /* the CPU wait: a value without its flag (it would read as not
     * measured), or a flag on a step without its whole span */
    build(MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY);
    F.st.cpu_wait_ns = 70;
    expect_raw_reject("steps[0]: cpu_wait_ns 70, cpu_runs 0 without cpu_wait_measured");
    build(MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY);
    F.st.cpu_runs = 3;
    expect_raw_reject("steps[0]: cpu_wait_ns 0, cpu_runs 3 without cpu_wait_measured");

    build(MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY);
    F.st.cpu_wait_measured = 1, F.st.cpu_wait_ns = 70, F.st.complete = 0;
    expect_raw_reject("cpu_wait_measured on a step without its whole span");

    build(MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY);
    F.env.job = "";
    expect_raw_reject("must name its job");

    build(MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY);
    F.env.job = "a/b";
    expect_raw_reject("job name must match");

    build(MKSCOPE__V1__ENVELOPE__BODY_REGISTER);
    F.env.rank = 4;
    expect_raw_reject("rank 4 not below n_ranks 4");

    build(MKSCOPE__V1__ENVELOPE__BODY_REGISTER);
    F.cls[1].id = 0;
    expect_raw_reject("task class id 0 appears twice");

    build(MKSCOPE__V1__ENVELOPE__BODY_REGISTER);
    F.cls[0].name = "";
    expect_raw_reject("has no name");

    build(MKSCOPE__V1__ENVELOPE__BODY_ACK);
    F.cmd.kind_case = MKSCOPE__V1__COMMAND__KIND__NOT_SET;
    expect_raw_reject("no command kind");

    build(MKSCOPE__V1__ENVELOPE__BODY_ACK);
    F.att.bpf_object.data = (uint8_t *)"x", F.att.bpf_object.len = 1;
    expect_raw_reject("exactly one of bpf_object and builtin");

    build(MKSCOPE__V1__ENVELOPE__BODY_CLI_REQUEST);
    F.creq.verb = "";
    expect_raw_reject("no verb");

    build(MKSCOPE__V1__ENVELOPE__BODY_RAW_EVENT_BATCH);
    F.ev.event = 40;
    expect_raw_reject("hook 40 out of range");
}

static void test_size_limits(void **state)
{
    (void)state;
    uint8_t b[4] = {0x0a, 0x00};
    expect_reject(b, 0, NULL);
    /* Larger than the wire limit: rejected before parsing. */
    uint8_t *huge = calloc(1, MKS_WIRE_MAX_MSG + 1);
    char err[256] = "";
    mks_envelope *env = NULL;
    assert_int_equal(mks_wire_decode(huge, MKS_WIRE_MAX_MSG + 1, NULL, &env, err, sizeof(err)),
                     -E2BIG);
    free(huge);
}

static void test_mac(void **state)
{
    (void)state;
    struct mks_wire_key k1, k2;
    memset(k1.bytes, 0x11, sizeof(k1.bytes));
    memset(k2.bytes, 0x22, sizeof(k2.bytes));
    build(MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY);
    uint8_t *buf, *plain;
    size_t len, plain_len;
    encode_ok(&k1, &buf, &len);
    encode_ok(NULL, &plain, &plain_len);
    assert_int_equal(len, plain_len + 35);

    char err[256] = "";
    mks_envelope *env = NULL;
    assert_int_equal(mks_wire_decode(buf, len, &k1, &env, err, sizeof(err)), 0);
    assert_int_equal(env->mac.len, 32);
    mks_wire_free(env);
    /* No key configured on the receiver: the MAC is ignored. */
    assert_int_equal(mks_wire_decode(buf, len, NULL, &env, err, sizeof(err)), 0);
    mks_wire_free(env);

    assert_int_equal(mks_wire_decode(buf, len, &k2, &env, err, sizeof(err)), -EACCES);
    assert_non_null(strstr(err, "MAC mismatch"));
    assert_int_equal(mks_wire_decode(plain, plain_len, &k1, &env, err, sizeof(err)), -EACCES);
    assert_non_null(strstr(err, "no MAC"));
    /* Any flipped bit in a MACed message is caught. */
    for (size_t bit = 0; bit < len * 8; bit += 7) {
        buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        expect_reject(buf, len, &k1);
        buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
    free(buf);
    free(plain);
}

static void test_key_file(void **state)
{
    (void)state;
    char path[] = "/tmp/mks-wire-key-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *hex = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n";
    assert_int_equal(write(fd, hex, strlen(hex)), (ssize_t)strlen(hex));
    close(fd);
    struct mks_wire_key k;
    char err[256] = "";
    assert_int_equal(mks_wire_key_load(path, &k, err, sizeof(err)), 0);
    for (int i = 0; i < 32; i++)
        assert_int_equal(k.bytes[i], i);
    chmod(path, 0644);
    assert_int_equal(mks_wire_key_load(path, &k, err, sizeof(err)), -EPERM);
    assert_non_null(strstr(err, "chmod 600"));
    chmod(path, 0600);
    fd = open(path, O_WRONLY | O_TRUNC);
    assert_int_equal(write(fd, "short", 5), 5);
    close(fd);
    assert_int_equal(mks_wire_key_load(path, &k, err, sizeof(err)), -EINVAL);
    /* Longer than any key: refused, not cut to its head. */
    fd = open(path, O_WRONLY | O_TRUNC);
    for (int i = 0; i < 4; i++)
        assert_int_equal(write(fd, hex, strlen(hex)), (ssize_t)strlen(hex));
    close(fd);
    assert_int_equal(mks_wire_key_load(path, &k, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "found more than"));
    unlink(path);
    assert_int_equal(mks_wire_key_load(path, &k, err, sizeof(err)), -ENOENT);
    /* A directory, a device and a FIFO nobody writes to: errors, at once
     * (open without O_NONBLOCK blocked on the FIFO forever). */
    char dir[] = "/tmp/mks-wire-keydir-XXXXXX";
    assert_non_null(mkdtemp(dir));
    chmod(dir, 0700);
    assert_int_equal(mks_wire_key_load(dir, &k, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "is a directory"));
    assert_int_equal(mks_wire_key_load("/dev/null", &k, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "not a regular file"));
    char fifo[300];
    snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(mks_wire_key_load(fifo, &k, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "found 0 bytes"));
    /* A pipe whose writer is slow (--key <(kubectl get secret ...)). */
    int pp[2];
    assert_int_equal(pipe(pp), 0);
    pid_t w = fork();
    if (w == 0) {
        close(pp[0]);
        usleep(200000);
        _exit(write(pp[1], hex, strlen(hex)) == (ssize_t)strlen(hex) ? 0 : 1);
    }
    close(pp[1]);
    char via[64];
    snprintf(via, sizeof(via), "/proc/self/fd/%d", pp[0]);
    memset(&k, 0, sizeof(k));
    assert_int_equal(mks_wire_key_load(via, &k, err, sizeof(err)), 0);
    assert_int_equal(k.bytes[31], 31);
    close(pp[0]);
    waitpid(w, NULL, 0);
    unlink(fifo);
    rmdir(dir);
}

static void test_schema_decode(void **state)
{
    (void)state;
    build(MKSCOPE__V1__ENVELOPE__BODY_REGISTER);
    size_t len = mkscope__v1__task_schema__get_packed_size(&F.schema);
    uint8_t *buf = malloc(len);
    mkscope__v1__task_schema__pack(&F.schema, buf);
    Mkscope__V1__TaskSchema *s = NULL;
    char err[256];
    assert_int_equal(mks_wire_schema_decode(buf, len, &s, err, sizeof(err)), 0);
    assert_int_equal(s->n_classes, 2);
    assert_string_equal(s->classes[1]->name, "attn");
    assert_int_equal(s->classes[1]->n_dep_classes, 2);
    mks_wire_schema_free(s);
    buf[0] ^= 0xff;
    s = NULL;
    int rc = mks_wire_schema_decode(buf, len, &s, err, sizeof(err));
    if (rc == 0)
        mks_wire_schema_free(s);
    else
        assert_true(strlen(err) > 0);
    free(buf);
}

/* An epoch summary of `len` bytes in all made of empty coverage records:
 * two bytes each on the wire, a struct of ~60 bytes each decoded.  What an
 * attacker sends to make the decoder allocate 40x what it received. */
static uint8_t *hostile_summary(size_t len, size_t *len_p)
{
    uint8_t *b = malloc(len);
    size_t at = 0;
    b[at++] = 0x08, b[at++] = 0x01;                /* wire_version 1 */
    b[at++] = 0x1a, b[at++] = 0x01, b[at++] = 'j'; /* job "j" */
    b[at++] = 0x6a;                                /* epoch_summary, length-delimited */
    size_t body = len - at - 4;
    body &= ~(size_t)1;
    b[at++] = (uint8_t)(0x80 | (body & 0x7f));
    b[at++] = (uint8_t)(0x80 | ((body >> 7) & 0x7f));
    b[at++] = (uint8_t)(0x80 | ((body >> 14) & 0x7f));
    b[at++] = (uint8_t)((body >> 21) & 0x7f);
    for (size_t i = 0; i < body / 2; i++)
        b[at++] = 0x72, b[at++] = 0x00; /* coverage {} */
    *len_p = at;
    return b;
}

static void test_mac_checked_before_decode(void **state)
{
    (void)state;
    struct mks_wire_key k;
    memset(k.bytes, 0x5a, sizeof(k.bytes));
    size_t len;
    uint8_t *b = hostile_summary(MKS_WIRE_MAX_MSG - 64, &len);
    char err[256] = "";
    mks_envelope *env = NULL;
    /* With a key: refused as unauthenticated, whatever the body says (before,
     * it was decoded, 1.5 GB, and its sender told what was wrong with it). */
    assert_int_equal(mks_wire_decode(b, len, &k, &env, err, sizeof(err)), -EACCES);
    assert_null(env);
    assert_non_null(strstr(err, "MAC"));
    /* Without a key it is decoded within a memory bound and refused. */
    assert_int_equal(mks_wire_decode(b, len, NULL, &env, err, sizeof(err)), -E2BIG);
    assert_non_null(strstr(err, "to decode"));
    free(b);
    /* A correctly MACed message of a body the receiver does not take: the
     * sender is known, so it is told. */
    build(MKSCOPE__V1__ENVELOPE__BODY_CLI_REQUEST);
    uint8_t *buf;
    encode_ok(&k, &buf, &len);
    assert_int_equal(mks_wire_decode_for(buf, len, MKS_WIRE_ACCEPT_INGEST, &k, &env, err,
                                         sizeof(err)),
                     -EPROTO);
    assert_non_null(strstr(err, "cli_request is not taken here"));
    /* The same without its MAC: nothing but "not authenticated". */
    assert_int_equal(mks_wire_decode_for(buf, len - 35, MKS_WIRE_ACCEPT_INGEST, &k, &env, err,
                                         sizeof(err)),
                     -EACCES);
    free(buf);
    /* Larger than anything the receiver takes: refused before the MAC. */
    uint8_t *big = calloc(1, (10u << 20));
    assert_int_equal(mks_wire_decode_for(big, 10u << 20, MKS_WIRE_BODY(CLI_REQUEST), &k, &env,
                                         err, sizeof(err)),
                     -EACCES);
    assert_non_null(strstr(err, "limit"));
    free(big);
}

static void test_body_limits(void **state)
{
    (void)state;
    /* A heartbeat of 64 programs with long names is ~270 KB: fine.  One of
     * 1.5 MB is no heartbeat an agent sends. */
    static char names[400][4001];
    static Mkscope__V1__ProgramState ps[400], *psp[400];
    build(MKSCOPE__V1__ENVELOPE__BODY_HEARTBEAT);
    for (int i = 0; i < 400; i++) {
        memset(names[i], 'p', 4000);
        names[i][4000] = 0;
        mkscope__v1__program_state__init(&ps[i]);
        ps[i].name = names[i];
        ps[i].hook = 1;
        psp[i] = &ps[i];
    }
    F.hb.programs = psp, F.hb.n_programs = 400;
    size_t len;
    uint8_t *buf = raw_pack(&len);
    assert_true(len > mks_wire_body_limit(MKSCOPE__V1__ENVELOPE__BODY_HEARTBEAT));
    char err[256];
    mks_envelope *env = NULL;
    assert_int_equal(mks_wire_decode(buf, len, NULL, &env, err, sizeof(err)), -E2BIG);
    assert_non_null(strstr(err, "heartbeat of"));
    free(buf);
    F.hb.n_programs = 64;
    buf = raw_pack(&len);
    assert_int_equal(mks_wire_decode(buf, len, NULL, &env, err, sizeof(err)), 0);
    mks_wire_free(env);
    free(buf);
}

static void test_count_bounds(void **state)
{
    (void)state;
    /* Counts near 2^63 would turn negative in the store and overflow its
     * sums: refused at the door. */
    build(MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY);
    F.ts.count = (1ull << 63) - 1;
    expect_raw_reject("task_stats[0].count: 9223372036854775807 above the bound 2^53");
    build(MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY);
    F.cov.eligible = UINT64_MAX, F.cov.ran = 1;
    expect_raw_reject("coverage[0].eligible");
    build(MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY);
    F.br[3] = 1ull << 60;
    expect_raw_reject("buckets[3]");
    build(MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY);
    F.st.t_end_dev_ns = 1ull << 63;
    expect_raw_reject("steps[0].t_end_dev_ns");
    build(MKSCOPE__V1__ENVELOPE__BODY_HEARTBEAT);
    F.env.incarnation = UINT64_MAX;
    expect_raw_reject("incarnation");
    /* Summed into coverage with eligible (status, metrics). */
    build(MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY);
    F.cov.undelivered = 1ull << 63;
    expect_raw_reject("coverage[0].undelivered");
    /* Twice it is the silence after which a rank is lost: 2^64 wrapped to
     * 0 and every rank of the agent was lost at once. */
    build(MKSCOPE__V1__ENVELOPE__BODY_REGISTER);
    F.reg.heartbeat_ns = 1ull << 63;
    expect_raw_reject("heartbeat_ns");
    /* Ids use all 64 bits. */
    build(MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY);
    F.rw.comm_gen = UINT64_MAX;
    F.ts.count = MKS_WIRE_MAX_COUNT;
    uint8_t *buf;
    size_t len;
    encode_ok(NULL, &buf, &len);
    free(buf);
}

static void test_job_grammar(void **state)
{
    (void)state;
    const char *good[] = {"j", "job-1", "llama.70b", "_x", "A9", "a.-_b"};
    const char *bad[] = {"", ".", "..", "-rf", ".hidden", "a/b", "a b", "é",
                         "0123456789012345678901234567890123456789012345678901234567890123x"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        assert_true(mks_wire_job_valid(good[i]));
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (mks_wire_job_valid(bad[i]))
            fail_msg("job name '%s' accepted", bad[i]);
    build(MKSCOPE__V1__ENVELOPE__BODY_HEARTBEAT);
    F.env.job = "..";
    expect_raw_reject("job name must match");
}

static void test_init_stamps(void **state)
{
    (void)state;
    mks_envelope a, b;
    mks_wire_init(&a, "j", 0, 1);
    mks_wire_init(&b, "j", 0, 1);
    assert_true(a.nonce != 0);
    assert_true(a.nonce != b.nonce);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    assert_true(a.sent_ns <= now && now - a.sent_ns < 5000000000ull);
    assert_int_equal(a.reply_to, 0);
    /* what a reply must name, read back from the bytes */
    build(MKSCOPE__V1__ENVELOPE__BODY_HEARTBEAT);
    uint8_t *buf;
    size_t len;
    encode_ok(NULL, &buf, &len);
    assert_true(F.env.nonce != 0);
    assert_int_equal(mks_wire_nonce_of(buf, len), F.env.nonce);
    assert_int_equal(mks_wire_nonce_of(buf, len - 1), 0); /* cut: not an envelope */
    assert_int_equal(mks_wire_nonce_of("\xff\xff", 2), 0);
    free(buf);
}

/* Seeds for fuzz_wire: every body, plain and MACed (mode byte first, see
 * fuzz_wire.c), into dir. */
static int write_corpus(const char *dir)
{
    for (size_t i = 0; i < N_BODIES; i++) {
        for (int mac = 0; mac < 2; mac++) {
            build(all_bodies[i]);
            uint8_t *buf;
            size_t len;
            char err[256], path[4096];
            if (mks_wire_encode(&F.env, NULL, &buf, &len, err, sizeof(err)))
                return 1;
            snprintf(path, sizeof(path), "%s/%s%s", dir, mks_wire_body_name(all_bodies[i]),
                     mac ? "-mac" : "");
            FILE *f = fopen(path, "wb");
            if (!f)
                return 1;
            /* mode: key and MAC appended, or neither; accept any (0). */
            uint8_t mode = mac ? 3 : 0;
            fwrite(&mode, 1, 1, f);
            fwrite(buf, 1, len, f);
            fclose(f);
            free(buf);
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--write-corpus"))
        return write_corpus(argv[2]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_every_body),
        cmocka_unit_test(test_summary_fields),
        cmocka_unit_test(test_random_bytes),
        cmocka_unit_test(test_truncations),
        cmocka_unit_test(test_bit_flips),
        cmocka_unit_test(test_semantic_rejects),
        cmocka_unit_test(test_size_limits),
        cmocka_unit_test(test_mac),
        cmocka_unit_test(test_key_file),
        cmocka_unit_test(test_schema_decode),
        cmocka_unit_test(test_mac_checked_before_decode),
        cmocka_unit_test(test_body_limits),
        cmocka_unit_test(test_count_bounds),
        cmocka_unit_test(test_job_grammar),
        cmocka_unit_test(test_init_stamps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * The escalation trace in both formats, from raw events stored for two
 * ranks: rank 0 runs a gemm task then sends generation G to rank 1, whose
 * worker waits on G and then runs its own gemm.
 *
 * Chrome JSON is parsed with jansson and every event must carry the keys
 * its phase requires (ph, ts, pid, tid, name; dur for slices; id for flow
 * ends).  The Perfetto output is decoded with code generated from
 * perfetto_trace.proto (the public schema's field numbers): a process track
 * per rank, a worker track under it (every uuid unique, no track its own
 * parent, every parent described before its child, worker 0 apart from its
 * rank), balanced slice begin/end per track at the events' times, and one
 * flow from rank 0's release to rank 1's wait.
 *
 * With --write FILE the Perfetto trace is also written there, for Perfetto's
 * trace processor (trace_processor.sh).
 */
#include <errno.h>
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fake_agent.h"
#include "mkscope/store.h"
#include "perfetto.h"
#include "perfetto_trace.pb-c.h"
#include "trace.h"

#define G 0x4000000100020003ull

static void ingest(struct mks_store *st, mks_envelope *env)
{
    char err[256];
    uint8_t *buf;
    size_t len;
    mks_envelope *dec = NULL;
    if (mks_wire_encode(env, NULL, &buf, &len, err, sizeof(err)))
        fail_msg("encode: %s", err);
    if (mks_wire_decode(buf, len, NULL, &dec, err, sizeof(err)))
        fail_msg("decode: %s", err);
    if (mks_store_ingest(st, dec, 1, NULL, err, sizeof(err)))
        fail_msg("ingest: %s", err);
    mks_wire_free(dec);
    free(buf);
}

static void reg(struct mks_store *st, uint32_t rank)
{
    Mkscope__V1__TaskClass c0 = MKSCOPE__V1__TASK_CLASS__INIT, c1 = MKSCOPE__V1__TASK_CLASS__INIT;
    c0.id = 0, c0.name = "gemm";
    c1.id = 1, c1.name = "send", c1.comm = 1;
    Mkscope__V1__TaskClass *cls[] = {&c0, &c1};
    Mkscope__V1__TaskSchema sc = MKSCOPE__V1__TASK_SCHEMA__INIT;
    sc.classes = cls;
    sc.n_classes = 2;
    Mkscope__V1__Register r = MKSCOPE__V1__REGISTER__INIT;
    r.n_ranks = 2;
    r.host = "h";
    r.schema = &sc;
    r.n_workers = 4;
    r.hook_abi_version = 1;
    r.agent_version = "test";
    mks_envelope env;
    mks_wire_init(&env, "job", rank, 0);
    env.incarnation = 1;
    env.body_case = MKSCOPE__V1__ENVELOPE__BODY_REGISTER;
    env.register_ = &r;
    ingest(st, &env);
}

struct ev {
    uint32_t event, worker, cls, peer;
    uint64_t gen, t_now, t_start;
};

static void raw(struct mks_store *st, uint32_t rank, const struct ev *evs, size_t n)
{
    Mkscope__V1__RawEvent e[8], *pe[8];
    for (size_t i = 0; i < n; i++) {
        mkscope__v1__raw_event__init(&e[i]);
        e[i].event = evs[i].event;
        e[i].worker = evs[i].worker;
        e[i].task_class = evs[i].cls;
        e[i].peer_rank = evs[i].peer;
        e[i].comm_gen = evs[i].gen;
        e[i].t_now = evs[i].t_now;
        e[i].t_start = evs[i].t_start;
        e[i].step = 3;
        pe[i] = &e[i];
    }
    Mkscope__V1__RawEventBatch b;
    mks_envelope env;
    fa_raw_batch(&env, &b, "job", rank, 1, 42, pe, n, 1);
    ingest(st, &env);
}

static json_t *chrome;

static int setup(void **state)
{
    (void)state;
    struct mks_store_opts o = {.sz = sizeof(o), .path = ":memory:"};
    struct mks_store *st;
    char err[256];
    assert_int_equal(mks_store_open(&o, &st, err, sizeof(err)), 0);
    reg(st, 0);
    reg(st, 1);
    const struct ev r0[] = {
        {2, 0, 0, 0, 0, 1000, 0},    /* task_start gemm */
        {3, 0, 0, 0, 0, 5000, 1000}, /* task_end gemm */
        {7, 0, 1, 1, G, 5000, 0},    /* comm_begin */
        {8, 0, 1, 1, G, 7000, 0},    /* comm_end */
        {6, 0, 1, 1, G, 7100, 0},    /* dep_release */
    };
    const struct ev r1[] = {
        {4, 2, 0, 0, G, 2000, 0},    /* dep_wait_begin */
        {5, 2, 0, 0, G, 7500, 0},    /* dep_wait_end */
        {3, 2, 0, 0, 0, 9000, 7600}, /* task_end gemm */
    };
    raw(st, 0, r0, sizeof(r0) / sizeof(r0[0]));
    raw(st, 1, r1, sizeof(r1) / sizeof(r1[0]));
    assert_int_equal(mks_trace_build(st, "job", -1, &chrome, err, sizeof(err)), 0);
    mks_store_close(st);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    json_decref(chrome);
    return 0;
}

/* The X slice named `name` on (pid, tid): its ts and dur in ns. */
static bool find_x(const char *name, int pid, int tid, int64_t *ts, int64_t *dur)
{
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(chrome, "traceEvents"), i, e)
    {
        if (!strcmp(json_string_value(json_object_get(e, "ph")), "X") &&
            !strcmp(json_string_value(json_object_get(e, "name")), name) &&
            json_integer_value(json_object_get(e, "pid")) == pid &&
            json_integer_value(json_object_get(e, "tid")) == tid) {
            *ts = (int64_t)(json_number_value(json_object_get(e, "ts")) * 1000 + 0.5);
            *dur = (int64_t)(json_number_value(json_object_get(e, "dur")) * 1000 + 0.5);
            return true;
        }
    }
    return false;
}

static void test_chrome_json(void **state)
{
    (void)state;
    json_t *evs = json_object_get(chrome, "traceEvents");
    assert_true(json_is_array(evs));
    size_t i, flows_s = 0, flows_f = 0, meta = 0;
    json_t *e;
    const char *s_id = NULL, *f_id = NULL;
    json_array_foreach(evs, i, e)
    {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        assert_non_null(ph);
        assert_true(json_is_string(json_object_get(e, "name")));
        assert_true(json_is_integer(json_object_get(e, "pid")));
        assert_true(json_is_integer(json_object_get(e, "tid")));
        if (!strcmp(ph, "M")) {
            meta++;
            assert_true(json_is_string(json_object_get(json_object_get(e, "args"), "name")));
            continue;
        }
        assert_true(json_is_number(json_object_get(e, "ts")));
        if (!strcmp(ph, "X")) {
            assert_true(json_is_number(json_object_get(e, "dur")));
        } else if (!strcmp(ph, "s")) {
            flows_s++;
            s_id = json_string_value(json_object_get(e, "id"));
            assert_int_equal(json_integer_value(json_object_get(e, "pid")), 0);
        } else if (!strcmp(ph, "f")) {
            flows_f++;
            f_id = json_string_value(json_object_get(e, "id"));
            assert_int_equal(json_integer_value(json_object_get(e, "pid")), 1);
            assert_int_equal(json_integer_value(json_object_get(e, "tid")), 2);
        } else {
            fail_msg("unexpected phase %s", ph);
        }
    }
    /* Two process names, two thread names. */
    assert_int_equal(meta, 4);
    assert_int_equal(flows_s, 1);
    assert_int_equal(flows_f, 1);
    assert_non_null(s_id);
    assert_non_null(f_id);
    assert_string_equal(s_id, f_id);
    int64_t ts, dur;
    /* Times relative to the first event (t = 1000). */
    assert_true(find_x("gemm", 0, 0, &ts, &dur));
    assert_int_equal(ts, 0);
    assert_int_equal(dur, 4000);
    assert_true(find_x("transfer", 0, 0, &ts, &dur));
    assert_int_equal(ts, 4000);
    assert_int_equal(dur, 2000);
    assert_true(find_x("wait", 1, 2, &ts, &dur));
    assert_int_equal(ts, 1000);
    assert_int_equal(dur, 5500);
    assert_true(find_x("gemm", 1, 2, &ts, &dur));
    assert_int_equal(ts, 6600);
    assert_int_equal(dur, 1400);
    const json_t *od = json_object_get(chrome, "otherData");
    assert_int_equal(json_integer_value(json_object_get(od, "flows")), 1);
    /* Ids as strings (64-bit ids lose digits as JSON numbers); both ranks
     * sent their last batch. */
    assert_string_equal(json_string_value(json_object_get(od, "escalation_id")), "42");
    assert_int_equal(json_array_size(json_object_get(od, "ranks_done")), 2);
}

struct track_state {
    uint64_t uuid;
    int depth, begins, ends;
};

static void test_perfetto(void **state)
{
    (void)state;
    uint8_t *buf;
    size_t len;
    assert_int_equal(mks_trace_perfetto(chrome, &buf, &len), 0);
    MksPerfetto__Trace *t = mks_perfetto__trace__unpack(NULL, len, buf);
    free(buf);
    assert_non_null(t);
    uint64_t proc[2] = {0, 0}, work[2] = {0, 0};
    struct track_state ts[2] = {{0}};
    uint64_t flow_out = 0, flow_in = 0;
    int64_t flow_out_t = -1, flow_in_t = -1;
    bool cleared = false;
    uint64_t uuids[16];
    size_t n_uuids = 0;
    for (size_t i = 0; i < t->n_packet; i++) {
        const MksPerfetto__TracePacket *p = t->packet[i];
        assert_true(p->has_trusted_packet_sequence_id);
        assert_int_equal(p->trusted_packet_sequence_id, 1);
        if (i == 0)
            cleared = p->has_sequence_flags && p->sequence_flags == 1;
        if (p->track_descriptor) {
            const MksPerfetto__TrackDescriptor *d = p->track_descriptor;
            assert_true(d->has_uuid);
            assert_true(d->uuid != 0);
            /* The track tree: a uuid names one track, a track is not its own
             * parent, and a parent is described before its children. */
            for (size_t k = 0; k < n_uuids; k++)
                if (uuids[k] == d->uuid)
                    fail_msg("track uuid %#llx described twice (%s)",
                             (unsigned long long)d->uuid, d->name ? d->name : "process");
            assert_true(n_uuids < 16);
            uuids[n_uuids++] = d->uuid;
            if (d->has_parent_uuid) {
                assert_true(d->parent_uuid != d->uuid);
                assert_null(d->process);
            }
            if (d->process) {
                assert_true(d->process->has_pid);
                int r = d->process->pid - 1;
                assert_true(r == 0 || r == 1);
                char want[32];
                snprintf(want, sizeof(want), "rank %d", r);
                assert_string_equal(d->process->process_name, want);
                proc[r] = d->uuid;
            } else {
                assert_true(d->has_parent_uuid);
                int r = d->parent_uuid == proc[0] ? 0 : d->parent_uuid == proc[1] ? 1 : -1;
                assert_true(r >= 0); /* the parent was described first */
                assert_string_equal(d->name, r == 0 ? "worker 0" : "worker 2");
                work[r] = d->uuid;
                ts[r].uuid = d->uuid;
            }
            continue;
        }
        const MksPerfetto__TrackEvent *e = p->track_event;
        assert_non_null(e);
        assert_true(p->has_timestamp);
        int r = e->track_uuid == work[0] ? 0 : e->track_uuid == work[1] ? 1 : -1;
        assert_true(r >= 0);
        int64_t at = (int64_t)p->timestamp;
        switch (e->type) {
        case MKS_PERFETTO__TRACK_EVENT__TYPE__TYPE_SLICE_BEGIN:
            ts[r].depth++, ts[r].begins++;
            assert_non_null(e->name);
            if (r == 0 && !strcmp(e->name, "gemm"))
                assert_int_equal(at, 0);
            if (r == 0 && !strcmp(e->name, "transfer"))
                assert_int_equal(at, 4000);
            if (r == 1 && !strcmp(e->name, "wait"))
                assert_int_equal(at, 1000);
            break;
        case MKS_PERFETTO__TRACK_EVENT__TYPE__TYPE_SLICE_END:
            assert_true(ts[r].depth > 0);
            ts[r].depth--, ts[r].ends++;
            break;
        case MKS_PERFETTO__TRACK_EVENT__TYPE__TYPE_INSTANT:
            if (e->n_flow_ids) {
                assert_int_equal(r, 0);
                flow_out = e->flow_ids[0];
                flow_out_t = at;
            }
            if (e->n_terminating_flow_ids) {
                assert_int_equal(r, 1);
                flow_in = e->terminating_flow_ids[0];
                flow_in_t = at;
            }
            break;
        default:
            fail_msg("unexpected track event type %d", e->type);
        }
    }
    assert_true(cleared);
    assert_true(proc[0] && proc[1] && work[0] && work[1]);
    /* Two process tracks and two worker tracks, four distinct tracks. */
    assert_int_equal(n_uuids, 4);
    assert_true(work[0] != proc[0] && work[1] != proc[1] && proc[0] != proc[1]);
    /* rank 0: gemm and transfer; rank 1: wait and gemm; all closed. */
    for (int r = 0; r < 2; r++) {
        assert_int_equal(ts[r].begins, 2);
        assert_int_equal(ts[r].ends, 2);
        assert_int_equal(ts[r].depth, 0);
    }
    assert_true(flow_out != 0);
    assert_true(flow_out == flow_in);
    assert_int_equal(flow_out_t, 6100); /* release at 7100 */
    assert_int_equal(flow_in_t, 6500);  /* wait end at 7500 */
    mks_perfetto__trace__free_unpacked(t, NULL);
}

/* Slices that overlap without nesting are clipped to the enclosing one;
 * input that is not a trace is refused. */
static void test_perfetto_nesting(void **state)
{
    (void)state;
    json_t *in = json_pack("{s:[{s:s,s:s,s:s,s:i,s:i,s:f,s:f},{s:s,s:s,s:s,s:i,s:i,s:f,s:f}]}",
                           "traceEvents", "name", "a", "cat", "task", "ph", "X", "pid", 0, "tid", 0,
                           "ts", 0.0, "dur", 10.0, "name", "b", "cat", "wait", "ph", "X", "pid", 0,
                           "tid", 0, "ts", 5.0, "dur", 10.0);
    uint8_t *buf;
    size_t len;
    assert_int_equal(mks_trace_perfetto(in, &buf, &len), 0);
    MksPerfetto__Trace *t = mks_perfetto__trace__unpack(NULL, len, buf);
    free(buf);
    assert_non_null(t);
    int64_t begin[2] = {-1, -1}, end[2] = {-1, -1};
    int nb = 0, ne = 0;
    for (size_t i = 0; i < t->n_packet; i++) {
        const MksPerfetto__TrackEvent *e = t->packet[i]->track_event;
        if (!e)
            continue;
        if (e->type == MKS_PERFETTO__TRACK_EVENT__TYPE__TYPE_SLICE_BEGIN && nb < 2)
            begin[nb++] = (int64_t)t->packet[i]->timestamp;
        if (e->type == MKS_PERFETTO__TRACK_EVENT__TYPE__TYPE_SLICE_END && ne < 2)
            end[ne++] = (int64_t)t->packet[i]->timestamp;
    }
    assert_int_equal(nb, 2);
    assert_int_equal(ne, 2);
    assert_int_equal(begin[0], 0);
    assert_int_equal(begin[1], 5000);
    assert_int_equal(end[0], 10000); /* b clipped to a's end */
    assert_int_equal(end[1], 10000);
    mks_perfetto__trace__free_unpacked(t, NULL);
    json_decref(in);
    json_t *bad = json_pack("{s:i}", "traceEvents", 3);
    assert_int_equal(mks_trace_perfetto(bad, &buf, &len), -EINVAL);
    json_decref(bad);
}

/* --write FILE: the Perfetto trace of the fixture, for trace_processor.sh. */
static int write_fixture(const char *path)
{
    if (setup(NULL))
        return 1;
    uint8_t *buf;
    size_t len;
    if (mks_trace_perfetto(chrome, &buf, &len))
        return 1;
    FILE *f = fopen(path, "wb");
    int rc = !f || fwrite(buf, 1, len, f) != len;
    if (f && fclose(f))
        rc = 1;
    free(buf);
    teardown(NULL);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--write"))
        return write_fixture(argv[2]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chrome_json),
        cmocka_unit_test(test_perfetto),
        cmocka_unit_test(test_perfetto_nesting),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

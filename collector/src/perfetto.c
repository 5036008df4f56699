/*
 * Perfetto protobuf trace from the Chrome JSON trace (see perfetto.h).
 *
 * Encoded by hand (mkscope/pbwrite.h): the few messages used are written
 * field by field with the field numbers of Perfetto's public trace schema,
 * so the collector and the CLI need no generated code for it.  tests/collector/perfetto_trace.proto
 * holds the same subset as a schema, and the test decodes our output with
 * code generated from it.
 *
 * Every packet is on one writer sequence (trusted_packet_sequence_id 1; the
 * first packet says its incremental state is cleared).  Track descriptors
 * come first, then each track's events in time order.
 */
#include "perfetto.h"

#include "mkscope/pbwrite.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Field numbers of the public schema (protos/perfetto/trace/...). */
enum {
    F_TRACE_PACKET = 1,          /* Trace.packet */
    F_PKT_TIMESTAMP = 8,         /* TracePacket.timestamp */
    F_PKT_SEQ_ID = 10,           /* TracePacket.trusted_packet_sequence_id */
    F_PKT_TRACK_EVENT = 11,      /* TracePacket.track_event */
    F_PKT_SEQ_FLAGS = 13,        /* TracePacket.sequence_flags */
    F_PKT_TRACK_DESCRIPTOR = 60, /* TracePacket.track_descriptor */
    F_TD_UUID = 1,               /* TrackDescriptor.uuid */
    F_TD_NAME = 2,               /* TrackDescriptor.name */
    F_TD_PROCESS = 3,            /* TrackDescriptor.process */
    F_TD_PARENT = 5,             /* TrackDescriptor.parent_uuid */
    F_PD_PID = 1,                /* ProcessDescriptor.pid */
    F_PD_NAME = 6,               /* ProcessDescriptor.process_name */
    F_TE_TYPE = 9,               /* TrackEvent.type */
    F_TE_TRACK = 11,             /* TrackEvent.track_uuid */
    F_TE_CATEGORIES = 22,        /* TrackEvent.categories */
    F_TE_NAME = 23,              /* TrackEvent.name */
    F_TE_FLOW = 47,              /* TrackEvent.flow_ids (fixed64) */
    F_TE_FLOW_END = 48,          /* TrackEvent.terminating_flow_ids (fixed64) */
};
enum { TYPE_SLICE_BEGIN = 1, TYPE_SLICE_END = 2, TYPE_INSTANT = 3 };
enum { SEQ_INCREMENTAL_STATE_CLEARED = 1 };

/* One thing to draw on a worker track. */
struct item {
    uint32_t track; /* index into tracks */
    int64_t t, end; /* ns; end == t for an instant */
    const char *name, *cat;
    uint64_t flow;
    int kind; /* 0 slice, 1 flow start, 2 flow end */
};

struct track {
    int64_t pid, tid;
};

static int cmp_item(const void *a, const void *b)
{
    const struct item *x = a, *y = b;
    if (x->track != y->track)
        return x->track < y->track ? -1 : 1;
    if (x->t != y->t)
        return x->t < y->t ? -1 : 1;
    /* Longer first, so the enclosing slice opens before what it holds. */
    if (x->end != y->end)
        return x->end > y->end ? -1 : 1;
    return x->kind - y->kind;
}

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h ? h : 1;
}

/* Track uuids: the tag 'm' in the top byte, the rank in bits 32..55, and for
 * a worker track bit 31 set and the worker in bits 0..30, so no worker track
 * can share a uuid with its process track or any other track (ranks below
 * 2^24, workers below 2^31: the collector's ids are far smaller). */
#define UUID_TAG    (0x6dull << 56)
#define UUID_WORKER (1ull << 31)

static uint64_t proc_uuid(int64_t pid)
{
    return UUID_TAG | ((uint64_t)pid & 0xffffff) << 32;
}

static uint64_t track_uuid(int64_t pid, int64_t tid)
{
    return proc_uuid(pid) | UUID_WORKER | ((uint64_t)tid & 0x7fffffff);
}

static int64_t ns_of(const json_t *v)
{
    double us = json_number_value(v);
    return (int64_t)llround(us * 1000.0);
}

static void packet_event(struct mks_pbw *out, struct mks_pbw *pkt, struct mks_pbw *ev, int64_t t,
                         bool first)
{
    mks_pbw_uint(pkt, F_PKT_TIMESTAMP, (uint64_t)(t < 0 ? 0 : t));
    mks_pbw_uint(pkt, F_PKT_SEQ_ID, 1);
    if (first)
        mks_pbw_uint(pkt, F_PKT_SEQ_FLAGS, SEQ_INCREMENTAL_STATE_CLEARED);
    mks_pbw_sub(pkt, F_PKT_TRACK_EVENT, ev);
    mks_pbw_sub(out, F_TRACE_PACKET, pkt);
}

static void emit(struct mks_pbw *out, struct mks_pbw *pkt, struct mks_pbw *ev,
                 const struct track *tr, const struct item *it, int type, int64_t t, bool *first)
{
    mks_pbw_uint(ev, F_TE_TYPE, (uint64_t)type);
    mks_pbw_uint(ev, F_TE_TRACK, track_uuid(tr->pid, tr->tid));
    if (type != TYPE_SLICE_END) {
        mks_pbw_str(ev, F_TE_CATEGORIES, it->cat);
        mks_pbw_str(ev, F_TE_NAME, it->name);
    }
    if (it->kind == 1)
        mks_pbw_fixed64(ev, F_TE_FLOW, it->flow);
    else if (it->kind == 2)
        mks_pbw_fixed64(ev, F_TE_FLOW_END, it->flow);
    packet_event(out, pkt, ev, t, *first);
    *first = false;
}

int mks_trace_perfetto(const json_t *chrome, uint8_t **buf_p, size_t *len_p)
{
    const json_t *evs = json_object_get(chrome, "traceEvents");
    if (!json_is_array(evs))
        return -EINVAL;
    size_t n = json_array_size(evs);
    struct item *items = calloc(n ? n : 1, sizeof(*items));
    struct track *tracks = calloc(n ? n : 1, sizeof(*tracks));
    /* Slices open on the current track, innermost last. */
    int64_t *stack_end = calloc(n ? n : 1, sizeof(*stack_end));
    if (!items || !tracks || !stack_end) {
        free(items), free(tracks), free(stack_end);
        return -ENOMEM;
    }
    size_t ni = 0, nt = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(evs, i);
        const char *ph = json_string_value(json_object_get(e, "ph"));
        const json_t *pid = json_object_get(e, "pid"), *tid = json_object_get(e, "tid");
        if (!ph || !json_is_integer(pid) || !json_is_integer(tid) || !strcmp(ph, "M"))
            continue;
        int kind = !strcmp(ph, "X") ? 0 : !strcmp(ph, "s") ? 1 : !strcmp(ph, "f") ? 2 : -1;
        const json_t *ts = json_object_get(e, "ts");
        if (kind < 0 || !json_is_number(ts))
            continue;
        struct track tr = {json_integer_value(pid), json_integer_value(tid)};
        size_t k;
        for (k = 0; k < nt; k++)
            if (tracks[k].pid == tr.pid && tracks[k].tid == tr.tid)
                break;
        if (k == nt)
            tracks[nt++] = tr;
        struct item *it = &items[ni++];
        it->track = (uint32_t)k;
        it->t = ns_of(ts);
        it->end = it->t;
        if (kind == 0 && json_is_number(json_object_get(e, "dur")))
            it->end = it->t + ns_of(json_object_get(e, "dur"));
        it->kind = kind;
        const char *name = json_string_value(json_object_get(e, "name"));
        const char *cat = json_string_value(json_object_get(e, "cat"));
        it->name = name ? name : "";
        it->cat = cat ? cat : "";
        if (kind) {
            const char *id = json_string_value(json_object_get(e, "id"));
            it->flow = id ? fnv1a(id) : (uint64_t)json_integer_value(json_object_get(e, "id"));
        }
    }
    qsort(items, ni, sizeof(*items), cmp_item);

    struct mks_pbw out = {0}, pkt = {0}, sub = {0}, sub2 = {0};
    bool first = true;
    /* Descriptors: a process track per rank, a child track per worker. */
    for (size_t k = 0; k < nt; k++) {
        bool seen = false;
        for (size_t j = 0; j < k; j++)
            seen |= tracks[j].pid == tracks[k].pid;
        char name[64];
        if (!seen) {
            snprintf(name, sizeof(name), "rank %lld", (long long)tracks[k].pid);
            mks_pbw_uint(&sub2, F_PD_PID, (uint64_t)(tracks[k].pid + 1));
            mks_pbw_str(&sub2, F_PD_NAME, name);
            mks_pbw_uint(&sub, F_TD_UUID, proc_uuid(tracks[k].pid));
            mks_pbw_sub(&sub, F_TD_PROCESS, &sub2);
            mks_pbw_uint(&pkt, F_PKT_SEQ_ID, 1);
            if (first)
                mks_pbw_uint(&pkt, F_PKT_SEQ_FLAGS, SEQ_INCREMENTAL_STATE_CLEARED);
            first = false;
            mks_pbw_sub(&pkt, F_PKT_TRACK_DESCRIPTOR, &sub);
            mks_pbw_sub(&out, F_TRACE_PACKET, &pkt);
        }
        snprintf(name, sizeof(name), "worker %lld", (long long)tracks[k].tid);
        mks_pbw_uint(&sub, F_TD_UUID, track_uuid(tracks[k].pid, tracks[k].tid));
        mks_pbw_uint(&sub, F_TD_PARENT, proc_uuid(tracks[k].pid));
        mks_pbw_str(&sub, F_TD_NAME, name);
        mks_pbw_uint(&pkt, F_PKT_SEQ_ID, 1);
        mks_pbw_sub(&pkt, F_PKT_TRACK_DESCRIPTOR, &sub);
        mks_pbw_sub(&out, F_TRACE_PACKET, &pkt);
    }
    /* Events track by track, slices nested with a stack. */
    size_t depth = 0;
    for (size_t i = 0; i < ni; i++) {
        struct item *it = &items[i];
        const struct track *tr = &tracks[it->track];
        if (i > 0 && items[i - 1].track != it->track) {
            const struct track *pt = &tracks[items[i - 1].track];
            while (depth > 0) {
                struct item end = {.kind = 0};
                emit(&out, &pkt, &sub, pt, &end, TYPE_SLICE_END, stack_end[--depth], &first);
            }
        }
        while (depth > 0 && stack_end[depth - 1] <= it->t) {
            struct item end = {.kind = 0};
            emit(&out, &pkt, &sub, tr, &end, TYPE_SLICE_END, stack_end[--depth], &first);
        }
        if (it->kind) {
            emit(&out, &pkt, &sub, tr, it, TYPE_INSTANT, it->t, &first);
            continue;
        }
        if (depth > 0 && it->end > stack_end[depth - 1])
            it->end = stack_end[depth - 1];
        emit(&out, &pkt, &sub, tr, it, TYPE_SLICE_BEGIN, it->t, &first);
        stack_end[depth++] = it->end;
    }
    if (ni) {
        const struct track *pt = &tracks[items[ni - 1].track];
        while (depth > 0) {
            struct item end = {.kind = 0};
            emit(&out, &pkt, &sub, pt, &end, TYPE_SLICE_END, stack_end[--depth], &first);
        }
    }
    free(items), free(tracks), free(stack_end);
    free(pkt.p), free(sub.p), free(sub2.p);
    if (out.oom || pkt.oom || sub.oom || sub2.oom) {
        free(out.p);
        return -ENOMEM;
    }
    *buf_p = out.p ? out.p : malloc(1);
    *len_p = out.len;
    return *buf_p ? 0 : -ENOMEM;
}

/* Escalation to a raw trace (see escalate.h). */
#include "escalate.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "mkscope/hook_abi.h"
#include "mkscope/loader.h"
#include "mkscope/verifier.h"

struct agt_esc {
    uint64_t id;
    uint32_t prog_id, ring_id;
    int32_t hooks[MKS_EV_COUNT];
    uint32_t n_hooks;
    uint64_t deadline_ns;
    uint64_t budget, spent;
    uint64_t dropped; /* ring overflow plus events over the budget */
    Mkscope__V1__RawEvent ev[AGT_ESC_BATCH_EVENTS];
    Mkscope__V1__RawEvent *evp[AGT_ESC_BATCH_EVENTS];
    uint32_t n_ev;
    int over_budget, detached;
    const struct agt_esc_env *env;
    agt_esc_emit_fn emit;
    void *arg;
};

/* Bytes of the v1 context before its reserved words. */
#define ESC_CTX_FIELDS_BYTES 120u
_Static_assert(__builtin_offsetof(struct mks_hook_ctx, reserved) == ESC_CTX_FIELDS_BYTES,
               "reserved words of the hook context");

static struct mks_insn insn(uint8_t code, uint8_t dst, uint8_t src, int16_t off, int32_t imm)
{
    return (struct mks_insn){.code = code, .regs = (uint8_t)((src << 4) | (dst & 0x0f)),
                             .off = off, .imm = imm};
}

int agt_esc_build(const struct mks_insn *filter, uint32_t n, struct mks_insn **insns_p,
                  uint32_t *n_p)
{
    /* r6 = ctx; filter (exits -> ja emit); emit: if r0 == 0 goto end; copy
     * the context to the stack; ringbuf_output(map 0, fp-128, 128, 0);
     * end: r0 = 0; exit.  With no filter every event is kept. */
    const uint32_t ctx_words = MKS_HOOK_CTX_V1_SIZE / 8;
    uint32_t total = 1 + (n ? n : 1) + 1 + 2 * ctx_words + 2 + 4 + 1 + 2;
    if (total > MKS_BPF_MAX_INSNS)
        return -E2BIG;
    struct mks_insn *p = calloc(total, sizeof(*p));
    if (!p)
        return -ENOMEM;
    uint32_t k = 0;
    p[k++] = insn(MKS_BPF_ALU64 | MKS_BPF_MOV | MKS_BPF_X, 6, 1, 0, 0);
    uint32_t f0 = k;
    if (n == 0) {
        p[k++] = insn(MKS_BPF_ALU64 | MKS_BPF_MOV | MKS_BPF_K, 0, 0, 0, 1);
    } else {
        for (uint32_t i = 0; i < n; i++)
            p[k++] = filter[i];
    }
    uint32_t emit = k;
    for (uint32_t i = f0; i < emit; i++) {
        int prev_is_wide = i > f0 && p[i - 1].code == (MKS_BPF_LD | MKS_BPF_IMM | MKS_BPF_DW);
        if (p[i].code == (MKS_BPF_JMP | MKS_BPF_EXIT) && !prev_is_wide)
            p[i] = insn(MKS_BPF_JMP | MKS_BPF_JA, 0, 0, (int16_t)(emit - i - 1), 0);
    }
    uint32_t end_jump = k;
    p[k++] = insn(MKS_BPF_JMP | MKS_BPF_JEQ | MKS_BPF_K, 0, 0, 0, 0); /* offset set below */
    /* the declared fields are copied; the reserved tail (which a program
     * may not read) is written as zeros */
    for (uint32_t w = 0; w < ctx_words; w++) {
        int16_t to = (int16_t)(-(int)MKS_HOOK_CTX_V1_SIZE + (int)w * 8);
        if (w * 8 >= ESC_CTX_FIELDS_BYTES) {
            p[k++] = insn(MKS_BPF_ST | MKS_BPF_MEM | MKS_BPF_DW, 10, 0, to, 0);
            continue;
        }
        p[k++] = insn(MKS_BPF_LDX | MKS_BPF_MEM | MKS_BPF_DW, 2, 6, (int16_t)(w * 8), 0);
        p[k++] = insn(MKS_BPF_STX | MKS_BPF_MEM | MKS_BPF_DW, 10, 2, to, 0);
    }
    p[k++] = insn(MKS_BPF_LD | MKS_BPF_IMM | MKS_BPF_DW, 1, MKS_PSEUDO_MAP_IDX, 0, 0);
    p[k++] = insn(0, 0, 0, 0, 0);
    p[k++] = insn(MKS_BPF_ALU64 | MKS_BPF_MOV | MKS_BPF_X, 2, 10, 0, 0);
    p[k++] = insn(MKS_BPF_ALU64 | MKS_BPF_ADD | MKS_BPF_K, 2, 0, 0, -(int)MKS_HOOK_CTX_V1_SIZE);
    p[k++] = insn(MKS_BPF_ALU64 | MKS_BPF_MOV | MKS_BPF_K, 3, 0, 0, (int)MKS_HOOK_CTX_V1_SIZE);
    p[k++] = insn(MKS_BPF_ALU64 | MKS_BPF_MOV | MKS_BPF_K, 4, 0, 0, 0);
    p[k++] = insn(MKS_BPF_JMP | MKS_BPF_CALL, 0, 0, 0, MKS_HELPER_RINGBUF_OUTPUT);
    uint32_t end = k;
    p[k++] = insn(MKS_BPF_ALU64 | MKS_BPF_MOV | MKS_BPF_K, 0, 0, 0, 0);
    p[k++] = insn(MKS_BPF_JMP | MKS_BPF_EXIT, 0, 0, 0, 0);
    p[end_jump].off = (int16_t)(end - end_jump - 1);
    *insns_p = p;
    *n_p = k;
    return 0;
}

static void detach_all(struct agt_esc *e, struct mks_ctl *ctl)
{
    if (e->detached)
        return;
    for (uint32_t h = 0; h < e->n_hooks; h++) {
        uint64_t gen;
        mks_ctl_detach(ctl, e->prog_id, (enum mks_hook_event)e->hooks[h], &gen);
    }
    e->detached = 1;
}

int agt_esc_start(struct mks_ctl *ctl, const Mkscope__V1__Escalate *cmd, uint64_t now_ns,
                  struct agt_esc **esc_p, uint64_t *cost_p, uint32_t *n_insns_p, char *log,
                  size_t log_len)
{
    if (cmd->duration_ms == 0 || cmd->duration_ms > AGT_ESC_MAX_MS || cmd->budget_bytes == 0) {
        snprintf(log, log_len, "escalation %llu: window must be 1..%u ms and budget > 0 bytes",
                 (unsigned long long)cmd->escalation_id, AGT_ESC_MAX_MS);
        return -EINVAL;
    }
    if (cmd->n_filter_insns > MKS_BPF_MAX_INSNS - 64) {
        snprintf(log, log_len, "escalation %llu: filter of %zu instructions is too long",
                 (unsigned long long)cmd->escalation_id, cmd->n_filter_insns);
        return -E2BIG;
    }
    struct agt_esc *e = calloc(1, sizeof(*e));
    if (!e)
        return -ENOMEM;
    e->id = cmd->escalation_id;
    for (size_t i = 0; i < cmd->n_hooks; i++) {
        if (cmd->hooks[i] >= MKS_EV_COUNT) {
            snprintf(log, log_len, "escalation %llu: hook %u out of range",
                     (unsigned long long)e->id, cmd->hooks[i]);
            free(e);
            return -EINVAL;
        }
        int dup = 0;
        for (uint32_t h = 0; h < e->n_hooks; h++)
            dup |= e->hooks[h] == (int32_t)cmd->hooks[i];
        if (!dup)
            e->hooks[e->n_hooks++] = (int32_t)cmd->hooks[i];
    }
    if (!e->n_hooks)
        for (int h = 0; h < MKS_EV_COUNT; h++)
            e->hooks[e->n_hooks++] = h;

    struct mks_insn *filter = NULL, *prog = NULL;
    uint32_t n_prog = 0;
    if (cmd->n_filter_insns) {
        filter = calloc(cmd->n_filter_insns, sizeof(*filter));
        if (!filter) {
            free(e);
            return -ENOMEM;
        }
        for (size_t i = 0; i < cmd->n_filter_insns; i++) {
            uint64_t v = cmd->filter_insns[i]; /* struct mks_insn as little-endian u64 */
            filter[i].code = (uint8_t)v;
            filter[i].regs = (uint8_t)(v >> 8);
            filter[i].off = (int16_t)(uint16_t)(v >> 16);
            filter[i].imm = (int32_t)(uint32_t)(v >> 32);
        }
    }
    int err = agt_esc_build(filter, (uint32_t)cmd->n_filter_insns, &prog, &n_prog);
    free(filter);
    if (err) {
        snprintf(log, log_len, "escalation %llu: cannot build the program: %s",
                 (unsigned long long)e->id, strerror(-err));
        free(e);
        return err;
    }
    struct mks_map_spec ring = {.type = MKS_MAP_RINGBUF, .max_entries = AGT_ESC_RING_BYTES};
    snprintf(ring.name, sizeof(ring.name), "raw");
    uint64_t cost = 0;
    for (uint32_t h = 0; h < e->n_hooks && !err; h++) {
        struct mks_verify_opts vo = {.sz = sizeof(vo),
                                     .prog_type = MKS_PROG_OBSERVE,
                                     .abi_version = MKS_HOOK_ABI_VERSION,
                                     .hook = e->hooks[h],
                                     .maps = &ring,
                                     .n_maps = 1};
        struct mks_verify_result vr = {0};
        char vlog[300] = "";
        err = mks_verify(prog, n_prog, &vo, &vr, vlog, sizeof(vlog));
        if (err)
            snprintf(log, log_len, "escalation %llu: filter rejected by the verifier: %s",
                     (unsigned long long)e->id, vlog);
        else if (vr.cost > cost)
            cost = vr.cost;
    }
    char name[48];
    snprintf(name, sizeof(name), "escalation-%llu", (unsigned long long)e->id);
    struct mks_prog_spec spec = {.sz = sizeof(spec),
                                 .name = name,
                                 .prog_type = MKS_PROG_OBSERVE,
                                 .abi_version = MKS_HOOK_ABI_VERSION,
                                 .insns = prog,
                                 .n_insns = n_prog,
                                 .n_maps = 1,
                                 .maps = &ring,
                                 .cost = cost};
    int loaded = 0;
    if (!err) {
        err = mks_ctl_prog_load(ctl, &spec, &e->prog_id);
        if (err)
            snprintf(log, log_len, "escalation %llu: cannot load: %s", (unsigned long long)e->id,
                     strerror(-err));
        else
            loaded = 1;
    }
    if (!err && (err = mks_ctl_prog_map(ctl, e->prog_id, 0, &e->ring_id)) != 0)
        snprintf(log, log_len, "escalation %llu: no ring: %s", (unsigned long long)e->id,
                 strerror(-err));
    uint32_t attached = 0;
    for (uint32_t h = 0; h < e->n_hooks && !err; h++) {
        uint64_t gen;
        err = mks_ctl_attach(ctl, e->prog_id, (enum mks_hook_event)e->hooks[h], -1, &gen);
        if (err == -ENOSPC)
            snprintf(log, log_len,
                     "escalation %llu: hook %s is full (%d programs attached); detach one there"
                     " or name other hooks",
                     (unsigned long long)e->id, mks_hook_event_name((uint32_t)e->hooks[h]),
                     MKS_MAX_PROGS_PER_HOOK);
        else if (err)
            snprintf(log, log_len, "escalation %llu: cannot attach at %s: %s",
                     (unsigned long long)e->id, mks_hook_event_name((uint32_t)e->hooks[h]),
                     strerror(-err));
        else
            attached++;
    }
    free(prog);
    if (err) {
        e->n_hooks = attached;
        detach_all(e, ctl);
        if (loaded)
            mks_ctl_prog_unload(ctl, e->prog_id);
        free(e);
        return err;
    }
    e->deadline_ns = now_ns + (uint64_t)cmd->duration_ms * 1000000ull;
    e->budget = cmd->budget_bytes;
    *cost_p = cost;
    *n_insns_p = n_prog;
    snprintf(log, log_len, "escalation %llu: filter verified (%u insns, cost %llu) and attached at "
             "%u hooks for %u ms",
             (unsigned long long)e->id, n_prog, (unsigned long long)cost, e->n_hooks,
             cmd->duration_ms);
    *esc_p = e;
    return 0;
}

/* Encode and hand out the batch collected so far.  A batch that would
 * overrun the budget is not sent: its events are counted as dropped and the
 * window closes; the last batch (possibly empty) always goes out so that the
 * collector learns the escalation ended and how much was dropped. */
static void flush(struct agt_esc *e, int last)
{
    for (;;) {
        Mkscope__V1__RawEventBatch b = MKSCOPE__V1__RAW_EVENT_BATCH__INIT;
        b.escalation_id = e->id;
        b.events = e->evp;
        b.n_events = e->n_ev;
        b.dropped = e->dropped;
        b.last = last;
        mks_envelope env;
        mks_wire_init(&env, e->env->job, e->env->rank, 0);
        env.incarnation = e->env->incarnation;
        env.body_case = MKSCOPE__V1__ENVELOPE__BODY_RAW_EVENT_BATCH;
        env.raw_event_batch = &b;
        uint8_t *buf;
        size_t len;
        char why[256];
        if (mks_wire_encode(&env, e->env->key, &buf, &len, why, sizeof(why)) != 0) {
            agt_log_err("escalation %llu: cannot encode a batch: %s", (unsigned long long)e->id,
                        why);
            e->dropped += e->n_ev;
            e->n_ev = 0;
            return;
        }
        if (e->n_ev && e->spent + len > e->budget) {
            e->dropped += e->n_ev;
            e->n_ev = 0;
            e->over_budget = 1;
            free(buf);
            if (!last)
                return;
            continue; /* an empty last batch */
        }
        e->spent += len;
        e->dropped = 0; /* reported in this batch */
        e->n_ev = 0;
        e->emit(buf, len, e->arg);
        free(buf);
        return;
    }
}

static int on_record(uint32_t worker, const void *rec, uint32_t len, void *arg)
{
    struct agt_esc *e = arg;
    (void)worker;
    if (e->over_budget || len < MKS_HOOK_CTX_V1_SIZE) {
        e->dropped++;
        return 0;
    }
    struct mks_hook_ctx c;
    memcpy(&c, rec, sizeof(c));
    Mkscope__V1__RawEvent *r = &e->ev[e->n_ev];
    mkscope__v1__raw_event__init(r);
    r->event = c.event < MKS_EV_COUNT ? c.event : 0;
    r->flags = c.flags;
    r->worker = c.worker;
    r->sm = c.sm;
    r->task_class = c.task_class;
    r->task_gen = c.task_gen;
    r->req_gen = c.req_gen;
    r->step = c.step;
    r->dep_class = c.dep_class;
    r->tile_x = c.tile_x;
    r->tile_y = c.tile_y;
    r->dep_event = c.dep_event;
    r->comm_gen = c.comm_gen;
    r->peer_rank = c.peer_rank;
    r->queue_depth = c.queue_depth;
    r->t_now = c.t_now;
    r->t_ready = c.t_ready;
    r->t_start = c.t_start;
    r->value = c.value;
    e->evp[e->n_ev] = r;
    if (++e->n_ev == AGT_ESC_BATCH_EVENTS)
        flush(e, 0);
    return 0;
}

int agt_esc_poll(struct agt_esc *e, struct mks_ctl *ctl, uint64_t now_ns, int stop,
                 const struct agt_esc_env *env, agt_esc_emit_fn emit, void *arg)
{
    e->env = env;
    e->emit = emit;
    e->arg = arg;
    int over = stop || now_ns >= e->deadline_ns || e->over_budget;
    if (over)
        detach_all(e, ctl); /* then drain what the window wrote */
    uint64_t dropped = 0;
    int err = ctl ? mks_ctl_ring_drain(ctl, e->ring_id, on_record, e, &dropped) : -ENOENT;
    if (err && err != -ENOENT)
        agt_log_warn("escalation %llu: ring drain: %s", (unsigned long long)e->id, strerror(-err));
    e->dropped += dropped;
    if (e->over_budget)
        over = 1;
    if (!over)
        return 0;
    detach_all(e, ctl);
    flush(e, 1);
    if (ctl)
        mks_ctl_prog_unload(ctl, e->prog_id);
    return 1;
}

void agt_esc_free(struct agt_esc *e)
{
    free(e);
}

uint64_t agt_esc_id(const struct agt_esc *e)
{
    return e->id;
}

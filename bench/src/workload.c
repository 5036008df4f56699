/*
 * The decode step as a task graph, per rank (tensor parallel over R ranks):
 *
 *   per layer l:  rmsnorm (one task per active request)
 *                 -> qkv_proj (tiles over this rank's q/k/v columns)
 *                 -> attention (active request x local head; writes the KV cache)
 *                 -> o_proj (tiles over the hidden size: this rank's partial sum)
 *                 -> allreduce_send (one communication task per peer: write the
 *                    partial into the peer's inbox, release its remote event)
 *                 -> allreduce_reduce (wait on every peer's remote event, sum
 *                    the partials in rank order, add the residual)
 *                 -> moe_router (rmsnorm + top-k from the real activations;
 *                    creates expert.<e> tasks for this rank's chosen experts)
 *                 -> expert.<e> (dynamic; tiles over the hidden size)
 *                 -> moe_combine -> allreduce_send -> allreduce_reduce
 *   then          lm_head (tiles over the vocabulary) -> sample (argmax; the
 *                 batch advances: requests leave and join, the next step's
 *                 graph is built from the new batch shape).
 *
 * Each arrow is one event; its target rises each step by the number of tasks
 * that trigger it.  Partials are summed in rank order on every rank, so the
 * residual stream is bit-identical across ranks and the replicated router
 * makes the same choices everywhere.
 */
#include "workload.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_int.h"
#include "mkscope/commid.h"
#include "mkscope/runtime.h"
#include "model.h"
#include "runtime/rt.h"
#include "runtime/shm.h"

#define REMOTE_TIMEOUT_NS (60ull * 1000000000ull) /* a peer that died */
#define RENDEZVOUS_NS     (60ull * 1000000000ull)

#define E_STEP 0u

struct bw_rank {
    struct bm_model m;
    struct br_rt *rt;
    struct mks_rt *hooks;
    struct bs_shm *shm;
    struct bs_result res;
    uint32_t rank, R, L, W, QDr, T, n_own;
    uint64_t step_t0;
    struct bm_fault_gain gain; /* the fault plan's closed loop (model_math.h) */
    /* --step-interval: steps start at most this often; between steps the
     * rank idles outside any task, released by the main thread */
    uint64_t interval_ns;
    int relay; /* --ar-relay */
    pthread_mutex_t gate_mu;
    pthread_cond_t gate_cv;
    uint32_t gate_steps; /* steps whose sample has ended */
    struct bm_batch batch;
    float *x, *xn, *q, *o, *partial, *logits, *kc, *vc, *P;
    uint32_t *sel_e; /* [B][topk] */
    float *sel_g;
    _Atomic int failed; /* first error of a task body, read by the main thread */
};

static inline uint32_t ev_of(const struct bw_rank *rk, uint32_t l, uint32_t op)
{
    (void)rk;
    return 1 + l * BW_OPS + op;
}
static inline uint32_t ev_lm(const struct bw_rank *rk)
{
    return 1 + rk->L * BW_OPS;
}
/* --ar-relay: all-reduce k's contribution of the previous rank has arrived */
static inline uint32_t ev_relay(const struct bw_rank *rk, uint32_t k)
{
    return ev_lm(rk) + 1 + k;
}

uint64_t bw_comm_gen(uint32_t step, uint32_t k, uint32_t src, uint32_t dst)
{
    uint32_t l = k / 2, ch = (k & 1) ? BW_CH_AR_MOE : BW_CH_AR_ATTN;
    uint32_t op = l * BW_OPS + ((k & 1) ? OP_SEND2 : OP_SEND1);
    return mks_commid_for_transfer(ch, src, dst, step, op, 0);
}

/* Remote event id: the inbox (dst <- src) counter. */
static uint64_t remote_ev(uint32_t dst, uint32_t src)
{
    return (1ull << 63) | ((uint64_t)dst << 16) | src;
}

static void fail(struct bw_rank *rk, int rc)
{
    int none = 0;
    if (atomic_compare_exchange_strong(&rk->failed, &none, rc ? rc : -EIO)) {
        atomic_store(bs_abort(rk->shm), 1);
        br_finish(rk->rt, rc ? rc : -EIO);
    }
}

/* ---- fault planning -------------------------------------------------------- */

/* Apply the fault plan to task idx of the n_op tasks of an operator
 * (bm_fault_plan; idx in the order the graph lists them, which is the order
 * they become ready). */
static void plan(const struct bw_rank *rk, struct br_task *t, uint32_t idx, uint32_t n_op,
                 uint32_t k)
{
    struct bm_fault_effect fx;
    bm_fault_plan(rk->m.faults, rk->m.n_faults, rk->rank, rk->W, rk->L, t->cls, t->step, t->tile_x,
                  idx, n_op, k, rk->gain.gain, &fx);
    t->run_delay_ns += fx.run_delay_ns;
    t->notify_delay_ns += fx.notify_delay_ns;
    t->hold_ns += fx.hold_ns;
    t->starve_ns += fx.starve_ns;
    t->comm_delay_ns += fx.comm_delay_ns;
    if (fx.force_worker >= 0)
        t->force_worker = fx.force_worker;
}

/* ---- task bodies ------------------------------------------------------------ */

static struct bw_rank *RK(struct br_rt *rt)
{
    return br_user(rt);
}

static void body_norm(struct br_rt *rt, uint32_t w, struct br_task *t)
{
    (void)w;
    struct bw_rank *rk = RK(rt);
    const uint32_t H = rk->m.H, s = t->tile_x;
    float *x = rk->x + (size_t)s * H;
    if (t->layer == 0)
        memcpy(x, rk->m.embed + (size_t)rk->batch.slot[s].token * H, sizeof(float) * H);
    bm_rmsnorm(x, rk->m.layer[t->layer].norm1, rk->xn + (size_t)s * H, H);
}

static void body_qkv(struct br_rt *rt, uint32_t w, struct br_task *t)
{
    (void)w;
    struct bw_rank *rk = RK(rt);
    const struct bm_model *m = &rk->m;
    const uint32_t QD = m->QD, QDr = rk->QDr, off = rk->rank * QDr, ML = m->cfg.max_len;
    uint32_t c0, c1;
    bm_tile_range(3 * QDr, rk->T, t->tile_x, &c0, &c1);
    for (uint32_t s = 0; s < m->B; s++) {
        const struct bm_slot *sl = &rk->batch.slot[s];
        if (!sl->active)
            continue;
        size_t kvo = (((size_t)t->layer * m->B + s) * ML + sl->pos) * QD;
        /* the tile may span the q, k and v column blocks */
        bm_qkv_cols(m, t->layer, off, QDr, rk->xn + (size_t)s * m->H, c0, c1,
                    rk->q + (size_t)s * QD, rk->kc + kvo, rk->vc + kvo);
    }
}

static void body_attn(struct br_rt *rt, uint32_t w, struct br_task *t)
{
    (void)w;
    struct bw_rank *rk = RK(rt);
    const struct bm_model *m = &rk->m;
    const uint32_t s = t->tile_y, gh = rk->rank * m->cfg.heads + t->tile_x;
    const uint32_t ML = m->cfg.max_len;
    size_t kvo = ((size_t)t->layer * m->B + s) * ML * m->QD;
    bm_attention(m, rk->q + (size_t)s * m->QD, rk->kc + kvo, rk->vc + kvo, rk->batch.slot[s].pos,
                 gh, rk->o + (size_t)s * m->QD + gh * m->HD);
}

static void body_oproj(struct br_rt *rt, uint32_t w, struct br_task *t)
{
    (void)w;
    struct bw_rank *rk = RK(rt);
    const struct bm_model *m = &rk->m;
    const uint32_t off = rk->rank * rk->QDr;
    uint32_t c0, c1;
    bm_tile_range(m->H, rk->T, t->tile_x, &c0, &c1);
    for (uint32_t s = 0; s < m->B; s++) {
        if (!rk->batch.slot[s].active)
            continue;
        bm_matvec_cols(rk->o + (size_t)s * m->QD + off, m->layer[t->layer].wo + (size_t)off * m->H,
                       rk->QDr, m->H, c0, c1, rk->partial + (size_t)s * m->H + c0);
    }
}

/* The all-reduce sequence number of all-reduce k of step s (inbox counter
 * target is seq + 1; data slot seq & 1). */
static uint32_t ar_seq(const struct bw_rank *rk, uint32_t step, uint32_t k)
{
    return step * 2 * rk->L + k;
}

static void body_send(struct br_rt *rt, uint32_t w, struct br_task *t)
{
    struct bw_rank *rk = RK(rt);
    const uint32_t peer = t->tile_x, k = t->tile_y, seq = ar_seq(rk, t->step, k);
    const size_t bytes = sizeof(float) * rk->m.B * rk->m.H;
    const uint64_t cg = bw_comm_gen(t->step, k, rk->rank, peer), dep = remote_ev(peer, rk->rank);
    br_hook_remote(rt, w, t, MKS_EV_COMM_BEGIN, peer, cg, dep, bytes);
    memcpy(bs_inbox_data(rk->shm, peer, rk->rank, seq), rk->partial, bytes);
    if (t->comm_delay_ns)
        br_fault_sleep_until(rt, w, t->t_ready + t->comm_delay_ns);
    br_hook_remote(rt, w, t, MKS_EV_COMM_END, peer, cg, dep, bytes);
}

/* The all-reduce's order, the same for every rank: rank r sends to r + 1
 * first, then r + 2, ..., so its i-th arrival is from r - 1 - i, and its
 * reduce waits on its peers in that order.  In a fixed order (peer 0
 * first) every rank's first wait would be on rank 0: a wait in turn holds
 * all that the data of the peers arriving with it take, so rank 0 would
 * read as late in every step, its peers as waiting on it. */
static uint32_t send_peer(const struct bw_rank *rk, uint32_t i)
{
    return (rk->rank + 1 + i) % rk->R;
}

static uint32_t wait_peer(const struct bw_rank *rk, uint32_t i)
{
    return (rk->rank + rk->R - 1 - i) % rk->R;
}

/* The send's notification: the peer's remote event, once the data is there
 * (after the task's end: a notify-delay postpones it). */
static void release_send(struct br_rt *rt, uint32_t w, struct br_task *t)
{
    struct bw_rank *rk = RK(rt);
    const uint32_t peer = t->tile_x, k = t->tile_y, seq = ar_seq(rk, t->step, k);
    bs_inbox_release(rk->shm, peer, rk->rank);
    br_hook_remote(rt, w, t, MKS_EV_DEP_RELEASE, peer, bw_comm_gen(t->step, k, rk->rank, peer),
                   remote_ev(peer, rk->rank), seq + 1);
}

/* --ar-relay: wait for the previous rank's contribution before sending our
 * own (the data stays in the inbox for the reduce, which finds it there). */
static void body_relay(struct br_rt *rt, uint32_t w, struct br_task *t)
{
    struct bw_rank *rk = RK(rt);
    const uint32_t k = t->tile_y, seq = ar_seq(rk, t->step, k), p = rk->rank - 1;
    int rc = br_wait_remote(rt, w, t, bs_inbox_count(rk->shm, rk->rank, p), seq + 1,
                            remote_ev(rk->rank, p), p, bw_comm_gen(t->step, k, p, rk->rank),
                            bs_abort(rk->shm), REMOTE_TIMEOUT_NS);
    if (rc) {
        if (rc == -ETIMEDOUT)
            fprintf(stderr, "mkscope-bench: rank %u: no data from rank %u for 60 s\n", rk->rank, p);
        fail(rk, rc);
    }
}

static void body_reduce(struct br_rt *rt, uint32_t w, struct br_task *t)
{
    struct bw_rank *rk = RK(rt);
    const struct bm_model *m = &rk->m;
    const uint32_t k = t->tile_y, seq = ar_seq(rk, t->step, k);
    for (uint32_t i = 0; i + 1 < rk->R; i++) {
        const uint32_t p = wait_peer(rk, i);
        int rc = br_wait_remote(rt, w, t, bs_inbox_count(rk->shm, rk->rank, p), seq + 1,
                                remote_ev(rk->rank, p), p, bw_comm_gen(t->step, k, p, rk->rank),
                                bs_abort(rk->shm), REMOTE_TIMEOUT_NS);
        if (rc) {
            if (rc == -ETIMEDOUT)
                fprintf(stderr, "mkscope-bench: rank %u: no data from rank %u for 60 s\n", rk->rank,
                        p);
            fail(rk, rc);
            return;
        }
    }
    for (uint32_t s = 0; s < m->B; s++) {
        if (!rk->batch.slot[s].active)
            continue;
        float *x = rk->x + (size_t)s * m->H;
        for (uint32_t j = 0; j < m->H; j++) {
            float sum = 0.0f;
            for (uint32_t p = 0; p < rk->R; p++) {
                const float *src =
                    p == rk->rank ? rk->partial : bs_inbox_data(rk->shm, rk->rank, p, seq);
                sum += src[(size_t)s * m->H + j];
            }
            x[j] += sum;
        }
    }
}

static void body_expert(struct br_rt *rt, uint32_t w, struct br_task *t);

static void release_no_experts(struct br_rt *rt, uint32_t w, struct br_task *t)
{
    (void)w;
    br_event_fire(rt, ev_of(RK(rt), t->layer, OP_EXPERT));
}

static void body_router(struct br_rt *rt, uint32_t w, struct br_task *t)
{
    (void)w;
    struct bw_rank *rk = RK(rt);
    const struct bm_model *m = &rk->m;
    const uint32_t K = m->cfg.topk, l = t->layer;
    uint64_t chosen = 0;
    for (uint32_t s = 0; s < m->B; s++) {
        if (!rk->batch.slot[s].active)
            continue;
        float *xn = rk->xn + (size_t)s * m->H;
        bm_rmsnorm(rk->x + (size_t)s * m->H, m->layer[l].norm2, xn, m->H);
        bm_route(m, l, t->step, xn, rk->sel_e + s * K, rk->sel_g + s * K);
        for (uint32_t k = 0; k < K; k++)
            chosen |= 1ull << rk->sel_e[s * K + k];
    }
    /* the experts this rank owns that got tokens become tasks now */
    uint32_t n_new = 0, Te = rk->T < m->H ? rk->T : m->H;
    for (uint32_t e = rk->rank; e < m->E; e += rk->R)
        if (chosen & (1ull << e))
            n_new += Te;
    br_event_expect(rt, ev_of(rk, l, OP_EXPERT), n_new);
    for (uint32_t e = rk->rank; e < m->E; e += rk->R) {
        if (!(chosen & (1ull << e)))
            continue;
        for (uint32_t tile = 0; tile < Te; tile++) {
            struct br_task p = {0};
            p.cls = (uint16_t)(BC_EXPERT0 + e);
            p.step = t->step;
            p.gen = t->gen;
            p.layer = l;
            p.tile_x = e;
            p.tile_y = tile;
            p.wait_ev = ev_of(rk, l, OP_ROUTER);
            p.trig_ev = ev_of(rk, l, OP_EXPERT);
            p.body = body_expert;
            p.force_worker = -1;
            plan(rk, &p, tile, Te, 0);
            if (!br_task_add_live(rt, &p)) {
                fprintf(stderr, "mkscope-bench: rank %u: task graph full\n", rk->rank);
                fail(rk, -ENOSPC);
                return;
            }
        }
    }
    /* No expert of this rank got a token: the combine is released with the
     * router's own release, not from its body, so that a postponed release
     * (notify-delay) holds the combine back as it would hold the experts, and
     * no release of this step arrives after the step has ended (events count
     * up across steps: a late one would count toward the next step's target
     * and leave that step's router unfired, the rank hung). */
    if (!n_new)
        t->release = release_no_experts;
}

static void body_expert(struct br_rt *rt, uint32_t w, struct br_task *t)
{
    (void)w;
    struct bw_rank *rk = RK(rt);
    const struct bm_model *m = &rk->m;
    const uint32_t e = t->tile_x, K = m->cfg.topk, Te = rk->T < m->H ? rk->T : m->H;
    const uint32_t el = e / rk->R; /* local expert index */
    uint32_t c0, c1;
    bm_tile_range(m->H, Te, t->tile_y, &c0, &c1);
    for (uint32_t s = 0; s < m->B; s++) {
        if (!rk->batch.slot[s].active)
            continue;
        for (uint32_t k = 0; k < K; k++) {
            if (rk->sel_e[s * K + k] != e)
                continue;
            float *out = rk->P + ((size_t)el * m->B + s) * m->H;
            float h[MKS_BENCH_MAX_HIDDEN];
            for (uint32_t j = c0; j < c1; j++)
                out[j] = 0.0f;
            bm_expert_hidden(m, t->layer, e, rk->xn + (size_t)s * m->H, 0, m->F, h);
            bm_expert_out(m, t->layer, e, h, rk->sel_g[s * K + k], c0, c1, out);
        }
    }
}

static void body_combine(struct br_rt *rt, uint32_t w, struct br_task *t)
{
    (void)w;
    (void)t;
    struct bw_rank *rk = RK(rt);
    const struct bm_model *m = &rk->m;
    const uint32_t K = m->cfg.topk;
    for (uint32_t s = 0; s < m->B; s++) {
        float *dst = rk->partial + (size_t)s * m->H;
        memset(dst, 0, sizeof(float) * m->H);
        if (!rk->batch.slot[s].active)
            continue;
        for (uint32_t e = rk->rank; e < m->E; e += rk->R) {
            int sel = 0;
            for (uint32_t k = 0; k < K; k++)
                sel |= rk->sel_e[s * K + k] == e;
            if (!sel)
                continue;
            const float *src = rk->P + ((size_t)(e / rk->R) * m->B + s) * m->H;
            for (uint32_t j = 0; j < m->H; j++)
                dst[j] += src[j];
        }
    }
}

static void body_lm(struct br_rt *rt, uint32_t w, struct br_task *t)
{
    (void)w;
    struct bw_rank *rk = RK(rt);
    const struct bm_model *m = &rk->m;
    uint32_t c0, c1;
    bm_tile_range(m->V, rk->T, t->tile_x, &c0, &c1);
    float xf[MKS_BENCH_MAX_HIDDEN];
    for (uint32_t s = 0; s < m->B; s++) {
        if (!rk->batch.slot[s].active)
            continue;
        bm_rmsnorm(rk->x + (size_t)s * m->H, m->normf, xf, m->H);
        bm_matvec_cols(xf, m->lmhead, m->H, m->V, c0, c1, rk->logits + (size_t)s * m->V + c0);
    }
}

static int build_step(struct bw_rank *rk, uint32_t s);

static void gen_advance(struct bw_rank *rk, uint32_t w, uint32_t step, int32_t slot)
{
    struct mks_hook_ctx ctx;
    br_ctx_init(rk->rt, w, NULL, MKS_EV_GEN_ADVANCE, &ctx);
    ctx.step = step;
    if (slot < 0) {
        ctx.value = step; /* the decode step advanced */
    } else {
        ctx.tile_y = (uint32_t)slot; /* a request joined this slot */
        ctx.req_gen = rk->batch.slot[slot].req_gen;
        ctx.value = ctx.req_gen;
    }
    br_hook(rk->rt, &ctx);
}

static void body_sample(struct br_rt *rt, uint32_t w, struct br_task *t)
{
    struct bw_rank *rk = RK(rt);
    const struct bm_model *m = &rk->m;
    const uint32_t s = t->step, B = m->B;
    int32_t sampled[MKS_BENCH_MAX_BATCH];
    double lsum = 0.0;
    for (uint32_t i = 0; i < B; i++) {
        sampled[i] = -1;
        rk->res.req_gen[(size_t)s * B + i] =
            rk->batch.slot[i].active ? rk->batch.slot[i].req_gen : 0;
        if (!rk->batch.slot[i].active)
            continue;
        const float *lg = rk->logits + (size_t)i * m->V;
        sampled[i] = (int32_t)bm_argmax(lg, m->V);
        for (uint32_t v = 0; v < m->V; v++)
            lsum += lg[v];
    }
    memcpy(rk->res.tokens + (size_t)s * B, sampled, sizeof(int32_t) * B);
    rk->res.logit_sum[s] = lsum;
    bm_batch_end(m, &rk->batch, s, sampled);
    uint64_t now = bb_now_ns();
    rk->res.step_ns[s] = now - rk->step_t0;
    bm_fault_gain_update(&rk->gain, rk->res.step_ns[s],
                         bm_fault_step_mag(m->faults, m->n_faults, rk->rank, s),
                         m->base_ns ? m->base_ns[s] : 0);
    if (s + 1 >= m->cfg.steps) {
        br_finish(rt, 0);
        return;
    }
    uint32_t joined = bm_batch_begin(m, &rk->batch, s + 1);
    gen_advance(rk, w, s + 1, -1);
    for (uint32_t i = 0; i < B; i++)
        if (joined & (1u << i))
            gen_advance(rk, w, s + 1, (int32_t)i);
    int rc = build_step(rk, s + 1);
    if (rc) {
        fail(rk, rc);
        return;
    }
    if (rk->interval_ns) {
        pthread_mutex_lock(&rk->gate_mu);
        rk->gate_steps = s + 1;
        pthread_cond_signal(&rk->gate_cv);
        pthread_mutex_unlock(&rk->gate_mu);
        return;
    }
    rk->step_t0 = bb_now_ns();
}

/* Paced runs: release each step's first tasks no earlier than interval after
 * the previous step started.  Returns when the run finished or failed. */
static int pace_steps(struct bw_rank *rk)
{
    uint64_t started = rk->step_t0;
    for (uint32_t s = 1; s < rk->m.cfg.steps; s++) {
        pthread_mutex_lock(&rk->gate_mu);
        while (rk->gate_steps < s && !atomic_load(&rk->failed) && !atomic_load(bs_abort(rk->shm))) {
            /* rechecks abort and failure at least every 20 ms */
            struct timespec ts = bb_deadline(20 * 1000 * 1000);
            pthread_cond_timedwait(&rk->gate_cv, &rk->gate_mu, &ts);
        }
        pthread_mutex_unlock(&rk->gate_mu);
        if (atomic_load(&rk->failed) || atomic_load(bs_abort(rk->shm)))
            break;
        uint64_t now = bb_now_ns();
        if (now < started + rk->interval_ns)
            bb_sleep_ns(started + rk->interval_ns - now);
        started = rk->step_t0 = bb_now_ns();
        br_event_fire(rk->rt, E_STEP);
    }
    return br_wait_finish(rk->rt, bs_abort(rk->shm));
}

/* ---- graph ---------------------------------------------------------------- */

static struct br_task *add(struct bw_rank *rk, uint32_t s, uint16_t cls, uint32_t l, uint32_t tx,
                           uint32_t ty, uint32_t wait, uint32_t trig, br_body_fn body)
{
    struct br_task *t = br_task_add(rk->rt);
    if (!t)
        return NULL;
    t->cls = cls;
    t->step = s;
    t->gen = (uint64_t)s + 1; /* every logical task runs once per decode iteration */
    t->layer = l;
    t->tile_x = tx;
    t->tile_y = ty;
    t->wait_ev = wait;
    t->trig_ev = trig;
    t->body = body;
    if (trig != BR_EV_NONE)
        br_event_expect(rk->rt, trig, 1);
    return t;
}

#define ADD_OR_FAIL(...)                                                                           \
    do {                                                                                           \
        t = add(__VA_ARGS__);                                                                      \
        if (!t)                                                                                    \
            return -ENOSPC;                                                                        \
    } while (0)

static int add_allreduce(struct bw_rank *rk, uint32_t s, uint32_t l, uint32_t k, uint32_t wait,
                         uint32_t ev_send, uint32_t ev_done)
{
    struct br_task *t;
    uint32_t reduce_wait = wait;
    if (rk->R > 1 && rk->relay && rk->rank > 0) {
        /* a task of the reduce's class that only waits (no fault plan) */
        ADD_OR_FAIL(rk, s, BC_AR_REDUCE, l, rk->rank - 1, k, wait, ev_relay(rk, k), body_relay);
        t->flags |= MKS_CTX_F_COMM;
        wait = ev_relay(rk, k);
    }
    if (rk->R > 1) {
        /* to the next rank first, round the ring (send_peer): no rank's
         * data is everyone's first */
        for (uint32_t i = 0; i + 1 < rk->R; i++) {
            const uint32_t p = send_peer(rk, i);
            ADD_OR_FAIL(rk, s, BC_AR_SEND, l, p, k, wait, ev_send, body_send);
            t->release = release_send;
            t->flags |= MKS_CTX_F_COMM;
            plan(rk, t, i, rk->R - 1, k);
        }
        reduce_wait = ev_send;
    }
    ADD_OR_FAIL(rk, s, BC_AR_REDUCE, l, 0, k, reduce_wait, ev_done, body_reduce);
    t->flags |= MKS_CTX_F_COMM;
    plan(rk, t, 0, 1, k);
    return 0;
}

static int build_step(struct bw_rank *rk, uint32_t s)
{
    const struct bm_model *m = &rk->m;
    struct br_task *t;
    uint32_t n_act = 0;
    for (uint32_t i = 0; i < m->B; i++)
        n_act += rk->batch.slot[i].active;
    br_graph_begin(rk->rt);
    if (s > 0 && !rk->interval_ns)
        br_event_expect(rk->rt, E_STEP, 1); /* released by the previous sample */
    for (uint32_t l = 0; l < rk->L; l++) {
        uint32_t in = l == 0 ? E_STEP : ev_of(rk, l - 1, OP_AR2), i_act = 0;
        for (uint32_t i = 0; i < m->B; i++) {
            if (!rk->batch.slot[i].active)
                continue;
            ADD_OR_FAIL(rk, s, BC_NORM, l, i, 0, in, ev_of(rk, l, OP_NORM), body_norm);
            t->req_gen = rk->batch.slot[i].req_gen;
            t->flags |= MKS_CTX_F_DYNAMIC; /* exists for this request (batch shape) */
            plan(rk, t, i_act++, n_act, 0);
        }
        for (uint32_t x = 0; x < rk->T; x++) {
            ADD_OR_FAIL(rk, s, BC_QKV, l, x, 0, ev_of(rk, l, OP_NORM), ev_of(rk, l, OP_QKV),
                        body_qkv);
            plan(rk, t, x, rk->T, 0);
        }
        i_act = 0;
        for (uint32_t i = 0; i < m->B; i++) {
            if (!rk->batch.slot[i].active)
                continue;
            for (uint32_t h = 0; h < m->cfg.heads; h++) {
                ADD_OR_FAIL(rk, s, BC_ATTN, l, h, i, ev_of(rk, l, OP_QKV), ev_of(rk, l, OP_ATTN),
                            body_attn);
                t->req_gen = rk->batch.slot[i].req_gen;
                t->flags |= MKS_CTX_F_DYNAMIC;
                plan(rk, t, i_act++, n_act * m->cfg.heads, 0);
            }
        }
        for (uint32_t x = 0; x < rk->T; x++) {
            ADD_OR_FAIL(rk, s, BC_OPROJ, l, x, 0, ev_of(rk, l, OP_ATTN), ev_of(rk, l, OP_OPROJ),
                        body_oproj);
            plan(rk, t, x, rk->T, 0);
        }
        int rc = add_allreduce(rk, s, l, 2 * l, ev_of(rk, l, OP_OPROJ), ev_of(rk, l, OP_SEND1),
                               ev_of(rk, l, OP_AR1));
        if (rc)
            return rc;
        ADD_OR_FAIL(rk, s, BC_ROUTER, l, 0, 0, ev_of(rk, l, OP_AR1), ev_of(rk, l, OP_ROUTER),
                    body_router);
        plan(rk, t, 0, 1, 0);
        /* expert tasks are added by the router; combine waits on their event */
        ADD_OR_FAIL(rk, s, BC_COMBINE, l, 0, 0, ev_of(rk, l, OP_EXPERT), ev_of(rk, l, OP_COMB),
                    body_combine);
        plan(rk, t, 0, 1, 0);
        rc = add_allreduce(rk, s, l, 2 * l + 1, ev_of(rk, l, OP_COMB), ev_of(rk, l, OP_SEND2),
                           ev_of(rk, l, OP_AR2));
        if (rc)
            return rc;
    }
    for (uint32_t x = 0; x < rk->T; x++) {
        ADD_OR_FAIL(rk, s, BC_LMHEAD, 0, x, 0, ev_of(rk, rk->L - 1, OP_AR2), ev_lm(rk), body_lm);
        plan(rk, t, x, rk->T, 0);
    }
    uint32_t trig = s + 1 < m->cfg.steps && !rk->interval_ns ? E_STEP : BR_EV_NONE;
    /* add() raises E_STEP's target only through build_step's own expect */
    t = br_task_add(rk->rt);
    if (!t)
        return -ENOSPC;
    t->cls = BC_SAMPLE;
    t->step = s;
    t->gen = (uint64_t)s + 1;
    t->wait_ev = ev_lm(rk);
    t->trig_ev = trig;
    t->body = body_sample;
    plan(rk, t, 0, 1, 0);
    br_graph_commit(rk->rt);
    return 0;
}

static uint32_t max_tasks(const struct bw_rank *rk)
{
    const struct bm_model *m = &rk->m;
    uint32_t Te = rk->T < m->H ? rk->T : m->H;
    uint32_t per_layer = m->B + 2 * rk->T + m->B * m->cfg.heads + 2 * (rk->R - 1) + 2 + 2 +
                         rk->n_own * Te + (rk->relay ? 2 : 0);
    return rk->L * per_layer + rk->T + 1;
}

/* ---- the rank's life --------------------------------------------------------- */

#ifndef MKS_HOOKS_DISABLED
/* Let an agent attach before the first task, so its counts cover the whole
 * run: wait until programs are attached and the attach mask has not changed
 * for a while (an agent attaches its monitors one after another), at most
 * wait_ms.  That while scales with the machine: twice the time the first
 * monitor took to appear (the agent verifies each before it attaches it; on
 * a loaded machine a monitor took over 100 ms, and a rank that started
 * after 50 ms of quiet ran its first steps without wait records), at least
 * 50 ms, at most 1 s.  Returns 1 when an agent attached. */
static int wait_agent(struct mks_rt *hooks, uint32_t wait_ms, const _Atomic uint32_t *abort_p)
{
    const volatile uint32_t *mask = ((const struct mks_rt_hot *)(const void *)hooks)->mask;
    const uint64_t ms = 1000ull * 1000, t0 = bb_now_ns();
    const uint64_t limit = (uint64_t)wait_ms * ms;
    uint64_t settle = 50 * ms;
    uint32_t last = *mask;
    uint64_t since = t0;
    while (bb_now_ns() - t0 < limit && !atomic_load(abort_p)) {
        uint32_t m = *mask;
        uint64_t now = bb_now_ns();
        if (m != last) {
            if (!last && since == t0) {
                uint64_t first = 2 * (now - t0);
                settle = first < 50 * ms ? 50 * ms : first > 1000 * ms ? 1000 * ms : first;
            }
            last = m;
            since = now;
        } else if (m && now - since >= settle) {
            return 1;
        }
        bb_sleep_ns(2 * ms);
    }
    return last != 0;
}
#endif

static const char *cls_name_cb(void *user, uint32_t cls)
{
    static _Thread_local char buf[32];
    return mks_bench_class_name(&((struct bw_rank *)user)->m.cfg, cls, buf, sizeof(buf));
}

#if defined(MKS_BENCH_PROFILER) || defined(MKS_BENCH_COUNTERS)
/* A rank's PREFIX.rankR.json, written by export: the profiler's trace or the
 * fixed counters. */
static int rank_file(struct bw_rank *rk, const char *prefix, const char *what,
                     int (*export)(const struct br_rt *, const char *,
                                   const char *(*)(void *, uint32_t), void *),
                     char *err, size_t err_len)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s.rank%u.json", prefix, rk->rank);
    int rc = export(rk->rt, path, cls_name_cb, rk);
    return rc ? bb_err(err, err_len, rc, "rank %u: writing %s %s: %s", rk->rank, what, path,
                       strerror(-rc))
              : 0;
}
#endif

static void rank_free(struct bw_rank *rk)
{
    br_destroy(rk->rt);
#ifndef MKS_HOOKS_DISABLED
    mks_rt_destroy(rk->hooks);
#endif
    free(rk->x), free(rk->xn), free(rk->q), free(rk->o), free(rk->partial), free(rk->logits);
    free(rk->kc), free(rk->vc), free(rk->P), free(rk->sel_e), free(rk->sel_g);
    bm_model_fini(&rk->m);
    pthread_cond_destroy(&rk->gate_cv);
    pthread_mutex_destroy(&rk->gate_mu);
}

int bw_rank_main(struct bs_shm *shm, const struct mks_bench_config *cfg,
                 const struct mks_fault *faults, uint32_t n_faults, uint32_t rank, char *err,
                 size_t err_len)
{
    struct bw_rank rk;
    memset(&rk, 0, sizeof(rk));
    bm_fault_gain_init(&rk.gain);
    rk.shm = shm;
    rk.rank = rank;
    rk.R = cfg->ranks;
    rk.L = cfg->layers;
    rk.W = cfg->workers;
    rk.T = cfg->tiles;
    rk.interval_ns = (uint64_t)cfg->step_interval_us * 1000ull;
    rk.relay = cfg->ar_relay != 0;
    pthread_mutex_init(&rk.gate_mu, NULL);
    pthread_cond_init(&rk.gate_cv, NULL);
    bs_result(shm, rank, &rk.res);
    int rc = bm_model_init(&rk.m, cfg, faults, n_faults);
    if (rc) {
        rank_free(&rk);
        return bb_err(err, err_len, rc, "rank %u: out of memory for the model", rank);
    }
    if (cfg->baseline_ns)
        rk.m.base_ns = cfg->baseline_ns + (size_t)rank * cfg->steps;
    const struct bm_model *m = &rk.m;
    rk.QDr = cfg->heads * cfg->head_dim;
    rk.n_own = (m->E + rk.R - 1 - rank) / rk.R;
    size_t BH = (size_t)m->B * m->H, BQ = (size_t)m->B * m->QD;
    size_t kv = (size_t)rk.L * m->B * cfg->max_len * m->QD;
    rk.x = calloc(BH, sizeof(float));
    rk.xn = calloc(BH, sizeof(float));
    rk.partial = calloc(BH, sizeof(float));
    rk.q = calloc(BQ, sizeof(float));
    rk.o = calloc(BQ, sizeof(float));
    rk.logits = calloc((size_t)m->B * m->V, sizeof(float));
    rk.kc = calloc(kv, sizeof(float));
    rk.vc = calloc(kv, sizeof(float));
    rk.P = calloc((size_t)(rk.n_own ? rk.n_own : 1) * BH, sizeof(float));
    rk.sel_e = calloc((size_t)m->B * cfg->topk, sizeof(uint32_t));
    rk.sel_g = calloc((size_t)m->B * cfg->topk, sizeof(float));
    if (!rk.x || !rk.xn || !rk.partial || !rk.q || !rk.o || !rk.logits || !rk.kc || !rk.vc ||
        !rk.P || !rk.sel_e || !rk.sel_g) {
        rank_free(&rk);
        return bb_err(err, err_len, -ENOMEM, "rank %u: out of memory for activations", rank);
    }
#ifndef MKS_HOOKS_DISABLED
    struct mks_rt_opts ho = {.sz = sizeof(ho),
                             .job = cfg->job,
                             .rank = rank,
                             .n_ranks = rk.R,
                             /* the scheduler is hook worker n_workers */
                             .n_workers = rk.W + 1,
                             /* worker threads on the host's CPUs */
                             .flags = MKS_RT_F_HOST_WORKERS};
    rc = mks_rt_create(&ho, &rk.hooks);
    if (rc) {
        rank_free(&rk);
        return bb_err(err, err_len, rc, "rank %u: devhooks control block for job '%s': %s", rank,
                      cfg->job, strerror(-rc));
    }
    uint8_t *schema = NULL;
    size_t schema_len = 0;
    rc = bw_schema_encode(cfg, rank, &schema, &schema_len);
    if (!rc)
        rc = mks_rt_publish_schema(rk.hooks, schema, schema_len);
    free(schema);
    if (rc) {
        rank_free(&rk);
        return bb_err(err, err_len, rc, "rank %u: publishing the task schema: %s", rank,
                      strerror(-rc));
    }
    if (cfg->wait_agents_ms && !wait_agent(rk.hooks, cfg->wait_agents_ms, bs_abort(shm)))
        fprintf(stderr,
                "mkscope-bench: rank %u: no agent attached within %u ms; running unobserved\n",
                rank, cfg->wait_agents_ms);
#endif
    struct br_opts ro = {.rank = rank,
                         .n_ranks = rk.R,
                         .n_workers = rk.W,
                         .n_events = ev_relay(&rk, 2 * rk.L),
                         .n_classes = mks_bench_class_count(cfg),
                         .max_tasks = max_tasks(&rk),
                         .queue_pressure = cfg->queue_pressure,
                         .n_steps = cfg->steps,
                         .hooks = rk.hooks,
                         .user = &rk};
    rc = br_create(&ro, &rk.rt);
    if (rc) {
        rank_free(&rk);
        return bb_err(err, err_len, rc, "rank %u: runtime: %s", rank, strerror(-rc));
    }
    bm_batch_init(m, &rk.batch);
    bm_batch_begin(m, &rk.batch, 0);
    rc = build_step(&rk, 0);
    if (!rc)
        rc = br_start(rk.rt);
    if (rc) {
        rank_free(&rk);
        return bb_err(err, err_len, rc, "rank %u: starting the runtime: %s", rank, strerror(-rc));
    }
    /* every rank is up before the first step: step times start together */
    rc = bs_barrier(shm, RENDEZVOUS_NS);
    if (rc) {
        atomic_store(bs_abort(shm), 1);
        rank_free(&rk);
        return bb_err(err, err_len, rc, "rank %u: rendezvous with the other ranks failed: %s", rank,
                      strerror(-rc));
    }
    rk.step_t0 = bb_now_ns();
    br_event_fire(rk.rt, E_STEP);
    rc = rk.interval_ns ? pace_steps(&rk) : br_wait_finish(rk.rt, bs_abort(shm));
    br_stop(rk.rt);
    if (rc) {
        rank_free(&rk);
        return bb_err(err, err_len, rc, "rank %u: run aborted (%s)", rank,
                      rc == -ECANCELED ? "another rank failed" : strerror(-rc));
    }
    for (uint32_t c = 0; c < ro.n_classes; c++)
        rk.res.class_counts[c] = br_class_count(rk.rt, c);
    *rk.res.prof_dropped = br_prof_dropped(rk.rt);
    *rk.res.faulted = br_faulted(rk.rt);
    rc = 0;
#ifdef MKS_BENCH_PROFILER
    if (cfg->trace)
        rc = rank_file(&rk, cfg->trace, "trace", br_prof_export, err, err_len);
#endif
#ifdef MKS_BENCH_COUNTERS
    if (!rc && cfg->counters)
        rc = rank_file(&rk, cfg->counters, "counters", br_counters_export, err, err_len);
#endif
    (void)cls_name_cb;
    rank_free(&rk);
    return rc;
}

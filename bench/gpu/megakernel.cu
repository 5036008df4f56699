/*
 * The CUDA backend of mkscope-bench: the same decode-step task graph as the
 * CPU backend (bench/src/workload.c), run three ways on one GPU per rank.
 *
 * persistent  One cooperative kernel for the whole run: block 0 is the
 *             scheduler, every other block a worker (one per SM).  The
 *             scheduler builds each operator's tasks from device state (the
 *             active requests, the experts the router chose: dynamic tasks),
 *             raises the operator's event target (counters are never reset),
 *             assigns tasks round-robin to per-worker queues in global memory
 *             and waits for the event.  Workers pop their queue, run the body
 *             with the whole block, and release the event.  All-reduce tasks
 *             write partial sums into the peer's inbox (CUDA IPC over NVLink)
 *             and bump its counter; the reduce task waits on every peer's
 *             counter.  Every hook of the ABI is called at its place; with
 *             programs attached, a worker's events run on a monitor warp
 *             of its block, the scheduler's inline (bg_hw, below;
 *             mkscope/devhook.cuh).
 * per-op      One kernel per operator (grid = its tiles), NCCL all-reduce.
 * graph       The per-op step captured once as a CUDA Graph and replayed.
 *
 * Data produced by one block and read by another goes through L2 only (this
 * file is compiled with -dlcm=cg), and every hand-off is a fence followed by a
 * flag, so plain loads see the producer's writes.
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef MKS_BENCH_HAVE_NCCL
#include <nccl.h>
#endif

/* C headers first, outside extern "C", so the math and string headers keep
 * their C++ declarations when model.h includes them again. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

extern "C" {
#include "graph.h"
#include "model.h"
#include "runtime/prof.h"
}
#include "gpu.h"
#include "mkscope/commid.h"
#include "mkscope/hook_abi.h"
#ifndef MKS_HOOKS_DISABLED
#include "mkscope/devhook.cuh"
#endif

#define BG_THREADS  128
/* A block's warp i issues from the SM's warp scheduler i mod 4.  With hooks
 * a spare warp that exits at once comes after the task threads and the
 * monitor warp after it (warp 5 of 6, scheduler 1): it then shares no
 * scheduler with warp 0, whose thread 0 runs a worker's serial part (pops,
 * records, releases) while the monitor warp runs the records of the task
 * before.  Block 0's scheduler thread is in warp 2 (scheduler 2). */
#define BG_MON_SPARE    32u
#define BG_SCHED_THREAD 64u
#define BG_QCAP     4096u       /* per-worker queue slots */
#define BG_STOP     0xffffffffu /* task index that ends a worker */
#define BG_CSTRIDE  32u         /* u32 words between inbox counters (own line) */
#define BG_PROF_CAP (1u << 14)  /* profiler records per worker block */
/* A peer that delivers nothing for this long is gone: the kernel stops and
 * the rank reports it instead of spinning forever. */
#define BG_PEER_TIMEOUT_NS (30ull * 1000000000ull)


struct bg_task {
    uint16_t cls, flags;
    uint32_t step, layer, tile_x, tile_y, trig_ev, k;
    uint64_t gen, req_gen, t_ready;
    uint64_t run_delay, notify_delay, hold, comm_delay;
    /* TASK_ASSIGN and QUEUE_PRESSURE left to the receiving worker (see
     * bg_hw): their times and the queue's depth at the assignment */
    uint64_t assign_t, pressure_t;
    uint32_t assign_depth, assign_defer, pressure_defer;
    uint32_t relay; /* --ar-relay: the reduce-class task that only waits for rank - 1 */
};

struct bg_queue {
    uint32_t head; /* written by the worker */
    uint32_t pad0[31];
    uint32_t tail; /* written by the scheduler; the low half of the polled word */
    uint32_t gate; /* its high half: written by devhooks' pump only (qword()) */
    uint32_t pad1[30];
    uint32_t slot[BG_QCAP];
};
static_assert(offsetof(struct bg_queue, tail) % 8 == 0 && sizeof(struct bg_queue) % 8 == 0,
              "the polled words are 8-aligned 64-bit words (mks_rt_cuda_gate)");

/* Everything the kernels use, passed by value. */
struct bg_dev {
    struct bm_model m; /* device pointers */
    uint32_t rank, R, L, W, T, Te, QDr, n_own;
    float *x, *xn, *q, *o, *partial, *arsum, *logits, *kc, *vc, *P;
    uint32_t *sel_e;
    float *sel_g;
    struct bm_batch *batch;
    int32_t *sampled;
    uint32_t *d_step;                          /* per-op modes: the step the kernels run */
    uint32_t *inbox_count;                     /* [R * BG_CSTRIDE]: releases from each source */
    float *inbox_data;                         /* [R][2][B * H] */
    uint32_t *peer_count[MKS_BENCH_MAX_RANKS]; /* my counter in each peer's inbox */
    float *peer_data[MKS_BENCH_MAX_RANKS];
    struct bg_task *tasks; /* two step buffers of max_tasks */
    uint32_t max_tasks;
    uint32_t *order; /* scheduler scratch */
    unsigned long long *ev_count, *ev_target;
    struct bg_queue *queues;
    unsigned long long *step_ns, *class_counts, *faulted, *req_gen_out;
    uint32_t *abort; /* set when a peer timed out: everyone stops */
    int32_t *tokens;
    double *logit_sum;
    struct br_prof_rec *prof;
    uint32_t *prof_n;
    unsigned long long *prof_drop;
    int have_hooks;
#ifndef MKS_HOOKS_DISABLED
    struct mks_dev_rt hooks;
#endif
};

/* ---- device helpers -------------------------------------------------------- */

static __device__ __forceinline__ uint64_t now_ns(void)
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

static __device__ void spin_ns(uint64_t ns)
{
    uint64_t t0 = now_ns();
    while (now_ns() - t0 < ns)
        __nanosleep(256);
}

static __device__ void spin_until(uint64_t t)
{
    while (now_ns() < t)
        __nanosleep(256);
}

static __device__ __forceinline__ uint32_t vload32(const uint32_t *p)
{
    return *(const volatile uint32_t *)p;
}

static __device__ __forceinline__ uint64_t vload64(const unsigned long long *p)
{
    return *(const volatile unsigned long long *)p;
}

/* Named barrier 1 over the BG_THREADS task threads: a worker block may also
 * hold a monitor warp, which never joins the bodies' barriers. */
static __device__ __forceinline__ void bg_sync(void)
{
    asm volatile("bar.sync 1, %0;" : : "n"(BG_THREADS) : "memory");
}

/* The queue word a worker polls: tail in the low half (the scheduler's
 * 32-bit stores), and in the high half, with hooks, devhooks' gate bit and
 * attach mask, which the pump writes (mks_rt_cuda_gate). */
static __device__ __forceinline__ uint64_t qword(const struct bg_queue *q)
{
    return *(const volatile unsigned long long *)&q->tail;
}

/*
 * Who runs hooks, and where their programs run.
 *
 * worker     thread 0 of a worker block.  Which events are attached comes
 *            with each task, in the queue word it polls anyway, so a
 *            detached worker tests a bit it has loaded already.  Attached,
 *            it writes compact records of its events (what each event
 *            adds; the task's identity once per task) into the block's
 *            shared-memory ring from registers and publishes them once per
 *            task, and the block's monitor warp (threads BG_THREADS to
 *            BG_THREADS + 31, mks_dev_monitor_warp) rebuilds each event's
 *            context and runs the programs in the worker's hook slot, of
 *            which it is the only runner.
 * scheduler  thread 0 of block 0.  Its own events (TASK_READY,
 *            GEN_ADVANCE) go the same way to block 0's monitor warp, hook
 *            slot W.  TASK_ASSIGN names the receiving worker: the scheduler
 *            stores its time and queue depth into the task and the
 *            receiving worker puts the event into its TASK record, so that
 *            the scheduler, on every task's critical path, runs no program
 *            and makes no load for it; QUEUE_PRESSURE (a worker's queue
 *            reached the declared depth at an assignment) goes the same way.
 *            The one exception is a CONTROL program at TASK_READY or
 *            TASK_ASSIGN, whose hint is needed at once: while one is
 *            attached, that event runs inline through the scheduler's cache
 *            in hook slot W + 1 (mks_dev_hook_run_as), which no monitor
 *            warp uses.
 *
 * The code of both exists twice (template argument HK): the instantiation
 * without hooks is the compiled-out build's, and runs while nothing is
 * attached; the hooked one is called out of line, by a worker for a task
 * whose queue word has the gate bit, by the scheduler for a step that
 * starts with one of its events attached.
 */
struct bg_hw {
#ifndef MKS_HOOKS_DISABLED
    struct mks_dev_worker w;   /* scheduler: cached attach mask */
    struct mks_dev_hcache *hc; /* scheduler: inline CONTROL runs */
    struct mks_dev_emit em;    /* records into the block's ring */
    uint32_t hint;             /* scheduler: events whose CONTROL hint runs inline */
#endif
    uint32_t id;
    uint32_t mask;  /* worker: events attached for the task it runs now */
    uint32_t depth; /* worker: its queue's depth when it took the task */
};

static __device__ void hw_init(const struct bg_dev &D, struct bg_hw *h, uint32_t id, void *ring,
                               void *hc)
{
    h->id = id;
    h->mask = 0;
    h->depth = 0;
#ifndef MKS_HOOKS_DISABLED
    h->hint = 0;
    mks_dev_emit_init(&h->em, (struct mks_dev_ring *)ring);
    h->hc = (struct mks_dev_hcache *)hc;
    if (D.have_hooks && h->hc)
        mks_dev_worker_init_cached(&D.hooks, &h->w, h->hc);
#else
    (void)D, (void)ring, (void)hc;
#endif
}

/* ---- worker side: events to the monitor warp ---- */

/* HK: the hooked instantiation of the worker's and the scheduler's code.
 * The other one, which runs while nothing is attached, is the source of
 * the hooks-compiled-out build: no hook test and no hook state in it. */
template <bool HK> static __device__ __forceinline__ int w_on(const struct bg_hw *h, uint32_t ev)
{
#ifdef MKS_HOOKS_DISABLED
    (void)h, (void)ev;
    return 0;
#else
    return HK && ((h->mask >> ev) & 1u);
#endif
}

/* Publish the records written so far: before the worker may block (a
 * wait, a delay), so that a stuck worker's events are seen. */
template <bool HK> static __device__ __forceinline__ void w_flush(struct bg_hw *h)
{
#ifdef MKS_HOOKS_DISABLED
    (void)h;
#else
    if (HK)
        mks_dev_emit_flush(&h->em);
#endif
}

/* ---- scheduler side: inline through its cache ---- */

template <bool HK>
static __device__ __forceinline__ int s_on(const struct bg_dev &D, struct bg_hw *h, uint32_t ev)
{
#ifdef MKS_HOOKS_DISABLED
    (void)D, (void)h, (void)ev;
    return 0;
#else
    if (!HK || !D.have_hooks)
        return 0;
    MKS_DEV_HOOK_IF(&D.hooks, &h->w, ev)
    return 1;
    return 0;
#endif
}

/* The events the scheduler raises. */
#define BG_SCHED_EVENTS                                                                            \
    ((1u << MKS_EV_TASK_READY) | (1u << MKS_EV_TASK_ASSIGN) | (1u << MKS_EV_GEN_ADVANCE) |         \
     (1u << MKS_EV_QUEUE_PRESSURE))

/* Once per dispatch and while the scheduler waits: a change of programs or
 * an epoch flip makes it leave the epoch its cache holds, which ends the
 * pump's grace period (a wait can last as long as a step). */
static __device__ __forceinline__ void s_poll(const struct bg_dev &D, struct bg_hw *h)
{
#ifdef MKS_HOOKS_DISABLED
    (void)D, (void)h;
#else
    if (!D.have_hooks)
        return;
    mks_dev_worker_task(&D.hooks, &h->w);
    if (__builtin_expect(h->w.mask & MKS_DEV_SYNC, 0)) {
        h->w.mask &= ~MKS_DEV_SYNC;
        mks_dev_worker_changed(&D.hooks, h->hc);
    }
#endif
}

#ifndef MKS_HOOKS_DISABLED
/* The inline exception (a CONTROL hint needed now): c's programs in the
 * scheduler's inline slot W + 1; the clamped hint. */
static __device__ int32_t s_run(const struct bg_dev &D, struct bg_hw *h, struct mks_hook_ctx *c)
{
    return mks_dev_hook_run_as(&D.hooks, h->hc, h->id + 1, c);
}

static __device__ int s_wants_hint(const struct bg_dev &D, struct bg_hw *h, uint32_t ev)
{
    return mks_dev_hook_wants_hint(&D.hooks, h->hc, h->id + 1, ev);
}

/* The whole context of an inline run.  t_start: when the task started (0
 * before it has), as the CPU runtime fills it. */
static __device__ void ctx_fill(const struct bg_dev &D, uint32_t worker, const struct bg_task *t,
                                uint16_t ev, uint64_t t_start, struct mks_hook_ctx *c)
{
    memset(c, 0, sizeof(*c));
    c->abi_version = MKS_HOOK_ABI_VERSION;
    c->size = sizeof(*c);
    c->event = ev;
    c->rank = D.rank;
    c->worker = worker;
    uint32_t smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    c->sm = smid;
    if (t) {
        c->flags = t->flags;
        c->task_class = t->cls;
        c->task_gen = t->gen;
        c->req_gen = t->req_gen;
        c->step = t->step;
        c->tile_x = t->tile_x;
        c->tile_y = t->tile_y;
        c->t_ready = t->t_ready;
        c->t_start = t_start;
    }
    c->t_now = now_ns();
}
#endif

/* A worker's hook about a remote dependency or transfer, when attached. */
template <bool HK>
static __device__ void remote_hook(const struct bg_dev &D, struct bg_hw *h, const struct bg_task *t,
                                   uint16_t ev, uint32_t peer, uint64_t cg, uint64_t dep,
                                   uint64_t value)
{
    (void)D, (void)t;
    if (!w_on<HK>(h, ev))
        return;
#ifndef MKS_HOOKS_DISABLED
    mks_dev_emit_event(&h->em, ev, now_ns(), MKS_DEP_REMOTE, 0, value, dep, cg, peer);
#else
    (void)peer, (void)cg, (void)dep, (void)value;
#endif
}

static __device__ void prof_rec(const struct bg_dev &D, uint32_t w, uint8_t kind,
                                const struct bg_task *t)
{
#ifdef MKS_BENCH_PROFILER
    uint32_t n = D.prof_n[w];
    if (n >= BG_PROF_CAP) {
        D.prof_drop[w]++;
        return;
    }
    struct br_prof_rec *r = &D.prof[(size_t)w * BG_PROF_CAP + n];
    r->t = now_ns();
    r->cls = t->cls;
    r->kind = kind;
    r->pad = 0;
    r->tile = t->tile_x | (t->tile_y << 16);
    D.prof_n[w] = n + 1;
#else
    (void)D, (void)w, (void)kind, (void)t;
#endif
}

static __device__ __forceinline__ uint32_t ev_of(uint32_t l, uint32_t op)
{
    return 1 + l * BW_OPS + op;
}

/* LM head's event, after the layers' */
static __host__ __device__ __forceinline__ uint32_t ev_lm(const struct bg_dev &D)
{
    return 1 + D.L * BW_OPS;
}

/* --ar-relay: all-reduce k's contribution of rank - 1 has arrived */
static __host__ __device__ __forceinline__ uint32_t ev_relay(const struct bg_dev &D, uint32_t k)
{
    return ev_lm(D) + 1 + k;
}

static __device__ __forceinline__ uint32_t ar_seq(const struct bg_dev &D, uint32_t step, uint32_t k)
{
    return step * 2 * D.L + k;
}

static __device__ uint64_t comm_gen(uint32_t step, uint32_t k, uint32_t src, uint32_t dst)
{
    /* mks_commid_for_transfer's layout (comm-ids/include/mkscope/commid.h),
     * kind STEP; the host library cannot be called on the device */
    uint32_t l = k / 2, ch = (k & 1) ? BW_CH_AR_MOE : BW_CH_AR_ATTN;
    uint32_t op = l * BW_OPS + ((k & 1) ? OP_SEND2 : OP_SEND1);
    return ((uint64_t)MKS_COMMID_STEP << 62) | ((uint64_t)ch << 56) | ((uint64_t)src << 48) |
           ((uint64_t)dst << 40) | ((uint64_t)(step % MKS_COMMID_STEP_WRAP) << 20) |
           ((uint64_t)op << 8);
}

static __device__ __forceinline__ uint64_t remote_ev(uint32_t dst, uint32_t src)
{
    return (1ull << 63) | ((uint64_t)dst << 16) | src;
}

/* ---- task bodies (the whole block runs each) ------------------------------- */

/* The bodies compute what model_math.h's functions compute, with the same
 * float operations in the same order per output (so tokens match the host
 * reference), but spread over the block: one output column per thread,
 * accumulated in a register.  The host functions accumulate into their
 * output array, which on the device is a global read-modify-write per input
 * and made single-thread bodies latency-bound (hundreds of µs per task). */

/* Column j of x·W (row-major W, `stride` columns): bm_matvec_cols' sum. */
static __device__ __forceinline__ float dot_col(const float *x, const float *W, uint32_t in,
                                                uint32_t stride, uint32_t j)
{
    float acc = 0.0f;
    for (uint32_t i = 0; i < in; i++)
        acc += x[i] * W[(size_t)i * stride + j];
    return acc;
}

/* bm_rmsnorm by the block: x staged in shared memory, the sum of squares by
 * thread 0 in the host's order, the scaling by all threads.  out may be sh;
 * sh holds n floats.  Ends synchronised. */
static __device__ void norm_blk(const float *x, const float *w, float *out, uint32_t n, float *sh)
{
    __shared__ float s_r;
    for (uint32_t i = threadIdx.x; i < n; i += BG_THREADS)
        sh[i] = x[i];
    bg_sync();
    if (threadIdx.x == 0) {
        float ss = 0.0f;
        for (uint32_t i = 0; i < n; i++)
            ss += sh[i] * sh[i];
        s_r = 1.0f / sqrtf(ss / (float)n + 1e-6f);
    }
    bg_sync();
    const float r = s_r;
    for (uint32_t i = threadIdx.x; i < n; i += BG_THREADS)
        out[i] = sh[i] * r * w[i];
    bg_sync();
}

static __device__ void body_norm(const struct bg_dev &D, const struct bg_task *t, float *sh)
{
    const struct bm_model *m = &D.m;
    const uint32_t s = t->tile_x, H = m->H;
    float *x = D.x + (size_t)s * H;
    if (t->layer == 0) {
        const float *e = m->embed + (size_t)D.batch->slot[s].token * H;
        for (uint32_t i = threadIdx.x; i < H; i += BG_THREADS)
            x[i] = e[i];
        bg_sync();
    }
    norm_blk(x, m->layer[t->layer].norm1, D.xn + (size_t)s * H, H, sh);
}

static __device__ void body_qkv(const struct bg_dev &D, const struct bg_task *t)
{
    const struct bm_model *m = &D.m;
    const struct bm_layer *Ly = &m->layer[t->layer];
    const uint32_t QD = m->QD, QDr = D.QDr, off = D.rank * QDr, ML = m->cfg.max_len;
    uint32_t c0, c1;
    bm_tile_range(3 * QDr, D.T, t->tile_x, &c0, &c1);
    for (uint32_t s = 0; s < m->B; s++) {
        const struct bm_slot *sl = &D.batch->slot[s];
        if (!sl->active)
            continue;
        const size_t kvo = (((size_t)t->layer * m->B + s) * ML + sl->pos) * QD;
        const float *xn = D.xn + (size_t)s * m->H;
        /* bm_qkv_cols: column c of this rank's q|k|v block is global column
         * off + c mod QDr of q, k or v */
        for (uint32_t c = c0 + threadIdx.x; c < c1; c += BG_THREADS) {
            const uint32_t which = c / QDr, col = off + c - which * QDr;
            const float *W = which == 0 ? Ly->wq : which == 1 ? Ly->wk : Ly->wv;
            float *dst = which == 0 ? D.q + (size_t)s * QD : which == 1 ? D.kc + kvo : D.vc + kvo;
            dst[col] = dot_col(xn, W, m->H, QD, col);
        }
    }
}

/* bm_attention for one (request, head) by the block. */
static __device__ void body_attn(const struct bg_dev &D, const struct bg_task *t, float *sh)
{
    __shared__ float s_mx, s_sum;
    const struct bm_model *m = &D.m;
    const uint32_t s = t->tile_y, gh = D.rank * m->cfg.heads + t->tile_x;
    const uint32_t pos = D.batch->slot[s].pos, HD = m->HD, QD = m->QD, off = gh * HD;
    const size_t kvo = ((size_t)t->layer * m->B + s) * m->cfg.max_len * QD;
    const float *q = D.q + (size_t)s * QD, *kc = D.kc + kvo, *vc = D.vc + kvo;
    float *sc = sh; /* pos + 1 <= max_len scores */
    const float scale = 1.0f / sqrtf((float)HD);
    for (uint32_t p = threadIdx.x; p <= pos; p += BG_THREADS) {
        float d = 0.0f;
        for (uint32_t i = 0; i < HD; i++)
            d += q[off + i] * kc[(size_t)p * QD + off + i];
        sc[p] = d * scale;
    }
    bg_sync();
    if (threadIdx.x == 0) {
        float mx = -INFINITY;
        for (uint32_t p = 0; p <= pos; p++)
            if (sc[p] > mx)
                mx = sc[p];
        s_mx = mx;
    }
    bg_sync();
    const float mx = s_mx;
    for (uint32_t p = threadIdx.x; p <= pos; p += BG_THREADS)
        sc[p] = expf(sc[p] - mx);
    bg_sync();
    if (threadIdx.x == 0) {
        float sum = 0.0f;
        for (uint32_t p = 0; p <= pos; p++)
            sum += sc[p];
        s_sum = sum;
    }
    bg_sync();
    const float sum = s_sum;
    float *out = D.o + (size_t)s * QD + off;
    for (uint32_t i = threadIdx.x; i < HD; i += BG_THREADS) {
        float acc = 0.0f;
        for (uint32_t p = 0; p <= pos; p++) {
            float w = sc[p] / sum;
            acc += w * vc[(size_t)p * QD + off + i];
        }
        out[i] = acc;
    }
}

static __device__ void body_oproj(const struct bg_dev &D, const struct bg_task *t)
{
    const struct bm_model *m = &D.m;
    const uint32_t off = D.rank * D.QDr;
    const float *wo = m->layer[t->layer].wo + (size_t)off * m->H;
    uint32_t c0, c1;
    bm_tile_range(m->H, D.T, t->tile_x, &c0, &c1);
    for (uint32_t s = 0; s < m->B; s++) {
        if (!D.batch->slot[s].active)
            continue;
        const float *o = D.o + (size_t)s * m->QD + off;
        for (uint32_t j = c0 + threadIdx.x; j < c1; j += BG_THREADS)
            D.partial[(size_t)s * m->H + j] = dot_col(o, wo, D.QDr, m->H, j);
    }
}

template <bool HK>
static __device__ void body_send(const struct bg_dev &D, const struct bg_task *t, struct bg_hw *h)
{
    const struct bm_model *m = &D.m;
    const uint32_t peer = t->tile_x, k = t->tile_y, seq = ar_seq(D, t->step, k);
    const uint32_t n = m->B * m->H;
    const uint64_t cg = comm_gen(t->step, k, D.rank, peer), dep = remote_ev(peer, D.rank);
    const uint64_t bytes = (uint64_t)n * sizeof(float);
    if (threadIdx.x == 0)
        remote_hook<HK>(D, h, t, MKS_EV_COMM_BEGIN, peer, cg, dep, bytes);
    float *dst = D.peer_data[peer] + (size_t)(seq & 1u) * n;
    for (uint32_t i = threadIdx.x; i < n; i += BG_THREADS)
        dst[i] = D.partial[i];
    bg_sync();
    if (threadIdx.x == 0) {
        if (t->comm_delay) { /* a deadline after the send became ready (bm_fault_plan) */
            w_flush<HK>(h);
            spin_until(t->t_ready + t->comm_delay);
        }
        remote_hook<HK>(D, h, t, MKS_EV_COMM_END, peer, cg, dep, bytes);
    }
}

/* The send's notification, after the task's end (thread 0). */
template <bool HK>
static __device__ void release_send(const struct bg_dev &D, const struct bg_task *t,
                                    struct bg_hw *h)
{
    const uint32_t peer = t->tile_x, k = t->tile_y, seq = ar_seq(D, t->step, k);
    __threadfence_system(); /* the data before the release, seen over NVLink */
    atomicAdd_system(D.peer_count[peer], 1u);
    remote_hook<HK>(D, h, t, MKS_EV_DEP_RELEASE, peer, comm_gen(t->step, k, D.rank, peer),
                    remote_ev(peer, D.rank), seq + 1);
}

/* Wait until peer p's contribution to all-reduce k of this step has arrived
 * (thread 0), between the dependency-wait hooks. */
template <bool HK>
static __device__ void wait_peer(const struct bg_dev &D, const struct bg_task *t, struct bg_hw *h,
                                 uint32_t p, uint32_t k, uint32_t seq)
{
    const uint64_t cg = comm_gen(t->step, k, p, D.rank), dep = remote_ev(D.rank, p);
    remote_hook<HK>(D, h, t, MKS_EV_DEP_WAIT_BEGIN, p, cg, dep, seq + 1);
    w_flush<HK>(h); /* a worker stuck here shows its wait */
    prof_rec(D, h->id, BR_PROF_WAIT_BEGIN, t);
    const uint32_t *cnt = &D.inbox_count[p * BG_CSTRIDE];
    const uint64_t t0 = now_ns();
    while ((int32_t)(vload32(cnt) - (seq + 1)) < 0 && !vload32(D.abort)) {
        if (now_ns() - t0 > BG_PEER_TIMEOUT_NS)
            atomicExch(D.abort, 1u);
        __nanosleep(32);
    }
    prof_rec(D, h->id, BR_PROF_WAIT_END, t);
    remote_hook<HK>(D, h, t, MKS_EV_DEP_WAIT_END, p, cg, dep, seq + 1);
}

/* --ar-relay: wait for the previous rank's contribution before the sends
 * (the data stays in the inbox for the reduce, which finds it there). */
template <bool HK>
static __device__ void body_relay(const struct bg_dev &D, const struct bg_task *t, struct bg_hw *h)
{
    if (threadIdx.x == 0)
        wait_peer<HK>(D, t, h, D.rank - 1, t->tile_y, ar_seq(D, t->step, t->tile_y));
}

template <bool HK>
static __device__ void body_reduce(const struct bg_dev &D, const struct bg_task *t, struct bg_hw *h)
{
    const struct bm_model *m = &D.m;
    const uint32_t k = t->tile_y, seq = ar_seq(D, t->step, k), n = m->B * m->H;
    if (threadIdx.x == 0) {
        for (uint32_t p = 0; p < D.R; p++)
            if (p != D.rank)
                wait_peer<HK>(D, t, h, p, k, seq);
        __threadfence_system();
    }
    bg_sync();
    for (uint32_t i = threadIdx.x; i < n; i += BG_THREADS) {
        uint32_t s = i / m->H;
        if (!D.batch->slot[s].active)
            continue;
        float sum = 0.0f;
        for (uint32_t p = 0; p < D.R; p++)
            sum += p == D.rank ? D.partial[i] : D.inbox_data[((size_t)p * 2 + (seq & 1u)) * n + i];
        D.x[i] += sum;
    }
}

static __device__ void body_router(const struct bg_dev &D, const struct bg_task *t, float *sh)
{
    __shared__ float s_logit[MKS_BENCH_MAX_EXPERTS];
    const struct bm_model *m = &D.m;
    const uint32_t K = m->cfg.topk, E = m->E;
    const float *wr = m->layer[t->layer].wr;
    for (uint32_t s = 0; s < m->B; s++) {
        if (!D.batch->slot[s].active)
            continue;
        float *xn = D.xn + (size_t)s * m->H;
        norm_blk(D.x + (size_t)s * m->H, m->layer[t->layer].norm2, xn, m->H, sh);
        /* bm_route: the logits, then top-k and gates on one thread */
        for (uint32_t e = threadIdx.x; e < E; e += BG_THREADS)
            s_logit[e] = dot_col(xn, wr, m->H, E, e);
        bg_sync();
        if (threadIdx.x == 0)
            bm_route_select(m, t->step, s_logit, D.sel_e + s * K, D.sel_g + s * K);
        bg_sync();
    }
}

/* bm_expert_hidden, SiLU and bm_expert_out for the chosen rows: the inner
 * activation in shared memory (F floats), output columns of this tile. */
static __device__ void body_expert(const struct bg_dev &D, const struct bg_task *t, float *sh)
{
    const struct bm_model *m = &D.m;
    const uint32_t e = t->tile_x, K = m->cfg.topk, el = e / D.R, H = m->H, F = m->F;
    const float *w1 = m->layer[t->layer].w1 + (size_t)e * H * F;
    const float *w2 = m->layer[t->layer].w2 + (size_t)e * F * H;
    uint32_t c0, c1;
    bm_tile_range(H, D.Te, t->tile_y, &c0, &c1);
    for (uint32_t s = 0; s < m->B; s++) {
        if (!D.batch->slot[s].active)
            continue;
        for (uint32_t k = 0; k < K; k++) {
            if (D.sel_e[s * K + k] != e)
                continue;
            const float *xn = D.xn + (size_t)s * H;
            const float gate = D.sel_g[s * K + k];
            for (uint32_t j = threadIdx.x; j < F; j += BG_THREADS) {
                float v = dot_col(xn, w1, H, F, j);
                sh[j] = gate * v / (1.0f + expf(-v)); /* SiLU, as bm_expert_out */
            }
            bg_sync();
            float *out = D.P + ((size_t)el * m->B + s) * H;
            for (uint32_t c = c0 + threadIdx.x; c < c1; c += BG_THREADS)
                out[c] = dot_col(sh, w2, F, H, c);
            bg_sync();
        }
    }
}

static __device__ void body_combine(const struct bg_dev &D, const struct bg_task *t)
{
    (void)t;
    const struct bm_model *m = &D.m;
    const uint32_t K = m->cfg.topk;
    for (uint32_t i = threadIdx.x; i < m->B * m->H; i += BG_THREADS) {
        uint32_t s = i / m->H, j = i % m->H;
        float v = 0.0f;
        if (D.batch->slot[s].active)
            for (uint32_t e = D.rank; e < m->E; e += D.R) {
                int sel = 0;
                for (uint32_t k = 0; k < K; k++)
                    sel |= D.sel_e[s * K + k] == e;
                if (sel)
                    v += D.P[((size_t)(e / D.R) * m->B + s) * m->H + j];
            }
        D.partial[i] = v;
    }
}

static __device__ void body_lm(const struct bg_dev &D, const struct bg_task *t, float *sh)
{
    const struct bm_model *m = &D.m;
    uint32_t c0, c1;
    bm_tile_range(m->V, D.T, t->tile_x, &c0, &c1);
    for (uint32_t s = 0; s < m->B; s++) {
        if (!D.batch->slot[s].active)
            continue;
        norm_blk(D.x + (size_t)s * m->H, m->normf, sh, m->H, sh);
        for (uint32_t c = c0 + threadIdx.x; c < c1; c += BG_THREADS)
            D.logits[(size_t)s * m->V + c] = dot_col(sh, m->lmhead, m->H, m->V, c);
        bg_sync();
    }
}

/* Greedy sampling: bm_argmax (the first of equal maxima) as a block
 * reduction; the logit sum in double, per thread then over the block. */
static __device__ void body_sample(const struct bg_dev &D, const struct bg_task *t)
{
    __shared__ float s_v[BG_THREADS];
    __shared__ uint32_t s_i[BG_THREADS];
    __shared__ double s_d[BG_THREADS];
    const struct bm_model *m = &D.m;
    const uint32_t st = t->step, B = m->B, V = m->V, tid = threadIdx.x;
    double lsum = 0.0;
    for (uint32_t i = 0; i < B; i++) {
        const struct bm_slot *sl = &D.batch->slot[i];
        int32_t tok = -1;
        if (sl->active) {
            const float *lg = D.logits + (size_t)i * V;
            float bv = -INFINITY;
            uint32_t bi = 0xffffffffu;
            double ds = 0.0;
            for (uint32_t v = tid; v < V; v += BG_THREADS) {
                if (bi == 0xffffffffu || lg[v] > bv) {
                    bv = lg[v];
                    bi = v;
                }
                ds += lg[v];
            }
            s_v[tid] = bv;
            s_i[tid] = bi;
            s_d[tid] = ds;
            bg_sync();
            for (uint32_t h = BG_THREADS / 2; h > 0; h /= 2) {
                if (tid < h) {
                    const uint32_t o = tid + h;
                    if (s_i[o] != 0xffffffffu &&
                        (s_i[tid] == 0xffffffffu || s_v[o] > s_v[tid] ||
                         (s_v[o] == s_v[tid] && s_i[o] < s_i[tid]))) {
                        s_v[tid] = s_v[o];
                        s_i[tid] = s_i[o];
                    }
                    s_d[tid] += s_d[o];
                }
                bg_sync();
            }
            tok = (int32_t)s_i[0];
            lsum += s_d[0];
            bg_sync(); /* s_* reused by the next slot */
        }
        if (tid == 0) {
            D.req_gen_out[(size_t)st * B + i] = sl->active ? sl->req_gen : 0;
            D.sampled[i] = tok;
            D.tokens[(size_t)st * B + i] = tok;
        }
    }
    if (tid == 0)
        D.logit_sum[st] = lsum;
}

/* The bodies without hook sites, out of line and shared by the hooked and
 * the detached task code (and the compiled-out build), so that a body's
 * machine code is one and the same whatever surrounds it: compiled into
 * each task instantiation, the bodies got that function's registers and
 * scheduling, and the medium model's steps moved by a few percent between
 * builds and paths of the same source (docs/PERF.md, "overhead"). */
static __device__ __noinline__ void run_compute(const struct bg_dev &D, const struct bg_task *t,
                                                float *sh)
{
    switch (t->cls) {
    case BC_NORM:
        body_norm(D, t, sh);
        break;
    case BC_QKV:
        body_qkv(D, t);
        break;
    case BC_ATTN:
        body_attn(D, t, sh);
        break;
    case BC_OPROJ:
        body_oproj(D, t);
        break;
    case BC_ROUTER:
        body_router(D, t, sh);
        break;
    case BC_COMBINE:
        body_combine(D, t);
        break;
    case BC_LMHEAD:
        body_lm(D, t, sh);
        break;
    case BC_SAMPLE:
        body_sample(D, t);
        break;
    default:
        body_expert(D, t, sh);
        break;
    }
}

template <bool HK>
static __device__ void run_body(const struct bg_dev &D, const struct bg_task *t, struct bg_hw *h,
                                float *sh)
{
    switch (t->cls) {
    case BC_AR_SEND:
        body_send<HK>(D, t, h);
        break;
    case BC_AR_REDUCE:
        if (t->relay)
            body_relay<HK>(D, t, h);
        else
            body_reduce<HK>(D, t, h);
        break;
    default:
        run_compute(D, t, sh);
        break;
    }
}

/* ---- persistent megakernel: workers ------------------------------------------ */

/* One task on the worker's block, after thread 0 popped it; HK: with its
 * hook sites (see bg_hw): records from registers, published once at the
 * task's end (and before a fault's delay, which may be long). */
template <bool HK>
static __device__ __forceinline__ void run_task(const struct bg_dev &D, uint32_t w,
                                                const struct bg_task *t, struct bg_hw *h,
                                                float *sh)
{
#ifdef MKS_HOOKS_DISABLED
    (void)w;
#endif
    /* Thread 0's fields of the task, loaded together up front (one L2 round
     * trip; the loads would otherwise wait on each other). */
    uint64_t hold = 0, run_delay = 0, notify_delay = 0, comm_delay = 0;
    uint32_t cls = 0, trig_ev = 0;
#ifndef MKS_HOOKS_DISABLED
    /* The emitter in registers while thread 0 writes the task's records (h
     * lives in memory: its address goes to the bodies); back into h around
     * the body, whose transfers and waits emit through it. */
    struct mks_dev_emit em = {};
#define RT_EMIT(call)                                                                              \
    do {                                                                                           \
        if (HK)                                                                                    \
            call;                                                                                  \
    } while (0)
#else
#define RT_EMIT(call) ((void)0)
#endif
    if (threadIdx.x == 0) {
        hold = t->hold;
        run_delay = t->run_delay;
        notify_delay = t->notify_delay;
        comm_delay = t->comm_delay;
        cls = t->cls;
        trig_ev = t->trig_ev;
        /* the task, with the scheduler's TASK_ASSIGN as it stored it */
        RT_EMIT(em = h->em);
        RT_EMIT(em.mask = h->mask);
        RT_EMIT(mks_dev_emit_task(&em, t->flags, cls, t->t_ready, t->gen, t->req_gen, t->step,
                                  t->tile_x, t->tile_y, t->assign_defer, t->assign_t,
                                  t->assign_depth, w));
        if (HK && t->pressure_defer)
            RT_EMIT(mks_dev_emit_event(&em, MKS_EV_QUEUE_PRESSURE, t->pressure_t, 0,
                                       D.m.cfg.queue_pressure, D.m.cfg.queue_pressure, 0, 0, 0));
        if (hold | run_delay | notify_delay | comm_delay)
            atomicAdd(D.faulted, 1ull);
        if (hold) {
            RT_EMIT(mks_dev_emit_flush(&em));
            spin_ns(hold);
        }
        RT_EMIT(mks_dev_emit_start(&em, now_ns(), h->depth));
        RT_EMIT(h->em = em);
        prof_rec(D, w, BR_PROF_BEGIN, t);
    }
    bg_sync();
    run_body<HK>(D, t, h, sh);
    bg_sync();
    if (threadIdx.x == 0) {
        RT_EMIT(em = h->em);
        if (run_delay) {
            RT_EMIT(mks_dev_emit_flush(&em));
            spin_ns(run_delay);
        }
        RT_EMIT(mks_dev_emit_end(&em, now_ns()));
        prof_rec(D, w, BR_PROF_END, t);
        atomicAdd(&D.class_counts[cls], 1ull);
        if (notify_delay) {
            RT_EMIT(mks_dev_emit_flush(&em));
            spin_ns(notify_delay);
        }
        if (cls == BC_AR_SEND) {
            RT_EMIT(h->em = em);
            release_send<HK>(D, t, h);
            RT_EMIT(em = h->em);
        }
        __threadfence(); /* the task's writes before its release */
        unsigned long long v = atomicAdd(&D.ev_count[trig_ev], 1ull) + 1;
        RT_EMIT(mks_dev_emit_release(&em, now_ns(), MKS_DEP_LOCAL, v, trig_ev));
        RT_EMIT(mks_dev_emit_flush(&em));
        RT_EMIT(h->em = em);
        (void)v;
    }
#undef RT_EMIT
}

#ifndef MKS_HOOKS_DISABLED
/* Out of line: the detached loop keeps the compiled-out build's code. */
static __device__ __noinline__ void run_task_hooked(const struct bg_dev &D, uint32_t w,
                                                    const struct bg_task *t, struct bg_hw *h,
                                                    float *sh)
{
    run_task<true>(D, w, t, h, sh);
}
#endif

static __device__ void worker_main(const struct bg_dev &D, uint32_t w, float *sh, void *ring)
{
    __shared__ uint32_t s_idx;
#ifndef MKS_HOOKS_DISABLED
    __shared__ uint32_t s_hooked;
#endif
    struct bg_hw h;
    uint32_t head = 0;
    hw_init(D, &h, w, ring, NULL);
    struct bg_queue *q = &D.queues[w];
    for (;;) {
        if (threadIdx.x == 0) {
            uint64_t qw;
            while ((uint32_t)(qw = qword(q)) == head && !vload32(D.abort))
                __nanosleep(64);
            if ((uint32_t)qw == head) {
                s_idx = BG_STOP; /* aborted */
            } else {
                __threadfence();
                s_idx = vload32(&q->slot[head % BG_QCAP]);
                head++;
                *(volatile uint32_t *)&q->head = head;
#ifndef MKS_HOOKS_DISABLED
                s_hooked = mks_dev_gate_on(qw);
                h.mask = mks_dev_gate_mask(qw);
                h.depth = (uint32_t)qw - head; /* the tail it polled: no load more */
#endif
            }
        }
        bg_sync();
        const uint32_t idx = s_idx;
        if (idx == BG_STOP)
            break;
        const struct bg_task *t = &D.tasks[idx];
#ifndef MKS_HOOKS_DISABLED
        /* The same answer in every thread of the block; a vote makes it
         * warp-uniform to ptxas, so the call below costs the detached
         * loop nothing (devhook.cuh, "the gate bit"). */
        if (__all_sync(0xffffffffu, s_hooked != 0)) {
            run_task_hooked(D, w, t, &h, sh);
            continue;
        }
#endif
        run_task<false>(D, w, t, &h, sh);
    }
#ifndef MKS_HOOKS_DISABLED
    if (threadIdx.x == 0 && h.em.r) {
        mks_dev_emit_flush(&h.em);
        mks_dev_ring_stop(h.em.r); /* the monitor warp drains the ring and returns */
    }
#endif
}

/* ---- persistent megakernel: the scheduler ------------------------------------ */

struct sched {
    uint32_t step, buf, n; /* tasks built in the step buffer */
    uint32_t rr;
    int32_t avoid; /* queue-oversub: the held worker, which the operator's other tasks avoid */
    /* The faults on this rank that cover this step, copied at its start: the
     * plan of every task reads them, and reading the fault table in global
     * memory from the one scheduler thread cost 0.25-0.5 us a task (a
     * faulted run's medium step was 0.4 ms longer also outside its faults). */
    struct mks_fault faults[MKS_BENCH_MAX_FAULTS];
    uint32_t n_faults;
    uint64_t cls_mask[2]; /* the classes they name (bit per class id) */
    struct bm_fault_gain gain; /* the plan's closed loop (model_math.h) */
    uint32_t hooked;      /* this step runs the hooked code: a scheduler event is attached */
    struct bg_hw h;
};

static __device__ struct bg_task *new_task(const struct bg_dev &D, struct sched *S, uint16_t cls,
                                           uint32_t layer, uint32_t tx, uint32_t ty, uint32_t trig)
{
    struct bg_task *t = &D.tasks[(size_t)S->buf * D.max_tasks + S->n++];
    memset(t, 0, sizeof(*t));
    t->cls = cls;
    t->step = S->step;
    t->gen = (uint64_t)S->step + 1;
    t->layer = layer;
    t->tile_x = tx;
    t->tile_y = ty;
    t->trig_ev = trig;
    return t;
}

/* A task that exists for the request in slot i (batch shape). */
static __device__ void req_task(const struct bg_dev &D, struct sched *S, struct bg_task *t,
                                uint32_t i)
{
    (void)S;
    t->req_gen = D.batch->slot[i].req_gen;
    t->flags |= MKS_CTX_F_DYNAMIC;
}

/* The fault plan of task idx (in ready order; an expert's tile) of the n_op
 * tasks of an operator. */
static __device__ void plan(const struct bg_dev &D, const struct mks_fault *faults,
                            uint32_t n_faults, struct bg_task *t, uint32_t idx, uint32_t n_op,
                            uint32_t k, uint32_t gain, int32_t *force, uint64_t *starve)
{
    struct bm_fault_effect fx;
    if (t->cls >= BC_EXPERT0)
        idx = t->tile_y; /* n_op counts one expert's tiles */
    bm_fault_plan(faults, n_faults, D.rank, D.W, D.L, t->cls, t->step, t->tile_x, idx, n_op, k,
                  gain, &fx);
    t->run_delay = fx.run_delay_ns;
    t->notify_delay = fx.notify_delay_ns;
    t->hold = fx.hold_ns;
    t->comm_delay = fx.comm_delay_ns;
    *force = fx.force_worker;
    *starve = fx.starve_ns;
}

/* The plan of a task from the step's faults.  A task of a class no fault of
 * the step names keeps what new_task() gave it, no delay: the scheduler's
 * time per task stays what it is in a run without faults. */
static __device__ void sched_plan(const struct bg_dev &D, const struct sched *S, struct bg_task *t,
                                  uint32_t idx, uint32_t n_op, uint32_t k, int32_t *force,
                                  uint64_t *starve)
{
    *force = -1;
    *starve = 0;
    if (t->relay) /* no fault plan, as on the CPU */
        return;
    if (t->cls < 128 && !((S->cls_mask[t->cls >> 6] >> (t->cls & 63)) & 1u))
        return;
    plan(D, S->faults, S->n_faults, t, idx, n_op, k, S->gain.gain, force, starve);
}

#ifndef MKS_HOOKS_DISABLED
/* The inline exceptions, out of line so that the dispatch loop keeps its
 * registers: a CONTROL program's hint at TASK_ASSIGN (the worker the task
 * goes to) and at TASK_READY (its priority). */
static __device__ __noinline__ uint32_t assign_hint(const struct bg_dev &D, struct sched *S,
                                                    const struct bg_task *t, uint32_t w,
                                                    uint32_t depth, int32_t force)
{
    struct mks_hook_ctx c;
    ctx_fill(D, w, t, MKS_EV_TASK_ASSIGN, 0, &c);
    c.value = w;
    c.queue_depth = depth;
    if (s_run(D, &S->h, &c) > 0 && force < 0) {
        /* Device queues are rings the worker consumes from the front, so a
         * task cannot jump one; a hint sends it to the shortest queue. */
        uint32_t best = depth;
        for (uint32_t i = 0; i < D.W && best; i++) {
            uint32_t d = D.queues[i].tail - vload32(&D.queues[i].head);
            if (d < best) {
                best = d;
                w = i;
            }
        }
    }
    return w;
}

static __device__ __noinline__ int32_t ready_hint(const struct bg_dev &D, struct sched *S,
                                                  const struct bg_task *t, uint32_t ev)
{
    struct mks_hook_ctx c;
    ctx_fill(D, D.W, t, MKS_EV_TASK_READY, 0, &c);
    c.dep_event = ev;
    c.dep_class = MKS_DEP_LOCAL;
    return s_run(D, &S->h, &c);
}
#endif

template <bool HK>
static __device__ void assign(const struct bg_dev &D, struct sched *S, uint32_t idx, int32_t force)
{
    struct bg_task *t = &D.tasks[idx];
    uint32_t w = force >= 0 && (uint32_t)force < D.W ? (uint32_t)force : S->rr++ % D.W;
    if (force < 0 && S->avoid >= 0 && w == (uint32_t)S->avoid && D.W > 1)
        w = S->rr++ % D.W; /* the held worker gets its fair share only */
    struct bg_queue *q = &D.queues[w];
    /* One load of the worker's head, for the queue's room and, with hooks,
     * its depth at this assignment. */
    uint32_t tail = q->tail, head = vload32(&q->head);
    if (s_on<HK>(D, &S->h, MKS_EV_TASK_ASSIGN)) {
#ifndef MKS_HOOKS_DISABLED
        if (!(S->h.hint & (1u << MKS_EV_TASK_ASSIGN))) {
            /* observe programs only: the receiving worker's TASK record
             * carries the event (see bg_hw) */
            t->assign_t = now_ns();
            t->assign_depth = tail - head;
            t->assign_defer = 1;
        } else {
            uint32_t w2 = assign_hint(D, S, t, w, tail - head, force);
            if (w2 != w) {
                w = w2;
                q = &D.queues[w];
                tail = q->tail;
                head = vload32(&q->head);
            }
        }
#endif
    }
    /* The queue reaches the declared pressure depth with this task (as the
     * CPU runtime counts it); left to the worker like TASK_ASSIGN. */
    const uint32_t qp = D.m.cfg.queue_pressure;
    if (qp && s_on<HK>(D, &S->h, MKS_EV_QUEUE_PRESSURE) && tail - head + 1u == qp) {
        t->pressure_t = now_ns();
        t->pressure_defer = 1;
    }
    while (tail - head >= BG_QCAP) {
        if (vload32(D.abort))
            return;
        if (HK)
            s_poll(D, &S->h);
        __nanosleep(64);
        head = vload32(&q->head);
    }
    q->slot[tail % BG_QCAP] = idx;
    __threadfence();
    *(volatile uint32_t *)&q->tail = tail + 1;
}

/* Make tasks [first, first + n) of the step buffer ready, order them by the
 * CONTROL hint, assign them, and wait for their event. */
template <bool HK>
static __device__ void dispatch_t(const struct bg_dev &D, struct sched *S, uint32_t first,
                                  uint32_t n, uint32_t ev, uint32_t n_op, uint32_t k)
{
    D.ev_target[ev] += n;
#ifndef MKS_HOOKS_DISABLED
    if (HK) {
        s_poll(D, &S->h);
        /* Once per dispatch: the events whose CONTROL hint is needed now
         * (they run inline); the rest go to the monitor warps. */
        S->h.em.mask = S->h.w.mask;
        S->h.hint = 0;
        if (s_on<HK>(D, &S->h, MKS_EV_TASK_READY) && s_wants_hint(D, &S->h, MKS_EV_TASK_READY))
            S->h.hint |= 1u << MKS_EV_TASK_READY;
        if (s_on<HK>(D, &S->h, MKS_EV_TASK_ASSIGN) && s_wants_hint(D, &S->h, MKS_EV_TASK_ASSIGN))
            S->h.hint |= 1u << MKS_EV_TASK_ASSIGN;
    }
#endif
    uint64_t now = now_ns();
    uint32_t *ord = D.order; /* [0, n): ready order, [n, 2n): passed over */
    int32_t *prio = (int32_t *)(D.order + 2 * (size_t)D.max_tasks);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t idx = S->buf * D.max_tasks + first + i;
        struct bg_task *t = &D.tasks[idx];
        t->t_ready = now;
        int32_t p = 0;
        if (s_on<HK>(D, &S->h, MKS_EV_TASK_READY)) {
#ifndef MKS_HOOKS_DISABLED
            if (S->h.hint & (1u << MKS_EV_TASK_READY)) {
                p = ready_hint(D, S, t, ev);
            } else {
                /* to block 0's monitor warp: the task, then its event */
                mks_dev_emit_task(&S->h.em, t->flags, t->cls, now, t->gen, t->req_gen, t->step,
                                  t->tile_x, t->tile_y, 0, 0, 0, 0);
                mks_dev_emit_event(&S->h.em, MKS_EV_TASK_READY, now, MKS_DEP_LOCAL, 0, 0, ev, 0,
                                   0);
            }
#endif
        }
        uint32_t j = i;
        while (j > 0 && prio[j - 1] < p) {
            ord[j] = ord[j - 1];
            prio[j] = prio[j - 1];
            j--;
        }
        ord[j] = idx;
        prio[j] = p;
    }
    /* starved tiles wait in the ready list, passed over until due */
    uint32_t waiting = 0;
    uint64_t due_max = 0;
    for (uint32_t i = 0; i < n; i++) {
        int32_t force;
        uint64_t starve;
        sched_plan(D, S, &D.tasks[ord[i]], i, n_op, k, &force, &starve);
        if (force >= 0)
            S->avoid = force;
        if (starve) {
            atomicAdd(D.faulted, 1ull); /* the injector's count, as on the CPU */
            prio[waiting] = (int32_t)i; /* the ready order, no longer needed, keeps its place */
            ord[n + waiting++] = ord[i];
            due_max = now + starve > due_max ? now + starve : due_max;
            continue;
        }
        assign<HK>(D, S, ord[i], force);
    }
    if (HK)
        w_flush<HK>(&S->h); /* the scheduler's records, before it waits */
    if (waiting) {
        while (now_ns() < due_max) {
            if (HK)
                s_poll(D, &S->h);
            __nanosleep(1000);
        }
        for (uint32_t i = 0; i < waiting; i++) {
            int32_t force;
            uint64_t starve;
            sched_plan(D, S, &D.tasks[ord[n + i]], (uint32_t)prio[i], n_op, k, &force, &starve);
            assign<HK>(D, S, ord[n + i], force);
        }
    }
    S->avoid = -1;
    while (vload64(&D.ev_count[ev]) < D.ev_target[ev] && !vload32(D.abort)) {
        if (HK)
            s_poll(D, &S->h);
        __nanosleep(128);
    }
    __threadfence();
}

#ifndef MKS_HOOKS_DISABLED
static __device__ __noinline__ void dispatch_hooked(const struct bg_dev &D, struct sched *S,
                                                    uint32_t first, uint32_t n, uint32_t ev,
                                                    uint32_t n_op, uint32_t k)
{
    dispatch_t<true>(D, S, first, n, ev, n_op, k);
}
#endif

/* The step's code, hooked or the compiled-out build's (S->hooked). */
static __device__ __forceinline__ void dispatch(const struct bg_dev &D, struct sched *S,
                                                uint32_t first, uint32_t n, uint32_t ev,
                                                uint32_t n_op, uint32_t k)
{
#ifndef MKS_HOOKS_DISABLED
    if (S->hooked) {
        dispatch_hooked(D, S, first, n, ev, n_op, k);
        return;
    }
#endif
    dispatch_t<false>(D, S, first, n, ev, n_op, k);
}

static __device__ void gen_advance(const struct bg_dev &D, struct sched *S, int32_t slot)
{
    if (!S->hooked || !s_on<true>(D, &S->h, MKS_EV_GEN_ADVANCE))
        return;
#ifndef MKS_HOOKS_DISABLED
    /* to block 0's monitor warp (no CONTROL program runs here) */
    uint64_t req_gen = 0, value = S->step;
    if (slot >= 0)
        value = req_gen = D.batch->slot[slot].req_gen;
    struct mks_dev_emit *e = &S->h.em;
    e->mask = S->h.w.mask;
    mks_dev_emit_task(e, 0, 0, 0, 0, req_gen, S->step, 0, slot >= 0 ? (uint32_t)slot : 0u, 0, 0,
                      0, 0);
    mks_dev_emit_event(e, MKS_EV_GEN_ADVANCE, now_ns(), 0, 0, value, 0, 0, 0);
#else
    (void)D, (void)slot;
#endif
}

static __device__ void sched_allreduce(const struct bg_dev &D, struct sched *S, uint32_t l,
                                       uint32_t k, uint32_t ev_send, uint32_t ev_done)
{
    if (D.R > 1 && D.m.cfg.ar_relay && D.rank > 0) {
        /* --ar-relay: a task of the reduce's class that only waits for rank - 1 */
        uint32_t first = S->n, ev = ev_relay(D, k);
        struct bg_task *t = new_task(D, S, BC_AR_REDUCE, l, D.rank - 1, k, ev);
        t->flags = MKS_CTX_F_COMM;
        t->k = k;
        t->relay = 1;
        dispatch(D, S, first, 1, ev, 1, k);
    }
    if (D.R > 1) {
        uint32_t first = S->n;
        for (uint32_t p = 0; p < D.R; p++) {
            if (p == D.rank)
                continue;
            struct bg_task *t = new_task(D, S, BC_AR_SEND, l, p, k, ev_send);
            t->flags = MKS_CTX_F_COMM;
            t->k = k;
        }
        dispatch(D, S, first, D.R - 1, ev_send, D.R - 1, k);
    }
    uint32_t first = S->n;
    struct bg_task *t = new_task(D, S, BC_AR_REDUCE, l, 0, k, ev_done);
    t->flags = MKS_CTX_F_COMM;
    t->k = k;
    dispatch(D, S, first, 1, ev_done, 1, k);
}

static __device__ void scheduler_main(const struct bg_dev &D, void *ring)
{
    struct sched S;
    memset(&S, 0, sizeof(S));
    S.avoid = -1;
    bm_fault_gain_init(&S.gain);
#ifndef MKS_HOOKS_DISABLED
    struct mks_dev_hcache hc; /* inline CONTROL runs, hook slot W + 1 */
    hw_init(D, &S.h, D.W, ring, &hc);
#else
    hw_init(D, &S.h, D.W, NULL, NULL);
#endif
    const struct bm_model *m = &D.m;
    bm_batch_init(m, D.batch);
    for (uint32_t s = 0; s < m->cfg.steps && !vload32(D.abort); s++) {
        uint64_t t0 = now_ns();
        S.step = s;
        S.buf = s & 1u;
        S.n = 0;
        S.n_faults = 0;
        S.cls_mask[0] = S.cls_mask[1] = 0;
        for (uint32_t i = 0; i < m->n_faults && S.n_faults < MKS_BENCH_MAX_FAULTS; i++) {
            const struct mks_fault *f = &m->faults[i];
            if (f->rank != (int32_t)D.rank || s < f->step_lo || s > f->step_hi)
                continue;
            S.faults[S.n_faults++] = *f;
            if (f->cls >= 0 && f->cls < 128)
                S.cls_mask[f->cls >> 6] |= 1ull << (f->cls & 63);
            else
                S.cls_mask[0] = S.cls_mask[1] = ~0ull; /* any class */
        }
#ifndef MKS_HOOKS_DISABLED
        /* Once a step: are scheduler events attached (the pump's change
         * word, as a worker's gate; out of the epoch after a change) */
        if (D.have_hooks) {
            s_poll(D, &S.h);
            S.hooked = (S.h.w.mask & BG_SCHED_EVENTS) != 0;
        }
#endif
        uint32_t joined = bm_batch_begin(m, D.batch, s);
        gen_advance(D, &S, -1);
        for (uint32_t i = 0; i < m->B; i++)
            if (joined & (1u << i))
                gen_advance(D, &S, (int32_t)i);
        uint32_t n_act = 0;
        for (uint32_t i = 0; i < m->B; i++)
            n_act += D.batch->slot[i].active;
        for (uint32_t l = 0; l < D.L; l++) {
            uint32_t first = S.n;
            for (uint32_t i = 0; i < m->B; i++)
                if (D.batch->slot[i].active)
                    req_task(D, &S, new_task(D, &S, BC_NORM, l, i, 0, ev_of(l, OP_NORM)), i);
            dispatch(D, &S, first, n_act, ev_of(l, OP_NORM), n_act, 0);
            first = S.n;
            for (uint32_t x = 0; x < D.T; x++)
                new_task(D, &S, BC_QKV, l, x, 0, ev_of(l, OP_QKV));
            dispatch(D, &S, first, D.T, ev_of(l, OP_QKV), D.T, 0);
            first = S.n;
            for (uint32_t i = 0; i < m->B; i++)
                if (D.batch->slot[i].active)
                    for (uint32_t hd = 0; hd < m->cfg.heads; hd++)
                        req_task(D, &S, new_task(D, &S, BC_ATTN, l, hd, i, ev_of(l, OP_ATTN)), i);
            dispatch(D, &S, first, n_act * m->cfg.heads, ev_of(l, OP_ATTN), n_act * m->cfg.heads,
                     0);
            first = S.n;
            for (uint32_t x = 0; x < D.T; x++)
                new_task(D, &S, BC_OPROJ, l, x, 0, ev_of(l, OP_OPROJ));
            dispatch(D, &S, first, D.T, ev_of(l, OP_OPROJ), D.T, 0);
            sched_allreduce(D, &S, l, 2 * l, ev_of(l, OP_SEND1), ev_of(l, OP_AR1));
            first = S.n;
            new_task(D, &S, BC_ROUTER, l, 0, 0, ev_of(l, OP_ROUTER));
            dispatch(D, &S, first, 1, ev_of(l, OP_ROUTER), 1, 0);
            /* dynamic: this rank's experts that the router chose */
            uint64_t chosen = 0;
            for (uint32_t i = 0; i < m->B; i++)
                if (D.batch->slot[i].active)
                    for (uint32_t k = 0; k < m->cfg.topk; k++)
                        chosen |= 1ull << vload32(&D.sel_e[i * m->cfg.topk + k]);
            first = S.n;
            uint32_t n_exp = 0;
            for (uint32_t e = D.rank; e < m->E; e += D.R)
                if (chosen & (1ull << e))
                    for (uint32_t tile = 0; tile < D.Te; tile++, n_exp++)
                        new_task(D, &S, (uint16_t)(BC_EXPERT0 + e), l, e, tile, ev_of(l, OP_EXPERT))
                            ->flags = MKS_CTX_F_DYNAMIC;
            if (n_exp)
                dispatch(D, &S, first, n_exp, ev_of(l, OP_EXPERT), D.Te, 0);
            first = S.n;
            new_task(D, &S, BC_COMBINE, l, 0, 0, ev_of(l, OP_COMB));
            dispatch(D, &S, first, 1, ev_of(l, OP_COMB), 1, 0);
            sched_allreduce(D, &S, l, 2 * l + 1, ev_of(l, OP_SEND2), ev_of(l, OP_AR2));
        }
        uint32_t first = S.n;
        for (uint32_t x = 0; x < D.T; x++)
            new_task(D, &S, BC_LMHEAD, 0, x, 0, ev_lm(D));
        dispatch(D, &S, first, D.T, ev_lm(D), D.T, 0);
        first = S.n;
        new_task(D, &S, BC_SAMPLE, 0, 0, 0, 0);
        dispatch(D, &S, first, 1, 0, 1, 0);
        int32_t sampled[MKS_BENCH_MAX_BATCH];
        for (uint32_t i = 0; i < m->B; i++)
            sampled[i] = (int32_t)vload32((const uint32_t *)&D.sampled[i]);
        bm_batch_end(m, D.batch, s, sampled);
        uint64_t took = now_ns() - t0;
        D.step_ns[s] = took;
        bm_fault_gain_update(&S.gain, took, bm_fault_step_mag(m->faults, m->n_faults, D.rank, s),
                             m->base_ns ? m->base_ns[s] : 0);
    }
    for (uint32_t w = 0; w < D.W; w++) {
        struct bg_queue *q = &D.queues[w];
        uint32_t tail = q->tail;
        while (tail - vload32(&q->head) >= BG_QCAP && !vload32(D.abort))
            __nanosleep(64);
        q->slot[tail % BG_QCAP] = BG_STOP;
        __threadfence();
        *(volatile uint32_t *)&q->tail = tail + 1;
    }
#ifndef MKS_HOOKS_DISABLED
    if (D.have_hooks)
        mks_dev_worker_exit(&D.hooks, &S.h.w); /* the cache's coverage, and out of the epoch */
    if (S.h.em.r) {
        mks_dev_emit_flush(&S.h.em);
        mks_dev_ring_stop(S.h.em.r); /* block 0's monitor warp drains its ring and returns */
    }
#endif
}

/* Blocks of BG_THREADS task threads, and with hooks a spare warp and a
 * monitor warp more (run_persistent, BG_MON_SPARE). */
__global__ void __launch_bounds__(BG_THREADS + BG_MON_SPARE + 32) bg_megakernel(struct bg_dev D)
{
    extern __shared__ float sh[];
    void *ring = NULL;
#ifndef MKS_HOOKS_DISABLED
    __shared__ struct mks_dev_ring s_ring;
    if (D.have_hooks) {
        if (threadIdx.x == 0)
            mks_dev_ring_init(&s_ring);
        __syncthreads();
        /* The monitor warp, picked by a vote: ptxas then knows the branch
         * is warp-uniform (devhook.cuh, "the gate bit").  Block 0's runs
         * the scheduler's events in its hook slot W. */
        if (__all_sync(0xffffffffu, threadIdx.x >= BG_THREADS)) {
            if (__all_sync(0xffffffffu, threadIdx.x >= BG_THREADS + BG_MON_SPARE))
                mks_dev_monitor_warp(&D.hooks, &s_ring, blockIdx.x == 0 ? D.W : blockIdx.x - 1);
            return; /* the spare warp */
        }
        ring = &s_ring;
    }
#endif
    if (blockIdx.x == 0) {
        /* Not in warp 0: in a block of 5 warps it shared a warp scheduler
         * with the monitor warp, which runs the scheduler's events while
         * the scheduler dispatches, so the serial dispatch path waited on
         * the VM's instructions (BG_MON_SPARE).  Compiled out the same
         * thread runs it. */
        if (threadIdx.x == BG_SCHED_THREAD)
            scheduler_main(D, ring);
        return;
    }
    worker_main(D, blockIdx.x - 1, sh, ring);
}

/* ---- kernel per operator ---------------------------------------------------- */

/* A block of an operator kernel is one task of the persistent graph; it
 * builds the descriptor from its index and the device's step. */
__global__ void __launch_bounds__(BG_THREADS)
    bg_op_kernel(struct bg_dev D, uint16_t cls, uint32_t layer, uint32_t n_tiles)
{
    extern __shared__ float sh[];
    __shared__ struct bg_task t;
    const struct bm_model *m = &D.m;
    if (threadIdx.x == 0) {
        memset(&t, 0, sizeof(t));
        t.cls = cls;
        t.step = *D.d_step;
        t.gen = (uint64_t)t.step + 1;
        t.layer = layer;
        t.tile_x = blockIdx.x;
        if (cls == BC_NORM) {
            t.tile_x = blockIdx.x;
        } else if (cls == BC_ATTN) {
            t.tile_x = blockIdx.x % m->cfg.heads;
            t.tile_y = blockIdx.x / m->cfg.heads;
        } else if (cls >= BC_EXPERT0) {
            uint32_t e = D.rank + (blockIdx.x / D.Te) * D.R;
            t.cls = (uint16_t)(BC_EXPERT0 + e);
            t.tile_x = e;
            t.tile_y = blockIdx.x % D.Te;
        }
        int32_t force;
        uint64_t starve;
        /* open loop: the kernel-per-operator build has no step scheduler */
        plan(D, D.m.faults, D.m.n_faults, &t, blockIdx.x, n_tiles, 0, BM_GAIN_ONE, &force,
             &starve);
    }
    __syncthreads();
    /* blocks of inactive requests and unchosen experts have nothing to do */
    if (cls == BC_NORM && !D.batch->slot[t.tile_x].active)
        return;
    if (cls == BC_ATTN && !D.batch->slot[t.tile_y].active)
        return;
    if (cls >= BC_EXPERT0) {
        int any = 0;
        for (uint32_t i = 0; i < m->B * m->cfg.topk; i++)
            any |= D.batch->slot[i / m->cfg.topk].active && D.sel_e[i] == t.tile_x;
        if (!any)
            return;
    }
    run_body<false>(D, &t, NULL, sh);
    __syncthreads();
    if (threadIdx.x == 0) {
        if (t.run_delay) {
            atomicAdd(D.faulted, 1ull);
            spin_ns(t.run_delay);
        }
        atomicAdd(&D.class_counts[t.cls], 1ull);
    }
}

/* x += all-reduced partial sums (NCCL's result) for active requests. */
__global__ void bg_residual_kernel(struct bg_dev D)
{
    const struct bm_model *m = &D.m;
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < m->B * m->H;
         i += gridDim.x * blockDim.x)
        if (D.batch->slot[i / m->H].active)
            D.x[i] += D.arsum[i];
}

/* The step's end: sample, advance the batch and the device step (one block
 * of BG_THREADS). */
__global__ void __launch_bounds__(BG_THREADS) bg_step_kernel(struct bg_dev D, int first)
{
    const struct bm_model *m = &D.m;
    if (first) {
        if (threadIdx.x == 0) {
            bm_batch_init(m, D.batch);
            *D.d_step = 0;
            bm_batch_begin(m, D.batch, 0);
        }
        return;
    }
    struct bg_task t;
    memset(&t, 0, sizeof(t));
    t.cls = BC_SAMPLE;
    t.step = *D.d_step;
    body_sample(D, &t);
    __syncthreads();
    if (threadIdx.x != 0)
        return;
    atomicAdd(&D.class_counts[BC_SAMPLE], 1ull);
    int32_t sampled[MKS_BENCH_MAX_BATCH];
    for (uint32_t i = 0; i < m->B; i++)
        sampled[i] = D.sampled[i];
    bm_batch_end(m, D.batch, t.step, sampled);
    *D.d_step = t.step + 1;
    bm_batch_begin(m, D.batch, t.step + 1);
}

/* ---- host -------------------------------------------------------------------- */

/* Dynamic shared memory of a task body: a row (H), an expert's inner
 * activation (F) or a request's attention scores (max_len). */
static size_t bg_shmem(const struct bm_model *m)
{
    size_t n = m->F > m->H ? m->F : m->H;
    if (m->cfg.max_len > n)
        n = m->cfg.max_len;
    return n * sizeof(float);
}

struct host_rank {
    struct bg_dev D;
    void *allocs[48 + 9 * MKS_BENCH_MAX_LAYERS]; /* weights: 9 arrays a layer */
    uint32_t n_allocs;
    void *ipc_peer[MKS_BENCH_MAX_RANKS];
    char *err;
    size_t err_len;
};

static int cuda_fail(struct host_rank *H, cudaError_t e, const char *what)
{
    snprintf(H->err, H->err_len, "rank %u: %s: %s", H->D.rank, what, cudaGetErrorString(e));
    return -EIO;
}
#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            return cuda_fail(H, e_, #call);                                                        \
    } while (0)

template <typename T> static int dalloc(struct host_rank *H, T **p, size_t n)
{
    if (H->n_allocs >= sizeof(H->allocs) / sizeof(H->allocs[0])) {
        snprintf(H->err, H->err_len, "rank %u: more device arrays than the table holds",
                 H->D.rank);
        return -ENOMEM;
    }
    void *v = NULL;
    CK(cudaMalloc(&v, n ? n * sizeof(T) : 1));
    CK(cudaMemset(v, 0, n ? n * sizeof(T) : 1));
    H->allocs[H->n_allocs++] = v;
    *p = (T *)v;
    return 0;
}

template <typename T> static int upload(struct host_rank *H, T **p, const T *src, size_t n)
{
    int rc = dalloc(H, p, n);
    if (!rc)
        CK(cudaMemcpy(*p, src, n * sizeof(T), cudaMemcpyHostToDevice));
    return rc;
}

#define TRY(x)                                                                                     \
    do {                                                                                           \
        int rc_ = (x);                                                                             \
        if (rc_)                                                                                   \
            return rc_;                                                                            \
    } while (0)

static void host_free(struct host_rank *H)
{
    for (uint32_t p = 0; p < MKS_BENCH_MAX_RANKS; p++)
        if (H->ipc_peer[p])
            cudaIpcCloseMemHandle(H->ipc_peer[p]);
    for (uint32_t i = 0; i < H->n_allocs; i++)
        cudaFree(H->allocs[i]);
}

/* Model weights to the device; the model struct keeps host pointers. */
static int upload_model(struct host_rank *H, const struct bm_model *hm)
{
    struct bm_model dm = *hm;
    const size_t Hd = hm->H, QD = hm->QD, E = hm->E, F = hm->F, V = hm->V;
    TRY(upload(H, &dm.embed, hm->embed, V * Hd));
    TRY(upload(H, &dm.normf, hm->normf, Hd));
    TRY(upload(H, &dm.lmhead, hm->lmhead, Hd * V));
    struct bm_layer *ly = (struct bm_layer *)calloc(hm->cfg.layers, sizeof(*ly));
    if (!ly)
        return -ENOMEM;
    int rc = 0;
    for (uint32_t l = 0; l < hm->cfg.layers && !rc; l++) {
        const struct bm_layer *s = &hm->layer[l];
        rc = upload(H, &ly[l].norm1, s->norm1, Hd);
        rc = rc ? rc : upload(H, &ly[l].wq, s->wq, Hd * QD);
        rc = rc ? rc : upload(H, &ly[l].wk, s->wk, Hd * QD);
        rc = rc ? rc : upload(H, &ly[l].wv, s->wv, Hd * QD);
        rc = rc ? rc : upload(H, &ly[l].wo, s->wo, QD * Hd);
        rc = rc ? rc : upload(H, &ly[l].norm2, s->norm2, Hd);
        rc = rc ? rc : upload(H, &ly[l].wr, s->wr, Hd * E);
        rc = rc ? rc : upload(H, &ly[l].w1, s->w1, E * Hd * F);
        rc = rc ? rc : upload(H, &ly[l].w2, s->w2, E * F * Hd);
    }
    if (!rc)
        rc = upload(H, &dm.layer, ly, hm->cfg.layers);
    free(ly);
    TRY(rc);
    if (hm->n_faults) {
        struct mks_fault *df;
        TRY(upload(H, &df, hm->faults, hm->n_faults));
        dm.faults = df;
    } else {
        dm.faults = NULL;
    }
    if (hm->base_ns) {
        uint64_t *db;
        TRY(upload(H, &db, hm->base_ns, hm->cfg.steps));
        dm.base_ns = db;
    }
    H->D.m = dm;
    return 0;
}

extern "C" int bg_device_select(uint32_t rank, char *uuid, size_t len, uint32_t *n_sms, char *err,
                                size_t err_len)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        snprintf(err, err_len, "rank %u: no CUDA device (%s)", rank,
                 e != cudaSuccess ? cudaGetErrorString(e) : "none visible");
        return -ENODEV;
    }
    int dev = (int)(rank % (uint32_t)n);
    struct cudaDeviceProp prop;
    if ((e = cudaSetDevice(dev)) != cudaSuccess ||
        (e = cudaGetDeviceProperties(&prop, dev)) != cudaSuccess) {
        snprintf(err, err_len, "rank %u: device %d: %s", rank, dev, cudaGetErrorString(e));
        return -ENODEV;
    }
    const unsigned char *u = (const unsigned char *)prop.uuid.bytes;
    snprintf(uuid, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
             u[14], u[15]);
    *n_sms = (uint32_t)prop.multiProcessorCount;
    return 0;
}

/* Inboxes: allocate mine, share its IPC handle, open the peers'. */
static int setup_inboxes(struct host_rank *H, const struct bg_rank_args *a)
{
    struct bg_dev &D = H->D;
    const size_t n = (size_t)D.m.B * D.m.H;
    const size_t cnt_bytes = (size_t)D.R * BG_CSTRIDE * sizeof(uint32_t);
    uint8_t *base;
    TRY(dalloc(H, &base, cnt_bytes + (size_t)D.R * 2 * n * sizeof(float)));
    D.inbox_count = (uint32_t *)base;
    D.inbox_data = (float *)(base + cnt_bytes);
    if (D.R == 1)
        return 0;
    /* the zeroed counters must be in place before any peer can write them:
     * cudaMemset may still be queued when it returns */
    CK(cudaDeviceSynchronize());
    cudaIpcMemHandle_t mine, all[MKS_BENCH_MAX_RANKS];
    CK(cudaIpcGetMemHandle(&mine, base));
    int rc = a->allgather(a->allgather_ctx, D.rank, &mine, sizeof(mine), all);
    if (rc) {
        snprintf(H->err, H->err_len, "rank %u: exchanging inbox handles failed", D.rank);
        return rc;
    }
    for (uint32_t p = 0; p < D.R; p++) {
        if (p == D.rank)
            continue;
        CK(cudaIpcOpenMemHandle(&H->ipc_peer[p], all[p], cudaIpcMemLazyEnablePeerAccess));
        uint8_t *pb = (uint8_t *)H->ipc_peer[p];
        D.peer_count[p] = (uint32_t *)pb + (size_t)D.rank * BG_CSTRIDE;
        D.peer_data[p] = (float *)(pb + cnt_bytes) + (size_t)D.rank * 2 * n;
    }
    return 0;
}

static int setup(struct host_rank *H, const struct bg_rank_args *a, const struct bm_model *hm,
                 uint32_t n_sms)
{
    struct bg_dev &D = H->D;
    const struct mks_bench_config *cfg = a->cfg;
    D.rank = a->rank;
    D.R = cfg->ranks;
    D.L = cfg->layers;
    D.T = cfg->tiles;
    D.QDr = cfg->heads * cfg->head_dim;
    D.W = n_sms > 1 ? n_sms - 1 : 1;
    D.n_own = (cfg->experts + D.R - 1 - D.rank) / D.R;
    TRY(upload_model(H, hm));
    D.Te = D.T < D.m.H ? D.T : D.m.H;
    const size_t B = D.m.B, Hd = D.m.H, QD = D.m.QD;
    const size_t kv = (size_t)D.L * B * cfg->max_len * QD;
    TRY(dalloc(H, &D.x, B * Hd));
    TRY(dalloc(H, &D.xn, B * Hd));
    TRY(dalloc(H, &D.partial, B * Hd));
    TRY(dalloc(H, &D.arsum, B * Hd));
    TRY(dalloc(H, &D.q, B * QD));
    TRY(dalloc(H, &D.o, B * QD));
    TRY(dalloc(H, &D.logits, B * D.m.V));
    TRY(dalloc(H, &D.kc, kv));
    TRY(dalloc(H, &D.vc, kv));
    TRY(dalloc(H, &D.P, (D.n_own ? D.n_own : 1) * B * Hd));
    TRY(dalloc(H, &D.sel_e, B * cfg->topk));
    TRY(dalloc(H, &D.sel_g, B * cfg->topk));
    TRY(dalloc(H, &D.batch, 1));
    TRY(dalloc(H, &D.sampled, B));
    TRY(dalloc(H, &D.d_step, 1));
    uint32_t per_layer = (uint32_t)(B + 2 * D.T + B * cfg->heads + 2 * (D.R - 1) + 4 +
                                    D.n_own * D.Te + (cfg->ar_relay ? 2 : 0));
    D.max_tasks = D.L * per_layer + D.T + 1;
    TRY(dalloc(H, &D.tasks, 2 * (size_t)D.max_tasks));
    TRY(dalloc(H, &D.order, 3 * (size_t)D.max_tasks));
    const uint32_t n_ev = ev_relay(D, 2 * D.L); /* the last relay event's index + 1 */
    TRY(dalloc(H, &D.ev_count, n_ev));
    TRY(dalloc(H, &D.ev_target, n_ev));
    TRY(dalloc(H, &D.queues, D.W));
    TRY(dalloc(H, &D.step_ns, cfg->steps));
    TRY(dalloc(H, &D.class_counts, mks_bench_class_count(cfg)));
    TRY(dalloc(H, &D.faulted, 1));
    TRY(dalloc(H, &D.abort, 1));
    TRY(dalloc(H, &D.req_gen_out, (size_t)cfg->steps * B));
    TRY(dalloc(H, &D.tokens, (size_t)cfg->steps * B));
    TRY(dalloc(H, &D.logit_sum, cfg->steps));
#ifdef MKS_BENCH_PROFILER
    TRY(dalloc(H, &D.prof, (size_t)D.W * BG_PROF_CAP));
    TRY(dalloc(H, &D.prof_n, D.W));
    TRY(dalloc(H, &D.prof_drop, D.W));
#endif
#ifndef MKS_HOOKS_DISABLED
    if (a->hooks) {
        int rc = mks_rt_cuda_enable(a->hooks, &D.hooks);
        if (rc) {
            snprintf(H->err, H->err_len, "rank %u: devhooks on the device: %s", D.rank,
                     strerror(-rc));
            return rc;
        }
        D.have_hooks = 1;
    }
#endif
    TRY(setup_inboxes(H, a));
#ifndef MKS_HOOKS_DISABLED
    if (D.have_hooks) {
        /* The queues' zeroed words in place before the pump writes their
         * high halves (cudaMemset may still be queued). */
        CK(cudaDeviceSynchronize());
        int rc = mks_rt_cuda_gate(a->hooks, (uint64_t *)&D.queues[0].tail, D.W,
                                  (uint32_t)sizeof(struct bg_queue));
        if (rc) {
            snprintf(H->err, H->err_len, "rank %u: devhooks gate on the queue words: %s", D.rank,
                     strerror(-rc));
            return rc;
        }
    }
#endif
    return 0;
}

#ifdef MKS_BENCH_PROFILER
static const char *cls_name_cb(void *user, uint32_t cls)
{
    static char buf[32];
    return mks_bench_class_name((const struct mks_bench_config *)user, cls, buf, sizeof(buf));
}
#endif

static int run_persistent(struct host_rank *H, const struct bg_rank_args *a)
{
    (void)a; /* the profiler build writes its trace */
    struct bg_dev &D = H->D;
    size_t shmem = bg_shmem(&D.m);
    CK(cudaFuncSetAttribute(bg_megakernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            (int)shmem));
    void *args[] = {&D};
    /* cooperative: every block resident at once, or spinning would deadlock */
    /* with hooks, the spare warp and the monitor warp */
    const uint32_t threads = BG_THREADS + (D.have_hooks ? BG_MON_SPARE + 32u : 0u);
    CK(cudaLaunchCooperativeKernel((void *)bg_megakernel, dim3(D.W + 1), dim3(threads), args,
                                   shmem, 0));
    CK(cudaDeviceSynchronize());
    uint32_t aborted = 0;
    CK(cudaMemcpy(&aborted, D.abort, sizeof(aborted), cudaMemcpyDeviceToHost));
    if (aborted) {
        snprintf(H->err, H->err_len, "rank %u: a peer delivered nothing for %llu s; stopped",
                 D.rank, BG_PEER_TIMEOUT_NS / 1000000000ull);
        return -ETIMEDOUT;
    }
#ifdef MKS_BENCH_PROFILER
    if (a->cfg->trace) {
        const size_t n = (size_t)D.W * BG_PROF_CAP;
        struct br_prof_rec *recs = (struct br_prof_rec *)malloc(n * sizeof(*recs));
        uint32_t *counts = (uint32_t *)malloc(D.W * sizeof(uint32_t));
        unsigned long long *drops = (unsigned long long *)malloc(D.W * sizeof(*drops));
        int rc = -ENOMEM;
        if (recs && counts && drops &&
            cudaMemcpy(recs, D.prof, n * sizeof(*recs), cudaMemcpyDeviceToHost) == cudaSuccess &&
            cudaMemcpy(counts, D.prof_n, D.W * sizeof(uint32_t), cudaMemcpyDeviceToHost) ==
                cudaSuccess &&
            cudaMemcpy(drops, D.prof_drop, D.W * sizeof(*drops), cudaMemcpyDeviceToHost) ==
                cudaSuccess) {
            uint64_t dropped = 0;
            for (uint32_t w = 0; w < D.W; w++)
                dropped += drops[w];
            *a->prof_dropped = dropped;
            char path[4096];
            snprintf(path, sizeof(path), "%s.rank%u.json", a->cfg->trace, D.rank);
            rc = br_prof_write(path, D.rank, D.W, recs, BG_PROF_CAP, counts, dropped, cls_name_cb,
                               (void *)a->cfg);
        }
        free(recs);
        free(counts);
        free(drops);
        if (rc) {
            snprintf(H->err, H->err_len, "rank %u: writing the trace failed", D.rank);
            return rc;
        }
    }
#endif
    return 0;
}

#ifdef MKS_BENCH_HAVE_NCCL
/* One step as operator kernels and NCCL all-reduces on stream st. */
static int enqueue_step(struct host_rank *H, ncclComm_t comm, cudaStream_t st)
{
    struct bg_dev &D = H->D;
    const struct bm_model *m = &D.m;
    const size_t shmem = bg_shmem(m), n = (size_t)m->B * m->H;
    for (uint32_t l = 0; l < D.L; l++) {
        bg_op_kernel<<<m->B, BG_THREADS, shmem, st>>>(D, BC_NORM, l, m->B);
        bg_op_kernel<<<D.T, BG_THREADS, 0, st>>>(D, BC_QKV, l, D.T);
        bg_op_kernel<<<m->B * m->cfg.heads, BG_THREADS, shmem, st>>>(D, BC_ATTN, l,
                                                                 m->B * m->cfg.heads);
        bg_op_kernel<<<D.T, BG_THREADS, 0, st>>>(D, BC_OPROJ, l, D.T);
        if (ncclAllReduce(D.partial, D.arsum, n, ncclFloat, ncclSum, comm, st) != ncclSuccess)
            return -EIO;
        bg_residual_kernel<<<8, 256, 0, st>>>(D);
        bg_op_kernel<<<1, BG_THREADS, shmem, st>>>(D, BC_ROUTER, l, 1);
        if (D.n_own)
            bg_op_kernel<<<D.n_own * D.Te, BG_THREADS, shmem, st>>>(D, BC_EXPERT0, l, D.Te);
        bg_op_kernel<<<1, BG_THREADS, 0, st>>>(D, BC_COMBINE, l, 1);
        if (ncclAllReduce(D.partial, D.arsum, n, ncclFloat, ncclSum, comm, st) != ncclSuccess)
            return -EIO;
        bg_residual_kernel<<<8, 256, 0, st>>>(D);
    }
    bg_op_kernel<<<D.T, BG_THREADS, shmem, st>>>(D, BC_LMHEAD, 0, D.T);
    bg_step_kernel<<<1, BG_THREADS, 0, st>>>(D, 0);
    CK(cudaGetLastError());
    return 0;
}
#endif

static int run_per_op(struct host_rank *H, const struct bg_rank_args *a, int graph)
{
#ifndef MKS_BENCH_HAVE_NCCL
    (void)a, (void)graph;
    snprintf(H->err, H->err_len, "this build has no NCCL: --cuda-mode per-op and graph need it");
    return -ENOTSUP;
#else
    struct bg_dev &D = H->D;
    const struct bm_model *m = &D.m;
    size_t shmem = bg_shmem(m);
    CK(cudaFuncSetAttribute(bg_op_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shmem));
    ncclUniqueId id, all[MKS_BENCH_MAX_RANKS];
    if (D.rank == 0 && ncclGetUniqueId(&id) != ncclSuccess) {
        snprintf(H->err, H->err_len, "rank 0: ncclGetUniqueId failed");
        return -EIO;
    }
    int rc = a->allgather(a->allgather_ctx, D.rank, &id, sizeof(id), all);
    if (rc)
        return rc;
    ncclComm_t comm;
    ncclResult_t nr = ncclCommInitRank(&comm, (int)D.R, all[0], (int)D.rank);
    if (nr != ncclSuccess) {
        snprintf(H->err, H->err_len, "rank %u: ncclCommInitRank: %s (one GPU per rank needed)",
                 D.rank, ncclGetErrorString(nr));
        return -EIO;
    }
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    const uint32_t S = m->cfg.steps;
    cudaEvent_t *evs = (cudaEvent_t *)calloc(S + 1, sizeof(cudaEvent_t));
    if (!evs)
        return -ENOMEM;
    for (uint32_t s = 0; s <= S; s++)
        CK(cudaEventCreate(&evs[s]));
    bg_step_kernel<<<1, BG_THREADS, 0, st>>>(D, 1);
    cudaGraphExec_t exec = NULL;
    if (graph) {
        cudaGraph_t g;
        CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
        rc = enqueue_step(H, comm, st);
        cudaError_t e = cudaStreamEndCapture(st, &g);
        if (rc || e != cudaSuccess) {
            snprintf(H->err, H->err_len, "rank %u: capturing the step graph failed", D.rank);
            return rc ? rc : -EIO;
        }
        CK(cudaGraphInstantiate(&exec, g, 0));
        CK(cudaGraphDestroy(g));
    }
    for (uint32_t s = 0; s < S && !rc; s++) {
        CK(cudaEventRecord(evs[s], st));
        if (graph)
            CK(cudaGraphLaunch(exec, st));
        else
            rc = enqueue_step(H, comm, st);
    }
    CK(cudaEventRecord(evs[S], st));
    CK(cudaStreamSynchronize(st));
    for (uint32_t s = 0; s < S && !rc; s++) {
        float ms = 0.0f;
        CK(cudaEventElapsedTime(&ms, evs[s], evs[s + 1]));
        a->step_ns[s] = (uint64_t)((double)ms * 1e6);
    }
    for (uint32_t s = 0; s <= S; s++)
        cudaEventDestroy(evs[s]);
    free(evs);
    if (exec)
        cudaGraphExecDestroy(exec);
    cudaStreamDestroy(st);
    ncclCommDestroy(comm);
    if (rc)
        snprintf(H->err, H->err_len, "rank %u: NCCL all-reduce failed", D.rank);
    return rc;
#endif
}

static int collect(struct host_rank *H, const struct bg_rank_args *a)
{
    struct bg_dev &D = H->D;
    const struct mks_bench_config *cfg = a->cfg;
    const size_t sb = (size_t)cfg->steps * cfg->batch;
    unsigned long long *tmp =
        (unsigned long long *)malloc((sb > 64 ? sb : 64) * sizeof(unsigned long long));
    if (!tmp)
        return -ENOMEM;
    int rc = 0;
    if (cudaMemcpy(a->tokens, D.tokens, sb * sizeof(int32_t), cudaMemcpyDeviceToHost) ||
        cudaMemcpy(a->logit_sum, D.logit_sum, cfg->steps * sizeof(double),
                   cudaMemcpyDeviceToHost) ||
        cudaMemcpy(tmp, D.req_gen_out, sb * sizeof(*tmp), cudaMemcpyDeviceToHost))
        rc = -EIO;
    for (size_t i = 0; !rc && i < sb; i++)
        a->req_gen[i] = tmp[i];
    if (!rc && cfg->cuda_mode == MKS_BENCH_CUDA_PERSISTENT &&
        cudaMemcpy(tmp, D.step_ns, cfg->steps * sizeof(*tmp), cudaMemcpyDeviceToHost) == 0)
        for (uint32_t s = 0; s < cfg->steps; s++)
            a->step_ns[s] = tmp[s];
    uint32_t nc = mks_bench_class_count(cfg);
    if (!rc && cudaMemcpy(tmp, D.class_counts, nc * sizeof(*tmp), cudaMemcpyDeviceToHost))
        rc = -EIO;
    for (uint32_t c = 0; !rc && c < nc; c++)
        a->class_counts[c] = tmp[c];
    if (!rc && cudaMemcpy(tmp, D.faulted, sizeof(*tmp), cudaMemcpyDeviceToHost))
        rc = -EIO;
    if (!rc)
        *a->faulted = tmp[0];
    free(tmp);
    if (rc)
        snprintf(H->err, H->err_len, "rank %u: copying results from the device failed", D.rank);
    return rc;
}

#ifndef MKS_HOOKS_DISABLED
static uint64_t host_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* --wait-agents: let an agent attach before the first task, as the CPU
 * backend does (bench/src/workload.c), so that its counts cover the whole
 * run: until programs are attached and the attach mask has not changed for
 * 50 ms (an agent attaches its monitors one after another; meanwhile the
 * pump has put them and the workers' gate bits on the device), at most
 * wait_ms.  Without it a rank whose kernel started first ran its first
 * tasks unobserved. */
static void wait_agents(const struct bg_rank_args *a)
{
    const uint32_t wait_ms = a->cfg->wait_agents_ms;
    if (!a->hooks || !wait_ms)
        return;
    const volatile uint32_t *mask = ((const struct mks_rt_hot *)(const void *)a->hooks)->mask;
    const uint64_t settle = 50ull * 1000 * 1000, t0 = host_ns();
    uint32_t last = *mask;
    uint64_t since = t0;
    while (host_ns() - t0 < (uint64_t)wait_ms * 1000 * 1000) {
        uint32_t m = *mask;
        if (m != last) {
            last = m;
            since = host_ns();
        } else if (m && host_ns() - since >= settle) {
            return;
        }
        struct timespec nap = {0, 2 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    if (!last)
        fprintf(stderr,
                "mkscope-bench: rank %u: no agent attached within %u ms; running unobserved\n",
                a->rank, wait_ms);
}
#endif

extern "C" int bg_rank_run(const struct bg_rank_args *a)
{
    struct host_rank *H = (struct host_rank *)calloc(1, sizeof(*H));
    if (!H)
        return -ENOMEM;
    H->err = a->err;
    H->err_len = a->err_len;
    H->D.rank = a->rank;
    struct bm_model hm;
    int rc = bm_model_init(&hm, a->cfg, a->faults, a->n_faults);
    if (rc) {
        free(H);
        snprintf(a->err, a->err_len, "rank %u: out of memory for the model", a->rank);
        return rc;
    }
    if (a->cfg->baseline_ns)
        hm.base_ns = a->cfg->baseline_ns + (size_t)a->rank * a->cfg->steps;
    int dev = 0, n_sms = 0, n_dev = 0;
    cudaGetDevice(&dev);
    cudaGetDeviceCount(&n_dev);
    cudaDeviceGetAttribute(&n_sms, cudaDevAttrMultiProcessorCount, dev);
    if (a->cfg->ranks > (uint32_t)n_dev) {
        /* two persistent kernels that fill every SM of one GPU would wait on
         * each other forever; NCCL refuses two ranks on one GPU too */
        snprintf(a->err, a->err_len, "rank %u: %u ranks need %u GPUs, %d visible", a->rank,
                 a->cfg->ranks, a->cfg->ranks, n_dev);
        bm_model_fini(&hm);
        free(H);
        return -EINVAL;
    }
    rc = setup(H, a, &hm, (uint32_t)n_sms);
#ifndef MKS_HOOKS_DISABLED
    if (!rc && a->cfg->cuda_mode == MKS_BENCH_CUDA_PERSISTENT)
        wait_agents(a);
#endif
    if (!rc)
        rc = a->cfg->cuda_mode == MKS_BENCH_CUDA_PERSISTENT
                 ? run_persistent(H, a)
                 : run_per_op(H, a, a->cfg->cuda_mode == MKS_BENCH_CUDA_GRAPH);
    if (!rc)
        rc = collect(H, a);
    /* peers may still read nothing of ours, but must not see our memory
     * vanish before they are done with theirs */
    if (H->D.R > 1) {
        uint8_t dummy = 0, all[MKS_BENCH_MAX_RANKS];
        a->allgather(a->allgather_ctx, a->rank, &dummy, 1, all);
    }
    host_free(H);
    bm_model_fini(&hm);
    free(H);
    if (rc && !a->err[0]) /* every failure names itself to the launcher */
        snprintf(a->err, a->err_len, "rank %u: CUDA backend: %s", a->rank, strerror(-rc));
    return rc;
}

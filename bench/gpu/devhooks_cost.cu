/*
 * mkscope-devhooks-cost: what a hook costs a persistent megakernel on the GPU.
 *
 * A persistent kernel with one worker block per SM runs T tasks per worker
 * (poll the worker's queue word and load a task descriptor from global
 * memory, a dependent integer chain as the task body) with two events per
 * task (start, end).  Variants, each timed with CUDA events, median of
 * REPS launches:
 *   out       hooks compiled out
 *   detached-gate  nothing attached, the queue word registered with
 *             mks_rt_cuda_gate(): the fast loop is the compiled-out loop;
 *             also timed in interleaved rounds with `out`, without the
 *             block's monitor warp, and in two other layouts of the same
 *             kernel (hooked loop inlined; that and the monitor warp picked
 *             by a threadIdx test), with the spread of the differences
 *   detached-bit  hooks compiled in, nothing attached: MKS_DEV_HOOK_IF (a
 *             bit of the cached attach mask) per event,
 *             mks_dev_worker_task() per task
 *   detached-cnt  the same with mks_dev_attached() (per-event countdown)
 *   inline    the 31-instruction histogram monitor (bench/vm/monitor_prog.h)
 *             attached at task start and end, run by the worker thread
 *             through its cache (mks_dev_hook_run_cached())
 *   inline-unc  the same through mks_dev_hook_run(): epoch entry, fence and
 *             acquire on every event
 *   monitor   the same, run off the critical path by a monitor thread in a
 *             second warp fed through a shared-memory queue
 *   warp      the same monitor through the gate's hooked loop: contexts
 *             into a shared-memory ring, run by a monitor warp of the block
 *             (mks_dev_monitor_warp()), one event per lane; then once more
 *             with the task body removed, which gives the warp's
 *             throughput (events/s per SM)
 *   raw       no hooks; two 16-byte records per task into per-block buffers
 *             (what MPK-style profilers do)
 * ns/event = (variant - out) / (2 T), the cost on one worker's critical path.
 * The task body is the same out-of-line function in every variant, so the
 * variants differ only in what surrounds it; inline-nop and monitor-nop run
 * a 2-instruction program instead, which separates the hook's fixed cost
 * from the VM's.
 *
 * The monitored variants go through the whole runtime: control block in
 * shared memory, agent-side load and attach (mks_ctl_*), the pump copying the
 * program to the device and the map banks back at each epoch flip; one flip
 * happens while the kernel runs.  The histogram totals and the coverage are
 * checked against the number of events fired.
 *
 *   mkscope-devhooks-cost [tasks_per_worker] [body_iterations]
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mkscope/ctl.h"
#include "mkscope/devhook.cuh"
#include "mkscope/runtime.h"
#include "../vm/monitor_prog.h"

#define REPS 7

/* The gate kernels differ only in layout: MODE_GATE calls the hooked loop
 * out of line and picks the monitor warp with a vote; MODE_GATE_INL inlines
 * the hooked loop (vote kept); MODE_GATE_OLD inlines it and picks the
 * monitor warp with a plain threadIdx test (the earlier layout). */
enum {
    MODE_OUT = 0,
    MODE_HOOK = 1,
    MODE_QUEUE = 2,
    MODE_RAW = 3,
    MODE_OLD = 4,
    MODE_GATE = 5,
    MODE_GATE_INL = 6,
    MODE_GATE_OLD = 7,
    MODE_GATE_DRAIN = 8, /* MODE_GATE, the second warp only frees the ring's slots */
    MODE_GATE_LANES = 9  /* MODE_GATE, the monitor warp's lanes run their programs alone */
};

struct raw_rec {
    uint32_t tag, task;
    uint64_t t;
};

#define CHECK(call)                                                                                \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "devhooks-cost: %s: %s\n", #call, cudaGetErrorString(e_));             \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static __device__ __forceinline__ uint64_t gtimer(void)
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

static __device__ __forceinline__ uint32_t smid(void)
{
    uint32_t s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    return s;
}

static __device__ __forceinline__ void fill_ctx(struct mks_hook_ctx *c, uint32_t ev, uint32_t w,
                                                uint32_t task, uint64_t now, uint64_t t_start)
{
    uint64_t *z = (uint64_t *)c;
    for (uint32_t i = 0; i < sizeof(*c) / 8; i++)
        z[i] = 0;
    c->event = (uint16_t)ev;
    c->worker = w;
    c->sm = smid();
    c->task_class = task & 15u;
    c->task_gen = task;
    c->t_now = now;
    c->t_start = t_start;
}

/* The task body, out of line in every variant so that its code is the same
 * whatever hooks surround it: a dependent chain the compiler cannot shorten. */
static __device__ __noinline__ uint64_t task_body(uint64_t acc, uint32_t task, uint32_t K)
{
    for (uint32_t k = 0; k < K; k++)
        acc = acc * 6364136223846793005ull + task + k;
    return acc;
}

/* The attached paths. */
static __device__ __noinline__ uint64_t hook_inline(const struct mks_dev_rt *rt,
                                                    struct mks_dev_hcache *hc, uint32_t ev,
                                                    uint32_t w, uint32_t task, uint64_t t0)
{
    struct mks_hook_ctx c;
    uint64_t now = gtimer();
    fill_ctx(&c, ev, w, task, now, ev == MKS_EV_TASK_START ? now : t0);
    if (hc)
        mks_dev_hook_run_cached(rt, hc, &c);
    else
        mks_dev_hook_run(rt, &c);
    return now;
}

static __device__ __forceinline__ uint64_t hook_queue(struct mks_dev_queue *q, uint32_t ev,
                                                   uint32_t w, uint32_t task, uint64_t t0)
{
    struct mks_hook_ctx *c = mks_dev_queue_slot(q, ev);
    uint64_t now = gtimer();
    if (c) {
        fill_ctx(c, ev, w, task, now, ev == MKS_EV_TASK_START ? now : t0);
        mks_dev_queue_push(q);
    }
    return now;
}

/* MODE_GATE_DRAIN's second warp: frees every published slot, runs nothing,
 * so the worker's cost of writing records is seen without a monitor. */
static __device__ void drain_ring(struct mks_dev_ring *r)
{
    if ((threadIdx.x & 31u) != 0)
        return;
    for (;;) {
        uint32_t head;
        const uint32_t a = (uint32_t)__cvta_generic_to_shared(&r->head);
        const int stop = *(volatile uint32_t *)&r->stop != 0;
        asm volatile("ld.acquire.cta.shared.u32 %0, [%1];" : "=r"(head) : "r"(a) : "memory");
        if (head != *(volatile uint32_t *)&r->tail)
            *(volatile uint32_t *)&r->tail = head;
        else if (stop)
            return;
        __nanosleep(64);
    }
}

/* The scheduler's state carried between its fast and hooked loops. */
struct sched_state {
    uint64_t acc, qv;
    uint32_t i, next;
};

/* The hooked loop: the same tasks with hook sites, until the gate bit
 * clears or no task is left.  Called out of line (MODE_GATE), so that the
 * kernel's register allocation around the fast loop is not shaped by this
 * loop's, or inlined (the other gate modes). */
static __device__ __forceinline__ struct sched_state hooked_loop(struct sched_state s,
                                                                const uint32_t *my, uint32_t T,
                                                                uint32_t K, const uint64_t *qw,
                                                                struct mks_dev_ring *ring,
                                                                uint32_t w)
{
    struct mks_dev_emit em;
    mks_dev_emit_init(&em, ring);
    while (mks_dev_gate_on(s.qv) && s.i < mks_dev_gate_app(s.qv)) {
        uint64_t qn = mks_dev_gate_load(qw);
        uint32_t task = s.next;
        em.mask = mks_dev_gate_mask(s.qv);
        s.next = my[s.i + 1 < T ? s.i + 1 : s.i];
        /* the task (what fill_ctx gives: class, generation), its start
         * and end: two records, published once */
        mks_dev_emit_task(&em, 0, task & 15u, 0, task, 0, 0, 0, 0, 0, 0, 0, 0);
        mks_dev_emit_start(&em, gtimer(), 0);
        s.acc = task_body(s.acc, task, K);
        mks_dev_emit_end(&em, gtimer());
        mks_dev_emit_flush(&em);
        s.qv = qn;
        s.i++;
    }
    (void)w;
    return s;
}

static __device__ __noinline__ struct sched_state hooked_loop_call(struct sched_state s,
                                                                   const uint32_t *my, uint32_t T,
                                                                   uint32_t K, const uint64_t *qw,
                                                                   struct mks_dev_ring *ring,
                                                                   uint32_t w)
{
    return hooked_loop(s, my, T, K, qw, ring, w);
}

/* Every variant has the same scheduler skeleton: a worker polls its queue
 * word (global memory, one per worker on its own cache line; the low half
 * holds the number of tasks published, here all T before launch) one task
 * ahead, and runs tasks while the signed compare says there is one.  In
 * MODE_GATE that compare is also the detached test: the pump sets bit 63
 * while hooks are attached, the fast loop ends, and the hooked loop runs
 * until the bit clears. */
template <int MODE>
__global__ void megakernel(const uint32_t *__restrict__ tasks, uint32_t T, uint32_t K,
                           uint64_t *out, struct mks_dev_rt rt, struct raw_rec *recs,
                           const uint64_t *qwords, uint32_t *waits)
{
    __shared__ struct mks_dev_queue q;
    __shared__ struct mks_dev_ring ring;
    const uint32_t w = blockIdx.x;
    if (MODE == MODE_QUEUE) {
        if (threadIdx.x == 0)
            mks_dev_queue_init(&q);
        __syncthreads();
        if (threadIdx.x == 32) { /* lane 0 of the second warp: the monitor */
            mks_dev_monitor(&rt, &q, w);
            return;
        }
    }
    if (MODE >= MODE_GATE) {
        if (threadIdx.x == 0)
            mks_dev_ring_init(&ring);
        __syncthreads();
        /* The second warp is the monitor warp.  A call under a branch that
         * ptxas takes for divergent (a test of threadIdx.x) makes it keep
         * the kernel's pointers in ordinary registers for the whole kernel
         * and convert them (R2UR) before every load of the fast loop.  The
         * vote gives the same answer (the monitor warp is a whole warp) and
         * ptxas knows its result is warp-uniform. */
        if (MODE == MODE_GATE_OLD ? threadIdx.x >= 32
                                  : __all_sync(0xffffffffu, threadIdx.x >= 32)) {
            if (MODE == MODE_GATE_DRAIN)
                drain_ring(&ring);
            else if (MODE == MODE_GATE_LANES)
                mks_dev_monitor_warp_lanes(&rt, &ring, w);
            else
                mks_dev_monitor_warp(&rt, &ring, w);
            return;
        }
    }
    if (threadIdx.x != 0)
        return;
    struct mks_dev_worker wk;
    struct mks_dev_hcache hc;
    if (MODE == MODE_HOOK)
        mks_dev_worker_init_cached(&rt, &wk, &hc);
    else if (MODE == MODE_OLD || MODE == MODE_QUEUE)
        mks_dev_worker_init(&rt, &wk);
    uint64_t acc = w;
    const uint32_t *my = tasks + (uint64_t)w * T;
    const uint64_t *qw = qwords + (uint64_t)w * 16;
    uint64_t qv = mks_dev_gate_load(qw);
    uint32_t next = my[0]; /* the scheduler fetches the next task ahead */
    uint32_t i = 0;
    for (;;) {
        while ((int64_t)i < (int64_t)qv) {
            uint64_t qn = mks_dev_gate_load(qw); /* polled for the next task */
            uint32_t task = next;
            uint64_t t0 = 0;
            next = my[i + 1 < T ? i + 1 : i];
            if (MODE == MODE_HOOK || MODE == MODE_QUEUE)
                mks_dev_worker_task(&rt, &wk);
            if (MODE == MODE_HOOK) {
                MKS_DEV_HOOK_IF(&rt, &wk, MKS_EV_TASK_START)
                    t0 = hook_inline(&rt, &hc, MKS_EV_TASK_START, w, task, 0);
            } else if (MODE == MODE_OLD) {
                if (mks_dev_attached(&rt, &wk, MKS_EV_TASK_START))
                    t0 = hook_inline(&rt, NULL, MKS_EV_TASK_START, w, task, 0);
            } else if (MODE == MODE_QUEUE) {
                MKS_DEV_HOOK_IF(&rt, &wk, MKS_EV_TASK_START)
                    t0 = hook_queue(&q, MKS_EV_TASK_START, w, task, 0);
            } else if (MODE == MODE_RAW) {
                struct raw_rec r = {0x10000u | w, task, gtimer()};
                recs[((uint64_t)w * T + i) * 2] = r;
            }
            acc = task_body(acc, task, K);
            if (MODE == MODE_HOOK) {
                MKS_DEV_HOOK_IF(&rt, &wk, MKS_EV_TASK_END)
                    hook_inline(&rt, &hc, MKS_EV_TASK_END, w, task, t0);
            } else if (MODE == MODE_OLD) {
                if (mks_dev_attached(&rt, &wk, MKS_EV_TASK_END))
                    hook_inline(&rt, NULL, MKS_EV_TASK_END, w, task, t0);
            } else if (MODE == MODE_QUEUE) {
                MKS_DEV_HOOK_IF(&rt, &wk, MKS_EV_TASK_END)
                    hook_queue(&q, MKS_EV_TASK_END, w, task, t0);
            } else if (MODE == MODE_RAW) {
                struct raw_rec r = {0x20000u | w, task, gtimer()};
                recs[((uint64_t)w * T + i) * 2 + 1] = r;
            }
            qv = qn;
            i++;
        }
        if (MODE >= MODE_GATE && mks_dev_gate_on(qv)) {
            struct sched_state s = {acc, qv, i, next};
            if (MODE == MODE_GATE || MODE == MODE_GATE_DRAIN || MODE == MODE_GATE_LANES)
                s = hooked_loop_call(s, my, T, K, qw, &ring, w);
            else
                s = hooked_loop(s, my, T, K, qw, &ring, w);
            acc = s.acc;
            qv = s.qv;
            i = s.i;
            next = s.next;
            if (!mks_dev_gate_on(qv))
                continue; /* detached: back to the fast loop */
        }
        break; /* no task left */
    }
    if (MODE == MODE_QUEUE)
        mks_dev_queue_stop(&q);
    if (MODE >= MODE_GATE) {
        mks_dev_ring_stop(&ring);
        waits[w] += ring.waits;
    }
    if (MODE == MODE_HOOK)
        mks_dev_worker_exit(&rt, &wk);
    out[w] = acc;
}

struct bench {
    uint32_t n_sm, T, K;
    uint32_t *tasks;
    uint64_t *out;
    struct raw_rec *recs;
    uint64_t *qwords;  /* the workers' polled words, 128 bytes apart, gated */
    uint64_t *qplain;  /* the same for the other variants: never gated */
    uint32_t gate_block; /* MODE_GATE's block size: 64 (monitor warp) or 32 */
    uint32_t *waits;   /* per worker: times the ring was full */
    struct mks_dev_rt rt;
    cudaStream_t stream;
    cudaEvent_t e0, e1;
};

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

#define LAUNCH(M)                                                                                  \
    megakernel<M><<<grid, block, 0, b->stream>>>(b->tasks, b->T, b->K, b->out, b->rt, b->recs,    \
                                                 M >= MODE_GATE ? b->qwords : b->qplain, b->waits)
static void launch(struct bench *b, int mode)
{
    dim3 grid(b->n_sm), block(mode == MODE_QUEUE ? 64 : mode >= MODE_GATE ? b->gate_block : 32);
    switch (mode) {
    case MODE_OUT: LAUNCH(MODE_OUT); break;
    case MODE_HOOK: LAUNCH(MODE_HOOK); break;
    case MODE_QUEUE: LAUNCH(MODE_QUEUE); break;
    case MODE_OLD: LAUNCH(MODE_OLD); break;
    case MODE_GATE: LAUNCH(MODE_GATE); break;
    case MODE_GATE_INL: LAUNCH(MODE_GATE_INL); break;
    case MODE_GATE_OLD: LAUNCH(MODE_GATE_OLD); break;
    case MODE_GATE_DRAIN: LAUNCH(MODE_GATE_DRAIN); break;
    case MODE_GATE_LANES: LAUNCH(MODE_GATE_LANES); break;
    default: LAUNCH(MODE_RAW); break;
    }
    CHECK(cudaGetLastError());
}

/* Median milliseconds of REPS launches.  mid, if given, runs on the host
 * while the middle launch is in flight. */
static float time_mode(struct bench *b, int mode, void (*mid)(void *), void *arg)
{
    float ms[REPS];
    launch(b, mode); /* warm-up */
    CHECK(cudaStreamSynchronize(b->stream));
    for (int r = 0; r < REPS; r++) {
        CHECK(cudaEventRecord(b->e0, b->stream));
        launch(b, mode);
        CHECK(cudaEventRecord(b->e1, b->stream));
        if (mid && r == REPS / 2)
            mid(arg);
        CHECK(cudaEventSynchronize(b->e1));
        CHECK(cudaEventElapsedTime(&ms[r], b->e0, b->e1));
    }
    qsort(ms, REPS, sizeof(float), cmp_float);
    return ms[REPS / 2];
}

struct monitor_state {
    struct mks_ctl *ctl;
    uint32_t map_id;
    uint64_t counted, eligible, ran, lost, snaps;
};

static int add_u64(const void *key, const void *value, void *arg)
{
    (void)key;
    *(uint64_t *)arg += *(const uint64_t *)value;
    return 0;
}

static void advance(void *arg)
{
    struct monitor_state *m = (struct monitor_state *)arg;
    struct mks_epoch_snapshot *s = NULL;
    if (mks_ctl_epoch_advance(m->ctl, &s) != 0) {
        fprintf(stderr, "devhooks-cost: epoch advance failed\n");
        exit(1);
    }
    mks_epoch_snapshot_map(s, m->map_id, add_u64, &m->counted);
    for (int ev = MKS_EV_TASK_START; ev <= MKS_EV_TASK_END; ev++) {
        struct mks_coverage cov;
        mks_epoch_snapshot_coverage(s, (enum mks_hook_event)ev, &cov);
        m->eligible += cov.eligible;
        m->ran += cov.ran;
        m->lost += cov.lost;
    }
    m->snaps++;
    mks_epoch_snapshot_free(s);
}

static void wait_pump(void)
{
    struct timespec ts = {0, 20 * 1000 * 1000}; /* ten pump periods */
    nanosleep(&ts, NULL);
}

/* Attach prog at task start and end, time the inline and the monitor-thread
 * variants, detach; check the totals (counting: the histogram sums to the
 * events) and the coverage against the events fired. */
/* Time an inline variant (mode) with programs attached; check its totals. */
static int measure_inline(struct bench *b, struct monitor_state *m, int mode, int counting,
                          const char *name, uint64_t fired, float *t)
{
    m->counted = m->eligible = m->ran = m->lost = m->snaps = 0;
    *t = time_mode(b, mode, advance, m);
    advance(m);
    printf("%s %s:  total %llu, coverage eligible %llu ran %llu lost %llu; fired %llu "
           "(%llu epochs)\n", name, mode == MODE_OLD ? "inline-uncached" : "inline",
           (unsigned long long)m->counted, (unsigned long long)m->eligible,
           (unsigned long long)m->ran, (unsigned long long)m->lost, (unsigned long long)fired,
           (unsigned long long)m->snaps);
    if ((counting && m->counted != fired) || m->eligible != fired || m->ran != fired) {
        printf("FAIL: %s inline totals differ from the events fired\n", name);
        return 1;
    }
    return 0;
}

static uint64_t sum_waits(struct bench *b)
{
    uint32_t h[1024];
    uint64_t n = 0;
    CHECK(cudaMemcpy(h, b->waits, b->n_sm * sizeof(uint32_t), cudaMemcpyDeviceToHost));
    for (uint32_t i = 0; i < b->n_sm; i++)
        n += h[i];
    return n;
}

/* The monitor warp (MODE_GATE with programs attached): time, check
 * coverage and totals; then the warp's throughput with the task body
 * removed (K = 0), where the worker outruns the warp and waits on the full
 * ring: events per second per SM. */
/* The worker with records and no monitor (MODE_GATE_DRAIN), timed beside
 * the hist warp. */
static float t_drain;

/* The monitor warp's throughput in `mode` with the task body removed (K =
 * 0), where the worker outruns the warp and waits on the full ring: events
 * per second per SM into *per_sm, totals checked. */
static int saturated(struct bench *b, struct monitor_state *m, int mode, int counting,
                     const char *name, uint64_t fired, double *per_sm)
{
    const uint32_t K = b->K;
    const char *how = mode == MODE_GATE_LANES ? ", lanes alone" : "";
    float t_sat;
    b->K = 0;
    CHECK(cudaMemset(b->waits, 0, b->n_sm * sizeof(uint32_t)));
    m->counted = m->eligible = m->ran = m->lost = m->snaps = 0;
    t_sat = time_mode(b, mode, NULL, NULL);
    advance(m);
    b->K = K;
    *per_sm = 2.0 * b->T / (t_sat * 1e-3);
    printf("%s warp saturated%s (body 0): %.3f ms per launch, %.2f M events/s per SM; coverage "
           "eligible %llu ran %llu lost %llu, total %llu; worker waited %llu times\n",
           name, how, t_sat, *per_sm * 1e-6, (unsigned long long)m->eligible,
           (unsigned long long)m->ran, (unsigned long long)m->lost,
           (unsigned long long)m->counted, (unsigned long long)sum_waits(b));
    if (m->eligible != fired || (counting && m->counted != m->ran) || m->ran + m->lost != fired) {
        printf("FAIL: %s saturated%s monitor-warp totals do not add up\n", name, how);
        return 1;
    }
    return 0;
}

static int measure_warp(struct bench *b, struct monitor_state *m, int counting, const char *name,
                        uint64_t fired, float *t, double *per_sm)
{
    double lanes_per_sm;
    int rc = 0;
    CHECK(cudaMemset(b->waits, 0, b->n_sm * sizeof(uint32_t)));
    m->counted = m->eligible = m->ran = m->lost = m->snaps = 0;
    *t = time_mode(b, MODE_GATE, advance, m);
    advance(m);
    printf("%s warp: total %llu, coverage eligible %llu ran %llu lost %llu; fired %llu; "
           "worker waited on a full ring %llu times\n",
           name, (unsigned long long)m->counted, (unsigned long long)m->eligible,
           (unsigned long long)m->ran, (unsigned long long)m->lost, (unsigned long long)fired,
           (unsigned long long)sum_waits(b));
    if (m->eligible != fired || (counting && m->counted != m->ran) || m->ran + m->lost != fired) {
        printf("FAIL: %s monitor-warp totals do not add up\n", name);
        rc = 1;
    }
    if (m->lost)
        printf("NOTE: %s monitor warp lost %llu events\n", name, (unsigned long long)m->lost);
    if (counting) { /* the same records with no monitor: what writing them costs */
        t_drain = time_mode(b, MODE_GATE_DRAIN, NULL, NULL);
        advance(m);
    }
    rc |= saturated(b, m, MODE_GATE, counting, name, fired, per_sm);
    /* The same with each lane running its programs alone, as before the
     * lanes ran in step: the two runners side by side. */
    rc |= saturated(b, m, MODE_GATE_LANES, counting, name, fired, &lanes_per_sm);
    printf("%s warp saturated: in step / lanes alone %.2fx\n", name, *per_sm / lanes_per_sm);
    return rc;
}

static int measure_attached(struct bench *b, struct monitor_state *m, uint32_t prog_id,
                            int counting, const char *name, uint64_t fired, float *t_inline,
                            float *t_queue, uint64_t *ran_queue, float *t_old, float *t_warp,
                            double *warp_per_sm)
{
    int rc = 0;
    if (mks_ctl_attach(m->ctl, prog_id, MKS_EV_TASK_START, -1, NULL) != 0 ||
        mks_ctl_attach(m->ctl, prog_id, MKS_EV_TASK_END, -1, NULL) != 0)
        exit(1);
    wait_pump();
    advance(m); /* start from a clean epoch */
    rc |= measure_inline(b, m, MODE_HOOK, counting, name, fired, t_inline);
    if (t_old)
        rc |= measure_inline(b, m, MODE_OLD, counting, name, fired, t_old);
    m->counted = m->eligible = m->ran = m->lost = m->snaps = 0;
    *t_queue = time_mode(b, MODE_QUEUE, advance, m);
    advance(m);
    printf("%s monitor: total %llu, coverage eligible %llu ran %llu lost %llu; fired %llu\n",
           name, (unsigned long long)m->counted, (unsigned long long)m->eligible,
           (unsigned long long)m->ran, (unsigned long long)m->lost, (unsigned long long)fired);
    if (m->eligible != fired || (counting && m->counted != m->ran) || m->ran + m->lost != fired) {
        printf("FAIL: %s monitor-thread totals do not add up\n", name);
        rc = 1;
    }
    *ran_queue = m->ran;
    rc |= measure_warp(b, m, counting, name, fired, t_warp, warp_per_sm);
    if (mks_ctl_detach(m->ctl, prog_id, MKS_EV_TASK_START, NULL) != 0 ||
        mks_ctl_detach(m->ctl, prog_id, MKS_EV_TASK_END, NULL) != 0)
        exit(1);
    wait_pump();
    return rc;
}

/* One timed launch. */
static float time_once(struct bench *b, int mode)
{
    float ms;
    CHECK(cudaEventRecord(b->e0, b->stream));
    launch(b, mode);
    CHECK(cudaEventRecord(b->e1, b->stream));
    CHECK(cudaEventSynchronize(b->e1));
    CHECK(cudaEventElapsedTime(&ms, b->e0, b->e1));
    return ms;
}

/* Hooks compiled out against detached through the gate, launches
 * interleaved so drift hits every variant alike: each round times one
 * launch of each, in a cyclic order whose start moves by one each round
 * (each variant takes every position, first to last, about as often), and
 * each variant's difference to the round's compiled-out launch is one
 * sample.  Variants: the gate
 * kernel (MODE_GATE), the same launched without its idle monitor warp
 * (gate32), with the hooked loop inlined (gate-inl), and the earlier layout
 * (gate-old).  Prints every round and the spread. */
#define NDET 5
#define NROUND 31
static void detached_pairs(struct bench *b, float *med_out, float *med_gate)
{
    static const char *const name[NDET] = {"out", "gate", "gate32", "gate-inl", "gate-old"};
    static const int mode[NDET] = {MODE_OUT, MODE_GATE, MODE_GATE, MODE_GATE_INL, MODE_GATE_OLD};
    static float t[NDET][NROUND], d[NDET][NROUND];
    for (int v = 0; v < NDET; v++)
        launch(b, mode[v]);
    CHECK(cudaStreamSynchronize(b->stream));
    printf("compiled out vs detached (gate), %d interleaved rounds; per round ns/event of each "
           "variant - out (gate gate32 gate-inl gate-old):\n", NROUND);
    for (int r = 0; r < NROUND; r++) {
        for (int k = 0; k < NDET; k++) {
            int v = (r + k) % NDET;
            b->gate_block = v == 2 ? 32 : 64;
            t[v][r] = time_once(b, mode[v]);
        }
        b->gate_block = 64;
        printf(" ");
        for (int v = 0; v < NDET; v++) {
            d[v][r] = (t[v][r] - t[0][r]) * 1e6f / (2.0f * b->T);
            if (v)
                printf(" %.2f", d[v][r]);
        }
        printf(r % 4 == 3 ? "\n" : " |");
    }
    printf("\n");
    for (int v = 0; v < NDET; v++) {
        qsort(t[v], NROUND, sizeof(float), cmp_float);
        qsort(d[v], NROUND, sizeof(float), cmp_float);
        printf("  %-8s ms: median %.4f (min %.4f max %.4f)", name[v], t[v][NROUND / 2], t[v][0],
               t[v][NROUND - 1]);
        if (v)
            printf("; - out, ns/event: median %.2f, quartiles %.2f..%.2f, min %.2f max %.2f",
                   d[v][NROUND / 2], d[v][NROUND / 4], d[v][3 * NROUND / 4], d[v][0],
                   d[v][NROUND - 1]);
        printf("\n");
    }
    /* The same for two compiled-out launches: what "no difference" looks
     * like on this machine. */
    {
        float dd[NROUND];
        for (int r = 0; r < NROUND; r++) {
            float x = time_once(b, MODE_OUT), y = time_once(b, MODE_OUT);
            dd[r] = (r & 1 ? x - y : y - x) * 1e6f / (2.0f * b->T);
        }
        qsort(dd, NROUND, sizeof(float), cmp_float);
        printf("  out - out (alternating sign), ns/event: median %.2f, quartiles %.2f..%.2f, "
               "min %.2f max %.2f\n", dd[NROUND / 2], dd[NROUND / 4], dd[3 * NROUND / 4], dd[0],
               dd[NROUND - 1]);
    }
    *med_out = t[0][NROUND / 2];
    *med_gate = t[1][NROUND / 2];
}

int main(int argc, char **argv)
{
    static const struct mks_insn prog[] = MKS_BMONITOR_ATOMIC(5);
    static const struct mks_insn nop[] = {MKS_BI(0xb7, 0, 0, 0, 0), MKS_BI(0x95, 0, 0, 0, 0)};
    static const struct mks_map_spec hist = {"hist", MKS_MAP_ARRAY, 4, 8, 8};
    struct bench b;
    struct cudaDeviceProp prop;
    struct mks_rt_opts o;
    struct mks_rt *rt = NULL;
    struct mks_prog_spec spec;
    struct monitor_state m;
    char job[64];
    uint32_t prog_id;
    float t_out, t_det, t_inline, t_queue, t_raw, t_inline_nop, t_queue_nop, t_out2;
    float t_det_old, t_inline_old, t_warp = 0, t_warp_nop = 0, t_gout, t_gate;
    double warp_sm = 0, warp_sm_nop = 0;
    uint64_t events, fired, ran_queue = 0, ran_queue_nop = 0;
    uint32_t nop_id;
    int rc = 0;

    memset(&b, 0, sizeof(b));
    b.T = argc > 1 ? (uint32_t)atoi(argv[1]) : 20000;
    b.K = argc > 2 ? (uint32_t)atoi(argv[2]) : 64;
    if (b.T == 0) {
        fprintf(stderr, "usage: mkscope-devhooks-cost [tasks_per_worker>0] [body_iterations]\n");
        return 2;
    }
    CHECK(cudaGetDeviceProperties(&prop, 0));
    b.n_sm = (uint32_t)prop.multiProcessorCount;
    printf("device: %s, %u SMs; %u workers x %u tasks, body %u iterations, 2 events/task\n",
           prop.name, b.n_sm, b.n_sm, b.T, b.K);

    snprintf(job, sizeof(job), "cost%d", (int)getpid());
    memset(&o, 0, sizeof(o));
    o.sz = sizeof(o);
    o.job = job;
    o.n_ranks = 1;
    o.n_workers = b.n_sm;
    o.gpu_uuid = "GPU-0";
    if (mks_rt_create(&o, &rt) != 0 || mks_rt_cuda_enable(rt, &b.rt) != 0) {
        fprintf(stderr, "devhooks-cost: runtime setup failed\n");
        return 1;
    }
    memset(&m, 0, sizeof(m));
    if (mks_ctl_open(job, 0, &m.ctl) != 0)
        return 1;
    memset(&spec, 0, sizeof(spec));
    spec.sz = sizeof(spec);
    spec.name = "hist";
    spec.prog_type = MKS_PROG_OBSERVE;
    spec.abi_version = 1;
    spec.insns = prog;
    spec.n_insns = sizeof(prog) / sizeof(prog[0]);
    spec.n_maps = 1;
    spec.maps = &hist;
    spec.cost = spec.n_insns;
    if (mks_ctl_prog_load(m.ctl, &spec, &prog_id) != 0 ||
        mks_ctl_prog_map(m.ctl, prog_id, 0, &m.map_id) != 0)
        return 1;
    spec.name = "nop";
    spec.insns = nop;
    spec.n_insns = 2;
    spec.n_maps = 0;
    spec.maps = NULL;
    spec.cost = 2;
    if (mks_ctl_prog_load(m.ctl, &spec, &nop_id) != 0)
        return 1;
    mks_ctl_lease(m.ctl, 600ull * 1000000000ull);

    {
        uint32_t *h = (uint32_t *)malloc((size_t)b.n_sm * b.T * sizeof(uint32_t));
        if (!h)
            return 1;
        srand(7);
        for (size_t i = 0; i < (size_t)b.n_sm * b.T; i++)
            h[i] = (uint32_t)rand();
        CHECK(cudaMalloc((void **)&b.tasks, (size_t)b.n_sm * b.T * sizeof(uint32_t)));
        CHECK(cudaMemcpy(b.tasks, h, (size_t)b.n_sm * b.T * sizeof(uint32_t),
                         cudaMemcpyHostToDevice));
        free(h);
    }
    CHECK(cudaMalloc((void **)&b.out, b.n_sm * sizeof(uint64_t)));
    CHECK(cudaMalloc((void **)&b.recs, (size_t)b.n_sm * b.T * 2 * sizeof(struct raw_rec)));
    {
        /* Every worker's polled word: T tasks published, gate clear. */
        uint64_t *h = (uint64_t *)calloc((size_t)b.n_sm * 16, sizeof(uint64_t));
        if (!h)
            return 1;
        for (uint32_t i = 0; i < b.n_sm; i++)
            h[i * 16] = b.T;
        CHECK(cudaMalloc((void **)&b.qwords, (size_t)b.n_sm * 16 * sizeof(uint64_t)));
        CHECK(cudaMemcpy(b.qwords, h, (size_t)b.n_sm * 16 * sizeof(uint64_t),
                         cudaMemcpyHostToDevice));
        CHECK(cudaMalloc((void **)&b.qplain, (size_t)b.n_sm * 16 * sizeof(uint64_t)));
        CHECK(cudaMemcpy(b.qplain, h, (size_t)b.n_sm * 16 * sizeof(uint64_t),
                         cudaMemcpyHostToDevice));
        b.gate_block = 64;
        free(h);
        CHECK(cudaMalloc((void **)&b.waits, b.n_sm * sizeof(uint32_t)));
        if (mks_rt_cuda_gate(rt, b.qwords, b.n_sm, 16 * sizeof(uint64_t)) != 0)
            return 1;
        wait_pump();
    }
    CHECK(cudaStreamCreateWithFlags(&b.stream, cudaStreamNonBlocking));
    CHECK(cudaEventCreate(&b.e0));
    CHECK(cudaEventCreate(&b.e1));

    t_out = time_mode(&b, MODE_OUT, NULL, NULL);
    t_det = time_mode(&b, MODE_HOOK, NULL, NULL);
    t_det_old = time_mode(&b, MODE_OLD, NULL, NULL);
    t_raw = time_mode(&b, MODE_RAW, NULL, NULL);
    detached_pairs(&b, &t_gout, &t_gate);

    events = (uint64_t)b.n_sm * b.T * 2;
    fired = events * (REPS + 1); /* the warm-up launch too */
    rc |= measure_attached(&b, &m, prog_id, 1, "hist", fired, &t_inline, &t_queue, &ran_queue,
                           &t_inline_old, &t_warp, &warp_sm);
    rc |= measure_attached(&b, &m, nop_id, 0, "nop", fired, &t_inline_nop, &t_queue_nop,
                           &ran_queue_nop, NULL, &t_warp_nop, &warp_sm_nop);

    t_out2 = time_mode(&b, MODE_OUT, NULL, NULL); /* drift over the run */
    printf("\n%-12s %10s %12s %12s\n", "variant", "ms", "ns/task", "ns/event");
#define ROW(name, t)                                                                               \
    printf("%-12s %10.3f %12.1f %12.2f\n", name, t, (t) * 1e6 / b.T,                             \
           ((t) - t_out) * 1e6 / (2.0 * b.T))
    ROW("out", t_out);
    ROW("detached-gate", t_gate);
    ROW("detached-bit", t_det);
    ROW("detached-cnt", t_det_old);
    ROW("raw", t_raw);
    ROW("inline", t_inline);
    ROW("inline-unc", t_inline_old);
    ROW("monitor", t_queue);
    ROW("inline-nop", t_inline_nop);
    ROW("monitor-nop", t_queue_nop);
    ROW("warp", t_warp);
    ROW("warp-nop", t_warp_nop);
    ROW("warp-drain", t_drain);
    ROW("out-again", t_out2);
    printf("(ns/event: extra time on one worker's critical path per event, vs hooks compiled "
           "out; events the monitor thread ran: hist %.1f%%, nop %.1f%%, the rest counted lost)\n",
           100.0 * (double)ran_queue / (double)fired, 100.0 * (double)ran_queue_nop / (double)fired);

    printf("(detached-gate against the out launches interleaved with it: %.2f ns/event; monitor "
           "warp throughput with the task body removed: hist %.2f, nop %.2f M events/s per SM)\n",
           (t_gate - t_gout) * 1e6 / (2.0 * b.T), warp_sm * 1e-6, warp_sm_nop * 1e-6);
    mks_ctl_close(m.ctl);
    mks_rt_destroy(rt);
    return rc;
}

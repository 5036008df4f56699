/*
 * The device side of devhooks, for a persistent megakernel written in CUDA.
 *
 * Host: after mks_rt_create() (with gpu_uuid set), mks_rt_cuda_enable() makes
 * a device mirror of the control block and lets the pump thread keep it in
 * step: programs, hook lists and the attach mask go to the device when the
 * agent changes them, map banks and coverage come back at each epoch flip,
 * ring records while the kernel runs.  Pass the struct mks_dev_rt it returns
 * to the kernel by value.
 *
 * Device: each worker keeps a struct mks_dev_worker in registers.  The hook
 * test, MKS_DEV_HOOK_IF, is a bit test of the worker's cached attach mask,
 * nothing else: no load, no counter, and no context is built unless the bit
 * is set.  The cache is kept current by mks_dev_worker_task(), which the
 * scheduler calls once per task (also while it waits for work): it issues
 * one load of a device word the pump bumps after every change of hooks,
 * mask or epoch, and compares the value loaded at the previous call, so the
 * load's latency hides behind the task.  A newly attached program therefore
 * starts within two tasks of each worker.  (mks_dev_attached() is the older
 * test that counts events and re-reads the mask every MKS_DEV_REFRESH of
 * them, for schedulers that do not call mks_dev_worker_task().)
 *
 * Cheaper still when the scheduler polls a word for its next task:
 * mks_rt_cuda_gate() lets the pump set a bit in that word while hooks are
 * attached, so the detached loop carries no hook code at all (see "the
 * gate bit" below), and attached events go to a monitor warp that runs
 * 32 of them at a time (mks_dev_monitor_warp()).
 *
 * Attached programs run in one of two places:
 *   inline     the worker thread calls mks_dev_hook_run_cached() (or the
 *              older mks_dev_hook_run()) itself;
 *   off-path   the worker writes the context into a slot of a shared-memory
 *              queue (mks_dev_queue_slot/push, a few shared stores) and a
 *              spare "monitor" thread of the block, in another warp, runs
 *              mks_dev_monitor() until the queue is stopped.  When the queue
 *              is full the worker does not wait: the event is counted and
 *              reported as eligible and lost in coverage.
 *
 *     struct mks_dev_worker w;
 *     struct mks_dev_hcache hc;                // thread-local, for inline runs
 *     mks_dev_worker_init_cached(&rt, &w, &hc);
 *     for (each task) {
 *         mks_dev_worker_task(&rt, &w);
 *         MKS_DEV_HOOK_IF(&rt, &w, MKS_EV_TASK_START) {
 *             struct mks_hook_ctx c = {...};   // filled only when attached
 *             mks_dev_hook_run_cached(&rt, &hc, &c);
 *         }
 *         ...
 *     }
 *     mks_dev_worker_exit(&rt, &w);            // before the thread returns
 *
 * Inline runs through the cache: the worker enters the epoch (a fence) and
 * reads every hook's program list once, then stays inside the epoch and
 * keeps coverage in the cache.  After the pump's word moved (an epoch flip,
 * a program change), the first hook site the worker passes, attached or
 * not, adds the cache's coverage to the block's counters and leaves, so the
 * pump's grace period ends then.  Per event nothing then waits on a fence
 * or an uncached load: programs, tables and map descriptors stay in L1.  A
 * worker that stops passing hook sites while inside holds up the next epoch
 * flip (the pump gives up after a second), hence mks_dev_worker_exit().
 */
#ifndef MKSCOPE_DEVHOOK_CUH
#define MKSCOPE_DEVHOOK_CUH

#include <stdint.h>

#include "mkscope/hook_abi.h"
#include "mkscope/runtime.h"

/* Events between refreshes of a worker's cached attach mask. */
#ifndef MKS_DEV_REFRESH
#define MKS_DEV_REFRESH 1024u
#endif

struct mks_dev_rt {
    void *cb;          /* device mirror of the control block */
    const uint32_t *mask; /* its attach mask word */
    uint32_t rank;
    const uint32_t *gen; /* its change counter, bumped by the pump */
};

/* The inline runner's per-worker state (mks_dev_hook_run_cached()); plain
 * data in the worker thread's memory, zeroed by mks_dev_hcache_init(). */
struct mks_dev_hcache {
    uint64_t word[MKS_EV_COUNT]; /* hook program lists read at entry */
    uint64_t cov[MKS_EV_COUNT][4]; /* eligible, ran, throttled, lost since entry */
    uint64_t epoch;  /* the epoch entered */
    uint32_t inside; /* 1 while the worker is inside `epoch` */
    uint32_t worker;
    uint32_t entries; /* entries so far: makes each entry's sequence word new */
    uint32_t pad;
};

struct mks_dev_worker {
    uint32_t mask;     /* attach mask, and MKS_DEV_SYNC after a change */
    uint32_t left;     /* mks_dev_attached(): events until the next refresh */
    uint32_t gen;      /* change counter the mask was read at */
    uint32_t next_gen; /* loaded at the previous mks_dev_worker_task() */
    struct mks_dev_hcache *hc; /* NULL: no inline cache */
    const uint32_t *maskp, *genp; /* rt's words, kept in registers */
};

/* Set in a worker's mask after the pump's word moved: the next event, of
 * any kind, takes the slow path once to flush and leave the cache's epoch.
 * Above every event bit. */
#define MKS_DEV_SYNC 0x80000000u

/* Run the attached programs of ctx->event on this thread; returns the
 * clamped priority hint of CONTROL programs. */
extern "C" __device__ int32_t mks_dev_hook_run(const struct mks_dev_rt *rt,
                                               struct mks_hook_ctx *ctx);

/* The same through the worker's cache: no fence and no uncached load per
 * event once the worker is inside the epoch (see above).  ctx->worker must
 * be the worker the cache belongs to. */
extern "C" __device__ int32_t mks_dev_hook_run_cached(const struct mks_dev_rt *rt,
                                                      struct mks_dev_hcache *hc,
                                                      struct mks_hook_ctx *ctx);

/* mks_dev_hook_run_cached() for a runner that reports events about other
 * workers under its own hook slot: a scheduler's TASK_ASSIGN names the
 * worker the task goes to (ctx->worker, which programs see and which
 * indexes per-worker maps), while the epoch entry and the coverage are
 * slot's, the one hc enters.  A worker that has its own runner (a monitor
 * warp) keeps it the only one writing its slot. */
extern "C" __device__ int32_t mks_dev_hook_run_as(const struct mks_dev_rt *rt,
                                                  struct mks_dev_hcache *hc, uint32_t slot,
                                                  struct mks_hook_ctx *ctx);

/* 1 when a CONTROL program is attached at ev (its priority hint is needed
 * at once: run the event inline), 0 when only OBSERVE programs are, which
 * may run later, off the critical path.  Reads the hook word through hc
 * (entering the epoch as slot when it is not inside). */
extern "C" __device__ int mks_dev_hook_wants_hint(const struct mks_dev_rt *rt,
                                                  struct mks_dev_hcache *hc, uint32_t slot,
                                                  uint32_t ev);

/* The pump's word moved: flush and leave (when inside); returns the attach
 * mask, read again. */
extern "C" __device__ uint32_t mks_dev_worker_changed(const struct mks_dev_rt *rt,
                                                      struct mks_dev_hcache *hc);

/* Run one program in the VM on this thread (tests, tools). */
struct mks_vm_env;
extern "C" __device__ int mks_dev_vm_run(const struct mks_vm_env *env, uint64_t r1, uint64_t r2,
                                         uint64_t *r0_p, uint64_t *insns_p);

/* Count n events of ev on worker that no program saw (eligible and lost). */
extern "C" __device__ void mks_dev_hook_lost(const struct mks_dev_rt *rt, uint32_t worker,
                                             uint32_t ev, uint32_t n);

/* ---- off-path execution: a shared-memory queue and a monitor thread ---- */

#ifndef MKS_DEV_QSLOTS
#define MKS_DEV_QSLOTS 16u /* 2 KiB of shared memory per worker block */
#endif

struct mks_dev_queue {
    struct mks_hook_ctx slot[MKS_DEV_QSLOTS];
    uint32_t head;                   /* written by the worker */
    uint32_t tail;                   /* written by the monitor */
    uint32_t dropped[MKS_EV_COUNT];  /* written by the worker */
    uint32_t stop;                   /* set by the worker when it is done */
};

/* Zero the queue (one thread, then __syncthreads()). */
static __device__ __forceinline__ void mks_dev_queue_init(struct mks_dev_queue *q)
{
    q->head = q->tail = q->stop = 0;
    for (uint32_t e = 0; e < MKS_EV_COUNT; e++)
        q->dropped[e] = 0;
}

/* The slot for the next event, or NULL when the queue is full (the event is
 * then counted as dropped for ev). */
static __device__ __forceinline__ struct mks_hook_ctx *mks_dev_queue_slot(struct mks_dev_queue *q,
                                                                          uint32_t ev)
{
    uint32_t h = q->head;
    if (__builtin_expect(h - *(volatile uint32_t *)&q->tail >= MKS_DEV_QSLOTS, 0)) {
        *(volatile uint32_t *)&q->dropped[ev] = q->dropped[ev] + 1u;
        return 0;
    }
    return &q->slot[h % MKS_DEV_QSLOTS];
}

/* Publish the slot filled after mks_dev_queue_slot(). */
static __device__ __forceinline__ void mks_dev_queue_push(struct mks_dev_queue *q)
{
    __threadfence_block();
    *(volatile uint32_t *)&q->head = q->head + 1u;
}

/* Ask the monitor to return once the queue is drained. */
static __device__ __forceinline__ void mks_dev_queue_stop(struct mks_dev_queue *q)
{
    __threadfence_block();
    *(volatile uint32_t *)&q->stop = 1u;
}

/* The monitor thread's loop: run the programs of each queued event, report
 * dropped events, return after mks_dev_queue_stop() and an empty queue. */
extern "C" __device__ void mks_dev_monitor(const struct mks_dev_rt *rt, struct mks_dev_queue *q,
                                           uint32_t worker);

/* ---- detached at no cost: the gate bit in a word the worker polls ----
 *
 * A persistent worker already loads a word from global memory to learn
 * whether it has a next task.  mks_rt_cuda_gate() hands devhooks one such
 * 64-bit word per worker; the application writes only its low 32 bits (a
 * task count, 32-bit stores), the pump writes only the high 32 bits:
 * MKS_DEV_GATE_ON | attach mask while any hook is attached, 0 otherwise.
 * The worker's fast loop tests for a next task with a signed 64-bit compare,
 *
 *     while ((int64_t)i < (int64_t)word) { ...task, no hook code... }
 *
 * which fails over as soon as the gate bit (bit 63) is set, so the fast
 * loop's source is the hooks-compiled-out loop: no hook code, no test per
 * event.  Its machine code is as good only if no call in the kernel sits
 * under a branch ptxas takes for divergent: pick the monitor warp with a
 * vote, `if (__all_sync(0xffffffffu, threadIdx.x >= 32))`, not a plain
 * threadIdx test, which makes ptxas convert the memory descriptor
 * (R2UR) before the fast loop's loads on every task; docs/PERF.md has the
 * cost of both.  The hooked loop may be a __noinline__ function called
 * when the bit is seen.  After the fast loop, the worker checks
 * mks_dev_gate_on(word): set, it runs the hooked loop (the same tasks with
 * hook sites, events whose bit mks_dev_gate_mask() gives) until the bit
 * clears, then returns to the fast loop. */
#define MKS_DEV_GATE_ON 0x80000000u

static __device__ __forceinline__ int mks_dev_gate_on(uint64_t word)
{
    return (int64_t)word < 0;
}

static __device__ __forceinline__ uint32_t mks_dev_gate_mask(uint64_t word)
{
    return (uint32_t)(word >> 32) & ~MKS_DEV_GATE_ON;
}

/* The application's half of the word (the task count). */
static __device__ __forceinline__ uint32_t mks_dev_gate_app(uint64_t word)
{
    return (uint32_t)word;
}

/* A load of the polled word that reaches the L2, where the pump writes. */
static __device__ __forceinline__ uint64_t mks_dev_gate_load(const uint64_t *p)
{
    uint64_t v;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

/* ---- off-path execution by a monitor warp, without loss ----
 *
 * The worker copies each event's context into a slot of a per-block
 * shared-memory ring (mks_dev_ring_slot/push: eight 16-byte shared stores
 * and a fence); one warp of the same block runs mks_dev_monitor_warp(),
 * which takes up to 32 queued events at a time and runs their programs
 * with one event per lane.  When the ring is full the worker waits, at
 * most MKS_DEV_RING_SPINS polls of the monitor's tail, and counts the wait
 * in `waits`; only after that is the event counted lost (eligible and lost
 * in coverage), so ran + lost = eligible always holds. */
#define MKS_DEV_RING_SLOTS 64u /* 8 KiB of shared memory per block */
#ifndef MKS_DEV_RING_SPINS
#define MKS_DEV_RING_SPINS 4096u /* about 1 ms with the 256 ns sleep below */
#endif

struct mks_dev_ring {
    struct mks_hook_ctx slot[MKS_DEV_RING_SLOTS];
    uint32_t head;                /* written by the worker */
    uint32_t tail;                /* written by the monitor warp */
    uint32_t stop;                /* set by the worker when it is done */
    uint32_t waits;               /* bumped when the worker starts to wait on a full
                                     ring and again when it counts events lost */
    uint32_t lost[MKS_EV_COUNT];  /* written by the worker */
};

/* Zero the ring (one thread, then __syncthreads()). */
static __device__ __forceinline__ void mks_dev_ring_init(struct mks_dev_ring *r)
{
    r->head = r->tail = r->stop = r->waits = 0;
    for (uint32_t e = 0; e < MKS_EV_COUNT; e++)
        r->lost[e] = 0;
}

/* The ring was full: wait for the monitor warp, bounded, until slot h is
 * free; NULL after the wait ran out (the event counted lost when ev names
 * one). */
static __device__ __forceinline__ struct mks_hook_ctx *mks_dev_ring_wait(struct mks_dev_ring *r,
                                                                      uint32_t h, uint32_t ev)
{
    *(volatile uint32_t *)&r->waits = r->waits + 1u;
#pragma unroll 1
    for (uint32_t n = 0; n < MKS_DEV_RING_SPINS; n++) {
        __nanosleep(256);
        if (h - *(volatile uint32_t *)&r->tail < MKS_DEV_RING_SLOTS)
            return &r->slot[h % MKS_DEV_RING_SLOTS];
    }
    if (ev < MKS_EV_COUNT) {
        *(volatile uint32_t *)&r->lost[ev] = r->lost[ev] + 1u;
        *(volatile uint32_t *)&r->waits = r->waits + 1u; /* the monitor sweeps losses then */
    }
    return 0;
}

/* The slot for the next event of kind ev, or NULL when the ring stayed full
 * (the event is then counted lost). */
static __device__ __forceinline__ struct mks_hook_ctx *mks_dev_ring_slot(struct mks_dev_ring *r,
                                                                         uint32_t ev)
{
    uint32_t h = r->head;
    if (__builtin_expect(h - *(volatile uint32_t *)&r->tail >= MKS_DEV_RING_SLOTS, 0))
        return mks_dev_ring_wait(r, h, ev);
    return &r->slot[h % MKS_DEV_RING_SLOTS];
}

/* Wait, bounded, until n slots are free (n <= MKS_DEV_RING_SLOTS): 1 when
 * they are, and the next n events may take mks_dev_ring_next() with no
 * check (only the monitor warp frees slots); 0 when the wait ran out, the
 * caller then counts its events with mks_dev_ring_lose().  One check per
 * task for all its events: each check is a branch region on the worker. */
static __device__ __forceinline__ int mks_dev_ring_reserve(struct mks_dev_ring *r, uint32_t n)
{
    uint32_t h = r->head;
    if (__builtin_expect(h - *(volatile uint32_t *)&r->tail > MKS_DEV_RING_SLOTS - n, 0))
        return mks_dev_ring_wait(r, h + n - 1u, MKS_EV_COUNT) != 0;
    return 1;
}

static __device__ __forceinline__ struct mks_hook_ctx *mks_dev_ring_next(struct mks_dev_ring *r)
{
    return &r->slot[r->head % MKS_DEV_RING_SLOTS];
}

static __device__ __forceinline__ void mks_dev_ring_lose(struct mks_dev_ring *r, uint32_t ev,
                                                         uint32_t n)
{
    if (ev < MKS_EV_COUNT) {
        *(volatile uint32_t *)&r->lost[ev] = r->lost[ev] + n;
        *(volatile uint32_t *)&r->waits = r->waits + 1u;
    }
}

/* Publish the slot filled after mks_dev_ring_slot() or _next(): a release
 * store of the head at block scope orders the slot's stores before it
 * without a full fence. */
static __device__ __forceinline__ void mks_dev_ring_push(struct mks_dev_ring *r)
{
    uint32_t a = (uint32_t)__cvta_generic_to_shared(&r->head);
    asm volatile("st.release.cta.shared.u32 [%0], %1;" : : "r"(a), "r"(r->head + 1u) : "memory");
}

/* Ask the monitor warp to return once the ring is drained. */
static __device__ __forceinline__ void mks_dev_ring_stop(struct mks_dev_ring *r)
{
    __threadfence_block();
    *(volatile uint32_t *)&r->stop = 1u;
}

/* The monitor warp's loop, called by all 32 lanes of one warp (under a
 * branch ptxas knows to be warp-uniform, see "the gate bit"): runs the
 * programs of the queued events, one event per lane, counts coverage and
 * the worker's lost events, returns after mks_dev_ring_stop() and an empty
 * ring.  worker: the worker whose events the ring carries. */
extern "C" __device__ void mks_dev_monitor_warp(const struct mks_dev_rt *rt,
                                                struct mks_dev_ring *r, uint32_t worker);

static __device__ __forceinline__ void mks_dev_worker_refresh(const struct mks_dev_rt *rt,
                                                              struct mks_dev_worker *w)
{
    w->mask = *(const volatile uint32_t *)rt->mask;
    w->left = MKS_DEV_REFRESH;
}

/* A word the pump writes, from the L2 (never a stale L1 line). */
static __device__ __forceinline__ uint32_t mks_dev_ld_gpu(const uint32_t *p)
{
    uint32_t v;
    asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

static __device__ __forceinline__ void mks_dev_hcache_init(struct mks_dev_hcache *hc)
{
    uint64_t *z = (uint64_t *)hc;
    for (uint32_t i = 0; i < sizeof(*hc) / 8; i++)
        z[i] = 0;
}

static __device__ __forceinline__ void mks_dev_worker_init(const struct mks_dev_rt *rt,
                                                           struct mks_dev_worker *w)
{
    /* The change counter before the mask: a change between the two reads
     * is seen again at the next tasks. */
    w->gen = w->next_gen = rt->gen ? *(const volatile uint32_t *)rt->gen : 0u;
    w->hc = 0;
    w->maskp = rt->mask;
    w->genp = rt->gen;
    mks_dev_worker_refresh(rt, w);
}

/* For inline runs through hc (mks_dev_hook_run_cached()). */
static __device__ __forceinline__ void mks_dev_worker_init_cached(const struct mks_dev_rt *rt,
                                                                  struct mks_dev_worker *w,
                                                                  struct mks_dev_hcache *hc)
{
    mks_dev_hcache_init(hc);
    mks_dev_worker_init(rt, w);
    w->hc = hc;
}

/* Once per task: the change counter loaded last time is compared now, and
 * the next is loaded for the next task.  No call and no branch region: on a
 * change the mask is re-read (predicated loads) and marked MKS_DEV_SYNC;
 * the flush waits for the next event's slow path. */
static __device__ __forceinline__ void mks_dev_worker_task(const struct mks_dev_rt *rt,
                                                           struct mks_dev_worker *w)
{
    uint32_t g = w->next_gen;
    (void)rt;
    w->next_gen = mks_dev_ld_gpu(w->genp);
    if (__builtin_expect(g != w->gen, 0)) {
        w->gen = g;
        w->mask = mks_dev_ld_gpu(w->maskp) | MKS_DEV_SYNC;
    }
}

/* Leave the epoch with the cache's coverage counted; call before the worker
 * thread returns (the queue's monitor thread needs nothing). */
static __device__ __forceinline__ void mks_dev_worker_exit(const struct mks_dev_rt *rt,
                                                           struct mks_dev_worker *w)
{
    if (w->hc)
        w->mask = mks_dev_worker_changed(rt, w->hc);
}

/* The per-event test of MKS_DEV_HOOK_IF, in two steps so that the fast path
 * is one bit test and one branch around everything else (the compiler
 * wraps each branch around a call in a reconvergence region, which costs
 * tens of cycles even when not taken): mks_dev_hook_hit() tests the event's
 * bit and MKS_DEV_SYNC together; mks_dev_hook_slow(), reached only then,
 * flushes after a change and says whether the event's bit is set. */
static __device__ __forceinline__ int mks_dev_hook_hit(const struct mks_dev_worker *w, uint32_t ev)
{
    return __builtin_expect((w->mask & ((1u << ev) | MKS_DEV_SYNC)) != 0, 0);
}

static __device__ __forceinline__ int mks_dev_hook_slow(const struct mks_dev_rt *rt,
                                                        struct mks_dev_worker *w, uint32_t ev)
{
    if (w->mask & MKS_DEV_SYNC) {
        w->mask &= ~MKS_DEV_SYNC;
        if (w->hc)
            mks_dev_worker_changed(rt, w->hc);
    }
    return (w->mask >> ev) & 1u;
}

/* True when programs may be attached at ev: the cheap check. */
static __device__ __forceinline__ int mks_dev_attached(const struct mks_dev_rt *rt,
                                                       struct mks_dev_worker *w, uint32_t ev)
{
    if (__builtin_expect(--w->left == 0, 0))
        mks_dev_worker_refresh(rt, w);
    return __builtin_expect((w->mask >> ev) & 1u, 0);
}

#ifdef MKS_HOOKS_DISABLED
#define MKS_DEV_HOOK_IF(rt, w, ev) if (0)
#else
/* Two nested ifs, the statement after the macro the inner one's body: do
 * not follow it with `else`. */
#define MKS_DEV_HOOK_IF(rt, w, ev)                                                                 \
    if (mks_dev_hook_hit((w), (ev)))                                                               \
        if (mks_dev_hook_slow((rt), (w), (ev)))
#endif

#ifdef __cplusplus
extern "C" {
#endif
/* Host: create the device mirror of rt's control block and start moving
 * programs and maps in the pump thread.  Call once, before launching the
 * kernel; -ENODEV (with a line on stderr) when CUDA fails. */
int mks_rt_cuda_enable(struct mks_rt *rt, struct mks_dev_rt *dev_p);
/* Host: let the pump fold "hooks attached" into the words the workers poll
 * (see MKS_DEV_GATE_ON): words[i * stride_bytes / 8] for i < n_words, in
 * device memory, 8-aligned.  The pump writes their high halves now and
 * after every change of the attach mask.  Once, after
 * mks_rt_cuda_enable(); -EINVAL on bad arguments, -EBUSY if already set. */
int mks_rt_cuda_gate(struct mks_rt *rt, uint64_t *words, uint32_t n_words, uint32_t stride_bytes);
#ifdef __cplusplus
}
#endif

#endif /* MKSCOPE_DEVHOOK_CUH */

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
    uint32_t ctl;     /* bit e: hook e's list read at entry holds a CONTROL program */
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
/* The same for decoded text (mks_vm_decode(); what the device mirror's
 * program slots hold): on this thread, and with the whole warp calling, one
 * run per lane with run != 0, lanes of the same key running the same text
 * side by side (the monitor warp's runner).  Answers as mks_vm_run(). */
extern "C" __device__ int mks_dev_vm_run_decoded(const struct mks_vm_env *env, uint64_t r1,
                                                 uint64_t r2, uint64_t *r0_p, uint64_t *insns_p);
extern "C" __device__ int mks_dev_vm_run_warp(const struct mks_vm_env *env, int run, uint32_t key,
                                              uint64_t r1, uint64_t r2, uint64_t *r0_p,
                                              uint64_t *insns_p);

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
 * The worker writes compact records into a per-block shared-memory ring
 * (struct mks_dev_ring); one warp of the same block runs
 * mks_dev_monitor_warp(), which turns the records back into the full
 * struct mks_hook_ctx of each event and runs up to 32 events at a time, one
 * per lane.  A record holds what an event adds, not the whole context:
 *
 *   TASK   what the task is (class, flags, generations, step, tiles,
 *          t_ready), once per task, and optionally its TASK_ASSIGN (time,
 *          queue depth, value); every later record of the worker belongs
 *          to the task of the last TASK record;
 *   DONE   the task's TASK_START, TASK_END and one DEP_RELEASE together:
 *          the three events of a task that ran without other events in
 *          between (the usual case) cost one record;
 *   EV     any single event with its own fields (dependency, transfer,
 *          queue depth, value) and the task's t_start / t_end.
 *
 * Slots are 64 bytes, four 16-byte chunks written from registers with
 * 16-byte shared stores; a record writes the chunks it uses and says which
 * in its first word, so the monitor never reads a stale chunk.  The worker
 * publishes what it wrote with one release store of the head per task
 * (mks_dev_emit_flush(), at the task's end and before anything that may
 * block), not a fence per event.  The emitter (struct mks_dev_emit, in the
 * worker thread's registers) keeps a count of slots known free, so the
 * ring's tail is read only when that count runs out; a full ring makes the
 * worker publish and wait, at most MKS_DEV_RING_SPINS polls of the tail,
 * and counts the wait in `waits`; only after that is the record's event
 * (every event of it) counted lost, so ran + lost = eligible always holds.
 * Events of a task whose TASK record was lost are counted lost too (their
 * context would name the previous task).
 *
 * Order: the monitor warp runs a batch's events side by side, so an event
 * whose programs share a per-worker map (MKS_MAP_PERWORKER_ARRAY: state
 * kept between two events of one worker, as depwait's wait begin) with an
 * earlier event of the same batch goes into the next batch; records are
 * otherwise run in the order written. */
#define MKS_DEV_RING_SLOTS 64u /* 4 KiB of records per block */
#ifndef MKS_DEV_RING_SPINS
#define MKS_DEV_RING_SPINS 4096u /* about 1 ms with the 256 ns sleep below */
#endif

/* Record kinds, the low byte of a record's first word (an EV record's kind
 * is its event, enum mks_hook_event). */
#define MKS_DEV_REC_TASK 0x10u
#define MKS_DEV_REC_DONE 0x11u
/* Second byte.  EV: which of chunks 1..3 were written (bit i: chunk i + 1).
 * TASK: MKS_DEV_REC_ASSIGN when chunk 3 holds a TASK_ASSIGN.  DONE: the
 * events it holds. */
#define MKS_DEV_REC_ASSIGN  0x1u
#define MKS_DEV_DONE_START   0x1u
#define MKS_DEV_DONE_END     0x2u
#define MKS_DEV_DONE_RELEASE 0x4u

/* The layouts, as 32-bit words of the four chunks (c[i].x .. .w):
 *
 * TASK  c0 = kind | assign << 8 | ctx.flags << 16, task_class, t_ready
 *       c1 = task_gen, req_gen
 *       c2 = step, tile_x, tile_y, TASK_ASSIGN's value (32 bits)
 *       c3 = TASK_ASSIGN's t_now, its queue_depth, 0
 * EV    c0 = event | chunks << 8 | dep_class << 16, queue_depth, t_now
 *       c1 = value, dep_event
 *       c2 = comm_gen, peer_rank, worker (~0: the ring's worker)
 *       c3 = t_start, t_end
 * DONE  c0 = kind | events << 8 | dep_class << 16, START's queue_depth,
 *            t_start (START's t_now)
 *       c1 = the task's t_end (END's t_now; 0 before it ended), RELEASE's t_now
 *       c2 = RELEASE's value, its dep_event
 * Times and 64-bit fields are two words, low first.  The context the
 * programs see is the event's: fields the record does not give are 0, as a
 * runtime that fills only what the event has (rank, worker and sm are the
 * ring's; abi_version and size the runtime's). */
struct mks_dev_rec {
    uint4 c[4];
};

struct mks_dev_ring {
    struct mks_dev_rec slot[MKS_DEV_RING_SLOTS];
    struct mks_hook_ctx ctx[32];  /* the monitor warp's contexts, one per lane */
    uint4 cur[3];                 /* the monitor's copy of the last TASK record */
    uint32_t head;                /* published by the worker */
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
    for (uint32_t i = 0; i < 3; i++)
        r->cur[i] = make_uint4(0, 0, 0, 0);
}

/* Publish slots written before `head`: a release store at block scope
 * orders the slots' stores before it. */
static __device__ __forceinline__ void mks_dev_ring_publish(struct mks_dev_ring *r, uint32_t head)
{
    uint32_t a = (uint32_t)__cvta_generic_to_shared(&r->head);
    asm volatile("st.release.cta.shared.u32 [%0], %1;" : : "r"(a), "r"(head) : "memory");
}

/* Ask the monitor warp to return once the ring is drained. */
static __device__ __forceinline__ void mks_dev_ring_stop(struct mks_dev_ring *r)
{
    __threadfence_block();
    *(volatile uint32_t *)&r->stop = 1u;
}

/* The worker's side: one per worker thread, in registers. */
struct mks_dev_emit {
    struct mks_dev_ring *r;
    uint32_t head;           /* next slot to write */
    uint32_t pub;            /* head last published */
    uint32_t room;           /* slots known free from head on */
    uint32_t mask;           /* the events attached (the gate's mask) */
    uint32_t pend;           /* MKS_DEV_DONE_START / _END held for the next DONE record */
    uint32_t depth;          /* the held START's queue depth */
    uint32_t lost_task;      /* the current task's TASK record was lost */
    uint64_t t_start, t_end; /* the current task's, 0 until known */
};

static __device__ __forceinline__ void mks_dev_emit_init(struct mks_dev_emit *e,
                                                         struct mks_dev_ring *r)
{
    e->r = r;
    e->head = e->pub = r ? r->head : 0u;
    e->room = MKS_DEV_RING_SLOTS;
    e->mask = e->pend = e->depth = e->lost_task = 0;
    e->t_start = e->t_end = 0;
}

/* Publish what was written since the last publication. */
static __device__ __forceinline__ void mks_dev_emit_publish(struct mks_dev_emit *e)
{
    if (e->head != e->pub) {
        mks_dev_ring_publish(e->r, e->head);
        e->pub = e->head;
    }
}

/* Out of line, and taking no pointer to the emitter, so that the emitter
 * stays in registers: the ring is full up to head; wait (bounded) for the
 * monitor warp; returns the slots free, 0 when the wait ran out. */
static __device__ __noinline__ uint32_t mks_dev_ring_wait(struct mks_dev_ring *r, uint32_t head)
{
    uint32_t room;
    *(volatile uint32_t *)&r->waits = r->waits + 1u;
#pragma unroll 1
    for (uint32_t n = 0; n < MKS_DEV_RING_SPINS; n++) {
        __nanosleep(256);
        room = MKS_DEV_RING_SLOTS - (head - *(volatile uint32_t *)&r->tail);
        if (room)
            return room;
    }
    return 0;
}

/* Count events lost (ev < MKS_EV_COUNT); the monitor warp reports them. */
static __device__ __noinline__ void mks_dev_ring_lose(struct mks_dev_ring *r, uint32_t ev,
                                                      uint32_t n)
{
    if (ev < MKS_EV_COUNT) {
        *(volatile uint32_t *)&r->lost[ev] = r->lost[ev] + n;
        *(volatile uint32_t *)&r->waits = r->waits + 1u; /* the monitor sweeps losses then */
    }
}

static __device__ __forceinline__ void mks_dev_emit_lose(struct mks_dev_emit *e, uint32_t ev,
                                                         uint32_t n)
{
    mks_dev_ring_lose(e->r, ev, n);
}

/* The next slot, or NULL when the ring stayed full (the caller counts its
 * events lost). */
static __device__ __forceinline__ uint4 *mks_dev_emit_slot(struct mks_dev_emit *e)
{
    if (__builtin_expect(e->room == 0, 0)) {
        e->room = MKS_DEV_RING_SLOTS - (e->head - *(volatile uint32_t *)&e->r->tail);
        if (!e->room) {
            /* full: publish (the monitor sees only what is published) and wait */
            mks_dev_emit_publish(e);
            e->room = mks_dev_ring_wait(e->r, e->head);
            if (!e->room)
                return 0;
        }
    }
    uint4 *s = e->r->slot[e->head % MKS_DEV_RING_SLOTS].c;
    e->head++;
    e->room--;
    return s;
}

/* A 16-byte shared store that the compiler does not count as a memory
 * access (no "memory" clobber): it need not keep the worker's loads of its
 * own task data in order with the record's stores, which it would have to
 * through a generic pointer that may alias them.  The release store of the
 * head, which has the clobber, orders the records before it. */
static __device__ __forceinline__ void mks_dev_sts128(uint4 *p, uint4 v)
{
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};"
                 :
                 : "r"(a), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
}

static __device__ __forceinline__ uint32_t mks_dev_lo(uint64_t v)
{
    return (uint32_t)v;
}
static __device__ __forceinline__ uint32_t mks_dev_hi(uint64_t v)
{
    return (uint32_t)(v >> 32);
}

/* The DONE record of the held START / END and, when rel, a DEP_RELEASE. */
static __device__ __forceinline__ void mks_dev_emit_done(struct mks_dev_emit *e, uint32_t rel,
                                                         uint64_t t_now, uint32_t dep_class,
                                                         uint64_t value, uint64_t dep_event)
{
    uint32_t bits = e->pend | (rel ? MKS_DEV_DONE_RELEASE : 0u);
    e->pend = 0;
    if (!bits)
        return;
    uint4 *s = e->lost_task ? 0 : mks_dev_emit_slot(e);
    if (!s) {
        if (bits & MKS_DEV_DONE_START)
            mks_dev_emit_lose(e, MKS_EV_TASK_START, 1);
        if (bits & MKS_DEV_DONE_END)
            mks_dev_emit_lose(e, MKS_EV_TASK_END, 1);
        if (bits & MKS_DEV_DONE_RELEASE)
            mks_dev_emit_lose(e, MKS_EV_DEP_RELEASE, 1);
        return;
    }
    const uint64_t te = e->t_end; /* the task's end, 0 until it ended */
    mks_dev_sts128(&s[0], make_uint4(MKS_DEV_REC_DONE | bits << 8 | dep_class << 16, e->depth,
                                     mks_dev_lo(e->t_start), mks_dev_hi(e->t_start)));
    mks_dev_sts128(
        &s[1], make_uint4(mks_dev_lo(te), mks_dev_hi(te), mks_dev_lo(t_now), mks_dev_hi(t_now)));
    if (rel)
        mks_dev_sts128(&s[2], make_uint4(mks_dev_lo(value), mks_dev_hi(value),
                                         mks_dev_lo(dep_event), mks_dev_hi(dep_event)));
}

/* A new task: its TASK record, with its TASK_ASSIGN when `assign` (and
 * attached).  The events that follow, up to the next call, are its. */
static __device__ __forceinline__ void
mks_dev_emit_task(struct mks_dev_emit *e, uint32_t flags, uint32_t task_class, uint64_t t_ready,
                  uint64_t task_gen, uint64_t req_gen, uint32_t step, uint32_t tile_x,
                  uint32_t tile_y, int assign, uint64_t t_assign, uint32_t assign_depth,
                  uint32_t assign_value)
{
    if (e->pend)
        mks_dev_emit_done(e, 0, 0, 0, 0, 0);
    e->t_start = e->t_end = 0;
    assign = assign && (e->mask >> MKS_EV_TASK_ASSIGN) & 1u;
    uint4 *s = mks_dev_emit_slot(e);
    e->lost_task = s == 0;
    if (!s) {
        if (assign)
            mks_dev_emit_lose(e, MKS_EV_TASK_ASSIGN, 1);
        return;
    }
    mks_dev_sts128(
        &s[0], make_uint4(MKS_DEV_REC_TASK | (assign ? MKS_DEV_REC_ASSIGN << 8 : 0u) | flags << 16,
                          task_class, mks_dev_lo(t_ready), mks_dev_hi(t_ready)));
    mks_dev_sts128(&s[1], make_uint4(mks_dev_lo(task_gen), mks_dev_hi(task_gen),
                                     mks_dev_lo(req_gen), mks_dev_hi(req_gen)));
    mks_dev_sts128(&s[2], make_uint4(step, tile_x, tile_y, assign_value));
    if (assign)
        mks_dev_sts128(&s[3],
                       make_uint4(mks_dev_lo(t_assign), mks_dev_hi(t_assign), assign_depth, 0u));
}

/* TASK_START at t (its queue depth): held, to go with the task's end
 * into one DONE record unless another event comes first. */
static __device__ __forceinline__ void mks_dev_emit_start(struct mks_dev_emit *e, uint64_t t,
                                                          uint32_t depth)
{
    e->t_start = t;
    e->depth = depth;
    if ((e->mask >> MKS_EV_TASK_START) & 1u)
        e->pend |= MKS_DEV_DONE_START;
}

/* TASK_END at t: held like TASK_START. */
static __device__ __forceinline__ void mks_dev_emit_end(struct mks_dev_emit *e, uint64_t t)
{
    if (e->pend & MKS_DEV_DONE_END) /* a second end without a release between */
        mks_dev_emit_done(e, 0, 0, 0, 0, 0);
    e->t_end = t;
    if ((e->mask >> MKS_EV_TASK_END) & 1u)
        e->pend |= MKS_DEV_DONE_END;
}

/* Any event of the current task with its own fields (an EV record); the
 * held START / END go first. */
static __device__ __forceinline__ void mks_dev_emit_event(struct mks_dev_emit *e, uint32_t ev,
                                                          uint64_t t_now, uint32_t dep_class,
                                                          uint32_t queue_depth, uint64_t value,
                                                          uint64_t dep_event, uint64_t comm_gen,
                                                          uint32_t peer_rank)
{
    if (ev >= MKS_EV_COUNT || !((e->mask >> ev) & 1u))
        return;
    if (e->pend)
        mks_dev_emit_done(e, 0, 0, 0, 0, 0);
    uint4 *s = e->lost_task ? 0 : mks_dev_emit_slot(e);
    if (!s) {
        mks_dev_emit_lose(e, ev, 1);
        return;
    }
    const uint32_t chunks = 0x7u;
    mks_dev_sts128(&s[0], make_uint4(ev | chunks << 8 | dep_class << 16, queue_depth,
                                     mks_dev_lo(t_now), mks_dev_hi(t_now)));
    mks_dev_sts128(&s[1], make_uint4(mks_dev_lo(value), mks_dev_hi(value), mks_dev_lo(dep_event),
                                     mks_dev_hi(dep_event)));
    mks_dev_sts128(&s[2],
                   make_uint4(mks_dev_lo(comm_gen), mks_dev_hi(comm_gen), peer_rank, 0xffffffffu));
    mks_dev_sts128(&s[3], make_uint4(mks_dev_lo(e->t_start), mks_dev_hi(e->t_start),
                                     mks_dev_lo(e->t_end), mks_dev_hi(e->t_end)));
}

/* A DEP_RELEASE of the current task: with the held START / END in one
 * DONE record (dependency and value only; a release with a transfer's
 * fields, comm_gen and peer, goes through mks_dev_emit_event()). */
static __device__ __forceinline__ void mks_dev_emit_release(struct mks_dev_emit *e, uint64_t t_now,
                                                            uint32_t dep_class, uint64_t value,
                                                            uint64_t dep_event)
{
    mks_dev_emit_done(e, (e->mask >> MKS_EV_DEP_RELEASE) & 1u, t_now, dep_class, value, dep_event);
}

/* Write what is held and publish: at a task's end and before the worker
 * may block (a wait, a sleep), so that the monitor warp, and through it
 * the agent, sees a stuck worker's events. */
static __device__ __forceinline__ void mks_dev_emit_flush(struct mks_dev_emit *e)
{
    if (e->pend)
        mks_dev_emit_done(e, 0, 0, 0, 0, 0);
    mks_dev_emit_publish(e);
}

/* The monitor warp's loop, called by all 32 lanes of one warp (under a
 * branch ptxas knows to be warp-uniform, see "the gate bit"): runs the
 * programs of the ring's events, one event per lane, counts coverage and
 * the worker's lost events, returns after mks_dev_ring_stop() and an empty
 * ring.  worker: the hook slot whose events the ring carries (the epoch
 * entry and coverage are its; programs see ctx->worker, which an EV record
 * may name differently). */
extern "C" __device__ void mks_dev_monitor_warp(const struct mks_dev_rt *rt, struct mks_dev_ring *r,
                                                uint32_t worker);

/* The same monitor warp with each lane running its programs alone, as
 * before the lanes ran in step: for measuring the two side by side
 * (bench/gpu/devhooks_cost.cu). */
extern "C" __device__ void mks_dev_monitor_warp_lanes(const struct mks_dev_rt *rt,
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

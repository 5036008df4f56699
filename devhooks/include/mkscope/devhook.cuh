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
 * checks the worker's cached copy of the attach mask, a register test and a
 * predicted branch; the cached mask is refreshed from global memory only
 * every MKS_DEV_REFRESH events (or when the runtime calls
 * mks_dev_worker_refresh() at a point where it touches global memory
 * anyway), so a detached hook never costs a global load per event.  A newly
 * attached program therefore starts within MKS_DEV_REFRESH events of each
 * worker.
 *
 * Attached programs run in one of two places:
 *   inline     the worker thread calls mks_dev_hook_run() itself;
 *   off-path   the worker writes the context into a slot of a shared-memory
 *              queue (mks_dev_queue_slot/push, a few shared stores) and a
 *              spare "monitor" thread of the block, in another warp, runs
 *              mks_dev_monitor() until the queue is stopped.  When the queue
 *              is full the worker does not wait: the event is counted and
 *              reported as eligible and lost in coverage.
 *
 *     struct mks_dev_worker w;
 *     mks_dev_worker_init(&rt, &w);
 *     for (each task) {
 *         MKS_DEV_HOOK_IF(&rt, &w, MKS_EV_TASK_START) {
 *             struct mks_hook_ctx c = {...};   // filled only when attached
 *             mks_dev_hook_run(&rt, &c);
 *         }
 *         ...
 *     }
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
};

struct mks_dev_worker {
    uint32_t mask;
    uint32_t left; /* events until the next refresh */
};

/* Run the attached programs of ctx->event on this thread; returns the
 * clamped priority hint of CONTROL programs. */
extern "C" __device__ int32_t mks_dev_hook_run(const struct mks_dev_rt *rt,
                                               struct mks_hook_ctx *ctx);

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

static __device__ __forceinline__ void mks_dev_worker_refresh(const struct mks_dev_rt *rt,
                                                              struct mks_dev_worker *w)
{
    w->mask = *(const volatile uint32_t *)rt->mask;
    w->left = MKS_DEV_REFRESH;
}

static __device__ __forceinline__ void mks_dev_worker_init(const struct mks_dev_rt *rt,
                                                           struct mks_dev_worker *w)
{
    mks_dev_worker_refresh(rt, w);
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
#define MKS_DEV_HOOK_IF(rt, w, ev) if (mks_dev_attached((rt), (w), (ev)))
#endif

#ifdef __cplusplus
extern "C" {
#endif
/* Host: create the device mirror of rt's control block and start moving
 * programs and maps in the pump thread.  Call once, before launching the
 * kernel; -ENODEV (with a line on stderr) when CUDA fails. */
int mks_rt_cuda_enable(struct mks_rt *rt, struct mks_dev_rt *dev_p);
#ifdef __cplusplus
}
#endif

#endif /* MKSCOPE_DEVHOOK_CUH */

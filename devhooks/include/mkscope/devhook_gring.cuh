/*
 * Monitor warps that live outside the worker's block: a global-memory ring
 * per producer and a monitor kernel beside the megakernel.
 *
 * The monitor warp of devhook.cuh shares its worker's block: a 64-slot ring
 * in shared memory and one more warp.  A runtime whose worker blocks have
 * neither to spare (MPK: every thread of a worker block runs the task bodies,
 * which synchronise the whole block and stride by blockDim.x, and the static
 * shared memory is spent) hands its events over through device memory
 * instead:
 *
 *   producer   one thread (a worker's thread 0, a scheduler warp's lane 0)
 *              owns one struct mks_dev_gring and a struct mks_dev_gprod in
 *              its registers.  Per event it takes a slot
 *              (mks_dev_gring_next), stores the context into it
 *              (mks_dev_gring_put: eight 16-byte stores) and counts it
 *              (mks_dev_gring_commit).  The consumer sees committed slots
 *              only after mks_dev_gring_publish(), which stores the head;
 *              the slots' stores must be ordered before that store by a
 *              gpu-scope fence.  A runtime that already makes one per task
 *              (MPK's release of a task's trigger event) publishes with
 *              mks_dev_gring_publish_after_fence(), at no cost of its own;
 *              mks_dev_gring_publish() makes the fence itself.
 *   consumer   mks_dev_gmonitor_kernel(), launched on a stream of its own
 *              on SMs the megakernel leaves free (mks_rt_cuda_gmonitor_launch):
 *              each warp serves a fixed set of rings, takes up to 32
 *              published events of one ring at a time, one per lane, runs
 *              their programs in the ring's hook slot (entering that slot's
 *              epoch, as a block's monitor warp does) and adds the
 *              coverage.  Each hook slot has exactly one runner, the warp
 *              that owns its ring, so per-worker maps and coverage keep one
 *              writer each.
 *
 * Nothing is lost silently: a producer that finds its ring full publishes
 * what it holds and waits, bounded (MKS_DEV_GRING_SPINS polls 256 ns apart);
 * when the wait runs out the event counts as eligible and lost, so ran +
 * lost = eligible, and until the consumer moves again further events of a
 * full ring are counted lost without a wait.  Each ring ends when its producer stops it
 * (mks_dev_gring_stop) and its consumer has drained it; the kernel returns
 * when every ring it serves has ended.
 */
#ifndef MKSCOPE_DEVHOOK_GRING_CUH
#define MKSCOPE_DEVHOOK_GRING_CUH

#include <stdint.h>

#include "mkscope/devhook.cuh"
#include "mkscope/hook_abi.h"

/* 32 KiB of device memory per ring: 256 events, several tasks' worth even
 * while the monitors lag a step's burst. */
#ifndef MKS_DEV_GRING_SLOTS
#define MKS_DEV_GRING_SLOTS 256u
#endif
#ifndef MKS_DEV_GRING_SPINS
#define MKS_DEV_GRING_SPINS 4096u /* about 1 ms with the 256 ns sleep */
#endif

struct mks_dev_gring {
    uint32_t head;      /* published events; written by the producer */
    uint32_t pad0[31];  /* head and tail on lines of their own */
    uint32_t tail;      /* consumed events; written by the consumer */
    uint32_t pad1[31];
    uint32_t stop;      /* set by the producer when it is done */
    uint32_t waits;     /* bumped by the producer when it waited or lost events */
    uint32_t slot_id;   /* hook slot (worker id) whose coverage the events count to */
    uint32_t pad2;
    uint32_t lost[MKS_EV_COUNT]; /* events given up after a wait, per event */
    uint32_t pad3[32 - 4 - MKS_EV_COUNT];
    struct mks_hook_ctx slot[MKS_DEV_GRING_SLOTS];
};
#ifdef __cplusplus
static_assert(sizeof(struct mks_hook_ctx) == 128 && MKS_EV_COUNT <= 28,
              "a gring slot is one 128-byte line; lost[] fits the header line");
static_assert((MKS_DEV_GRING_SLOTS & (MKS_DEV_GRING_SLOTS - 1)) == 0, "power of two");
#endif

/* The producer's registers. */
struct mks_dev_gprod {
    struct mks_dev_gring *r;
    uint32_t head;      /* events committed (published or not) */
    uint32_t published; /* head last stored */
    uint32_t tail;      /* the consumer's tail as last read */
    uint32_t starved;   /* a wait ran out and the ring has not moved since */
};

static __device__ __forceinline__ void mks_dev_gprod_init(struct mks_dev_gprod *p,
                                                          struct mks_dev_gring *r)
{
    p->r = r;
    p->head = p->published = p->tail = *(volatile uint32_t *)&r->head;
    p->starved = 0;
}

static __device__ __forceinline__ uint32_t mks_dev_gring_ld(const uint32_t *a)
{
    uint32_t v;
    asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(a) : "memory");
    return v;
}

static __device__ __forceinline__ void mks_dev_gring_st(uint32_t *a, uint32_t v)
{
    asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" : : "l"(a), "r"(v) : "memory");
}

/* Publish every committed event: the caller has ordered their slot stores
 * before this point with a gpu-scope fence or release of its own. */
static __device__ __forceinline__ void mks_dev_gring_publish_after_fence(struct mks_dev_gprod *p)
{
    if (p->published != p->head) {
        mks_dev_gring_st(&p->r->head, p->head);
        p->published = p->head;
    }
}

/* Publish every committed event, fencing first. */
static __device__ __forceinline__ void mks_dev_gring_publish(struct mks_dev_gprod *p)
{
    if (p->published != p->head) {
        __threadfence();
        mks_dev_gring_st(&p->r->head, p->head);
        p->published = p->head;
    }
}

/* The ring was full: publish, then wait (bounded) for room; NULL when the
 * wait ran out, the event then counted lost for ev.  After a wait ran out
 * the producer does not wait again until the consumer has moved: a monitor
 * kernel that is not running (no SM left for it) costs lost events, not a
 * millisecond per event. */
static __device__ __noinline__ struct mks_hook_ctx *mks_dev_gring_wait(struct mks_dev_gprod *p,
                                                                       uint32_t ev)
{
    struct mks_dev_gring *r = p->r;
    const uint32_t spins = p->starved ? 0u : MKS_DEV_GRING_SPINS;
    mks_dev_gring_publish(p);
    if (!p->starved)
        mks_dev_gring_st(&r->waits, *(volatile uint32_t *)&r->waits + 1u);
#pragma unroll 1
    for (uint32_t n = 0; n < spins; n++) {
        __nanosleep(256);
        p->tail = mks_dev_gring_ld(&r->tail);
        if (p->head - p->tail < MKS_DEV_GRING_SLOTS)
            return &r->slot[p->head % MKS_DEV_GRING_SLOTS];
    }
    p->starved = 1;
    if (ev < MKS_EV_COUNT) {
        mks_dev_gring_st(&r->lost[ev], *(volatile uint32_t *)&r->lost[ev] + 1u);
        __threadfence(); /* the loss before the wait count the consumer sweeps on */
        mks_dev_gring_st(&r->waits, *(volatile uint32_t *)&r->waits + 1u);
    }
    return 0;
}

/* The slot for the next event of kind ev, or NULL (counted lost).  The
 * consumer's tail is read only when the copy in p says the ring is full. */
static __device__ __forceinline__ struct mks_hook_ctx *mks_dev_gring_next(struct mks_dev_gprod *p,
                                                                          uint32_t ev)
{
    if (__builtin_expect(p->head - p->tail >= MKS_DEV_GRING_SLOTS, 0)) {
        p->tail = mks_dev_gring_ld(&p->r->tail);
        if (p->head - p->tail >= MKS_DEV_GRING_SLOTS)
            return mks_dev_gring_wait(p, ev);
        p->starved = 0;
    }
    return &p->r->slot[p->head % MKS_DEV_GRING_SLOTS];
}

/* Store a context into a slot from mks_dev_gring_next(): 16-byte stores
 * that go to the L2, where the consumer on another SM reads them. */
static __device__ __forceinline__ void mks_dev_gring_put(struct mks_hook_ctx *s,
                                                         const struct mks_hook_ctx *c)
{
    const uint4 *src = (const uint4 *)c;
    uint4 *dst = (uint4 *)s;
#pragma unroll
    for (uint32_t i = 0; i < sizeof(*c) / sizeof(uint4); i++)
        __stcg(dst + i, src[i]);
}

static __device__ __forceinline__ void mks_dev_gring_commit(struct mks_dev_gprod *p)
{
    p->head++;
}

/* The producer is done: publish (fenced) and let the consumer return once
 * it has drained the ring. */
static __device__ __forceinline__ void mks_dev_gring_stop(struct mks_dev_gprod *p)
{
    mks_dev_gring_publish(p);
    __threadfence();
    mks_dev_gring_st(&p->r->stop, 1u);
}

/* The consumer: one warp of the monitor kernel serves rings
 * first, first + step, ... below n_rings, until each has stopped and been
 * drained. */
extern "C" __device__ void mks_dev_gmonitor_warp(const struct mks_dev_rt *rt,
                                                 struct mks_dev_gring *rings, uint32_t n_rings,
                                                 uint32_t first, uint32_t step);

#ifdef __cplusplus
extern "C" {
#endif
/* Host: n_rings zeroed rings in device memory, ring i counting to hook slot
 * i (slot_ids may map them otherwise, NULL: identity); free with cudaFree.
 * -EINVAL on bad arguments, -ENOMEM / -ENODEV when CUDA fails (one line on
 * stderr). */
int mks_rt_cuda_grings_create(uint32_t n_rings, const uint32_t *slot_ids,
                              struct mks_dev_gring **rings_p);
/* Host: launch the monitor kernel on stream (a cudaStream_t) with n_blocks
 * blocks of warps_per_block warps, serving n_rings rings.  The blocks must
 * be resident beside the megakernel (SMs it leaves free): the caller sizes
 * them; -EINVAL / -ENODEV with one line on stderr. */
int mks_rt_cuda_gmonitor_launch(const struct mks_dev_rt *dev, struct mks_dev_gring *rings,
                                uint32_t n_rings, uint32_t n_blocks, uint32_t warps_per_block,
                                void *stream);
/* Host: mark rings stopped from the host (a producer that never ran, or
 * died), on stream, so the monitor kernel can return. */
int mks_rt_cuda_grings_stop(struct mks_dev_gring *rings, uint32_t n_rings, void *stream);
#ifdef __cplusplus
}
#endif

#endif /* MKSCOPE_DEVHOOK_GRING_CUH */

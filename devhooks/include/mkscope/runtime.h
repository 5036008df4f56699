/*
 * The runtime side of devhooks: what a megakernel runtime links against.
 *
 * A runtime creates one mks_rt per rank at init.  That creates the rank's
 * control block in POSIX shared memory (named from the job and the rank) where
 * the agent, a separate process with no CUDA context, installs verified
 * programs, flips epochs and reads maps.  The runtime then calls MKS_HOOK() at
 * every task transition of its scheduler and workers.
 *
 * Cost: with no program attached to an event the hook is one load of a word in
 * process memory and a predicted branch.  Compile the hooks out entirely with
 * -DMKS_HOOKS_DISABLED (the "hooks compiled out" build variant).
 *
 * A pump thread started by mks_rt_create() watches the agent's lease: if the
 * agent stops renewing it for longer than one epoch, every hook falls back to
 * detached and the application runs on unharmed.  On the GPU the same thread
 * moves programs to the device and map/ring contents back each epoch.
 */
#ifndef MKSCOPE_RUNTIME_H
#define MKSCOPE_RUNTIME_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "mkscope/hook_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mks_rt;

struct mks_rt_opts {
    size_t sz;             /* sizeof(struct mks_rt_opts) */
    const char *job;       /* job name: [A-Za-z0-9_.-]{1,64} */
    uint32_t rank;         /* this process's rank */
    uint32_t n_ranks;      /* ranks of the job */
    uint32_t n_workers;    /* worker threads (CPU) or blocks (GPU) */
    uint64_t arena_bytes;  /* map memory; 0 = default (16 MiB) */
    const char *gpu_uuid;  /* NULL on the CPU backend */
    uint32_t flags;        /* MKS_RT_F_* (absent in callers of a smaller sz: 0) */
};

/* The workers are host threads (a CPU backend), each of which calls
 * mks_rt_worker_thread(): the pump then measures how long they wait for a
 * CPU, which the agent reports per step (a loaded host slows a CPU run in
 * a way the hooks alone cannot tell from a held queue).  A runtime whose
 * workers run on a device never sets it: its host's load says nothing about
 * the device, and the contention reads as not measured. */
#define MKS_RT_F_HOST_WORKERS 0x1u

/* Create the rank's control block and start the pump thread.  Fails with
 * -EEXIST if a live process of the same job and rank already holds it. */
int mks_rt_create(const struct mks_rt_opts *opts, struct mks_rt **rt_p);

/* Stop the pump, unmap and unlink the control block.  Accepts NULL. */
void mks_rt_destroy(struct mks_rt *rt);

/* Declare the calling thread as the one that runs worker `worker` (needs
 * MKS_RT_F_HOST_WORKERS; call it once from each worker thread before its
 * first task).  Its CPU wait counts from here on.  -EINVAL for a worker out
 * of range or a runtime without the flag; -EBUSY if another thread
 * declared the worker already. */
int mks_rt_worker_thread(struct mks_rt *rt, uint32_t worker);

/* Publish the task schema (a serialized mkscope.v1.TaskSchema) for the agent. */
int mks_rt_publish_schema(struct mks_rt *rt, const void *schema, size_t len);

/* Slow path of the hook: runs the attached programs for ctx->event on the
 * calling worker.  Returns the clamped priority hint of CONTROL programs
 * (0 when none is attached).  Safe to call from any worker thread, one call per
 * worker at a time. */
int32_t mks_rt_hook_run(struct mks_rt *rt, struct mks_hook_ctx *ctx);

/* The part of struct mks_rt the fast path reads: it is the struct's first
 * member, so MKS_HOOK() needs no call.  mask points at the control block's
 * attach mask (bit e set when event e has programs). */
struct mks_rt_hot {
    const volatile uint32_t *mask;
};

/* Wait until an agent has attached programs at every event in `events` (a
 * mask of 1u << enum mks_hook_event) or timeout_ns has passed: 0, or
 * -ETIMEDOUT.  For runtimes that must be observed from their first task on
 * (demos and tests that compare an agent's counts with their own); a
 * production runtime never waits for its observer.  Call it after
 * mks_rt_create() and before the first task. */
static inline int mks_rt_wait_attached(const struct mks_rt *rt, uint32_t events,
                                       uint64_t timeout_ns)
{
    const struct mks_rt_hot *hot = (const struct mks_rt_hot *)(const void *)rt;
    struct timespec t0, t, nap = {0, 1000000};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        if ((*hot->mask & events) == events)
            return 0;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((uint64_t)(t.tv_sec - t0.tv_sec) * 1000000000ull + (uint64_t)t.tv_nsec -
                (uint64_t)t0.tv_nsec >=
            timeout_ns)
            return -ETIMEDOUT;
        nanosleep(&nap, NULL);
    }
}

#ifdef __cplusplus
}
#endif

#ifdef MKS_HOOKS_DISABLED
#define MKS_HOOK(rt, ctx) ((int32_t)0)
#else
/* Returns the priority hint; fills ctx->abi_version/size itself. */
#define MKS_HOOK(rt, ctx)                                                                          \
    ((*((const struct mks_rt_hot *)(const void *)(rt))->mask & (1u << (ctx)->event))              \
         ? mks_rt_hook_run((rt), (ctx))                                                            \
         : (int32_t)0)
#endif

#endif /* MKSCOPE_RUNTIME_H */

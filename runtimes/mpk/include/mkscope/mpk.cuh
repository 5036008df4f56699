/*
 * mkscope's adapter for Mirage MPK: the header MPK's persistent kernel
 * includes (persistent_kernel.cuh, after runtime_header.h, when built with
 * -DMKS_MPK) once runtimes/mpk/apply.sh has added the hook sites.
 *
 * It maps what MPK's worker and scheduler know at each transition to hook
 * ABI v1 contexts (mkscope/hook_abi.h) and hands them to devhooks' monitor
 * warps through global-memory rings (mkscope/devhook_gring.cuh): MPK's
 * worker blocks have no spare warp, no spare shared memory, and task bodies
 * that synchronise and stride over the whole block, so the monitors run in
 * a kernel of their own on the SMs MPK leaves free.  Nothing here runs the
 * VM: the generated kernel keeps MPK's -rdc=false single translation unit.
 *
 * Detached at no cost (devhooks' gate): the pump sets bit 63 of each
 * worker's queue word (RuntimeConfig::worker_queue_last_ready_task_id)
 * while programs are attached.  MPK's worker loop is instantiated twice
 * (execute_worker<false>, <true>); the <false> one is MPK's own code plus
 * one sign test of the word it polls anyway, and switches to the <true>
 * one, which carries the hook sites, when it sees the bit, and back when
 * the bit clears, both at a fetch of the worker queue.  The scheduler
 * (one warp lane, its own kernel) tests the same word once per event it
 * dequeues, with a load issued beside the one it makes anyway.
 *
 * What goes where:
 *   worker thread 0    TASK_ASSIGN and TASK_READY (from the record the
 *                      scheduler left for the task: mks_mpk_side), the
 *                      dependency wait (DEP_WAIT_BEGIN/END, TASK_READY
 *                      after it), TASK_START/TASK_END around the body
 *                      (COMM_BEGIN/END too for MPK's NVSHMEM tasks), the
 *                      trigger (DEP_RELEASE), QUEUE_PRESSURE when its
 *                      queue's depth crosses the declared threshold: into
 *                      ring `worker`.  Published after MPK's own release of
 *                      the trigger event (its fence orders our slots).
 *   scheduler lane 0   GEN_ADVANCE when MPK starts the next iteration
 *                      (END_OF_TASK_GRAPH) and for each request that joins
 *                      the batch (prepare_next_batch), QUEUE_PRESSURE of
 *                      its event queue: into ring num_workers + sched_id.
 *
 * Host side (libmkscope_mpk, runtimes/mpk/src/mpk_host.cu): the control
 * block, the pump, the gate, rings, the task-class table and the task
 * schema from MPK's task_graph.json, the monitor kernel, the fault plan.
 * docs/mpk.md has the field-by-field mapping and what stays absent.
 */
#ifndef MKSCOPE_MPK_CUH
#define MKSCOPE_MPK_CUH

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "mkscope/devhook_gring.cuh"
#include "mkscope/hook_abi.h"
#include "mkscope/mpk_graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the scheduler knew when it assigned a task, for the worker to raise
 * TASK_READY and TASK_ASSIGN with the scheduler's times.  One per task
 * position; iter names the iteration the record is of. */
struct mks_mpk_side {
    uint64_t iter;
    uint64_t t_ready;  /* the scheduler took the task's launching event */
    uint64_t t_assign; /* it put the task on the worker's queue */
    uint64_t pad;
};

/* The device view, copied into the kernel's translation unit at init. */
struct mks_mpk_dev {
    struct mks_dev_gring *rings; /* [num_workers + num_schedulers]; NULL: off */
    const uint32_t *task_info;   /* [num_tasks]: class << 24 | tile within its operator */
    const uint8_t *class_flags;  /* [classes]: MKS_MPK_CF_* */
    struct mks_mpk_side *side;   /* [num_tasks] */
    unsigned long long *iterations; /* iterations MPK started (always counted) */
    unsigned long long *joined;     /* [2 + MKS_MPK_MAX_JOINS]: slots joined, -, request ids */
    const int *request_ids;         /* MPK's batch slot -> request id (NULL: no serving mode) */
    uint32_t num_tasks, num_workers, num_schedulers, rank;
    uint32_t worker_pressure; /* declared worker-queue depth (tasks) */
    uint32_t sched_pressure;  /* declared scheduler-queue depth (events) */
    uint32_t n_faults;
    uint32_t pad;
    struct mks_mpk_fault faults[MKS_MPK_MAX_FAULTS];
};
#define MKS_MPK_CF_REQUEST 0x1u /* tasks of one request (attention): request_id is a batch slot */
#define MKS_MPK_CF_COMM    0x2u /* NVSHMEM communication tasks */
#define MKS_MPK_MAX_JOINS  64u

/* Host (libmkscope_mpk): called from MPK's init_persistent_kernel once its
 * queues are allocated.  Reads MKS_MPK_JOB / MKS_MPK_TASK_GRAPH / ... from
 * the environment (docs/mpk.md); fills *dev (rings NULL when mkscope is not
 * enabled, which is not an error).  Returns 0 or a negative errno after one
 * line on stderr. */
struct mks_mpk_init_args {
    size_t sz; /* sizeof(struct mks_mpk_init_args) */
    uint32_t rank, n_ranks;
    uint32_t num_workers, num_schedulers;
    uint32_t num_tasks, num_events;
    unsigned long long *worker_queue_words; /* [2 * num_workers], MPK's */
    const int *request_ids;                 /* MPK's (offline/online modes), or NULL */
    int sm_count;                           /* the GPU's, to size the monitor kernel */
    void *dev_state;                        /* device address of the kernel's mks_mpk_state */
    /* what MPK's worker kernel needs of an SM (cudaFuncGetAttributes; -1:
     * not known): a kernel that does not fit is never started */
    int worker_regs, worker_threads;
    long long worker_static_smem, worker_dynamic_smem, worker_local;
};
int mks_mpk_host_init(const struct mks_mpk_init_args *a, struct mks_mpk_dev *dev_p);
/* At the start of a launch, before MPK enqueues anything: the previous
 * launch's counts to the report, its rings reopened, and the control file
 * (MKS_MPK_CONTROL: fault plan and attach wait for this launch) read. */
int mks_mpk_host_prelaunch(void);
/* After MPK enqueued its worker and scheduler kernels: the monitor kernel,
 * on a stream of its own that waits for `after` (MPK's prepare event), and
 * every ring stopped once `worker_done` and `sched_done` (MPK's events after
 * its two kernels; NULL for the single persistent kernel on the legacy
 * stream) have passed, so the monitors never outlive the launch. */
int mks_mpk_host_launched(cudaEvent_t after, cudaEvent_t worker_done, cudaEvent_t sched_done);
/* At finalize: stops what is left, writes the report (MKS_MPK_REPORT),
 * destroys the control block. */
void mks_mpk_host_finalize(void);

#ifdef __cplusplus
}
#endif

/* ---- device ----------------------------------------------------------- */
#ifdef __CUDACC__

static __device__ struct mks_mpk_dev mks_mpk_state;

#define MKS_MPK_GATE_BIT (1ull << 63)
#define MKS_MPK_WORKER_DONE 1
#define MKS_MPK_WORKER_SWITCH 2

/* Where a switch between the worker's two loops resumes: its queue
 * positions (thread 0's). */
struct mks_mpk_resume {
    size_t next[2], last[2];
};

static __device__ __forceinline__ uint64_t mks_mpk_now(void)
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

static __device__ __forceinline__ uint32_t mks_mpk_smid(void)
{
    uint32_t s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    return s;
}

static __device__ __forceinline__ void mks_mpk_spin(uint64_t ns)
{
    uint64_t t0 = mks_mpk_now();
    while (mks_mpk_now() - t0 < ns)
        __nanosleep(256);
}

/* The worker's poll of its queue word saw the gate in the state the other
 * loop handles: 1 (the loop returns at the next block-wide check).  The
 * hooked loop strips the gate from the count it keeps. */
template <bool HK>
static __device__ __forceinline__ int mks_mpk_gate_flip(size_t *last, int *sw)
{
    unsigned long long v = *last;
    if (HK) {
        if (!(v & MKS_MPK_GATE_BIT)) {
            *sw = 1;
            return 1;
        }
        *last = (uint32_t)v;
        return 0;
    }
    if (__builtin_expect((long long)v < 0, 0)) {
        *last = (uint32_t)v;
        *sw = 1;
        return 1;
    }
    return 0;
}

/* A scheduler's bump of a worker's queue word: a 32-bit release add on the
 * count half, so that it never writes the pump's half (MPK's own 64-bit add
 * would write all eight bytes). */
static __device__ __forceinline__ void mks_mpk_wq_bump(unsigned long long *word)
{
    asm volatile("red.release.gpu.global.add.u32 [%0], %1;"
                 :
                 : "l"((uint32_t *)word), "r"(1u)
                 : "memory");
}

/* prepare_kernel's reset of a queue word: the count half only. */
static __device__ __forceinline__ void mks_mpk_wq_reset(unsigned long long *word)
{
    *(volatile uint32_t *)word = 0u;
}

static __device__ __forceinline__ int mks_mpk_on(void)
{
    return mks_mpk_state.rings != 0;
}

/* The context's fixed part; what an event does not know stays absent. */
static __device__ __forceinline__ void mks_mpk_ctx(struct mks_hook_ctx *c, uint32_t ev,
                                                   uint32_t worker)
{
    uint64_t *z = (uint64_t *)c;
#pragma unroll
    for (uint32_t i = 0; i < sizeof(*c) / 8; i++)
        z[i] = 0;
    c->abi_version = MKS_HOOK_ABI_VERSION;
    c->size = (uint16_t)sizeof(*c);
    c->event = (uint16_t)ev;
    c->rank = mks_mpk_state.rank;
    c->worker = worker;
    c->sm = mks_mpk_smid();
    c->task_class = MKS_CTX_ABSENT32;
    c->task_gen = MKS_CTX_ABSENT64;
    c->req_gen = MKS_CTX_ABSENT64;
    c->step = MKS_CTX_ABSENT32;
    c->tile_x = MKS_CTX_ABSENT32;
    c->tile_y = MKS_CTX_ABSENT32;
    c->dep_event = MKS_CTX_ABSENT64;
    c->peer_rank = MKS_CTX_ABSENT32;
    c->queue_depth = MKS_CTX_ABSENT32;
    c->value = MKS_CTX_ABSENT64;
    c->t_now = mks_mpk_now();
}

static __device__ __forceinline__ void mks_mpk_put(struct mks_dev_gprod *p,
                                                   const struct mks_hook_ctx *c)
{
    struct mks_hook_ctx *s = mks_dev_gring_next(p, c->event);
    if (s) {
        mks_dev_gring_put(s, c);
        mks_dev_gring_commit(p);
    }
}

/* ---- the worker (thread 0 of a worker block, hooked loop only) ---- */

struct mks_mpk_w {
    struct mks_dev_gprod p;
    unsigned long long task_id; /* the task between TASK_BEGIN and its release */
    uint64_t t_ready, t_start, t_end;
    uint32_t worker, info, flags, over;
    uint32_t queued; /* tasks in the queue behind the current one */
};

static __device__ __forceinline__ void mks_mpk_w_init(struct mks_mpk_w *w, uint32_t worker)
{
    w->worker = worker;
    w->over = 0;
    w->task_id = 0;
    w->t_ready = w->t_start = w->t_end = 0;
    w->info = 0xffffffffu;
    w->flags = 0;
    w->queued = 0;
    if (mks_mpk_on())
        mks_dev_gprod_init(&w->p, &mks_mpk_state.rings[worker]);
}

static __device__ __forceinline__ uint32_t mks_mpk_step_of(unsigned long long task_id)
{
    uint32_t it = (uint32_t)(task_id >> 32);
    return it ? it - 1u : MKS_CTX_ABSENT32; /* MPK's first iteration is 1 */
}

/* The task's own fields, from the class table and MPK's task descriptor. */
static __device__ __forceinline__ void mks_mpk_task_ctx(struct mks_mpk_w *w, struct mks_hook_ctx *c,
                                                        uint32_t ev, int request_slot)
{
    mks_mpk_ctx(c, ev, w->worker);
    c->task_gen = w->task_id;
    c->step = mks_mpk_step_of(w->task_id);
    if (w->info != 0xffffffffu) {
        c->task_class = w->info >> 24;
        c->tile_x = w->info & 0xffffffu;
    }
    if ((w->flags & MKS_MPK_CF_REQUEST) && request_slot >= 0 &&
        (uint32_t)request_slot < MKS_MPK_MAX_JOINS) {
        /* the batch slot, and the request in it now (a request id is used
         * once, so it tells the reuse of a slot) */
        c->tile_y = (uint32_t)request_slot;
        if (mks_mpk_state.request_ids) {
            int req = mks_mpk_state.request_ids[request_slot];
            if (req >= 0)
                c->req_gen = (uint64_t)req;
        }
        c->flags |= MKS_CTX_F_DYNAMIC;
    }
    if (w->flags & MKS_MPK_CF_COMM)
        c->flags |= MKS_CTX_F_COMM;
    c->t_ready = w->t_ready;
    c->t_start = w->t_start;
    c->t_end = w->t_end;
}

/* After a fetch: queue pressure when the worker's queue (tasks the
 * scheduler published and the worker has not started) crosses the declared
 * depth upwards. */
static __device__ __forceinline__ void mks_mpk_w_fetched(struct mks_mpk_w *w, unsigned long long next,
                                                         unsigned long long last, int loaded)
{
    if (!mks_mpk_on())
        return;
    uint32_t depth = (uint32_t)(last - next) + (uint32_t)loaded;
    uint32_t th = mks_mpk_state.worker_pressure;
    if (th && depth >= th && !w->over) {
        struct mks_hook_ctx c;
        mks_mpk_ctx(&c, MKS_EV_QUEUE_PRESSURE, w->worker);
        c.queue_depth = depth;
        c.value = th;
        mks_mpk_put(&w->p, &c);
    }
    w->over = th && depth >= th;
}

/* Before the task's dependency wait: its identity, the scheduler's
 * TASK_ASSIGN and, for a task with no dependent event (its launching
 * event was its only input), TASK_READY. */
static __device__ __forceinline__ void mks_mpk_w_begin(struct mks_mpk_w *w, unsigned long long task_id,
                                                       int has_dep, int request_slot,
                                                       uint32_t queued)
{
    if (!mks_mpk_on())
        return;
    const uint32_t pos = (uint32_t)task_id;
    const uint64_t iter = task_id >> 32;
    w->task_id = task_id;
    w->queued = queued;
    w->info = pos < mks_mpk_state.num_tasks ? mks_mpk_state.task_info[pos] : 0xffffffffu;
    w->flags = w->info != 0xffffffffu ? mks_mpk_state.class_flags[w->info >> 24] : 0u;
    w->t_ready = w->t_start = w->t_end = 0;
    if (w->info == 0xffffffffu)
        return; /* not a task of the graph's classes (TERMINATE) */
    struct mks_mpk_side sd = mks_mpk_state.side[pos];
    if (sd.iter != iter)
        return; /* the scheduler was not hooked when it assigned this task */
    struct mks_hook_ctx c;
    mks_mpk_task_ctx(w, &c, MKS_EV_TASK_ASSIGN, request_slot);
    c.t_now = sd.t_assign;
    c.value = w->worker;
    mks_mpk_put(&w->p, &c);
    if (!has_dep) {
        w->t_ready = sd.t_ready;
        mks_mpk_task_ctx(w, &c, MKS_EV_TASK_READY, request_slot);
        c.t_now = sd.t_ready;
        mks_mpk_put(&w->p, &c);
    }
}

static __device__ __forceinline__ void mks_mpk_w_wait(struct mks_mpk_w *w, uint32_t ev,
                                                      unsigned long long event_id,
                                                      unsigned long long needed, int remote,
                                                      int request_slot)
{
    if (!mks_mpk_on())
        return;
    struct mks_hook_ctx c;
    mks_mpk_task_ctx(w, &c, ev, request_slot);
    c.dep_event = event_id;
    c.dep_class = remote ? MKS_DEP_REMOTE : MKS_DEP_LOCAL;
    c.value = needed;
    if (ev == MKS_EV_DEP_WAIT_END) {
        w->t_ready = c.t_now;
        mks_mpk_put(&w->p, &c);
        mks_mpk_task_ctx(w, &c, MKS_EV_TASK_READY, request_slot);
        c.t_now = w->t_ready;
        c.dep_event = event_id;
        c.dep_class = remote ? MKS_DEP_REMOTE : MKS_DEP_LOCAL;
    }
    mks_mpk_put(&w->p, &c);
}

static __device__ __forceinline__ void mks_mpk_w_start(struct mks_mpk_w *w, int request_slot)
{
    if (!mks_mpk_on())
        return;
    struct mks_hook_ctx c;
    w->t_start = mks_mpk_now();
    mks_mpk_task_ctx(w, &c, MKS_EV_TASK_START, request_slot);
    c.queue_depth = w->queued;
    mks_mpk_put(&w->p, &c);
    if (w->flags & MKS_MPK_CF_COMM) {
        mks_mpk_task_ctx(w, &c, MKS_EV_COMM_BEGIN, request_slot);
        mks_mpk_put(&w->p, &c);
    }
}

static __device__ __forceinline__ uint64_t mks_mpk_fault_ns(uint32_t kind, uint32_t key,
                                                            uint32_t step)
{
    uint64_t ns = 0;
    for (uint32_t i = 0; i < mks_mpk_state.n_faults && i < MKS_MPK_MAX_FAULTS; i++) {
        const struct mks_mpk_fault *f = &mks_mpk_state.faults[i];
        if (f->kind == kind && step >= f->step_lo && step <= f->step_hi &&
            (kind == MKS_MPK_FAULT_TASK_DELAY ? f->cls : f->event) == key)
            ns += f->ns;
    }
    return ns;
}

/* After the body (the block synchronised): a task-delay fault, then
 * TASK_END (and COMM_END). */
static __device__ __forceinline__ void mks_mpk_w_end(struct mks_mpk_w *w, int request_slot)
{
    if (!mks_mpk_on())
        return;
    const uint32_t step = mks_mpk_step_of(w->task_id);
    if (mks_mpk_state.n_faults && w->info != 0xffffffffu) {
        uint64_t ns = mks_mpk_fault_ns(MKS_MPK_FAULT_TASK_DELAY, w->info >> 24, step);
        if (ns)
            mks_mpk_spin(ns);
    }
    struct mks_hook_ctx c;
    w->t_end = mks_mpk_now();
    if (w->flags & MKS_MPK_CF_COMM) {
        mks_mpk_task_ctx(w, &c, MKS_EV_COMM_END, request_slot);
        mks_mpk_put(&w->p, &c);
    }
    mks_mpk_task_ctx(w, &c, MKS_EV_TASK_END, request_slot);
    mks_mpk_put(&w->p, &c);
}

/* Before the trigger's release: a notify-delay fault on this event. */
static __device__ __forceinline__ void mks_mpk_w_prerelease(struct mks_mpk_w *w,
                                                            unsigned long long event_id)
{
    if (!mks_mpk_on() || !mks_mpk_state.n_faults)
        return;
    uint64_t ns = mks_mpk_fault_ns(MKS_MPK_FAULT_NOTIFY_DELAY, (uint32_t)event_id,
                                   mks_mpk_step_of(w->task_id));
    if (ns)
        mks_mpk_spin(ns);
}

/* After MPK's release of the trigger event (atom.add.release: its fence
 * orders every slot stored so far): publish them, then DEP_RELEASE, which
 * the next release (or an idle poll) publishes. */
static __device__ __forceinline__ void mks_mpk_w_released(struct mks_mpk_w *w,
                                                          unsigned long long event_id,
                                                          unsigned long long count,
                                                          int request_slot)
{
    if (!mks_mpk_on())
        return;
    mks_dev_gring_publish_after_fence(&w->p);
    struct mks_hook_ctx c;
    mks_mpk_task_ctx(w, &c, MKS_EV_DEP_RELEASE, request_slot);
    c.dep_event = event_id;
    c.dep_class = MKS_DEP_LOCAL;
    c.value = count;
    mks_mpk_put(&w->p, &c);
}

/* Nothing to run (polling the queue), leaving the hooked loop, or done:
 * publish with a fence of our own. */
static __device__ __forceinline__ void mks_mpk_w_flush(struct mks_mpk_w *w)
{
    if (mks_mpk_on())
        mks_dev_gring_publish(&w->p);
}

static __device__ __forceinline__ void mks_mpk_w_stop(struct mks_mpk_w *w)
{
    if (mks_mpk_on())
        mks_dev_gring_stop(&w->p);
}

/* ---- the scheduler (lane 0 of a scheduler warp) ---- */

struct mks_mpk_s {
    struct mks_dev_gprod p;
    uint32_t slot, over, on;
    uint64_t t_ready;
};

static __device__ __forceinline__ void mks_mpk_s_init(struct mks_mpk_s *s, int sched_id)
{
    s->on = mks_mpk_on() && (uint32_t)sched_id < mks_mpk_state.num_schedulers;
    s->slot = mks_mpk_state.num_workers + (uint32_t)sched_id;
    s->over = 0;
    s->t_ready = 0;
    if (s->on)
        mks_dev_gprod_init(&s->p, &mks_mpk_state.rings[s->slot]);
}

/* The gate, as the scheduler sees it: loaded beside the event it dequeues
 * (a worker's queue word carries it; any of the scheduler's workers). */
static __device__ __forceinline__ unsigned long long mks_mpk_s_gate(const unsigned long long *word)
{
    unsigned long long v;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(word) : "memory");
    return v;
}

/* An event was dequeued: the time its tasks became ready, and the
 * scheduler queue's pressure (events queued behind it). */
static __device__ __forceinline__ void mks_mpk_s_event(struct mks_mpk_s *s, unsigned long long gate,
                                                       unsigned long long cur,
                                                       unsigned long long last)
{
    if (!s->on || !(gate & MKS_MPK_GATE_BIT))
        return;
    s->t_ready = mks_mpk_now();
    uint32_t depth = (uint32_t)(last - cur), th = mks_mpk_state.sched_pressure;
    if (th && depth >= th && !s->over) {
        struct mks_hook_ctx c;
        mks_mpk_ctx(&c, MKS_EV_QUEUE_PRESSURE, s->slot);
        c.queue_depth = depth;
        c.value = th;
        mks_mpk_put(&s->p, &c);
        mks_dev_gring_publish(&s->p);
    }
    s->over = th && depth >= th;
}

/* The scheduler put task `pos` of iteration `iter` on a worker's queue. */
static __device__ __forceinline__ void mks_mpk_s_assign(struct mks_mpk_s *s, unsigned long long gate,
                                                        unsigned long long iter,
                                                        unsigned long long pos)
{
    if (!s->on || !(gate & MKS_MPK_GATE_BIT) || pos >= mks_mpk_state.num_tasks)
        return;
    struct mks_mpk_side sd;
    sd.iter = iter;
    sd.t_ready = s->t_ready;
    sd.t_assign = mks_mpk_now();
    sd.pad = 0;
    uint4 *dst = (uint4 *)&mks_mpk_state.side[pos];
    const uint4 *src = (const uint4 *)&sd;
    __stcg(dst, src[0]);
    __stcg(dst + 1, src[1]);
}

/* prepare_next_batch() put request `req` into batch slot `slot`: recorded
 * always (once per joining request), raised by mks_mpk_s_iteration(). */
static __device__ __forceinline__ void mks_mpk_s_join(int slot, int req)
{
    if (!mks_mpk_on() || slot < 0 || (uint32_t)slot >= MKS_MPK_MAX_JOINS)
        return;
    unsigned long long *j = mks_mpk_state.joined;
    j[2 + slot] = (unsigned long long)(uint32_t)req | (1ull << 32);
    j[0] = j[0] | (1ull << slot);
}

/* MPK starts iteration `iter` (1-based, END_OF_TASK_GRAPH): counted always;
 * GEN_ADVANCE for the step and for each request that joined. */
static __device__ __forceinline__ void mks_mpk_s_iteration(struct mks_mpk_s *s,
                                                           const unsigned long long *gate_word,
                                                           unsigned long long iter)
{
    if (!mks_mpk_on())
        return;
    *mks_mpk_state.iterations = iter;
    unsigned long long *j = mks_mpk_state.joined;
    const unsigned long long joined = j[0];
    j[0] = 0;
    if (!s->on || !(mks_mpk_s_gate(gate_word) & MKS_MPK_GATE_BIT))
        return;
    struct mks_hook_ctx c;
    mks_mpk_ctx(&c, MKS_EV_GEN_ADVANCE, s->slot);
    c.step = (uint32_t)(iter - 1u);
    c.value = iter - 1u;
    mks_mpk_put(&s->p, &c);
    for (uint32_t i = 0; i < MKS_MPK_MAX_JOINS; i++) {
        if (!(joined >> i & 1u))
            continue;
        mks_mpk_ctx(&c, MKS_EV_GEN_ADVANCE, s->slot);
        c.step = (uint32_t)(iter - 1u);
        c.tile_y = i;
        c.req_gen = (uint32_t)j[2 + i];
        c.value = c.req_gen;
        c.flags = MKS_CTX_F_DYNAMIC;
        mks_mpk_put(&s->p, &c);
    }
    mks_dev_gring_publish(&s->p);
}

static __device__ __forceinline__ void mks_mpk_s_stop(struct mks_mpk_s *s)
{
    if (s->on)
        mks_dev_gring_stop(&s->p);
}

/* A worker's kernel is done (after both loops): its ring may end.  The
 * hooked loop published everything when it left. */
static __device__ __forceinline__ void mks_mpk_worker_exit(uint32_t worker)
{
    if (threadIdx.x == 0 && mks_mpk_on()) {
        __threadfence();
        mks_dev_gring_st(&mks_mpk_state.rings[worker].stop, 1u);
    }
}

#endif /* __CUDACC__ */

/* ---- what persistent_kernel.cuh calls (runtimes/mpk/patch) ---- */

/* The worker: MPK's loop (execute_worker<false>) until the gate bit is
 * seen, then the hooked one until it clears, and so on. */
#define MKS_MPK_RUN_WORKER(cfg)                                                                    \
    do {                                                                                           \
        struct mks_mpk_resume mks_rs = {{0, 0}, {0, 0}};                                           \
        for (;;) {                                                                                 \
            if (execute_worker<false>((cfg), &mks_rs) == MKS_MPK_WORKER_DONE)                      \
                break;                                                                             \
            if (MKS_MPK_HOOKED_LOOP((cfg), &mks_rs) == MKS_MPK_WORKER_DONE)                        \
                break;                                                                             \
        }                                                                                          \
        mks_mpk_worker_exit(blockIdx.x);                                                           \
    } while (0)
/* Both loops inline: out of line, the call's ABI raised the worker kernel
 * from 62 to 138 registers and a 448-byte stack on the stand-in kernel
 * (inline: 88 registers, MPK's loop unchanged; docs/mpk.md).
 * -DMKS_MPK_FAST_ONLY leaves the hooked loop out (for comparing MPK's loop
 * with the unpatched build's machine code). */
#ifdef MKS_MPK_FAST_ONLY
#define MKS_MPK_HOOKED_LOOP(cfg, rs) MKS_MPK_WORKER_DONE
#else
#define MKS_MPK_HOOKED_LOOP(cfg, rs) execute_worker<true>((cfg), (rs))
#endif

#if defined(MODE_OFFLINE) || defined(MODE_ONLINE) || defined(MODE_ONLINE_NOTOKEN)
#define MKS_MPK_REQUEST_IDS(cfg) ((const int *)(cfg).request_ids)
#else
#define MKS_MPK_REQUEST_IDS(cfg) ((const int *)0)
#endif

/* The worker kernel's needs, where persistent_kernel.cuh defines it (the
 * split worker/scheduler launch; the single kernel otherwise). */
#define MKS_MPK_WORKER_ATTRS(args)                                                                 \
    do {                                                                                           \
        struct cudaFuncAttributes mks_fa;                                                          \
        (args).worker_regs = (args).worker_threads = -1;                                           \
        (args).worker_static_smem = (args).worker_local = -1;                                      \
        (args).worker_dynamic_smem = (long long)MAX_DYNAMIC_SHARED_MEMORY_SIZE;                    \
        if (cudaFuncGetAttributes(&mks_fa, global_runtime_config.split_worker_scheduler            \
                                               ? (const void *)worker_kernel                       \
                                               : (const void *)persistent_kernel) == cudaSuccess) { \
            (args).worker_regs = mks_fa.numRegs;                                                   \
            (args).worker_threads = mks_fa.maxThreadsPerBlock;                                     \
            (args).worker_static_smem = (long long)mks_fa.sharedSizeBytes;                         \
            (args).worker_local = (long long)mks_fa.localSizeBytes;                                \
        }                                                                                          \
    } while (0)

/* End of init_persistent_kernel: the host side, and its view for the
 * device code of this translation unit. */
#define MKS_MPK_HOST_INIT(cfg, n_tasks, n_events)                                                  \
    do {                                                                                           \
        struct mks_mpk_init_args mks_a;                                                            \
        struct mks_mpk_dev mks_d;                                                                  \
        int mks_dev = 0;                                                                           \
        memset(&mks_a, 0, sizeof(mks_a));                                                          \
        mks_a.sz = sizeof(mks_a);                                                                  \
        mks_a.rank = (uint32_t)(cfg).my_gpu_id;                                                    \
        mks_a.n_ranks = (uint32_t)(cfg).num_gpus;                                                  \
        mks_a.num_workers = (uint32_t)(cfg).num_workers;                                           \
        mks_a.num_schedulers = (uint32_t)((cfg).num_local_schedulers +                             \
                                          (cfg).num_remote_schedulers);                            \
        mks_a.num_tasks = (uint32_t)(n_tasks);                                                     \
        mks_a.num_events = (uint32_t)(n_events);                                                   \
        mks_a.worker_queue_words = (cfg).worker_queue_last_ready_task_id;                          \
        mks_a.request_ids = MKS_MPK_REQUEST_IDS(cfg);                                              \
        cudaGetDevice(&mks_dev);                                                                   \
        cudaGetSymbolAddress(&mks_a.dev_state, mks_mpk_state);                                     \
        cudaDeviceGetAttribute(&mks_a.sm_count, cudaDevAttrMultiProcessorCount, mks_dev);          \
        MKS_MPK_WORKER_ATTRS(mks_a);                                                               \
        if (mks_mpk_host_init(&mks_a, &mks_d) == 0 && mks_d.rings)                                 \
            cudaMemcpyToSymbol(mks_mpk_state, &mks_d, sizeof(mks_d));                              \
    } while (0)

/* ---- the sites, as persistent_kernel.cuh uses them (mirage patch) ----
 * MKS_HK is the template argument of execute_worker; in the <false>
 * instantiation every MKS_MPK_W_* site compiles to nothing. */
#define MKS_MPK_W_SITE(call)                                                                       \
    do {                                                                                           \
        if (MKS_HK)                                                                                \
            call;                                                                                  \
    } while (0)

#endif /* MKSCOPE_MPK_CUH */

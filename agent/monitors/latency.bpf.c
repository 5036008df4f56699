/*
 * latency: per task class and step bucket, log2 histograms of the time a task
 * sat ready before it started (lat_ready, at task_start) and of its execution
 * (lat_run, at task_end), per class and decode step exact counts, sums and
 * maxima of both (lat_step, for more steps in an epoch than the histograms
 * keep apart), the exact
 * task_end count per class (count_by_class, the same map count.bpf.o
 * keeps), and per worker and step bucket the time its tasks ran
 * (worker_time).  Maps in monitors.h.
 *
 * The count rides in the task_end program rather than in a program of its
 * own: a hook holds MKS_MAX_PROGS_PER_HOOK programs, and the standard
 * monitors leave room at task_end for an escalation and a user program.
 */
#include "mkscope/mkscope.bpf.h"

#include "monitors.h"

MKS_ABI_VERSION(1);

struct {
    __uint(type, MKS_MAP_HIST);
    __uint(max_entries, MKS_MON_LAT_ENTRIES);
    __type(key, __u32);
    __type(value, struct mks_hist);
} lat_ready SEC(".maps");

struct {
    __uint(type, MKS_MAP_HIST);
    __uint(max_entries, MKS_MON_LAT_ENTRIES);
    __type(key, __u32);
    __type(value, struct mks_hist);
} lat_run SEC(".maps");

struct {
    __uint(type, MKS_MAP_ARRAY);
    __uint(max_entries, MKS_MON_LAT_STEP_ENTRIES);
    __type(key, __u32);
    __type(value, struct mks_mon_lat_step);
} lat_step SEC(".maps");

struct {
    __uint(type, MKS_MAP_ARRAY);
    __uint(max_entries, MKS_MON_MAX_CLASSES);
    __type(key, __u32);
    __type(value, __u64);
} count_by_class SEC(".maps");

struct {
    __uint(type, MKS_MAP_ARRAY);
    __uint(max_entries, MKS_MON_WORKER_ENTRIES);
    __type(key, __u32);
    __type(value, struct mks_mon_worker_time);
} worker_time SEC(".maps");

/* The (class, step) slot of ctx, claimed for ctx's step when empty and
 * marked mixed when another step holds it; NULL when the map is missing or
 * the runtime does not know the step. */
static __always_inline struct mks_mon_lat_step *step_slot(const struct mks_hook_ctx *ctx)
{
    __u32 key = MKS_MON_LAT_STEP_KEY(ctx->task_class, ctx->step);
    struct mks_mon_lat_step *e;
    __u64 tag = (__u64)ctx->step + 1, old;

    if (MKS_CTX_IS_ABSENT32(ctx->step))
        return 0;
    e = mks_map_lookup(&lat_step, &key);
    if (!e)
        return 0;
    old = e->tag;
    if (old == 0)
        old = __sync_val_compare_and_swap(&e->tag, 0, tag);
    if (old != 0 && old != tag && !(old & MKS_MON_LAT_STEP_MIXED))
        __sync_fetch_and_or(&e->tag, MKS_MON_LAT_STEP_MIXED);
    return e;
}

/* Adds t_now - t0 to the (class, step bucket) histogram of map and returns
 * it; 0 (nothing added) for an unknown (0) or later-than-now t0. */
static __always_inline __u64 add_latency(void *map, const struct mks_hook_ctx *ctx, __u64 t0)
{
    __u32 key = MKS_MON_LAT_KEY(ctx->task_class, ctx->step);
    __u64 t1 = ctx->t_now;

    if (t0 == 0 || t0 > t1 || MKS_CTX_IS_ABSENT32(ctx->step)) /* absent step: no bucket to blame */
        return 0;
    mks_hist_add(map, &key, t1 - t0);
    return t1 - t0;
}

SEC("mkscope/task_start")
int lat_ready_prog(const struct mks_hook_ctx *ctx)
{
    add_latency(&lat_ready, ctx, ctx->t_ready);
    return 0;
}

SEC("mkscope/task_end")
int lat_run_prog(const struct mks_hook_ctx *ctx)
{
    __u32 ckey = MKS_MON_CLASS_IDX(ctx->task_class);
    __u32 wkey = MKS_MON_WORKER_KEY(ctx->worker, ctx->step);
    __u64 *n = mks_map_lookup(&count_by_class, &ckey);
    struct mks_mon_worker_time *w =
        MKS_CTX_IS_ABSENT32(ctx->step) ? 0 : mks_map_lookup(&worker_time, &wkey);
    struct mks_mon_lat_step *e = step_slot(ctx);
    __u64 d;

    /* every task_end counts, also one whose start time is unknown */
    if (n)
        __sync_fetch_and_add(n, 1);
    d = add_latency(&lat_run, ctx, ctx->t_start);
    if (w) {
        __u64 tag = (__u64)ctx->step + 1;

        if (w->tag == 0)
            w->tag = tag;
        else if (w->tag != tag)
            w->tag |= MKS_MON_LAT_STEP_MIXED;
        w->tasks += 1;
        w->busy_ns += d;
    }
    if (!e)
        return 0;
    __sync_fetch_and_add(&e->count, 1);
    /* The task's queueing too, from the times task_end carries: one slot
     * update per task, not one at each end of it. */
    {
        __u64 r = ctx->t_ready, s = ctx->t_start;

        if (r && s >= r && !MKS_CTX_IS_ABSENT64(r) && !MKS_CTX_IS_ABSENT64(s)) {
            __sync_fetch_and_add(&e->queue_count, 1);
            __sync_fetch_and_add(&e->queue_sum, s - r);
            mks_mon_raise_max(&e->queue_max, s - r);
        }
    }
    if (!d)
        return 0;
    __sync_fetch_and_add(&e->run_count, 1);
    __sync_fetch_and_add(&e->run_sum, d);
    mks_mon_raise_max(&e->run_max, d);
    return 0;
}

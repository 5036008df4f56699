/*
 * genprog: generation progress per decode step.  gen_advance marks when a
 * step's generation moved and how far; task_end counts the work done in each
 * step, so a step that advanced late can be told from one that did little.
 * Maps in monitors.h.
 */
#include "mkscope/mkscope.bpf.h"

#include "monitors.h"

MKS_ABI_VERSION(1);

struct {
    __uint(type, MKS_MAP_ARRAY);
    __uint(max_entries, MKS_MON_STEP_SLOTS);
    __type(key, __u32);
    __type(value, struct mks_mon_gen);
} gen_by_step SEC(".maps");

/* The slot of ctx->step, restarted when it still describes an older step. */
static __always_inline struct mks_mon_gen *slot_of(const struct mks_hook_ctx *ctx)
{
    __u32 step = ctx->step;
    __u32 key = step % MKS_MON_STEP_SLOTS;
    struct mks_mon_gen *g;

    if (MKS_CTX_IS_ABSENT32(step)) /* the runtime does not know the step */
        return 0;
    g = mks_map_lookup(&gen_by_step, &key);

    if (g && g->step != step) {
        g->step = step;
        g->advances = 0;
        g->t_first = 0;
        g->t_last = 0;
        g->max_gen = 0;
        g->tasks_done = 0;
        g->t_task_first = 0;
        g->t_task_last = 0;
    }
    return g;
}

SEC("mkscope/gen_advance")
int gen_adv(const struct mks_hook_ctx *ctx)
{
    struct mks_mon_gen *g = slot_of(ctx);
    __u64 t = ctx->t_now, gen = ctx->value;

    if (!g)
        return 0;
    __sync_fetch_and_add(&g->advances, 1);
    if (g->t_first == 0 || t < g->t_first)
        g->t_first = t;
    if (t > g->t_last)
        g->t_last = t;
    if (gen > g->max_gen)
        g->max_gen = gen;
    return 0;
}

SEC("mkscope/task_end")
int gen_task(const struct mks_hook_ctx *ctx)
{
    struct mks_mon_gen *g = slot_of(ctx);

    __u64 t0 = ctx->t_start, t1 = ctx->t_now;

    if (!g)
        return 0;
    __sync_fetch_and_add(&g->tasks_done, 1);
    /* The step's busy span: its first task's start to its last task's end
     * (not the generation advances, which include any idle time the
     * runtime inserts between steps).  Plain stores: a concurrent update
     * on another worker may win, off by one task's time at most. */
    if (t0 && (g->t_task_first == 0 || t0 < g->t_task_first))
        g->t_task_first = t0;
    if (t1 > g->t_task_last)
        g->t_task_last = t1;
    return 0;
}

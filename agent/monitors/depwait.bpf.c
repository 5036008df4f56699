/*
 * depwait: dependency waits split local/remote.  A wait's begin time is kept
 * per worker at dep_wait_begin; at dep_wait_end the duration goes into a
 * histogram by (local/remote, task class) with its longest (wait_max), and
 * a remote wait also into a
 * record keyed by (comm_gen, producer rank).  On the producer side one
 * record per (comm_gen, consumer rank) holds the times of a release: the
 * sending task's start, comm_end (the data is there) and the remote
 * dep_release (the consumer's event is raised).  A runtime may postpone the
 * release after the transfer and the task ended; only the last time shows
 * it, so the collector can tell a late notification from a slow transfer.
 * The send's task_end carries no comm_gen and comes right after comm_end,
 * and task_end already runs three standard programs of the four a hook
 * takes (the last is kept for escalations): t_end stays 0 and the collector
 * takes comm_end as the task's end.
 * A local release (dep_release of an event of this rank) carries the
 * releasing task's end in ctx.t_end: one record per (step, class) in the
 * same release table keeps the largest gap between the two, so a
 * notification postponed after a local task ended shows as well.  Maps in
 * monitors.h.
 */
#include "mkscope/mkscope.bpf.h"

#include "monitors.h"

MKS_ABI_VERSION(1);

struct {
    __uint(type, MKS_MAP_PERWORKER_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, __u64);
} wait_begin_ts SEC(".maps");

struct {
    __uint(type, MKS_MAP_HIST);
    __uint(max_entries, MKS_MON_WAIT_ENTRIES);
    __type(key, __u32);
    __type(value, struct mks_hist);
} wait_hist SEC(".maps");

struct {
    __uint(type, MKS_MAP_HASH);
    __uint(max_entries, MKS_MON_REMOTE_RECORDS);
    __type(key, struct mks_mon_comm_key);
    __type(value, struct mks_mon_remote_wait);
} remote_waits SEC(".maps");

struct {
    __uint(type, MKS_MAP_HASH);
    __uint(max_entries, MKS_MON_REMOTE_RECORDS);
    __type(key, struct mks_mon_comm_key);
    __type(value, struct mks_mon_release);
} remote_releases SEC(".maps");

struct {
    __uint(type, MKS_MAP_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct mks_mon_wait_stats);
} wait_stats SEC(".maps");

struct {
    __uint(type, MKS_MAP_ARRAY);
    __uint(max_entries, MKS_MON_WAIT_ENTRIES);
    __type(key, __u32);
    __type(value, __u64);
} wait_max SEC(".maps");

SEC("mkscope/dep_wait_begin")
int wait_begin(const struct mks_hook_ctx *ctx)
{
    __u32 zero = 0;
    __u64 *ts = mks_map_lookup(&wait_begin_ts, &zero);

    if (ts)
        *ts = ctx->t_now;
    return 0;
}

SEC("mkscope/dep_wait_end")
int wait_end(const struct mks_hook_ctx *ctx)
{
    __u32 zero = 0, hkey;
    __u32 cls = ctx->task_class, dep = ctx->dep_class;
    __u64 t1 = ctx->t_now, t0, d;
    __u64 *ts = mks_map_lookup(&wait_begin_ts, &zero);
    struct mks_mon_wait_stats *st = mks_map_lookup(&wait_stats, &zero);
    struct mks_mon_comm_key key;
    struct mks_mon_remote_wait *rw;

    if (!ts || !st)
        return 0;
    __sync_fetch_and_add(&st->waits, 1);
    t0 = *ts;
    *ts = 0;
    if (t0 == 0 || t0 > t1) {
        /* The begin was lost to an epoch flip (maps restart from zero each
         * epoch) or came before the attach.  Long waits are the ones that
         * cross a flip and the ones that matter: bound this one by the
         * waiting task's start rather than drop it. */
        __sync_fetch_and_add(&st->unmatched, 1);
        t0 = ctx->t_start;
        if (t0 == 0 || t0 > t1)
            return 0;
    }
    d = t1 - t0;
    hkey = MKS_MON_WAIT_KEY(dep, cls);
    mks_hist_add(&wait_hist, &hkey, d);
    {
        __u64 *mx = mks_map_lookup(&wait_max, &hkey);

        if (mx)
            mks_mon_raise_max(mx, d);
    }
    if (dep != MKS_DEP_REMOTE)
        return 0;

    key.comm_gen = ctx->comm_gen;
    key.peer = ctx->peer_rank;
    key.pad = 0;
    rw = mks_map_lookup(&remote_waits, &key);
    if (!rw) {
        struct mks_mon_remote_wait init = {
            .first_begin = t0,
        };
        /* Losing a race to another worker is fine: its insert wins and
         * the lookup below finds it. */
        mks_map_update(&remote_waits, &key, &init, MKS_NOEXIST);
        rw = mks_map_lookup(&remote_waits, &key);
        if (!rw) {
            __sync_fetch_and_add(&st->remote_dropped, 1);
            return 0;
        }
    }
    __sync_fetch_and_add(&rw->count, 1);
    __sync_fetch_and_add(&rw->total_ns, d);
    if (d > rw->max_ns)
        rw->max_ns = d;
    if (t1 > rw->last_end)
        rw->last_end = t1;
    rw->dep_event = ctx->dep_event;
    rw->task_class = cls;
    rw->worker = ctx->worker;
    rw->step = ctx->step;
    return 0;
}

/* The release record of (comm_gen, peer), inserted when missing; NULL (and
 * counted) when the table is full. */
static __always_inline struct mks_mon_release *release_rec(__u64 comm_gen, __u32 peer)
{
    __u32 zero = 0;
    struct mks_mon_comm_key key;
    struct mks_mon_release *rel;
    struct mks_mon_wait_stats *st;

    key.comm_gen = comm_gen;
    key.peer = peer;
    key.pad = 0;
    rel = mks_map_lookup(&remote_releases, &key);
    if (rel)
        return rel;
    {
        struct mks_mon_release init = {};

        mks_map_update(&remote_releases, &key, &init, MKS_NOEXIST);
    }
    rel = mks_map_lookup(&remote_releases, &key);
    if (!rel) {
        st = mks_map_lookup(&wait_stats, &zero);
        if (st)
            __sync_fetch_and_add(&st->remote_dropped, 1);
    }
    return rel;
}

SEC("mkscope/comm_end")
int release(const struct mks_hook_ctx *ctx)
{
    struct mks_mon_release *rel;

    if (ctx->comm_gen == 0)
        return 0;
    rel = release_rec(ctx->comm_gen, ctx->peer_rank);
    if (!rel)
        return 0;
    __sync_fetch_and_add(&rel->count, 1);
    rel->t_release = ctx->t_now;
    rel->t_start = ctx->t_start;
    rel->task_class = ctx->task_class;
    rel->worker = ctx->worker;
    rel->step = ctx->step;
    rel->bytes = ctx->value;
    return 0;
}

/* A local release: the record of (step, class) keeps the one whose
 * notification came longest after its task's end. */
static __always_inline int local_release(const struct mks_hook_ctx *ctx)
{
    __u64 t_end = ctx->t_end, t_now = ctx->t_now;
    struct mks_mon_release *rel;

    if (t_end == 0 || t_end > t_now)
        return 0;
    rel = release_rec(MKS_MON_LOCAL_REL_GEN(ctx->step, ctx->task_class), ctx->rank);
    if (!rel)
        return 0;
    __sync_fetch_and_add(&rel->count, 1);
    if (rel->t_notify == 0 || t_now - t_end > rel->t_notify - rel->t_end) {
        rel->t_end = t_end;
        rel->t_notify = t_now;
        rel->t_start = ctx->t_start;
        rel->task_class = ctx->task_class;
        rel->worker = ctx->worker;
        rel->step = ctx->step;
    }
    return 0;
}

SEC("mkscope/dep_release")
int rel_notify(const struct mks_hook_ctx *ctx)
{
    struct mks_mon_release *rel;

    if (ctx->dep_class == MKS_DEP_LOCAL)
        return local_release(ctx);
    if (ctx->dep_class != MKS_DEP_REMOTE || ctx->comm_gen == 0)
        return 0;
    rel = release_rec(ctx->comm_gen, ctx->peer_rank);
    if (!rel)
        return 0;
    rel->t_notify = ctx->t_now;
    rel->task_class = ctx->task_class;
    rel->step = ctx->step;
    return 0;
}

/*
 * count: task_end events per task class.  The thinnest useful monitor and the
 * one the end-to-end path attaches first; maps in monitors.h.
 */
#include "mkscope/mkscope.bpf.h"

#include "monitors.h"

MKS_ABI_VERSION(1);

struct {
    __uint(type, MKS_MAP_ARRAY);
    __uint(max_entries, MKS_MON_MAX_CLASSES);
    __type(key, __u32);
    __type(value, __u64);
} count_by_class SEC(".maps");

SEC("mkscope/task_end")
int count(const struct mks_hook_ctx *ctx)
{
    __u32 cls = ctx->task_class;
    __u32 key = MKS_MON_CLASS_IDX(cls);
    __u64 *n = mks_map_lookup(&count_by_class, &key);

    if (n)
        __sync_fetch_and_add(n, 1);
    return 0;
}

/* Loader test object: a Linux map type (BPF_MAP_TYPE_ARRAY = 2) where an
 * mkscope map type belongs. */
#include "mkscope/mkscope.bpf.h"

struct {
    __uint(type, 2);
    __uint(max_entries, 4);
    __type(key, __u32);
    __type(value, __u64);
} arr SEC(".maps");

SEC("mkscope/task_end")
int p(const struct mks_hook_ctx *ctx)
{
    __u32 k = 0;
    __u64 *v = mks_map_lookup(&arr, &k);
    return v ? 1 : 0;
}

/*
 * A monitor of one's own for integration_probes' `mkscope maps` case: per
 * (task class, rank) the tasks that ended and their run time, in a hash
 * map with struct key and value, an enum and a char array, so that the
 * decoded answer exercises structs, enums and text (compiled with -g: the
 * collector decodes it with this file's BTF).
 */
#include "mkscope/mkscope.bpf.h"

MKS_ABI_VERSION(1);
MKS_LICENSE("Dual BSD/GPL");

enum classrun_kind { CLASSRUN_COMPUTE = 1, CLASSRUN_COMM = 2 };

struct classrun_key {
    __u32 task_class;
    __u32 rank;
};

struct classrun {
    __u64 tasks;
    __u64 run_ns;
    enum classrun_kind kind;
    __u32 unused;
    char tag[8];
};

struct {
    __uint(type, MKS_MAP_HASH);
    __uint(max_entries, 64);
    __type(key, struct classrun_key);
    __type(value, struct classrun);
} by_class SEC(".maps");

SEC("mkscope/task_end")
int classrun(const struct mks_hook_ctx *ctx)
{
    struct classrun_key k = {.task_class = ctx->task_class, .rank = ctx->rank};
    struct classrun *v = mks_map_lookup(&by_class, &k);
    if (!v) {
        struct classrun z = {.kind = (ctx->flags & MKS_CTX_F_COMM) ? CLASSRUN_COMM
                                                                   : CLASSRUN_COMPUTE};
        z.tag[0] = 't', z.tag[1] = 'a', z.tag[2] = 's', z.tag[3] = 'k', z.tag[4] = 's';
        mks_map_update(&by_class, &k, &z, MKS_NOEXIST);
        v = mks_map_lookup(&by_class, &k);
        if (!v)
            return 0;
    }
    __sync_fetch_and_add(&v->tasks, 1);
    if (ctx->t_now > ctx->t_start)
        __sync_fetch_and_add(&v->run_ns, ctx->t_now - ctx->t_start);
    return 0;
}

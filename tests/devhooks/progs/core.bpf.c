/* Loader test object: a CO-RE field access, which needs a kernel's BTF. */
#include "mkscope/mkscope.bpf.h"

struct task_struct {
    int pid;
} __attribute__((preserve_access_index));

SEC("mkscope/task_end")
int p(const struct mks_hook_ctx *ctx)
{
    const struct task_struct *t = (const void *)ctx;
    return __builtin_preserve_access_index(t->pid);
}

/* Loader test object: more instructions than a program may have (4096). */
#include "mkscope/mkscope.bpf.h"

#define X1    asm volatile("r0 = 0" ::: "r0");
#define X4    X1 X1 X1 X1
#define X16   X4 X4 X4 X4
#define X64   X16 X16 X16 X16
#define X256  X64 X64 X64 X64
#define X1024 X256 X256 X256 X256

SEC("mkscope/task_end")
int p(const struct mks_hook_ctx *ctx)
{
    X1024 X1024 X1024 X1024 X16
    return 0;
}

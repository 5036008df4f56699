/* Loader test object: 65 programs, one more than an object may have (the
 * control block's 64 program slots). */
#include "mkscope/mkscope.bpf.h"

#define P(n)                                                                  \
    SEC("mkscope/task_end") int p##n(const struct mks_hook_ctx *ctx)          \
    {                                                                         \
        return 0;                                                             \
    }
#define P8(n) P(n##0) P(n##1) P(n##2) P(n##3) P(n##4) P(n##5) P(n##6) P(n##7)

P8(0) P8(1) P8(2) P8(3) P8(4) P8(5) P8(6) P8(7)
P(x)

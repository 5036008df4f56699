/* Internals shared by the bench sources: result allocation, errors, time. */
#ifndef MKS_BENCH_INT_H
#define MKS_BENCH_INT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "mkscope/bench.h"

struct mks_bench_result *bb_result_alloc(uint32_t ranks, uint32_t steps, uint32_t batch,
                                         uint32_t n_classes, int with_times);

/* One line into err (NULL tolerated); returns code. */
int bb_err(char *err, size_t len, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static inline uint64_t bb_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Sleep for ns (no CPU burnt: the machine's cores are shared by all ranks). */
void bb_sleep_ns(uint64_t ns);

#endif

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

struct bs_shm;
/* One rank's life in a job whose shared memory is attached (a backend). */
typedef int (*bb_rank_fn)(struct bs_shm *shm, const struct mks_bench_config *cfg,
                          const struct mks_fault *faults, uint32_t n_faults, uint32_t rank,
                          char *err, size_t err_len);
/* Fork every rank around a new segment and collect (mks_bench_run), or run
 * one rank of a job launched elsewhere (mks_bench_run_rank). */
int bb_launch(const struct mks_bench_config *cfg, const struct mks_fault *faults, uint32_t n_faults,
              bb_rank_fn rank_main, struct mks_bench_result **res_p, char *err, size_t err_len);
int bb_launch_rank(const struct mks_bench_config *cfg, const struct mks_fault *faults,
                   uint32_t n_faults, uint32_t rank, bb_rank_fn rank_main,
                   struct mks_bench_result **res_p, char *err, size_t err_len);

/* The CLOCK_REALTIME deadline ns from now, for pthread_cond_timedwait. */
static inline struct timespec bb_deadline(uint64_t ns)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t abs = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec + ns;
    ts.tv_sec = (time_t)(abs / 1000000000ull);
    ts.tv_nsec = (long)(abs % 1000000000ull);
    return ts;
}

/* Sleep for ns (no CPU burnt: the machine's cores are shared by all ranks). */
void bb_sleep_ns(uint64_t ns);

#endif

/*
 * The CUDA backend's per-rank entry, callable from C (the launcher in
 * cuda_launch.c, which owns processes, shared memory and the devhooks
 * control block) and implemented in C++/CUDA (megakernel.cu).  Plain types
 * only: this header is read by gcc and by nvcc's host compiler.
 */
#ifndef MKS_BENCH_GPU_H
#define MKS_BENCH_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "mkscope/bench.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mks_rt;

/* All-gather through the launcher's shared memory. */
typedef int (*bg_allgather_fn)(void *ctx, uint32_t rank, const void *mine, size_t len, void *all);

struct bg_rank_args {
    const struct mks_bench_config *cfg;
    const struct mks_fault *faults;
    uint32_t n_faults;
    uint32_t rank;
    bg_allgather_fn allgather;
    void *allgather_ctx;
    struct mks_rt *hooks; /* NULL when hooks are compiled out */
    /* results, host memory the launcher collects */
    uint64_t *step_ns;      /* [steps] */
    uint64_t *class_counts; /* [classes] */
    int32_t *tokens;        /* [steps * batch] */
    uint64_t *req_gen;      /* [steps * batch] */
    double *logit_sum;      /* [steps] */
    uint64_t *faulted;
    uint64_t *prof_dropped;
    char *err;
    size_t err_len;
};

/* Select the rank's GPU (rank modulo the visible devices) and write its UUID
 * ("GPU-xxxxxxxx-...") for the devhooks control block, and its SM count
 * (the persistent kernel runs one scheduler and n_sms - 1 worker blocks). */
int bg_device_select(uint32_t rank, char *uuid, size_t len, uint32_t *n_sms, char *err,
                     size_t err_len);

/* Run the rank on its GPU in cfg->cuda_mode. */
int bg_rank_run(const struct bg_rank_args *a);

#ifdef __cplusplus
}
#endif

#endif

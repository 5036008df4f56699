/* The CUDA backend's entry point (bench/gpu/), or its absence in builds
 * without nvcc. */
#ifndef MKS_BENCH_CUDA_BACKEND_H
#define MKS_BENCH_CUDA_BACKEND_H

#include "mkscope/bench.h"

/* All ranks (rank < 0, forked) or one rank of a job launched elsewhere. */
int mks_bench_cuda_run(const struct mks_bench_config *cfg, const struct mks_fault *faults,
                       uint32_t n_faults, int32_t rank, struct mks_bench_result **res_p, char *err,
                       size_t err_len);

#endif

/* Builds without nvcc have no CUDA backend; say so instead of failing later. */
#include <errno.h>

#include "bench_int.h"
#include "cuda_backend.h"

int mks_bench_cuda_run(const struct mks_bench_config *cfg, const struct mks_fault *faults,
                       uint32_t n_faults, int32_t rank, struct mks_bench_result **res_p, char *err,
                       size_t err_len)
{
    (void)cfg, (void)faults, (void)n_faults, (void)rank, (void)res_p;
    return bb_err(err, err_len, -ENOTSUP,
                  "this build has no CUDA backend (configure where nvcc is found)");
}

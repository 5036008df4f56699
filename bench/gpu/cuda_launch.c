/*
 * The CUDA backend's launcher: the same process-per-rank model and shared
 * memory rendezvous as the CPU backend (one GPU per rank), plus the devhooks
 * control block with the device's UUID and the task schema.  The device side
 * is megakernel.cu.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bench_int.h"
#include "cuda_backend.h"
#include "gpu.h"
#include "mkscope/runtime.h"
#include "runtime/shm.h"
#include "workload.h"

static int shm_allgather(void *ctx, uint32_t rank, const void *mine, size_t len, void *all)
{
    return bs_allgather(ctx, rank, mine, len, all, 60ull * 1000000000ull);
}

static int cuda_rank_main(struct bs_shm *shm, const struct mks_bench_config *cfg,
                          const struct mks_fault *faults, uint32_t n_faults, uint32_t rank,
                          char *err, size_t err_len)
{
    char uuid[64];
    uint32_t n_sms = 0;
    int rc = bg_device_select(rank, uuid, sizeof(uuid), &n_sms, err, err_len);
    if (rc)
        return rc;
    struct mks_rt *hooks = NULL;
#ifndef MKS_HOOKS_DISABLED
    if (cfg->cuda_mode == MKS_BENCH_CUDA_PERSISTENT) {
        struct mks_rt_opts ho = {.sz = sizeof(ho),
                                 .job = cfg->job,
                                 .rank = rank,
                                 .n_ranks = cfg->ranks,
                                 .gpu_uuid = uuid,
                                 /* n_sms - 1 worker blocks, then the scheduler's
                                  * monitor warp (slot W) and its inline CONTROL
                                  * runs (slot W + 1): one runner per slot */
                                 .n_workers = n_sms + 1};
        rc = mks_rt_create(&ho, &hooks);
        if (rc)
            return bb_err(err, err_len, rc, "rank %u: devhooks control block for job '%s': %s",
                          rank, cfg->job, strerror(-rc));
        uint8_t *schema = NULL;
        size_t len = 0;
        rc = bw_schema_encode(cfg, rank, &schema, &len);
        if (!rc)
            rc = mks_rt_publish_schema(hooks, schema, len);
        free(schema);
        if (rc) {
            mks_rt_destroy(hooks);
            return bb_err(err, err_len, rc, "rank %u: publishing the task schema: %s", rank,
                          strerror(-rc));
        }
    }
#endif
    struct bs_result res;
    bs_result(shm, rank, &res);
    struct bg_rank_args a = {.cfg = cfg,
                             .faults = faults,
                             .n_faults = n_faults,
                             .rank = rank,
                             .allgather = shm_allgather,
                             .allgather_ctx = shm,
                             .hooks = hooks,
                             .step_ns = res.step_ns,
                             .class_counts = res.class_counts,
                             .tokens = res.tokens,
                             .req_gen = res.req_gen,
                             .logit_sum = res.logit_sum,
                             .faulted = res.faulted,
                             .prof_dropped = res.prof_dropped,
                             .err = err,
                             .err_len = err_len};
    rc = bg_rank_run(&a);
#ifndef MKS_HOOKS_DISABLED
    mks_rt_destroy(hooks);
#endif
    return rc;
}

int mks_bench_cuda_run(const struct mks_bench_config *cfg, const struct mks_fault *faults,
                       uint32_t n_faults, int32_t rank, struct mks_bench_result **res_p, char *err,
                       size_t err_len)
{
    if (cfg->cuda_mode != MKS_BENCH_CUDA_PERSISTENT) {
        /* without the megakernel's scheduler there is no queue, notification
         * or transfer of ours to slow down */
        for (uint32_t i = 0; i < n_faults; i++)
            if (faults[i].type != MKS_FAULT_TASK_DELAY && faults[i].type != MKS_FAULT_MOE_SKEW)
                return bb_err(err, err_len, -EINVAL,
                              "fault %s needs --cuda-mode persistent (per-op and graph builds "
                              "support task-delay and moe-skew)",
                              mks_fault_type_name(faults[i].type));
    }
    if (rank < 0)
        return bb_launch(cfg, faults, n_faults, cuda_rank_main, res_p, err, err_len);
    return bb_launch_rank(cfg, faults, n_faults, (uint32_t)rank, cuda_rank_main, res_p, err,
                          err_len);
}

/*
 * The MPK adapter (mkscope/mpk.cuh) on its own, without MPK's sources: a
 * kernel that drives every worker and scheduler site the way the patched
 * persistent_kernel.cuh does, so that the header compiles for sm_90a
 * wherever nvcc is (mpk_compile_test.sh).
 */
#include "mkscope/mpk.cuh"

template <bool MKS_HK> __device__ int loop(unsigned long long *word, struct mks_mpk_resume *rs)
{
    __shared__ int mks_sw;
    __shared__ size_t next[2], last[2];
    struct mks_mpk_w mks_w;
    if (threadIdx.x == 0) {
        mks_sw = 0;
        next[0] = rs->next[0];
        last[0] = rs->last[0];
        if (MKS_HK)
            mks_mpk_w_init(&mks_w, blockIdx.x);
        last[0] = *(volatile unsigned long long *)word;
        (void)mks_mpk_gate_flip<MKS_HK>(&last[0], &mks_sw);
    }
    __syncthreads();
    if (__all_sync(0xffffffffu, mks_sw != 0))
        return MKS_MPK_WORKER_SWITCH;
    if (threadIdx.x == 0) {
        unsigned long long id = (2ull << 32) | 5u;
        MKS_MPK_W_SITE(mks_mpk_w_fetched(&mks_w, next[0], last[0], 3));
        MKS_MPK_W_SITE(mks_mpk_w_begin(&mks_w, id, 1, 0, 2));
        MKS_MPK_W_SITE(mks_mpk_w_wait(&mks_w, MKS_EV_DEP_WAIT_BEGIN, 7, 14, 0, 0));
        MKS_MPK_W_SITE(mks_mpk_w_wait(&mks_w, MKS_EV_DEP_WAIT_END, 7, 14, 0, 0));
        MKS_MPK_W_SITE(mks_mpk_w_start(&mks_w, 0));
        MKS_MPK_W_SITE(mks_mpk_w_end(&mks_w, 0));
        MKS_MPK_W_SITE(mks_mpk_w_prerelease(&mks_w, 9));
        MKS_MPK_W_SITE(mks_mpk_w_released(&mks_w, 9, 3, 0));
        MKS_MPK_W_SITE(mks_mpk_w_flush(&mks_w));
    }
    return MKS_MPK_WORKER_DONE;
}

__global__ void worker(unsigned long long *word)
{
    struct mks_mpk_resume rs = {{0, 0}, {0, 0}};
    for (;;) {
        if (loop<false>(word, &rs) == MKS_MPK_WORKER_DONE)
            break;
        if (loop<true>(word, &rs) == MKS_MPK_WORKER_DONE)
            break;
    }
    mks_mpk_worker_exit(blockIdx.x);
}

__global__ void scheduler(unsigned long long *words)
{
    if (threadIdx.x != 0)
        return;
    struct mks_mpk_s mks_s;
    mks_mpk_s_init(&mks_s, blockIdx.x);
    unsigned long long g = mks_mpk_s_gate(&words[0]);
    mks_mpk_s_event(&mks_s, g, 1, 5);
    mks_mpk_s_assign(&mks_s, g, 1, 3);
    mks_mpk_wq_bump(&words[1]);
    mks_mpk_wq_reset(&words[2]);
    mks_mpk_s_join(0, 4);
    mks_mpk_s_iteration(&mks_s, &words[0], 2);
    mks_mpk_s_stop(&mks_s);
}

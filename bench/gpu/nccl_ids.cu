/*
 * GPU check of the NCCL id mapping: two ranks, one process per GPU, run a
 * kernel-per-operator loop (a small "layer" kernel, then an all-reduce,
 * several times per step, and one all-gather per step) with NCCL loading
 * libmkscope-nccl-profiler.so through NCCL_PROFILER_PLUGIN.  Each rank's
 * plugin writes its own record ring; after both ranks exit, the parent drains
 * both rings and checks that every collective carries the same communication
 * generation id on both ranks, and that the ids are the ones comm-ids derives
 * from (communicator hash, function, sequence number).
 *
 * The two rank processes never exchange ids: the only thing they share is
 * NCCL's unique id, passed through a pipe before ncclCommInitRank.
 *
 * Usage: nccl_ids [--steps N] [--ars K]    (run by bench/gpu/nccl_ids.sh)
 */
#include <cuda_runtime.h>
#include <nccl.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "mkscope/commid.h"
#include "mkscope/nccl_ring.h"

#define CUDA_OK(call)                                                                          \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "rank %d: %s: %s\n", g_rank, #call, cudaGetErrorString(e_));       \
            _exit(1);                                                                          \
        }                                                                                      \
    } while (0)
#define NCCL_OK(call)                                                                          \
    do {                                                                                       \
        ncclResult_t r_ = (call);                                                              \
        if (r_ != ncclSuccess) {                                                               \
            fprintf(stderr, "rank %d: %s: %s\n", g_rank, #call, ncclGetErrorString(r_));       \
            _exit(1);                                                                          \
        }                                                                                      \
    } while (0)

enum { NRANKS = 2 };
static int g_rank = -1;

/* One operator of the model: cheap elementwise work between collectives. */
__global__ void layer_kernel(float *x, size_t n, float a)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = x[i] * 0.5f + a;
}

static int run_rank(int rank, int fd_id[2], int steps, int ars)
{
    ncclUniqueId id;
    ncclComm_t comm;
    cudaStream_t stream;
    const size_t n = 1u << 20, ng = 4096;
    float *x, *g_in, *g_out;
    char rs[16];

    g_rank = rank;
    snprintf(rs, sizeof(rs), "%d", rank);
    setenv("MKSCOPE_RANK", rs, 1);
    if (rank == 0) {
        NCCL_OK(ncclGetUniqueId(&id));
        if (write(fd_id[1], &id, sizeof(id)) != (ssize_t)sizeof(id))
            return 1;
    } else if (read(fd_id[0], &id, sizeof(id)) != (ssize_t)sizeof(id)) {
        return 1;
    }
    CUDA_OK(cudaSetDevice(rank));
    CUDA_OK(cudaStreamCreate(&stream));
    CUDA_OK(cudaMalloc(&x, n * sizeof(float)));
    CUDA_OK(cudaMalloc(&g_in, ng * sizeof(float)));
    CUDA_OK(cudaMalloc(&g_out, NRANKS * ng * sizeof(float)));
    CUDA_OK(cudaMemset(x, 0, n * sizeof(float)));
    CUDA_OK(cudaMemset(g_in, 0, ng * sizeof(float)));
    NCCL_OK(ncclCommInitRank(&comm, NRANKS, id, rank));
    for (int s = 0; s < steps; s++) {
        for (int k = 0; k < ars; k++) {
            layer_kernel<<<132, 256, 0, stream>>>(x, n, (float)(k + 1));
            CUDA_OK(cudaGetLastError());
            NCCL_OK(ncclAllReduce(x, x, n, ncclFloat32, ncclSum, comm, stream));
        }
        NCCL_OK(ncclAllGather(g_in, g_out, ng, ncclFloat32, comm, stream));
    }
    CUDA_OK(cudaStreamSynchronize(stream));
    /* x follows x <- 2 * (x/2 + a) on both ranks: check one element */
    float h = -1, want = 0;
    for (int s = 0; s < steps; s++)
        for (int k = 0; k < ars; k++)
            want = 2.0f * (want * 0.5f + (float)(k + 1));
    CUDA_OK(cudaMemcpy(&h, x + n / 2, sizeof(h), cudaMemcpyDeviceToHost));
    if (h != want) {
        fprintf(stderr, "rank %d: all-reduce result %g, expected %g\n", rank, h, want);
        return 1;
    }
    NCCL_OK(ncclCommDestroy(comm)); /* the plugin's finalize closes the ring */
    cudaFree(x);
    cudaFree(g_in);
    cudaFree(g_out);
    return 0;
}

static int drain(const char *job, int rank, std::vector<mks_nccl_record> *out)
{
    char name[MKS_NCCL_RING_NAME_MAX];
    mks_nccl_ring *ring;
    mks_nccl_record buf[512];
    int n, err;

    if (mks_nccl_ring_name(job, (uint32_t)rank, name, sizeof(name)) != 0)
        return -EINVAL;
    if ((err = mks_nccl_ring_open(name, &ring)) != 0) {
        fprintf(stderr, "no record ring %s for rank %d: %s (was the plugin loaded?)\n", name, rank,
                strerror(-err));
        return err;
    }
    while ((n = mks_nccl_ring_drain(ring, buf, 512)) > 0)
        out->insert(out->end(), buf, buf + n);
    if (mks_nccl_ring_dropped(ring))
        fprintf(stderr, "rank %d: %" PRIu64 " records dropped\n", rank, mks_nccl_ring_dropped(ring));
    mks_nccl_ring_close(ring);
    mks_nccl_ring_unlink(name);
    return n < 0 ? n : 0;
}

int main(int argc, char **argv)
{
    int steps = 20, ars = 4, fd_id[2];
    char job[64];

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
            steps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--ars") == 0 && i + 1 < argc)
            ars = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: nccl_ids [--steps N] [--ars K]\n");
            return 2;
        }
    }
    if (steps < 1 || steps > 100000 || ars < 1 || ars > 64) {
        fprintf(stderr, "nccl_ids: --steps must be 1..100000 and --ars 1..64\n");
        return 2;
    }
    /* NVLink multicast stays off on shared hosts */
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    if (!getenv("NCCL_PROFILER_PLUGIN"))
        fprintf(stderr, "nccl_ids: NCCL_PROFILER_PLUGIN is not set; no records will be written\n");
    snprintf(job, sizeof(job), "nccl-ids-%d", (int)getpid());
    setenv("MKSCOPE_JOB", job, 1);
    if (pipe(fd_id) != 0)
        return 1;

    pid_t pids[NRANKS];
    for (int r = 0; r < NRANKS; r++) {
        pids[r] = fork();
        if (pids[r] == 0)
            _exit(run_rank(r, fd_id, steps, ars));
    }
    int failed = 0;
    for (int r = 0; r < NRANKS; r++) {
        int st;
        waitpid(pids[r], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "rank %d failed\n", r);
            failed = 1;
        }
    }

    std::vector<mks_nccl_record> rec[NRANKS];
    for (int r = 0; r < NRANKS; r++)
        if (drain(job, r, &rec[r]) != 0)
            failed = 1;
    if (failed) {
        printf("RESULT: FAIL (a rank failed or wrote no records)\n");
        return 1;
    }

    /* compare: every collective on rank 0 has exactly one record with the
     * same id on rank 1, with the same function, sequence and size */
    size_t want_ar = (size_t)steps * ars, want_ag = (size_t)steps, bad = 0;
    for (int r = 0; r < NRANKS; r++) {
        size_t ar = 0, ag = 0;
        for (const auto &x : rec[r]) {
            ar += x.func == MKS_NCCL_ALLREDUCE;
            ag += x.func == MKS_NCCL_ALLGATHER;
            if (x.rank != (uint32_t)r || x.nranks != NRANKS ||
                x.comm_gen != mks_commid_for_nccl(x.comm_hash, x.func, x.seq))
                bad++;
        }
        printf("rank %d: %zu records: %zu all-reduce (want %zu), %zu all-gather (want %zu), comm hash 0x%016" PRIx64
               "\n",
               r, rec[r].size(), ar, want_ar, ag, want_ag, rec[r].empty() ? 0 : rec[r][0].comm_hash);
        if (ar != want_ar || ag != want_ag)
            bad++;
    }
    std::vector<uint64_t> ids1;
    for (const auto &x : rec[1])
        ids1.push_back(x.comm_gen);
    std::sort(ids1.begin(), ids1.end());
    size_t matched = 0;
    std::vector<double> enq;
    for (const auto &x : rec[0]) {
        auto lo = std::lower_bound(ids1.begin(), ids1.end(), x.comm_gen);
        auto hi = std::upper_bound(ids1.begin(), ids1.end(), x.comm_gen);
        if (hi - lo == 1)
            matched++;
        else
            bad++;
        enq.push_back((double)(x.t_stop - x.t_start));
    }
    for (size_t i = 1; i < ids1.size(); i++)
        if (ids1[i] == ids1[i - 1])
            bad++;
    std::sort(enq.begin(), enq.end());
    char text[MKS_COMMID_TEXT_MAX];
    if (!rec[0].empty()) {
        mks_commid_format(rec[0][0].comm_gen, text, sizeof(text));
        printf("first id: 0x%016" PRIx64 " = %s\n", rec[0][0].comm_gen, text);
        mks_commid_format(rec[0].back().comm_gen, text, sizeof(text));
        printf("last id:  0x%016" PRIx64 " = %s\n", rec[0].back().comm_gen, text);
        printf("host enqueue span per collective (rank 0): median %.0f ns, max %.0f ns\n",
               enq[enq.size() / 2], enq.back());
    }
    printf("matched ids: %zu of %zu collectives on rank 0 (%zu on rank 1)\n", matched, rec[0].size(),
           rec[1].size());
    printf("RESULT: %s\n", bad == 0 && matched == want_ar + want_ag ? "PASS" : "FAIL");
    return bad == 0 && matched == want_ar + want_ag ? 0 : 1;
}

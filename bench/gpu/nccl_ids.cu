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
 * With MKSCOPE_NCCL_GPU_TIMES=1 the plugin adds per-channel GPU times
 * (globaltimer).  Then the check also aligns the two GPUs' clocks three
 * ways with clock.h: from host anchors each rank takes (host clock read
 * around a one-thread kernel that reads globaltimer), from the collectives
 * themselves (a rank's all-reduce cannot finish before the other rank's has
 * started: causal edges), and from both; the three must agree.
 *
 * NCCL keeps each channel's kernel timestamps in a 64-entry ring that its
 * proxy thread reads; when the GPU runs more than 64 collectives ahead of the
 * proxy, a channel event can carry a later collective's times.  --sync
 * synchronizes the stream after every step to bound how far ahead it runs.
 *
 * Usage: nccl_ids [--steps N] [--ars K] [--sync]    (run by bench/gpu/nccl_ids.sh)
 * Exit: 0 all checks pass, 1 the ids do not match, 3 the ids match but the
 * clock check (GPU times only) fails.
 */
#include <cuda_runtime.h>
#include <nccl.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <vector>

#include "mkscope/clock.h"
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

__global__ void read_globaltimer(unsigned long long *out)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    *out = t;
}

enum { ANCHORS = 32 };

static uint64_t host_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Host anchors: the host clock read before the launch and after the
 * synchronize bracket the kernel's globaltimer read. */
static void take_anchors(int rank, cudaStream_t stream, unsigned long long *dev_t, int fd)
{
    for (int i = 0; i < ANCHORS; i++) {
        mks_clock_anchor a = {};
        unsigned long long d = 0;
        a.rank = (uint32_t)rank;
        a.host_lo_ns = host_ns();
        read_globaltimer<<<1, 1, 0, stream>>>(dev_t);
        CUDA_OK(cudaStreamSynchronize(stream));
        a.host_hi_ns = host_ns();
        CUDA_OK(cudaMemcpy(&d, dev_t, sizeof(d), cudaMemcpyDeviceToHost));
        a.device_ns = d;
        if (write(fd, &a, sizeof(a)) != (ssize_t)sizeof(a))
            _exit(1);
        usleep(2000);
    }
}

static int run_rank(int rank, int fd_id[2], int fd_anchor, int steps, int ars, int sync_steps)
{
    ncclUniqueId id;
    ncclComm_t comm;
    cudaStream_t stream;
    const size_t n = 1u << 20, ng = 4096;
    float *x, *g_in, *g_out;
    unsigned long long *dev_t;
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
    CUDA_OK(cudaMalloc(&dev_t, sizeof(*dev_t)));
    NCCL_OK(ncclCommInitRank(&comm, NRANKS, id, rank));
    take_anchors(rank, stream, dev_t, fd_anchor);
    for (int s = 0; s < steps; s++) {
        for (int k = 0; k < ars; k++) {
            layer_kernel<<<132, 256, 0, stream>>>(x, n, (float)(k + 1));
            CUDA_OK(cudaGetLastError());
            NCCL_OK(ncclAllReduce(x, x, n, ncclFloat32, ncclSum, comm, stream));
        }
        NCCL_OK(ncclAllGather(g_in, g_out, ng, ncclFloat32, comm, stream));
        if (sync_steps)
            CUDA_OK(cudaStreamSynchronize(stream));
    }
    CUDA_OK(cudaStreamSynchronize(stream));
    take_anchors(rank, stream, dev_t, fd_anchor);
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
    cudaFree(dev_t);
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

struct span {
    uint64_t start = UINT64_MAX, stop = 0;
    int channels = 0;
};

/* Offset of GPU 1's clock from GPU 0's, with its bound, as one model sees it
 * at GPU 1 time d1: T_1(d1) - d1 minus T_0(d0) - d0 for a d0 near d1. */
static int rel_offset(const mks_clock_model *m, uint64_t d0, uint64_t d1, mks_aligned_time *out)
{
    mks_aligned_time a, b;
    if (mks_clock_align(m, 0, d0, &a) || mks_clock_align(m, 1, d1, &b))
        return -1;
    out->lo_ns = (b.lo_ns - (int64_t)d1) - (a.hi_ns - (int64_t)d0);
    out->hi_ns = (b.hi_ns - (int64_t)d1) - (a.lo_ns - (int64_t)d0);
    out->t_ns = out->lo_ns + (out->hi_ns - out->lo_ns) / 2;
    out->err_ns = (uint64_t)(out->hi_ns - out->t_ns);
    return 0;
}

/* Every collective has GPU channel records on both ranks with its id; the
 * clocks aligned from anchors, from the collectives' causal edges and from
 * both agree.  Returns the number of failed checks. */
static size_t check_gpu_times(const std::vector<mks_nccl_record> *rec,
                              const std::vector<mks_nccl_record> *gpu,
                              const std::vector<mks_clock_anchor> &anchors)
{
    size_t bad = 0;
    std::vector<uint64_t> ids;
    std::map<uint64_t, span> sp[NRANKS];
    for (int r = 0; r < NRANKS; r++)
        for (const auto &x : gpu[r]) {
            span &s = sp[r][x.comm_gen];
            s.start = std::min(s.start, x.t_start);
            s.stop = std::max(s.stop, x.t_stop);
            s.channels++;
        }
    std::vector<double> dur;
    std::vector<mks_clock_edge> edges;
    for (const auto &x : rec[0]) {
        auto a = sp[0].find(x.comm_gen), b = sp[1].find(x.comm_gen);
        if (a == sp[0].end() || b == sp[1].end()) {
            bad++;
            continue;
        }
        if (x.func == MKS_NCCL_ALLREDUCE)
            dur.push_back((double)(a->second.stop - a->second.start));
        /* neither rank's collective can finish before the other's started */
        edges.push_back({1, 0, b->second.start, a->second.stop, 0});
        edges.push_back({0, 1, a->second.start, b->second.stop, 0});
    }
    std::sort(dur.begin(), dur.end());
    printf("gpu times: %zu + %zu channel records; %zu of %zu collectives have them on both ranks\n",
           gpu[0].size(), gpu[1].size(), edges.size() / 2, rec[0].size());
    if (!dur.empty())
        printf("all-reduce on GPU 0 (first channel start to last channel stop): median %.1f us, min %.1f us\n",
               dur[dur.size() / 2] / 1e3, dur[0] / 1e3);
    if (edges.empty() || anchors.empty())
        return bad + 1;

    const char *names[3] = {"anchors only", "collectives only", "anchors + collectives"};
    mks_aligned_time off[3];
    int ok[3] = {0, 0, 0};
    uint64_t d0 = sp[0].begin()->second.start, d1 = sp[1].begin()->second.start;
    for (int k = 0; k < 3; k++) {
        mks_clock_model *m = NULL;
        mks_clock_opts o = {};
        o.sz = sizeof(o);
        /* globaltimer advanced in 32 ns steps where it was measured, but
         * its granularity is not promised: a coarser bound keeps the
         * intervals honest */
        o.tick_ns = 1000;
        if (mks_clock_model_create(NRANKS, &o, &m) != 0)
            return bad + 1;
        if (k != 1)
            mks_clock_add_anchors(m, anchors.data(), anchors.size());
        if (k != 0)
            mks_clock_add_edges(m, edges.data(), edges.size());
        int err = mks_clock_solve(m);
        if (err == 0 && rel_offset(m, d0, d1, &off[k]) == 0) {
            ok[k] = 1;
            printf("GPU1 - GPU0 clock offset, %s: %+.3f us +- %.3f us\n", names[k], off[k].t_ns / 1e3,
                   off[k].err_ns / 1e3);
        } else {
            printf("GPU1 - GPU0 clock offset, %s: solve failed (%d)\n", names[k], err);
            bad++;
        }
        mks_clock_model_destroy(m);
    }
    /* the three intervals must overlap: each contains the true offset */
    if (ok[0] && ok[1] && ok[2]) {
        int64_t lo = std::max({off[0].lo_ns, off[1].lo_ns, off[2].lo_ns});
        int64_t hi = std::min({off[0].hi_ns, off[1].hi_ns, off[2].hi_ns});
        printf("clock intervals %s\n", lo <= hi ? "agree" : "DISAGREE");
        bad += lo > hi;
    }
    return bad;
}

int main(int argc, char **argv)
{
    int steps = 20, ars = 4, sync_steps = 0, fd_id[2];
    char job[64];

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
            steps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--ars") == 0 && i + 1 < argc)
            ars = atoi(argv[++i]);
        else if (strcmp(argv[i], "--sync") == 0)
            sync_steps = 1;
        else {
            fprintf(stderr, "usage: nccl_ids [--steps N] [--ars K] [--sync]\n");
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
    int fd_anchor[NRANKS][2];
    if (pipe(fd_id) != 0 || pipe(fd_anchor[0]) != 0 || pipe(fd_anchor[1]) != 0)
        return 1;

    pid_t pids[NRANKS];
    for (int r = 0; r < NRANKS; r++) {
        pids[r] = fork();
        if (pids[r] == 0)
            _exit(run_rank(r, fd_id, fd_anchor[r][1], steps, ars, sync_steps));
        close(fd_anchor[r][1]);
    }
    /* 2 x 32 anchors of 32 bytes fit in a pipe: read them after the ranks end */
    int failed = 0;
    for (int r = 0; r < NRANKS; r++) {
        int st;
        waitpid(pids[r], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "rank %d failed\n", r);
            failed = 1;
        }
    }
    std::vector<mks_clock_anchor> anchors;
    for (int r = 0; r < NRANKS; r++) {
        mks_clock_anchor a;
        while (read(fd_anchor[r][0], &a, sizeof(a)) == (ssize_t)sizeof(a))
            anchors.push_back(a);
    }

    std::vector<mks_nccl_record> rec[NRANKS], gpu[NRANKS];
    for (int r = 0; r < NRANKS; r++) {
        std::vector<mks_nccl_record> all;
        if (drain(job, r, &all) != 0)
            failed = 1;
        for (const auto &x : all)
            (x.flags & MKS_NCCL_REC_F_GPU_TIMES ? gpu[r] : rec[r]).push_back(x);
    }
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
    int ids_ok = bad == 0 && matched == want_ar + want_ag;
    printf("RESULT: %s\n", ids_ok ? "PASS" : "FAIL");
    if (gpu[0].empty() && gpu[1].empty())
        return ids_ok ? 0 : 1;
    size_t clock_bad = check_gpu_times(rec, gpu, anchors);
    printf("CLOCK CHECK: %s\n", clock_bad ? "FAIL" : "PASS");
    return !ids_ok ? 1 : clock_bad ? 3 : 0;
}

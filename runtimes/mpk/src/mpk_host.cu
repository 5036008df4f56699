/*
 * libmkscope_mpk: the host side of mkscope in an MPK process.  MPK's patched
 * init_persistent_kernel() calls mks_mpk_host_init(), its launch
 * mks_mpk_host_prelaunch() / _launched(), its finalize _finalize()
 * (mkscope/mpk.cuh).  Everything is configured from the environment, so
 * MPK's Python front end needs no new arguments (docs/mpk.md):
 *
 *   MKS_MPK_JOB          job name; unset: mkscope stays off (one line says so)
 *   MKS_MPK_TASK_GRAPH   the task_graph.json of this kernel (the patched
 *                        persistent_kernel.py sets it)
 *   MKS_MPK_FAULTS       fault plan: task-delay:class=C,steps=A-B,ns=N and
 *                        notify-delay:event=E,steps=A-B,ns=N, ';'-separated
 *   MKS_MPK_CONTROL      a file read before each launch: lines "faults SPEC"
 *                        (as MKS_MPK_FAULTS, for this launch; "faults -":
 *                        none) and "wait MASK MS" (as MKS_MPK_WAIT_ATTACHED)
 *   MKS_MPK_QUEUE_PRESSURE  W[,S]: the declared worker-queue (tasks) and
 *                        scheduler-queue (events) depths (default 32,64)
 *   MKS_MPK_MONITOR_BLOCKS / MKS_MPK_MONITOR_WARPS  the monitor kernel's shape
 *   MKS_MPK_WAIT_ATTACHED  MASK[,MS]: before each launch wait up to MS
 *                        (default 10000) until programs are attached at the
 *                        events of MASK (for runs compared with MPK's counts)
 *   MKS_MPK_REPORT       file that gets one JSON line per finished launch:
 *                        MPK's own counts (iterations, tasks per class)
 *
 * The monitor kernel runs on the SMs MPK leaves free (sm_count -
 * num_workers by default), beside MPK's scheduler kernel.
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mkscope/devhook.cuh"
#include "mkscope/devhook_gring.cuh"
#include "mkscope/mpk.cuh"
#include "mkscope/mpk_graph.h"
#include "mkscope/runtime.h"

namespace {
struct host {
    struct mks_rt *rt;
    struct mks_dev_rt dev;
    struct mks_mpk_graph *g;
    struct mks_dev_gring *rings;
    uint32_t n_rings, num_workers;
    uint32_t *d_info;
    uint8_t *d_flags;
    struct mks_mpk_side *d_side;
    unsigned long long *d_iter, *d_joined;
    cudaStream_t stream, stop_stream; /* the monitors'; the rings' stop after MPK's kernels */
    cudaEvent_t ended;                /* the single persistent kernel ended */
    int launched, sm_count;
    uint32_t wait_mask;
    uint64_t wait_ns;
    struct mks_mpk_fault faults[MKS_MPK_MAX_FAULTS];
    uint32_t n_faults;
    void *dev_state;
    uint32_t launches;
    int64_t clock_offset_ns; /* host CLOCK_REALTIME - device globaltimer at init */
    unsigned long long *h_iter; /* pinned: the launch's iterations, copied at its end */
    char job[80];
};
struct host H;
} // namespace

static int cuda_err(cudaError_t e, const char *what)
{
    fprintf(stderr, "mkscope: MPK: %s: %s\n", what, cudaGetErrorString(e));
    return e == cudaErrorMemoryAllocation ? -ENOMEM : -ENODEV;
}
#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            return cuda_err(e_, #call);                                                            \
    } while (0)

template <typename T> static int dev_copy(T **d, const T *src, size_t n)
{
    CK(cudaMalloc((void **)d, n ? n * sizeof(T) : sizeof(T)));
    if (src)
        CK(cudaMemcpy(*d, src, n * sizeof(T), cudaMemcpyHostToDevice));
    else
        CK(cudaMemset(*d, 0, n ? n * sizeof(T) : sizeof(T)));
    return 0;
}

/* The plan in spec (MKS_MPK_FAULTS or the control file's line) against
 * this kernel's graph; one line on stderr when it is refused. */
static int parse_faults(const char *spec)
{
    char err[256];
    uint32_t n = 0;
    int rc = mks_mpk_faults_parse(H.g, spec, H.faults, MKS_MPK_MAX_FAULTS, &n, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "mkscope: MPK: fault plan: %s\n", err);
        return rc;
    }
    H.n_faults = n;
    return 0;
}

static uint32_t env_u32(const char *name, uint32_t dflt)
{
    const char *v = getenv(name);
    char *end;
    unsigned long x;
    if (!v || !*v)
        return dflt;
    x = strtoul(v, &end, 0);
    if (end == v || *end || x > 0xfffffffful) {
        fprintf(stderr, "mkscope: MPK: %s='%s' is not a number; using %u\n", name, v, dflt);
        return dflt;
    }
    return (uint32_t)x;
}

__global__ void mks_mpk_clock(unsigned long long *t)
{
    unsigned long long v;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(v));
    *t = v;
}

/* Every ring's stop, after MPK's kernels (mks_mpk_host_launched). */
__global__ void mks_mpk_stop_rings(struct mks_dev_gring *rings, uint32_t n)
{
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        mks_dev_gring_st(&rings[i].stop, 1u);
}

static int64_t realtime_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (int64_t)t.tv_sec * 1000000000ll + t.tv_nsec;
}

/* host CLOCK_REALTIME minus the device's globaltimer, from the tightest of
 * a few round trips (in the report: host times of attach commands against
 * the device times events carry). */
static int measure_clock(void)
{
    unsigned long long *d, t;
    int64_t best = INT64_MAX;
    CK(cudaMalloc(&d, sizeof(*d)));
    for (int i = 0; i < 8; i++) {
        int64_t a = realtime_ns();
        mks_mpk_clock<<<1, 1>>>(d);
        CK(cudaMemcpy(&t, d, sizeof(t), cudaMemcpyDeviceToHost));
        int64_t b = realtime_ns();
        if (b - a < best) {
            best = b - a;
            H.clock_offset_ns = (a + b) / 2 - (int64_t)t;
        }
    }
    cudaFree(d);
    return 0;
}

extern "C" int mks_mpk_host_init(const struct mks_mpk_init_args *a, struct mks_mpk_dev *d)
{
    const char *job = getenv("MKS_MPK_JOB"), *graph = getenv("MKS_MPK_TASK_GRAPH");
    char err[512], uuid[64];
    uint32_t wp = 32, sp = 64;
    int rc, dev;
    if (!a || !d || a->sz < sizeof(*a))
        return -EINVAL;
    memset(d, 0, sizeof(*d));
    if (!job || !*job) {
        fprintf(stderr, "mkscope: MPK: MKS_MPK_JOB not set; the hook sites stay off\n");
        return 0;
    }
    if (H.rt) {
        fprintf(stderr, "mkscope: MPK: initialised twice in one process; the second kernel "
                        "runs without hooks\n");
        return -EBUSY;
    }
    if (!graph || !*graph) {
        fprintf(stderr, "mkscope: MPK: MKS_MPK_TASK_GRAPH not set (the patched "
                        "persistent_kernel.py sets it to the kernel's task_graph.json)\n");
        return -EINVAL;
    }
    if ((rc = mks_mpk_graph_load(graph, &H.g, err, sizeof(err)))) {
        fprintf(stderr, "mkscope: MPK: %s\n", rc == -ENOMEM ? "out of memory" : err);
        return rc;
    }
    if (H.g->n_tasks != a->num_tasks || H.g->n_events != a->num_events) {
        fprintf(stderr, "mkscope: MPK: %s has %u tasks and %u events, the kernel %u and %u: not "
                        "this kernel's task graph\n", graph, H.g->n_tasks, H.g->n_events,
                a->num_tasks, a->num_events);
        return -EINVAL;
    }
    if ((rc = parse_faults(getenv("MKS_MPK_FAULTS"))))
        return rc;
    {
        const char *q = getenv("MKS_MPK_QUEUE_PRESSURE");
        if (q && sscanf(q, "%u,%u", &wp, &sp) < 1)
            fprintf(stderr, "mkscope: MPK: MKS_MPK_QUEUE_PRESSURE='%s': expected W[,S]\n", q);
    }
    {
        const char *w = getenv("MKS_MPK_WAIT_ATTACHED");
        unsigned mask = 0, ms = 10000;
        if (w && sscanf(w, "%i,%u", (int *)&mask, &ms) >= 1) {
            H.wait_mask = mask;
            H.wait_ns = (uint64_t)ms * 1000000ull;
        }
    }
    CK(cudaGetDevice(&dev));
    {
        cudaDeviceProp prop;
        CK(cudaGetDeviceProperties(&prop, dev));
        const unsigned char *u = (const unsigned char *)prop.uuid.bytes;
        snprintf(uuid, sizeof(uuid),
                 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
                 u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
                 u[14], u[15]);
    }
    snprintf(H.job, sizeof(H.job), "%s", job);
    if (a->worker_regs >= 0) {
        int optin = 0;
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
        fprintf(stderr,
                "mkscope: MPK: worker kernel: %d registers, %lld B static + %lld B dynamic shared "
                "memory (the GPU allows %d a block), %lld B local\n",
                a->worker_regs, a->worker_static_smem, a->worker_dynamic_smem, optin,
                a->worker_local);
        if (optin > 0 && a->worker_static_smem + a->worker_dynamic_smem > optin)
            fprintf(stderr,
                    "mkscope: MPK: the worker kernel needs %lld B of shared memory a block, more "
                    "than the %d B the GPU allows: it cannot start\n",
                    a->worker_static_smem + a->worker_dynamic_smem, optin);
    }
    H.num_workers = a->num_workers;
    H.n_rings = a->num_workers + a->num_schedulers;
    H.sm_count = a->sm_count;
    {
        struct mks_rt_opts o;
        memset(&o, 0, sizeof(o));
        o.sz = sizeof(o);
        o.job = H.job;
        o.rank = a->rank;
        o.n_ranks = a->n_ranks ? a->n_ranks : 1;
        o.n_workers = H.n_rings; /* hook slots: workers, then schedulers */
        o.gpu_uuid = uuid;
        if ((rc = mks_rt_create(&o, &H.rt))) {
            fprintf(stderr, "mkscope: MPK: control block for job %s rank %u: %s\n", H.job, a->rank,
                    strerror(-rc));
            return rc;
        }
    }
    {
        uint8_t *schema;
        size_t len;
        if ((rc = mks_mpk_graph_schema(H.g, &schema, &len)) ||
            (rc = mks_rt_publish_schema(H.rt, schema, len))) {
            fprintf(stderr, "mkscope: MPK: publishing the task schema: %s\n", strerror(-rc));
            return rc;
        }
        free(schema);
    }
    if ((rc = mks_rt_cuda_enable(H.rt, &H.dev)))
        return rc;
    /* The pump owns the high halves from now on: none may hold a stale gate. */
    CK(cudaMemset(a->worker_queue_words, 0, 2ull * a->num_workers * sizeof(unsigned long long)));
    if ((rc = mks_rt_cuda_gate(H.rt, (uint64_t *)a->worker_queue_words, 2u * a->num_workers,
                               sizeof(unsigned long long))))
        return rc;
    if ((rc = mks_rt_cuda_grings_create(H.n_rings, NULL, &H.rings)))
        return rc;
    {
        uint8_t flags[MKS_MPK_MAX_CLASSES];
        for (uint32_t c = 0; c < MKS_MPK_MAX_CLASSES; c++)
            flags[c] = c < H.g->n_classes ? (uint8_t)H.g->classes[c].flags : 0;
        if ((rc = dev_copy(&H.d_info, H.g->task_info, H.g->n_tasks)) ||
            (rc = dev_copy(&H.d_flags, flags, MKS_MPK_MAX_CLASSES)) ||
            (rc = dev_copy<struct mks_mpk_side>(&H.d_side, NULL, H.g->n_tasks)) ||
            (rc = dev_copy<unsigned long long>(&H.d_iter, NULL, 1)) ||
            (rc = dev_copy<unsigned long long>(&H.d_joined, NULL, 2 + MKS_MPK_MAX_JOINS)))
            return rc;
    }
    CK(cudaStreamCreateWithFlags(&H.stream, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&H.stop_stream, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&H.ended, cudaEventDisableTiming));
    CK(cudaMallocHost((void **)&H.h_iter, sizeof(*H.h_iter)));
    if ((rc = measure_clock()))
        return rc;
    H.dev_state = a->dev_state;
    d->rings = H.rings;
    d->task_info = H.d_info;
    d->class_flags = H.d_flags;
    d->side = H.d_side;
    d->iterations = H.d_iter;
    d->joined = H.d_joined;
    d->request_ids = a->request_ids;
    d->num_tasks = H.g->n_tasks;
    d->num_workers = a->num_workers;
    d->num_schedulers = a->num_schedulers;
    d->rank = a->rank;
    d->worker_pressure = wp;
    d->sched_pressure = sp;
    d->n_faults = H.n_faults;
    memcpy(d->faults, H.faults, sizeof(H.faults));
    fprintf(stderr, "mkscope: MPK: job %s rank %u: %u workers + %u schedulers, %u tasks in %u "
                    "classes, %u faults planned\n", H.job, a->rank, a->num_workers,
            a->num_schedulers, H.g->n_tasks, H.g->n_classes, H.n_faults);
    return 0;
}

static uint64_t mono_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* One JSON line for the launch that ended: MPK's own count (every task of
 * the graph but TERMINATE runs once per iteration).  A host function on the
 * monitor stream, after the monitors (and so MPK's kernels) ended and the
 * iteration count came back: no CUDA call in here. */
static void CUDART_CB report_launch(void *arg)
{
    const char *report = getenv("MKS_MPK_REPORT");
    unsigned long long iters = *H.h_iter;
    FILE *f;
    (void)arg;
    if (!report || !*report)
        return;
    if (!(f = fopen(report, "a"))) {
        fprintf(stderr, "mkscope: MPK: %s: %s\n", report, strerror(errno));
        return;
    }
    fprintf(f, "{\"job\": \"%s\", \"launch\": %u, \"iterations\": %llu, "
               "\"clock_offset_ns\": %lld, \"classes\": [", H.job, H.launches, iters,
            (long long)H.clock_offset_ns);
    for (uint32_t c = 0; c < H.g->n_classes; c++)
        fprintf(f, "%s{\"id\": %u, \"name\": \"%s\", \"task_type\": \"%s\", "
                   "\"per_iter\": %u, \"executed\": %llu}",
                c ? ", " : "", c, H.g->classes[c].name, H.g->classes[c].task_type,
                H.g->classes[c].per_iter, (unsigned long long)H.g->classes[c].per_iter * iters);
    fprintf(f, "]}\n");
    fclose(f);
}

/* MKS_MPK_CONTROL: this launch's fault plan and attach wait. */
static int read_control(void)
{
    const char *path = getenv("MKS_MPK_CONTROL");
    char line[1100];
    FILE *f;
    if (!path || !*path)
        return 0;
    if (!(f = fopen(path, "r")))
        return 0; /* no file: as before */
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = 0;
        if (!strncmp(line, "faults ", 7)) {
            H.n_faults = 0;
            if (strcmp(line + 7, "-") && parse_faults(line + 7)) {
                fclose(f);
                return -EINVAL;
            }
        } else if (!strncmp(line, "wait ", 5)) {
            unsigned mask = 0, ms = 10000;
            if (sscanf(line + 5, "%i %u", (int *)&mask, &ms) < 1) {
                fprintf(stderr, "mkscope: MPK: %s: bad line '%s'\n", path, line);
                continue;
            }
            H.wait_mask = mask;
            H.wait_ns = (uint64_t)ms * 1000000ull;
        }
    }
    fclose(f);
    if (H.dev_state) {
        CK(cudaMemcpy((uint8_t *)H.dev_state + offsetof(struct mks_mpk_dev, faults), H.faults,
                      sizeof(H.faults), cudaMemcpyHostToDevice));
        CK(cudaMemcpy((uint8_t *)H.dev_state + offsetof(struct mks_mpk_dev, n_faults),
                      &H.n_faults, sizeof(H.n_faults), cudaMemcpyHostToDevice));
    }
    return 0;
}

extern "C" int mks_mpk_host_prelaunch(void)
{
    if (!H.rt)
        return 0;
    if (H.launched) {
        /* the previous launch's monitors are done with its rings */
        CK(cudaStreamSynchronize(H.stream));
        CK(cudaStreamSynchronize(H.stop_stream));
        for (uint32_t i = 0; i < H.n_rings; i++)
            CK(cudaMemsetAsync(&H.rings[i].stop, 0, sizeof(uint32_t), H.stream));
        CK(cudaStreamSynchronize(H.stream));
    }
    H.launches++;
    if (read_control())
        fprintf(stderr, "mkscope: MPK: the control file's fault plan was not taken\n");
    if (H.wait_mask) {
        int rc = mks_rt_wait_attached(H.rt, H.wait_mask, H.wait_ns);
        /* and a moment for the pump to put them and the gate on the device */
        uint64_t t = mono_ns();
        while (mono_ns() - t < 50000000ull)
            ;
        if (rc)
            fprintf(stderr, "mkscope: MPK: no programs at events 0x%x after %llu ms; launching "
                            "anyway\n", H.wait_mask, (unsigned long long)(H.wait_ns / 1000000));
    }
    return 0;
}

extern "C" int mks_mpk_host_launched(cudaEvent_t after, cudaEvent_t worker_done,
                                     cudaEvent_t sched_done)
{
    uint32_t blocks, warps;
    int rc;
    if (!H.rt)
        return 0;
    blocks = env_u32("MKS_MPK_MONITOR_BLOCKS",
                     H.sm_count > (int)H.num_workers ? (uint32_t)H.sm_count - H.num_workers : 1u);
    if (!blocks)
        blocks = 1;
    warps = env_u32("MKS_MPK_MONITOR_WARPS", 0);
    if (!warps) /* two rings a warp */
        warps = (H.n_rings + 2 * blocks - 1) / (2 * blocks);
    if (warps > 32)
        warps = 32;
    /* MPK does not look at its launches' errors: a worker or scheduler
     * kernel that failed to launch leaves the other one and the monitors
     * waiting for it forever, so here it is said and no monitor starts */
    cudaError_t le = cudaPeekAtLastError();
    if (le != cudaSuccess) {
        fprintf(stderr, "mkscope: MPK: a kernel of this launch failed to start: %s; no monitors "
                        "for it\n", cudaGetErrorString(le));
        return -ENODEV;
    }
    CK(cudaStreamWaitEvent(H.stream, after, 0));
    if ((rc = mks_rt_cuda_gmonitor_launch(&H.dev, H.rings, H.n_rings, blocks, warps, H.stream)))
        return rc;
    /* after the monitors return (every ring stopped: MPK's kernels ended) */
    CK(cudaMemcpyAsync(H.h_iter, H.d_iter, sizeof(*H.h_iter), cudaMemcpyDeviceToHost, H.stream));
    CK(cudaLaunchHostFunc(H.stream, report_launch, NULL));
    /* Each worker and scheduler stops its ring as it leaves; once MPK's
     * kernels are over every ring is stopped from here as well, so that a
     * ring whose owner did not (a path of MPK's that leaves without passing
     * a hook site) cannot keep the monitors, and with them every device-wide
     * synchronisation of the process, waiting forever. */
    if (worker_done) {
        CK(cudaStreamWaitEvent(H.stop_stream, worker_done, 0));
        if (sched_done)
            CK(cudaStreamWaitEvent(H.stop_stream, sched_done, 0));
    } else {
        CK(cudaEventRecord(H.ended, 0)); /* after the kernel MPK just put there */
        CK(cudaStreamWaitEvent(H.stop_stream, H.ended, 0));
    }
    /* a kernel, not copies from host memory: those would wait here for
     * the stream, that is for MPK's kernels to end */
    mks_mpk_stop_rings<<<(H.n_rings + 127) / 128, 128, 0, H.stop_stream>>>(H.rings, H.n_rings);
    CK(cudaGetLastError());
    H.launched = 1;
    return 0;
}

extern "C" void mks_mpk_host_finalize(void)
{
    if (!H.rt)
        return;
    if (H.launched) {
        /* the rings end with MPK's kernels; a stop from here too, for a
         * kernel that never started its workers */
        cudaDeviceSynchronize();
        mks_rt_cuda_grings_stop(H.rings, H.n_rings, H.stream);
        cudaStreamSynchronize(H.stream);
    }
    cudaStreamDestroy(H.stop_stream);
    cudaEventDestroy(H.ended);
    cudaFreeHost(H.h_iter);
    mks_rt_destroy(H.rt);
    H.rt = NULL;
    cudaFree(H.rings);
    cudaFree(H.d_info);
    cudaFree(H.d_flags);
    cudaFree(H.d_side);
    cudaFree(H.d_iter);
    cudaFree(H.d_joined);
    mks_mpk_graph_free(H.g);
    H.g = NULL;
}

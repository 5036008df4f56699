/*
 * libmkscope-nccl-profiler.so: an NCCL profiler plugin that names every
 * collective with a communication generation id (commid.h, kind NCCL) and
 * hands one record per collective to the rank's agent through the shared
 * memory ring of nccl_ring.h.
 *
 * NCCL calls init once per communicator; the plugin asks for collective
 * events only (ncclProfileColl; NCCL also starts their group events), whose
 * descriptor carries the per-function sequence number that, together with
 * the communicator hash, names the collective identically on every rank.  startEvent takes the start time,
 * stopEvent the stop time and writes the record.  One ring per process,
 * shared by all its communicators and guarded by a mutex, because NCCL may
 * call from the application's threads and from its own.
 *
 * With MKSCOPE_NCCL_GPU_TIMES=1 the plugin also asks for kernel channel
 * events (ncclProfileKernelCh): NCCL's proxy thread reports, per channel of
 * a collective's kernel, when the channel started and finished on the GPU
 * (globaltimer ns).  Each becomes a record of its own with the collective's
 * id and MKS_NCCL_REC_F_GPU_TIMES.  Those events arrive after NCCL has
 * stopped the collective's event, and name it as their parent, so collective
 * events live in a per-communicator array of slots that is reused round
 * robin and never freed before finalize: a late child always finds valid
 * memory.  NCCL adds proxy work to every collective in this mode, so it is
 * off by default.
 *
 * A plugin must never break the application: every failure is logged once
 * through NCCL's logger and turns the plugin into a no-op, and init still
 * returns success.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mkscope/commid.h"
#include "mkscope/nccl_ring.h"
#include "nccl_profiler_abi.h"

#define EXPORT __attribute__((visibility("default")))

/* Collective events in flight per communicator; a slot is reused after this
 * many later collectives, by when its kernel has long finished. */
#define COLL_SLOTS 4096u

enum ev_kind { EV_COLL = 1, EV_KERNEL_CH = 2 };

struct coll_event {
    uint32_t kind; /* EV_COLL */
    struct mks_nccl_record rec;
};

struct kernel_event {
    uint32_t kind; /* EV_KERNEL_CH */
    struct mks_nccl_record rec;
};

struct comm_ctx {
    uint64_t comm_hash;
    uint32_t rank, nranks;
    uint16_t flags;
    int gpu_times;
    uint32_t next_slot;
    struct coll_event slots[COLL_SLOTS];
};

/* Handle for group events: NCCL 2.27 starts a collective's event only inside
 * a started group event, so groups need a handle, but nothing is recorded
 * for them. */
static char g_group_handle;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mks_nccl_ring *g_ring;
static int g_ring_failed; /* creation failed once: stay a no-op, log once */
static unsigned g_users;
static char g_ring_name[MKS_NCCL_RING_NAME_MAX];

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint32_t dtype_size(const char *name)
{
    static const struct {
        const char *name;
        uint32_t size;
    } types[] = {
        {"ncclInt8", 1},    {"ncclUint8", 1},   {"ncclInt32", 4},       {"ncclUint32", 4},
        {"ncclInt64", 8},   {"ncclUint64", 8},  {"ncclFloat16", 2},     {"ncclFloat32", 4},
        {"ncclFloat64", 8}, {"ncclBfloat16", 2}, {"ncclFloat8e4m3", 1}, {"ncclFloat8e5m2", 1},
    };
    if (!name)
        return 0;
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        if (strcmp(name, types[i].name) == 0)
            return types[i].size;
    return 0;
}

/* The ring name from the environment (see nccl_ring.h); rank is the first
 * communicator's rank when MKSCOPE_RANK is unset. */
static int ring_name_from_env(int rank, char *buf, size_t len, const char **why)
{
    const char *over = getenv("MKSCOPE_NCCL_RING");
    const char *job = getenv("MKSCOPE_JOB");
    const char *rs = getenv("MKSCOPE_RANK");
    unsigned long r = (unsigned long)(rank < 0 ? 0 : rank);
    char *end;

    if (over && *over) {
        if (strlen(over) >= len || over[0] != '/') {
            *why = "MKSCOPE_NCCL_RING must be a shared-memory name starting with '/'";
            return -EINVAL;
        }
        strcpy(buf, over);
        return 0;
    }
    if (rs && *rs) {
        errno = 0;
        r = strtoul(rs, &end, 10);
        if (errno || *end || rs[0] == '-' || r > UINT32_MAX) {
            *why = "MKSCOPE_RANK must be a non-negative integer";
            return -EINVAL;
        }
    }
    if (mks_nccl_ring_name(job && *job ? job : "default", (uint32_t)r, buf, len) != 0) {
        *why = "MKSCOPE_JOB must be 1-64 characters of [A-Za-z0-9._-]";
        return -EINVAL;
    }
    return 0;
}

static int gpu_times_wanted(void)
{
    const char *v = getenv("MKSCOPE_NCCL_GPU_TIMES");

    return v && strcmp(v, "1") == 0;
}

static void plugin_log(ncclDebugLogger_t logfn, ncclDebugLogLevel level, const char *msg,
                       const char *arg)
{
    if (logfn)
        logfn(level, MKS_NCCL_LOGSUB_INIT | MKS_NCCL_LOGSUB_PROFILE, __FILE__, __LINE__,
              "mkscope-nccl-profiler: %s%s", msg, arg ? arg : "");
    else
        fprintf(stderr, "mkscope-nccl-profiler: %s%s\n", msg, arg ? arg : "");
}

static ncclResult_t comm_init(void **context, int *mask, uint64_t comm_hash, int nranks, int rank,
                              ncclDebugLogger_t logfn, uint16_t flags)
{
    struct comm_ctx *ctx;
    const char *why = NULL;
    int err;

    *context = NULL;
    *mask = 0;
    if (rank < 0 || nranks <= 0)
        return ncclSuccess;
    pthread_mutex_lock(&g_lock);
    if (!g_ring && !g_ring_failed) {
        err = ring_name_from_env(rank, g_ring_name, sizeof(g_ring_name), &why);
        if (err == 0) {
            err = mks_nccl_ring_create(g_ring_name, 0, &g_ring);
            if (err)
                why = strerror(-err);
        }
        if (err) {
            g_ring_failed = 1;
            plugin_log(logfn, NCCL_LOG_WARN, "disabled: cannot create the record ring: ", why);
        } else {
            plugin_log(logfn, NCCL_LOG_INFO, "writing collective records to ", g_ring_name);
        }
    }
    if (g_ring) {
        ctx = calloc(1, sizeof(*ctx));
        if (ctx) {
            ctx->comm_hash = comm_hash;
            ctx->rank = (uint32_t)rank;
            ctx->nranks = (uint32_t)nranks;
            ctx->flags = flags;
            ctx->gpu_times = gpu_times_wanted();
            g_users++;
            *context = ctx;
            *mask = ncclProfileColl | (ctx->gpu_times ? ncclProfileKernelCh : 0);
        }
    }
    pthread_mutex_unlock(&g_lock);
    return ncclSuccess;
}

/* The collective slot a kernel channel event names as its parent, or NULL
 * when the pointer is not one of this communicator's slots. */
static struct coll_event *parent_slot(struct comm_ctx *ctx, const void *parent)
{
    uintptr_t base = (uintptr_t)ctx->slots, p = (uintptr_t)parent;

    if (p < base || p >= base + sizeof(ctx->slots) || (p - base) % sizeof(ctx->slots[0]))
        return NULL;
    return (struct coll_event *)parent;
}

static ncclResult_t event_start(void *context, void **handle, uint64_t type, int rank,
                                void *parent, const struct mks_nccl_coll_descr *coll,
                                uint8_t channel, uint64_t ptimer)
{
    struct comm_ctx *ctx = context;
    int func;

    *handle = NULL;
    if (!ctx)
        return ncclSuccess;
    if (type == (uint64_t)ncclProfileGroup) {
        *handle = &g_group_handle;
        return ncclSuccess;
    }
    if (type == (uint64_t)ncclProfileKernelCh) {
        struct coll_event *pc = parent_slot(ctx, parent);
        struct kernel_event *kev;
        if (!ctx->gpu_times || !pc || pc->kind != EV_COLL)
            return ncclSuccess; /* a point-to-point's channel: no id */
        kev = calloc(1, sizeof(*kev));
        if (!kev)
            return ncclSuccess;
        kev->kind = EV_KERNEL_CH;
        kev->rec = pc->rec;
        kev->rec.bytes = 0;
        kev->rec.flags = (uint16_t)(ctx->flags | MKS_NCCL_REC_F_GPU_TIMES | ((uint16_t)channel << 8));
        kev->rec.t_start = ptimer;
        kev->rec.t_stop = 0;
        *handle = kev;
        return ncclSuccess;
    }
    if (type != (uint64_t)ncclProfileColl || !coll)
        return ncclSuccess;
    func = mks_commid_nccl_func_from_name(coll->func);
    if (func < 0)
        return ncclSuccess; /* a function newer than our table: no id to give */
    struct coll_event *ev =
        &ctx->slots[__atomic_fetch_add(&ctx->next_slot, 1, __ATOMIC_RELAXED) % COLL_SLOTS];
    memset(&ev->rec, 0, sizeof(ev->rec));
    ev->kind = EV_COLL;
    ev->rec.comm_gen = mks_commid_for_nccl(ctx->comm_hash, (uint32_t)func, coll->seqNumber);
    ev->rec.comm_hash = ctx->comm_hash;
    ev->rec.seq = coll->seqNumber;
    ev->rec.bytes = (uint64_t)coll->count * dtype_size(coll->datatype);
    ev->rec.rank = rank >= 0 ? (uint32_t)rank : ctx->rank;
    ev->rec.nranks = ctx->nranks;
    ev->rec.func = (uint16_t)func;
    ev->rec.flags = ctx->flags;
    ev->rec.pid = (uint32_t)getpid();
    ev->rec.t_start = now_ns();
    *handle = ev;
    return ncclSuccess;
}

static void write_record(const struct mks_nccl_record *rec)
{
    pthread_mutex_lock(&g_lock);
    if (g_ring)
        (void)mks_nccl_ring_write(g_ring, rec); /* a full ring counts the drop */
    pthread_mutex_unlock(&g_lock);
}

static ncclResult_t mks_stop_event(void *handle)
{
    if (!handle || handle == &g_group_handle)
        return ncclSuccess;
    if (*(uint32_t *)handle == EV_COLL) {
        struct coll_event *ev = handle;
        ev->rec.t_stop = now_ns();
        write_record(&ev->rec); /* the slot stays: kernel channels may still name it */
    } else if (*(uint32_t *)handle == EV_KERNEL_CH) {
        struct kernel_event *kev = handle;
        if (kev->rec.t_stop >= kev->rec.t_start)
            write_record(&kev->rec);
        free(kev);
    }
    return ncclSuccess;
}

static ncclResult_t mks_record_state(void *handle, ncclProfilerEventState_t state,
                                     ncclProfilerEventStateArgs_t *args)
{
    if (handle && handle != &g_group_handle && *(uint32_t *)handle == EV_KERNEL_CH &&
        state == MKS_NCCL_STATE_KERNEL_CH_STOP && args)
        ((struct kernel_event *)handle)->rec.t_stop = args->kernelCh.pTimer;
    return ncclSuccess;
}

static ncclResult_t mks_finalize(void *context)
{
    struct comm_ctx *ctx = context;

    if (!ctx)
        return ncclSuccess;
    pthread_mutex_lock(&g_lock);
    if (g_users && --g_users == 0) {
        /* the name stays: the agent drains what is left and unlinks it */
        mks_nccl_ring_close(g_ring);
        g_ring = NULL;
    }
    pthread_mutex_unlock(&g_lock);
    free(ctx);
    return ncclSuccess;
}

static ncclResult_t v5_init(void **context, uint64_t comm_hash, int *mask, const char *name,
                            int nnodes, int nranks, int rank, ncclDebugLogger_t logfn)
{
    (void)name;
    (void)nnodes;
    return comm_init(context, mask, comm_hash, nranks, rank, logfn, 0);
}

static ncclResult_t v5_start(void *context, void **handle, ncclProfilerEventDescr_v5_t *d)
{
    if (!handle)
        return ncclInvalidArgument;
    if (!d) {
        *handle = NULL;
        return ncclSuccess;
    }
    return event_start(context, handle, d->type, d->rank, d->parentObj, &d->coll,
                       d->kernelCh.channelId, d->kernelCh.pTimer);
}

static ncclResult_t v4_init(void **context, int *mask, const char *name, uint64_t comm_hash,
                            int nnodes, int nranks, int rank, ncclDebugLogger_t logfn)
{
    (void)name;
    (void)nnodes;
    return comm_init(context, mask, comm_hash, nranks, rank, logfn, MKS_NCCL_REC_F_PLUGIN_V4);
}

static ncclResult_t v4_start(void *context, void **handle, ncclProfilerEventDescr_v4_t *d)
{
    if (!handle)
        return ncclInvalidArgument;
    if (!d) {
        *handle = NULL;
        return ncclSuccess;
    }
    return event_start(context, handle, d->type, d->rank, d->parentObj, &d->coll,
                       d->kernelCh.channelId, d->kernelCh.pTimer);
}

EXPORT ncclProfiler_v5_t ncclProfiler_v5 = {
    .name = "mkscope",
    .init = v5_init,
    .startEvent = v5_start,
    .stopEvent = mks_stop_event,
    .recordEventState = mks_record_state,
    .finalize = mks_finalize,
};

EXPORT ncclProfiler_v4_t ncclProfiler_v4 = {
    .name = "mkscope",
    .init = v4_init,
    .startEvent = v4_start,
    .stopEvent = mks_stop_event,
    .recordEventState = mks_record_state,
    .finalize = mks_finalize,
};

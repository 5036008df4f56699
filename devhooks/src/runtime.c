/*
 * The application side of devhooks (runtime.h), CPU backend: create the
 * rank's control block in POSIX shared memory, run attached programs at a
 * hook with coverage, sampling and budget, and keep a pump thread that
 * detaches everything when the agent's lease lapses.
 *
 * The hook run itself is hook.c, shared with the device.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cb.h"
#include "rt_internal.h"
#include "mkscope/ctl.h"
#include "mkscope/runtime.h"
#include "mkscope/vm.h"

/* The pump checks the lease this often; a lapsed lease detaches within it. */
#define PUMP_PERIOD_NS (2ull * 1000000ull)

static uint64_t clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Detach every hook: what the application does when its agent is gone. */
static void detach_all(struct mks_cb *cb)
{
    __atomic_store_n(&cb->attach_mask, 0u, __ATOMIC_RELEASE);
    for (uint32_t ev = 0; ev < MKS_EV_COUNT; ev++) {
        if (__atomic_exchange_n(&cb->hooks[ev].progs, 0ull, __ATOMIC_ACQ_REL) != 0)
            __atomic_add_fetch(&cb->hooks[ev].gen, 1, __ATOMIC_RELEASE);
    }
    __atomic_add_fetch(&cb->ctl_seq, 1, __ATOMIC_RELEASE);
}

static void *pump_main(void *arg)
{
    struct mks_rt *rt = arg;
    struct mks_cb *cb = rt->cb;
    struct timespec period = {0, (long)PUMP_PERIOD_NS};
    while (!__atomic_load_n(&rt->stop, __ATOMIC_ACQUIRE)) {
        uint64_t deadline = __atomic_load_n(&cb->lease_deadline_ns, __ATOMIC_ACQUIRE);
        if (deadline && clock_ns(CLOCK_MONOTONIC) > deadline) {
            /* Clear the deadline only if the agent did not renew meanwhile. */
            if (__atomic_compare_exchange_n(&cb->lease_deadline_ns, &deadline, 0ull, 0,
                                            __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
                detach_all(cb);
                __atomic_add_fetch(&cb->lease_lapses, 1u, __ATOMIC_RELEASE);
            }
        }
        {
            void (*ext)(struct mks_rt *) = __atomic_load_n(&rt->pump_ext, __ATOMIC_ACQUIRE);
            if (ext)
                ext(rt);
        }
        nanosleep(&period, NULL);
    }
    return NULL;
}

/* An existing block of this name: still owned by a live process? */
static int existing_is_live(const char *name)
{
    struct mks_cb hdr;
    int fd = shm_open(name, O_RDONLY, 0), live = 0;
    if (fd < 0)
        return 0;
    if (pread(fd, &hdr, sizeof(hdr), 0) == (ssize_t)sizeof(hdr) && hdr.magic == MKS_CB_MAGIC &&
        !hdr.closed && hdr.app_pid > 0 &&
        (kill(hdr.app_pid, 0) == 0 || errno == EPERM))
        live = 1;
    close(fd);
    return live;
}

int mks_rt_create(const struct mks_rt_opts *opts, struct mks_rt **rt_p)
{
    const size_t min_sz = offsetof(struct mks_rt_opts, gpu_uuid) + sizeof(const char *);
    struct mks_rt *rt;
    struct mks_cb *cb, probe;
    uint64_t arena, total;
    int fd = -1, rc;

    if (!opts || !rt_p || opts->sz < min_sz)
        return -EINVAL;
    for (size_t i = sizeof(*opts); i < opts->sz; i++)
        if (((const uint8_t *)opts)[i]) {
            fprintf(stderr, "mkscope: rt_create: unknown non-zero option bytes (newer caller?)\n");
            return -EOPNOTSUPP;
        }
    if (opts->n_workers == 0 || opts->n_workers > MKS_CB_MAX_WORKERS ||
        (opts->n_ranks && opts->rank >= opts->n_ranks)) {
        fprintf(stderr, "mkscope: rt_create: need 1..%u workers and rank < n_ranks (got %u "
                        "workers, rank %u of %u)\n", MKS_CB_MAX_WORKERS, opts->n_workers,
                opts->rank, opts->n_ranks);
        return -EINVAL;
    }
    arena = opts->arena_bytes ? opts->arena_bytes : MKS_CB_ARENA_DEFAULT;
    if (arena > MKS_CB_ARENA_MAX || (opts->gpu_uuid && strlen(opts->gpu_uuid) >= 64)) {
        fprintf(stderr, "mkscope: rt_create: arena above 4 GiB or GPU uuid too long\n");
        return -EINVAL;
    }
    arena = (arena + 4095) & ~4095ull;
    rt = calloc(1, sizeof(*rt));
    if (!rt)
        return -ENOMEM;
    if ((rc = mks_ctl_name(opts->job, opts->rank, rt->name, sizeof(rt->name))) != 0) {
        fprintf(stderr, "mkscope: rt_create: invalid job name '%s': use 1-64 of [A-Za-z0-9_.-]\n",
                opts->job ? opts->job : "(null)");
        free(rt);
        return rc;
    }
    memset(&probe, 0, sizeof(probe));
    total = mks_cb_layout(&probe, opts->n_workers, arena);

    for (int attempt = 0; attempt < 2; attempt++) {
        fd = shm_open(rt->name, O_CREAT | O_EXCL | O_RDWR, 0600);
        if (fd >= 0 || errno != EEXIST)
            break;
        if (existing_is_live(rt->name)) {
            fprintf(stderr, "mkscope: rt_create: %s is held by a live process of the same job "
                            "and rank\n", rt->name);
            free(rt);
            return -EEXIST;
        }
        shm_unlink(rt->name); /* stale: its application died */
    }
    if (fd < 0) {
        rc = -errno;
        fprintf(stderr, "mkscope: rt_create: shm_open %s: %s\n", rt->name, strerror(errno));
        free(rt);
        return rc;
    }
    if (ftruncate(fd, (off_t)total) != 0) {
        rc = -errno;
        fprintf(stderr, "mkscope: rt_create: %s: cannot size to %llu bytes: %s\n", rt->name,
                (unsigned long long)total, strerror(errno));
        goto fail_fd;
    }
    cb = mmap(NULL, (size_t)total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (cb == MAP_FAILED) {
        rc = -errno;
        fprintf(stderr, "mkscope: rt_create: mmap %s: %s\n", rt->name, strerror(errno));
        goto fail_fd;
    }
    close(fd);
    fd = -1;

    *cb = probe; /* offsets; the rest of the fresh object is zero */
    cb->layout = MKS_CB_LAYOUT;
    cb->header_size = sizeof(struct mks_cb);
    cb->total_size = total;
    cb->abi_version = MKS_HOOK_ABI_VERSION;
    cb->rank = opts->rank;
    cb->n_ranks = opts->n_ranks ? opts->n_ranks : 1;
    cb->n_workers = opts->n_workers;
    cb->app_pid = (int32_t)getpid();
    cb->uid = (uint32_t)getuid();
    cb->app_start_ns = clock_ns(CLOCK_REALTIME);
    snprintf(cb->job, sizeof(cb->job), "%s", opts->job);
    if (opts->gpu_uuid)
        snprintf(cb->gpu_uuid, sizeof(cb->gpu_uuid), "%s", opts->gpu_uuid);
    __atomic_store_n(&cb->magic, MKS_CB_MAGIC, __ATOMIC_RELEASE);

    rt->cb = cb;
    rt->size = (size_t)total;
    rt->n_workers = opts->n_workers;
    rt->rank = opts->rank;
    rt->hot.mask = &cb->attach_mask;
    if ((rc = pthread_create(&rt->pump, NULL, pump_main, rt)) != 0) {
        fprintf(stderr, "mkscope: rt_create: pump thread: %s\n", strerror(rc));
        mks_rt_destroy(rt);
        return -rc;
    }
    rt->pump_started = 1;
    *rt_p = rt;
    return 0;
fail_fd:
    close(fd);
    shm_unlink(rt->name);
    free(rt);
    return rc;
}

void mks_rt_destroy(struct mks_rt *rt)
{
    if (!rt)
        return;
    if (rt->pump_started) {
        __atomic_store_n(&rt->stop, 1, __ATOMIC_RELEASE);
        pthread_join(rt->pump, NULL);
    }
    if (rt->pump_ext_free)
        rt->pump_ext_free(rt);
    if (rt->cb) {
        __atomic_store_n(&rt->cb->closed, 1u, __ATOMIC_RELEASE);
        detach_all(rt->cb);
        munmap(rt->cb, rt->size);
        shm_unlink(rt->name);
    }
    free(rt);
}

int mks_rt_publish_schema(struct mks_rt *rt, const void *schema, size_t len)
{
    if (!rt || (!schema && len))
        return -EINVAL;
    if (len > MKS_CB_SCHEMA_MAX) {
        fprintf(stderr, "mkscope: task schema of %zu bytes exceeds %u\n", len, MKS_CB_SCHEMA_MAX);
        return -E2BIG;
    }
    __atomic_store_n(&rt->cb->schema_len, 0ull, __ATOMIC_RELEASE);
    if (len)
        memcpy((uint8_t *)rt->cb + rt->cb->schema_off, schema, len);
    __atomic_store_n(&rt->cb->schema_len, (uint64_t)len, __ATOMIC_RELEASE);
    return 0;
}

int32_t mks_rt_hook_run(struct mks_rt *rt, struct mks_hook_ctx *ctx)
{
    return mksi_hook_run(rt->cb, rt->rank, ctx);
}

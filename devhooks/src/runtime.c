/*
 * The application side of devhooks (runtime.h), CPU backend: create the
 * rank's control block in POSIX shared memory, run attached programs at a
 * hook with coverage, sampling and budget, and keep a pump thread that
 * detaches everything when the agent's lease lapses or the agent dies.
 *
 * With MKS_RT_F_HOST_WORKERS the pump also samples, each tick, how long the
 * declared worker threads have waited for a CPU (cb.h, struct mks_cb_cpu).
 *
 * The hook run itself is hook.c, shared with the device.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "cb.h"
#include "rt_internal.h"
#include "mkscope/ctl.h"
#include "mkscope/runtime.h"
#include "mkscope/vm.h"

/* The pump checks the lease and the agent's life this often; a lapsed lease
 * or a dead agent detaches within it.  Well under an epoch (100 ms by
 * default), so a dead agent's programs stop within the epoch it died in. */
#define PUMP_PERIOD_NS (2ull * 1000000ull)

/* How the pump watches the lease holder's process. */
enum {
    WATCH_NONE,  /* not visible from here (another PID namespace): lease only */
    WATCH_PIDFD, /* pidfd_open(2): readable once the process has exited */
    WATCH_KILL,  /* kernel without pidfds: kill(pid, 0) and /proc start time */
};
/* Without a pidfd, re-read the start time (pid reuse, zombie) every this
 * many ticks; kill(pid, 0) runs every tick. */
#define WATCH_STAT_TICKS 16

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

static void watch_reset(struct mks_rt *rt)
{
    if (rt->watch_fd >= 0)
        close(rt->watch_fd);
    rt->watch_fd = -1;
    rt->watch_mode = WATCH_NONE;
}

static int sys_pidfd_open(int32_t pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
#else
    (void)pid;
    errno = ENOSYS;
    return -1;
#endif
}

/* The process recorded as (pid, start) is gone: no such pid, a zombie, or
 * the pid now names a younger process.  Unreadable /proc: not known gone. */
static int proc_gone(int32_t pid, uint64_t start)
{
    uint64_t now_start;
    int zombie, rc = mksi_proc_start(pid, &now_start, &zombie);
    if (rc == -ESRCH)
        return 1;
    return rc == 0 && (zombie || now_start != start);
}

/* One tick of the watch on the lease holder: 1 when the process it watches
 * has died (its seqlock value in *seq_p), 0 while alive or not watchable. */
static int agent_gone(struct mks_rt *rt, uint32_t *seq_p)
{
    struct mks_cb *cb = rt->cb;
    uint32_t seq = __atomic_load_n(&cb->agent_seq, __ATOMIC_ACQUIRE);
    if (seq & 1)
        return 0; /* being written */
    *seq_p = seq;
    if (seq != rt->watch_seq) {
        int32_t pid = __atomic_load_n(&cb->agent_pid, __ATOMIC_RELAXED);
        uint64_t start = __atomic_load_n(&cb->agent_start, __ATOMIC_RELAXED);
        uint64_t ns = __atomic_load_n(&cb->agent_pidns, __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&cb->agent_seq, __ATOMIC_RELAXED) != seq)
            return 0; /* torn: next tick */
        watch_reset(rt);
        rt->watch_seq = seq;
        rt->watch_pid = pid;
        rt->watch_start = start;
        rt->watch_ticks = 0;
        if (pid <= 0 || ns == 0 || ns != rt->own_pidns)
            return 0; /* its pid means nothing here: the lease alone decides */
        /* Open first, then check the start time: a match proves the pidfd
         * names the holder, which was alive after the open. */
        rt->watch_fd = sys_pidfd_open(pid);
        if (proc_gone(pid, start)) {
            watch_reset(rt);
            return 1;
        }
        rt->watch_mode = rt->watch_fd >= 0 ? WATCH_PIDFD : WATCH_KILL;
        return 0;
    }
    switch (rt->watch_mode) {
    case WATCH_PIDFD: {
        struct pollfd p = {.fd = rt->watch_fd, .events = POLLIN};
        return poll(&p, 1, 0) > 0 && p.revents;
    }
    case WATCH_KILL:
        if (kill(rt->watch_pid, 0) != 0 && errno == ESRCH)
            return 1;
        if (++rt->watch_ticks % WATCH_STAT_TICKS == 0)
            return proc_gone(rt->watch_pid, rt->watch_start);
        return 0;
    default:
        return 0;
    }
}

/* A thread's run delay (schedstat's second field: ns spent runnable on a
 * run queue, waiting for a CPU) and runs (third: times put on a CPU)
 * through its open schedstat file, into v[0] and v[1]. */
static int read_run_delay(int fd, uint64_t *v)
{
    char buf[96];
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    if (n <= 0)
        return n < 0 ? -errno : -EIO;
    buf[n] = 0;
    char *p = buf, *end;
    strtoull(p, &end, 10); /* time on the CPU */
    if (end == p)
        return -EIO;
    p = end;
    unsigned long long d = strtoull(p, &end, 10);
    if (end == p)
        return -EIO;
    p = end;
    unsigned long long runs = strtoull(p, &end, 10);
    if (end == p)
        return -EIO;
    v[0] = d, v[1] = runs;
    return 0;
}

/* One sample of the workers' CPU wait: each declared thread's run delay
 * since its declaration (a thread that ended keeps its last), summed.  A
 * thread whose schedstat cannot be read (a kernel without schedstat, or
 * with it off) marks the ring unreadable: not measured, never zero. */
static void cpu_sample(struct mks_rt *rt)
{
    struct mks_cb *cb = rt->cb;
    struct mks_cb_cpu *cpu = (struct mks_cb_cpu *)((uint8_t *)cb + cb->cpu_off);
    uint64_t sum = 0, runs = 0;
    uint32_t n = 0;
    for (uint32_t w = 0; w < rt->cpu_n; w++) {
        int32_t tid = __atomic_load_n(&rt->cpu_tid[w], __ATOMIC_ACQUIRE);
        if (tid <= 0)
            continue;
        if (rt->cpu_fd[w] == -1) {
            char path[64];
            snprintf(path, sizeof(path), "/proc/self/task/%d/schedstat", (int)tid);
            rt->cpu_fd[w] = open(path, O_RDONLY | O_CLOEXEC);
            if (rt->cpu_fd[w] < 0 || read_run_delay(rt->cpu_fd[w], &rt->cpu_base[2 * w])) {
                if (rt->cpu_fd[w] >= 0)
                    close(rt->cpu_fd[w]);
                rt->cpu_fd[w] = -2; /* never measured */
                __atomic_store_n(&cpu->unreadable, 1u, __ATOMIC_RELEASE);
                continue;
            }
            rt->cpu_last[2 * w] = rt->cpu_base[2 * w];
            rt->cpu_last[2 * w + 1] = rt->cpu_base[2 * w + 1];
        }
        if (rt->cpu_fd[w] < 0)
            continue;
        uint64_t v[2];
        if (read_run_delay(rt->cpu_fd[w], v) == 0 && v[0] >= rt->cpu_last[2 * w] &&
            v[1] >= rt->cpu_last[2 * w + 1])
            rt->cpu_last[2 * w] = v[0], rt->cpu_last[2 * w + 1] = v[1];
        /* else the thread ended: its last values stay */
        sum += rt->cpu_last[2 * w] - rt->cpu_base[2 * w];
        runs += rt->cpu_last[2 * w + 1] - rt->cpu_base[2 * w + 1];
        n++;
    }
    if (!n)
        return;
    uint64_t i = __atomic_load_n(&cpu->head, __ATOMIC_RELAXED);
    struct mks_cb_cpu_sample *smp = &cpu->s[i % MKS_CB_CPU_RING];
    __atomic_store_n(&smp->t_ns, clock_ns(CLOCK_MONOTONIC), __ATOMIC_RELAXED);
    __atomic_store_n(&smp->wait_ns, sum, __ATOMIC_RELAXED);
    __atomic_store_n(&smp->runs, runs, __ATOMIC_RELAXED);
    __atomic_store_n(&cpu->n_threads, n, __ATOMIC_RELAXED);
    __atomic_store_n(&cpu->head, i + 1, __ATOMIC_RELEASE);
}

static void *pump_main(void *arg)
{
    struct mks_rt *rt = arg;
    struct mks_cb *cb = rt->cb;
    struct timespec period = {0, (long)PUMP_PERIOD_NS};
    while (!__atomic_load_n(&rt->stop, __ATOMIC_ACQUIRE)) {
        uint64_t deadline;
        uint32_t seq;
        if (agent_gone(rt, &seq)) {
            watch_reset(rt);
            deadline = __atomic_load_n(&cb->lease_deadline_ns, __ATOMIC_ACQUIRE);
            /* Unless a new holder took the lease meanwhile (it owns the
             * block now) or the lease already lapsed (detached already),
             * end the lease now: the same detach as a lapse. */
            if (deadline && __atomic_load_n(&cb->agent_seq, __ATOMIC_ACQUIRE) == seq &&
                __atomic_compare_exchange_n(&cb->lease_deadline_ns, &deadline, 0ull, 0,
                                            __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
                detach_all(cb);
                __atomic_add_fetch(&cb->agent_deaths, 1u, __ATOMIC_RELEASE);
                __atomic_add_fetch(&cb->lease_lapses, 1u, __ATOMIC_RELEASE);
            }
        }
        deadline = __atomic_load_n(&cb->lease_deadline_ns, __ATOMIC_ACQUIRE);
        if (deadline && clock_ns(CLOCK_MONOTONIC) > deadline) {
            /* Clear the deadline only if the agent did not renew meanwhile. */
            if (__atomic_compare_exchange_n(&cb->lease_deadline_ns, &deadline, 0ull, 0,
                                            __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
                detach_all(cb);
                __atomic_add_fetch(&cb->lease_lapses, 1u, __ATOMIC_RELEASE);
            }
        }
        if (rt->cpu_n)
            cpu_sample(rt);
        {
            void (*ext)(struct mks_rt *) = __atomic_load_n(&rt->pump_ext, __ATOMIC_ACQUIRE);
            if (ext)
                ext(rt);
        }
        nanosleep(&period, NULL);
    }
    return NULL;
}

static void rt_cpu_free(struct mks_rt *rt)
{
    for (uint32_t w = 0; rt->cpu_fd && w < rt->cpu_n; w++)
        if (rt->cpu_fd[w] >= 0)
            close(rt->cpu_fd[w]);
    free(rt->cpu_tid);
    free(rt->cpu_fd);
    free(rt->cpu_base);
    free(rt->cpu_last);
    rt->cpu_tid = NULL, rt->cpu_fd = NULL, rt->cpu_base = rt->cpu_last = NULL;
    rt->cpu_n = 0;
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

/* "a file of uid 1001 (mallory)", "a symbolic link of uid 0 (root)". */
static const char *lrc_owner(const struct stat *st, char *buf, size_t len)
{
    char u[64];
    mksi_user_name(st->st_uid, u, sizeof(u));
    snprintf(buf, len, "%s of %s", S_ISLNK(st->st_mode) ? "a symbolic link" : S_ISREG(st->st_mode) ? "a file" : "not a file",
             u);
    return buf;
}

/* A fallback block of ours for the same job and rank: live ones stop us,
 * dead ones (a crashed run's) are removed. */
struct live_arg {
    char name[MKSI_SHM_NAME_MAX];
    int live;
};

static int fallback_seen(const char *name, void *arg)
{
    struct live_arg *la = arg;
    if (existing_is_live(name)) {
        snprintf(la->name, sizeof(la->name), "%s", name);
        la->live = 1;
        return 1;
    }
    shm_unlink(name);
    return 0;
}

/* Creates the block's shared memory object (mode 0600) and returns its fd,
 * or -errno after a line on stderr.  O_EXCL: nothing that exists is ever
 * opened, so neither a file nor a symlink someone else made is used.  The
 * usual name, when it is free or a stale block of this uid; when another
 * user holds it, a fallback name with 64 random bits that nobody can create
 * in advance, which the agent finds by its prefix and owner (ctl.c). */
static int create_shm(struct mks_rt *rt, const char *job, uint32_t rank)
{
    char who[160], me[96], primary[MKSI_SHM_NAME_MAX], prefix[MKSI_SHM_NAME_MAX];
    struct stat st;
    int fd, foreign = 0;

    snprintf(primary, sizeof(primary), "%s", rt->name);
    for (int attempt = 0; attempt < 3 && !foreign; attempt++) {
        fd = shm_open(rt->name, O_CREAT | O_EXCL | O_RDWR, 0600);
        if (fd >= 0)
            return fd;
        if (errno != EEXIST) {
            int rc = -errno;
            fprintf(stderr, "mkscope: rt_create: shm_open %s: %s\n", rt->name, strerror(-rc));
            return rc;
        }
        int lrc = mksi_shm_lstat(rt->name, &st);
        if (lrc == -ENOENT)
            continue; /* gone meanwhile */
        if (lrc != 0 || st.st_uid != getuid() || !S_ISREG(st.st_mode)) {
            foreign = 1;
            break;
        }
        if (existing_is_live(rt->name)) {
            fprintf(stderr, "mkscope: rt_create: %s is held by a live process of the same job "
                            "and rank\n", rt->name);
            return -EEXIST;
        }
        shm_unlink(rt->name); /* stale: its application died */
    }
    if (!foreign) {
        fprintf(stderr, "mkscope: rt_create: %s keeps reappearing; another process of the same job and rank "
                        "is starting?\n", rt->name);
        return -EEXIST;
    }
    struct live_arg la = {.live = 0};
    mksi_ctl_each_fallback(job, rank, fallback_seen, &la);
    if (la.live) {
        fprintf(stderr, "mkscope: rt_create: %s is held by a live process of the same job and rank\n", la.name);
        return -EEXIST;
    }
    int rc = mksi_ctl_fallback_prefix(job, rank, (uint32_t)getuid(), prefix, sizeof(prefix));
    if (rc)
        return rc;
    for (int k = 0; k < 8; k++) {
        uint64_t r;
        if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
            rc = -errno;
            fprintf(stderr, "mkscope: rt_create: getrandom: %s\n", strerror(-rc));
            return rc;
        }
        if ((size_t)snprintf(rt->name, sizeof(rt->name), "%s%016llx", prefix, (unsigned long long)r) >=
            sizeof(rt->name))
            return -ENAMETOOLONG;
        fd = shm_open(rt->name, O_CREAT | O_EXCL | O_RDWR, 0600);
        if (fd >= 0) {
            fprintf(stderr, "mkscope: rt_create: %s%s is %s, not a control block of this process's %s (another "
                            "user created the name first); using %s instead, where the agent finds it\n",
                    MKSI_SHM_DIR, primary, lrc_owner(&st, who, sizeof(who)),
                    mksi_user_name(getuid(), me, sizeof(me)), rt->name);
            return fd;
        }
        if (errno != EEXIST) {
            rc = -errno;
            fprintf(stderr, "mkscope: rt_create: shm_open %s: %s\n", rt->name, strerror(-rc));
            return rc;
        }
    }
    fprintf(stderr, "mkscope: rt_create: no free fallback name for %s\n", primary);
    return -EEXIST;
}

int mks_rt_create(const struct mks_rt_opts *opts, struct mks_rt **rt_p)
{
    const size_t min_sz = offsetof(struct mks_rt_opts, gpu_uuid) + sizeof(const char *);
    struct mks_rt *rt;
    struct mks_cb *cb, probe;
    uint64_t arena, total;
    int fd = -1, rc;

    uint32_t flags = 0;
    int cpu;

    if (!opts || !rt_p || opts->sz < min_sz)
        return -EINVAL;
    if (opts->sz >= offsetof(struct mks_rt_opts, flags) + sizeof(opts->flags))
        flags = opts->flags;
    if (flags & ~MKS_RT_F_HOST_WORKERS) {
        fprintf(stderr, "mkscope: rt_create: unknown flags 0x%x (newer caller?)\n",
                flags & ~MKS_RT_F_HOST_WORKERS);
        return -EOPNOTSUPP;
    }
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
    rt->watch_fd = -1;
    if ((rc = mks_ctl_name(opts->job, opts->rank, rt->name, sizeof(rt->name))) != 0) {
        fprintf(stderr, "mkscope: rt_create: invalid job name '%s': use 1-64 of [A-Za-z0-9_.-]\n",
                opts->job ? opts->job : "(null)");
        free(rt);
        return rc;
    }
    /* More host threads than the ring measures: not measured, said by the
     * absence of the ring. */
    cpu = (flags & MKS_RT_F_HOST_WORKERS) && opts->n_workers <= MKS_CB_CPU_THREADS;
    if (cpu) {
        rt->cpu_tid = calloc(opts->n_workers, sizeof(*rt->cpu_tid));
        rt->cpu_fd = malloc(opts->n_workers * sizeof(*rt->cpu_fd));
        rt->cpu_base = calloc(2ull * opts->n_workers, sizeof(*rt->cpu_base));
        rt->cpu_last = calloc(2ull * opts->n_workers, sizeof(*rt->cpu_last));
        if (!rt->cpu_tid || !rt->cpu_fd || !rt->cpu_base || !rt->cpu_last) {
            rt_cpu_free(rt);
            free(rt);
            return -ENOMEM;
        }
        for (uint32_t w = 0; w < opts->n_workers; w++)
            rt->cpu_fd[w] = -1;
    }
    rt->host_workers = (flags & MKS_RT_F_HOST_WORKERS) != 0;
    memset(&probe, 0, sizeof(probe));
    total = mks_cb_layout(&probe, opts->n_workers, arena, cpu);

    fd = create_shm(rt, opts->job, opts->rank);
    if (fd < 0) {
        rt_cpu_free(rt);
        free(rt);
        return fd;
    }
    {
        /* ours by O_EXCL; the mode whatever the umask left, made exact */
        struct stat st;
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != getuid() || fchmod(fd, 0600) != 0) {
            rc = -EPERM;
            fprintf(stderr, "mkscope: rt_create: %s is not a regular file of this uid after its creation\n",
                    rt->name);
            goto fail_fd;
        }
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
    cb->layout = cpu ? MKS_CB_LAYOUT_CPU : MKS_CB_LAYOUT;
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
    rt->own_pidns = mksi_own_pidns();
    if (cpu)
        rt->cpu_n = opts->n_workers; /* before the pump starts: it reads it */
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
    rt_cpu_free(rt);
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
    watch_reset(rt);
    if (rt->pump_ext_free)
        rt->pump_ext_free(rt);
    if (rt->cb) {
        __atomic_store_n(&rt->cb->closed, 1u, __ATOMIC_RELEASE);
        detach_all(rt->cb);
        munmap(rt->cb, rt->size);
        shm_unlink(rt->name);
    }
    rt_cpu_free(rt);
    free(rt);
}

int mks_rt_worker_thread(struct mks_rt *rt, uint32_t worker)
{
    if (!rt || !rt->host_workers || worker >= rt->n_workers)
        return -EINVAL;
    if (!rt->cpu_tid)
        return 0; /* more workers than the ring measures: not measured */
    int32_t none = 0, tid = (int32_t)syscall(SYS_gettid);
    if (!__atomic_compare_exchange_n(&rt->cpu_tid[worker], &none, tid, 0, __ATOMIC_RELEASE,
                                     __ATOMIC_RELAXED))
        return none == tid ? 0 : -EBUSY;
    return 0;
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

/*
 * The agent side of the control block (ctl.h): open and validate a rank's
 * block, load programs and create their maps in the arena, publish hook
 * program lists, advance epochs with a grace period and hand out snapshots,
 * drain rings, renew the lease.
 *
 * One agent drives a block at a time; the application's workers and pump
 * thread run concurrently with every call here, so each write that a worker
 * can observe is ordered as cb.h describes (fill, then publish with release).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
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
#include "mkscope/maps.h"

/* How long a grace period may take before we stop waiting on a worker: a
 * worker stays in a hook for microseconds; one that stays for a second is
 * hung or dead and must not hang the agent as well. */
#define GRACE_TIMEOUT_NS (1000ull * 1000000ull)

/* Samples of the CPU wait ring not trusted for being overwritten next. */
#define CPU_MARGIN 64u

struct mks_ctl {
    struct mks_cb *cb;
    size_t size;
    char name[MKSI_SHM_NAME_MAX];
    uint64_t *ring_seen[MKS_MAX_MAPS]; /* per map, per worker: dropped count at the last drain */
    /* This process as the lease holder (cb->agent_*); pid 0 until first
     * computed, recomputed after a fork. */
    int32_t pid;
    uint64_t start, pidns;
    uint32_t odd_seq; /* cb->agent_seq found odd at the last renewal */
};

struct snap_map {
    uint32_t id;
    struct mks_map_desc desc;
    uint8_t *data;
};

struct mks_epoch_snapshot {
    uint64_t epoch;
    struct mks_coverage cov[MKS_EV_COUNT];
    uint32_t n_maps;
    struct snap_map maps[MKS_MAX_MAPS];
};

static uint64_t now_mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int set_err(char *err, size_t len, int rc, const char *fmt, ...)
{
    va_list ap;
    if (err && len) {
        va_start(ap, fmt);
        vsnprintf(err, len, fmt, ap);
        va_end(ap);
    }
    return rc;
}

int mks_ctl_name(const char *job, uint32_t rank, char *buf, size_t len)
{
    size_t n;
    if (!job || !buf)
        return -EINVAL;
    n = strlen(job);
    if (n == 0 || n > 64)
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        char c = job[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            return -EINVAL;
    }
    if ((size_t)snprintf(buf, len, "/mkscope.%s.%u", job, rank) >= len)
        return -ENAMETOOLONG;
    return 0;
}

/* ---- names -----------------------------------------------------------------
 *
 * A rank's block is /mkscope.<job>.<rank>.  Another local user can create
 * that name first (/dev/shm is writable by everyone); the application then
 * creates /mkscope.<job>.<rank>~u<uid>.<64 random bits>, a name nobody can
 * create in advance, and the agent, finding the usual name missing or not
 * its own uid's, looks for blocks of that form owned by its uid. */

int mksi_ctl_fallback_prefix(const char *job, uint32_t rank, uint32_t uid, char *buf, size_t len)
{
    char primary[MKSI_SHM_NAME_MAX];
    int rc = mks_ctl_name(job, rank, primary, sizeof(primary));
    if (rc)
        return rc;
    if ((size_t)snprintf(buf, len, "%s~u%u.", primary, uid) >= len)
        return -ENAMETOOLONG;
    return 0;
}

int mksi_shm_lstat(const char *name, struct stat *st)
{
    char path[MKSI_SHM_NAME_MAX + 16];
    snprintf(path, sizeof(path), "%s%s", MKSI_SHM_DIR, name);
    return lstat(path, st) == 0 ? 0 : -errno;
}

const char *mksi_user_name(uint32_t uid, char *buf, size_t len)
{
    struct passwd pw, *res = NULL;
    char tmp[1024];
    if (getpwuid_r((uid_t)uid, &pw, tmp, sizeof(tmp), &res) == 0 && res && res->pw_name)
        snprintf(buf, len, "uid %u (%s)", uid, res->pw_name);
    else
        snprintf(buf, len, "uid %u", uid);
    return buf;
}

int mksi_ctl_each_fallback(const char *job, uint32_t rank, int (*fn)(const char *name, void *arg), void *arg)
{
    char prefix[MKSI_SHM_NAME_MAX], name[MKSI_SHM_NAME_MAX];
    int rc = mksi_ctl_fallback_prefix(job, rank, (uint32_t)getuid(), prefix, sizeof(prefix));
    if (rc)
        return rc;
    DIR *d = opendir(MKSI_SHM_DIR);
    if (!d)
        return 0; /* no shm directory: no fallback either */
    size_t plen = strlen(prefix) - 1; /* without the leading '/' */
    struct dirent *e;
    rc = 0;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        struct stat st;
        if (strncmp(e->d_name, prefix + 1, plen) != 0 || strlen(e->d_name) >= sizeof(name) - 1)
            continue;
        /* only this uid's regular files: another user's are not ours to open */
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
            st.st_uid != getuid())
            continue;
        snprintf(name, sizeof(name), "/%s", e->d_name);
        rc = fn(name, arg);
    }
    closedir(d);
    return rc > 0 ? 0 : rc;
}

/* The process is alive (or alive under another uid, which we also report). */
static int pid_alive(int32_t pid)
{
    return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM);
}

int mksi_proc_start(int32_t pid, uint64_t *start_p, int *zombie_p)
{
    char path[48], buf[512], *end;
    const char *p;
    ssize_t n;
    int fd;
    if (pid > 0)
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    else
        snprintf(path, sizeof(path), "/proc/self/stat");
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT || errno == ESRCH ? -ESRCH : -EIO;
    n = read(fd, buf, sizeof(buf) - 1);
    if (n < 0 && errno == ESRCH) {
        close(fd);
        return -ESRCH;
    }
    close(fd);
    if (n <= 0)
        return -EIO;
    buf[n] = 0;
    /* "pid (comm) state ...": comm may hold spaces and parentheses. */
    p = strrchr(buf, ')');
    if (!p || p[1] != ' ' || !p[2])
        return -EIO;
    p += 2;
    *zombie_p = *p == 'Z' || *p == 'X';
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (!p)
            return -EIO;
        p++;
    }
    *start_p = strtoull(p, &end, 10);
    return end == p ? -EIO : 0;
}

uint64_t mksi_own_pidns(void)
{
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* Record this process as the lease holder, so that the pump can watch it
 * die.  Written only when it changed; a concurrent writer (a second agent on
 * the block) makes us skip and retry at the next renewal, and a seqlock still
 * odd at that renewal belongs to a writer killed inside its three stores: we
 * take it over. */
static void lease_holder(struct mks_ctl *ctl)
{
    struct mks_cb *cb = ctl->cb;
    int32_t pid = (int32_t)getpid();
    uint32_t seq;
    int zombie;
    if (pid != ctl->pid) {
        ctl->pid = pid;
        ctl->pidns = mksi_own_pidns();
        if (mksi_proc_start(0, &ctl->start, &zombie) != 0)
            ctl->pidns = 0; /* no identity: the application relies on the lease */
    }
    seq = __atomic_load_n(&cb->agent_seq, __ATOMIC_ACQUIRE);
    if (!(seq & 1) && __atomic_load_n(&cb->agent_pid, __ATOMIC_RELAXED) == ctl->pid &&
        __atomic_load_n(&cb->agent_start, __ATOMIC_RELAXED) == ctl->start &&
        __atomic_load_n(&cb->agent_pidns, __ATOMIC_RELAXED) == ctl->pidns)
        return;
    if (seq & 1) {
        uint32_t stuck = ctl->odd_seq;
        ctl->odd_seq = seq;
        if (seq != stuck)
            return;
    }
    /* From odd seq to the next odd value, from even to odd. */
    if (!__atomic_compare_exchange_n(&cb->agent_seq, &seq, (seq | 1u) + ((seq & 1u) << 1), 0,
                                     __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
        return;
    seq = (seq | 1u) + ((seq & 1u) << 1);
    __atomic_store_n(&cb->agent_pid, ctl->pid, __ATOMIC_RELAXED);
    __atomic_store_n(&cb->agent_start, ctl->start, __ATOMIC_RELAXED);
    __atomic_store_n(&cb->agent_pidns, ctl->pidns, __ATOMIC_RELAXED);
    __atomic_store_n(&cb->agent_seq, seq + 1, __ATOMIC_RELEASE);
}

/* Opens and checks the block called `name`.  *foreign_p is set when the
 * name belongs to another uid (or is not a regular file): the application
 * did not make it, and may have had to use a fallback name. */
static int ctl_open_at(const char *name, struct mks_ctl **ctl_p, int *foreign_p, char *err, size_t err_len)
{
    struct mks_ctl *ctl = NULL;
    struct mks_cb *cb = MAP_FAILED;
    struct stat st;
    char who[96], me[96];
    int fd = -1, rc;

    fd = shm_open(name, O_RDWR, 0);
    if (fd < 0) {
        rc = -errno;
        if (rc == -ENOENT)
            return set_err(err, err_len, rc,
                           "control block %s does not exist: is the application running "
                           "with mkscope hooks?", name);
        if ((rc == -EACCES || rc == -ELOOP) && mksi_shm_lstat(name, &st) == 0 &&
            (st.st_uid != getuid() || !S_ISREG(st.st_mode))) {
            *foreign_p = 1;
            return set_err(err, err_len, -EPERM, "control block %s belongs to %s, not to this agent's %s", name,
                           mksi_user_name(st.st_uid, who, sizeof(who)), mksi_user_name(getuid(), me, sizeof(me)));
        }
        return set_err(err, err_len, rc, "control block %s: open: %s", name, strerror(-rc));
    }
    if (fstat(fd, &st) != 0) {
        rc = set_err(err, err_len, -errno, "control block %s: stat: %s", name, strerror(errno));
        goto fail;
    }
    if (st.st_uid != getuid() || !S_ISREG(st.st_mode)) {
        *foreign_p = 1;
        rc = set_err(err, err_len, -EPERM, "control block %s belongs to %s, not to this agent's %s", name,
                     mksi_user_name(st.st_uid, who, sizeof(who)), mksi_user_name(getuid(), me, sizeof(me)));
        goto fail;
    }
    if (st.st_mode & 077) {
        /* the application creates it 0600: someone opened it to others */
        rc = set_err(err, err_len, -EPERM,
                     "control block %s is open to other users (mode %03o); expected mode 600, as the "
                     "application creates it", name, (unsigned)(st.st_mode & 0777));
        goto fail;
    }
    if ((uint64_t)st.st_size < sizeof(struct mks_cb)) {
        rc = set_err(err, err_len, -EPROTO,
                     "control block %s: %lld bytes, smaller than a header: not an mkscope "
                     "control block", name, (long long)st.st_size);
        goto fail;
    }
    cb = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (cb == MAP_FAILED) {
        rc = set_err(err, err_len, -errno, "control block %s: mmap: %s", name, strerror(errno));
        goto fail;
    }
    if (__atomic_load_n(&cb->magic, __ATOMIC_ACQUIRE) != MKS_CB_MAGIC) {
        rc = set_err(err, err_len, -EPROTO,
                     "control block %s: bad magic: not an mkscope control block (or still "
                     "being created)", name);
        goto fail;
    }
    if ((cb->layout != MKS_CB_LAYOUT && cb->layout != MKS_CB_LAYOUT_CPU) ||
        cb->header_size != sizeof(struct mks_cb)) {
        rc = set_err(err, err_len, -EPROTO,
                     "control block %s: layout %u (header %u bytes), this agent speaks layout %u "
                     "(%zu bytes): upgrade the older side", name, cb->layout, cb->header_size,
                     MKS_CB_LAYOUT, sizeof(struct mks_cb));
        goto fail;
    }
    {
        struct mks_cb probe;
        uint64_t total;
        memset(&probe, 0, sizeof(probe));
        if (cb->n_workers == 0 || cb->n_workers > MKS_CB_MAX_WORKERS ||
            cb->arena_len > MKS_CB_ARENA_MAX) {
            rc = set_err(err, err_len, -EPROTO, "control block %s: corrupt header (%u workers)",
                         name, cb->n_workers);
            goto fail;
        }
        total = mks_cb_layout(&probe, cb->n_workers, cb->arena_len,
                              cb->layout == MKS_CB_LAYOUT_CPU);
        if (total != cb->total_size || total != (uint64_t)st.st_size ||
            probe.cpu_ring != cb->cpu_ring || probe.cpu_off != cb->cpu_off ||
            probe.workers_off != cb->workers_off || probe.cov_off != cb->cov_off ||
            probe.insns_off != cb->insns_off || probe.schema_off != cb->schema_off ||
            probe.arena_off != cb->arena_off || cb->schema_len > MKS_CB_SCHEMA_MAX) {
            rc = set_err(err, err_len, -EPROTO,
                         "control block %s: corrupt header (sizes and offsets disagree)", name);
            goto fail;
        }
    }
    if (cb->abi_version != MKS_HOOK_ABI_VERSION) {
        rc = set_err(err, err_len, -EPROTO,
                     "control block %s: hook ABI v%u, this agent knows v%u", name,
                     cb->abi_version, MKS_HOOK_ABI_VERSION);
        goto fail;
    }
    if (cb->uid != getuid()) {
        rc = set_err(err, err_len, -EPERM, "control block %s: created by uid %u, agent is uid %u",
                     name, cb->uid, (unsigned)getuid());
        goto fail;
    }
    if (cb->closed || !pid_alive(cb->app_pid)) {
        rc = set_err(err, err_len, -ESRCH,
                     "control block %s: application (pid %d) has exited; stale block", name,
                     cb->app_pid);
        goto fail;
    }
    ctl = calloc(1, sizeof(*ctl));
    if (!ctl) {
        rc = set_err(err, err_len, -ENOMEM, "control block %s: out of memory", name);
        goto fail;
    }
    close(fd);
    ctl->cb = cb;
    ctl->size = (size_t)st.st_size;
    snprintf(ctl->name, sizeof(ctl->name), "%s", name);
    __atomic_store_n(&cb->lease_deadline_ns, now_mono() + MKS_CTL_LEASE_DEFAULT_NS,
                     __ATOMIC_RELEASE);
    lease_holder(ctl);
    *ctl_p = ctl;
    return 0;
fail:
    if (cb != MAP_FAILED)
        munmap(cb, (size_t)st.st_size);
    if (fd >= 0)
        close(fd);
    return rc;
}

struct find_arg {
    struct mks_ctl **ctl_p;
    int rc, seen;
    char err[256];
};

static int try_fallback(const char *name, void *arg)
{
    struct find_arg *fa = arg;
    int foreign = 0, rc = ctl_open_at(name, fa->ctl_p, &foreign, fa->err, sizeof(fa->err));
    fa->seen++;
    if (rc == 0)
        return 1;
    fa->rc = rc; /* a stale one of a crashed run, say: look on */
    return 0;
}

int mks_ctl_open_err(const char *job, uint32_t rank, struct mks_ctl **ctl_p, char *err,
                     size_t err_len)
{
    char name[MKSI_SHM_NAME_MAX], prefix[MKSI_SHM_NAME_MAX];
    int rc, foreign = 0;

    if (!ctl_p)
        return set_err(err, err_len, -EINVAL, "mks_ctl_open: no output pointer");
    if ((rc = mks_ctl_name(job, rank, name, sizeof(name))) != 0)
        return set_err(err, err_len, rc, "invalid job name '%s': use 1-64 of [A-Za-z0-9_.-]",
                       job ? job : "(null)");
    rc = ctl_open_at(name, ctl_p, &foreign, err, err_len);
    if (rc == 0 || (rc != -ENOENT && !foreign))
        return rc;
    /* Missing, or another user's: the application may be under its
     * fallback name. */
    struct find_arg fa = {.ctl_p = ctl_p, .rc = 0, .seen = 0};
    fa.err[0] = '\0';
    int frc = mksi_ctl_each_fallback(job, rank, try_fallback, &fa);
    if (frc == 0 && fa.seen && fa.rc == 0) {
        if (err && err_len)
            err[0] = '\0';
        return 0;
    }
    if (fa.seen)
        return set_err(err, err_len, fa.rc, "%s", fa.err);
    if (foreign) {
        char msg[256];
        snprintf(msg, sizeof(msg), "%s", err && err_len ? err : "");
        mksi_ctl_fallback_prefix(job, rank, (uint32_t)getuid(), prefix, sizeof(prefix));
        /* waiting, as for a missing block: the application uses a name of
         * its own when it starts */
        return set_err(err, err_len, -ENOENT,
                       "%s (another user created the name first), and no block %s* of this uid exists: "
                       "is the application running with mkscope hooks?", msg, prefix);
    }
    return rc;
}

int mks_ctl_open(const char *job, uint32_t rank, struct mks_ctl **ctl_p)
{
    char err[256];
    int rc = mks_ctl_open_err(job, rank, ctl_p, err, sizeof(err));
    if (rc != 0)
        fprintf(stderr, "mkscope: %s\n", err);
    return rc;
}

void mks_ctl_close(struct mks_ctl *ctl)
{
    if (!ctl)
        return;
    for (int i = 0; i < MKS_MAX_MAPS; i++)
        free(ctl->ring_seen[i]);
    if (ctl->cb)
        munmap(ctl->cb, ctl->size);
    free(ctl);
}

int mks_ctl_info(const struct mks_ctl *ctl, struct mks_ctl_info *info)
{
    const struct mks_cb *cb;
    uint64_t len;
    if (!ctl || !info)
        return -EINVAL;
    cb = ctl->cb;
    memset(info, 0, sizeof(*info));
    info->abi_version = cb->abi_version;
    info->rank = cb->rank;
    info->n_ranks = cb->n_ranks;
    info->n_workers = cb->n_workers;
    info->app_pid = cb->app_pid;
    info->app_start_ns = cb->app_start_ns;
    memcpy(info->gpu_uuid, cb->gpu_uuid, sizeof(info->gpu_uuid));
    info->gpu_uuid[sizeof(info->gpu_uuid) - 1] = 0;
    len = __atomic_load_n(&cb->schema_len, __ATOMIC_ACQUIRE);
    if (len && len <= MKS_CB_SCHEMA_MAX) {
        info->schema = (const uint8_t *)cb + cb->schema_off;
        info->schema_len = (size_t)len;
    }
    info->lease_lapses = __atomic_load_n(&cb->lease_lapses, __ATOMIC_ACQUIRE);
    info->epoch = __atomic_load_n(&cb->epoch, __ATOMIC_ACQUIRE);
    info->agent_deaths = __atomic_load_n(&cb->agent_deaths, __ATOMIC_ACQUIRE);
    info->host_workers = cb->cpu_ring != 0;
    return 0;
}

/* The ring's cumulative wait at time t, interpolated between the samples
 * either side (lo and hi: the oldest and newest sample still trusted). */
static int cpu_at(const struct mks_cb_cpu *cpu, uint64_t lo, uint64_t hi, uint64_t t,
                  double *wait_p, double *runs_p)
{
    const struct mks_cb_cpu_sample *s = cpu->s;
#define CPU_T(i) __atomic_load_n(&s[(i) % MKS_CB_CPU_RING].t_ns, __ATOMIC_RELAXED)
#define CPU_W(i) __atomic_load_n(&s[(i) % MKS_CB_CPU_RING].wait_ns, __ATOMIC_RELAXED)
#define CPU_R(i) __atomic_load_n(&s[(i) % MKS_CB_CPU_RING].runs, __ATOMIC_RELAXED)
    if (t < CPU_T(lo) || t > CPU_T(hi))
        return -ENODATA;
    uint64_t a = lo, b = hi; /* t(a) <= t <= t(b) */
    while (b - a > 1) {
        uint64_t m = a + (b - a) / 2;
        if (CPU_T(m) <= t)
            a = m;
        else
            b = m;
    }
    uint64_t ta = CPU_T(a), tb = CPU_T(b), wa = CPU_W(a), wb = CPU_W(b), ra = CPU_R(a),
             rb = CPU_R(b);
    if (tb < ta || wb < wa || rb < ra)
        return -ENODATA; /* overwritten while read */
    double f = tb == ta ? 0 : (double)(t - ta) / (double)(tb - ta);
    *wait_p = (double)wa + (double)(wb - wa) * f;
    *runs_p = (double)ra + (double)(rb - ra) * f;
    return 0;
#undef CPU_T
#undef CPU_W
#undef CPU_R
}

int mks_ctl_cpu_wait(const struct mks_ctl *ctl, uint64_t t0_ns, uint64_t t1_ns,
                     uint64_t *wait_ns_p, uint64_t *runs_p)
{
    if (!ctl || !wait_ns_p || !runs_p || t1_ns < t0_ns)
        return -EINVAL;
    const struct mks_cb *cb = ctl->cb;
    if (!cb->cpu_ring)
        return -ENODATA;
    const struct mks_cb_cpu *cpu =
        (const struct mks_cb_cpu *)((const uint8_t *)cb + cb->cpu_off);
    if (__atomic_load_n(&cpu->unreadable, __ATOMIC_ACQUIRE))
        return -ENODATA;
    uint64_t head = __atomic_load_n(&cpu->head, __ATOMIC_ACQUIRE);
    if (head < 2)
        return -ENODATA;
    /* Leave a margin the pump may overwrite while this reads (it writes
     * one sample a tick). */
    uint64_t lo = head > MKS_CB_CPU_RING - CPU_MARGIN ? head - (MKS_CB_CPU_RING - CPU_MARGIN) : 0;
    double w0, w1, r0, r1;
    if (cpu_at(cpu, lo, head - 1, t0_ns, &w0, &r0) || cpu_at(cpu, lo, head - 1, t1_ns, &w1, &r1))
        return -ENODATA;
    uint64_t now = __atomic_load_n(&cpu->head, __ATOMIC_ACQUIRE);
    if (now - lo > MKS_CB_CPU_RING)
        return -ENODATA; /* the pump lapped this read */
    *wait_ns_p = w1 > w0 ? (uint64_t)(w1 - w0 + 0.5) : 0;
    *runs_p = r1 > r0 ? (uint64_t)(r1 - r0 + 0.5) : 0;
    return 0;
}

int mks_ctl_alive(const struct mks_ctl *ctl)
{
    if (!ctl)
        return 0;
    if (__atomic_load_n(&ctl->cb->closed, __ATOMIC_ACQUIRE) || !pid_alive(ctl->cb->app_pid))
        return 0;
    /* kill(pid, 0) succeeds on a zombie: an application killed by a signal
     * whose parent has not reaped it yet (or never will, under a pid 1 that
     * reaps nothing) is dead all the same. */
    uint64_t start;
    int zombie = 0;
    return mksi_proc_start(ctl->cb->app_pid, &start, &zombie) != 0 || !zombie;
}

int mks_ctl_lease(struct mks_ctl *ctl, uint64_t lease_ns)
{
    if (!ctl || lease_ns == 0)
        return -EINVAL;
    __atomic_store_n(&ctl->cb->lease_deadline_ns, now_mono() + lease_ns, __ATOMIC_RELEASE);
    lease_holder(ctl);
    return 0;
}

/* ---- maps ------------------------------------------------------------------ */

static void map_release(struct mks_ctl *ctl, uint32_t id)
{
    struct mks_map_desc *d = &ctl->cb->maps[id];
    if (d->refs > 1) {
        d->refs--;
        return;
    }
    d->refs = 0;
    __atomic_store_n(&d->state, MKS_MAPSTATE_FREE, __ATOMIC_RELEASE);
    free(ctl->ring_seen[id]);
    ctl->ring_seen[id] = NULL;
}

/* Find a free descriptor and arena space for `need` bytes: reuse a freed
 * map's region when it is large enough, else take fresh arena. */
static int map_alloc(struct mks_cb *cb, uint64_t need, uint32_t *id_p)
{
    int fresh = -1, reuse = -1;
    for (uint32_t i = 0; i < MKS_MAX_MAPS; i++) {
        struct mks_map_desc *d = &cb->maps[i];
        if (d->state != MKS_MAPSTATE_FREE)
            continue;
        if (d->alloc_bytes >= need && (reuse < 0 || d->alloc_bytes < cb->maps[reuse].alloc_bytes))
            reuse = (int)i;
        if (d->alloc_bytes == 0 && fresh < 0)
            fresh = (int)i;
    }
    if (reuse >= 0) {
        *id_p = (uint32_t)reuse;
        return 0;
    }
    if (fresh < 0) {
        /* Every free descriptor holds a region too small; give one up. */
        for (uint32_t i = 0; i < MKS_MAX_MAPS && fresh < 0; i++)
            if (cb->maps[i].state == MKS_MAPSTATE_FREE)
                fresh = (int)i;
        if (fresh < 0)
            return -ENOSPC;
    }
    if (cb->arena_brk + need > cb->arena_len)
        return -ENOMEM;
    cb->maps[fresh].alloc_off = cb->arena_brk;
    cb->maps[fresh].alloc_bytes = need;
    cb->arena_brk += need;
    *id_p = (uint32_t)fresh;
    return 0;
}

static int map_create(struct mks_ctl *ctl, const struct mks_map_spec *spec, const void *init,
                      size_t init_len, uint32_t *id_p, char *err, size_t err_len)
{
    struct mks_cb *cb = ctl->cb;
    struct mks_map_desc d;
    uint64_t need;
    uint32_t id;
    int rc;
    memset(&d, 0, sizeof(d));
    memcpy(d.name, spec->name, sizeof(d.name));
    d.name[sizeof(d.name) - 1] = 0;
    d.type = spec->type;
    d.key_size = spec->key_size;
    d.value_size = spec->value_size;
    d.max_entries = spec->max_entries;
    if ((rc = mks_map_layout(&d, cb->n_workers, err, err_len)) != 0)
        return rc;
    if (init && (d.type != MKS_MAP_ARRAY || init_len > (uint64_t)d.value_size * d.max_entries))
        return set_err(err, err_len, -EINVAL,
                       "map '%s': initial data only for array maps, at most its size", d.name);
    need = d.bank_bytes * (d.type == MKS_MAP_RINGBUF ? 1u : (init ? 3u : 2u));
    if ((rc = map_alloc(cb, need, &id)) != 0)
        return set_err(err, err_len, rc,
                       rc == -ENOMEM ? "map '%s': arena full (%llu bytes needed); raise "
                                       "arena_bytes in the application"
                                     : "map '%s': map table full (%llu bytes needed)",
                       d.name, (unsigned long long)need);
    d.alloc_off = cb->maps[id].alloc_off;
    d.alloc_bytes = cb->maps[id].alloc_bytes;
    d.bank_off[0] = d.alloc_off;
    d.bank_off[1] = d.type == MKS_MAP_RINGBUF ? d.alloc_off : d.alloc_off + d.bank_bytes;
    if (init) {
        uint8_t *img = mks_cb_arena(cb) + d.alloc_off + 2 * d.bank_bytes;
        d.init_off = d.alloc_off + 2 * d.bank_bytes;
        memset(img, 0, d.bank_bytes);
        for (size_t i = 0; i < init_len; i++)
            img[(i / d.value_size) * d.stride + i % d.value_size] = ((const uint8_t *)init)[i];
    }
    if (d.type == MKS_MAP_RINGBUF) {
        memset(mks_cb_arena(cb) + d.alloc_off, 0, d.bank_bytes);
        free(ctl->ring_seen[id]);
        ctl->ring_seen[id] = calloc(cb->n_workers, sizeof(uint64_t));
        if (!ctl->ring_seen[id])
            return set_err(err, err_len, -ENOMEM, "map '%s': out of memory", d.name);
    } else {
        mks_map_bank_reset(mks_cb_arena(cb), &d, 0);
        mks_map_bank_reset(mks_cb_arena(cb), &d, 1);
    }
    d.refs = 1;
    d.gen = cb->maps[id].gen + 1;
    d.state = MKS_MAPSTATE_FREE;
    cb->maps[id] = d;
    __atomic_store_n(&cb->maps[id].state, MKS_MAPSTATE_LIVE, __ATOMIC_RELEASE);
    *id_p = id;
    return 0;
}

/* ---- programs ---------------------------------------------------------------- */

/* Wait until every worker has been outside a hook at least once since the
 * call: nothing can still run a program that was unpublished before it. */
static void grace_wait(struct mks_ctl *ctl)
{
    struct mks_cb *cb = ctl->cb;
    struct mks_cb_worker *w = mks_cb_workers(cb);
    uint64_t deadline = now_mono() + GRACE_TIMEOUT_NS;
    for (uint32_t i = 0; i < cb->n_workers; i++) {
        uint64_t s0 = __atomic_load_n(&w[i].seq, __ATOMIC_SEQ_CST);
        if (!(s0 & 1))
            continue;
        while (__atomic_load_n(&w[i].seq, __ATOMIC_SEQ_CST) == s0) {
            if (now_mono() > deadline || !mks_ctl_alive(ctl))
                return;
            sched_yield();
        }
    }
}

int mks_ctl_prog_load(struct mks_ctl *ctl, const struct mks_prog_spec *spec, uint32_t *prog_id_p)
{
    const size_t min_sz = offsetof(struct mks_prog_spec, cost) + sizeof(uint64_t);
    char err[256] = "";
    struct mks_cb *cb;
    struct mks_cb_prog *p;
    uint32_t slot, made[MKS_MAX_PROG_MAPS];
    int rc, have_init;

    if (!ctl || !spec || !prog_id_p || spec->sz < min_sz)
        return -EINVAL;
    if (spec->sz > sizeof(*spec)) {
        for (size_t i = sizeof(*spec); i < spec->sz; i++)
            if (((const uint8_t *)spec)[i]) {
                fprintf(stderr, "mkscope: prog_load: unknown non-zero option bytes\n");
                return -EOPNOTSUPP;
            }
    }
    have_init = spec->sz >= offsetof(struct mks_prog_spec, map_init_len) + sizeof(void *) &&
                spec->map_init && spec->map_init_len;
    cb = ctl->cb;
    if (!spec->insns || spec->n_insns == 0 || spec->n_insns > MKS_BPF_MAX_INSNS ||
        (spec->prog_type != MKS_PROG_OBSERVE && spec->prog_type != MKS_PROG_CONTROL) ||
        mks_hook_ctx_size(spec->abi_version) == 0 || spec->abi_version > cb->abi_version ||
        spec->n_maps > MKS_MAX_PROG_MAPS || (spec->n_maps && !spec->maps)) {
        fprintf(stderr, "mkscope: prog_load '%s': invalid program (%u insns, type %u, ABI v%u, "
                        "%u maps)\n", spec->name ? spec->name : "?", spec->n_insns,
                spec->prog_type, spec->abi_version, spec->n_maps);
        return -EINVAL;
    }
    for (slot = 0; slot < MKS_CB_MAX_PROGS; slot++)
        if (cb->progs[slot].state == MKS_PROG_FREE)
            break;
    if (slot == MKS_CB_MAX_PROGS) {
        fprintf(stderr, "mkscope: prog_load: all %u program slots in use; unload one\n",
                MKS_CB_MAX_PROGS);
        return -ENOSPC;
    }
    p = &cb->progs[slot];
    for (uint32_t i = 0; i < spec->n_maps; i++) {
        int32_t share = spec->share_maps ? spec->share_maps[i] : -1;
        if (share >= 0) {
            const struct mks_map_desc *d;
            const struct mks_map_spec *m = &spec->maps[i];
            if ((uint32_t)share >= MKS_MAX_MAPS ||
                cb->maps[share].state != MKS_MAPSTATE_LIVE) {
                snprintf(err, sizeof(err), "map %u: shared map id %d does not exist", i, share);
                rc = -ENOENT;
                goto undo;
            }
            d = &cb->maps[share];
            if (d->type != m->type || d->key_size != m->key_size ||
                d->value_size != m->value_size || d->max_entries != m->max_entries) {
                snprintf(err, sizeof(err), "map %u: shared map id %d has a different type or size",
                         i, share);
                rc = -EINVAL;
                goto undo;
            }
            cb->maps[share].refs++;
            made[i] = (uint32_t)share;
        } else {
            const void *init = have_init ? spec->map_init[i] : NULL;
            size_t init_len = have_init && init ? spec->map_init_len[i] : 0;
            if ((rc = map_create(ctl, &spec->maps[i], init, init_len, &made[i], err,
                                 sizeof(err))) != 0)
                goto undo;
        }
        p->map_ids[i] = made[i];
        continue;
    undo:
        while (i-- > 0)
            map_release(ctl, made[i]);
        fprintf(stderr, "mkscope: prog_load '%s': %s\n", spec->name ? spec->name : "?", err);
        return rc;
    }
    memcpy(mks_cb_insns(cb, slot), spec->insns, (size_t)spec->n_insns * sizeof(struct mks_insn));
    p->type = spec->prog_type;
    p->abi_version = spec->abi_version;
    p->n_insns = spec->n_insns;
    p->n_maps = spec->n_maps;
    p->cost = spec->cost;
    p->load_seq++;
    memset(p->name, 0, sizeof(p->name));
    if (spec->name)
        snprintf(p->name, sizeof(p->name), "%s", spec->name);
    __atomic_store_n(&p->state, MKS_PROG_LOADED, __ATOMIC_RELEASE);
    __atomic_add_fetch(&cb->ctl_seq, 1, __ATOMIC_RELEASE);
    *prog_id_p = slot;
    return 0;
}

int mks_ctl_prog_map(const struct mks_ctl *ctl, uint32_t prog_id, uint32_t i, uint32_t *map_id_p)
{
    const struct mks_cb_prog *p;
    if (!ctl || !map_id_p || prog_id >= MKS_CB_MAX_PROGS)
        return -EINVAL;
    p = &ctl->cb->progs[prog_id];
    if (p->state != MKS_PROG_LOADED)
        return -ENOENT;
    if (i >= p->n_maps)
        return -ERANGE;
    *map_id_p = p->map_ids[i];
    return 0;
}

static int word_find(uint64_t word, uint32_t prog_id)
{
    for (int i = 0; i < MKS_MAX_PROGS_PER_HOOK; i++)
        if (mks_cb_word_slot(word, (uint32_t)i) == prog_id + 1u)
            return i;
    return -1;
}

static uint64_t word_set(uint64_t word, int i, uint32_t v)
{
    word &= ~(0xffffull << (16 * i));
    return word | ((uint64_t)v << (16 * i));
}

/* Publish a new program list for a hook. */
static uint64_t hook_publish(struct mks_cb *cb, uint32_t ev, uint64_t word)
{
    struct mks_cb_hook *h = &cb->hooks[ev];
    uint64_t gen = __atomic_add_fetch(&h->gen, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&h->progs, word, __ATOMIC_RELEASE);
    if (word)
        __atomic_fetch_or(&cb->attach_mask, 1u << ev, __ATOMIC_RELEASE);
    else
        __atomic_fetch_and(&cb->attach_mask, ~(1u << ev), __ATOMIC_RELEASE);
    __atomic_add_fetch(&cb->ctl_seq, 1, __ATOMIC_RELEASE);
    return gen;
}

int mks_ctl_attach(struct mks_ctl *ctl, uint32_t prog_id, enum mks_hook_event ev,
                   int32_t replace_prog_id, uint64_t *gen_p)
{
    struct mks_cb *cb;
    uint64_t word, gen;
    int pos;
    if (!ctl || (uint32_t)ev >= MKS_EV_COUNT || prog_id >= MKS_CB_MAX_PROGS)
        return -EINVAL;
    cb = ctl->cb;
    if (cb->progs[prog_id].state != MKS_PROG_LOADED)
        return -ENOENT;
    if (cb->progs[prog_id].type == MKS_PROG_CONTROL && ev != MKS_EV_TASK_READY &&
        ev != MKS_EV_TASK_ASSIGN) {
        fprintf(stderr, "mkscope: attach: CONTROL programs attach only at task_ready or "
                        "task_assign\n");
        return -EINVAL;
    }
    word = __atomic_load_n(&cb->hooks[ev].progs, __ATOMIC_ACQUIRE);
    if (word_find(word, prog_id) >= 0)
        return -EEXIST;
    if (replace_prog_id >= 0) {
        if ((pos = word_find(word, (uint32_t)replace_prog_id)) < 0)
            return -ENOENT;
    } else {
        for (pos = 0; pos < MKS_MAX_PROGS_PER_HOOK; pos++)
            if (mks_cb_word_slot(word, (uint32_t)pos) == 0)
                break;
        if (pos == MKS_MAX_PROGS_PER_HOOK)
            return -ENOSPC;
    }
    gen = hook_publish(cb, ev, word_set(word, pos, prog_id + 1u));
    if (gen_p)
        *gen_p = gen;
    return 0;
}

int mks_ctl_detach(struct mks_ctl *ctl, uint32_t prog_id, enum mks_hook_event ev, uint64_t *gen_p)
{
    struct mks_cb *cb;
    uint64_t word, out = 0, gen;
    int pos, k = 0;
    if (!ctl || (uint32_t)ev >= MKS_EV_COUNT || prog_id >= MKS_CB_MAX_PROGS)
        return -EINVAL;
    cb = ctl->cb;
    word = __atomic_load_n(&cb->hooks[ev].progs, __ATOMIC_ACQUIRE);
    if ((pos = word_find(word, prog_id)) < 0)
        return -ENOENT;
    for (int i = 0; i < MKS_MAX_PROGS_PER_HOOK; i++) {
        uint32_t s = mks_cb_word_slot(word, (uint32_t)i);
        if (s && i != pos)
            out = word_set(out, k++, s);
    }
    gen = hook_publish(cb, ev, out);
    if (gen_p)
        *gen_p = gen;
    return 0;
}

int mks_ctl_prog_unload(struct mks_ctl *ctl, uint32_t prog_id)
{
    struct mks_cb *cb;
    struct mks_cb_prog *p;
    if (!ctl || prog_id >= MKS_CB_MAX_PROGS)
        return -EINVAL;
    cb = ctl->cb;
    p = &cb->progs[prog_id];
    if (p->state != MKS_PROG_LOADED)
        return -ENOENT;
    for (uint32_t ev = 0; ev < MKS_EV_COUNT; ev++)
        if (word_find(__atomic_load_n(&cb->hooks[ev].progs, __ATOMIC_ACQUIRE), prog_id) >= 0)
            return -EBUSY;
    grace_wait(ctl);
    for (uint32_t i = 0; i < p->n_maps; i++)
        map_release(ctl, p->map_ids[i]);
    __atomic_store_n(&p->state, MKS_PROG_FREE, __ATOMIC_RELEASE);
    __atomic_add_fetch(&cb->ctl_seq, 1, __ATOMIC_RELEASE);
    return 0;
}

int mks_ctl_set_budget(struct mks_ctl *ctl, enum mks_hook_event ev, uint32_t sample_shift,
                       uint64_t insn_budget)
{
    if (!ctl || (uint32_t)ev >= MKS_EV_COUNT || sample_shift > 31)
        return -EINVAL;
    __atomic_store_n(&ctl->cb->hooks[ev].sample_shift, sample_shift, __ATOMIC_RELEASE);
    __atomic_store_n(&ctl->cb->hooks[ev].insn_budget, insn_budget, __ATOMIC_RELEASE);
    __atomic_add_fetch(&ctl->cb->ctl_seq, 1, __ATOMIC_RELEASE);
    return 0;
}

/* ---- epochs -------------------------------------------------------------------- */

int mks_ctl_epoch_advance(struct mks_ctl *ctl, struct mks_epoch_snapshot **snap_p)
{
    struct mks_cb *cb;
    struct mks_cb_worker *w;
    struct mks_epoch_snapshot *s;
    uint64_t old, deadline;
    uint32_t bank;
    int timed_out = 0;

    if (!ctl || !snap_p)
        return -EINVAL;
    cb = ctl->cb;
    s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    old = __atomic_fetch_add(&cb->epoch, 1, __ATOMIC_SEQ_CST);
    bank = (uint32_t)(old & 1u);
    w = mks_cb_workers(cb);
    deadline = now_mono() + GRACE_TIMEOUT_NS;
    for (uint32_t i = 0; i < cb->n_workers && !timed_out; i++) {
        while (__atomic_load_n(&w[i].seq, __ATOMIC_SEQ_CST) == ((old << 1) | 1u)) {
            if (now_mono() > deadline || !mks_ctl_alive(ctl)) {
                timed_out = 1;
                break;
            }
            sched_yield();
        }
    }
    /* On the GPU the pump copies the device's old bank into ours first. */
    while (!timed_out && __atomic_load_n(&cb->on_device, __ATOMIC_ACQUIRE) &&
           __atomic_load_n(&cb->pump_epoch, __ATOMIC_ACQUIRE) < old + 1) {
        if (now_mono() > deadline || !mks_ctl_alive(ctl)) {
            timed_out = 1;
            break;
        }
        sched_yield();
    }
    if (timed_out)
        fprintf(stderr, "mkscope: %s: a worker stayed inside a hook (or the GPU pump did not "
                        "answer) for over 1 s; epoch %llu snapshot may be torn\n", ctl->name,
                (unsigned long long)old);

    s->epoch = old;
    for (uint32_t ev = 0; ev < MKS_EV_COUNT; ev++) {
        for (uint32_t i = 0; i < cb->n_workers; i++) {
            struct mks_cb_cov *c = mks_cb_cov(cb, bank, i, ev);
            s->cov[ev].eligible += c->eligible;
            s->cov[ev].ran += c->ran;
            s->cov[ev].throttled += c->throttled;
            s->cov[ev].lost += c->lost;
            memset(c, 0, sizeof(*c));
        }
        s->cov[ev].prog_gen = __atomic_load_n(&cb->hooks[ev].gen, __ATOMIC_ACQUIRE);
        __atomic_store_n(&cb->hooks[ev].budget_used[bank], 0, __ATOMIC_RELEASE);
    }
    for (uint32_t id = 0; id < MKS_MAX_MAPS; id++) {
        const struct mks_map_desc *d = &cb->maps[id];
        struct snap_map *m;
        if (__atomic_load_n(&d->state, __ATOMIC_ACQUIRE) != MKS_MAPSTATE_LIVE ||
            d->type == MKS_MAP_RINGBUF)
            continue;
        m = &s->maps[s->n_maps];
        m->data = malloc(d->bank_bytes);
        if (!m->data) {
            mks_epoch_snapshot_free(s);
            return -ENOMEM;
        }
        m->id = id;
        m->desc = *d;
        memcpy(m->data, mks_cb_arena(cb) + d->bank_off[bank], d->bank_bytes);
        mks_map_bank_reset(mks_cb_arena(cb), d, bank);
        s->n_maps++;
    }
    *snap_p = s;
    return 0;
}

void mks_epoch_snapshot_free(struct mks_epoch_snapshot *snap)
{
    if (!snap)
        return;
    for (uint32_t i = 0; i < snap->n_maps; i++)
        free(snap->maps[i].data);
    free(snap);
}

uint64_t mks_epoch_snapshot_epoch(const struct mks_epoch_snapshot *snap)
{
    return snap ? snap->epoch : 0;
}

int mks_epoch_snapshot_coverage(const struct mks_epoch_snapshot *snap, enum mks_hook_event ev,
                                struct mks_coverage *cov)
{
    if (!snap || !cov || (uint32_t)ev >= MKS_EV_COUNT)
        return -EINVAL;
    *cov = snap->cov[ev];
    return 0;
}

int mks_epoch_snapshot_map(const struct mks_epoch_snapshot *snap, uint32_t map_id,
                           mks_map_iter_fn fn, void *arg)
{
    if (!snap || !fn)
        return -EINVAL;
    for (uint32_t i = 0; i < snap->n_maps; i++)
        if (snap->maps[i].id == map_id)
            return mks_map_bank_visit(snap->maps[i].data, &snap->maps[i].desc, fn, arg);
    return -ENOENT;
}

int mks_ctl_ring_drain(struct mks_ctl *ctl, uint32_t map_id, mks_ring_fn fn, void *arg,
                       uint64_t *dropped_p)
{
    struct mks_cb *cb;
    const struct mks_map_desc *d;
    uint64_t dropped = 0;
    int rc = 0;
    if (!ctl || map_id >= MKS_MAX_MAPS)
        return -EINVAL;
    cb = ctl->cb;
    d = &cb->maps[map_id];
    if (__atomic_load_n(&d->state, __ATOMIC_ACQUIRE) != MKS_MAPSTATE_LIVE ||
        d->type != MKS_MAP_RINGBUF)
        return -ENOENT;
    if (!ctl->ring_seen[map_id] &&
        !(ctl->ring_seen[map_id] = calloc(cb->n_workers, sizeof(uint64_t))))
        return -ENOMEM;
    for (uint32_t wk = 0; wk < d->n_workers && rc == 0; wk++) {
        uint64_t total = 0;
        rc = mks_map_ring_consume(mks_cb_arena(cb), d, wk, fn, arg, &total);
        dropped += total - ctl->ring_seen[map_id][wk];
        ctl->ring_seen[map_id][wk] = total;
    }
    if (dropped_p)
        *dropped_p = dropped;
    return rc;
}

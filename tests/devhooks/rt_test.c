/*
 * Control block and runtime on the CPU backend: open/validate, attach,
 * detach and replace, exact coverage (eligible, ran, throttled, lost),
 * CONTROL hints, ring draining, lease expiry, detach on the death of the
 * agent process (but not on a stalled one), and a hot swap while four
 * worker threads fire events continuously with no event lost or counted
 * twice across the swap and across epoch flips.  Host worker threads'
 * wait for a CPU: measured while two declared workers share one core, not
 * measured (never zero) without the declaration.
 */
#include <errno.h>
#include <sched.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <dirent.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "insn.h"
/* White-box: the lease holder's record in the control block. */
#include "../../devhooks/src/rt_internal.h"
#include "mkscope/ctl.h"
#include "mkscope/runtime.h"

#define N(a) ((uint32_t)(sizeof(a) / sizeof((a)[0])))

#define SWAP_WORKERS 4 /* worker threads of the concurrent tests */

static char job[64];

struct fixture {
    struct mks_rt *rt;
    struct mks_ctl *ctl;
    pid_t agent; /* a child acting as the agent, killed at teardown */
};

static int setup(void **state)
{
    static int seq;
    struct fixture *f = calloc(1, sizeof(*f));
    struct mks_rt_opts o;
    if (!f)
        return -1;
    snprintf(job, sizeof(job), "rttest%d-%d", (int)getpid(), seq++);
    memset(&o, 0, sizeof(o));
    o.sz = sizeof(o);
    o.job = job;
    o.rank = 1;
    o.n_ranks = 2;
    o.n_workers = 4;
    o.arena_bytes = 1 << 20;
    if (mks_rt_create(&o, &f->rt) != 0 || mks_ctl_open(job, 1, &f->ctl) != 0)
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    if (f->agent > 0) {
        kill(f->agent, SIGKILL);
        waitpid(f->agent, NULL, 0);
    }
    mks_ctl_close(f->ctl);
    mks_rt_destroy(f->rt);
    free(f);
    return 0;
}

static const struct mks_map_spec count_map = {"count", MKS_MAP_ARRAY, 4, 8, 1};

static uint32_t load(struct fixture *f, const struct mks_insn *insns, uint32_t n, uint32_t type,
                     const struct mks_map_spec *maps, uint32_t n_maps, uint64_t cost)
{
    struct mks_prog_spec s;
    uint32_t id = 0;
    memset(&s, 0, sizeof(s));
    s.sz = sizeof(s);
    s.name = "t";
    s.prog_type = type;
    s.abi_version = 1;
    s.insns = insns;
    s.n_insns = n;
    s.maps = maps;
    s.n_maps = n_maps;
    s.cost = cost;
    assert_int_equal(mks_ctl_prog_load(f->ctl, &s, &id), 0);
    return id;
}

static int32_t fire(struct fixture *f, uint32_t worker, enum mks_hook_event ev)
{
    struct mks_hook_ctx ctx;
    memset(&ctx, 0, sizeof(ctx));
    ctx.event = (uint16_t)ev;
    ctx.worker = worker;
    return MKS_HOOK(f->rt, &ctx);
}

static int sum_u64(const void *key, const void *value, void *arg)
{
    (void)key;
    *(uint64_t *)arg += *(const uint64_t *)value;
    return 0;
}

static uint64_t snap_count(struct mks_epoch_snapshot *s, uint32_t map_id)
{
    uint64_t sum = 0;
    assert_int_equal(mks_epoch_snapshot_map(s, map_id, sum_u64, &sum), 0);
    return sum;
}

static void test_open_info_and_errors(void **state)
{
    struct fixture *f = *state;
    struct mks_ctl_info info;
    struct mks_rt *dup = NULL;
    struct mks_ctl *c = NULL;
    struct mks_rt_opts o;
    char err[256];
    (void)state;
    assert_int_equal(mks_rt_publish_schema(f->rt, "schema!", 7), 0);
    assert_int_equal(mks_ctl_info(f->ctl, &info), 0);
    assert_int_equal(info.rank, 1);
    assert_int_equal(info.n_ranks, 2);
    assert_int_equal(info.n_workers, 4);
    assert_int_equal(info.app_pid, getpid());
    assert_int_equal(info.schema_len, 7);
    assert_memory_equal(info.schema, "schema!", 7);
    assert_true(mks_ctl_alive(f->ctl));

    memset(&o, 0, sizeof(o));
    o.sz = sizeof(o);
    o.job = job;
    o.rank = 1;
    o.n_ranks = 2;
    o.n_workers = 1;
    assert_int_equal(mks_rt_create(&o, &dup), -EEXIST);
    o.job = "bad/name";
    assert_int_equal(mks_rt_create(&o, &dup), -EINVAL);

    assert_int_equal(mks_ctl_open_err(job, 7, &c, err, sizeof(err)), -ENOENT);
    assert_non_null(strstr(err, "does not exist"));
    assert_int_equal(mks_ctl_open_err("a b", 0, &c, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "invalid job name"));
}

/* Shared memory of the right name that is not a control block. */
static void test_foreign_shm_rejected(void **state)
{
    char name[96], fjob[64], err[256];
    struct mks_ctl *c = NULL;
    static char junk[1 << 18];
    int fd;
    (void)state;
    snprintf(fjob, sizeof(fjob), "foreign%d", (int)getpid());
    assert_int_equal(mks_ctl_name(fjob, 0, name, sizeof(name)), 0);
    fd = shm_open(name, O_CREAT | O_RDWR | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "tiny", 4), 4);
    assert_int_equal(mks_ctl_open_err(fjob, 0, &c, err, sizeof(err)), -EPROTO);
    assert_non_null(strstr(err, "smaller than a header"));
    memset(junk, 0x5a, sizeof(junk));
    assert_int_equal(pwrite(fd, junk, sizeof(junk), 0), (ssize_t)sizeof(junk));
    assert_int_equal(mks_ctl_open_err(fjob, 0, &c, err, sizeof(err)), -EPROTO);
    assert_non_null(strstr(err, "bad magic"));
    assert_null(c);
    close(fd);
    shm_unlink(name);
}

/* Fallback blocks of (job, rank) of this uid left in /dev/shm. */
static int count_fallbacks(const char *job, uint32_t rank)
{
    char prefix[MKSI_SHM_NAME_MAX];
    int n = 0;
    assert_int_equal(mksi_ctl_fallback_prefix(job, rank, (uint32_t)getuid(), prefix, sizeof(prefix)), 0);
    DIR *d = opendir(MKSI_SHM_DIR);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += strncmp(e->d_name, prefix + 1, strlen(prefix) - 1) == 0;
    closedir(d);
    return n;
}

/* The application starts under its fallback name and the agent finds it. */
static void expect_fallback_works(const char *job)
{
    struct mks_rt_opts o;
    struct mks_rt *rt = NULL;
    struct mks_ctl *c = NULL;
    struct mks_ctl_info info;
    char err[512];
    memset(&o, 0, sizeof(o));
    o.sz = sizeof(o);
    o.job = job;
    o.rank = 0;
    o.n_ranks = 1;
    o.n_workers = 2;
    assert_int_equal(mks_rt_create(&o, &rt), 0);
    assert_int_equal(count_fallbacks(job, 0), 1);
    int rc = mks_ctl_open_err(job, 0, &c, err, sizeof(err));
    if (rc)
        print_error("agent: %s\n", err);
    assert_int_equal(rc, 0);
    assert_int_equal(mks_ctl_info(c, &info), 0);
    assert_int_equal(info.app_pid, getpid());
    assert_int_equal(info.n_workers, 2);
    /* a second application of the same job and rank is refused */
    struct mks_rt *dup = NULL;
    assert_int_equal(mks_rt_create(&o, &dup), -EEXIST);
    mks_ctl_close(c);
    mks_rt_destroy(rt);
    assert_int_equal(count_fallbacks(job, 0), 0);
}

/* Another local user who creates /dev/shm/mkscope.JOB.RANK first, as a file
 * with a header that claims a live owner (pid 1), or as a symbolic link,
 * does not stop the rank: it starts under a name nobody could create in
 * advance, which the agent finds.  Before, the first said "held by a live
 * process" and the second "File exists", and the rank did not start. */
static void test_name_taken_by_another_user(void **state)
{
    (void)state;
    char job[64], name[MKSI_SHM_NAME_MAX], err[512];
    struct mks_ctl *c = NULL;
    struct stat st;

    /* a symbolic link (needs no other uid) */
    snprintf(job, sizeof(job), "squat-link%d", (int)getpid());
    assert_int_equal(mks_ctl_name(job, 0, name, sizeof(name)), 0);
    char path[256];
    snprintf(path, sizeof(path), "%s%s", MKSI_SHM_DIR, name);
    assert_int_equal(symlink("/tmp/mkscope-somewhere-else", path), 0);
    assert_int_equal(mks_ctl_open_err(job, 0, &c, err, sizeof(err)), -ENOENT); /* the agent waits */
    assert_non_null(strstr(err, "another user created the name first"));
    expect_fallback_works(job);
    assert_int_equal(lstat(path, &st), 0); /* left alone */
    assert_true(S_ISLNK(st.st_mode));
    unlink(path);

    if (getuid() != 0) {
        print_message("not root: the case of a file of another uid is skipped\n");
        return;
    }
    /* a file of uid 65534 claiming to be a live block of pid 1 */
    snprintf(job, sizeof(job), "squat-file%d", (int)getpid());
    assert_int_equal(mks_ctl_name(job, 0, name, sizeof(name)), 0);
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0644);
    assert_true(fd >= 0);
    struct mks_cb fake;
    memset(&fake, 0, sizeof(fake));
    fake.magic = MKS_CB_MAGIC;
    fake.app_pid = 1;
    assert_int_equal(write(fd, &fake, sizeof(fake)), (ssize_t)sizeof(fake));
    assert_int_equal(fchown(fd, 65534, 65534), 0);
    close(fd);
    assert_int_equal(mks_ctl_open_err(job, 0, &c, err, sizeof(err)), -ENOENT);
    assert_non_null(strstr(err, "belongs to uid 65534"));
    assert_non_null(strstr(err, "~u0.* of this uid exists"));
    expect_fallback_works(job);
    snprintf(path, sizeof(path), "%s%s", MKSI_SHM_DIR, name);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_uid, 65534); /* untouched */
    shm_unlink(name);
}

/* The agent refuses a block of its uid that someone opened to others. */
static void test_block_open_to_others_refused(void **state)
{
    struct fixture *f = *state;
    char name[MKSI_SHM_NAME_MAX], path[256], err[512];
    struct mks_ctl *c = NULL;
    assert_int_equal(mks_ctl_name(job, 1, name, sizeof(name)), 0);
    snprintf(path, sizeof(path), "%s%s", MKSI_SHM_DIR, name);
    assert_int_equal(chmod(path, 0666), 0);
    assert_int_equal(mks_ctl_open_err(job, 1, &c, err, sizeof(err)), -EPERM);
    assert_non_null(strstr(err, "is open to other users (mode 666)"));
    assert_int_equal(chmod(path, 0600), 0);
    assert_int_equal(mks_ctl_open_err(job, 1, &c, err, sizeof(err)), 0);
    mks_ctl_close(c);
    (void)f;
}

static void test_attach_detach_coverage(void **state)
{
    struct fixture *f = *state;
    struct mks_insn p[] = PROG_COUNT_MAP0;
    struct mks_epoch_snapshot *s = NULL;
    struct mks_coverage cov;
    uint32_t id, map;
    uint64_t gen = 0, gen2 = 0;

    id = load(f, p, N(p), MKS_PROG_OBSERVE, &count_map, 1, N(p));
    assert_int_equal(mks_ctl_prog_map(f->ctl, id, 0, &map), 0);
    for (int i = 0; i < 5; i++)
        fire(f, 0, MKS_EV_TASK_END); /* detached: nothing counted */
    assert_int_equal(mks_ctl_attach(f->ctl, id, MKS_EV_TASK_END, -1, &gen), 0);
    assert_int_equal(mks_ctl_attach(f->ctl, id, MKS_EV_TASK_END, -1, NULL), -EEXIST);
    for (int i = 0; i < 10; i++)
        fire(f, (uint32_t)i % 4, MKS_EV_TASK_END);
    fire(f, 0, MKS_EV_TASK_START); /* another hook */
    assert_int_equal(mks_ctl_epoch_advance(f->ctl, &s), 0);
    assert_int_equal(mks_epoch_snapshot_epoch(s), 0);
    assert_int_equal(snap_count(s, map), 10);
    assert_int_equal(mks_epoch_snapshot_coverage(s, MKS_EV_TASK_END, &cov), 0);
    assert_int_equal(cov.eligible, 10);
    assert_int_equal(cov.ran, 10);
    assert_int_equal(cov.throttled, 0);
    assert_int_equal(cov.lost, 0);
    assert_int_equal(cov.prog_gen, gen);
    assert_int_equal(mks_epoch_snapshot_coverage(s, MKS_EV_TASK_START, &cov), 0);
    assert_int_equal(cov.eligible, 0);
    mks_epoch_snapshot_free(s);

    /* Epoch values are deltas: the new epoch starts from zero. */
    fire(f, 1, MKS_EV_TASK_END);
    assert_int_equal(mks_ctl_prog_unload(f->ctl, id), -EBUSY);
    assert_int_equal(mks_ctl_detach(f->ctl, id, MKS_EV_TASK_END, &gen2), 0);
    assert_true(gen2 > gen);
    fire(f, 1, MKS_EV_TASK_END);
    assert_int_equal(mks_ctl_epoch_advance(f->ctl, &s), 0);
    assert_int_equal(snap_count(s, map), 1);
    assert_int_equal(mks_epoch_snapshot_coverage(s, MKS_EV_TASK_END, &cov), 0);
    assert_int_equal(cov.eligible, 1);
    assert_int_equal(cov.prog_gen, gen2);
    mks_epoch_snapshot_free(s);
    assert_int_equal(mks_ctl_detach(f->ctl, id, MKS_EV_TASK_END, NULL), -ENOENT);
    assert_int_equal(mks_ctl_prog_unload(f->ctl, id), 0);
    assert_int_equal(mks_ctl_prog_map(f->ctl, id, 0, &map), -ENOENT);
}

static void test_sampling_budget_lost(void **state)
{
    struct fixture *f = *state;
    struct mks_insn p[] = PROG_COUNT_MAP0;
    struct mks_insn oob[] = {LDX_DW(0, 1, 200), EXIT()}; /* past the context */
    struct mks_epoch_snapshot *s = NULL;
    struct mks_coverage cov;
    uint32_t id, bad, map;

    id = load(f, p, N(p), MKS_PROG_OBSERVE, &count_map, 1, N(p));
    assert_int_equal(mks_ctl_prog_map(f->ctl, id, 0, &map), 0);
    assert_int_equal(mks_ctl_attach(f->ctl, id, MKS_EV_TASK_READY, -1, NULL), 0);
    assert_int_equal(mks_ctl_set_budget(f->ctl, MKS_EV_TASK_READY, 2, 0), 0);
    for (int i = 0; i < 40; i++)
        fire(f, 2, MKS_EV_TASK_READY);
    assert_int_equal(mks_ctl_epoch_advance(f->ctl, &s), 0);
    assert_int_equal(mks_epoch_snapshot_coverage(s, MKS_EV_TASK_READY, &cov), 0);
    assert_int_equal(cov.eligible, 40);
    assert_int_equal(cov.ran, 10);
    assert_int_equal(cov.throttled, 30);
    assert_int_equal(snap_count(s, map), 10);
    mks_epoch_snapshot_free(s);

    /* Budget of five declared costs: a run is admitted while the
     * instructions used so far plus its declared cost fit, and the
     * program executes 10 of its 11 slots (lddw takes two), so 5 runs. */
    assert_int_equal(mks_ctl_set_budget(f->ctl, MKS_EV_TASK_READY, 0, 5 * N(p)), 0);
    for (int i = 0; i < 20; i++)
        fire(f, 3, MKS_EV_TASK_READY);
    assert_int_equal(mks_ctl_epoch_advance(f->ctl, &s), 0);
    assert_int_equal(mks_epoch_snapshot_coverage(s, MKS_EV_TASK_READY, &cov), 0);
    assert_int_equal(cov.eligible, 20);
    assert_int_equal(cov.ran + cov.throttled, 20);
    assert_int_equal(cov.ran, 5);
    assert_int_equal(snap_count(s, map), cov.ran);
    mks_epoch_snapshot_free(s);

    /* A guard abort counts as lost; the other program on the hook still runs. */
    assert_int_equal(mks_ctl_set_budget(f->ctl, MKS_EV_TASK_READY, 0, 0), 0);
    bad = load(f, oob, N(oob), MKS_PROG_OBSERVE, NULL, 0, 2);
    assert_int_equal(mks_ctl_attach(f->ctl, bad, MKS_EV_TASK_READY, -1, NULL), 0);
    for (int i = 0; i < 7; i++)
        fire(f, 0, MKS_EV_TASK_READY);
    assert_int_equal(mks_ctl_epoch_advance(f->ctl, &s), 0);
    assert_int_equal(mks_epoch_snapshot_coverage(s, MKS_EV_TASK_READY, &cov), 0);
    assert_int_equal(cov.eligible, 7);
    assert_int_equal(cov.ran, 7);
    assert_int_equal(cov.lost, 7);
    assert_int_equal(snap_count(s, map), 7);
    mks_epoch_snapshot_free(s);
}

static void test_control_hint_and_limits(void **state)
{
    struct fixture *f = *state;
    struct mks_insn big[] = {MOV64_IMM(0, 100), EXIT()};
    struct mks_insn neg[] = {MOV64_IMM(0, -3), EXIT()};
    struct mks_insn three[] = {MOV64_IMM(0, 3), EXIT()};
    struct mks_insn nop[] = {MOV64_IMM(0, 0), EXIT()};
    uint32_t b, n, t, obs[4];

    b = load(f, big, N(big), MKS_PROG_CONTROL, NULL, 0, 2);
    n = load(f, neg, N(neg), MKS_PROG_CONTROL, NULL, 0, 2);
    t = load(f, three, N(three), MKS_PROG_CONTROL, NULL, 0, 2);
    assert_int_equal(mks_ctl_attach(f->ctl, b, MKS_EV_TASK_END, -1, NULL), -EINVAL);
    assert_int_equal(mks_ctl_attach(f->ctl, n, MKS_EV_TASK_ASSIGN, -1, NULL), 0);
    assert_int_equal(fire(f, 0, MKS_EV_TASK_ASSIGN), 0);
    assert_int_equal(mks_ctl_attach(f->ctl, t, MKS_EV_TASK_ASSIGN, -1, NULL), 0);
    assert_int_equal(fire(f, 0, MKS_EV_TASK_ASSIGN), 3);
    assert_int_equal(mks_ctl_attach(f->ctl, b, MKS_EV_TASK_ASSIGN, n, NULL), 0);
    assert_int_equal(fire(f, 0, MKS_EV_TASK_ASSIGN), MKS_PRIO_HINT_MAX);

    /* Four programs per hook, no more. */
    for (int i = 0; i < 4; i++) {
        obs[i] = load(f, nop, N(nop), MKS_PROG_OBSERVE, NULL, 0, 2);
        assert_int_equal(mks_ctl_attach(f->ctl, obs[i], MKS_EV_COMM_END, -1, NULL), 0);
    }
    t = load(f, nop, N(nop), MKS_PROG_OBSERVE, NULL, 0, 2);
    assert_int_equal(mks_ctl_attach(f->ctl, t, MKS_EV_COMM_END, -1, NULL), -ENOSPC);
    assert_int_equal(mks_ctl_attach(f->ctl, t, MKS_EV_COMM_END, (int32_t)obs[2], NULL), 0);
    assert_int_equal(mks_ctl_attach(f->ctl, t, MKS_EV_COMM_END, (int32_t)obs[2], NULL), -EEXIST);
}

struct rec_count {
    uint64_t n, bytes;
};
static int on_rec(uint32_t worker, const void *rec, uint32_t len, void *arg)
{
    struct rec_count *c = arg;
    const struct mks_hook_ctx *ctx = rec;
    assert_int_equal(len, 16);
    assert_int_equal(ctx->worker, worker);
    c->n++;
    c->bytes += len;
    return 0;
}

static void test_ring_drain(void **state)
{
    struct fixture *f = *state;
    /* ringbuf_output(map0, ctx, 16, 0): the first 16 bytes of the context */
    struct mks_insn p[] = {MOV64_REG(2, 1), LD_MAP(1, 0), MOV64_IMM(3, 16), MOV64_IMM(4, 0),
                           CALL(MKS_HELPER_RINGBUF_OUTPUT), MOV64_IMM(0, 0), EXIT()};
    static const struct mks_map_spec ring = {"ring", MKS_MAP_RINGBUF, 0, 0, 128};
    struct mks_epoch_snapshot *s = NULL;
    struct mks_coverage cov;
    struct rec_count c = {0, 0};
    uint64_t dropped = 0;
    uint32_t id, map;

    id = load(f, p, N(p), MKS_PROG_OBSERVE, &ring, 1, N(p));
    assert_int_equal(mks_ctl_prog_map(f->ctl, id, 0, &map), 0);
    assert_int_equal(mks_ctl_attach(f->ctl, id, MKS_EV_DEP_RELEASE, -1, NULL), 0);
    for (int i = 0; i < 10; i++) /* 128 / 24 = 5 fit per worker */
        fire(f, 1, MKS_EV_DEP_RELEASE);
    fire(f, 2, MKS_EV_DEP_RELEASE);
    assert_int_equal(mks_ctl_ring_drain(f->ctl, map, on_rec, &c, &dropped), 0);
    assert_int_equal(c.n, 6);
    assert_int_equal(dropped, 5);
    fire(f, 1, MKS_EV_DEP_RELEASE);
    assert_int_equal(mks_ctl_ring_drain(f->ctl, map, on_rec, &c, &dropped), 0);
    assert_int_equal(c.n, 7);
    assert_int_equal(dropped, 0); /* since the last drain */
    assert_int_equal(mks_ctl_epoch_advance(f->ctl, &s), 0);
    assert_int_equal(mks_epoch_snapshot_coverage(s, MKS_EV_DEP_RELEASE, &cov), 0);
    assert_int_equal(cov.ran, 12);
    assert_int_equal(cov.lost, 5);
    mks_epoch_snapshot_free(s);
}

/* Rings drained while 4 workers keep producing: every event ends up either
 * drained or counted as dropped, each record intact and in order per worker. */
struct ring_worker {
    struct fixture *f;
    uint32_t id;
    uint64_t fired;
    int *stop;
};

static void *ring_fire(void *p)
{
    struct ring_worker *w = p;
    while (!__atomic_load_n(w->stop, __ATOMIC_ACQUIRE) && w->fired < 200000) {
        struct mks_hook_ctx ctx;
        memset(&ctx, 0, sizeof(ctx));
        ctx.event = MKS_EV_DEP_RELEASE;
        ctx.worker = w->id;
        ctx.task_gen = w->fired; /* the record carries its sequence number */
        MKS_HOOK(w->f->rt, &ctx);
        __atomic_store_n(&w->fired, w->fired + 1, __ATOMIC_RELEASE);
    }
    return NULL;
}

static uint64_t ring_fired(const struct ring_worker *w, uint32_t n)
{
    uint64_t sum = 0;
    for (uint32_t i = 0; i < n; i++)
        sum += __atomic_load_n(&w[i].fired, __ATOMIC_ACQUIRE);
    return sum;
}

struct drain_state {
    uint64_t n, next[SWAP_WORKERS], gaps;
};

static int on_seq(uint32_t worker, const void *rec, uint32_t len, void *arg)
{
    struct drain_state *d = arg;
    const struct mks_hook_ctx *ctx = rec;
    assert_int_equal(len, 32);
    assert_true(worker < SWAP_WORKERS);
    assert_int_equal(ctx->worker, worker);
    assert_true(ctx->task_gen >= d->next[worker]); /* in order, never twice */
    d->gaps += ctx->task_gen != d->next[worker];
    d->next[worker] = ctx->task_gen + 1;
    d->n++;
    return 0;
}

static void test_ring_drain_while_running(void **state)
{
    struct fixture *f = *state;
    /* ringbuf_output(map0, ctx, 32, 0): the first 32 bytes, task_gen included */
    struct mks_insn p[] = {MOV64_REG(2, 1), LD_MAP(1, 0), MOV64_IMM(3, 32), MOV64_IMM(4, 0),
                           CALL(MKS_HELPER_RINGBUF_OUTPUT), MOV64_IMM(0, 0), EXIT()};
    static const struct mks_map_spec ring = {"ring", MKS_MAP_RINGBUF, 0, 0, 4096};
    struct ring_worker w[SWAP_WORKERS];
    pthread_t th[SWAP_WORKERS];
    struct drain_state d;
    uint64_t dropped = 0, total_dropped = 0, fired = 0;
    uint32_t id, map;
    int stop = 0;

    memset(&d, 0, sizeof(d));
    id = load(f, p, N(p), MKS_PROG_OBSERVE, &ring, 1, N(p));
    assert_int_equal(mks_ctl_prog_map(f->ctl, id, 0, &map), 0);
    assert_int_equal(mks_ctl_attach(f->ctl, id, MKS_EV_DEP_RELEASE, -1, NULL), 0);
    for (uint32_t i = 0; i < SWAP_WORKERS; i++) {
        w[i] = (struct ring_worker){f, i, 0, &stop};
        assert_int_equal(pthread_create(&th[i], NULL, ring_fire, &w[i]), 0);
    }
    /* Drain concurrently for a while, and at least until the producers have
     * made real progress: on a loaded machine the threads may start late. */
    for (int round = 0; round < 2000 || (ring_fired(w, SWAP_WORKERS) < 20000 && round < 2000000);
         round++) {
        assert_int_equal(mks_ctl_ring_drain(f->ctl, map, on_seq, &d, &dropped), 0);
        total_dropped += dropped;
    }
    __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
    for (uint32_t i = 0; i < SWAP_WORKERS; i++) {
        pthread_join(th[i], NULL);
        fired += w[i].fired;
    }
    assert_int_equal(mks_ctl_ring_drain(f->ctl, map, on_seq, &d, &dropped), 0);
    total_dropped += dropped;
    assert_true(d.n > 0);
    assert_int_equal(d.n + total_dropped, fired);
    /* A gap in a worker's sequence is exactly where its records were dropped. */
    assert_true(d.gaps <= total_dropped);
    assert_true(total_dropped > 0 || d.gaps == 0);
}

/* An array map with an initial image (.rodata-like), read through a map
 * value reference (lddw src 6), and a second program sharing the counter
 * map of the first. */
static void test_map_init_and_sharing(void **state)
{
    struct fixture *f = *state;
    /* r6 = *(u64 *)(&konst + 0); *(u64 *)lookup(count, 0) += r6 */
    struct mks_insn p[] = {LD_MAPVAL(1, 0, 0), LDX_DW(6, 1, 0), ST_W(10, -4, 0), LD_MAP(1, 1),
                           MOV64_REG(2, 10), ADD64_IMM(2, -4), CALL(MKS_HELPER_MAP_LOOKUP),
                           JEQ_IMM(0, 0, 1), ATOMIC_ADD64(0, 6, 0), MOV64_IMM(0, 0), EXIT()};
    static const struct mks_map_spec maps[2] = {{"konst", MKS_MAP_ARRAY, 4, 8, 1},
                                                {"count", MKS_MAP_ARRAY, 4, 8, 1}};
    const uint64_t five = 5, seven = 7;
    const void *init_a[2] = {&five, NULL}, *init_b[2] = {&seven, NULL};
    const size_t init_len[2] = {8, 0};
    int32_t share[2] = {-1, -1};
    struct mks_prog_spec s;
    struct mks_epoch_snapshot *snap = NULL;
    uint32_t a, b, konst_a, count_a, konst_b, count_b;

    memset(&s, 0, sizeof(s));
    s.sz = sizeof(s);
    s.prog_type = MKS_PROG_OBSERVE;
    s.abi_version = 1;
    s.insns = p;
    s.n_insns = N(p);
    s.n_maps = 2;
    s.maps = maps;
    s.cost = N(p);
    s.map_init = init_a;
    s.map_init_len = init_len;
    assert_int_equal(mks_ctl_prog_load(f->ctl, &s, &a), 0);
    assert_int_equal(mks_ctl_prog_map(f->ctl, a, 0, &konst_a), 0);
    assert_int_equal(mks_ctl_prog_map(f->ctl, a, 1, &count_a), 0);
    share[1] = (int32_t)count_a;
    s.share_maps = share;
    s.map_init = init_b;
    assert_int_equal(mks_ctl_prog_load(f->ctl, &s, &b), 0);
    assert_int_equal(mks_ctl_prog_map(f->ctl, b, 0, &konst_b), 0);
    assert_int_equal(mks_ctl_prog_map(f->ctl, b, 1, &count_b), 0);
    assert_int_not_equal(konst_a, konst_b);
    assert_int_equal(count_a, count_b);
    assert_int_equal(mks_ctl_attach(f->ctl, a, MKS_EV_GEN_ADVANCE, -1, NULL), 0);
    assert_int_equal(mks_ctl_attach(f->ctl, b, MKS_EV_GEN_ADVANCE, -1, NULL), 0);
    for (int epoch = 0; epoch < 2; epoch++) {
        for (int i = 0; i < 3; i++)
            fire(f, 0, MKS_EV_GEN_ADVANCE);
        assert_int_equal(mks_ctl_epoch_advance(f->ctl, &snap), 0);
        /* 3 events x (5 + 7); the initial images come back every epoch */
        assert_int_equal(snap_count(snap, count_a), 36);
        assert_int_equal(snap_count(snap, konst_a), 5);
        assert_int_equal(snap_count(snap, konst_b), 7);
        mks_epoch_snapshot_free(snap);
    }
    /* A shared map lives until its last program is unloaded. */
    assert_int_equal(mks_ctl_detach(f->ctl, a, MKS_EV_GEN_ADVANCE, NULL), 0);
    assert_int_equal(mks_ctl_prog_unload(f->ctl, a), 0);
    fire(f, 0, MKS_EV_GEN_ADVANCE);
    assert_int_equal(mks_ctl_epoch_advance(f->ctl, &snap), 0);
    assert_int_equal(snap_count(snap, count_b), 7);
    mks_epoch_snapshot_free(snap);
}

static void test_lease_expiry_detaches(void **state)
{
    struct fixture *f = *state;
    struct mks_insn p[] = PROG_COUNT_MAP0;
    struct mks_ctl_info info;
    struct timespec ts = {0, 1000000};
    uint32_t id;
    id = load(f, p, N(p), MKS_PROG_OBSERVE, &count_map, 1, N(p));
    assert_int_equal(mks_ctl_attach(f->ctl, id, MKS_EV_TASK_START, -1, NULL), 0);
    assert_true(*((const struct mks_rt_hot *)(const void *)f->rt)->mask & (1u << MKS_EV_TASK_START));
    assert_int_equal(mks_ctl_lease(f->ctl, 1000000), 0); /* 1 ms */
    for (int i = 0; i < 1000; i++) {
        if (!*((const struct mks_rt_hot *)(const void *)f->rt)->mask)
            break;
        nanosleep(&ts, NULL);
    }
    assert_int_equal(*((const struct mks_rt_hot *)(const void *)f->rt)->mask, 0);
    assert_int_equal(mks_ctl_info(f->ctl, &info), 0);
    assert_int_equal(info.lease_lapses, 1);
    /* Everything is detached, so the program can be unloaded. */
    assert_int_equal(mks_ctl_detach(f->ctl, id, MKS_EV_TASK_START, NULL), -ENOENT);
    assert_int_equal(mks_ctl_prog_unload(f->ctl, id), 0);
}

/* ---- death of the agent process ---- */

static int hook_attached(struct fixture *f)
{
    return (__atomic_load_n(((const struct mks_rt_hot *)(const void *)f->rt)->mask,
                            __ATOMIC_ACQUIRE) & (1u << MKS_EV_TASK_START)) != 0;
}

/* Poll up to ms milliseconds for the hook to be detached. */
static int wait_detached(struct fixture *f, int ms)
{
    struct timespec ts = {0, 1000000};
    for (int i = 0; i < ms && hook_attached(f); i++)
        nanosleep(&ts, NULL);
    return !hook_attached(f);
}

/* A child process that acts as the agent: opens the block, takes a lease of
 * lease_ns, attaches a counting program at TASK_START, reports readiness on
 * a pipe, then waits (renewing every 5 ms when renew is set) until killed. */
static pid_t spawn_agent(struct fixture *f, uint64_t lease_ns, int renew)
{
    static const struct mks_insn p[] = PROG_COUNT_MAP0;
    int fds[2];
    char c = 0;
    pid_t pid;
    if (pipe(fds) != 0)
        return -1;
    pid = fork();
    if (pid == 0) {
        struct timespec ts = {0, 5000000};
        struct mks_ctl *ctl = NULL;
        struct mks_prog_spec s;
        uint32_t id = 0;
        close(fds[0]);
        memset(&s, 0, sizeof(s));
        s.sz = sizeof(s);
        s.name = "agent";
        s.prog_type = MKS_PROG_OBSERVE;
        s.abi_version = 1;
        s.insns = p;
        s.n_insns = N(p);
        s.maps = &count_map;
        s.n_maps = 1;
        s.cost = N(p);
        if (mks_ctl_open(job, 1, &ctl) != 0 || mks_ctl_lease(ctl, lease_ns) != 0 ||
            mks_ctl_prog_load(ctl, &s, &id) != 0 ||
            mks_ctl_attach(ctl, id, MKS_EV_TASK_START, -1, NULL) != 0)
            _exit(1);
        if (write(fds[1], "r", 1) != 1)
            _exit(1);
        for (;;) {
            if (renew)
                mks_ctl_lease(ctl, lease_ns);
            nanosleep(&ts, NULL);
        }
    }
    close(fds[1]);
    f->agent = pid;
    if (pid > 0 && read(fds[0], &c, 1) != 1)
        pid = -1;
    close(fds[0]);
    return pid;
}

static struct mks_coverage epoch_coverage(struct fixture *f)
{
    struct mks_epoch_snapshot *s = NULL;
    struct mks_coverage cov;
    assert_int_equal(mks_ctl_epoch_advance(f->ctl, &s), 0);
    assert_int_equal(mks_epoch_snapshot_coverage(s, MKS_EV_TASK_START, &cov), 0);
    mks_epoch_snapshot_free(s);
    return cov;
}

static void test_agent_death_detaches(void **state)
{
    struct fixture *f = *state;
    struct mks_ctl_info info;
    struct mks_coverage cov;
    pid_t agent = spawn_agent(f, 30ull * 1000000000ull, 0); /* a 30 s lease */
    assert_true(agent > 0);
    assert_true(hook_attached(f));
    fire(f, 0, MKS_EV_TASK_START);
    fire(f, 1, MKS_EV_TASK_START);
    cov = epoch_coverage(f);
    assert_int_equal(cov.eligible, 2);
    assert_int_equal(cov.ran, 2);

    /* Not reaped before the check: a zombie agent is a dead agent. */
    assert_int_equal(kill(agent, SIGKILL), 0);
    assert_true(wait_detached(f, 2000)); /* the lease would hold for 30 s */
    assert_int_equal(mks_ctl_info(f->ctl, &info), 0);
    assert_int_equal(info.agent_deaths, 1);
    assert_int_equal(info.lease_lapses, 1);
    fire(f, 0, MKS_EV_TASK_START);
    cov = epoch_coverage(f);
    assert_int_equal(cov.eligible, 0);
    assert_int_equal(cov.ran, 0);
    assert_int_equal(waitpid(agent, NULL, 0), agent);
    f->agent = 0;
}

static void test_stalled_agent_keeps_lease(void **state)
{
    struct fixture *f = *state;
    struct mks_ctl_info info;
    struct timespec ts = {0, 20000000};
    pid_t agent = spawn_agent(f, 1000000000ull, 1); /* renews a 1 s lease */
    assert_true(agent > 0);
    assert_true(hook_attached(f));
    /* Alive but no longer renewing: watched for some pump ticks, it keeps
     * its programs until its lease lapses. */
    assert_int_equal(kill(agent, SIGSTOP), 0);
    nanosleep(&ts, NULL);
    assert_true(hook_attached(f));
    assert_int_equal(mks_ctl_info(f->ctl, &info), 0);
    assert_int_equal(info.lease_lapses, 0);
    assert_true(wait_detached(f, 5000));
    assert_int_equal(mks_ctl_info(f->ctl, &info), 0);
    assert_int_equal(info.lease_lapses, 1);
    assert_int_equal(info.agent_deaths, 0);
    /* Its death after the lapse detaches nothing more and counts nothing. */
    assert_int_equal(kill(agent, SIGKILL), 0);
    assert_int_equal(waitpid(agent, NULL, 0), agent);
    f->agent = 0;
    nanosleep(&ts, NULL);
    assert_int_equal(mks_ctl_info(f->ctl, &info), 0);
    assert_int_equal(info.lease_lapses, 1);
    assert_int_equal(info.agent_deaths, 0);
}

/* An agent in another PID namespace: its pid means nothing to the
 * application, which must not watch it and keeps to the lease. */
static void test_foreign_pidns_agent_left_to_lease(void **state)
{
    struct fixture *f = *state;
    struct mks_cb *cb = f->rt->cb;
    struct mks_ctl_info info;
    struct timespec ts = {0, 100000000};
    uint32_t seq;
    pid_t agent = spawn_agent(f, 30ull * 1000000000ull, 0);
    assert_true(agent > 0);
    /* Rewrite the record as that agent would have from its own namespace. */
    seq = __atomic_load_n(&cb->agent_seq, __ATOMIC_ACQUIRE);
    assert_int_equal(seq & 1, 0);
    assert_int_equal(__atomic_load_n(&cb->agent_pid, __ATOMIC_RELAXED), agent);
    assert_int_not_equal(__atomic_load_n(&cb->agent_pidns, __ATOMIC_RELAXED), 0);
    __atomic_store_n(&cb->agent_seq, seq + 1, __ATOMIC_RELEASE);
    __atomic_store_n(&cb->agent_pidns, cb->agent_pidns + 1, __ATOMIC_RELAXED);
    __atomic_store_n(&cb->agent_seq, seq + 2, __ATOMIC_RELEASE);
    assert_int_equal(kill(agent, SIGKILL), 0);
    assert_int_equal(waitpid(agent, NULL, 0), agent);
    f->agent = 0;
    nanosleep(&ts, NULL); /* 50 pump ticks */
    assert_true(hook_attached(f));
    assert_int_equal(mks_ctl_info(f->ctl, &info), 0);
    assert_int_equal(info.agent_deaths, 0);
    assert_int_equal(info.lease_lapses, 0);
}

/* A writer killed inside its update leaves the seqlock odd: the next agent
 * takes it over at its second renewal and is watched as usual. */
static void test_agent_after_torn_record_is_watched(void **state)
{
    struct fixture *f = *state;
    struct mks_cb *cb = f->rt->cb;
    struct mks_ctl_info info;
    pid_t agent;
    __atomic_add_fetch(&cb->agent_seq, 1, __ATOMIC_ACQ_REL);
    agent = spawn_agent(f, 30ull * 1000000000ull, 0); /* open, then one renewal */
    assert_true(agent > 0);
    assert_int_equal(__atomic_load_n(&cb->agent_seq, __ATOMIC_ACQUIRE) & 1, 0);
    assert_int_equal(__atomic_load_n(&cb->agent_pid, __ATOMIC_RELAXED), agent);
    assert_int_equal(kill(agent, SIGKILL), 0);
    assert_int_equal(waitpid(agent, NULL, 0), agent);
    f->agent = 0;
    assert_true(wait_detached(f, 2000));
    assert_int_equal(mks_ctl_info(f->ctl, &info), 0);
    assert_int_equal(info.agent_deaths, 1);
}

/* ---- hot swap under load ---- */

struct swap_worker {
    struct fixture *f;
    uint32_t id;
    uint64_t fired;
    int *stop;
};

static void *swap_fire(void *p)
{
    struct swap_worker *w = p;
    while (!__atomic_load_n(w->stop, __ATOMIC_ACQUIRE)) {
        fire(w->f, w->id, MKS_EV_TASK_END);
        w->fired++;
    }
    return NULL;
}

static void test_hot_swap_under_load(void **state)
{
    struct fixture *f = *state;
    struct mks_insn p[] = PROG_COUNT_MAP0;
    struct swap_worker w[SWAP_WORKERS];
    pthread_t th[SWAP_WORKERS];
    struct timespec ts = {0, 2000000};
    uint64_t fired = 0, counted_a = 0, counted_b = 0, eligible = 0, ran = 0;
    uint32_t a, b, map_a, map_b;
    int stop = 0;

    a = load(f, p, N(p), MKS_PROG_OBSERVE, &count_map, 1, N(p));
    b = load(f, p, N(p), MKS_PROG_OBSERVE, &count_map, 1, N(p));
    assert_int_equal(mks_ctl_prog_map(f->ctl, a, 0, &map_a), 0);
    assert_int_equal(mks_ctl_prog_map(f->ctl, b, 0, &map_b), 0);
    assert_int_not_equal(map_a, map_b);
    assert_int_equal(mks_ctl_attach(f->ctl, a, MKS_EV_TASK_END, -1, NULL), 0);
    for (uint32_t i = 0; i < SWAP_WORKERS; i++) {
        w[i] = (struct swap_worker){f, i, 0, &stop};
        assert_int_equal(pthread_create(&th[i], NULL, swap_fire, &w[i]), 0);
    }
    /* Swap back and forth while epochs flip underneath. */
    for (int round = 0; round < 20; round++) {
        struct mks_epoch_snapshot *s = NULL;
        struct mks_coverage cov;
        nanosleep(&ts, NULL);
        if (round % 2 == 0)
            assert_int_equal(mks_ctl_attach(f->ctl, b, MKS_EV_TASK_END, (int32_t)a, NULL), 0);
        else
            assert_int_equal(mks_ctl_attach(f->ctl, a, MKS_EV_TASK_END, (int32_t)b, NULL), 0);
        assert_int_equal(mks_ctl_epoch_advance(f->ctl, &s), 0);
        counted_a += snap_count(s, map_a);
        counted_b += snap_count(s, map_b);
        assert_int_equal(mks_epoch_snapshot_coverage(s, MKS_EV_TASK_END, &cov), 0);
        eligible += cov.eligible;
        ran += cov.ran;
        assert_int_equal(cov.lost, 0);
        mks_epoch_snapshot_free(s);
    }
    __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
    for (uint32_t i = 0; i < SWAP_WORKERS; i++) {
        pthread_join(th[i], NULL);
        fired += w[i].fired;
    }
    {
        struct mks_epoch_snapshot *s = NULL;
        struct mks_coverage cov;
        assert_int_equal(mks_ctl_epoch_advance(f->ctl, &s), 0);
        counted_a += snap_count(s, map_a);
        counted_b += snap_count(s, map_b);
        assert_int_equal(mks_epoch_snapshot_coverage(s, MKS_EV_TASK_END, &cov), 0);
        eligible += cov.eligible;
        ran += cov.ran;
        mks_epoch_snapshot_free(s);
    }
    assert_true(fired > 1000);
    assert_true(counted_a > 0 && counted_b > 0);
    assert_int_equal(counted_a + counted_b, fired);
    assert_int_equal(eligible, fired);
    assert_int_equal(ran, fired);
}

/* ---- host CPU wait ---------------------------------------------------------------- */

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

struct spinner {
    struct mks_rt *rt;
    uint32_t worker;
    int cpu;
    pthread_barrier_t *go;
    uint64_t until;
    uint32_t done; /* set by the test once the pump has sampled past `until` */
    int rc;
};

/* Declares itself as the worker, then spins on one core (shared with the
 * other spinner) until `until` after the barrier, then stays alive (asleep)
 * until `done`: the run delay of a thread that ended is read no more, so a
 * pump kept off the CPU past the spin would keep only its older samples. */
static void *spin_main(void *arg)
{
    struct spinner *s = arg;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(s->cpu, &one);
    s->rc = mks_rt_worker_thread(s->rt, s->worker);
    if (!s->rc)
        s->rc = sched_setaffinity(0, sizeof(one), &one) ? -errno : 0;
    pthread_barrier_wait(s->go);
    while (mono_ns() < __atomic_load_n(&s->until, __ATOMIC_ACQUIRE))
        ;
    while (!__atomic_load_n(&s->done, __ATOMIC_ACQUIRE))
        usleep(1000);
    return NULL;
}

static void test_cpu_wait(void **state)
{
    struct fixture *f = *state;
    struct mks_ctl_info info;
    uint64_t w = 1, runs = 1;
    (void)state;
    /* the fixture's runtime declared no host workers: not measured */
    assert_int_equal(mks_ctl_info(f->ctl, &info), 0);
    assert_int_equal(info.host_workers, 0);
    assert_int_equal(mks_rt_worker_thread(f->rt, 0), -EINVAL);
    assert_int_equal(mks_ctl_cpu_wait(f->ctl, 1, 2, &w, &runs), -ENODATA);
    assert_int_equal(w, 1);
    assert_int_equal(runs, 1);

    char hjob[80];
    snprintf(hjob, sizeof(hjob), "%s-host", job);
    struct mks_rt_opts o = {.sz = sizeof(o), .job = hjob, .rank = 0, .n_ranks = 1,
                            .n_workers = 3, .arena_bytes = 1 << 20,
                            .flags = MKS_RT_F_HOST_WORKERS};
    struct mks_rt *rt = NULL;
    struct mks_ctl *ctl = NULL;
    o.flags = 0x80;
    assert_int_equal(mks_rt_create(&o, &rt), -EOPNOTSUPP);
    o.flags = MKS_RT_F_HOST_WORKERS;
    assert_int_equal(mks_rt_create(&o, &rt), 0);
    assert_int_equal(mks_ctl_open(hjob, 0, &ctl), 0);
    assert_int_equal(mks_ctl_info(ctl, &info), 0);
    assert_int_equal(info.host_workers, 1);
    assert_int_equal(mks_rt_worker_thread(rt, 3), -EINVAL);
    /* no thread declared yet: nothing sampled */
    assert_int_equal(mks_ctl_cpu_wait(ctl, mono_ns() - 1000, mono_ns(), &w, &runs), -ENODATA);

    cpu_set_t mine;
    int cpu = 0;
    assert_int_equal(sched_getaffinity(0, sizeof(mine), &mine), 0);
    while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &mine))
        cpu++;
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, 3);
    struct spinner sp[2];
    pthread_t th[2];
    for (uint32_t i = 0; i < 2; i++) {
        sp[i] = (struct spinner){.rt = rt, .worker = i, .cpu = cpu, .go = &go,
                                 .until = UINT64_MAX};
        assert_int_equal(pthread_create(&th[i], NULL, spin_main, &sp[i]), 0);
    }
    pthread_barrier_wait(&go);
    /* two runnable threads on one core for 60 ms: between them they wait
     * about that long for it */
    uint64_t t0 = mono_ns() + 10000000ull, t1 = t0 + 60000000ull;
    uint64_t t_end = t1 + 10000000ull;
    for (uint32_t i = 0; i < 2; i++)
        __atomic_store_n(&sp[i].until, t_end, __ATOMIC_RELEASE);
    /* the pump samples every 2 ms (later on a loaded machine): wait, the
     * spinners still alive, for a sample after the spin */
    uint64_t deadline = t_end + 5000000000ull;
    int rc;
    while ((rc = mks_ctl_cpu_wait(ctl, t0, t_end, &w, &runs)) == -ENODATA && mono_ns() < deadline)
        usleep(2000);
    if (rc == 0)
        rc = mks_ctl_cpu_wait(ctl, t0, t1, &w, &runs);
    for (uint32_t i = 0; i < 2; i++)
        __atomic_store_n(&sp[i].done, 1u, __ATOMIC_RELEASE);
    for (uint32_t i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(sp[i].rc, 0);
    }
    pthread_barrier_destroy(&go);
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/task/%d/schedstat", (int)getpid());
    if (rc == -ENODATA && access(path, R_OK) != 0) {
        mks_ctl_close(ctl);
        mks_rt_destroy(rt);
        skip(); /* a kernel without schedstat: not measured, rightly */
    }
    assert_int_equal(rc, 0);
    if (w < 20000000ull || w > 2 * (t1 - t0) + 20000000ull)
        fail_msg("two threads sharing one core for 60 ms waited %llu ns for it",
                 (unsigned long long)w);
    /* they took turns on the core: put on it again and again */
    if (runs < 2)
        fail_msg("two threads sharing one core for 60 ms ran %llu times", (unsigned long long)runs);
    assert_int_equal(mks_ctl_cpu_wait(ctl, t1, t0, &w, &runs), -EINVAL);
    assert_int_equal(mks_ctl_cpu_wait(ctl, 1, t1, &w, &runs), -ENODATA); /* before the samples */
    /* a worker another thread declared is refused; the same thread again
     * is harmless */
    assert_int_equal(mks_rt_worker_thread(rt, 0), -EBUSY);
    assert_int_equal(mks_rt_worker_thread(rt, 2), 0);
    assert_int_equal(mks_rt_worker_thread(rt, 2), 0);
    mks_ctl_close(ctl);
    mks_rt_destroy(rt);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_open_info_and_errors, setup, teardown),
        cmocka_unit_test(test_foreign_shm_rejected),
        cmocka_unit_test(test_name_taken_by_another_user),
        cmocka_unit_test_setup_teardown(test_block_open_to_others_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_attach_detach_coverage, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sampling_budget_lost, setup, teardown),
        cmocka_unit_test_setup_teardown(test_control_hint_and_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ring_drain, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ring_drain_while_running, setup, teardown),
        cmocka_unit_test_setup_teardown(test_map_init_and_sharing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lease_expiry_detaches, setup, teardown),
        cmocka_unit_test_setup_teardown(test_agent_death_detaches, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stalled_agent_keeps_lease, setup, teardown),
        cmocka_unit_test_setup_teardown(test_foreign_pidns_agent_left_to_lease, setup, teardown),
        cmocka_unit_test_setup_teardown(test_agent_after_torn_record_is_watched, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hot_swap_under_load, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cpu_wait, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

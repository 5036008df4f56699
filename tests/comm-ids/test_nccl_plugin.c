/*
 * Tests of the NCCL profiler plugin without NCCL or a GPU: the test dlopens
 * libmkscope-nccl-profiler.so (path in argv[1]) the way NCCL does, drives
 * init/startEvent/stopEvent/finalize with synthetic descriptors of two ranks,
 * and reads the records back through the ring reader API.  Also checks the
 * ring itself: drops when full, rejection of foreign or corrupted memory.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "../../comm-ids/src/nccl_profiler_abi.h"
#include "mkscope/commid.h"
#include "mkscope/nccl_ring.h"

static const char *g_so_path;
static char g_ring[64];
static int g_logged;

static void test_logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
                        const char *fmt, ...)
{
    (void)level;
    (void)flags;
    (void)file;
    (void)line;
    (void)fmt;
    g_logged++;
}

static void *open_plugin(void)
{
    void *lib = dlopen(g_so_path, RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        fprintf(stderr, "dlopen %s: %s\n", g_so_path, dlerror());
    assert_non_null(lib);
    return lib;
}

enum { STEPS = 10, ARS_PER_STEP = 3 };
#define HASH 0xfeedc0ffee123457ull

static void test_v5_two_ranks(void **state)
{
    (void)state;
    void *lib = open_plugin();
    ncclProfiler_v5_t *p = dlsym(lib, "ncclProfiler_v5");
    void *ctx[2] = {NULL, NULL};
    int mask[2] = {0, 0};
    struct mks_nccl_ring *ring;
    static struct mks_nccl_record recs[1024];

    assert_non_null(p);
    assert_string_equal(p->name, "mkscope");
    /* internals stay hidden */
    assert_null(dlsym(lib, "mks_nccl_ring_create"));
    assert_null(dlsym(lib, "mks_commid_make"));

    for (int r = 0; r < 2; r++) {
        assert_int_equal(p->init(&ctx[r], HASH, &mask[r], "tp", 1, 2, r, test_logger), ncclSuccess);
        assert_non_null(ctx[r]);
        assert_int_equal(mask[r], ncclProfileColl);
    }
    /* a kernel-per-operator loop: several all-reduces per step, then an
     * all-gather; NCCL's sequence numbers count per function */
    uint64_t seq_ar = 0, seq_ag = 0;
    for (int s = 0; s < STEPS; s++) {
        void *h[2][ARS_PER_STEP + 1];
        for (int k = 0; k <= ARS_PER_STEP; k++) {
            for (int r = 0; r < 2; r++) {
                ncclProfilerEventDescr_v5_t d;
                memset(&d, 0, sizeof(d));
                d.type = ncclProfileColl;
                d.rank = r;
                d.coll.seqNumber = k < ARS_PER_STEP ? seq_ar : seq_ag;
                d.coll.func = k < ARS_PER_STEP ? "AllReduce" : "AllGather";
                d.coll.count = 1024u * (size_t)(k + 1);
                d.coll.datatype = k == 1 ? "ncclBfloat16" : "ncclFloat32";
                assert_int_equal(p->startEvent(ctx[r], &h[r][k], &d), ncclSuccess);
                assert_non_null(h[r][k]);
            }
            if (k < ARS_PER_STEP)
                seq_ar++;
            else
                seq_ag++;
        }
        /* ranks stop in different orders */
        for (int k = 0; k <= ARS_PER_STEP; k++) {
            assert_int_equal(p->stopEvent(h[0][k]), ncclSuccess);
            assert_int_equal(p->stopEvent(h[1][ARS_PER_STEP - k]), ncclSuccess);
        }
    }
    /* events the plugin does not record: other types, unknown functions */
    {
        ncclProfilerEventDescr_v5_t d;
        void *h = (void *)1;
        memset(&d, 0, sizeof(d));
        d.type = ncclProfileP2p;
        assert_int_equal(p->startEvent(ctx[0], &h, &d), ncclSuccess);
        assert_null(h);
        /* group events get a handle (NCCL 2.27 starts collectives only inside
         * one) but no record */
        d.type = ncclProfileGroup;
        assert_int_equal(p->startEvent(ctx[0], &h, &d), ncclSuccess);
        assert_non_null(h);
        assert_int_equal(p->stopEvent(h), ncclSuccess);
        d.type = ncclProfileColl;
        d.coll.func = "AllReduceFancy";
        h = (void *)1;
        assert_int_equal(p->startEvent(ctx[0], &h, &d), ncclSuccess);
        assert_null(h);
        d.coll.func = NULL;
        assert_int_equal(p->startEvent(ctx[0], &h, &d), ncclSuccess);
        assert_null(h);
        assert_int_equal(p->stopEvent(NULL), ncclSuccess);
        assert_int_equal(p->recordEventState(NULL, 22, NULL), ncclSuccess);
        /* kernel channel events only when GPU times were asked for */
        memset(&d, 0, sizeof(d));
        d.type = ncclProfileKernelCh;
        d.parentObj = h;
        h = (void *)1;
        assert_int_equal(p->startEvent(ctx[0], &h, &d), ncclSuccess);
        assert_null(h);
    }

    assert_int_equal(mks_nccl_ring_open(g_ring, &ring), 0);
    int n = mks_nccl_ring_drain(ring, recs, 1024);
    assert_int_equal(n, STEPS * (ARS_PER_STEP + 1) * 2);
    assert_int_equal(mks_nccl_ring_drain(ring, recs + n, 1024 - (size_t)n), 0);

    /* every record carries the id both ranks compute; pair them up */
    int matched = 0;
    for (int i = 0; i < n; i++) {
        const struct mks_nccl_record *a = &recs[i];
        uint32_t func = a->func;
        assert_true(func == MKS_NCCL_ALLREDUCE || func == MKS_NCCL_ALLGATHER);
        assert_int_equal(a->comm_gen, mks_commid_for_nccl(HASH, func, a->seq));
        assert_int_equal(mks_commid_seq(a->comm_gen), a->seq);
        assert_int_equal(a->comm_hash, HASH);
        assert_int_equal(a->nranks, 2);
        assert_true(a->rank < 2);
        assert_true(a->t_start > 0 && a->t_start <= a->t_stop);
        assert_int_equal(a->pid, (uint32_t)getpid());
        assert_int_equal(a->flags, 0);
        if (func == MKS_NCCL_ALLREDUCE) {
            uint32_t k = (uint32_t)(a->seq % ARS_PER_STEP);
            assert_int_equal(a->bytes, 1024u * (k + 1) * (k == 1 ? 2 : 4));
        } else {
            assert_int_equal(a->bytes, 1024u * (ARS_PER_STEP + 1) * 4);
        }
        for (int j = 0; j < n; j++)
            if (j != i && recs[j].comm_gen == a->comm_gen) {
                assert_int_not_equal(recs[j].rank, a->rank);
                matched++;
            }
    }
    assert_int_equal(matched, n); /* each record has exactly one partner */
    assert_int_equal(mks_nccl_ring_dropped(ring), 0);
    mks_nccl_ring_close(ring);

    assert_int_equal(p->finalize(ctx[0]), ncclSuccess);
    assert_int_equal(p->finalize(ctx[1]), ncclSuccess);
    assert_int_equal(p->finalize(NULL), ncclSuccess);
    assert_int_equal(mks_nccl_ring_unlink(g_ring), 0);
    dlclose(lib);
}

static void test_v4_abi(void **state)
{
    (void)state;
    void *lib = open_plugin();
    ncclProfiler_v4_t *p = dlsym(lib, "ncclProfiler_v4");
    void *ctx = NULL, *h = NULL;
    int mask = 0;
    struct mks_nccl_ring *ring;
    struct mks_nccl_record rec;
    ncclProfilerEventDescr_v4_t d;

    assert_non_null(p);
    assert_int_equal(p->init(&ctx, &mask, "dp", 0x77ull, 2, 8, 5, test_logger), ncclSuccess);
    assert_int_equal(mask, ncclProfileColl);
    memset(&d, 0, sizeof(d));
    d.type = ncclProfileColl;
    d.rank = 5;
    d.coll.seqNumber = 99;
    d.coll.func = "ReduceScatter";
    d.coll.count = 10;
    d.coll.datatype = "ncclFloat64";
    assert_int_equal(p->startEvent(ctx, &h, &d), ncclSuccess);
    assert_non_null(h);
    assert_int_equal(p->stopEvent(h), ncclSuccess);
    assert_int_equal(mks_nccl_ring_open(g_ring, &ring), 0);
    assert_int_equal(mks_nccl_ring_drain(ring, &rec, 1), 1);
    assert_int_equal(rec.comm_gen, mks_commid_for_nccl(0x77, MKS_NCCL_REDUCESCATTER, 99));
    assert_int_equal(rec.rank, 5);
    assert_int_equal(rec.nranks, 8);
    assert_int_equal(rec.bytes, 80);
    assert_int_equal(rec.flags, MKS_NCCL_REC_F_PLUGIN_V4);
    mks_nccl_ring_close(ring);
    assert_int_equal(p->finalize(ctx), ncclSuccess);
    assert_int_equal(mks_nccl_ring_unlink(g_ring), 0);
    dlclose(lib);
}

/* With MKSCOPE_NCCL_GPU_TIMES=1, kernel channel events that arrive after the
 * collective's own event stopped (as NCCL's proxy thread delivers them) add
 * records with the collective's id and the GPU times. */
static void test_v5_gpu_times(void **state)
{
    (void)state;
    setenv("MKSCOPE_NCCL_GPU_TIMES", "1", 1);
    void *lib = open_plugin();
    ncclProfiler_v5_t *p = dlsym(lib, "ncclProfiler_v5");
    void *ctx = NULL, *coll = NULL, *ch[2] = {NULL, NULL}, *h;
    int mask = 0;
    ncclProfilerEventDescr_v5_t d;
    ncclProfilerEventStateArgs_t a;
    struct mks_nccl_ring *ring;
    struct mks_nccl_record rec[4];

    assert_int_equal(p->init(&ctx, HASH, &mask, "tp", 1, 2, 1, test_logger), ncclSuccess);
    assert_int_equal(mask, ncclProfileColl | ncclProfileKernelCh);
    memset(&d, 0, sizeof(d));
    d.type = ncclProfileColl;
    d.rank = 1;
    d.coll.seqNumber = 7;
    d.coll.func = "AllReduce";
    d.coll.count = 256;
    d.coll.datatype = "ncclFloat32";
    assert_int_equal(p->startEvent(ctx, &coll, &d), ncclSuccess);
    assert_non_null(coll);
    assert_int_equal(p->stopEvent(coll), ncclSuccess); /* host side done first */
    for (int c = 0; c < 2; c++) {
        memset(&d, 0, sizeof(d));
        d.type = ncclProfileKernelCh;
        d.parentObj = coll;
        d.kernelCh.channelId = (uint8_t)(c + 3);
        d.kernelCh.pTimer = 1000000 + (uint64_t)c;
        assert_int_equal(p->startEvent(ctx, &ch[c], &d), ncclSuccess);
        assert_non_null(ch[c]);
    }
    for (int c = 0; c < 2; c++) {
        a.kernelCh.pTimer = 1005000 + (uint64_t)c * 10;
        assert_int_equal(p->recordEventState(ch[c], 22, &a), ncclSuccess);
        assert_int_equal(p->stopEvent(ch[c]), ncclSuccess);
    }
    /* a channel whose parent is not one of ours (a point-to-point's, or junk) */
    int junk;
    d.parentObj = &junk;
    assert_int_equal(p->startEvent(ctx, &h, &d), ncclSuccess);
    assert_null(h);
    d.parentObj = NULL;
    assert_int_equal(p->startEvent(ctx, &h, &d), ncclSuccess);
    assert_null(h);
    /* a channel that never reported its stop writes nothing */
    d.parentObj = coll;
    assert_int_equal(p->startEvent(ctx, &h, &d), ncclSuccess);
    assert_int_equal(p->stopEvent(h), ncclSuccess);

    assert_int_equal(mks_nccl_ring_open(g_ring, &ring), 0);
    assert_int_equal(mks_nccl_ring_drain(ring, rec, 4), 3);
    uint64_t id = mks_commid_for_nccl(HASH, MKS_NCCL_ALLREDUCE, 7);
    assert_int_equal(rec[0].comm_gen, id);
    assert_int_equal(rec[0].flags, 0);
    assert_int_equal(rec[0].bytes, 1024);
    for (int c = 0; c < 2; c++) {
        assert_int_equal(rec[1 + c].comm_gen, id);
        assert_true(rec[1 + c].flags & MKS_NCCL_REC_F_GPU_TIMES);
        assert_int_equal(MKS_NCCL_REC_CHANNEL(rec[1 + c].flags), 3 + c);
        assert_int_equal(rec[1 + c].t_start, 1000000 + (uint64_t)c);
        assert_int_equal(rec[1 + c].t_stop, 1005000 + (uint64_t)c * 10);
        assert_int_equal(rec[1 + c].rank, 1);
        assert_int_equal(rec[1 + c].bytes, 0);
    }
    mks_nccl_ring_close(ring);
    assert_int_equal(p->finalize(ctx), ncclSuccess);
    assert_int_equal(mks_nccl_ring_unlink(g_ring), 0);
    dlclose(lib);
    unsetenv("MKSCOPE_NCCL_GPU_TIMES");
}

/* A bad MKSCOPE_JOB disables the plugin (logged), never the application. */
static void test_bad_env_disables(void **state)
{
    (void)state;
    unsetenv("MKSCOPE_NCCL_RING");
    setenv("MKSCOPE_JOB", "../../etc", 1);
    void *lib = open_plugin();
    ncclProfiler_v5_t *p = dlsym(lib, "ncclProfiler_v5");
    void *ctx = (void *)1;
    int mask = -1;

    g_logged = 0;
    assert_int_equal(p->init(&ctx, 1, &mask, "x", 1, 2, 0, test_logger), ncclSuccess);
    assert_null(ctx);
    assert_int_equal(mask, 0);
    assert_int_equal(g_logged, 1);
    assert_int_equal(p->finalize(ctx), ncclSuccess);
    dlclose(lib);
    unsetenv("MKSCOPE_JOB");
    setenv("MKSCOPE_NCCL_RING", g_ring, 1);
}

static void test_ring_full_and_corrupt(void **state)
{
    (void)state;
    struct mks_nccl_ring *w, *r;
    struct mks_nccl_record rec = {0}, out[8];
    char name[MKS_NCCL_RING_NAME_MAX];

    assert_int_equal(mks_nccl_ring_name("job-1", 3, name, sizeof(name)), 0);
    assert_string_equal(name, "/mkscope.job-1.nccl.3");
    assert_int_equal(mks_nccl_ring_name("a/b", 3, name, sizeof(name)), -EINVAL);
    assert_int_equal(mks_nccl_ring_name("", 3, name, sizeof(name)), -EINVAL);
    assert_int_equal(mks_nccl_ring_create(g_ring, 6, &w), -EINVAL); /* not a power of two */
    assert_int_equal(mks_nccl_ring_create("noslash", 4, &w), -EINVAL);

    assert_int_equal(mks_nccl_ring_create(g_ring, 4, &w), 0);
    for (int i = 0; i < 6; i++) {
        rec.seq = (uint64_t)i;
        assert_int_equal(mks_nccl_ring_write(w, &rec), i < 4 ? 0 : -ENOSPC);
    }
    assert_int_equal(mks_nccl_ring_open(g_ring, &r), 0);
    assert_int_equal(mks_nccl_ring_dropped(r), 2);
    assert_int_equal(mks_nccl_ring_drain(r, out, 3), 3);
    assert_int_equal(out[2].seq, 2);
    rec.seq = 10;
    assert_int_equal(mks_nccl_ring_write(w, &rec), 0); /* space again, wraps */
    assert_int_equal(mks_nccl_ring_drain(r, out, 8), 2);
    assert_int_equal(out[0].seq, 3);
    assert_int_equal(out[1].seq, 10);

    /* corrupted counters: head far ahead of tail */
    struct mks_nccl_ring_hdr *hdr = *(struct mks_nccl_ring_hdr **)w; /* first member */
    hdr->head += 1000;
    assert_int_equal(mks_nccl_ring_drain(r, out, 8), -EBADMSG);
    mks_nccl_ring_close(r);
    mks_nccl_ring_close(w);
    mks_nccl_ring_close(NULL);

    /* foreign shared memory: wrong magic, then a capacity beyond the size */
    int fd = shm_open(g_ring, O_RDWR | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    struct mks_nccl_ring_hdr bad = {.magic = 0x12345678, .version = 1, .rec_size = 64, .capacity = 4};
    assert_int_equal(pwrite(fd, &bad, sizeof(bad), 0), (ssize_t)sizeof(bad));
    assert_int_equal(mks_nccl_ring_open(g_ring, &r), -EBADMSG);
    bad.magic = MKS_NCCL_RING_MAGIC;
    bad.capacity = 1024; /* file holds only the header */
    assert_int_equal(pwrite(fd, &bad, sizeof(bad), 0), (ssize_t)sizeof(bad));
    assert_int_equal(mks_nccl_ring_open(g_ring, &r), -EBADMSG);
    assert_int_equal(ftruncate(fd, 10), 0); /* shorter than a header */
    assert_int_equal(mks_nccl_ring_open(g_ring, &r), -EBADMSG);
    close(fd);
    assert_int_equal(mks_nccl_ring_unlink(g_ring), 0);
    assert_int_equal(mks_nccl_ring_open(g_ring, &r), -ENOENT);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_nccl_plugin PATH/libmkscope-nccl-profiler.so\n");
        return 2;
    }
    g_so_path = argv[1];
    snprintf(g_ring, sizeof(g_ring), "/mkscope-test-nccl-%d", (int)getpid());
    setenv("MKSCOPE_NCCL_RING", g_ring, 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_v5_two_ranks),
        cmocka_unit_test(test_v4_abi),
        cmocka_unit_test(test_v5_gpu_times),
        cmocka_unit_test(test_bad_env_disables),
        cmocka_unit_test(test_ring_full_and_corrupt),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    mks_nccl_ring_unlink(g_ring);
    return rc;
}

/*
 * Shared memory of the ranks of one CPU job (see shm.h).  Waits use futexes on
 * the shared words (not PRIVATE ones: the waiters are other processes), with
 * timeouts so a rank that died can never hang the others.
 */
#include "shm.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../bench_int.h"

#define BS_MAGIC   0x6d6b7362656e6368ull /* "mksbench" */
#define BS_VERSION 1u
#define BS_ALIGN   64u

struct bs_hdr {
    uint64_t magic;
    uint32_t version;
    int32_t creator_pid;
    struct bs_layout lay;
    uint32_t pad;
    uint64_t size;
    _Atomic uint32_t arrived;
    _Atomic uint32_t bar_gen;
    _Atomic uint32_t abort;
    _Atomic uint32_t ready; /* set last by the creator */
};

struct bs_shm {
    char name[80];
    uint8_t *base;
    size_t size;
    struct bs_hdr *hdr;
    size_t inbox_off, inbox_stride, blob_off, res_off, res_stride;
    struct bs_layout lay;
};

static size_t align_up(size_t v)
{
    return (v + BS_ALIGN - 1) & ~(size_t)(BS_ALIGN - 1);
}

static void layout(struct bs_shm *s, const struct bs_layout *lay)
{
    s->lay = *lay;
    s->inbox_off = align_up(sizeof(struct bs_hdr));
    s->inbox_stride = align_up(BS_ALIGN + 2 * (size_t)lay->slot_floats * sizeof(float));
    s->blob_off = s->inbox_off + (size_t)lay->ranks * lay->ranks * s->inbox_stride;
    s->res_off = s->blob_off + (size_t)lay->ranks * BS_BLOB_MAX;
    size_t st = lay->steps, sb = (size_t)lay->steps * lay->batch;
    s->res_stride =
        align_up(BS_ALIGN + st * 8 + lay->n_classes * 8 + sb * 4 + sb * 8 + st * 8 + 4 * BS_ALIGN);
    s->size = s->res_off + (size_t)lay->ranks * s->res_stride;
}

static int name_of(const char *job, char *buf, size_t len)
{
    int n = snprintf(buf, len, "/mksbench.%s", job);
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* The handle, not yet mapped: name and layout. */
static int shm_new(const char *job, const struct bs_layout *lay, struct bs_shm **s_p)
{
    struct bs_shm *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    int rc = name_of(job, s->name, sizeof(s->name));
    if (rc) {
        free(s);
        return rc;
    }
    layout(s, lay);
    *s_p = s;
    return 0;
}

int bs_create(const char *job, const struct bs_layout *lay, struct bs_shm **shm_p)
{
    struct bs_shm *s;
    int rc = shm_new(job, lay, &s);
    if (rc)
        return rc;
    shm_unlink(s->name); /* a stale segment of a crashed run */
    int fd = shm_open(s->name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) {
        rc = -errno;
        free(s);
        return rc;
    }
    if (ftruncate(fd, (off_t)s->size) < 0) {
        rc = -errno;
        close(fd);
        shm_unlink(s->name);
        free(s);
        return rc;
    }
    s->base = mmap(NULL, s->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (s->base == MAP_FAILED) {
        rc = -errno;
        shm_unlink(s->name);
        free(s);
        return rc;
    }
    s->hdr = (struct bs_hdr *)s->base;
    s->hdr->magic = BS_MAGIC;
    s->hdr->version = BS_VERSION;
    s->hdr->creator_pid = (int32_t)getpid();
    s->hdr->lay = *lay;
    s->hdr->size = s->size;
    atomic_store(&s->hdr->ready, 1);
    *shm_p = s;
    return 0;
}

int bs_open(const char *job, const struct bs_layout *lay, uint64_t timeout_ns,
            struct bs_shm **shm_p, char *err, size_t err_len)
{
    struct bs_shm *s;
    int rc = shm_new(job, lay, &s);
    if (rc)
        return rc;
    uint64_t t0 = bb_now_ns();
    for (;;) {
        int fd = shm_open(s->name, O_RDWR, 0);
        if (fd >= 0) {
            struct stat st;
            if (fstat(fd, &st) == 0 && (size_t)st.st_size == s->size) {
                s->base = mmap(NULL, s->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
                close(fd);
                if (s->base == MAP_FAILED) {
                    rc = -errno;
                    free(s);
                    return bb_err(err, err_len, rc, "mmap %s: %s", s->name, strerror(-rc));
                }
                s->hdr = (struct bs_hdr *)s->base;
                if (atomic_load(&s->hdr->ready) && s->hdr->magic == BS_MAGIC &&
                    s->hdr->version == BS_VERSION && !memcmp(&s->hdr->lay, lay, sizeof(*lay)) &&
                    kill(s->hdr->creator_pid, 0) == 0) {
                    *shm_p = s;
                    return 0;
                }
                munmap(s->base, s->size);
                s->base = NULL;
            } else {
                close(fd);
            }
        }
        if (bb_now_ns() - t0 > timeout_ns) {
            free(s);
            return bb_err(err, err_len, -ETIMEDOUT,
                          "rank rendezvous: no live job segment /mksbench.%s with this "
                          "configuration (is rank 0 running with the same options?)",
                          job);
        }
        bb_sleep_ns(2 * 1000 * 1000);
    }
}

void bs_close(struct bs_shm *shm, int unlink)
{
    if (!shm)
        return;
    if (shm->base)
        munmap(shm->base, shm->size);
    if (unlink)
        shm_unlink(shm->name);
    free(shm);
}

static void futex_wake_all(_Atomic uint32_t *addr)
{
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

static void futex_wait_ms(_Atomic uint32_t *addr, uint32_t val, long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT, val, &ts, NULL, 0);
}

int bs_barrier(struct bs_shm *shm, uint64_t timeout_ns)
{
    struct bs_hdr *h = shm->hdr;
    uint32_t gen = atomic_load(&h->bar_gen);
    if (atomic_fetch_add(&h->arrived, 1) + 1 == shm->lay.ranks) {
        atomic_store(&h->arrived, 0);
        atomic_fetch_add(&h->bar_gen, 1);
        futex_wake_all(&h->bar_gen);
        return 0;
    }
    uint64_t t0 = bb_now_ns();
    while (atomic_load(&h->bar_gen) == gen) {
        if (atomic_load(&h->abort))
            return -ECANCELED;
        if (bb_now_ns() - t0 > timeout_ns)
            return -ETIMEDOUT;
        futex_wait_ms(&h->bar_gen, gen, 10);
    }
    return 0;
}

_Atomic uint32_t *bs_abort(struct bs_shm *shm)
{
    return &shm->hdr->abort;
}

static uint8_t *inbox(struct bs_shm *shm, uint32_t dst, uint32_t src)
{
    return shm->base + shm->inbox_off + ((size_t)dst * shm->lay.ranks + src) * shm->inbox_stride;
}

_Atomic uint32_t *bs_inbox_count(struct bs_shm *shm, uint32_t dst, uint32_t src)
{
    return (_Atomic uint32_t *)inbox(shm, dst, src);
}

float *bs_inbox_data(struct bs_shm *shm, uint32_t dst, uint32_t src, uint32_t parity)
{
    return (float *)(inbox(shm, dst, src) + BS_ALIGN) +
           (size_t)(parity & 1u) * shm->lay.slot_floats;
}

void bs_inbox_release(struct bs_shm *shm, uint32_t dst, uint32_t src)
{
    _Atomic uint32_t *c = bs_inbox_count(shm, dst, src);
    atomic_fetch_add_explicit(c, 1, memory_order_release);
    futex_wake_all(c);
}

void bs_result(struct bs_shm *shm, uint32_t rank, struct bs_result *r)
{
    uint8_t *p = shm->base + shm->res_off + (size_t)rank * shm->res_stride;
    size_t st = shm->lay.steps, sb = (size_t)shm->lay.steps * shm->lay.batch;
    uint8_t *q = p + BS_ALIGN;
    memset(r, 0, sizeof(*r));
    r->step_ns = (uint64_t *)q;
    q += align_up(st * 8);
    r->class_counts = (uint64_t *)q;
    q += align_up(shm->lay.n_classes * 8);
    r->req_gen = (uint64_t *)q;
    q += align_up(sb * 8);
    r->logit_sum = (double *)q;
    q += align_up(st * 8);
    r->tokens = (int32_t *)q;
    r->prof_dropped = (uint64_t *)p + 1;
    r->faulted = (uint64_t *)p + 2;
}

void bs_result_set_done(struct bs_shm *shm, uint32_t rank, uint32_t v)
{
    uint8_t *p = shm->base + shm->res_off + (size_t)rank * shm->res_stride;
    atomic_store((_Atomic uint32_t *)p, v);
}

uint32_t bs_result_done(struct bs_shm *shm, uint32_t rank)
{
    uint8_t *p = shm->base + shm->res_off + (size_t)rank * shm->res_stride;
    return atomic_load((_Atomic uint32_t *)p);
}

int bs_allgather(struct bs_shm *shm, uint32_t rank, const void *mine, size_t len, void *all,
                 uint64_t timeout_ns)
{
    if (len > BS_BLOB_MAX)
        return -E2BIG;
    memcpy(shm->base + shm->blob_off + (size_t)rank * BS_BLOB_MAX, mine, len);
    int rc = bs_barrier(shm, timeout_ns);
    if (rc)
        return rc;
    for (uint32_t r = 0; r < shm->lay.ranks; r++)
        memcpy((uint8_t *)all + (size_t)r * len,
               shm->base + shm->blob_off + (size_t)r * BS_BLOB_MAX, len);
    /* nobody rewrites the area before everyone has read it */
    return bs_barrier(shm, timeout_ns);
}

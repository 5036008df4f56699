/*
 * The NCCL record ring in POSIX shared memory (layout and protocol in
 * nccl_ring.h).  The writer publishes a record by storing `head` with release
 * order after the record's bytes; the reader loads `head` with acquire order,
 * copies, then stores `tail` with release order so the writer may reuse the
 * slots.  The reader treats the mapping as untrusted: it checks the header
 * against the size of the shared memory and the counters against the
 * capacity before it touches a record.
 */
#include "mkscope/nccl_ring.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct mks_nccl_ring {
    struct mks_nccl_ring_hdr *hdr;
    struct mks_nccl_record *recs;
    size_t map_len;
    uint32_t capacity; /* private copy: the shared one may change under us */
};

static size_t ring_bytes(uint32_t capacity)
{
    return sizeof(struct mks_nccl_ring_hdr) + (size_t)capacity * sizeof(struct mks_nccl_record);
}

static int valid_job_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
}

int mks_nccl_ring_name(const char *job, uint32_t rank, char *buf, size_t len)
{
    size_t n;
    int w;

    if (!job || !buf)
        return -EINVAL;
    n = strlen(job);
    if (n == 0 || n > 64)
        return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if (!valid_job_char(job[i]))
            return -EINVAL;
    w = snprintf(buf, len, "/mkscope.%s.nccl.%u", job, rank);
    return w < 0 || (size_t)w >= len ? -EINVAL : 0;
}

static int valid_shm_name(const char *name)
{
    size_t n = name ? strlen(name) : 0;

    return n >= 2 && n < MKS_NCCL_RING_NAME_MAX && name[0] == '/' && !strchr(name + 1, '/');
}

/* Map fd (closed here) as a ring of `capacity` records. */
static int map_ring(int fd, uint32_t capacity, struct mks_nccl_ring **ring_p)
{
    struct mks_nccl_ring *ring;
    void *map = mmap(NULL, ring_bytes(capacity), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int err = -errno;

    close(fd);
    if (map == MAP_FAILED)
        return err;
    ring = calloc(1, sizeof(*ring));
    if (!ring) {
        munmap(map, ring_bytes(capacity));
        return -ENOMEM;
    }
    ring->hdr = map;
    ring->recs = (struct mks_nccl_record *)((char *)map + sizeof(struct mks_nccl_ring_hdr));
    ring->map_len = ring_bytes(capacity);
    ring->capacity = capacity;
    *ring_p = ring;
    return 0;
}

int mks_nccl_ring_create(const char *name, uint32_t capacity, struct mks_nccl_ring **ring_p)
{
    struct mks_nccl_ring *ring = NULL;
    int fd, err;

    if (!valid_shm_name(name) || !ring_p)
        return -EINVAL;
    if (capacity == 0)
        capacity = MKS_NCCL_RING_DEFAULT_CAP;
    if ((capacity & (capacity - 1)) || capacity > MKS_NCCL_RING_MAX_CAP)
        return -EINVAL;
    fd = shm_open(name, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        return -errno;
    if (ftruncate(fd, (off_t)ring_bytes(capacity)) != 0) {
        err = -errno;
        close(fd);
        return err;
    }
    if ((err = map_ring(fd, capacity, &ring)))
        return err;
    ring->hdr->version = MKS_NCCL_RING_VERSION;
    ring->hdr->rec_size = sizeof(struct mks_nccl_record);
    ring->hdr->capacity = capacity;
    ring->hdr->pid = (uint32_t)getpid();
    /* magic last: a reader that sees it sees a complete header */
    __atomic_store_n(&ring->hdr->magic, MKS_NCCL_RING_MAGIC, __ATOMIC_RELEASE);
    *ring_p = ring;
    return 0;
}

int mks_nccl_ring_write(struct mks_nccl_ring *ring, const struct mks_nccl_record *rec)
{
    uint64_t head, tail;

    if (!ring || !rec)
        return -EINVAL;
    head = ring->hdr->head; /* only this writer stores head */
    tail = __atomic_load_n(&ring->hdr->tail, __ATOMIC_ACQUIRE);
    if (head - tail >= ring->capacity) {
        __atomic_fetch_add(&ring->hdr->dropped, 1, __ATOMIC_RELAXED);
        return -ENOSPC;
    }
    ring->recs[head & (ring->capacity - 1)] = *rec;
    __atomic_store_n(&ring->hdr->head, head + 1, __ATOMIC_RELEASE);
    return 0;
}

int mks_nccl_ring_open(const char *name, struct mks_nccl_ring **ring_p)
{
    struct mks_nccl_ring_hdr hdr;
    struct stat st;
    int fd, err;

    if (!valid_shm_name(name) || !ring_p)
        return -EINVAL;
    fd = shm_open(name, O_RDWR, 0);
    if (fd < 0)
        return -errno;
    if (fstat(fd, &st) != 0) {
        err = -errno;
        close(fd);
        return err;
    }
    if ((size_t)st.st_size < sizeof(hdr) || pread(fd, &hdr, sizeof(hdr), 0) != (ssize_t)sizeof(hdr)) {
        close(fd);
        return -EBADMSG;
    }
    if (hdr.magic != MKS_NCCL_RING_MAGIC || hdr.version != MKS_NCCL_RING_VERSION ||
        hdr.rec_size != sizeof(struct mks_nccl_record) || hdr.capacity == 0 ||
        (hdr.capacity & (hdr.capacity - 1)) || hdr.capacity > MKS_NCCL_RING_MAX_CAP ||
        (size_t)st.st_size < ring_bytes(hdr.capacity)) {
        close(fd);
        return -EBADMSG;
    }
    return map_ring(fd, hdr.capacity, ring_p);
}

int mks_nccl_ring_drain(struct mks_nccl_ring *ring, struct mks_nccl_record *out, size_t max)
{
    uint64_t head, tail, n;

    if (!ring || (!out && max))
        return -EINVAL;
    head = __atomic_load_n(&ring->hdr->head, __ATOMIC_ACQUIRE);
    tail = ring->hdr->tail; /* only this reader stores tail */
    if (head - tail > ring->capacity)
        return -EBADMSG;
    n = head - tail;
    if (n > max)
        n = max;
    if (n > INT32_MAX)
        n = INT32_MAX;
    for (uint64_t i = 0; i < n; i++)
        out[i] = ring->recs[(tail + i) & (ring->capacity - 1)];
    __atomic_store_n(&ring->hdr->tail, tail + n, __ATOMIC_RELEASE);
    return (int)n;
}

uint64_t mks_nccl_ring_dropped(const struct mks_nccl_ring *ring)
{
    return ring ? __atomic_load_n(&ring->hdr->dropped, __ATOMIC_RELAXED) : 0;
}

void mks_nccl_ring_close(struct mks_nccl_ring *ring)
{
    if (!ring)
        return;
    munmap(ring->hdr, ring->map_len);
    free(ring);
}

int mks_nccl_ring_unlink(const char *name)
{
    if (!valid_shm_name(name))
        return -EINVAL;
    return shm_unlink(name) == 0 ? 0 : -errno;
}

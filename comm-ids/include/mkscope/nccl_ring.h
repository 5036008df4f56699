/*
 * The NCCL record ring: how libmkscope-nccl-profiler.so (loaded by NCCL
 * through NCCL_PROFILER_PLUGIN) hands one record per collective to the rank's
 * agent.
 *
 * One POSIX shared-memory ring per application process, named
 *   /mkscope.<MKSCOPE_JOB>.nccl.<MKSCOPE_RANK>
 * (job "default" when MKSCOPE_JOB is unset; rank from MKSCOPE_RANK, else the
 * rank of the first communicator the process creates; MKSCOPE_NCCL_RING
 * overrides the whole name).  The plugin creates it, the agent opens it, drains
 * it each epoch and unlinks it when the job ends.  Single writer (the plugin,
 * serialized inside the process), single reader; the writer never overwrites
 * undrained records: when the ring is full it counts a drop instead.
 *
 * Times are host CLOCK_MONOTONIC nanoseconds taken when NCCL starts and stops
 * the collective's profiler event; NCCL does both on the host when it enqueues
 * the collective's kernel, so they bracket the enqueue, not the execution.
 * With MKSCOPE_NCCL_GPU_TIMES=1 each kernel channel of the collective adds a
 * record with GPU times (MKS_NCCL_REC_F_GPU_TIMES).
 */
#ifndef MKSCOPE_NCCL_RING_H
#define MKSCOPE_NCCL_RING_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#define MKS_NCCL_STATIC_ASSERT static_assert
#else
#define MKS_NCCL_STATIC_ASSERT _Static_assert
#endif

#define MKS_NCCL_RING_MAGIC   0x524e4b4du /* "MKNR" */
#define MKS_NCCL_RING_VERSION 1u
/* Default capacity in records: a few seconds of a busy training step's
 * collectives between two agent epochs. */
#define MKS_NCCL_RING_DEFAULT_CAP 16384u
/* Largest ring a reader accepts (records); bounds what a corrupted header
 * can make the reader map. */
#define MKS_NCCL_RING_MAX_CAP (1u << 24)
#define MKS_NCCL_RING_NAME_MAX 128u

/* One collective, 64 bytes, the same layout in every process. */
struct mks_nccl_record {
    uint64_t comm_gen;  /*  0: mks_commid_for_nccl(comm_hash, func, seq) */
    uint64_t comm_hash; /*  8: NCCL's communicator hash */
    uint64_t seq;       /* 16: NCCL's per-function collective sequence number */
    uint64_t bytes;     /* 24: count * datatype size (0 if the type is unknown) */
    uint64_t t_start;   /* 32: host CLOCK_MONOTONIC ns at the event's start */
    uint64_t t_stop;    /* 40: ... and at its stop */
    uint32_t rank;      /* 48: rank in the communicator */
    uint32_t nranks;    /* 52: communicator size */
    uint16_t func;      /* 56: enum mks_commid_nccl_func */
    uint16_t flags;     /* 58: MKS_NCCL_REC_F_*; channel in bits 8-15 */
    uint32_t pid;       /* 60: writing process */
};
MKS_NCCL_STATIC_ASSERT(sizeof(struct mks_nccl_record) == 64, "nccl record size");

#define MKS_NCCL_REC_F_PLUGIN_V4 0x1u /* written through the v4 ABI (older NCCL) */
/* A kernel channel of the collective (MKSCOPE_NCCL_GPU_TIMES=1): t_start and
 * t_stop are that channel's GPU globaltimer ns, bytes is 0, and the channel
 * is MKS_NCCL_REC_CHANNEL(flags). */
#define MKS_NCCL_REC_F_GPU_TIMES 0x2u
#define MKS_NCCL_REC_CHANNEL(flags) ((unsigned)(flags) >> 8)

/* Shared header at offset 0 of the ring; records follow at offset 64. */
struct mks_nccl_ring_hdr {
    uint32_t magic;    /* MKS_NCCL_RING_MAGIC */
    uint32_t version;  /* MKS_NCCL_RING_VERSION */
    uint32_t rec_size; /* sizeof(struct mks_nccl_record) */
    uint32_t capacity; /* records, a power of two */
    uint64_t head;     /* records written (writer, release order) */
    uint64_t tail;     /* records consumed (reader) */
    uint64_t dropped;  /* records lost because the ring was full */
    uint32_t pid;      /* creating process */
    uint32_t reserved[5];
};
MKS_NCCL_STATIC_ASSERT(sizeof(struct mks_nccl_ring_hdr) == 64, "nccl ring header size");

struct mks_nccl_ring;

/* Shared-memory name for job/rank into buf.  Returns 0, or -EINVAL when job
 * is not 1..64 characters of [A-Za-z0-9._-] or the name does not fit. */
int mks_nccl_ring_name(const char *job, uint32_t rank, char *buf, size_t len);

/* Writer: create (or truncate and re-create) the ring `name` with `capacity`
 * records (power of two, 0 for the default). */
int mks_nccl_ring_create(const char *name, uint32_t capacity, struct mks_nccl_ring **ring_p);
/* Append one record; -ENOSPC (and a counted drop) when the ring is full. */
int mks_nccl_ring_write(struct mks_nccl_ring *ring, const struct mks_nccl_record *rec);

/* Reader: open an existing ring; -ENOENT when there is none, -EBADMSG when
 * the shared memory is not a ring this version understands. */
int mks_nccl_ring_open(const char *name, struct mks_nccl_ring **ring_p);
/* Copy up to max undrained records into out and consume them.  Returns the
 * number copied, or -EBADMSG when the header's counters are inconsistent. */
int mks_nccl_ring_drain(struct mks_nccl_ring *ring, struct mks_nccl_record *out, size_t max);
/* Records the writer dropped so far. */
uint64_t mks_nccl_ring_dropped(const struct mks_nccl_ring *ring);

/* Unmap (both sides).  Accepts NULL. */
void mks_nccl_ring_close(struct mks_nccl_ring *ring);
/* Remove the shared-memory name (the agent, at the end of the job). */
int mks_nccl_ring_unlink(const char *name);

#ifdef __cplusplus
}
#endif

#endif /* MKSCOPE_NCCL_RING_H */

/*
 * Wait-chain primitives for the collector: join the consumers' remote waits
 * with the producers' releases on the communication generation id, giving one
 * edge consumer (rank, task class, generation, wait interval) -> producer
 * (rank, task class, release time) with the lateness of each, in aligned
 * time with error bounds.
 *
 * Lateness = T(release) - T(wait begin): positive when the consumer started
 * waiting before the producer released, i.e. the wait is explained by the
 * producer being late by that much; negative when the release was already
 * there (the wait then measures only notification).  Wake = T(wait end) -
 * T(release): how long the notification took to arrive.
 *
 * Matching: the release with the same comm_gen on another rank.  When
 * several releases carry the id (NCCL ids name a collective that every rank
 * releases; graph ids repeat after the step field wraps), a graph id's
 * decoded source rank wins, then the release closest before the wait's end.
 * Such matches are flagged ambiguous.  Each matched pair is also a causal
 * edge for clock alignment (the wait's end observed the release):
 * mks_waitedge_clock_edges turns the unambiguous ones into clock.h edges.
 */
#ifndef MKSCOPE_WAITEDGE_H
#define MKSCOPE_WAITEDGE_H

#include <stddef.h>
#include <stdint.h>

#include "mkscope/clock.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A consumer's wait on a remote generation (times: the rank's device clock). */
struct mks_wait_rec {
    uint32_t rank;
    uint32_t task_class;
    uint64_t comm_gen; /* 0: not a remote wait, ignored */
    uint64_t t_begin;
    uint64_t t_end;
};

/* A producer's release of a remote generation. */
struct mks_release_rec {
    uint32_t rank;
    uint32_t task_class;
    uint64_t comm_gen;
    uint64_t t_release;
};

#define MKS_WAITEDGE_F_AMBIGUOUS 0x1u /* several releases carried the id */

struct mks_waitedge {
    size_t wait_idx;    /* index into the waits array */
    size_t release_idx; /* index into the releases array */
    uint64_t comm_gen;
    uint32_t consumer_rank, consumer_class;
    uint32_t producer_rank, producer_class;
    uint32_t flags; /* MKS_WAITEDGE_F_* */
    uint32_t reserved;
    struct mks_aligned_time wait_begin, wait_end, release; /* on the time line */
    struct mks_aligned_time lateness; /* release - wait_begin, with bounds */
    struct mks_aligned_time wake;     /* wait_end - release, with bounds */
};

struct mks_waitedge_stats {
    size_t waits;      /* waits with a non-zero comm_gen */
    size_t matched;    /* edges produced */
    size_t unmatched;  /* no release with that id on another rank */
    size_t ambiguous;  /* matched, but several releases carried the id */
    size_t unaligned;  /* a rank the clock model could not align: skipped */
};

/* Join waits with releases.  clock may be NULL: all times are then on one
 * time line already, with no error.  On success *edges_p is a malloc'd array
 * (free() it; NULL when empty) of *n_p edges in wait order, and *stats_p
 * (optional) is filled.  -EINVAL for a record with t_end < t_begin or NULL
 * arguments, -ENOMEM. */
int mks_waitedge_join(const struct mks_wait_rec *waits, size_t n_waits,
                      const struct mks_release_rec *rels, size_t n_rels,
                      const struct mks_clock_model *clock, struct mks_waitedge **edges_p,
                      size_t *n_p, struct mks_waitedge_stats *stats_p);

/* The causal edges (release -> wait end) of the unambiguous matches, for
 * mks_clock_add_edges.  out must hold n_edges entries; returns how many were
 * written. */
size_t mks_waitedge_clock_edges(const struct mks_waitedge *edges, size_t n_edges,
                                const struct mks_wait_rec *waits, const struct mks_release_rec *rels,
                                uint64_t min_latency_ns, struct mks_clock_edge *out);

#ifdef __cplusplus
}
#endif

#endif /* MKSCOPE_WAITEDGE_H */

/*
 * Clock alignment: every rank's device clock (globaltimer on the GPU,
 * CLOCK_MONOTONIC on the CPU backend) mapped onto one common time line, with
 * an error bound that contains the truth whenever the inputs keep their
 * promises.
 *
 * Model, per rank r with a reference device time c_r:
 *     T_r(d) = d + offset_r + drift_r * (d - c_r)
 * The unknowns (offset_r, drift_r) are not estimated as numbers but as the
 * set of all values consistent with the observations: a convex polygon per
 * rank, cut down by linear constraints (interval constraint propagation):
 *
 *   host anchor  (r, d, [h_lo, h_hi]): the host clock read before and after
 *                the device clock read d, so h_lo <= T_r(d) <= h_hi.  The
 *                host clock is the common time line (one host, or hosts whose
 *                clocks agree within the interval the caller states).
 *   causal edge  (a, t_a) -> (b, t_b), min latency L: a release on rank a at
 *                device time t_a caused the wake on rank b at t_b, so
 *                T_b(t_b) - T_a(t_a) >= L.  For rank b this bounds T_b from
 *                below by min over a's polygon of T_a(t_a) + L; for rank a
 *                it bounds T_a from above.  Edges both ways between two
 *                ranks pin their relative offset to within the smallest
 *                latency excess seen each way; edges at different times pin
 *                the drift.
 * Propagation repeats over all edges until no polygon shrinks.  Every step
 * keeps the true (offset, drift) inside, so for any device time the
 * min/max of T_r(d) over rank r's polygon bounds the true aligned time.
 * Device reads are integers (a tick of tick_ns); constraints are loosened by
 * one tick so quantization never excludes the truth.
 *
 * Time line: the host clock when any rank has anchors; otherwise the device
 * clock of the lowest rank with data (its offset and drift are 0 by
 * definition).  A rank connected to neither stays unaligned (-ENODATA).
 *
 * Guarantee holds when: anchors' intervals contain the host time of the
 * device read; edges are real causal pairs and L is a true lower bound on
 * the latency measured on the time line; |drift| <= max_drift; anchors'
 * midpoints are within max_offset_ns of the truth, and so is the latency of
 * the edge that first connects a rank without anchors.
 */
#ifndef MKSCOPE_CLOCK_H
#define MKSCOPE_CLOCK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A host/device clock pair read together. */
struct mks_clock_anchor {
    uint32_t rank;
    uint32_t reserved;
    uint64_t device_ns;  /* device clock read */
    uint64_t host_lo_ns; /* host clock read just before it */
    uint64_t host_hi_ns; /* ... and just after it */
};

/* A release on src_rank that caused a wake on dst_rank. */
struct mks_clock_edge {
    uint32_t src_rank;
    uint32_t dst_rank;
    uint64_t src_ns;         /* release time, src's device clock */
    uint64_t dst_ns;         /* wake time, dst's device clock */
    uint64_t min_latency_ns; /* the link's minimum latency (lower bound) */
};

struct mks_clock_opts {
    size_t sz;            /* sizeof(struct mks_clock_opts) */
    double max_drift;     /* bound on |drift|, dimensionless; 0: 500e-6 */
    double max_offset_ns; /* bound on first estimates' errors (see above); 0: 1 s */
    uint32_t tick_ns;     /* device clock granularity; 0: 1 ns (globaltimer: 32) */
    uint32_t max_rounds;  /* propagation rounds over all edges; 0: 16 */
};

struct mks_clock_model;

/* A model for ranks 0..nranks-1.  opts may be NULL (defaults); an opts whose
 * sz is smaller than the first release's or carries non-zero unknown
 * trailing bytes is rejected with -EINVAL. */
int mks_clock_model_create(uint32_t nranks, const struct mks_clock_opts *opts,
                           struct mks_clock_model **model_p);
void mks_clock_model_destroy(struct mks_clock_model *model);

/* Add observations (copied).  -EINVAL for a rank out of range or an anchor
 * with host_lo > host_hi, -ENOMEM.  Adding after a solve needs a new solve. */
int mks_clock_add_anchors(struct mks_clock_model *model, const struct mks_clock_anchor *a, size_t n);
int mks_clock_add_edges(struct mks_clock_model *model, const struct mks_clock_edge *e, size_t n);

/* The anchors that bound a model, in place: of each rank's, those whose
 * lower bound is a vertex of the upper hull of the points (device_ns,
 * host_lo_ns - device_ns) or whose upper bound is a vertex of the lower
 * hull of (device_ns, host_hi_ns - device_ns); the others hold wherever
 * these do.  Kept ones come first, by rank and device time (*n_p of them).
 * A model of anchors that include every vertex of a set's hulls is the
 * model of the whole set (the solve itself keeps only these), so the
 * anchors kept of one set plus more anchors give the model of both sets.
 * -EINVAL for an anchor add_anchors refuses (any rank is taken), -ENOMEM. */
int mks_clock_anchors_reduce(struct mks_clock_anchor *a, size_t n, size_t *n_p);

/* Compute every rank's polygon.  Returns 0, or -EDOM when the observations
 * contradict each other (an empty polygon: a latency bound or an anchor that
 * does not hold); the model then aligns nothing. */
int mks_clock_solve(struct mks_clock_model *model);

/* Per-rank result.  T(d) = d + offset_ns + drift * (d - ref_device_ns) at the
 * centre of the feasible set; offset_err_ns bounds |offset - truth| at
 * d = ref_device_ns, drift_err bounds |drift - truth|. */
struct mks_clock_rank_est {
    uint64_t ref_device_ns;
    int64_t offset_ns;
    double drift;
    double offset_err_ns;
    double drift_err;
};
/* -ENODATA for a rank that could not be aligned, -EINVAL before a solve or
 * for a rank out of range. */
int mks_clock_rank_estimate(const struct mks_clock_model *model, uint32_t rank,
                            struct mks_clock_rank_est *est_p);

/* One aligned time: the truth lies in [lo_ns, hi_ns]; t_ns is the middle and
 * err_ns half the width, rounded up. */
struct mks_aligned_time {
    int64_t t_ns;
    int64_t lo_ns;
    int64_t hi_ns;
    uint64_t err_ns;
};
int mks_clock_align(const struct mks_clock_model *model, uint32_t rank, uint64_t device_ns,
                    struct mks_aligned_time *t_p);

/* Bounds on T_b(t_b) - T_a(t_a) (e.g. how late a release was relative to the
 * wait it ended), from the two aligned intervals. */
int mks_clock_interval(const struct mks_clock_model *model, uint32_t rank_a, uint64_t t_a,
                       uint32_t rank_b, uint64_t t_b, struct mks_aligned_time *d_p);

#ifdef __cplusplus
}
#endif

#endif /* MKSCOPE_CLOCK_H */

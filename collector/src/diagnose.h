/*
 * Wait-chain stitching and the diagnosis of slow steps and stragglers
 * (docs/collector.md "Diagnosis").  Reads only what agents reported (the
 * store), never any ground truth.
 *
 * What the diagnosis reads from the store, so that retention and
 * aggregation keep it: `steps` (per rank and step: first task start, last
 * task end), `task_stats` per (epoch, class, step) (count, run and queue
 * sums, maxima or histograms), `waits` (each remote wait: peer, waiter
 * class, comm_gen, begin, end), `releases` (each remote release, and the
 * agent's local release record per (step, class)), `coverage` per epoch,
 * `gens` (step times of ranks whose steps carry none), `epochs` (rank, clock
 * anchors), `ranks` (workers), `task_classes` (names, comm flag).  Waits and
 * releases are compared step by step, each with the same transfer (channel,
 * op of its comm_gen) in other steps and on other ranks: aggregating them
 * over steps or transfers would leave the diagnosis unable to follow a
 * chain or to find a straggler.
 */
#ifndef MKS_COLLECTOR_DIAGNOSE_H
#define MKS_COLLECTOR_DIAGNOSE_H

#include <jansson.h>
#include <stdint.h>

#include "mkscope/store.h"

struct mks_diag_opts {
    size_t sz;             /* sizeof(struct mks_diag_opts) */
    double slow_frac;      /* slow: step time > median * (1 + slow_frac); 0: 0.2 */
    uint64_t min_excess_ns; /* and at least this much over the median; 0: 20 us */
    double min_coverage;   /* below this ratio a link is undecided; 0: 0.5 */
    int64_t only_step;     /* -1: every step */
    uint32_t min_steps;    /* groups of fewer slow steps are left out (and
                              counted in "hidden_groups"); 0: 1, all shown */
    uint32_t range;        /* 1: only steps step_lo..step_hi (--steps A-B) */
    uint32_t step_lo, step_hi;
    uint32_t last;         /* only the last N steps stored (--last N); 0: all */
    uint32_t rows;         /* 1: a whole job's step times from every step row,
                              not the per-step aggregates (for comparison) */
};

/* Diagnose the slow steps and stragglers of `job`: *out = {"median_step_ns",
 * "steps", "slow_steps", "groups": [...], "hidden_groups", "reason",
 * "first_step", "last_step"}.  Returns 0 or a negative errno with one line
 * in err. */
int mks_diagnose(struct mks_store *st, const char *job, const struct mks_diag_opts *opts,
                 json_t **out, char *err, size_t errlen);

#endif

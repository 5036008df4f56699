/*
 * Wait-chain stitching and the diagnosis of slow steps (docs/collector.md
 * "Diagnosis").  Reads only what agents reported (the store), never any
 * ground truth.
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
};

/* Diagnose the slow steps of `job`: *out = {"median_step_ns", "steps",
 * "slow_steps", "groups": [...], "hidden_groups", "reason"}.  Returns 0 or a negative errno
 * with one line in err. */
int mks_diagnose(struct mks_store *st, const char *job, const struct mks_diag_opts *opts,
                 json_t **out, char *err, size_t errlen);

#endif

/*
 * Turning an agent summary into a mkscope.v1 EpochSummary envelope at a
 * chosen detail tier (see summary.h for the tiers and docs/wire.md for the
 * fields).  Counts per task class are the same at every tier; only detail
 * (per-step rows, histograms, wait records, user maps) is dropped, and the
 * envelope's detail_tier says which.
 */
#ifndef MKS_AGENT_ENCODE_H
#define MKS_AGENT_ENCODE_H

#include <stddef.h>
#include <stdint.h>

#include "mkscope/wire.h"
#include "summary.h"

struct agt_encode_meta {
    const char *job;
    uint32_t rank;
    uint64_t incarnation;
    uint64_t seq;
    uint64_t lost_summaries; /* since the previous summary */
    /* per hook, eligible events of the summaries dropped since the previous
     * one (NULL: none) */
    const uint64_t *undelivered;
    uint32_t sample_shift;
    uint32_t pressure;       /* the collector's pressure that capped the tier (0 none) */
    int compact;             /* the compact form (the collector reads it: RegisterAck) */
    const char *const *prog_names; /* indexed by prog_id, NULL entries allowed */
    uint32_t n_prog_names;
    /* Steps whose own rows are withheld (detail.h), sorted; none: every
     * step's go. */
    const uint32_t *withheld_steps;
    size_t n_withheld_steps;
};

/* Coverage of every hook as wire messages (out and outp hold MKS_EV_COUNT;
 * ran is capped at eligible, which validation requires); undelivered per
 * hook, or NULL. */
void agt_coverage_fill(const struct mks_coverage cov[MKS_EV_COUNT], const uint64_t *undelivered,
                       Mkscope__V1__Coverage *out, Mkscope__V1__Coverage **outp);

/* Wire value of detail_tier for an agent tier. */
uint32_t agt_tier_wire(enum agt_tier tier);

/* Encode s at `tier`; *buf_p is malloc()ed.  key may be NULL (no MAC). */
int agt_summary_encode(const struct agt_summary *s, enum agt_tier tier,
                       const struct agt_encode_meta *meta, const struct mks_wire_key *key,
                       uint8_t **buf_p, size_t *len_p);

#endif /* MKS_AGENT_ENCODE_H */

/*
 * Which steps of a summary carry per-step detail (--step-detail).
 *
 * At the full tier a summary carries, for every step it saw, a row per task
 * class, a row per worker and the remote waits and releases of the step.
 * The diagnosis needs that detail for the steps it examines (slow steps, and
 * enough ordinary ones on every rank for its norms and its cross-rank
 * comparison of stragglers), not for every step.  In the `auto` mode the
 * agent sends it for
 *   - a step longer than (1 + slow_frac) times the median of its recent
 *     steps and of the summary's own (the agent's running baseline; until
 *     it knows AGT_DETAIL_MIN_BASE steps, every step) and beyond their
 *     noise (two robust standard deviations, half the collector's floor),
 *     the steps after it while they stay over (1 + slow_frac / 2) times the
 *     baseline (a window of slow steps), and the steps beside those;
 *   - every `every`-th step by number (the same steps on every rank, so the
 *     collector can compare ranks on them), every 2nd one below
 *     AGT_DETAIL_DENSE (unless `every` is 0), and the first `warmup` steps;
 *   - a step that was still running when a summary was made (its end, and
 *     so its length, is not known yet), and that step again in the next
 *     summary, so that a step's rows are never split between kinds;
 * and withholds it for the others: their tasks go into the rows of no step
 * (every count stays exact), their worker rows and their waits and releases
 * are not sent and are counted (EpochSummary.rows_withheld), and each such
 * step's StepTime says detail_withheld.  Step times go for every step.  The
 * rows of a step withheld in the previous summary that come late (a
 * release's postponed dep_release) are withheld too; those of any other
 * step the summary holds no step time of go.
 */
#ifndef MKS_AGENT_DETAIL_H
#define MKS_AGENT_DETAIL_H

#include <stddef.h>
#include <stdint.h>

#include "summary.h"

enum agt_detail_mode { AGT_DETAIL_ALL = 0, AGT_DETAIL_AUTO = 1 };

/* Recent step lengths the running baseline is the median of. */
#define AGT_DETAIL_RING 64
/* Below this many known step lengths every step keeps its detail. */
#define AGT_DETAIL_MIN_BASE 8
/* Below this step every 2nd step keeps its detail (with every not 0): the
 * collector's straggler rule needs ten steps or more with every rank's
 * rows, which a short job's every-th steps alone do not give (a 30-step
 * job: 8 of every 4). */
#define AGT_DETAIL_DENSE 64
/* The previous summary's withheld steps remembered (its latest ones). */
#define AGT_DETAIL_PREV 1024

struct agt_detail_opts {
    enum agt_detail_mode mode;
    uint32_t every;   /* every every-th step keeps its detail (1: all; 0: none by number) */
    uint32_t warmup;  /* steps 0 .. warmup-1 keep their detail */
    double slow_frac; /* a step over (1 + slow_frac) x the baseline is slow */
};

struct agt_detail {
    struct agt_detail_opts o;
    uint64_t ring[AGT_DETAIL_RING];
    size_t n_ring, pos;
    int64_t open_step;              /* the step sent with detail while still running; -1 none */
    int64_t hot_step;               /* the last slow step; -1 none */
    uint32_t prev[AGT_DETAIL_PREV]; /* the previous summary's withheld steps, sorted */
    size_t n_prev;
    uint64_t kept, withheld; /* steps so far, for --stats */
};

/* The agent's defaults: every step's detail (the mode used before). */
void agt_detail_init(struct agt_detail *d, const struct agt_detail_opts *o);

/* Parse "all" or "auto"; -EINVAL otherwise. */
int agt_detail_mode_parse(const char *s, enum agt_detail_mode *mode);

/* The steps whose rows s must not carry, sorted, in *steps (malloc()ed, *n
 * of them; NULL and 0 when none: the `all` mode, or every step kept): s's
 * complete steps withheld, and the previous summary's.  Updates the running
 * baseline with s's complete steps.  The struct holds no pointer: a copy
 * taken before is a whole state to go back to (a summary held and merged
 * into the next is chosen again). */
int agt_detail_choose(struct agt_detail *d, const struct agt_summary *s, uint32_t **steps,
                      size_t *n);

/* Whether step is in the sorted list. */
int agt_detail_has(const uint32_t *steps, size_t n, uint64_t step);

#endif /* MKS_AGENT_DETAIL_H */

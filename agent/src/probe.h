/*
 * Probes in the agent (docs/probes.md): the collector's ProbeStart brings
 * one compiled program per hook and the maps they share; the agent
 * verifies each program for its hook (refusing one that costs more per
 * event than allowed), installs them all or none as "probe-ID/<hook>" among
 * its programs, and reads the maps back at every epoch into a
 * mkscope.v1.ProbeResult that the epoch's summary carries: the groups, the
 * other row, and per hook what the programs counted with the hook's
 * throttled and lost events.  At the end of the window, when the collector
 * says stop, when the agent stops or the application ends, the programs
 * are detached before the epoch's snapshot, so that the last result holds
 * every event they saw, then unloaded; that result says last and why.
 */
#ifndef MKS_AGENT_PROBE_H
#define MKS_AGENT_PROBE_H

#include <stddef.h>
#include <stdint.h>

#include "mkscope/ctl.h"
#include "mkscope/wire.h"
#include "progs.h"
#include "summary.h"

/* Probes attached at once. */
#define AGT_MAX_PROBES 4
/* Longest window the agent accepts. */
#define AGT_PROBE_MAX_MS 3600000u

struct agt_probe;

/* Verify, install and attach.  On failure nothing stays installed and log
 * holds the reason; cost_p and n_insns_p get the largest verified cost and
 * the instructions of all programs. */
int agt_probe_start(struct agt_progs *ps, struct mks_ctl *ctl, const Mkscope__V1__ProbeStart *cmd,
                    uint64_t max_cost, uint64_t now_mono_ns, uint64_t now_host_ns,
                    struct agt_probe **pr_p, uint64_t *cost_p, uint32_t *n_insns_p, char *log,
                    size_t log_len);

uint64_t agt_probe_id(const struct agt_probe *pr);
const char *agt_probe_name(const struct agt_probe *pr);

/* Ask it to end at the next epoch (why: "stopped", ...). */
void agt_probe_stop(struct agt_probe *pr, const char *why);

/* Before the epoch's snapshot: detach when the window is over or it was
 * asked to stop (or `why` is given: the agent or the application ends). */
void agt_probe_before_snapshot(struct agt_probe *pr, struct agt_progs *ps, struct mks_ctl *ctl,
                               uint64_t now_mono_ns, const char *why);

/* After the snapshot: the epoch's ProbeResult into s (cov: the epoch's
 * coverage).  Returns 1 when this was the last result: the programs are
 * unloaded and pr may be freed. */
int agt_probe_collect(struct agt_probe *pr, struct agt_progs *ps, struct mks_ctl *ctl,
                      const struct agt_snap_ops *ops, void *snap,
                      const struct mks_coverage cov[MKS_EV_COUNT], uint64_t now_mono_ns,
                      struct agt_summary *s);

void agt_probe_free(struct agt_probe *pr); /* accepts NULL */

#endif /* MKS_AGENT_PROBE_H */

/*
 * Ranks the collector has lost, and the peers they stall.
 *
 * A rank's state comes from what its agent said and when: "exited" once the
 * agent reported that the application ended (a killed rank is reported at
 * the agent's next epoch), "silent" when nothing was heard from the agent
 * for two of its heartbeats (node, agent or link lost), else "running".
 *
 * A lost rank stalls the peers that wait on it: their steps stop making
 * progress while their agents still report.  Such a peer's remote waits
 * from its last steps that made progress lead to the lost rank directly or
 * through other stalled peers (a chain of relays): that path is the answer,
 * the lost rank its root.  When no wait record exists (summaries of a
 * coarse tier carry none) and one rank is lost, it is named as the root
 * with that said ("evidence": which stalled ranks its waits tie to it,
 * "by_waits", and which only because it is the only one lost,
 * "only_lost_rank").
 */
#ifndef MKS_COLLECTOR_LOST_H
#define MKS_COLLECTOR_LOST_H

#include <jansson.h>
#include <stdint.h>

#include "mkscope/store.h"

/* How long an agent may be silent before its rank is lost: two heartbeats
 * (three epochs, at least 2 s, when it did not say its heartbeat). */
uint64_t mks_rank_silent_after(uint64_t heartbeat_ns, uint64_t epoch_ns);

/* "exited", "silent" or "running" (see above). */
const char *mks_rank_state(int app_alive, uint64_t last_seen_ns, uint64_t heartbeat_ns,
                           uint64_t epoch_ns, uint64_t now_ns);

/* The lost ranks of job and the peers they stall, as diagnosis groups
 * (cause "rank_lost"): *out = [...], empty when none is lost.  Returns 0 or a
 * negative errno with one line in err. */
int mks_lost_ranks(struct mks_store *st, const char *job, uint64_t now_ns, json_t **out,
                   char *err, size_t errlen);

#endif /* MKS_COLLECTOR_LOST_H */

/*
 * Probe results into the store: each summary's ProbeResult rows are added
 * to the probe's groups (mkscope/probe.h's merge: sums add, extremes take
 * the larger), its per-hook counts and per-rank running time to the
 * probe's tables (docs/collector.md).  The groups are merged across epochs
 * and ranks at once, so a probe's answer is a read of at most its bounded
 * number of groups, however long it ran on however many ranks.
 */
#ifndef MKS_COLLECTOR_PROBE_STORE_H
#define MKS_COLLECTOR_PROBE_STORE_H

#include <sqlite3.h>
#include <stdint.h>

#include "mkscope/wire.h"

/* Groups one probe keeps apart in the store, as a multiple of what one
 * epoch of one rank keeps (its --groups): new keys beyond go into other,
 * counted in probes.overflowed. */
#define MKS_PROBE_STORE_GROUPS_FACTOR 4u

/* Add the results of a stored (new) summary.  Results of a probe the store
 * does not know, or of another job, and rows of another layout are
 * ignored.  0, or -EIO when the database failed. */
int mks_probe_store(sqlite3 *db, const mks_envelope *env, uint64_t now_ns);

/* u64 words as a little-endian blob, and back (n at most max; returns n). */
void mks_probe_words_blob(const uint64_t *w, size_t n, uint8_t *blob);
size_t mks_probe_blob_words(const void *blob, size_t bytes, uint64_t *w, size_t max);

#endif

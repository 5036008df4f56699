/*
 * The clock's anchors kept at ingest (docs/collector.md, "Clock anchors"):
 * of every epoch's two host/device clock pairs, only those that bound the
 * diagnosis's clock model (mks_clock_anchors_reduce), so that a whole job's
 * model reads a few rows instead of every epoch.
 *
 *   clock_hulls(job, rank, incarnation, blk, device_ns, host_ns)
 *       per block of 2^MKS_ANCHORS_BLK_SHIFT summaries of a rank's
 *       incarnation (by seq), the anchors of its epochs that bound the model
 *       (host_ns is the host time read with device_ns; the interval the
 *       diagnosis gives it, +-MKS_ANCHORS_SLACK_NS, is the same for all);
 *   clock_stale(job, rank, incarnation, blk)
 *       blocks an epoch of which was deleted or changed (retention, the
 *       roll-up): read from their epochs until refreshed;
 *   clock_jobs(job, cut)
 *       the job's epochs with id <= cut are not in any block yet (a store
 *       of an older collector: filled while the collector idles, from the
 *       top down); -1: every epoch is.
 *
 * Anchors of the epochs at or below the cut and of stale blocks, plus the
 * blocks' kept anchors, give the model of all of the job's anchors: the
 * model depends only on the hulls of what it is given, and every anchor a
 * block dropped lies inside the hulls of what it kept.  Updates are written
 * in the flush's transaction (a rolled-back message adds nothing, a replay
 * is not stored again), the triggers on epochs in the deleting one.
 */
#ifndef MKS_COLLECTOR_CLOCK_ANCHORS_H
#define MKS_COLLECTOR_CLOCK_ANCHORS_H

#include <sqlite3.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mkscope/clock.h"
#include "mkscope/wire.h"

/* Summaries a block holds, as a shift of seq. */
#define MKS_ANCHORS_BLK_SHIFT 12
#define MKS_ANCHORS_BLK_SQL "12"
/* The agent reads the two clocks back to back: a millisecond either side
 * is a safe bound. */
#define MKS_ANCHORS_SLACK_NS 1000000

/* Tables, for the store's schema. */
extern const char mks_anchors_schema[];
/* What the triggers on epochs do with the old row: its block's kept
 * anchors dropped and the block marked stale. */
#define MKS_ANCHORS_STALE_SQL                                                                      \
    " DELETE FROM clock_hulls WHERE job = old.job AND rank = old.rank AND incarnation ="           \
    " COALESCE(old.incarnation, 0) AND blk = COALESCE(old.seq, 0) >> " MKS_ANCHORS_BLK_SQL ";"     \
    " INSERT OR IGNORE INTO clock_stale(job, rank, incarnation, blk) VALUES(old.job, old.rank,"    \
    " COALESCE(old.incarnation, 0), COALESCE(old.seq, 0) >> " MKS_ANCHORS_BLK_SQL ");"

/* An epoch's anchor as the diagnosis takes it: false for a pair it leaves
 * out (a clock not read, a host time too small for the interval). */
bool mks_anchors_pair(int64_t device_ns, int64_t host_ns, uint32_t rank,
                      struct mks_clock_anchor *a);

struct mks_anchors_note;
struct mks_anchors {
    struct mks_anchors_note *v;
    size_t n, cap, mark;
    sqlite3_stmt *q_get, *q_del, *q_ins, *q_job;
};

/* Buffer a stored (new) summary's anchors: (job, rank, incarnation, seq),
 * epoch row eid.  0 or -ENOMEM. */
int mks_anchors_note(struct mks_anchors *a, const char *job, uint32_t rank, uint64_t incarnation,
                     uint64_t seq, int64_t eid, uint64_t t_begin_dev, uint64_t t_begin_host,
                     uint64_t t_end_dev, uint64_t t_end_host);
/* Merge the buffered anchors into their blocks (after the epoch rows are
 * written, in the writer's transaction); the buffer is emptied either way.
 * SQLITE_OK or SQLite's error. */
int mks_anchors_apply(struct mks_anchors *a, sqlite3 *db);
void mks_anchors_mark(struct mks_anchors *a);
void mks_anchors_truncate(struct mks_anchors *a);
void mks_anchors_free(struct mks_anchors *a);

/* Some work towards every job's anchors in blocks (the caller's
 * transaction): jobs without a row get one, up to 16 stale blocks are
 * refreshed from their epochs, up to max_epochs epochs at or below a job's
 * cut are merged into their blocks.  1: more is left, 0: done, <0: -EIO. */
int mks_anchors_fill(sqlite3 *db, size_t max_epochs);

/* Add the anchors of a job's whole run to model (ranks below n_ranks):
 * the blocks' kept ones, and those of stale blocks' and not yet filled
 * epochs read from the epochs.  Read in one transaction of db.  The
 * number added, -ENOENT when the store keeps none for the job (every
 * epoch is to be read), -EIO. */
long mks_anchors_load(sqlite3 *db, const char *job, uint32_t n_ranks,
                      struct mks_clock_model *model);

#endif

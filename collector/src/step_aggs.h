/*
 * Per-step aggregates kept at ingest (docs/collector.md, "Step
 * aggregates"): what the diagnosis of a whole job needs of every step
 * without reading every rank's every step row.
 *
 *   step_cells(job, step, rank)  a rank's step merged over the epochs that
 *                                reported it, where it has queueing (nq >
 *                                0): min begin, max end, max
 *                                queued_while_idle of the rows with times
 *                                (nv rows, nq of them with queueing); a
 *                                step without queueing has no cell (agents
 *                                that measure none: no write a step);
 *   step_aggs(job, step)         the step's slowest rank and its time (the
 *                                lowest rank of the slowest), the ranks
 *                                with a time (cells), with queueing
 *                                (qcells), the (epoch, step) rows (pairs)
 *                                and the epochs whose lowest step it is
 *                                (firsts);
 *   step_agg_jobs(job, cut)      both tables are exact for the job's steps
 *                                above cut; at or below it the step rows
 *                                are read as they are (old stores: cut is
 *                                the largest integer until filled; deleted
 *                                or rolled-up epochs raise it to their
 *                                highest step).
 *
 * Updates are added up from the rows each flush writes, in the same
 * transaction, so a summary's rows and its aggregates commit or roll back
 * together and a replayed summary (not stored again) adds nothing.  What a
 * rank's step held before a flush comes from the rank's earlier step rows
 * of the same steps, found by the epochs' step ranges (the epochs_rank_step
 * index): a summary whose steps follow its rank's last ones finds none.
 */
#ifndef MKS_COLLECTOR_STEP_AGGS_H
#define MKS_COLLECTOR_STEP_AGGS_H

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

#include "mkscope/wire.h"

/* The cut of a job not aggregated (yet): every step read from its rows. */
#define MKS_STEPAGG_NONE INT64_MAX

/* Tables (for the store's schema) and the rows buffered for them. */
extern const char mks_stepagg_schema[];

struct mks_stepagg_row;
#define MKS_STEPAGG_CHUNKS 4
struct mks_stepagg {
    struct mks_stepagg_row *rows;
    size_t n, cap, mark;
    char (*jobs)[MKS_WIRE_MAX_JOB + 1]; /* the flush's jobs, rows name them by index */
    size_t n_jobs, cap_jobs;
    sqlite3_stmt *q_prior, *q_agg, *q_job;
    sqlite3_stmt *q_new[MKS_STEPAGG_CHUNKS]; /* cells written, 64, 16, 4 and 1 a statement */
};

/* Buffer what a stored (new) summary of (job, rank), epoch row eid, adds.
 * 0 or -ENOMEM. */
int mks_stepagg_note(struct mks_stepagg *a, const char *job, uint32_t rank, int64_t eid,
                     const Mkscope__V1__EpochSummary *s);
/* Add the buffered rows to the tables (after the step rows are written,
 * inside the writer's transaction); the buffer is emptied either way.
 * SQLITE_OK or SQLite's error. */
int mks_stepagg_apply(struct mks_stepagg *a, sqlite3 *db);
/* Forget what was buffered since the mark (a message rolled back). */
void mks_stepagg_mark(struct mks_stepagg *a);
void mks_stepagg_truncate(struct mks_stepagg *a);
void mks_stepagg_free(struct mks_stepagg *a);

/* Recompute up to about max_steps steps at or below one job's cut from its
 * step rows and lower the cut below them (the caller's transaction).
 * 1: more is left to fill, 0: every job is filled, <0: -EIO. */
int mks_stepagg_fill(sqlite3 *db, size_t max_steps);

#endif

/*
 * The collector's store: an embedded SQLite database (WAL) holding what the
 * agents reported, in the schema documented in docs/collector.md.  The
 * collector daemon writes it; queries, the diagnosis and tests read it
 * through mks_store_db().
 *
 * Ingest is idempotent: a summary is stored once per (job, rank,
 * incarnation, seq), so agents may replay after a reconnect.  Retention
 * limits bound the database: the oldest epochs (and everything hanging off
 * them) are deleted when they are older than max_age_ns, when the store
 * holds more than max_bytes, or when a rank holds more than max_epochs;
 * epochs older than detail_age_ns are rolled up per rank and minute.
 */
#ifndef MKSCOPE_STORE_H
#define MKSCOPE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sqlite3.h>

#include "mkscope/wire.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mks_store;

struct mks_store_opts {
    size_t sz;                /* sizeof(struct mks_store_opts) */
    const char *path;         /* database file; ":memory:" for tests */
    uint64_t max_epochs;      /* per rank; 0 = none (the age and size limits bound it) */
    uint64_t max_age_ns;      /* 0 = no age limit */
    uint64_t max_raw_events;  /* per job; 0 = default (1000000) */
    /* Open an existing store for reading only (no schema, no retention):
     * the collector's request-serving threads each hold one such
     * connection, so that no request ever takes the writer's lock. */
    int read_only;
    /* The writer's WAL is checkpointed by a thread of the store's own, on
     * a connection of its own (PASSIVE: it never blocks the writer), instead
     * of by the commit that fills it: a checkpoint's fsync then never
     * delays an ingest batch and its acks.  File stores only. */
    int checkpoint_thread;
    /* The store's bytes in use (pages not free) at most about this many:
     * beyond, the oldest epochs of every job go first.  0 = no limit. */
    uint64_t max_bytes;
    /* Epochs received longer ago than this are rolled up: a rank's epochs
     * of one minute become one (compacted = 2) whose task statistics,
     * coverage, worker rows and local waits are summed without a step,
     * whose step times and remote waits are kept as count, sum, extremes
     * and histogram (rollups), and whose release records and per-step rows
     * go.  The size bound rolls up epochs older than a minute before it
     * deletes any.  0 = keep the detail (unless the size bound needs it). */
    uint64_t detail_age_ns;
};

int mks_store_open(const struct mks_store_opts *opts, struct mks_store **st_p, char *err,
                   size_t errlen);
void mks_store_close(struct mks_store *st); /* accepts NULL */

/* The underlying connection (read queries; the store keeps ownership). */
sqlite3 *mks_store_db(struct mks_store *st);

/* Ingest one decoded, validated envelope from an agent.  now_ns is the
 * collector's CLOCK_REALTIME.  For Register, *seq_p gets the highest seq
 * already stored for this (rank, incarnation); for EpochSummary, the
 * cumulative ack (highest seq stored).  Returns 0, or a negative errno with
 * one line in err:
 *   -ENOENT    not from a registered rank, or from an incarnation newer than
 *              the registered one: refused, nothing stored (no phantom rank);
 *   -ESTALE    a Register of an incarnation older than the registered one:
 *              incarnations of a rank only move forward;
 *   -EALREADY  a Register or Heartbeat older than the last one applied for
 *              the incarnation (sent_ns), or a heartbeat of an earlier
 *              incarnation: ignored, nothing changed; answer as accepted;
 *   -EIO       the database failed. */
int mks_store_ingest(struct mks_store *st, const mks_envelope *env, uint64_t now_ns,
                     uint64_t *seq_p, char *err, size_t errlen);

/* A batch: every message ingested until the commit joins one transaction
 * (each in its own savepoint, so a message that fails leaves the others
 * alone).  Nothing of a batch is durable before mks_store_batch_commit
 * returns 0: acknowledge its summaries only then.  A failed commit rolls the
 * whole batch back.  mks_store_close() rolls back a batch left open. */
int mks_store_batch_begin(struct mks_store *st, char *err, size_t errlen);
int mks_store_batch_commit(struct mks_store *st, char *err, size_t errlen);
int mks_store_in_batch(const struct mks_store *st);

/* The highest summary seq stored for the rank's current agent (0: none). */
int mks_store_acked_seq(struct mks_store *st, const char *job, uint32_t rank, uint64_t *seq_p);

/* Whether any command of any rank waits to be handed out (true on error:
 * the caller then looks per rank). */
bool mks_store_commands_pending(struct mks_store *st);

/* Up to max commands waiting for (job, rank), oldest first, marked sent at
 * now_ns; each cmds[i] is freed by the caller with
 * mkscope__v1__command__free_unpacked.  Returns the count. */
size_t mks_store_take_commands(struct mks_store *st, const char *job, uint32_t rank,
                               uint64_t now_ns, Mkscope__V1__Command **cmds, size_t max);

/* Apply the retention limits now (ingest also does so periodically). */
int mks_store_retain(struct mks_store *st, uint64_t now_ns);

/* What ingest does for the age, size and detail limits, once a second (or
 * at once while a roll-up is behind), for a loop with nothing to ingest:
 * a store no agent sends to still rolls up and sheds.  0 or -EIO. */
int mks_store_idle(struct mks_store *st, uint64_t now_ns);

/* Fill the per-step aggregates of every job that lacks them (a store an
 * older collector wrote, steps whose epochs retention took), all at once;
 * mks_store_idle does the same a bounded chunk a pass.  0 or -EIO. */
int mks_store_fill_steps(struct mks_store *st);

/* What of a job is rolled up (older than the detail window): how many
 * epochs, the newest one's receipt time (collector clock) and the highest
 * step their step rows held (-1 if none).  Works on read-only stores too. */
struct mks_store_rolled {
    int64_t epochs;
    uint64_t until_ns;
    int64_t step_hi;
};
int mks_store_rolled(struct mks_store *st, const char *job, struct mks_store_rolled *r);

/* Task class name of (job, rank, class), written into buf ("class<N>" when
 * the schema does not name it). */
void mks_store_class_name(struct mks_store *st, const char *job, uint32_t rank, uint32_t cls,
                          char *buf, size_t len);

/* The job most recently heard from ("" if none). */
int mks_store_latest_job(struct mks_store *st, char *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* MKSCOPE_STORE_H */

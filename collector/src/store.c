/*
 * SQLite store of the collector (schema: docs/collector.md).
 *
 * One row per epoch summary in `epochs`, keyed uniquely by (job, rank,
 * incarnation, seq) so that replays are ignored; every per-epoch table
 * references it (epoch_id), and a trigger on epochs deletes a deleted
 * epoch's rows, so retention deletes epochs and the rest follows.  The
 * REFERENCES clauses document the link but foreign keys are not enforced:
 * checking each inserted row's parent cost a quarter of ingest, for rows
 * whose epoch_id the insert itself has just made.  Unsigned 64-bit wire values are stored as SQLite INTEGER
 * (two's complement): readers cast back to uint64_t.  Histograms are BLOBs of
 * little-endian u64 buckets in struct mks_hist order.
 *
 * Every statement of the ingest path is prepared once and kept (a cache
 * keyed by the SQL text's address: the texts are literals), so a summary
 * costs binds and steps, not parsing.  Each ingested message runs in a
 * savepoint: alone it is its own transaction; inside a batch
 * (mks_store_batch_begin/commit) a failing message is rolled back alone and
 * the batch commits once, which is where ingest spends its time otherwise
 * (one commit per summary).  Retention during ingest is per rank and uses
 * the (job, rank, id) index: a rank's oldest epochs go once it has stored
 * RETAIN_EVERY more, and epochs past max_age go at most once a second, by
 * the received_ns index.
 */
#include "mkscope/query.h"
#include "mkscope/store.h"
#include "probe_store.h"
#include "clock_anchors.h"
#include "step_aggs.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Epochs of one size-retention pass at most: the deletes run in the ingest
 * loop's transaction, so each pass is bounded (about 50 ms of deletes on
 * the machines measured in docs/PERF.md); a store far over its bound sheds
 * it over the next seconds. */
#define SIZE_CHUNK_EPOCHS 4096u
/* Epochs one roll-up pass folds at most (as above: a full-tier epoch of
 * a fast job holds about a thousand rows); a pass that stops there is
 * followed by another at the next flush, not a second later. */
#define ROLL_CHUNK_EPOCHS 512u
/* Rolled-up rows span this much of the collector's clock each. */
#define ROLL_NS 60000000000ull
#define DEFAULT_MAX_RAW_EVENTS 1000000u
/* A rank's epochs beyond max_epochs are deleted every this many summaries
 * it stores: deleting is cheap, but not free enough to do per message. */
#define RETAIN_EVERY 64u
/* Epochs past max_age one pass deletes at most (with their rows). */
#define AGE_CHUNK_EPOCHS 1024u
/* Epochs older than max_age are looked for at most this often. */
#define AGE_CHECK_NS 1000000000ull
/* Steps one pass of the step aggregates' fill recomputes at most (about
 * 20 ms of reads and writes for 4 ranks' steps). */
#define STEPAGG_FILL_STEPS 2048u
/* Epochs a pass of the clock anchors' fill merges into their blocks. */
#define ANCHORS_FILL_EPOCHS 16384u
/* Chunk sizes of multi-row inserts (chunk_rows), and the tables they fill. */
#define INS_CHUNKS 4
enum ins_table { T_TASK, T_STEPS, T_WAITS, T_RELEASES, T_LOCAL_WAITS, T_WORKERS, T_GENS, T_MAPS,
                 T_COVERAGE, T_RAW, T_COUNT };

/* Prepared statements kept: more slots than the store has statements. */
#define STMT_SLOTS 128u

struct stmt_slot {
    const char *sql;
    sqlite3_stmt *s;
};

/* A buffered value: type as in bindv_at's format; text and blobs live in
 * the store's arena at offset i, n bytes. */
struct cell {
    uint8_t type;
    int n;
    int64_t i;
};

struct rowbuf {
    struct cell *cells; /* rows * the table's columns */
    size_t n, cap, mark;
};

struct trim {
    char job[MKS_WIRE_MAX_JOB + 1];
    uint32_t rank;
};

/* What a rank's last heartbeat said of its programs: (job, rank) hash and
 * programs hash, in a direct-mapped table (a collision only costs a
 * rewrite). */
#define PROGS_SEEN 4096u
struct prog_seen {
    uint64_t key, progs;
};

struct mks_store {
    sqlite3 *db;
    uint64_t max_epochs, max_age_ns, max_raw_events, max_bytes, detail_age_ns;
    uint64_t age_checked_ns;  /* last age retention (the collector's clock) */
    int64_t compacted_to;     /* epochs with id <= this are rolled up */
    bool compacted_known;     /* compacted_to read from the store */
    bool roll_behind;         /* the last roll-up pass stopped at its chunk */
    uint64_t bounds_checked_ns; /* last size and detail retention */
    uint64_t size_said_ns;      /* last log line of the size bound at work */
    uint64_t raw_since_trim; /* raw events stored since the cap was last applied */
    uint64_t raw_since_mark;
    int in_batch;
    struct stmt_slot stmts[STMT_SLOTS];
    sqlite3_stmt *chunks[T_COUNT][INS_CHUNKS]; /* multi-row inserts, per table (ins_table) */
    /* rows waiting for buf_flush, their text and blobs in the arena, and the
     * ranks whose retention is due; marks: where the current message began */
    struct rowbuf rows[T_COUNT];
    char *arena;
    size_t arena_len, arena_cap, arena_mark;
    struct trim *trims;
    size_t n_trims, cap_trims, trims_mark;
    uint64_t flush_now; /* the collector's time of the last message buffered */
    struct checkpointer *ckpt;
    struct prog_seen progs_seen[PROGS_SEEN];
    int raw_trim_due;
    struct mks_stepagg agg; /* per-step aggregates of the buffered step rows */
    struct mks_anchors anc; /* the clock's anchors of the buffered epochs */
    bool fill_due;          /* some job's aggregates may need filling */
};

static int trim_raw(struct mks_store *st);
static int retain_bounds(struct mks_store *st, uint64_t now);

static int fail(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t errlen, int code, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

static const char schema_sql[] =
    "CREATE TABLE IF NOT EXISTS ranks(job TEXT NOT NULL, rank INTEGER NOT NULL,"
    " n_ranks INTEGER, host TEXT, pid INTEGER, gpu_uuid TEXT, hook_abi INTEGER,"
    " agent_version TEXT, n_workers INTEGER, epoch_ns INTEGER, incarnation INTEGER,"
    " app_start_ns INTEGER, registered_ns INTEGER, last_seen_ns INTEGER,"
    " last_heartbeat_ns INTEGER, agent_time_ns INTEGER, last_seq INTEGER DEFAULT 0,"
    " acked_seq INTEGER DEFAULT 0, app_alive INTEGER, summaries INTEGER DEFAULT 0,"
    " duplicates INTEGER DEFAULT 0, lost_summaries INTEGER DEFAULT 0, unacked INTEGER DEFAULT 0,"
    " last_epoch INTEGER, heartbeat_ns INTEGER, lost_cur_sum INTEGER DEFAULT 0,"
    " lost_cur_hb INTEGER DEFAULT 0, state_sent_ns INTEGER DEFAULT 0,"
    " tasks_total INTEGER DEFAULT 0, cov_eligible INTEGER DEFAULT 0, cov_ran INTEGER DEFAULT 0,"
    " cov_throttled INTEGER DEFAULT 0, cov_lost INTEGER DEFAULT 0,"
    " cov_undelivered INTEGER DEFAULT 0, step_span INTEGER DEFAULT 0, PRIMARY KEY(job, rank));\n"
    "CREATE TABLE IF NOT EXISTS task_classes(job TEXT, rank INTEGER, id INTEGER, name TEXT,"
    " source_op TEXT, device_fn TEXT, region_class TEXT, comm INTEGER,"
    " PRIMARY KEY(job, rank, id));\n"
    "CREATE TABLE IF NOT EXISTS dep_classes(job TEXT, rank INTEGER, id INTEGER, name TEXT,"
    " remote INTEGER, PRIMARY KEY(job, rank, id));\n"
    "CREATE TABLE IF NOT EXISTS channels(job TEXT, rank INTEGER, id INTEGER, name TEXT,"
    " peer_rank INTEGER, kind TEXT, PRIMARY KEY(job, rank, id));\n"
    "CREATE TABLE IF NOT EXISTS programs(job TEXT, rank INTEGER, name TEXT, hook INTEGER,"
    " prog_gen INTEGER, cost INTEGER, prog_type INTEGER, updated_ns INTEGER,"
    " PRIMARY KEY(job, rank, name, hook));\n"
    "CREATE TABLE IF NOT EXISTS epochs(id INTEGER PRIMARY KEY, job TEXT NOT NULL,"
    " rank INTEGER NOT NULL, incarnation INTEGER, seq INTEGER, epoch INTEGER,"
    " t_begin_host INTEGER, t_end_host INTEGER, t_begin_dev INTEGER, t_end_dev INTEGER,"
    " detail_tier INTEGER, sample_shift INTEGER, lost_summaries INTEGER,"
    " waits_dropped INTEGER, received_ns INTEGER, compacted INTEGER DEFAULT 0,"
    " step_lo INTEGER, step_hi INTEGER, UNIQUE(job, rank, incarnation, seq));\n"
    "CREATE INDEX IF NOT EXISTS epochs_rank ON epochs(job, rank, id);\n"
    /* (job, id): the epochs of a job from some id on (triggers read only
     * what arrived since their last run). */
    "CREATE INDEX IF NOT EXISTS epochs_job ON epochs(job);\n"
    "CREATE TABLE IF NOT EXISTS task_stats(epoch_id INTEGER REFERENCES epochs(id) ON DELETE"
    " CASCADE, class INTEGER, step INTEGER, req_gen INTEGER, count INTEGER, sum_run_ns INTEGER,"
    " queue_count INTEGER, queue_sum INTEGER, queue_max INTEGER, queue_hist BLOB,"
    " run_count INTEGER, run_sum INTEGER, run_max INTEGER, run_hist BLOB);\n"
    "CREATE INDEX IF NOT EXISTS task_stats_e ON task_stats(epoch_id);\n"
    "CREATE TABLE IF NOT EXISTS steps(epoch_id INTEGER REFERENCES epochs(id) ON DELETE CASCADE,"
    " step INTEGER, t_begin_dev INTEGER, t_end_dev INTEGER, tasks INTEGER, complete INTEGER,"
    " queued_while_idle_ns INTEGER, cpu_wait_ns INTEGER, cpu_runs INTEGER,"
    " detail_withheld INTEGER DEFAULT 0);\n"
    "CREATE INDEX IF NOT EXISTS steps_e ON steps(epoch_id);\n"
    "CREATE TABLE IF NOT EXISTS waits(epoch_id INTEGER REFERENCES epochs(id) ON DELETE CASCADE,"
    " comm_gen INTEGER, peer_rank INTEGER, waiter_class INTEGER, step INTEGER, worker INTEGER,"
    " t_begin_dev INTEGER, t_end_dev INTEGER, producer_class INTEGER);\n"
    "CREATE INDEX IF NOT EXISTS waits_e ON waits(epoch_id);\n"
    "CREATE INDEX IF NOT EXISTS waits_gen ON waits(comm_gen);\n"
    "CREATE TABLE IF NOT EXISTS releases(epoch_id INTEGER REFERENCES epochs(id) ON DELETE"
    " CASCADE, comm_gen INTEGER, consumer_rank INTEGER, class INTEGER, step INTEGER,"
    " worker INTEGER, t_ready INTEGER, t_start INTEGER, t_end INTEGER, t_comm_begin INTEGER,"
    " t_comm_end INTEGER, t_release INTEGER, bytes INTEGER);\n"
    "CREATE INDEX IF NOT EXISTS releases_e ON releases(epoch_id);\n"
    "CREATE INDEX IF NOT EXISTS releases_gen ON releases(comm_gen);\n"
    "CREATE TABLE IF NOT EXISTS local_waits(epoch_id INTEGER REFERENCES epochs(id) ON DELETE"
    " CASCADE, class INTEGER, step INTEGER, count INTEGER, sum_ns INTEGER, max_ns INTEGER);\n"
    "CREATE INDEX IF NOT EXISTS local_waits_e ON local_waits(epoch_id);\n"
    "CREATE TABLE IF NOT EXISTS workers(epoch_id INTEGER REFERENCES epochs(id) ON DELETE"
    " CASCADE, worker INTEGER, step INTEGER, busy_ns INTEGER, idle_ns INTEGER,"
    " dep_wait_ns INTEGER, max_queue_depth INTEGER, over_threshold_ns INTEGER, tasks INTEGER);\n"
    "CREATE INDEX IF NOT EXISTS workers_e ON workers(epoch_id);\n"
    "CREATE TABLE IF NOT EXISTS gens(epoch_id INTEGER REFERENCES epochs(id) ON DELETE CASCADE,"
    " req_gen INTEGER, step INTEGER, t_dev INTEGER, value INTEGER);\n"
    "CREATE INDEX IF NOT EXISTS gens_e ON gens(epoch_id);\n"
    "CREATE TABLE IF NOT EXISTS maps(epoch_id INTEGER REFERENCES epochs(id) ON DELETE CASCADE,"
    " prog_id INTEGER, prog_name TEXT, map_name TEXT, key BLOB, value BLOB);\n"
    "CREATE INDEX IF NOT EXISTS maps_e ON maps(epoch_id);\n"
    "CREATE TABLE IF NOT EXISTS coverage(epoch_id INTEGER REFERENCES epochs(id) ON DELETE"
    " CASCADE, hook INTEGER, eligible INTEGER, ran INTEGER, throttled INTEGER, lost INTEGER,"
    " prog_gen INTEGER, undelivered INTEGER DEFAULT 0);\n"
    "CREATE INDEX IF NOT EXISTS coverage_e ON coverage(epoch_id);\n"
    /* Past the detail window (--detail-age) a rank's epochs of one minute
     * are rolled up into one (epochs.compacted = 2): its step times and
     * remote waits (per waiter class and peer) as count, sum, extremes and
     * a histogram here, kind 0 steps and kind 1 waits, with the steps they
     * came from; task statistics per class, worker rows per worker, local
     * waits per class and coverage per hook summed in their own tables,
     * with no step. */
    "CREATE TABLE IF NOT EXISTS rollups(epoch_id INTEGER REFERENCES epochs(id) ON DELETE"
    " CASCADE, kind INTEGER, class INTEGER, peer_rank INTEGER, step_lo INTEGER,"
    " step_hi INTEGER, count INTEGER, sum_ns INTEGER, min_ns INTEGER, max_ns INTEGER,"
    " hist BLOB);\n"
    "CREATE INDEX IF NOT EXISTS rollups_e ON rollups(epoch_id);\n"
    /* The highest seq of a rank's incarnation rolled up: its epoch row is
     * gone, so a replay of it (an ack lost, the agent sending it again
     * after the roll-up) is told from a new summary here. */
    "CREATE TABLE IF NOT EXISTS rolled_seqs(job TEXT NOT NULL, rank INTEGER NOT NULL,"
    " incarnation INTEGER NOT NULL, seq_hi INTEGER NOT NULL, PRIMARY KEY(job, rank,"
    " incarnation)) WITHOUT ROWID;\n"
    "CREATE TABLE IF NOT EXISTS raw_events(id INTEGER PRIMARY KEY, job TEXT, rank INTEGER,"
    " escalation_id INTEGER, event INTEGER, flags INTEGER, worker INTEGER, sm INTEGER,"
    " class INTEGER, task_gen INTEGER, req_gen INTEGER, step INTEGER, dep_class INTEGER,"
    " tile_x INTEGER, tile_y INTEGER, dep_event INTEGER, comm_gen INTEGER, peer_rank INTEGER,"
    " queue_depth INTEGER, t_now INTEGER, t_ready INTEGER, t_start INTEGER, value INTEGER,"
    " received_ns INTEGER);\n"
    "CREATE INDEX IF NOT EXISTS raw_events_esc ON raw_events(escalation_id, rank);\n"
    "CREATE TABLE IF NOT EXISTS raw_batches(job TEXT, rank INTEGER, escalation_id INTEGER,"
    " events INTEGER, dropped INTEGER, last INTEGER, received_ns INTEGER);\n"
    "CREATE TABLE IF NOT EXISTS triggers(id INTEGER PRIMARY KEY, expr TEXT NOT NULL,"
    " created_ns INTEGER, enabled INTEGER DEFAULT 1, fired INTEGER DEFAULT 0,"
    " last_fired_ns INTEGER, last_value REAL, last_epoch_id INTEGER DEFAULT 0,"
    " hold_off_ns INTEGER, last_escalated_ns INTEGER, escalations INTEGER DEFAULT 0,"
    " request_id INTEGER, request_hash INTEGER, probe TEXT, probe_for_ns INTEGER,"
    " probes INTEGER DEFAULT 0, last_probe INTEGER, probe_error TEXT);\n"
    "CREATE TABLE IF NOT EXISTS commands(id INTEGER PRIMARY KEY, job TEXT, rank INTEGER,"
    " kind TEXT, name TEXT, hook INTEGER, created_ns INTEGER, sent_ns INTEGER,"
    " replied_ns INTEGER, ok INTEGER, error TEXT, verifier_log TEXT, cost INTEGER,"
    " n_insns INTEGER, prog_gen INTEGER, payload BLOB, escalation_id INTEGER,"
    " request_id INTEGER, request_hash INTEGER);\n"
    "CREATE INDEX IF NOT EXISTS commands_pending ON commands(job, rank, sent_ns);\n"
    /* whether any command waits at all, asked once per ingest batch */
    "CREATE INDEX IF NOT EXISTS commands_unsent ON commands(id) WHERE sent_ns IS NULL;\n"
    /* Probes (probe_store.c): what was asked, the groups merged across
     * epochs and ranks (key and value words as little-endian u64; the other
     * row's key is empty), per rank and hook the counts, per rank the time
     * it ran. */
    "CREATE TABLE IF NOT EXISTS probes(id INTEGER PRIMARY KEY, job TEXT NOT NULL, text TEXT NOT"
    " NULL, created_ns INTEGER, duration_ns INTEGER, groups INTEGER, max_cost INTEGER,"
    " cost INTEGER, ranks TEXT, n_groups INTEGER DEFAULT 0, overflowed INTEGER DEFAULT 0,"
    " stop_ns INTEGER, request_id INTEGER, request_hash INTEGER);\n"
    "CREATE TABLE IF NOT EXISTS probe_groups(probe_id INTEGER NOT NULL, key BLOB NOT NULL,"
    " words BLOB, PRIMARY KEY(probe_id, key)) WITHOUT ROWID;\n"
    "CREATE TABLE IF NOT EXISTS probe_hooks(probe_id INTEGER NOT NULL, rank INTEGER NOT NULL,"
    " hook INTEGER NOT NULL, eligible INTEGER DEFAULT 0, observed INTEGER DEFAULT 0,"
    " throttled INTEGER DEFAULT 0, lost INTEGER DEFAULT 0, matched INTEGER DEFAULT 0,"
    " unknown INTEGER DEFAULT 0, overflowed INTEGER DEFAULT 0, dropped INTEGER DEFAULT 0,"
    " contended INTEGER DEFAULT 0, PRIMARY KEY(probe_id, rank, hook)) WITHOUT ROWID;\n"
    "CREATE TABLE IF NOT EXISTS probe_runs(probe_id INTEGER NOT NULL, rank INTEGER NOT NULL,"
    " attached_host_ns INTEGER, ran_ns INTEGER DEFAULT 0, epochs INTEGER DEFAULT 0,"
    " results INTEGER DEFAULT 0, first_ns INTEGER, last_ns INTEGER, last INTEGER DEFAULT 0,"
    " ended TEXT, PRIMARY KEY(probe_id, rank)) WITHOUT ROWID;\n"
    /* An epoch's rows go with it, whoever deletes it. */
    "DROP TRIGGER IF EXISTS epochs_delete;\n"
    "CREATE TRIGGER epochs_delete AFTER DELETE ON epochs BEGIN"
    " DELETE FROM task_stats WHERE epoch_id = old.id;"
    /* the job's step aggregates hold no longer for this epoch's steps */
    " UPDATE step_agg_jobs SET cut = MAX(cut, COALESCE((SELECT MAX(step) FROM steps WHERE"
    " epoch_id = old.id), cut)) WHERE job = old.job;"
    " DELETE FROM steps WHERE epoch_id = old.id;"
    " DELETE FROM waits WHERE epoch_id = old.id;"
    " DELETE FROM releases WHERE epoch_id = old.id;"
    " DELETE FROM local_waits WHERE epoch_id = old.id;"
    " DELETE FROM workers WHERE epoch_id = old.id;"
    " DELETE FROM gens WHERE epoch_id = old.id;"
    " DELETE FROM maps WHERE epoch_id = old.id;"
    " DELETE FROM coverage WHERE epoch_id = old.id;"
    " DELETE FROM rollups WHERE epoch_id = old.id;" MKS_ANCHORS_STALE_SQL " END;\n"
    /* an epoch's clocks changed (the roll-up spans its minute): its block's
     * kept anchors no longer hold */
    "DROP TRIGGER IF EXISTS epochs_anchors;\n"
    "CREATE TRIGGER epochs_anchors AFTER UPDATE OF t_begin_host, t_end_host, t_begin_dev,"
    " t_end_dev ON epochs BEGIN" MKS_ANCHORS_STALE_SQL " END;\n"
    /* Views that put job, rank and epoch next to every per-epoch row, with
     * class names resolved from the rank's schema. */
    "CREATE VIEW IF NOT EXISTS v_task AS SELECT e.job, e.rank, e.id AS epoch_id, e.epoch,"
    " e.t_begin_host, e.t_end_host, t.class,"
    " COALESCE(c.name, 'class' || t.class) AS class_name, t.step, t.req_gen, t.count,"
    " t.sum_run_ns, t.queue_count, t.queue_sum, t.queue_max, t.queue_hist, t.run_count,"
    " t.run_sum, t.run_max, t.run_hist FROM task_stats t JOIN epochs e ON e.id = t.epoch_id"
    " LEFT JOIN task_classes c ON c.job = e.job AND c.rank = e.rank AND c.id = t.class;\n"
    "CREATE VIEW IF NOT EXISTS v_steps AS SELECT e.job, e.rank, e.id AS epoch_id, e.epoch,"
    " e.t_begin_host, e.t_end_host, s.step, s.t_begin_dev, s.t_end_dev, s.tasks, s.complete,"
    " s.queued_while_idle_ns, s.cpu_wait_ns, s.cpu_runs FROM steps s JOIN epochs e ON"
    " e.id = s.epoch_id;\n"
    "CREATE VIEW IF NOT EXISTS v_waits AS SELECT e.job, e.rank, e.id AS epoch_id, e.epoch,"
    " e.t_begin_host, e.t_end_host, w.* FROM waits w JOIN epochs e ON e.id = w.epoch_id;\n"
    "CREATE VIEW IF NOT EXISTS v_releases AS SELECT e.job, e.rank, e.id AS epoch_id, e.epoch,"
    " r.* FROM releases r JOIN epochs e ON e.id = r.epoch_id;\n"
    "CREATE VIEW IF NOT EXISTS v_workers AS SELECT e.job, e.rank, e.id AS epoch_id, e.epoch,"
    " w.* FROM workers w JOIN epochs e ON e.id = w.epoch_id;\n"
    "CREATE VIEW IF NOT EXISTS v_coverage AS SELECT e.job, e.rank, e.id AS epoch_id, e.epoch,"
    " c.* FROM coverage c JOIN epochs e ON e.id = c.epoch_id;\n";

/* Columns added since a table was first made: a store written by an older
 * collector gets them here (CREATE TABLE IF NOT EXISTS leaves it as is). */
static const struct {
    const char *table, *column, *decl;
} added_columns[] = {
    {"ranks", "heartbeat_ns", "INTEGER"},
    {"ranks", "lost_cur_sum", "INTEGER DEFAULT 0"},
    {"ranks", "lost_cur_hb", "INTEGER DEFAULT 0"},
    {"triggers", "hold_off_ns", "INTEGER"},
    {"triggers", "last_escalated_ns", "INTEGER"},
    {"triggers", "escalations", "INTEGER DEFAULT 0"},
    {"commands", "escalation_id", "INTEGER"},
    {"coverage", "undelivered", "INTEGER DEFAULT 0"},
    {"ranks", "state_sent_ns", "INTEGER DEFAULT 0"},
    {"commands", "request_id", "INTEGER"},
    {"commands", "request_hash", "INTEGER"},
    {"triggers", "request_id", "INTEGER"},
    {"triggers", "request_hash", "INTEGER"},
    {"epochs", "compacted", "INTEGER DEFAULT 0"},
    {"triggers", "probe", "TEXT"},
    {"triggers", "probe_for_ns", "INTEGER"},
    {"triggers", "probes", "INTEGER DEFAULT 0"},
    {"triggers", "last_probe", "INTEGER"},
    {"triggers", "probe_error", "TEXT"},
    {"ranks", "tasks_total", "INTEGER DEFAULT 0"},
    {"ranks", "cov_eligible", "INTEGER DEFAULT 0"},
    {"ranks", "cov_ran", "INTEGER DEFAULT 0"},
    {"ranks", "cov_throttled", "INTEGER DEFAULT 0"},
    {"ranks", "cov_lost", "INTEGER DEFAULT 0"},
    {"ranks", "cov_undelivered", "INTEGER DEFAULT 0"},
    {"epochs", "step_lo", "INTEGER"},
    {"epochs", "step_hi", "INTEGER"},
    {"ranks", "step_span", "INTEGER DEFAULT 0"},
    /* the workers' wait for a CPU in the step; NULL: not measured (older
     * rows, device backends) */
    {"steps", "cpu_wait_ns", "INTEGER"},
    {"steps", "cpu_runs", "INTEGER"},
    {"steps", "detail_withheld", "INTEGER DEFAULT 0"},
};

/* Values an added column gets from what the store holds, run once it is
 * added: a rank's tasks and coverage, summed at ingest since (status reads
 * them instead of a long job's every epoch), from the rows stored so far. */
static const struct {
    const char *table, *column, *fill;
} column_fills[] = {
    {"ranks", "cov_undelivered",
     "UPDATE ranks SET tasks_total = (SELECT CAST(TOTAL(t.count) AS INTEGER) FROM task_stats t"
     " JOIN epochs e ON e.id = t.epoch_id WHERE e.job = ranks.job AND e.rank = ranks.rank),"
     " (cov_eligible, cov_ran, cov_throttled, cov_lost, cov_undelivered) = (SELECT"
     " CAST(TOTAL(c.eligible) AS INTEGER), CAST(TOTAL(c.ran) AS INTEGER),"
     " CAST(TOTAL(c.throttled) AS INTEGER), CAST(TOTAL(c.lost) AS INTEGER),"
     " CAST(TOTAL(c.undelivered) AS INTEGER) FROM coverage c JOIN epochs e ON"
     " e.id = c.epoch_id WHERE e.job = ranks.job AND e.rank = ranks.rank)"},
    /* the step range of each epoch's step rows, and the widest per rank;
     * the index on steps.step it replaces goes (see epochs_step) */
    {"epochs", "step_hi",
     "UPDATE epochs SET (step_lo, step_hi) = (SELECT MIN(step), MAX(step) FROM steps WHERE"
     " epoch_id = epochs.id)"},
    {"ranks", "step_span",
     "UPDATE ranks SET step_span = (SELECT COALESCE(MAX(step_hi - step_lo), 0) FROM epochs"
     " WHERE job = ranks.job AND rank = ranks.rank); DROP INDEX IF EXISTS steps_step"},
};

static int add_missing_columns(sqlite3 *db, char *err, size_t errlen)
{
    for (size_t i = 0; i < sizeof(added_columns) / sizeof(added_columns[0]); i++) {
        char sql[256];
        sqlite3_stmt *s;
        snprintf(sql, sizeof(sql), "SELECT 1 FROM pragma_table_info('%s') WHERE name = '%s'",
                 added_columns[i].table, added_columns[i].column);
        if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) != SQLITE_OK)
            return fail(err, errlen, -EIO, "store: schema: %s", sqlite3_errmsg(db));
        int have = sqlite3_step(s) == SQLITE_ROW;
        sqlite3_finalize(s);
        if (have)
            continue;
        snprintf(sql, sizeof(sql), "ALTER TABLE %s ADD COLUMN %s %s", added_columns[i].table,
                 added_columns[i].column, added_columns[i].decl);
        if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK)
            return fail(err, errlen, -EIO, "store: schema: %s", sqlite3_errmsg(db));
        for (size_t k = 0; k < sizeof(column_fills) / sizeof(column_fills[0]); k++)
            if (!strcmp(column_fills[k].table, added_columns[i].table) &&
                !strcmp(column_fills[k].column, added_columns[i].column) &&
                sqlite3_exec(db, column_fills[k].fill, NULL, NULL, NULL) != SQLITE_OK)
                return fail(err, errlen, -EIO, "store: schema: %s", sqlite3_errmsg(db));
    }
    return 0;
}

/* ---- background checkpoints ------------------------------------------------ */

/* WAL pages after which the writer wakes the checkpointer (16 MiB). */
#define CKPT_PAGES 4096
/* WAL pages after which the writer checkpoints what is left itself (64
 * MiB): under steady ingest the thread's passes never catch up with the
 * last frame, and only a pass that does lets the next commit start the WAL
 * over; without this the WAL grew to 730 MiB in 20 s.  The thread has
 * copied most of it by then, so little is left for the writer. */
#define CKPT_WRITER_PAGES 16384
/* The checkpointer also runs at least this often. */
#define CKPT_PERIOD_NS 1000000000ull

struct checkpointer {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    sqlite3 *db;   /* its own connection */
    int due, stop;
};

/* The writer's commit hook: the WAL holds `pages`; wake the checkpointer
 * once it is worth a pass (the hook runs in the writer's thread, so it only
 * signals), or checkpoint the rest here once the WAL is large. */
static int wal_hook(void *arg, sqlite3 *db, const char *name, int pages)
{
    struct checkpointer *c = arg;
    if (pages >= CKPT_WRITER_PAGES) {
        sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
        return SQLITE_OK;
    }
    if (pages >= CKPT_PAGES) {
        pthread_mutex_lock(&c->mu);
        if (!c->due) {
            c->due = 1;
            pthread_cond_signal(&c->cv);
        }
        pthread_mutex_unlock(&c->mu);
    }
    return SQLITE_OK;
}

static void *checkpoint_main(void *arg)
{
    struct checkpointer *c = arg;
    pthread_mutex_lock(&c->mu);
    while (!c->stop) {
        if (!c->due) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            uint64_t t = (uint64_t)ts.tv_nsec + CKPT_PERIOD_NS;
            ts.tv_sec += (time_t)(t / 1000000000ull);
            ts.tv_nsec = (long)(t % 1000000000ull);
            pthread_cond_timedwait(&c->cv, &c->mu, &ts);
            if (c->stop)
                break;
        }
        c->due = 0;
        pthread_mutex_unlock(&c->mu);
        /* PASSIVE copies what no reader still needs and waits for no one;
         * the writer starts the WAL over once a pass got through all of it. */
        sqlite3_wal_checkpoint_v2(c->db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
        pthread_mutex_lock(&c->mu);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

static int checkpointer_start(struct mks_store *st, const char *path)
{
    struct checkpointer *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    /* the thread takes no signal: they are the opener's (a daemon reads
     * SIGTERM from a signalfd; unblocked here it would kill the process) */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int started = sqlite3_open_v2(path, &c->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX,
                                  NULL) == SQLITE_OK &&
                  pthread_create(&c->thread, NULL, checkpoint_main, c) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!started) {
        sqlite3_close(c->db);
        pthread_cond_destroy(&c->cv);
        pthread_mutex_destroy(&c->mu);
        free(c);
        return -EIO;
    }
    sqlite3_busy_timeout(c->db, 1000);
    /* a connection finds the file in WAL mode when it first reads it: only
     * then can it checkpoint */
    sqlite3_exec(c->db, "SELECT COUNT(*) FROM sqlite_master", NULL, NULL, NULL);
    st->ckpt = c;
    sqlite3_wal_autocheckpoint(st->db, 0);
    sqlite3_wal_hook(st->db, wal_hook, c);
    return 0;
}

static void checkpointer_stop(struct mks_store *st)
{
    struct checkpointer *c = st->ckpt;
    if (!c)
        return;
    sqlite3_wal_hook(st->db, NULL, NULL);
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->thread, NULL);
    sqlite3_close(c->db);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c);
    st->ckpt = NULL;
}

static int db_fail(struct mks_store *st, char *err, size_t errlen, const char *what)
{
    return fail(err, errlen, -EIO, "store: %s: %s", what, sqlite3_errmsg(st->db));
}

int mks_store_open(const struct mks_store_opts *opts, struct mks_store **st_p, char *err,
                   size_t errlen)
{
    if (!opts || !st_p || !opts->path)
        return fail(err, errlen, -EINVAL, "store: no database path");
    if (opts->sz < sizeof(size_t) || opts->sz > sizeof(struct mks_store_opts))
        return fail(err, errlen, -EINVAL, "store: options of unknown size %zu", opts->sz);
    struct mks_store_opts o = {0};
    memcpy(&o, opts, opts->sz);
    struct mks_store *st = calloc(1, sizeof(*st));
    if (!st)
        return fail(err, errlen, -ENOMEM, "store: out of memory");
    st->max_epochs = o.max_epochs;
    st->max_age_ns = o.max_age_ns;
    st->max_bytes = o.max_bytes;
    st->detail_age_ns = o.detail_age_ns;
    st->max_raw_events = o.max_raw_events ? o.max_raw_events : DEFAULT_MAX_RAW_EVENTS;
    int flags = o.read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
    int rc = sqlite3_open_v2(o.path, &st->db, flags | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        fail(err, errlen, -EIO, "store: cannot open %s: %s", o.path,
             st->db ? sqlite3_errmsg(st->db) : sqlite3_errstr(rc));
        mks_store_close(st);
        return -EIO;
    }
    sqlite3_busy_timeout(st->db, 2000);
    char *msg = NULL;
    if (o.read_only) {
        /* A reader of the writer's WAL file: query_only refuses writes even
         * where the file's permissions would allow them. */
        if (sqlite3_exec(st->db, "PRAGMA query_only = ON;", NULL, NULL, &msg) != SQLITE_OK) {
            fail(err, errlen, -EIO, "store: %s: %s", o.path, msg ? msg : "?");
            sqlite3_free(msg);
            mks_store_close(st);
            return -EIO;
        }
        *st_p = st;
        return 0;
    }
    /* WAL lets readers (raw SQL from the CLI, another process inspecting the
     * file) proceed while the collector writes; the WAL file is cut back to
     * 64 MiB after a checkpoint, so the size bound holds for it too. */
    if (strcmp(o.path, ":memory:") &&
        sqlite3_exec(st->db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
                     " PRAGMA journal_size_limit=67108864;", NULL, NULL,
                     &msg) != SQLITE_OK) {
        fail(err, errlen, -EIO, "store: %s: cannot enable WAL: %s", o.path, msg ? msg : "?");
        sqlite3_free(msg);
        mks_store_close(st);
        return -EIO;
    }
    /* Checkpoints every 32 MiB of WAL write a page rewritten many times over
     * once (with checkpoint_thread, that thread checkpoints every 16 MiB
     * instead).  The page cache stays at SQLite's 2 MiB: a 64 MiB one made
     * every commit scan it (SQLite 3.40 truncates the cache to the database
     * size at each commit, bucket by bucket), a quarter of ingest. */
    /* A store made before the step aggregates: its jobs are filled from
     * their rows (mks_store_idle), read from the rows until then. */
    sqlite3_stmt *q;
    bool had_aggs = false;
    if (sqlite3_prepare_v2(st->db, "SELECT 1 FROM sqlite_master WHERE name = 'step_agg_jobs'", -1,
                           &q, NULL) == SQLITE_OK) {
        had_aggs = sqlite3_step(q) == SQLITE_ROW;
        sqlite3_finalize(q);
    }
    if (sqlite3_exec(st->db,
                     "PRAGMA wal_autocheckpoint = 8192; PRAGMA journal_size_limit = 67108864;",
                     NULL, NULL, NULL) != SQLITE_OK ||
        sqlite3_exec(st->db, mks_stepagg_schema, NULL, NULL, &msg) != SQLITE_OK ||
        sqlite3_exec(st->db, mks_anchors_schema, NULL, NULL, &msg) != SQLITE_OK ||
        sqlite3_exec(st->db, schema_sql, NULL, NULL, &msg) != SQLITE_OK ||
        (!had_aggs && sqlite3_exec(st->db,
                                   "INSERT OR IGNORE INTO step_agg_jobs(job, cut) SELECT DISTINCT"
                                   " job, 9223372036854775807 FROM epochs",
                                   NULL, NULL, &msg) != SQLITE_OK)) {
        fail(err, errlen, -EIO, "store: %s: schema: %s", o.path, msg ? msg : "?");
        sqlite3_free(msg);
        mks_store_close(st);
        return -EIO;
    }
    /* Age retention and the roll-up find old epochs by this index; with no
     * retention at all no summary pays for keeping it. */
    if ((st->max_age_ns || st->detail_age_ns || st->max_bytes) &&
        sqlite3_exec(st->db, "CREATE INDEX IF NOT EXISTS epochs_received ON epochs(received_ns)",
                     NULL, NULL, NULL) != SQLITE_OK) {
        fail(err, errlen, -EIO, "store: %s: %s", o.path, sqlite3_errmsg(st->db));
        mks_store_close(st);
        return -EIO;
    }
    if (add_missing_columns(st->db, err, errlen)) {
        mks_store_close(st);
        return -EIO;
    }
    /* The rolled-up epochs of a job (queries and the diagnosis say what
     * detail is gone), and the roll-up's scratch map of epoch to the epoch
     * it folds into; the roll-up's SQL functions (histogram merges).  The
     * epochs of a range of steps (diagnose --last N, --steps A-B) are found
     * by their steps' range, whatever the job's length: one entry an epoch,
     * near the index's end, where an index on steps.step took one an epoch's
     * step at a place in the middle of the index (a quarter of ingest). */
    if (sqlite3_exec(st->db,
                     "CREATE INDEX IF NOT EXISTS epochs_step ON epochs(job, step_hi);"
                     /* a rank's earlier epochs meeting a summary's steps
                      * (the step aggregates' merge, step_aggs.c); a summary
                      * without steps (counts only) has no entry */
                     " CREATE INDEX IF NOT EXISTS epochs_rank_step ON epochs(job, rank, step_hi)"
                     " WHERE step_hi IS NOT NULL;"
                     " CREATE INDEX IF NOT EXISTS epochs_rolled ON epochs(job, id) WHERE"
                     " compacted = 2; CREATE TEMP TABLE IF NOT EXISTS roll_map(id INTEGER PRIMARY"
                     " KEY, keep INTEGER NOT NULL);",
                     NULL, NULL, NULL) != SQLITE_OK ||
        mks_query_register_sql(st->db)) {
        fail(err, errlen, -EIO, "store: %s: %s", o.path, sqlite3_errmsg(st->db));
        mks_store_close(st);
        return -EIO;
    }
    if (o.checkpoint_thread && strcmp(o.path, ":memory:") && checkpointer_start(st, o.path)) {
        fail(err, errlen, -EIO, "store: %s: cannot start the checkpoint thread", o.path);
        mks_store_close(st);
        return -EIO;
    }
    st->fill_due = true;
    *st_p = st;
    return 0;
}

void mks_store_close(struct mks_store *st)
{
    if (!st)
        return;
    if (st->in_batch)
        sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
    checkpointer_stop(st);
    for (unsigned i = 0; i < STMT_SLOTS; i++)
        sqlite3_finalize(st->stmts[i].s);
    for (unsigned t = 0; t < T_COUNT; t++) {
        for (unsigned k = 0; k < INS_CHUNKS; k++)
            sqlite3_finalize(st->chunks[t][k]);
        free(st->rows[t].cells);
    }
    free(st->arena);
    free(st->trims);
    mks_stepagg_free(&st->agg);
    mks_anchors_free(&st->anc);
    sqlite3_close_v2(st->db);
    free(st);
}

sqlite3 *mks_store_db(struct mks_store *st)
{
    return st ? st->db : NULL;
}

/* ---- statement helpers --------------------------------------------------- */

/* Bind a list of values: "i" int64, "u" uint64 (stored two's complement),
 * "t" text, "b" blob (pointer, length), "n" NULL.  Binding can only fail on a
 * programming error (wrong index), which the step then reports. */
static void bindv_at(sqlite3_stmt *s, int idx, const char *fmt, va_list ap)
{
    for (const char *f = fmt; *f; f++, idx++) {
        switch (*f) {
        case 'i': sqlite3_bind_int64(s, idx, va_arg(ap, int64_t)); break;
        case 'u': sqlite3_bind_int64(s, idx, (int64_t)va_arg(ap, uint64_t)); break;
        case 't': sqlite3_bind_text(s, idx, va_arg(ap, const char *), -1, SQLITE_TRANSIENT); break;
        case 'b': {
            const void *p = va_arg(ap, const void *);
            int n = va_arg(ap, int);
            sqlite3_bind_blob(s, idx, p, n, SQLITE_TRANSIENT);
            break;
        }
        case 'n': sqlite3_bind_null(s, idx); break;
        }
    }
}

/* The kept statement of sql (a literal: its address is the key), prepared
 * on first use, reset and unbound; NULL with the error in the connection
 * when it cannot be prepared. */
static sqlite3_stmt *stmt(struct mks_store *st, const char *sql)
{
    unsigned h = (unsigned)(((uintptr_t)sql >> 3) * 2654435761u) % STMT_SLOTS;
    for (unsigned i = 0; i < STMT_SLOTS; i++, h = (h + 1) % STMT_SLOTS) {
        struct stmt_slot *sl = &st->stmts[h];
        if (sl->sql == sql) {
            sqlite3_reset(sl->s);
            sqlite3_clear_bindings(sl->s);
            return sl->s;
        }
        if (!sl->sql) {
            if (sqlite3_prepare_v3(st->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &sl->s, NULL) !=
                SQLITE_OK)
                return NULL;
            sl->sql = sql;
            return sl->s;
        }
    }
    return NULL; /* more statements than slots: a programming error */
}

/* The kept statement of sql with the values fmt describes bound. */
static int prep_bound(struct mks_store *st, sqlite3_stmt **s, const char *sql, const char *fmt,
                      va_list ap)
{
    *s = stmt(st, sql);
    if (!*s)
        return sqlite3_errcode(st->db) != SQLITE_OK ? sqlite3_errcode(st->db) : SQLITE_ERROR;
    bindv_at(*s, 1, fmt, ap);
    return SQLITE_OK;
}

/* Run one statement with bound values; returns SQLite's result code. */
static int exec_stmt(struct mks_store *st, const char *sql, const char *fmt, ...)
{
    sqlite3_stmt *s;
    va_list ap;
    va_start(ap, fmt);
    int rc = prep_bound(st, &s, sql, fmt, ap);
    va_end(ap);
    if (rc != SQLITE_OK)
        return rc;
    rc = sqlite3_step(s);
    sqlite3_reset(s);
    return rc == SQLITE_ROW ? SQLITE_DONE : rc;
}

static int query_u64(struct mks_store *st, uint64_t *out, const char *sql, const char *fmt, ...)
{
    sqlite3_stmt *s;
    va_list ap;
    va_start(ap, fmt);
    int rc = prep_bound(st, &s, sql, fmt, ap);
    va_end(ap);
    if (rc != SQLITE_OK)
        return rc;
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        *out = (uint64_t)sqlite3_column_int64(s, 0);
        rc = SQLITE_DONE;
    } else if (rc == SQLITE_DONE) {
        *out = 0;
    }
    sqlite3_reset(s);
    return rc;
}

/* Rows of the per-epoch tables are buffered (values copied) and written by
 * multi-row INSERT ... VALUES (...), (...) statements when the message ends
 * or, inside a batch, when the batch commits: a statement's own cost (about
 * 2.5 us here) is then paid once per 64 rows instead of once per row or per
 * summary's few rows, and a row costs about half of a one-row insert (0.45
 * against 1.04 us a row of `steps` with its index, this machine).  A
 * message that fails drops what it buffered (buf_mark / buf_truncate). */
static const unsigned chunk_rows[INS_CHUNKS] = {64, 16, 4, 1};
static const struct {
    const char *head;
    int cols;
} ins_tables[T_COUNT] = {
    [T_TASK] = {"INSERT INTO task_stats VALUES", 14},
    [T_STEPS] = {"INSERT INTO steps VALUES", 10},
    [T_WAITS] = {"INSERT INTO waits VALUES", 9},
    [T_RELEASES] = {"INSERT INTO releases VALUES", 13},
    [T_LOCAL_WAITS] = {"INSERT INTO local_waits VALUES", 6},
    [T_WORKERS] = {"INSERT INTO workers VALUES", 9},
    [T_GENS] = {"INSERT INTO gens VALUES", 5},
    [T_MAPS] = {"INSERT INTO maps VALUES", 6},
    [T_COVERAGE] = {"INSERT INTO coverage VALUES", 8},
    [T_RAW] = {"INSERT INTO raw_events(job, rank, escalation_id, event, flags, worker, sm, class,"
               " task_gen, req_gen, step, dep_class, tile_x, tile_y, dep_event, comm_gen,"
               " peer_rank, queue_depth, t_now, t_ready, t_start, value, received_ns) VALUES",
               23},
};

/* The kept statement inserting chunk_rows[k] rows into table t. */
static sqlite3_stmt *chunk_stmt(struct mks_store *st, enum ins_table t, int k)
{
    if (st->chunks[t][k])
        return st->chunks[t][k];
    unsigned rows = chunk_rows[k];
    int cols = ins_tables[t].cols;
    size_t len = strlen(ins_tables[t].head) + (size_t)rows * (3 + 2 * (size_t)cols) + 1;
    char *sql = malloc(len), *p = sql;
    if (!sql)
        return NULL;
    p += sprintf(p, "%s", ins_tables[t].head);
    for (unsigned r = 0; r < rows; r++) {
        *p++ = r ? ',' : ' ';
        *p++ = '(';
        for (int c = 0; c < cols; c++) {
            if (c)
                *p++ = ',';
            *p++ = '?';
        }
        *p++ = ')';
    }
    *p = 0;
    if (sqlite3_prepare_v3(st->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st->chunks[t][k], NULL) !=
        SQLITE_OK)
        st->chunks[t][k] = NULL;
    free(sql);
    return st->chunks[t][k];
}

/* Make room for `more` cells in table t's buffer and `bytes` in the arena. */
static int buf_reserve(struct mks_store *st, enum ins_table t, size_t more, size_t bytes)
{
    struct rowbuf *rb = &st->rows[t];
    if (rb->n + more > rb->cap) {
        size_t cap = rb->cap ? rb->cap : 1024;
        while (cap < rb->n + more)
            cap *= 2;
        struct cell *c = realloc(rb->cells, cap * sizeof(*c));
        if (!c)
            return -ENOMEM;
        rb->cells = c;
        rb->cap = cap;
    }
    if (st->arena_len + bytes > st->arena_cap) {
        size_t cap = st->arena_cap ? st->arena_cap : 65536;
        while (cap < st->arena_len + bytes)
            cap *= 2;
        char *a = realloc(st->arena, cap);
        if (!a)
            return -ENOMEM;
        st->arena = a;
        st->arena_cap = cap;
    }
    return 0;
}

/* The rows of one table of one message. */
struct ins {
    struct mks_store *st;
    enum ins_table t;
};

static int ins_begin(struct mks_store *st, struct ins *in, enum ins_table t, size_t rows)
{
    *in = (struct ins){.st = st, .t = t};
    return buf_reserve(st, t, rows * (size_t)ins_tables[t].cols, 0) ? SQLITE_NOMEM : SQLITE_OK;
}

/* Buffer one row: the values fmt describes, as bindv_at takes them (fmt
 * has one letter per column of the table). */
static int ins_row(struct ins *in, const char *fmt, ...)
{
    struct mks_store *st = in->st;
    size_t cols = (size_t)ins_tables[in->t].cols;
    if (buf_reserve(st, in->t, cols, 0))
        return SQLITE_NOMEM;
    struct rowbuf *rb = &st->rows[in->t];
    struct cell *c = rb->cells + rb->n;
    va_list ap;
    va_start(ap, fmt);
    size_t k = 0;
    for (; k < cols && fmt[k]; k++) {
        c[k].type = (uint8_t)fmt[k];
        c[k].n = 0;
        switch (fmt[k]) {
        case 'i': c[k].i = va_arg(ap, int64_t); break;
        case 'u': c[k].i = (int64_t)va_arg(ap, uint64_t); break;
        case 't':
        case 'b': {
            const void *p = va_arg(ap, const void *);
            size_t n = fmt[k] == 'b' ? (size_t)va_arg(ap, int) : p ? strlen(p) : 0;
            if (fmt[k] == 't' && !p)
                c[k].type = 'n';
            if (buf_reserve(st, in->t, 0, n)) {
                va_end(ap);
                return SQLITE_NOMEM;
            }
            if (n)
                memcpy(st->arena + st->arena_len, p, n);
            c[k].i = (int64_t)st->arena_len;
            c[k].n = (int)n;
            st->arena_len += n;
            break;
        }
        default: c[k].i = 0; break;
        }
    }
    va_end(ap);
    if (k != cols || fmt[k])
        return SQLITE_MISUSE; /* fmt and table disagree: a bug here */
    rb->n += cols;
    return SQLITE_OK;
}

static void buf_mark(struct mks_store *st)
{
    for (int t = 0; t < T_COUNT; t++)
        st->rows[t].mark = st->rows[t].n;
    st->arena_mark = st->arena_len;
    st->trims_mark = st->n_trims;
    mks_stepagg_mark(&st->agg);
    mks_anchors_mark(&st->anc);
    st->raw_since_mark = st->raw_since_trim;
}

static void buf_truncate(struct mks_store *st)
{
    for (int t = 0; t < T_COUNT; t++)
        st->rows[t].n = st->rows[t].mark;
    st->arena_len = st->arena_mark;
    st->n_trims = st->trims_mark;
    mks_stepagg_truncate(&st->agg);
    mks_anchors_truncate(&st->anc);
    st->raw_since_trim = st->raw_since_mark;
}

static void bind_cell(sqlite3_stmt *s, int idx, const struct mks_store *st, const struct cell *c)
{
    switch (c->type) {
    case 'i':
    case 'u': sqlite3_bind_int64(s, idx, c->i); break;
    /* An empty value is an empty text or blob, never NULL (the arena
     * may not exist yet, and SQLite binds a NULL pointer as NULL). */
    case 't': sqlite3_bind_text(s, idx, c->n ? st->arena + c->i : "", c->n, SQLITE_STATIC); break;
    case 'b':
        if (c->n)
            sqlite3_bind_blob(s, idx, st->arena + c->i, c->n, SQLITE_STATIC);
        else
            sqlite3_bind_zeroblob(s, idx, 0);
        break;
    default: sqlite3_bind_null(s, idx); break;
    }
}

/* Write every buffered row, then the retention the messages asked for
 * (after the rows: a rank's oldest epochs may have rows in the buffer).
 * SQLite's result code. */
static int buf_flush(struct mks_store *st, uint64_t now)
{
    int rc = SQLITE_OK;
    for (int t = 0; t < T_COUNT && rc == SQLITE_OK; t++) {
        struct rowbuf *rb = &st->rows[t];
        size_t cols = (size_t)ins_tables[t].cols, rows = rb->n / cols, done = 0;
        while (done < rows && rc == SQLITE_OK) {
            int k = 0;
            while (chunk_rows[k] > rows - done)
                k++;
            sqlite3_stmt *s = chunk_stmt(st, (enum ins_table)t, k);
            if (!s) {
                rc = SQLITE_ERROR;
                break;
            }
            size_t n = chunk_rows[k] * cols;
            const struct cell *c = rb->cells + done * cols;
            for (size_t i = 0; i < n; i++)
                bind_cell(s, (int)i + 1, st, &c[i]);
            rc = sqlite3_step(s);
            sqlite3_reset(s);
            rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
            done += chunk_rows[k];
        }
        rb->n = 0;
    }
    st->arena_len = 0;
    /* the step aggregates of the rows just written, in their transaction */
    if (rc == SQLITE_OK)
        rc = mks_stepagg_apply(&st->agg, st->db);
    else
        mks_stepagg_apply(&st->agg, NULL);
    /* and the clock's anchors of the epochs */
    if (rc == SQLITE_OK)
        rc = mks_anchors_apply(&st->anc, st->db);
    else
        mks_anchors_apply(&st->anc, NULL);
    /* retention below may take steps the aggregates hold: refilled */
    sqlite3_int64 changes = sqlite3_total_changes64(st->db);
    for (size_t i = 0; i < st->n_trims && rc == SQLITE_OK && st->max_epochs; i++) {
        const struct trim *tr = &st->trims[i];
        if (exec_stmt(st,
                      "DELETE FROM epochs WHERE job=?1 AND rank=?2 AND id <= (SELECT id FROM epochs"
                      " WHERE job=?1 AND rank=?2 ORDER BY id DESC LIMIT 1 OFFSET ?3)",
                      "tiu", tr->job, (int64_t)tr->rank, st->max_epochs) != SQLITE_DONE)
            rc = SQLITE_ERROR;
    }
    st->n_trims = 0;
    if (rc == SQLITE_OK && st->raw_trim_due && trim_raw(st) != SQLITE_DONE)
        rc = SQLITE_ERROR;
    st->raw_trim_due = 0;
    if (rc == SQLITE_OK && st->max_age_ns && now > st->max_age_ns &&
        now - st->age_checked_ns >= AGE_CHECK_NS) {
        /* At most a chunk a pass (a store opened after a weekend holds days
         * past the age at once), the next pass at once while more are left. */
        if (exec_stmt(st,
                      "DELETE FROM epochs WHERE id IN (SELECT id FROM epochs WHERE received_ns < ?"
                      " ORDER BY received_ns LIMIT ?)",
                      "uu", now - st->max_age_ns, (uint64_t)AGE_CHUNK_EPOCHS) != SQLITE_DONE)
            rc = SQLITE_ERROR;
        else if (sqlite3_changes(st->db) < (int)AGE_CHUNK_EPOCHS)
            st->age_checked_ns = now;
    }
    if (rc == SQLITE_OK && (st->max_bytes || st->detail_age_ns) &&
        (st->roll_behind || now - st->bounds_checked_ns >= AGE_CHECK_NS)) {
        st->bounds_checked_ns = now;
        rc = retain_bounds(st, now);
    }
    st->fill_due |= sqlite3_total_changes64(st->db) != changes;
    return rc;
}

/* Rolls up the epochs with ids in (lo, hi] not rolled up yet: per (job,
 * rank, incarnation, minute received) the lowest epoch id keeps the sums
 * of all (so ids stay in arrival order and triggers, which read epochs
 * from an id on, never see it again), the others go.  Task statistics
 * merge per class, coverage per hook, worker rows per worker, local waits
 * per class, all with no step; complete steps' times and remote waits
 * (per waiter class and peer) become rollups rows; release records, the
 * per-step rows, generation advances and user maps go.  Rows are told
 * from the ones they replace by rowid: those inserted come after mark. */
static int roll_up(struct mks_store *st, int64_t lo, int64_t hi)
{
    static const char *const marks[] = {"SELECT COALESCE(MAX(rowid), 0) FROM task_stats",
                                        "SELECT COALESCE(MAX(rowid), 0) FROM coverage",
                                        "SELECT COALESCE(MAX(rowid), 0) FROM workers",
                                        "SELECT COALESCE(MAX(rowid), 0) FROM local_waits"};
    static const char *const merge[] = {
        "INSERT INTO task_stats(epoch_id, class, step, req_gen, count, sum_run_ns, queue_count,"
        " queue_sum, queue_max, queue_hist, run_count, run_sum, run_max, run_hist) SELECT m.keep,"
        " t.class, NULL, NULL, SUM(t.count), SUM(t.sum_run_ns), SUM(t.queue_count),"
        " SUM(t.queue_sum), MAX(t.queue_max), mks_hist_merge(t.queue_hist), SUM(t.run_count),"
        " SUM(t.run_sum), MAX(t.run_max), mks_hist_merge(t.run_hist) FROM task_stats t JOIN"
        " roll_map m ON m.id = t.epoch_id GROUP BY m.keep, t.class",
        "INSERT INTO coverage(epoch_id, hook, eligible, ran, throttled, lost, prog_gen,"
        " undelivered) SELECT m.keep, c.hook, SUM(c.eligible), SUM(c.ran), SUM(c.throttled),"
        " SUM(c.lost), MAX(c.prog_gen), SUM(c.undelivered) FROM coverage c JOIN roll_map m ON"
        " m.id = c.epoch_id GROUP BY m.keep, c.hook",
        "INSERT INTO workers(epoch_id, worker, step, busy_ns, idle_ns, dep_wait_ns,"
        " max_queue_depth, over_threshold_ns, tasks) SELECT m.keep, w.worker, NULL,"
        " SUM(w.busy_ns), SUM(w.idle_ns), SUM(w.dep_wait_ns), MAX(w.max_queue_depth),"
        " SUM(w.over_threshold_ns), SUM(w.tasks) FROM workers w JOIN roll_map m ON"
        " m.id = w.epoch_id GROUP BY m.keep, w.worker",
        "INSERT INTO local_waits(epoch_id, class, step, count, sum_ns, max_ns) SELECT m.keep,"
        " l.class, NULL, SUM(l.count), SUM(l.sum_ns), MAX(l.max_ns) FROM local_waits l JOIN"
        " roll_map m ON m.id = l.epoch_id GROUP BY m.keep, l.class"};
    static const char *const drop[] = {
        "DELETE FROM task_stats WHERE epoch_id IN (SELECT id FROM roll_map) AND rowid <= ?",
        "DELETE FROM coverage WHERE epoch_id IN (SELECT id FROM roll_map) AND rowid <= ?",
        "DELETE FROM workers WHERE epoch_id IN (SELECT id FROM roll_map) AND rowid <= ?",
        "DELETE FROM local_waits WHERE epoch_id IN (SELECT id FROM roll_map) AND rowid <= ?"};
    static const char *const after[] = {
        /* a step's time in the epoch that saw it end (complete); its
         * number from every epoch that reported it */
        "INSERT INTO rollups(epoch_id, kind, step_lo, step_hi, count, sum_ns, min_ns, max_ns,"
        " hist) SELECT m.keep, 0, MIN(s.step), MAX(s.step), COUNT(s.d), SUM(s.d), MIN(s.d),"
        " MAX(s.d), mks_hist_of(s.d) FROM (SELECT epoch_id, step, CASE WHEN complete AND"
        " t_begin_dev > 0 AND t_end_dev >= t_begin_dev THEN t_end_dev - t_begin_dev END AS d"
        " FROM steps WHERE epoch_id IN (SELECT id FROM roll_map)) s JOIN roll_map m ON"
        " m.id = s.epoch_id GROUP BY m.keep",
        "INSERT INTO rollups(epoch_id, kind, class, peer_rank, step_lo, step_hi, count, sum_ns,"
        " min_ns, max_ns, hist) SELECT m.keep, 1, w.waiter_class, w.peer_rank, MIN(w.step),"
        " MAX(w.step), COUNT(*), SUM(w.d), MIN(w.d), MAX(w.d), mks_hist_of(w.d) FROM (SELECT"
        " epoch_id, waiter_class, peer_rank, step, t_end_dev - t_begin_dev AS d FROM waits WHERE"
        " epoch_id IN (SELECT id FROM roll_map) AND t_begin_dev > 0 AND t_end_dev >="
        " t_begin_dev) w JOIN roll_map m ON m.id = w.epoch_id GROUP BY m.keep, w.waiter_class,"
        " w.peer_rank",
        "INSERT INTO rolled_seqs(job, rank, incarnation, seq_hi) SELECT job, rank, incarnation,"
        " MAX(seq) FROM epochs WHERE id IN (SELECT id FROM roll_map) GROUP BY job, rank,"
        " incarnation ON CONFLICT(job, rank, incarnation) DO UPDATE SET seq_hi ="
        " MAX(seq_hi, excluded.seq_hi)",
        /* the step aggregates hold no longer for the rolled steps */
        "UPDATE step_agg_jobs SET cut = MAX(cut, x.hi) FROM (SELECT e.job AS job,"
        " MAX(e.step_hi) AS hi FROM roll_map m JOIN epochs e ON e.id = m.id WHERE e.step_hi IS"
        " NOT NULL GROUP BY e.job) AS x WHERE step_agg_jobs.job = x.job",
        "DELETE FROM steps WHERE epoch_id IN (SELECT id FROM roll_map)",
        "DELETE FROM waits WHERE epoch_id IN (SELECT id FROM roll_map)",
        "DELETE FROM releases WHERE epoch_id IN (SELECT id FROM roll_map)",
        "DELETE FROM gens WHERE epoch_id IN (SELECT id FROM roll_map)",
        "DELETE FROM maps WHERE epoch_id IN (SELECT id FROM roll_map)",
        /* the kept epoch spans its minute: times, losses and tiers of all */
        "UPDATE epochs SET (t_begin_host, t_end_host, t_begin_dev, t_end_dev, lost_summaries,"
        " waits_dropped, received_ns, detail_tier, sample_shift, compacted) = (SELECT"
        " MIN(x.t_begin_host), MAX(x.t_end_host), MIN(x.t_begin_dev), MAX(x.t_end_dev),"
        " SUM(x.lost_summaries), SUM(x.waits_dropped), MAX(x.received_ns), MIN(x.detail_tier),"
        " MAX(x.sample_shift), 2 FROM epochs x JOIN roll_map m ON m.id = x.id WHERE"
        " m.keep = epochs.id), step_lo = NULL, step_hi = NULL WHERE id IN (SELECT keep FROM"
        " roll_map)",
        "DELETE FROM epochs WHERE id IN (SELECT id FROM roll_map WHERE id != keep)",
        "DELETE FROM roll_map"};
    if (exec_stmt(st, "DELETE FROM roll_map", "") != SQLITE_DONE ||
        exec_stmt(st,
                  "INSERT INTO roll_map(id, keep) SELECT id, MIN(id) OVER (PARTITION BY job, rank,"
                  " incarnation, received_ns / ?3) FROM epochs WHERE id > ?1 AND id <= ?2 AND"
                  " compacted < 2",
                  "iiu", lo, hi, ROLL_NS) != SQLITE_DONE)
        return SQLITE_ERROR;
    for (size_t i = 0; i < sizeof(merge) / sizeof(merge[0]); i++) {
        uint64_t mark;
        if (query_u64(st, &mark, marks[i], "") != SQLITE_DONE ||
            exec_stmt(st, merge[i], "") != SQLITE_DONE ||
            exec_stmt(st, drop[i], "u", mark) != SQLITE_DONE)
            return SQLITE_ERROR;
    }
    for (size_t i = 0; i < sizeof(after) / sizeof(after[0]); i++)
        if (exec_stmt(st, after[i], "") != SQLITE_DONE)
            return SQLITE_ERROR;
    return SQLITE_OK;
}

/* The store's bytes in pages in use (not free), as this connection sees
 * them inside its transaction. */
static int pages_used(struct mks_store *st, uint64_t *used)
{
    uint64_t pages, free_pages, page;
    if (query_u64(st, &pages, "PRAGMA page_count", "") != SQLITE_DONE ||
        query_u64(st, &free_pages, "PRAGMA freelist_count", "") != SQLITE_DONE ||
        query_u64(st, &page, "PRAGMA page_size", "") != SQLITE_DONE)
        return SQLITE_ERROR;
    *used = (pages - free_pages) * page;
    return SQLITE_DONE;
}

/* The size bound and the detail window, each pass bounded
 * (SIZE_CHUNK_EPOCHS, ROLL_CHUNK_EPOCHS): epochs received before
 * now - detail_age are rolled up, oldest first; while the pages in use
 * exceed max_bytes, epochs older than a minute are rolled up first, and
 * only once none is left to roll up do the oldest epochs go. */
static int retain_bounds(struct mks_store *st, uint64_t now)
{
    uint64_t v, used = 0;
    st->roll_behind = false;
    if (st->max_bytes && pages_used(st, &used) != SQLITE_DONE)
        return SQLITE_ERROR;
    bool over = st->max_bytes && used > st->max_bytes;
    if ((st->detail_age_ns || over) && now > ROLL_NS) {
        if (!st->compacted_known) {
            if (query_u64(st, &v, "SELECT COALESCE(MAX(id), 0) FROM epochs WHERE compacted", "") !=
                SQLITE_DONE)
                return SQLITE_ERROR;
            st->compacted_to = (int64_t)v, st->compacted_known = true;
        }
        uint64_t age = over ? ROLL_NS : st->detail_age_ns;
        if (!over && age > now)
            age = now;
        /* The newest epoch received before the cut, down the receive-time
         * index (MAX(id) over the range read every rolled-up epoch of the
         * day each second). */
        if (query_u64(st, &v,
                      "SELECT COALESCE((SELECT id FROM epochs WHERE received_ns < ? ORDER BY"
                      " received_ns DESC LIMIT 1), 0)",
                      "u", now - age) != SQLITE_DONE)
            return SQLITE_ERROR;
        int64_t cutoff = (int64_t)v;
        if (cutoff > st->compacted_to + (int64_t)ROLL_CHUNK_EPOCHS) {
            cutoff = st->compacted_to + (int64_t)ROLL_CHUNK_EPOCHS;
            st->roll_behind = true;
        }
        if (cutoff > st->compacted_to) {
            if (roll_up(st, st->compacted_to, cutoff) != SQLITE_OK)
                return SQLITE_ERROR;
            st->compacted_to = cutoff;
            /* Epochs go only once what is left to roll up is rolled up
             * and the store is still over its bound. */
            if (over && (st->roll_behind || pages_used(st, &used) != SQLITE_DONE ||
                         used <= st->max_bytes))
                return st->roll_behind || used <= st->max_bytes ? SQLITE_OK : SQLITE_ERROR;
        }
    }
    if (over) {
        /* The share of epochs to go: what is over the bound, plus a
         * twentieth, so that the next passes do not run at once. */
        uint64_t lo, hi;
        if (query_u64(st, &lo, "SELECT COALESCE(MIN(id), 0) FROM epochs", "") != SQLITE_DONE ||
            query_u64(st, &hi, "SELECT COALESCE(MAX(id), 0) FROM epochs", "") != SQLITE_DONE)
            return SQLITE_ERROR;
        double share = (double)(used - st->max_bytes) / (double)used + 0.05;
        uint64_t n = (uint64_t)((double)(hi - lo + 1) * share) + 1;
        if (n > SIZE_CHUNK_EPOCHS)
            n = SIZE_CHUNK_EPOCHS;
        uint64_t oldest_ns;
        if (query_u64(st, &oldest_ns, "SELECT COALESCE(MAX(received_ns), 0) FROM epochs"
                                      " WHERE id < ?",
                      "u", lo + n) != SQLITE_DONE ||
            exec_stmt(st, "DELETE FROM epochs WHERE id < ?", "u", lo + n) != SQLITE_DONE)
            return SQLITE_ERROR;
        /* Said at most once an hour: the bound, not the age, decides
         * what is kept. */
        if (now - st->size_said_ns >= 3600ull * 1000000000ull) {
            st->size_said_ns = now;
            fprintf(stderr,
                    "mkscope-collector: store at its size bound (%.1f GiB of --max-bytes %.1f"
                    " GiB) with every epoch older than a minute rolled up: deleting epochs"
                    " received %.1f h ago and older; raise --max-bytes or lower the agents'"
                    " --budget to keep more (docs/collector.md, Retention)\n",
                    (double)used / (1u << 30), (double)st->max_bytes / (1u << 30),
                    now > oldest_ns ? (double)(now - oldest_ns) / 3.6e12 : 0.0);
        }
    }
    return SQLITE_OK;
}

/* ---- transactions ------------------------------------------------------- */

/* One message's writes: a savepoint, which is a transaction of its own
 * outside a batch and a part of the batch inside one. */
static int txn_begin(struct mks_store *st)
{
    buf_mark(st);
    return exec_stmt(st, "SAVEPOINT msg", "") == SQLITE_DONE ? 0 : -EIO;
}

/* Outside a batch the message's rows are written before its commit. */
static int txn_end(struct mks_store *st, int ok)
{
    if (ok && !st->in_batch && buf_flush(st, st->flush_now) != SQLITE_OK)
        ok = 0;
    if (!ok) {
        buf_truncate(st);
        memset(st->progs_seen, 0, sizeof(st->progs_seen)); /* it may hold what rolls back */
        exec_stmt(st, "ROLLBACK TO msg", "");
        exec_stmt(st, "RELEASE msg", "");
        return -EIO;
    }
    if (exec_stmt(st, "RELEASE msg", "") != SQLITE_DONE) {
        /* the commit of a message outside a batch failed (disk full...) */
        if (!sqlite3_get_autocommit(st->db) && !st->in_batch)
            sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
        return -EIO;
    }
    return 0;
}

/* One pass of the fills of what ingest keeps (the step aggregates, the
 * clock's anchors): 1 while either has more to do, 0, or <0. */
static int fill_pass(sqlite3 *db)
{
    int a = mks_stepagg_fill(db, STEPAGG_FILL_STEPS);
    if (a < 0)
        return a;
    int b = mks_anchors_fill(db, ANCHORS_FILL_EPOCHS);
    return b < 0 ? b : a || b;
}

int mks_store_idle(struct mks_store *st, uint64_t now_ns)
{
    if (!st || st->in_batch)
        return 0;
    /* Only when a pass is due: the check costs no statement otherwise. */
    bool due = st->roll_behind ||
               ((st->max_bytes || st->detail_age_ns) &&
                now_ns - st->bounds_checked_ns >= AGE_CHECK_NS) ||
               (st->max_age_ns && now_ns - st->age_checked_ns >= AGE_CHECK_NS) || st->fill_due;
    if (!due)
        return 0;
    if (sqlite3_exec(st->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
        return -EIO;
    int fill = 0;
    if (buf_flush(st, now_ns) != SQLITE_OK ||
        (st->fill_due && (fill = fill_pass(st->db)) < 0) ||
        sqlite3_exec(st->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
        sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
        return -EIO;
    }
    st->fill_due = fill > 0;
    return 0;
}

int mks_store_fill_steps(struct mks_store *st)
{
    if (!st || st->in_batch)
        return -EINVAL;
    for (int more = 1; more;) {
        if (sqlite3_exec(st->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
            return -EIO;
        more = fill_pass(st->db);
        if (more < 0 || sqlite3_exec(st->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
            sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
            return -EIO;
        }
    }
    st->fill_due = false;
    return 0;
}

int mks_store_batch_begin(struct mks_store *st, char *err, size_t errlen)
{
    if (!st)
        return fail(err, errlen, -EINVAL, "store: no store");
    if (st->in_batch)
        return fail(err, errlen, -EALREADY, "store: a batch is already open");
    if (sqlite3_exec(st->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
        return db_fail(st, err, errlen, "begin batch");
    st->in_batch = 1;
    return 0;
}

int mks_store_batch_commit(struct mks_store *st, char *err, size_t errlen)
{
    if (!st || !st->in_batch)
        return fail(err, errlen, -EINVAL, "store: no batch open");
    st->in_batch = 0;
    if (buf_flush(st, st->flush_now) != SQLITE_OK) {
        memset(st->progs_seen, 0, sizeof(st->progs_seen));
        int rc = db_fail(st, err, errlen, "batch rows");
        sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
        return rc;
    }
    if (sqlite3_exec(st->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
        memset(st->progs_seen, 0, sizeof(st->progs_seen));
        int rc = db_fail(st, err, errlen, "commit batch");
        if (!sqlite3_get_autocommit(st->db))
            sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
        return rc;
    }
    return 0;
}

int mks_store_in_batch(const struct mks_store *st)
{
    return st && st->in_batch;
}

/* ---- ingest ---------------------------------------------------------------- */

/* What the store knows of (job, rank): registered (by a Register, not
 * merely heard of), the registered incarnation and the sender time of the
 * last registration or heartbeat applied. */
struct rank_state {
    bool registered;
    uint64_t incarnation, state_sent_ns;
    uint64_t summaries, acked_seq; /* before this message */
};

static int rank_state(struct mks_store *st, const mks_envelope *env, struct rank_state *rs)
{
    memset(rs, 0, sizeof(*rs));
    sqlite3_stmt *s = stmt(st, "SELECT incarnation, COALESCE(state_sent_ns, 0),"
                               " COALESCE(summaries, 0), COALESCE(acked_seq, 0) FROM ranks WHERE"
                               " job=? AND rank=? AND registered_ns IS NOT NULL");
    if (!s)
        return SQLITE_ERROR;
    sqlite3_bind_text(s, 1, env->job, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(s, 2, env->rank);
    int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        rs->registered = true;
        rs->incarnation = (uint64_t)sqlite3_column_int64(s, 0);
        rs->state_sent_ns = (uint64_t)sqlite3_column_int64(s, 1);
        rs->summaries = (uint64_t)sqlite3_column_int64(s, 2);
        rs->acked_seq = (uint64_t)sqlite3_column_int64(s, 3);
        rc = SQLITE_DONE;
    }
    sqlite3_reset(s);
    return rc;
}

/* A message other than Register comes from a registered rank, and from its
 * registered incarnation or an earlier one (an agent sending what a crashed
 * one spooled): a rank that never registered is no rank, and an
 * incarnation the store has not seen register must do so first. */
static int need_registered(struct mks_store *st, const mks_envelope *env, struct rank_state *rs,
                           char *err, size_t errlen)
{
    if (rank_state(st, env, rs) != SQLITE_DONE)
        return db_fail(st, err, errlen, "rank state");
    if (!rs->registered)
        return fail(err, errlen, -ENOENT,
                    "%s from rank %u of job %s, which has not registered: an agent registers"
                    " before anything else",
                    mks_wire_body_name(env->body_case), env->rank, env->job);
    if (env->incarnation > rs->incarnation)
        return fail(err, errlen, -ENOENT,
                    "%s from incarnation %llu of rank %u of job %s, which has not registered"
                    " (registered: %llu): register first",
                    mks_wire_body_name(env->body_case), (unsigned long long)env->incarnation,
                    env->rank, env->job, (unsigned long long)rs->incarnation);
    return 0;
}

/* Registrations and heartbeats of one incarnation are applied in the order
 * the agent sent them: one older than the last applied is a replay or a
 * delayed copy and would put back a state that is no longer true (a live
 * application marked dead). */
static int older_state(const mks_envelope *env, const struct rank_state *rs, char *err,
                       size_t errlen)
{
    if (env->incarnation == rs->incarnation && env->sent_ns && env->sent_ns < rs->state_sent_ns)
        return fail(err, errlen, -EALREADY,
                    "%s of rank %u of job %s sent %.3f s before the last one applied: ignored",
                    mks_wire_body_name(env->body_case), env->rank, env->job,
                    (double)(rs->state_sent_ns - env->sent_ns) / 1e9);
    return 0;
}

static int touch_rank(struct mks_store *st, const mks_envelope *env, uint64_t now)
{
    return exec_stmt(st, "UPDATE ranks SET last_seen_ns=? WHERE job=? AND rank=?", "uti", now,
                     env->job, (int64_t)env->rank);
}

static int store_register(struct mks_store *st, const mks_envelope *env, uint64_t now,
                          uint64_t *seq_p, char *err, size_t errlen)
{
    const Mkscope__V1__Register *r = env->register_;
    struct rank_state rs;
    if (rank_state(st, env, &rs) != SQLITE_DONE)
        return db_fail(st, err, errlen, "register");
    if (rs.registered && env->incarnation < rs.incarnation)
        return fail(err, errlen, -ESTALE,
                    "register of incarnation %llu of rank %u of job %s: older than the"
                    " registered incarnation %llu (a replayed or delayed registration, or an"
                    " agent whose clock went back)",
                    (unsigned long long)env->incarnation, env->rank, env->job,
                    (unsigned long long)rs.incarnation);
    if (rs.registered && older_state(env, &rs, err, errlen)) {
        /* An older copy of this incarnation's registration: it is
         * registered, and the answer says what is stored, without the
         * copy's state. */
        query_u64(st, seq_p,
                  "SELECT COALESCE(MAX(seq), 0) FROM epochs WHERE job=? AND rank=? AND"
                  " incarnation=?",
                  "tiu", env->job, (int64_t)env->rank, env->incarnation);
        return -EALREADY;
    }
    int rc = exec_stmt(
        st,
        "INSERT INTO ranks(job, rank, n_ranks, host, pid, gpu_uuid, hook_abi, agent_version,"
        " n_workers, epoch_ns, incarnation, app_start_ns, registered_ns, last_seen_ns, app_alive,"
        " heartbeat_ns, state_sent_ns)"
        " VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,1,?,?) ON CONFLICT(job, rank) DO UPDATE SET"
        " heartbeat_ns=excluded.heartbeat_ns,"
        " lost_cur_sum = CASE WHEN incarnation = excluded.incarnation THEN lost_cur_sum ELSE 0 END,"
        " lost_cur_hb = CASE WHEN incarnation = excluded.incarnation THEN lost_cur_hb ELSE 0 END,"
        " n_ranks=excluded.n_ranks, host=excluded.host, pid=excluded.pid,"
        " gpu_uuid=excluded.gpu_uuid, hook_abi=excluded.hook_abi,"
        " agent_version=excluded.agent_version, n_workers=excluded.n_workers,"
        " epoch_ns=excluded.epoch_ns, incarnation=excluded.incarnation,"
        " app_start_ns=excluded.app_start_ns, registered_ns=excluded.registered_ns,"
        " last_seen_ns=excluded.last_seen_ns,"
        /* an agent registering again (a slow ack) for the application it
         * said had ended does not bring that application back */
        " app_alive = CASE WHEN incarnation = excluded.incarnation AND pid = excluded.pid AND"
        " app_start_ns = excluded.app_start_ns THEN app_alive ELSE 1 END,"
        " state_sent_ns=excluded.state_sent_ns",
        "tiitititiuuuuuuu", env->job, (int64_t)env->rank, (int64_t)r->n_ranks, r->host,
        (int64_t)r->pid, r->gpu_uuid, (int64_t)r->hook_abi_version, r->agent_version,
        (int64_t)r->n_workers, r->epoch_ns, env->incarnation, r->app_start_ns, now, now,
        r->heartbeat_ns, env->sent_ns);
    if (rc != SQLITE_DONE)
        return db_fail(st, err, errlen, "register");
    if (r->schema) {
        const Mkscope__V1__TaskSchema *s = r->schema;
        exec_stmt(st, "DELETE FROM task_classes WHERE job=? AND rank=?", "ti", env->job,
                  (int64_t)env->rank);
        exec_stmt(st, "DELETE FROM dep_classes WHERE job=? AND rank=?", "ti", env->job,
                  (int64_t)env->rank);
        exec_stmt(st, "DELETE FROM channels WHERE job=? AND rank=?", "ti", env->job,
                  (int64_t)env->rank);
        for (size_t i = 0; i < s->n_classes; i++) {
            const Mkscope__V1__TaskClass *c = s->classes[i];
            if (exec_stmt(st,
                          "INSERT OR REPLACE INTO task_classes VALUES(?,?,?,?,?,?,?,?)",
                          "tiitttti", env->job, (int64_t)env->rank, (int64_t)c->id, c->name,
                          c->source_op, c->device_fn, c->region_class,
                          (int64_t)c->comm) != SQLITE_DONE)
                return db_fail(st, err, errlen, "task schema");
        }
        for (size_t i = 0; i < s->n_dep_classes; i++) {
            const Mkscope__V1__DepClass *d = s->dep_classes[i];
            if (exec_stmt(st, "INSERT OR REPLACE INTO dep_classes VALUES(?,?,?,?,?)", "tiiti",
                          env->job, (int64_t)env->rank, (int64_t)d->id, d->name,
                          (int64_t)d->remote) != SQLITE_DONE)
                return db_fail(st, err, errlen, "task schema");
        }
        for (size_t i = 0; i < s->n_channels; i++) {
            const Mkscope__V1__CommChannel *c = s->channels[i];
            if (exec_stmt(st, "INSERT OR REPLACE INTO channels VALUES(?,?,?,?,?,?)", "tiitit",
                          env->job, (int64_t)env->rank, (int64_t)c->id, c->name,
                          (int64_t)c->peer_rank, c->kind) != SQLITE_DONE)
                return db_fail(st, err, errlen, "task schema");
        }
    }
    if (query_u64(st, seq_p,
                  "SELECT COALESCE(MAX(seq), 0) FROM epochs WHERE job=? AND rank=? AND"
                  " incarnation=?",
                  "tiu", env->job, (int64_t)env->rank, env->incarnation) != SQLITE_DONE ||
        exec_stmt(st, "UPDATE ranks SET acked_seq=? WHERE job=? AND rank=?", "uti", *seq_p,
                  env->job, (int64_t)env->rank) != SQLITE_DONE)
        return db_fail(st, err, errlen, "register");
    return 0;
}

#define FNV_BASIS 14695981039346656037ull

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static int store_heartbeat(struct mks_store *st, const mks_envelope *env, uint64_t now,
                           uint64_t *seq_p, char *err, size_t errlen)
{
    (void)seq_p;
    const Mkscope__V1__Heartbeat *h = env->heartbeat;
    struct rank_state rs;
    int rc = need_registered(st, env, &rs, err, errlen);
    if (rc)
        return rc;
    /* An earlier agent of the rank has nothing to say about the current
     * one's application and programs. */
    if (env->incarnation < rs.incarnation)
        return fail(err, errlen, -EALREADY,
                    "heartbeat of an earlier incarnation of rank %u of job %s: ignored",
                    env->rank, env->job);
    if ((rc = older_state(env, &rs, err, errlen)))
        return rc;
    if (exec_stmt(st,
                  "UPDATE ranks SET last_heartbeat_ns=?1, agent_time_ns=?2, last_seq=?3,"
                  " app_alive=?4, unacked=?5, lost_summaries = lost_summaries + CASE WHEN"
                  " incarnation = ?8 THEN MAX(lost_cur_sum, lost_cur_hb, ?6) -"
                  " MAX(lost_cur_sum, lost_cur_hb) ELSE 0 END, lost_cur_hb = CASE WHEN"
                  " incarnation = ?8 THEN MAX(lost_cur_hb, ?6) ELSE lost_cur_hb END,"
                  " last_seen_ns=?10, state_sent_ns=MAX(COALESCE(state_sent_ns, 0), ?11)"
                  " WHERE job=?7 AND rank=?9",
                  "uuuiuutuiuu", now, h->agent_time_ns, h->last_seq, (int64_t)h->app_alive,
                  h->unacked, h->lost_summaries, env->job, env->incarnation,
                  (int64_t)env->rank, now, env->sent_ns) != SQLITE_DONE)
        return db_fail(st, err, errlen, "heartbeat");
    /* The heartbeat lists every attached program: it replaces what we knew,
     * when it differs from what the rank's last heartbeat said (a thousand
     * agents' heartbeats every second repeat the same list). */
    uint64_t key = fnv(fnv(FNV_BASIS, env->job, strlen(env->job)), &env->rank, sizeof(env->rank));
    uint64_t progs = FNV_BASIS;
    for (size_t i = 0; i < h->n_programs; i++) {
        const Mkscope__V1__ProgramState *p = h->programs[i];
        uint64_t v[4] = {(uint64_t)p->hook, p->prog_gen, p->cost, (uint64_t)p->prog_type};
        progs = fnv(fnv(progs, p->name, strlen(p->name) + 1), v, sizeof(v));
    }
    struct prog_seen *seen = &st->progs_seen[key % PROGS_SEEN];
    if (seen->key == key && seen->progs == progs)
        return 0;
    seen->key = seen->progs = 0; /* until the rewrite below is done */
    exec_stmt(st, "DELETE FROM programs WHERE job=? AND rank=?", "ti", env->job,
              (int64_t)env->rank);
    for (size_t i = 0; i < h->n_programs; i++) {
        const Mkscope__V1__ProgramState *p = h->programs[i];
        if (exec_stmt(st, "INSERT OR REPLACE INTO programs VALUES(?,?,?,?,?,?,?,?)", "titiuuiu",
                      env->job, (int64_t)env->rank, p->name, (int64_t)p->hook, p->prog_gen,
                      p->cost, (int64_t)p->prog_type, now) != SQLITE_DONE)
            return db_fail(st, err, errlen, "heartbeat programs");
    }
    seen->key = key;
    seen->progs = progs;
    return 0;
}

static void hist_blob(const Mkscope__V1__Hist *h, uint8_t *buf, int *len)
{
    size_t n = h ? h->n_buckets : 0;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (n)
        memcpy(buf, h->buckets, n * 8);
#else
    for (size_t i = 0; i < n; i++)
        for (int b = 0; b < 8; b++)
            buf[i * 8 + (size_t)b] = (uint8_t)(h->buckets[i] >> (8 * b));
#endif
    *len = (int)(n * 8);
}

static int store_summary_rows(struct mks_store *st, const mks_envelope *env, int64_t eid,
                              const Mkscope__V1__EpochSummary *s)
{
    struct ins in = {0};
    int rc = SQLITE_OK;
#define INS(t, n) \
    do { if ((rc = ins_begin(st, &in, t, n)) != SQLITE_OK) return rc; } while (0)
#define ROW(...) \
    do { if ((rc = ins_row(&in, __VA_ARGS__)) != SQLITE_OK) return rc; } while (0)

    INS(T_TASK, s->n_task_stats);
    for (size_t i = 0; i < s->n_task_stats; i++) {
        const Mkscope__V1__TaskStat *t = s->task_stats[i];
        uint8_t qb[MKS_WIRE_MAX_HIST_BUCKETS * 8], rb[MKS_WIRE_MAX_HIST_BUCKETS * 8];
        int ql, rl;
        hist_blob(t->queue, qb, &ql);
        hist_blob(t->run, rb, &rl);
        /* A row of no one step is stored with step NULL: no step filter
         * matches it, and real step 0 stays step 0. */
        if (t->step_known || t->step)
            ROW("iiiuuuuuubuuub", eid, (int64_t)t->task_class, (int64_t)t->step, t->req_gen,
                t->count, t->sum_run_ns, t->queue ? t->queue->count : 0,
                t->queue ? t->queue->sum : 0, t->queue ? t->queue->max : 0, qb, ql,
                t->run ? t->run->count : 0, t->run ? t->run->sum : 0, t->run ? t->run->max : 0, rb,
                rl);
        else
            ROW("iinuuuuuubuuub", eid, (int64_t)t->task_class, t->req_gen, t->count,
                t->sum_run_ns, t->queue ? t->queue->count : 0, t->queue ? t->queue->sum : 0,
                t->queue ? t->queue->max : 0, qb, ql, t->run ? t->run->count : 0,
                t->run ? t->run->sum : 0, t->run ? t->run->max : 0, rb, rl);
    }
    INS(T_STEPS, s->n_steps);
    for (size_t i = 0; i < s->n_steps; i++) {
        const Mkscope__V1__StepTime *t = s->steps[i];
        if (t->cpu_wait_measured)
            ROW("iiuuuiuuui", eid, (int64_t)t->step, t->t_begin_dev_ns, t->t_end_dev_ns, t->tasks,
                (int64_t)t->complete, t->queued_while_idle_ns, t->cpu_wait_ns, t->cpu_runs,
                (int64_t)t->detail_withheld);
        else
            ROW("iiuuuiunni", eid, (int64_t)t->step, t->t_begin_dev_ns, t->t_end_dev_ns, t->tasks,
                (int64_t)t->complete, t->queued_while_idle_ns, (int64_t)t->detail_withheld);
    }
    if (mks_stepagg_note(&st->agg, env->job, env->rank, eid, s) ||
        mks_anchors_note(&st->anc, env->job, env->rank, env->incarnation, env->seq, eid,
                         s->t_begin_dev_ns, s->t_begin_host_ns, s->t_end_dev_ns,
                         s->t_end_host_ns))
        return SQLITE_NOMEM;
    INS(T_WAITS, s->n_remote_waits);
    for (size_t i = 0; i < s->n_remote_waits; i++) {
        const Mkscope__V1__RemoteWait *w = s->remote_waits[i];
        if (w->producer_class_known)
            ROW("iuiiiiuui", eid, w->comm_gen, (int64_t)w->peer_rank, (int64_t)w->waiter_class,
                (int64_t)w->step, (int64_t)w->worker, w->t_begin_dev_ns, w->t_end_dev_ns,
                (int64_t)w->producer_class);
        else
            ROW("iuiiiiuun", eid, w->comm_gen, (int64_t)w->peer_rank, (int64_t)w->waiter_class,
                (int64_t)w->step, (int64_t)w->worker, w->t_begin_dev_ns, w->t_end_dev_ns);
    }
    INS(T_RELEASES, s->n_releases);
    for (size_t i = 0; i < s->n_releases; i++) {
        const Mkscope__V1__Release *r = s->releases[i];
        ROW("iuiiiiuuuuuuu", eid, r->comm_gen, (int64_t)r->consumer_rank, (int64_t)r->task_class,
            (int64_t)r->step, (int64_t)r->worker, r->t_ready_dev_ns, r->t_start_dev_ns,
            r->t_end_dev_ns, r->t_comm_begin_dev_ns, r->t_comm_end_dev_ns, r->t_release_dev_ns,
            r->bytes);
    }
    INS(T_LOCAL_WAITS, s->n_local_waits);
    for (size_t i = 0; i < s->n_local_waits; i++) {
        const Mkscope__V1__LocalWait *w = s->local_waits[i];
        if (w->step_known || w->step)
            ROW("iiiuuu", eid, (int64_t)w->waiter_class, (int64_t)w->step, w->count, w->sum_ns,
                w->max_ns);
        else
            ROW("iinuuu", eid, (int64_t)w->waiter_class, w->count, w->sum_ns, w->max_ns);
    }
    INS(T_WORKERS, s->n_workers);
    for (size_t i = 0; i < s->n_workers; i++) {
        const Mkscope__V1__WorkerStat *w = s->workers[i];
        if (w->step_known || w->step)
            ROW("iiiuuuiuu", eid, (int64_t)w->worker, (int64_t)w->step, w->busy_ns, w->idle_ns,
                w->dep_wait_ns, (int64_t)w->max_queue_depth, w->over_threshold_ns, w->tasks);
        else
            ROW("iinuuuiuu", eid, (int64_t)w->worker, w->busy_ns, w->idle_ns, w->dep_wait_ns,
                (int64_t)w->max_queue_depth, w->over_threshold_ns, w->tasks);
    }
    INS(T_GENS, s->n_gens);
    for (size_t i = 0; i < s->n_gens; i++) {
        const Mkscope__V1__GenProgress *g = s->gens[i];
        ROW("iuiuu", eid, g->req_gen, (int64_t)g->step, g->t_dev_ns, g->value);
    }
    size_t n_entries = 0;
    for (size_t i = 0; i < s->n_maps; i++)
        n_entries += s->maps[i]->n_entries;
    INS(T_MAPS, n_entries);
    for (size_t i = 0; i < s->n_maps; i++) {
        const Mkscope__V1__MapDump *m = s->maps[i];
        for (size_t k = 0; k < m->n_entries; k++)
            ROW("iittbb", eid, (int64_t)m->prog_id, m->prog_name, m->map_name,
                m->entries[k]->key.data, (int)m->entries[k]->key.len, m->entries[k]->value.data,
                (int)m->entries[k]->value.len);
    }
    INS(T_COVERAGE, s->n_coverage);
    for (size_t i = 0; i < s->n_coverage; i++) {
        const Mkscope__V1__Coverage *c = s->coverage[i];
        /* A hook with nothing to say (no event, nothing lost) has no row:
         * most of a summary's hooks, most of the time, and a row costs
         * about 60 bytes of the store per epoch. */
        if (!c->eligible && !c->ran && !c->throttled && !c->lost && !c->undelivered)
            continue;
        /* The events of summaries the agent dropped were eligible too: in
         * eligible, so that every ratio of ran to eligible (queries,
         * status, the diagnosis) counts them, and apart in undelivered. */
        ROW("iiuuuuuu", eid, (int64_t)c->hook, c->eligible + c->undelivered, c->ran,
            c->throttled, c->lost, c->prog_gen, c->undelivered);
    }
#undef INS
#undef ROW
    return SQLITE_OK;
}

/* Every RETAIN_EVERY summaries a rank stores, its epochs beyond max_epochs
 * are deleted when the rows are written (buf_flush), by the (job, rank, id)
 * index: the cost follows what is deleted, not what is kept. */
static int retain_after(struct mks_store *st, const mks_envelope *env, uint64_t stored)
{
    if (stored % RETAIN_EVERY)
        return 0;
    if (st->n_trims == st->cap_trims) {
        size_t cap = st->cap_trims ? 2 * st->cap_trims : 16;
        struct trim *t = realloc(st->trims, cap * sizeof(*t));
        if (!t)
            return -ENOMEM;
        st->trims = t;
        st->cap_trims = cap;
    }
    struct trim *t = &st->trims[st->n_trims++];
    snprintf(t->job, sizeof(t->job), "%s", env->job);
    t->rank = env->rank;
    return 0;
}

static int store_summary(struct mks_store *st, const mks_envelope *env, uint64_t now,
                         uint64_t *seq_p, char *err, size_t errlen)
{
    const Mkscope__V1__EpochSummary *s = env->epoch_summary;
    struct rank_state rs;
    int rc = need_registered(st, env, &rs, err, errlen);
    if (rc)
        return rc;
    /* the range of the epoch's step rows (epochs_step) */
    int64_t step_lo = -1, step_hi = -1;
    for (size_t i = 0; i < s->n_steps; i++) {
        int64_t k = (int64_t)s->steps[i]->step;
        if (step_lo < 0 || k < step_lo)
            step_lo = k;
        if (k > step_hi)
            step_hi = k;
    }
    static const char ins_epoch[] =
        "INSERT OR IGNORE INTO epochs(job, rank, incarnation, seq, epoch, t_begin_host,"
        " t_end_host, t_begin_dev, t_end_dev, detail_tier, sample_shift, lost_summaries,"
        " waits_dropped, received_ns, step_lo, step_hi) SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8,"
        " ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16 WHERE NOT EXISTS (SELECT 1 FROM rolled_seqs"
        " WHERE job = ?1 AND rank = ?2 AND incarnation = ?3 AND seq_hi >= ?4)";
    rc = step_lo < 0
             ? exec_stmt(st, ins_epoch, "tiuuuuuuuiiuuunn", env->job, (int64_t)env->rank,
                         env->incarnation, env->seq, s->epoch, s->t_begin_host_ns,
                         s->t_end_host_ns, s->t_begin_dev_ns, s->t_end_dev_ns,
                         (int64_t)s->detail_tier, (int64_t)s->sample_shift, s->lost_summaries,
                         s->waits_dropped, now)
             : exec_stmt(st, ins_epoch, "tiuuuuuuuiiuuuii", env->job, (int64_t)env->rank,
                         env->incarnation, env->seq, s->epoch, s->t_begin_host_ns,
                         s->t_end_host_ns, s->t_begin_dev_ns, s->t_end_dev_ns,
                         (int64_t)s->detail_tier, (int64_t)s->sample_shift, s->lost_summaries,
                         s->waits_dropped, now, step_lo, step_hi);
    if (rc != SQLITE_DONE)
        goto fail;
    /* not stored again if it is a replay of a summary we hold: counted */
    int fresh = sqlite3_changes(st->db) != 0;
    if (fresh && (rc = store_summary_rows(st, env, sqlite3_last_insert_rowid(st->db), s)) != SQLITE_OK)
        goto fail;
    /* probe results add up into the probe's groups: once per summary */
    if (fresh && s->n_probes && mks_probe_store(st->db, env, now) != 0)
        goto fail;
    /* The rank's counters in one statement.  A summary of an earlier
     * incarnation (an agent sending what a crashed one spooled) counts, but
     * says nothing of the current agent's progress (last_epoch, acked_seq).
     * acked_seq is the highest seq stored for the rank's incarnation (the
     * registration set it, each new summary raises it): the ack. */
    uint64_t stored = 0, acked = 0, inc = 0;
    sqlite3_stmt *u;
    rc = SQLITE_ERROR;
    /* what status reports of the rank, summed as the rows are stored */
    uint64_t tot[6] = {0};
    for (size_t i = 0; fresh && i < s->n_task_stats; i++)
        tot[0] += s->task_stats[i]->count;
    for (size_t i = 0; fresh && i < s->n_coverage; i++) {
        const Mkscope__V1__Coverage *c = s->coverage[i];
        tot[1] += c->eligible + c->undelivered, tot[2] += c->ran, tot[3] += c->throttled;
        tot[4] += c->lost, tot[5] += c->undelivered;
    }
    /* An UPDATE of the row need_registered read (what it returns, from
     * that row: RETURNING made and dropped a table each summary, a sixth
     * of a counts-only summary's cost). */
    if ((u = stmt(st, "UPDATE ranks SET last_seen_ns = ?4,"
                      " tasks_total = tasks_total + ?10, cov_eligible = cov_eligible + ?11,"
                      " cov_ran = cov_ran + ?12, cov_throttled = cov_throttled + ?13,"
                      " cov_lost = cov_lost + ?14, cov_undelivered = cov_undelivered + ?15,"
                      " step_span = MAX(COALESCE(step_span, 0), ?16),"
                      " summaries = summaries + ?5, duplicates = duplicates + ?6,"
                      " last_epoch = CASE WHEN ?5 AND incarnation = ?3 THEN ?7 ELSE last_epoch END,"
                      " lost_summaries = lost_summaries + CASE WHEN incarnation = ?3 THEN"
                      " MAX(lost_cur_sum + ?8, lost_cur_hb) - MAX(lost_cur_sum, lost_cur_hb)"
                      " ELSE ?8 END,"
                      " lost_cur_sum = lost_cur_sum + CASE WHEN incarnation = ?3 THEN ?8 ELSE 0"
                      " END,"
                      " acked_seq = CASE WHEN incarnation = ?3 THEN MAX(acked_seq, ?9)"
                      " ELSE acked_seq END WHERE job = ?1 AND rank = ?2"))) {
        sqlite3_bind_text(u, 1, env->job, -1, SQLITE_STATIC);
        sqlite3_bind_int64(u, 2, env->rank);
        sqlite3_bind_int64(u, 3, (int64_t)env->incarnation);
        sqlite3_bind_int64(u, 4, (int64_t)now);
        sqlite3_bind_int64(u, 5, fresh);
        sqlite3_bind_int64(u, 6, !fresh);
        sqlite3_bind_int64(u, 7, (int64_t)s->epoch);
        sqlite3_bind_int64(u, 8, fresh ? (int64_t)s->lost_summaries : 0);
        sqlite3_bind_int64(u, 9, fresh ? (int64_t)env->seq : 0);
        for (int i = 0; i < 6; i++)
            sqlite3_bind_int64(u, 10 + i, (int64_t)tot[i]);
        sqlite3_bind_int64(u, 16, fresh && step_lo >= 0 ? step_hi - step_lo : 0);
        if ((rc = sqlite3_step(u)) == SQLITE_DONE && sqlite3_changes(st->db) != 1)
            rc = SQLITE_NOTFOUND; /* no row: not registered after all */
        sqlite3_reset(u);
        stored = rs.summaries + (uint64_t)fresh;
        inc = rs.incarnation;
        acked = rs.acked_seq;
        if (inc == env->incarnation && fresh && env->seq > acked)
            acked = env->seq;
    }
    if (rc == SQLITE_NOTFOUND)
        return fail(err, errlen, -EIO, "store: summary %llu of rank %u of job %s: the rank's row"
                    " is gone", (unsigned long long)env->seq, env->rank, env->job);
    if (rc != SQLITE_DONE)
        goto fail;
    *seq_p = acked;
    if (inc != env->incarnation &&
        query_u64(st, seq_p,
                  "SELECT COALESCE(MAX(seq), 0) FROM epochs WHERE job=? AND rank=? AND"
                  " incarnation=?",
                  "tiu", env->job, (int64_t)env->rank, env->incarnation) != SQLITE_DONE)
        goto fail;
    if (rc != SQLITE_DONE || (fresh && retain_after(st, env, stored)))
        goto fail;
    return 0;
fail:
    return fail(err, errlen, -EIO, "store: summary %llu of rank %u: %s",
                (unsigned long long)env->seq, env->rank, sqlite3_errmsg(st->db));
}

static int store_command_reply(struct mks_store *st, const mks_envelope *env, uint64_t now,
                               uint64_t *seq_p, char *err, size_t errlen)
{
    (void)seq_p;
    const Mkscope__V1__CommandReply *r = env->command_reply;
    struct rank_state rs;
    int rc = need_registered(st, env, &rs, err, errlen);
    if (rc)
        return rc;
    if (touch_rank(st, env, now) != SQLITE_DONE ||
        exec_stmt(st,
                  "UPDATE commands SET replied_ns=?, ok=?, error=?, verifier_log=?, cost=?,"
                  " n_insns=?, prog_gen=? WHERE id=? AND job=? AND rank=?",
                  "uittuiuuti", now, (int64_t)r->ok, r->error, r->verifier_log, r->cost,
                  (int64_t)r->n_insns, r->prog_gen, r->id, env->job,
                  (int64_t)env->rank) != SQLITE_DONE)
        return db_fail(st, err, errlen, "command reply");
    return 0;
}

static int store_raw(struct mks_store *st, const mks_envelope *env, uint64_t now,
                     uint64_t *seq_p, char *err, size_t errlen)
{
    (void)seq_p;
    const Mkscope__V1__RawEventBatch *b = env->raw_event_batch;
    struct rank_state rs;
    int rc = need_registered(st, env, &rs, err, errlen);
    if (rc)
        return rc;
    struct ins in = {0};
    rc = ins_begin(st, &in, T_RAW, b->n_events);
    for (size_t i = 0; rc == SQLITE_OK && i < b->n_events; i++) {
        const Mkscope__V1__RawEvent *e = b->events[i];
        rc = ins_row(&in, "tiuiiiiiuuiiiiuuiiuuuuu", env->job, (int64_t)env->rank,
                     b->escalation_id, (int64_t)e->event, (int64_t)e->flags, (int64_t)e->worker,
                     (int64_t)e->sm, (int64_t)e->task_class, e->task_gen, e->req_gen,
                     (int64_t)e->step, (int64_t)e->dep_class, (int64_t)e->tile_x,
                     (int64_t)e->tile_y, e->dep_event, e->comm_gen, (int64_t)e->peer_rank,
                     (int64_t)e->queue_depth, e->t_now, e->t_ready, e->t_start, e->value, now);
    }
    if (rc == SQLITE_OK &&
        exec_stmt(st, "INSERT INTO raw_batches VALUES(?,?,?,?,?,?,?)", "tiuuuiu", env->job,
                  (int64_t)env->rank, b->escalation_id, (uint64_t)b->n_events, b->dropped,
                  (int64_t)b->last, now) != SQLITE_DONE)
        rc = SQLITE_ERROR;
    if (rc != SQLITE_OK)
        return fail(err, errlen, -EIO, "store: raw events of rank %u: %s", env->rank,
                    sqlite3_errmsg(st->db));
    /* Escalations arrive without summaries: the raw cap is applied here,
     * once a quarter of it has arrived since the last time (a bound within
     * 25% without a delete per batch). */
    st->raw_since_trim += b->n_events;
    if (st->raw_since_trim >= st->max_raw_events / 4 + 1)
        st->raw_trim_due = 1; /* once the rows are written (buf_flush) */
    return 0;
}

int mks_store_ingest(struct mks_store *st, const mks_envelope *env, uint64_t now_ns,
                     uint64_t *seq_p, char *err, size_t errlen)
{
    uint64_t dummy;
    if (!st || !env)
        return fail(err, errlen, -EINVAL, "store: nothing to ingest");
    if (!seq_p)
        seq_p = &dummy;
    *seq_p = 0;
    int (*fn)(struct mks_store *, const mks_envelope *, uint64_t, uint64_t *, char *, size_t);
    switch (env->body_case) {
    case MKSCOPE__V1__ENVELOPE__BODY_REGISTER: fn = store_register; break;
    case MKSCOPE__V1__ENVELOPE__BODY_HEARTBEAT: fn = store_heartbeat; break;
    case MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY: fn = store_summary; break;
    case MKSCOPE__V1__ENVELOPE__BODY_COMMAND_REPLY: fn = store_command_reply; break;
    case MKSCOPE__V1__ENVELOPE__BODY_RAW_EVENT_BATCH: fn = store_raw; break;
    default:
        return fail(err, errlen, -EPROTO, "store: %s is not something an agent sends",
                    mks_wire_body_name(env->body_case));
    }
    st->flush_now = now_ns;
    if (txn_begin(st))
        return db_fail(st, err, errlen, "begin");
    int rc = fn(st, env, now_ns, seq_p, err, errlen);
    if (txn_end(st, rc == 0) && rc == 0)
        rc = db_fail(st, err, errlen, "commit");
    if (rc && rc != -EALREADY) /* an ignored copy still says what is stored */
        *seq_p = 0;
    return rc;
}

/* Keep the newest max_raw_events raw events of each job. */
static int trim_raw(struct mks_store *st)
{
    st->raw_since_trim = 0;
    return exec_stmt(st,
                     "DELETE FROM raw_events WHERE id IN (SELECT id FROM (SELECT id,"
                     " ROW_NUMBER() OVER (PARTITION BY job ORDER BY id DESC) AS rn FROM"
                     " raw_events) WHERE rn > ?)",
                     "u", st->max_raw_events);
}

int mks_store_retain(struct mks_store *st, uint64_t now_ns)
{
    int rc = SQLITE_DONE;
    if (st->max_epochs)
        rc = exec_stmt(st,
                       "DELETE FROM epochs WHERE id IN (SELECT id FROM (SELECT id, ROW_NUMBER()"
                       " OVER (PARTITION BY job, rank ORDER BY id DESC) AS rn FROM epochs)"
                       " WHERE rn > ?)",
                       "u", st->max_epochs);
    if (rc == SQLITE_DONE && st->max_age_ns && now_ns > st->max_age_ns)
        rc = exec_stmt(st, "DELETE FROM epochs WHERE received_ns < ?", "u",
                       now_ns - st->max_age_ns);
    if (rc == SQLITE_DONE)
        rc = trim_raw(st);
    if (rc == SQLITE_DONE && retain_bounds(st, now_ns) != SQLITE_OK)
        rc = SQLITE_ERROR;
    st->fill_due = true;
    return rc == SQLITE_DONE ? 0 : -EIO;
}

int mks_store_rolled(struct mks_store *st, const char *job, struct mks_store_rolled *r)
{
    *r = (struct mks_store_rolled){.step_hi = -1};
    sqlite3_stmt *s;
    /* epochs_rolled holds the rolled-up epochs only: a small index (named:
     * the planner took epochs_step's (job) prefix and read every epoch of
     * the job, 2.3 s on an hour of 4 ranks) */
    if (sqlite3_prepare_v2(st->db,
                           "SELECT COUNT(*), MAX(e.received_ns), (SELECT MAX(r.step_hi) FROM"
                           " rollups r WHERE r.kind = 0 AND r.epoch_id IN (SELECT id FROM epochs"
                           " INDEXED BY epochs_rolled WHERE job = ?1 AND compacted = 2)) FROM"
                           " epochs e INDEXED BY epochs_rolled WHERE e.job = ?1 AND"
                           " e.compacted = 2",
                           -1, &s, NULL) != SQLITE_OK)
        return -EIO;
    sqlite3_bind_text(s, 1, job, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        r->epochs = sqlite3_column_int64(s, 0);
        r->until_ns = (uint64_t)sqlite3_column_int64(s, 1);
        if (sqlite3_column_type(s, 2) != SQLITE_NULL)
            r->step_hi = sqlite3_column_int64(s, 2);
    }
    sqlite3_finalize(s);
    return rc == SQLITE_ROW ? 0 : -EIO;
}

void mks_store_class_name(struct mks_store *st, const char *job, uint32_t rank, uint32_t cls,
                          char *buf, size_t len)
{
    sqlite3_stmt *s = NULL;
    snprintf(buf, len, "class%u", cls);
    /* Any rank's schema will do when this rank did not publish one. */
    if (sqlite3_prepare_v2(st->db,
                           "SELECT name FROM task_classes WHERE job=? AND id=?"
                           " ORDER BY rank = ? DESC LIMIT 1",
                           -1, &s, NULL) != SQLITE_OK)
        return;
    sqlite3_bind_text(s, 1, job, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(s, 2, cls);
    sqlite3_bind_int64(s, 3, rank);
    if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_text(s, 0))
        snprintf(buf, len, "%s", (const char *)sqlite3_column_text(s, 0));
    sqlite3_finalize(s);
}

int mks_store_latest_job(struct mks_store *st, char *buf, size_t len)
{
    sqlite3_stmt *s = NULL;
    buf[0] = 0;
    if (sqlite3_prepare_v2(st->db, "SELECT job FROM ranks ORDER BY last_seen_ns DESC LIMIT 1", -1,
                           &s, NULL) != SQLITE_OK)
        return -EIO;
    if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_text(s, 0))
        snprintf(buf, len, "%s", (const char *)sqlite3_column_text(s, 0));
    sqlite3_finalize(s);
    return 0;
}

int mks_store_acked_seq(struct mks_store *st, const char *job, uint32_t rank, uint64_t *seq_p)
{
    return query_u64(st, seq_p, "SELECT acked_seq FROM ranks WHERE job=? AND rank=?", "ti", job,
                     (int64_t)rank) == SQLITE_DONE
               ? 0
               : -EIO;
}

bool mks_store_commands_pending(struct mks_store *st)
{
    uint64_t n = 1;
    return query_u64(st, &n, "SELECT EXISTS (SELECT 1 FROM commands WHERE sent_ns IS NULL)", "") !=
               SQLITE_DONE ||
           n != 0;
}

size_t mks_store_take_commands(struct mks_store *st, const char *job, uint32_t rank,
                               uint64_t now_ns, Mkscope__V1__Command **cmds, size_t max)
{
    sqlite3_stmt *s = stmt(st, "SELECT id, payload FROM commands WHERE job=? AND rank=? AND"
                               " sent_ns IS NULL ORDER BY id LIMIT ?");
    size_t n = 0;
    if (!s)
        return 0;
    sqlite3_bind_text(s, 1, job, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, rank);
    sqlite3_bind_int64(s, 3, (int64_t)max);
    /* What fits in one Ack: commands carrying objects (8 MiB each) go one
     * or two at a time, the rest with the next ack. */
    size_t bytes = 0;
    while (n < max && sqlite3_step(s) == SQLITE_ROW) {
        const void *p = sqlite3_column_blob(s, 1);
        int len = sqlite3_column_bytes(s, 1);
        if (n && bytes + (size_t)len > MKS_WIRE_MAX_MSG - (1u << 20))
            break;
        bytes += (size_t)len;
        Mkscope__V1__Command *cmd = mkscope__v1__command__unpack(NULL, (size_t)len, p);
        if (!cmd)
            continue;
        cmd->id = (uint64_t)sqlite3_column_int64(s, 0);
        /* Its nonce was fixed when it was queued (an agent runs a nonce
         * once); the time says when it left, for the agent's window. */
        if (!cmd->nonce) {
            mks_envelope tmp;
            mks_wire_init(&tmp, "", 0, 0);
            cmd->nonce = tmp.nonce;
        }
        cmd->issued_ns = now_ns;
        cmds[n++] = cmd;
    }
    sqlite3_reset(s);
    for (size_t i = 0; i < n; i++)
        exec_stmt(st, "UPDATE commands SET sent_ns=? WHERE id=?", "uu", now_ns, cmds[i]->id);
    return n;
}

/*
 * SQLite store of the collector (schema: docs/collector.md).
 *
 * One row per epoch summary in `epochs`, keyed uniquely by (job, rank,
 * incarnation, seq) so that replays are ignored; every per-epoch table
 * references it with ON DELETE CASCADE, so retention deletes epochs and the
 * rest follows.  Unsigned 64-bit wire values are stored as SQLite INTEGER
 * (two's complement): readers cast back to uint64_t.  Histograms are BLOBs of
 * little-endian u64 buckets in struct mks_hist order.
 */
#include "mkscope/store.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_MAX_EPOCHS     100000u
#define DEFAULT_MAX_RAW_EVENTS 1000000u
/* Retention runs every this many ingested summaries: deleting is cheap, but
 * not free enough to do per message. */
#define RETAIN_EVERY 64u

struct mks_store {
    sqlite3 *db;
    uint64_t max_epochs, max_age_ns, max_raw_events;
    uint64_t since_retain;
    uint64_t raw_since_trim; /* raw events stored since the cap was last applied */
};

static int trim_raw(struct mks_store *st);

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
    "PRAGMA foreign_keys = ON;\n"
    "CREATE TABLE IF NOT EXISTS ranks(job TEXT NOT NULL, rank INTEGER NOT NULL,"
    " n_ranks INTEGER, host TEXT, pid INTEGER, gpu_uuid TEXT, hook_abi INTEGER,"
    " agent_version TEXT, n_workers INTEGER, epoch_ns INTEGER, incarnation INTEGER,"
    " app_start_ns INTEGER, registered_ns INTEGER, last_seen_ns INTEGER,"
    " last_heartbeat_ns INTEGER, agent_time_ns INTEGER, last_seq INTEGER DEFAULT 0,"
    " acked_seq INTEGER DEFAULT 0, app_alive INTEGER, summaries INTEGER DEFAULT 0,"
    " duplicates INTEGER DEFAULT 0, lost_summaries INTEGER DEFAULT 0, unacked INTEGER DEFAULT 0,"
    " last_epoch INTEGER, PRIMARY KEY(job, rank));\n"
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
    " waits_dropped INTEGER, received_ns INTEGER,"
    " UNIQUE(job, rank, incarnation, seq));\n"
    "CREATE INDEX IF NOT EXISTS epochs_rank ON epochs(job, rank, id);\n"
    "CREATE TABLE IF NOT EXISTS task_stats(epoch_id INTEGER REFERENCES epochs(id) ON DELETE"
    " CASCADE, class INTEGER, step INTEGER, req_gen INTEGER, count INTEGER, sum_run_ns INTEGER,"
    " queue_count INTEGER, queue_sum INTEGER, queue_max INTEGER, queue_hist BLOB,"
    " run_count INTEGER, run_sum INTEGER, run_max INTEGER, run_hist BLOB);\n"
    "CREATE INDEX IF NOT EXISTS task_stats_e ON task_stats(epoch_id);\n"
    "CREATE TABLE IF NOT EXISTS steps(epoch_id INTEGER REFERENCES epochs(id) ON DELETE CASCADE,"
    " step INTEGER, t_begin_dev INTEGER, t_end_dev INTEGER, tasks INTEGER, complete INTEGER,"
    " queued_while_idle_ns INTEGER);\n"
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
    " prog_gen INTEGER);\n"
    "CREATE INDEX IF NOT EXISTS coverage_e ON coverage(epoch_id);\n"
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
    " last_fired_ns INTEGER, last_value REAL, last_epoch_id INTEGER DEFAULT 0);\n"
    "CREATE TABLE IF NOT EXISTS commands(id INTEGER PRIMARY KEY, job TEXT, rank INTEGER,"
    " kind TEXT, name TEXT, hook INTEGER, created_ns INTEGER, sent_ns INTEGER,"
    " replied_ns INTEGER, ok INTEGER, error TEXT, verifier_log TEXT, cost INTEGER,"
    " n_insns INTEGER, prog_gen INTEGER, payload BLOB);\n"
    "CREATE INDEX IF NOT EXISTS commands_pending ON commands(job, rank, sent_ns);\n"
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
    " s.queued_while_idle_ns FROM steps s JOIN epochs e ON e.id = s.epoch_id;\n"
    "CREATE VIEW IF NOT EXISTS v_waits AS SELECT e.job, e.rank, e.id AS epoch_id, e.epoch,"
    " e.t_begin_host, e.t_end_host, w.* FROM waits w JOIN epochs e ON e.id = w.epoch_id;\n"
    "CREATE VIEW IF NOT EXISTS v_releases AS SELECT e.job, e.rank, e.id AS epoch_id, e.epoch,"
    " r.* FROM releases r JOIN epochs e ON e.id = r.epoch_id;\n"
    "CREATE VIEW IF NOT EXISTS v_workers AS SELECT e.job, e.rank, e.id AS epoch_id, e.epoch,"
    " w.* FROM workers w JOIN epochs e ON e.id = w.epoch_id;\n"
    "CREATE VIEW IF NOT EXISTS v_coverage AS SELECT e.job, e.rank, e.id AS epoch_id, e.epoch,"
    " c.* FROM coverage c JOIN epochs e ON e.id = c.epoch_id;\n";

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
    st->max_epochs = o.max_epochs ? o.max_epochs : DEFAULT_MAX_EPOCHS;
    st->max_age_ns = o.max_age_ns;
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
     * file) proceed while the collector writes. */
    if (strcmp(o.path, ":memory:") &&
        sqlite3_exec(st->db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;", NULL, NULL,
                     &msg) != SQLITE_OK) {
        fail(err, errlen, -EIO, "store: %s: cannot enable WAL: %s", o.path, msg ? msg : "?");
        sqlite3_free(msg);
        mks_store_close(st);
        return -EIO;
    }
    if (sqlite3_exec(st->db, schema_sql, NULL, NULL, &msg) != SQLITE_OK) {
        fail(err, errlen, -EIO, "store: %s: schema: %s", o.path, msg ? msg : "?");
        sqlite3_free(msg);
        mks_store_close(st);
        return -EIO;
    }
    *st_p = st;
    return 0;
}

void mks_store_close(struct mks_store *st)
{
    if (!st)
        return;
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
static void bindv(sqlite3_stmt *s, const char *fmt, va_list ap)
{
    int idx = 1;
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

/* Prepare sql and bind the values fmt describes; SQLite's result code. */
static int prep_bound(struct mks_store *st, sqlite3_stmt **s, const char *sql, const char *fmt,
                      va_list ap)
{
    int rc = sqlite3_prepare_v2(st->db, sql, -1, s, NULL);
    if (rc == SQLITE_OK)
        bindv(*s, fmt, ap);
    return rc;
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
    sqlite3_finalize(s);
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
    sqlite3_finalize(s);
    return rc;
}

/* A prepared insert, reused for every row of one table in one summary. */
struct ins {
    sqlite3_stmt *s;
};

static int ins_prepare(struct mks_store *st, struct ins *in, const char *sql)
{
    return sqlite3_prepare_v2(st->db, sql, -1, &in->s, NULL);
}

static int ins_row(struct ins *in, const char *fmt, ...)
{
    sqlite3_reset(in->s);
    sqlite3_clear_bindings(in->s);
    va_list ap;
    va_start(ap, fmt);
    bindv(in->s, fmt, ap);
    va_end(ap);
    int rc = sqlite3_step(in->s);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static void ins_done(struct ins *in)
{
    sqlite3_finalize(in->s);
    in->s = NULL;
}

/* ---- ingest ---------------------------------------------------------------- */

static int ensure_rank(struct mks_store *st, const mks_envelope *env, uint64_t now)
{
    return exec_stmt(st,
                     "INSERT INTO ranks(job, rank, incarnation, last_seen_ns) VALUES(?,?,?,?)"
                     " ON CONFLICT(job, rank) DO UPDATE SET last_seen_ns = excluded.last_seen_ns",
                     "tiuu", env->job, (int64_t)env->rank, env->incarnation, now);
}

static int store_register(struct mks_store *st, const mks_envelope *env, uint64_t now,
                          uint64_t *seq_p, char *err, size_t errlen)
{
    const Mkscope__V1__Register *r = env->register_;
    int rc = exec_stmt(
        st,
        "INSERT INTO ranks(job, rank, n_ranks, host, pid, gpu_uuid, hook_abi, agent_version,"
        " n_workers, epoch_ns, incarnation, app_start_ns, registered_ns, last_seen_ns, app_alive)"
        " VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,1) ON CONFLICT(job, rank) DO UPDATE SET"
        " n_ranks=excluded.n_ranks, host=excluded.host, pid=excluded.pid,"
        " gpu_uuid=excluded.gpu_uuid, hook_abi=excluded.hook_abi,"
        " agent_version=excluded.agent_version, n_workers=excluded.n_workers,"
        " epoch_ns=excluded.epoch_ns, incarnation=excluded.incarnation,"
        " app_start_ns=excluded.app_start_ns, registered_ns=excluded.registered_ns,"
        " last_seen_ns=excluded.last_seen_ns, app_alive=1",
        "tiitititiuuuuu", env->job, (int64_t)env->rank, (int64_t)r->n_ranks, r->host,
        (int64_t)r->pid, r->gpu_uuid, (int64_t)r->hook_abi_version, r->agent_version,
        (int64_t)r->n_workers, r->epoch_ns, env->incarnation, r->app_start_ns, now, now);
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
                  "tiu", env->job, (int64_t)env->rank, env->incarnation) != SQLITE_DONE)
        return db_fail(st, err, errlen, "register");
    return 0;
}

static int store_heartbeat(struct mks_store *st, const mks_envelope *env, uint64_t now,
                           char *err, size_t errlen)
{
    const Mkscope__V1__Heartbeat *h = env->heartbeat;
    if (ensure_rank(st, env, now) != SQLITE_DONE ||
        exec_stmt(st,
                  "UPDATE ranks SET last_heartbeat_ns=?, agent_time_ns=?, last_seq=?, app_alive=?,"
                  " unacked=?, lost_summaries=MAX(lost_summaries, ?) WHERE job=? AND rank=?",
                  "uuuiuuti", now, h->agent_time_ns, h->last_seq, (int64_t)h->app_alive,
                  h->unacked, h->lost_summaries, env->job, (int64_t)env->rank) != SQLITE_DONE)
        return db_fail(st, err, errlen, "heartbeat");
    /* The heartbeat lists every attached program: it replaces what we knew. */
    exec_stmt(st, "DELETE FROM programs WHERE job=? AND rank=?", "ti", env->job,
              (int64_t)env->rank);
    for (size_t i = 0; i < h->n_programs; i++) {
        const Mkscope__V1__ProgramState *p = h->programs[i];
        if (exec_stmt(st, "INSERT OR REPLACE INTO programs VALUES(?,?,?,?,?,?,?,?)", "titiuuiu",
                      env->job, (int64_t)env->rank, p->name, (int64_t)p->hook, p->prog_gen,
                      p->cost, (int64_t)p->prog_type, now) != SQLITE_DONE)
            return db_fail(st, err, errlen, "heartbeat programs");
    }
    return 0;
}

static void hist_blob(const Mkscope__V1__Hist *h, uint8_t *buf, int *len)
{
    size_t n = h ? h->n_buckets : 0;
    for (size_t i = 0; i < n; i++)
        for (int b = 0; b < 8; b++)
            buf[i * 8 + (size_t)b] = (uint8_t)(h->buckets[i] >> (8 * b));
    *len = (int)(n * 8);
}

static int store_summary_rows(struct mks_store *st, int64_t eid, const Mkscope__V1__EpochSummary *s)
{
    struct ins in = {0};
    int rc = SQLITE_OK;
#define INS(sql) \
    do { if ((rc = ins_prepare(st, &in, sql)) != SQLITE_OK) return rc; } while (0)
#define ROW(...) \
    do { if ((rc = ins_row(&in, __VA_ARGS__)) != SQLITE_OK) { ins_done(&in); return rc; } } while (0)

    INS("INSERT INTO task_stats VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
    for (size_t i = 0; i < s->n_task_stats; i++) {
        const Mkscope__V1__TaskStat *t = s->task_stats[i];
        uint8_t qb[MKS_WIRE_MAX_HIST_BUCKETS * 8], rb[MKS_WIRE_MAX_HIST_BUCKETS * 8];
        int ql, rl;
        hist_blob(t->queue, qb, &ql);
        hist_blob(t->run, rb, &rl);
        ROW("iiiuuuuuubuuub", eid, (int64_t)t->task_class, (int64_t)t->step, t->req_gen, t->count,
            t->sum_run_ns, t->queue ? t->queue->count : 0, t->queue ? t->queue->sum : 0,
            t->queue ? t->queue->max : 0, qb, ql, t->run ? t->run->count : 0,
            t->run ? t->run->sum : 0, t->run ? t->run->max : 0, rb, rl);
    }
    ins_done(&in);
    INS("INSERT INTO steps VALUES(?,?,?,?,?,?,?)");
    for (size_t i = 0; i < s->n_steps; i++) {
        const Mkscope__V1__StepTime *t = s->steps[i];
        ROW("iiuuuiu", eid, (int64_t)t->step, t->t_begin_dev_ns, t->t_end_dev_ns, t->tasks,
            (int64_t)t->complete, t->queued_while_idle_ns);
    }
    ins_done(&in);
    INS("INSERT INTO waits VALUES(?,?,?,?,?,?,?,?,?)");
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
    ins_done(&in);
    INS("INSERT INTO releases VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?)");
    for (size_t i = 0; i < s->n_releases; i++) {
        const Mkscope__V1__Release *r = s->releases[i];
        ROW("iuiiiiuuuuuuu", eid, r->comm_gen, (int64_t)r->consumer_rank, (int64_t)r->task_class,
            (int64_t)r->step, (int64_t)r->worker, r->t_ready_dev_ns, r->t_start_dev_ns,
            r->t_end_dev_ns, r->t_comm_begin_dev_ns, r->t_comm_end_dev_ns, r->t_release_dev_ns,
            r->bytes);
    }
    ins_done(&in);
    INS("INSERT INTO local_waits VALUES(?,?,?,?,?,?)");
    for (size_t i = 0; i < s->n_local_waits; i++) {
        const Mkscope__V1__LocalWait *w = s->local_waits[i];
        ROW("iiiuuu", eid, (int64_t)w->waiter_class, (int64_t)w->step, w->count, w->sum_ns,
            w->max_ns);
    }
    ins_done(&in);
    INS("INSERT INTO workers VALUES(?,?,?,?,?,?,?,?,?)");
    for (size_t i = 0; i < s->n_workers; i++) {
        const Mkscope__V1__WorkerStat *w = s->workers[i];
        ROW("iiiuuuiuu", eid, (int64_t)w->worker, (int64_t)w->step, w->busy_ns, w->idle_ns,
            w->dep_wait_ns, (int64_t)w->max_queue_depth, w->over_threshold_ns, w->tasks);
    }
    ins_done(&in);
    INS("INSERT INTO gens VALUES(?,?,?,?,?)");
    for (size_t i = 0; i < s->n_gens; i++) {
        const Mkscope__V1__GenProgress *g = s->gens[i];
        ROW("iuiuu", eid, g->req_gen, (int64_t)g->step, g->t_dev_ns, g->value);
    }
    ins_done(&in);
    INS("INSERT INTO maps VALUES(?,?,?,?,?,?)");
    for (size_t i = 0; i < s->n_maps; i++) {
        const Mkscope__V1__MapDump *m = s->maps[i];
        for (size_t k = 0; k < m->n_entries; k++)
            ROW("iittbb", eid, (int64_t)m->prog_id, m->prog_name, m->map_name,
                m->entries[k]->key.data, (int)m->entries[k]->key.len, m->entries[k]->value.data,
                (int)m->entries[k]->value.len);
    }
    ins_done(&in);
    INS("INSERT INTO coverage VALUES(?,?,?,?,?,?,?)");
    for (size_t i = 0; i < s->n_coverage; i++) {
        const Mkscope__V1__Coverage *c = s->coverage[i];
        ROW("iiuuuuu", eid, (int64_t)c->hook, c->eligible, c->ran, c->throttled, c->lost,
            c->prog_gen);
    }
    ins_done(&in);
#undef INS
#undef ROW
    return SQLITE_OK;
}

static int store_summary(struct mks_store *st, const mks_envelope *env, uint64_t now,
                         uint64_t *seq_p, char *err, size_t errlen)
{
    const Mkscope__V1__EpochSummary *s = env->epoch_summary;
    if (sqlite3_exec(st->db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK)
        return db_fail(st, err, errlen, "begin");
    int rc = ensure_rank(st, env, now);
    if (rc != SQLITE_DONE)
        goto fail;
    rc = exec_stmt(st,
                   "INSERT OR IGNORE INTO epochs(job, rank, incarnation, seq, epoch, t_begin_host,"
                   " t_end_host, t_begin_dev, t_end_dev, detail_tier, sample_shift,"
                   " lost_summaries, waits_dropped, received_ns) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                   "tiuuuuuuuiiuuu", env->job, (int64_t)env->rank, env->incarnation, env->seq,
                   s->epoch, s->t_begin_host_ns, s->t_end_host_ns, s->t_begin_dev_ns,
                   s->t_end_dev_ns, (int64_t)s->detail_tier, (int64_t)s->sample_shift,
                   s->lost_summaries, s->waits_dropped, now);
    if (rc != SQLITE_DONE)
        goto fail;
    if (sqlite3_changes(st->db) == 0) {
        /* A replay of a summary we hold: count it, store nothing. */
        rc = exec_stmt(st, "UPDATE ranks SET duplicates = duplicates + 1 WHERE job=? AND rank=?",
                       "ti", env->job, (int64_t)env->rank);
    } else {
        int64_t eid = sqlite3_last_insert_rowid(st->db);
        if ((rc = store_summary_rows(st, eid, s)) != SQLITE_OK)
            goto fail;
        rc = exec_stmt(st,
                       "UPDATE ranks SET summaries = summaries + 1,"
                       " last_epoch = CASE WHEN incarnation = ? THEN ? ELSE last_epoch END,"
                       " lost_summaries = lost_summaries + ? WHERE job=? AND rank=?",
                       "uuuti", env->incarnation, s->epoch, s->lost_summaries, env->job,
                       (int64_t)env->rank);
    }
    if (rc != SQLITE_DONE)
        goto fail;
    if (query_u64(st, seq_p,
                  "SELECT COALESCE(MAX(seq), 0) FROM epochs WHERE job=? AND rank=? AND"
                  " incarnation=?",
                  "tiu", env->job, (int64_t)env->rank, env->incarnation) != SQLITE_DONE)
        goto fail;
    /* A summary of an earlier incarnation (an agent sending what a crashed
     * one spooled) says nothing of the current agent's progress. */
    exec_stmt(st, "UPDATE ranks SET acked_seq=? WHERE job=? AND rank=? AND incarnation=?", "utiu",
              *seq_p, env->job, (int64_t)env->rank, env->incarnation);
    if (sqlite3_exec(st->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
        goto fail;
    if (++st->since_retain >= RETAIN_EVERY) {
        st->since_retain = 0;
        mks_store_retain(st, now);
    }
    return 0;
fail:
    fail(err, errlen, -EIO, "store: summary %llu of rank %u: %s", (unsigned long long)env->seq,
         env->rank, sqlite3_errmsg(st->db));
    sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
    return -EIO;
}

static int store_command_reply(struct mks_store *st, const mks_envelope *env, uint64_t now,
                               char *err, size_t errlen)
{
    const Mkscope__V1__CommandReply *r = env->command_reply;
    if (ensure_rank(st, env, now) != SQLITE_DONE ||
        exec_stmt(st,
                  "UPDATE commands SET replied_ns=?, ok=?, error=?, verifier_log=?, cost=?,"
                  " n_insns=?, prog_gen=? WHERE id=? AND job=? AND rank=?",
                  "uittuiuuti", now, (int64_t)r->ok, r->error, r->verifier_log, r->cost,
                  (int64_t)r->n_insns, r->prog_gen, r->id, env->job,
                  (int64_t)env->rank) != SQLITE_DONE)
        return db_fail(st, err, errlen, "command reply");
    return 0;
}

static int store_raw(struct mks_store *st, const mks_envelope *env, uint64_t now, char *err,
                     size_t errlen)
{
    const Mkscope__V1__RawEventBatch *b = env->raw_event_batch;
    if (sqlite3_exec(st->db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK)
        return db_fail(st, err, errlen, "begin");
    struct ins in = {0};
    int rc = ins_prepare(st, &in,
                         "INSERT INTO raw_events(job, rank, escalation_id, event, flags, worker, sm,"
                         " class, task_gen, req_gen, step, dep_class, tile_x, tile_y, dep_event,"
                         " comm_gen, peer_rank, queue_depth, t_now, t_ready, t_start, value,"
                         " received_ns) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
    for (size_t i = 0; rc == SQLITE_OK && i < b->n_events; i++) {
        const Mkscope__V1__RawEvent *e = b->events[i];
        rc = ins_row(&in, "tiuiiiiiuuiiiiuuiiuuuuu", env->job, (int64_t)env->rank,
                     b->escalation_id, (int64_t)e->event, (int64_t)e->flags, (int64_t)e->worker,
                     (int64_t)e->sm, (int64_t)e->task_class, e->task_gen, e->req_gen,
                     (int64_t)e->step, (int64_t)e->dep_class, (int64_t)e->tile_x,
                     (int64_t)e->tile_y, e->dep_event, e->comm_gen, (int64_t)e->peer_rank,
                     (int64_t)e->queue_depth, e->t_now, e->t_ready, e->t_start, e->value, now);
    }
    ins_done(&in);
    if (rc == SQLITE_OK &&
        exec_stmt(st, "INSERT INTO raw_batches VALUES(?,?,?,?,?,?,?)", "tiuuuiu", env->job,
                  (int64_t)env->rank, b->escalation_id, (uint64_t)b->n_events, b->dropped,
                  (int64_t)b->last, now) != SQLITE_DONE)
        rc = SQLITE_ERROR;
    if (rc != SQLITE_OK || sqlite3_exec(st->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
        fail(err, errlen, -EIO, "store: raw events of rank %u: %s", env->rank,
             sqlite3_errmsg(st->db));
        sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
        return -EIO;
    }
    /* Escalations arrive without summaries: the raw cap is applied here,
     * once a quarter of it has arrived since the last time (a bound within
     * 25% without a delete per batch). */
    st->raw_since_trim += b->n_events;
    if (st->raw_since_trim >= st->max_raw_events / 4 + 1)
        trim_raw(st);
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
    switch (env->body_case) {
    case MKSCOPE__V1__ENVELOPE__BODY_REGISTER:
        return store_register(st, env, now_ns, seq_p, err, errlen);
    case MKSCOPE__V1__ENVELOPE__BODY_HEARTBEAT:
        return store_heartbeat(st, env, now_ns, err, errlen);
    case MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY:
        return store_summary(st, env, now_ns, seq_p, err, errlen);
    case MKSCOPE__V1__ENVELOPE__BODY_COMMAND_REPLY:
        return store_command_reply(st, env, now_ns, err, errlen);
    case MKSCOPE__V1__ENVELOPE__BODY_RAW_EVENT_BATCH:
        return store_raw(st, env, now_ns, err, errlen);
    default:
        return fail(err, errlen, -EPROTO, "store: %s is not something an agent sends",
                    mks_wire_body_name(env->body_case));
    }
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
    int rc = exec_stmt(st,
                       "DELETE FROM epochs WHERE id IN (SELECT id FROM (SELECT id, ROW_NUMBER()"
                       " OVER (PARTITION BY job, rank ORDER BY id DESC) AS rn FROM epochs)"
                       " WHERE rn > ?)",
                       "u", st->max_epochs);
    if (rc == SQLITE_DONE && st->max_age_ns && now_ns > st->max_age_ns)
        rc = exec_stmt(st, "DELETE FROM epochs WHERE received_ns < ?", "u",
                       now_ns - st->max_age_ns);
    if (rc == SQLITE_DONE)
        rc = trim_raw(st);
    return rc == SQLITE_DONE ? 0 : -EIO;
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

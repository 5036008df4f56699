/*
 * Answers to the mkscope CLI's requests, as JSON documents built from the
 * store.  Each verb is one function; the CLI renders the JSON as text or
 * prints it as is (-f json), so the collector decides what an answer holds
 * and the CLI only how it looks.
 *
 * Request arguments: positional ones first (a query text, a trigger
 * expression), then named ones as "--name=value" (job, step, ranks).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "collector.h"
#include "lost.h"
#include "serve.h"

/* ---- bounded work ------------------------------------------------------------ */

/* Every this many virtual machine instructions SQLite asks whether to go
 * on: a few microseconds of work, so the limit is kept to well under a
 * millisecond while the check itself costs nothing measurable. */
#define PROGRESS_OPS 10000

static int limit_progress(void *arg)
{
    struct mks_serve_limit *l = arg;
    if (mks_mono_ns() >= l->deadline_mono_ns)
        l->hit = MKS_SERVE_HIT_TIME;
    else if (sqlite3_memory_used() - l->mem_base > MKS_SERVE_MEM_BYTES)
        l->hit = MKS_SERVE_HIT_MEM;
    return l->hit != 0;
}

void mks_serve_limit_begin(sqlite3 *db, struct mks_serve_limit *l, uint64_t limit_ns)
{
    l->limit_ns = limit_ns ? limit_ns : MKS_SERVE_LIMIT_NS;
    l->deadline_mono_ns = mks_mono_ns() + l->limit_ns;
    l->mem_base = sqlite3_memory_used();
    l->hit = 0;
    sqlite3_progress_handler(db, PROGRESS_OPS, limit_progress, l);
}

void mks_serve_limit_end(sqlite3 *db)
{
    sqlite3_progress_handler(db, 0, NULL, NULL);
}

int mks_serve_limit_check(const struct mks_serve_limit *l, const char *what, char *err,
                          size_t errlen)
{
    if (l->hit == MKS_SERVE_HIT_TIME)
        return mks_serve_fail(err, errlen, MKS_EXIT_ERROR,
                              "%s: stopped after %.1f s, the collector's limit for one request"
                              " (--request-timeout): narrow it (LIMIT, a WHERE on step or time;"
                              " a recursive CTE needs a condition that ends it)",
                              what, (double)l->limit_ns / 1e9);
    if (l->hit == MKS_SERVE_HIT_MEM)
        return mks_serve_fail(err, errlen, MKS_EXIT_ERROR,
                              "%s: stopped after it took %lld MiB of memory, the collector's limit"
                              " for one request: narrow it (LIMIT, fewer columns, no DISTINCT"
                              " over everything)",
                              what, (long long)(MKS_SERVE_MEM_BYTES >> 20));
    return 0;
}

int mks_serve_fail(char *err, size_t errlen, int code, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
        /* An error is one line, also when it quotes the request. */
        mks_wire_one_line(err);
    }
    return code;
}

const char *mks_serve_arg(const Mkscope__V1__CliRequest *req, const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < req->n_args; i++) {
        const char *a = req->args[i];
        if (!strncmp(a, "--", 2) && !strncmp(a + 2, name, n) && a[2 + n] == '=')
            return a + 3 + n;
    }
    return NULL;
}

const char *mks_serve_pos(const Mkscope__V1__CliRequest *req, size_t idx)
{
    size_t k = 0;
    for (size_t i = 0; i < req->n_args; i++) {
        if (!strncmp(req->args[i], "--", 2))
            continue;
        if (k++ == idx)
            return req->args[i];
    }
    return NULL;
}

/* "a, b, c" from the first column of sql's rows (one text parameter, ?1 =
 * arg1 when not NULL), at most max names, into buf. */
void mks_serve_list(const struct mks_serve_env *env, const char *sql, const char *arg1,
                    size_t max, char *buf, size_t len)
{
    sqlite3_stmt *s;
    size_t n = 0, used = 0;
    buf[0] = 0;
    if (sqlite3_prepare_v2(mks_store_db(env->st), sql, -1, &s, NULL) != SQLITE_OK)
        return;
    if (arg1)
        sqlite3_bind_text(s, 1, arg1, -1, SQLITE_TRANSIENT);
    while (sqlite3_step(s) == SQLITE_ROW && used + 8 < len) {
        const char *v = (const char *)sqlite3_column_text(s, 0);
        if (!v)
            continue;
        if (n++ == max) {
            snprintf(buf + used, len - used, ", ...");
            break;
        }
        int w = snprintf(buf + used, len - used, "%s%s", n > 1 ? ", " : "", v);
        used = w > 0 && (size_t)w < len - used ? used + (size_t)w : len - 1;
    }
    sqlite3_finalize(s);
}

/* The job a request is about: --job=, else the one heard from last.  A
 * job the store does not know is "nothing stored", with the jobs it does. */
int mks_serve_job(const struct mks_serve_env *env, const Mkscope__V1__CliRequest *req, char *job,
                  size_t len, char *err, size_t errlen)
{
    const char *j = mks_serve_arg(req, "job");
    if (j) {
        if (!mks_wire_job_valid(j))
            return mks_serve_fail(err, errlen, MKS_EXIT_USAGE,
                                  "--job '%.64s': a job name is " MKS_WIRE_JOB_GRAMMAR, j);
        snprintf(job, len, "%s", j);
        sqlite3_stmt *s;
        int known = 1;
        if (sqlite3_prepare_v2(mks_store_db(env->st), "SELECT 1 FROM ranks WHERE job = ? LIMIT 1",
                               -1, &s, NULL) == SQLITE_OK) {
            sqlite3_bind_text(s, 1, j, -1, SQLITE_TRANSIENT);
            known = sqlite3_step(s) == SQLITE_ROW;
            sqlite3_finalize(s);
        }
        if (!known) {
            char jobs[512];
            mks_serve_list(env, "SELECT DISTINCT job FROM ranks ORDER BY job", NULL, 20, jobs,
                           sizeof(jobs));
            if (!*jobs)
                return mks_serve_fail(err, errlen, MKS_EXIT_NODATA,
                                      "no job '%s': no agent has registered yet", j);
            return mks_serve_fail(err, errlen, MKS_EXIT_NODATA,
                                  "no job '%s' in the store; its jobs: %s", j, jobs);
        }
        return 0;
    }
    mks_store_latest_job(env->st, job, len);
    if (!*job)
        return mks_serve_fail(err, errlen, MKS_EXIT_NODATA,
                              "no agent has registered yet: start mkscope-agent next to each rank");
    return 0;
}

int mks_serve_uint(const char *s, uint64_t min, uint64_t max, uint32_t *v_p)
{
    uint64_t v = 0;
    if (!s || !*s)
        return -EINVAL;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9' || p - s >= 19)
            return -EINVAL;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    if (v < min || v > max || v > UINT32_MAX)
        return -ERANGE;
    *v_p = (uint32_t)v;
    return 0;
}

/* An integer a JSON number carries exactly (jq and JavaScript read numbers
 * as doubles: 53 bits); 64-bit ids, generations and ns timestamps beyond
 * that go as decimal strings, so that no reader gets a neighbouring value. */
json_t *mks_serve_int(int64_t v)
{
    if (v > (1ll << 53) || v < -(1ll << 53)) {
        char b[24];
        snprintf(b, sizeof(b), "%lld", (long long)v);
        return json_string(b);
    }
    return json_integer(v);
}

json_t *mks_serve_column(sqlite3_stmt *s, int i)
{
    switch (sqlite3_column_type(s, i)) {
    case SQLITE_INTEGER: return mks_serve_int(sqlite3_column_int64(s, i));
    case SQLITE_FLOAT: return json_real(sqlite3_column_double(s, i));
    case SQLITE_TEXT: return json_string((const char *)sqlite3_column_text(s, i));
    case SQLITE_BLOB: {
        /* Blobs as hex: histograms and map keys are small. */
        int n = sqlite3_column_bytes(s, i);
        const uint8_t *p = sqlite3_column_blob(s, i);
        static const char digits[] = "0123456789abcdef";
        char *hex = malloc((size_t)n * 2 + 1);
        if (!hex)
            return json_null();
        for (int k = 0; k < n; k++) {
            hex[2 * k] = digits[p[k] >> 4];
            hex[2 * k + 1] = digits[p[k] & 15];
        }
        hex[2 * n] = 0;
        json_t *v = json_string(hex);
        free(hex);
        return v;
    }
    default: return json_null();
    }
}

/* Rows of a prepared statement as an array of objects; finalizes s. */
int mks_serve_rows(sqlite3_stmt *s, size_t max_rows, json_t **rows_p, bool *truncated_p,
                   char *err, size_t errlen)
{
    json_t *rows = json_array();
    int rc;
    size_t n = 0;
    bool trunc = false;
    size_t bytes = 0;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (n++ >= max_rows || bytes > MKS_SERVE_ANSWER_BYTES) {
            trunc = true;
            break;
        }
        json_t *row = json_object();
        for (int i = 0; i < sqlite3_column_count(s); i++) {
            /* What the value takes in the answer, about (blobs as hex). */
            int t = sqlite3_column_type(s, i);
            size_t vb = (size_t)sqlite3_column_bytes(s, i);
            bytes += strlen(sqlite3_column_name(s, i)) + 8 + (t == SQLITE_BLOB ? 2 * vb : t == SQLITE_TEXT ? vb : 24);
            json_object_set_new(row, sqlite3_column_name(s, i), mks_serve_column(s, i));
        }
        json_array_append_new(rows, row);
    }
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
        mks_serve_fail(err, errlen, MKS_EXIT_ERROR, "query failed: %s",
                       sqlite3_errmsg(sqlite3_db_handle(s)));
        sqlite3_finalize(s);
        json_decref(rows);
        return MKS_EXIT_ERROR;
    }
    sqlite3_finalize(s);
    *rows_p = rows;
    if (truncated_p)
        *truncated_p = trunc;
    return 0;
}

static int prepare(const struct mks_serve_env *env, const char *sql, sqlite3_stmt **s, char *err,
                   size_t errlen)
{
    if (sqlite3_prepare_v2(mks_store_db(env->st), sql, -1, s, NULL) != SQLITE_OK)
        return mks_serve_fail(err, errlen, MKS_EXIT_ERROR, "store: %s",
                              sqlite3_errmsg(mks_store_db(env->st)));
    return 0;
}

/* ---- status / ranks ------------------------------------------------------------ */

static int serve_ranks(const struct mks_serve_env *env, const Mkscope__V1__CliRequest *req,
                       bool detail, json_t **out, char *err, size_t errlen)
{
    char job[MKS_WIRE_MAX_JOB + 1];
    int rc = mks_serve_job(env, req, job, sizeof(job), err, errlen);
    if (rc)
        return rc;
    sqlite3_stmt *s;
    /* Coverage (eligible counts the events of summaries the agent
     * dropped, undelivered says how many) and tasks (task_end counts) of
     * every summary stored for the rank, summed by ingest: a long job's
     * status reads one row a rank, not its every epoch. */
    rc = prepare(env,
                 "SELECT r.rank, r.n_ranks, r.host, r.pid, r.gpu_uuid, r.agent_version,"
                 " r.n_workers, r.epoch_ns, r.incarnation, r.registered_ns, r.last_seen_ns,"
                 " r.last_heartbeat_ns, r.app_alive, r.summaries, r.duplicates,"
                 " r.lost_summaries, r.last_epoch, r.last_seq, r.acked_seq, r.unacked,"
                 " r.heartbeat_ns, r.cov_eligible, r.cov_ran, r.cov_throttled, r.cov_lost,"
                 " r.tasks_total, r.cov_undelivered FROM ranks r WHERE r.job = ?1"
                 " ORDER BY r.rank",
                 &s, err, errlen);
    if (rc)
        return rc;
    sqlite3_bind_text(s, 1, job, -1, SQLITE_TRANSIENT);
    json_t *ranks = json_array();
    uint64_t total_epochs = 0, elig = 0, ran = 0, n_ranks = 0;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        json_t *r = json_object();
        uint64_t hb = (uint64_t)sqlite3_column_int64(s, 11);
        uint64_t epoch_ns = (uint64_t)sqlite3_column_int64(s, 7);
        uint64_t seen = (uint64_t)sqlite3_column_int64(s, 10);
        uint64_t e = (uint64_t)sqlite3_column_int64(s, 21), rn = (uint64_t)sqlite3_column_int64(s, 22);
        double age = seen && env->now_ns > seen ? (double)(env->now_ns - seen) / 1e9 : 0;
        uint64_t hb_ns = (uint64_t)sqlite3_column_int64(s, 20);
        /* An agent is "up" while it was heard from within two heartbeats
         * (lost.h); the rank's state adds what the agent said of it. */
        double up_window = (double)mks_rank_silent_after(hb_ns, epoch_ns) / 1e9;
        const char *state = mks_rank_state(sqlite3_column_type(s, 12) == SQLITE_NULL ||
                                               sqlite3_column_int(s, 12),
                                           seen, hb_ns, epoch_ns, env->now_ns);
        json_object_set_new(r, "rank", json_integer(sqlite3_column_int64(s, 0)));
        json_object_set_new(r, "host", mks_serve_column(s, 2));
        json_object_set_new(r, "pid", mks_serve_column(s, 3));
        json_object_set_new(r, "agent", json_string(seen && age <= up_window ? "up" : "down"));
        json_object_set_new(r, "state", json_string(state));
        json_object_set_new(r, "last_seen_s", json_real(age));
        json_object_set_new(r, "last_heartbeat_s",
                            hb ? json_real((double)(env->now_ns - hb) / 1e9) : json_null());
        json_object_set_new(r, "app_alive", json_boolean(sqlite3_column_int(s, 12)));
        json_object_set_new(r, "epochs", json_integer(sqlite3_column_int64(s, 13)));
        json_object_set_new(r, "last_epoch", mks_serve_column(s, 16));
        json_object_set_new(r, "lost_summaries", json_integer(sqlite3_column_int64(s, 15)));
        json_object_set_new(r, "tasks", json_integer(sqlite3_column_int64(s, 25)));
        json_object_set_new(r, "coverage",
                            json_pack("{s:I, s:I, s:I, s:I, s:I, s:o}", "eligible",
                                      (json_int_t)e, "ran", (json_int_t)rn, "throttled",
                                      (json_int_t)sqlite3_column_int64(s, 23), "lost",
                                      (json_int_t)sqlite3_column_int64(s, 24), "undelivered",
                                      (json_int_t)sqlite3_column_int64(s, 26), "ratio",
                                      e ? json_real((double)rn / (double)e) : json_null()));
        if (detail) {
            json_object_set_new(r, "gpu_uuid", mks_serve_column(s, 4));
            json_object_set_new(r, "agent_version", mks_serve_column(s, 5));
            json_object_set_new(r, "n_workers", mks_serve_column(s, 6));
            json_object_set_new(r, "epoch_ns", mks_serve_column(s, 7));
            json_object_set_new(r, "incarnation", mks_serve_column(s, 8));
            json_object_set_new(r, "duplicates", mks_serve_column(s, 14));
            json_object_set_new(r, "last_seq", mks_serve_column(s, 17));
            json_object_set_new(r, "acked_seq", mks_serve_column(s, 18));
            json_object_set_new(r, "unacked", mks_serve_column(s, 19));
        }
        json_array_append_new(ranks, r);
        total_epochs += (uint64_t)sqlite3_column_int64(s, 13);
        elig = elig + e < elig ? UINT64_MAX : elig + e;
        ran = ran + rn < ran ? UINT64_MAX : ran + rn;
        if ((uint64_t)sqlite3_column_int64(s, 1) > n_ranks)
            n_ranks = (uint64_t)sqlite3_column_int64(s, 1);
    }
    /* A failed read is an error, never an empty job. */
    if (rc != SQLITE_DONE) {
        mks_serve_fail(err, errlen, MKS_EXIT_ERROR, "store: reading the ranks of job %s: %s", job,
                       sqlite3_errmsg(sqlite3_db_handle(s)));
        sqlite3_finalize(s);
        json_decref(ranks);
        return MKS_EXIT_ERROR;
    }
    sqlite3_finalize(s);
    if (!json_array_size(ranks)) {
        json_decref(ranks);
        return mks_serve_fail(err, errlen, MKS_EXIT_NODATA,
                              "job %s: no agent has registered (is the job name right? mkscope"
                              " status without --job shows the latest job)",
                              job);
    }
    *out = json_pack("{s:s, s:I, s:I, s:o, s:o}", "job", job, "n_ranks", (json_int_t)n_ranks,
                     "epochs", (json_int_t)total_epochs, "coverage",
                     elig ? json_real((double)ran / (double)elig) : json_null(), "ranks", ranks);
    return 0;
}

/* ---- raw SQL --------------------------------------------------------------------- */

#define MAX_ROWS 100000

/* What raw SQL may do: read the store's tables and views and call
 * functions.  No ATTACH (it would open or create any file the collector
 * can reach), no pragma that sets anything, no extension loading; the
 * connection is read-only as well, this names the reason. */
struct sql_guard {
    char why[160];
};

static int pragma_readable(const char *name, const char *arg)
{
    /* Pragmas that only report, with a table or index name as argument. */
    static const char *const with_arg[] = {"table_info",  "table_xinfo", "table_list",
                                           "index_list",  "index_info",  "index_xinfo",
                                           "foreign_key_list"};
    /* Pragmas that set something when given a value: readable without. */
    static const char *const bare[] = {"page_count",    "page_size",      "freelist_count",
                                       "user_version",  "schema_version", "data_version",
                                       "journal_mode",  "compile_options", "function_list",
                                       "collation_list", "module_list",   "pragma_list",
                                       "encoding"};
    for (size_t i = 0; i < sizeof(with_arg) / sizeof(with_arg[0]); i++)
        if (!strcasecmp(name, with_arg[i]))
            return 1;
    for (size_t i = 0; i < sizeof(bare) / sizeof(bare[0]); i++)
        if (!strcasecmp(name, bare[i]))
            return arg == NULL;
    return 0;
}

static int sql_authorize(void *arg, int action, const char *a1, const char *a2, const char *db,
                         const char *trigger)
{
    struct sql_guard *g = arg;
    (void)db, (void)trigger;
    switch (action) {
    case SQLITE_SELECT:
    case SQLITE_READ:
    case SQLITE_RECURSIVE: /* bounded by the request's work limit */
        return SQLITE_OK;
    case SQLITE_FUNCTION:
        if (a2 && (!strcasecmp(a2, "load_extension") || !strcasecmp(a2, "fts3_tokenizer"))) {
            snprintf(g->why, sizeof(g->why), "%s() is not allowed", a2);
            return SQLITE_DENY;
        }
        return SQLITE_OK;
    case SQLITE_PRAGMA:
        if (a1 && pragma_readable(a1, a2))
            return SQLITE_OK;
        snprintf(g->why, sizeof(g->why), "PRAGMA %s%s%s is not allowed (only pragmas that report)",
                 a1 ? a1 : "?", a2 ? " = " : "", a2 ? a2 : "");
        return SQLITE_DENY;
    case SQLITE_ATTACH:
    case SQLITE_DETACH:
        snprintf(g->why, sizeof(g->why), "%s is not allowed (the store only)",
                 action == SQLITE_ATTACH ? "ATTACH" : "DETACH");
        return SQLITE_DENY;
    case SQLITE_UPDATE:
        if (a1 && !strcmp(a1, "sqlite_master")) {
            /* What a table-valued pragma (pragma_journal_mode('off')) does
             * first: those may set, so none is allowed. */
            snprintf(g->why, sizeof(g->why),
                     "pragma functions are not allowed: use PRAGMA table_info(T) and the like");
            return SQLITE_DENY;
        }
        /* fall through */
    default:
        snprintf(g->why, sizeof(g->why), "only read-only statements are allowed (SELECT, WITH)");
        return SQLITE_DENY;
    }
}

static int serve_sql(const struct mks_serve_env *env, const Mkscope__V1__CliRequest *req,
                     json_t **out, char *err, size_t errlen)
{
    const char *sql = mks_serve_pos(req, 0);
    if (!sql || !*sql)
        return mks_serve_fail(err, errlen, MKS_EXIT_USAGE, "sql: give a SELECT statement");
    sqlite3_stmt *s = NULL;
    const char *tail = NULL;
    sqlite3 *db = mks_store_db(env->st);
    struct sql_guard g = {.why = ""};
    /* No database but the store, whatever the statement says. */
    int attached = sqlite3_limit(db, SQLITE_LIMIT_ATTACHED, 0);
    sqlite3_set_authorizer(db, sql_authorize, &g);
    int prc = sqlite3_prepare_v2(db, sql, -1, &s, &tail);
    sqlite3_set_authorizer(db, NULL, NULL);
    if (prc != SQLITE_OK) {
        int rc = mks_serve_fail(err, errlen, MKS_EXIT_USAGE, "sql: %s",
                                g.why[0] ? g.why : sqlite3_errmsg(db));
        sqlite3_limit(db, SQLITE_LIMIT_ATTACHED, attached);
        return rc;
    }
    sqlite3_limit(db, SQLITE_LIMIT_ATTACHED, attached);
    if (!s)
        return mks_serve_fail(err, errlen, MKS_EXIT_USAGE, "sql: empty statement");
    while (tail && (*tail == ' ' || *tail == '\n' || *tail == '\t' || *tail == ';'))
        tail++;
    if (tail && *tail) {
        sqlite3_finalize(s);
        return mks_serve_fail(err, errlen, MKS_EXIT_USAGE, "sql: one statement at a time");
    }
    /* Experts may read anything, but the store is not theirs to change. */
    if (!sqlite3_stmt_readonly(s)) {
        sqlite3_finalize(s);
        return mks_serve_fail(err, errlen, MKS_EXIT_USAGE,
                              "sql: only read-only statements are allowed (SELECT, WITH)");
    }
    json_t *rows;
    bool trunc;
    struct mks_serve_limit lim;
    /* No one value larger than an answer may be: SQLite refuses to make
     * it (randomblob(1e9) took 1 GB and minutes of this thread), where the
     * progress handler would only look after it was made. */
    int maxlen = sqlite3_limit(db, SQLITE_LIMIT_LENGTH, MKS_SERVE_VALUE_BYTES);
    mks_serve_limit_begin(db, &lim, env->limit_ns);
    int rc = mks_serve_rows(s, MAX_ROWS, &rows, &trunc, err, errlen);
    mks_serve_limit_end(db);
    sqlite3_limit(db, SQLITE_LIMIT_LENGTH, maxlen);
    if (rc)
        return mks_serve_limit_check(&lim, "sql", err, errlen) ? MKS_EXIT_ERROR : rc;
    *out = json_pack("{s:o, s:b}", "rows", rows, "truncated", trunc);
    return 0;
}

/* ---- programs / commands ------------------------------------------------------------ */

static int serve_programs(const struct mks_serve_env *env, const Mkscope__V1__CliRequest *req,
                          json_t **out, char *err, size_t errlen)
{
    char job[MKS_WIRE_MAX_JOB + 1];
    int rc = mks_serve_job(env, req, job, sizeof(job), err, errlen);
    if (rc)
        return rc;
    sqlite3_stmt *s;
    if ((rc = prepare(env,
                      /* The hook by its name, as --hook takes it. */
                      "SELECT rank, name, CASE hook WHEN 0 THEN 'task_ready' WHEN 1 THEN"
                      " 'task_assign' WHEN 2 THEN 'task_start' WHEN 3 THEN 'task_end' WHEN 4"
                      " THEN 'dep_wait_begin' WHEN 5 THEN 'dep_wait_end' WHEN 6 THEN"
                      " 'dep_release' WHEN 7 THEN 'comm_begin' WHEN 8 THEN 'comm_end' WHEN 9"
                      " THEN 'gen_advance' WHEN 10 THEN 'queue_pressure' ELSE 'hook' || hook"
                      " END AS hook, prog_gen, cost, CASE prog_type WHEN 1 THEN 'observe' WHEN 2"
                      " THEN 'control' ELSE prog_type END AS type FROM programs WHERE job=?"
                      " ORDER BY name, rank, programs.hook",
                      &s, err, errlen)))
        return rc;
    sqlite3_bind_text(s, 1, job, -1, SQLITE_TRANSIENT);
    json_t *rows;
    if ((rc = mks_serve_rows(s, MAX_ROWS, &rows, NULL, err, errlen)))
        return rc;
    *out = json_pack("{s:s, s:o}", "job", job, "programs", rows);
    return 0;
}

/* Every job of the store, the latest heard from first. */
static int serve_jobs(const struct mks_serve_env *env, json_t **out, char *err, size_t errlen)
{
    sqlite3_stmt *s;
    int rc;
    if ((rc = prepare(env,
                      "SELECT job, COUNT(*) AS ranks, SUM(last_seen_ns > ?1 - 2 * MAX(COALESCE("
                      "epoch_ns, 0), 1000000000)) AS agents_up, SUM(summaries) AS summaries,"
                      " MIN(registered_ns) AS first_seen_ns, MAX(last_seen_ns) AS last_seen_ns"
                      " FROM ranks GROUP BY job ORDER BY MAX(last_seen_ns) DESC",
                      &s, err, errlen)))
        return rc;
    sqlite3_bind_int64(s, 1, (int64_t)env->now_ns);
    json_t *rows;
    if ((rc = mks_serve_rows(s, MAX_ROWS, &rows, NULL, err, errlen)))
        return rc;
    *out = json_pack("{s:o}", "jobs", rows);
    return 0;
}

static int serve_metrics_text(const struct mks_serve_env *env, json_t **out, char *err,
                              size_t errlen)
{
    char *text = mks_metrics_render(env);
    if (!text)
        return mks_serve_fail(err, errlen, MKS_EXIT_ERROR, "metrics: out of memory");
    *out = json_pack("{s:s}", "text", text);
    free(text);
    return 0;
}

/* ---- dispatch -------------------------------------------------------------------------- */

/* The diagnosis of slow steps, with the ranks that were lost and the peers
 * they stall ("lost_ranks", lost.h) beside its groups. */
static int serve_diagnose(const struct mks_serve_env *env, const Mkscope__V1__CliRequest *req,
                          json_t **out, char *err, size_t errlen)
{
    int rc = mks_serve_diagnose(env, req, out, err, errlen);
    char job[MKS_WIRE_MAX_JOB + 1];
    json_t *lost = NULL;
    if (rc || mks_serve_job(env, req, job, sizeof(job), err, errlen))
        return rc;
    if (mks_lost_ranks(env->st, job, env->now_ns, &lost, err, errlen)) {
        json_decref(*out);
        *out = NULL;
        return MKS_EXIT_ERROR;
    }
    json_object_set_new(*out, "lost_ranks", lost);
    return 0;
}

int mks_serve_cli(const struct mks_serve_env *env, const Mkscope__V1__CliRequest *req,
                  json_t **out, char *err, size_t errlen)
{
    const char *v = req->verb;
    *out = NULL;
    if (!strcmp(v, "status"))
        return serve_ranks(env, req, false, out, err, errlen);
    if (!strcmp(v, "ranks"))
        return serve_ranks(env, req, true, out, err, errlen);
    if (!strcmp(v, "sql"))
        return serve_sql(env, req, out, err, errlen);
    if (!strcmp(v, "query"))
        return mks_serve_query(env, req, out, err, errlen);
    if (!strcmp(v, "programs"))
        return serve_programs(env, req, out, err, errlen);
    if (!strcmp(v, "metrics"))
        return serve_metrics_text(env, out, err, errlen);
    if (!strcmp(v, "jobs"))
        return serve_jobs(env, out, err, errlen);
    if (!strcmp(v, "diagnose") || !strcmp(v, "waitchain"))
        return serve_diagnose(env, req, out, err, errlen);
    if (!strcmp(v, "attach") || !strcmp(v, "detach") || !strcmp(v, "commands"))
        return mks_serve_command(env, req, out, err, errlen);
    if (!strcmp(v, "trace"))
        return mks_serve_trace(env, req, out, err, errlen);
    if (!strcmp(v, "trace-list"))
        return mks_serve_trace_list(env, req, out, err, errlen);
    if (!strncmp(v, "trigger", 7))
        return mks_serve_trigger(env, req, out, err, errlen);
    if (!strcmp(v, "probe") || !strcmp(v, "probe-read") || !strcmp(v, "probe-stop"))
        return mks_serve_probe(env, req, out, err, errlen);
    if (!strcmp(v, "maps"))
        return mks_serve_maps(env, req, out, err, errlen);
    return mks_serve_fail(err, errlen, MKS_EXIT_USAGE,
                          "unknown request '%s': this collector is older than the CLI?", v);
}

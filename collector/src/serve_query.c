/*
 * The "query" verb: parse the query language, plan it to SQL on the store,
 * run it, and attach the coverage of the epochs it read.
 *
 * A query that names something the job does not have (a class) is a usage
 * error pointing at the name, with the names the job has.  A query that
 * reads nothing says why, with exit status 4: the job has none of what the
 * query reads (and what reports it), or it has some and the filter matched
 * none of it.
 */
#include <stdio.h>
#include <string.h>

#include "mkscope/query.h"
#include "serve.h"

int mks_serve_check_class(const char *name, int pos, int len, void *arg)
{
    struct mks_serve_class_check *c = arg;
    sqlite3_stmt *s;
    int known = 1;
    if (sqlite3_prepare_v2(mks_store_db(c->env->st),
                           "SELECT 1 FROM task_classes WHERE job = ? AND name = ? LIMIT 1", -1, &s,
                           NULL) == SQLITE_OK) {
        sqlite3_bind_text(s, 1, c->job, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(s, 2, name, -1, SQLITE_TRANSIENT);
        known = sqlite3_step(s) == SQLITE_ROW;
        sqlite3_finalize(s);
    }
    if (known)
        return 0;
    char names[300];
    mks_serve_list(c->env, "SELECT DISTINCT name FROM task_classes WHERE job = ?1 ORDER BY name",
                   c->job, 32, names, sizeof(names));
    c->qe->pos = pos;
    c->qe->len = len > 0 ? len : 1;
    if (*names)
        snprintf(c->qe->msg, sizeof(c->qe->msg), "no task class '%.40s' in job %.30s; it has %.290s",
                 name, c->job, names);
    else
        snprintf(c->qe->msg, sizeof(c->qe->msg),
                 "no task class '%.40s': job %.40s published no task schema", name, c->job);
    return -1;
}

/* What reports each source (plan->source), for an empty job. */
static const char *const source_hint[] = {
    "the agents' latency or count monitor reports tasks",
    "an agent reports a step once the next one began (genprog monitor)",
    "the depwait monitor reports them; single-rank jobs have none",
    "the depwait monitor reports them; a runtime that raises dep_wait only for remote"
    " dependencies has none",
    "the latency monitor reports worker times per step, once the step ended",
};

/* Why a query read nothing: one line in err, exit status 4. */
static int nothing(const struct mks_serve_env *env, const struct mks_sql_plan *plan,
                   const char *job, const char *text, const struct mks_store_rolled *ru,
                   char *err, size_t errlen)
{
    /* Rolled-up epochs keep no step: a step filter finds none of them. */
    char gone[160] = "";
    if (ru && ru->step_hi >= 0)
        snprintf(gone, sizeof(gone),
                 "; steps up to %lld are rolled up per minute (older than the collector's"
                 " --detail-age) and match no step filter",
                 (long long)ru->step_hi);
    else if (ru)
        snprintf(gone, sizeof(gone),
                 "; %lld epochs are rolled up per minute (older than the collector's"
                 " --detail-age) and match no step filter",
                 (long long)ru->epochs);
    sqlite3 *db = mks_store_db(env->st);
    char sql[4096];
    snprintf(sql, sizeof(sql), "SELECT COUNT(*), MIN(step), MAX(step) FROM (%s)",
             plan->source_sql);
    sqlite3_stmt *s;
    long long n = -1, lo = 0, hi = 0;
    int have_steps = 0;
    if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) == SQLITE_OK) {
        mks_sql_plan_bind(plan, s);
        if (sqlite3_step(s) == SQLITE_ROW) {
            n = sqlite3_column_int64(s, 0);
            have_steps = sqlite3_column_type(s, 1) != SQLITE_NULL;
            lo = sqlite3_column_int64(s, 1), hi = sqlite3_column_int64(s, 2);
        }
        sqlite3_finalize(s);
    }
    int src = plan->source >= 0 && plan->source < 5 ? plan->source : 0;
    if (n == 0)
        return mks_serve_fail(err, errlen, MKS_EXIT_NODATA, "no %s stored for job %s yet (%s)",
                              plan->source_name, job, source_hint[src]);
    const char *w = strstr(text, " where ");
    if (have_steps)
        return mks_serve_fail(err, errlen, MKS_EXIT_NODATA,
                              "none of job %s's %lld rows of %s match%s%s%s (they hold steps %lld"
                              " to %lld%s)",
                              job, n, plan->source_name, w ? " 'where" : " the query",
                              w ? w + 6 : "", w ? "'" : "", lo, hi, gone);
    return mks_serve_fail(err, errlen, MKS_EXIT_NODATA,
                          "none of job %s's %lld rows of %s match%s%s%s%s", job, n,
                          plan->source_name, w ? " 'where" : " the query", w ? w + 6 : "",
                          w ? "'" : "", gone);
}

int mks_serve_query(const struct mks_serve_env *env, const Mkscope__V1__CliRequest *req,
                    json_t **out, char *err, size_t errlen)
{
    const char *text = mks_serve_pos(req, 0);
    if (!text || !*text)
        return mks_serve_fail(err, errlen, MKS_EXIT_USAGE,
                              "query: give a query, e.g. 'count(task) by class where rank = 1'");
    /* A syntax error is the user's to fix whether or not data exists yet. */
    struct mks_query *q = NULL;
    struct mks_sql_plan *plan = NULL;
    struct mks_query_error qe;
    if (mks_query_parse(text, &q, &qe)) {
        mks_query_error_format(text, &qe, err, errlen);
        return MKS_EXIT_USAGE;
    }
    char job[MKS_WIRE_MAX_JOB + 1];
    int rc = mks_serve_job(env, req, job, sizeof(job), err, errlen);
    if (rc) {
        mks_query_free(q);
        return rc;
    }
    if (mks_query_plan(q, job, env->now_ns, &plan, &qe)) {
        mks_query_error_format(text, &qe, err, errlen);
        mks_query_free(q);
        return MKS_EXIT_USAGE;
    }
    struct mks_serve_class_check cc = {.env = env, .job = job, .qe = &qe};
    if (mks_query_class_names(q, mks_serve_check_class, &cc)) {
        mks_query_error_format(text, &qe, err, errlen);
        mks_query_free(q);
        mks_sql_plan_free(plan);
        return MKS_EXIT_USAGE;
    }
    mks_query_free(q);
    sqlite3 *db = mks_store_db(env->st);
    mks_query_register_sql(db);
    sqlite3_stmt *s = NULL, *c = NULL;
    if (sqlite3_prepare_v2(db, plan->sql, -1, &s, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, plan->coverage_sql, -1, &c, NULL) != SQLITE_OK) {
        rc = mks_serve_fail(err, errlen, MKS_EXIT_ERROR, "query: planner produced bad SQL: %s",
                            sqlite3_errmsg(db));
        sqlite3_finalize(s);
        mks_sql_plan_free(plan);
        return rc;
    }
    mks_sql_plan_bind(plan, s);
    mks_sql_plan_bind(plan, c);
    json_t *cols = json_array();
    for (int i = 0; i < sqlite3_column_count(s); i++)
        json_array_append_new(cols, json_string(sqlite3_column_name(s, i)));
    json_t *rows;
    bool trunc;
    if ((rc = mks_serve_rows(s, 1000000, &rows, &trunc, err, errlen))) {
        sqlite3_finalize(c);
        json_decref(cols);
        mks_sql_plan_free(plan);
        return rc;
    }
    json_t *cov = json_null();
    json_int_t epochs = 0;
    if (sqlite3_step(c) == SQLITE_ROW) {
        json_int_t elig = sqlite3_column_int64(c, 0), ran = sqlite3_column_int64(c, 1);
        epochs = sqlite3_column_int64(c, 4);
        /* eligible counts the events of summaries agents dropped
         * (undelivered) too: the ratio says what share was observed. */
        cov = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:o}", "epochs", epochs, "eligible",
                        elig, "ran", ran, "throttled", (json_int_t)sqlite3_column_int64(c, 2),
                        "lost", (json_int_t)sqlite3_column_int64(c, 3), "undelivered",
                        (json_int_t)sqlite3_column_int64(c, 5), "lost_summaries",
                        (json_int_t)sqlite3_column_int64(c, 6), "ratio",
                        elig ? json_real((double)ran / (double)elig) : json_null());
    }
    json_int_t rolled_read = 0;
    if (json_is_object(cov))
        rolled_read = sqlite3_column_int64(c, 7);
    sqlite3_finalize(c);
    /* Where the job's oldest epochs are rolled up (older than the detail
     * window), the answer says so: their rows have no step, worker or
     * transfer, so a filter or group on those leaves them out. */
    struct mks_store_rolled ru;
    json_t *rolled = NULL;
    if (!mks_store_rolled(env->st, job, &ru) && ru.epochs > 0)
        rolled = json_pack("{s:I, s:I, s:I, s:o}", "epochs", (json_int_t)ru.epochs, "read",
                           rolled_read, "until_ns", (json_int_t)ru.until_ns, "steps_to",
                           ru.step_hi >= 0 ? json_integer(ru.step_hi) : json_null());
    if (epochs == 0) {
        rc = nothing(env, plan, job, text, rolled ? &ru : NULL, err, errlen);
        json_decref(rolled);
        json_decref(cols);
        json_decref(rows);
        json_decref(cov);
        mks_sql_plan_free(plan);
        return rc;
    }
    *out = json_pack("{s:s, s:s, s:o, s:I, s:o, s:o}", "job", job, "query", text, "columns", cols,
                     "group_columns", (json_int_t)plan->n_group, "rows", rows, "coverage", cov);
    if (rolled)
        json_object_set_new(*out, "rolled_up", rolled);
    mks_sql_plan_free(plan);
    return 0;
}

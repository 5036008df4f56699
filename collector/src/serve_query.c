/*
 * The "query" verb: parse the query language, plan it to SQL on the store,
 * run it, and attach the coverage of the epochs it read.
 */
#include <stdio.h>
#include <string.h>

#include "mkscope/query.h"
#include "serve.h"

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
    if (sqlite3_step(c) == SQLITE_ROW) {
        json_int_t elig = sqlite3_column_int64(c, 0), ran = sqlite3_column_int64(c, 1);
        cov = json_pack("{s:I, s:I, s:I, s:I, s:I, s:o}", "epochs",
                        (json_int_t)sqlite3_column_int64(c, 4), "eligible", elig, "ran", ran,
                        "throttled", (json_int_t)sqlite3_column_int64(c, 2), "lost",
                        (json_int_t)sqlite3_column_int64(c, 3), "ratio",
                        elig ? json_real((double)ran / (double)elig) : json_null());
    }
    sqlite3_finalize(c);
    *out = json_pack("{s:s, s:s, s:o, s:I, s:o, s:o}", "job", job, "query", text, "columns", cols,
                     "group_columns", (json_int_t)plan->n_group, "rows", rows, "coverage", cov);
    mks_sql_plan_free(plan);
    return 0;
}

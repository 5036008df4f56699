/*
 * The mkscope query and predicate language (docs/query.md).
 *
 *   query     := aggregates [by fields] [where predicate] [limit N]
 *   aggregate := count|sum|mean|min|max|p50|p90|p99 '(' metric ')'
 *   metric    := task | run | queue | step | remote_wait | local_wait | idle | busy
 *   predicate := comparisons (= != < <= > >=) joined by and / or / not,
 *                values with units (ns us ms s) or strings ("attn")
 *
 *   count(task) by class where rank = 1
 *   p99(run), mean(queue) by class where step >= 30 and class != "sample"
 *   p99(step) by rank where time > -60s
 *
 * A query plans to one parameterized SQL statement over the collector's
 * store (user values are bound, never pasted into the SQL text).  The same
 * predicate syntax compiles to an eBPF filter program over struct
 * mks_hook_ctx (r0 = 1 keep, 0 drop) for device-side filtering, without clang.
 * Errors carry the byte position and length of the offending token;
 * mks_query_error_format() draws a caret under it.
 */
#ifndef MKSCOPE_QUERY_H
#define MKSCOPE_QUERY_H

#include <stddef.h>
#include <stdint.h>

#include "mkscope/bpf_isa.h"
#include "mkscope/hook_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

struct sqlite3;
struct sqlite3_stmt;

struct mks_query_error {
    int pos; /* byte offset of the offending token in the text */
    int len; /* its length (at least 1) */
    char msg[400];
};

/* "query:1:17: unknown field 'clas'\n  <text>\n  <spaces>^^^^" into buf. */
int mks_query_error_format(const char *text, const struct mks_query_error *e, char *buf,
                           size_t len);

/* ---- predicates ---------------------------------------------------------- */

struct mks_pred;

/* Parse a predicate alone (the "where" part, or a trigger's filter). */
int mks_pred_parse(const char *text, struct mks_pred **pred_p, struct mks_query_error *e);
void mks_pred_free(struct mks_pred *pred); /* accepts NULL */

/* Task class names in predicates ("class = attn") resolve through this:
 * returns the class id or -1 when the name is unknown. */
typedef int64_t (*mks_class_resolver)(const char *name, void *arg);

/* Evaluate the predicate over one hook context in C: 1 keep, 0 drop,
 * negative errno when a class name does not resolve.  The reference the
 * compiled filter must agree with. */
int mks_pred_eval(const struct mks_pred *pred, const struct mks_hook_ctx *ctx,
                  mks_class_resolver resolve, void *arg);

/* Compile to an eBPF filter program: r1 = const struct mks_hook_ctx *,
 * r0 = 1 keep / 0 drop.  Uses only ctx loads, ALU and jumps (no helpers,
 * no maps, no stack), so it verifies for any hook.  *insns_p is malloc()ed.
 * Fields that have no hook-context meaning (time, epoch) are rejected with
 * the token's position. */
int mks_pred_compile_bpf(const struct mks_pred *pred, mks_class_resolver resolve, void *arg,
                         struct mks_insn **insns_p, uint32_t *n_insns_p,
                         struct mks_query_error *e);

/* ---- queries ------------------------------------------------------------------ */

struct mks_query;

int mks_query_parse(const char *text, struct mks_query **q_p, struct mks_query_error *e);
void mks_query_free(struct mks_query *q); /* accepts NULL */

/* A bound SQL parameter of a plan. */
struct mks_sql_param {
    int is_text;
    int64_t i;
    const char *s; /* owned by the plan */
};

/* The SQL a query plans to.  Parameter 1 is always the job, parameter 2
 * the lowest epoch id read; further ones are the predicate's values in
 * order.  coverage_sql (same parameters)
 * sums the coverage of the epochs the query reads. */
struct mks_sql_plan {
    char *sql;
    char *coverage_sql;
    struct mks_sql_param *params;
    uint32_t n_params;
    uint32_t n_group;   /* the first n_group result columns are group keys */
    uint32_t n_columns;
    /* What the query reads: the source's name ("steps", ...) and its rows
     * of the job without the filter (parameters 1 and 2 only), to tell an
     * empty store from a filter that matched nothing. */
    const char *source_name;
    int source; /* enum: 0 tasks, 1 steps, 2 remote waits, 3 local waits, 4 workers */
    char *source_sql;
};

/* now_ns anchors relative times ("time > -60s" means the last minute). */
int mks_query_plan(const struct mks_query *q, const char *job, uint64_t now_ns,
                   struct mks_sql_plan **plan_p, struct mks_query_error *e);
/* The same over the epochs with id >= min_epoch_id only (the store's epoch
 * ids grow with arrival): what triggers use to read only what is new,
 * through the epochs' (job, id) index rather than every epoch of the job. */
int mks_query_plan_from(const struct mks_query *q, const char *job, uint64_t now_ns,
                        int64_t min_epoch_id, struct mks_sql_plan **plan_p,
                        struct mks_query_error *e);
void mks_sql_plan_free(struct mks_sql_plan *plan); /* accepts NULL */

/* Every task class name the query's filter compares with (class = "x"):
 * fn(name, pos, len, arg) for each, in order; returns fn's first non-zero
 * result (and stops there), else 0. */
typedef int (*mks_query_name_fn)(const char *name, int pos, int len, void *arg);
int mks_query_class_names(const struct mks_query *q, mks_query_name_fn fn, void *arg);

/* Bind a plan's parameters to a statement prepared from plan->sql or
 * plan->coverage_sql (plan->source_sql takes the first two only). */
int mks_sql_plan_bind(const struct mks_sql_plan *plan, struct sqlite3_stmt *stmt);

/* Register the SQL functions plans use on a connection:
 *   mks_hist_quantile(hist_blob, q)  aggregate over log2 histogram blobs
 *                                    (little-endian u64 buckets as struct
 *                                    mks_hist): the q-quantile, interpolated
 *                                    within its power-of-two bucket;
 *   mks_quantile(value, q)           exact aggregate quantile (nearest rank). */
int mks_query_register_sql(struct sqlite3 *db);

/* Quantile of a log2 histogram (as struct mks_hist buckets), the same
 * estimate mks_hist_quantile computes. */
double mks_hist_quantile_est(const uint64_t *buckets, uint32_t n_buckets, double q);

#ifdef __cplusplus
}
#endif

#endif /* MKSCOPE_QUERY_H */

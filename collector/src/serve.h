/*
 * Helpers and verbs of the collector's CLI server, shared by serve*.c.
 */
#ifndef MKS_COLLECTOR_SERVE_H
#define MKS_COLLECTOR_SERVE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "collector.h"
#include "mkscope/query.h"

int mks_serve_fail(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Named argument "--name=value" of a request, or NULL. */
const char *mks_serve_arg(const Mkscope__V1__CliRequest *req, const char *name);
/* A decimal number in min..max (at most UINT32_MAX), digits only: 0, or
 * -EINVAL (not a number) / -ERANGE. */
int mks_serve_uint(const char *s, uint64_t min, uint64_t max, uint32_t *v_p);
/* idx-th positional argument, or NULL. */
const char *mks_serve_pos(const Mkscope__V1__CliRequest *req, size_t idx);
int mks_serve_job(const struct mks_serve_env *env, const Mkscope__V1__CliRequest *req, char *job,
                  size_t len, char *err, size_t errlen);
void mks_serve_list(const struct mks_serve_env *env, const char *sql, const char *arg1,
                    size_t max, char *buf, size_t len);
/* v as JSON: a number within 2^53, else a decimal string (64-bit ids and ns
 * times: JSON readers keep 53 bits); a column's value the same way. */
json_t *mks_serve_int(int64_t v);
json_t *mks_serve_column(sqlite3_stmt *s, int i);
int mks_serve_rows(sqlite3_stmt *s, size_t max_rows, json_t **rows_p, bool *truncated_p,
                   char *err, size_t errlen);

/* A bound on one request's SQLite work: SQLite's progress handler stops
 * the statement (SQLITE_INTERRUPT) once the time is up or the library's
 * memory grew by more than MKS_SERVE_MEM_BYTES since the start. */
#define MKS_SERVE_MEM_BYTES (512ll << 20)
/* The largest string or blob a `mkscope sql` statement may make (SQLite's
 * SQLITE_LIMIT_LENGTH while it runs), and about the most an answer's rows
 * may take (then `truncated`): a CLI reply is at most 16 MiB. */
#define MKS_SERVE_VALUE_BYTES (4 << 20)
#define MKS_SERVE_ANSWER_BYTES ((size_t)6 << 20)
struct mks_serve_limit {
    uint64_t deadline_mono_ns, limit_ns;
    int64_t mem_base;
    int hit; /* 0, or MKS_SERVE_HIT_TIME / MKS_SERVE_HIT_MEM */
};
enum { MKS_SERVE_HIT_TIME = 1, MKS_SERVE_HIT_MEM = 2 };
void mks_serve_limit_begin(sqlite3 *db, struct mks_serve_limit *l, uint64_t limit_ns);
void mks_serve_limit_end(sqlite3 *db);
/* When l stopped the work: a one-line error for `what` in err, and
 * MKS_EXIT_ERROR; else 0. */
int mks_serve_limit_check(const struct mks_serve_limit *l, const char *what, char *err,
                          size_t errlen);

/* Ranks named by --ranks=all|N,M,.. (registered ranks of the job only)
 * into ranks: 0, or an exit status with err. */
int mks_serve_target_ranks(const struct mks_serve_env *env, const char *job, const char *spec,
                           int64_t *ranks, size_t max, size_t *n_p, char *err, size_t errlen);
/* A request's fingerprint (verb, arguments, blob): a retry of the same
 * request id must ask the same. */
int64_t mks_serve_request_hash(const Mkscope__V1__CliRequest *req);
/* Was a request of this id served before?  sql selects (request_hash, id,
 * rank) by request id (?1).  1 with its rows, 0 if not, a negative exit
 * status (with err) when the id came with another request. */
int mks_serve_seen_request(const struct mks_serve_env *env, const Mkscope__V1__CliRequest *req,
                           const char *sql, json_t **rows_p, char *err, size_t errlen);
/* Queue cmd for (job, rank) in the commands table (its nonce drawn here). */
int mks_serve_queue_command(const struct mks_serve_env *env, const Mkscope__V1__CliRequest *req,
                            const char *job, int64_t rank, const char *kind, const char *name,
                            int hook, Mkscope__V1__Command *cmd, int64_t *id_p);
/* A task class name the job's schema must have (mks_query_name_fn): -1
 * with the error, pointing at the name and listing the job's classes, in
 * qe. */
struct mks_serve_class_check {
    const struct mks_serve_env *env;
    const char *job;
    struct mks_query_error *qe;
};
int mks_serve_check_class(const char *name, int pos, int len, void *arg);

int mks_serve_query(const struct mks_serve_env *env, const Mkscope__V1__CliRequest *req,
                    json_t **out, char *err, size_t errlen);
int mks_serve_diagnose(const struct mks_serve_env *env, const Mkscope__V1__CliRequest *req,
                       json_t **out, char *err, size_t errlen);
int mks_serve_command(const struct mks_serve_env *env, const Mkscope__V1__CliRequest *req,
                      json_t **out, char *err, size_t errlen);
int mks_serve_trace(const struct mks_serve_env *env, const Mkscope__V1__CliRequest *req,
                    json_t **out, char *err, size_t errlen);
int mks_serve_trace_list(const struct mks_serve_env *env, const Mkscope__V1__CliRequest *req,
                         json_t **out, char *err, size_t errlen);
int mks_serve_trigger(const struct mks_serve_env *env, const Mkscope__V1__CliRequest *req,
                      json_t **out, char *err, size_t errlen);
/* maps PROG/MAP: a user monitor's map decoded with its BTF (serve_maps.c) */
int mks_serve_maps(const struct mks_serve_env *env, const Mkscope__V1__CliRequest *req,
                   json_t **out, char *err, size_t errlen);
/* probe, probe-read, probe-stop (serve_probe.c) */
int mks_serve_probe(const struct mks_serve_env *env, const Mkscope__V1__CliRequest *req,
                    json_t **out, char *err, size_t errlen);

#endif

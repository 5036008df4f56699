/*
 * Commands to agents from the CLI (attach, detach) and their replies, and
 * the trigger table (add, list, rm).
 *
 * A command is stored once per target rank in `commands` with its encoded
 * mkscope.v1.Command as payload; the ingest path hands it to the rank's agent
 * on the next Ack and stores the CommandReply.  The CLI polls "commands"
 * with the ids it got until every rank answered or its timeout passes, so
 * no request holds the collector's event loop.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "args.h"
#include "mkscope/probe.h"
#include "mkscope/query.h"
#include "serve.h"
#include "trigger.h"

/* Ranks named by --ranks=all|N,M,..: registered ranks of the job only. */
int mks_serve_target_ranks(const struct mks_serve_env *env, const char *job, const char *spec,
                        int64_t *ranks, size_t max, size_t *n_p, char *err, size_t errlen)
{
    sqlite3 *db = mks_store_db(env->st);
    sqlite3_stmt *s;
    size_t n = 0;
    if (sqlite3_prepare_v2(db, "SELECT rank FROM ranks WHERE job=? ORDER BY rank", -1, &s, NULL) !=
        SQLITE_OK)
        return mks_serve_fail(err, errlen, MKS_EXIT_ERROR, "store: %s", sqlite3_errmsg(db));
    sqlite3_bind_text(s, 1, job, -1, SQLITE_TRANSIENT);
    int64_t known[4096];
    size_t n_known = 0;
    while (sqlite3_step(s) == SQLITE_ROW && n_known < 4096)
        known[n_known++] = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    if (!spec || !strcmp(spec, "all")) {
        for (size_t i = 0; i < n_known && n < max; i++)
            ranks[n++] = known[i];
    } else {
        const char *p = spec;
        while (*p) {
            char *end;
            long long r = strtoll(p, &end, 10);
            if (end == p || (*end && *end != ','))
                return mks_serve_fail(err, errlen, MKS_EXIT_USAGE,
                                      "--ranks wants 'all' or a list such as 0,2,3; got '%s'",
                                      spec);
            size_t i;
            for (i = 0; i < n_known; i++)
                if (known[i] == r)
                    break;
            if (i == n_known)
                return mks_serve_fail(err, errlen, MKS_EXIT_USAGE,
                                      "rank %lld has no registered agent in job %s", r, job);
            if (n < max)
                ranks[n++] = r;
            p = *end ? end + 1 : end;
        }
    }
    if (!n)
        return mks_serve_fail(err, errlen, MKS_EXIT_NODATA, "job %s has no registered ranks", job);
    *n_p = n;
    return 0;
}

/* A request's fingerprint: what it asks (verb, arguments, blob), so that
 * the same request id coming back is known for a retry of the same request
 * and not taken for another one. */
int64_t mks_serve_request_hash(const Mkscope__V1__CliRequest *req)
{
    crypto_generichash_state h;
    uint8_t out[8];
    crypto_generichash_init(&h, NULL, 0, sizeof(out));
    crypto_generichash_update(&h, (const uint8_t *)req->verb, strlen(req->verb) + 1);
    for (size_t i = 0; i < req->n_args; i++)
        crypto_generichash_update(&h, (const uint8_t *)req->args[i], strlen(req->args[i]) + 1);
    if (req->blob.len)
        crypto_generichash_update(&h, req->blob.data, req->blob.len);
    crypto_generichash_final(&h, out, sizeof(out));
    int64_t v = 0;
    memcpy(&v, out, sizeof(v));
    return v;
}

/* A request of this id was served before: 1 with its rows (the same
 * answer again, nothing done twice), 0 if not, or an error when the id came
 * with another request. */
int mks_serve_seen_request(const struct mks_serve_env *env, const Mkscope__V1__CliRequest *req,
                        const char *sql, json_t **rows_p, char *err, size_t errlen)
{
    if (!req->id)
        return 0;
    sqlite3 *db = mks_store_db(env->st);
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) != SQLITE_OK)
        return mks_serve_fail(err, errlen, -MKS_EXIT_ERROR, "store: %s", sqlite3_errmsg(db));
    sqlite3_bind_int64(s, 1, (int64_t)req->id);
    json_t *rows = json_array();
    int64_t hash = mks_serve_request_hash(req);
    bool other = false;
    while (sqlite3_step(s) == SQLITE_ROW) {
        if (sqlite3_column_int64(s, 0) != hash)
            other = true;
        json_array_append_new(rows, json_pack("{s:I, s:I}", "id",
                                              (json_int_t)sqlite3_column_int64(s, 1), "rank",
                                              (json_int_t)sqlite3_column_int64(s, 2)));
    }
    sqlite3_finalize(s);
    if (other) {
        json_decref(rows);
        return mks_serve_fail(err, errlen, -MKS_EXIT_USAGE,
                              "request id %llu was used for another request: nothing done",
                              (unsigned long long)req->id);
    }
    if (!json_array_size(rows)) {
        json_decref(rows);
        return 0;
    }
    *rows_p = rows;
    return 1;
}

int mks_serve_queue_command(const struct mks_serve_env *env, const Mkscope__V1__CliRequest *req,
                         const char *job, int64_t rank, const char *kind, const char *name,
                         int hook, Mkscope__V1__Command *cmd, int64_t *id_p)
{
    /* Each queued command has its own nonce: the agent runs it once. */
    mks_envelope tmp;
    mks_wire_init(&tmp, "", 0, 0);
    cmd->nonce = tmp.nonce;
    sqlite3 *db = mks_store_db(env->st);
    size_t len = mkscope__v1__command__get_packed_size(cmd);
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf)
        return -ENOMEM;
    mkscope__v1__command__pack(cmd, buf);
    sqlite3_stmt *s;
    int rc = -EIO;
    if (sqlite3_prepare_v2(db,
                           "INSERT INTO commands(job, rank, kind, name, hook, created_ns, payload,"
                           " request_id, request_hash) VALUES(?,?,?,?,?,?,?,?,?)",
                           -1, &s, NULL) == SQLITE_OK) {
        sqlite3_bind_text(s, 1, job, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(s, 2, rank);
        sqlite3_bind_text(s, 3, kind, -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 4, name, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int(s, 5, hook);
        sqlite3_bind_int64(s, 6, (int64_t)env->now_ns);
        sqlite3_bind_blob(s, 7, buf, (int)len, SQLITE_TRANSIENT);
        if (req->id) {
            sqlite3_bind_int64(s, 8, (int64_t)req->id);
            sqlite3_bind_int64(s, 9, mks_serve_request_hash(req));
        }
        if (sqlite3_step(s) == SQLITE_DONE) {
            *id_p = sqlite3_last_insert_rowid(db);
            rc = 0;
        }
        sqlite3_finalize(s);
    }
    free(buf);
    return rc;
}

static int serve_attach_detach(const struct mks_serve_env *env,
                               const Mkscope__V1__CliRequest *req, bool attach, json_t **out,
                               char *err, size_t errlen)
{
    char job[MKS_WIRE_MAX_JOB + 1];
    int rc = mks_serve_job(env, req, job, sizeof(job), err, errlen);
    if (rc)
        return rc;
    const char *verb = attach ? "attach" : "detach";
    const char *name = mks_serve_pos(req, 0);
    if (!mks_wire_prog_name_valid(name))
        return mks_serve_fail(err, errlen, MKS_EXIT_USAGE,
                              "%s: name the program (" MKS_WIRE_PROG_GRAMMAR ")", verb);
    /* A hook by name or number (the request's arguments were checked
     * against args.c's table; a name is never read as a number). */
    const char *hook_s = mks_serve_arg(req, "hook");
    int hook = hook_s ? mks_wire_hook_parse(hook_s) : -1;
    if (hook_s && hook < 0)
        return mks_serve_fail(err, errlen, MKS_EXIT_USAGE, "%s: --hook '%.64s' is not a hook",
                              verb, hook_s);
    const char *builtin = mks_serve_arg(req, "builtin");
    if (attach && !builtin && !req->blob.len)
        return mks_serve_fail(err, errlen, MKS_EXIT_USAGE,
                              "attach: give a BPF object file or --builtin NAME");
    if (attach && builtin && req->blob.len)
        return mks_serve_fail(err, errlen, MKS_EXIT_USAGE,
                              "attach: give a BPF object file or --builtin NAME, not both");
    if (!attach && req->blob.len)
        return mks_serve_fail(err, errlen, MKS_EXIT_USAGE, "detach takes no object");
    json_t *again = NULL;
    rc = mks_serve_seen_request(env, req,
                      "SELECT request_hash, id, rank FROM commands WHERE request_id = ?"
                      " ORDER BY id",
                      &again, err, errlen);
    if (rc < 0)
        return -rc;
    if (rc) { /* a retry: the commands it queued the first time */
        *out = json_pack("{s:s, s:s, s:o, s:b}", "job", job, "program", name, "commands", again,
                         "repeated", 1);
        return 0;
    }
    int64_t ranks[4096];
    size_t n = 0;
    if ((rc = mks_serve_target_ranks(env, job, mks_serve_arg(req, "ranks"), ranks, 4096, &n, err, errlen)))
        return rc;
    Mkscope__V1__Command cmd = MKSCOPE__V1__COMMAND__INIT;
    Mkscope__V1__AttachProgram ap = MKSCOPE__V1__ATTACH_PROGRAM__INIT;
    Mkscope__V1__DetachProgram dp = MKSCOPE__V1__DETACH_PROGRAM__INIT;
    Mkscope__V1__ReplaceProgram rp = MKSCOPE__V1__REPLACE_PROGRAM__INIT;
    /* --replace OLD: the agent swaps OLD for the new program in one
     * publication per hook, so no event sees neither or both */
    const char *replace = attach ? mks_serve_arg(req, "replace") : NULL;
    if (replace && !*replace)
        return mks_serve_fail(err, errlen, MKS_EXIT_USAGE, "attach --replace: name the old program");
    if (attach) {
        ap.name = (char *)name;
        ap.hook = hook;
        ap.builtin = (char *)(builtin && !req->blob.len ? builtin : "");
        ap.bpf_object = req->blob;
        if (replace) {
            rp.old_name = (char *)replace;
            rp.program = &ap;
            cmd.kind_case = MKSCOPE__V1__COMMAND__KIND_REPLACE;
            cmd.replace = &rp;
        } else {
            cmd.kind_case = MKSCOPE__V1__COMMAND__KIND_ATTACH;
            cmd.attach = &ap;
        }
    } else {
        dp.name = (char *)name;
        dp.hook = hook;
        cmd.kind_case = MKSCOPE__V1__COMMAND__KIND_DETACH;
        cmd.detach = &dp;
    }
    json_t *ids = json_array();
    for (size_t i = 0; i < n; i++) {
        int64_t id;
        if (mks_serve_queue_command(env, req, job, ranks[i], replace ? "replace" : verb, name, hook,
                          &cmd, &id)) {
            json_decref(ids);
            return mks_serve_fail(err, errlen, MKS_EXIT_ERROR, "store: cannot queue command: %s",
                                  sqlite3_errmsg(mks_store_db(env->st)));
        }
        json_array_append_new(ids, json_pack("{s:I, s:I}", "id", (json_int_t)id, "rank",
                                             (json_int_t)ranks[i]));
    }
    *out = json_pack("{s:s, s:s, s:o}", "job", job, "program", name, "commands", ids);
    return 0;
}

static int serve_commands(const struct mks_serve_env *env, const Mkscope__V1__CliRequest *req,
                          json_t **out, char *err, size_t errlen)
{
    const char *ids = mks_serve_arg(req, "ids");
    sqlite3 *db = mks_store_db(env->st);
    sqlite3_stmt *s;
    /* The id list is matched with instr() on a bound string: no SQL built
     * from the request. */
    if (sqlite3_prepare_v2(db,
                           "SELECT id, rank, kind, name, created_ns, sent_ns, replied_ns, ok,"
                           " error, verifier_log, cost, n_insns, prog_gen FROM commands WHERE"
                           " ?1 IS NULL OR instr(',' || ?1 || ',', ',' || id || ',') > 0"
                           " ORDER BY id DESC LIMIT 1000",
                           -1, &s, NULL) != SQLITE_OK)
        return mks_serve_fail(err, errlen, MKS_EXIT_ERROR, "store: %s", sqlite3_errmsg(db));
    if (ids)
        sqlite3_bind_text(s, 1, ids, -1, SQLITE_TRANSIENT);
    json_t *rows;
    int rc = mks_serve_rows(s, 1000, &rows, NULL, err, errlen);
    if (rc)
        return rc;
    *out = json_pack("{s:o}", "commands", rows);
    return 0;
}

int mks_serve_command(const struct mks_serve_env *env, const Mkscope__V1__CliRequest *req,
                      json_t **out, char *err, size_t errlen)
{
    if (!strcmp(req->verb, "attach"))
        return serve_attach_detach(env, req, true, out, err, errlen);
    if (!strcmp(req->verb, "detach"))
        return serve_attach_detach(env, req, false, out, err, errlen);
    return serve_commands(env, req, out, err, errlen);
}

/* ---- triggers ------------------------------------------------------------------ */

int mks_serve_trigger(const struct mks_serve_env *env, const Mkscope__V1__CliRequest *req,
                      json_t **out, char *err, size_t errlen)
{
    sqlite3 *db = mks_store_db(env->st);
    sqlite3_stmt *s;
    int rc;
    if (!strcmp(req->verb, "trigger-add")) {
        const char *expr = mks_serve_pos(req, 0);
        if (!expr || !*expr)
            return mks_serve_fail(err, errlen, MKS_EXIT_USAGE,
                                  "trigger add: give an SLO, e.g. 'p99(step) > 2ms'");
        char perr[1024];
        if (mks_trigger_check(expr, perr, sizeof(perr)))
            return mks_serve_fail(err, errlen, MKS_EXIT_USAGE, "%s", perr);
        const char *hold_s = mks_serve_arg(req, "hold-off");
        uint64_t hold = 0;
        if (hold_s && mks_trigger_hold_off(hold_s, &hold))
            return mks_serve_fail(err, errlen, MKS_EXIT_USAGE,
                                  "trigger add: --hold-off wants a duration such as 90s, 5m or 1h"
                                  " (at most a week), got '%s'",
                                  hold_s);
        /* A probe to start when it fires (docs/probes.md): its grammar is
         * checked now, its classes against the job it fires for. */
        const char *probe = mks_serve_arg(req, "probe"), *pfor_s = mks_serve_arg(req, "probe-for");
        uint64_t pfor = 10ull * 1000000000ull;
        if (pfor_s && !probe)
            return mks_serve_fail(err, errlen, MKS_EXIT_USAGE,
                                  "trigger add: --probe-for is the window of --probe; give both");
        if (pfor_s && (mks_args_duration(pfor_s, &pfor) || !pfor || pfor > 3600ull * 1000000000ull))
            return mks_serve_fail(err, errlen, MKS_EXIT_USAGE,
                                  "trigger add: --probe-for wants a duration of 1 s to 1 h (30s,"
                                  " 5m), got '%.32s'",
                                  pfor_s);
        if (probe) {
            struct mks_probe *p = NULL;
            struct mks_query_error qe;
            if (mks_probe_parse(probe, &p, &qe)) {
                char msg[1024];
                mks_query_error_format(probe, &qe, msg, sizeof(msg));
                return mks_serve_fail(err, errlen, MKS_EXIT_USAGE, "trigger add: --probe: %s",
                                      msg);
            }
            mks_probe_free(p);
        }
        json_t *again = NULL;
        rc = mks_serve_seen_request(env, req,
                          "SELECT request_hash, id, 0 FROM triggers WHERE request_id = ?", &again,
                          err, errlen);
        if (rc < 0)
            return -rc;
        if (rc) { /* a retry: the trigger it made the first time */
            json_int_t id = json_integer_value(json_object_get(json_array_get(again, 0), "id"));
            json_decref(again);
            *out = json_pack("{s:I, s:s, s:b}", "id", id, "expr", expr, "repeated", 1);
            return 0;
        }
        if (sqlite3_prepare_v2(db,
                               "INSERT INTO triggers(expr, created_ns, hold_off_ns, request_id,"
                               " request_hash, probe, probe_for_ns) VALUES(?, ?, ?, ?, ?, ?, ?)",
                               -1, &s, NULL) != SQLITE_OK)
            return mks_serve_fail(err, errlen, MKS_EXIT_ERROR, "store: %s", sqlite3_errmsg(db));
        sqlite3_bind_text(s, 1, expr, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(s, 2, (int64_t)env->now_ns);
        if (hold_s)
            sqlite3_bind_int64(s, 3, (int64_t)hold);
        if (req->id) {
            sqlite3_bind_int64(s, 4, (int64_t)req->id);
            sqlite3_bind_int64(s, 5, mks_serve_request_hash(req));
        }
        if (probe) {
            sqlite3_bind_text(s, 6, probe, -1, SQLITE_TRANSIENT);
            sqlite3_bind_int64(s, 7, (int64_t)pfor);
        }
        rc = sqlite3_step(s);
        sqlite3_finalize(s);
        if (rc != SQLITE_DONE)
            return mks_serve_fail(err, errlen, MKS_EXIT_ERROR, "store: %s", sqlite3_errmsg(db));
        *out = json_pack("{s:I, s:s}", "id", (json_int_t)sqlite3_last_insert_rowid(db), "expr",
                         expr);
        if (probe)
            json_object_set_new(*out, "probe", json_string(probe));
        return 0;
    }
    if (!strcmp(req->verb, "trigger-rm")) {
        const char *id = mks_serve_pos(req, 0);
        char *end;
        long long v = id ? strtoll(id, &end, 10) : 0;
        if (!id || *end || v <= 0)
            return mks_serve_fail(err, errlen, MKS_EXIT_USAGE, "trigger rm: give a trigger id");
        if (sqlite3_prepare_v2(db, "DELETE FROM triggers WHERE id = ?", -1, &s, NULL) != SQLITE_OK)
            return mks_serve_fail(err, errlen, MKS_EXIT_ERROR, "store: %s", sqlite3_errmsg(db));
        sqlite3_bind_int64(s, 1, v);
        sqlite3_step(s);
        sqlite3_finalize(s);
        if (sqlite3_changes(db) == 0)
            return mks_serve_fail(err, errlen, MKS_EXIT_NODATA,
                                  "no trigger %lld: see mkscope trigger list", v);
        *out = json_pack("{s:I}", "removed", (json_int_t)v);
        return 0;
    }
    if (!strcmp(req->verb, "trigger-list")) {
        if (sqlite3_prepare_v2(db,
                               "SELECT id, expr, enabled, fired, last_fired_ns, last_value,"
                               " COALESCE(escalations, 0) AS escalations, last_escalated_ns,"
                               " hold_off_ns / 1000000000 AS hold_off_s, probe,"
                               " probe_for_ns / 1000000000 AS probe_for_s, COALESCE(probes, 0) AS"
                               " probes, CAST(last_probe AS TEXT) AS last_probe, probe_error"
                               " FROM triggers ORDER BY id",
                               -1, &s, NULL) != SQLITE_OK)
            return mks_serve_fail(err, errlen, MKS_EXIT_ERROR, "store: %s", sqlite3_errmsg(db));
        json_t *rows;
        if ((rc = mks_serve_rows(s, 10000, &rows, NULL, err, errlen)))
            return rc;
        *out = json_pack("{s:o}", "triggers", rows);
        return 0;
    }
    return mks_serve_fail(err, errlen, MKS_EXIT_USAGE, "trigger: add, list or rm");
}

/*
 * maps PROG/MAP [--ranks R] [--sum]: a user's own monitor's map, as the
 * agents dumped it (MapDump rows of the summaries), decoded with the
 * program's own BTF types.
 *
 * The types come from the object itself: the collector keeps every attach
 * command with its BPF object, so the newest attach (or replace) of PROG
 * in the job is opened with the loader (mks_obj_open_mem: the same checks
 * as the agents'), which keeps the object's BTF and each map's key and
 * value type ids.  Each key and value is then walked along its type:
 * integers (signed, unsigned, bool, char), enums by name, floats, pointers
 * in hex, arrays (of char: a string), structs and unions by member (bit
 * fields too), a .data/.bss/.rodata section by variable; typedefs and
 * qualifiers are looked through.  Every read is checked against the bytes
 * the agent sent, and the walk is bounded in depth: a value that does not
 * fit its type is shown in hex with the reason.  Without BTF (a built-in
 * monitor, an object built without -g) the answer is hex, and says why.
 *
 * The maps are banked per epoch like every devhooks map, so one dump is
 * what the epoch added: the answer is each rank's newest dump, or with
 * --sum every integer of a key added over all of the rank's stored dumps
 * (counters' totals since attach; a maximum or a last value would not
 * add, hence not the default).
 *
 * On a worker: it only reads.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <bpf/btf.h>

#include "maps_decode.h"
#include "mkscope/loader.h"
#include "serve.h"

/* The loader keeps its last libbpf message in static buffers and swaps
 * libbpf's print callback while it opens an object: one open at a time
 * across the CLI server's workers. */
static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;

/* Entries of one answer: what a rank's dumps may hold at most, times ranks. */
#define MAPS_MAX_ROWS 100000

/* --sum: every integer leaf of b added into a (same shape: one type). */
static void add_into(json_t *a, json_t *b)
{
    if (json_is_object(a) && json_is_object(b)) {
        const char *k;
        json_t *v;
        json_object_foreach(b, k, v)
        {
            json_t *x = json_object_get(a, k);
            if (x && json_is_integer(x) && json_is_integer(v))
                json_object_set_new(a, k,
                                    json_integer(json_integer_value(x) + json_integer_value(v)));
            else if (x)
                add_into(x, v);
        }
    } else if (json_is_array(a) && json_is_array(b)) {
        for (size_t i = 0; i < json_array_size(a) && i < json_array_size(b); i++) {
            json_t *x = json_array_get(a, i), *v = json_array_get(b, i);
            if (json_is_integer(x) && json_is_integer(v))
                json_array_set_new(a, i,
                                   json_integer(json_integer_value(x) + json_integer_value(v)));
            else
                add_into(x, v);
        }
    }
}

/* The newest attach or replace of prog in job: its object, or none (a
 * built-in monitor, or never attached from this collector). */
static int find_object(sqlite3 *db, const char *job, const char *prog, uint8_t **obj_p,
                       size_t *len_p, bool *builtin_p)
{
    *obj_p = NULL, *len_p = 0, *builtin_p = false;
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(db,
                           "SELECT payload FROM commands WHERE job = ?1 AND kind IN ('attach',"
                           " 'replace') AND (name = ?2 OR substr(?2, 1, length(name) + 1) = name ||"
                           " '/') AND payload IS NOT"
                           " NULL ORDER BY id DESC LIMIT 1",
                           -1, &s, NULL) != SQLITE_OK)
        return -EIO;
    sqlite3_bind_text(s, 1, job, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 2, prog, -1, SQLITE_TRANSIENT);
    int rc = -ENOENT;
    if (sqlite3_step(s) == SQLITE_ROW) {
        Mkscope__V1__Command *c = mkscope__v1__command__unpack(
            NULL, (size_t)sqlite3_column_bytes(s, 0), sqlite3_column_blob(s, 0));
        const Mkscope__V1__AttachProgram *ap =
            !c                                                                 ? NULL
            : c->kind_case == MKSCOPE__V1__COMMAND__KIND_ATTACH                ? c->attach
            : c->kind_case == MKSCOPE__V1__COMMAND__KIND_REPLACE && c->replace ? c->replace->program
                                                                               : NULL;
        if (ap && ap->bpf_object.len) {
            *obj_p = malloc(ap->bpf_object.len);
            if (*obj_p) {
                memcpy(*obj_p, ap->bpf_object.data, ap->bpf_object.len);
                *len_p = ap->bpf_object.len;
                rc = 0;
            } else {
                rc = -ENOMEM;
            }
        } else if (ap) {
            *builtin_p = true;
        }
        mkscope__v1__command__free_unpacked(c, NULL);
    }
    sqlite3_finalize(s);
    return rc;
}

int mks_serve_maps(const struct mks_serve_env *env, const Mkscope__V1__CliRequest *req,
                   json_t **out, char *err, size_t errlen)
{
    const char *arg = mks_serve_pos(req, 0);
    const char *slash = arg ? strrchr(arg, '/') : NULL;
    if (!slash || slash == arg || !slash[1] || (size_t)(slash - arg) > 200 ||
        strlen(slash + 1) > 63)
        return mks_serve_fail(err, errlen, MKS_EXIT_USAGE,
                              "give PROG/MAP, a program of mkscope programs and one of its"
                              " maps, e.g. slowtask/counts");
    char job[MKS_WIRE_MAX_JOB + 1], prog[256], map[64];
    snprintf(prog, sizeof(prog), "%.*s", (int)(slash - arg), arg);
    snprintf(map, sizeof(map), "%s", slash + 1);
    int rc = mks_serve_job(env, req, job, sizeof(job), err, errlen);
    if (rc)
        return rc;
    bool sum = false;
    for (size_t i = 0; i < req->n_args; i++)
        sum |= !strcmp(req->args[i], "--sum");
    int64_t ranks[4096];
    size_t n_ranks = 0;
    const char *rspec = mks_serve_arg(req, "ranks");
    if (rspec && (rc = mks_serve_target_ranks(env, job, rspec, ranks, 4096, &n_ranks, err, errlen)))
        return rc;
    sqlite3 *db = mks_store_db(env->st);
    sqlite3_stmt *s;

    /* Is there such a program at all: attached now, attached through this
     * collector once, or in a dump?  Programs go by the name the agents
     * report (attach name/function), so PROG may be either. */
    static const char names_sql[] =
        "SELECT name FROM programs WHERE job = ?1 UNION SELECT name FROM commands WHERE job = ?1"
        " AND kind IN ('attach', 'replace') UNION SELECT DISTINCT m.prog_name FROM maps m JOIN"
        " epochs e ON e.id = m.epoch_id WHERE e.job = ?1";
    bool known = false;
    char known_sql[sizeof(names_sql) + 256];
    snprintf(known_sql, sizeof(known_sql),
             "SELECT 1 FROM (%s) WHERE name = ?2 OR substr(name, 1, length(?2) + 1) = ?2 ||"
             " '/' OR substr(?2, 1, length(name) + 1) = name || '/' LIMIT 1",
             names_sql);
    if (sqlite3_prepare_v2(db, known_sql, -1, &s, NULL) == SQLITE_OK) {
        sqlite3_bind_text(s, 1, job, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(s, 2, prog, -1, SQLITE_TRANSIENT);
        known = sqlite3_step(s) == SQLITE_ROW;
        sqlite3_finalize(s);
    }
    uint8_t *objbuf = NULL;
    size_t objlen = 0;
    bool builtin = false;
    rc = find_object(db, job, prog, &objbuf, &objlen, &builtin);
    if (rc == -EIO)
        return mks_serve_fail(err, errlen, MKS_EXIT_ERROR, "store: %s", sqlite3_errmsg(db));
    if (!known && rc == -ENOENT && !builtin) {
        char progs[512], list_sql[sizeof(names_sql) + 32];
        snprintf(list_sql, sizeof(list_sql), "%s ORDER BY 1", names_sql);
        mks_serve_list(env, list_sql, job, 20, progs, sizeof(progs));
        return mks_serve_fail(err, errlen, MKS_EXIT_NODATA, "no program '%s' in job %s%s%s", prog,
                              job, *progs ? "; its programs: " : " (none was ever attached)",
                              progs);
    }

    /* The types, from the object. */
    struct mks_obj *obj = NULL;
    struct btf *btf = NULL;
    uint32_t key_type = 0, value_type = 0;
    char note[600] = "", lerr[256] = "";
    bool map_in_obj = false;
    if (objbuf) {
        pthread_mutex_lock(&open_lock);
        int orc = mks_obj_open_mem(objbuf, objlen, prog, &obj, lerr, sizeof(lerr));
        pthread_mutex_unlock(&open_lock);
        if (orc == 0) {
            const struct mks_map_spec *ms = mks_obj_maps(obj);
            for (uint32_t i = 0; i < mks_obj_map_count(obj); i++) {
                if (strcmp(ms[i].name, map))
                    continue;
                map_in_obj = true;
                const void *raw;
                size_t raw_len;
                if (mks_obj_map_btf(obj, i, &key_type, &value_type) == 0 &&
                    mks_obj_btf(obj, &raw, &raw_len) == 0)
                    btf = btf__new(raw, (__u32)raw_len);
                if (!btf || (!key_type && !value_type))
                    snprintf(note, sizeof(note),
                             "%s/%s has no BTF types (build the object with clang -g): shown"
                             " in hex",
                             prog, map);
            }
            if (!map_in_obj) {
                char names[400] = "";
                size_t off = 0;
                for (uint32_t i = 0; i < mks_obj_map_count(obj) && off < sizeof(names) - 70; i++)
                    off += (size_t)snprintf(names + off, sizeof(names) - off, "%s%s", i ? ", " : "",
                                            ms[i].name);
                mks_obj_close(obj);
                free(objbuf);
                return mks_serve_fail(err, errlen, MKS_EXIT_NODATA,
                                      "program '%s' has no map '%s'; its maps: %s", prog, map,
                                      *names ? names : "none");
            }
        } else {
            snprintf(note, sizeof(note), "its object no longer opens here (%s): shown in hex",
                     lerr);
        }
        free(objbuf);
    } else {
        snprintf(note, sizeof(note),
                 builtin ? "%s is a built-in monitor, read by mkscope query: shown in hex"
                         : "%s was not attached through this collector, so its types are"
                           " unknown: shown in hex",
                 prog);
    }

    /* The dumps: each rank's newest, or every one with --sum. */
    if (sqlite3_prepare_v2(
            db,
            "SELECT e.rank, e.epoch, m.key, m.value, m.prog_name FROM maps m JOIN"
            " epochs e ON e.id = m.epoch_id WHERE e.job = ?1 AND m.map_name = ?2"
            " AND (m.prog_name = ?3 OR substr(m.prog_name, 1, length(?3) + 1) = ?3 ||"
            " '/') AND (?4 OR"
            " m.epoch_id = (SELECT MAX(m2.epoch_id) FROM maps m2 JOIN epochs e2 ON"
            " e2.id = m2.epoch_id WHERE e2.job = ?1 AND e2.rank = e.rank AND"
            " m2.map_name = ?2 AND (m2.prog_name = ?3 OR substr(m2.prog_name, 1,"
            " length(?3) + 1) = ?3 || '/'))) ORDER BY e.rank, m.epoch_id",
            -1, &s, NULL) != SQLITE_OK) {
        btf__free(btf);
        mks_obj_close(obj);
        return mks_serve_fail(err, errlen, MKS_EXIT_ERROR, "store: %s", sqlite3_errmsg(db));
    }
    sqlite3_bind_text(s, 1, job, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 2, map, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 3, prog, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(s, 4, sum);
    json_t *rows = json_array();
    json_t *index = json_object(); /* --sum: "rank key" -> the row that adds it up */
    char why[200] = "";
    size_t n = 0;
    int st;
    while ((st = sqlite3_step(s)) == SQLITE_ROW && n < MAPS_MAX_ROWS) {
        int64_t rank = sqlite3_column_int64(s, 0);
        if (n_ranks) {
            bool in = false;
            for (size_t i = 0; i < n_ranks && !in; i++)
                in = ranks[i] == rank;
            if (!in)
                continue;
        }
        json_t *k = mks_maps_decode(btf, key_type, sqlite3_column_blob(s, 2),
                           (size_t)sqlite3_column_bytes(s, 2), why, sizeof(why));
        json_t *v = mks_maps_decode(btf, value_type, sqlite3_column_blob(s, 3),
                           (size_t)sqlite3_column_bytes(s, 3), why, sizeof(why));
        char *ks = NULL, *ix = NULL;
        if (sum && (ks = json_dumps(k, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY)) &&
            asprintf(&ix, "%lld %s", (long long)rank, ks) < 0)
            ix = NULL;
        free(ks);
        if (sum) { /* the same rank and key: add */
            json_t *prev = ix ? json_object_get(index, ix) : NULL;
            if (prev) {
                free(ix);
                json_t *pv = json_object_get(prev, "value");
                if (json_is_integer(pv) && json_is_integer(v))
                    json_object_set_new(
                        prev, "value",
                        json_integer(json_integer_value(pv) + json_integer_value(v)));
                else
                    add_into(pv, v);
                json_object_set_new(
                    prev, "epochs",
                    json_integer(json_integer_value(json_object_get(prev, "epochs")) + 1));
                json_decref(k), json_decref(v);
                continue;
            }
        }
        json_t *r = json_pack("{s:I, s:o, s:o, s:o}", "rank", (json_int_t)rank, "epoch",
                              mks_serve_column(s, 1), "key", k, "value", v);
        if (sum) {
            json_object_set_new(r, "epochs", json_integer(1));
            if (ix)
                json_object_set(index, ix, r);
        }
        free(ix);
        json_array_append_new(rows, r);
        n++;
    }
    sqlite3_finalize(s);
    json_decref(index);
    bool decoded = btf && !*note && !*why;
    btf__free(btf);
    mks_obj_close(obj);
    if (st != SQLITE_DONE && st != SQLITE_ROW) {
        json_decref(rows);
        return mks_serve_fail(err, errlen, MKS_EXIT_ERROR, "store: reading map dumps: %s",
                              sqlite3_errmsg(db));
    }
    if (!json_array_size(rows)) {
        json_decref(rows);
        if (builtin)
            return mks_serve_fail(err, errlen, MKS_EXIT_NODATA,
                                  "%s is a built-in monitor: the agents summarise its maps into"
                                  " the epoch summaries, which mkscope query reads"
                                  " (docs/query.md); they send no dump of %s",
                                  prog, map);
        return mks_serve_fail(err, errlen, MKS_EXIT_NODATA,
                              "no dump of %s/%s from job %s%s yet: the agents send a map's"
                              " entries with each summary once they are not all zero",
                              prog, map, job, n_ranks ? " on those ranks" : "");
    }
    if (*why && !*note)
        snprintf(note, sizeof(note), "some entries do not fit their type (%s): those in hex", why);
    *out = json_pack("{s:s, s:s, s:s, s:b, s:b, s:o}", "job", job, "program", prog, "map", map,
                     "decoded", decoded, "sum", sum, "rows", rows);
    if (*note)
        json_object_set_new(*out, "note", json_string(note));
    return 0;
}

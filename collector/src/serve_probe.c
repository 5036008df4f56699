/*
 * The probe verbs (docs/probes.md):
 *
 *   probe TEXT [--for D] [--ranks R] [--groups N] [--max-cost N] [--dry-run]
 *       parse, resolve class names through the job's task schema, compile
 *       (query/probe.c), verify every program for its hook here, as each
 *       agent will again, and refuse one above the instruction budget; with
 *       --dry-run answer the programs (disassembled), their cost and maps
 *       and stop; else store the probe and queue a ProbeStart for each rank.
 *       On the loop: it writes the store.
 *   probe-read --id N
 *       the answer so far: the groups merged across epochs and ranks,
 *       named (classes by the schema, events by name, ids in hex), the
 *       other row, and per rank its state, the time it ran and its counts.
 *       On a worker: it only reads.
 *   probe-stop --id N
 *       queue a DetachProgram of the probe on every rank it was sent to;
 *       each ends it at its next epoch with a last result.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "mkscope/maps.h"
#include "mkscope/probe.h"
#include "mkscope/verifier.h"
#include "probe_store.h"
#include "serve.h"

/* A probe runs at most an hour (the agent's bound), 10 s by default. */
#define PROBE_DEFAULT_NS (10ull * 1000000000ull)
#define PROBE_MAX_NS     (3600ull * 1000000000ull)
/* After its window, how long a probe's ranks have to send their last
 * results before the answer calls them missing. */
#define PROBE_GRACE_NS (10ull * 1000000000ull)

static const char *const map_type_names[] = {"array", "per-worker array", "hash", "histogram",
                                             "ring buffer"};

static const char *map_type_name(uint32_t t)
{
    return t >= MKS_MAP_ARRAY && t <= MKS_MAP_RINGBUF ? map_type_names[t - MKS_MAP_ARRAY] : "?";
}

static const char *unit_name(uint32_t u)
{
    switch (u) {
    case MKS_PROBE_UNIT_NS: return "ns";
    case MKS_PROBE_UNIT_ID: return "id";
    case MKS_PROBE_UNIT_CLASS: return "class";
    case MKS_PROBE_UNIT_EVENT: return "event";
    default: return "number";
    }
}

struct resolve_ctx {
    sqlite3 *db;
    const char *job;
};

static int64_t resolve_class(const char *name, void *arg)
{
    struct resolve_ctx *r = arg;
    sqlite3_stmt *s;
    int64_t id = -1;
    if (sqlite3_prepare_v2(r->db, "SELECT id FROM task_classes WHERE job = ? AND name = ? LIMIT 1",
                           -1, &s, NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_text(s, 1, r->job, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 2, name, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(s) == SQLITE_ROW)
        id = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    return id;
}

/* Parse with the job's classes: a usage error (with the caret) in err. */
static int parse_probe(const struct mks_serve_env *env, const char *job, const char *text,
                       struct mks_probe **p_p, char *err, size_t errlen)
{
    struct mks_query_error qe;
    struct mks_probe *p = NULL;
    if (mks_probe_parse(text, &p, &qe)) {
        mks_query_error_format(text, &qe, err, errlen);
        return MKS_EXIT_USAGE;
    }
    struct mks_serve_class_check cc = {.env = env, .job = job, .qe = &qe};
    if (mks_probe_class_names(p, mks_serve_check_class, &cc)) {
        mks_query_error_format(text, &qe, err, errlen);
        mks_probe_free(p);
        return MKS_EXIT_USAGE;
    }
    *p_p = p;
    return 0;
}

static uint64_t arg_u(const Mkscope__V1__CliRequest *req, const char *name, uint64_t dflt)
{
    const char *v = mks_serve_arg(req, name);
    return v ? strtoull(v, NULL, 10) : dflt;
}

static uint32_t job_workers(const struct mks_serve_env *env, const char *job)
{
    sqlite3_stmt *s;
    uint32_t n = 1;
    if (sqlite3_prepare_v2(mks_store_db(env->st), "SELECT MAX(n_workers) FROM ranks WHERE job = ?",
                           -1, &s, NULL) == SQLITE_OK) {
        sqlite3_bind_text(s, 1, job, -1, SQLITE_TRANSIENT);
        if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_int64(s, 0) > 0)
            n = (uint32_t)sqlite3_column_int64(s, 0);
        sqlite3_finalize(s);
    }
    return n;
}

/* Events per second at each hook over the job's last 10 s of summaries
 * (where programs were attached there), all ranks together. */
static void event_rates(const struct mks_serve_env *env, const char *job, double rate[MKS_EV_COUNT])
{
    sqlite3_stmt *s;
    for (int e = 0; e < MKS_EV_COUNT; e++)
        rate[e] = -1;
    if (sqlite3_prepare_v2(mks_store_db(env->st),
                           "SELECT c.hook, TOTAL(c.eligible) FROM coverage c JOIN epochs e ON e.id ="
                           " c.epoch_id WHERE e.job = ?1 AND e.received_ns > ?2 GROUP BY c.hook",
                           -1, &s, NULL) != SQLITE_OK)
        return;
    sqlite3_bind_text(s, 1, job, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(s, 2, (int64_t)(env->now_ns - 10000000000ull));
    while (sqlite3_step(s) == SQLITE_ROW) {
        int h = sqlite3_column_int(s, 0);
        if (h >= 0 && h < MKS_EV_COUNT)
            rate[h] = sqlite3_column_double(s, 1) / 10.0;
    }
    sqlite3_finalize(s);
}

struct compiled {
    struct mks_probe *p;
    struct mks_probe_code *code;
    uint64_t cost[MKS_EV_COUNT];
    uint32_t states[MKS_EV_COUNT];
    uint64_t max_cost, cost_max;
    uint32_t groups;
};

static void compiled_free(struct compiled *c)
{
    mks_probe_code_free(c->code);
    mks_probe_free(c->p);
}

/* Parse, compile, verify; the plan as JSON (with the disassembly when
 * asked).  An error is an exit status with err. */
static int compile_probe(const struct mks_serve_env *env, const Mkscope__V1__CliRequest *req,
                         const char *job, const char *text, bool disasm, struct compiled *c,
                         json_t **plan_p, char *err, size_t errlen)
{
    memset(c, 0, sizeof(*c));
    int rc = parse_probe(env, job, text, &c->p, err, errlen);
    if (rc)
        return rc;
    c->groups = (uint32_t)arg_u(req, "groups", MKS_PROBE_GROUPS_DEFAULT);
    c->max_cost = arg_u(req, "max-cost", MKS_PROBE_COST_DEFAULT);
    const struct mks_probe_layout *l = mks_probe_layout(c->p);
    /* every group's value in every summary of every rank: bounded */
    if ((uint64_t)c->groups * 8 * l->n_words > 4ull << 20)
        return mks_serve_fail(err, errlen, MKS_EXIT_USAGE,
                              "probe: %u groups of %u bytes are more than a summary should carry"
                              " (4 MiB): fewer --groups, or fewer histograms",
                              c->groups, 8 * l->n_words);
    struct mks_probe_opts po = {.sz = sizeof(po), .max_groups = c->groups};
    struct resolve_ctx rctx = {.db = mks_store_db(env->st), .job = job};
    struct mks_query_error qe;
    if (mks_probe_compile(c->p, &po, resolve_class, &rctx, &c->code, &qe)) {
        mks_query_error_format(text, &qe, err, errlen);
        return MKS_EXIT_USAGE;
    }
    json_t *hooks = json_array(), *maps = json_array(), *cols = json_array(),
           *keys = json_array();
    double rate[MKS_EV_COUNT];
    event_rates(env, job, rate);
    for (uint32_t i = 0; i < c->code->n_progs; i++) {
        const struct mks_probe_prog *pp = &c->code->progs[i];
        struct mks_verify_opts vo = {.sz = sizeof(vo), .prog_type = MKS_PROG_OBSERVE,
                                     .abi_version = MKS_HOOK_ABI_VERSION,
                                     .hook = (int32_t)pp->hook, .maps = c->code->maps,
                                     .n_maps = c->code->n_maps};
        struct mks_verify_result vr = {0};
        char log[512] = "";
        if (mks_verify(pp->insns, pp->n_insns, &vo, &vr, log, sizeof(log))) {
            json_decref(hooks), json_decref(maps), json_decref(cols), json_decref(keys);
            return mks_serve_fail(err, errlen, MKS_EXIT_ERROR,
                                  "probe: its program at %s is rejected by the verifier (a bug"
                                  " of the probe compiler): %s",
                                  mks_wire_hook_name(pp->hook), log);
        }
        c->cost[i] = vr.cost;
        c->states[i] = vr.states;
        if (vr.cost > c->cost_max)
            c->cost_max = vr.cost;
        json_t *h = json_pack("{s:s, s:b, s:I, s:I, s:I}", "hook", mks_wire_hook_name(pp->hook),
                              "aggregates", pp->aggregates, "insns", (json_int_t)pp->n_insns,
                              "cost", (json_int_t)vr.cost, "states", (json_int_t)vr.states);
        if (rate[pp->hook] >= 0) {
            json_object_set_new(h, "events_per_s", json_real(rate[pp->hook]));
            json_object_set_new(h, "insns_per_s", json_real(rate[pp->hook] * (double)vr.cost));
        }
        if (disasm) {
            json_t *prog = json_array();
            for (uint32_t k = 0; k < pp->n_insns; k++) {
                /* numbered by slot, as jump offsets count them */
                char dis[112], line[128];
                if (mks_insn_disasm(pp->insns, pp->n_insns, k, dis, sizeof(dis)) < 0)
                    snprintf(dis, sizeof(dis), "?");
                snprintf(line, sizeof(line), "%4u: %s", k, dis);
                json_array_append_new(prog, json_string(line));
                if (pp->insns[k].code == (MKS_BPF_LD | MKS_BPF_IMM | MKS_BPF_DW))
                    k++; /* its second half */
            }
            json_object_set_new(h, "program", prog);
        }
        json_array_append_new(hooks, h);
    }
    uint32_t workers = job_workers(env, job);
    uint64_t bytes_total = 0;
    for (uint32_t i = 0; i < c->code->n_maps; i++) {
        const struct mks_map_spec *m = &c->code->maps[i];
        struct mks_map_desc d = {.type = m->type, .key_size = m->key_size,
                                 .value_size = m->value_size, .max_entries = m->max_entries};
        memcpy(d.name, m->name, sizeof(d.name));
        uint64_t bytes = mks_map_layout(&d, workers, NULL, 0) == 0 ? 2 * d.bank_bytes : 0;
        bytes_total += bytes;
        json_array_append_new(maps, json_pack("{s:s, s:s, s:I, s:I, s:I, s:I}", "name", m->name,
                                              "type", map_type_name(m->type), "key_size",
                                              (json_int_t)m->key_size, "value_size",
                                              (json_int_t)m->value_size, "max_entries",
                                              (json_int_t)m->max_entries, "bytes",
                                              (json_int_t)bytes));
    }
    for (uint32_t i = 0; i < l->n_cols; i++)
        json_array_append_new(cols, json_pack("{s:s, s:s}", "name", l->cols[i].name, "unit",
                                              l->cols[i].agg == MKS_PROBE_COUNT
                                                  ? "number"
                                                  : unit_name(l->cols[i].unit)));
    for (uint32_t i = 0; i < l->n_keys; i++)
        json_array_append_new(keys, json_pack("{s:s, s:s}", "name", l->keys[i].name, "unit",
                                              unit_name(l->keys[i].unit)));
    if (c->cost_max > c->max_cost) {
        json_decref(hooks), json_decref(maps), json_decref(cols), json_decref(keys);
        for (uint32_t i = 0; i < c->code->n_progs; i++)
            if (c->cost[i] == c->cost_max)
                return mks_serve_fail(err, errlen, MKS_EXIT_USAGE,
                                      "probe: its program at %s costs %llu instructions per event,"
                                      " above the budget of %llu (--max-cost; an agent allows"
                                      " --probe-max-cost, %d by default): fewer aggregates,"
                                      " group fields or conditions",
                                      mks_wire_hook_name(c->code->progs[i].hook),
                                      (unsigned long long)c->cost_max,
                                      (unsigned long long)c->max_cost, MKS_PROBE_COST_DEFAULT);
    }
    *plan_p = json_pack("{s:s, s:s, s:o, s:o, s:o, s:o, s:I, s:I, s:I, s:I, s:I}", "job", job,
                        "text", text, "keys", keys, "columns", cols, "hooks", hooks, "maps", maps,
                        "groups", (json_int_t)c->groups, "cost", (json_int_t)c->cost_max,
                        "max_cost", (json_int_t)c->max_cost, "map_bytes",
                        (json_int_t)bytes_total, "workers", (json_int_t)workers);
    return 0;
}

static void fill_start(const struct compiled *c, int64_t id, const char *name, const char *text,
                       uint64_t duration_ns, Mkscope__V1__ProbeStart *ps,
                       Mkscope__V1__ProbeProgram *pg, Mkscope__V1__ProbeProgram **pgp,
                       Mkscope__V1__ProbeMap *pm, Mkscope__V1__ProbeMap **pmp, uint64_t *insns)
{
    mkscope__v1__probe_start__init(ps);
    ps->probe_id = (uint64_t)id;
    ps->name = (char *)name;
    ps->text = (char *)text;
    ps->duration_ms = (uint32_t)(duration_ns / 1000000ull);
    ps->max_cost = c->max_cost;
    uint64_t *w = insns;
    for (uint32_t i = 0; i < c->code->n_progs; i++) {
        const struct mks_probe_prog *pp = &c->code->progs[i];
        mkscope__v1__probe_program__init(&pg[i]);
        pg[i].hook = pp->hook;
        pg[i].aggregates = pp->aggregates;
        pg[i].insns = w;
        pg[i].n_insns = pp->n_insns;
        for (uint32_t k = 0; k < pp->n_insns; k++)
            *w++ = (uint64_t)pp->insns[k].code | (uint64_t)pp->insns[k].regs << 8 |
                   (uint64_t)(uint16_t)pp->insns[k].off << 16 |
                   (uint64_t)(uint32_t)pp->insns[k].imm << 32;
        pgp[i] = &pg[i];
    }
    ps->programs = pgp;
    ps->n_programs = c->code->n_progs;
    for (uint32_t i = 0; i < c->code->n_maps; i++) {
        const struct mks_map_spec *m = &c->code->maps[i];
        mkscope__v1__probe_map__init(&pm[i]);
        pm[i].name = (char *)m->name;
        pm[i].type = m->type;
        pm[i].key_size = m->key_size;
        pm[i].value_size = m->value_size;
        pm[i].max_entries = m->max_entries;
        pmp[i] = &pm[i];
    }
    ps->maps = pmp;
    ps->n_maps = c->code->n_maps;
}

static int serve_start(const struct mks_serve_env *env, const Mkscope__V1__CliRequest *req,
                       json_t **out, char *err, size_t errlen)
{
    const char *text = mks_serve_pos(req, 0);
    if (!text || !*text)
        return mks_serve_fail(err, errlen, MKS_EXIT_USAGE,
                              "probe: give a probe, e.g. 'count() by class where event ="
                              " task_end'");
    char job[MKS_WIRE_MAX_JOB + 1];
    int rc = mks_serve_job(env, req, job, sizeof(job), err, errlen);
    if (rc)
        return rc;
    bool dry = mks_serve_arg(req, "dry-run") != NULL;
    for (size_t i = 0; i < req->n_args; i++)
        dry |= !strcmp(req->args[i], "--dry-run");
    uint64_t duration = PROBE_DEFAULT_NS;
    const char *for_s = mks_serve_arg(req, "for");
    if (for_s && (mks_args_duration(for_s, &duration) || !duration || duration > PROBE_MAX_NS))
        return mks_serve_fail(err, errlen, MKS_EXIT_USAGE,
                              "probe: --for wants a duration of 1 s to 1 h (30s, 5m), got"
                              " '%.32s'",
                              for_s);
    struct compiled c;
    json_t *plan = NULL;
    if ((rc = compile_probe(env, req, job, text, dry, &c, &plan, err, errlen))) {
        compiled_free(&c);
        return rc;
    }
    if (dry) {
        json_object_set_new(plan, "dry_run", json_true());
        json_object_set_new(plan, "duration_ns", json_integer((json_int_t)duration));
        compiled_free(&c);
        *out = plan;
        return 0;
    }
    sqlite3 *db = mks_store_db(env->st);
    json_t *again = NULL;
    rc = mks_serve_seen_request(env, req,
                                "SELECT request_hash, id, 0 FROM probes WHERE request_id = ?",
                                &again, err, errlen);
    if (rc < 0) {
        compiled_free(&c);
        json_decref(plan);
        return -rc;
    }
    if (rc) { /* a retry: the probe it started the first time */
        json_int_t id = json_integer_value(json_object_get(json_array_get(again, 0), "id"));
        char ids[24];
        snprintf(ids, sizeof(ids), "%lld", (long long)id);
        json_decref(again);
        json_object_set_new(plan, "probe", json_string(ids));
        json_object_set_new(plan, "repeated", json_true());
        compiled_free(&c);
        *out = plan;
        return 0;
    }
    int64_t ranks[4096];
    size_t n = 0;
    if ((rc = mks_serve_target_ranks(env, job, mks_serve_arg(req, "ranks"), ranks, 4096, &n, err,
                                     errlen))) {
        compiled_free(&c);
        json_decref(plan);
        return rc;
    }
    json_t *rank_list = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(rank_list, json_integer(ranks[i]));
    char *ranks_text = json_dumps(rank_list, JSON_COMPACT);
    sqlite3_stmt *s;
    rc = MKS_EXIT_ERROR;
    if (sqlite3_prepare_v2(db,
                           "INSERT INTO probes(job, text, created_ns, duration_ns, groups,"
                           " max_cost, cost, ranks, request_id, request_hash)"
                           " VALUES(?,?,?,?,?,?,?,?,?,?)",
                           -1, &s, NULL) == SQLITE_OK) {
        sqlite3_bind_text(s, 1, job, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(s, 2, text, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(s, 3, (int64_t)env->now_ns);
        sqlite3_bind_int64(s, 4, (int64_t)duration);
        sqlite3_bind_int64(s, 5, c.groups);
        sqlite3_bind_int64(s, 6, (int64_t)c.max_cost);
        sqlite3_bind_int64(s, 7, (int64_t)c.cost_max);
        sqlite3_bind_text(s, 8, ranks_text ? ranks_text : "[]", -1, SQLITE_TRANSIENT);
        if (req->id) {
            sqlite3_bind_int64(s, 9, (int64_t)req->id);
            sqlite3_bind_int64(s, 10, mks_serve_request_hash(req));
        }
        if (sqlite3_step(s) == SQLITE_DONE)
            rc = 0;
        sqlite3_finalize(s);
    }
    free(ranks_text);
    json_decref(rank_list);
    if (rc) {
        compiled_free(&c);
        json_decref(plan);
        return mks_serve_fail(err, errlen, MKS_EXIT_ERROR, "store: cannot keep the probe: %s",
                              sqlite3_errmsg(db));
    }
    int64_t id = sqlite3_last_insert_rowid(db);
    char name[48];
    snprintf(name, sizeof(name), "probe-%lld", (long long)id);
    Mkscope__V1__ProbeStart ps;
    Mkscope__V1__ProbeProgram pg[MKS_EV_COUNT], *pgp[MKS_EV_COUNT];
    Mkscope__V1__ProbeMap pm[MKS_PROBE_MAPS], *pmp[MKS_PROBE_MAPS];
    uint64_t *insns = calloc((size_t)c.code->n_progs * MKS_BPF_MAX_INSNS, sizeof(uint64_t));
    if (!insns) {
        compiled_free(&c);
        json_decref(plan);
        return mks_serve_fail(err, errlen, MKS_EXIT_ERROR, "probe: out of memory");
    }
    fill_start(&c, id, name, text, duration, &ps, pg, pgp, pm, pmp, insns);
    Mkscope__V1__Command cmd = MKSCOPE__V1__COMMAND__INIT;
    cmd.kind_case = MKSCOPE__V1__COMMAND__KIND_PROBE;
    cmd.probe = &ps;
    json_t *ids = json_array();
    for (size_t i = 0; i < n && !rc; i++) {
        int64_t cid;
        if (mks_serve_queue_command(env, req, job, ranks[i], "probe", name, -1, &cmd, &cid))
            rc = mks_serve_fail(err, errlen, MKS_EXIT_ERROR, "store: cannot queue the probe: %s",
                                sqlite3_errmsg(db));
        else
            json_array_append_new(ids, json_pack("{s:I, s:I}", "id", (json_int_t)cid, "rank",
                                                 (json_int_t)ranks[i]));
    }
    free(insns);
    compiled_free(&c);
    if (rc) {
        json_decref(ids);
        json_decref(plan);
        return rc;
    }
    char idtext[24];
    snprintf(idtext, sizeof(idtext), "%lld", (long long)id);
    json_object_set_new(plan, "probe", json_string(idtext));
    json_object_set_new(plan, "name", json_string(name));
    json_object_set_new(plan, "duration_ns", json_integer((json_int_t)duration));
    json_object_set_new(plan, "commands", ids);
    *out = plan;
    return 0;
}

/* ---- reading the answer ------------------------------------------------------ */

static json_t *key_value(const struct mks_serve_env *env, const char *job,
                         const struct mks_probe_key *k, uint64_t v)
{
    bool absent = (k->width == 32 && v == 0xffffffffull) || (k->width == 64 && v == UINT64_MAX);
    if (absent)
        return json_string("absent");
    char buf[64];
    switch (k->unit) {
    case MKS_PROBE_UNIT_CLASS:
        mks_store_class_name(env->st, job, UINT32_MAX, (uint32_t)v, buf, sizeof(buf));
        return json_string(buf);
    case MKS_PROBE_UNIT_EVENT: {
        const char *n = mks_wire_hook_name((uint32_t)v);
        return n ? json_string(n) : mks_serve_int((int64_t)v);
    }
    case MKS_PROBE_UNIT_ID:
        snprintf(buf, sizeof(buf), "0x%llx", (unsigned long long)v);
        return json_string(buf);
    default: return mks_serve_int(v > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v);
    }
}

static json_t *col_value(const struct mks_probe_layout *l, uint32_t c, const uint64_t *w)
{
    const struct mks_probe_column *col = &l->cols[c];
    if (col->agg == MKS_PROBE_HIST) {
        uint32_t top = 0;
        for (uint32_t b = 0; b < MKS_HIST_BUCKETS; b++)
            if (w[col->word + b])
                top = b + 1;
        json_t *bk = json_array();
        for (uint32_t b = 0; b < top; b++)
            json_array_append_new(bk, mks_serve_int((int64_t)w[col->word + b]));
        return json_pack("{s:o, s:o, s:o}", "count", mks_serve_int((int64_t)w[0]), "sum",
                         mks_serve_int(w[col->sum_word] > (uint64_t)INT64_MAX
                                           ? INT64_MAX
                                           : (int64_t)w[col->sum_word]),
                         "buckets", bk);
    }
    double v;
    if (mks_probe_value(l, c, w, &v))
        return json_null();
    if (col->agg == MKS_PROBE_MEAN || col->agg == MKS_PROBE_P50 || col->agg == MKS_PROBE_P90 ||
        col->agg == MKS_PROBE_P99)
        return json_real(v);
    uint64_t u = col->agg == MKS_PROBE_COUNT ? w[0]
                 : col->agg == MKS_PROBE_MIN ? ~w[col->word]
                                             : w[col->word];
    return mks_serve_int(u > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)u);
}

struct row {
    uint64_t key[MKS_PROBE_MAX_KEYS];
    uint64_t w[MKS_PROBE_MAX_WORDS];
    double sort;
};

static int row_cmp(const void *a, const void *b)
{
    const struct row *x = a, *y = b;
    if (x->sort != y->sort)
        return x->sort < y->sort ? 1 : -1;
    return memcmp(x->key, y->key, sizeof(x->key));
}

static json_t *row_json(const struct mks_serve_env *env, const char *job,
                        const struct mks_probe_layout *l, const struct row *r, bool other)
{
    json_t *o = json_object();
    for (uint32_t k = 0; k < l->n_keys; k++)
        json_object_set_new(o, l->keys[k].name,
                            other ? json_string("(other)") : key_value(env, job, &l->keys[k],
                                                                       r->key[k]));
    for (uint32_t c = 0; c < l->n_cols; c++)
        json_object_set_new(o, l->cols[c].name, col_value(l, c, r->w));
    return o;
}

#define SUM_FIELDS 9
static const char *const sum_names[SUM_FIELDS] = {"eligible", "observed", "throttled",
                                                  "lost",     "matched",  "unknown",
                                                  "overflowed", "dropped", "contended"};

static int serve_read(const struct mks_serve_env *env, const Mkscope__V1__CliRequest *req,
                      json_t **out, char *err, size_t errlen)
{
    uint32_t id;
    if (mks_serve_uint(mks_serve_arg(req, "id"), 1, UINT32_MAX, &id))
        return mks_serve_fail(err, errlen, MKS_EXIT_USAGE, "probe: give the probe's --id");
    sqlite3 *db = mks_store_db(env->st);
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(db,
                           "SELECT job, text, created_ns, duration_ns, groups, cost, max_cost,"
                           " ranks, overflowed, stop_ns FROM probes WHERE id = ?",
                           -1, &s, NULL) != SQLITE_OK)
        return mks_serve_fail(err, errlen, MKS_EXIT_ERROR, "store: %s", sqlite3_errmsg(db));
    sqlite3_bind_int64(s, 1, id);
    if (sqlite3_step(s) != SQLITE_ROW) {
        sqlite3_finalize(s);
        return mks_serve_fail(err, errlen, MKS_EXIT_NODATA, "no probe %u", id);
    }
    char job[MKS_WIRE_MAX_JOB + 1], text[4200];
    snprintf(job, sizeof(job), "%s", (const char *)sqlite3_column_text(s, 0));
    snprintf(text, sizeof(text), "%s", (const char *)sqlite3_column_text(s, 1));
    uint64_t created = (uint64_t)sqlite3_column_int64(s, 2),
             duration = (uint64_t)sqlite3_column_int64(s, 3);
    json_int_t groups = sqlite3_column_int64(s, 4), cost = sqlite3_column_int64(s, 5),
               max_cost = sqlite3_column_int64(s, 6);
    json_error_t je;
    json_t *ranks = json_loads(sqlite3_column_text(s, 7) ? (const char *)sqlite3_column_text(s, 7)
                                                         : "[]",
                               0, &je);
    uint64_t coll_over = (uint64_t)sqlite3_column_int64(s, 8);
    bool stopped = sqlite3_column_type(s, 9) != SQLITE_NULL;
    sqlite3_finalize(s);
    if (!ranks)
        ranks = json_array();
    struct mks_probe *p = NULL;
    struct mks_query_error qe;
    if (mks_probe_parse(text, &p, &qe)) {
        json_decref(ranks);
        return mks_serve_fail(err, errlen, MKS_EXIT_ERROR, "probe %u: its text no longer parses: %s",
                              id, qe.msg);
    }
    const struct mks_probe_layout *l = mks_probe_layout(p);
    /* the groups */
    size_t cap = 64, n = 0;
    struct row *rows = malloc(cap * sizeof(*rows)), other = {0};
    bool have_other = false;
    int rc = 0;
    if (!rows || sqlite3_prepare_v2(db, "SELECT key, words FROM probe_groups WHERE probe_id = ?",
                                    -1, &s, NULL) != SQLITE_OK)
        rc = mks_serve_fail(err, errlen, MKS_EXIT_ERROR, "store: %s", sqlite3_errmsg(db));
    if (!rc) {
        sqlite3_bind_int64(s, 1, id);
        int st;
        while ((st = sqlite3_step(s)) == SQLITE_ROW) {
            struct row r = {0};
            size_t kb = (size_t)sqlite3_column_bytes(s, 0);
            mks_probe_blob_words(sqlite3_column_blob(s, 0), kb, r.key, MKS_PROBE_MAX_KEYS);
            mks_probe_blob_words(sqlite3_column_blob(s, 1), (size_t)sqlite3_column_bytes(s, 1),
                                 r.w, l->n_words);
            double v = 0;
            if (l->n_cols && mks_probe_value(l, 0, r.w, &v))
                v = -1;
            r.sort = v;
            if (kb == 0) {
                other = r, have_other = true;
                continue;
            }
            if (n == cap) {
                struct row *nr = realloc(rows, 2 * cap * sizeof(*rows));
                if (!nr) {
                    st = SQLITE_NOMEM;
                    break;
                }
                rows = nr, cap *= 2;
            }
            rows[n++] = r;
        }
        sqlite3_finalize(s);
        if (st != SQLITE_DONE)
            rc = mks_serve_fail(err, errlen, MKS_EXIT_ERROR, "store: reading probe %u: %s", id,
                                sqlite3_errmsg(db));
    }
    json_t *jrows = json_array();
    if (!rc) {
        qsort(rows, n, sizeof(*rows), row_cmp);
        for (size_t i = 0; i < n; i++)
            json_array_append_new(jrows, row_json(env, job, l, &rows[i], false));
    }
    json_t *jother = have_other ? row_json(env, job, l, &other, true) : json_null();
    free(rows);
    /* per rank: the command's reply, the runs and the counts */
    json_t *jranks = json_array();
    uint64_t tot[SUM_FIELDS] = {0};
    size_t done = 0, refused = 0, i;
    json_t *rk;
    uint64_t ran_min = UINT64_MAX, ran_max = 0;
    char name[48];
    snprintf(name, sizeof(name), "probe-%u", id);
    json_array_foreach(ranks, i, rk)
    {
        int64_t rank = json_integer_value(rk);
        json_t *o = json_pack("{s:I}", "rank", (json_int_t)rank);
        const char *state = "waiting";
        if (!rc && sqlite3_prepare_v2(db,
                                      "SELECT sent_ns, replied_ns, ok, error, cost FROM commands"
                                      " WHERE job = ? AND rank = ? AND kind = 'probe' AND name = ?"
                                      " ORDER BY id LIMIT 1",
                                      -1, &s, NULL) == SQLITE_OK) {
            sqlite3_bind_text(s, 1, job, -1, SQLITE_TRANSIENT);
            sqlite3_bind_int64(s, 2, rank);
            sqlite3_bind_text(s, 3, name, -1, SQLITE_TRANSIENT);
            if (sqlite3_step(s) == SQLITE_ROW) {
                if (sqlite3_column_type(s, 0) != SQLITE_NULL)
                    state = "sent";
                if (sqlite3_column_type(s, 1) != SQLITE_NULL) {
                    state = sqlite3_column_int(s, 2) ? "running" : "refused";
                    if (!sqlite3_column_int(s, 2))
                        json_object_set_new(o, "error", mks_serve_column(s, 3));
                    json_object_set_new(o, "cost", mks_serve_column(s, 4));
                }
            }
            sqlite3_finalize(s);
        }
        if (!rc && sqlite3_prepare_v2(db,
                                      "SELECT attached_host_ns, ran_ns, epochs, last, ended,"
                                      " last_ns FROM probe_runs WHERE probe_id = ? AND rank = ?",
                                      -1, &s, NULL) == SQLITE_OK) {
            sqlite3_bind_int64(s, 1, id);
            sqlite3_bind_int64(s, 2, rank);
            if (sqlite3_step(s) == SQLITE_ROW) {
                uint64_t ran = (uint64_t)sqlite3_column_int64(s, 1);
                json_object_set_new(o, "attached_ns", mks_serve_column(s, 0));
                json_object_set_new(o, "ran_ns", mks_serve_column(s, 1));
                json_object_set_new(o, "epochs", mks_serve_column(s, 2));
                if (sqlite3_column_int(s, 3)) {
                    state = "done";
                    json_object_set_new(o, "ended", mks_serve_column(s, 4));
                } else if (strcmp(state, "refused")) {
                    state = "running";
                }
                if (ran < ran_min)
                    ran_min = ran;
                if (ran > ran_max)
                    ran_max = ran;
            }
            sqlite3_finalize(s);
        }
        uint64_t rt[SUM_FIELDS] = {0};
        if (!rc && sqlite3_prepare_v2(db,
                                      "SELECT TOTAL(eligible), TOTAL(observed), TOTAL(throttled),"
                                      " TOTAL(lost), TOTAL(matched), TOTAL(unknown),"
                                      " TOTAL(overflowed), TOTAL(dropped), TOTAL(contended) FROM"
                                      " probe_hooks WHERE probe_id = ? AND rank = ?",
                                      -1, &s, NULL) == SQLITE_OK) {
            sqlite3_bind_int64(s, 1, id);
            sqlite3_bind_int64(s, 2, rank);
            if (sqlite3_step(s) == SQLITE_ROW)
                for (int f = 0; f < SUM_FIELDS; f++)
                    rt[f] = (uint64_t)sqlite3_column_double(s, f);
            sqlite3_finalize(s);
        }
        for (int f = 0; f < SUM_FIELDS; f++) {
            json_object_set_new(o, sum_names[f], mks_serve_int((int64_t)rt[f]));
            tot[f] += rt[f];
        }
        done += !strcmp(state, "done");
        refused += !strcmp(state, "refused");
        json_object_set_new(o, "state", json_string(state));
        json_array_append_new(jranks, o);
    }
    size_t n_ranks = json_array_size(ranks);
    json_decref(ranks);
    /* per hook over the ranks */
    json_t *jhooks = json_array();
    if (!rc && sqlite3_prepare_v2(db,
                                  "SELECT hook, TOTAL(eligible), TOTAL(observed), TOTAL(throttled),"
                                  " TOTAL(lost), TOTAL(matched), TOTAL(unknown), TOTAL(overflowed),"
                                  " TOTAL(dropped), TOTAL(contended) FROM probe_hooks WHERE"
                                  " probe_id = ? GROUP BY hook ORDER BY hook",
                                  -1, &s, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(s, 1, id);
        while (sqlite3_step(s) == SQLITE_ROW) {
            json_t *h = json_pack("{s:s}", "hook",
                                  mks_wire_hook_name((uint32_t)sqlite3_column_int(s, 0))
                                      ? mks_wire_hook_name((uint32_t)sqlite3_column_int(s, 0))
                                      : "?");
            for (int f = 0; f < SUM_FIELDS; f++)
                json_object_set_new(h, sum_names[f],
                                    mks_serve_int((int64_t)sqlite3_column_double(s, 1 + f)));
            json_array_append_new(jhooks, h);
        }
        sqlite3_finalize(s);
    }
    if (rc) {
        mks_probe_free(p);
        json_decref(jrows), json_decref(jother), json_decref(jranks), json_decref(jhooks);
        return rc;
    }
    json_t *cov = json_object();
    for (int f = 0; f < SUM_FIELDS; f++)
        json_object_set_new(cov, sum_names[f],
                            mks_serve_int((int64_t)(f == 6 ? tot[f] + coll_over : tot[f])));
    json_object_set_new(cov, "overflowed_collector", mks_serve_int((int64_t)coll_over));
    json_object_set_new(cov, "ratio", tot[0] ? json_real((double)tot[1] / (double)tot[0])
                                             : json_null());
    const char *state = done + refused == n_ranks           ? "done"
                        : env->now_ns > created + duration + PROBE_GRACE_NS ? "incomplete"
                        : stopped                                            ? "stopping"
                                                                             : "running";
    char idtext[24];
    snprintf(idtext, sizeof(idtext), "%u", id);
    json_t *a = json_pack("{s:s, s:s, s:s, s:s, s:o, s:o, s:o, s:o, s:I, s:I, s:I}", "probe",
                          idtext, "job", job, "text", text, "state", state, "created_ns",
                          mks_serve_int((int64_t)created), "duration_ns",
                          mks_serve_int((int64_t)duration), "elapsed_ns",
                          mks_serve_int((int64_t)(env->now_ns > created ? env->now_ns - created
                                                                        : 0)),
                          "ran_ns",
                          json_pack("{s:o, s:o}", "min",
                                    ran_max ? mks_serve_int((int64_t)ran_min) : json_null(),
                                    "max",
                                    ran_max ? mks_serve_int((int64_t)ran_max) : json_null()),
                          "groups", groups, "cost", cost, "max_cost", max_cost);
    json_t *keys = json_array(), *cols = json_array();
    for (uint32_t k = 0; k < l->n_keys; k++)
        json_array_append_new(keys, json_pack("{s:s, s:s}", "name", l->keys[k].name, "unit",
                                              unit_name(l->keys[k].unit)));
    for (uint32_t c = 0; c < l->n_cols; c++)
        json_array_append_new(cols, json_pack("{s:s, s:s}", "name", l->cols[c].name, "unit",
                                              l->cols[c].agg == MKS_PROBE_COUNT
                                                  ? "number"
                                                  : unit_name(l->cols[c].unit)));
    mks_probe_free(p); /* l, its layout, was read up to here */
    json_object_set_new(a, "keys", keys);
    json_object_set_new(a, "columns", cols);
    json_object_set_new(a, "rows", jrows);
    json_object_set_new(a, "other", jother);
    json_object_set_new(a, "coverage", cov);
    json_object_set_new(a, "hooks", jhooks);
    json_object_set_new(a, "ranks", jranks);
    *out = a;
    return 0;
}

static int serve_stop(const struct mks_serve_env *env, const Mkscope__V1__CliRequest *req,
                      json_t **out, char *err, size_t errlen)
{
    uint32_t id;
    if (mks_serve_uint(mks_serve_arg(req, "id"), 1, UINT32_MAX, &id))
        return mks_serve_fail(err, errlen, MKS_EXIT_USAGE, "probe: give the probe's --id");
    sqlite3 *db = mks_store_db(env->st);
    sqlite3_stmt *s;
    char job[MKS_WIRE_MAX_JOB + 1] = "";
    json_t *ranks = NULL;
    if (sqlite3_prepare_v2(db, "SELECT job, ranks, stop_ns FROM probes WHERE id = ?", -1, &s,
                           NULL) != SQLITE_OK)
        return mks_serve_fail(err, errlen, MKS_EXIT_ERROR, "store: %s", sqlite3_errmsg(db));
    sqlite3_bind_int64(s, 1, id);
    bool stopped = false;
    if (sqlite3_step(s) == SQLITE_ROW) {
        json_error_t je;
        snprintf(job, sizeof(job), "%s", (const char *)sqlite3_column_text(s, 0));
        ranks = json_loads((const char *)sqlite3_column_text(s, 1), 0, &je);
        stopped = sqlite3_column_type(s, 2) != SQLITE_NULL;
    }
    sqlite3_finalize(s);
    if (!*job)
        return mks_serve_fail(err, errlen, MKS_EXIT_NODATA, "no probe %u", id);
    char name[48];
    snprintf(name, sizeof(name), "probe-%u", id);
    json_t *ids = json_array();
    int rc = 0;
    if (!stopped) { /* a second stop sends nothing again */
        Mkscope__V1__Command cmd = MKSCOPE__V1__COMMAND__INIT;
        Mkscope__V1__DetachProgram dp = MKSCOPE__V1__DETACH_PROGRAM__INIT;
        dp.name = name;
        dp.hook = -1;
        cmd.kind_case = MKSCOPE__V1__COMMAND__KIND_DETACH;
        cmd.detach = &dp;
        size_t i;
        json_t *rk;
        json_array_foreach(ranks, i, rk)
        {
            int64_t cid;
            if (mks_serve_queue_command(env, req, job, json_integer_value(rk), "detach", name, -1,
                                        &cmd, &cid)) {
                rc = mks_serve_fail(err, errlen, MKS_EXIT_ERROR, "store: %s", sqlite3_errmsg(db));
                break;
            }
            json_array_append_new(ids, json_pack("{s:I, s:O}", "id", (json_int_t)cid, "rank", rk));
        }
        if (!rc && sqlite3_prepare_v2(db, "UPDATE probes SET stop_ns = ? WHERE id = ?", -1, &s,
                                      NULL) == SQLITE_OK) {
            sqlite3_bind_int64(s, 1, (int64_t)env->now_ns);
            sqlite3_bind_int64(s, 2, id);
            sqlite3_step(s);
            sqlite3_finalize(s);
        }
    }
    json_decref(ranks);
    if (rc) {
        json_decref(ids);
        return rc;
    }
    char idtext[24];
    snprintf(idtext, sizeof(idtext), "%u", id);
    *out = json_pack("{s:s, s:s, s:o}", "probe", idtext, "name", name, "commands", ids);
    return 0;
}

int mks_serve_probe(const struct mks_serve_env *env, const Mkscope__V1__CliRequest *req,
                    json_t **out, char *err, size_t errlen)
{
    if (!strcmp(req->verb, "probe"))
        return serve_start(env, req, out, err, errlen);
    if (!strcmp(req->verb, "probe-read"))
        return serve_read(env, req, out, err, errlen);
    if (!strcmp(req->verb, "probe-stop"))
        return serve_stop(env, req, out, err, errlen);
    return mks_serve_fail(err, errlen, MKS_EXIT_USAGE, "probe: unknown request '%s'", req->verb);
}

/*
 * Fault specs ("TYPE:key=value,...") and the ground truth file.  The truth is
 * written from the parsed spec and the configuration alone: what the injector
 * was told to do, never anything measured.
 *
 * Magnitude is the time in microseconds a fault adds to each affected step of
 * the faulty rank; bm_fault_plan() (model_math.h, shared by the CPU runtime
 * and the CUDA megakernel) spreads it over the tasks the fault hits, so
 * faults of one magnitude look alike from outside.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_int.h"
#include "model.h"
#include "workload.h"

static const char *const fixed_names[BC_EXPERT0] = {
    "rmsnorm",          "qkv_proj",   "attention",   "o_proj",  "allreduce_send",
    "allreduce_reduce", "moe_router", "moe_combine", "lm_head", "sample",
};

uint32_t mks_bench_class_count(const struct mks_bench_config *cfg)
{
    return BC_EXPERT0 + cfg->experts;
}

const char *mks_bench_class_name(const struct mks_bench_config *cfg, uint32_t cls, char *buf,
                                 size_t len)
{
    if (cls < BC_EXPERT0)
        return fixed_names[cls];
    if (cls >= mks_bench_class_count(cfg) || !len)
        return NULL;
    snprintf(buf, len, "expert.%u", cls - BC_EXPERT0);
    return buf;
}

int mks_bench_class_find(const struct mks_bench_config *cfg, const char *name)
{
    for (uint32_t c = 0; c < BC_EXPERT0; c++)
        if (!strcmp(name, fixed_names[c]))
            return (int)c;
    if (!strncmp(name, "expert.", 7) && name[7]) {
        char *end;
        unsigned long e = strtoul(name + 7, &end, 10);
        if (!*end && name[7] != '-' && e < cfg->experts)
            return (int)(BC_EXPERT0 + e);
    }
    return -1;
}

static const char *const type_names[] = {NULL,          "task-delay", "moe-skew",
                                         "notify-delay", "queue-oversub", "comm-delay",
                                         "tile-starve",  "slow-rank"};
static const char *const causes[] = {NULL,
                                     "slow_task",
                                     "slow_task",
                                     "notify_delay",
                                     "local_imbalance",
                                     "slow_transfer",
                                     "local_imbalance",
                                     "slow_rank"};

const char *mks_fault_type_name(uint32_t type)
{
    return type >= 1 && type <= MKS_FAULT_SLOW_RANK ? type_names[type] : NULL;
}

const char *mks_fault_cause(const struct mks_fault *f)
{
    return f->type >= 1 && f->type <= MKS_FAULT_SLOW_RANK ? causes[f->type] : NULL;
}

static int parse_u64(const char *s, uint64_t max, uint64_t *v)
{
    if (!*s || *s == '-' || *s == '+')
        return -1;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(s, &end, 10);
    if (errno || *end || x > max)
        return -1;
    *v = x;
    return 0;
}

int mks_fault_parse(const char *spec, const struct mks_bench_config *cfg, struct mks_fault *out,
                    char *err, size_t err_len)
{
    char buf[512];
    if (!spec || strlen(spec) >= sizeof(buf))
        return bb_err(err, err_len, -EINVAL, "fault spec too long (at most %zu characters)",
                      sizeof(buf) - 1);
    strcpy(buf, spec);
    char *colon = strchr(buf, ':');
    if (colon)
        *colon = 0;
    struct mks_fault f = {.rank = 0,
                          .cls = MKS_FAULT_ANY,
                          .gen = MKS_FAULT_ANY,
                          .magnitude_us = 1000,
                          .step_lo = 0,
                          .step_hi = UINT32_MAX,
                          .worker = 0,
                          .tile = 0,
                          .expert = -1};
    for (uint32_t t = 1; t <= MKS_FAULT_SLOW_RANK; t++)
        if (!strcmp(buf, type_names[t]))
            f.type = t;
    if (!f.type)
        return bb_err(err, err_len, -EINVAL,
                      "fault '%s': unknown type '%s' (task-delay, moe-skew, notify-delay, "
                      "queue-oversub, comm-delay, tile-starve, slow-rank)",
                      spec, buf);
    int rank_set = 0;
    char *save = NULL;
    for (char *kv = colon ? strtok_r(colon + 1, ",", &save) : NULL; kv;
         kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        if (!eq || eq == kv)
            return bb_err(err, err_len, -EINVAL, "fault '%s': '%s' is not key=value", spec, kv);
        *eq = 0;
        const char *k = kv, *v = eq + 1;
        uint64_t x;
        if (!strcmp(k, "rank")) {
            if (parse_u64(v, cfg->ranks - 1, &x))
                return bb_err(err, err_len, -EINVAL, "fault '%s': rank '%s' not in 0..%u", spec, v,
                              cfg->ranks - 1);
            f.rank = (int32_t)x;
            rank_set = 1;
        } else if (!strcmp(k, "class")) {
            int c = mks_bench_class_find(cfg, v);
            if (c < 0)
                return bb_err(err, err_len, -EINVAL,
                              "fault '%s': unknown task class '%s' (rmsnorm, qkv_proj, attention, "
                              "o_proj, allreduce_send, allreduce_reduce, moe_router, moe_combine, "
                              "lm_head, sample, expert.N)",
                              spec, v);
            f.cls = c;
        } else if (!strcmp(k, "gen")) {
            if (parse_u64(v, INT64_MAX, &x))
                return bb_err(err, err_len, -EINVAL, "fault '%s': gen '%s' is not a number", spec,
                              v);
            f.gen = (int64_t)x;
        } else if (!strcmp(k, "magnitude")) {
            if (parse_u64(v, 10ull * 1000 * 1000, &x))
                return bb_err(err, err_len, -EINVAL,
                              "fault '%s': magnitude '%s' not in 0..10000000 (microseconds per "
                              "step)",
                              spec, v);
            f.magnitude_us = x;
        } else if (!strcmp(k, "steps")) {
            char *dash = strchr(v, '-');
            uint64_t lo, hi;
            if (!strcmp(v, "all")) { /* persistent: every step, as with no steps key */
                lo = 0, hi = UINT32_MAX;
            } else if (dash) {
                *dash = 0;
                if (parse_u64(v, UINT32_MAX, &lo) || parse_u64(dash + 1, UINT32_MAX, &hi) ||
                    lo > hi)
                    return bb_err(err, err_len, -EINVAL,
                                  "fault '%s': steps must be N, N-M with N <= M, or all", spec);
            } else if (parse_u64(v, UINT32_MAX, &lo)) {
                return bb_err(err, err_len, -EINVAL,
                              "fault '%s': steps must be N, N-M with N <= M, or all", spec);
            } else {
                hi = lo;
            }
            f.step_lo = (uint32_t)lo;
            f.step_hi = (uint32_t)hi;
        } else if (!strcmp(k, "worker")) {
            if (parse_u64(v, cfg->workers - 1, &x))
                return bb_err(err, err_len, -EINVAL, "fault '%s': worker '%s' not in 0..%u", spec,
                              v, cfg->workers - 1);
            f.worker = (int32_t)x;
        } else if (!strcmp(k, "tile")) {
            if (parse_u64(v, MKS_BENCH_MAX_TILES - 1, &x))
                return bb_err(err, err_len, -EINVAL, "fault '%s': tile '%s' is not a tile index",
                              spec, v);
            f.tile = (int32_t)x;
        } else if (!strcmp(k, "expert")) {
            if (parse_u64(v, cfg->experts - 1, &x))
                return bb_err(err, err_len, -EINVAL, "fault '%s': expert '%s' not in 0..%u", spec,
                              v, cfg->experts - 1);
            f.expert = (int32_t)x;
        } else {
            return bb_err(err, err_len, -EINVAL,
                          "fault '%s': unknown key '%s' (rank, class, gen, magnitude, steps, "
                          "worker, tile, expert)",
                          spec, k);
        }
    }
    if (f.step_lo >= cfg->steps)
        return bb_err(err, err_len, -EINVAL, "fault '%s': steps start at %u, the run has %u", spec,
                      f.step_lo, cfg->steps);
    if (f.step_hi >= cfg->steps)
        f.step_hi = cfg->steps - 1;
    if (f.type != MKS_FAULT_COMM_DELAY && f.gen != MKS_FAULT_ANY &&
        (f.gen < 1 || (uint64_t)f.gen > cfg->steps))
        return bb_err(err, err_len, -EINVAL,
                      "fault '%s': gen is the task generation (the decode iteration), 1..%u", spec,
                      cfg->steps);
    /* each type's class: given, or the class the fault is about */
    switch (f.type) {
    case MKS_FAULT_TASK_DELAY:
        if (f.cls < 0)
            f.cls = BC_OPROJ;
        break;
    case MKS_FAULT_NOTIFY_DELAY:
        if (f.cls < 0)
            f.cls = BC_AR_SEND; /* the peers' notification comes late */
        break;
    case MKS_FAULT_QUEUE_OVERSUB:
        if (f.cls < 0)
            f.cls = BC_QKV;
        break;
    case MKS_FAULT_TILE_STARVE:
        if (f.cls < 0)
            f.cls = BC_QKV;
        if (f.cls != BC_QKV && f.cls != BC_OPROJ && f.cls != BC_LMHEAD)
            return bb_err(err, err_len, -EINVAL,
                          "fault '%s': tile-starve needs a tiled class (qkv_proj, o_proj, "
                          "lm_head)",
                          spec);
        if ((uint32_t)f.tile >= cfg->tiles)
            return bb_err(err, err_len, -EINVAL, "fault '%s': tile %d not in 0..%u", spec, f.tile,
                          cfg->tiles - 1);
        break;
    case MKS_FAULT_COMM_DELAY:
        if (f.cls >= 0 && f.cls != BC_AR_SEND)
            return bb_err(err, err_len, -EINVAL,
                          "fault '%s': comm-delay delays allreduce_send tasks", spec);
        f.cls = BC_AR_SEND;
        if (cfg->ranks < 2)
            return bb_err(err, err_len, -EINVAL, "fault '%s': comm-delay needs at least 2 ranks",
                          spec);
        if (f.gen != MKS_FAULT_ANY && (uint64_t)f.gen >= 2ull * cfg->layers)
            return bb_err(err, err_len, -EINVAL,
                          "fault '%s': gen is the all-reduce index in a step, 0..%u", spec,
                          2 * cfg->layers - 1);
        break;
    case MKS_FAULT_SLOW_RANK:
        if (f.cls != MKS_FAULT_ANY)
            return bb_err(err, err_len, -EINVAL,
                          "fault '%s': slow-rank slows every task class of the rank; it takes "
                          "no class",
                          spec);
        break;
    case MKS_FAULT_MOE_SKEW:
        if (f.cls >= 0 && f.cls < BC_EXPERT0)
            return bb_err(err, err_len, -EINVAL, "fault '%s': moe-skew's class is expert.N", spec);
        if (f.cls >= 0 && f.expert < 0)
            f.expert = f.cls - BC_EXPERT0;
        if (f.expert < 0)
            f.expert = f.rank; /* the first expert the rank owns */
        if (f.expert >= (int32_t)cfg->experts)
            return bb_err(err, err_len, -EINVAL, "fault '%s': rank %d owns no expert", spec,
                          f.rank);
        if (rank_set && (uint32_t)f.expert % cfg->ranks != (uint32_t)f.rank)
            return bb_err(err, err_len, -EINVAL,
                          "fault '%s': expert %d lives on rank %u, not rank %d", spec, f.expert,
                          (uint32_t)f.expert % cfg->ranks, f.rank);
        f.rank = (int32_t)((uint32_t)f.expert % cfg->ranks);
        f.cls = BC_EXPERT0 + f.expert;
        break;
    }
    *out = f;
    return 0;
}

int mks_bench_truth_write(const struct mks_bench_config *cfg, const struct mks_fault *faults,
                          uint32_t n_faults, const char *path, char *err, size_t err_len)
{
    json_t *root = json_object(), *arr = json_array();
    json_object_set_new(root, "seed", json_integer((json_int_t)cfg->seed));
    json_object_set_new(root, "ranks", json_integer(cfg->ranks));
    json_object_set_new(root, "steps", json_integer(cfg->steps));
    json_object_set_new(root, "job", json_string(cfg->job ? cfg->job : ""));
    for (uint32_t i = 0; i < n_faults; i++) {
        const struct mks_fault *f = &faults[i];
        char nb[32];
        json_t *o = json_object(), *gens = json_array();
        json_object_set_new(o, "type", json_string(mks_fault_type_name(f->type)));
        json_object_set_new(o, "cause", json_string(mks_fault_cause(f)));
        json_object_set_new(o, "rank", json_integer(f->rank));
        /* slow-rank: the whole rank, no class */
        const char *cn =
            f->cls >= 0 ? mks_bench_class_name(cfg, (uint32_t)f->cls, nb, sizeof(nb)) : NULL;
        json_object_set_new(o, "class", cn ? json_string(cn) : json_null());
        json_object_set_new(o, "class_id", json_integer(f->cls));
        json_object_set_new(o, "magnitude_us", json_integer((json_int_t)f->magnitude_us));
        json_t *st = json_array();
        json_array_append_new(st, json_integer(f->step_lo));
        json_array_append_new(st, json_integer(f->step_hi));
        json_object_set_new(o, "steps", st);
        json_object_set_new(o, "persistent",
                            json_boolean(f->step_lo == 0 && f->step_hi + 1 >= cfg->steps));
        if (f->type == MKS_FAULT_COMM_DELAY) {
            /* the transfers the producer delays: every peer, each all-reduce
             * index selected, each affected step */
            uint32_t k0 = f->gen == MKS_FAULT_ANY ? 0 : (uint32_t)f->gen;
            uint32_t k1 = f->gen == MKS_FAULT_ANY ? 2 * cfg->layers - 1 : (uint32_t)f->gen;
            json_object_set_new(o, "allreduce",
                                f->gen == MKS_FAULT_ANY ? json_null() : json_integer(f->gen));
            for (uint32_t s = f->step_lo; s <= f->step_hi; s++)
                for (uint32_t k = k0; k <= k1; k++)
                    for (uint32_t p = 0; p < cfg->ranks; p++)
                        if (p != (uint32_t)f->rank)
                            json_array_append_new(gens, json_integer((json_int_t)bw_comm_gen(
                                                            s, k, (uint32_t)f->rank, p)));
            json_object_set_new(o, "comm_gens", gens);
        } else {
            for (uint32_t s = f->step_lo; s <= f->step_hi; s++)
                if (f->gen == MKS_FAULT_ANY || (uint64_t)f->gen == (uint64_t)s + 1)
                    json_array_append_new(gens, json_integer((json_int_t)s + 1));
            json_object_set_new(o, "task_gens", gens);
        }
        if (f->type == MKS_FAULT_QUEUE_OVERSUB)
            json_object_set_new(o, "worker", json_integer(f->worker));
        if (f->type == MKS_FAULT_TILE_STARVE)
            json_object_set_new(o, "tile", json_integer(f->tile));
        if (f->type == MKS_FAULT_MOE_SKEW)
            json_object_set_new(o, "expert", json_integer(f->expert));
        json_array_append_new(arr, o);
    }
    json_object_set_new(root, "faults", arr);
    int rc = json_dump_file(root, path, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(root);
    if (rc)
        return bb_err(err, err_len, -EIO, "cannot write truth file %s", path);
    return 0;
}

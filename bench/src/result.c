/*
 * Configuration defaults and checks, results and their JSON form, and small
 * shared helpers.
 */
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_int.h"
#include "model.h"

int bb_err(char *err, size_t len, int code, const char *fmt, ...)
{
    if (err && len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, len, fmt, ap);
        va_end(ap);
    }
    return code;
}

void bb_sleep_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    while (nanosleep(&ts, &ts) && errno == EINTR)
        ;
}

void mks_bench_config_default(struct mks_bench_config *c)
{
    /* Small on purpose: a 4-rank run of 20 steps takes seconds on 2 cores. */
    *c = (struct mks_bench_config){.sz = sizeof(*c),
                                   .ranks = 1,
                                   .layers = 2,
                                   .hidden = 64,
                                   .heads = 2,
                                   .head_dim = 16,
                                   .experts = 8,
                                   .topk = 2,
                                   .ffn = 64,
                                   .vocab = 256,
                                   .tiles = 4,
                                   .workers = 2,
                                   .steps = 20,
                                   .batch = 4,
                                   .max_len = 12,
                                   .queue_pressure = 8,
                                   .seed = 1,
                                   .job = "mksbench"};
}

static int job_ok(const char *j)
{
    size_t n = j ? strlen(j) : 0;
    if (n < 1 || n > 48)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = j[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '.' || ch == '-'))
            return 0;
    }
    return 1;
}

#define RANGE(field, lo, hi)                                                                       \
    if (c->field < (lo) || c->field > (hi))                                                        \
    return bb_err(err, len, -EINVAL, #field " %u not in %u..%u", (unsigned)c->field,               \
                  (unsigned)(lo), (unsigned)(hi))

int mks_bench_config_check(const struct mks_bench_config *c, char *err, size_t len)
{
    if (!c || c->sz != sizeof(*c))
        return bb_err(err, len, -EINVAL, "config: size mismatch");
    RANGE(ranks, 1, MKS_BENCH_MAX_RANKS);
    RANGE(layers, 1, MKS_BENCH_MAX_LAYERS);
    RANGE(hidden, 8, MKS_BENCH_MAX_HIDDEN);
    RANGE(heads, 1, 64);
    RANGE(head_dim, 1, 256);
    RANGE(experts, 1, MKS_BENCH_MAX_EXPERTS);
    RANGE(topk, 1, c->experts);
    RANGE(ffn, 1, MKS_BENCH_MAX_HIDDEN);
    RANGE(vocab, 2, 1u << 20);
    RANGE(tiles, 1, MKS_BENCH_MAX_TILES);
    RANGE(workers, 1, MKS_BENCH_MAX_WORKERS);
    RANGE(steps, 1, MKS_BENCH_MAX_STEPS);
    RANGE(batch, 1, MKS_BENCH_MAX_BATCH);
    RANGE(max_len, 2, 256);
    if (c->wait_agents_ms > 600u * 1000)
        return bb_err(err, len, -EINVAL, "wait_agents_ms %u above 600 s", c->wait_agents_ms);
    if (c->step_interval_us > 10u * 1000 * 1000)
        return bb_err(err, len, -EINVAL, "step_interval_us %u above 10 s", c->step_interval_us);
    if (c->cuda_mode > MKS_BENCH_CUDA_GRAPH)
        return bb_err(err, len, -EINVAL, "cuda_mode %u unknown", c->cuda_mode);
    if ((uint64_t)c->heads * c->ranks * c->head_dim > 16384)
        return bb_err(err, len, -EINVAL, "heads x ranks x head_dim must be at most 16384");
    if (c->tiles > 3 * c->heads * c->head_dim || c->tiles > c->hidden || c->tiles > c->vocab)
        return bb_err(err, len, -EINVAL,
                      "tiles %u exceeds a tiled operator's width (hidden, vocab, 3 x heads x "
                      "head_dim)",
                      c->tiles);
    if (!job_ok(c->job))
        return bb_err(err, len, -EINVAL, "job name must be [A-Za-z0-9_.-]{1,48}");
    return 0;
}

struct mks_bench_result *bb_result_alloc(uint32_t ranks, uint32_t steps, uint32_t batch,
                                         uint32_t n_classes, int with_times)
{
    struct mks_bench_result *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->ranks = ranks;
    r->steps = steps;
    r->batch = batch;
    r->n_classes = n_classes;
    r->tokens = calloc((size_t)steps * batch, sizeof(*r->tokens));
    r->req_gen = calloc((size_t)steps * batch, sizeof(*r->req_gen));
    r->logit_sum = calloc(steps, sizeof(*r->logit_sum));
    if (with_times) {
        r->step_ns = calloc((size_t)ranks * steps, sizeof(*r->step_ns));
        r->class_counts = calloc((size_t)ranks * (n_classes ? n_classes : 1), sizeof(uint64_t));
        r->faulted = calloc(ranks, sizeof(uint64_t));
    }
    if (!r->tokens || !r->req_gen || !r->logit_sum ||
        (with_times && (!r->step_ns || !r->class_counts || !r->faulted))) {
        mks_bench_result_free(r);
        return NULL;
    }
    return r;
}

void mks_bench_result_free(struct mks_bench_result *r)
{
    if (!r)
        return;
    free(r->step_ns);
    free(r->class_counts);
    free(r->faulted);
    free(r->tokens);
    free(r->req_gen);
    free(r->logit_sum);
    free(r);
}

int mks_bench_result_write_json(const struct mks_bench_result *res,
                                const struct mks_bench_config *cfg, const char *backend,
                                const char *path, char *err, size_t err_len)
{
    json_t *root = json_object();
    json_t *c = json_object();
    json_object_set_new(c, "ranks", json_integer(cfg->ranks));
    json_object_set_new(c, "layers", json_integer(cfg->layers));
    json_object_set_new(c, "hidden", json_integer(cfg->hidden));
    json_object_set_new(c, "heads", json_integer(cfg->heads));
    json_object_set_new(c, "head_dim", json_integer(cfg->head_dim));
    json_object_set_new(c, "experts", json_integer(cfg->experts));
    json_object_set_new(c, "topk", json_integer(cfg->topk));
    json_object_set_new(c, "ffn", json_integer(cfg->ffn));
    json_object_set_new(c, "vocab", json_integer(cfg->vocab));
    json_object_set_new(c, "tiles", json_integer(cfg->tiles));
    json_object_set_new(c, "workers", json_integer(cfg->workers));
    json_object_set_new(c, "steps", json_integer(cfg->steps));
    json_object_set_new(c, "batch", json_integer(cfg->batch));
    json_object_set_new(c, "seed", json_integer((json_int_t)cfg->seed));
    json_object_set_new(c, "step_interval_us", json_integer(cfg->step_interval_us));
    json_object_set_new(c, "ar_relay", json_boolean(cfg->ar_relay));
    json_object_set_new(c, "job", json_string(cfg->job));
    static const char *const modes[] = {"persistent", "per-op", "graph"};
    if (!strcmp(backend, "cuda") && cfg->cuda_mode <= MKS_BENCH_CUDA_GRAPH)
        json_object_set_new(c, "cuda_mode", json_string(modes[cfg->cuda_mode]));
#ifdef MKS_HOOKS_DISABLED
    json_object_set_new(c, "hooks", json_string("compiled-out"));
#else
    json_object_set_new(c, "hooks", json_string("compiled-in"));
#endif
#ifdef MKS_BENCH_PROFILER
    json_object_set_new(c, "profiler", json_true());
#else
    json_object_set_new(c, "profiler", json_false());
#endif
#ifdef MKS_BENCH_COUNTERS
    json_object_set_new(c, "counters", json_true());
#else
    json_object_set_new(c, "counters", json_false());
#endif
    json_object_set_new(root, "config", c);
    json_object_set_new(root, "backend", json_string(backend));
    json_object_set_new(root, "wall_ns", json_integer((json_int_t)res->wall_ns));
    json_object_set_new(root, "profiler_dropped", json_integer((json_int_t)res->prof_dropped));
    json_t *ranks = json_array();
    for (uint32_t r = 0; r < res->ranks && res->step_ns; r++) {
        json_t *o = json_object(), *st = json_array(), *cc = json_object();
        uint64_t tot = 0;
        for (uint32_t s = 0; s < res->steps; s++) {
            uint64_t v = res->step_ns[(size_t)r * res->steps + s];
            tot += v;
            json_array_append_new(st, json_integer((json_int_t)v));
        }
        char nb[32];
        uint64_t tasks = 0;
        for (uint32_t k = 0; k < res->n_classes; k++) {
            uint64_t n = res->class_counts[(size_t)r * res->n_classes + k];
            tasks += n;
            json_object_set_new(cc, mks_bench_class_name(cfg, k, nb, sizeof(nb)),
                                json_integer((json_int_t)n));
        }
        /* the scale of a configuration: tasks per second of step time */
        json_object_set_new(o, "tasks", json_integer((json_int_t)tasks));
        json_object_set_new(o, "tasks_per_s", json_real(tot ? (double)tasks * 1e9 / tot : 0.0));
        json_object_set_new(o, "rank", json_integer(r));
        json_object_set_new(o, "step_ns", st);
        json_object_set_new(o, "total_ns", json_integer((json_int_t)tot));
        json_object_set_new(o, "class_counts", cc);
        json_object_set_new(o, "faulted_tasks", json_integer((json_int_t)res->faulted[r]));
        json_array_append_new(ranks, o);
    }
    json_object_set_new(root, "ranks", ranks);
    json_t *steps = json_array();
    for (uint32_t s = 0; s < res->steps; s++) {
        json_t *o = json_object(), *tok = json_array(), *rg = json_array();
        for (uint32_t i = 0; i < res->batch; i++) {
            json_array_append_new(tok, json_integer(res->tokens[(size_t)s * res->batch + i]));
            json_array_append_new(
                rg, json_integer((json_int_t)res->req_gen[(size_t)s * res->batch + i]));
        }
        json_object_set_new(o, "step", json_integer(s));
        json_object_set_new(o, "tokens", tok);
        json_object_set_new(o, "req_gen", rg);
        json_object_set_new(o, "logit_sum", json_real(res->logit_sum[s]));
        json_array_append_new(steps, o);
    }
    json_object_set_new(root, "steps", steps);
    int rc = json_dump_file(root, path, JSON_INDENT(1) | JSON_SORT_KEYS);
    json_decref(root);
    if (rc)
        return bb_err(err, err_len, -EIO, "cannot write result file %s", path);
    return 0;
}

/* A configuration field of the baseline file that must equal this run's. */
static int baseline_field(json_t *c, const char *name, uint64_t want, const char *path, char *err,
                          size_t err_len)
{
    json_t *v = json_object_get(c, name);
    if (!json_is_integer(v) || (uint64_t)json_integer_value(v) != want)
        return bb_err(err, err_len, -EINVAL,
                      "baseline %s: %s is not this run's %llu (a clean run of the same"
                      " configuration is needed)",
                      path, name, (unsigned long long)want);
    return 0;
}

int mks_bench_baseline_load(const struct mks_bench_config *cfg, const char *path, uint64_t **out,
                            char *err, size_t err_len)
{
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root)
        return bb_err(err, err_len, -EINVAL, "baseline %s: %s (line %d)", path, je.text, je.line);
    uint64_t *v = NULL;
    int rc = -EINVAL;
    json_t *c = json_object_get(root, "config"), *ranks = json_object_get(root, "ranks");
    if (!json_is_object(c) || !json_is_array(ranks)) {
        bb_err(err, err_len, rc, "baseline %s: not a result file of mkscope-bench --json", path);
        goto out;
    }
    const struct {
        const char *name;
        uint64_t want;
    } fields[] = {{"ranks", cfg->ranks},     {"layers", cfg->layers},   {"hidden", cfg->hidden},
                  {"heads", cfg->heads},     {"experts", cfg->experts}, {"tiles", cfg->tiles},
                  {"workers", cfg->workers}, {"steps", cfg->steps},     {"batch", cfg->batch},
                  {"seed", cfg->seed}};
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
        if (baseline_field(c, fields[i].name, fields[i].want, path, err, err_len))
            goto out;
    if (json_array_size(ranks) != cfg->ranks) {
        bb_err(err, err_len, rc, "baseline %s: %zu ranks of step times, the run has %u", path,
               json_array_size(ranks), cfg->ranks);
        goto out;
    }
    v = calloc((size_t)cfg->ranks * cfg->steps, sizeof(*v));
    if (!v) {
        rc = bb_err(err, err_len, -ENOMEM, "baseline %s: out of memory", path);
        goto out;
    }
    for (size_t i = 0; i < cfg->ranks; i++) {
        json_t *o = json_array_get(ranks, i), *st = json_object_get(o, "step_ns"),
               *r = json_object_get(o, "rank"), *ft = json_object_get(o, "faulted_tasks");
        if (!json_is_integer(r) || json_integer_value(r) < 0 ||
            json_integer_value(r) >= (json_int_t)cfg->ranks || !json_is_array(st) ||
            json_array_size(st) != cfg->steps) {
            bb_err(err, err_len, rc, "baseline %s: rank entry %zu needs rank and %u step_ns", path,
                   i, cfg->steps);
            goto out;
        }
        if (json_is_integer(ft) && json_integer_value(ft) != 0) {
            bb_err(err, err_len, rc, "baseline %s: rank %lld ran with faults: not a clean run",
                   path, (long long)json_integer_value(r));
            goto out;
        }
        uint64_t *row = v + (size_t)json_integer_value(r) * cfg->steps;
        for (uint32_t s = 0; s < cfg->steps; s++) {
            json_t *x = json_array_get(st, s);
            if (!json_is_integer(x) || json_integer_value(x) <= 0) {
                bb_err(err, err_len, rc, "baseline %s: rank %lld step %u: not a step time", path,
                       (long long)json_integer_value(r), s);
                goto out;
            }
            if (row[s]) {
                bb_err(err, err_len, rc, "baseline %s: rank %lld given twice", path,
                       (long long)json_integer_value(r));
                goto out;
            }
            row[s] = (uint64_t)json_integer_value(x);
        }
    }
    *out = v;
    v = NULL;
    rc = 0;
out:
    free(v);
    json_decref(root);
    return rc;
}

/*
 * MPK's task_graph.json as mkscope task classes and a TaskSchema
 * (mkscope/mpk_graph.h says what a class is).  The file is MPK's own output
 * (src/kernel/runtime.cc of Mirage, print_task_graph): every field used here
 * is checked, and a file that is not that format gets one line saying which
 * entry and what was expected.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "mkscope/mpk_graph.h"
#include "mkscope/pbwrite.h"

/* MPK's TaskType numbers and names (runtime_header.h of a9e0f745). */
static const struct {
    uint32_t type;
    const char *name;
} task_types[] = {
#include "task_types.inc"
};

#define TASK_TERMINATE          0u
#define TASK_BEGIN_TASK_GRAPH   10u
#define EVENT_NVSHMEM_TAG       0x1e00000000000000ull
#define EVENT_INVALID_ID        0x7ffffffffffffffeull
/* Task types whose request_id is a batch slot (attention; MPK sets it from
 * the grid's x for these, and, aliased with other fields, for the rest). */
static const uint32_t request_types[] = {103, 104, 115, 116, 117, 153, 164, 257, 263};

const char *mks_mpk_task_type_name(uint32_t type)
{
    for (size_t i = 0; i < sizeof(task_types) / sizeof(task_types[0]); i++)
        if (task_types[i].type == type)
            return task_types[i].name;
    return NULL;
}

static int fail(char *err, size_t len, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (err && len)
        vsnprintf(err, len, fmt, ap);
    va_end(ap);
    return rc;
}

/* An integer member, or -EINVAL with the entry named. */
static int get_int(json_t *o, const char *key, long long *v, const char *what, const char *arr,
                   size_t i, char *err, size_t len)
{
    json_t *x = json_object_get(o, key);
    if (!json_is_integer(x))
        return fail(err, len, -EINVAL, "%s: %s[%zu]: no integer \"%s\"; expected MPK's task_graph.json",
                    what, arr, i, key);
    *v = json_integer_value(x);
    return 0;
}

/* The tensor name of tensors[0] ("" when there are none). */
static int first_tensor(json_t *task, const char *key, const char **name, const char *what,
                        size_t i, char *err, size_t len)
{
    json_t *a = json_object_get(task, key), *t;
    *name = "";
    if (!a || json_is_null(a) || (json_is_object(a) && json_object_size(a) == 0))
        return 0;
    if (!json_is_array(a))
        return fail(err, len, -EINVAL, "%s: all_tasks[%zu]: \"%s\" is not an array", what, i, key);
    if (json_array_size(a) == 0)
        return 0;
    t = json_array_get(a, 0);
    if (!json_is_object(t) || !json_is_string(json_object_get(t, "base_ptr")))
        return fail(err, len, -EINVAL, "%s: all_tasks[%zu]: %s[0] has no string \"base_ptr\"",
                    what, i, key);
    *name = json_string_value(json_object_get(t, "base_ptr"));
    return 0;
}

/* Copy with digit runs as '*': layer_12_q_proj -> layer_*_q_proj. */
static void fold_digits(char *dst, size_t cap, const char *src)
{
    size_t n = 0;
    for (const char *s = src; *s && n + 1 < cap; s++) {
        if (isdigit((unsigned char)*s)) {
            while (isdigit((unsigned char)s[1]))
                s++;
            dst[n++] = '*';
        } else {
            dst[n++] = *s;
        }
    }
    dst[n] = 0;
}

static void add_source(struct mks_mpk_class *c, json_t *task)
{
    json_t *a = json_object_get(task, "inputs"), *t;
    size_t i;
    if (!json_is_array(a))
        return;
    json_array_foreach(a, i, t)
    {
        char f[96];
        const char *n = json_string_value(json_object_get(t, "base_ptr"));
        size_t have = strlen(c->source_op);
        if (!n || !strcmp(n, "nullptr"))
            continue;
        fold_digits(f, sizeof(f), n);
        /* each name once */
        const char *p = c->source_op;
        int dup = 0;
        while (p && *p) {
            size_t l = strcspn(p, ",");
            if (l == strlen(f) && !strncmp(p, f, l))
                dup = 1;
            p = p[l] ? p + l + 1 : NULL;
        }
        if (!dup && have + strlen(f) + 2 < sizeof(c->source_op))
            snprintf(c->source_op + have, sizeof(c->source_op) - have, "%s%s", have ? "," : "", f);
    }
}

static uint32_t find_class(struct mks_mpk_graph *g, uint32_t type, const char *tensor)
{
    for (uint32_t c = 0; c < g->n_classes; c++)
        if (g->classes[c].type == type && !strcmp(g->classes[c].tensor, tensor))
            return c;
    return MKS_MPK_NO_CLASS;
}

static uint32_t new_class(struct mks_mpk_graph *g, uint32_t type, uint32_t variant,
                          const char *tensor)
{
    const char *tn = mks_mpk_task_type_name(type);
    struct mks_mpk_class *c;
    char low[64];
    size_t k = 0;
    if (g->n_classes == MKS_MPK_MAX_CLASSES)
        return MKS_MPK_MAX_CLASSES - 1; /* folds into the last, "other" */
    c = &g->classes[g->n_classes];
    memset(c, 0, sizeof(*c));
    c->type = type;
    c->variant = variant;
    if (tn)
        snprintf(c->task_type, sizeof(c->task_type), "%s", tn);
    else
        snprintf(c->task_type, sizeof(c->task_type), "task_type_%u", type);
    snprintf(c->tensor, sizeof(c->tensor), "%s", tensor);
    for (const char *s = strncmp(c->task_type, "TASK_", 5) ? c->task_type : c->task_type + 5;
         *s && k + 1 < sizeof(low); s++)
        low[k++] = (char)tolower((unsigned char)*s);
    low[k] = 0;
    if (*tensor)
        snprintf(c->name, sizeof(c->name), "%.60s.%.32s", low, tensor);
    else
        snprintf(c->name, sizeof(c->name), "%s", low);
    for (size_t i = 0; i < sizeof(request_types) / sizeof(request_types[0]); i++)
        if (request_types[i] == type)
            c->flags |= 1u;
    if ((type > 300 && type < 349) || type == 106)
        c->flags |= 2u;
    return g->n_classes++;
}

void mks_mpk_graph_free(struct mks_mpk_graph *g)
{
    if (!g)
        return;
    free(g->task_info);
    free(g->event_class);
    free(g);
}

/* An event id's position index, or -1 for "none". */
static long long event_index(long long id, uint32_t n_events)
{
    uint64_t u = (uint64_t)id;
    if (u == EVENT_INVALID_ID)
        return -1;
    u &= 0xffffffffull;
    return u < n_events ? (long long)u : -2;
}

static int build(json_t *root, const char *what, struct mks_mpk_graph **g_p, char *err, size_t len)
{
    json_t *tasks = json_object_get(root, "all_tasks"), *events = json_object_get(root, "all_events");
    struct mks_mpk_graph *g;
    size_t i;
    json_t *t, *e;
    uint32_t prev_cls = MKS_MPK_NO_CLASS, tile = 0;
    int rc;
    if (!json_is_object(root) || !json_is_array(tasks) || !json_is_array(events))
        return fail(err, len, -EINVAL,
                    "%s: no \"all_tasks\" and \"all_events\" arrays; expected MPK's task_graph.json",
                    what);
    if (json_array_size(tasks) < 2 || json_array_size(events) < 1)
        return fail(err, len, -EINVAL, "%s: %zu tasks and %zu events: not a task graph (MPK writes "
                    "TERMINATE and BEGIN_TASK_GRAPH first)", what, json_array_size(tasks),
                    json_array_size(events));
    if (json_array_size(tasks) > (1u << 24) || json_array_size(events) > (1u << 30))
        return fail(err, len, -E2BIG, "%s: %zu tasks: more than mkscope's task table holds (2^24)",
                    what, json_array_size(tasks));
    g = calloc(1, sizeof(*g));
    if (!g)
        return -ENOMEM;
    g->n_tasks = (uint32_t)json_array_size(tasks);
    g->n_events = (uint32_t)json_array_size(events);
    g->task_info = malloc(g->n_tasks * sizeof(*g->task_info));
    g->event_class = malloc(g->n_events * sizeof(*g->event_class));
    if (!g->task_info || !g->event_class) {
        mks_mpk_graph_free(g);
        return -ENOMEM;
    }
    for (uint32_t k = 0; k < g->n_events; k++)
        g->event_class[k] = MKS_MPK_NO_CLASS;
    json_array_foreach(tasks, i, t)
    {
        long long type = 0, variant = 0, trig = 0;
        const char *out;
        uint32_t cls;
        if (!json_is_object(t)) {
            rc = fail(err, len, -EINVAL, "%s: all_tasks[%zu] is not an object", what, i);
            goto bad;
        }
        if ((rc = get_int(t, "task_type", &type, what, "all_tasks", i, err, len)) ||
            (rc = get_int(t, "variant_id", &variant, what, "all_tasks", i, err, len)) ||
            (rc = get_int(t, "trigger_event", &trig, what, "all_tasks", i, err, len)) ||
            (rc = first_tensor(t, "outputs", &out, what, i, err, len)))
            goto bad;
        if (type < 0 || type > 100000 || variant < 0) {
            rc = fail(err, len, -EINVAL, "%s: all_tasks[%zu]: task_type %lld / variant %lld out of "
                      "range", what, i, type, variant);
            goto bad;
        }
        if (i == 0) {
            if (type != TASK_TERMINATE) {
                rc = fail(err, len, -EINVAL, "%s: all_tasks[0] is task type %lld, not TERMINATE (0): "
                          "not MPK's task graph", what, type);
                goto bad;
            }
            g->task_info[0] = MKS_MPK_NO_CLASS;
            continue;
        }
        cls = find_class(g, (uint32_t)type, out);
        if (cls == MKS_MPK_NO_CLASS)
            cls = new_class(g, (uint32_t)type, (uint32_t)variant, out);
        add_source(&g->classes[cls], t);
        tile = cls == prev_cls ? tile + 1 : 0;
        if (tile == 0)
            g->classes[cls].n_ops++;
        if (tile > 0xffffffu)
            tile = 0xffffffu;
        prev_cls = cls;
        g->classes[cls].per_iter++;
        g->task_info[i] = cls << 24 | tile;
        long long ti = event_index(trig, g->n_events);
        if (ti == -2) {
            rc = fail(err, len, -EINVAL, "%s: all_tasks[%zu]: trigger_event 0x%llx names no event "
                      "(%u events)", what, i, (unsigned long long)trig, g->n_events);
            goto bad;
        }
        if (ti >= 0 && g->event_class[ti] == MKS_MPK_NO_CLASS)
            g->event_class[ti] = cls;
    }
    /* what each class waits on: the producers of the events that launch its
     * tasks, and of the events its tasks wait for */
    json_array_foreach(events, i, e)
    {
        long long first = 0, last = 0, type = 0, nt = 0;
        if (!json_is_object(e)) {
            rc = fail(err, len, -EINVAL, "%s: all_events[%zu] is not an object", what, i);
            goto bad;
        }
        if ((rc = get_int(e, "event_type", &type, what, "all_events", i, err, len)) ||
            (rc = get_int(e, "num_triggers", &nt, what, "all_events", i, err, len)) ||
            (rc = get_int(e, "first_task_id", &first, what, "all_events", i, err, len)) ||
            (rc = get_int(e, "last_task_id", &last, what, "all_events", i, err, len)))
            goto bad;
        if (first < 0 || last < first || (uint64_t)last > g->n_tasks) {
            rc = fail(err, len, -EINVAL, "%s: all_events[%zu]: task range %lld..%lld outside the "
                      "%u tasks", what, i, first, last, g->n_tasks);
            goto bad;
        }
        uint32_t pc = g->event_class[i];
        for (long long k = first; k < last; k++) {
            uint32_t c = g->task_info[k];
            if (c != MKS_MPK_NO_CLASS && pc != MKS_MPK_NO_CLASS)
                g->classes[c >> 24].deps |= 1ull << pc;
        }
    }
    json_array_foreach(tasks, i, t)
    {
        long long dep = 0;
        uint32_t c = g->task_info[i];
        if (c == MKS_MPK_NO_CLASS || get_int(t, "dependent_event", &dep, what, "all_tasks", i, err,
                                             len))
            continue;
        long long di = event_index(dep, g->n_events);
        if (di >= 0 && g->event_class[di] != MKS_MPK_NO_CLASS)
            g->classes[c >> 24].deps |= 1ull << g->event_class[di];
        if (di != -1 && ((uint64_t)dep & EVENT_NVSHMEM_TAG))
            g->classes[c >> 24].remote_deps = 1;
    }
    *g_p = g;
    return 0;
bad:
    mks_mpk_graph_free(g);
    return rc;
}

int mks_mpk_graph_parse(const char *json, size_t n, const char *what, struct mks_mpk_graph **g_p,
                        char *err, size_t len)
{
    json_error_t je;
    json_t *root = json_loadb(json, n, 0, &je);
    int rc;
    if (!g_p)
        return -EINVAL;
    if (!root)
        return fail(err, len, -EINVAL, "%s:%d: %s; expected MPK's task_graph.json", what, je.line,
                    je.text);
    rc = build(root, what, g_p, err, len);
    json_decref(root);
    return rc;
}

int mks_mpk_graph_load(const char *path, struct mks_mpk_graph **g_p, char *err, size_t len)
{
    json_error_t je;
    json_t *root;
    int rc;
    if (!path || !g_p)
        return -EINVAL;
    root = json_load_file(path, 0, &je);
    if (!root) {
        FILE *f = fopen(path, "r");
        if (!f)
            return fail(err, len, -ENOENT, "%s: %s", path, strerror(errno));
        fclose(f);
        return fail(err, len, -EINVAL, "%s:%d: %s; expected MPK's task_graph.json", path, je.line,
                    je.text);
    }
    rc = build(root, path, g_p, err, len);
    json_decref(root);
    return rc;
}

int mks_mpk_graph_class(const struct mks_mpk_graph *g, const char *name)
{
    if (!g || !name)
        return -EINVAL;
    for (uint32_t c = 0; c < g->n_classes; c++)
        if (!strcmp(g->classes[c].name, name))
            return (int)c;
    for (uint32_t c = 0; c < g->n_classes; c++)
        if (!strcmp(g->classes[c].task_type, name))
            return (int)c;
    return -ENOENT;
}

/* DepClass ids: a class's own id for "its tasks released the event", and
 * one more for NVSHMEM (remote) events. */
#define DEP_REMOTE MKS_MPK_MAX_CLASSES

int mks_mpk_graph_schema(const struct mks_mpk_graph *g, uint8_t **buf_p, size_t *len_p)
{
    struct mks_pbw root = {0}, m = {0}, deps = {0};
    uint64_t produced = 0;
    int remote = 0;
    char dn[112];
    if (!g || !buf_p || !len_p)
        return -EINVAL;
    for (uint32_t c = 0; c < g->n_classes; c++) {
        const struct mks_mpk_class *k = &g->classes[c];
        char fn[80];
        produced |= k->deps;
        remote |= k->remote_deps != 0;
        snprintf(fn, sizeof(fn), "%s/v%u", k->task_type, k->variant);
        mks_pbw_uint3(&m, 1, c);
        mks_pbw_str(&m, 2, k->name);
        mks_pbw_str(&m, 3, k->source_op[0] ? k->source_op : k->task_type);
        mks_pbw_str(&m, 4, fn);
        mks_pbw_str(&m, 5, k->tensor[0] ? k->tensor : "none");
        for (uint32_t d = 0; d < MKS_MPK_MAX_CLASSES; d++)
            if (k->deps >> d & 1u)
                mks_pbw_varint(&deps, d);
        if (k->remote_deps)
            mks_pbw_varint(&deps, DEP_REMOTE);
        mks_pbw_sub(&m, 6, &deps);
        mks_pbw_uint3(&m, 7, (k->flags & 2u) != 0);
        mks_pbw_sub(&root, 1, &m);
    }
    for (uint32_t d = 0; d < g->n_classes; d++) {
        if (!(produced >> d & 1u))
            continue;
        snprintf(dn, sizeof(dn), "%.100s.done", g->classes[d].name);
        mks_pbw_uint3(&m, 1, d);
        mks_pbw_str(&m, 2, dn);
        mks_pbw_uint3(&m, 3, 0);
        mks_pbw_sub(&root, 2, &m);
    }
    if (remote) {
        mks_pbw_uint3(&m, 1, DEP_REMOTE);
        mks_pbw_str(&m, 2, "nvshmem.remote");
        mks_pbw_uint3(&m, 3, 1);
        mks_pbw_sub(&root, 2, &m);
    }
    mks_pbw_free(&m);
    mks_pbw_free(&deps);
    return mks_pbw_take(&root, buf_p, len_p);
}

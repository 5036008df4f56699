/*
 * MPK's task graph (the task_graph.json its front end writes beside the
 * generated kernel) read as mkscope's task classes and schema.
 *
 * MPK's graph is a flat list of tasks in position order (position = the low
 * half of a task id), each with its task type, variant, the event it
 * triggers and the one it may wait on, and its input and output tensors by
 * name; and a list of events (type, triggers, the range of tasks each
 * launches).  The tasks of one operator are consecutive and write one output
 * tensor, so an operator is a run of tasks with the same task type and
 * output tensor; a task class is a (task type, output tensor) pair, which
 * folds the layers of a model together as the reference megakernel's
 * classes do ("linear_hopper.attn_in" is every layer's QKV projection).
 * Every task but TERMINATE runs once per iteration (decode step).
 * Fault plans for testing the diagnosis name classes and events of it, so
 * they are parsed against it here too.
 */
#ifndef MKSCOPE_MPK_GRAPH_H
#define MKSCOPE_MPK_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Classes a graph keeps apart: the standard monitors' tables hold 64 with
 * the last one "other" (agent/monitors/monitors.h), so further classes fold
 * into class MKS_MPK_MAX_CLASSES - 1. */
#define MKS_MPK_MAX_CLASSES 64
#define MKS_MPK_NO_CLASS    0xffffffffu /* task_info of TERMINATE */

struct mks_mpk_class {
    char name[96];       /* "<task type, lower case, no TASK_>.<output tensor>" */
    char task_type[64];  /* MPK's name, "TASK_LINEAR_HOPPER" ("task_type_<n>" if unknown) */
    char tensor[64];     /* the output tensor */
    char source_op[160]; /* the input tensors, layer numbers as '*' */
    uint32_t type, variant;
    uint32_t per_iter;   /* tasks per iteration */
    uint32_t n_ops;      /* operator instances (layers) */
    uint32_t flags;      /* MKS_MPK_CF_* of mpk.cuh: 1 request-bound, 2 communication */
    uint64_t deps;       /* bit c: waits on events released by class c */
    uint32_t remote_deps; /* waits on NVSHMEM (remote) events */
};

struct mks_mpk_graph {
    uint32_t n_tasks, n_events, n_classes;
    uint32_t *task_info;    /* [n_tasks]: class << 24 | tile within the operator */
    uint32_t *event_class;  /* [n_events]: class of the tasks that trigger it (or NO_CLASS) */
    struct mks_mpk_class classes[MKS_MPK_MAX_CLASSES];
};

/* Read and check path; one line in err on failure (file, entry, what was
 * expected): -ENOENT, -EINVAL (not MPK's format), -E2BIG, -ENOMEM. */
int mks_mpk_graph_load(const char *path, struct mks_mpk_graph **g_p, char *err, size_t err_len);
/* The same from a JSON text in memory (tests). */
int mks_mpk_graph_parse(const char *json, size_t len, const char *what, struct mks_mpk_graph **g_p,
                        char *err, size_t err_len);
void mks_mpk_graph_free(struct mks_mpk_graph *g);

/* The serialized mkscope.v1.TaskSchema of the graph (free() it). */
int mks_mpk_graph_schema(const struct mks_mpk_graph *g, uint8_t **buf_p, size_t *len_p);

/* Class id by name or by MPK task type name (the first class of that type);
 * -ENOENT. */
int mks_mpk_graph_class(const struct mks_mpk_graph *g, const char *name);

/* Faults inside MPK's hooked loop, for testing the diagnosis (docs/mpk.md):
 * the plan is the ground truth, which the diagnosis never reads. */
#define MKS_MPK_MAX_FAULTS 8
enum mks_mpk_fault_kind {
    MKS_MPK_FAULT_TASK_DELAY = 1,   /* tasks of one class run `ns` longer */
    MKS_MPK_FAULT_NOTIFY_DELAY = 2, /* releases of one event come `ns` late */
};
struct mks_mpk_fault {
    uint32_t kind;
    uint32_t cls;   /* TASK_DELAY: class id */
    uint32_t event; /* NOTIFY_DELAY: event index (position in all_events) */
    uint32_t step_lo, step_hi;
    uint32_t pad;
    uint64_t ns;
};

/* Parse a plan, ';'-separated faults:
 *   task-delay:class=NAME,steps=A[-B],ns=N     (NAME: a class or MPK task type)
 *   notify-delay:event=E,steps=A[-B],ns=N      (E: an event index of the graph)
 * into out[0..max); 0 and *n_p, or -EINVAL / -E2BIG with one line in err.
 * An empty or NULL spec is no fault. */
int mks_mpk_faults_parse(const struct mks_mpk_graph *g, const char *spec,
                         struct mks_mpk_fault *out, uint32_t max, uint32_t *n_p, char *err,
                         size_t err_len);

/* MPK's name of a task type number, or NULL. */
const char *mks_mpk_task_type_name(uint32_t type);

#ifdef __cplusplus
}
#endif

#endif /* MKSCOPE_MPK_GRAPH_H */

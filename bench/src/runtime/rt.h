/*
 * The task-graph runtime of one rank, in the style of MPK's in-kernel
 * runtime, run by threads on the CPU backend:
 *
 *   - a task names its class, generation, tile, the local event that makes it
 *     ready (wait_ev) and the event it triggers when it ends (trig_ev);
 *   - events are counters that are never reset: an event fires when its count
 *     reaches its cumulative target, which every step raises by the number of
 *     tasks that trigger it (triggers x iteration for a static graph, the
 *     count the router created for dynamic expert tasks);
 *   - the scheduler moves the dependents of a fired event to the ready list,
 *     orders them by priority (a CONTROL program's hint at TASK_READY and
 *     TASK_ASSIGN), and assigns them to per-worker queues;
 *   - workers pop their queue, run the task body and release its event.
 *
 * The scheduler runs on whichever thread fired the event, under the rank's
 * scheduler lock.  Its TASK_READY hooks run as hook worker n_workers (its own
 * slot in the control block: the task has no worker yet); TASK_ASSIGN and
 * QUEUE_PRESSURE run as the worker whose queue received the task, so
 * monitors key queues by ctx.worker.
 * Idle workers sleep on a condition variable: nothing spins, because every
 * rank process of a CPU run shares a few cores.
 */
#ifndef MKS_BENCH_RT_H
#define MKS_BENCH_RT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "mkscope/hook_abi.h"
#include "prof.h"

#define BR_EV_NONE UINT32_MAX

struct br_rt;
struct br_task;
struct mks_rt;

typedef void (*br_body_fn)(struct br_rt *rt, uint32_t worker, struct br_task *t);

struct br_task {
    uint16_t cls;
    uint16_t flags; /* MKS_CTX_F_* */
    uint32_t step;
    uint64_t gen;     /* task generation */
    uint64_t req_gen; /* request generation of the slot, 0 if none */
    uint32_t tile_x, tile_y;
    uint32_t layer;
    uint32_t wait_ev, trig_ev;
    br_body_fn body;
    br_body_fn release; /* optional: releases remote events after the task ends,
                           before trig_ev (communication tasks signal peers) */
    /* fault plan, set by the graph builder (0: none) */
    uint64_t run_delay_ns;    /* task-delay, moe-skew: body runs long */
    uint64_t notify_delay_ns; /* notify-delay: release postponed after END while
                                 the worker moves on */
    uint64_t hold_ns;         /* queue-oversub: backlog ahead of the task */
    uint64_t starve_ns;       /* tile-starve: scheduler passes it over */
    uint64_t comm_delay_ns;   /* comm-delay: the body's transfer completes no earlier
                                 than this long after t_ready */
    int32_t force_worker;     /* queue-oversub: the oversubscribed queue, or -1 */
    /* scheduler state */
    int32_t prio;
    uint32_t worker;
    uint64_t t_ready, t_start;
    uint64_t t_end; /* body ended (0 while running): ctx.t_end at TASK_END and the release */
    uint64_t release_at; /* notify-delay: when the postponed release is due */
    uint32_t next_dep;   /* index of the next dependent of wait_ev */
};

struct br_opts {
    uint32_t rank, n_ranks, n_workers, n_events, n_classes;
    uint32_t max_tasks;      /* per step graph, dynamic tasks included */
    uint32_t queue_pressure; /* depth that raises QUEUE_PRESSURE, 0 = never */
    uint32_t order_cap;      /* tasks whose start order is logged (tests), 0 = off */
    uint32_t n_steps;        /* decode steps: rows of the fixed counters (counters build) */
    struct mks_rt *hooks;    /* NULL: no hooks */
    void *user;
};

/* One logged task start (tests read the order the scheduler produced). */
struct br_order {
    uint16_t cls;
    uint16_t worker;
    uint32_t tile_x, tile_y;
    int32_t prio;
};

int br_create(const struct br_opts *opts, struct br_rt **rt_p);
/* Stop and join the workers (idempotent); counts are final afterwards. */
void br_stop(struct br_rt *rt);
void br_destroy(struct br_rt *rt); /* stops workers; accepts NULL */

void *br_user(const struct br_rt *rt);
uint32_t br_rank(const struct br_rt *rt);
uint32_t br_workers(const struct br_rt *rt);

/* Graph building.  br_graph_begin returns an empty graph in the spare buffer;
 * tasks are added; br_graph_commit makes it the one events resolve against.
 * The current graph can grow while it runs (br_task_add_live, under the
 * scheduler lock): dynamic tasks. */
void br_graph_begin(struct br_rt *rt);
struct br_task *br_task_add(struct br_rt *rt); /* NULL when max_tasks is reached */
void br_graph_commit(struct br_rt *rt);
struct br_task *br_task_add_live(struct br_rt *rt, const struct br_task *proto);

/* Raise an event's target by n more triggers (never lowers, never resets). */
void br_event_expect(struct br_rt *rt, uint32_t ev, uint64_t n);
uint64_t br_event_count(const struct br_rt *rt, uint32_t ev);
uint64_t br_event_target(const struct br_rt *rt, uint32_t ev);
/* Release one trigger of ev (as a task end does); fires it at its target. */
void br_event_trigger(struct br_rt *rt, uint32_t worker, const struct br_task *by, uint32_t ev);
/* Make ev's dependents ready now (the first step's start, an event expected
 * zero times). */
void br_event_fire(struct br_rt *rt, uint32_t ev);

int br_start(struct br_rt *rt);
/* Wait until br_finish is called (by a task), or abort_p becomes nonzero. */
int br_wait_finish(struct br_rt *rt, const _Atomic uint32_t *abort_p);
void br_finish(struct br_rt *rt, int status);

/* Hook helpers for task bodies: fill the common fields of a context. */
void br_ctx_init(const struct br_rt *rt, uint32_t worker, const struct br_task *t, uint16_t ev,
                 struct mks_hook_ctx *ctx);
int32_t br_hook(struct br_rt *rt, struct mks_hook_ctx *ctx);
/* A hook about a remote dependency or transfer (comm begin/end, remote
 * release, remote wait begin/end). */
int32_t br_hook_remote(struct br_rt *rt, uint32_t worker, const struct br_task *t, uint16_t ev,
                       uint32_t peer, uint64_t comm_gen, uint64_t dep_event, uint64_t value);

/* Wait (as worker, inside task t) until *counter >= target; a remote
 * dependency.  Emits DEP_WAIT_BEGIN/END with dep_event, peer and comm_gen.
 * Returns 0, or -ECANCELED when *abort_p became nonzero, -ETIMEDOUT after
 * timeout_ns. */
int br_wait_remote(struct br_rt *rt, uint32_t worker, const struct br_task *t,
                   _Atomic uint32_t *counter, uint32_t target, uint64_t dep_event, uint32_t peer,
                   uint64_t comm_gen, const _Atomic uint32_t *abort_p, uint64_t timeout_ns);

/* An injected delay of ns on worker (fault plans; task bodies for delays
 * inside a transfer). */
void br_fault_sleep(struct br_rt *rt, uint32_t worker, uint64_t ns);
/* The same until the clock (bb_now_ns) reads deadline; nothing if it has. */
void br_fault_sleep_until(struct br_rt *rt, uint32_t worker, uint64_t deadline);

/* Counts the runtime keeps itself, independent of hooks. */
uint64_t br_class_count(const struct br_rt *rt, uint32_t cls);
uint64_t br_passovers(const struct br_rt *rt);
/* Tasks whose execution a fault plan changed (delayed, held, passed over). */
uint64_t br_faulted(const struct br_rt *rt);
uint32_t br_order_get(const struct br_rt *rt, const struct br_order **order_p);

/* Native profiler (compiled in with MKS_BENCH_PROFILER): per-worker records. */
uint64_t br_prof_dropped(const struct br_rt *rt);
/* Chrome/Perfetto JSON trace of every worker's records. */
int br_prof_export(const struct br_rt *rt, const char *path,
                   const char *(*cls_name)(void *user, uint32_t cls), void *user);

/* Fixed counters (compiled in with MKS_BENCH_COUNTERS): what a compiler can
 * keep for every task class and remote event without programs, per step:
 * per class the tasks, their run time (TASK_START to TASK_END) total and
 * maximum, their queueing (ready to start) total and maximum; per peer the
 * time workers waited on its remote events, total, maximum and waits.
 * Written as JSON (bench/counter/README.md has the format). */
int br_counters_export(const struct br_rt *rt, const char *path,
                       const char *(*cls_name)(void *user, uint32_t cls), void *user);

#endif

/*
 * The agent's standard monitors: names, keys and value layouts of their maps.
 *
 * The monitors (agent/monitors/<name>.bpf.c) write these maps on the device;
 * the agent reads them from epoch snapshots and decodes them with the structs
 * below, so this header is the one definition both sides compile.  It is
 * plain data usable from BPF C (after mkscope.bpf.h) and from host C.
 *
 * Every value is made of u64 counters or u64 fields, so a snapshot of a
 * per-worker array can sum workers and a reader never meets padding.
 *
 * Monitor objects, their programs (section) and maps:
 *
 *   count.bpf.o     count       mkscope/task_end        count_by_class
 *   latency.bpf.o   lat_ready   mkscope/task_start      lat_ready
 *                   lat_run     mkscope/task_end        lat_run, lat_step, count_by_class,
 *                                                       worker_time
 *   depwait.bpf.o   wait_begin  mkscope/dep_wait_begin  wait_begin_ts
 *                   wait_end    mkscope/dep_wait_end    wait_hist, wait_max,
 *                                                       remote_waits, wait_stats
 *                   release     mkscope/comm_end        remote_releases
 *                   rel_notify  mkscope/dep_release     remote_releases
 *   queue.bpf.o     q_assign    mkscope/task_assign     queue_by_worker
 *                   q_pressure  mkscope/queue_pressure  queue_by_worker
 *   genprog.bpf.o   gen_adv     mkscope/gen_advance     gen_by_step
 *                   gen_task    mkscope/task_end        gen_by_step
 */
#ifndef MKSCOPE_AGENT_MONITORS_H
#define MKSCOPE_AGENT_MONITORS_H

#ifndef __bpf__
#include <stdint.h>
#endif

#include "mkscope/bpf_isa.h"
#include "mkscope/hook_abi.h"

/* Task classes a monitor keeps apart; classes at or above fold into the last
 * slot (MKS_MON_MAX_CLASSES - 1), which the agent reports as "other". */
#define MKS_MON_MAX_CLASSES 64
/* Step buckets of the latency histograms: bucket = step % MKS_MON_STEP_BUCKETS,
 * enough to tell a slow step from its neighbours within one epoch. */
#define MKS_MON_STEP_BUCKETS 8
/* Workers a per-worker table keeps apart (worker & (MAX_WORKERS - 1)). */
#define MKS_MON_MAX_WORKERS 1024
/* Steps whose generation progress is kept (slot = step % MKS_MON_STEP_SLOTS). */
#define MKS_MON_STEP_SLOTS 64
/* Remote-wait and release records one epoch keeps; further ones are counted
 * in wait_stats.remote_dropped. */
#define MKS_MON_REMOTE_RECORDS 4096

/* Fold a task class into a table index. */
#define MKS_MON_CLASS_IDX(c) ((c) < MKS_MON_MAX_CLASSES ? (c) : MKS_MON_MAX_CLASSES - 1)

/* ---- count.bpf.o (and latency.bpf.o) ---------------------------------------
 * count_by_class: MKS_MAP_ARRAY, key u32 MKS_MON_CLASS_IDX(task_class),
 * value u64 number of task_end events of that class.  latency.bpf.o keeps the
 * same map in its task_end program, so the default monitors use two of the
 * MKS_MAX_PROGS_PER_HOOK slots at task_end (lat_run, gen_task); count.bpf.o
 * alone is the thinnest monitor.  With both attached the agent reads one
 * count_by_class per summary (they count the same events). */
#define MKS_MON_COUNT_MAP "count_by_class"

/* ---- latency.bpf.o -------------------------------------------------------
 * lat_ready: MKS_MAP_HIST, ready -> start (queueing) in ns.
 * lat_run:   MKS_MAP_HIST, start -> end (execution) in ns.
 * Key u32 = MKS_MON_LAT_KEY(class, step), value struct mks_hist.  Events
 * whose earlier timestamp is unknown (0) or later than t_now, or whose step
 * is absent (MKS_CTX_ABSENT32), are skipped; an absent task class folds
 * into the "other" slot like any class past the table. */
#define MKS_MON_LAT_READY_MAP "lat_ready"
#define MKS_MON_LAT_RUN_MAP   "lat_run"
#define MKS_MON_LAT_ENTRIES   (MKS_MON_MAX_CLASSES * MKS_MON_STEP_BUCKETS)
#define MKS_MON_LAT_KEY(cls, step)                                                                 \
    (MKS_MON_CLASS_IDX(cls) * MKS_MON_STEP_BUCKETS + ((step) % MKS_MON_STEP_BUCKETS))

/* lat_step: MKS_MAP_ARRAY, key u32 = MKS_MON_LAT_STEP_KEY(class, step), value
 * struct mks_mon_lat_step: exact count, sums and maxima per task class and
 * decode step, for up to MKS_MON_LAT_STEP_SLOTS steps in one epoch (the
 * histograms keep only MKS_MON_STEP_BUCKETS apart).  A slot names its step
 * (tag = step + 1, set by compare-and-swap); a second step landing in the
 * same slot within the epoch marks it mixed, and the agent then reports
 * the slot under no step.  Maxima by compare-and-swap, so no concurrent
 * larger sample is lost. */
#define MKS_MON_LAT_STEP_MAP     "lat_step"
#define MKS_MON_LAT_STEP_SLOTS   128
#define MKS_MON_LAT_STEP_ENTRIES (MKS_MON_MAX_CLASSES * MKS_MON_LAT_STEP_SLOTS)
#define MKS_MON_LAT_STEP_KEY(cls, step)                                                            \
    (MKS_MON_CLASS_IDX(cls) * MKS_MON_LAT_STEP_SLOTS + ((step) % MKS_MON_LAT_STEP_SLOTS))
#define MKS_MON_LAT_STEP_MIXED (1ull << 63)

struct mks_mon_lat_step {
    uint64_t tag;         /* step + 1 of the slot's step; | MIXED when two met */
    uint64_t count;       /* task_end events */
    uint64_t run_count;   /* of them, with a known start */
    uint64_t run_sum, run_max;
    uint64_t queue_count; /* of the tasks that ended, those with known ready and
                           * start times (ready -> start, taken at task_end) */
    uint64_t queue_sum, queue_max;
};

/* worker_time: MKS_MAP_ARRAY, key u32 = MKS_MON_WORKER_KEY(worker, step),
 * value struct mks_mon_worker_time: per worker and decode step (slots as in
 * lat_step, tagged the same way), the time its tasks ran (start -> end,
 * dependency waits inside a task included) and how many ended.  A worker
 * only writes its own entries: plain adds.  The agent turns it into busy
 * and idle time per (worker, step): idle is the step's span (first task
 * start to last task end on the rank) less the worker's busy time in it.
 * Workers beyond MKS_MON_WT_WORKERS share entries; the agent then reports
 * no worker times. */
#define MKS_MON_WORKER_MAP     "worker_time"
#define MKS_MON_WT_WORKERS     256
#define MKS_MON_WORKER_ENTRIES (MKS_MON_WT_WORKERS * MKS_MON_LAT_STEP_SLOTS)
#define MKS_MON_WORKER_KEY(worker, step)                                                           \
    (((worker) & (MKS_MON_WT_WORKERS - 1)) * MKS_MON_LAT_STEP_SLOTS +                              \
     ((step) % MKS_MON_LAT_STEP_SLOTS))

struct mks_mon_worker_time {
    uint64_t tag;     /* step + 1; | MKS_MON_LAT_STEP_MIXED when two steps met */
    uint64_t busy_ns; /* summed task execution */
    uint64_t tasks;   /* task_end events */
};

/* ---- depwait.bpf.o -------------------------------------------------------
 * wait_begin_ts: MKS_MAP_PERWORKER_ARRAY, key u32 0, value u64 t_now of the
 *   worker's open wait (0: none).  Private to the monitor.
 * wait_hist: MKS_MAP_HIST, key u32 = MKS_MON_WAIT_KEY(dep_class, task_class),
 *   value struct mks_hist of wait durations in ns.  dep_class is
 *   MKS_DEP_LOCAL or MKS_DEP_REMOTE (anything else counts as local).
 * remote_waits: MKS_MAP_HASH, key struct mks_mon_comm_key (peer = producer
 *   rank), value struct mks_mon_remote_wait.
 * remote_releases: MKS_MAP_HASH on the producer side, key struct
 *   mks_mon_comm_key (peer = consumer rank), value struct mks_mon_release.
 *   Filled at comm_end and at the remote dep_release (which may come in a
 *   later epoch: the collector merges records by key).  A local dep_release
 *   whose ctx.t_end is known fills the record keyed comm_gen =
 *   MKS_MON_LOCAL_REL_GEN(step, task_class), peer = this rank: t_release 0,
 *   t_end and t_notify of the release with the largest t_notify - t_end of
 *   that (step, class), count = local releases seen.
 * wait_stats: MKS_MAP_ARRAY, key u32 0, value struct mks_mon_wait_stats.
 * wait_max: MKS_MAP_ARRAY, key as wait_hist, value u64: the epoch's longest
 *   wait in ns (compare-and-swap). */
#define MKS_MON_WAIT_BEGIN_MAP "wait_begin_ts"
#define MKS_MON_WAIT_HIST_MAP  "wait_hist"
#define MKS_MON_REMOTE_MAP     "remote_waits"
#define MKS_MON_RELEASE_MAP    "remote_releases"
#define MKS_MON_WAIT_STATS_MAP "wait_stats"
#define MKS_MON_WAIT_MAX_MAP   "wait_max"
#define MKS_MON_WAIT_ENTRIES   (2 * MKS_MON_MAX_CLASSES)
#define MKS_MON_WAIT_KEY(dep, cls)                                                                 \
    (((dep) == MKS_DEP_REMOTE ? MKS_MON_MAX_CLASSES : 0) + MKS_MON_CLASS_IDX(cls))

/* Key of a local release record in remote_releases.  Comm-ids' kind field
 * (bits 63..62) is never 0, so these never meet a real generation. */
#define MKS_MON_LOCAL_REL_BIT (1ull << 61)
#define MKS_MON_LOCAL_REL_GEN(step, cls)                                                           \
    (MKS_MON_LOCAL_REL_BIT | ((uint64_t)(uint32_t)(step) << 8) | (uint64_t)MKS_MON_CLASS_IDX(cls))
#define MKS_MON_IS_LOCAL_REL(gen) (((gen) >> 61) == 1u)

struct mks_mon_comm_key {
    uint64_t comm_gen; /* communication generation (comm-ids) */
    uint32_t peer;     /* the other rank of the transfer */
    uint32_t pad;      /* zero */
};

struct mks_mon_remote_wait {
    uint64_t count;       /* waits on this (comm_gen, peer) this epoch */
    uint64_t total_ns;    /* summed wait time */
    uint64_t max_ns;      /* longest single wait */
    uint64_t first_begin; /* t of the first wait's begin (device clock) */
    uint64_t last_end;    /* t of the last wait's end */
    uint64_t dep_event;   /* dependency event id the consumer waited on */
    uint64_t task_class;  /* class of the waiting task (last waiter) */
    uint64_t worker;      /* worker of the last waiter */
    uint64_t step;        /* decode step of the last waiter */
};

struct mks_mon_release {
    uint64_t count;      /* transfers completed for this key this epoch */
    uint64_t t_release;  /* t_now of the last comm_end (device clock) */
    uint64_t t_start;    /* when that communication task started */
    uint64_t task_class; /* producer's communication task class */
    uint64_t worker;     /* producer worker */
    uint64_t step;       /* decode step */
    uint64_t bytes;      /* ctx.value: bytes moved by the last transfer */
    uint64_t t_end;      /* task_end of the sending task (0: not recorded) */
    uint64_t t_notify;   /* remote dep_release: the consumer's event raised (0: not seen) */
};

struct mks_mon_wait_stats {
    uint64_t waits;          /* dep_wait_end events seen */
    uint64_t unmatched;      /* ends with no recorded begin (epoch crossed, or attached mid-wait);
                              * such a wait is measured from its task's start */
    uint64_t remote_dropped; /* remote records not stored: table full */
};

/* ---- queue.bpf.o ---------------------------------------------------------
 * queue_by_worker: MKS_MAP_ARRAY, key u32 worker & (MKS_MON_MAX_WORKERS-1),
 * value struct mks_mon_queue.  depth_max is updated without atomics and may
 * miss a concurrent larger sample on the same worker. */
#define MKS_MON_QUEUE_MAP "queue_by_worker"

struct mks_mon_queue {
    uint64_t assigns;        /* task_assign events for this worker */
    uint64_t depth_sum;      /* sum of queue_depth at those events (absent depths left out) */
    uint64_t depth_max;      /* largest queue_depth seen (absent depths left out) */
    uint64_t pressure;       /* queue_pressure events (threshold crossings) */
    uint64_t threshold;      /* ctx.value of the last crossing */
    uint64_t t_last_pressure;
};

/* ---- genprog.bpf.o -------------------------------------------------------
 * gen_by_step: MKS_MAP_ARRAY, key u32 step % MKS_MON_STEP_SLOTS, value
 * struct mks_mon_gen.  A slot holds the step number it describes; a later
 * step landing in the same slot restarts it. */
#define MKS_MON_GEN_MAP "gen_by_step"

struct mks_mon_gen {
    uint64_t step;       /* decode step this slot describes */
    uint64_t advances;   /* gen_advance events of this step */
    uint64_t t_first;    /* first gen_advance of the step */
    uint64_t t_last;     /* last gen_advance of the step */
    uint64_t max_gen;    /* largest new generation (ctx.value) */
    uint64_t tasks_done; /* task_end events of this step */
    uint64_t t_task_first; /* earliest task start of the step (ctx.t_start at task_end) */
    uint64_t t_task_last;  /* latest task_end of the step */
};

#ifdef __bpf__
/* Raise *p to v.  Workers of a step update one entry side by side: a
 * compare-and-swap retried a few times keeps the larger value (each retry
 * means another worker raised it meanwhile, so after three the entry is
 * all but certainly at least v's neighbour in time).  Monitors only. */
static __always_inline void mks_mon_raise_max(__u64 *p, __u64 v)
{
#pragma unroll
    for (int i = 0; i < 3; i++) {
        __u64 old = *p;
        if (v <= old)
            return;
        if (__sync_val_compare_and_swap(p, old, v) == old)
            return;
    }
}
#endif

#endif /* MKSCOPE_AGENT_MONITORS_H */

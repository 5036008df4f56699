/*
 * The agent's model of one epoch summary, before it is encoded for the wire.
 *
 * A summary is built from an epoch snapshot: the standard monitors' maps are
 * decoded with the layouts of agent/monitors/monitors.h, every other map
 * (user programs) is carried as raw key/value bytes, and the coverage of
 * every hook is copied as the device counted it.  Summaries of consecutive
 * epochs can be merged (counts and histograms add up, so nothing is lost when
 * the budget forces the agent to send less often), and the encoder applies a
 * detail tier (see enum agt_tier) that the summary itself declares.
 *
 * The snapshot is read through struct agt_snap_ops so that the builder can be
 * tested without a running application.
 */
#ifndef MKS_AGENT_SUMMARY_H
#define MKS_AGENT_SUMMARY_H

#include <stddef.h>
#include <stdint.h>

#include "mkscope/bpf_isa.h"
#include "mkscope/ctl.h"
#include "mkscope/hook_abi.h"
#include "monitors.h"

/* Detail tiers, finest first.  Each drops detail the previous one kept; the
 * tier used is written into the summary's detail_tier (wire values in
 * parentheses: the wire counts up from the coarsest) so the collector knows. */
enum agt_tier {
    AGT_TIER_FULL = 0,   /* (2) per class and step, histograms, waits, releases, user maps */
    AGT_TIER_HIST = 1,   /* (1) per class for the whole summary, histograms */
    AGT_TIER_COUNTS = 2, /* (0) per class counts and sums */
    AGT_TIER_COUNT = 3,
};
/* Raw bytes of user program maps one summary carries; beyond that entries are
 * counted as dropped (a user program cannot make summaries unbounded). */
#define AGT_USER_MAP_BYTES (64u << 10)

/* How the builder reads an epoch snapshot (the real one or a test's). */
struct agt_snap_ops {
    uint64_t (*epoch)(void *snap);
    int (*coverage)(void *snap, enum mks_hook_event ev, struct mks_coverage *cov);
    int (*map_iter)(void *snap, uint32_t map_id, mks_map_iter_fn fn, void *arg);
};

/* Whose a program and its maps are: a user's (maps sent raw in summaries),
 * a standard monitor's (decoded by name), a probe's (read by probe.c). */
enum agt_kind { AGT_KIND_USER = 0, AGT_KIND_BUILTIN = 1, AGT_KIND_PROBE = 2 };

/* A map of an attached program, as the builder needs to know it. */
struct agt_mapref {
    uint32_t map_id;
    uint32_t prog_id; /* first program that uses it */
    struct mks_map_spec spec;
    int builtin; /* enum agt_kind */
};

/* An encoded message the summary carries as it is (a probe's result). */
struct agt_blob {
    uint8_t *buf;
    size_t len;
};

struct agt_class_stat {
    uint64_t count; /* task_end events (count monitor) */
    int present;
};

struct agt_lat {
    struct mks_hist ready, run;
    int present;
};

/* Exact statistics of one task class in one decode step (lat_step); a
 * mixed entry (two steps met in its slot) belongs to no one step. */
struct agt_lat_step {
    uint32_t cls;
    struct mks_mon_lat_step v;
};

/* Time a worker's tasks ran in one step slot of one epoch (worker_time). */
struct agt_wtime {
    uint32_t worker, slot;
    struct mks_mon_worker_time v;
};

/* A decode step the agent saw end (a later step began, or the application
 * ended): its whole span over every epoch it took, and per worker the time
 * its tasks ran in it.  Reported once, in the summary of the epoch where it
 * ended. */
struct agt_step_done {
    uint32_t step;
    uint64_t t_begin, t_end; /* first task start, last task end (device clock) */
    uint32_t n_workers;
    uint64_t *busy, *tasks;  /* [n_workers]; NULL when worker times are not known for all
                              * of the step (not measured, or a slot held two steps) */
    uint64_t cpu_wait;       /* the worker threads' wait for a CPU in the span ... */
    uint64_t cpu_runs;       /* ... and the times they were put on one ... */
    int cpu_wait_known;      /* ... when measured (mks_ctl_cpu_wait) */
};

struct agt_user_entry {
    uint32_t prog_id;
    char map[32];
    uint32_t key_len, value_len;
    uint8_t *bytes; /* key then value */
};

struct agt_summary {
    uint64_t epoch_first, epoch_last; /* snapshot epochs merged into this one */
    uint32_t n_epochs;
    uint64_t t_host_begin, t_host_end; /* agent CLOCK_REALTIME ns */
    uint64_t t_dev_begin, t_dev_end;   /* device clock ns (CLOCK_MONOTONIC on the CPU backend) */

    struct agt_class_stat cls[MKS_MON_MAX_CLASSES];
    int have_counts; /* the count monitor was attached */
    struct agt_lat lat[MKS_MON_LAT_ENTRIES];
    int have_lat;
    struct agt_lat_step *lstep;
    size_t n_lstep, cap_lstep;
    int have_lstep;
    struct mks_hist wait[MKS_MON_WAIT_ENTRIES];
    uint64_t wait_max[MKS_MON_WAIT_ENTRIES]; /* longest wait (wait_max; 0 unknown) */
    int have_wait;
    struct mks_mon_wait_stats wait_stats;

    struct agt_remote {
        struct mks_mon_comm_key key;
        struct mks_mon_remote_wait v;
    } *remote;
    size_t n_remote, cap_remote;
    struct agt_release {
        struct mks_mon_comm_key key;
        struct mks_mon_release v;
    } *release;
    size_t n_release, cap_release;

    struct agt_queue {
        uint32_t worker;
        struct mks_mon_queue v;
    } *queue;
    size_t n_queue, cap_queue;

    struct mks_mon_gen *gen; /* per step seen this summary */
    size_t n_gen, cap_gen;

    struct agt_wtime *wtime; /* as the device reported them (consumed by agt_steps_feed) */
    size_t n_wtime, cap_wtime;
    int have_wtime;
    struct agt_step_done *done; /* steps that ended in this summary's epochs */
    size_t n_done, cap_done;

    struct agt_user_entry *user;
    size_t n_user, cap_user;
    size_t user_bytes;
    uint64_t user_dropped;

    struct mks_coverage cov[MKS_EV_COUNT];
    int attached[MKS_EV_COUNT]; /* a program was attached at that hook */

    /* Packed mkscope.v1.ProbeResult messages of the summary's epochs
     * (probe.c): deltas, so merging summaries keeps them all. */
    struct agt_blob *probes;
    size_t n_probes, cap_probes;
};

/* Add a packed ProbeResult (copied). */
int agt_summary_add_probe(struct agt_summary *s, const uint8_t *buf, size_t len);

struct agt_summary *agt_summary_new(void);
void agt_summary_free(struct agt_summary *s); /* accepts NULL */

/* Fill s (fresh from agt_summary_new) from one snapshot. */
int agt_summary_build(struct agt_summary *s, const struct agt_snap_ops *ops, void *snap,
                      const struct agt_mapref *maps, size_t n_maps, const int *attached);

/* Add src (a later epoch) into dst; src is left as it was. */
int agt_summary_merge(struct agt_summary *dst, const struct agt_summary *src);

/* The step each latency/worker bucket (step % MKS_MON_STEP_BUCKETS) of a
 * one-epoch summary holds: the step when the generation monitor saw exactly
 * one step of the epoch there, else -1 (unknown or two steps). */
void agt_summary_bucket_steps(const struct agt_summary *s, int64_t map[MKS_MON_STEP_BUCKETS]);

/* Total task_end count over classes (for logs and tests). */
uint64_t agt_summary_total(const struct agt_summary *s);

#endif /* MKS_AGENT_SUMMARY_H */

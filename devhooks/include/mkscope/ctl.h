/*
 * The agent side of devhooks: open a rank's control block (POSIX shared
 * memory created by mks_rt_create() in the application), install verified
 * programs into double-buffered slots, attach/replace/detach them while the
 * kernel runs, advance epochs and read consistent map snapshots and coverage.
 *
 * Nothing here needs a CUDA context: on the GPU the application's pump thread
 * moves programs to the device and map contents back; the agent only ever
 * touches shared memory.
 *
 * Programs handed to mks_ctl_prog_load() must already have passed
 * mks_verify(); the control block trusts its caller for that, and the VM's
 * run-time guards are the defense in depth behind it.
 */
#ifndef MKSCOPE_CTL_H
#define MKSCOPE_CTL_H

#include <stddef.h>
#include <stdint.h>

#include "mkscope/bpf_isa.h"
#include "mkscope/hook_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MKS_MAX_PROGS_PER_HOOK 4  /* DESIGN: up to 4 programs per hook */
#define MKS_MAX_PROG_MAPS      16 /* maps one program may reference */

struct mks_ctl;

/* Shared-memory name of a rank's control block: "/mkscope.<job>.<rank>". */
int mks_ctl_name(const char *job, uint32_t rank, char *buf, size_t len);

/* Open an existing control block.  Checks magic, layout version and that the
 * creating process is alive and owned by the same uid (-EPERM otherwise);
 * -ENOENT if the application has not created it yet. */
int mks_ctl_open(const char *job, uint32_t rank, struct mks_ctl **ctl_p);
/* The same, with the reason for a failure as one line in err instead of on
 * stderr ("control block /mkscope.j.0: bad magic: not an mkscope control block"). */
int mks_ctl_open_err(const char *job, uint32_t rank, struct mks_ctl **ctl_p, char *err,
                     size_t err_len);
void mks_ctl_close(struct mks_ctl *ctl); /* accepts NULL */

struct mks_ctl_info {
    uint32_t abi_version;
    uint32_t rank, n_ranks, n_workers;
    int32_t app_pid;
    uint64_t app_start_ns;  /* changes when the application restarts */
    char gpu_uuid[64];      /* empty on the CPU backend */
    const void *schema;     /* serialized mkscope.v1.TaskSchema, or NULL */
    size_t schema_len;
    uint32_t lease_lapses;  /* times the application detached everything
                               because the lease lapsed or the process that
                               holds it died: re-attach when it grows */
    uint64_t epoch;         /* current epoch */
    uint32_t agent_deaths;  /* of lease_lapses, those for a dead lease holder */
    uint32_t host_workers;  /* the workers are host threads whose CPU wait the
                               pump measures (mks_ctl_cpu_wait) */
};
int mks_ctl_info(const struct mks_ctl *ctl, struct mks_ctl_info *info);

/* The CPU wait of the rank's workers between t0 and t1 (CLOCK_MONOTONIC,
 * the CPU backend's device clock): how long the host threads that run them
 * were runnable but waiting for a CPU (Linux schedstat run delay), and how
 * many times they were put on a CPU (its run count), each summed over the
 * threads, interpolated between the pump's samples (one a 2 ms tick, the
 * last 2 s kept).  -ENODATA when not measured: the workers are
 * not host threads (a device backend), the kernel gives no schedstat, or
 * the window is not inside the samples kept.  Never a zero for unknown. */
int mks_ctl_cpu_wait(const struct mks_ctl *ctl, uint64_t t0_ns, uint64_t t1_ns,
                     uint64_t *wait_ns_p, uint64_t *runs_p);

/* True while the application that created the block is alive and is the same
 * incarnation the block was opened on (restart detection). */
int mks_ctl_alive(const struct mks_ctl *ctl);

/* Renew the agent's lease; the pump detaches everything when it lapses
 * (lease_ns after the last renewal).  mks_ctl_open() takes a first lease of
 * MKS_CTL_LEASE_DEFAULT_NS.  Both record the calling process as the lease
 * holder: when the application can see that process (same PID namespace)
 * its pump detaches everything within milliseconds of its death (one 2 ms
 * tick with pidfds), however long the lease; a live holder that stops
 * renewing keeps its lease. */
#define MKS_CTL_LEASE_DEFAULT_NS (3ull * 1000000000ull)
int mks_ctl_lease(struct mks_ctl *ctl, uint64_t lease_ns);

/* A map as declared by a program's object. */
struct mks_map_spec {
    char name[32];
    uint32_t type; /* enum mks_map_type */
    uint32_t key_size, value_size, max_entries;
};

/* A verified program, ready to install. */
struct mks_prog_spec {
    size_t sz; /* sizeof(struct mks_prog_spec) */
    const char *name;
    uint32_t prog_type;   /* enum mks_prog_type */
    uint32_t abi_version; /* ABI the program was built for */
    const struct mks_insn *insns;
    uint32_t n_insns;
    uint32_t n_maps;                   /* maps referenced by index 0..n_maps-1 */
    const struct mks_map_spec *maps;   /* created in the block's arena */
    const int32_t *share_maps;         /* optional: per map, id of an existing map
                                          to reuse (programs of one object share
                                          maps), or -1 to create */
    uint64_t cost;                     /* verifier's worst-case insns per run */
    const void *const *map_init;       /* optional: per map, initial bytes of an
                                          ARRAY map's entries (.rodata, .data),
                                          or NULL for zeros; restored every epoch */
    const size_t *map_init_len;        /* bytes of each map_init[i] */
};

/* Copy a program and create its maps; returns its id.  Maps are zeroed. */
int mks_ctl_prog_load(struct mks_ctl *ctl, const struct mks_prog_spec *spec, uint32_t *prog_id_p);

/* Map id of the i-th map of a loaded program (for sharing and snapshots). */
int mks_ctl_prog_map(const struct mks_ctl *ctl, uint32_t prog_id, uint32_t i, uint32_t *map_id_p);

/* Attach a loaded program at an event.  If `replace_prog_id` >= 0 that program
 * is swapped out in the same publication (no event sees neither or both).
 * Returns the hook's new program generation in *gen_p. */
int mks_ctl_attach(struct mks_ctl *ctl, uint32_t prog_id, enum mks_hook_event ev,
                   int32_t replace_prog_id, uint64_t *gen_p);
int mks_ctl_detach(struct mks_ctl *ctl, uint32_t prog_id, enum mks_hook_event ev, uint64_t *gen_p);

/* Unload a detached program: its slot and maps are freed after a grace period. */
int mks_ctl_prog_unload(struct mks_ctl *ctl, uint32_t prog_id);

/* Budget and sampling for one hook: run programs on one event in 2^sample_shift
 * (0 = all); at most insn_budget VM instructions per epoch (0 = unlimited).
 * Events skipped by either count as throttled in coverage. */
int mks_ctl_set_budget(struct mks_ctl *ctl, enum mks_hook_event ev, uint32_t sample_shift,
                       uint64_t insn_budget);

/* Per hook and epoch, summed over workers. */
struct mks_coverage {
    uint64_t eligible;  /* events at the hook while programs were attached */
    uint64_t ran;       /* events the programs ran on */
    uint64_t throttled; /* skipped by sampling or budget */
    uint64_t lost;      /* ring-buffer records dropped, run-time guard aborts */
    uint64_t prog_gen;  /* program generation in force at the end of the epoch */
};

/* A consistent snapshot of one epoch: after mks_ctl_epoch_advance() returns,
 * every worker has left the old bank, whose maps and coverage were copied
 * here and then zeroed for reuse.  Values are this epoch's deltas. */
struct mks_epoch_snapshot;

int mks_ctl_epoch_advance(struct mks_ctl *ctl, struct mks_epoch_snapshot **snap_p);
void mks_epoch_snapshot_free(struct mks_epoch_snapshot *snap); /* accepts NULL */

uint64_t mks_epoch_snapshot_epoch(const struct mks_epoch_snapshot *snap);
int mks_epoch_snapshot_coverage(const struct mks_epoch_snapshot *snap, enum mks_hook_event ev,
                                struct mks_coverage *cov);

/* Iterate a map of the snapshot: arrays and histograms give (index, value)
 * with per-worker arrays summed over workers when the value is made of u64
 * counters; hash maps give (key, value) of present entries. */
typedef int (*mks_map_iter_fn)(const void *key, const void *value, void *arg);
int mks_epoch_snapshot_map(const struct mks_epoch_snapshot *snap, uint32_t map_id,
                           mks_map_iter_fn fn, void *arg);

/* Drain a ring-buffer map while the kernel runs; fn gets each record.
 * *dropped_p receives records the producers dropped since the last drain. */
typedef int (*mks_ring_fn)(uint32_t worker, const void *rec, uint32_t len, void *arg);
int mks_ctl_ring_drain(struct mks_ctl *ctl, uint32_t map_id, mks_ring_fn fn, void *arg,
                       uint64_t *dropped_p);

#ifdef __cplusplus
}
#endif

#endif /* MKSCOPE_CTL_H */

/*
 * mkscope-bench: the reference persistent megakernel.
 *
 * Decode steps of a small transformer-like model (RMSNorm, QKV projection
 * tiles, attention over a KV cache, output projection, tensor-parallel
 * all-reduce as communication tasks, an MoE layer whose experts are created at
 * run time from the router's choices, greedy sampling) run as a task graph on
 * an MPK-style runtime: event counters that are never reset, per-worker
 * queues, a scheduler, workers.  Ranks are processes that exchange partial
 * sums through shared memory (CPU backend) and call every hook of the hook
 * ABI at its real place.  Faults make one rank slow for a known reason; the
 * run's ground truth comes from the injector's own parameters.
 *
 * This header is what the command line and the tests use; the runtime itself
 * is private to bench/src.
 */
#ifndef MKSCOPE_BENCH_H
#define MKSCOPE_BENCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bounds of the scale knobs: big enough for a highly tiled MoE, small enough
 * that every size product fits in 32 bits and shared memory stays modest. */
#define MKS_BENCH_MAX_RANKS   16u
#define MKS_BENCH_MAX_LAYERS  64u
#define MKS_BENCH_MAX_HIDDEN  4096u
#define MKS_BENCH_MAX_EXPERTS 64u
#define MKS_BENCH_MAX_TILES   64u
#define MKS_BENCH_MAX_WORKERS 64u
#define MKS_BENCH_MAX_STEPS   100000u
#define MKS_BENCH_MAX_BATCH   16u
#define MKS_BENCH_MAX_FAULTS  16u

struct mks_bench_config {
    size_t sz;      /* sizeof(struct mks_bench_config) */
    uint32_t ranks; /* tensor-parallel ranks (processes) */
    uint32_t layers;
    uint32_t hidden; /* model width */
    uint32_t heads;  /* attention heads per rank */
    uint32_t head_dim;
    uint32_t experts; /* MoE experts, expert e lives on rank e % ranks */
    uint32_t topk;    /* experts per token */
    uint32_t ffn;     /* expert inner width */
    uint32_t vocab;
    uint32_t tiles;            /* tiles per tiled operator (QKV, O, expert, LM head) */
    uint32_t workers;          /* workers per rank (threads on the CPU) */
    uint32_t steps;            /* decode steps */
    uint32_t batch;            /* request slots */
    uint32_t max_len;          /* longest request, tokens (KV cache length) */
    uint32_t queue_pressure;   /* worker queue depth that raises QUEUE_PRESSURE */
    uint64_t seed;             /* weights and requests */
    const char *job;           /* names the shared memory of the ranks and the
                                  devhooks control blocks: [A-Za-z0-9_.-]{1,48} */
    const char *trace;         /* native profiler trace path prefix (profiler
                                  build only), NULL for none */
    uint32_t cuda_mode;        /* enum mks_bench_cuda_mode (CUDA backend) */
    uint32_t step_interval_us; /* CPU backend: steps start at most this often
                                  (the rank idles between steps, outside any
                                  task); 0 = back to back */
    uint32_t wait_agents_ms;   /* before the first step, wait up to this long
                                  for an agent to attach programs to the
                                  rank's control block; 0 = do not wait */
    uint32_t ar_relay;         /* CPU and persistent CUDA: 1 = rank r > 0 sends its
                                  all-reduce contribution only once rank r-1's
                                  has arrived, so waits chain from rank to rank
                                  (multi-hop wait chains); 0 = all at once */
    const uint64_t *baseline_ns; /* [ranks][steps]: each rank's step times in a
                                    clean run of this configuration, for the
                                    fault plan's closed loop; NULL: the plan as
                                    written (mks_bench_baseline_load) */
    const char *counters; /* fixed counters PREFIX.rankR.json (counters build
                             only: per step, per class count, run and queue
                             time, per peer remote wait), NULL for none */
};

/* How the CUDA backend runs a step. */
enum mks_bench_cuda_mode {
    MKS_BENCH_CUDA_PERSISTENT = 0, /* one persistent megakernel, one worker block per SM */
    MKS_BENCH_CUDA_PER_OP = 1,     /* one kernel per operator, NCCL all-reduce */
    MKS_BENCH_CUDA_GRAPH = 2,      /* the per-operator step captured as a CUDA Graph */
};

void mks_bench_config_default(struct mks_bench_config *cfg);

/* The per-rank step times of a result file (--json) of a clean run with the
 * configuration's ranks and steps, as cfg->baseline_ns wants them; the
 * caller frees *out.  0, or -errno with one line in err. */
int mks_bench_baseline_load(const struct mks_bench_config *cfg, const char *path, uint64_t **out,
                            char *err, size_t err_len);
/* 0 or -EINVAL with one line in err. */
int mks_bench_config_check(const struct mks_bench_config *cfg, char *err, size_t err_len);

enum mks_fault_type {
    MKS_FAULT_TASK_DELAY = 1,    /* one class's tasks on one rank run long */
    MKS_FAULT_MOE_SKEW = 2,      /* router sends most tokens to one expert */
    MKS_FAULT_NOTIFY_DELAY = 3,  /* task ends on time, its release is postponed */
    MKS_FAULT_QUEUE_OVERSUB = 4, /* one worker's queue gets the ready tasks */
    MKS_FAULT_COMM_DELAY = 5,    /* one communication generation is slow */
    MKS_FAULT_TILE_STARVE = 6,   /* one ready tile is passed over repeatedly */
    MKS_FAULT_SLOW_RANK = 7,     /* every compute task of one rank runs long (a
                                    throttled device): no class of its own */
};

#define MKS_FAULT_ANY (-1)

struct mks_fault {
    uint32_t type;             /* enum mks_fault_type */
    int32_t rank;              /* the faulty rank */
    int32_t cls;               /* task class id, MKS_FAULT_ANY for the type's default */
    int64_t gen;               /* task generation (1-based decode iteration), or for
                                  comm-delay the all-reduce index within a step;
                                  MKS_FAULT_ANY for all */
    uint64_t magnitude_us;     /* time the fault adds to each affected step */
    uint32_t step_lo, step_hi; /* affected decode steps, inclusive */
    int32_t worker;            /* queue-oversub: the oversubscribed worker */
    int32_t tile;              /* tile-starve: the starved tile */
    int32_t expert;            /* moe-skew: the hot expert (lives on `rank`) */
};

/* Parse "TYPE:key=value,..." against cfg (class names and ranges depend on
 * it).  0 or -EINVAL with one line in err; *f is written only on success. */
int mks_fault_parse(const char *spec, const struct mks_bench_config *cfg, struct mks_fault *f,
                    char *err, size_t err_len);
const char *mks_fault_type_name(uint32_t type); /* "task-delay", ... or NULL */
/* The signature the fault leaves inside the rank (slow_task, notify_delay,
 * local_imbalance, slow_transfer). */
const char *mks_fault_cause(const struct mks_fault *f);

/* Task classes of a configuration: fixed ones, then one class per expert. */
uint32_t mks_bench_class_count(const struct mks_bench_config *cfg);
const char *mks_bench_class_name(const struct mks_bench_config *cfg, uint32_t cls, char *buf,
                                 size_t len);
int mks_bench_class_find(const struct mks_bench_config *cfg, const char *name);

struct mks_bench_result {
    uint32_t ranks, steps, batch, n_classes;
    uint64_t *step_ns;      /* [rank * steps + step]: decode step time */
    uint64_t *class_counts; /* [rank * n_classes + cls]: tasks the runtime ran */
    int32_t *tokens;        /* [step * batch + slot]: sampled token, -1 idle */
    double *logit_sum;      /* [step]: sum of the logits of the active slots */
    uint64_t *req_gen;      /* [step * batch + slot]: request generation */
    uint64_t *faulted;      /* [rank]: tasks a fault plan delayed, held or
                               passed over (the injector's own count) */
    uint64_t wall_ns;       /* launch to last rank done */
    uint64_t prof_dropped;  /* native profiler records dropped (all ranks) */
};

void mks_bench_result_free(struct mks_bench_result *res); /* accepts NULL */

/* Run all ranks: fork one process per rank, wait for them, collect.  0 or a
 * negative errno with one line in err. */
int mks_bench_run(const struct mks_bench_config *cfg, const struct mks_fault *faults,
                  uint32_t n_faults, struct mks_bench_result **res_p, char *err, size_t err_len);

/* Run one rank of a job launched elsewhere (Slurm, the agent launcher): the
 * ranks rendezvous in shared memory named from cfg->job.  Rank 0 returns the
 * collected result in *res_p (others get NULL). */
int mks_bench_run_rank(const struct mks_bench_config *cfg, const struct mks_fault *faults,
                       uint32_t n_faults, uint32_t rank, struct mks_bench_result **res_p, char *err,
                       size_t err_len);

/* The same model computed plainly in one process, no tasks, no threads:
 * tokens and logit sums (step_ns and class_counts are NULL). */
int mks_bench_reference(const struct mks_bench_config *cfg, const struct mks_fault *faults,
                        uint32_t n_faults, struct mks_bench_result **res_p);

/* Machine-readable output (jansson). */
int mks_bench_result_write_json(const struct mks_bench_result *res,
                                const struct mks_bench_config *cfg, const char *backend,
                                const char *path, char *err, size_t err_len);
/* Ground truth: one entry per fault, from the injector's parameters only. */
int mks_bench_truth_write(const struct mks_bench_config *cfg, const struct mks_fault *faults,
                          uint32_t n_faults, const char *path, char *err, size_t err_len);

#ifdef __cplusplus
}
#endif

#endif /* MKSCOPE_BENCH_H */

/*
 * A fake agent for collector tests: builds Register, Heartbeat and
 * EpochSummary envelopes from a compact description and sends them over a
 * nanomsg NN_REQ socket, returning the collector's reply.
 */
#ifndef MKS_TEST_FAKE_AGENT_H
#define MKS_TEST_FAKE_AGENT_H

#include <stdbool.h>
#include <stdint.h>

#include "mkscope/wire.h"

#define FA_MAX_CLASSES 8
#define FA_MAX_STEPS   16
#define FA_MAX_WAITS   16
#define FA_MAX_WORKERS 8

struct fa_taskstat {
    uint32_t cls, step;
    uint64_t count, sum_run;
    uint64_t run_b[MKS_WIRE_MAX_HIST_BUCKETS], queue_b[MKS_WIRE_MAX_HIST_BUCKETS];
    uint64_t queue_sum, run_max, queue_max;
};

struct fa_wait {
    uint64_t comm_gen;
    uint32_t peer, waiter_class, step, worker;
    uint64_t t_begin, t_end;
};

struct fa_release {
    uint64_t comm_gen;
    uint32_t consumer, cls, step, worker;
    uint64_t t_ready, t_start, t_end, t_comm_begin, t_comm_end, t_release;
};

struct fa_worker {
    uint32_t worker, step;
    uint64_t busy, idle, dep_wait, over_threshold;
    uint32_t max_depth;
};

struct fa_summary {
    uint64_t epoch;
    /* the epoch's clocks: t_begin_host, t_end_host, t_begin_dev, t_end_dev
     * (all 0: made up from the epoch) */
    uint64_t clocks[4];
    struct fa_taskstat ts[FA_MAX_CLASSES * FA_MAX_STEPS];
    int n_ts;
    struct {
        uint32_t step;
        uint64_t t_begin, t_end, queued_while_idle;
        uint64_t cpu_wait, cpu_runs; /* the workers' wait for a CPU, when cpu_wait_measured */
        bool cpu_wait_measured;
    } steps[FA_MAX_STEPS];
    int n_steps;
    struct fa_wait waits[FA_MAX_WAITS];
    int n_waits;
    struct fa_release rels[FA_MAX_WAITS];
    int n_rels;
    struct fa_worker workers[FA_MAX_WORKERS * FA_MAX_STEPS];
    int n_workers;
    uint64_t cov_eligible, cov_ran, cov_throttled, cov_lost;
    /* one generation advance (t_gen 0: none) */
    uint32_t gen_step;
    uint64_t t_gen;
    /* one entry of a user map's dump (map_name NULL: none) */
    const char *map_prog, *map_name;
    uint8_t map_key[16], map_value[16];
    uint32_t map_key_len, map_value_len;
};

/* Fill a Register envelope body; class names "c0".."cN" unless names given. */
int fa_send_register(int sock, const char *job, uint32_t rank, uint32_t n_ranks, uint64_t inc,
                     const char *const *class_names, int n_classes, mks_envelope **reply);
int fa_send_summary(int sock, const char *job, uint32_t rank, uint64_t inc, uint64_t seq,
                    const struct fa_summary *s, mks_envelope **reply);
int fa_send_heartbeat(int sock, const char *job, uint32_t rank, uint64_t inc, uint64_t seq,
                      mks_envelope **reply);
/* Fill b and env as a RawEventBatch of n events from (job, rank, inc). */
void fa_raw_batch(mks_envelope *env, Mkscope__V1__RawEventBatch *b, const char *job, uint32_t rank,
                  uint64_t inc, uint64_t escalation, Mkscope__V1__RawEvent **events, size_t n,
                  int last);
/* Fill env and reg as a Register of (job, rank, inc) without a schema. */
void fa_register_env(mks_envelope *env, Mkscope__V1__Register *reg, const char *job,
                     uint32_t rank, uint32_t n_ranks, uint64_t inc);
/* Send any envelope, return the decoded reply. */
int fa_send_envelope(int sock, const mks_envelope *env, mks_envelope **reply);
/* Build (not send) a summary envelope's encoding. */
int fa_encode_summary(const char *job, uint32_t rank, uint64_t inc, uint64_t seq,
                      const struct fa_summary *s, uint8_t **buf, size_t *len);

#endif

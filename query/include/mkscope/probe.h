/*
 * Probes: a question asked of a running megakernel in one line, compiled to
 * verified in-kernel aggregation (docs/probes.md, grammar in docs/query.md).
 *
 *   count() by dep_event where event = dep_wait_end and wait > 20us
 *   hist(run) by class where req_gen = 1842
 *   sum(run), max(run) by tile_x where class = expert.3 and step >= 500
 *
 * A probe is aggregates (count, sum, mean, min, max, hist, p50, p90, p99)
 * over hook context fields, grouped by context fields, under a predicate of
 * the query language.  It compiles, without clang, to one OBSERVE program
 * per hook it needs: the hooks whose events the predicate admits, or the
 * home event of the derived fields it reads (run and queue: task_end, wait:
 * dep_wait_end), plus dep_wait_begin when it reads `wait`, whose program
 * notes the wait's begin per worker.  A field an event does not carry is
 * refused with its position, naming the events that do.
 *
 * Each program aggregates into a bounded hash map keyed by the group fields
 * (one u64 word per field); a group that finds the map full goes into the
 * `other` row, and is counted: nothing is dropped silently.  Per hook the
 * programs count what they saw (mks_probe_stat).  The maps are banked like
 * every devhooks map, so each epoch's snapshot is that epoch's delta; the
 * reader adds them up with mks_probe_merge.
 *
 * Group values are rows of u64 words: word 0 the count, then per aggregated
 * field a sum, a maximum, a complemented minimum (~min, so that an all-zero
 * new row means "none yet" and both extremes merge by maximum) and 64
 * log2 buckets as struct mks_hist's, as the aggregates need them.
 */
#ifndef MKSCOPE_PROBE_H
#define MKSCOPE_PROBE_H

#include <stddef.h>
#include <stdint.h>

#include "mkscope/bpf_isa.h"
#include "mkscope/ctl.h"
#include "mkscope/query.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MKS_PROBE_MAX_AGGS 8
#define MKS_PROBE_MAX_KEYS 4
/* Distinct fields with a histogram: each is 64 words of every group. */
#define MKS_PROBE_MAX_HISTS 2
/* Words of a group's value: the count, per field at most a sum, a maximum
 * and a minimum, and the histograms. */
#define MKS_PROBE_MAX_WORDS (1 + 3 * MKS_PROBE_MAX_AGGS + 64 * MKS_PROBE_MAX_HISTS)
/* Groups one epoch of one rank keeps apart (the hash map's capacity). */
#define MKS_PROBE_GROUPS_DEFAULT 256
#define MKS_PROBE_GROUPS_MAX     65536
/* The instructions one probe program may cost per event, unless the agent
 * is told otherwise (mkscope-agent --probe-max-cost). */
#define MKS_PROBE_COST_DEFAULT 1000
/* Retries of a compare-and-swap that updates a minimum or a maximum before
 * the event is counted as contended (its count and sums are kept). */
#define MKS_PROBE_CAS_TRIES 8

/* The maps of a compiled probe, by index: the agent and the collector read
 * them by these. */
enum mks_probe_map {
    MKS_PROBE_MAP_GROUPS = 0, /* HASH: key n_keys words, value n_words words */
    MKS_PROBE_MAP_OTHER = 1,  /* ARRAY of one value: the groups that found the map full */
    MKS_PROBE_MAP_STATS = 2,  /* ARRAY indexed by hook: MKS_PROBE_ST_WORDS words */
    MKS_PROBE_MAP_ZERO = 3,   /* ARRAY of one all-zero value: what a new group starts as */
    MKS_PROBE_MAP_BEGIN = 4,  /* PERWORKER_ARRAY of one {dep_event, t_now}: an open wait */
    MKS_PROBE_MAPS = 5,
};

/* What a probe's program counted at its hook, per epoch (stats map words). */
enum mks_probe_stat {
    MKS_PROBE_ST_OBSERVED = 0,  /* events the program ran on */
    MKS_PROBE_ST_MATCHED = 1,   /* of them, the predicate held: in a group or in other */
    MKS_PROBE_ST_UNKNOWN = 2,   /* a derived field could not be computed (a time not yet
                                   set, a wait whose begin the probe did not see) */
    MKS_PROBE_ST_OVERFLOWED = 3, /* matched, but the group map was full: in other */
    MKS_PROBE_ST_DROPPED = 4,   /* matched, but a group being inserted by another
                                   worker could not be reached: not aggregated */
    MKS_PROBE_ST_CONTENDED = 5, /* a minimum or maximum update gave up under contention
                                   (count and sums have the event) */
    MKS_PROBE_ST_WORDS = 6,
};

enum mks_probe_agg {
    MKS_PROBE_COUNT,
    MKS_PROBE_SUM,
    MKS_PROBE_MEAN,
    MKS_PROBE_MIN,
    MKS_PROBE_MAX,
    MKS_PROBE_HIST,
    MKS_PROBE_P50,
    MKS_PROBE_P90,
    MKS_PROBE_P99,
};

/* How a value or key column reads. */
enum mks_probe_unit {
    MKS_PROBE_UNIT_NUMBER = 0, /* a count or a plain number */
    MKS_PROBE_UNIT_NS = 1,     /* a duration or time in ns */
    MKS_PROBE_UNIT_ID = 2,     /* a 64-bit id (dep_event, comm_gen, task_gen): hex in text */
    MKS_PROBE_UNIT_CLASS = 3,  /* a task class id: named by the job's schema */
    MKS_PROBE_UNIT_EVENT = 4,  /* a hook event: named */
};

struct mks_probe_key {
    char name[16];  /* the field */
    uint32_t unit;  /* enum mks_probe_unit */
    uint32_t width; /* 16, 32 or 64: all ones is the ABI's "absent" for 32 and 64 */
};

struct mks_probe_column {
    char name[40];  /* as a column heading: "count()", "p99(wait)" */
    uint32_t agg;   /* enum mks_probe_agg */
    char field[16]; /* "" for count() */
    uint32_t unit;  /* of the value (a count for count()) */
    uint32_t word;  /* the value word it reads: sum for sum and mean, ~min for min, first
                       bucket for hist and quantiles; 0 (the count) for count() */
    uint32_t sum_word; /* for hist: the field's sum (the histogram's sum) */
};

struct mks_probe_layout {
    uint32_t n_keys;
    struct mks_probe_key keys[MKS_PROBE_MAX_KEYS];
    uint32_t n_cols;
    struct mks_probe_column cols[MKS_PROBE_MAX_AGGS];
    uint32_t n_words;
    uint8_t word_max[MKS_PROBE_MAX_WORDS]; /* merged by maximum (1) or by sum (0) */
};

struct mks_probe;

/* Parse and check a probe: grammar, fields, which hooks it needs and that
 * every field it reads is carried by each of them.  Errors point at the
 * token (mks_query_error_format). */
int mks_probe_parse(const char *text, struct mks_probe **p_p, struct mks_query_error *e);
void mks_probe_free(struct mks_probe *p); /* accepts NULL */

const struct mks_probe_layout *mks_probe_layout(const struct mks_probe *p);
/* Hooks whose events are aggregated, and hooks with a program that only
 * keeps state for another (dep_wait_begin for wait), as bit masks. */
uint32_t mks_probe_hooks(const struct mks_probe *p);
uint32_t mks_probe_helper_hooks(const struct mks_probe *p);
/* The task class names the predicate compares with, as mks_query_class_names. */
int mks_probe_class_names(const struct mks_probe *p, mks_query_name_fn fn, void *arg);

struct mks_probe_opts {
    size_t sz;           /* sizeof(struct mks_probe_opts) */
    uint32_t max_groups; /* 0: MKS_PROBE_GROUPS_DEFAULT; at most MKS_PROBE_GROUPS_MAX */
};

struct mks_probe_prog {
    uint32_t hook;      /* enum mks_hook_event */
    int aggregates;     /* 0: keeps state for another hook only */
    struct mks_insn *insns;
    uint32_t n_insns;
};

struct mks_probe_code {
    uint32_t n_progs;
    struct mks_probe_prog progs[MKS_EV_COUNT];
    uint32_t n_maps; /* MKS_PROBE_MAPS, or MKS_PROBE_MAP_BEGIN without a pair */
    struct mks_map_spec maps[MKS_PROBE_MAPS];
};

/* Compile a parsed probe (class names resolved through resolve) into its
 * programs and maps.  The programs still need mks_verify() for their hook
 * against code->maps, which gives their cost. */
int mks_probe_compile(const struct mks_probe *p, const struct mks_probe_opts *opts,
                      mks_class_resolver resolve, void *arg, struct mks_probe_code **code_p,
                      struct mks_query_error *e);
void mks_probe_code_free(struct mks_probe_code *c); /* accepts NULL */

/* Merge one group's value words src into dst (sums saturate). */
void mks_probe_merge(const struct mks_probe_layout *l, uint64_t *dst, const uint64_t *src);
/* Column col of a group's words: the aggregate's value (0), or -ENODATA when
 * it has none (a minimum, mean or quantile of no event).  For hist the
 * value is the count; its buckets are words[col->word .. +64]. */
int mks_probe_value(const struct mks_probe_layout *l, uint32_t col, const uint64_t *words,
                    double *v_p);

/* ---- the reference: what the programs compute, in C ----------------------
 * The same probe over a sequence of events, for tests and the fuzzer: the
 * compiled programs run in the VM must give exactly this.  Events are
 * given in the order one worker saw them (the begin of a wait is kept per
 * worker as on the device); the group map holds max_groups keys. */
struct mks_probe_sim;
int mks_probe_sim_new(const struct mks_probe *p, uint32_t max_groups, mks_class_resolver resolve,
                      void *arg, struct mks_probe_sim **sim_p);
void mks_probe_sim_free(struct mks_probe_sim *sim); /* accepts NULL */
/* One event at its hook (ctx->event), on worker ctx->worker. */
void mks_probe_sim_event(struct mks_probe_sim *sim, const struct mks_hook_ctx *ctx);
/* Start a new epoch: groups, other and stats from zero, as the banks do
 * (open waits are forgotten too: they live in a banked map). */
void mks_probe_sim_epoch(struct mks_probe_sim *sim);
uint32_t mks_probe_sim_groups(const struct mks_probe_sim *sim);
/* Group i: its key words and value words. */
void mks_probe_sim_group(const struct mks_probe_sim *sim, uint32_t i, const uint64_t **key_p,
                         const uint64_t **words_p);
const uint64_t *mks_probe_sim_other(const struct mks_probe_sim *sim);
const uint64_t *mks_probe_sim_stats(const struct mks_probe_sim *sim, uint32_t hook);

#ifdef __cplusplus
}
#endif

#endif /* MKSCOPE_PROBE_H */

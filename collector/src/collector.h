/*
 * Internals of the collector shared by the daemon's files: CLI request
 * serving, Prometheus metrics and the wait-chain diagnosis.
 */
#ifndef MKS_COLLECTOR_INT_H
#define MKS_COLLECTOR_INT_H

#include <jansson.h>
#include <stdint.h>
#include <time.h>

#include "mkscope/store.h"
#include "mkscope/wire.h"

/* The collector's clocks in ns: CLOCK_REALTIME (stored times) and
 * CLOCK_MONOTONIC (deadlines, intervals). */
static inline uint64_t mks_real_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t mks_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* CLI exit codes, also carried in CliReply.status. */
enum mks_exit {
    MKS_EXIT_OK = 0,
    MKS_EXIT_ERROR = 1,       /* the request failed */
    MKS_EXIT_USAGE = 2,       /* bad command line or query syntax */
    MKS_EXIT_UNREACHABLE = 3, /* no collector answered */
    MKS_EXIT_NODATA = 4,      /* nothing stored that answers the question */
    MKS_EXIT_BUSY = 5,        /* the collector is up but could not take the request now */
};

/* Work limit of one CLI request (SQLite's progress handler interrupts the
 * statement): below the CLI's default 5 s timeout, so that the user reads
 * why rather than "collector busy". */
#define MKS_SERVE_LIMIT_NS 4000000000ull

/* Why a message was refused or ignored (mkscope_refused_total{reason}). */
enum mks_refusal {
    MKS_REFUSED_UNAUTHENTICATED, /* a key is configured and the MAC did not verify */
    MKS_REFUSED_INVALID,         /* authenticated (or no key), but not a valid message */
    MKS_REFUSED_REPLAYED,        /* its nonce was seen before */
    MKS_REFUSED_STALE,           /* outside the time window, or no nonce/time with a key */
    MKS_REFUSED_UNREGISTERED,    /* from a rank or incarnation that has not registered */
    MKS_REFUSED_OLD_INCARNATION, /* a registration older than the registered incarnation */
    MKS_REFUSED_OUT_OF_ORDER,    /* older than the state already applied: ignored */
    MKS_REFUSED_COUNT
};
/* Label of a reason in metrics and logs. */
const char *mks_refusal_name(enum mks_refusal r);
/* The refusal a mks_store_ingest error is; MKS_REFUSED_COUNT for a failure
 * of the store itself. */
enum mks_refusal mks_refusal_of_store(int rc);
struct mks_ingest_stats;
struct mks_ratelog;
/* Count a refused (or ignored) message in stats and say so on stderr, at
 * most one line per reason every 10 s (logs: MKS_REFUSED_COUNT of them,
 * one set per thread): an attacker's flood is not a log flood. */
void mks_refused(struct mks_ingest_stats *stats, struct mks_ratelog *logs, enum mks_refusal why,
                 const char *what);

/* Counters of the ingest path, for metrics.  The loop counts, the CLI
 * server's threads read (and count requests): atomic. */
struct mks_ingest_stats {
    _Atomic uint64_t refused[MKS_REFUSED_COUNT];
    _Atomic uint64_t messages, decode_errors, store_errors, cli_requests;
    _Atomic uint64_t ucx_batches; /* raw event batches received over UCX */
    _Atomic uint64_t cli_busy;    /* requests answered "busy" (every worker occupied) */
    _Atomic uint64_t summaries;   /* epoch summaries stored */
    _Atomic uint64_t summaries_pressured; /* of them, made under the collector's pressure */
    _Atomic uint64_t batches;     /* ingest transactions */
    _Atomic uint32_t pressure;    /* the level Acks carry now (ingest.h) */
    /* Histograms and counters kept in memory since the collector started
     * (metrics.c): written by the loop, read by whoever renders /metrics. */
    struct mks_metrics *registry;
};

struct mks_serve_env {
    struct mks_store *st;
    const struct mks_ingest_stats *stats;
    uint64_t now_ns;
    /* "host:port" of the collector's UCX listener for raw events, named in
     * Escalate commands; NULL or "" when there is none. */
    const char *ucx_endpoint;
    /* Work limit of this request in ns (raw SQL, queries): 0 means
     * MKS_SERVE_LIMIT_NS. */
    uint64_t limit_ns;
};

/* Serve one CLI request: returns the exit status; *out gets the JSON answer
 * (or NULL), err a one-line error when status != 0. */
int mks_serve_cli(const struct mks_serve_env *env, const Mkscope__V1__CliRequest *req,
                  json_t **out, char *err, size_t errlen);

/* Prometheus text exposition of the store's per-rank state and of
 * env->stats (its registry included); malloc()ed. */
char *mks_metrics_render(const struct mks_serve_env *env);

/* The in-memory part of the metrics: Prometheus histograms of step time
 * per rank, task run time per rank and class, remote wait per rank and
 * peer; counters of tasks, coverage (eligible, ran, throttled, lost per
 * hook) and remote waits dropped per rank; trigger firings and
 * escalations.  Counted from the summaries this collector stored since it
 * started (a replay it already counted is skipped), so they only grow, as
 * Prometheus counters must; store retention does not shrink them.  Locked
 * inside: the loop observes, another thread renders. */
struct mks_metrics;
int mks_metrics_create(struct mks_metrics **m_p);
void mks_metrics_destroy(struct mks_metrics *m); /* accepts NULL */
/* A stored envelope: epoch summaries are counted, the rest ignored. */
void mks_metrics_observe(struct mks_metrics *m, const mks_envelope *env);
/* A trigger fired on `ranks_fired` ranks of `job`; `escalated_ranks` > 0
 * when that started an escalation of so many ranks. */
void mks_metrics_trigger(struct mks_metrics *m, const char *job, int64_t trigger,
                         uint64_t ranks_fired, uint64_t escalated_ranks);

#endif

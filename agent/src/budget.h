/*
 * The per-rank telemetry budget: a token bucket of bytes per second.
 *
 * Every byte the agent sends to the collector is charged.  Before a summary
 * goes out the agent asks for the finest detail tier whose encoded size the
 * bucket can pay; when even the coarsest does not fit, the summary is held
 * and merged into the next epoch's (counts stay exact, the summary says how
 * many epochs it covers).  Device-side sampling (mks_ctl_set_budget) is
 * applied on the collector's SetBudget command; coverage reports what it
 * skipped as throttled.
 */
#ifndef MKS_AGENT_BUDGET_H
#define MKS_AGENT_BUDGET_H

#include <stddef.h>
#include <stdint.h>

#include "summary.h"

struct agt_budget {
    uint64_t bytes_per_sec; /* 0: unlimited */
    uint64_t epoch_ns;
    double tokens;          /* bytes that may be sent now (may go negative) */
    double cap;             /* most tokens the bucket holds */
    uint64_t last_ns;
    uint64_t sent;          /* bytes charged since init */
    uint32_t held;          /* consecutive epochs held back */
    uint64_t held_total;    /* epochs held back since init */
};

void agt_budget_init(struct agt_budget *b, uint64_t bytes_per_sec, uint64_t epoch_ns,
                     uint64_t now_ns);
void agt_budget_set(struct agt_budget *b, uint64_t bytes_per_sec, uint64_t now_ns);
void agt_budget_refill(struct agt_budget *b, uint64_t now_ns);

/* Pick the finest tier of sizes[AGT_TIER_COUNT] that fits; -1: hold the
 * summary (merge it into the next one). */
int agt_budget_choose(struct agt_budget *b, const size_t sizes[AGT_TIER_COUNT]);

/* Charge bytes actually sent. */
void agt_budget_charge(struct agt_budget *b, size_t bytes);

/* May an unsolicited message of `bytes` (heartbeat, replay) go out now? */
int agt_budget_allows(const struct agt_budget *b, size_t bytes);

/* The collector's load as an agent sees it: the hint its Acks carry
 * (Ack.pressure: 0 keeping up, 1 busy, 2 behind) and how long requests wait
 * for their reply, smoothed: past two epochs (and 200 ms) the collector is
 * busy, past eight (and 1 s) behind; a level the latency set holds until
 * the latency halves.  The
 * level in force is the larger of the two and caps the detail tier (level 1:
 * histograms at most, 2: counts). */
struct agt_pressure {
    uint32_t hint, level;
    double lat_ns; /* smoothed reply latency, 0 before the first reply */
};

/* Note one reply; returns the level now in force. */
uint32_t agt_pressure_note(struct agt_pressure *p, uint32_t hint, uint64_t latency_ns,
                           uint64_t epoch_ns);

#endif /* MKS_AGENT_BUDGET_H */

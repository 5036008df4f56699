/* Token bucket for the telemetry budget (see budget.h). */
#include "budget.h"

/* The bucket holds at most this many epochs' worth of bytes: enough to send
 * a summary that was held back, small enough that a burst stays short. */
#define BUDGET_CAP_EPOCHS 4

static double per_epoch(const struct agt_budget *b)
{
    return (double)b->bytes_per_sec * (double)b->epoch_ns / 1e9;
}

void agt_budget_init(struct agt_budget *b, uint64_t bytes_per_sec, uint64_t epoch_ns,
                     uint64_t now_ns)
{
    *b = (struct agt_budget){.epoch_ns = epoch_ns ? epoch_ns : 100000000ull};
    agt_budget_set(b, bytes_per_sec, now_ns);
    b->tokens = per_epoch(b);
}

void agt_budget_set(struct agt_budget *b, uint64_t bytes_per_sec, uint64_t now_ns)
{
    b->bytes_per_sec = bytes_per_sec;
    b->cap = BUDGET_CAP_EPOCHS * per_epoch(b);
    if (b->tokens > b->cap)
        b->tokens = b->cap;
    b->last_ns = now_ns;
    if (!bytes_per_sec)
        b->held = 0;
}

void agt_budget_refill(struct agt_budget *b, uint64_t now_ns)
{
    if (!b->bytes_per_sec || now_ns <= b->last_ns) {
        b->last_ns = now_ns > b->last_ns ? now_ns : b->last_ns;
        return;
    }
    b->tokens += (double)(now_ns - b->last_ns) * (double)b->bytes_per_sec / 1e9;
    b->last_ns = now_ns;
    if (b->tokens > b->cap)
        b->tokens = b->cap;
}

int agt_budget_choose(struct agt_budget *b, const size_t sizes[AGT_TIER_COUNT])
{
    if (!b->bytes_per_sec)
        return AGT_TIER_FULL;
    for (int t = 0; t < AGT_TIER_COUNT; t++) {
        if ((double)sizes[t] <= b->tokens) {
            b->held = 0;
            return t;
        }
    }
    /* Even the coarsest summary does not fit.  If it would never fit (the
     * bucket is too small), grow the bucket, with room for the summary to
     * grow while it waits: the long-run rate stays the budget, the summary
     * only waits longer. */
    if (2.0 * (double)sizes[AGT_TIER_COUNT - 1] > b->cap)
        b->cap = 2.0 * (double)sizes[AGT_TIER_COUNT - 1];
    b->held++;
    b->held_total++;
    return -1;
}

void agt_budget_charge(struct agt_budget *b, size_t bytes)
{
    b->sent += bytes;
    if (b->bytes_per_sec)
        b->tokens -= (double)bytes;
}

int agt_budget_allows(const struct agt_budget *b, size_t bytes)
{
    return !b->bytes_per_sec || (double)bytes <= b->tokens;
}

uint32_t agt_pressure_note(struct agt_pressure *p, uint32_t hint, uint64_t latency_ns,
                           uint64_t epoch_ns)
{
    if (!epoch_ns)
        epoch_ns = 100000000ull;
    p->hint = hint > 2 ? 2 : hint;
    p->lat_ns = p->lat_ns > 0 ? 0.7 * p->lat_ns + 0.3 * (double)latency_ns : (double)latency_ns;
    /* busy past two epochs (200 ms at least), behind past eight (1 s): a
     * loaded machine's scheduling delays stay below */
    double busy = 2.0 * (double)epoch_ns, behind = 8.0 * (double)epoch_ns;
    if (busy < 2e8)
        busy = 2e8;
    if (behind < 1e9)
        behind = 1e9;
    uint32_t lat = p->lat_ns > behind ? 2 : p->lat_ns > busy ? 1 : 0;
    if (p->level > p->hint) { /* the latency set it: it holds until the latency halves */
        if (p->level == 2 && p->lat_ns > behind / 2)
            lat = 2;
        else if (p->lat_ns > busy / 2 && lat < 1)
            lat = 1;
    }
    p->level = p->hint > lat ? p->hint : lat;
    return p->level;
}

/*
 * Budget: the finest tier that fits is chosen, summaries are held (never
 * dropped) when nothing fits, and the bytes charged over a run stay under the
 * budget.  The collector's pressure: its hint and slow acks raise the level
 * that caps the tier, and it falls back once both say the collector keeps up.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "budget.h"

#define EPOCH_NS 100000000ull

static void test_unlimited_is_full_detail(void **state)
{
    (void)state;
    struct agt_budget b;
    agt_budget_init(&b, 0, EPOCH_NS, 0);
    size_t sizes[AGT_TIER_COUNT] = {1u << 30, 1000, 10};
    assert_int_equal(agt_budget_choose(&b, sizes), AGT_TIER_FULL);
    agt_budget_charge(&b, 1u << 30);
    assert_int_equal(agt_budget_choose(&b, sizes), AGT_TIER_FULL);
    assert_true(agt_budget_allows(&b, 1u << 30));
}

static void test_finest_tier_that_fits(void **state)
{
    (void)state;
    struct agt_budget b;
    agt_budget_init(&b, 10000, EPOCH_NS, 0); /* 1000 bytes per epoch */
    size_t sizes[AGT_TIER_COUNT] = {5000, 800, 200};
    assert_int_equal(agt_budget_choose(&b, sizes), AGT_TIER_HIST);
    agt_budget_charge(&b, 800);
    /* 200 tokens left: only the counts tier fits */
    assert_int_equal(agt_budget_choose(&b, sizes), AGT_TIER_COUNTS);
    agt_budget_charge(&b, 200);
    assert_int_equal(agt_budget_choose(&b, sizes), -1);
    assert_int_equal(b.held, 1);
    /* a second later the bucket is full again (capped) */
    agt_budget_refill(&b, 1000000000ull);
    assert_true(b.tokens <= b.cap);
    size_t small[AGT_TIER_COUNT] = {900, 800, 200};
    assert_int_equal(agt_budget_choose(&b, small), AGT_TIER_FULL);
    assert_int_equal(b.held, 0);
}

/* Simulate 60 s of epochs whose natural summary is larger than the budget
 * allows; bytes charged must stay within budget * time + the bucket's cap,
 * and every epoch must end up in some summary. */
static void run_sim(uint64_t bps, size_t full, size_t epoch, size_t counts, uint64_t max_pending)
{
    struct agt_budget b;
    agt_budget_init(&b, bps, EPOCH_NS, 0);
    double initial = b.tokens;
    uint64_t epochs_pending = 0, epochs_sent = 0, sends = 0;
    const uint64_t n = 600;
    for (uint64_t i = 1; i <= n; i++) {
        uint64_t now = i * EPOCH_NS;
        agt_budget_refill(&b, now);
        epochs_pending++;
        /* merged summaries grow a little with the epochs they hold */
        size_t grow = (size_t)(epochs_pending - 1) * 8;
        size_t sizes[AGT_TIER_COUNT] = {full + grow, epoch + grow, counts + grow};
        int t = agt_budget_choose(&b, sizes);
        if (t < 0)
            continue;
        agt_budget_charge(&b, sizes[t]);
        epochs_sent += epochs_pending;
        epochs_pending = 0;
        sends++;
    }
    double limit = (double)bps * (double)(n * EPOCH_NS) / 1e9 + initial;
    assert_true((double)b.sent <= limit);
    assert_true(sends > 0);
    assert_int_equal(epochs_sent + epochs_pending, n);
    /* nothing is starved: the last summary is at most a few epochs old */
    assert_true(epochs_pending <= max_pending);
}

static void test_rate_stays_under_budget(void **state)
{
    (void)state;
    run_sim(20000, 6000, 2500, 900, 2); /* tiers fit sometimes */
    run_sim(5000, 6000, 2500, 900, 4);  /* coarser tiers fit */
    run_sim(1000, 6000, 2500, 900, 16); /* coarsest larger than one epoch's worth */
    run_sim(100, 6000, 2500, 900, 600); /* coarsest larger than the bucket: rare sends */
}

static void test_budget_change_takes_effect(void **state)
{
    (void)state;
    struct agt_budget b;
    agt_budget_init(&b, 0, EPOCH_NS, 0);
    agt_budget_set(&b, 1000, 0);
    agt_budget_refill(&b, 10 * EPOCH_NS);
    assert_true(b.tokens <= b.cap);
    assert_false(agt_budget_allows(&b, 100000));
    agt_budget_set(&b, 0, 10 * EPOCH_NS);
    assert_true(agt_budget_allows(&b, 100000));
}

static void test_collector_pressure(void **state)
{
    (void)state;
    struct agt_pressure p = {0};
    /* fast acks, no hint: full detail */
    assert_int_equal(agt_pressure_note(&p, 0, EPOCH_NS / 10, EPOCH_NS), 0);
    /* the hint alone sets the level, at once, and an out-of-range hint is 2 */
    assert_int_equal(agt_pressure_note(&p, 1, EPOCH_NS / 10, EPOCH_NS), 1);
    assert_int_equal(agt_pressure_note(&p, 7, EPOCH_NS / 10, EPOCH_NS), 2);
    assert_int_equal(agt_pressure_note(&p, 0, EPOCH_NS / 10, EPOCH_NS), 0);
    /* a loaded machine's 1.5 epochs (150 ms): nothing */
    for (int i = 0; i < 20; i++)
        assert_int_equal(agt_pressure_note(&p, 0, 3 * EPOCH_NS / 2, EPOCH_NS), 0);
    /* acks taking three epochs: busy; twenty: behind within a few replies */
    int replies = 0;
    while (agt_pressure_note(&p, 0, 3 * EPOCH_NS, EPOCH_NS) < 1 && replies < 20)
        replies++;
    assert_true(replies < 10);
    assert_int_equal(p.level, 1);
    replies = 0;
    while (agt_pressure_note(&p, 0, 20 * EPOCH_NS, EPOCH_NS) < 2 && replies < 20)
        replies++;
    assert_true(replies < 10);
    /* six epochs: still held at 2 (the latency must halve first), then
     * fast acks bring it down step by step to 0 */
    for (int i = 0; i < 20; i++)
        agt_pressure_note(&p, 0, 6 * EPOCH_NS, EPOCH_NS);
    assert_int_equal(p.level, 2);
    uint32_t last = 2;
    for (int i = 0; i < 40; i++) {
        uint32_t l = agt_pressure_note(&p, 0, EPOCH_NS / 100, EPOCH_NS);
        assert_true(l <= last); /* never back up while acks are fast */
        last = l;
    }
    assert_int_equal(last, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unlimited_is_full_detail),
        cmocka_unit_test(test_finest_tier_that_fits),
        cmocka_unit_test(test_rate_stays_under_budget),
        cmocka_unit_test(test_budget_change_takes_effect),
        cmocka_unit_test(test_collector_pressure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * Freshness tests: the replay cache refuses what it has seen, the window
 * what is too old or too new, and a full cache never lets anything through
 * twice (the floor); the rate-limited logger says one line per interval.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mkscope/fresh.h"

#define S 1000000000ull
static const uint64_t T0 = 1700000000ull * S;

static struct mks_fresh *make(uint32_t capacity, int window, int require)
{
    struct mks_fresh_opts o = {.sz = sizeof(o), .capacity = capacity, .window_ns = 60 * S,
                               .enforce_window = window, .require = require};
    struct mks_fresh *f = NULL;
    assert_int_equal(mks_fresh_create(&o, &f), 0);
    return f;
}

static int check(struct mks_fresh *f, const char *who, uint64_t nonce, uint64_t sent, uint64_t now)
{
    char err[256] = "";
    int rc = mks_fresh_check(f, who, strlen(who), nonce, sent, now, err, sizeof(err));
    if (rc)
        assert_true(strlen(err) > 0 && !strchr(err, '\n'));
    return rc;
}

static void test_replay(void **state)
{
    (void)state;
    struct mks_fresh *f = make(0, 1, 1);
    assert_int_equal(check(f, "j/0/1", 42, T0, T0), 0);
    assert_int_equal(check(f, "j/0/1", 42, T0, T0 + S), -EALREADY);
    /* The same nonce from another sender is another message. */
    assert_int_equal(check(f, "j/1/1", 42, T0, T0 + S), 0);
    assert_int_equal(check(f, "j/0/1", 43, T0, T0 + S), 0);
    struct mks_fresh_stats st;
    mks_fresh_stats(f, &st);
    assert_int_equal(st.accepted, 3);
    assert_int_equal(st.replayed, 1);
    mks_fresh_destroy(f);
}

static void test_window(void **state)
{
    (void)state;
    struct mks_fresh *f = make(0, 1, 1);
    assert_int_equal(check(f, "a", 1, T0 - 61 * S, T0), -ESTALE);
    assert_int_equal(check(f, "a", 2, T0 + 61 * S, T0), -ESTALE);
    assert_int_equal(check(f, "a", 3, T0 - 59 * S, T0), 0);
    assert_int_equal(check(f, "a", 4, T0 + 59 * S, T0), 0);
    /* Required: a message without nonce or time is refused... */
    assert_int_equal(check(f, "a", 0, T0, T0), -EBADMSG);
    assert_int_equal(check(f, "a", 5, 0, T0), -EBADMSG);
    mks_fresh_destroy(f);
    /* ...and passes where nothing is required; the window is not enforced
     * there, duplicates are still dropped. */
    f = make(0, 0, 0);
    assert_int_equal(check(f, "a", 0, 0, T0), 0);
    assert_int_equal(check(f, "a", 0, 0, T0), 0);
    assert_int_equal(check(f, "a", 7, T0 - 3600 * S, T0), 0);
    assert_int_equal(check(f, "a", 7, T0 - 3600 * S, T0), -EALREADY);
    mks_fresh_destroy(f);
}

/* Whatever the cache had to give up is never accepted again: more messages
 * than it holds, then every one of them replayed. */
static void test_full_cache_floor(void **state)
{
    (void)state;
    for (int window = 0; window < 2; window++) {
        struct mks_fresh *f = make(64, window, 1);
        for (uint64_t i = 1; i <= 1000; i++)
            assert_int_equal(check(f, "s", i * 7919, T0 + i * 1000, T0 + i * 1000), 0);
        for (uint64_t i = 1; i <= 1000; i++) {
            int rc = check(f, "s", i * 7919, T0 + i * 1000, T0 + 1000 * 1000 + 1);
            assert_true(rc == -EALREADY || rc == -ESTALE);
        }
        struct mks_fresh_stats st;
        mks_fresh_stats(f, &st);
        assert_int_equal(st.entries, 64);
        assert_int_equal(st.replayed, 64);
        /* A new message, newer than what was given up, still passes. */
        assert_int_equal(check(f, "s", 1, T0 + 2000000, T0 + 2000000), 0);
        mks_fresh_destroy(f);
    }
}

/* Expiry by age inside the window keeps the cache small, and nothing
 * expired comes back: it is outside the window by then. */
static void test_expiry(void **state)
{
    (void)state;
    struct mks_fresh *f = make(1024, 1, 1);
    for (uint64_t i = 0; i < 100; i++)
        assert_int_equal(check(f, "s", i + 1, T0 + i * S, T0 + i * S), 0);
    struct mks_fresh_stats st;
    mks_fresh_stats(f, &st);
    assert_true(st.entries <= 62);
    for (uint64_t i = 0; i < 100; i++) {
        int rc = check(f, "s", i + 1, T0 + i * S, T0 + 100 * S);
        assert_true(rc == -EALREADY || rc == -ESTALE);
    }
    mks_fresh_destroy(f);
}

/* Against a plain list: random senders and nonces, many repeats, deletes
 * through the index at every position of its clusters. */
static void test_random_against_reference(void **state)
{
    (void)state;
    enum { N = 20000, CAP = 512 };
    struct mks_fresh *f = make(CAP, 0, 1);
    static uint64_t seen[N];
    size_t n_seen = 0;
    srand(7);
    for (int i = 0; i < N; i++) {
        uint64_t nonce = 1 + (uint64_t)(rand() % 3000);
        uint64_t t = T0 + (uint64_t)i;
        int rc = check(f, "x", nonce, t, t);
        /* The reference: the last CAP accepted nonces. */
        int dup = 0;
        for (size_t k = n_seen > CAP ? n_seen - CAP : 0; k < n_seen; k++)
            dup |= seen[k] == nonce;
        if (dup)
            assert_int_equal(rc, -EALREADY);
        else
            assert_int_equal(rc, 0);
        if (!rc)
            seen[n_seen++] = nonce;
    }
    mks_fresh_destroy(f);
}

static void test_env_sender(void **state)
{
    (void)state;
    struct mks_fresh *f = make(0, 1, 1);
    mks_envelope e;
    mks_wire_init(&e, "job", 3, 1);
    char err[128];
    assert_int_equal(mks_fresh_check_env(f, &e, e.sent_ns, err, sizeof(err)), 0);
    assert_int_equal(mks_fresh_check_env(f, &e, e.sent_ns, err, sizeof(err)), -EALREADY);
    e.incarnation = 9; /* another agent process: another sender */
    assert_int_equal(mks_fresh_check_env(f, &e, e.sent_ns, err, sizeof(err)), 0);
    /* forgotten (its storing failed): the resend is taken */
    mks_fresh_forget_env(f, &e);
    assert_int_equal(mks_fresh_check_env(f, &e, e.sent_ns, err, sizeof(err)), 0);
    assert_int_equal(mks_fresh_check_env(f, &e, e.sent_ns, err, sizeof(err)), -EALREADY);
    mks_fresh_destroy(f);
}

static void test_ratelog(void **state)
{
    (void)state;
    struct mks_ratelog r = {0};
    uint64_t sup = 99;
    assert_int_equal(mks_ratelog_due(&r, 100, 10, &sup), 1);
    assert_int_equal(sup, 0);
    assert_int_equal(mks_ratelog_due(&r, 105, 10, &sup), 0);
    assert_int_equal(mks_ratelog_due(&r, 109, 10, &sup), 0);
    assert_int_equal(mks_ratelog_due(&r, 110, 10, &sup), 1);
    assert_int_equal(sup, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replay),         cmocka_unit_test(test_window),
        cmocka_unit_test(test_full_cache_floor), cmocka_unit_test(test_expiry),
        cmocka_unit_test(test_random_against_reference), cmocka_unit_test(test_env_sender),
        cmocka_unit_test(test_ratelog),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

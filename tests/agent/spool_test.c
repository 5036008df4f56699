/*
 * Spool: order of replay, cumulative acks, memory->disk spill, that every
 * overflow is counted as lost, that every summary is written through to the
 * directory, and that a crashed agent's summaries are sent again by the
 * next agent.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "spool.h"

/* Payload of entry seq: its own seq repeated, so a reordered or mixed-up
 * payload is caught. */
static void payload(uint64_t seq, uint8_t *buf, size_t len)
{
    for (size_t i = 0; i < len; i++)
        buf[i] = (uint8_t)(seq * 31 + i);
}

static void push_n(struct agt_spool *sp, uint64_t first, uint64_t n, size_t len)
{
    uint8_t buf[256];
    for (uint64_t s = first; s < first + n; s++) {
        payload(s, buf, len);
        struct agt_spool_tag tag = {.v = {s % 3, 0, 0, 2 * s}};
        assert_int_equal(agt_spool_push(sp, s, buf, len, &tag), 0);
    }
}

/* Pops everything, checking order and payloads; returns the first seq seen. */
static uint64_t drain_check(struct agt_spool *sp, uint64_t expect_first, uint64_t expect_n,
                            size_t len)
{
    uint64_t seq, want = expect_first, n = 0;
    const void *buf;
    size_t l;
    uint8_t ref[256];
    while (agt_spool_head(sp, &seq, &buf, &l) == 0) {
        assert_int_equal(seq, want);
        assert_int_equal(l, len);
        payload(seq, ref, len);
        assert_memory_equal(buf, ref, len);
        assert_int_equal(agt_spool_ack(sp, seq), 1);
        want++;
        n++;
    }
    assert_int_equal(n, expect_n);
    return expect_first;
}

static char tmpdir[64];

static int setup_dir(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/mks-spool-test-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_dir(void **state)
{
    (void)state;
    DIR *d = opendir(tmpdir);
    struct dirent *de;
    while (d && (de = readdir(d)))
        if (de->d_name[0] != '.')
            unlinkat(dirfd(d), de->d_name, 0);
    if (d)
        closedir(d);
    rmdir(tmpdir);
    return 0;
}

/* Entries of the spool directory but its lock file. */
static int count_files(void)
{
    int n = 0;
    DIR *d = opendir(tmpdir);
    struct dirent *de;
    while (d && (de = readdir(d)))
        if (de->d_name[0] != '.' && strcmp(de->d_name, "lock"))
            n++;
    if (d)
        closedir(d);
    return n;
}

static void test_order_and_cumulative_ack(void **state)
{
    (void)state;
    struct agt_spool *sp;
    struct agt_spool_opts o = {.sz = sizeof(o)};
    assert_int_equal(agt_spool_create(&o, &sp), 0);
    push_n(sp, 1, 10, 16);
    assert_int_equal(agt_spool_ack(sp, 3), 3);
    /* an old ack changes nothing */
    assert_int_equal(agt_spool_ack(sp, 2), 0);
    drain_check(sp, 4, 7, 16);
    struct agt_spool_stats st;
    agt_spool_stats(sp, &st);
    assert_int_equal(st.entries, 0);
    assert_int_equal(st.lost, 0);
    assert_int_equal(st.mem_bytes, 0);
    uint64_t seq;
    const void *b;
    size_t l;
    assert_int_equal(agt_spool_head(sp, &seq, &b, &l), -ENOENT);
    agt_spool_destroy(sp);
}

static void test_rejects_non_increasing_seq(void **state)
{
    (void)state;
    struct agt_spool *sp;
    struct agt_spool_opts o = {.sz = sizeof(o)};
    assert_int_equal(agt_spool_create(&o, &sp), 0);
    push_n(sp, 5, 1, 8);
    uint8_t buf[8] = {0};
    assert_int_equal(agt_spool_push(sp, 5, buf, 8, NULL), -EINVAL);
    assert_int_equal(agt_spool_push(sp, 4, buf, 8, NULL), -EINVAL);
    assert_int_equal(agt_spool_push(sp, 6, buf, 8, NULL), 0);
    agt_spool_destroy(sp);
    struct agt_spool_opts bad = {.sz = sizeof(bad) + 8};
    assert_int_equal(agt_spool_create(&bad, &sp), -EINVAL);
}

static void test_memory_overflow_counts_lost(void **state)
{
    (void)state;
    struct agt_spool *sp;
    struct agt_spool_opts o = {.sz = sizeof(o), .mem_bytes = 100};
    assert_int_equal(agt_spool_create(&o, &sp), 0);
    push_n(sp, 1, 12, 20); /* 240 bytes into 100: the 7 oldest go */
    struct agt_spool_stats st;
    agt_spool_stats(sp, &st);
    assert_int_equal(st.lost, 7);
    /* tags of the dropped seqs 1..7 (seq % 3): 1+2+0+1+2+0+1 */
    assert_int_equal(st.lost_tags.v[0], 7);
    assert_int_equal(st.entries, 5);
    assert_true(st.mem_bytes <= 100);
    drain_check(sp, 8, 5, 20);
    agt_spool_destroy(sp);
}

/* A spool made with o and entries 1..n of len bytes pushed, none lost; *st
 * its stats then. */
static struct agt_spool *filled(const struct agt_spool_opts *o, uint64_t n, size_t len,
                                struct agt_spool_stats *st)
{
    struct agt_spool *sp;
    assert_int_equal(agt_spool_create(o, &sp), 0);
    push_n(sp, 1, n, len);
    agt_spool_stats(sp, st);
    assert_int_equal(st->lost, 0);
    assert_int_equal(st->entries, n);
    return sp;
}

static void test_disk_spill_keeps_everything_in_order(void **state)
{
    (void)state;
    struct agt_spool_opts o = {
        .sz = sizeof(o), .mem_bytes = 100, .dir = tmpdir, .disk_bytes = 10000, .spill_only = 1};
    struct agt_spool_stats st;
    struct agt_spool *sp = filled(&o, 40, 50, &st);
    assert_true(st.mem_bytes <= 100);
    assert_int_equal(st.disk_bytes + st.mem_bytes, 40 * 50);
    assert_int_equal(count_files(), (int)(st.disk_bytes / 50));
    drain_check(sp, 1, 40, 50);
    assert_int_equal(count_files(), 0);
    agt_spool_destroy(sp);
}

static void test_disk_overflow_counts_lost(void **state)
{
    (void)state;
    struct agt_spool *sp;
    struct agt_spool_opts o = {
        .sz = sizeof(o), .mem_bytes = 100, .dir = tmpdir, .disk_bytes = 200, .spill_only = 1};
    assert_int_equal(agt_spool_create(&o, &sp), 0);
    push_n(sp, 1, 30, 20); /* 600 bytes, room for 300 */
    struct agt_spool_stats st;
    agt_spool_stats(sp, &st);
    assert_int_equal(st.lost, 15);
    assert_int_equal(st.lost_tags.v[0], 15); /* five of each of 1, 2, 0 */
    assert_int_equal(st.entries, 15);
    drain_check(sp, 16, 15, 20);
    agt_spool_destroy(sp);
}

static void test_unreadable_file_is_lost_not_skipped_silently(void **state)
{
    (void)state;
    struct agt_spool *sp;
    struct agt_spool_opts o = {.sz = sizeof(o), .mem_bytes = 40, .dir = tmpdir};
    assert_int_equal(agt_spool_create(&o, &sp), 0);
    push_n(sp, 1, 5, 20); /* seqs 1..3 spill */
    char path[128];
    snprintf(path, sizeof(path), "%s/%020d.sum", tmpdir, 1);
    assert_int_equal(unlink(path), 0);
    drain_check(sp, 2, 4, 20);
    struct agt_spool_stats st;
    agt_spool_stats(sp, &st);
    assert_int_equal(st.lost, 1);
    agt_spool_destroy(sp);
}

static void write_stale(const char *dir, int seq, const char *text)
{
    char path[160];
    snprintf(path, sizeof(path), "%s/%020d.sum", dir, seq);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* Replays every summary the spool offers, checking each against want[]. */
static void replay_check(struct agt_spool *sp, const char *const *want, size_t n)
{
    const void *buf;
    size_t len, k = 0;
    while (agt_spool_replay_head(sp, &buf, &len) == 0) {
        assert_true(k < n);
        assert_int_equal(len, strlen(want[k]));
        assert_memory_equal(buf, want[k], len);
        agt_spool_replay_pop(sp, 1);
        k++;
    }
    assert_int_equal(k, n);
}

/* A crashed agent's files are sent again by the next one, oldest first,
 * and nothing else of the directory is touched. */
static void test_stale_files_replayed(void **state)
{
    (void)state;
    write_stale(tmpdir, 78, "second");
    write_stale(tmpdir, 77, "first");
    char path[128];
    snprintf(path, sizeof(path), "%s/keep.txt", tmpdir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
    struct agt_spool *sp;
    struct agt_spool_opts o = {.sz = sizeof(o), .dir = tmpdir};
    assert_int_equal(agt_spool_create(&o, &sp), 0);
    struct agt_spool_stats st;
    agt_spool_stats(sp, &st);
    assert_int_equal(st.stale, 0);
    assert_int_equal(st.replay_left, 2);
    /* this agent's own summaries spill beside them without a clash */
    push_n(sp, 77, 3, 20);
    static const char *const want[] = {"first", "second"};
    replay_check(sp, want, 2);
    agt_spool_stats(sp, &st);
    assert_int_equal(st.replayed, 2);
    assert_int_equal(st.replay_left, 0);
    assert_int_equal(st.stale, 0);
    drain_check(sp, 77, 3, 20);
    assert_int_equal(count_files(), 1); /* only keep.txt: replay files and their folder gone */
    agt_spool_destroy(sp);
    unlink(path);
}

/* Two crashes in a row: the first agent's leftovers still go first. A
 * summary given up on is counted lost. */
static void test_replay_order_across_crashes(void **state)
{
    (void)state;
    write_stale(tmpdir, 5, "a5");
    write_stale(tmpdir, 6, "a6");
    struct agt_spool *sp;
    struct agt_spool_opts o = {.sz = sizeof(o), .dir = tmpdir};
    assert_int_equal(agt_spool_create(&o, &sp), 0);
    agt_spool_destroy(sp); /* a crash before anything was sent */
    write_stale(tmpdir, 1, "b1");
    write_stale(tmpdir, 2, "b2");
    assert_int_equal(agt_spool_create(&o, &sp), 0);
    struct agt_spool_stats st;
    agt_spool_stats(sp, &st);
    assert_int_equal(st.replay_left, 4);
    const void *buf;
    size_t len;
    assert_int_equal(agt_spool_replay_head(sp, &buf, &len), 0);
    assert_memory_equal(buf, "a5", 2);
    agt_spool_replay_pop(sp, 0); /* refused for good */
    static const char *const want[] = {"a6", "b1", "b2"};
    replay_check(sp, want, 3);
    agt_spool_stats(sp, &st);
    assert_int_equal(st.stale, 1);
    assert_int_equal(st.replayed, 3);
    assert_int_equal(count_files(), 0);
    agt_spool_destroy(sp);
}

/* Leftovers beyond the disk bound: the oldest go, counted as lost; an
 * empty or unreadable file is lost too, never sent. */
static void test_replay_bounded_and_validated(void **state)
{
    (void)state;
    write_stale(tmpdir, 1, "0123456789");
    write_stale(tmpdir, 2, "abcdefghij");
    write_stale(tmpdir, 3, "");
    write_stale(tmpdir, 4, "ABCDEFGHIJ");
    struct agt_spool *sp;
    struct agt_spool_opts o = {.sz = sizeof(o), .dir = tmpdir, .disk_bytes = 25};
    assert_int_equal(agt_spool_create(&o, &sp), 0);
    struct agt_spool_stats st;
    agt_spool_stats(sp, &st);
    assert_int_equal(st.stale, 1); /* seq 1 over the bound */
    assert_int_equal(st.replay_left, 3);
    static const char *const want[] = {"abcdefghij", "ABCDEFGHIJ"};
    replay_check(sp, want, 2);
    agt_spool_stats(sp, &st);
    assert_int_equal(st.stale, 2); /* and the empty one */
    assert_int_equal(st.replayed, 2);
    agt_spool_destroy(sp);
}

/* The entry in flight is never the one an overflow drops. */
static void test_pinned_head_survives_overflow(void **state)
{
    (void)state;
    struct agt_spool *sp;
    struct agt_spool_opts o = {.sz = sizeof(o), .mem_bytes = 100};
    assert_int_equal(agt_spool_create(&o, &sp), 0);
    push_n(sp, 1, 5, 20);
    agt_spool_pin(sp, 1);
    push_n(sp, 6, 2, 20); /* two over: 2 and 3 go, 1 stays */
    struct agt_spool_stats st;
    agt_spool_stats(sp, &st);
    assert_int_equal(st.lost, 2);
    assert_int_equal(st.lost_tags.v[0], 2 % 3 + 3 % 3);
    assert_int_equal(st.lost_tags.v[3], 2 * 2 + 2 * 3); /* every word adds up */
    uint64_t seq;
    const void *b;
    size_t l;
    assert_int_equal(agt_spool_head(sp, &seq, &b, &l), 0);
    assert_int_equal(seq, 1);
    assert_int_equal(agt_spool_ack(sp, 1), 1);
    agt_spool_pin(sp, 0);
    drain_check(sp, 4, 4, 20);
    agt_spool_destroy(sp);
}

static void test_pinned_head_on_disk(void **state)
{
    (void)state;
    struct agt_spool *sp;
    struct agt_spool_opts o = {
        .sz = sizeof(o), .mem_bytes = 40, .dir = tmpdir, .disk_bytes = 60, .spill_only = 1};
    assert_int_equal(agt_spool_create(&o, &sp), 0);
    push_n(sp, 1, 5, 20); /* 1..3 on disk, 4..5 in memory */
    agt_spool_pin(sp, 1);
    push_n(sp, 6, 3, 20); /* the disk is full: 2, 3, 4 go as 4, 5, 6 spill */
    struct agt_spool_stats st;
    agt_spool_stats(sp, &st);
    assert_int_equal(st.lost, 3);
    assert_int_equal(st.entries, 5);
    assert_true(st.disk_bytes <= 60);
    uint64_t seq;
    const void *b;
    size_t l;
    uint8_t ref[20];
    assert_int_equal(agt_spool_head(sp, &seq, &b, &l), 0);
    assert_int_equal(seq, 1);
    payload(1, ref, 20);
    assert_memory_equal(b, ref, 20);
    assert_int_equal(agt_spool_ack(sp, 1), 1);
    drain_check(sp, 5, 4, 20);
    assert_int_equal(count_files(), 0);
    agt_spool_destroy(sp);
}

/* Written through: every entry has its file as soon as it is pushed, also
 * those memory still holds, and an acknowledgement removes it. */
static void test_write_through_files(void **state)
{
    (void)state;
    struct agt_spool_opts o = {.sz = sizeof(o), .mem_bytes = 100, .dir = tmpdir};
    struct agt_spool_stats st;
    struct agt_spool *sp = filled(&o, 10, 50, &st);
    assert_int_equal(st.disk_bytes, 10 * 50);
    assert_true(st.mem_bytes <= 100);
    assert_int_equal(count_files(), 10);
    assert_int_equal(agt_spool_ack(sp, 4), 4);
    assert_int_equal(count_files(), 6);
    agt_spool_stats(sp, &st);
    assert_int_equal(st.disk_bytes, 6 * 50);
    drain_check(sp, 5, 6, 50);
    assert_int_equal(count_files(), 0);
    agt_spool_destroy(sp);
}

static void copy_file(const char *from, const char *to)
{
    char buf[256];
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    assert_non_null(in);
    assert_non_null(out);
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
        assert_int_equal(fwrite(buf, 1, n, out), n);
    fclose(in);
    fclose(out);
}

/* A crash: the files left behind hold every entry, those in memory too (no
 * spill happened), and the next agent with the directory replays them in
 * order; a file cut off while being written is removed, never sent. */
static void test_write_through_crash_replays_all(void **state)
{
    (void)state;
    char saved[96], from[160], to[200];
    snprintf(saved, sizeof(saved), "%s-saved", tmpdir);
    assert_int_equal(mkdir(saved, 0700), 0);
    struct agt_spool *sp;
    struct agt_spool_opts o = {.sz = sizeof(o), .dir = tmpdir};
    assert_int_equal(agt_spool_create(&o, &sp), 0);
    push_n(sp, 1, 6, 30);
    /* what a killed agent leaves: its files, copied aside before the orderly
     * destroy below removes them */
    for (int seq = 1; seq <= 6; seq++) {
        snprintf(from, sizeof(from), "%s/%020d.sum", tmpdir, seq);
        snprintf(to, sizeof(to), "%s/%020d.sum", saved, seq);
        copy_file(from, to);
    }
    agt_spool_destroy(sp);
    assert_int_equal(count_files(), 0);
    snprintf(to, sizeof(to), "%s/%020d.sum.part", saved, 7);
    FILE *f = fopen(to, "w");
    assert_non_null(f);
    fputs("torn", f);
    fclose(f);

    o.dir = saved;
    assert_int_equal(agt_spool_create(&o, &sp), 0);
    struct agt_spool_stats st;
    agt_spool_stats(sp, &st);
    assert_int_equal(st.replay_left, 6);
    assert_int_equal(st.stale, 0);
    assert_int_equal(access(to, F_OK), -1);
    const void *buf;
    size_t len;
    uint8_t ref[30];
    for (uint64_t seq = 1; seq <= 6; seq++) {
        assert_int_equal(agt_spool_replay_head(sp, &buf, &len), 0);
        assert_int_equal(len, 30);
        payload(seq, ref, 30);
        assert_memory_equal(buf, ref, 30);
        agt_spool_replay_pop(sp, 1);
    }
    assert_int_equal(agt_spool_replay_head(sp, &buf, &len), -ENOENT);
    agt_spool_stats(sp, &st);
    assert_int_equal(st.replayed, 6);
    agt_spool_destroy(sp);
    snprintf(to, sizeof(to), "%s/lock", saved);
    assert_int_equal(unlink(to), 0);
    assert_int_equal(rmdir(saved), 0); /* nothing else left in it */
}

/* A second spool on a directory in use is refused: it would take the live
 * one's files for a crashed agent's. */
static void test_second_agent_refused(void **state)
{
    (void)state;
    struct agt_spool *sp, *sp2 = NULL;
    struct agt_spool_opts o = {.sz = sizeof(o), .dir = tmpdir};
    assert_int_equal(agt_spool_create(&o, &sp), 0);
    push_n(sp, 1, 3, 20);
    assert_int_equal(agt_spool_create(&o, &sp2), -EBUSY);
    assert_null(sp2);
    assert_int_equal(count_files(), 3); /* the first one's files untouched */
    agt_spool_destroy(sp);
    assert_int_equal(agt_spool_create(&o, &sp2), 0); /* free again */
    agt_spool_destroy(sp2);
}

/* Past the disk bound, writing through stops without dropping anything:
 * newer entries stay in memory only until acknowledgements make room. */
static void test_write_through_disk_full(void **state)
{
    (void)state;
    struct agt_spool_opts o = {
        .sz = sizeof(o), .mem_bytes = 1 << 20, .dir = tmpdir, .disk_bytes = 200};
    struct agt_spool_stats st;
    struct agt_spool *sp = filled(&o, 10, 50, &st);
    assert_int_equal(st.disk_bytes, 200);
    assert_int_equal(count_files(), 4);
    assert_int_equal(agt_spool_ack(sp, 4), 4);
    assert_int_equal(count_files(), 0);
    push_n(sp, 11, 2, 50); /* room again */
    assert_int_equal(count_files(), 2);
    drain_check(sp, 5, 8, 50);
    assert_int_equal(count_files(), 0);
    agt_spool_destroy(sp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_and_cumulative_ack),
        cmocka_unit_test(test_rejects_non_increasing_seq),
        cmocka_unit_test(test_memory_overflow_counts_lost),
        cmocka_unit_test_setup_teardown(test_disk_spill_keeps_everything_in_order, setup_dir,
                                        teardown_dir),
        cmocka_unit_test_setup_teardown(test_disk_overflow_counts_lost, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_unreadable_file_is_lost_not_skipped_silently,
                                        setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_stale_files_replayed, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_replay_order_across_crashes, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_replay_bounded_and_validated, setup_dir, teardown_dir),
        cmocka_unit_test(test_pinned_head_survives_overflow),
        cmocka_unit_test_setup_teardown(test_pinned_head_on_disk, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_write_through_files, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_write_through_crash_replays_all, setup_dir,
                                        teardown_dir),
        cmocka_unit_test_setup_teardown(test_write_through_disk_full, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_second_agent_refused, setup_dir, teardown_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * Tests of communication generation ids: encoding limits, text round trips,
 * agreement between producer and consumer ranks that derive ids on their own
 * from a static and from a dynamic task graph, and uniqueness over a long run.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mkscope/commid.h"

/* splitmix64: a deterministic "data" source both sides of a transfer share */
static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

struct idvec {
    uint64_t *v;
    size_t n, cap;
};

static void push(struct idvec *s, uint64_t id)
{
    assert_int_not_equal(id, 0); /* every transfer in these graphs fits */
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 1024;
        s->v = realloc(s->v, s->cap * sizeof(*s->v));
        assert_non_null(s->v);
    }
    s->v[s->n++] = id;
}

/* Both sides must produce the same multiset, and no id twice. */
static void assert_same_unique(struct idvec *a, struct idvec *b)
{
    assert_int_equal(a->n, b->n);
    qsort(a->v, a->n, sizeof(uint64_t), cmp_u64);
    qsort(b->v, b->n, sizeof(uint64_t), cmp_u64);
    for (size_t i = 0; i < a->n; i++) {
        assert_int_equal(a->v[i], b->v[i]);
        if (i)
            assert_true(a->v[i] != a->v[i - 1]);
    }
    free(a->v);
    free(b->v);
}

static void test_format_example(void **state)
{
    (void)state;
    char buf[MKS_COMMID_TEXT_MAX];
    uint64_t id = mks_commid_for_transfer(3, 1, 2, 37, 4, 12);

    assert_int_not_equal(id, 0);
    assert_true(mks_commid_format(id, buf, sizeof(buf)) > 0);
    assert_string_equal(buf, "comm 3 step 37 op 4 seq 12 from rank 1 to rank 2");
    assert_int_equal(mks_commid_kind(id), MKS_COMMID_STEP);
    assert_int_equal(mks_commid_channel(id), 3);
    assert_int_equal(mks_commid_src_rank(id), 1);
    assert_int_equal(mks_commid_dst_rank(id), 2);
    assert_int_equal(mks_commid_step(id), 37);
    assert_int_equal(mks_commid_op(id), 4);
    assert_int_equal(mks_commid_seq(id), 12);

    id = mks_commid_for_nccl(0x1234567890abcdefull, MKS_NCCL_ALLREDUCE, 12);
    assert_true(mks_commid_format(id, buf, sizeof(buf)) > 0);
    char want[64];
    snprintf(want, sizeof(want), "nccl AllReduce comm 0x%06x seq 12",
             mks_commid_nccl_comm_fold(0x1234567890abcdefull));
    assert_string_equal(buf, want);

    /* truncation reports the full length, like snprintf */
    char small[8];
    int n = mks_commid_format(mks_commid_for_transfer(3, 1, 2, 37, 4, 12), small, sizeof(small));
    assert_int_equal(n, (int)strlen("comm 3 step 37 op 4 seq 12 from rank 1 to rank 2"));
    assert_string_equal(small, "comm 3 ");
    assert_int_equal(mks_commid_format(0, buf, sizeof(buf)), -EINVAL);
}

static void test_limits(void **state)
{
    (void)state;
    struct mks_commid_fields f = {.kind = MKS_COMMID_STEP, .channel = 63, .src_rank = 255,
                                  .dst_rank = 255, .step = MKS_COMMID_STEP_WRAP - 1,
                                  .op = 4095, .seq = 255};
    uint64_t id = 0, id2;
    struct mks_commid_fields g;

    assert_int_equal(mks_commid_make(&f, &id), 0);
    assert_int_equal(mks_commid_decode(id, &g), 0);
    assert_memory_equal(&f, &g, sizeof(f));

    struct mks_commid_fields bad[] = {
        {.kind = MKS_COMMID_STEP, .channel = 64},  {.kind = MKS_COMMID_STEP, .src_rank = 256},
        {.kind = MKS_COMMID_STEP, .dst_rank = 256}, {.kind = MKS_COMMID_REQ, .op = 4096},
        {.kind = MKS_COMMID_REQ, .seq = 256},       {.kind = MKS_COMMID_NCCL, .channel = 11},
        {.kind = MKS_COMMID_NCCL, .step = 1u << 22}, {.kind = MKS_COMMID_NCCL, .src_rank = 1},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        id2 = 42;
        assert_int_equal(mks_commid_make(&bad[i], &id2), -ERANGE);
        assert_int_equal(id2, 42); /* not written on error */
    }
    f.kind = MKS_COMMID_NONE;
    assert_int_equal(mks_commid_make(&f, &id2), -EINVAL);
    assert_int_equal(mks_commid_for_transfer(64, 0, 0, 0, 0, 0), 0);
    assert_int_equal(mks_commid_for_nccl(1, MKS_NCCL_FUNC_COUNT, 0), 0);

    /* step wraps, documented: ids 2^20 steps apart are equal, 1 apart are not */
    assert_int_equal(mks_commid_for_transfer(1, 2, 3, 5, 6, 7),
                     mks_commid_for_transfer(1, 2, 3, 5 + MKS_COMMID_STEP_WRAP, 6, 7));
    assert_true(mks_commid_for_transfer(1, 2, 3, 5, 6, 7) !=
                mks_commid_for_transfer(1, 2, 3, 6, 6, 7));
    /* kinds never alias: the same fields as STEP and REQ differ */
    assert_true(mks_commid_for_transfer(1, 2, 3, 5, 6, 7) != mks_commid_for_request(1, 2, 3, 5, 6, 7));
    /* no valid id is 0, and id 0 does not decode */
    assert_int_not_equal(mks_commid_for_transfer(0, 0, 0, 0, 0, 0), 0);
    assert_int_equal(mks_commid_decode(0, &g), -EINVAL);
    /* NCCL function nibble 11..15 is not an id */
    assert_int_equal(mks_commid_decode((3ull << 62) | (12ull << 58), &g), -EINVAL);
}

static void test_parse(void **state)
{
    (void)state;
    uint64_t id;
    char buf[MKS_COMMID_TEXT_MAX];

    assert_int_equal(mks_commid_parse("comm 3 step 37 op 4 seq 12 from rank 1 to rank 2", &id), 0);
    assert_int_equal(id, mks_commid_for_transfer(3, 1, 2, 37, 4, 12));
    assert_int_equal(mks_commid_parse("  comm 3  req 9 op 0 seq 0 from rank 0 to  rank 5 ", &id), 0);
    assert_int_equal(id, mks_commid_for_request(3, 0, 5, 9, 0, 0));
    assert_int_equal(mks_commid_parse("nccl AllGather comm 0x00ab12 seq 77", &id), 0);
    assert_int_equal(mks_commid_kind(id), MKS_COMMID_NCCL);
    assert_int_equal(mks_commid_channel(id), MKS_NCCL_ALLGATHER);
    assert_int_equal(mks_commid_step(id), 0xab12);
    assert_int_equal(mks_commid_seq(id), 77);

    const char *bad[] = {
        "", "comm", "comm 3", "comm 3 step 37 op 4 seq 12 from rank 1",
        "comm 3 step 37 op 4 seq 12 from rank 1 to rank 2 extra",
        "comm -3 step 37 op 4 seq 12 from rank 1 to rank 2",
        "comm 3 stepx 37 op 4 seq 12 from rank 1 to rank 2",
        "comm 3x step 37 op 4 seq 12 from rank 1 to rank 2",
        "nccl AllReduce comm 12 seq 1", "nccl AllReduce comm 0x0x12 seq 1", "nccl Bogus comm 0x1 seq 1", "nccl AllReduce comm 0x seq 1",
        "comm 3 step 37 op 4 seq 12 from rank 1 to rank 99999999999999999999999",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        id = 42;
        assert_true(mks_commid_parse(bad[i], &id) < 0);
        assert_int_equal(id, 42);
    }
    assert_int_equal(mks_commid_parse("comm 64 step 0 op 0 seq 0 from rank 0 to rank 0", &id), -ERANGE);
    assert_int_equal(mks_commid_parse("comm 1 step 1048576 op 0 seq 0 from rank 0 to rank 0", &id),
                     -ERANGE);
    assert_int_equal(mks_commid_parse("nccl AllReduce comm 0x400000 seq 1", &id), -ERANGE);

    /* format -> parse round trip over random ids of every kind */
    for (uint64_t i = 0; i < 200000; i++) {
        uint64_t r = mix(i), want, got;
        switch (i % 3) {
        case 0:
            want = mks_commid_for_transfer(r % 64, (r >> 6) % 256, (r >> 14) % 256, (uint32_t)(r >> 22),
                                           (r >> 42) % 4096, (r >> 54) % 256);
            break;
        case 1:
            want = mks_commid_for_request(r % 64, (r >> 6) % 256, (r >> 14) % 256, r >> 22,
                                          (r >> 42) % 4096, (r >> 54) % 256);
            break;
        default:
            want = mks_commid_for_nccl(r, (uint32_t)(i % MKS_NCCL_FUNC_COUNT), mix(r));
        }
        int n = mks_commid_format(want, buf, sizeof(buf));
        assert_true(n > 0 && (size_t)n < sizeof(buf));
        assert_int_equal(mks_commid_parse(buf, &got), 0);
        assert_int_equal(got, want);
    }
}

/*
 * Static graph: tensor-parallel layers, each with two all-to-all exchanges
 * (attention output, MLP output) split into a fixed number of chunks.  Each
 * rank derives the ids of what it sends and, separately, of what it waits
 * for, in its own loop order; the union of all sends must equal the union of
 * all waits, id for id.
 */
enum { S_RANKS = 8, S_LAYERS = 24, S_OPS_PER_LAYER = 2, S_CHUNKS = 4, S_STEPS = 40, CH_TP = 1 };

static void test_static_graph_agrees(void **state)
{
    (void)state;
    struct idvec sends = {0}, waits = {0};

    for (uint32_t step = 0; step < S_STEPS; step++) {
        for (uint32_t me = 0; me < S_RANKS; me++) {
            /* producer view: by layer, then peer, then chunk */
            for (uint32_t l = 0; l < S_LAYERS; l++)
                for (uint32_t o = 0; o < S_OPS_PER_LAYER; o++)
                    for (uint32_t dst = 0; dst < S_RANKS; dst++)
                        for (uint32_t c = 0; c < S_CHUNKS && dst != me; c++)
                            push(&sends, mks_commid_for_transfer(CH_TP, me, dst, step,
                                                                 l * S_OPS_PER_LAYER + o, c));
            /* consumer view: by peer first, chunks in reverse, op index as
             * the flattened operator list counts it */
            for (uint32_t src = 0; src < S_RANKS; src++) {
                if (src == me)
                    continue;
                uint32_t opidx = 0;
                for (uint32_t l = 0; l < S_LAYERS; l++)
                    for (uint32_t o = 0; o < S_OPS_PER_LAYER; o++, opidx++)
                        for (uint32_t c = S_CHUNKS; c-- > 0;)
                            push(&waits, mks_commid_for_transfer(CH_TP, src, me, step, opidx, c));
            }
        }
    }
    assert_int_equal(sends.n, (size_t)S_STEPS * S_RANKS * (S_RANKS - 1) * S_LAYERS * S_OPS_PER_LAYER *
                                  S_CHUNKS);
    assert_same_unique(&sends, &waits);
}

/*
 * Dynamic graph 1, MoE expert dispatch: each step and MoE layer, the router
 * decides from data how many tokens every rank sends to every expert; tasks
 * exist only for non-empty (src, expert) pairs and their number of chunks
 * depends on the count.  The consumer learns the counts from the count
 * exchange that precedes the dispatch (here: the same table), never from
 * arrival order.  seq = local expert * chunks-per-expert-max + chunk.
 */
enum { M_RANKS = 8, M_EXPERTS_PER_RANK = 4, M_LAYERS = 16, M_STEPS = 50, M_CHUNK_TOKENS = 32,
       M_SEQ_PER_EXPERT = MKS_COMMID_SEQS / M_EXPERTS_PER_RANK, CH_DISPATCH = 2, CH_COMBINE = 3 };

static uint32_t routed_tokens(uint32_t step, uint32_t layer, uint32_t src, uint32_t expert)
{
    uint64_t r = mix(((uint64_t)step << 40) ^ ((uint64_t)layer << 24) ^ (src << 12) ^ expert);
    /* skewed: a quarter of (src, expert) pairs get nothing, some get many */
    if (r % 4 == 0)
        return 0;
    return (uint32_t)((r >> 8) % (M_CHUNK_TOKENS * M_SEQ_PER_EXPERT)) + 1;
}

static void test_dynamic_moe_agrees(void **state)
{
    (void)state;
    struct idvec sends = {0}, waits = {0};
    static uint32_t counts[M_RANKS][M_RANKS * M_EXPERTS_PER_RANK];
    size_t steps_differ = 0, prev_n = 0;

    for (uint32_t step = 0; step < M_STEPS; step++) {
        for (uint32_t layer = 0; layer < M_LAYERS; layer++) {
            for (uint32_t s = 0; s < M_RANKS; s++)
                for (uint32_t e = 0; e < M_RANKS * M_EXPERTS_PER_RANK; e++)
                    counts[s][e] = routed_tokens(step, layer, s, e);
            uint32_t op_dispatch = layer * 2, op_combine = layer * 2 + 1;
            /* producer: walks its tokens' chunk list expert by expert */
            for (uint32_t src = 0; src < M_RANKS; src++)
                for (uint32_t e = 0; e < M_RANKS * M_EXPERTS_PER_RANK; e++) {
                    uint32_t dst = e / M_EXPERTS_PER_RANK, le = e % M_EXPERTS_PER_RANK;
                    uint32_t chunks = (counts[src][e] + M_CHUNK_TOKENS - 1) / M_CHUNK_TOKENS;
                    for (uint32_t c = 0; c < chunks; c++) {
                        push(&sends, mks_commid_for_transfer(CH_DISPATCH, src, dst, step, op_dispatch,
                                                             le * M_SEQ_PER_EXPERT + c));
                        /* combine sends the expert output back: producer is dst */
                        push(&sends, mks_commid_for_transfer(CH_COMBINE, dst, src, step, op_combine,
                                                             le * M_SEQ_PER_EXPERT + c));
                    }
                }
            /* consumer: each rank from the count table, by source rank then
             * by its local experts; combine waits by its own tokens */
            for (uint32_t me = 0; me < M_RANKS; me++) {
                for (uint32_t src = M_RANKS; src-- > 0;)
                    for (uint32_t le = 0; le < M_EXPERTS_PER_RANK; le++) {
                        uint32_t n = counts[src][me * M_EXPERTS_PER_RANK + le];
                        for (uint32_t c = 0; c * M_CHUNK_TOKENS < n; c++)
                            push(&waits, mks_commid_for_transfer(CH_DISPATCH, src, me, step,
                                                                 op_dispatch, le * M_SEQ_PER_EXPERT + c));
                    }
                for (uint32_t e = M_RANKS * M_EXPERTS_PER_RANK; e-- > 0;) {
                    uint32_t n = counts[me][e];
                    for (uint32_t c = 0; c * M_CHUNK_TOKENS < n; c++)
                        push(&waits, mks_commid_for_transfer(CH_COMBINE, e / M_EXPERTS_PER_RANK, me, step,
                                                             op_combine,
                                                             (e % M_EXPERTS_PER_RANK) * M_SEQ_PER_EXPERT + c));
                }
            }
        }
        /* the graph really changes from step to step */
        steps_differ += sends.n - prev_n != 0 && step > 0;
        prev_n = sends.n;
    }
    assert_true(steps_differ > 0);
    assert_same_unique(&sends, &waits);
}

/*
 * Dynamic graph 2, requests joining and leaving: a batch of 64 slots; a
 * request joins at a step decided by data, occupies a free slot for a
 * data-dependent number of steps and leaves.  On joining, its KV cache moves
 * from the prefill rank to its decode rank (a REQ transfer keyed by the
 * request generation); every step it is active, its decode rank sends the
 * step's logits to rank 0 (a STEP transfer, seq = slot).  Every rank replays
 * the scheduler's admission decisions, which all ranks receive, to derive ids.
 */
enum { R_RANKS = 4, R_SLOTS = 64, R_STEPS = 3000, CH_KV = 4, CH_LOGITS = 5 };

struct slot {
    uint64_t req_gen; /* 0: free */
    uint32_t left;
};

static void replay_requests(int producer_view, uint32_t me, struct idvec *out)
{
    struct slot slots[R_SLOTS] = {{0}};
    uint64_t next_gen = 1;

    for (uint32_t step = 0; step < R_STEPS; step++) {
        for (uint32_t s = 0; s < R_SLOTS; s++) {
            if (slots[s].req_gen && --slots[s].left == 0)
                slots[s].req_gen = 0; /* leaves */
            uint64_t r = mix(step * 131u + s);
            if (!slots[s].req_gen && r % 5 == 0) { /* joins */
                slots[s].req_gen = next_gen++;
                slots[s].left = 1 + (uint32_t)((r >> 16) % 200);
                uint32_t prefill = (uint32_t)(slots[s].req_gen % R_RANKS);
                uint32_t decode = s % R_RANKS;
                if (prefill != decode && (producer_view ? prefill == me : decode == me))
                    push(out, mks_commid_for_request(CH_KV, prefill, decode, slots[s].req_gen, 0, 0));
            }
            uint32_t decode = s % R_RANKS;
            if (slots[s].req_gen && decode != 0 && (producer_view ? decode == me : me == 0))
                push(out, mks_commid_for_transfer(CH_LOGITS, decode, 0, step, 0, s));
        }
    }
}

static void test_dynamic_requests_agree(void **state)
{
    (void)state;
    struct idvec sends = {0}, waits = {0};

    for (uint32_t me = 0; me < R_RANKS; me++) {
        replay_requests(1, me, &sends);
        replay_requests(0, me, &waits);
    }
    assert_true(sends.n > 1000);
    assert_same_unique(&sends, &waits);
}

/* A long run: steps x operators x channels x (src, dst) pairs, over 10^7
 * ids, all distinct, each decoding to the fields it was made from. */
static void test_no_collisions_long_run(void **state)
{
    (void)state;
    enum { STEPS = 1000, OPS = 50, CHANNELS = 4, RANKS = 8 };
    size_t n = (size_t)STEPS * OPS * CHANNELS * RANKS * (RANKS - 1), k = 0;
    uint64_t *ids = malloc(n * sizeof(*ids));
    struct mks_commid_fields f;

    assert_non_null(ids);
    /* steps far into the run, not only the first ones */
    for (uint32_t step = 500000; step < 500000 + STEPS; step++)
        for (uint32_t op = 0; op < OPS; op++)
            for (uint32_t ch = 0; ch < CHANNELS; ch++)
                for (uint32_t src = 0; src < RANKS; src++)
                    for (uint32_t dst = 0; dst < RANKS; dst++) {
                        if (src == dst)
                            continue;
                        uint32_t seq = (step * 7u + op) % MKS_COMMID_SEQS;
                        uint64_t id = mks_commid_for_transfer(ch, src, dst, step, op, seq);
                        if ((k & 1023) == 0) {
                            assert_int_equal(mks_commid_decode(id, &f), 0);
                            assert_int_equal(f.step, step);
                            assert_int_equal(f.op, op);
                            assert_int_equal(f.seq, seq);
                            assert_int_equal(f.src_rank, src);
                            assert_int_equal(f.dst_rank, dst);
                            assert_int_equal(f.channel, ch);
                        }
                        ids[k++] = id;
                    }
    assert_int_equal(k, n);
    assert_true(n >= 10000000);
    qsort(ids, n, sizeof(*ids), cmp_u64);
    size_t dups = 0;
    for (size_t i = 1; i < n; i++)
        dups += ids[i] == ids[i - 1];
    assert_int_equal(dups, 0);
    free(ids);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format_example),        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_parse),                 cmocka_unit_test(test_static_graph_agrees),
        cmocka_unit_test(test_dynamic_moe_agrees),    cmocka_unit_test(test_dynamic_requests_agree),
        cmocka_unit_test(test_no_collisions_long_run),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * Verifier acceptances: hand-written programs with their exact worst-case
 * cost, programs that are only safe through what the verifier tracks (null
 * checks and bounds through copies, masks, spills), path pruning on a chain
 * of branches, and the clang-compiled standard monitors of agent/monitors.
 * argv[1] is the directory of the compiled BPF objects.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mkscope/loader.h"
#include "mkscope/verifier.h"
#include "mkscope/vm.h"
#include "verifier_insn.h"

#define ADD MKS_BPF_ADD

static const char *progdir = ".";

static int verify(const struct mks_insn *p, uint32_t n, uint32_t type, int32_t hook, struct mks_verify_result *res,
                  char *log, size_t len)
{
    struct mks_verify_opts o = {
        .sz = sizeof(o),
        .prog_type = type,
        .abi_version = 1,
        .hook = hook,
        .maps = test_maps,
        .n_maps = M_COUNT,
    };
    int rc = mks_verify(p, n, &o, res, log, len);
    if (rc)
        print_error("rejected: %s\n", log);
    return rc;
}

#define ACCEPT(prog, type, hook, res)                                                              \
    do {                                                                                           \
        char log_[512];                                                                            \
        assert_int_equal(verify(prog, sizeof(prog) / sizeof(prog[0]), type, hook, res, log_,       \
                                sizeof(log_)),                                                     \
                         0);                                                                       \
    } while (0)

static void test_minimal(void **state)
{
    (void)state;
    struct mks_insn p[] = {MOV_IMM(0, 0), EXIT()};
    struct mks_verify_result r = {0};
    ACCEPT(p, MKS_PROG_OBSERVE, MKS_EV_TASK_END, &r);
    assert_int_equal(r.cost, 2);
    assert_int_equal(r.n_insns, 2);
}

/* lookup, null check, atomic add: 11 slots, ld_imm64 executes as one. */
static void test_count_cost(void **state)
{
    (void)state;
    struct mks_insn p[] = {LOOKUP_ARR0,   JMP_IMM(MKS_BPF_JEQ, 0, 0, 2), MOV_IMM(1, 1), ATOMIC(DW, 0, 1, 0, ADD),
                           MOV_IMM(0, 0), EXIT()};
    struct mks_verify_result r = {0};
    ACCEPT(p, MKS_PROG_OBSERVE, MKS_EV_TASK_END, &r);
    assert_int_equal(r.n_insns, 11);
    assert_int_equal(r.cost, 10);
}

/* The longer side of a diamond sets the cost. */
static void test_diamond_cost(void **state)
{
    (void)state;
    struct mks_insn p[] = {LDX(W, 2, 1, CTX_STEP), JMP_IMM(MKS_BPF_JEQ, 2, 0, 3), MOV_IMM(0, 1), MOV_IMM(0, 2), JA(1),
                           MOV_IMM(0, 3), EXIT()};
    struct mks_verify_result r = {0};
    ACCEPT(p, MKS_PROG_OBSERVE, MKS_EV_TASK_END, &r);
    assert_int_equal(r.cost, 6);
}

/* Two calls of a 3-instruction function: 4 + 2 * 3. */
static void test_local_call_cost(void **state)
{
    (void)state;
    struct mks_insn p[] = {CALL_LOCAL(3), CALL_LOCAL(2), MOV_IMM(0, 0), EXIT(),
                           MOV_IMM(0, 1), ALU64_IMM(ADD, 0, 1), EXIT()};
    struct mks_verify_result r = {0};
    ACCEPT(p, MKS_PROG_OBSERVE, MKS_EV_TASK_END, &r);
    assert_int_equal(r.cost, 10);
}

static void test_ldimm64_counts_once(void **state)
{
    (void)state;
    struct mks_insn p[] = {LD64(0, 1, 2), EXIT()};
    struct mks_verify_result r = {0};
    ACCEPT(p, MKS_PROG_OBSERVE, MKS_EV_TASK_END, &r);
    assert_int_equal(r.n_insns, 3);
    assert_int_equal(r.cost, 2);
}

/* A null check on r0 also clears the copy in r6. */
static void test_null_check_through_copy(void **state)
{
    (void)state;
    struct mks_insn p[] = {LOOKUP_ARR0, MOV_REG(6, 0), JMP_IMM(MKS_BPF_JEQ, 0, 0, 2), LDX(DW, 0, 6, 8), EXIT(),
                           MOV_IMM(0, 0), EXIT()};
    ACCEPT(p, MKS_PROG_OBSERVE, MKS_EV_TASK_END, NULL);
}

/* A bounds check on a copy (r3) bounds the original (r2). */
static void test_bounds_through_copy(void **state)
{
    (void)state;
    struct mks_insn p[] = {MOV_REG(6, 1),
                           LOOKUP_ARR0,
                           JMP_IMM(MKS_BPF_JEQ, 0, 0, 5),
                           LDX(W, 2, 6, CTX_TASK_CLASS),
                           MOV_REG(3, 2),
                           JMP_IMM(MKS_BPF_JGT, 3, 8, 2),
                           ALU64_REG(ADD, 0, 2),
                           LDX(DW, 1, 0, 0),
                           MOV_IMM(0, 0),
                           EXIT()};
    ACCEPT(p, MKS_PROG_OBSERVE, MKS_EV_TASK_END, NULL);
}

/* (class & 1) << 3 indexes one of the two u64 of a 16-byte value. */
static void test_masked_index(void **state)
{
    (void)state;
    struct mks_insn p[] = {MOV_REG(6, 1),
                           LOOKUP_ARR0,
                           JMP_IMM(MKS_BPF_JEQ, 0, 0, 5),
                           LDX(W, 2, 6, CTX_TASK_CLASS),
                           ALU64_IMM(MKS_BPF_AND, 2, 1),
                           ALU64_IMM(MKS_BPF_LSH, 2, 3),
                           ALU64_REG(ADD, 0, 2),
                           LDX(DW, 1, 0, 0),
                           MOV_IMM(0, 0),
                           EXIT()};
    ACCEPT(p, MKS_PROG_OBSERVE, MKS_EV_TASK_END, NULL);
}

/* 32-bit compares bound values that fit in 32 bits. */
static void test_jmp32_bounds(void **state)
{
    (void)state;
    struct mks_insn p[] = {MOV_REG(6, 1),
                           LOOKUP_ARR0,
                           JMP_IMM(MKS_BPF_JEQ, 0, 0, 4),
                           LDX(W, 2, 6, CTX_TASK_CLASS),
                           JMP32_IMM(MKS_BPF_JGT, 2, 15, 2),
                           ALU64_REG(ADD, 0, 2),
                           LDX(B, 1, 0, 0),
                           MOV_IMM(0, 0),
                           EXIT()};
    ACCEPT(p, MKS_PROG_OBSERVE, MKS_EV_TASK_END, NULL);
}

static void test_spill_restore_pointer(void **state)
{
    (void)state;
    struct mks_insn p[] = {STX(DW, 10, 1, -8), MOV_IMM(1, 0), LDX(DW, 2, 10, -8), LDX(W, 0, 2, CTX_STEP), EXIT()};
    ACCEPT(p, MKS_PROG_OBSERVE, MKS_EV_TASK_END, NULL);
}

/* CONTROL: a masked hint, and a hint read from a map. */
static void test_control(void **state)
{
    (void)state;
    struct mks_insn p1[] = {LDX(W, 0, 1, CTX_STEP), ALU64_IMM(MKS_BPF_AND, 0, 15), EXIT()};
    struct mks_verify_result r = {0};
    ACCEPT(p1, MKS_PROG_CONTROL, MKS_EV_TASK_READY, &r);
    assert_int_equal(r.cost, 3);
    struct mks_insn p2[] = {LOOKUP_ARR0, JMP_IMM(MKS_BPF_JEQ, 0, 0, 3), LDX(DW, 0, 0, 0),
                            ALU64_IMM(MKS_BPF_AND, 0, 7), EXIT(), EXIT()};
    ACCEPT(p2, MKS_PROG_CONTROL, MKS_EV_TASK_ASSIGN, NULL);
    /* hook -1: the caller has not bound it yet */
    ACCEPT(p1, MKS_PROG_CONTROL, -1, NULL);
}

/* Every helper with well-typed arguments. */
static void test_observe_helpers(void **state)
{
    (void)state;
    struct mks_insn p[] = {
        MOV_REG(6, 1),
        CALL(MKS_HELPER_TIME_NS), CALL(MKS_HELPER_WORKER_ID), CALL(MKS_HELPER_SM_ID), CALL(MKS_HELPER_RANK),
        /* hist_add(hist, &(u32)1, t_now) */
        ST(W, 10, -4, 1), LD_MAP(1, M_HIST), MOV_REG(2, 10), ALU64_IMM(ADD, 2, -4), LDX(DW, 3, 6, CTX_T_NOW),
        CALL(MKS_HELPER_HIST_ADD),
        /* ringbuf_output(ring, ctx, 64, 0) */
        LD_MAP(1, M_RING), MOV_REG(2, 6), MOV_IMM(3, 64), MOV_IMM(4, 0), CALL(MKS_HELPER_RINGBUF_OUTPUT),
        /* update(hash, &k, &v, 0); delete(hash, &k) */
        ST(DW, 10, -16, 7), ST(DW, 10, -24, 9), LD_MAP(1, M_HASH), MOV_REG(2, 10), ALU64_IMM(ADD, 2, -16),
        MOV_REG(3, 10), ALU64_IMM(ADD, 3, -24), MOV_IMM(4, 0), CALL(MKS_HELPER_MAP_UPDATE),
        LD_MAP(1, M_HASH), MOV_REG(2, 10), ALU64_IMM(ADD, 2, -16), CALL(MKS_HELPER_MAP_DELETE),
        /* .data is writable through its direct address */
        LD_MAPVAL(1, M_DATA, 8), ST(DW, 1, 0, 5),
        MOV_IMM(0, 0), EXIT()};
    ACCEPT(p, MKS_PROG_OBSERVE, MKS_EV_TASK_END, NULL);
}

/* 40 branches that each may bump a counter: 2^40 paths without pruning. */
static void test_branch_chain_pruned(void **state)
{
    (void)state;
    enum { K = 40 };
    struct mks_insn p[2 + 3 * K + 2];
    uint32_t n = 0;
    p[n++] = (struct mks_insn)MOV_REG(6, 1);
    p[n++] = (struct mks_insn)MOV_IMM(7, 0);
    for (int k = 0; k < K; k++) {
        p[n++] = (struct mks_insn)LDX(W, 2, 6, CTX_STEP);
        p[n++] = (struct mks_insn)JMP_IMM(MKS_BPF_JEQ, 2, k, 1);
        p[n++] = (struct mks_insn)ALU64_IMM(ADD, 7, 1);
    }
    p[n++] = (struct mks_insn)MOV_REG(0, 7);
    p[n++] = (struct mks_insn)EXIT();
    struct mks_verify_result r = {0};
    char log[256];
    assert_int_equal(verify(p, n, MKS_PROG_OBSERVE, MKS_EV_TASK_END, &r, log, sizeof(log)), 0);
    assert_int_equal(r.cost, n);
    assert_true(r.states < 1000);
}

/* Loops run iteration by iteration; the cost is the longest path. */
static void test_loops(void **state)
{
    (void)state;
    struct mks_verify_result r = {0};
    /* r0 counts to 10: 1 + 10 * 2 + 1 */
    struct mks_insn count10[] = {MOV_IMM(0, 0), ALU64_IMM(ADD, 0, 1), JMP_IMM(MKS_BPF_JLT, 0, 10, -2), EXIT()};
    ACCEPT(count10, MKS_PROG_OBSERVE, MKS_EV_TASK_END, &r);
    assert_int_equal(r.cost, 22);
    /* bound from the context, masked to 15: at most 15 iterations */
    struct mks_insn masked[] = {LDX(W, 2, 1, CTX_STEP),         ALU64_IMM(MKS_BPF_AND, 2, 15), MOV_IMM(3, 0),
                                ALU64_IMM(ADD, 3, 1),           JMP_REG(MKS_BPF_JLT, 3, 2, -2), MOV_IMM(0, 0),
                                EXIT()};
    ACCEPT(masked, MKS_PROG_OBSERVE, MKS_EV_TASK_END, &r);
    assert_int_equal(r.cost, 3 + 15 * 2 + 2);
    /* 4 x 3 nested: 1 + 4 * (1 + 3 * 2 + 2) + 2 */
    struct mks_insn nested[] = {MOV_IMM(6, 0),
                                MOV_IMM(7, 0),
                                ALU64_IMM(ADD, 7, 1),
                                JMP_IMM(MKS_BPF_JLT, 7, 3, -2),
                                ALU64_IMM(ADD, 6, 1),
                                JMP_IMM(MKS_BPF_JLT, 6, 4, -5),
                                MOV_IMM(0, 0),
                                EXIT()};
    ACCEPT(nested, MKS_PROG_OBSERVE, MKS_EV_TASK_END, &r);
    assert_int_equal(r.cost, 1 + 4 * (1 + 3 * 2 + 2) + 2);
    /* a loop indexing a map value, bounded by the value's size */
    struct mks_insn sum[] = {LOOKUP_ARR0,
                             JMP_IMM(MKS_BPF_JEQ, 0, 0, 8),
                             MOV_IMM(2, 0),
                             MOV_IMM(3, 0),
                             MOV_REG(4, 0),
                             ALU64_REG(ADD, 4, 2),
                             LDX(B, 5, 4, 0),
                             ALU64_REG(ADD, 3, 5),
                             ALU64_IMM(ADD, 2, 1),
                             JMP_IMM(MKS_BPF_JLT, 2, 16, -6),
                             MOV_IMM(0, 0),
                             EXIT()};
    ACCEPT(sum, MKS_PROG_OBSERVE, MKS_EV_TASK_END, &r);
    assert_int_equal(r.cost, 5 + 1 + 2 + 16 * 6 + 2);
    /* the same loop one byte too far is refused */
    sum[14].imm = 17;
    char log[256];
    assert_int_equal(verify(sum, sizeof(sum) / sizeof(sum[0]), MKS_PROG_OBSERVE, MKS_EV_TASK_END, NULL, log,
                            sizeof(log)),
                     -MKS_VERR_MAP_BOUNDS);
    assert_non_null(strstr(log, "offset 16..16 of map 'arr' value out of bounds"));
}

/* Loops compiled by clang (unrolling disabled): accepted, with a cost that
 * covers every iteration (also a loop entered from several paths with a
 * branch in its body, which needs pruning on the registers that matter
 * only); the popcount loop then runs in the VM within that cost and counts
 * right. */
static void test_compiled_loops(void **state)
{
    (void)state;
    char path[512], err[512], log[512];
    struct mks_obj *obj = NULL;
    snprintf(path, sizeof(path), "%s/loops.bpf.o", progdir);
    assert_int_equal(mks_obj_open_file(path, &obj, err, sizeof(err)), 0);
    assert_int_equal(mks_obj_prog_count(obj), 4);
    static const uint64_t min_cost[4] = {16 * 3, 3, 64 * 4, 16 * 5}; /* iterations x a body of at least that */
    for (uint32_t i = 0; i < 4; i++) {
        const struct mks_obj_prog *p = mks_obj_prog(obj, i);
        struct mks_verify_opts o = {.sz = sizeof(o), .prog_type = p->prog_type, .abi_version = p->abi_version,
                                    .hook = p->hook, .maps = mks_obj_maps(obj), .n_maps = mks_obj_map_count(obj)};
        struct mks_verify_result r = {0};
        int rc = mks_verify(p->insns, p->n_insns, &o, &r, log, sizeof(log));
        if (rc)
            print_error("%s: %s\n", p->name, log);
        assert_int_equal(rc, 0);
        assert_true(r.cost >= min_cost[i]);
        assert_true(r.cost > p->n_insns); /* the loop body counts once per iteration */
        if (strcmp(p->name, "popcount") != 0)
            continue;
        struct mks_hook_ctx ctx = {.abi_version = 1, .size = sizeof(ctx)};
        static const uint64_t values[] = {0, 1, 0x8000000000000001ull, UINT64_MAX, 0x0123456789abcdefull};
        for (size_t v = 0; v < sizeof(values) / sizeof(values[0]); v++) {
            ctx.value = values[v];
            struct mks_vm_env env = {.insns = p->insns, .n_insns = p->n_insns, .insn_limit = r.cost, .ctx = &ctx,
                                     .ctx_len = sizeof(ctx)};
            uint64_t r0 = 0, ran = 0;
            assert_int_equal(mks_vm_run(&env, (uint64_t)(uintptr_t)&ctx, 0, &r0, &ran), 0);
            assert_int_equal(r0, (uint64_t)__builtin_popcountll(values[v]));
            assert_true(ran <= r.cost);
        }
    }
    mks_obj_close(obj);
}

/* The standard monitors the agent attaches. */
static void verify_object(const char *file, uint32_t want_progs, int has_calls)
{
    char path[512], err[512];
    struct mks_obj *obj = NULL;
    snprintf(path, sizeof(path), "%s/%s", progdir, file);
    int rc = mks_obj_open_file(path, &obj, err, sizeof(err));
    if (rc)
        print_error("%s\n", err);
    assert_int_equal(rc, 0);
    assert_int_equal(mks_obj_prog_count(obj), want_progs);
    for (uint32_t i = 0; i < mks_obj_prog_count(obj); i++) {
        const struct mks_obj_prog *p = mks_obj_prog(obj, i);
        struct mks_verify_opts o = {.sz = sizeof(o), .prog_type = p->prog_type, .abi_version = p->abi_version,
                                    .hook = p->hook, .maps = mks_obj_maps(obj), .n_maps = mks_obj_map_count(obj)};
        struct mks_verify_result r = {0};
        char log[512];
        rc = mks_verify(p->insns, p->n_insns, &o, &r, log, sizeof(log));
        if (rc)
            print_error("%s %s: %s\n", file, p->name, log);
        assert_int_equal(rc, 0);
        /* loop-free, no local calls: at most every instruction once */
        assert_true(r.cost >= 3);
        if (!has_calls)
            assert_true(r.cost <= p->n_insns);
    }
    mks_obj_close(obj);
}

static void test_monitors(void **state)
{
    (void)state;
    verify_object("count.bpf.o", 1, 0);
    verify_object("latency.bpf.o", 2, 0);
    verify_object("depwait.bpf.o", 4, 0);
    verify_object("queue.bpf.o", 2, 0);
    verify_object("genprog.bpf.o", 2, 0);
}

/* A compiled object mixing an accepted program with rejected ones. */
static void test_compiled_rejections(void **state)
{
    (void)state;
    char path[512], err[512];
    struct mks_obj *obj = NULL;
    snprintf(path, sizeof(path), "%s/rejected.bpf.o", progdir);
    assert_int_equal(mks_obj_open_file(path, &obj, err, sizeof(err)), 0);
    static const struct {
        const char *name;
        int rc;
        const char *msg;
    } want[] = {
        {"good", 0, ""},
        {"reads_reserved", -MKS_VERR_CTX_ACCESS, "touches reserved bytes"},
        {"control_at_end", -MKS_VERR_HOOK, "CONTROL program at hook task_end"},
        {"loops", -MKS_VERR_LOOP, "still running after 32768 instructions"},
    };
    assert_int_equal(mks_obj_prog_count(obj), 4);
    for (uint32_t i = 0; i < 4; i++) {
        const struct mks_obj_prog *p = mks_obj_prog(obj, i);
        struct mks_verify_opts o = {.sz = sizeof(o), .prog_type = p->prog_type, .abi_version = p->abi_version,
                                    .hook = p->hook, .maps = mks_obj_maps(obj), .n_maps = mks_obj_map_count(obj)};
        char log[512];
        assert_string_equal(p->name, want[i].name);
        assert_int_equal(mks_verify(p->insns, p->n_insns, &o, NULL, log, sizeof(log)), want[i].rc);
        assert_non_null(strstr(log, want[i].msg));
    }
    mks_obj_close(obj);
}

static void test_multi_object(void **state)
{
    (void)state;
    verify_object("multi.bpf.o", 2, 1);
}

static void test_disasm(void **state)
{
    (void)state;
    struct mks_insn p[] = {LDX(W, 0, 1, 20), STX(DW, 10, 1, -8), ATOMIC(DW, 0, 1, 0, ADD), LD_MAP(1, 2),
                           JMP_IMM(MKS_BPF_JGT, 2, 9, 2), CALL(MKS_HELPER_MAP_LOOKUP), ALU32_REG(MKS_BPF_XOR, 3, 4),
                           ALU64_IMM(MKS_BPF_ARSH, 5, 3), EXIT()};
    static const char *const want[] = {"r0 = *(u32 *)(r1 +20)", "*(u64 *)(r10 -8) = r1",
                                       "lock *(u64 *)(r0 +0) += r1", "r1 = map[2] ll", NULL,
                                       "if r2 > 9 goto +2", "call mks_map_lookup#1", "w3 ^= w4", "r5 s>>= 3", "exit"};
    char buf[96];
    uint32_t n = sizeof(p) / sizeof(p[0]);
    for (uint32_t i = 0; i < n; i++) {
        if (!want[i])
            continue;
        assert_true(mks_insn_disasm(p, n, i, buf, sizeof(buf)) > 0);
        assert_string_equal(buf, want[i]);
    }
    assert_int_equal(mks_insn_disasm(p, n, n, buf, sizeof(buf)), -EINVAL);
}

/* The pointer tests that stay allowed: a lookup's null check (against an
 * immediate or a register holding 0), and == 0 / != 0 of a pointer that is
 * never NULL, whose answer the verifier knows (the side that cannot happen
 * is not explored: it would read uninitialised r3). */
static void test_pointer_null_tests(void **state)
{
    (void)state;
    struct mks_verify_result r = {0};
    struct mks_insn by_imm[] = {LOOKUP_ARR0, JMP_IMM(MKS_BPF_JNE, 0, 0, 2), MOV_IMM(0, 0), EXIT(),
                                LDX(DW, 0, 0, 8), EXIT()};
    ACCEPT(by_imm, MKS_PROG_OBSERVE, MKS_EV_TASK_END, &r);
    struct mks_insn by_reg[] = {LOOKUP_ARR0, MOV_IMM(2, 0), JMP_REG(MKS_BPF_JEQ, 0, 2, 1), LDX(DW, 1, 0, 8),
                                MOV_IMM(0, 0), EXIT()};
    ACCEPT(by_reg, MKS_PROG_OBSERVE, MKS_EV_TASK_END, &r);
    struct mks_insn ctx_never_null[] = {JMP_IMM(MKS_BPF_JEQ, 1, 0, 2), MOV_IMM(0, 1), EXIT(), MOV_REG(0, 3), EXIT()};
    ACCEPT(ctx_never_null, MKS_PROG_OBSERVE, MKS_EV_TASK_END, &r);
    struct mks_insn stack_never_null[] = {JMP_IMM(MKS_BPF_JNE, 10, 0, 2), MOV_REG(0, 3), EXIT(), MOV_IMM(0, 1), EXIT()};
    ACCEPT(stack_never_null, MKS_PROG_OBSERVE, MKS_EV_TASK_END, &r);
}

/* 32-bit arithmetic keeps its bounds: an index masked, shifted and
 * compared in 32 bits still bounds a map value access. */
static void test_alu32_bounds(void **state)
{
    (void)state;
    struct mks_verify_result r = {0};
    struct mks_insn p[] = {
        MOV_REG(6, 1),
        LOOKUP_ARR0,
        JMP_IMM(MKS_BPF_JEQ, 0, 0, 12),
        LDX(W, 2, 6, CTX_TASK_CLASS),
        ALU32_IMM(MKS_BPF_AND, 2, 3),         /* 0..3 */
        ALU32_IMM(MKS_BPF_LSH, 2, 2),         /* 0..12, multiple of 4 */
        MOV_REG(3, 0),
        ALU64_REG(ADD, 3, 2),
        LDX(W, 4, 3, 0),                      /* 4 bytes at 0..12 of 16 */
        LDX(W, 5, 6, CTX_STEP),
        JMP32_IMM(MKS_BPF_JGT, 5, 8, 3),      /* w5 <= 8 */
        ALU64_REG(ADD, 0, 5),
        LDX(DW, 4, 0, 0),                     /* 8 bytes at 0..8 of 16 */
        JA(0),
        MOV_IMM(0, 0),
        EXIT(),
    };
    ACCEPT(p, MKS_PROG_OBSERVE, MKS_EV_TASK_END, &r);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        progdir = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_minimal),
        cmocka_unit_test(test_count_cost),
        cmocka_unit_test(test_diamond_cost),
        cmocka_unit_test(test_local_call_cost),
        cmocka_unit_test(test_ldimm64_counts_once),
        cmocka_unit_test(test_null_check_through_copy),
        cmocka_unit_test(test_bounds_through_copy),
        cmocka_unit_test(test_masked_index),
        cmocka_unit_test(test_jmp32_bounds),
        cmocka_unit_test(test_pointer_null_tests),
        cmocka_unit_test(test_alu32_bounds),
        cmocka_unit_test(test_spill_restore_pointer),
        cmocka_unit_test(test_control),
        cmocka_unit_test(test_observe_helpers),
        cmocka_unit_test(test_branch_chain_pruned),
        cmocka_unit_test(test_loops),
        cmocka_unit_test(test_compiled_loops),
        cmocka_unit_test(test_monitors),
        cmocka_unit_test(test_compiled_rejections),
        cmocka_unit_test(test_multi_object),
        cmocka_unit_test(test_disasm),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

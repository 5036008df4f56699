/*
 * VM semantics beyond the conformance cases: the run-time guards (each with
 * its own error code), map references through 64-bit immediates, helpers,
 * local calls with their own frames, and the instruction count.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "insn.h"
#include "mkscope/hook_abi.h"
#include "mkscope/maps.h"
#include "mkscope/vm.h"

static int run(const struct mks_insn *p, uint32_t n, void *ctx, uint32_t ctx_len, uint64_t limit,
               uint64_t *r0, uint64_t *count)
{
    struct mks_vm_env env;
    memset(&env, 0, sizeof(env));
    env.insns = p;
    env.n_insns = n;
    env.insn_limit = limit;
    env.ctx = ctx;
    env.ctx_len = ctx_len;
    return mks_vm_run(&env, (uint64_t)(uintptr_t)ctx, 0, r0, count);
}

#define N(a) ((uint32_t)(sizeof(a) / sizeof((a)[0])))

static void test_ctx_read_and_write_guard(void **state)
{
    struct mks_hook_ctx ctx;
    struct mks_insn rd[] = {LDX_DW(0, 1, 24), EXIT()};
    struct mks_insn wr[] = {MOV64_IMM(2, 7), STX_DW(1, 2, 24), MOV64_IMM(0, 0), EXIT()};
    struct mks_insn past[] = {LDX_DW(0, 1, 128), EXIT()};
    uint64_t r0 = 0;
    (void)state;
    memset(&ctx, 0, sizeof(ctx));
    ctx.task_gen = 0x1234;
    assert_int_equal(run(rd, N(rd), &ctx, sizeof(ctx), 0, &r0, NULL), 0);
    assert_int_equal(r0, 0x1234);
    /* The context is read-only to every program. */
    assert_int_equal(run(wr, N(wr), &ctx, sizeof(ctx), 0, &r0, NULL), MKS_VM_EMEM);
    assert_int_equal(ctx.task_gen, 0x1234);
    assert_int_equal(run(past, N(past), &ctx, sizeof(ctx), 0, &r0, NULL), MKS_VM_EMEM);
}

static void test_stack_bounds(void **state)
{
    struct mks_insn ok[] = {MOV64_IMM(1, 5), STX_DW(10, 1, -512), LDX_DW(0, 10, -512), EXIT()};
    struct mks_insn below[] = {MOV64_IMM(1, 5), STX_DW(10, 1, -520), MOV64_IMM(0, 0), EXIT()};
    struct mks_insn above[] = {LDX_DW(0, 10, 0), EXIT()};
    struct mks_insn wild[] = {I(0x18, 1, 0, 0, 0x1000), I(0, 0, 0, 0, 0), LDX_DW(0, 1, 0), EXIT()};
    uint64_t r0 = 0;
    (void)state;
    assert_int_equal(run(ok, N(ok), NULL, 0, 0, &r0, NULL), 0);
    assert_int_equal(r0, 5);
    assert_int_equal(run(below, N(below), NULL, 0, 0, &r0, NULL), MKS_VM_EMEM);
    assert_int_equal(run(above, N(above), NULL, 0, 0, &r0, NULL), MKS_VM_EMEM);
    assert_int_equal(run(wild, N(wild), NULL, 0, 0, &r0, NULL), MKS_VM_EMEM);
}

static void test_limit_and_count(void **state)
{
    struct mks_insn loop[] = {JA(-1), EXIT()};
    struct mks_insn three[] = {MOV64_IMM(0, 1), ADD64_IMM(0, 2), EXIT()};
    uint64_t r0 = 0, count = 0;
    (void)state;
    assert_int_equal(run(loop, N(loop), NULL, 0, 1000, &r0, &count), MKS_VM_ELIMIT);
    assert_int_equal(count, 1000);
    assert_int_equal(run(three, N(three), NULL, 0, 0, &r0, &count), 0);
    assert_int_equal(count, 3);
    assert_int_equal(r0, 3);
    /* A limit of exactly the program's length is enough. */
    assert_int_equal(run(three, N(three), NULL, 0, 3, &r0, &count), 0);
    assert_int_equal(run(three, N(three), NULL, 0, 2, &r0, &count), MKS_VM_ELIMIT);
}

static void test_bad_code(void **state)
{
    struct mks_insn badop[] = {I(0xff, 0, 0, 0, 0), EXIT()};
    struct mks_insn badreg[] = {I(0xb7, 11, 0, 0, 0), EXIT()};
    struct mks_insn fall[] = {MOV64_IMM(0, 0)};
    struct mks_insn jout[] = {JA(5), EXIT()};
    struct mks_insn helper[] = {CALL(999), EXIT()};
    struct mks_insn unwind[] = {MOV64_IMM(1, 0), CALL(5), EXIT()}; /* helper 5 is conformance-only */
    struct mks_insn half_lddw[] = {MOV64_IMM(0, 0), I(0x18, 0, 0, 0, 1)};
    uint64_t r0 = 0;
    (void)state;
    assert_int_equal(run(badop, N(badop), NULL, 0, 0, &r0, NULL), MKS_VM_EINSN);
    assert_int_equal(run(badreg, N(badreg), NULL, 0, 0, &r0, NULL), MKS_VM_EINSN);
    assert_int_equal(run(fall, N(fall), NULL, 0, 0, &r0, NULL), MKS_VM_EJUMP);
    assert_int_equal(run(jout, N(jout), NULL, 0, 0, &r0, NULL), MKS_VM_EJUMP);
    assert_int_equal(run(helper, N(helper), NULL, 0, 0, &r0, NULL), MKS_VM_ECALL);
    assert_int_equal(run(unwind, N(unwind), NULL, 0, 0, &r0, NULL), MKS_VM_ECALL);
    assert_int_equal(run(half_lddw, N(half_lddw), NULL, 0, 0, &r0, NULL), MKS_VM_EINSN);
    assert_string_equal(mks_vm_strerror(MKS_VM_EMEM), "memory access out of bounds");
}

static void test_local_call_frames(void **state)
{
    /* main: store 11 at fp-8, call f, r0 = f's result + *(fp-8) (unchanged).
     * f: writes its own fp-8 and returns 31. */
    struct mks_insn p[] = {
        MOV64_IMM(1, 11), STX_DW(10, 1, -8), CALL_LOCAL(3), LDX_DW(1, 10, -8),
        I(0x0f, 0, 1, 0, 0), /* r0 += r1 */
        EXIT(),
        MOV64_IMM(2, 99), STX_DW(10, 2, -8), MOV64_IMM(0, 31), EXIT(),
    };
    /* Unbounded recursion stops at the frame limit, not in a crash. */
    struct mks_insn rec[] = {CALL_LOCAL(-1), EXIT()};
    uint64_t r0 = 0;
    (void)state;
    assert_int_equal(run(p, N(p), NULL, 0, 0, &r0, NULL), 0);
    assert_int_equal(r0, 42);
    assert_int_equal(run(rec, N(rec), NULL, 0, 0, &r0, NULL), MKS_VM_ECALL);
}

static void test_maps_through_lddw(void **state)
{
    struct mks_map_desc d[2];
    struct mks_maps m;
    uint8_t *arena;
    uint32_t ids[2] = {1, 0};
    uint64_t r0 = 0;
    struct mks_vm_env env;
    struct mks_insn count[] = PROG_COUNT_MAP0;
    /* map 1 (array of 2 x u64): address of entry 0's value + 4 */
    struct mks_insn direct[] = {LD_MAPVAL(1, 1, 4), MOV64_IMM(2, 5), I(0x63, 1, 2, 0, 0),
                                MOV64_IMM(0, 0), EXIT()};
    struct mks_insn foreign[] = {I(0x18, 1, 0, 0, 0), I(0, 0, 0, 0, 0), ST_W(10, -4, 0),
                                 MOV64_REG(2, 10), ADD64_IMM(2, -4), CALL(MKS_HELPER_MAP_LOOKUP),
                                 EXIT()};
    (void)state;
    memset(d, 0, sizeof(d));
    for (int i = 0; i < 2; i++) {
        d[i].type = MKS_MAP_ARRAY;
        d[i].key_size = 4;
        d[i].value_size = 8;
        d[i].max_entries = 2;
        assert_int_equal(mks_map_layout(&d[i], 1, NULL, 0), 0);
        d[i].bank_off[0] = (uint64_t)i * 2 * d[i].bank_bytes;
        d[i].bank_off[1] = d[i].bank_off[0] + d[i].bank_bytes;
        d[i].state = MKS_MAPSTATE_LIVE;
    }
    arena = calloc(1, 4 * d[0].bank_bytes);
    assert_non_null(arena);
    memset(&m, 0, sizeof(m));
    m.descs = d;
    m.n_descs = 2;
    m.arena = arena;
    m.arena_len = 4 * d[0].bank_bytes;
    memset(&env, 0, sizeof(env));
    env.maps = &m;
    env.n_maps = 2;
    env.map_ids = ids; /* program map 0 is map id 1, map 1 is id 0 */
    env.insns = count;
    env.n_insns = N(count);
    for (int i = 0; i < 3; i++)
        assert_int_equal(mks_vm_run(&env, 0, 0, &r0, NULL), 0);
    assert_int_equal(*(uint64_t *)(arena + d[1].bank_off[0]), 3);
    m.bank = 1; /* the other epoch's bank */
    assert_int_equal(mks_vm_run(&env, 0, 0, &r0, NULL), 0);
    assert_int_equal(*(uint64_t *)(arena + d[1].bank_off[1]), 1);
    m.bank = 0;
    env.insns = direct;
    env.n_insns = N(direct);
    assert_int_equal(mks_vm_run(&env, 0, 0, &r0, NULL), 0);
    assert_int_equal(*(uint32_t *)(arena + d[0].bank_off[0] + 4), 5);
    /* An offset past the value is refused. */
    direct[0].imm = 0;
    direct[1].imm = 8;
    assert_int_equal(mks_vm_run(&env, 0, 0, &r0, NULL), MKS_VM_ECALL);
    /* A map index the program does not have. */
    direct[0].imm = 1;
    direct[1].imm = 0;
    env.n_maps = 1;
    assert_int_equal(mks_vm_run(&env, 0, 0, &r0, NULL), MKS_VM_ECALL);
    env.n_maps = 2;
    /* A forged map handle (a plain number) is refused by the helper. */
    env.insns = foreign;
    env.n_insns = N(foreign);
    assert_int_equal(mks_vm_run(&env, 0, 0, &r0, NULL), MKS_VM_ECALL);
    free(arena);
}

static void test_div_by_zero_is_not_an_error(void **state)
{
    struct mks_insn div[] = {MOV64_IMM(0, 7), MOV64_IMM(1, 0), I(0x3f, 0, 1, 0, 0), EXIT()};
    struct mks_insn mod[] = {MOV64_IMM(0, 7), MOV64_IMM(1, 0), I(0x9f, 0, 1, 0, 0), EXIT()};
    uint64_t r0 = 1;
    (void)state;
    assert_int_equal(run(div, N(div), NULL, 0, 0, &r0, NULL), 0);
    assert_int_equal(r0, 0);
    assert_int_equal(run(mod, N(mod), NULL, 0, 0, &r0, NULL), 0);
    assert_int_equal(r0, 7);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ctx_read_and_write_guard),
        cmocka_unit_test(test_stack_bounds),
        cmocka_unit_test(test_limit_and_count),
        cmocka_unit_test(test_bad_code),
        cmocka_unit_test(test_local_call_frames),
        cmocka_unit_test(test_maps_through_lddw),
        cmocka_unit_test(test_div_by_zero_is_not_an_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

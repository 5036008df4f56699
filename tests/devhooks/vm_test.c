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

/* The decoded form the device runs against the VM on random text: opcodes
 * mostly valid (every class and width), registers up to 15, small offsets
 * and telling immediates, the last instruction mostly exit: every program
 * must give the same error, r0 and count in both.  Helpers that read a
 * clock are left out (their answers differ between two runs). */
static uint64_t rng_next(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static void test_decoded_matches_raw(void **state)
{
    static const uint8_t codes[] = {
        0x07, 0x0f, 0x17, 0x1f, 0x27, 0x2f, 0x37, 0x3f, 0x47, 0x4f, 0x57, 0x5f, 0x67, 0x6f, 0x77,
        0x7f, 0x87, 0x8f, 0x97, 0x9f, 0xa7, 0xaf, 0xb7, 0xbf, 0xc7, 0xcf, 0xd7, 0xdf, 0x04, 0x0c,
        0x14, 0x1c, 0x24, 0x2c, 0x34, 0x3c, 0x44, 0x4c, 0x54, 0x5c, 0x64, 0x6c, 0x74, 0x7c, 0x84,
        0x8c, 0x94, 0x9c, 0xa4, 0xac, 0xb4, 0xbc, 0xc4, 0xcc, 0xd4, 0xdc, 0x61, 0x69, 0x71, 0x79,
        0x81, 0x89, 0x91, 0x99, 0x62, 0x6a, 0x72, 0x7a, 0x63, 0x6b, 0x73, 0x7b, 0xc3, 0xdb, 0xc2,
        0x18, 0x05, 0x0d, 0x06, 0x0e, 0x15, 0x1d, 0x25, 0x2d, 0x35, 0x3d, 0x45, 0x4d, 0x55, 0x5d,
        0x65, 0x6d, 0x75, 0x7d, 0xa5, 0xad, 0xb5, 0xbd, 0xc5, 0xcd, 0xd5, 0xdd, 0x16, 0x1e, 0x26,
        0x2e, 0x36, 0x3e, 0x46, 0x4e, 0x56, 0x5e, 0x66, 0x6e, 0x76, 0x7e, 0xa6, 0xae, 0xb6, 0xbe,
        0xc6, 0xce, 0xd6, 0xde, 0x85, 0x8d, 0x86, 0x95, 0x9d, 0x96, 0x00, 0xff,
    };
    static const int32_t imms[] = {0, 1, -1, 2, 7, 8, 16, 32, 63, 64, -8, -512, 0x7fffffff,
                                   (int32_t)0x80000000u, 0xe1, 0xf1, 0x41, 0x51};
    static const int32_t helpers[] = {MKS_HELPER_MAP_LOOKUP, MKS_HELPER_MAP_UPDATE,
                                      MKS_HELPER_MAP_DELETE, 5, MKS_HELPER_WORKER_ID,
                                      MKS_HELPER_SM_ID, MKS_HELPER_RANK, MKS_HELPER_HIST_ADD,
                                      MKS_HELPER_RINGBUF_OUTPUT, 7};
    uint64_t x = 0x9e3779b97f4a7c15ull, differ = 0, ran_ok = 0;
    uint8_t ctx[64];
    (void)state;
    for (uint32_t i = 0; i < sizeof(ctx); i++)
        ctx[i] = (uint8_t)(i * 37u + 11u);
    for (int k = 0; k < 20000; k++) {
        struct mks_insn p[24];
        struct mks_dinsn d[24];
        struct mks_vm_env env;
        const uint32_t n = 2 + (uint32_t)(rng_next(&x) % 23);
        uint64_t r0a = 0, r0b = 0, ca = 0, cb = 0;
        int ra, rb;
        for (uint32_t i = 0; i < n; i++) {
            const uint64_t v = rng_next(&x);
            const uint32_t rd = (v >> 8) % 16 < 13 ? (uint32_t)((v >> 8) % 11) : (uint32_t)((v >> 12) % 16);
            const uint32_t rs = (v >> 16) % 16 < 13 ? (uint32_t)((v >> 20) % 11) : (uint32_t)((v >> 24) % 16);
            p[i].code = (v & 7) ? codes[(v >> 28) % sizeof(codes)] : (uint8_t)(v >> 36);
            p[i].regs = (uint8_t)(rd | rs << 4);
            p[i].off = (int16_t)((int64_t)((v >> 44) % 9) - 4);
            if (((v >> 40) & 15) == 0)
                p[i].off = (int16_t)-8 * (int16_t)((v >> 48) % 8);
            p[i].imm = imms[(v >> 52) % (sizeof(imms) / sizeof(imms[0]))];
            if (p[i].code == 0x85 && (p[i].regs >> 4) == 0) /* a helper, not the clock */
                p[i].imm = helpers[(v >> 56) % (sizeof(helpers) / sizeof(helpers[0]))];
        }
        if (rng_next(&x) % 5)
            p[n - 1] = (struct mks_insn){0x95, 0, 0, 0};
        assert_int_equal(mks_vm_decode(p, n, d), 0);
        memset(&env, 0, sizeof(env));
        env.insns = p;
        env.n_insns = n;
        env.insn_limit = 1000;
        env.ctx = ctx;
        env.ctx_len = sizeof(ctx);
        ra = mks_vm_run(&env, (uint64_t)(uintptr_t)ctx, 7, &r0a, &ca);
        env.insns = (const struct mks_insn *)d;
        rb = mks_vm_run_decoded(&env, (uint64_t)(uintptr_t)ctx, 7, &r0b, &cb);
        if (ra != rb || ca != cb || (ra == 0 && r0a != r0b)) {
            if (differ++ < 5)
                print_message("program %d (%u insns): raw rc %d r0 %llx count %llu, decoded rc %d "
                              "r0 %llx count %llu\n", k, n, ra, (unsigned long long)r0a,
                              (unsigned long long)ca, rb, (unsigned long long)r0b,
                              (unsigned long long)cb);
        }
        ran_ok += ra == 0;
    }
    assert_int_equal(differ, 0);
    assert_true(ran_ok > 500); /* not only refusals */
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
        cmocka_unit_test(test_decoded_matches_raw),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

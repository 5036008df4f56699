/*
 * Verifier against the VM on random programs.  Programs are generated from
 * instruction templates (ALU of both widths, context and stack accesses,
 * forward branches, helper and local calls, pointer arithmetic), so that a
 * good share passes.  For each one the verifier must answer without
 * crashing, with one line when it rejects; and every program it accepts must
 * run in the VM without tripping a run-time guard (a guard firing means the
 * verifier let something unsafe through) and within its declared cost (the
 * cost is the VM's instruction limit here).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mkscope/maps.h"
#include "mkscope/verifier.h"
#include "mkscope/vm.h"
#include "verifier_insn.h"

static uint64_t rng_state = 0x243f6a8885a308d3ull;

static uint32_t rnd(uint32_t n)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)((rng_state >> 33) % n);
}

static int32_t rnd_imm(void)
{
    static const int32_t special[] = {0, 1, -1, 2, 7, 8, 15, 16, 31, 32, 63, 64, 127, 255, 4096, INT32_MAX, INT32_MIN};
    return rnd(3) ? special[rnd(sizeof(special) / sizeof(special[0]))] : (int32_t)(rnd(1u << 31) - (1u << 30));
}

static const uint8_t alu_ops[] = {MKS_BPF_ADD, MKS_BPF_SUB, MKS_BPF_MUL, MKS_BPF_DIV, MKS_BPF_OR,  MKS_BPF_AND,
                                  MKS_BPF_LSH, MKS_BPF_RSH, MKS_BPF_MOD, MKS_BPF_XOR, MKS_BPF_MOV, MKS_BPF_ARSH};
static const uint8_t jmp_ops[] = {MKS_BPF_JEQ, MKS_BPF_JGT, MKS_BPF_JGE, MKS_BPF_JSET, MKS_BPF_JNE, MKS_BPF_JSGT,
                                  MKS_BPF_JSGE, MKS_BPF_JLT, MKS_BPF_JLE, MKS_BPF_JSLT, MKS_BPF_JSLE};
static const uint8_t sizes[] = {MKS_BPF_B, MKS_BPF_H, MKS_BPF_W, MKS_BPF_DW};
/* The one map the programs see: an array of one 16-byte value.  The VM's
 * guard covers its whole arena, so the arena here is exactly that value:
 * an access the verifier lets past the value's bounds trips the guard. */
enum { FZ_ARR = 0, FZ_NMAPS = 1 };
static const struct mks_map_spec fz_maps[FZ_NMAPS] = {
    {"arr", MKS_MAP_ARRAY, 4, 16, 1},
};

/* registers the body uses freely: r6 keeps the context, r1-r5 are helper
 * arguments and clobbered by calls */
static const uint8_t gp[] = {0, 2, 3, 4, 5, 7, 8, 9};

#define GP() gp[rnd(sizeof(gp))]

/* One body instruction at p[i] of a program whose exit is at `end`;
 * returns how many slots it used. */
static uint32_t gen_insn(struct mks_insn *p, uint32_t i, uint32_t end)
{
    struct mks_insn in = {0};
    uint8_t dst = GP(), src = GP();
    switch (rnd(14)) {
    case 0: case 1: case 2: {
        uint8_t op = alu_ops[rnd(sizeof(alu_ops))];
        uint8_t cls = rnd(2) ? MKS_BPF_ALU64 : MKS_BPF_ALU;
        int32_t imm = rnd_imm();
        if (op == MKS_BPF_LSH || op == MKS_BPF_RSH || op == MKS_BPF_ARSH)
            imm = (int32_t)rnd(cls == MKS_BPF_ALU64 ? 66 : 34);
        in = rnd(2) ? (struct mks_insn)VI(cls | MKS_BPF_K | op, dst, 0, 0, imm)
                    : (struct mks_insn)VI(cls | MKS_BPF_X | op, dst, src, 0, 0);
        break;
    }
    case 3:
        in = (struct mks_insn)VI(MKS_BPF_ALU64 | MKS_BPF_NEG, dst, 0, 0, 0);
        break;
    case 4: { /* context load, mostly in bounds */
        uint8_t sz = sizes[rnd(4)];
        uint32_t w = sz == MKS_BPF_DW ? 8 : sz == MKS_BPF_W ? 4 : sz == MKS_BPF_H ? 2 : 1;
        int16_t off = (int16_t)(rnd(8) ? rnd(112 / w) * w : rnd(140) - 4);
        in = (struct mks_insn)LDX(sz, dst, 6, off);
        break;
    }
    case 5: { /* stack store */
        uint8_t sz = sizes[rnd(4)];
        int16_t off = (int16_t)(rnd(8) ? -8 * (int)(1 + rnd(8)) : -(int)rnd(530));
        in = rnd(2) ? (struct mks_insn)STX(sz, 10, src, off) : (struct mks_insn)ST(sz, 10, off, rnd_imm());
        break;
    }
    case 6: { /* stack load */
        uint8_t sz = sizes[rnd(4)];
        int16_t off = (int16_t)(-8 * (int)(1 + rnd(8)) + (rnd(4) ? 0 : (int)rnd(8)));
        in = (struct mks_insn)LDX(sz, dst, 10, off);
        break;
    }
    case 7: case 8: { /* forward branch */
        uint8_t op = jmp_ops[rnd(sizeof(jmp_ops))];
        uint8_t cls = rnd(3) ? MKS_BPF_JMP : MKS_BPF_JMP32;
        int16_t off = (int16_t)rnd(end - i);
        in = rnd(2) ? (struct mks_insn)VI(cls | MKS_BPF_K | op, dst, 0, off, rnd_imm())
                    : (struct mks_insn)VI(cls | MKS_BPF_X | op, dst, src, off, 0);
        break;
    }
    case 9: { /* helper without maps; the clobbered r2-r5 set again */
        static const int32_t h[] = {MKS_HELPER_TIME_NS, MKS_HELPER_WORKER_ID, MKS_HELPER_SM_ID, MKS_HELPER_RANK};
        if (i + 5 > end)
            return 0;
        p[i] = (struct mks_insn)CALL(h[rnd(4)]);
        for (uint8_t r = 2; r <= 5; r++)
            p[i + r - 1] = (struct mks_insn)MOV_IMM(r, rnd_imm());
        return 5;
    }
    case 10: { /* a stack pointer with an offset, stored through */
        if (i + 3 > end)
            return 0;
        p[i] = (struct mks_insn)MOV_REG(dst, 10);
        p[i + 1] = (struct mks_insn)ALU64_IMM(MKS_BPF_ADD, dst, -8 * (int)(1 + rnd(8)));
        p[i + 2] = (struct mks_insn)ST(sizes[rnd(4)], dst, (int16_t)(rnd(2) ? 0 : rnd(16) - 8), rnd_imm());
        return 3;
    }
    case 11: { /* map block: lookup, null check, accesses through a copy */
        if (i + 16 > end)
            return 0;
        uint32_t k = i;
        uint8_t cp = rnd(2) ? 7 : 8;
        p[k++] = (struct mks_insn)ST(W, 10, -4, (int32_t)rnd(2)); /* index 1 misses */
        p[k++] = (struct mks_insn)VI(0x18, 1, MKS_PSEUDO_MAP_IDX, 0, FZ_ARR);
        p[k++] = (struct mks_insn)VI(0, 0, 0, 0, 0);
        p[k++] = (struct mks_insn)MOV_REG(2, 10);
        p[k++] = (struct mks_insn)ALU64_IMM(MKS_BPF_ADD, 2, -4);
        p[k++] = (struct mks_insn)CALL(MKS_HELPER_MAP_LOOKUP);
        p[k++] = (struct mks_insn)MOV_REG(cp, 0);
        for (uint8_t r = 2; r <= 5; r++)
            p[k++] = (struct mks_insn)MOV_IMM(r, rnd_imm());
        uint32_t body = 2 + rnd(3), skip = rnd(8) ? body : body - 1 - rnd(body);
        if (rnd(6)) /* else no null check at all */
            p[k++] = (struct mks_insn)JMP_IMM(MKS_BPF_JEQ, 0, 0, (int16_t)skip);
        for (uint32_t b = 0; b < body; b++) {
            uint8_t sz = sizes[rnd(4)];
            int16_t off = (int16_t)(rnd(8) ? rnd(16) : rnd(40) - 8);
            switch (rnd(4)) {
            case 0: p[k++] = (struct mks_insn)LDX(sz, GP(), cp, off); break;
            case 1: p[k++] = (struct mks_insn)STX(sz, cp, GP(), off); break;
            case 2: p[k++] = (struct mks_insn)ST(sz, cp, off, rnd_imm()); break;
            default: /* index by a masked context field */
                p[k++] = (struct mks_insn)LDX(W, 2, 6, CTX_TASK_CLASS);
                if (b + 2 < body) {
                    p[k++] = (struct mks_insn)ALU64_IMM(MKS_BPF_AND, 2, (int32_t)rnd(16));
                    p[k++] = (struct mks_insn)ALU64_REG(MKS_BPF_ADD, cp, 2);
                    b += 2;
                }
                break;
            }
        }
        return k - i;
    }
    case 12: { /* a counted loop around a few body instructions */
        uint32_t body = 1 + rnd(3);
        if (i + body + 4 > end)
            return 0;
        uint32_t k = i;
        uint8_t c = gp[rnd(sizeof(gp))];
        p[k++] = (struct mks_insn)MOV_IMM(c, (int32_t)rnd(3));
        uint32_t top = k;
        for (uint32_t b = 0; b < body;) {
            uint32_t used = rnd(3) ? gen_insn(p, k, k + 1) : 0; /* one slot: no branch out */
            if (used == 0 || MKS_BPF_CLASS(p[k].code) == MKS_BPF_JMP || MKS_BPF_CLASS(p[k].code) == MKS_BPF_JMP32)
                p[k] = (struct mks_insn)ALU64_IMM(MKS_BPF_ADD, GP(), rnd_imm());
            k++;
            b++;
        }
        p[k++] = (struct mks_insn)ALU64_IMM(MKS_BPF_ADD, c, (int32_t)(1 + rnd(3)));
        if (rnd(3)) {
            p[k] = (struct mks_insn)JMP_IMM(rnd(2) ? MKS_BPF_JLT : MKS_BPF_JLE, c, (int32_t)rnd(24), 0);
        } else { /* bound from a masked context field */
            uint8_t b = c == 9 ? 8 : 9;
            p[k - 1] = (struct mks_insn)ALU64_IMM(MKS_BPF_ADD, c, 1);
            p[k++] = (struct mks_insn)LDX(W, b, 6, CTX_STEP);
            p[k++] = (struct mks_insn)ALU64_IMM(MKS_BPF_AND, b, (int32_t)rnd(32));
            p[k] = (struct mks_insn)JMP_REG(MKS_BPF_JLT, c, b, 0);
        }
        p[k].off = (int16_t)((int32_t)top - (int32_t)k - 1);
        k++;
        return k - i;
    }
    default: /* 64-bit immediate */
        if (i + 2 > end)
            return 0;
        p[i] = (struct mks_insn)VI(0x18, dst, 0, 0, rnd_imm());
        p[i + 1] = (struct mks_insn)VI(0, 0, 0, 0, rnd_imm());
        return 2;
    }
    p[i] = in;
    return 1;
}

/* prologue (r6 = ctx, other registers set), body, r0 = some register, exit;
 * sometimes a local function after it, called from the body. */
static uint32_t gen_prog(struct mks_insn *p, uint32_t cap)
{
    uint32_t n = 0, body = 4 + rnd(40);
    p[n++] = (struct mks_insn)MOV_REG(6, 1);
    for (size_t k = 0; k < sizeof(gp); k++)
        if (rnd(12))
            p[n++] = (struct mks_insn)MOV_IMM(gp[k], rnd_imm());
    for (int k = 1; k <= 8; k++)
        if (rnd(12))
            p[n++] = (struct mks_insn)ST(DW, 10, -8 * k, rnd_imm());
    uint32_t end = n + body; /* index of the final r0 move */
    if (end + 8 > cap)
        end = cap - 8;
    int with_fn = rnd(4) == 0;
    if (with_fn) {
        p[n] = (struct mks_insn)CALL_LOCAL(0);
        p[n++].off = 1;
    }
    while (n < end) {
        if (with_fn && rnd(10) == 0) {
            /* call the function placed after the exit */
            p[n] = (struct mks_insn)CALL_LOCAL(0); /* patched below */
            p[n].off = 1;                         /* marker */
            n++;
            continue;
        }
        uint32_t k = gen_insn(p, n, end);
        if (k == 0)
            p[n++] = (struct mks_insn)MOV_IMM(GP(), rnd_imm());
        else
            n += k;
    }
    p[n++] = (struct mks_insn)MOV_REG(0, GP());
    p[n++] = (struct mks_insn)EXIT();
    /* a branch into the second half of a ld_imm64 lands on its first */
    for (uint32_t i = 0; i < n; i++) {
        uint8_t cls = MKS_BPF_CLASS(p[i].code);
        if ((cls == MKS_BPF_JMP || cls == MKS_BPF_JMP32) && (p[i].code & 0xf0) != MKS_BPF_CALL &&
            (p[i].code & 0xf0) != MKS_BPF_EXIT) {
            uint32_t t = i + 1 + (uint32_t)p[i].off;
            if (t < n && t > 0 && p[t - 1].code == 0x18 && t - 1 > i)
                p[i].off--;
        }
        if (p[i].code == 0x18)
            i++;
    }
    if (with_fn) {
        uint32_t fn = n;
        p[n++] = (struct mks_insn)MOV_REG(0, 1);
        p[n++] = (struct mks_insn)ALU64_IMM(MKS_BPF_ADD, 0, rnd_imm());
        p[n++] = (struct mks_insn)EXIT();
        for (uint32_t i = 0; i < fn; i++) {
            if (p[i].code == (MKS_BPF_JMP | MKS_BPF_CALL) && mks_insn_src(&p[i]) == MKS_PSEUDO_CALL &&
                p[i].off == 1) {
                p[i].off = 0;
                p[i].imm = (int32_t)fn - (int32_t)i - 1;
            }
        }
    }
    return n;
}

/* The map for the VM: its one bank is the whole arena. */
static struct mks_map_desc vm_desc = {.type = MKS_MAP_ARRAY, .key_size = 4, .value_size = 16, .max_entries = 1};
static uint8_t *vm_arena;
static struct mks_maps vm_maps;

static int setup(void **state)
{
    (void)state;
    if (mks_map_layout(&vm_desc, 1, NULL, 0) != 0 || vm_desc.stride != 16)
        return -1;
    vm_desc.state = MKS_MAPSTATE_LIVE;
    vm_arena = calloc(1, 16);
    vm_maps = (struct mks_maps){.descs = &vm_desc, .n_descs = 1, .arena = vm_arena, .arena_len = 16};
    return vm_arena ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    free(vm_arena);
    return 0;
}

/* Runs an accepted program on a random context: no run-time guard may fire
 * and it must finish within its cost. */
static void run_in_vm(const struct mks_insn *p, uint32_t n, uint64_t cost, uint32_t type, int iter)
{
    static const uint32_t ids[FZ_NMAPS] = {0};
    uint8_t ctx[128];
    assert_true(cost >= 1); /* 0 would mean "no limit" to the VM */
    for (size_t b = 0; b < sizeof(ctx); b++)
        ctx[b] = (uint8_t)rnd(256);
    struct mks_vm_env env = {.insns = p, .n_insns = n, .insn_limit = cost, .ctx = ctx, .ctx_len = sizeof(ctx),
                             .n_maps = FZ_NMAPS, .map_ids = ids, .maps = &vm_maps};
    uint64_t r0 = 0, ran = 0;
    int vrc = mks_vm_run(&env, (uint64_t)(uintptr_t)ctx, 0, &r0, &ran);
    if (vrc != 0 || ran > cost) {
        char dis[96];
        print_error("iteration %d: accepted (cost %llu) but the VM says %s after %llu instructions\n", iter,
                    (unsigned long long)cost, mks_vm_strerror(vrc), (unsigned long long)ran);
        for (uint32_t i = 0; i < n; i++) {
            mks_insn_disasm(p, n, i, dis, sizeof(dis));
            print_error("  %3u: %s\n", i, dis);
        }
    }
    assert_int_equal(vrc, 0);
    assert_true(ran <= cost);
    if (type == MKS_PROG_CONTROL)
        assert_true(r0 <= MKS_PRIO_HINT_MAX);
}

static void test_random_programs(void **state)
{
    (void)state;
    enum { N = 20000, CAP = 80 };
    struct mks_insn p[CAP];
    int accepted = 0, rejected = 0, with_map = 0, with_loop = 0;

    for (int iter = 0; iter < N; iter++) {
        uint32_t n = gen_prog(p, CAP);
        uint32_t type = rnd(4) ? MKS_PROG_OBSERVE : MKS_PROG_CONTROL;
        struct mks_verify_opts o = {.sz = sizeof(o), .prog_type = type, .abi_version = 1, .hook = -1,
                                    .maps = fz_maps, .n_maps = FZ_NMAPS};
        struct mks_verify_result res = {0};
        char log[512];
        int rc = mks_verify(p, n, &o, &res, log, sizeof(log));
        if (rc != 0) {
            assert_true(rc <= -MKS_VERR_BASE);
            assert_true(rc != -MKS_VERR_INTERNAL);
            assert_true(log[0] != '\0');
            assert_null(strchr(log, '\n'));
            rejected++;
            continue;
        }
        accepted++;
        for (uint32_t i = 0; i < n; i++) {
            uint8_t cls = MKS_BPF_CLASS(p[i].code);
            if ((cls == MKS_BPF_JMP || cls == MKS_BPF_JMP32) && p[i].off < 0 && (p[i].code & 0xf0) != MKS_BPF_CALL) {
                with_loop++;
                break;
            }
        }
        for (uint32_t i = 0; i < n; i++)
            if (p[i].code == (MKS_BPF_JMP | MKS_BPF_CALL) && p[i].imm == MKS_HELPER_MAP_LOOKUP &&
                mks_insn_src(&p[i]) == 0) {
                with_map++;
                break;
            }
        run_in_vm(p, n, res.cost, type, iter);
    }
    print_message("random programs: %d accepted and run (%d with map accesses, %d with loops), %d rejected\n",
                  accepted, with_map, with_loop, rejected);
    /* the generator must exercise both sides */
    assert_true(accepted > N / 20);
    assert_true(with_map > N / 100);
    assert_true(with_loop > N / 100);
    assert_true(rejected > N / 20);
}

/* Raw random instruction words, half of them with a valid opcode byte: the
 * verifier answers every one without crashing (ASan in the sanitizer
 * build), rejects in one line with a rejection code, and what it accepts
 * runs in the VM like the template programs. */
static void test_random_words(void **state)
{
    (void)state;
    static const uint8_t codes[] = {0x07, 0x0f, 0x04, 0x0c, 0xb7, 0xbf, 0xb4, 0xbc, 0x61, 0x69, 0x71, 0x79,
                                    0x62, 0x6a, 0x72, 0x7a, 0x63, 0x6b, 0x73, 0x7b, 0xdb, 0xc3, 0x18, 0x05,
                                    0x15, 0x1d, 0x25, 0x2d, 0x55, 0x5d, 0xa5, 0xad, 0x16, 0x26, 0x85, 0x95,
                                    0x87, 0x84, 0xd4, 0xdc, 0xd7, 0x06, 0x91, 0x89};
    struct mks_insn p[24];
    int accepted = 0;
    for (int iter = 0; iter < 50000; iter++) {
        uint32_t n = 1 + rnd(24);
        for (uint32_t i = 0; i < n; i++) {
            p[i].code = rnd(2) ? codes[rnd(sizeof(codes))] : (uint8_t)rnd(256);
            p[i].regs = (uint8_t)(rnd(4) ? (rnd(11) | (rnd(11) << 4)) : rnd(256));
            p[i].off = (int16_t)(rnd(2) ? (int)rnd(2 * n) - (int)n : (int)rnd(65536) - 32768);
            p[i].imm = rnd_imm();
        }
        if (rnd(2))
            p[n - 1] = (struct mks_insn)EXIT();
        if (rnd(2))
            p[0] = (struct mks_insn)MOV_IMM(0, 0);
        struct mks_verify_opts o = {.sz = sizeof(o), .prog_type = rnd(2) ? MKS_PROG_OBSERVE : MKS_PROG_CONTROL,
                                    .abi_version = 1, .hook = -1, .maps = fz_maps, .n_maps = FZ_NMAPS};
        struct mks_verify_result res = {0};
        char log[256];
        int rc = mks_verify(p, n, &o, &res, log, sizeof(log));
        if (rc == 0) {
            accepted++;
            assert_true(res.cost >= 1);
            run_in_vm(p, n, res.cost, o.prog_type, iter);
        } else {
            assert_true(rc <= -MKS_VERR_BASE && rc != -MKS_VERR_INTERNAL);
            assert_null(strchr(log, '\n'));
        }
    }
    print_message("random words: %d of 50000 accepted\n", accepted);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_programs),
        cmocka_unit_test(test_random_words),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

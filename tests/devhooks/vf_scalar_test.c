/*
 * The verifier's scalar domain against the VM, operation by operation.
 *
 * For every ALU and ALU64 opcode the VM executes (add sub mul div sdiv mod
 * smod or and xor lsh rsh arsh neg mov movsx, le/be/bswap 16/32/64), in its
 * register and immediate forms, and for every conditional jump of both
 * widths: abstract operands are built in many ways (constants, joins of
 * constants, unsigned, signed and 32-bit ranges, bit patterns, results of
 * earlier operations), each with concrete members it is known to contain,
 * drawn mostly from edge values (0, 1, 31, 32, 63, 64, -1, INT_MIN, ...).
 * For each pair of members the instruction runs in the real VM
 * (mks_vm_run), and the abstract result must contain the VM's result; for
 * a jump, the narrowed operands on the side the VM took must still contain
 * both members.  A verifier whose 32-bit shift ignores the VM's mask with
 * 31 fails here at once.  MKS_VF_ROUNDS scales the number of operand pairs.
 */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mkscope/vm.h"
#include "verifier_insn.h"
#include "vf_scalar.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t rnd64(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static uint32_t rnd(uint32_t n)
{
    return (uint32_t)(rnd64() % n);
}

static const uint64_t edges[] = {
    0, 1, 2, 3, 7, 8, 15, 16, 31, 32, 33, 63, 64, 65, 127, 128, 255, 256, 0x7fff, 0x8000, 0xffff, 0x10000,
    0x7fffffff, 0x80000000, 0x80000001, 0xfffffffe, 0xffffffff, 0x100000000, 0x100000001, 0x1f, 0x20, 0x3f, 0x40,
    0x7fffffffffffffffull, 0x8000000000000000ull, 0x8000000000000001ull, ~0ull, ~1ull, (uint64_t)-31, (uint64_t)-32,
    (uint64_t)-33, (uint64_t)-63, (uint64_t)-64, 0xffffffff00000000ull, 0xffffffff80000000ull, 0xffffffff7fffffffull,
    0x123456789abcdef0ull, 0x00000000deadbeefull, 0xdeadbeef00000020ull, 0x100000020ull, 0x10000003full,
};
#define N_EDGES (sizeof(edges) / sizeof(edges[0]))

static const int32_t imms[] = {0, 1, -1, 2, 7, 8, 16, 31, 32, 33, 63, 64, 65, 255, 0x7fff, 0x8000, -0x8000,
                               INT32_MAX, INT32_MIN, -31, -32, -64, 0x12345678};
#define N_IMMS (sizeof(imms) / sizeof(imms[0]))

static uint64_t some_value(void)
{
    switch (rnd(4)) {
    case 0: return rnd64();
    case 1: return rnd64() >> rnd(64);
    case 2: return edges[rnd(N_EDGES)] + (uint64_t)(int64_t)(int32_t)(rnd(5) - 2);
    default: return edges[rnd(N_EDGES)];
    }
}

/* An abstract value with members it holds. */
#define MAXM 6
struct av {
    struct vf_scalar s;
    uint64_t m[MAXM];
    int n;
};

static void add_member(struct av *a, uint64_t x)
{
    if (a->n < MAXM)
        a->m[a->n++] = x;
}

/* More members, sampled from what the abstract value allows. */
static void sample_members(struct av *a)
{
    for (int tries = 0; tries < 200 && a->n < MAXM; tries++) {
        uint64_t x;
        switch (rnd(4)) {
        case 0: x = a->s.tv | (rnd64() & a->s.tm); break;
        case 1: {
            uint64_t span = a->s.umax - a->s.umin;
            x = a->s.umin + (span == ~0ull ? rnd64() : rnd64() % (span + 1));
            break;
        }
        case 2: x = rnd(2) ? a->s.umin : a->s.umax; break;
        default: x = some_value(); break;
        }
        if (vfs_contains(&a->s, x))
            add_member(a, x);
    }
}

static struct av pool[64];
static int pool_n;

static void gen_av(struct av *a)
{
    memset(a, 0, sizeof(*a));
    vfs_unknown(&a->s);
    switch (rnd(9)) {
    case 0: { /* a constant */
        uint64_t c = some_value();
        vfs_const(&a->s, c);
        add_member(a, c);
        break;
    }
    case 1: { /* a join of constants */
        uint64_t c = some_value();
        vfs_const(&a->s, c);
        add_member(a, c);
        for (int k = 1 + (int)rnd(3); k > 0; k--) {
            struct vf_scalar t;
            c = rnd(2) ? some_value() : c + rnd(8);
            vfs_const(&t, c);
            vfs_join(&a->s, &t);
            add_member(a, c);
        }
        break;
    }
    case 2: { /* unsigned range */
        uint64_t x = some_value(), y = rnd(2) ? some_value() : x + rnd(64);
        vfs_urange(&a->s, x < y ? x : y, x < y ? y : x);
        add_member(a, x < y ? x : y);
        add_member(a, x < y ? y : x);
        break;
    }
    case 3: { /* signed range */
        int64_t x = (int64_t)some_value(), y = rnd(2) ? (int64_t)some_value() : (int64_t)((uint64_t)x + rnd(64));
        if (y < x) {
            int64_t t = x;
            x = y;
            y = t;
        }
        a->s.smin = x;
        a->s.smax = y;
        add_member(a, (uint64_t)x);
        add_member(a, (uint64_t)y);
        break;
    }
    case 4: { /* 32-bit ranges over any upper half */
        uint32_t x = (uint32_t)some_value(), y = rnd(2) ? (uint32_t)some_value() : x + rnd(64);
        if (y < x) {
            uint32_t t = x;
            x = y;
            y = t;
        }
        if (rnd(2)) {
            a->s.u32min = x;
            a->s.u32max = y;
        } else if ((int32_t)x <= (int32_t)y) {
            a->s.s32min = (int32_t)x;
            a->s.s32max = (int32_t)y;
        }
        if (rnd(2)) { /* zero-extended, as after a 32-bit operation */
            a->s.umax = 0xffffffff;
        }
        break;
    }
    case 5: { /* a bit pattern */
        uint64_t m = rnd64() & rnd64(), v = rnd64() & ~m;
        if (rnd(2))
            m &= 0xff;
        a->s.tv = v;
        a->s.tm = m;
        add_member(a, v);
        add_member(a, v | m);
        break;
    }
    case 6: /* unknown */
        break;
    default: /* an earlier result */
        if (pool_n) {
            *a = pool[rnd((uint32_t)pool_n)];
            return;
        }
        break;
    }
    assert_true(vfs_sync(&a->s));
    for (int k = 0; k < a->n; k++)
        assert_true(vfs_contains(&a->s, a->m[k]));
    sample_members(a);
}

static void print_av(const char *name, const struct vf_scalar *s)
{
    print_error("  %s: u [%#" PRIx64 ", %#" PRIx64 "] s [%" PRId64 ", %" PRId64 "] u32 [%#x, %#x] s32 [%d, %d] tnum "
                "%#" PRIx64 "/%#" PRIx64 "\n",
                name, s->umin, s->umax, s->smin, s->smax, s->u32min, s->u32max, s->s32min, s->s32max, s->tv, s->tm);
}

/* One instruction in the VM on r1 = a, r2 = b. */
static uint64_t vm_alu(struct mks_insn op, uint64_t a, uint64_t b)
{
    struct mks_insn p[] = {
        LD64(1, (int32_t)(uint32_t)a, (int32_t)(uint32_t)(a >> 32)),
        LD64(2, (int32_t)(uint32_t)b, (int32_t)(uint32_t)(b >> 32)),
        op,
        MOV_REG(0, 1),
        EXIT(),
    };
    struct mks_vm_env env = {.insns = p, .n_insns = sizeof(p) / sizeof(p[0])};
    uint64_t r0 = 0;
    assert_int_equal(mks_vm_run(&env, 0, 0, &r0, NULL), 0);
    return r0;
}

/* Whether the VM takes the jump on r1 = a, r2 = b. */
static int vm_jump(struct mks_insn op, uint64_t a, uint64_t b)
{
    op.off = 2;
    struct mks_insn p[] = {
        LD64(1, (int32_t)(uint32_t)a, (int32_t)(uint32_t)(a >> 32)),
        LD64(2, (int32_t)(uint32_t)b, (int32_t)(uint32_t)(b >> 32)),
        op,
        MOV_IMM(0, 0),
        EXIT(),
        MOV_IMM(0, 1),
        EXIT(),
    };
    struct mks_vm_env env = {.insns = p, .n_insns = sizeof(p) / sizeof(p[0])};
    uint64_t r0 = 7;
    assert_int_equal(mks_vm_run(&env, 0, 0, &r0, NULL), 0);
    return (int)r0;
}

/* Every ALU instruction form the VM runs (and the verifier's decoder
 * accepts). */
static int alu_forms(struct mks_insn *out)
{
    static const uint8_t ops[] = {MKS_BPF_ADD, MKS_BPF_SUB, MKS_BPF_MUL, MKS_BPF_DIV, MKS_BPF_OR, MKS_BPF_AND,
                                  MKS_BPF_LSH, MKS_BPF_RSH, MKS_BPF_MOD, MKS_BPF_XOR, MKS_BPF_MOV, MKS_BPF_ARSH};
    int n = 0;
    for (int c = 0; c < 2; c++) {
        uint8_t cls = c ? MKS_BPF_ALU64 : MKS_BPF_ALU;
        for (size_t o = 0; o < sizeof(ops); o++) {
            out[n++] = (struct mks_insn)VI(cls | MKS_BPF_X | ops[o], 1, 2, 0, 0);
            out[n++] = (struct mks_insn)VI(cls | MKS_BPF_K | ops[o], 1, 0, 0, 0); /* imm filled per round */
            if (ops[o] == MKS_BPF_DIV || ops[o] == MKS_BPF_MOD) { /* sdiv, smod */
                out[n++] = (struct mks_insn)VI(cls | MKS_BPF_X | ops[o], 1, 2, 1, 0);
                out[n++] = (struct mks_insn)VI(cls | MKS_BPF_K | ops[o], 1, 0, 1, 0);
            }
        }
        out[n++] = (struct mks_insn)VI(cls | MKS_BPF_NEG, 1, 0, 0, 0);
        out[n++] = (struct mks_insn)VI(cls | MKS_BPF_X | MKS_BPF_MOV, 1, 2, 8, 0);
        out[n++] = (struct mks_insn)VI(cls | MKS_BPF_X | MKS_BPF_MOV, 1, 2, 16, 0);
        if (cls == MKS_BPF_ALU64)
            out[n++] = (struct mks_insn)VI(cls | MKS_BPF_X | MKS_BPF_MOV, 1, 2, 32, 0);
        for (int bits = 16; bits <= 64; bits *= 2) {
            out[n++] = (struct mks_insn)VI(cls | MKS_BPF_K | MKS_BPF_END, 1, 0, 0, bits); /* le / bswap */
            if (cls == MKS_BPF_ALU)
                out[n++] = (struct mks_insn)VI(cls | MKS_BPF_X | MKS_BPF_END, 1, 0, 0, bits); /* be */
        }
    }
    return n;
}

static int is_k_imm_form(const struct mks_insn *in)
{
    uint8_t op = in->code & 0xf0;
    return !(in->code & MKS_BPF_X) && op != MKS_BPF_NEG && op != MKS_BPF_END;
}

static int rounds(void)
{
    const char *e = getenv("MKS_VF_ROUNDS");
    return e && atoi(e) > 0 ? atoi(e) : 300;
}

static void test_alu_contains_vm(void **state)
{
    (void)state;
    struct mks_insn forms[128];
    int nf = alu_forms(forms);
    long checks = 0;
    assert_true(nf >= 60);
    for (int f = 0; f < nf; f++) {
        for (int r = 0; r < rounds(); r++) {
            struct mks_insn in = forms[f];
            if (is_k_imm_form(&in))
                in.imm = rnd(2) ? imms[rnd(N_IMMS)] : (int32_t)rnd64();
            struct av a, b;
            gen_av(&a);
            gen_av(&b);
            struct vf_scalar res = a.s;
            vfs_alu(in.code, in.off, in.imm, &res, (in.code & MKS_BPF_X) ? &b.s : NULL);
            struct av out = {.s = res};
            for (int i = 0; i < a.n; i++) {
                for (int j = 0; j < b.n; j++) {
                    uint64_t got = vm_alu(in, a.m[i], b.m[j]);
                    checks++;
                    if (!vfs_contains(&res, got)) {
                        print_error("opcode %#04x off %d imm %d: VM(%#" PRIx64 ", %#" PRIx64 ") = %#" PRIx64
                                    " outside the abstract result\n",
                                    in.code, in.off, in.imm, a.m[i], b.m[j], got);
                        print_av("dst", &a.s);
                        print_av("src", &b.s);
                        print_av("result", &res);
                        fail();
                    }
                    if (rnd(4) == 0)
                        add_member(&out, got);
                }
            }
            if (out.n && pool_n < 64)
                pool[pool_n++] = out;
            else if (out.n)
                pool[rnd(64)] = out;
        }
    }
    print_message("%d ALU forms, %ld VM results inside their abstract results\n", nf, checks);
}

static void test_branch_keeps_vm_outcome(void **state)
{
    (void)state;
    static const uint8_t jops[] = {MKS_BPF_JEQ, MKS_BPF_JGT, MKS_BPF_JGE, MKS_BPF_JSET, MKS_BPF_JNE, MKS_BPF_JSGT,
                                   MKS_BPF_JSGE, MKS_BPF_JLT, MKS_BPF_JLE, MKS_BPF_JSLT, MKS_BPF_JSLE};
    long checks = 0, pruned = 0;
    for (int c = 0; c < 2; c++) {
        uint8_t cls = c ? MKS_BPF_JMP32 : MKS_BPF_JMP;
        for (size_t o = 0; o < sizeof(jops); o++) {
            for (int x = 0; x < 2; x++) {
                for (int r = 0; r < rounds(); r++) {
                    struct mks_insn in = VI(cls | (x ? MKS_BPF_X : MKS_BPF_K) | jops[o], 1, x ? 2 : 0, 0, 0);
                    if (!x)
                        in.imm = rnd(2) ? imms[rnd(N_IMMS)] : (int32_t)rnd64();
                    struct av a, b;
                    gen_av(&a);
                    gen_av(&b);
                    if (!x) { /* the immediate is the only value of the source */
                        b.n = 1;
                        b.m[0] = (uint64_t)(int64_t)in.imm;
                    }
                    for (int side = 0; side < 2; side++) {
                        struct vf_scalar na = a.s, nb = b.s;
                        int ok = vfs_branch(in.code, in.imm, side, &na, x ? &nb : NULL);
                        if (!ok)
                            pruned++;
                        for (int i = 0; i < a.n; i++) {
                            for (int j = 0; j < b.n; j++) {
                                if (vm_jump(in, a.m[i], b.m[j]) != side)
                                    continue;
                                checks++;
                                if (!ok || !vfs_contains(&na, a.m[i]) || (x && !vfs_contains(&nb, b.m[j]))) {
                                    print_error("opcode %#04x imm %d %s: VM goes this way for (%#" PRIx64 ", %#" PRIx64
                                                ") but the verifier %s\n",
                                                in.code, in.imm, side ? "taken" : "not taken", a.m[i], b.m[j],
                                                ok ? "narrowed it away" : "says this side cannot happen");
                                    print_av("dst", &a.s);
                                    print_av("src", &b.s);
                                    if (ok) {
                                        print_av("dst narrowed", &na);
                                        print_av("src narrowed", &nb);
                                    }
                                    fail();
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    print_message("jumps: %ld VM outcomes kept, %ld sides found impossible\n", checks, pruned);
    assert_true(pruned > 0);
}

/* Joins hold both sides; covers means every value of one is in the other. */
static void test_join_and_covers(void **state)
{
    (void)state;
    for (int r = 0; r < 20 * rounds(); r++) {
        struct av a, b;
        gen_av(&a);
        gen_av(&b);
        struct vf_scalar j = a.s;
        vfs_join(&j, &b.s);
        assert_true(vfs_covers(&j, &a.s));
        assert_true(vfs_covers(&j, &b.s));
        for (int i = 0; i < a.n; i++)
            assert_true(vfs_contains(&j, a.m[i]));
        for (int i = 0; i < b.n; i++)
            assert_true(vfs_contains(&j, b.m[i]));
        if (vfs_covers(&a.s, &b.s))
            for (int i = 0; i < b.n; i++)
                assert_true(vfs_contains(&a.s, b.m[i]));
    }
}

/* The case that was wrong: a 32-bit shift by a register holding 32..63
 * shifts by count & 31 in the VM. */
static void test_shift32_by_register(void **state)
{
    (void)state;
    struct vf_scalar d, s;
    vfs_const(&d, 1);
    vfs_urange(&s, 32, 63);
    vfs_alu(MKS_BPF_ALU | MKS_BPF_X | MKS_BPF_LSH, 0, 0, &d, &s);
    for (uint64_t k = 32; k < 64; k++)
        assert_true(vfs_contains(&d, vm_alu((struct mks_insn)ALU32_REG(MKS_BPF_LSH, 1, 2), 1, k)));
    assert_true(vfs_contains(&d, 1)); /* 1 << (32 & 31) */
    assert_true(vfs_contains(&d, 0x80000000));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shift32_by_register),
        cmocka_unit_test(test_alu_contains_vm),
        cmocka_unit_test(test_branch_keeps_vm_outcome),
        cmocka_unit_test(test_join_and_covers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

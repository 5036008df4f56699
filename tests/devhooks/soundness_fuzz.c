/*
 * Soundness fuzzer: the verifier's proof against the VM's execution.
 *
 * Programs come from a structured generator (the program types and hooks we
 * support, the v1 context layout, every map type, every helper, ALU chains
 * of every opcode and width feeding bounds checks, map value offsets,
 * helper sizes and loop bounds, spills and fills, local calls, bounded
 * loops, and now and then a misuse of a pointer) and from mutations of
 * programs accepted earlier.  Every program goes through mks_verify(); every
 * accepted one runs in the VM, on several contexts, twice: against two
 * copies of an arena holding exactly its maps, at different addresses, with
 * the context at different addresses and the VM's stack shifted.  A run
 * fails the fuzzer when
 *   - the VM stops on a guard (memory outside its regions, bad jump or
 *     call, misaligned atomic, ...): the verifier accepted what the VM
 *     refuses;
 *   - it touches memory it may not: under AddressSanitizer everything but
 *     the program's own values is poisoned (guard zones between maps, the
 *     other bank, array padding, other workers' copies, hash slot headers
 *     and keys, rings, the context's reserved tail), so a stray load or
 *     store aborts with a report; helper arguments are checked the same
 *     way before the real map code runs; without ASan, canaries in the
 *     guard zones catch stray stores;
 *   - it writes a .rodata image, or a CONTROL program writes any map;
 *   - it executes more instructions than the verifier's worst case (the
 *     VM's limit is that cost);
 *   - a CONTROL program returns outside [0, MKS_PRIO_HINT_MAX];
 *   - a pointer reaches a map, a ring record or r0: every 8-byte window of
 *     the arena and r0 is checked against the arena, context, map table and
 *     stack addresses of its run, and the two runs' results (r0, maps,
 *     rings, instruction count) must be equal: anything that depends on
 *     where memory is, a single bit of an address included, differs.
 *     (Programs that read the clock are exempt from the comparison only.)
 * On a failure the program is printed with its maps, seed and index, and
 * the exit status is 1; `--seed S --only I` runs that program again.
 *
 * With --probes the programs are compiled probes instead (query/probe.c,
 * random texts of the probe grammar from tests/query/probe_gen.c): every
 * program of every probe that compiles must be accepted, and then runs as
 * above, within the cost the verifier declared.
 *
 *   mkscope-fuzz-soundness [--seed S] [--programs N] [--accepted N]
 *                          [--seconds S] [--contexts K] [--only I]
 *                          [--keep-going N] [--replay REPORT] [--probes] [--self-test] [-q]
 */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <time.h>

#include "mkscope/bpf_isa.h"
#include "mkscope/ctl.h"
#include "mkscope/hook_abi.h"
#include "mkscope/maps.h"
#include "mkscope/verifier.h"
#include "mkscope/vm.h"
/* --probes needs the query module (a build of devhooks alone has none). */
#ifdef MKS_FZ_PROBES
#include "mkscope/probe.h"
#include "probe_gen.h"
#define FZ_HASH_VALUE (8 * MKS_PROBE_MAX_WORDS) /* a compiled probe's groups */
#else
#define FZ_HASH_VALUE 4096
#endif

#if defined(__SANITIZE_ADDRESS__)
#define FZ_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FZ_ASAN 1
#endif
#endif
#ifdef FZ_ASAN
#include <sanitizer/asan_interface.h>
#define POISON(p, n)   __asan_poison_memory_region((const volatile void *)(p), (n))
#define UNPOISON(p, n) __asan_unpoison_memory_region((const volatile void *)(p), (n))
#else
#define POISON(p, n)   ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

/* ---- limits -------------------------------------------------------------- */

#define FZ_MAXI     768          /* instructions of a generated program */
#define FZ_MAXMAPS  6
#define FZ_GUARD    128u         /* poisoned bytes around every region */
#define FZ_ARENA    (512u << 10) /* arena bytes reserved per copy */
#define FZ_CTX      128u
#define FZ_CTX_END  120u         /* v1's declared fields; the tail is reserved */
#define FZ_WORKERS  2u
#define FZ_CANARY   0xa5u
#define FZ_CORPUS   512          /* accepted programs kept for mutation */

/* ---- random numbers ------------------------------------------------------ */

static uint64_t rs;

static uint64_t splitmix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t r64(void)
{
    rs ^= rs >> 12;
    rs ^= rs << 25;
    rs ^= rs >> 27;
    return rs * 0x2545f4914f6cdd1dull;
}

static uint32_t rn(uint32_t n)
{
    return n ? (uint32_t)(r64() % n) : 0;
}

static bool chance(uint32_t pct)
{
    return rn(100) < pct;
}

static const uint64_t edge64[] = {
    0, 1, 2, 3, 4, 7, 8, 15, 16, 31, 32, 33, 48, 63, 64, 65, 100, 127, 128, 255, 256, 511, 512, 4095, 4096,
    0x7fff, 0x8000, 0xffff, 0x10000, 0x7fffffff, 0x80000000, 0x80000001, 0xfffffffe, 0xffffffff, 0x100000000,
    0x100000001, 0x100000020, 0x7fffffffffffffffull, 0x8000000000000000ull, ~0ull, ~1ull, (uint64_t)-8,
    (uint64_t)-16, (uint64_t)-31, (uint64_t)-32, (uint64_t)-33, (uint64_t)-64, 0xffffffff00000000ull,
    0xffffffff80000000ull, 0xffffffff7fffffffull, 0x8000000080000000ull, 0x0000000100000020ull,
};
#define N_EDGE64 (sizeof(edge64) / sizeof(edge64[0]))

static uint64_t some64(void)
{
    switch (rn(5)) {
    case 0: return r64();
    case 1: return r64() >> rn(64);
    case 2: return edge64[rn(N_EDGE64)] + (uint64_t)(int64_t)(int32_t)(rn(5) - 2);
    default: return edge64[rn(N_EDGE64)];
    }
}

static int32_t some_imm(void)
{
    switch (rn(4)) {
    case 0: return (int32_t)r64();
    case 1: return (int32_t)rn(64);
    default: return (int32_t)(uint32_t)edge64[rn(N_EDGE64)];
    }
}

/* ---- instructions -------------------------------------------------------- */

static struct mks_insn I(uint8_t code, uint8_t dst, uint8_t src, int16_t off, int32_t imm)
{
    struct mks_insn in;
    in.code = code;
    in.regs = (uint8_t)(dst | (src << 4));
    in.off = off;
    in.imm = imm;
    return in;
}

#define ALU64K(op, d, imm)  I(MKS_BPF_ALU64 | MKS_BPF_K | (op), d, 0, 0, imm)
#define ALU64X(op, d, s)    I(MKS_BPF_ALU64 | MKS_BPF_X | (op), d, s, 0, 0)
#define ALU32K(op, d, imm)  I(MKS_BPF_ALU | MKS_BPF_K | (op), d, 0, 0, imm)
#define ALUK(is64, op, d, imm) I((uint8_t)(((is64) ? MKS_BPF_ALU64 : MKS_BPF_ALU) | MKS_BPF_K | (op)), d, 0, 0, imm)
#define MOVK(d, imm)        ALU64K(MKS_BPF_MOV, d, imm)
#define MOVX(d, s)          ALU64X(MKS_BPF_MOV, d, s)
#define LDXM(sz, d, s, off) I(MKS_BPF_LDX | MKS_BPF_MEM | (sz), d, s, off, 0)
#define STXM(sz, d, s, off) I(MKS_BPF_STX | MKS_BPF_MEM | (sz), d, s, off, 0)
#define STM(sz, d, off, im) I(MKS_BPF_ST | MKS_BPF_MEM | (sz), d, 0, off, im)
#define CALLH(id)           I(MKS_BPF_JMP | MKS_BPF_CALL, 0, 0, 0, id)
#define EXITI()             I(MKS_BPF_JMP | MKS_BPF_EXIT, 0, 0, 0, 0)

static const uint8_t szcode[4] = {MKS_BPF_B, MKS_BPF_H, MKS_BPF_W, MKS_BPF_DW};
/* ---- a program and its maps --------------------------------------------- */

struct fz_prog {
    struct mks_insn p[FZ_MAXI];
    uint32_t n;
    uint32_t type;
    int32_t hook;
    struct mks_map_spec maps[FZ_MAXMAPS];
    uint32_t n_maps;
};

static void gen_maps(struct fz_prog *fp)
{
    static const uint32_t vals[] = {4, 8, 12, 16, 24, 32, 40, 64, 100};
    fp->n_maps = 1 + rn(FZ_MAXMAPS);
    for (uint32_t i = 0; i < fp->n_maps; i++) {
        struct mks_map_spec *m = &fp->maps[i];
        memset(m, 0, sizeof(*m));
        switch (rn(9)) {
        case 0:
        case 1:
            snprintf(m->name, sizeof(m->name), "arr%u", i);
            *m = (struct mks_map_spec){.type = MKS_MAP_ARRAY, .key_size = 4, .value_size = vals[rn(9)],
                                       .max_entries = 1u << rn(4)};
            snprintf(m->name, sizeof(m->name), "arr%u", i);
            break;
        case 2:
            *m = (struct mks_map_spec){.type = MKS_MAP_PERWORKER_ARRAY, .key_size = 4, .value_size = 8u << rn(2),
                                       .max_entries = 1 + rn(4)};
            snprintf(m->name, sizeof(m->name), "pw%u", i);
            break;
        case 3:
            *m = (struct mks_map_spec){.type = MKS_MAP_HASH, .key_size = 4u << rn(2), .value_size = 8u << rn(2),
                                       .max_entries = 2u << rn(3)};
            snprintf(m->name, sizeof(m->name), "hash%u", i);
            break;
        case 4:
            *m = (struct mks_map_spec){.type = MKS_MAP_HIST, .key_size = 4, .value_size = sizeof(struct mks_hist),
                                       .max_entries = 1 + rn(3)};
            snprintf(m->name, sizeof(m->name), "hist%u", i);
            break;
        case 5:
            *m = (struct mks_map_spec){.type = MKS_MAP_RINGBUF, .max_entries = 64u << rn(3)};
            snprintf(m->name, sizeof(m->name), "ring%u", i);
            break;
        default: {
            static const char *const g[] = {".rodata", ".data", ".bss"};
            *m = (struct mks_map_spec){.type = MKS_MAP_ARRAY, .key_size = 4, .value_size = 8 * (1 + rn(8)),
                                       .max_entries = 1};
            snprintf(m->name, sizeof(m->name), "%s", g[rn(3)]);
            break;
        }
        }
    }
}

/* ---- the generator ------------------------------------------------------- */

enum { K_NONE, K_SCALAR, K_CTX, K_STACK, K_MAPVAL, K_MAPNULL };

struct kinds {
    uint8_t k[11];
    uint8_t map[11];
    uint8_t slot[64]; /* per 8-byte stack slot: K_NONE (unwritten), K_SCALAR, or a pointer kind */
    uint8_t slotmap[64];
};

struct gen {
    struct fz_prog *fp;
    uint32_t n;
    bool full;
    struct kinds s;
    bool infunc;
    uint32_t calls[32], call_fn[32], n_calls;
    uint32_t n_funcs;
    uint8_t fsig[4];   /* kind of r1 at entry of each subprogram */
    int depth;         /* nested blocks and loops */
    uint16_t protect;  /* registers a loop needs unchanged (counter, bound) */
    uint32_t budget;   /* statements left */
};

static void E(struct gen *g, struct mks_insn in)
{
    if (g->n >= FZ_MAXI - 24) { /* room for the epilogue and subprogram stubs */
        g->full = true;
        return;
    }
    g->fp->p[g->n++] = in;
}

static void E2(struct gen *g, uint8_t dst, uint8_t src, int32_t lo, int32_t hi)
{
    if (g->n >= FZ_MAXI - 25) {
        g->full = true;
        return;
    }
    g->fp->p[g->n++] = I(MKS_BPF_LD | MKS_BPF_IMM | MKS_BPF_DW, dst, src, 0, lo);
    g->fp->p[g->n++] = I(0, 0, 0, 0, hi);
}

static bool is_control(const struct gen *g)
{
    return g->fp->type == MKS_PROG_CONTROL;
}

/* Scratch registers hold short-lived values; r6 the context (main), r7 and
 * r8 long-lived scalars, r9 a pointer. */
static const uint8_t scratch[] = {0, 2, 3, 4, 5};

static int find_kind(const struct gen *g, uint8_t kind)
{
    int found[11], n = 0;
    for (int r = 0; r <= 9; r++)
        if (g->s.k[r] == kind)
            found[n++] = r;
    return n ? found[rn((uint32_t)n)] : -1;
}

/* A scratch register other than a and b. */
static uint8_t pick_free(const struct gen *g, uint8_t a, uint8_t b)
{
    (void)g;
    for (;;) {
        uint8_t r = scratch[rn(5)];
        if (r != a && r != b)
            return r;
    }
}

static uint8_t any_scalar(struct gen *g, uint8_t fallback)
{
    int r = find_kind(g, K_SCALAR);
    return r >= 0 ? (uint8_t)r : fallback;
}

static void clobber_call(struct gen *g)
{
    for (int r = 1; r <= 5; r++)
        g->s.k[r] = K_NONE;
    g->s.k[0] = K_SCALAR;
}

/* Context fields of v1: offset and size. */
static const uint8_t ctx_fields[][2] = {{0, 2},  {2, 2},  {4, 2},  {6, 2},  {8, 4},  {12, 4}, {16, 4}, {20, 4},
                                        {24, 8}, {32, 8}, {40, 4}, {44, 4}, {48, 4}, {52, 4}, {56, 8}, {64, 8},
                                        {72, 4}, {76, 4}, {80, 8}, {88, 8}, {96, 8}, {104, 8}, {112, 8}};
#define N_CTX_FIELDS (sizeof(ctx_fields) / sizeof(ctx_fields[0]))

static uint8_t size_code(uint32_t bytes)
{
    return bytes == 1 ? MKS_BPF_B : bytes == 2 ? MKS_BPF_H : bytes == 4 ? MKS_BPF_W : MKS_BPF_DW;
}

static void gen_alu(struct gen *g, uint8_t dst)
{
    static const uint8_t ops[] = {MKS_BPF_ADD, MKS_BPF_SUB, MKS_BPF_MUL, MKS_BPF_DIV,  MKS_BPF_OR,
                                  MKS_BPF_AND, MKS_BPF_LSH, MKS_BPF_RSH, MKS_BPF_MOD,  MKS_BPF_XOR,
                                  MKS_BPF_MOV, MKS_BPF_ARSH, MKS_BPF_NEG, MKS_BPF_END, MKS_BPF_LSH,
                                  MKS_BPF_RSH, MKS_BPF_ARSH, MKS_BPF_AND};
    uint8_t op = ops[rn(sizeof(ops))];
    bool is64 = chance(50);
    uint8_t cls = is64 ? MKS_BPF_ALU64 : MKS_BPF_ALU;
    int w = is64 ? 64 : 32;
    int src = find_kind(g, K_SCALAR);
    bool x = src >= 0 && chance(55);
    int16_t off = 0;
    int32_t imm = 0;

    if (op == MKS_BPF_NEG) {
        E(g, I(cls | MKS_BPF_NEG, dst, 0, 0, 0));
        return;
    }
    if (op == MKS_BPF_END) {
        static const int32_t bits[] = {16, 32, 64};
        if (is64)
            E(g, I(MKS_BPF_ALU64 | MKS_BPF_K | MKS_BPF_END, dst, 0, 0, bits[rn(3)]));
        else
            E(g, I(MKS_BPF_ALU | (chance(50) ? MKS_BPF_X : MKS_BPF_K) | MKS_BPF_END, dst, 0, 0, bits[rn(3)]));
        return;
    }
    if ((op == MKS_BPF_DIV || op == MKS_BPF_MOD) && chance(40))
        off = 1; /* sdiv, smod */
    if (op == MKS_BPF_MOV && x && chance(40)) {
        static const int16_t sx[] = {8, 16, 32};
        off = sx[rn(is64 ? 3 : 2)];
    }
    if (x) {
        if ((op == MKS_BPF_LSH || op == MKS_BPF_RSH || op == MKS_BPF_ARSH) && chance(50)) {
            /* a count from a register: masked for this width, for 64, or not */
            uint8_t c = (uint8_t)src;
            if (chance(30) && !(g->protect & (1u << c)) && c != dst) {
                /* a register holding a constant count, in or past the width */
                E(g, MOVK(c, (int32_t)rn(64)));
            } else if (chance(70) && !(g->protect & (1u << c))) {
                E(g, ALUK(chance(50), MKS_BPF_AND, c, chance(50) ? w - 1 : 63));
                if (chance(30))
                    E(g, ALU64K(MKS_BPF_ADD, c, (int32_t)rn(40)));
            }
        }
        E(g, I(cls | MKS_BPF_X | op, dst, (uint8_t)src, off, 0));
        return;
    }
    if (op == MKS_BPF_LSH || op == MKS_BPF_RSH || op == MKS_BPF_ARSH)
        imm = chance(95) ? (int32_t)rn((uint32_t)w) : some_imm();
    else if (op == MKS_BPF_DIV || op == MKS_BPF_MOD)
        imm = chance(95) ? (int32_t)(1 + rn(64)) * (chance(20) ? -1 : 1) : some_imm();
    else
        imm = some_imm();
    E(g, I(cls | MKS_BPF_K | op, dst, 0, off, imm));
}

/* dst becomes a scalar. */
static void gen_value(struct gen *g, uint8_t dst, int chain)
{
    int ctx = find_kind(g, K_CTX), pv = find_kind(g, K_MAPVAL);
    switch (rn(8)) {
    case 0:
        E(g, MOVK(dst, some_imm()));
        break;
    case 1: {
        uint64_t v = some64();
        E2(g, dst, 0, (int32_t)(uint32_t)v, (int32_t)(uint32_t)(v >> 32));
        break;
    }
    case 2:
    case 3:
    case 4:
        if (ctx >= 0) {
            uint32_t f = rn(N_CTX_FIELDS);
            uint32_t sz = ctx_fields[f][1], off = ctx_fields[f][0];
            if (sz > 1 && chance(30)) { /* a narrower aligned read of the field */
                sz >>= 1 + rn(sz == 8 ? 2 : 1);
                off += sz * rn(ctx_fields[f][1] / sz);
            }
            E(g, LDXM(size_code(sz), dst, (uint8_t)ctx, (int16_t)off));
            if (chance(15))
                E(g, I(MKS_BPF_LDX | MKS_BPF_MEMSX | size_code(sz == 8 ? 4 : sz), dst, (uint8_t)ctx, (int16_t)off, 0));
        } else {
            E(g, MOVK(dst, some_imm()));
        }
        break;
    case 5: {
        int s = find_kind(g, K_SCALAR);
        if (s >= 0)
            E(g, chance(60) ? MOVX(dst, (uint8_t)s) : I(MKS_BPF_ALU | MKS_BPF_X | MKS_BPF_MOV, dst, (uint8_t)s, 0, 0));
        else
            E(g, MOVK(dst, some_imm()));
        break;
    }
    case 6: {
        int slots[64], ns = 0;
        for (int k = 0; k < 64; k++)
            if (g->s.slot[k] == K_SCALAR)
                slots[ns++] = k;
        if (ns) {
            int k = slots[rn((uint32_t)ns)];
            uint32_t sz = 1u << rn(4);
            E(g, LDXM(size_code(sz), dst, 10, (int16_t)(-8 * (k + 1) + (int)(rn(8 / sz) * sz))));
        } else {
            E(g, MOVK(dst, some_imm()));
        }
        break;
    }
    default:
        if (pv >= 0) {
            uint32_t vs = g->fp->maps[g->s.map[pv]].value_size, sz = 1u << rn(4);
            while (sz > vs)
                sz >>= 1;
            E(g, LDXM(size_code(sz), dst, (uint8_t)pv, (int16_t)rn(vs - sz + 1)));
        } else {
            E(g, MOVK(dst, some_imm()));
        }
        break;
    }
    g->s.k[dst] = K_SCALAR;
    for (int k = 0; k < chain; k++)
        gen_alu(g, dst);
}

/* ---- blocks: a forward jump over generated code ------------------------- */

struct block {
    uint32_t at[2]; /* the jumps to the end of the block */
    uint32_t n_at;
    struct kinds before;
};

static void block_open(struct gen *g, struct block *b, struct mks_insn jcc)
{
    b->n_at = 0;
    b->before = g->s;
    if (!g->full)
        b->at[b->n_at++] = g->n;
    E(g, jcc);
    g->depth++;
}

/* A second jump to the same end. */
static void block_also(struct gen *g, struct block *b, struct mks_insn jcc)
{
    if (!g->full && b->n_at < 2)
        b->at[b->n_at++] = g->n;
    E(g, jcc);
}

/* Registers and slots that differ between the two ways to here become
 * unknown to the generator (the verifier keeps both). */
static void block_merge(struct gen *g, const struct kinds *before)
{
    for (int r = 0; r <= 9; r++)
        if (g->s.k[r] != before->k[r] || (g->s.k[r] >= K_MAPVAL && g->s.map[r] != before->map[r]))
            g->s.k[r] = K_NONE;
    for (int k = 0; k < 64; k++)
        if (g->s.slot[k] != before->slot[k] || g->s.slotmap[k] != before->slotmap[k])
            g->s.slot[k] = g->s.slot[k] != K_NONE && before->slot[k] != K_NONE && g->s.slot[k] == K_SCALAR &&
                                   before->slot[k] == K_SCALAR
                               ? K_SCALAR
                               : K_NONE;
}

static void block_close(struct gen *g, struct block *b)
{
    for (uint32_t k = 0; k < b->n_at; k++)
        g->fp->p[b->at[k]].off = (int16_t)(g->n - b->at[k] - 1);
    block_merge(g, &b->before);
    g->depth--;
}

static struct mks_insn random_jcc(struct gen *g, uint8_t a)
{
    static const uint8_t ops[] = {MKS_BPF_JEQ, MKS_BPF_JGT, MKS_BPF_JGE, MKS_BPF_JSET, MKS_BPF_JNE, MKS_BPF_JSGT,
                                  MKS_BPF_JSGE, MKS_BPF_JLT, MKS_BPF_JLE, MKS_BPF_JSLT, MKS_BPF_JSLE};
    uint8_t cls = chance(30) ? MKS_BPF_JMP32 : MKS_BPF_JMP;
    int b = find_kind(g, K_SCALAR);
    if (b >= 0 && chance(40))
        return I(cls | MKS_BPF_X | ops[rn(sizeof(ops))], a, (uint8_t)b, 0, 0);
    return I(cls | MKS_BPF_K | ops[rn(sizeof(ops))], a, 0, 0, chance(70) ? (int32_t)rn(130) - 2 : some_imm());
}

/* ---- statements ---------------------------------------------------------- */

static void gen_stmt(struct gen *g);

/* dst = an offset meant to lie in [0, lim); the check may open a block that
 * the caller closes after the access (*b set, returns true). */
static bool gen_offset(struct gen *g, uint8_t dst, uint32_t lim, struct block *b)
{
    gen_value(g, dst, (int)rn(3));
    switch (rn(7)) {
    case 0: { /* mask to a power of two */
        uint32_t m = 1;
        while (m * 2 <= lim)
            m *= 2;
        if (chance(15))
            m *= 2;
        E(g, ALUK(chance(50), MKS_BPF_AND, dst, (int32_t)(m - 1)));
        if (chance(40))
            gen_alu(g, dst);
        return false;
    }
    case 1: /* unsigned modulo */
        E(g, ALUK(chance(50), MKS_BPF_MOD, dst, (int32_t)(lim + (chance(10) ? 1 : 0))));
        return false;
    case 2:
    case 3: { /* if (dst > lim - 1) skip, unsigned or signed (then also if (dst < 0)) */
        uint8_t cls = chance(35) ? MKS_BPF_JMP32 : MKS_BPF_JMP;
        uint8_t op = chance(70) ? MKS_BPF_JGT : MKS_BPF_JSGT;
        block_open(g, b, I(cls | MKS_BPF_K | op, dst, 0, 0, (int32_t)lim - 1 + (chance(10) ? 1 : 0)));
        if (op == MKS_BPF_JSGT && chance(90))
            block_also(g, b, I((chance(80) ? cls : (cls ^ MKS_BPF_JMP ^ MKS_BPF_JMP32)) | MKS_BPF_K | MKS_BPF_JSLT,
                               dst, 0, 0, 0));
        if (chance(30))
            gen_alu(g, dst); /* arithmetic after the check */
        return true;
    }
    case 4: /* a shift that the check must see through */
        E(g, ALU32K(MKS_BPF_AND, dst, 63));
        E(g, I(MKS_BPF_ALU | MKS_BPF_X | (chance(50) ? MKS_BPF_RSH : MKS_BPF_LSH), dst, dst, 0, 0));
        E(g, ALU64K(MKS_BPF_AND, dst, (int32_t)(lim ? lim - 1 : 0)));
        return false;
    default:
        if (chance(50))
            E(g, ALU64K(MKS_BPF_AND, dst, (int32_t)rn(lim + 1)));
        return false;
    }
}

/* An access through a pointer to map m's value in register p. */
static void gen_access(struct gen *g, uint8_t p, uint32_t m)
{
    const struct mks_map_spec *ms = &g->fp->maps[m];
    uint32_t vs = ms->value_size, sz = 1u << rn(4);
    bool ro = strcmp(ms->name, ".rodata") == 0 || is_control(g);
    while (sz > vs)
        sz >>= 1;
    uint8_t q = p;
    struct block b;
    bool blk = false;
    if (chance(55)) { /* a variable offset */
        uint8_t off = pick_free(g, p, p);
        blk = gen_offset(g, off, vs - sz + 1, &b);
        q = pick_free(g, p, off);
        E(g, MOVX(q, p));
        E(g, ALU64X(chance(90) ? MKS_BPF_ADD : MKS_BPF_SUB, q, off));
        g->s.k[q] = K_MAPVAL;
        g->s.map[q] = (uint8_t)m;
    }
    int16_t off = (int16_t)(q == p ? rn(vs - sz + 1) : 0);
    if (chance(5))
        off = (int16_t)(chance(50) ? (int)(vs - sz + 1 + rn(8)) : -(int)rn(8) - 1);
    uint8_t v = pick_free(g, p, q);
    switch (ro ? 0 : rn(5)) {
    case 0:
        E(g, LDXM(size_code(sz), v, q, off));
        g->s.k[v] = K_SCALAR;
        break;
    case 1: {
        uint8_t s = any_scalar(g, 7);
        if (g->s.k[s] != K_SCALAR) {
            E(g, MOVK(s, some_imm()));
            g->s.k[s] = K_SCALAR;
        }
        E(g, STXM(size_code(sz), q, s, off));
        break;
    }
    case 2:
        E(g, STM(size_code(sz), q, off, some_imm()));
        break;
    case 3: { /* atomic */
        static const int32_t aops[] = {MKS_BPF_ADD, MKS_BPF_OR, MKS_BPF_AND, MKS_BPF_XOR,
                                       MKS_BPF_ADD | MKS_BPF_FETCH, MKS_BPF_XCHG, MKS_BPF_CMPXCHG};
        uint32_t asz = vs >= 8 && chance(50) ? 8 : 4;
        if (vs < 4)
            break;
        int16_t aoff = (int16_t)(q == p ? asz * rn((vs - asz) / asz + 1) : 0);
        uint8_t s = any_scalar(g, 7);
        if (g->s.k[s] != K_SCALAR) {
            E(g, MOVK(s, 1));
            g->s.k[s] = K_SCALAR;
        }
        int32_t aop = aops[rn(sizeof(aops) / sizeof(aops[0]))];
        if (aop == MKS_BPF_CMPXCHG && g->s.k[0] != K_SCALAR) {
            if (q == 0 || p == 0)
                break;
            E(g, MOVK(0, 0));
            g->s.k[0] = K_SCALAR;
        }
        E(g, I(MKS_BPF_STX | MKS_BPF_ATOMIC | (asz == 8 ? MKS_BPF_DW : MKS_BPF_W), q, s, aoff, aop));
        if (aop == MKS_BPF_CMPXCHG)
            g->s.k[0] = K_SCALAR;
        break;
    }
    default: { /* a misuse now and then: a pointer stored */
        if (chance(20)) {
            E(g, STXM(MKS_BPF_DW, q, (uint8_t)(chance(50) ? 6 : 10), off));
        } else {
            E(g, LDXM(size_code(sz), v, q, off));
            g->s.k[v] = K_SCALAR;
        }
        break;
    }
    }
    if (blk)
        block_close(g, &b);
}

/* Key bytes of map m at fp-off..: constants or masked scalars. */
static int16_t gen_key(struct gen *g, uint32_t m)
{
    const struct mks_map_spec *ms = &g->fp->maps[m];
    uint32_t ks = ms->key_size ? ms->key_size : 4, slots = (ks + 7) / 8;
    int i0 = (int)slots - 1 + (int)rn(64 - slots + 1); /* slot i is fp-8(i+1)..fp-8i */
    int16_t off = (int16_t)(-8 * (i0 + 1));
    for (uint32_t k = 0; k < slots; k++) {
        E(g, STM(MKS_BPF_DW, 10, (int16_t)(off + 8 * (int)k), 0));
        g->s.slot[i0 - (int)k] = K_SCALAR;
    }
    if (chance(40)) {
        uint8_t s = any_scalar(g, 7);
        if (g->s.k[s] == K_SCALAR) {
            if (chance(70))
                E(g, ALU64K(MKS_BPF_AND, s, (int32_t)(ms->max_entries * 2 - 1)));
            E(g, STXM(MKS_BPF_W, 10, s, off));
            return off;
        }
    }
    E(g, STM(MKS_BPF_W, 10, off, (int32_t)rn(ms->max_entries + 2)));
    return off;
}

static int pick_map(const struct gen *g, int want_ring)
{
    int c[FZ_MAXMAPS], n = 0;
    for (uint32_t i = 0; i < g->fp->n_maps; i++)
        if ((g->fp->maps[i].type == MKS_MAP_RINGBUF) == (want_ring != 0))
            c[n++] = (int)i;
    return n ? c[rn((uint32_t)n)] : -1;
}

static bool is_global(const struct mks_map_spec *m)
{
    return m->name[0] == '.';
}

/* lookup; if (r0) { accesses } */
static void gen_map_block(struct gen *g)
{
    int m = pick_map(g, 0);
    if (m < 0)
        return;
    int16_t koff = gen_key(g, (uint32_t)m);
    E2(g, 1, MKS_PSEUDO_MAP_IDX, m, 0);
    E(g, MOVX(2, 10));
    E(g, ALU64K(MKS_BPF_ADD, 2, koff));
    E(g, CALLH(MKS_HELPER_MAP_LOOKUP));
    clobber_call(g);
    g->s.k[0] = K_MAPNULL;
    g->s.map[0] = (uint8_t)m;
    if (chance(3)) { /* no null check */
        gen_access(g, 0, (uint32_t)m);
        return;
    }
    struct block b;
    block_open(g, &b, I(MKS_BPF_JMP | MKS_BPF_K | MKS_BPF_JEQ, 0, 0, 0, 0));
    g->s.k[0] = K_MAPVAL;
    uint8_t p = 0;
    if (chance(50) && g->depth < 3) {
        E(g, MOVX(9, 0));
        g->s.k[9] = K_MAPVAL;
        g->s.map[9] = (uint8_t)m;
        p = 9;
    }
    for (uint32_t k = 1 + rn(3); k > 0 && !g->full; k--) {
        if (g->s.k[p] != K_MAPVAL)
            break;
        gen_access(g, p, (uint32_t)m);
        if (chance(25) && g->budget > 0) {
            g->budget--;
            gen_stmt(g);
        }
    }
    if (chance(20) && g->s.k[p] == K_MAPVAL) { /* spill the pointer and fill it back */
        int slot = (int)rn(64);
        E(g, STXM(MKS_BPF_DW, 10, p, (int16_t)(-8 * (slot + 1))));
        g->s.slot[slot] = K_MAPVAL;
        g->s.slotmap[slot] = (uint8_t)m;
        E(g, LDXM(chance(90) ? MKS_BPF_DW : MKS_BPF_W, 4, 10, (int16_t)(-8 * (slot + 1))));
        g->s.k[4] = K_MAPVAL;
        g->s.map[4] = (uint8_t)m;
        gen_access(g, 4, (uint32_t)m);
    }
    block_close(g, &b);
}

/* Direct access to a global-data map: r = &value + off. */
static void gen_global_block(struct gen *g)
{
    int c[FZ_MAXMAPS], n = 0;
    for (uint32_t i = 0; i < g->fp->n_maps; i++)
        if (is_global(&g->fp->maps[i]))
            c[n++] = (int)i;
    if (!n) {
        gen_map_block(g);
        return;
    }
    int m = c[rn((uint32_t)n)];
    uint8_t p = chance(50) ? 9 : 3;
    E2(g, p, MKS_PSEUDO_MAP_IDX_VALUE, m, 0);
    g->s.k[p] = K_MAPVAL;
    g->s.map[p] = (uint8_t)m;
    gen_access(g, p, (uint32_t)m);
}

/* Initialised stack bytes for a helper's buffer; returns the fp offset. */
static int16_t gen_stack_buf(struct gen *g, uint32_t bytes)
{
    uint32_t slots = (bytes + 7) / 8;
    if (slots > 48)
        slots = 48;
    int i0 = (int)slots - 1 + (int)rn(64 - slots + 1);
    int16_t off = (int16_t)(-8 * (i0 + 1));
    for (uint32_t k = 0; k < slots; k++) {
        uint8_t s = any_scalar(g, 0xff);
        if (s != 0xff && chance(50))
            E(g, STXM(MKS_BPF_DW, 10, s, (int16_t)(off + 8 * (int)k)));
        else
            E(g, STM(MKS_BPF_DW, 10, (int16_t)(off + 8 * (int)k), some_imm()));
        g->s.slot[i0 - (int)k] = K_SCALAR;
    }
    return off;
}

static void gen_helper(struct gen *g)
{
    static const int32_t plain[] = {MKS_HELPER_TIME_NS, MKS_HELPER_WORKER_ID, MKS_HELPER_SM_ID, MKS_HELPER_RANK};
    uint32_t what = is_control(g) ? 0 : rn(5);
    if (what == 0 || g->fp->n_maps == 0) {
        E(g, CALLH(plain[chance(20) ? 0 : 1 + rn(3)]));
        clobber_call(g);
        return;
    }
    if (what == 4) { /* ring buffer output */
        int m = pick_map(g, 1);
        if (m < 0)
            return;
        uint32_t half = g->fp->maps[m].max_entries / 2;
        uint32_t want = 1 + rn(half < 48 ? half : 48);
        int16_t off = gen_stack_buf(g, want);
        if (chance(50)) {
            E(g, MOVK(3, (int32_t)want));
        } else { /* a computed size: (x & 31) + 1, or x % n + 1 */
            gen_value(g, 3, (int)rn(2));
            uint32_t m2 = 1;
            while (m2 * 2 <= want)
                m2 *= 2;
            E(g, chance(50) ? ALU64K(MKS_BPF_AND, 3, (int32_t)(m2 - 1)) : ALU64K(MKS_BPF_MOD, 3, (int32_t)want));
            E(g, ALU64K(MKS_BPF_ADD, 3, chance(95) ? 1 : 0));
        }
        E2(g, 1, MKS_PSEUDO_MAP_IDX, m, 0);
        E(g, MOVX(2, 10));
        E(g, ALU64K(MKS_BPF_ADD, 2, off));
        E(g, MOVK(4, 0));
        E(g, CALLH(MKS_HELPER_RINGBUF_OUTPUT));
        clobber_call(g);
        return;
    }
    int m = pick_map(g, 0);
    if (m < 0)
        return;
    const struct mks_map_spec *ms = &g->fp->maps[m];
    if (what == 3 && ms->type != MKS_MAP_HIST)
        what = 1;
    int16_t koff = gen_key(g, (uint32_t)m);
    if (what == 1 && (ms->type == MKS_MAP_HIST || is_global(ms)))
        what = 2;
    if (what == 1) { /* update from a stack value */
        int16_t voff = gen_stack_buf(g, ms->value_size);
        E(g, MOVX(3, 10));
        E(g, ALU64K(MKS_BPF_ADD, 3, voff));
        E(g, MOVK(4, (int32_t)rn(3)));
    } else if (what == 3) {
        gen_value(g, 3, (int)rn(2));
    }
    E2(g, 1, MKS_PSEUDO_MAP_IDX, m, 0);
    E(g, MOVX(2, 10));
    E(g, ALU64K(MKS_BPF_ADD, 2, koff));
    E(g, CALLH(what == 1 ? MKS_HELPER_MAP_UPDATE : what == 3 ? MKS_HELPER_HIST_ADD : MKS_HELPER_MAP_DELETE));
    clobber_call(g);
}

static void gen_stack(struct gen *g)
{
    int slot = (int)rn(64);
    int16_t off = (int16_t)(-8 * (slot + 1));
    switch (rn(5)) {
    case 0: {
        uint8_t s = any_scalar(g, 0xff);
        if (s == 0xff)
            break;
        E(g, STXM(MKS_BPF_DW, 10, s, off));
        g->s.slot[slot] = K_SCALAR;
        break;
    }
    case 1: { /* a narrow store: the slot stays data */
        uint32_t sz = 1u << rn(3);
        E(g, STM(size_code(sz), 10, (int16_t)(off + (int)(rn(8 / sz) * sz)), some_imm()));
        if (g->s.slot[slot] != K_SCALAR)
            g->s.slot[slot] = chance(1) ? K_SCALAR : K_NONE; /* partly written */
        break;
    }
    case 2: { /* spill a pointer */
        int p = chance(50) ? 6 : find_kind(g, K_MAPVAL);
        if (p < 0 || g->s.k[p] < K_CTX)
            p = 10;
        E(g, STXM(MKS_BPF_DW, 10, (uint8_t)p, off));
        g->s.slot[slot] = p == 10 ? K_STACK : g->s.k[p];
        g->s.slotmap[slot] = g->s.map[p];
        break;
    }
    case 3: { /* fill */
        int slots[64], ns = 0;
        for (int k = 0; k < 64; k++)
            if (g->s.slot[k] != K_NONE)
                slots[ns++] = k;
        if (!ns)
            break;
        int k = slots[rn((uint32_t)ns)];
        uint8_t d = chance(50) ? scratch[rn(5)] : (uint8_t)(7 + rn(3));
        if (g->protect & (1u << d))
            d = 0;
        E(g, LDXM(chance(92) ? MKS_BPF_DW : szcode[rn(3)], d, 10, (int16_t)(-8 * (k + 1))));
        g->s.k[d] = g->s.slot[k] == K_STACK ? K_NONE : g->s.slot[k];
        g->s.map[d] = g->s.slotmap[k];
        if (g->s.k[d] != K_SCALAR && g->s.k[d] != K_CTX && g->s.k[d] != K_MAPVAL)
            g->s.k[d] = K_NONE;
        break;
    }
    default:
        gen_value(g, scratch[rn(5)], 1 + (int)rn(3));
        break;
    }
}

static void gen_loop(struct gen *g)
{
    if (g->depth >= 2)
        return;
    uint8_t c = chance(50) ? 7 : 8, bound = c == 7 ? 8 : 7;
    bool regbound = chance(40) && find_kind(g, K_CTX) >= 0;
    if (regbound) {
        int ctx = find_kind(g, K_CTX);
        E(g, LDXM(MKS_BPF_W, bound, (uint8_t)ctx, (int16_t)(4 * rn(30))));
        E(g, ALU64K(MKS_BPF_AND, bound, (int32_t)(chance(90) ? (1u << (1 + rn(4))) - 1 : 0x7fff)));
        g->s.k[bound] = K_SCALAR;
    }
    E(g, MOVK(c, (int32_t)rn(3)));
    g->s.k[c] = K_SCALAR;
    struct kinds before = g->s;
    uint32_t top = g->n;
    uint16_t saved_protect = g->protect;
    g->protect |= (uint16_t)((1u << c) | (1u << bound));
    g->depth++;
    /* the body must leave c and the bound alone */
    for (uint32_t k = 1 + rn(2); k > 0 && !g->full; k--) {
        if (chance(40)) {
            gen_value(g, scratch[rn(5)], 1 + (int)rn(2));
        } else if (chance(50)) {
            gen_map_block(g);
        } else {
            uint8_t d = scratch[rn(5)];
            E(g, MOVX(d, c));
            g->s.k[d] = K_SCALAR;
            gen_alu(g, d);
        }
    }
    g->s.k[c] = K_SCALAR;
    g->s.k[bound] = regbound ? K_SCALAR : g->s.k[bound];
    E(g, ALU64K(MKS_BPF_ADD, c, (int32_t)(1 + rn(chance(95) ? 3 : 1))));
    if (regbound)
        E(g, I(MKS_BPF_JMP | MKS_BPF_X | (chance(80) ? MKS_BPF_JLT : MKS_BPF_JLE), c, bound, 0, 0));
    else
        E(g, I((chance(80) ? MKS_BPF_JMP : MKS_BPF_JMP32) | MKS_BPF_K | (chance(70) ? MKS_BPF_JLT : MKS_BPF_JSLT), c,
               0, 0, (int32_t)(2 + rn(chance(95) ? 20 : 300))));
    if (!g->full)
        g->fp->p[g->n - 1].off = (int16_t)((int32_t)top - (int32_t)g->n);
    g->depth--;
    g->protect = saved_protect;
    block_merge(g, &before);
}

static void gen_call(struct gen *g)
{
    if (g->infunc || g->n_calls >= 32)
        return;
    uint32_t fn = g->n_funcs < 2 && (g->n_funcs == 0 || chance(50)) ? g->n_funcs++ : rn(g->n_funcs);
    if (fn == g->n_funcs - 1 && g->fsig[fn] == 0)
        g->fsig[fn] = (uint8_t)(chance(50) ? K_CTX : chance(50) ? K_STACK : K_SCALAR);
    switch (g->fsig[fn]) {
    case K_CTX: E(g, MOVX(1, 6)); break;
    case K_STACK: {
        int16_t off = gen_stack_buf(g, 8);
        E(g, MOVX(1, 10));
        E(g, ALU64K(MKS_BPF_ADD, 1, off));
        break;
    }
    default: gen_value(g, 1, 1); break;
    }
    gen_value(g, 2, (int)rn(2));
    gen_value(g, 3, 0);
    if (g->full)
        return;
    g->calls[g->n_calls] = g->n;
    g->call_fn[g->n_calls++] = fn;
    E(g, I(MKS_BPF_JMP | MKS_BPF_CALL, 0, MKS_PSEUDO_CALL, 0, 0));
    clobber_call(g);
}

/* A misuse of a pointer, which the verifier must refuse (or prove
 * harmless: the run then checks it did no harm). */
static void gen_misuse(struct gen *g)
{
    int p = find_kind(g, K_MAPVAL);
    uint8_t ptr = p >= 0 && chance(50) ? (uint8_t)p : chance(50) ? 6 : 10;
    uint8_t s = scratch[1 + rn(4)];
    switch (rn(10)) {
    case 0:
    case 1: { /* a bit of the address into a register that reaches r0 or a map */
        uint8_t d = (g->protect & (1u << 8)) ? 0 : 8;
        static const uint8_t ops[] = {MKS_BPF_JSET, MKS_BPF_JGT, MKS_BPF_JSLT, MKS_BPF_JEQ, MKS_BPF_JNE};
        E(g, MOVK(d, 0));
        uint8_t op = ops[rn(sizeof(ops))];
        uint8_t cls = chance(30) ? MKS_BPF_JMP32 : MKS_BPF_JMP;
        E(g, I(cls | MKS_BPF_K | op, ptr, 0, 1, op == MKS_BPF_JSET ? (int32_t)(1u << rn(31)) : (int32_t)some64()));
        E(g, MOVK(d, 1));
        g->s.k[d] = K_SCALAR;
        break;
    }
    case 2:
        E(g, MOVX(s, ptr));
        E(g, ALU64K(MKS_BPF_RSH, s, (int32_t)rn(64)));
        g->s.k[s] = K_NONE;
        break;
    case 3:
        E(g, I(MKS_BPF_ALU | MKS_BPF_X | MKS_BPF_MOV, s, ptr, 0, 0));
        g->s.k[s] = K_SCALAR;
        break;
    case 4:
        E(g, MOVX(s, ptr));
        E(g, ALU64X(MKS_BPF_SUB, s, 10));
        g->s.k[s] = K_SCALAR;
        break;
    case 5: E(g, I(MKS_BPF_JMP | MKS_BPF_X | MKS_BPF_JEQ, any_scalar(g, 0), ptr, 0, 0)); break;
    case 6: E(g, STXM(MKS_BPF_W, 10, ptr, -8 * (1 + (int)rn(64)))); break;
    case 7: E(g, I(MKS_BPF_JMP32 | MKS_BPF_K | MKS_BPF_JEQ, ptr, 0, 0, 0)); break;
    default:
        E(g, MOVX(s, ptr));
        E(g, ALU64K(MKS_BPF_AND, s, 0xfff));
        g->s.k[s] = K_NONE;
        break;
    }
}

static void gen_stmt(struct gen *g)
{
    if (g->full)
        return;
    uint32_t r = rn(100);
    if (r < 22) {
        uint8_t d = chance(70) ? scratch[rn(5)] : (uint8_t)(7 + rn(2));
        gen_value(g, (g->protect & (1u << d)) ? 0 : d, (int)rn(5));
    } else if (r < 42) {
        gen_map_block(g);
    } else if (r < 49) {
        gen_global_block(g);
    } else if (r < 59) {
        gen_helper(g);
    } else if (r < 71) {
        int a = find_kind(g, K_SCALAR);
        if (a < 0 || g->depth >= 4)
            return;
        struct block b;
        block_open(g, &b, random_jcc(g, (uint8_t)a));
        for (uint32_t k = 1 + rn(3); k > 0 && g->budget > 0; k--) {
            g->budget--;
            gen_stmt(g);
        }
        block_close(g, &b);
    } else if (r < 78) {
        gen_loop(g);
    } else if (r < 88) {
        gen_stack(g);
    } else if (r < 95) {
        gen_call(g);
    } else if (r < 97) {
        gen_misuse(g);
    } else {
        gen_value(g, scratch[rn(5)], 1 + (int)rn(6));
    }
}

/* r0 = the result: any scalar for OBSERVE, a bounded hint for CONTROL. */
static void gen_epilogue(struct gen *g, bool sub)
{
    uint8_t s = any_scalar(g, 0xff);
    if (s == 0xff || chance(30)) {
        gen_value(g, 0, (int)rn(3));
        s = 0;
    }
    if (s != 0)
        E(g, MOVX(0, s));
    if (!sub && is_control(g)) {
        switch (rn(6)) {
        case 0: E(g, ALU64K(MKS_BPF_AND, 0, MKS_PRIO_HINT_MAX)); break;
        case 1: E(g, ALU32K(MKS_BPF_MOD, 0, MKS_PRIO_HINT_MAX + 1)); break;
        case 2:
            E(g, I(MKS_BPF_JMP | MKS_BPF_K | MKS_BPF_JLE, 0, 0, 1, MKS_PRIO_HINT_MAX));
            E(g, MOVK(0, MKS_PRIO_HINT_MAX));
            break;
        case 3:
            E(g, ALU32K(MKS_BPF_RSH, 0, 28));
            break;
        case 4:
            gen_alu(g, 0);
            E(g, ALU32K(MKS_BPF_AND, 0, 7 + (chance(90) ? 0 : 8)));
            break;
        default: break; /* unbounded: mostly refused */
        }
    }
    if (chance(1))
        E(g, MOVX(0, 6)); /* a pointer returned */
    E(g, EXITI());
}

static void gen_prog(struct fz_prog *fp)
{
    static struct gen g;
    memset(&g, 0, sizeof(g));
    g.fp = fp;
    fp->type = chance(20) ? MKS_PROG_CONTROL : MKS_PROG_OBSERVE;
    fp->hook = fp->type == MKS_PROG_CONTROL ? (chance(50) ? MKS_EV_TASK_READY : MKS_EV_TASK_ASSIGN)
                                            : (int32_t)rn(MKS_EV_COUNT);
    gen_maps(fp);
    g.s.k[1] = K_CTX;
    g.s.k[10] = K_STACK;
    E(&g, MOVX(6, 1));
    g.s.k[6] = K_CTX;
    gen_value(&g, 7, (int)rn(2));
    if (chance(70))
        gen_value(&g, 8, (int)rn(2));
    g.budget = 3 + rn(chance(10) ? 40 : 14);
    while (g.budget > 0 && !g.full) {
        g.budget--;
        gen_stmt(&g);
    }
    g.full = false;
    gen_epilogue(&g, false);
    /* subprograms: r1 as the signature says, r2 and r3 scalars */
    uint32_t entry[2] = {0, 0};
    for (uint32_t f = 0; f < g.n_funcs; f++) {
        entry[f] = g.n;
        memset(&g.s, 0, sizeof(g.s));
        g.infunc = true;
        g.s.k[1] = g.fsig[f] ? g.fsig[f] : K_SCALAR;
        g.s.k[2] = g.s.k[3] = K_SCALAR;
        g.s.k[10] = K_STACK;
        if (g.s.k[1] == K_CTX) {
            E(&g, MOVX(6, 1));
            g.s.k[6] = K_CTX;
        } else if (g.s.k[1] == K_STACK) {
            E(&g, LDXM(MKS_BPF_DW, 7, 1, 0));
            g.s.k[7] = K_SCALAR;
        }
        g.budget = 1 + rn(6);
        g.depth = 0;
        while (g.budget > 0 && !g.full) {
            g.budget--;
            gen_stmt(&g);
        }
        g.full = false;
        gen_epilogue(&g, true);
    }
    for (uint32_t c = 0; c < g.n_calls; c++)
        fp->p[g.calls[c]].imm = (int32_t)entry[g.call_fn[c]] - (int32_t)g.calls[c] - 1;
    fp->n = g.n;
}

/* A few random changes to an accepted program. */
static void mutate(struct fz_prog *fp)
{
    for (uint32_t k = 1 + rn(3); k > 0; k--) {
        uint32_t i = rn(fp->n);
        struct mks_insn *in = &fp->p[i];
        uint8_t cls = MKS_BPF_CLASS(in->code);
        if (i > 0 && fp->p[i - 1].code == (MKS_BPF_LD | MKS_BPF_IMM | MKS_BPF_DW)) {
            in->imm = (int32_t)(uint32_t)some64(); /* the upper half of a constant */
            continue;
        }
        switch (rn(6)) {
        case 0: in->imm = chance(50) ? some_imm() : (int32_t)((uint32_t)in->imm + rn(3) - 1); break;
        case 1:
            if (cls == MKS_BPF_LDX || cls == MKS_BPF_STX || cls == MKS_BPF_ST)
                in->off = (int16_t)(in->off + (int)rn(17) - 8);
            else if (cls == MKS_BPF_ALU || cls == MKS_BPF_ALU64)
                in->off = (int16_t)(chance(50) ? 0 : chance(50) ? 1 : 8 << rn(3));
            break;
        case 2:
            if (cls == MKS_BPF_ALU || cls == MKS_BPF_ALU64)
                in->code = (uint8_t)((in->code & 0x0f) | (rn(14) << 4));
            else if (cls == MKS_BPF_JMP || cls == MKS_BPF_JMP32)
                if ((in->code & 0xf0) != MKS_BPF_CALL && (in->code & 0xf0) != MKS_BPF_EXIT &&
                    (in->code & 0xf0) != MKS_BPF_JA)
                    in->code = (uint8_t)((in->code & 0x0f) | ((1 + rn(13)) << 4));
            break;
        case 3:
            if (cls == MKS_BPF_ALU || cls == MKS_BPF_ALU64)
                in->code ^= MKS_BPF_ALU ^ MKS_BPF_ALU64;
            else if (cls == MKS_BPF_JMP || cls == MKS_BPF_JMP32)
                if ((in->code & 0xf0) != MKS_BPF_CALL && (in->code & 0xf0) != MKS_BPF_EXIT)
                    in->code ^= MKS_BPF_JMP ^ MKS_BPF_JMP32;
            break;
        case 4:
            if (cls != MKS_BPF_JMP && cls != MKS_BPF_LD)
                in->regs = (uint8_t)(chance(50) ? (in->regs & 0xf0) | rn(10) : (in->regs & 0x0f) | (rn(11) << 4));
            break;
        default:
            if (cls == MKS_BPF_LDX || cls == MKS_BPF_STX || cls == MKS_BPF_ST)
                in->code = (uint8_t)((in->code & ~0x18) | szcode[rn(4)]);
            else if ((cls == MKS_BPF_ALU || cls == MKS_BPF_ALU64) && (in->code & 0xf0) != MKS_BPF_END)
                in->code ^= MKS_BPF_X;
            break;
        }
    }
}

/* ---- the arena ----------------------------------------------------------- */

/* One copy of everything a run may touch, at its own addresses. */
struct world {
    uint8_t *arena; /* FZ_ARENA bytes */
    uint64_t used;
    struct mks_map_desc *descs;
    uint8_t *ctx_region; /* guard, ctx, guard */
    uint8_t *ctx;
    struct mks_maps maps;
};

static struct world wa, wb;
static uint32_t map_ids[FZ_MAXMAPS] = {0, 1, 2, 3, 4, 5};
static uint8_t *init_image; /* the arena's initial contents */

static void *map_at(uint64_t hint, size_t len)
{
    void *p = mmap((void *)(uintptr_t)hint, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(2);
    }
    return p;
}

/* Each region at an address with random-looking bits in every byte above
 * the page, so that a window of data that happens to hold one is not
 * likely (the scan below looks for exactly these addresses). */
static void world_alloc(struct world *w, uint64_t arena, uint64_t descs, uint64_t ctx)
{
    w->arena = map_at(arena, FZ_ARENA);
    w->descs = map_at(descs, 4096);
    w->ctx_region = map_at(ctx, 4096);
    w->ctx = w->ctx_region + 1024;
}

/* The bytes of a bank a program may touch: its values (this worker's copy,
 * live hash slots); the rest is poisoned.  Reads slot states, which are
 * poisoned, so not instrumented itself. */
#ifdef FZ_ASAN
__attribute__((no_sanitize_address))
#endif
static void open_values(struct world *w, const struct mks_map_desc *d)
{
    uint8_t *b = w->arena + d->bank_off[w->maps.bank & 1];
    switch (d->type) {
    case MKS_MAP_ARRAY:
    case MKS_MAP_HIST:
        for (uint32_t e = 0; e < d->max_entries; e++)
            UNPOISON(b + (uint64_t)e * d->stride, d->value_size);
        break;
    case MKS_MAP_PERWORKER_ARRAY:
        for (uint32_t e = 0; e < d->max_entries; e++)
            UNPOISON(b + ((uint64_t)w->maps.worker * d->max_entries + e) * d->stride, d->value_size);
        break;
    case MKS_MAP_HASH:
        for (uint32_t s = 0; s < d->n_slots; s++) {
            uint8_t *slot = b + MKS_HASH_HDR + (uint64_t)s * d->stride;
            uint32_t st;
            memcpy(&st, slot, 4);
            if (st == MKS_HSLOT_LIVE || st == MKS_HSLOT_DEAD) /* a deleted value may still be held */
                UNPOISON(slot + 8 + ((d->key_size + 7) & ~7u), d->value_size);
        }
        break;
    default:
        break;
    }
}

static void poison_all(struct world *w)
{
    POISON(w->arena, w->used);
}

static void world_guard(struct world *w, uint32_t n_maps)
{
    poison_all(w);
    for (uint32_t i = 0; i < n_maps; i++)
        open_values(w, &w->descs[i]);
}

/* Builds the layout for the program's maps (same offsets in both worlds);
 * returns the bytes used. */
static uint64_t layout(const struct fz_prog *fp, struct mks_map_desc *descs)
{
    uint64_t at = FZ_GUARD;
    for (uint32_t i = 0; i < fp->n_maps; i++) {
        struct mks_map_desc *d = &descs[i];
        memset(d, 0, sizeof(*d));
        d->state = MKS_MAPSTATE_LIVE;
        d->type = fp->maps[i].type;
        d->key_size = fp->maps[i].key_size;
        d->value_size = fp->maps[i].value_size;
        d->max_entries = fp->maps[i].max_entries;
        snprintf(d->name, sizeof(d->name), "%s", fp->maps[i].name);
        if (mks_map_layout(d, FZ_WORKERS, NULL, 0) != 0) {
            fprintf(stderr, "fuzz: layout of map %s failed\n", d->name);
            exit(2);
        }
        for (int b = 0; b < 2; b++) {
            at = (at + 63) & ~63ull;
            d->bank_off[b] = at;
            at += d->bank_bytes + FZ_GUARD;
            if (d->type == MKS_MAP_RINGBUF) {
                d->bank_off[1] = d->bank_off[0];
                break;
            }
        }
    }
    return at;
}

/* Real map code on one map's bank, with the bank opened for it. */
static struct world *cur_world(struct mks_maps *m)
{
    return m == &wa.maps ? &wa : &wb;
}

static void violation(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void check_arg(const void *p, uint64_t n, const char *what)
{
#ifdef FZ_ASAN
    if (n && __asan_region_is_poisoned((void *)(uintptr_t)p, n))
        violation("helper %s argument %p (%llu bytes) covers memory the program may not read", what, p,
                  (unsigned long long)n);
#else
    (void)p;
    (void)n;
    (void)what;
#endif
}

static void open_bank(struct mks_maps *m, const struct mks_map_desc *d)
{
    struct world *w = cur_world(m);
    UNPOISON(w->arena + d->bank_off[m->bank & 1], d->bank_bytes);
}

static void close_bank(struct mks_maps *m, const struct mks_map_desc *d)
{
    struct world *w = cur_world(m);
    POISON(w->arena + d->bank_off[m->bank & 1], d->bank_bytes);
    open_values(w, d);
}

void *fz_real_map_lookup(struct mks_maps *m, const struct mks_map_desc *d, const void *key);
int fz_real_map_update(struct mks_maps *m, const struct mks_map_desc *d, const void *key, const void *value,
                       uint64_t flags);
int fz_real_map_delete(struct mks_maps *m, const struct mks_map_desc *d, const void *key);
int fz_real_map_hist_add(struct mks_maps *m, const struct mks_map_desc *d, const void *key, uint64_t value);
int fz_real_map_ringbuf_output(struct mks_maps *m, const struct mks_map_desc *d, const void *data, uint64_t size);

/* Keys and values are copied before the bank opens, so a pointer into the
 * bank's own poisoned bytes is caught. */
void *mksi_map_lookup(struct mks_maps *m, const struct mks_map_desc *d, const void *key)
{
    uint8_t k[512];
    check_arg(key, d->key_size, "key");
    memcpy(k, key, d->key_size);
    open_bank(m, d);
    void *r = fz_real_map_lookup(m, d, k);
    close_bank(m, d);
    return r;
}

int mksi_map_update(struct mks_maps *m, const struct mks_map_desc *d, const void *key, const void *value,
                    uint64_t flags)
{
    static uint8_t v[1 << 20];
    uint8_t k[512];
    check_arg(key, d->key_size, "key");
    check_arg(value, d->value_size, "value");
    memcpy(k, key, d->key_size);
    memcpy(v, value, d->value_size);
    open_bank(m, d);
    int r = fz_real_map_update(m, d, k, v, flags);
    close_bank(m, d);
    return r;
}

int mksi_map_delete(struct mks_maps *m, const struct mks_map_desc *d, const void *key)
{
    uint8_t k[512];
    check_arg(key, d->key_size, "key");
    memcpy(k, key, d->key_size);
    open_bank(m, d);
    int r = fz_real_map_delete(m, d, k);
    close_bank(m, d);
    return r;
}

int mksi_map_hist_add(struct mks_maps *m, const struct mks_map_desc *d, const void *key, uint64_t value)
{
    uint8_t k[512];
    check_arg(key, d->key_size, "key");
    memcpy(k, key, d->key_size);
    open_bank(m, d);
    int r = fz_real_map_hist_add(m, d, k, value);
    close_bank(m, d);
    return r;
}

int mksi_map_ringbuf_output(struct mks_maps *m, const struct mks_map_desc *d, const void *data, uint64_t size)
{
    static uint8_t buf[1 << 20];
    if (size > sizeof(buf))
        violation("ring buffer record of %llu bytes", (unsigned long long)size);
    check_arg(data, size, "data");
    memcpy(buf, data, size);
    open_bank(m, d);
    int r = fz_real_map_ringbuf_output(m, d, buf, size);
    close_bank(m, d);
    return r;
}

/* The verifier's messages name hooks; this program has no loader. */
__attribute__((weak)) const char *mks_hook_event_name(uint32_t ev)
{
    return ev < MKS_EV_COUNT ? "hook" : NULL;
}

/* ---- running ------------------------------------------------------------- */

static struct {
    uint64_t programs, generated, mutated, accepted, rejected, runs, insns, with_map, with_loop, with_call,
        with_helper, with_ring, control, compared, hint_max;
    uint64_t probes, probes_refused, probe_progs, probe_cost_max;
    uint64_t by_code[64];
    uint8_t opcodes[256];
} st;

/* What is being run, for the report of a failure. */
static const struct fz_prog *cur_prog;
static uint64_t cur_seed, cur_index, cur_cost;
static bool cur_mutated;
static const char *cur_what = "";
static const char *cur_probe; /* --probes: the probe's text */

static void dump_prog(FILE *f, const struct fz_prog *fp)
{
    char dis[128];
    fprintf(f, "  %s program, hook %d, %u instructions, %u maps:\n",
            fp->type == MKS_PROG_CONTROL ? "CONTROL" : "OBSERVE", fp->hook, fp->n, fp->n_maps);
    for (uint32_t i = 0; i < fp->n_maps; i++)
        fprintf(f, "    map %u '%s' type %#x key %u value %u entries %u\n", i, fp->maps[i].name, fp->maps[i].type,
                fp->maps[i].key_size, fp->maps[i].value_size, fp->maps[i].max_entries);
    for (uint32_t i = 0; i < fp->n; i++) {
        if (mks_insn_disasm(fp->p, fp->n, i, dis, sizeof(dis)) < 0)
            snprintf(dis, sizeof(dis), "?");
        fprintf(f, "    %4u: %-44s %02x %02x %04x %08x\n", i, dis, fp->p[i].code, fp->p[i].regs,
                (uint16_t)fp->p[i].off, (uint32_t)fp->p[i].imm);
    }
}

static void report(void)
{
    if (cur_mutated)
        fprintf(stderr, "soundness violation: seed %llu program %llu, a mutation (again: --seed %llu --programs %llu), "
                        "%s, verifier cost %llu\n",
                (unsigned long long)cur_seed, (unsigned long long)cur_index, (unsigned long long)cur_seed,
                (unsigned long long)cur_index + 1, cur_what, (unsigned long long)cur_cost);
    else
        fprintf(stderr, "soundness violation: seed %llu program %llu (again: --seed %llu --only %llu), %s, verifier "
                        "cost %llu\n",
                (unsigned long long)cur_seed, (unsigned long long)cur_index, (unsigned long long)cur_seed,
                (unsigned long long)cur_index, cur_what, (unsigned long long)cur_cost);
    if (cur_probe)
        fprintf(stderr, "  compiled from the probe '%s'\n", cur_probe);
    if (cur_prog)
        dump_prog(stderr, cur_prog);
    if (cur_prog && *cur_what == 'c') { /* where the maps were */
        fprintf(stderr, "  arena layout (bank %u, worker %u):", wa.maps.bank, wa.maps.worker);
        for (uint32_t i = 0; i < cur_prog->n_maps; i++)
            fprintf(stderr, " %s %llu+%llu/%llu", wa.descs[i].name, (unsigned long long)wa.descs[i].bank_off[0],
                    (unsigned long long)wa.descs[i].bank_off[1], (unsigned long long)wa.descs[i].bank_bytes);
        fprintf(stderr, "\n");
    }
}

/* --keep-going: count violations and go on with the next program (a
 * build with -fsanitize-recover=address also goes on after ASan's). */
static uint64_t keep_going, n_violations;
static jmp_buf next_prog;
static char last_violation[256];

static void violation(const char *fmt, ...)
{
    va_list ap;
    n_violations++;
    va_start(ap, fmt);
    vsnprintf(last_violation, sizeof(last_violation), fmt, ap);
    va_end(ap);
    fprintf(stderr, "fuzz: violation %llu: %s", (unsigned long long)n_violations, last_violation);
    fprintf(stderr, "\n");
    report();
    if (keep_going && n_violations < keep_going)
        longjmp(next_prog, 1);
    exit(1);
}

#ifdef FZ_ASAN
static void asan_death(void)
{
    report();
}

static void asan_report(const char *text)
{
    const char *l = strstr(text, "ERROR: AddressSanitizer: ");
    n_violations++;
    fprintf(stderr, "fuzz: violation %llu: %.*s\n", (unsigned long long)n_violations,
            l ? (int)strcspn(l, "\n") : 0, l ? l : "");
    report();
    if (keep_going && n_violations >= keep_going)
        exit(1);
}
#endif

static void fill_ctx(uint8_t *ctx)
{
    for (uint32_t b = 0; b < FZ_CTX; b += 8) {
        uint64_t v = chance(50) ? some64() : r64();
        memcpy(ctx + b, &v, 8);
    }
    struct mks_hook_ctx *c = (struct mks_hook_ctx *)ctx;
    c->abi_version = 1;
    c->size = FZ_CTX;
    memset(ctx + FZ_CTX_END, 0, FZ_CTX - FZ_CTX_END);
}

/* Does the value look like an address of this world's memory or stack? */
static bool is_addr(const struct world *w, uint64_t v, uint64_t sp)
{
    return (v >= (uint64_t)(uintptr_t)w->arena && v < (uint64_t)(uintptr_t)w->arena + FZ_ARENA) ||
           (v >= (uint64_t)(uintptr_t)w->ctx_region && v < (uint64_t)(uintptr_t)w->ctx_region + 4096) ||
           (v >= (uint64_t)(uintptr_t)w->descs && v < (uint64_t)(uintptr_t)w->descs + 4096) ||
           (v >= sp - (64u << 10) && v < sp + 4096); /* the VM's frames lie just below vm_run's */
}

static void scan(const struct world *w, uint64_t r0, uint64_t sp, const char *which)
{
    if (is_addr(w, r0, sp))
        violation("run %s: r0 = %#llx is an address", which, (unsigned long long)r0);
    /* every 8-byte window the run changed (values need not be aligned;
     * random initial contents may look like anything) */
    UNPOISON(w->arena, w->used);
    for (uint64_t b = 0; b + 8 <= w->used; b++) {
        uint64_t v, was;
        if ((b & 63) == 0 && b + 72 <= w->used && memcmp(w->arena + b, init_image + b, 72) == 0) {
            b += 63; /* no window starting in these 64 bytes changed */
            continue;
        }
        memcpy(&v, w->arena + b, 8);
        memcpy(&was, init_image + b, 8);
        if (v != was && is_addr(w, v, sp))
            violation("run %s: arena offset %llu holds %#llx, an address", which, (unsigned long long)b,
                      (unsigned long long)v);
    }
}

struct outcome {
    int rc;
    uint64_t r0, ran;
};

static __attribute__((noinline)) struct outcome vm_run(struct world *w, const struct fz_prog *fp, uint64_t cost,
                                                        uint64_t *sp_p)
{
    volatile uint64_t here = 0;
    struct mks_vm_env env = {.insns = fp->p, .n_insns = fp->n, .insn_limit = cost, .ctx = w->ctx,
                             .ctx_len = FZ_CTX_END, .n_maps = fp->n_maps, .map_ids = map_ids, .maps = &w->maps};
    struct outcome o = {0, 0, 0};
    *sp_p = (uint64_t)(uintptr_t)&here;
    o.rc = mks_vm_run(&env, (uint64_t)(uintptr_t)w->ctx, 0, &o.r0, &o.ran);
    return o;
}

/* The same run with the VM's stack elsewhere. */
static __attribute__((noinline)) struct outcome vm_run_shifted(struct world *w, const struct fz_prog *fp,
                                                                uint64_t cost, uint64_t *sp_p, uint32_t shift)
{
    volatile uint8_t *pad = __builtin_alloca(shift);
    pad[0] = 0;
    return vm_run(w, fp, cost, sp_p);
}

static bool uses_clock(const struct fz_prog *fp)
{
    for (uint32_t i = 0; i < fp->n; i++)
        if (fp->p[i].code == (MKS_BPF_JMP | MKS_BPF_CALL) && mks_insn_src(&fp->p[i]) == 0 &&
            fp->p[i].imm == MKS_HELPER_TIME_NS)
            return true;
    return false;
}

static void check_outcome(const struct outcome *o, const struct fz_prog *fp, uint64_t cost, const char *which)
{
    if (o->rc == MKS_VM_ELIMIT) {
        /* how far it goes without the limit (the run's effects are
         * discarded: a report follows) */
        struct world *w = which[0] == 'A' ? &wa : &wb;
        struct mks_vm_env env = {.insns = fp->p, .n_insns = fp->n, .insn_limit = 1000000, .ctx = w->ctx,
                                 .ctx_len = FZ_CTX_END, .n_maps = fp->n_maps, .map_ids = map_ids, .maps = &w->maps};
        uint64_t r0 = 0, ran = 0;
        int rc = mks_vm_run(&env, (uint64_t)(uintptr_t)w->ctx, 0, &r0, &ran);
        violation("run %s: more instructions than the verifier's worst case %llu (without the limit: %s after %llu)",
                  which, (unsigned long long)cost, mks_vm_strerror(rc), (unsigned long long)ran);
    }
    if (o->rc != 0)
        violation("run %s: the VM stopped with %s (%d) after %llu instructions", which, mks_vm_strerror(o->rc), o->rc,
                  (unsigned long long)o->ran);
    if (o->ran > cost)
        violation("run %s: %llu instructions executed, verifier's worst case %llu", which, (unsigned long long)o->ran,
                  (unsigned long long)cost);
    if (fp->type == MKS_PROG_CONTROL && o->r0 > MKS_PRIO_HINT_MAX)
        violation("run %s: CONTROL program returned %#llx, outside [0, %d]", which, (unsigned long long)o->r0,
                  MKS_PRIO_HINT_MAX);
}

/* Guard zones and the image of what may not change. */
static void check_frozen(const struct fz_prog *fp, const struct world *w)
{
    UNPOISON(w->arena, w->used);
    for (uint32_t i = 0; i < fp->n_maps; i++) {
        const struct mks_map_desc *d = &w->descs[i];
        bool frozen = fp->type == MKS_PROG_CONTROL || strcmp(d->name, ".rodata") == 0;
        for (int b = 0; b < 2; b++) {
            uint64_t off = d->bank_off[b];
            bool other = (uint32_t)b != (w->maps.bank & 1) && d->type != MKS_MAP_RINGBUF;
            if ((frozen || other) && memcmp(w->arena + off, init_image + off, d->bank_bytes) != 0)
                violation("%s of map '%s' changed (%s)", other ? "the other bank" : "the bank", d->name,
                          other ? "a program touches only the current bank"
                          : fp->type == MKS_PROG_CONTROL ? "a CONTROL program writes no map" : ".rodata is read-only");
        }
    }
    /* everything between the banks (laid out in order) is guard: still the
     * canary of the initial image */
    uint64_t at = 0;
    for (uint32_t i = 0; i <= fp->n_maps; i++) {
        for (int b = 0; b < 2; b++) {
            uint64_t end = i < fp->n_maps ? w->descs[i].bank_off[b] : w->used;
            if (end > at && memcmp(w->arena + at, init_image + at, end - at) != 0) {
                while (w->arena[at] == init_image[at])
                    at++;
                violation("guard byte at arena offset %llu overwritten", (unsigned long long)at);
            }
            if (i == fp->n_maps)
                break;
            at = end + w->descs[i].bank_bytes;
            if (w->descs[i].type == MKS_MAP_RINGBUF)
                break;
        }
    }
    /* array padding between values */
    for (uint32_t i = 0; i < fp->n_maps; i++) {
        const struct mks_map_desc *d = &w->descs[i];
        if (d->type != MKS_MAP_ARRAY && d->type != MKS_MAP_PERWORKER_ARRAY && d->type != MKS_MAP_HIST)
            continue;
        uint64_t copies = d->type == MKS_MAP_PERWORKER_ARRAY ? (uint64_t)d->n_workers * d->max_entries : d->max_entries;
        for (uint64_t e = 0; e < copies; e++)
            for (uint32_t k = d->value_size; k < d->stride; k++) {
                uint64_t at = d->bank_off[w->maps.bank & 1] + e * d->stride + k;
                if (w->arena[at] != init_image[at])
                    violation("padding after value %llu of map '%s' overwritten", (unsigned long long)e, d->name);
            }
    }
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Initial contents of the maps: random values, a few hash keys. */
static void build_worlds(const struct fz_prog *fp)
{
    UNPOISON(wa.arena, FZ_ARENA);
    UNPOISON(wb.arena, FZ_ARENA);
    wa.used = wb.used = layout(fp, wa.descs);
    memcpy(wb.descs, wa.descs, sizeof(struct mks_map_desc) * fp->n_maps);
    memset(wa.arena, FZ_CANARY, wa.used);
    for (uint32_t i = 0; i < fp->n_maps; i++) {
        struct mks_map_desc *d = &wa.descs[i];
        for (int b = 0; b < 2; b++) {
            uint8_t *bank = wa.arena + d->bank_off[b];
            memset(bank, 0, d->bank_bytes);
            if (d->type == MKS_MAP_ARRAY || d->type == MKS_MAP_PERWORKER_ARRAY) {
                uint64_t copies = d->type == MKS_MAP_PERWORKER_ARRAY ? (uint64_t)d->n_workers * d->max_entries
                                                                      : d->max_entries;
                for (uint64_t e = 0; e < copies; e++) {
                    for (uint32_t k = 0; k < d->value_size; k++)
                        bank[e * d->stride + k] = chance(50) ? 0 : (uint8_t)r64();
                    memset(bank + e * d->stride + d->value_size, FZ_CANARY, d->stride - d->value_size);
                }
            }
        }
    }
    uint32_t bank = rn(2), worker = rn(FZ_WORKERS);
    wa.maps = (struct mks_maps){.descs = wa.descs, .n_descs = fp->n_maps, .bank = bank, .arena = wa.arena,
                                .arena_len = wa.used, .worker = worker, .sm = 3, .rank = 1};
    /* a few keys present, inserted by the real code */
    for (uint32_t i = 0; i < fp->n_maps; i++) {
        struct mks_map_desc *d = &wa.descs[i];
        if (d->type != MKS_MAP_HASH)
            continue;
        for (uint32_t k = 0; k < d->max_entries / 2 + 1; k++) {
            /* values as large as a compiled probe's groups (histograms) */
            static uint8_t val[FZ_HASH_VALUE];
            uint8_t key[512] = {0};
            uint32_t kv = rn(4);
            memcpy(key, &kv, 4);
            if (d->value_size > sizeof(val)) {
                fprintf(stderr, "fuzz: hash value of %u bytes is beyond this fuzzer's %zu\n",
                        d->value_size, sizeof(val));
                exit(2);
            }
            for (uint32_t b = 0; b < d->value_size; b++)
                val[b] = (uint8_t)r64();
            fz_real_map_update(&wa.maps, d, key, val, 0);
        }
    }
    memcpy(init_image, wa.arena, wa.used);
    wb.maps = wa.maps;
    wb.maps.descs = wb.descs;
    wb.maps.arena = wb.arena;
}

static void run_accepted(const struct fz_prog *fp, uint64_t cost, uint32_t contexts)
{
    bool compare = !uses_clock(fp);
    cur_cost = cost;
    build_worlds(fp);
    for (uint32_t c = 0; c < contexts; c++) {
        UNPOISON(wa.arena, wa.used);
        UNPOISON(wb.arena, wb.used);
        memcpy(wa.arena, init_image, wa.used);
        memcpy(wb.arena, init_image, wb.used);
        UNPOISON(wa.ctx_region, 4096);
        UNPOISON(wb.ctx_region, 4096);
        fill_ctx(wa.ctx);
        memcpy(wb.ctx, wa.ctx, FZ_CTX);
        POISON(wa.ctx_region, 4096);
        POISON(wb.ctx_region, 4096);
        UNPOISON(wa.ctx, FZ_CTX_END);
        UNPOISON(wb.ctx, FZ_CTX_END);
        wa.maps.lost = wb.maps.lost = 0;
        world_guard(&wa, fp->n_maps);
        world_guard(&wb, fp->n_maps);

        uint64_t spa = 0, spb = 0;
        cur_what = "run A";
        struct outcome oa = vm_run(&wa, fp, cost, &spa);
        cur_what = "run B (other addresses)";
        struct outcome ob = vm_run_shifted(&wb, fp, cost, &spb, 16 * (1 + rn(255)));
        cur_what = "checking the runs";
        st.runs += 2;
        st.insns += oa.ran + ob.ran;
        check_outcome(&oa, fp, cost, "A");
        check_outcome(&ob, fp, cost, "B");
        if (fp->type == MKS_PROG_CONTROL && oa.r0 == MKS_PRIO_HINT_MAX)
            st.hint_max++;
        check_frozen(fp, &wa);
        check_frozen(fp, &wb);
        scan(&wa, oa.r0, spa, "A");
        scan(&wb, ob.r0, spb, "B");
        if (compare) {
            st.compared++;
            if (oa.r0 != ob.r0 || oa.ran != ob.ran || wa.maps.lost != wb.maps.lost ||
                memcmp(wa.arena, wb.arena, wa.used) != 0) {
                uint64_t at = 0;
                while (at < wa.used && wa.arena[at] == wb.arena[at])
                    at++;
                violation("the result depends on where memory is (a pointer leaked): r0 %#llx vs %#llx, %llu vs "
                          "%llu instructions, first differing arena byte %llu of %llu",
                          (unsigned long long)oa.r0, (unsigned long long)ob.r0, (unsigned long long)oa.ran,
                          (unsigned long long)ob.ran, (unsigned long long)at, (unsigned long long)wa.used);
            }
        }
    }
    cur_what = "";
}

/* ---- main ---------------------------------------------------------------- */

static void note_features(const struct fz_prog *fp)
{
    bool map = false, loop = false, call = false, helper = false, ring = false;
    for (uint32_t i = 0; i < fp->n; i++) {
        const struct mks_insn *in = &fp->p[i];
        uint8_t cls = MKS_BPF_CLASS(in->code);
        st.opcodes[in->code] = 1;
        if (in->code == (MKS_BPF_JMP | MKS_BPF_CALL)) {
            if (mks_insn_src(in) == MKS_PSEUDO_CALL)
                call = true;
            else {
                helper = true;
                map |= in->imm == MKS_HELPER_MAP_LOOKUP;
                ring |= in->imm == MKS_HELPER_RINGBUF_OUTPUT;
            }
        } else if ((cls == MKS_BPF_JMP || cls == MKS_BPF_JMP32) && in->off < 0) {
            loop = true;
        }
        if (in->code == (MKS_BPF_LD | MKS_BPF_IMM | MKS_BPF_DW))
            i++;
    }
    st.with_map += map;
    st.with_loop += loop;
    st.with_call += call;
    st.with_helper += helper;
    st.with_ring += ring;
    st.control += fp->type == MKS_PROG_CONTROL;
}

static void print_stats(double secs, bool final)
{
    int ops = 0;
    for (int c = 0; c < 256; c++)
        ops += st.opcodes[c];
    fprintf(stderr,
            "%ssoundness: %llu programs (%llu generated, %llu mutated), %llu accepted (%.1f%%), %llu rejected, "
            "%llu VM runs, %llu instructions, %.0f s, %llu violations\n",
            final ? "" : "  ", (unsigned long long)st.programs, (unsigned long long)st.generated,
            (unsigned long long)st.mutated, (unsigned long long)st.accepted,
            st.programs ? 100.0 * (double)st.accepted / (double)st.programs : 0.0, (unsigned long long)st.rejected,
            (unsigned long long)st.runs, (unsigned long long)st.insns, secs, (unsigned long long)n_violations);
    if (final) {
        fprintf(stderr,
                "  accepted: %llu with map lookups, %llu with loops, %llu with local calls, %llu with helpers, %llu "
                "with ring output, %llu CONTROL; %llu compared across addresses; %d distinct opcodes\n",
                (unsigned long long)st.with_map, (unsigned long long)st.with_loop, (unsigned long long)st.with_call,
                (unsigned long long)st.with_helper, (unsigned long long)st.with_ring, (unsigned long long)st.control,
                (unsigned long long)st.compared, ops);
        fprintf(stderr, "  rejections by code:");
        for (int c = 0; c < 64; c++)
            if (st.by_code[c])
                fprintf(stderr, " %d:%llu", MKS_VERR_BASE + c, (unsigned long long)st.by_code[c]);
        fprintf(stderr, "\n");
        if (st.probes || st.probes_refused)
            fprintf(stderr,
                    "  probes: %llu compiled, %llu refused by the probe compiler, %llu programs,"
                    " largest cost %llu\n",
                    (unsigned long long)st.probes, (unsigned long long)st.probes_refused,
                    (unsigned long long)st.probe_progs, (unsigned long long)st.probe_cost_max);
    }
}

static void usage(void)
{
    fprintf(stderr, "usage: mkscope-fuzz-soundness [--seed S] [--programs N] [--accepted N] [--seconds S] "
                    "[--contexts K] [--only I] [--keep-going N] [--replay REPORT] [--probes] [--self-test] [-q]\n");
    exit(2);
}

static uint64_t num(const char *s)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s || *end)
        usage();
    return v;
}

static struct {
    uint64_t seed, max_programs, max_accepted, seconds, only;
    uint32_t contexts;
    bool quiet, self_test;
    const char *replay;
    bool probes;
} opt = {1, 0, 0, 0, UINT64_MAX, 3, false, false, NULL, false};

static struct fz_prog corpus[FZ_CORPUS], cur;
static uint32_t n_corpus;

/* Reads a program back from a report (dump_prog's lines). */
static int load_report(const char *path, struct fz_prog *fp)
{
    FILE *f = fopen(path, "r");
    char line[512];
    if (!f) {
        perror(path);
        return -1;
    }
    memset(fp, 0, sizeof(*fp));
    fp->type = 0;
    while (fgets(line, sizeof(line), f)) {
        char kind[16], name[32];
        unsigned a, b, c, d, e;
        int hook;
        if (sscanf(line, " %15s program, hook %d,", kind, &hook) == 2 && (!strcmp(kind, "OBSERVE") || !strcmp(kind, "CONTROL"))) {
            if (fp->type)
                break; /* the next report */
            fp->type = !strcmp(kind, "CONTROL") ? MKS_PROG_CONTROL : MKS_PROG_OBSERVE;
            fp->hook = hook;
        } else if (fp->type && sscanf(line, " map %u '%31[^']' type %x key %u value %u entries %u", &a, name, &b, &c, &d,
                                      &e) == 6 && a < FZ_MAXMAPS) {
            struct mks_map_spec *m = &fp->maps[a];
            snprintf(m->name, sizeof(m->name), "%s", name);
            m->type = b;
            m->key_size = c;
            m->value_size = d;
            m->max_entries = e;
            if (a + 1 > fp->n_maps)
                fp->n_maps = a + 1;
        } else if (fp->type && fp->n < FZ_MAXI) {
            /* "   idx: text CC RR OOOO IIIIIIII": the last four fields */
            char *t[64];
            int nt = 0;
            for (char *tok = strtok(line, " \t\n"); tok && nt < 64; tok = strtok(NULL, " \t\n"))
                t[nt++] = tok;
            if (nt >= 5 && strchr(t[0], ':') && strlen(t[nt - 1]) == 8 && strlen(t[nt - 2]) == 4) {
                fp->p[fp->n] = I((uint8_t)strtoul(t[nt - 4], NULL, 16), 0, 0, (int16_t)(uint16_t)strtoul(t[nt - 2], NULL, 16),
                                 (int32_t)(uint32_t)strtoul(t[nt - 1], NULL, 16));
                fp->p[fp->n].regs = (uint8_t)strtoul(t[nt - 3], NULL, 16);
                fp->n++;
            }
        }
    }
    fclose(f);
    return fp->type && fp->n ? 0 : -1;
}

#ifdef MKS_FZ_PROBES
static int64_t probe_class(const char *name, void *arg)
{
    (void)arg;
    return !strcmp(name, "attention") ? 1 : !strcmp(name, "expert.3") ? 7 : -1;
}

/* --probes: probe idx, compiled; each of its programs must be accepted and
 * runs as any accepted program does. */
static void probe_programs(uint64_t idx)
{
    static char text[1024];
    struct mks_probe *p = NULL;
    struct mks_probe_code *c = NULL;
    struct mks_query_error e;
    rs = splitmix(opt.seed * 0x100000001b3ull ^ splitmix(idx)) | 1;
    cur_index = idx;
    cur_mutated = false;
    mks_test_probe_text(r64(), text, sizeof(text));
    struct mks_probe_opts po = {.sz = sizeof(po), .max_groups = 1 + rn(16)};
    st.programs++;
    if (mks_probe_parse(text, &p, &e) || mks_probe_compile(p, &po, probe_class, NULL, &c, &e)) {
        st.probes_refused++;
        if (opt.only != UINT64_MAX)
            fprintf(stderr, "'%s' refused: %s\n", text, e.msg);
        mks_probe_free(p);
        return;
    }
    st.probes++;
    cur_probe = text;
    for (uint32_t i = 0; i < c->n_progs; i++) {
        const struct mks_probe_prog *pp = &c->progs[i];
        if (pp->n_insns > FZ_MAXI || c->n_maps > FZ_MAXMAPS)
            violation("a compiled probe of %u instructions and %u maps is beyond this fuzzer's %d and %d",
                      pp->n_insns, c->n_maps, FZ_MAXI, FZ_MAXMAPS);
        memset(&cur, 0, sizeof(cur));
        memcpy(cur.p, pp->insns, pp->n_insns * sizeof(cur.p[0]));
        cur.n = pp->n_insns;
        cur.type = MKS_PROG_OBSERVE;
        cur.hook = (int32_t)pp->hook;
        memcpy(cur.maps, c->maps, c->n_maps * sizeof(cur.maps[0]));
        cur.n_maps = c->n_maps;
        cur_prog = &cur;
        cur_what = "verifying";
        struct mks_verify_opts o = {.sz = sizeof(o), .prog_type = cur.type, .abi_version = 1,
                                    .hook = cur.hook, .maps = cur.maps, .n_maps = cur.n_maps};
        struct mks_verify_result res = {0};
        char log[512];
        if (mks_verify(cur.p, cur.n, &o, &res, log, sizeof(log)) != 0)
            violation("the verifier rejects a compiled probe's program: %s", log);
        st.accepted++;
        st.probe_progs++;
        if (res.cost > st.probe_cost_max)
            st.probe_cost_max = res.cost;
        note_features(&cur);
        run_accepted(&cur, res.cost, opt.contexts);
        if (opt.only != UINT64_MAX) {
            dump_prog(stderr, &cur);
            fprintf(stderr, "'%s' at hook %d: accepted, cost %llu; ran without a violation\n", text,
                    cur.hook, (unsigned long long)res.cost);
        }
    }
    cur_probe = NULL;
    mks_probe_code_free(c);
    mks_probe_free(p);
}
#endif

/* Generate or mutate program idx, verify it, run it if accepted. */
static void one_program(uint64_t idx)
{
#ifdef MKS_FZ_PROBES
    if (opt.probes) {
        probe_programs(idx);
        return;
    }
#endif
    rs = splitmix(opt.seed * 0x100000001b3ull ^ splitmix(idx)) | 1;
    cur_index = idx;
    bool mut = chance(45); /* drawn always, so --only makes the same program */
    if (opt.replay) {
        if (load_report(opt.replay, &cur) != 0) {
            fprintf(stderr, "fuzz: %s: no program in it (expected a violation report)\n", opt.replay);
            exit(2);
        }
        cur_mutated = false;
    } else if (n_corpus > 16 && mut) {
        cur = corpus[rn(n_corpus < FZ_CORPUS ? n_corpus : FZ_CORPUS)];
        mutate(&cur);
        st.mutated++;
        cur_mutated = true;
    } else {
        gen_prog(&cur);
        st.generated++;
        cur_mutated = false;
    }
    st.programs++;
    cur_prog = &cur;
    cur_what = "verifying";
    struct mks_verify_opts o = {.sz = sizeof(o), .prog_type = cur.type, .abi_version = 1, .hook = cur.hook,
                                .maps = cur.maps, .n_maps = cur.n_maps};
    struct mks_verify_result res = {0};
    char log[512];
    int rc = mks_verify(cur.p, cur.n, &o, &res, log, sizeof(log));
    if (rc != 0) {
        st.rejected++;
        if (rc <= -MKS_VERR_BASE && rc > -MKS_VERR_BASE - 64)
            st.by_code[-rc - MKS_VERR_BASE]++;
        if (rc == -MKS_VERR_INTERNAL)
            violation("verifier bug: %s", log);
        if (!log[0] || strchr(log, '\n'))
            violation("rejection without one line: '%s'", log);
        if (opt.only != UINT64_MAX)
            fprintf(stderr, "rejected: %s\n", log);
        return;
    }
    if (res.cost == 0)
        violation("accepted with cost 0");
    st.accepted++;
    note_features(&cur);
    corpus[n_corpus++ % FZ_CORPUS] = cur;
    run_accepted(&cur, res.cost, opt.contexts);
    if (opt.only != UINT64_MAX) {
        dump_prog(stderr, &cur);
        fprintf(stderr, "accepted, cost %llu; ran without a violation\n", (unsigned long long)res.cost);
    }
}

/* --self-test: programs that break each property, run without the
 * verifier; every one must be caught, so a check that silently stopped
 * working shows up. */
static int self_test(void)
{
    static const struct mks_map_spec arr = {"arr", MKS_MAP_ARRAY, 4, 16, 1};
    static const struct mks_map_spec ro = {".rodata", MKS_MAP_ARRAY, 4, 16, 1};
    const struct {
        const char *what;
        struct mks_insn p[16];
        uint32_t n, type;
        uint64_t cost;
        const char *expect; /* in the violation's line */
    } cases[] = {
        {"a stack address stored in a map", {STM(MKS_BPF_W, 10, -4, 0), I(0x18, 1, MKS_PSEUDO_MAP_IDX, 0, 0), I(0, 0, 0, 0, 0),
          MOVX(2, 10), ALU64K(MKS_BPF_ADD, 2, -4), CALLH(MKS_HELPER_MAP_LOOKUP), I(MKS_BPF_JMP | MKS_BPF_K | MKS_BPF_JEQ, 0, 0, 1, 0),
          STXM(MKS_BPF_DW, 0, 10, 0), MOVK(0, 0), EXITI()}, 10, MKS_PROG_OBSERVE, 100, "an address"},
        {"the context's address returned", {MOVX(0, 1), EXITI()}, 2, MKS_PROG_OBSERVE, 100, "is an address"},
        {"a bit of the context's address in r0", {MOVK(0, 0), I(MKS_BPF_JMP | MKS_BPF_K | MKS_BPF_JSET, 1, 0, 1, 0x1000),
          MOVK(0, 1), EXITI()}, 4, MKS_PROG_OBSERVE, 100, "depends on where memory is"},
        {"a read far outside every region", {I(0x18, 1, 0, 0, 0x12345000), I(0, 0, 0, 0, 0x10), LDXM(MKS_BPF_DW, 0, 1, 0), EXITI()},
         4, MKS_PROG_OBSERVE, 100, "memory access out of bounds"},
        {"more instructions than the cost", {MOVK(0, 0), ALU64K(MKS_BPF_ADD, 0, 1), I(MKS_BPF_JMP | MKS_BPF_K | MKS_BPF_JLT, 0, 0, -2, 10),
          EXITI()}, 4, MKS_PROG_OBSERVE, 12, "more instructions than"},
        {"a CONTROL hint out of range", {MOVK(0, 20), EXITI()}, 2, MKS_PROG_CONTROL, 100, "outside [0, 15]"},
        {"a write to .rodata", {I(0x18, 1, MKS_PSEUDO_MAP_IDX_VALUE, 0, 1), I(0, 0, 0, 0, 0), STM(MKS_BPF_DW, 1, 0, 7), MOVK(0, 0),
          EXITI()}, 5, MKS_PROG_OBSERVE, 100, ".rodata is read-only"},
    };
    static int missed; /* static: kept across longjmp */
    static size_t c;
    keep_going = UINT64_MAX;
    for (c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        static struct fz_prog fp;
        memset(&fp, 0, sizeof(fp));
        memcpy(fp.p, cases[c].p, sizeof(cases[c].p));
        fp.n = cases[c].n;
        fp.type = cases[c].type;
        fp.hook = fp.type == MKS_PROG_CONTROL ? MKS_EV_TASK_READY : MKS_EV_TASK_END;
        fp.maps[0] = arr;
        fp.maps[1] = ro;
        fp.n_maps = 2;
        cur_prog = &fp;
        uint64_t before = n_violations;
        if (setjmp(next_prog) == 0)
            run_accepted(&fp, cases[c].cost, 1);
        bool caught = n_violations > before && strstr(last_violation, cases[c].expect);
        fprintf(stderr, "self-test: %s: %s\n", cases[c].what, caught ? "caught" : "MISSED");
        missed += !caught;
    }
#ifdef FZ_ASAN
    /* one byte past a map value, inside the arena: only the poisoning sees
     * it, and ASan ends the process (here a child) */
    static struct fz_prog fp;
    struct mks_insn past[] = {STM(MKS_BPF_W, 10, -4, 0), I(0x18, 1, MKS_PSEUDO_MAP_IDX, 0, 0), I(0, 0, 0, 0, 0),
                              MOVX(2, 10), ALU64K(MKS_BPF_ADD, 2, -4), CALLH(MKS_HELPER_MAP_LOOKUP),
                              I(MKS_BPF_JMP | MKS_BPF_K | MKS_BPF_JEQ, 0, 0, 1, 0), LDXM(MKS_BPF_B, 0, 0, 16), MOVK(0, 0),
                              EXITI()};
    memset(&fp, 0, sizeof(fp));
    memcpy(fp.p, past, sizeof(past));
    fp.n = sizeof(past) / sizeof(past[0]);
    fp.type = MKS_PROG_OBSERVE;
    fp.hook = MKS_EV_TASK_END;
    fp.maps[0] = arr;
    fp.n_maps = 1;
    cur_prog = &fp;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        keep_going = 0;
        run_accepted(&fp, 100, 1);
        _exit(0);
    }
    int status = 0;
    bool caught = pid > 0 && waitpid(pid, &status, 0) == pid && !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    fprintf(stderr, "self-test: a read one byte past a map value: %s\n", caught ? "caught" : "MISSED");
    missed += !caught;
#endif
    return missed ? 1 : 0;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-q"))
            opt.quiet = true;
        else if (i + 1 < argc && !strcmp(argv[i], "--seed"))
            opt.seed = num(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--programs"))
            opt.max_programs = num(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--accepted"))
            opt.max_accepted = num(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--seconds"))
            opt.seconds = num(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--contexts"))
            opt.contexts = (uint32_t)num(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--keep-going"))
            keep_going = num(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--only"))
            opt.only = num(argv[++i]);
        else if (!strcmp(argv[i], "--self-test"))
            opt.self_test = true;
        else if (i + 1 < argc && !strcmp(argv[i], "--replay"))
            opt.replay = argv[++i];
#ifdef MKS_FZ_PROBES
        else if (!strcmp(argv[i], "--probes"))
            opt.probes = true;
#endif
        else
            usage();
    }
    if (opt.replay && opt.only == UINT64_MAX)
        opt.only = 0;
    if (!opt.max_programs && !opt.max_accepted && !opt.seconds && opt.only == UINT64_MAX)
        opt.max_programs = 10000;
    if (opt.contexts == 0 || opt.contexts > 64)
        usage();
#ifdef FZ_ASAN
    __asan_set_death_callback(asan_death);
    __asan_set_error_report_callback(asan_report);
#endif
    /* the two worlds far apart in every byte */
    world_alloc(&wa, 0x5a3c9e71d000ull, 0x4e81a7c52000ull, 0x6d2b4f8c3000ull);
    world_alloc(&wb, 0x37e5d10b4000ull, 0x18b4e29d7000ull, 0x2c9f63a18000ull);
    init_image = malloc(FZ_ARENA);
    if (opt.self_test)
        return self_test();
    cur_seed = opt.seed;
    uint64_t t0 = now_ns(), last = t0;
    for (uint64_t idx = opt.only == UINT64_MAX ? 0 : opt.only;; idx++) {
        if (opt.only != UINT64_MAX && idx != opt.only)
            break;
        if ((opt.max_programs && st.programs >= opt.max_programs) ||
            (opt.max_accepted && st.accepted >= opt.max_accepted))
            break;
        uint64_t now = now_ns();
        if (opt.seconds && now - t0 >= opt.seconds * 1000000000ull)
            break;
        if (!opt.quiet && now - last > 10000000000ull) {
            print_stats((double)(now - t0) / 1e9, false);
            last = now;
        }
        if (setjmp(next_prog) == 0)
            one_program(idx);
    }
    print_stats((double)(now_ns() - t0) / 1e9, true);
    return n_violations ? 1 : 0;
}

/*
 * Hand assembly for the verifier tests: one macro per instruction form, and
 * the map set every test program may reference by index.
 */
#ifndef MKS_TESTS_VERIFIER_INSN_H
#define MKS_TESTS_VERIFIER_INSN_H

#include "mkscope/bpf_isa.h"
#include "mkscope/ctl.h"
#include "mkscope/hook_abi.h"

/* A brace initializer, so it can fill static tables; cast it,
 * (struct mks_insn)MOV_IMM(0, 0), to assign. */
#define VI(code, dst, src, off, imm)                                                               \
    {(uint8_t)(code), (uint8_t)((dst) | ((src) << 4)), (int16_t)(off), (int32_t)(imm)}

#define ALU64_IMM(op, d, imm) VI(MKS_BPF_ALU64 | MKS_BPF_K | (op), d, 0, 0, imm)
#define ALU64_REG(op, d, s)   VI(MKS_BPF_ALU64 | MKS_BPF_X | (op), d, s, 0, 0)
#define ALU32_IMM(op, d, imm) VI(MKS_BPF_ALU | MKS_BPF_K | (op), d, 0, 0, imm)
#define ALU32_REG(op, d, s)   VI(MKS_BPF_ALU | MKS_BPF_X | (op), d, s, 0, 0)
#define MOV_IMM(d, imm)       ALU64_IMM(MKS_BPF_MOV, d, imm)
#define MOV_REG(d, s)         ALU64_REG(MKS_BPF_MOV, d, s)
#define LDX(sz, d, s, off)    VI(MKS_BPF_LDX | MKS_BPF_MEM | (sz), d, s, off, 0)
#define STX(sz, d, s, off)    VI(MKS_BPF_STX | MKS_BPF_MEM | (sz), d, s, off, 0)
#define ST(sz, d, off, imm)   VI(MKS_BPF_ST | MKS_BPF_MEM | (sz), d, 0, off, imm)
#define ATOMIC(sz, d, s, off, op) VI(MKS_BPF_STX | MKS_BPF_ATOMIC | (sz), d, s, off, op)
#define LD64(d, lo, hi)       VI(0x18, d, 0, 0, lo), VI(0, 0, 0, 0, hi)
#define LD_MAP(d, idx)        VI(0x18, d, MKS_PSEUDO_MAP_IDX, 0, idx), VI(0, 0, 0, 0, 0)
#define LD_MAPVAL(d, idx, o)  VI(0x18, d, MKS_PSEUDO_MAP_IDX_VALUE, 0, idx), VI(0, 0, 0, 0, o)
#define JMP_IMM(op, d, imm, off) VI(MKS_BPF_JMP | MKS_BPF_K | (op), d, 0, off, imm)
#define JMP_REG(op, d, s, off)   VI(MKS_BPF_JMP | MKS_BPF_X | (op), d, s, off, 0)
#define JMP32_IMM(op, d, imm, off) VI(MKS_BPF_JMP32 | MKS_BPF_K | (op), d, 0, off, imm)
#define JA(off)               VI(MKS_BPF_JMP | MKS_BPF_JA, 0, 0, off, 0)
#define CALL(id)              VI(MKS_BPF_JMP | MKS_BPF_CALL, 0, 0, 0, id)
#define CALL_LOCAL(rel)       VI(MKS_BPF_JMP | MKS_BPF_CALL, 0, MKS_PSEUDO_CALL, 0, rel)
#define EXIT()                VI(MKS_BPF_JMP | MKS_BPF_EXIT, 0, 0, 0, 0)

#define B  MKS_BPF_B
#define H  MKS_BPF_H
#define W  MKS_BPF_W
#define DW MKS_BPF_DW

/* Context field offsets used by the programs. */
#define CTX_TASK_CLASS 20
#define CTX_STEP       40
#define CTX_VALUE      104
#define CTX_T_NOW      80

/* Maps of every test program, by index. */
enum { M_ARR = 0, M_HASH, M_HIST, M_RING, M_RODATA, M_DATA, M_COUNT };
static const struct mks_map_spec test_maps[M_COUNT] = {
    {"arr", MKS_MAP_ARRAY, 4, 16, 8},
    {"hash", MKS_MAP_HASH, 8, 8, 16},
    {"hist", MKS_MAP_HIST, 4, sizeof(struct mks_hist), 4},
    {"ring", MKS_MAP_RINGBUF, 0, 0, 4096},
    {".rodata", MKS_MAP_ARRAY, 4, 8, 1},
    {".data", MKS_MAP_ARRAY, 4, 16, 1},
};

/* r0 = lookup(arr, &(u32)0) with the key at fp-4; 6 slots. */
#define LOOKUP_ARR0                                                                                \
    ST(W, 10, -4, 0), LD_MAP(1, M_ARR), MOV_REG(2, 10), ALU64_IMM(MKS_BPF_ADD, 2, -4),              \
        CALL(MKS_HELPER_MAP_LOOKUP)

#endif /* MKS_TESTS_VERIFIER_INSN_H */

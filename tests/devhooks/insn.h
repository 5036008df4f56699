/*
 * Hand-assembly of eBPF instructions for the devhooks runtime tests: small
 * programs whose effect the tests can count exactly, without clang.
 */
#ifndef MKS_TESTS_DEVHOOKS_INSN_H
#define MKS_TESTS_DEVHOOKS_INSN_H

#include "mkscope/bpf_isa.h"

#define I(code, dst, src, off, imm)                                                                \
    ((struct mks_insn){(uint8_t)(code), (uint8_t)((dst) | ((src) << 4)), (int16_t)(off),         \
                       (int32_t)(imm)})
#define MOV64_IMM(d, imm)    I(0xb7, d, 0, 0, imm)
#define MOV64_REG(d, s)      I(0xbf, d, s, 0, 0)
#define ADD64_IMM(d, imm)    I(0x07, d, 0, 0, imm)
#define LD_MAP(d, idx)       I(0x18, d, MKS_PSEUDO_MAP_IDX, 0, idx), I(0, 0, 0, 0, 0)
#define LD_MAPVAL(d, idx, o) I(0x18, d, MKS_PSEUDO_MAP_IDX_VALUE, 0, idx), I(0, 0, 0, 0, o)
#define ST_W(d, off, imm)    I(0x62, d, 0, off, imm)
#define STX_DW(d, s, off)    I(0x7b, d, s, off, 0)
#define STX_B(d, s, off)     I(0x73, d, s, off, 0)
#define LDX_DW(d, s, off)    I(0x79, d, s, off, 0)
#define LDX_W(d, s, off)     I(0x61, d, s, off, 0)
#define CALL(id)             I(0x85, 0, 0, 0, id)
#define CALL_LOCAL(rel)      I(0x85, 0, MKS_PSEUDO_CALL, 0, rel)
#define JEQ_IMM(d, imm, off) I(0x15, d, 0, off, imm)
#define JA(off)              I(0x05, 0, 0, off, 0)
#define ATOMIC_ADD64(d, s, off) I(0xdb, d, s, off, 0)
#define EXIT()               I(0x95, 0, 0, 0, 0)

/* r0 = lookup(map 0, key u32 0); if r0 { *(u64 *)r0 += 1 }; return 0 */
#define PROG_COUNT_MAP0                                                                            \
    {                                                                                              \
        ST_W(10, -4, 0), LD_MAP(1, 0), MOV64_REG(2, 10), ADD64_IMM(2, -4),                         \
            CALL(MKS_HELPER_MAP_LOOKUP), JEQ_IMM(0, 0, 2), MOV64_IMM(1, 1),                        \
            ATOMIC_ADD64(0, 1, 0), MOV64_IMM(0, 0), EXIT()                                         \
    }

#endif /* MKS_TESTS_DEVHOOKS_INSN_H */

/*
 * eBPF instruction set (RFC 9669) and the mkscope program environment:
 * instruction encoding, helper ids, map types and the shared layouts of map
 * values that the host, the device and BPF programs all see.
 *
 * Everything here is plain data usable from C11, CUDA C and (for the parts
 * guarded below) BPF C, so the VM, the verifier, the loader, the agent and
 * monitors written in C agree on one definition.
 */
#ifndef MKSCOPE_BPF_ISA_H
#define MKSCOPE_BPF_ISA_H

#ifndef __bpf__
#include <stdint.h>
#endif

/* ---- instruction encoding ---------------------------------------------- */

#ifndef __bpf__
/* One 64-bit instruction, little-endian byte order as in struct bpf_insn. */
struct mks_insn {
    uint8_t code;
    uint8_t regs; /* dst in the low nibble, src in the high nibble */
    int16_t off;
    int32_t imm;
};
static inline uint8_t mks_insn_dst(const struct mks_insn *i)
{
    return (uint8_t)(i->regs & 0x0f);
}
static inline uint8_t mks_insn_src(const struct mks_insn *i)
{
    return (uint8_t)(i->regs >> 4);
}
#endif

/* classes */
#define MKS_BPF_LD    0x00
#define MKS_BPF_LDX   0x01
#define MKS_BPF_ST    0x02
#define MKS_BPF_STX   0x03
#define MKS_BPF_ALU   0x04
#define MKS_BPF_JMP   0x05
#define MKS_BPF_JMP32 0x06
#define MKS_BPF_ALU64 0x07
#define MKS_BPF_CLASS(code) ((code)&0x07)

/* size (loads/stores) */
#define MKS_BPF_W  0x00
#define MKS_BPF_H  0x08
#define MKS_BPF_B  0x10
#define MKS_BPF_DW 0x18
/* mode (loads/stores) */
#define MKS_BPF_IMM    0x00
#define MKS_BPF_MEM    0x60
#define MKS_BPF_MEMSX  0x80
#define MKS_BPF_ATOMIC 0xc0

/* source */
#define MKS_BPF_K 0x00
#define MKS_BPF_X 0x08

/* ALU operations (high nibble) */
#define MKS_BPF_ADD  0x00
#define MKS_BPF_SUB  0x10
#define MKS_BPF_MUL  0x20
#define MKS_BPF_DIV  0x30
#define MKS_BPF_OR   0x40
#define MKS_BPF_AND  0x50
#define MKS_BPF_LSH  0x60
#define MKS_BPF_RSH  0x70
#define MKS_BPF_NEG  0x80
#define MKS_BPF_MOD  0x90
#define MKS_BPF_XOR  0xa0
#define MKS_BPF_MOV  0xb0
#define MKS_BPF_ARSH 0xc0
#define MKS_BPF_END  0xd0

/* jump operations (high nibble) */
#define MKS_BPF_JA   0x00
#define MKS_BPF_JEQ  0x10
#define MKS_BPF_JGT  0x20
#define MKS_BPF_JGE  0x30
#define MKS_BPF_JSET 0x40
#define MKS_BPF_JNE  0x50
#define MKS_BPF_JSGT 0x60
#define MKS_BPF_JSGE 0x70
#define MKS_BPF_CALL 0x80
#define MKS_BPF_EXIT 0x90
#define MKS_BPF_JLT  0xa0
#define MKS_BPF_JLE  0xb0
#define MKS_BPF_JSLT 0xc0
#define MKS_BPF_JSLE 0xd0

/* atomic operations (imm of an ATOMIC store) */
#define MKS_BPF_FETCH   0x01
#define MKS_BPF_XCHG    (0xe0 | MKS_BPF_FETCH)
#define MKS_BPF_CMPXCHG (0xf0 | MKS_BPF_FETCH)

/* src_reg values of a 64-bit immediate load (as libbpf leaves them after
 * relocation without a kernel) and of a call */
#define MKS_PSEUDO_MAP_IDX       5 /* imm = map index in the object */
#define MKS_PSEUDO_MAP_IDX_VALUE 6 /* imm = map index, next imm = offset in the value */
#define MKS_PSEUDO_CALL          1 /* local call, imm = relative target */

#define MKS_BPF_NREGS     11  /* r0..r10 */
#define MKS_BPF_STACK     512 /* bytes of stack per frame, as in Linux */
#define MKS_BPF_MAX_INSNS 4096 /* larger programs are rejected: bounded cost */
#define MKS_BPF_MAX_FRAMES 8  /* local call depth */

/* ---- helpers ------------------------------------------------------------ */

/*
 * Helper ids.  1-3 keep Linux's numbers so C written for Linux maps reads
 * naturally; the rest are mkscope's own.  No helper blocks or waits for the
 * host.  Signatures (r1..r5 -> r0):
 *   MAP_LOOKUP  (map, key*)            -> value* or 0
 *   MAP_UPDATE  (map, key*, value*, flags) -> 0 or negative errno
 *   MAP_DELETE  (map, key*)            -> 0 or negative errno
 *   TIME_NS     ()                     -> device clock, ns
 *   WORKER_ID   ()                     -> worker index
 *   SM_ID       ()                     -> SM (CPU: worker)
 *   RANK        ()                     -> rank
 *   HIST_ADD    (map, key*, value)     -> 0; adds value to the log2 histogram
 *                                         stored at key (struct mks_hist)
 *   RINGBUF_OUTPUT (map, data*, size, flags) -> 0 or -ENOSPC (counted as lost)
 * Helper 5 is left free: the conformance suite uses it for its "unwind" helper.
 */
enum mks_helper_id {
    MKS_HELPER_MAP_LOOKUP = 1,
    MKS_HELPER_MAP_UPDATE = 2,
    MKS_HELPER_MAP_DELETE = 3,
    MKS_HELPER_TIME_NS = 100,
    MKS_HELPER_WORKER_ID = 101,
    MKS_HELPER_SM_ID = 102,
    MKS_HELPER_RANK = 103,
    MKS_HELPER_HIST_ADD = 104,
    MKS_HELPER_RINGBUF_OUTPUT = 105,
};

/* ---- maps --------------------------------------------------------------- */

/*
 * Map types.  The numbers are what a BTF-defined map's __uint(type, ...)
 * carries in the object; they sit above Linux's so a Linux map type in an
 * mkscope object is reported instead of silently misread.
 */
enum mks_map_type {
    MKS_MAP_ARRAY = 0x1001,            /* key u32 index */
    MKS_MAP_PERWORKER_ARRAY = 0x1002,  /* key u32 index, one copy per worker */
    MKS_MAP_HASH = 0x1003,             /* fixed capacity, concurrent inserts */
    MKS_MAP_HIST = 0x1004,             /* key u32 index, value struct mks_hist */
    MKS_MAP_RINGBUF = 0x1005,          /* max_entries = bytes per worker ring */
};

#define MKS_HIST_BUCKETS 64

/* Value of a MKS_MAP_HIST entry: bucket b counts values v with
 * floor(log2(v)) == b - 1, bucket 0 counts v == 0. */
struct mks_hist {
    uint64_t count;
    uint64_t sum;
    uint64_t buckets[MKS_HIST_BUCKETS];
};

#endif /* MKSCOPE_BPF_ISA_H */

/*
 * Disassembler for verifier messages and `mkscope verify`: one instruction in
 * the syntax of Linux's verifier log and llvm-objdump, so a rejection line
 * reads like the listing a user gets from `llvm-objdump -d`.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include "mkscope/bpf_isa.h"
#include "mkscope/verifier.h"

static const char *const alu_ops[16] = {
    [MKS_BPF_ADD >> 4] = "+=",  [MKS_BPF_SUB >> 4] = "-=",  [MKS_BPF_MUL >> 4] = "*=",
    [MKS_BPF_DIV >> 4] = "/=",  [MKS_BPF_OR >> 4] = "|=",   [MKS_BPF_AND >> 4] = "&=",
    [MKS_BPF_LSH >> 4] = "<<=", [MKS_BPF_RSH >> 4] = ">>=", [MKS_BPF_MOD >> 4] = "%=",
    [MKS_BPF_XOR >> 4] = "^=",  [MKS_BPF_MOV >> 4] = "=",   [MKS_BPF_ARSH >> 4] = "s>>=",
};

static const char *const jmp_ops[16] = {
    [MKS_BPF_JEQ >> 4] = "==",  [MKS_BPF_JGT >> 4] = ">",    [MKS_BPF_JGE >> 4] = ">=",
    [MKS_BPF_JSET >> 4] = "&",  [MKS_BPF_JNE >> 4] = "!=",   [MKS_BPF_JSGT >> 4] = "s>",
    [MKS_BPF_JSGE >> 4] = "s>=", [MKS_BPF_JLT >> 4] = "<",   [MKS_BPF_JLE >> 4] = "<=",
    [MKS_BPF_JSLT >> 4] = "s<", [MKS_BPF_JSLE >> 4] = "s<=",
};

static const char *size_name(uint8_t code, int sx)
{
    switch (code & 0x18) {
    case MKS_BPF_B: return sx ? "s8" : "u8";
    case MKS_BPF_H: return sx ? "s16" : "u16";
    case MKS_BPF_W: return sx ? "s32" : "u32";
    default: return sx ? "s64" : "u64";
    }
}

const char *mks_helper_name(int32_t id)
{
    switch (id) {
    case MKS_HELPER_MAP_LOOKUP: return "mks_map_lookup";
    case MKS_HELPER_MAP_UPDATE: return "mks_map_update";
    case MKS_HELPER_MAP_DELETE: return "mks_map_delete";
    case MKS_HELPER_TIME_NS: return "mks_time_ns";
    case MKS_HELPER_WORKER_ID: return "mks_worker_id";
    case MKS_HELPER_SM_ID: return "mks_sm_id";
    case MKS_HELPER_RANK: return "mks_rank";
    case MKS_HELPER_HIST_ADD: return "mks_hist_add";
    case MKS_HELPER_RINGBUF_OUTPUT: return "mks_ringbuf_output";
    default: return NULL;
    }
}

static int disasm_alu(const struct mks_insn *in, char *buf, size_t len)
{
    int is64 = MKS_BPF_CLASS(in->code) == MKS_BPF_ALU64;
    char r = is64 ? 'r' : 'w';
    uint8_t op = in->code & 0xf0, dst = mks_insn_dst(in), src = mks_insn_src(in);
    int x = (in->code & MKS_BPF_X) != 0;

    if (op == MKS_BPF_NEG)
        return snprintf(buf, len, "%c%u = -%c%u", r, dst, r, dst);
    if (op == MKS_BPF_END) {
        if (is64)
            return snprintf(buf, len, "r%u = bswap%d r%u", dst, in->imm, dst);
        return snprintf(buf, len, "r%u = %s%d r%u", dst, x ? "be" : "le", in->imm, dst);
    }
    const char *o = alu_ops[op >> 4];
    if (!o)
        return snprintf(buf, len, "(%02x) invalid ALU operation", in->code);
    if (op == MKS_BPF_MOV && in->off != 0 && x)
        return snprintf(buf, len, "%c%u = (s%d)%c%u", r, dst, in->off, r, src);
    const char *s = (op == MKS_BPF_DIV || op == MKS_BPF_MOD) && in->off == 1 ? "s" : "";
    if (x)
        return snprintf(buf, len, "%c%u %s%s %c%u", r, dst, s, o, r, src);
    return snprintf(buf, len, "%c%u %s%s %d", r, dst, s, o, in->imm);
}

static int disasm_atomic(const struct mks_insn *in, char *buf, size_t len)
{
    const char *sz = size_name(in->code, 0);
    uint8_t dst = mks_insn_dst(in), src = mks_insn_src(in);
    int fetch = (in->imm & MKS_BPF_FETCH) != 0;
    const char *name = NULL, *op = NULL;

    switch (in->imm & ~MKS_BPF_FETCH) {
    case MKS_BPF_ADD: name = "add"; op = "+="; break;
    case MKS_BPF_OR: name = "or"; op = "|="; break;
    case MKS_BPF_AND: name = "and"; op = "&="; break;
    case MKS_BPF_XOR: name = "xor"; op = "^="; break;
    default: break;
    }
    if (in->imm == MKS_BPF_XCHG)
        return snprintf(buf, len, "r%u = xchg_%s((%s *)(r%u %+d), r%u)", src, sz + 1, sz, dst, in->off, src);
    if (in->imm == MKS_BPF_CMPXCHG)
        return snprintf(buf, len, "r0 = cmpxchg_%s((%s *)(r%u %+d), r0, r%u)", sz + 1, sz, dst, in->off, src);
    if (!name)
        return snprintf(buf, len, "(%02x) invalid atomic operation %#x", in->code, (unsigned)in->imm);
    if (fetch)
        return snprintf(buf, len, "r%u = atomic_fetch_%s((%s *)(r%u %+d), r%u)", src, name, sz, dst, in->off, src);
    return snprintf(buf, len, "lock *(%s *)(r%u %+d) %s r%u", sz, dst, in->off, op, src);
}

int mks_insn_disasm(const struct mks_insn *insns, uint32_t n_insns, uint32_t idx, char *buf, size_t len)
{
    if (!insns || !buf || len == 0 || idx >= n_insns)
        return -EINVAL;
    const struct mks_insn *in = &insns[idx];
    uint8_t cls = MKS_BPF_CLASS(in->code), dst = mks_insn_dst(in), src = mks_insn_src(in);
    uint8_t mode = in->code & 0xe0;
    int n;

    switch (cls) {
    case MKS_BPF_ALU:
    case MKS_BPF_ALU64:
        n = disasm_alu(in, buf, len);
        break;
    case MKS_BPF_LDX:
        n = snprintf(buf, len, "r%u = *(%s *)(r%u %+d)", dst, size_name(in->code, mode == MKS_BPF_MEMSX), src,
                     in->off);
        if (mode != MKS_BPF_MEM && mode != MKS_BPF_MEMSX)
            n = snprintf(buf, len, "(%02x) invalid load", in->code);
        break;
    case MKS_BPF_ST:
        n = snprintf(buf, len, "*(%s *)(r%u %+d) = %d", size_name(in->code, 0), dst, in->off, in->imm);
        if (mode != MKS_BPF_MEM)
            n = snprintf(buf, len, "(%02x) invalid store", in->code);
        break;
    case MKS_BPF_STX:
        if (mode == MKS_BPF_ATOMIC)
            n = disasm_atomic(in, buf, len);
        else if (mode == MKS_BPF_MEM)
            n = snprintf(buf, len, "*(%s *)(r%u %+d) = r%u", size_name(in->code, 0), dst, in->off, src);
        else
            n = snprintf(buf, len, "(%02x) invalid store", in->code);
        break;
    case MKS_BPF_LD:
        if (in->code != (MKS_BPF_LD | MKS_BPF_IMM | MKS_BPF_DW)) {
            n = snprintf(buf, len, "(%02x) invalid load", in->code);
        } else if (idx + 1 >= n_insns) {
            n = snprintf(buf, len, "r%u = <ld_imm64 missing its second half>", dst);
        } else if (src == MKS_PSEUDO_MAP_IDX) {
            n = snprintf(buf, len, "r%u = map[%d] ll", dst, in->imm);
        } else if (src == MKS_PSEUDO_MAP_IDX_VALUE) {
            n = snprintf(buf, len, "r%u = &map[%d][0] + %d ll", dst, in->imm, insns[idx + 1].imm);
        } else {
            uint64_t v = (uint64_t)(uint32_t)in->imm | ((uint64_t)(uint32_t)insns[idx + 1].imm << 32);
            if (src)
                n = snprintf(buf, len, "r%u = %#" PRIx64 " ll (src_reg %u)", dst, v, src);
            else
                n = snprintf(buf, len, "r%u = %#" PRIx64 " ll", dst, v);
        }
        break;
    case MKS_BPF_JMP:
    case MKS_BPF_JMP32: {
        uint8_t op = in->code & 0xf0;
        char r = cls == MKS_BPF_JMP ? 'r' : 'w';
        if (op == MKS_BPF_EXIT && cls == MKS_BPF_JMP) {
            n = snprintf(buf, len, "exit");
        } else if (op == MKS_BPF_CALL && cls == MKS_BPF_JMP) {
            const char *h = mks_helper_name(in->imm);
            if (src == MKS_PSEUDO_CALL)
                n = snprintf(buf, len, "call pc%+d", in->imm);
            else if (h)
                n = snprintf(buf, len, "call %s#%d", h, in->imm);
            else
                n = snprintf(buf, len, "call #%d", in->imm);
        } else if (op == MKS_BPF_JA) {
            n = snprintf(buf, len, "goto %+d", cls == MKS_BPF_JMP32 ? in->imm : in->off);
        } else if (jmp_ops[op >> 4]) {
            if (in->code & MKS_BPF_X)
                n = snprintf(buf, len, "if %c%u %s %c%u goto %+d", r, dst, jmp_ops[op >> 4], r, src, in->off);
            else
                n = snprintf(buf, len, "if %c%u %s %d goto %+d", r, dst, jmp_ops[op >> 4], in->imm, in->off);
        } else {
            n = snprintf(buf, len, "(%02x) invalid jump", in->code);
        }
        break;
    }
    default:
        n = snprintf(buf, len, "(%02x) invalid", in->code);
        break;
    }
    return n < 0 ? -EINVAL : n;
}

/*
 * The decoded form of a program and its interpreter (part of vm.c's
 * translation unit: it shares vm.c's memory checks, helpers and ALU
 * helpers; vm.c includes it at its end).
 *
 * The device runs programs in this form: the GPU pump decodes each program
 * once when it copies it to the device mirror (mks_vm_decode), so no run
 * decodes the opcode byte.  A decoded instruction is 8 bytes like the raw
 * one, so it fills the same program slot:
 *
 *   op    a dense operation class (enum vmd_op) | VMD_X when the source
 *         operand is a register; everything the raw opcode byte, the offset
 *         or the immediate select between (signed division, sign-extending
 *         moves, byte-swap widths, call kinds) is folded into the class, and
 *         an instruction the VM refuses (unknown opcode, register above r10)
 *         is VMD_INVALID.  Classes are consecutive small numbers, so the
 *         dispatch is one indexed branch, not a compare tree.
 *   regs  dst | src << 4 as in the raw form (0 for VMD_INVALID: the
 *         dispatch loads both registers before it branches)
 *   aux   jumps and local calls: the absolute target, VMD_NOWHERE when it
 *         lies outside the program; loads and stores: the offset;
 *         VMD_INVALID: the raw opcode byte
 *   imm   the raw immediate (ld_imm64's second slot keeps its half)
 *
 * Nothing the raw VM checks at run time is dropped: memory accesses against
 * the run's regions, jump targets against the program (decoding resolves a
 * target; one outside the program stops the run when taken, as before),
 * map handles, call depth, the instruction limit at backward transfers.
 * Errors and instruction counts are the raw VM's, case for case (the
 * conformance suite runs both, tests/devhooks/conformance.c).
 *
 * On the device the monitor warp runs 32 events side by side through
 * mksi_vmd_exec_warp: at each step only the lanes at the lowest
 * (program, instruction) key among the warp's running lanes execute, so
 * every step executes one instruction of one program for all of them (the
 * dispatch branch, the operand fields and the instruction fetch are the same
 * for all active lanes) and lanes that took different sides of a branch
 * meet again where the program's paths join, instead of running the
 * program's remainder one after the other at different instructions.
 */

enum vmd_op {
    VMD_INVALID = 0,
    /* 64-bit ALU: r[dst] = r[dst] OP b, b = r[src] (VMD_X) or the immediate */
    VMD_ADD, VMD_SUB, VMD_MUL, VMD_DIV, VMD_SDIV, VMD_MOD, VMD_SMOD, VMD_OR, VMD_AND, VMD_XOR,
    VMD_LSH, VMD_RSH, VMD_ARSH, VMD_NEG, VMD_MOV, VMD_MOVSX8, VMD_MOVSX16, VMD_MOVSX32,
    VMD_BSWAP16, VMD_BSWAP32, VMD_BSWAP64,
    /* 32-bit ALU, upper half of dst zeroed */
    VMD_ADD32, VMD_SUB32, VMD_MUL32, VMD_DIV32, VMD_SDIV32, VMD_MOD32, VMD_SMOD32, VMD_OR32,
    VMD_AND32, VMD_XOR32, VMD_LSH32, VMD_RSH32, VMD_ARSH32, VMD_NEG32, VMD_MOV32, VMD_MOVSX32_8,
    VMD_MOVSX32_16, VMD_LE16, VMD_LE32, VMD_LE64,
    /* memory: address r[src] + off (loads), r[dst] + off (stores) */
    VMD_LDXB, VMD_LDXH, VMD_LDXW, VMD_LDXDW, VMD_LDXSB, VMD_LDXSH, VMD_LDXSW,
    VMD_STB, VMD_STH, VMD_STW, VMD_STDW, /* value r[src] (VMD_X) or the immediate */
    VMD_ATOMIC32, VMD_ATOMIC64,
    VMD_LDDW, /* two slots; src (immediate or map reference) checked when run */
    /* jumps to aux: always, or when r[dst] OP b */
    VMD_JA, VMD_JEQ, VMD_JNE, VMD_JGT, VMD_JGE, VMD_JLT, VMD_JLE, VMD_JSET, VMD_JSGT, VMD_JSGE,
    VMD_JSLT, VMD_JSLE, VMD_JEQ32, VMD_JNE32, VMD_JGT32, VMD_JGE32, VMD_JLT32, VMD_JLE32,
    VMD_JSET32, VMD_JSGT32, VMD_JSGE32, VMD_JSLT32, VMD_JSLE32,
    VMD_CALL_LOCAL, /* to aux */
    VMD_CALL,       /* helper imm */
    VMD_CALLX,      /* helper r[dst] */
    VMD_EXIT,
    VMD_N_OPS
};
#define VMD_X       0x80u
#define VMD_NOWHERE 0xffffu

MKS_STATIC_ASSERT(VMD_N_OPS <= 0x80, "operation classes fit below VMD_X");
MKS_STATIC_ASSERT(sizeof(struct mks_dinsn) == sizeof(struct mks_insn),
                  "a decoded program fills the raw program's slot");

#ifndef __CUDACC__
/* The class of one raw instruction (without VMD_X), VMD_INVALID for one the
 * VM refuses whatever it would read. */
static uint32_t vmd_class(const struct mks_insn *in)
{
    static const uint8_t alu[16] = {
        [MKS_BPF_ADD >> 4] = VMD_ADD, [MKS_BPF_SUB >> 4] = VMD_SUB, [MKS_BPF_MUL >> 4] = VMD_MUL,
        [MKS_BPF_OR >> 4] = VMD_OR,   [MKS_BPF_AND >> 4] = VMD_AND, [MKS_BPF_XOR >> 4] = VMD_XOR,
        [MKS_BPF_LSH >> 4] = VMD_LSH, [MKS_BPF_RSH >> 4] = VMD_RSH, [MKS_BPF_ARSH >> 4] = VMD_ARSH,
    };
    static const uint8_t jmp[16] = {
        [MKS_BPF_JEQ >> 4] = VMD_JEQ,   [MKS_BPF_JNE >> 4] = VMD_JNE,   [MKS_BPF_JGT >> 4] = VMD_JGT,
        [MKS_BPF_JGE >> 4] = VMD_JGE,   [MKS_BPF_JLT >> 4] = VMD_JLT,   [MKS_BPF_JLE >> 4] = VMD_JLE,
        [MKS_BPF_JSET >> 4] = VMD_JSET, [MKS_BPF_JSGT >> 4] = VMD_JSGT, [MKS_BPF_JSGE >> 4] = VMD_JSGE,
        [MKS_BPF_JSLT >> 4] = VMD_JSLT, [MKS_BPF_JSLE >> 4] = VMD_JSLE,
    };
    const uint32_t code = in->code, cls = MKS_BPF_CLASS(code), op = code & 0xf0;
    const int x = (code & MKS_BPF_X) != 0, off = in->off, imm = in->imm;
    const uint32_t w32 = VMD_ADD32 - VMD_ADD; /* 32-bit class = 64-bit class + w32 */
    switch (cls) {
    case MKS_BPF_ALU64:
    case MKS_BPF_ALU: {
        const uint32_t w = cls == MKS_BPF_ALU ? w32 : 0;
        if (alu[op >> 4])
            return alu[op >> 4] + w;
        switch (op) {
        case MKS_BPF_DIV: return off == 1 ? VMD_SDIV + w : off == 0 ? VMD_DIV + w : VMD_INVALID;
        case MKS_BPF_MOD: return off == 1 ? VMD_SMOD + w : off == 0 ? VMD_MOD + w : VMD_INVALID;
        case MKS_BPF_NEG: return x ? VMD_INVALID : VMD_NEG + w;
        case MKS_BPF_MOV:
            if (!x || off == 0)
                return VMD_MOV + w;
            if (off == 8)
                return w ? VMD_MOVSX32_8 : VMD_MOVSX8;
            if (off == 16)
                return w ? VMD_MOVSX32_16 : VMD_MOVSX16;
            return off == 32 && !w ? VMD_MOVSX32 : VMD_INVALID;
        case MKS_BPF_END:
            if (cls == MKS_BPF_ALU64 && x)
                return VMD_INVALID;
            if (cls == MKS_BPF_ALU && !x) /* to little endian: truncate */
                return imm == 16 ? VMD_LE16 : imm == 32 ? VMD_LE32 : imm == 64 ? VMD_LE64 : VMD_INVALID;
            return imm == 16 ? VMD_BSWAP16 : imm == 32 ? VMD_BSWAP32 : imm == 64 ? VMD_BSWAP64 : VMD_INVALID;
        default: return VMD_INVALID;
        }
    }
    case MKS_BPF_LDX:
        switch (code) {
        case MKS_BPF_LDX | MKS_BPF_MEM | MKS_BPF_B: return VMD_LDXB;
        case MKS_BPF_LDX | MKS_BPF_MEM | MKS_BPF_H: return VMD_LDXH;
        case MKS_BPF_LDX | MKS_BPF_MEM | MKS_BPF_W: return VMD_LDXW;
        case MKS_BPF_LDX | MKS_BPF_MEM | MKS_BPF_DW: return VMD_LDXDW;
        case MKS_BPF_LDX | MKS_BPF_MEMSX | MKS_BPF_B: return VMD_LDXSB;
        case MKS_BPF_LDX | MKS_BPF_MEMSX | MKS_BPF_H: return VMD_LDXSH;
        case MKS_BPF_LDX | MKS_BPF_MEMSX | MKS_BPF_W: return VMD_LDXSW;
        default: return VMD_INVALID;
        }
    case MKS_BPF_ST:
    case MKS_BPF_STX:
        if ((code & 0xe0) == MKS_BPF_MEM) {
            const uint32_t size = code & 0x18;
            return size == MKS_BPF_B ? VMD_STB : size == MKS_BPF_H ? VMD_STH
                   : size == MKS_BPF_W ? VMD_STW : VMD_STDW;
        }
        if (code == (MKS_BPF_STX | MKS_BPF_ATOMIC | MKS_BPF_W))
            return VMD_ATOMIC32;
        if (code == (MKS_BPF_STX | MKS_BPF_ATOMIC | MKS_BPF_DW))
            return VMD_ATOMIC64;
        return VMD_INVALID;
    case MKS_BPF_LD:
        return code == (MKS_BPF_LD | MKS_BPF_IMM | MKS_BPF_DW) ? VMD_LDDW : VMD_INVALID;
    case MKS_BPF_JMP:
    case MKS_BPF_JMP32: {
        const uint32_t w = cls == MKS_BPF_JMP32 ? VMD_JEQ32 - VMD_JEQ : 0;
        if (jmp[op >> 4])
            return jmp[op >> 4] + w;
        if (op == MKS_BPF_JA)
            return x ? VMD_INVALID : VMD_JA;
        if (cls == MKS_BPF_JMP32)
            return VMD_INVALID;
        if (code == (MKS_BPF_JMP | MKS_BPF_CALL | MKS_BPF_K))
            return mks_insn_src(in) == MKS_PSEUDO_CALL ? VMD_CALL_LOCAL
                   : mks_insn_src(in) == 0             ? VMD_CALL
                                                       : VMD_INVALID;
        if (code == (MKS_BPF_JMP | MKS_BPF_CALL | MKS_BPF_X))
            return VMD_CALLX;
        if (code == (MKS_BPF_JMP | MKS_BPF_EXIT))
            return VMD_EXIT;
        return VMD_INVALID;
    }
    default: return VMD_INVALID;
    }
}

int mks_vm_decode(const struct mks_insn *insns, uint32_t n, struct mks_dinsn *out)
{
    if (!insns || !out || n == 0 || n >= VMD_NOWHERE)
        return MKS_VM_EARG;
    for (uint32_t i = 0; i < n; i++) {
        const struct mks_insn *in = &insns[i];
        uint32_t c = mks_insn_dst(in) > 10 || mks_insn_src(in) > 10 ? VMD_INVALID : vmd_class(in);
        uint32_t aux = (uint16_t)in->off, x = 0;
        if (c >= VMD_JA && c <= VMD_CALL_LOCAL) {
            /* relative to the next instruction: the offset, or the
             * immediate for gotol and local calls */
            const int64_t d = c == VMD_CALL_LOCAL || (c == VMD_JA && MKS_BPF_CLASS(in->code) == MKS_BPF_JMP32)
                                  ? in->imm : in->off;
            const int64_t t = (int64_t)i + 1 + d;
            aux = t >= 0 && t < (int64_t)n ? (uint32_t)t : VMD_NOWHERE;
        }
        /* VMD_X: the source operand b is r[src] (register forms of ALU
         * operations and conditional jumps, STX) */
        if (c >= VMD_STB && c <= VMD_STDW)
            x = MKS_BPF_CLASS(in->code) == MKS_BPF_STX;
        else if (c != VMD_INVALID && MKS_BPF_CLASS(in->code) != MKS_BPF_LDX &&
                 MKS_BPF_CLASS(in->code) != MKS_BPF_STX && MKS_BPF_CLASS(in->code) != MKS_BPF_LD)
            x = (in->code & MKS_BPF_X) != 0;
        out[i].op = (uint8_t)(c | (x ? VMD_X : 0u));
        out[i].regs = c == VMD_INVALID ? 0 : in->regs;
        /* VMD_INVALID keeps its raw opcode byte: a run's start judges the
         * program's last instruction by it, as the raw VM does */
        out[i].aux = (uint16_t)(c == VMD_INVALID ? in->code : aux);
        out[i].imm = in->imm;
    }
    return 0;
}
#endif

/* One lane's run: its position and regions (scalars the device keeps in
 * registers: nothing takes their address) and the arrays a run indexes
 * (registers, saved registers of each call level, the stack of all frames),
 * which live in the caller's separate locals. */
struct vmd_lane {
    struct vm_mem mem;
    uint64_t bias; /* instructions executed = pc + bias */
    uint32_t pc;   /* index of the next instruction */
    uint32_t depth, stopped; /* stopped: 1 stop with err, 2 the program exited */
    int err;
    uint64_t *r; /* [16]: r0..r10, and any register nibble indexes inside it */
    struct vm_frame *frames; /* [VM_NFRAMES] */
    uint64_t *stack;         /* [VM_STACK_WORDS] */
};
#define VM_STACK_WORDS (VM_NFRAMES * VM_FRAME / 8)
/* The arrays of one lane's run. */
#define VMD_LANE_ARRAYS(L)                                                                             uint64_t L##_r[16];                                                                                struct vm_frame L##_frames[VM_NFRAMES];                                                            uint64_t L##_stack[VM_STACK_WORDS];                                                                struct vmd_lane L;                                                                                 L.r = L##_r;                                                                                       L.frames = L##_frames;                                                                             L.stack = L##_stack

/* The run's start: returns 0, or stops the lane with the raw VM's error for
 * an environment or a program end it refuses. */
MKS_INLINE void vmd_init(struct vmd_lane *L, const struct mks_vm_env *env, uint64_t r1, uint64_t r2)
{
    const struct mks_dinsn *text = (const struct mks_dinsn *)env->insns;
    const uint32_t n = env->n_insns;
    L->pc = 0;
    L->bias = 0;
    L->depth = 0;
    L->stopped = 0;
    L->err = MKS_VM_OK;
    if (!text || n == 0 || n >= VMD_NOWHERE) {
        L->err = MKS_VM_EARG;
        L->stopped = 1;
        return;
    }
    {
        /* as the raw VM: the last instruction must be exit or goto, by its
         * opcode byte (one with a register above r10 passes here and stops
         * the run when it is reached) */
        uint32_t last = text[n - 1].op & 0x7fu;
        if (last == VMD_INVALID) {
            const uint32_t code = text[n - 1].aux & 0xffu;
            last = code == (MKS_BPF_JMP | MKS_BPF_EXIT) ? VMD_EXIT
                   : code == (MKS_BPF_JMP | MKS_BPF_JA) || code == (MKS_BPF_JMP32 | MKS_BPF_JA)
                       ? VMD_JA
                   : code == (MKS_BPF_LD | MKS_BPF_IMM | MKS_BPF_DW) ? VMD_LDDW
                                                                     : VMD_INVALID;
        }
        if (MKS_UNLIKELY(last != VMD_EXIT && last != VMD_JA)) {
            L->err = last == VMD_LDDW ? MKS_VM_EINSN : MKS_VM_EJUMP;
            L->stopped = 1;
            return;
        }
    }
    L->mem.stack_lo = (uint64_t)(uintptr_t)L->stack + VM_STACK_WORDS * 8 - VM_FRAME;
    L->mem.stack_len = VM_FRAME;
    L->mem.ctx = (uint64_t)(uintptr_t)env->ctx;
    L->mem.ctx_len = env->ctx ? env->ctx_len : 0;
    L->mem.arena = env->maps ? (uint64_t)(uintptr_t)env->maps->arena : 0;
    L->mem.arena_len = env->maps ? env->maps->arena_len : 0;
    L->mem.extra = env->extra.base;
    L->mem.extra_len = env->extra.len <= ~0ull - env->extra.base ? env->extra.len : 0;
    L->mem.extra_writable = env->extra.writable;
    for (int i = 0; i < MKS_BPF_NREGS; i++)
        L->r[i] = 0;
    L->r[1] = r1;
    L->r[2] = r2;
    L->r[10] = L->mem.stack_lo + VM_FRAME;
}

MKS_INLINE uint64_t vmd_fetch(const struct mks_dinsn *text, uint32_t pc)
{
    return vm_fetch((const struct mks_insn *)&text[pc]);
}

/* Execute the instruction `w` (text[L->pc], fetched by the caller). */
MKS_INLINE void vmd_step(struct vmd_lane *L, const struct mks_vm_env *env, uint64_t w)
{
    const struct mks_dinsn *text = (const struct mks_dinsn *)env->insns;
    const uint32_t n = env->n_insns;
    const uint64_t limit = env->insn_limit ? env->insn_limit : ~0ull;
    const uint32_t op = (uint32_t)w & 0xffu, dst = (uint32_t)(w >> 8) & 0x0fu,
                   src = (uint32_t)(w >> 12) & 0x0fu, aux = (uint32_t)(w >> 16) & 0xffffu;
    const int32_t simm = (int32_t)(w >> 32);
    const uint64_t imm = (uint64_t)(int64_t)simm;
    const int64_t off = (int16_t)(uint16_t)aux;
    uint64_t *r = L->r;
    /* both operands before the dispatch (regs is 0 for VMD_INVALID) */
    const uint64_t a = r[dst], rs = r[src];
    const uint64_t b = (op & VMD_X) ? rs : imm;
    const uint32_t a32 = (uint32_t)a, b32 = (uint32_t)b;
    L->pc++;

#define VMD_STOP(how, e)                                                                           \
    do {                                                                                           \
        L->err = (e);                                                                              \
        L->stopped = (how);                                                                        \
        return;                                                                                    \
    } while (0)
#define VMD_CHECK_LIMIT()                                                                          \
    do {                                                                                           \
        if (MKS_UNLIKELY(L->pc + L->bias > limit))                                                 \
            VMD_STOP(1, MKS_VM_OK);                                                                \
    } while (0)
/* a transfer to t (VMD_NOWHERE or beyond the program: stop); the count of
 * executed instructions does not move; one that may lead back is a point to
 * check the limit */
#define VMD_GOTO(t)                                                                                \
    do {                                                                                           \
        const uint32_t t_ = (t);                                                                   \
        if (MKS_UNLIKELY(t_ >= n))                                                                 \
            VMD_STOP(1, MKS_VM_EJUMP);                                                             \
        L->bias += (uint64_t)L->pc - t_;                                                           \
        L->pc = t_;                                                                                \
    } while (0)
#define VMD_JUMP_IF(c)                                                                             \
    do {                                                                                           \
        if (c) {                                                                                   \
            const int back_ = aux < L->pc;                                                         \
            VMD_GOTO(aux);                                                                         \
            if (back_)                                                                             \
                VMD_CHECK_LIMIT();                                                                 \
        }                                                                                          \
    } while (0)
#define VMD_MEM(addr, size, wr)                                                                    \
    do {                                                                                           \
        if (MKS_UNLIKELY(!vm_mem_ok(&L->mem, (addr), (size), (wr))))                               \
            VMD_STOP(1, MKS_VM_EMEM);                                                              \
    } while (0)
#define VMD_LDX(type, conv)                                                                        \
    do {                                                                                           \
        const uint64_t a_ = rs + (uint64_t)off;                                                    \
        type v_;                                                                                   \
        VMD_MEM(a_, sizeof(type), 0);                                                              \
        VM_COPY(&v_, (const void *)(uintptr_t)a_, sizeof(type));                                  \
        r[dst] = conv(v_);                                                                         \
    } while (0)
#define VMD_ST(type)                                                                               \
    do {                                                                                           \
        const uint64_t a_ = a + (uint64_t)off;                                                     \
        type v_ = (type)b;                                                                         \
        VMD_MEM(a_, sizeof(type), 1);                                                              \
        VM_COPY((void *)(uintptr_t)a_, &v_, sizeof(type));                                         \
    } while (0)

#define VMD_U64(x) ((uint64_t)(x))
#define VMD_S64(x) ((uint64_t)(int64_t)(x))
    switch (op & 0x7fu) {
    case VMD_ADD: r[dst] = a + b; return;
    case VMD_SUB: r[dst] = a - b; return;
    case VMD_MUL: r[dst] = a * b; return;
    case VMD_DIV: r[dst] = b ? a / b : 0; return;
    case VMD_SDIV: r[dst] = vm_sdiv64(a, b); return;
    case VMD_MOD: r[dst] = b ? a % b : a; return;
    case VMD_SMOD: r[dst] = vm_smod64(a, b); return;
    case VMD_OR: r[dst] = a | b; return;
    case VMD_AND: r[dst] = a & b; return;
    case VMD_XOR: r[dst] = a ^ b; return;
    case VMD_LSH: r[dst] = a << (b & 63); return;
    case VMD_RSH: r[dst] = a >> (b & 63); return;
    case VMD_ARSH: r[dst] = (uint64_t)((int64_t)a >> (b & 63)); return;
    case VMD_NEG: r[dst] = (uint64_t)0 - a; return;
    case VMD_MOV: r[dst] = b; return;
    case VMD_MOVSX8: r[dst] = vm_sext(rs, 8); return;
    case VMD_MOVSX16: r[dst] = vm_sext(rs, 16); return;
    case VMD_MOVSX32: r[dst] = vm_sext(rs, 32); return;
    case VMD_BSWAP16: r[dst] = vm_bswap16(a); return;
    case VMD_BSWAP32: r[dst] = vm_bswap32(a); return;
    case VMD_BSWAP64: r[dst] = vm_bswap64(a); return;

    case VMD_ADD32: r[dst] = (uint32_t)(a32 + b32); return;
    case VMD_SUB32: r[dst] = (uint32_t)(a32 - b32); return;
    case VMD_MUL32: r[dst] = (uint32_t)(a32 * b32); return;
    case VMD_DIV32: r[dst] = b32 ? a32 / b32 : 0u; return;
    case VMD_SDIV32: r[dst] = vm_sdiv32(a32, b32); return;
    case VMD_MOD32: r[dst] = b32 ? a32 % b32 : a32; return;
    case VMD_SMOD32: r[dst] = vm_smod32(a32, b32); return;
    case VMD_OR32: r[dst] = a32 | b32; return;
    case VMD_AND32: r[dst] = a32 & b32; return;
    case VMD_XOR32: r[dst] = a32 ^ b32; return;
    case VMD_LSH32: r[dst] = (uint32_t)(a32 << (b32 & 31)); return;
    case VMD_RSH32: r[dst] = a32 >> (b32 & 31); return;
    case VMD_ARSH32: r[dst] = (uint32_t)((int32_t)a32 >> (b32 & 31)); return;
    case VMD_NEG32: r[dst] = 0u - a32; return;
    case VMD_MOV32: r[dst] = b32; return;
    case VMD_MOVSX32_8: r[dst] = (uint32_t)vm_sext(rs, 8); return;
    case VMD_MOVSX32_16: r[dst] = (uint32_t)vm_sext(rs, 16); return;
    case VMD_LE16: r[dst] = (uint16_t)a; return;
    case VMD_LE32: r[dst] = (uint32_t)a; return;
    case VMD_LE64: return;

    case VMD_LDXB: VMD_LDX(uint8_t, VMD_U64); return;
    case VMD_LDXH: VMD_LDX(uint16_t, VMD_U64); return;
    case VMD_LDXW: VMD_LDX(uint32_t, VMD_U64); return;
    case VMD_LDXDW: VMD_LDX(uint64_t, VMD_U64); return;
    case VMD_LDXSB: VMD_LDX(int8_t, VMD_S64); return;
    case VMD_LDXSH: VMD_LDX(int16_t, VMD_S64); return;
    case VMD_LDXSW: VMD_LDX(int32_t, VMD_S64); return;
    case VMD_STB: VMD_ST(uint8_t); return;
    case VMD_STH: VMD_ST(uint16_t); return;
    case VMD_STW: VMD_ST(uint32_t); return;
    case VMD_STDW: VMD_ST(uint64_t); return;

    case VMD_ATOMIC32:
    case VMD_ATOMIC64: {
        const uint32_t size = (op & 0x7fu) == VMD_ATOMIC64 ? 8u : 4u;
        const uint64_t ad = a + (uint64_t)off;
        uint64_t old = 0;
        int rc;
        VMD_MEM(ad, size, 1);
        if (MKS_UNLIKELY(ad & (size - 1u)))
            VMD_STOP(1, MKS_VM_EALIGN);
#ifdef __CUDACC__
        rc = vm_atomic(ad, size, (uint32_t)simm, rs, r[0],
                       vm_in(ad, 1, (uint64_t)(uintptr_t)L->stack, VM_STACK_WORDS * 8), &old);
#else
        rc = vm_atomic(ad, size, (uint32_t)simm, rs, r[0], 0, &old);
#endif
        if (rc)
            VMD_STOP(1, rc);
        if ((uint32_t)simm == MKS_BPF_CMPXCHG)
            r[0] = old;
        else if (simm & MKS_BPF_FETCH)
            r[src] = old;
        return;
    }

    case VMD_LDDW: {
        uint32_t hi;
        if (MKS_UNLIKELY(L->pc == n))
            VMD_STOP(1, MKS_VM_EINSN);
        hi = (uint32_t)text[L->pc].imm;
        L->pc++;
        L->bias--; /* two slots, one instruction */
        if (MKS_UNLIKELY(L->pc == n)) /* its second slot was the last */
            VMD_STOP(1, MKS_VM_EJUMP);
        if (src == 0) {
            r[dst] = ((uint64_t)hi << 32) | (uint32_t)simm;
        } else if (src == MKS_PSEUDO_MAP_IDX || src == MKS_PSEUDO_MAP_IDX_VALUE) {
            const uint64_t ad = vm_map_ref(env, src, (uint32_t)simm, hi);
            if (!ad)
                VMD_STOP(1, MKS_VM_ECALL);
            r[dst] = ad;
        } else {
            VMD_STOP(1, MKS_VM_EINSN);
        }
        return;
    }

    case VMD_JA: VMD_JUMP_IF(1); return;
    case VMD_JEQ: VMD_JUMP_IF(a == b); return;
    case VMD_JNE: VMD_JUMP_IF(a != b); return;
    case VMD_JGT: VMD_JUMP_IF(a > b); return;
    case VMD_JGE: VMD_JUMP_IF(a >= b); return;
    case VMD_JLT: VMD_JUMP_IF(a < b); return;
    case VMD_JLE: VMD_JUMP_IF(a <= b); return;
    case VMD_JSET: VMD_JUMP_IF((a & b) != 0); return;
    case VMD_JSGT: VMD_JUMP_IF((int64_t)a > (int64_t)b); return;
    case VMD_JSGE: VMD_JUMP_IF((int64_t)a >= (int64_t)b); return;
    case VMD_JSLT: VMD_JUMP_IF((int64_t)a < (int64_t)b); return;
    case VMD_JSLE: VMD_JUMP_IF((int64_t)a <= (int64_t)b); return;
    case VMD_JEQ32: VMD_JUMP_IF(a32 == b32); return;
    case VMD_JNE32: VMD_JUMP_IF(a32 != b32); return;
    case VMD_JGT32: VMD_JUMP_IF(a32 > b32); return;
    case VMD_JGE32: VMD_JUMP_IF(a32 >= b32); return;
    case VMD_JLT32: VMD_JUMP_IF(a32 < b32); return;
    case VMD_JLE32: VMD_JUMP_IF(a32 <= b32); return;
    case VMD_JSET32: VMD_JUMP_IF((a32 & b32) != 0); return;
    case VMD_JSGT32: VMD_JUMP_IF((int32_t)a32 > (int32_t)b32); return;
    case VMD_JSGE32: VMD_JUMP_IF((int32_t)a32 >= (int32_t)b32); return;
    case VMD_JSLT32: VMD_JUMP_IF((int32_t)a32 < (int32_t)b32); return;
    case VMD_JSLE32: VMD_JUMP_IF((int32_t)a32 <= (int32_t)b32); return;

    case VMD_CALL_LOCAL: {
        const uint32_t d = L->depth;
        if (MKS_UNLIKELY(d + 1 >= VM_NFRAMES))
            VMD_STOP(1, MKS_VM_ECALL);
        if (MKS_UNLIKELY(aux >= n))
            VMD_STOP(1, MKS_VM_EJUMP);
        L->frames[d].saved[0] = r[6];
        L->frames[d].saved[1] = r[7];
        L->frames[d].saved[2] = r[8];
        L->frames[d].saved[3] = r[9];
        L->frames[d].ret_pc = L->pc;
        L->depth = d + 1;
        r[10] -= VM_FRAME;
        L->mem.stack_lo = r[10] - VM_FRAME;
        L->mem.stack_len += VM_FRAME;
        VMD_GOTO(aux);
        VMD_CHECK_LIMIT();
        return;
    }
    case VMD_CALL:
    case VMD_CALLX: {
        const uint64_t id = (op & 0x7fu) == VMD_CALLX ? a : (uint64_t)(uint32_t)simm;
        int rc;
        VMD_CHECK_LIMIT();
        rc = vm_helper(env, L->mem, id, r);
        if (rc < 0)
            VMD_STOP(1, rc);
        if (rc > 0) /* unwind */
            VMD_STOP(2, MKS_VM_OK);
        return;
    }
    case VMD_EXIT: {
        uint32_t d = L->depth;
        if (d == 0)
            VMD_STOP(2, MKS_VM_OK);
        d--;
        L->depth = d;
        r[6] = L->frames[d].saved[0];
        r[7] = L->frames[d].saved[1];
        r[8] = L->frames[d].saved[2];
        r[9] = L->frames[d].saved[3];
        VMD_GOTO(L->frames[d].ret_pc);
        r[10] += VM_FRAME;
        L->mem.stack_lo = r[10] - VM_FRAME;
        L->mem.stack_len -= VM_FRAME;
        VMD_CHECK_LIMIT();
        return;
    }
    default: VMD_STOP(1, MKS_VM_EINSN);
    }
#undef VMD_STOP
#undef VMD_CHECK_LIMIT
#undef VMD_GOTO
#undef VMD_JUMP_IF
#undef VMD_MEM
#undef VMD_LDX
#undef VMD_ST
#undef VMD_U64
#undef VMD_S64
}

/* The run's answer: r0 when the program exited within the limit; past the
 * limit the error is the limit's whatever stopped the run. */
MKS_INLINE int vmd_finish(const struct vmd_lane *L, const struct mks_vm_env *env, uint64_t *r0_p,
                          uint64_t *insns_p)
{
    const uint64_t limit = env->insn_limit ? env->insn_limit : ~0ull;
    uint64_t ran = (uint64_t)L->pc + L->bias; /* 0 when the start refused the run */
    int err = L->err;
    if (L->stopped == 2 && ran <= limit)
        *r0_p = L->r[0];
    if (ran > limit) {
        ran = limit;
        err = MKS_VM_ELIMIT;
    }
    if (insns_p)
        *insns_p = ran;
    return err;
}

/* One run of a decoded program, on one thread (host, or a device thread that
 * runs alone: the inline runners). */
MKS_DEVFN static int mksi_vmd_exec(const struct mks_vm_env *env, uint64_t r1, uint64_t r2,
                                   uint64_t *r0_p, uint64_t *insns_p)
{
    const struct mks_dinsn *text = (const struct mks_dinsn *)env->insns;
    VMD_LANE_ARRAYS(L);
    vmd_init(&L, env, r1, r2);
    while (!L.stopped) {
        uint32_t stopped;
        vmd_step(&L, env, vmd_fetch(text, L.pc));
        stopped = L.stopped;
        /* the lanes of a warp that run side by side meet after each step */
        MKS_JOIN_POINT(stopped);
        if (MKS_UNLIKELY(stopped))
            break;
    }
    return vmd_finish(&L, env, r0_p, insns_p);
}

#ifdef __CUDACC__
/* One run per lane, the whole warp calling together (lanes with run == 0
 * take part in the scheduling only).  key: the program's identity among the
 * warp's runs (the control block's program slot); lanes with the same key
 * run the same decoded text.  Each step, the lanes whose (key, pc) is the
 * lowest among the running lanes execute their instruction, the same one
 * for all of them; every lane's run still executes exactly its own
 * instructions, in its own order, so each answer is mksi_vmd_exec's. */
MKS_DEVFN static int mksi_vmd_exec_warp(const struct mks_vm_env *env, int run, uint32_t key,
                                        uint64_t r1, uint64_t r2, uint64_t *r0_p,
                                        uint64_t *insns_p)
{
    const struct mks_dinsn *text = run ? (const struct mks_dinsn *)env->insns : 0;
    const uint32_t hi = (key & 0x7fffu) << 16; /* pc < VMD_NOWHERE */
    VMD_LANE_ARRAYS(L);
    if (run)
        vmd_init(&L, env, r1, r2);
    else
        L.stopped = 1;
    for (;;) {
        const int live = !L.stopped;
        /* fetch before the vote, so its latency hides behind it */
        const uint64_t w = live ? vmd_fetch(text, L.pc) : 0;
        const uint32_t k = live ? hi | L.pc : 0xffffffffu;
        const uint32_t low = __reduce_min_sync(0xffffffffu, k);
        if (low == 0xffffffffu)
            break;
        if (k == low)
            vmd_step(&L, env, w);
    }
    return run ? vmd_finish(&L, env, r0_p, insns_p) : 0;
}
#endif

#ifndef __CUDACC__
int mks_vm_run_decoded(const struct mks_vm_env *env, uint64_t r1, uint64_t r2, uint64_t *r0_p,
                       uint64_t *insns_p)
{
    if (!env || !r0_p || (env->n_maps && !env->map_ids)) {
        if (insns_p)
            *insns_p = 0;
        return MKS_VM_EARG;
    }
    return mksi_vmd_exec(env, r1, r2, r0_p, insns_p);
}
#endif

/*
 * The eBPF interpreter (RFC 9669), one source for the CPU and the device.
 *
 * Dispatch is a switch over the full opcode byte (nvcc rejects computed goto
 * in device code; a dense switch compiles to one jump table on both).  The
 * state lives in locals: eleven registers, the stack of all frames (one
 * 512-byte frame per call level) and the saved registers of each level.
 *
 * Guards that make the interpreter safe to run inside a megakernel even if
 * the verifier let something through: every memory access is checked against
 * the regions of the run (the frames of the current call chain, the read-only
 * context, the map arena, the optional extra region), every jump target
 * against the program, the count of executed instructions against the
 * limit; map handles passed to helpers must be the program's own.  A failed
 * guard stops the run with an enum mks_vm_err.
 *
 * The instruction count is kept exactly but costs nothing per instruction:
 * PC + bias is the number executed (PC: index of the next instruction) and
 * only control transfers move bias.  It is compared with the limit at every
 * backward jump, call, helper call and exit, and when the run stops.
 * Between two such points execution only moves forward, so a run that
 * exhausts its limit stops with MKS_VM_ELIMIT after at most one program
 * length of extra instructions (whose effects on the stack, maps or extra
 * region stay), and reports the limit as its count.  Likewise the program
 * counter is checked where jumps land and where the program ends, not
 * before every instruction.
 *
 * vm.cu compiles this file with nvcc (MKS_DEVFN = __device__); the host entry
 * points are hidden from it.
 */
#include "mkscope/vm.h"

#include "dev.h"
#include "mkscope/hook_abi.h"
#include "mkscope/maps.h"

MKS_DEVFN void *mksi_map_lookup(struct mks_maps *m, const struct mks_map_desc *d,
                                const void *key);
MKS_DEVFN int mksi_map_update(struct mks_maps *m, const struct mks_map_desc *d, const void *key,
                              const void *value, uint64_t flags);
MKS_DEVFN int mksi_map_delete(struct mks_maps *m, const struct mks_map_desc *d, const void *key);
MKS_DEVFN int mksi_map_hist_add(struct mks_maps *m, const struct mks_map_desc *d,
                                const void *key, uint64_t value);
MKS_DEVFN int mksi_map_ringbuf_output(struct mks_maps *m, const struct mks_map_desc *d,
                                      const void *data, uint64_t size);

#define VM_FRAME   MKS_BPF_STACK
#define VM_NFRAMES MKS_BPF_MAX_FRAMES

/* Programs may access memory at any alignment; a plain typed access would be
 * undefined behaviour on the host and a fault on the device. */
#ifdef __CUDACC__
MKS_INLINE void vm_copy(void *d, const void *s, uint32_t n)
{
    if ((((uintptr_t)d | (uintptr_t)s) & (n - 1u)) == 0) {
        switch (n) {
        case 1: *(uint8_t *)d = *(const uint8_t *)s; return;
        case 2: *(uint16_t *)d = *(const uint16_t *)s; return;
        case 4: *(uint32_t *)d = *(const uint32_t *)s; return;
        default: *(uint64_t *)d = *(const uint64_t *)s; return;
        }
    }
    mks_dev_memcpy(d, s, n);
}
#define VM_COPY(d, s, n) vm_copy((d), (s), (n))
#else
#define VM_COPY(d, s, n) __builtin_memcpy((d), (s), (n))
#endif

/* An instruction as one little-endian 64-bit word (struct mks_insn is 8
 * bytes, 8-aligned in every program buffer); read-only on the device. */
#ifdef __CUDACC__
MKS_INLINE uint64_t vm_fetch(const struct mks_insn *ip)
{
    return (uint64_t)__ldg((const unsigned long long *)ip);
}
#else
MKS_INLINE uint64_t vm_fetch(const struct mks_insn *ip)
{
    uint64_t v;
    __builtin_memcpy(&v, ip, sizeof(v));
    return v;
}
#endif

/* 0xff when an instruction's register byte (src << 4 | dst) names a
 * register above r10, else 0: or-ed into the opcode it turns the
 * instruction into 0xff, which is no opcode, so the dispatch itself
 * refuses it.  The host looks it up (one load); the device computes it:
 * adding 5 to a register nibble above 10 carries out of it. */
#ifdef __CUDACC__
MKS_INLINE uint32_t vm_bad_regs(uint64_t raw)
{
    return ((((raw & 0x0f00) + 0x0500) | (((raw & 0xf000) + 0x5000) >> 4)) & 0x1000) ? 0xffu : 0u;
}
#else
#define VM_R_OK  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff
#define VM_R_BAD 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff
static const uint8_t vm_bad_reg_byte[256] = {
    VM_R_OK, VM_R_OK, VM_R_OK, VM_R_OK,  VM_R_OK,  VM_R_OK,  VM_R_OK,  VM_R_OK,
    VM_R_OK, VM_R_OK, VM_R_OK, VM_R_BAD, VM_R_BAD, VM_R_BAD, VM_R_BAD, VM_R_BAD,
};
#undef VM_R_OK
#undef VM_R_BAD
MKS_INLINE uint32_t vm_bad_regs(uint64_t raw)
{
    return vm_bad_reg_byte[(raw >> 8) & 0xff];
}
#endif

struct vm_mem {
    uint64_t stack_lo, stack_len; /* frames of the current call chain, >= one frame */
    uint64_t ctx, ctx_len;
    uint64_t arena, arena_len;
    uint64_t extra, extra_len;
    uint32_t extra_writable;
};

/* base <= addr and addr + size <= base + len, without overflow: for a
 * region that does not wrap around the address space (the run refuses the
 * extra region otherwise) and size >= 1, addr below base wraps addr - base
 * above any len - size. */
MKS_INLINE int vm_in(uint64_t addr, uint64_t size, uint64_t base, uint64_t len)
{
    return len >= size && addr - base <= len - size;
}

/* Stack first (most accesses, and one subtraction and compare: the region
 * is at least one frame and instruction sizes are constants), then the
 * context (read-only), then the arena. */
MKS_INLINE int vm_mem_ok(const struct vm_mem *m, uint64_t addr, uint64_t size, int write)
{
    if (size <= VM_FRAME && addr - m->stack_lo <= m->stack_len - size)
        return 1;
    if (!write && m->ctx_len && vm_in(addr, size, m->ctx, m->ctx_len))
        return 1;
    if (m->arena_len && vm_in(addr, size, m->arena, m->arena_len))
        return 1;
    if (m->extra_len && (!write || m->extra_writable) && vm_in(addr, size, m->extra, m->extra_len))
        return 1;
    return 0;
}

/* The map descriptor a program passed in a register, or NULL when it is not
 * one of the program's maps. */
MKS_INLINE const struct mks_map_desc *vm_map(const struct mks_vm_env *env, uint64_t handle)
{
    const struct mks_maps *ms = env->maps;
    if (!ms)
        return 0;
    for (uint32_t i = 0; i < env->n_maps; i++) {
        uint32_t id = env->map_ids[i];
        if (id < ms->n_descs && (uint64_t)(uintptr_t)&ms->descs[id] == handle)
            return ms->descs[id].state == MKS_MAPSTATE_LIVE ? &ms->descs[id] : 0;
    }
    return 0;
}

MKS_INLINE uint64_t vm_bswap16(uint64_t v)
{
    return (uint64_t)(uint16_t)(((v & 0xff) << 8) | ((v >> 8) & 0xff));
}
MKS_INLINE uint64_t vm_bswap32(uint64_t v)
{
    uint32_t x = (uint32_t)v;
    x = ((x & 0x000000ffu) << 24) | ((x & 0x0000ff00u) << 8) | ((x & 0x00ff0000u) >> 8) |
        ((x & 0xff000000u) >> 24);
    return x;
}
MKS_INLINE uint64_t vm_bswap64(uint64_t v)
{
    return (vm_bswap32(v) << 32) | vm_bswap32(v >> 32);
}

MKS_INLINE uint64_t vm_sext(uint64_t v, int bits)
{
    uint64_t m = 1ull << (bits - 1);
    v &= (bits == 64) ? ~0ull : ((1ull << bits) - 1);
    return (v ^ m) - m;
}

/* Signed division and remainder with RFC 9669's answers for the cases C
 * leaves undefined: x/0 = 0, x%0 = x, INT_MIN/-1 = INT_MIN, INT_MIN%-1 = 0. */
MKS_INLINE uint64_t vm_sdiv64(uint64_t a, uint64_t b)
{
    if (b == 0)
        return 0;
    if (b == ~0ull)
        return (uint64_t)0 - a;
    return (uint64_t)((int64_t)a / (int64_t)b);
}
MKS_INLINE uint64_t vm_smod64(uint64_t a, uint64_t b)
{
    if (b == 0)
        return a;
    if (b == ~0ull)
        return 0;
    return (uint64_t)((int64_t)a % (int64_t)b);
}
MKS_INLINE uint32_t vm_sdiv32(uint32_t a, uint32_t b)
{
    if (b == 0)
        return 0;
    if (b == 0xffffffffu)
        return 0u - a;
    return (uint32_t)((int32_t)a / (int32_t)b);
}
MKS_INLINE uint32_t vm_smod32(uint32_t a, uint32_t b)
{
    if (b == 0)
        return a;
    if (b == 0xffffffffu)
        return 0;
    return (uint32_t)((int32_t)a % (int32_t)b);
}

/* Helper call.  Returns 0 and sets r[0], 1 when the program must stop now
 * (conformance unwind, r[0] set), or a negative enum mks_vm_err. */
/* mem by value: its address never escapes the run, so the device keeps it
 * in registers instead of local memory. */
MKS_DEVFN static int vm_helper(const struct mks_vm_env *env, const struct vm_mem mem, uint64_t id,
                               uint64_t *r)
{
    const struct mks_map_desc *d;
    struct mks_maps *ms = env->maps;
    switch (id) {
    case 5:
        if (!(env->flags & MKS_VM_F_UNWIND_HELPER))
            return MKS_VM_ECALL;
        r[0] = r[1];
        return r[1] == 0 ? 1 : 0;
    case MKS_HELPER_TIME_NS:
        r[0] = mks_dev_time_ns();
        return 0;
    case MKS_HELPER_WORKER_ID:
        r[0] = ms ? ms->worker : 0;
        return 0;
    case MKS_HELPER_SM_ID:
        r[0] = ms ? ms->sm : 0;
        return 0;
    case MKS_HELPER_RANK:
        r[0] = ms ? ms->rank : 0;
        return 0;
    case MKS_HELPER_MAP_LOOKUP: /* the common one, without the second dispatch */
        d = vm_map(env, r[1]);
        if (!d || d->type == MKS_MAP_RINGBUF)
            return MKS_VM_ECALL;
        if (!vm_mem_ok(&mem, r[2], d->key_size, 0))
            return MKS_VM_EMEM;
        r[0] = (uint64_t)(uintptr_t)mksi_map_lookup(ms, d, (const void *)(uintptr_t)r[2]);
        return 0;
    case MKS_HELPER_MAP_UPDATE:
    case MKS_HELPER_MAP_DELETE:
    case MKS_HELPER_HIST_ADD:
    case MKS_HELPER_RINGBUF_OUTPUT:
        break;
    default:
        return MKS_VM_ECALL;
    }
    d = vm_map(env, r[1]);
    if (!d)
        return MKS_VM_ECALL;
    if (id == MKS_HELPER_RINGBUF_OUTPUT) {
        if (d->type != MKS_MAP_RINGBUF)
            return MKS_VM_ECALL;
        if (r[3] == 0 || r[3] > 0xffffffffull || !vm_mem_ok(&mem, r[2], r[3], 0))
            return MKS_VM_EMEM;
        r[0] = (uint64_t)(int64_t)mksi_map_ringbuf_output(ms, d, (const void *)(uintptr_t)r[2], r[3]);
        return 0;
    }
    if (d->type == MKS_MAP_RINGBUF)
        return MKS_VM_ECALL;
    if (!vm_mem_ok(&mem, r[2], d->key_size, 0))
        return MKS_VM_EMEM;
    switch (id) {
    case MKS_HELPER_MAP_UPDATE:
        if (!vm_mem_ok(&mem, r[3], d->value_size, 0))
            return MKS_VM_EMEM;
        r[0] = (uint64_t)(int64_t)mksi_map_update(ms, d, (const void *)(uintptr_t)r[2],
                                                  (const void *)(uintptr_t)r[3], r[4]);
        return 0;
    case MKS_HELPER_MAP_DELETE:
        r[0] = (uint64_t)(int64_t)mksi_map_delete(ms, d, (const void *)(uintptr_t)r[2]);
        return 0;
    default: /* MKS_HELPER_HIST_ADD */
        r[0] = (uint64_t)(int64_t)mksi_map_hist_add(ms, d, (const void *)(uintptr_t)r[2], r[3]);
        return 0;
    }
}

/* Address of a 64-bit immediate map reference (src 5: the descriptor, src 6:
 * the first value of the current bank plus an offset), or 0 if invalid. */
MKS_INLINE uint64_t vm_map_ref(const struct mks_vm_env *env, uint32_t src, uint32_t idx,
                               uint32_t off)
{
    const struct mks_maps *ms = env->maps;
    const struct mks_map_desc *d;
    if (!ms || idx >= env->n_maps || env->map_ids[idx] >= ms->n_descs)
        return 0;
    d = &ms->descs[env->map_ids[idx]];
    if (d->state != MKS_MAPSTATE_LIVE)
        return 0;
    if (src == MKS_PSEUDO_MAP_IDX)
        return (uint64_t)(uintptr_t)d;
    if (d->type != MKS_MAP_ARRAY || off >= d->value_size)
        return 0;
    return (uint64_t)(uintptr_t)(ms->arena + d->bank_off[ms->bank & 1u]) + off;
}

/* An atomic read-modify-write of size 4 or 8 at a; returns the old value
 * (zero-extended) in *old_p for the fetching forms (cmpxchg, xchg, FETCH);
 * the others leave it unset, so the device issues them without waiting for
 * the old value (a reduction, not a round trip to L2).  The device has no atomics on thread-local
 * memory, where the VM's stack lives, and needs none there: the stack is
 * private to the run. */
MKS_INLINE int vm_atomic(uint64_t a, uint32_t size, uint32_t op, uint64_t v, uint64_t expect,
                         int local, uint64_t *old_p)
{
    if (local) {
        uint64_t old = 0, nv;
        VM_COPY(&old, (const void *)(uintptr_t)a, size);
        switch (op) {
        case MKS_BPF_ADD:
        case MKS_BPF_ADD | MKS_BPF_FETCH: nv = old + v; break;
        case MKS_BPF_OR:
        case MKS_BPF_OR | MKS_BPF_FETCH: nv = old | v; break;
        case MKS_BPF_AND:
        case MKS_BPF_AND | MKS_BPF_FETCH: nv = old & v; break;
        case MKS_BPF_XOR:
        case MKS_BPF_XOR | MKS_BPF_FETCH: nv = old ^ v; break;
        case MKS_BPF_XCHG: nv = v; break;
        case MKS_BPF_CMPXCHG:
            nv = (size == 4 ? (uint32_t)old == (uint32_t)expect : old == expect) ? v : old;
            break;
        default: return MKS_VM_EINSN;
        }
        VM_COPY((void *)(uintptr_t)a, &nv, size);
        *old_p = old;
        return 0;
    }
    if (size == 4) {
        uint32_t *p = (uint32_t *)(uintptr_t)a, w = (uint32_t)v;
        switch (op) {
        case MKS_BPF_ADD: MKS_A_RED_ADD32(p, w); return 0;
        case MKS_BPF_ADD | MKS_BPF_FETCH: *old_p = MKS_A_ADD32(p, w); return 0;
        case MKS_BPF_OR: (void)MKS_A_OR32(p, w); return 0;
        case MKS_BPF_OR | MKS_BPF_FETCH: *old_p = MKS_A_OR32(p, w); return 0;
        case MKS_BPF_AND: (void)MKS_A_AND32(p, w); return 0;
        case MKS_BPF_AND | MKS_BPF_FETCH: *old_p = MKS_A_AND32(p, w); return 0;
        case MKS_BPF_XOR: (void)MKS_A_XOR32(p, w); return 0;
        case MKS_BPF_XOR | MKS_BPF_FETCH: *old_p = MKS_A_XOR32(p, w); return 0;
        case MKS_BPF_XCHG: *old_p = MKS_A_XCHG32(p, w); return 0;
        case MKS_BPF_CMPXCHG: *old_p = MKS_A_CAS32(p, (uint32_t)expect, w); return 0;
        default: return MKS_VM_EINSN;
        }
    }
    {
        uint64_t *p = (uint64_t *)(uintptr_t)a;
        switch (op) {
        case MKS_BPF_ADD: MKS_A_RED_ADD64(p, v); return 0;
        case MKS_BPF_ADD | MKS_BPF_FETCH: *old_p = MKS_A_ADD64(p, v); return 0;
        case MKS_BPF_OR: (void)MKS_A_OR64(p, v); return 0;
        case MKS_BPF_OR | MKS_BPF_FETCH: *old_p = MKS_A_OR64(p, v); return 0;
        case MKS_BPF_AND: (void)MKS_A_AND64(p, v); return 0;
        case MKS_BPF_AND | MKS_BPF_FETCH: *old_p = MKS_A_AND64(p, v); return 0;
        case MKS_BPF_XOR: (void)MKS_A_XOR64(p, v); return 0;
        case MKS_BPF_XOR | MKS_BPF_FETCH: *old_p = MKS_A_XOR64(p, v); return 0;
        case MKS_BPF_XCHG: *old_p = MKS_A_XCHG64(p, v); return 0;
        case MKS_BPF_CMPXCHG: *old_p = MKS_A_CAS64(p, expect, v); return 0;
        default: return MKS_VM_EINSN;
        }
    }
}

struct vm_frame {
    uint64_t saved[4]; /* r6..r9 of the caller */
    uint32_t ret_pc;
};

MKS_DEVFN static int mksi_vm_exec(const struct mks_vm_env *env, uint64_t r1, uint64_t r2,
                                  uint64_t *r0_p, uint64_t *insns_p)
{
    uint64_t stack[VM_NFRAMES * VM_FRAME / 8];
    struct vm_frame frames[VM_NFRAMES];
    uint64_t r[MKS_BPF_NREGS];
    struct vm_mem mem;
    const struct mks_insn *insns = env->insns;
    const uint32_t n = env->n_insns;
    const uintptr_t prog_bytes = (uintptr_t)n * sizeof(struct mks_insn);
    const uint64_t limit = env->insn_limit ? env->insn_limit : ~0ull;
    uint64_t bias = 0; /* instructions executed = PC + bias */
    uint64_t ran;
    const struct mks_insn *ip = insns; /* next instruction */
    uint32_t depth = 0, stopped = 0;
    int err = MKS_VM_OK;

    if (!insns || n == 0) {
        err = MKS_VM_EARG;
        goto out;
    }
    /* Stepping on from the last instruction would leave the program; when
     * it is exit or goto nothing but ld_imm64's double step (checked there)
     * can, and the loop needs no end check.  The verifier refuses any other
     * program (it falls through or ends in dead code), so does the VM. */
    {
        const uint32_t last = (uint32_t)(vm_fetch(&insns[n - 1]) & 0xff);
        if (MKS_UNLIKELY(last != (MKS_BPF_JMP | MKS_BPF_EXIT) && last != (MKS_BPF_JMP | MKS_BPF_JA) &&
                         last != (MKS_BPF_JMP32 | MKS_BPF_JA))) {
            /* ld_imm64 there is cut in half */
            err = last == (MKS_BPF_LD | MKS_BPF_IMM | MKS_BPF_DW) ? MKS_VM_EINSN : MKS_VM_EJUMP;
            goto out;
        }
    }
    mem.stack_lo = (uint64_t)(uintptr_t)stack + sizeof(stack) - VM_FRAME;
    mem.stack_len = VM_FRAME;
    mem.ctx = (uint64_t)(uintptr_t)env->ctx;
    mem.ctx_len = env->ctx ? env->ctx_len : 0;
    mem.arena = env->maps ? (uint64_t)(uintptr_t)env->maps->arena : 0;
    mem.arena_len = env->maps ? env->maps->arena_len : 0;
    mem.extra = env->extra.base;
    mem.extra_len = env->extra.len <= ~0ull - env->extra.base ? env->extra.len : 0;
    mem.extra_writable = env->extra.writable;
    for (int i = 0; i < MKS_BPF_NREGS; i++)
        r[i] = 0;
    r[1] = r1;
    r[2] = r2;
    r[10] = mem.stack_lo + VM_FRAME;

    /* Every way out of an instruction, the run's end and its errors too,
     * passes through vm_join after the switch: the instruction's
     * reconvergence point on the device, where lanes of a monitor warp that
     * run programs side by side (mks_dev_monitor_warp) come together again
     * after every instruction instead of only when the run ends.
     * stopped: 1 stop with err, 2 the program exited. */
#define VM_STOP(how)                                                                               \
    do {                                                                                           \
        stopped = (how);                                                                           \
        goto vm_join;                                                                              \
    } while (0)
    for (;;) {
        uint32_t code;
        uint64_t raw;
        raw = vm_fetch(ip); /* one 8-byte load; fields by shifts where used */
        code = (uint32_t)(raw & 0xff) | vm_bad_regs(raw);
        ip++;

#define PC   ((uint32_t)(ip - insns)) /* index of the next instruction */
#define DST  ((uint32_t)(raw >> 8) & 0x0fu)
#define SRC  ((uint32_t)(raw >> 12) & 0x0fu)
#define OFF  ((int16_t)(uint16_t)(raw >> 16))
#define SIMM ((int32_t)((int64_t)raw >> 32))
#define IMM  ((uint64_t)((int64_t)raw >> 32)) /* sign-extended, as every use wants */
#define ALU32(v)  r[DST] = (uint32_t)(v)
#define SRC64     ((code & MKS_BPF_X) ? r[SRC] : IMM)
#define SRC32     ((uint32_t)SRC64)
#define DST32     ((uint32_t)r[DST])
/* Control transfers: PC moves to t (checked against the program), the
 * count of executed instructions does not; a transfer that may lead back is
 * a point to check the limit. */
#define GOTO_PC(t)                                                                                 \
    do {                                                                                           \
        uint32_t t_ = (t);                                                                         \
        if (MKS_UNLIKELY(t_ >= n)) {                                                               \
            err = MKS_VM_EJUMP;                                                                    \
            VM_STOP(1);                                                                              \
        }                                                                                          \
        bias += (uint64_t)PC - t_;                                                                 \
        ip = insns + t_;                                                                           \
    } while (0)
/* The same for a jump by d instructions from the next one, on addresses
 * (integers until checked, so no pointer leaves the program). */
#define JUMP_REL(d)                                                                                \
    do {                                                                                           \
        int64_t d_ = (d);                                                                          \
        uintptr_t t_ = (uintptr_t)ip + (uintptr_t)(d_ * (int64_t)sizeof(struct mks_insn));         \
        if (MKS_UNLIKELY(t_ - (uintptr_t)insns >= prog_bytes)) {                                   \
            err = MKS_VM_EJUMP;                                                                    \
            VM_STOP(1);                                                                              \
        }                                                                                          \
        bias -= (uint64_t)d_;                                                                      \
        ip = (const struct mks_insn *)t_;                                                          \
    } while (0)
#define CHECK_LIMIT()                                                                              \
    do {                                                                                           \
        if (MKS_UNLIKELY(PC + bias > limit))                                                       \
            VM_STOP(1);                                                                              \
    } while (0)
#define JUMP_IF(c)                                                                                 \
    do {                                                                                           \
        if (c) {                                                                                   \
            JUMP_REL(OFF);                                                                         \
            if (OFF < 0)                                                                           \
                CHECK_LIMIT();                                                                     \
        }                                                                                          \
    } while (0)
#define MEM_CHECK(addr, size, w)                                                                   \
    do {                                                                                           \
        if (MKS_UNLIKELY(!vm_mem_ok(&mem, (addr), (size), (w)))) {                                 \
            err = MKS_VM_EMEM;                                                                     \
            VM_STOP(1);                                                                              \
        }                                                                                          \
    } while (0)
#define LDX(type, conv)                                                                            \
    do {                                                                                           \
        uint64_t a_ = r[SRC] + (uint64_t)(int64_t)OFF;                                             \
        MEM_CHECK(a_, sizeof(type), 0);                                                            \
        type v_;                                                                                   \
        VM_COPY(&v_, (const void *)(uintptr_t)a_, sizeof(type));                                  \
        r[DST] = conv(v_);                                                                         \
    } while (0)
#define ST(type, val)                                                                              \
    do {                                                                                           \
        uint64_t a_ = r[DST] + (uint64_t)(int64_t)OFF;                                             \
        MEM_CHECK(a_, sizeof(type), 1);                                                            \
        type v_ = (type)(val);                                                                     \
        VM_COPY((void *)(uintptr_t)a_, &v_, sizeof(type));                                         \
    } while (0)
#ifdef __CUDACC__
#define VM_IS_LOCAL(a) vm_in((a), 1, (uint64_t)(uintptr_t)stack, sizeof(stack))
#else
#define VM_IS_LOCAL(a) 0
#endif
#define AS_U64(x) ((uint64_t)(x))
#define AS_S64(x) ((uint64_t)(int64_t)(x))

        switch (code) {
        /* ---- ALU64 ---- */
        case MKS_BPF_ALU64 | MKS_BPF_ADD | MKS_BPF_K: r[DST] += IMM; break;
        case MKS_BPF_ALU64 | MKS_BPF_ADD | MKS_BPF_X: r[DST] += r[SRC]; break;
        case MKS_BPF_ALU64 | MKS_BPF_SUB | MKS_BPF_K: r[DST] -= IMM; break;
        case MKS_BPF_ALU64 | MKS_BPF_SUB | MKS_BPF_X: r[DST] -= r[SRC]; break;
        case MKS_BPF_ALU64 | MKS_BPF_MUL | MKS_BPF_K: r[DST] *= IMM; break;
        case MKS_BPF_ALU64 | MKS_BPF_MUL | MKS_BPF_X: r[DST] *= r[SRC]; break;
        case MKS_BPF_ALU64 | MKS_BPF_DIV | MKS_BPF_K:
        case MKS_BPF_ALU64 | MKS_BPF_DIV | MKS_BPF_X: {
            uint64_t s = SRC64;
            if (OFF == 1)
                r[DST] = vm_sdiv64(r[DST], s);
            else if (OFF == 0)
                r[DST] = s ? r[DST] / s : 0;
            else {
                err = MKS_VM_EINSN;
                VM_STOP(1);
            }
            break;
        }
        case MKS_BPF_ALU64 | MKS_BPF_MOD | MKS_BPF_K:
        case MKS_BPF_ALU64 | MKS_BPF_MOD | MKS_BPF_X: {
            uint64_t s = SRC64;
            if (OFF == 1)
                r[DST] = vm_smod64(r[DST], s);
            else if (OFF == 0)
                r[DST] = s ? r[DST] % s : r[DST];
            else {
                err = MKS_VM_EINSN;
                VM_STOP(1);
            }
            break;
        }
        case MKS_BPF_ALU64 | MKS_BPF_OR | MKS_BPF_K: r[DST] |= IMM; break;
        case MKS_BPF_ALU64 | MKS_BPF_OR | MKS_BPF_X: r[DST] |= r[SRC]; break;
        case MKS_BPF_ALU64 | MKS_BPF_AND | MKS_BPF_K: r[DST] &= IMM; break;
        case MKS_BPF_ALU64 | MKS_BPF_AND | MKS_BPF_X: r[DST] &= r[SRC]; break;
        case MKS_BPF_ALU64 | MKS_BPF_XOR | MKS_BPF_K: r[DST] ^= IMM; break;
        case MKS_BPF_ALU64 | MKS_BPF_XOR | MKS_BPF_X: r[DST] ^= r[SRC]; break;
        case MKS_BPF_ALU64 | MKS_BPF_LSH | MKS_BPF_K: r[DST] <<= (IMM & 63); break;
        case MKS_BPF_ALU64 | MKS_BPF_LSH | MKS_BPF_X: r[DST] <<= (r[SRC] & 63); break;
        case MKS_BPF_ALU64 | MKS_BPF_RSH | MKS_BPF_K: r[DST] >>= (IMM & 63); break;
        case MKS_BPF_ALU64 | MKS_BPF_RSH | MKS_BPF_X: r[DST] >>= (r[SRC] & 63); break;
        case MKS_BPF_ALU64 | MKS_BPF_ARSH | MKS_BPF_K:
        case MKS_BPF_ALU64 | MKS_BPF_ARSH | MKS_BPF_X:
            r[DST] = (uint64_t)((int64_t)r[DST] >> (SRC64 & 63));
            break;
        case MKS_BPF_ALU64 | MKS_BPF_NEG: r[DST] = (uint64_t)0 - r[DST]; break;
        case MKS_BPF_ALU64 | MKS_BPF_MOV | MKS_BPF_K: r[DST] = IMM; break;
        case MKS_BPF_ALU64 | MKS_BPF_MOV | MKS_BPF_X:
            if (OFF == 0)
                r[DST] = r[SRC];
            else if (OFF == 8 || OFF == 16 || OFF == 32)
                r[DST] = vm_sext(r[SRC], OFF);
            else {
                err = MKS_VM_EINSN;
                VM_STOP(1);
            }
            break;
        case MKS_BPF_ALU64 | MKS_BPF_END | MKS_BPF_K: /* bswap */
        case MKS_BPF_ALU | MKS_BPF_END | MKS_BPF_X:   /* to big endian on this little-endian VM */
            if (IMM == 16)
                r[DST] = vm_bswap16(r[DST]);
            else if (IMM == 32)
                r[DST] = vm_bswap32(r[DST]);
            else if (IMM == 64)
                r[DST] = vm_bswap64(r[DST]);
            else {
                err = MKS_VM_EINSN;
                VM_STOP(1);
            }
            break;

        /* ---- ALU (32-bit, upper half of dst zeroed) ---- */
        case MKS_BPF_ALU | MKS_BPF_ADD | MKS_BPF_K: ALU32(DST32 + ((uint32_t)IMM)); break;
        case MKS_BPF_ALU | MKS_BPF_ADD | MKS_BPF_X: ALU32(DST32 + ((uint32_t)r[SRC])); break;
        case MKS_BPF_ALU | MKS_BPF_SUB | MKS_BPF_K: ALU32(DST32 - ((uint32_t)IMM)); break;
        case MKS_BPF_ALU | MKS_BPF_SUB | MKS_BPF_X: ALU32(DST32 - ((uint32_t)r[SRC])); break;
        case MKS_BPF_ALU | MKS_BPF_MUL | MKS_BPF_K: ALU32(DST32 * ((uint32_t)IMM)); break;
        case MKS_BPF_ALU | MKS_BPF_MUL | MKS_BPF_X: ALU32(DST32 * ((uint32_t)r[SRC])); break;
        case MKS_BPF_ALU | MKS_BPF_DIV | MKS_BPF_K:
        case MKS_BPF_ALU | MKS_BPF_DIV | MKS_BPF_X: {
            uint32_t s = SRC32;
            if (OFF == 1)
                ALU32(vm_sdiv32(DST32, s));
            else if (OFF == 0)
                ALU32(s ? DST32 / s : 0);
            else {
                err = MKS_VM_EINSN;
                VM_STOP(1);
            }
            break;
        }
        case MKS_BPF_ALU | MKS_BPF_MOD | MKS_BPF_K:
        case MKS_BPF_ALU | MKS_BPF_MOD | MKS_BPF_X: {
            uint32_t s = SRC32;
            if (OFF == 1)
                ALU32(vm_smod32(DST32, s));
            else if (OFF == 0)
                ALU32(s ? DST32 % s : DST32);
            else {
                err = MKS_VM_EINSN;
                VM_STOP(1);
            }
            break;
        }
        case MKS_BPF_ALU | MKS_BPF_OR | MKS_BPF_K: ALU32(DST32 | ((uint32_t)IMM)); break;
        case MKS_BPF_ALU | MKS_BPF_OR | MKS_BPF_X: ALU32(DST32 | ((uint32_t)r[SRC])); break;
        case MKS_BPF_ALU | MKS_BPF_AND | MKS_BPF_K: ALU32(DST32 & ((uint32_t)IMM)); break;
        case MKS_BPF_ALU | MKS_BPF_AND | MKS_BPF_X: ALU32(DST32 & ((uint32_t)r[SRC])); break;
        case MKS_BPF_ALU | MKS_BPF_XOR | MKS_BPF_K: ALU32(DST32 ^ ((uint32_t)IMM)); break;
        case MKS_BPF_ALU | MKS_BPF_XOR | MKS_BPF_X: ALU32(DST32 ^ ((uint32_t)r[SRC])); break;
        case MKS_BPF_ALU | MKS_BPF_LSH | MKS_BPF_K: ALU32(DST32 << (((uint32_t)IMM) & 31)); break;
        case MKS_BPF_ALU | MKS_BPF_LSH | MKS_BPF_X: ALU32(DST32 << (((uint32_t)r[SRC]) & 31)); break;
        case MKS_BPF_ALU | MKS_BPF_RSH | MKS_BPF_K: ALU32(DST32 >> (((uint32_t)IMM) & 31)); break;
        case MKS_BPF_ALU | MKS_BPF_RSH | MKS_BPF_X: ALU32(DST32 >> (((uint32_t)r[SRC]) & 31)); break;
        case MKS_BPF_ALU | MKS_BPF_ARSH | MKS_BPF_K:
        case MKS_BPF_ALU | MKS_BPF_ARSH | MKS_BPF_X:
            ALU32((uint32_t)((int32_t)DST32 >> (SRC32 & 31)));
            break;
        case MKS_BPF_ALU | MKS_BPF_NEG: ALU32(0u - DST32); break;
        case MKS_BPF_ALU | MKS_BPF_MOV | MKS_BPF_K: ALU32((uint32_t)IMM); break;
        case MKS_BPF_ALU | MKS_BPF_MOV | MKS_BPF_X:
            if (OFF == 0)
                ALU32((uint32_t)r[SRC]);
            else if (OFF == 8 || OFF == 16)
                ALU32((uint32_t)vm_sext(r[SRC], OFF));
            else {
                err = MKS_VM_EINSN;
                VM_STOP(1);
            }
            break;
        case MKS_BPF_ALU | MKS_BPF_END | MKS_BPF_K: /* to little endian: truncate */
            if (IMM == 16)
                r[DST] = (uint16_t)r[DST];
            else if (IMM == 32)
                r[DST] = (uint32_t)r[DST];
            else if (IMM != 64) {
                err = MKS_VM_EINSN;
                VM_STOP(1);
            }
            break;

        /* ---- loads and stores ---- */
        case MKS_BPF_LDX | MKS_BPF_MEM | MKS_BPF_B: LDX(uint8_t, AS_U64); break;
        case MKS_BPF_LDX | MKS_BPF_MEM | MKS_BPF_H: LDX(uint16_t, AS_U64); break;
        case MKS_BPF_LDX | MKS_BPF_MEM | MKS_BPF_W: LDX(uint32_t, AS_U64); break;
        case MKS_BPF_LDX | MKS_BPF_MEM | MKS_BPF_DW: LDX(uint64_t, AS_U64); break;
        case MKS_BPF_LDX | MKS_BPF_MEMSX | MKS_BPF_B: LDX(int8_t, AS_S64); break;
        case MKS_BPF_LDX | MKS_BPF_MEMSX | MKS_BPF_H: LDX(int16_t, AS_S64); break;
        case MKS_BPF_LDX | MKS_BPF_MEMSX | MKS_BPF_W: LDX(int32_t, AS_S64); break;
        case MKS_BPF_ST | MKS_BPF_MEM | MKS_BPF_B: ST(uint8_t, IMM); break;
        case MKS_BPF_ST | MKS_BPF_MEM | MKS_BPF_H: ST(uint16_t, IMM); break;
        case MKS_BPF_ST | MKS_BPF_MEM | MKS_BPF_W: ST(uint32_t, IMM); break;
        case MKS_BPF_ST | MKS_BPF_MEM | MKS_BPF_DW: ST(uint64_t, IMM); break;
        case MKS_BPF_STX | MKS_BPF_MEM | MKS_BPF_B: ST(uint8_t, r[SRC]); break;
        case MKS_BPF_STX | MKS_BPF_MEM | MKS_BPF_H: ST(uint16_t, r[SRC]); break;
        case MKS_BPF_STX | MKS_BPF_MEM | MKS_BPF_W: ST(uint32_t, r[SRC]); break;
        case MKS_BPF_STX | MKS_BPF_MEM | MKS_BPF_DW: ST(uint64_t, r[SRC]); break;

        case MKS_BPF_STX | MKS_BPF_ATOMIC | MKS_BPF_W:
        case MKS_BPF_STX | MKS_BPF_ATOMIC | MKS_BPF_DW: {
            const uint32_t size = (code & 0x18) == MKS_BPF_DW ? 8u : 4u;
            uint64_t a = r[DST] + (uint64_t)(int64_t)OFF, old = 0;
            int rc;
            MEM_CHECK(a, size, 1);
            if (MKS_UNLIKELY(a & (size - 1u))) {
                err = MKS_VM_EALIGN;
                VM_STOP(1);
            }
            rc = vm_atomic(a, size, (uint32_t)SIMM, r[SRC], r[0], VM_IS_LOCAL(a), &old);
            if (rc) {
                err = rc;
                VM_STOP(1);
            }
            if ((uint32_t)SIMM == MKS_BPF_CMPXCHG)
                r[0] = old;
            else if (SIMM & MKS_BPF_FETCH)
                r[SRC] = old;
            break;
        }

        case MKS_BPF_LD | MKS_BPF_IMM | MKS_BPF_DW: {
            uint32_t lo = (uint32_t)SIMM, hi;
            if (MKS_UNLIKELY(ip == insns + n)) {
                err = MKS_VM_EINSN;
                VM_STOP(1);
            }
            hi = (uint32_t)ip->imm;
            ip++;
            bias--; /* two slots, one instruction */
            if (MKS_UNLIKELY(ip == insns + n)) { /* its second slot was the last */
                err = MKS_VM_EJUMP;
                VM_STOP(1);
            }
            if (SRC == 0) {
                r[DST] = ((uint64_t)hi << 32) | lo;
            } else if (SRC == MKS_PSEUDO_MAP_IDX || SRC == MKS_PSEUDO_MAP_IDX_VALUE) {
                uint64_t a = vm_map_ref(env, SRC, lo, hi);
                if (!a) {
                    err = MKS_VM_ECALL;
                    VM_STOP(1);
                }
                r[DST] = a;
            } else {
                err = MKS_VM_EINSN;
                VM_STOP(1);
            }
            break;
        }

        /* ---- jumps ---- */
        case MKS_BPF_JMP | MKS_BPF_JA: JUMP_IF(1); break;
        case MKS_BPF_JMP32 | MKS_BPF_JA:
            JUMP_REL(SIMM);
            if (SIMM < 0)
                CHECK_LIMIT();
            break;
#define JPAIR(cls, op, expr)                                                                       \
    case cls | op | MKS_BPF_K: {                                                                   \
        const uint64_t B_ = IMM;                                                                   \
        JUMP_IF(expr);                                                                             \
        break;                                                                                     \
    }                                                                                              \
    case cls | op | MKS_BPF_X: {                                                                   \
        const uint64_t B_ = r[SRC];                                                                \
        JUMP_IF(expr);                                                                             \
        break;                                                                                     \
    }
#define JCASES(cls, T, ST)                                                                         \
    JPAIR(cls, MKS_BPF_JEQ, (T)r[DST] == (T)B_)                                                    \
    JPAIR(cls, MKS_BPF_JNE, (T)r[DST] != (T)B_)                                                    \
    JPAIR(cls, MKS_BPF_JGT, (T)r[DST] > (T)B_)                                                     \
    JPAIR(cls, MKS_BPF_JGE, (T)r[DST] >= (T)B_)                                                    \
    JPAIR(cls, MKS_BPF_JLT, (T)r[DST] < (T)B_)                                                     \
    JPAIR(cls, MKS_BPF_JLE, (T)r[DST] <= (T)B_)                                                    \
    JPAIR(cls, MKS_BPF_JSET, ((T)r[DST] & (T)B_) != 0)                                             \
    JPAIR(cls, MKS_BPF_JSGT, (ST)r[DST] > (ST)B_)                                                  \
    JPAIR(cls, MKS_BPF_JSGE, (ST)r[DST] >= (ST)B_)                                                 \
    JPAIR(cls, MKS_BPF_JSLT, (ST)r[DST] < (ST)B_)                                                  \
    JPAIR(cls, MKS_BPF_JSLE, (ST)r[DST] <= (ST)B_)
            JCASES(MKS_BPF_JMP, uint64_t, int64_t)
            JCASES(MKS_BPF_JMP32, uint32_t, int32_t)
#undef JCASES
#undef JPAIR

        case MKS_BPF_JMP | MKS_BPF_CALL | MKS_BPF_K:
            if (SRC == MKS_PSEUDO_CALL) {
                uint32_t target = PC + (uint32_t)SIMM; /* wraps; GOTO_PC refuses it */
                if (MKS_UNLIKELY(depth + 1 >= VM_NFRAMES)) {
                    err = MKS_VM_ECALL;
                    VM_STOP(1);
                }
                frames[depth].saved[0] = r[6];
                frames[depth].saved[1] = r[7];
                frames[depth].saved[2] = r[8];
                frames[depth].saved[3] = r[9];
                frames[depth].ret_pc = PC;
                depth++;
                r[10] -= VM_FRAME;
                mem.stack_lo = r[10] - VM_FRAME;
                mem.stack_len += VM_FRAME;
                GOTO_PC(target);
                CHECK_LIMIT();
                break;
            }
            if (SRC != 0) {
                err = MKS_VM_EINSN;
                VM_STOP(1);
            }
            /* fallthrough */
        case MKS_BPF_JMP | MKS_BPF_CALL | MKS_BPF_X: {
            uint64_t id = (code & MKS_BPF_X) ? r[DST] : (uint64_t)(uint32_t)SIMM;
            int rc;
            CHECK_LIMIT();
            rc = vm_helper(env, mem, id, r);
            if (rc < 0) {
                err = rc;
                VM_STOP(1);
            }
            if (rc > 0) /* unwind */
                VM_STOP(2);
            break;
        }
        case MKS_BPF_JMP | MKS_BPF_EXIT:
            if (depth == 0)
                VM_STOP(2);
            depth--;
            r[6] = frames[depth].saved[0];
            r[7] = frames[depth].saved[1];
            r[8] = frames[depth].saved[2];
            r[9] = frames[depth].saved[3];
            GOTO_PC(frames[depth].ret_pc);
            r[10] += VM_FRAME;
            mem.stack_lo = r[10] - VM_FRAME;
            mem.stack_len -= VM_FRAME;
            CHECK_LIMIT();
            break;

        default:
            err = MKS_VM_EINSN;
            VM_STOP(1);
        }
    vm_join:
        MKS_JOIN_POINT(stopped);
        if (MKS_UNLIKELY(stopped))
            break;
    }
    if (stopped == 2)
        goto done;
    goto out;
done:
    if ((uint32_t)(ip - insns) + bias <= limit)
        *r0_p = r[0];
out:
    /* Whatever stopped the run, past the limit the answer is the limit's. */
    ran = (uint32_t)(ip - insns) + bias;
    if (ran > limit) {
        ran = limit;
        err = MKS_VM_ELIMIT;
    }
    if (insns_p)
        *insns_p = ran;
    return err;
#undef PC
#undef DST
#undef SRC
#undef OFF
#undef SIMM
#undef IMM
#undef ALU32
#undef SRC64
#undef SRC32
#undef DST32
#undef JUMP_IF
#undef GOTO_PC
#undef JUMP_REL
#undef CHECK_LIMIT
#undef VM_STOP
#undef MEM_CHECK
#undef LDX
#undef ST
#undef AS_U64
#undef VM_IS_LOCAL
#undef AS_S64
}

/* The decoded form and its runners: the same translation unit, so they
 * share the guards and helpers above. */
#include "vm_decoded.c"

#ifndef __CUDACC__
int mks_vm_run(const struct mks_vm_env *env, uint64_t r1, uint64_t r2, uint64_t *r0_p,
               uint64_t *insns_p)
{
    if (!env || !r0_p || (env->n_maps && !env->map_ids)) {
        if (insns_p)
            *insns_p = 0;
        return MKS_VM_EARG;
    }
    return mksi_vm_exec(env, r1, r2, r0_p, insns_p);
}

const char *mks_vm_strerror(int err)
{
    switch (err) {
    case MKS_VM_OK: return "ok";
    case MKS_VM_EMEM: return "memory access out of bounds";
    case MKS_VM_ELIMIT: return "instruction limit reached";
    case MKS_VM_EINSN: return "invalid instruction";
    case MKS_VM_EJUMP: return "jump out of program";
    case MKS_VM_ECALL: return "invalid call or map reference";
    case MKS_VM_EALIGN: return "misaligned atomic access";
    case MKS_VM_EARG: return "invalid VM environment";
    default: return "unknown VM error";
    }
}
#endif

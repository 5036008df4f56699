/*
 * The verifier: decides, before a program reaches the device, that every
 * path through it is safe for its program type and ABI version, and computes
 * the worst-case number of instructions one invocation can execute.
 *
 * It works in two passes.
 *
 * The static pass decodes every instruction (unknown opcodes and reserved
 * fields are rejected), splits the program into functions at local-call
 * targets, checks jump and call targets (in range, inside their function,
 * never into the second half of a 64-bit immediate), walks the control-flow
 * graph depth first to find unreachable instructions, back-edges (loops) and
 * recursion (rejected), and for a loop-free program computes the cost as the
 * longest path through the graph, a local call costing its callee's longest
 * path.  A ld_imm64 counts as one instruction, as the VM executes it.
 *
 * The abstract pass interprets the program over register and stack states:
 * each register is uninitialised, a scalar with unsigned and signed bounds,
 * a pointer to the read-only context, a pointer into a stack frame (constant
 * offset), a map reference, a map value pointer (offset range) or a map value
 * that may be NULL.  Each stack byte of each frame is unwritten, scalar data,
 * or part of an 8-byte spilled register.  Conditional jumps narrow bounds on
 * both branches and drop infeasible ones; a null check turns "map value or
 * NULL" into a map value on one side and 0 on the other, for every copy of
 * the pointer.  All paths are explored depth first, loops iteration by
 * iteration, each path's length counted; a path longer than VF_MAX_PATH is a
 * loop without a visible bound and is rejected.  With loops, the cost is the
 * longest explored path.
 *
 * A precision pass between the two finds, per instruction, which registers'
 * scalar ranges can still change a decision (see "precision" below);
 * pruning ignores the ranges of the others.
 *
 * Pruning: at instructions where paths join, explored states are kept.  A
 * kept state is complete once every path through it has ended (each kept
 * state counts the live paths and incomplete kept states below it).  A new
 * state that a complete kept state covers (every register and stack byte at
 * least as constrained) is pruned: the kept state was explored to the end
 * and found safe, so the new one is safe too, and its longest continuation
 * is at most the kept state's.  Incomplete states never prune: in a loop the
 * path comes back to them.  Past a few kept states, a new state is widened
 * over a complete compatible one (ranges joined), trading precision for
 * paths that would otherwise double at every branch.

 * Every rejection is one line in the caller's log:
 *   insn <idx> (<disassembly>): <what was found>; expected <what>
 * with a distinct code (enum mks_verify_err).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mkscope/bpf_isa.h"
#include "mkscope/hook_abi.h"
#include "mkscope/loader.h"
#include "mkscope/verifier.h"
#include "msg.h"
#include "vf_scalar.h"

/* Instructions processed before the program is called too complex: the
 * standard monitors need a few hundred, a 4096-instruction straight line
 * 4096; the cap bounds the time an agent spends on a hostile object. */
#define VF_MAX_STEPS 250000u
/* States kept per join point for pruning; beyond it paths are explored
 * without storing (slower, still correct). */
#define VF_MAX_KEPT_PER_INSN 32u
/* Instructions one path may execute: bounds how far a loop is unrolled
 * during exploration, and so the cost of a program with loops. */
#define VF_MAX_PATH 32768u
/* Past this many kept states at one instruction, new states are widened
 * (ranges joined) with a kept one: a chain of branches that each change a
 * scalar would otherwise double the paths at every branch. */
#define VF_WIDEN_AFTER 4u
/* Frames compared while looking for a kept state that covers (or can be
 * widened with) the current one: each is a walk over a frame's registers
 * and 512 stack bytes.  Eight frames deep, with 32 states kept at every
 * join, the instruction cap alone allowed seconds of comparing (5 s for one
 * program here, longer than the agent's lease); this cap is about a quarter
 * of a second.  The standard monitors compare a few thousand frames, the
 * query compiler's probes about a hundred thousand. */
#define VF_MAX_COMPARED_FRAMES 1000000u
/* Memory for the states kept and waiting to be explored: a state with 8
 * call frames is about 50 KB, and the standard monitors need a few dozen
 * states; the cap bounds what a hostile object costs the agent. */
#define VF_MAX_STATE_BYTES (64u << 20)
/* Pointer offsets stay within this, so offset arithmetic cannot overflow. */
#define VF_MAX_PTR_OFF (1ll << 30)
/* Context bytes before v1's reserved tail: the declared fields. */
#define VF_CTX_V1_FIELDS_END ((uint32_t)offsetof(struct mks_hook_ctx, reserved))


enum vf_type {
    VT_NOT_INIT = 0,
    VT_SCALAR,
    VT_CTX,
    VT_STACK,
    VT_MAP,
    VT_MAP_VALUE,
    VT_MAP_VALUE_OR_NULL,
};

/* A register.  A scalar's value is described by s (vf_scalar.h); pointers
 * keep their offset range in s.smin..s.smax. */
struct vf_reg {
    uint8_t type;
    uint8_t frame;  /* VT_STACK: frame the pointer points into */
    uint16_t map;   /* VT_MAP*: map index */
    uint32_t id;    /* links copies: scalars for narrowing, map values for null checks */
    uint32_t def;   /* VT_MAP_VALUE_OR_NULL: insn of the lookup (for messages) */
    struct vf_scalar s;
};

enum { SL_INVALID = 0, SL_MISC, SL_SPILL };

struct vf_frame {
    struct vf_reg regs[MKS_BPF_NREGS];
    uint8_t slot[MKS_BPF_STACK];               /* per byte; index = fp offset + 512 */
    struct vf_reg spill[MKS_BPF_STACK / 8];    /* valid where slot == SL_SPILL */
    int32_t callsite;                          /* insn of the call; -1 for the entry frame */
};

struct vf_kept;

struct vf_state {
    uint32_t insn;
    uint32_t nframes;
    uint64_t steps;          /* instructions this path has executed */
    int64_t last_back;       /* last jump back this path took, -1: none */
    struct vf_kept *parent;  /* the last state kept on this path */
    struct vf_frame fr[];
};

/* A state kept at a join point.  It is complete when every path through it
 * has ended; only complete states prune others (a loop can bring a path
 * back to a state still being explored).  branches counts the paths and
 * incomplete kept states whose nearest kept ancestor it is. */
struct vf_kept {
    struct vf_kept *next;     /* at the same instruction */
    struct vf_kept *all_next; /* every kept state, for freeing */
    struct vf_kept *parent;
    struct vf_state *st;
    uint32_t branches;
    bool complete;
    bool has_path;            /* some path through it reached an exit */
    uint64_t depth;           /* steps of the path when it was kept */
    uint64_t remaining;       /* longest continuation to an exit */
};

struct idmap {
    uint32_t n;
    uint32_t t[2 * (MKS_BPF_NREGS + MKS_BPF_STACK / 8) * MKS_BPF_MAX_FRAMES];
    uint32_t s[2 * (MKS_BPF_NREGS + MKS_BPF_STACK / 8) * MKS_BPF_MAX_FRAMES];
};

/* Per-instruction facts of the static pass. */
enum {
    VI_LDIMM_HI = 1 << 0, /* second half of a ld_imm64 */
    VI_FUNC = 1 << 1,     /* function entry */
    VI_JOIN = 1 << 2,     /* two or more predecessors */
    VI_SEEN = 1 << 3,     /* reachable */
    VI_INLOOP = 1 << 4,   /* on a loop: a back-edge's natural loop */
};

struct vf {
    const struct mks_insn *insns;
    uint32_t n;
    const struct mks_verify_opts *o;
    uint32_t prog_type, abi;
    uint32_t ctx_size, ctx_fields_end;
    char *log;
    size_t log_len;
    uint8_t *info;
    uint32_t *func_of;   /* function index of each insn */
    uint32_t *funcs;     /* entry insn of each function, ascending */
    uint32_t n_funcs;
    uint64_t *cost;      /* longest path from insn to its function's exit */
    struct vf_kept **kept;
    uint32_t *n_kept;
    struct vf_kept *all_kept;
    bool has_loops;        /* back-edges: cost from paths, not the graph */
    uint64_t max_cost;     /* longest explored path */
    bool path_has_len;     /* set by step() when a path ends at an exit */
    uint64_t path_len;
    uint16_t *need;        /* per insn: registers whose scalar range matters */
    struct vf_state **stack;
    uint32_t stack_len, stack_cap;
    uint32_t next_id;
    uint64_t state_bytes;  /* in states kept or waiting (VF_MAX_STATE_BYTES) */
    uint64_t compared;     /* frames compared for pruning (VF_MAX_COMPARED_FRAMES) */
    bool over_memory;
    uint64_t steps;
    uint32_t states;
    bool helper_ok[256]; /* by helper id below 256; mkscope's ids fit */
    struct idmap idmap;  /* scratch of state_covers */
};

static size_t st_size(uint32_t nframes)
{
    return sizeof(struct vf_state) + (size_t)nframes * sizeof(struct vf_frame);
}

/* ---- messages ---------------------------------------------------------- */

__attribute__((format(printf, 4, 5))) static int verr(struct vf *v, uint32_t idx, int code, const char *fmt,
                                                      ...)
{
    char dis[96];
    va_list ap;
    int n = 0;

    if (v->log && v->log_len) {
        if (idx < v->n) {
            if (mks_insn_disasm(v->insns, v->n, idx, dis, sizeof(dis)) < 0)
                snprintf(dis, sizeof(dis), "?");
            n = snprintf(v->log, v->log_len, "insn %u (%s): ", idx, dis);
            if (n < 0)
                n = 0;
        }
        if ((size_t)n < v->log_len) {
            va_start(ap, fmt);
            vsnprintf(v->log + n, v->log_len - (size_t)n, fmt, ap);
            va_end(ap);
        }
        mks_msg_one_line(v->log);
    }
    return -code;
}

static const char *type_name(const struct vf_reg *r)
{
    switch (r->type) {
    case VT_NOT_INIT: return "uninitialised";
    case VT_SCALAR: return "a scalar";
    case VT_CTX: return "the context pointer";
    case VT_STACK: return "a stack pointer";
    case VT_MAP: return "a map reference";
    case VT_MAP_VALUE: return "a map value pointer";
    case VT_MAP_VALUE_OR_NULL: return "a map value pointer that may be NULL";
    default: return "?";
    }
}

static const char *map_name(const struct vf *v, uint32_t m)
{
    return m < v->o->n_maps && v->o->maps[m].name[0] ? v->o->maps[m].name : "?";
}

static const char *map_type_name(uint32_t t)
{
    switch (t) {
    case MKS_MAP_ARRAY: return "ARRAY";
    case MKS_MAP_PERWORKER_ARRAY: return "PERWORKER_ARRAY";
    case MKS_MAP_HASH: return "HASH";
    case MKS_MAP_HIST: return "HIST";
    case MKS_MAP_RINGBUF: return "RINGBUF";
    default: return "unknown";
    }
}

/* ---- scalars (the domain itself is vf_scalar.c) ------------------------ */

static void sc_unknown(struct vf_reg *r)
{
    memset(r, 0, sizeof(*r));
    r->type = VT_SCALAR;
    vfs_unknown(&r->s);
}

static void sc_urange(struct vf_reg *r, uint64_t lo, uint64_t hi)
{
    sc_unknown(r);
    vfs_urange(&r->s, lo, hi);
}

static void sc_const(struct vf_reg *r, uint64_t c)
{
    sc_unknown(r);
    vfs_const(&r->s, c);
}

static bool sc_is_const(const struct vf_reg *r)
{
    return r->type == VT_SCALAR && vfs_is_const(&r->s);
}

/* A loaded value of `size` bytes, sign-extended when sx. */
static void sc_width(struct vf_reg *r, uint32_t size, bool sx)
{
    sc_unknown(r);
    vfs_width(&r->s, size, sx);
}

/* ---- state helpers ------------------------------------------------------ */

static struct vf_frame *cur_frame(struct vf_state *st)
{
    return &st->fr[st->nframes - 1];
}

/* A copy of the frames in use: only the working state of explore() has
 * room for a call to push another frame. */
static struct vf_state *st_dup(struct vf *v, const struct vf_state *st)
{
    size_t sz = st_size(st->nframes);
    if (v->state_bytes + sz > VF_MAX_STATE_BYTES) {
        v->over_memory = true;
        return NULL;
    }
    struct vf_state *c = malloc(sz);
    if (c) {
        memcpy(c, st, sz);
        v->state_bytes += sz;
    }
    return c;
}

static void st_free(struct vf *v, struct vf_state *st)
{
    if (st) {
        v->state_bytes -= st_size(st->nframes);
        free(st);
    }
}

/* Why a copy failed: the memory cap (a rejection of insn i) or malloc. */
static int st_nomem(struct vf *v, uint32_t i)
{
    if (v->over_memory)
        return verr(v, i, MKS_VERR_COMPLEXITY, "program too complex: the states kept to explore it exceed %u MiB; expected fewer branches that multiply paths",
                    VF_MAX_STATE_BYTES >> 20);
    return -ENOMEM;
}

static void frame_init(struct vf_frame *f, uint32_t frameno, int32_t callsite)
{
    memset(f, 0, sizeof(*f));
    f->regs[10].type = VT_STACK;
    f->regs[10].frame = (uint8_t)frameno;
    f->callsite = callsite;
}

/* Apply fn to every register and spilled register of every frame. */
#define FOR_EACH_REG(st, r, body)                                                                  \
    do {                                                                                           \
        for (uint32_t f_ = 0; f_ < (st)->nframes; f_++) {                                          \
            struct vf_frame *fr_ = &(st)->fr[f_];                                                  \
            for (uint32_t i_ = 0; i_ < MKS_BPF_NREGS; i_++) {                                      \
                struct vf_reg *r = &fr_->regs[i_];                                                 \
                body;                                                                              \
            }                                                                                      \
            for (uint32_t s_ = 0; s_ < MKS_BPF_STACK / 8; s_++) {                                  \
                if (fr_->slot[s_ * 8] != SL_SPILL)                                                 \
                    continue;                                                                      \
                struct vf_reg *r = &fr_->spill[s_];                                                \
                body;                                                                              \
            }                                                                                      \
        }                                                                                          \
    } while (0)

/* ---- static pass -------------------------------------------------------- */

static bool is_ldimm64(const struct mks_insn *in)
{
    return in->code == (MKS_BPF_LD | MKS_BPF_IMM | MKS_BPF_DW);
}

/* Jump target of insn i, or -1 when it does not jump. */
static int64_t jump_target(const struct mks_insn *in, uint32_t i)
{
    uint8_t cls = MKS_BPF_CLASS(in->code), op = in->code & 0xf0;
    if (cls != MKS_BPF_JMP && cls != MKS_BPF_JMP32)
        return -1;
    if (op == MKS_BPF_EXIT || op == MKS_BPF_CALL)
        return -1;
    if (op == MKS_BPF_JA && cls == MKS_BPF_JMP32)
        return (int64_t)i + 1 + in->imm;
    return (int64_t)i + 1 + in->off;
}

static bool is_local_call(const struct mks_insn *in)
{
    return in->code == (MKS_BPF_JMP | MKS_BPF_CALL) && mks_insn_src(in) == MKS_PSEUDO_CALL;
}

/* Decode check of one instruction: opcode known, reserved fields zero,
 * registers in range. */
static int check_encoding(struct vf *v, uint32_t i)
{
    const struct mks_insn *in = &v->insns[i];
    uint8_t cls = MKS_BPF_CLASS(in->code), op = in->code & 0xf0, dst = mks_insn_dst(in),
            src = mks_insn_src(in), mode = in->code & 0xe0, size = in->code & 0x18;
    bool x = (in->code & MKS_BPF_X) != 0;

    switch (cls) {
    case MKS_BPF_ALU:
    case MKS_BPF_ALU64: {
        bool ok = true;
        if (op == MKS_BPF_NEG) {
            ok = !x && src == 0 && in->imm == 0 && in->off == 0;
        } else if (op == MKS_BPF_END) {
            ok = src == 0 && in->off == 0 && (in->imm == 16 || in->imm == 32 || in->imm == 64) &&
                 !(cls == MKS_BPF_ALU64 && x);
        } else if (op > MKS_BPF_END) {
            return verr(v, i, MKS_VERR_OPCODE, "unknown opcode %#04x; expected an RFC 9669 instruction", in->code);
        } else {
            if (x)
                ok = in->imm == 0;
            else
                ok = src == 0;
            if (op == MKS_BPF_DIV || op == MKS_BPF_MOD)
                ok = ok && (in->off == 0 || in->off == 1);
            else if (op == MKS_BPF_MOV && x)
                ok = ok && (in->off == 0 || in->off == 8 || in->off == 16 ||
                            (cls == MKS_BPF_ALU64 && in->off == 32));
            else
                ok = ok && in->off == 0;
        }
        if (!ok)
            return verr(v, i, MKS_VERR_OPCODE, "reserved field set (src_reg %u, off %d, imm %d); expected zero in unused fields",
                        src, in->off, in->imm);
        if (dst > 10 || (x && src > 10))
            return verr(v, i, MKS_VERR_REG, "register r%u does not exist; expected r0..r10", dst > 10 ? dst : src);
        if (dst == 10)
            return verr(v, i, MKS_VERR_REG, "write to r10; expected r10 (the frame pointer) to be read-only");
        return 0;
    }
    case MKS_BPF_LDX:
        if ((mode != MKS_BPF_MEM && mode != MKS_BPF_MEMSX) || (mode == MKS_BPF_MEMSX && size == MKS_BPF_DW))
            return verr(v, i, MKS_VERR_OPCODE, "unknown opcode %#04x; expected an RFC 9669 load", in->code);
        if (in->imm != 0)
            return verr(v, i, MKS_VERR_OPCODE, "reserved field set (imm %d); expected zero in unused fields", in->imm);
        if (dst > 10 || src > 10)
            return verr(v, i, MKS_VERR_REG, "register r%u does not exist; expected r0..r10", dst > 10 ? dst : src);
        if (dst == 10)
            return verr(v, i, MKS_VERR_REG, "write to r10; expected r10 (the frame pointer) to be read-only");
        return 0;
    case MKS_BPF_ST:
        if (mode != MKS_BPF_MEM)
            return verr(v, i, MKS_VERR_OPCODE, "unknown opcode %#04x; expected an RFC 9669 store", in->code);
        if (src != 0)
            return verr(v, i, MKS_VERR_OPCODE, "reserved field set (src_reg %u); expected zero in unused fields", src);
        if (dst > 10)
            return verr(v, i, MKS_VERR_REG, "register r%u does not exist; expected r0..r10", dst);
        return 0;
    case MKS_BPF_STX:
        if (mode == MKS_BPF_MEM) {
            if (in->imm != 0)
                return verr(v, i, MKS_VERR_OPCODE, "reserved field set (imm %d); expected zero in unused fields", in->imm);
        } else if (mode == MKS_BPF_ATOMIC) {
            int32_t a = in->imm & ~MKS_BPF_FETCH;
            bool ok = a == MKS_BPF_ADD || a == MKS_BPF_OR || a == MKS_BPF_AND || a == MKS_BPF_XOR ||
                      in->imm == MKS_BPF_XCHG || in->imm == MKS_BPF_CMPXCHG;
            if (!ok || (size != MKS_BPF_W && size != MKS_BPF_DW))
                return verr(v, i, MKS_VERR_OPCODE, "unknown atomic operation %#x size %s; expected add/or/and/xor (fetch), xchg or cmpxchg on u32/u64",
                            (unsigned)in->imm, size == MKS_BPF_W ? "u32" : size == MKS_BPF_DW ? "u64" : "u8/u16");
            if (src == 10 && (in->imm & MKS_BPF_FETCH))
                return verr(v, i, MKS_VERR_REG, "atomic fetch into r10; expected r10 (the frame pointer) to be read-only");
        } else {
            return verr(v, i, MKS_VERR_OPCODE, "unknown opcode %#04x; expected an RFC 9669 store", in->code);
        }
        if (dst > 10 || src > 10)
            return verr(v, i, MKS_VERR_REG, "register r%u does not exist; expected r0..r10", dst > 10 ? dst : src);
        return 0;
    case MKS_BPF_LD:
        if (!is_ldimm64(in))
            return verr(v, i, MKS_VERR_OPCODE, "unknown opcode %#04x (legacy packet load?); expected an RFC 9669 instruction",
                        in->code);
        if (i + 1 >= v->n)
            return verr(v, i, MKS_VERR_LDIMM64, "ld_imm64 is the last instruction; expected its second half to follow");
        if (v->insns[i + 1].code != 0 || v->insns[i + 1].regs != 0 || v->insns[i + 1].off != 0)
            return verr(v, i, MKS_VERR_LDIMM64, "second half of ld_imm64 has code %#04x regs %#04x off %d; expected all zero but imm",
                        v->insns[i + 1].code, v->insns[i + 1].regs, v->insns[i + 1].off);
        if (in->off != 0)
            return verr(v, i, MKS_VERR_OPCODE, "reserved field set (off %d); expected zero in unused fields", in->off);
        if (src != 0 && src != MKS_PSEUDO_MAP_IDX && src != MKS_PSEUDO_MAP_IDX_VALUE)
            return verr(v, i, MKS_VERR_LDIMM64, "ld_imm64 with src_reg %u (kernel map fd, BTF id or function); expected 0, 5 (map index) or 6 (map value)",
                        src);
        if (dst > 10)
            return verr(v, i, MKS_VERR_REG, "register r%u does not exist; expected r0..r10", dst);
        if (dst == 10)
            return verr(v, i, MKS_VERR_REG, "write to r10; expected r10 (the frame pointer) to be read-only");
        return 0;
    case MKS_BPF_JMP:
    case MKS_BPF_JMP32:
        if (op == MKS_BPF_EXIT || op == MKS_BPF_CALL) {
            if (cls != MKS_BPF_JMP || x)
                return verr(v, i, MKS_VERR_OPCODE, "unknown opcode %#04x; expected an RFC 9669 instruction", in->code);
            if (op == MKS_BPF_EXIT && (in->regs != 0 || in->off != 0 || in->imm != 0))
                return verr(v, i, MKS_VERR_OPCODE, "reserved field set in exit; expected zero in unused fields");
            if (op == MKS_BPF_CALL && (dst != 0 || in->off != 0 || (src != 0 && src != MKS_PSEUDO_CALL)))
                return verr(v, i, MKS_VERR_OPCODE, "call with src_reg %u dst_reg %u off %d; expected a helper call (src 0) or local call (src 1)",
                            src, dst, in->off);
            return 0;
        }
        if (op > MKS_BPF_JSLE)
            return verr(v, i, MKS_VERR_OPCODE, "unknown opcode %#04x; expected an RFC 9669 instruction", in->code);
        if (op == MKS_BPF_JA) {
            if (x || in->regs != 0 || (cls == MKS_BPF_JMP && in->imm != 0) || (cls == MKS_BPF_JMP32 && in->off != 0))
                return verr(v, i, MKS_VERR_OPCODE, "reserved field set in goto; expected zero in unused fields");
            return 0;
        }
        if ((x && in->imm != 0) || (!x && src != 0))
            return verr(v, i, MKS_VERR_OPCODE, "reserved field set (src_reg %u, imm %d); expected zero in unused fields", src,
                        in->imm);
        if (dst > 10 || (x && src > 10))
            return verr(v, i, MKS_VERR_REG, "register r%u does not exist; expected r0..r10", dst > 10 ? dst : src);
        return 0;
    default:
        return verr(v, i, MKS_VERR_OPCODE, "unknown opcode %#04x; expected an RFC 9669 instruction", in->code);
    }
}

/* Successors of insn i within its function (the callee of a local call is
 * not a successor: the call falls through).  Returns the count. */
static int successors(const struct vf *v, uint32_t i, uint32_t succ[2])
{
    const struct mks_insn *in = &v->insns[i];
    uint8_t cls = MKS_BPF_CLASS(in->code), op = in->code & 0xf0;
    int n = 0;

    if (is_ldimm64(in)) {
        succ[n++] = i + 2;
        return n;
    }
    if (cls == MKS_BPF_JMP || cls == MKS_BPF_JMP32) {
        if (op == MKS_BPF_EXIT)
            return 0;
        if (op == MKS_BPF_CALL) {
            succ[n++] = i + 1;
            return n;
        }
        int64_t t = jump_target(in, i);
        if (op == MKS_BPF_JA) {
            succ[n++] = (uint32_t)t;
            return n;
        }
        succ[n++] = i + 1;
        if ((uint32_t)t != i + 1)
            succ[n++] = (uint32_t)t;
        return n;
    }
    succ[n++] = i + 1;
    return n;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Marks the natural loop of the back-edge tail -> head: the head and every
 * instruction that reaches the tail without passing through the head.
 * Predecessors are found by scanning (programs are small, loops few). */
static void mark_loop(struct vf *v, uint32_t tail, uint32_t head)
{
    uint32_t *work = malloc(sizeof(uint32_t) * v->n), nw = 0;
    if (!work)
        return; /* only a loss of precision: widening stays allowed there */
    v->info[head] |= VI_INLOOP;
    if (!(v->info[tail] & VI_INLOOP)) {
        v->info[tail] |= VI_INLOOP;
        work[nw++] = tail;
    }
    while (nw > 0) {
        uint32_t x = work[--nw];
        for (uint32_t p = v->funcs[v->func_of[x]]; p < v->n && v->func_of[p] == v->func_of[x]; p++) {
            uint32_t succ[2];
            if ((v->info[p] & (VI_LDIMM_HI | VI_INLOOP)))
                continue;
            int ns = successors(v, p, succ);
            for (int k = 0; k < ns; k++) {
                if (succ[k] == x) {
                    v->info[p] |= VI_INLOOP;
                    work[nw++] = p;
                    break;
                }
            }
        }
    }
    free(work);
}

static int static_pass(struct vf *v)
{
    int rc;

    /* Decode; mark ld_imm64 halves. */
    for (uint32_t i = 0; i < v->n; i++) {
        rc = check_encoding(v, i);
        if (rc)
            return rc;
        if (is_ldimm64(&v->insns[i]))
            v->info[++i] |= VI_LDIMM_HI;
    }

    /* Jump and call targets. */
    v->funcs[v->n_funcs++] = 0;
    for (uint32_t i = 0; i < v->n; i++) {
        const struct mks_insn *in = &v->insns[i];
        if (v->info[i] & VI_LDIMM_HI)
            continue;
        uint8_t cls = MKS_BPF_CLASS(in->code), op = in->code & 0xf0;
        bool jumps = (cls == MKS_BPF_JMP || cls == MKS_BPF_JMP32) && op != MKS_BPF_EXIT && op != MKS_BPF_CALL;
        if (!jumps && !is_local_call(in))
            continue;
        int64_t t = is_local_call(in) ? (int64_t)i + 1 + in->imm : jump_target(in, i);
        if (t < 0 || t >= (int64_t)v->n)
            return verr(v, i, MKS_VERR_JUMP_RANGE, "%s target %" PRId64 " is outside the program; expected 0..%u",
                        is_local_call(in) ? "call" : "jump", t, v->n - 1);
        if (v->info[t] & VI_LDIMM_HI)
            return verr(v, i, MKS_VERR_JUMP_MIDDLE, "%s target %" PRId64 " is the second half of a ld_imm64; expected an instruction start",
                        is_local_call(in) ? "call" : "jump", t);
        if (is_local_call(in) && !(v->info[t] & VI_FUNC)) {
            v->info[t] |= VI_FUNC;
            if (t != 0)
                v->funcs[v->n_funcs++] = (uint32_t)t;
        }
    }
    v->info[0] |= VI_FUNC;
    qsort(v->funcs, v->n_funcs, sizeof(*v->funcs), cmp_u32);
    for (uint32_t f = 0, i = 0; i < v->n; i++) {
        if (f + 1 < v->n_funcs && v->funcs[f + 1] == i)
            f++;
        v->func_of[i] = f;
    }

    /* Edges stay inside their function; nothing runs off the end. */
    for (uint32_t i = 0; i < v->n; i++) {
        uint32_t succ[2];
        if (v->info[i] & VI_LDIMM_HI)
            continue;
        int ns = successors(v, i, succ);
        for (int k = 0; k < ns; k++) {
            if (succ[k] >= v->n)
                return verr(v, i, MKS_VERR_FALLTHROUGH, "execution continues past the last instruction; expected exit or goto");
            if (v->func_of[succ[k]] != v->func_of[i]) {
                if (succ[k] == i + 1 || (is_ldimm64(&v->insns[i]) && succ[k] == i + 2))
                    return verr(v, i, MKS_VERR_FALLTHROUGH, "function ends without exit and falls into the function at insn %u; expected exit or goto",
                                v->funcs[v->func_of[succ[k]]]);
                return verr(v, i, MKS_VERR_JUMP_RANGE, "jump to insn %u in another function (entry %u); expected a target in this function (entry %u)",
                            succ[k], v->funcs[v->func_of[succ[k]]], v->funcs[v->func_of[i]]);
            }
        }
    }

    /* Call graph: recursion and depth; callee-first order of functions. */
    uint32_t nf = v->n_funcs;
    uint8_t *fcolor = calloc(nf, 1);
    uint32_t *forder = calloc(nf, sizeof(uint32_t)), n_order = 0;
    struct fstk {
        uint32_t f, pos;
    } *fs = calloc(nf + 1, sizeof(*fs));
    if (!fcolor || !forder || !fs) {
        rc = -ENOMEM;
        goto out;
    }
    uint32_t fsp = 0;
    fs[fsp++] = (struct fstk){0, 0};
    fcolor[0] = 1;
    rc = 0;
    while (fsp > 0 && rc == 0) {
        struct fstk *top = &fs[fsp - 1];
        uint32_t end = top->f + 1 < nf ? v->funcs[top->f + 1] : v->n;
        uint32_t i = top->pos ? top->pos : v->funcs[top->f];
        bool pushed = false;
        for (; i < end; i++) {
            if ((v->info[i] & VI_LDIMM_HI) || !is_local_call(&v->insns[i]))
                continue;
            uint32_t cf = v->func_of[i + 1 + v->insns[i].imm];
            if (fcolor[cf] == 1) {
                rc = verr(v, i, MKS_VERR_LOOP, "recursive call to the function at insn %u; expected no recursion",
                          v->funcs[cf]);
                break;
            }
            if (fcolor[cf] == 0) {
                if (fsp >= MKS_BPF_MAX_FRAMES) {
                    rc = verr(v, i, MKS_VERR_CALL_DEPTH, "local calls nested %u deep; expected at most %u frames", fsp + 1,
                              MKS_BPF_MAX_FRAMES);
                    break;
                }
                top->pos = i + 1;
                fcolor[cf] = 1;
                fs[fsp++] = (struct fstk){cf, 0};
                pushed = true;
                break;
            }
        }
        if (rc || pushed)
            continue;
        fcolor[top->f] = 2;
        forder[n_order++] = top->f;
        fsp--;
    }
    if (rc)
        goto out;

    /* Per function, callees first: reachability, back-edges, cost. */
    uint32_t *stk = malloc(sizeof(uint32_t) * (v->n + 1));
    uint8_t *color = calloc(v->n, 1);
    uint8_t *spos = calloc(v->n, 1);
    if (!stk || !color || !spos) {
        free(stk);
        free(color);
        free(spos);
        rc = -ENOMEM;
        goto out;
    }
    for (uint32_t k = 0; k < n_order && rc == 0; k++) {
        uint32_t entry = v->funcs[forder[k]], sp = 0;
        stk[sp++] = entry;
        color[entry] = 1;
        v->info[entry] |= VI_SEEN;
        while (sp > 0) {
            uint32_t i = stk[sp - 1], succ[2];
            int ns = successors(v, i, succ);
            if (spos[i] < ns) {
                uint32_t s = succ[spos[i]++];
                v->info[s] |= (v->info[s] & VI_SEEN) ? VI_JOIN : 0;
                v->info[s] |= VI_SEEN;
                if (color[s] == 1) {
                    /* a loop: explored iteration by iteration, its cost
                     * taken from the paths */
                    v->has_loops = true;
                    mark_loop(v, i, s);
                    continue;
                }
                if (color[s] == 0) {
                    color[s] = 1;
                    stk[sp++] = s;
                }
                continue;
            }
            /* All successors done: cost is one step plus the callee's
             * longest path for a call, plus the longest successor. */
            uint64_t c = 1, best = 0;
            if (is_local_call(&v->insns[i]))
                c += v->cost[i + 1 + v->insns[i].imm];
            for (int q = 0; q < ns; q++)
                if (color[succ[q]] == 2 && v->cost[succ[q]] > best)
                    best = v->cost[succ[q]];
            v->cost[i] = c + best;
            color[i] = 2;
            sp--;
        }
    }
    free(stk);
    free(color);
    free(spos);
    if (rc)
        goto out;
    for (uint32_t i = 0; i < v->n; i++) {
        if (!(v->info[i] & (VI_SEEN | VI_LDIMM_HI))) {
            rc = verr(v, i, MKS_VERR_UNREACHABLE, "unreachable instruction; expected every instruction on some path from the entry (remove dead code)");
            break;
        }
    }
out:
    free(fcolor);
    free(forder);
    free(fs);
    return rc;
}


/* ---- precision -----------------------------------------------------------
 *
 * Which registers' scalar ranges can change what the verifier decides from
 * an instruction on.  A range matters where it decides a branch, becomes a
 * pointer offset, sizes a ring buffer record, is a CONTROL program's hint
 * or a subprogram's result, and wherever a value flows into one of those:
 * through ALU operations, copies, and the stack (if a value loaded from the
 * stack matters, every value stored to the stack does; map values and the
 * context are not tracked by the verifier, so what is stored there matters
 * to nothing).  Pruning ignores the ranges of the other scalar registers of
 * the current frame: two states that differ only there behave the same,
 * which lets a loop's iterations prune each other when only an accumulator
 * differs.
 *
 * Telling a pointer offset from plain arithmetic, and a stack access from
 * another one, needs to know which registers may hold pointers, and stack
 * pointers; a forward pass computes that first, over every path (a union:
 * a register that may be one on any path counts as one).
 */

#define RBIT(r) ((uint16_t)(1u << (r)))
#define ARGS_R1_R5 ((uint16_t)0x3e)

struct mayptr {
    uint16_t ptr;   /* may hold a pointer */
    uint16_t stack; /* may hold a stack pointer */
};

static void mp_set(struct mayptr *m, uint8_t r, bool ptr, bool stack)
{
    m->ptr = ptr ? (m->ptr | RBIT(r)) : (m->ptr & ~RBIT(r));
    m->stack = stack ? (m->stack | RBIT(r)) : (m->stack & ~RBIT(r));
}

/* May-pointer registers after insn i, given those before it; *mem_ptr and
 * *mem_stack: a pointer (a stack pointer) may have been stored to memory. */
static struct mayptr mayptr_step(const struct vf *v, uint32_t i, struct mayptr in, bool *mem_ptr, bool *mem_stack)
{
    const struct mks_insn *x = &v->insns[i];
    uint8_t cls = MKS_BPF_CLASS(x->code), op = x->code & 0xf0, dst = mks_insn_dst(x), src = mks_insn_src(x);
    bool isx = (x->code & MKS_BPF_X) != 0;
    struct mayptr out = in;

    switch (cls) {
    case MKS_BPF_ALU64:
        if (op == MKS_BPF_MOV)
            mp_set(&out, dst, isx && x->off == 0 && (in.ptr & RBIT(src)), isx && x->off == 0 && (in.stack & RBIT(src)));
        else if ((op == MKS_BPF_ADD || op == MKS_BPF_SUB) && isx)
            mp_set(&out, dst, (in.ptr & (RBIT(dst) | RBIT(src))) != 0, (in.stack & (RBIT(dst) | RBIT(src))) != 0);
        else if (op != MKS_BPF_ADD && op != MKS_BPF_SUB)
            mp_set(&out, dst, false, false);
        break;
    case MKS_BPF_ALU:
        mp_set(&out, dst, false, false);
        break;
    case MKS_BPF_LDX: {
        bool dw = (x->code & 0x18) == MKS_BPF_DW;
        mp_set(&out, dst, dw && *mem_ptr, dw && *mem_stack);
        break;
    }
    case MKS_BPF_STX:
        if ((x->code & 0xe0) == MKS_BPF_MEM) {
            if (in.ptr & RBIT(src))
                *mem_ptr = true;
            if (in.stack & RBIT(src))
                *mem_stack = true;
        } else if (x->imm == MKS_BPF_CMPXCHG) {
            mp_set(&out, 0, false, false);
        } else if (x->imm & MKS_BPF_FETCH) {
            mp_set(&out, src, false, false);
        }
        break;
    case MKS_BPF_LD:
        mp_set(&out, dst, src != 0, false);
        break;
    case MKS_BPF_JMP:
        if (op == MKS_BPF_CALL) {
            out.ptr &= (uint16_t)~(ARGS_R1_R5 | RBIT(0));
            out.stack &= (uint16_t)~(ARGS_R1_R5 | RBIT(0));
            /* a subprogram may return any pointer it was given */
            mp_set(&out, 0, is_local_call(x) || x->imm == MKS_HELPER_MAP_LOOKUP, is_local_call(x));
        }
        break;
    default:
        break;
    }
    out.ptr |= RBIT(10);
    out.stack |= RBIT(10);
    return out;
}

/* Registers that matter before insn i, given those that matter after it
 * and the may-pointers before it.  *stack_needed: a value loaded from the
 * stack matters; stack_need: the same, from the previous sweep. */
static uint16_t need_step(const struct vf *v, uint32_t i, uint16_t out, struct mayptr mp, bool stack_need,
                          bool *stack_needed)
{
    const struct mks_insn *x = &v->insns[i];
    uint8_t cls = MKS_BPF_CLASS(x->code), op = x->code & 0xf0, dst = mks_insn_dst(x), src = mks_insn_src(x);
    bool isx = (x->code & MKS_BPF_X) != 0;
    uint16_t in = out;

    switch (cls) {
    case MKS_BPF_ALU:
    case MKS_BPF_ALU64:
        if (op == MKS_BPF_MOV) {
            in = out & ~RBIT(dst);
            if ((out & RBIT(dst)) && isx)
                in |= RBIT(src);
            break;
        }
        if ((out & RBIT(dst)) && isx && op != MKS_BPF_END)
            in |= RBIT(src);
        if (isx && cls == MKS_BPF_ALU64 && (op == MKS_BPF_ADD || op == MKS_BPF_SUB)) {
            if (mp.ptr & RBIT(dst))
                in |= RBIT(src); /* an offset added to a pointer */
            if (mp.ptr & RBIT(src))
                in |= RBIT(dst);
        }
        break;
    case MKS_BPF_LDX:
        if ((out & RBIT(dst)) && (mp.stack & RBIT(src)))
            *stack_needed = true;
        in = out & ~RBIT(dst);
        break;
    case MKS_BPF_STX:
        if ((x->code & 0xe0) == MKS_BPF_ATOMIC) {
            uint8_t r = x->imm == MKS_BPF_CMPXCHG ? 0 : src;
            if ((x->imm & MKS_BPF_FETCH) && (out & RBIT(r)) && (mp.stack & RBIT(dst)))
                *stack_needed = true;
            if (x->imm & MKS_BPF_FETCH)
                in = out & ~RBIT(r);
            if (stack_need && (mp.stack & RBIT(dst)))
                in |= RBIT(src) | (x->imm == MKS_BPF_CMPXCHG ? RBIT(0) : 0);
        } else if (stack_need && (mp.stack & RBIT(dst))) {
            in |= RBIT(src);
        }
        break;
    case MKS_BPF_LD:
        in = out & ~RBIT(dst);
        break;
    case MKS_BPF_JMP:
    case MKS_BPF_JMP32:
        if (op == MKS_BPF_CALL) {
            in = out & ~(ARGS_R1_R5 | RBIT(0));
            if (is_local_call(x))
                in |= ARGS_R1_R5;
            else if (x->imm == MKS_HELPER_RINGBUF_OUTPUT)
                in |= RBIT(3);
        } else if (op == MKS_BPF_EXIT) {
            in = (v->func_of[i] != 0 || v->prog_type == MKS_PROG_CONTROL) ? RBIT(0) : 0;
        } else if (op != MKS_BPF_JA) {
            in |= RBIT(dst) | (isx ? RBIT(src) : 0);
        }
        break;
    default:
        break;
    }
    return in & (uint16_t)~RBIT(10);
}

/* Fills v->need.  Both passes iterate to a fixed point (loops, and the
 * memory flags that make other accesses matter); if that takes unusually
 * long, every register matters, which is always safe. */
static int precision_pass(struct vf *v)
{
    struct mayptr *mp = calloc(v->n + 2, sizeof(*mp));
    uint8_t *reach = calloc(v->n + 2, 1);
    if (!mp || !reach) {
        free(mp);
        free(reach);
        return -ENOMEM;
    }
    bool mem_ptr = false, mem_stack = false, changed = true;
    for (uint32_t f = 0; f < v->n_funcs; f++) {
        uint32_t e = v->funcs[f];
        /* callee arguments may be any pointer of the caller */
        mp[e].ptr = f == 0 ? (RBIT(1) | RBIT(10)) : (ARGS_R1_R5 | RBIT(10));
        mp[e].stack = f == 0 ? RBIT(10) : (ARGS_R1_R5 | RBIT(10));
        reach[e] = 1;
    }
    for (int sweep = 0; changed; sweep++) {
        if (sweep > 64)
            goto all;
        changed = false;
        bool m0 = mem_ptr, m1 = mem_stack;
        for (uint32_t i = 0; i < v->n; i++) {
            uint32_t succ[2];
            if (!reach[i] || (v->info[i] & VI_LDIMM_HI))
                continue;
            struct mayptr out = mayptr_step(v, i, mp[i], &mem_ptr, &mem_stack);
            int ns = successors(v, i, succ);
            for (int k = 0; k < ns; k++) {
                struct mayptr *t = &mp[succ[k]];
                if (succ[k] >= v->n)
                    continue;
                if (!reach[succ[k]] || (t->ptr | out.ptr) != t->ptr || (t->stack | out.stack) != t->stack) {
                    t->ptr |= out.ptr;
                    t->stack |= out.stack;
                    reach[succ[k]] = 1;
                    changed = true;
                }
            }
        }
        changed = changed || m0 != mem_ptr || m1 != mem_stack;
    }

    bool stack_need = false;
    changed = true;
    for (int sweep = 0; changed; sweep++) {
        if (sweep > 64)
            goto all;
        changed = false;
        bool sn = stack_need;
        for (uint32_t j = v->n; j-- > 0;) {
            uint32_t succ[2];
            if (v->info[j] & VI_LDIMM_HI)
                continue;
            uint16_t out = 0;
            int ns = successors(v, j, succ);
            for (int k = 0; k < ns; k++)
                if (succ[k] < v->n)
                    out |= v->need[succ[k]];
            uint16_t in = need_step(v, j, out, mp[j], sn, &stack_need);
            if ((in | v->need[j]) != v->need[j]) {
                v->need[j] |= in;
                changed = true;
            }
        }
        changed = changed || sn != stack_need;
    }
    free(mp);
    free(reach);
    return 0;
all:
    for (uint32_t i = 0; i < v->n; i++)
        v->need[i] = 0x7ff;
    free(mp);
    free(reach);
    return 0;
}

/* ---- memory access ------------------------------------------------------ */

static int check_reg_init(struct vf *v, uint32_t i, const struct vf_reg *r, uint32_t regno)
{
    if (r->type == VT_NOT_INIT)
        return verr(v, i, MKS_VERR_UNINIT_REG, "r%u is read before it is written; expected it set on every path to here",
                    regno);
    return 0;
}

static bool is_ptr(const struct vf_reg *r)
{
    return r->type >= VT_CTX;
}

/* Bytes [lo, lo+size) of a stack frame must all be written. */
static int stack_read_ok(struct vf *v, uint32_t i, struct vf_frame *f, int64_t lo, uint32_t size, const char *what)
{
    for (int64_t b = lo; b < lo + (int64_t)size; b++) {
        if (f->slot[b + MKS_BPF_STACK] == SL_INVALID)
            return verr(v, i, MKS_VERR_UNINIT_STACK, "%s reads %u bytes at fp%" PRId64 " but fp%" PRId64 " was never written; expected the stack initialised on every path",
                        what, size, lo, b);
    }
    return 0;
}

/* Range check of an access to a pointer's object.  For helper arguments
 * `what` names the argument.  On success *lo_p is the constant offset for
 * stack and context accesses. */
static int check_region(struct vf *v, uint32_t i, struct vf_state *st, const struct vf_reg *p, uint32_t regno,
                        int32_t off, uint32_t size, bool write, const char *what, int64_t *lo_p)
{
    switch (p->type) {
    case VT_NOT_INIT:
        return check_reg_init(v, i, p, regno);
    case VT_SCALAR:
        return verr(v, i, what ? MKS_VERR_HELPER_ARG : MKS_VERR_MEM_ACCESS,
                    "%s%sr%u is a scalar, not a pointer; expected a pointer to the stack, the context or a map value",
                    what ? what : "", what ? ": " : "", regno);
    case VT_MAP:
        return verr(v, i, what ? MKS_VERR_HELPER_ARG : MKS_VERR_MEM_ACCESS,
                    "%s%sr%u is a reference to map '%s', not its value; expected a pointer returned by mks_map_lookup",
                    what ? what : "", what ? ": " : "", regno, map_name(v, p->map));
    case VT_MAP_VALUE_OR_NULL:
        return verr(v, i, MKS_VERR_MAP_NULL,
                    "r%u may be NULL (mks_map_lookup of map '%s' at insn %u); expected a null check (if r%u == 0) before using it",
                    regno, map_name(v, p->map), p->def, regno);
    case VT_CTX: {
        if (p->s.smin != p->s.smax)
            return verr(v, i, MKS_VERR_CTX_ACCESS, "context access at a variable offset; expected a constant field offset");
        int64_t lo = p->s.smin + off;
        if (write)
            return verr(v, i, MKS_VERR_CTX_WRITE, "write to the context at offset %" PRId64 "; expected no stores: the context is read-only",
                        lo);
        if (lo < 0 || lo + size > v->ctx_size)
            return verr(v, i, MKS_VERR_CTX_ACCESS, "context read at offset %" PRId64 " size %u out of bounds; expected within the ABI v%u context (%u bytes)",
                        lo, size, v->abi, v->ctx_size);
        if (lo + size > v->ctx_fields_end)
            return verr(v, i, MKS_VERR_CTX_ACCESS, "context read at offset %" PRId64 " size %u touches reserved bytes %u..%u; expected a declared field of ABI v%u (offsets 0..%u)",
                        lo, size, v->ctx_fields_end, v->ctx_size - 1, v->abi, v->ctx_fields_end - 1);
        if (!what && lo % size != 0)
            return verr(v, i, MKS_VERR_CTX_ACCESS, "misaligned context read at offset %" PRId64 " size %u; expected a naturally aligned field access",
                        lo, size);
        *lo_p = lo;
        return 0;
    }
    case VT_STACK: {
        if (p->s.smin != p->s.smax)
            return verr(v, i, MKS_VERR_STACK_BOUNDS, "stack access at a variable offset; expected a constant offset from r10");
        int64_t lo = p->s.smin + off;
        if (lo < -MKS_BPF_STACK || lo + (int64_t)size > 0)
            return verr(v, i, MKS_VERR_STACK_BOUNDS, "stack access of %u bytes at fp%" PRId64 " outside the frame; expected within fp-%d..fp-1",
                        size, lo, MKS_BPF_STACK);
        (void)st;
        *lo_p = lo;
        return 0;
    }
    case VT_MAP_VALUE: {
        const struct mks_map_spec *m = &v->o->maps[p->map];
        int64_t lo = p->s.smin + off, hi = p->s.smax + off + (int64_t)size;
        if (lo < 0 || hi > (int64_t)m->value_size)
            return verr(v, i, MKS_VERR_MAP_BOUNDS,
                        "%s%saccess of %u bytes at offset %" PRId64 "..%" PRId64 " of map '%s' value out of bounds; expected within its %u-byte value (check or mask the index)",
                        what ? what : "", what ? ": " : "", size, p->s.smin + off, p->s.smax + off, m->name, m->value_size);
        if (write) {
            if (v->prog_type == MKS_PROG_CONTROL)
                return verr(v, i, MKS_VERR_MAP_WRITE, "write to map '%s' by a CONTROL program; expected reads only (a CONTROL program acts only through r0)",
                            m->name);
            if (strncmp(m->name, ".rodata", 7) == 0)
                return verr(v, i, MKS_VERR_MAP_WRITE, "write to read-only map '%s'; expected writes only to .data, .bss or declared maps",
                            m->name);
        }
        *lo_p = lo;
        return 0;
    }
    default:
        return verr(v, i, MKS_VERR_INTERNAL, "verifier bug: register type %u", p->type);
    }
}

static int do_load(struct vf *v, uint32_t i, struct vf_state *st)
{
    const struct mks_insn *in = &v->insns[i];
    struct vf_frame *f = cur_frame(st);
    uint8_t dst = mks_insn_dst(in), src = mks_insn_src(in);
    static const uint32_t sizes[4] = {4, 2, 1, 8};
    uint32_t size = sizes[(in->code & 0x18) >> 3];
    bool sx = (in->code & 0xe0) == MKS_BPF_MEMSX;
    struct vf_reg p = f->regs[src], out;
    int64_t lo = 0;
    int rc = check_region(v, i, st, &p, src, in->off, size, false, NULL, &lo);
    if (rc)
        return rc;
    sc_width(&out, size, sx);
    if (p.type == VT_STACK) {
        struct vf_frame *sf = &st->fr[p.frame];
        rc = stack_read_ok(v, i, sf, lo, size, "load");
        if (rc)
            return rc;
        int64_t s0 = lo + MKS_BPF_STACK;
        if (size == 8 && s0 % 8 == 0 && sf->slot[s0] == SL_SPILL) {
            out = sf->spill[s0 / 8];
        } else {
            for (int64_t b = s0; b < s0 + (int64_t)size; b++) {
                if (sf->slot[b] == SL_SPILL && is_ptr(&sf->spill[b / 8]))
                    return verr(v, i, MKS_VERR_MEM_ACCESS, "partial read of a pointer spilled at fp%" PRId64 "; expected an 8-byte read of the whole slot",
                                (b / 8) * 8 - MKS_BPF_STACK);
            }
            /* A narrow read of a spilled constant is still bounded by its
             * width; the spilled value itself is not tracked further. */
        }
    }
    f->regs[dst] = out;
    return 0;
}

/* Marks stack bytes written with scalar data, breaking spills they touch.
 * The untouched bytes of a broken spill stay readable as data if it held a
 * scalar; if it held a pointer they become unreadable, so no part of an
 * address can be read back as a number and stored in a map. */
static void stack_mark_misc(struct vf_frame *sf, int64_t lo, uint32_t size)
{
    for (int64_t b = lo + MKS_BPF_STACK; b < lo + MKS_BPF_STACK + (int64_t)size; b++) {
        int64_t s = b / 8;
        if (sf->slot[b] == SL_SPILL) {
            uint8_t rest = is_ptr(&sf->spill[s]) ? SL_INVALID : SL_MISC;
            for (int k = 0; k < 8; k++)
                sf->slot[s * 8 + k] = rest;
        }
        sf->slot[b] = SL_MISC;
    }
}

static int do_store(struct vf *v, uint32_t i, struct vf_state *st)
{
    const struct mks_insn *in = &v->insns[i];
    struct vf_frame *f = cur_frame(st);
    uint8_t dst = mks_insn_dst(in), src = mks_insn_src(in);
    static const uint32_t sizes[4] = {4, 2, 1, 8};
    uint32_t size = sizes[(in->code & 0x18) >> 3];
    bool imm = MKS_BPF_CLASS(in->code) == MKS_BPF_ST;
    struct vf_reg val, p = f->regs[dst];
    int64_t lo = 0;
    int rc;

    if (imm) {
        sc_const(&val, (uint64_t)(int64_t)in->imm);
    } else {
        rc = check_reg_init(v, i, &f->regs[src], src);
        if (rc)
            return rc;
        val = f->regs[src];
    }
    rc = check_reg_init(v, i, &p, dst);
    if (rc)
        return rc;
    rc = check_region(v, i, st, &p, dst, in->off, size, true, NULL, &lo);
    if (rc)
        return rc;
    if (p.type == VT_MAP_VALUE && is_ptr(&val))
        return verr(v, i, MKS_VERR_PTR_LEAK, "stores r%u (%s) into map '%s'; expected only scalars in maps (pointers must not leave the program)",
                    src, type_name(&val), map_name(v, p.map));
    if (p.type == VT_STACK) {
        struct vf_frame *sf = &st->fr[p.frame];
        if (val.type == VT_STACK && val.frame > p.frame)
            return verr(v, i, MKS_VERR_PTR_LEAK, "stores a pointer to frame %u's stack into frame %u; expected a callee's stack pointers to stay in the callee",
                        val.frame, p.frame);
        int64_t s0 = lo + MKS_BPF_STACK;
        if (size == 8 && s0 % 8 == 0) {
            memset(&sf->slot[s0], SL_SPILL, 8);
            sf->spill[s0 / 8] = val;
        } else {
            if (is_ptr(&val))
                return verr(v, i, MKS_VERR_MEM_ACCESS, "partial store of pointer r%u to the stack; expected an 8-byte store at an 8-aligned offset",
                            src);
            stack_mark_misc(sf, lo, size);
        }
    }
    return 0;
}

static int do_atomic(struct vf *v, uint32_t i, struct vf_state *st)
{
    const struct mks_insn *in = &v->insns[i];
    struct vf_frame *f = cur_frame(st);
    uint8_t dst = mks_insn_dst(in), src = mks_insn_src(in);
    uint32_t size = (in->code & 0x18) == MKS_BPF_DW ? 8 : 4;
    struct vf_reg p = f->regs[dst];
    int64_t lo = 0;
    int rc;

    if ((rc = check_reg_init(v, i, &f->regs[src], src)) || (rc = check_reg_init(v, i, &p, dst)))
        return rc;
    if (in->imm == MKS_BPF_CMPXCHG && (rc = check_reg_init(v, i, &f->regs[0], 0)))
        return rc;
    if (v->prog_type == MKS_PROG_CONTROL)
        return verr(v, i, MKS_VERR_MAP_WRITE, "atomic operation in a CONTROL program; expected no writes (a CONTROL program acts only through r0)");
    if (is_ptr(&f->regs[src]) || (in->imm == MKS_BPF_CMPXCHG && is_ptr(&f->regs[0])))
        return verr(v, i, MKS_VERR_PTR_LEAK, "atomic operation with pointer r%u; expected scalar operands", src);
    if (p.type == VT_CTX)
        return verr(v, i, MKS_VERR_CTX_WRITE, "atomic operation on the context; expected no stores: the context is read-only");
    rc = check_region(v, i, st, &p, dst, in->off, size, true, NULL, &lo);
    if (rc)
        return rc;
    /* every offset the pointer may have: the VM refuses a misaligned one */
    uint64_t a = p.s.tv + (uint64_t)(int64_t)in->off;
    if (lo % size != 0 || (a & (size - 1)) != 0 || (p.s.tm & (size - 1)) != 0)
        return verr(v, i, MKS_VERR_MEM_ACCESS, "misaligned atomic operation at offset %" PRId64 "..%" PRId64 " size %u; expected natural alignment for every offset (mask the index to a multiple of %u)",
                    p.s.smin + in->off, p.s.smax + in->off, size, size);
    if (p.type == VT_STACK) {
        struct vf_frame *sf = &st->fr[p.frame];
        rc = stack_read_ok(v, i, sf, lo, size, "atomic operation");
        if (rc)
            return rc;
        for (int64_t b = lo + MKS_BPF_STACK; b < lo + MKS_BPF_STACK + (int64_t)size; b++)
            if (sf->slot[b] == SL_SPILL && is_ptr(&sf->spill[b / 8]))
                return verr(v, i, MKS_VERR_MEM_ACCESS, "atomic operation on a spilled pointer; expected scalar data");
        stack_mark_misc(sf, lo, size);
    }
    struct vf_reg out;
    sc_width(&out, size, false);
    if (in->imm == MKS_BPF_CMPXCHG)
        f->regs[0] = out;
    else if (in->imm & MKS_BPF_FETCH)
        f->regs[src] = out;
    return 0;
}

/* ---- ALU ---------------------------------------------------------------- */

static const char *alu_name(uint8_t op)
{
    static const char *const n[16] = {"+", "-", "*", "/", "|", "&", "<<", ">>", "neg", "%", "^", "mov", "s>>", "endian"};
    return n[op >> 4] ? n[op >> 4] : "?";
}

static int do_alu(struct vf *v, uint32_t i, struct vf_state *st)
{
    const struct mks_insn *in = &v->insns[i];
    struct vf_frame *f = cur_frame(st);
    uint8_t op = in->code & 0xf0, dst = mks_insn_dst(in), src = mks_insn_src(in);
    bool is64 = MKS_BPF_CLASS(in->code) == MKS_BPF_ALU64, x = (in->code & MKS_BPF_X) != 0;
    struct vf_reg *d = &f->regs[dst], s;
    int rc;

    if (x) {
        if ((rc = check_reg_init(v, i, &f->regs[src], src)))
            return rc;
        s = f->regs[src];
    } else {
        sc_const(&s, is64 ? (uint64_t)(int64_t)in->imm : (uint64_t)(uint32_t)in->imm);
    }
    if (op != MKS_BPF_MOV && (rc = check_reg_init(v, i, d, dst)))
        return rc;

    if (!x && (op == MKS_BPF_DIV || op == MKS_BPF_MOD) && in->imm == 0)
        return verr(v, i, MKS_VERR_DIV_ZERO, "division by constant 0; expected a non-zero divisor");
    if (!x && (op == MKS_BPF_LSH || op == MKS_BPF_RSH || op == MKS_BPF_ARSH) &&
        (in->imm < 0 || in->imm >= (is64 ? 64 : 32)))
        return verr(v, i, MKS_VERR_DIV_ZERO, "shift by %d; expected a shift amount in 0..%d", in->imm, is64 ? 63 : 31);

    /* Moves copy any register; 32-bit moves of pointers would truncate. */
    if (op == MKS_BPF_MOV) {
        if (is_ptr(&s)) {
            if (!is64 || in->off != 0)
                return verr(v, i, MKS_VERR_PTR_ARITH, "32-bit or sign-extending move of %s r%u; expected a 64-bit move of pointers",
                            type_name(&s), src);
            *d = s;
            return 0;
        }
        if (is64 && x && in->off == 0) {
            /* a copy: narrowing one narrows both */
            if (!sc_is_const(&s)) {
                if (f->regs[src].id == 0)
                    f->regs[src].id = ++v->next_id;
                s.id = f->regs[src].id;
            }
            *d = s;
            return 0;
        }
        struct vf_reg r;
        sc_unknown(&r);
        vfs_alu(in->code, in->off, in->imm, &r.s, &s.s);
        *d = r;
        return 0;
    }

    if (is_ptr(d) || is_ptr(&s)) {
        struct vf_reg *p = is_ptr(d) ? d : &s;
        struct vf_reg *k = is_ptr(d) ? &s : d;
        if (p->type == VT_MAP_VALUE_OR_NULL)
            return verr(v, i, MKS_VERR_MAP_NULL, "arithmetic on r%u which may be NULL (mks_map_lookup at insn %u); expected a null check first",
                        is_ptr(d) ? dst : src, p->def);
        if (!is64)
            return verr(v, i, MKS_VERR_PTR_ARITH, "32-bit arithmetic on %s; expected 64-bit += or -= of a scalar", type_name(p));
        if (is_ptr(d) && is_ptr(&s))
            return verr(v, i, MKS_VERR_PTR_ARITH, "%s of two pointers; expected pointer += scalar (the difference of two addresses is not revealed)",
                        alu_name(op));
        if (op != MKS_BPF_ADD && !(op == MKS_BPF_SUB && is_ptr(d)))
            return verr(v, i, MKS_VERR_PTR_ARITH, "'%s' on %s; expected only += or -= of a scalar", alu_name(op),
                        type_name(p));
        if (p->type == VT_MAP)
            return verr(v, i, MKS_VERR_PTR_ARITH, "arithmetic on a map reference; expected the map reference passed unchanged to a helper");
        if (k->s.smin < -VF_MAX_PTR_OFF || k->s.smax > VF_MAX_PTR_OFF)
            return verr(v, i, MKS_VERR_PTR_ARITH, "adds scalar with range [%" PRId64 ", %" PRId64 "] to %s; expected a bounded offset (check or mask it first)",
                        k->s.smin, k->s.smax, type_name(p));
        /* the offset is a scalar of its own: its bits tell the alignment */
        struct vf_reg r = *p;
        vfs_alu(MKS_BPF_ALU64 | MKS_BPF_X | op, 0, 0, &r.s, &k->s);
        if (r.s.smin < -VF_MAX_PTR_OFF || r.s.smax > VF_MAX_PTR_OFF)
            return verr(v, i, MKS_VERR_PTR_ARITH, "pointer offset range [%" PRId64 ", %" PRId64 "] too large; expected a bounded offset",
                        r.s.smin, r.s.smax);
        r.id = 0;
        *d = r;
        return 0;
    }

    d->id = 0;
    vfs_alu(in->code, in->off, in->imm, &d->s, &s.s);
    return 0;
}

/* ---- helpers ------------------------------------------------------------ */

static int arg_map(struct vf *v, uint32_t i, struct vf_frame *f, uint32_t regno, const char *helper)
{
    struct vf_reg *r = &f->regs[regno];
    int rc = check_reg_init(v, i, r, regno);
    if (rc)
        return rc;
    if (r->type != VT_MAP)
        return verr(v, i, MKS_VERR_HELPER_ARG, "%s: r%u is %s; expected a map reference (&map)", helper, regno,
                    type_name(r));
    return 0;
}

static int arg_scalar(struct vf *v, uint32_t i, struct vf_frame *f, uint32_t regno, const char *helper)
{
    struct vf_reg *r = &f->regs[regno];
    int rc = check_reg_init(v, i, r, regno);
    if (rc)
        return rc;
    if (r->type != VT_SCALAR)
        return verr(v, i, MKS_VERR_HELPER_ARG, "%s: r%u is %s; expected a scalar", helper, regno, type_name(r));
    return 0;
}

/* A pointer to `size` readable, initialised bytes. */
static int arg_mem(struct vf *v, uint32_t i, struct vf_state *st, uint32_t regno, uint32_t size, const char *helper,
                   const char *what)
{
    struct vf_frame *f = cur_frame(st);
    struct vf_reg *r = &f->regs[regno];
    char buf[96];
    int64_t lo = 0;
    int rc = check_reg_init(v, i, r, regno);
    if (rc)
        return rc;
    snprintf(buf, sizeof(buf), "%s %s r%u", helper, what, regno);
    if (size == 0)
        return 0;
    rc = check_region(v, i, st, r, regno, 0, size, false, buf, &lo);
    if (rc)
        return rc;
    if (r->type == VT_STACK) {
        struct vf_frame *sf = &st->fr[r->frame];
        rc = stack_read_ok(v, i, sf, lo, size, buf);
        if (rc)
            return rc;
        for (int64_t b = lo + MKS_BPF_STACK; b < lo + MKS_BPF_STACK + (int64_t)size; b++)
            if (sf->slot[b] == SL_SPILL && is_ptr(&sf->spill[b / 8]))
                return verr(v, i, MKS_VERR_PTR_LEAK, "%s: memory at fp%" PRId64 " holds a spilled pointer; expected plain data",
                            buf, b - MKS_BPF_STACK);
    }
    return 0;
}

static int do_helper(struct vf *v, uint32_t i, struct vf_state *st)
{
    const struct mks_insn *in = &v->insns[i];
    struct vf_frame *f = cur_frame(st);
    int32_t id = in->imm;
    const char *name = mks_helper_name(id);
    const struct mks_map_spec *m = NULL;
    struct vf_reg r0;
    int rc;

    if (!name)
        return verr(v, i, MKS_VERR_HELPER, "unknown helper %d; expected one of mkscope's helpers (mkscope.bpf.h)", id);
    if (id < 0 || id >= 256 || !v->helper_ok[id]) {
        if (v->prog_type == MKS_PROG_CONTROL)
            return verr(v, i, MKS_VERR_HELPER, "%s (helper %d) is not allowed in a CONTROL program; expected only mks_map_lookup, mks_time_ns, mks_worker_id, mks_sm_id, mks_rank",
                        name, id);
        return verr(v, i, MKS_VERR_HELPER, "%s (helper %d) is not in this program's allowed helper set; expected an allowed helper",
                    name, id);
    }
    sc_unknown(&r0);
    switch (id) {
    case MKS_HELPER_MAP_LOOKUP:
    case MKS_HELPER_MAP_UPDATE:
    case MKS_HELPER_MAP_DELETE:
        if ((rc = arg_map(v, i, f, 1, name)))
            return rc;
        m = &v->o->maps[f->regs[1].map];
        if (m->type == MKS_MAP_RINGBUF)
            return verr(v, i, MKS_VERR_MAP_REF, "%s on ring buffer map '%s'; expected mks_ringbuf_output for ring buffers", name,
                        m->name);
        if (id != MKS_HELPER_MAP_LOOKUP && strncmp(m->name, ".rodata", 7) == 0)
            return verr(v, i, MKS_VERR_MAP_WRITE, "%s on read-only map '%s'; expected a writable map", name, m->name);
        if ((rc = arg_mem(v, i, st, 2, m->key_size, name, "key")))
            return rc;
        if (id == MKS_HELPER_MAP_UPDATE) {
            if ((rc = arg_mem(v, i, st, 3, m->value_size, name, "value")) || (rc = arg_scalar(v, i, f, 4, name)))
                return rc;
        }
        if (id == MKS_HELPER_MAP_LOOKUP) {
            memset(&r0, 0, sizeof(r0));
            r0.type = VT_MAP_VALUE_OR_NULL;
            r0.map = f->regs[1].map;
            r0.id = ++v->next_id;
            r0.def = i;
        }
        break;
    case MKS_HELPER_TIME_NS:
        break;
    case MKS_HELPER_WORKER_ID:
    case MKS_HELPER_SM_ID:
    case MKS_HELPER_RANK:
        sc_urange(&r0, 0, UINT32_MAX);
        break;
    case MKS_HELPER_HIST_ADD:
        if ((rc = arg_map(v, i, f, 1, name)))
            return rc;
        m = &v->o->maps[f->regs[1].map];
        if (m->type != MKS_MAP_HIST)
            return verr(v, i, MKS_VERR_MAP_REF, "mks_hist_add on map '%s' of type %s; expected an MKS_MAP_HIST map", m->name,
                        map_type_name(m->type));
        if ((rc = arg_mem(v, i, st, 2, m->key_size, name, "key")) || (rc = arg_scalar(v, i, f, 3, name)))
            return rc;
        /* 0, or a negative errno (-E2BIG: key past max_entries) */
        r0.s.smin = -4095;
        r0.s.smax = 0;
        if (!vfs_sync(&r0.s))
            sc_unknown(&r0);
        break;
    case MKS_HELPER_RINGBUF_OUTPUT: {
        if ((rc = arg_map(v, i, f, 1, name)))
            return rc;
        m = &v->o->maps[f->regs[1].map];
        if (m->type != MKS_MAP_RINGBUF)
            return verr(v, i, MKS_VERR_MAP_REF, "mks_ringbuf_output on map '%s' of type %s; expected an MKS_MAP_RINGBUF map",
                        m->name, map_type_name(m->type));
        if ((rc = arg_scalar(v, i, f, 3, name)) || (rc = arg_scalar(v, i, f, 4, name)))
            return rc;
        struct vf_reg *sz = &f->regs[3];
        if (sz->s.umax > m->max_entries / 2 || sz->s.umax > (1u << 20))
            return verr(v, i, MKS_VERR_HELPER_ARG, "mks_ringbuf_output size r3 may be up to %" PRIu64 "; expected a bounded size of at most %u (half the ring)",
                        sz->s.umax, m->max_entries / 2);
        if (sz->s.umin == 0)
            return verr(v, i, MKS_VERR_HELPER_ARG, "mks_ringbuf_output size r3 may be 0; expected a size of at least 1 (the runtime drops empty records)");
        if ((rc = arg_mem(v, i, st, 2, (uint32_t)sz->s.umax, name, "data")))
            return rc;
        break;
    }
    default:
        return verr(v, i, MKS_VERR_INTERNAL, "verifier bug: helper %d has no signature", id);
    }
    for (uint32_t r = 1; r <= 5; r++)
        memset(&f->regs[r], 0, sizeof(f->regs[r]));
    f->regs[0] = r0;
    return 0;
}

/* ---- branches ----------------------------------------------------------- */

/* Copy narrowed bounds to every register linked to `r` by id. */
static void propagate(struct vf_state *st, const struct vf_reg *r)
{
    if (r->id == 0 || r->type != VT_SCALAR)
        return;
    FOR_EACH_REG(st, q, {
        if (q->type == VT_SCALAR && q->id == r->id)
            q->s = r->s;
    });
}

/* A conditional jump on a pointer would tell the program something about
 * the address (compare it with a constant, shift, compare again: the
 * address bit by bit).  As Linux does for unprivileged programs, a pointer
 * may only be tested == 0 or != 0 in 64 bits: the null check of a lookup's
 * result, or a test whose answer the verifier knows (a context, stack or
 * map value pointer is never NULL). */
static int check_ptr_cmp(struct vf *v, uint32_t i, const struct vf_frame *f)
{
    const struct mks_insn *in = &v->insns[i];
    uint8_t op = in->code & 0xf0, dst = mks_insn_dst(in), src = mks_insn_src(in);
    bool is32 = MKS_BPF_CLASS(in->code) == MKS_BPF_JMP32, x = (in->code & MKS_BPF_X) != 0;
    const struct vf_reg *a = &f->regs[dst], *b = x ? &f->regs[src] : NULL;

    if (b && is_ptr(b))
        return verr(v, i, MKS_VERR_PTR_CMP, "r%u is %s; expected only scalars compared with registers (a branch on a pointer reveals its address)",
                    src, type_name(b));
    if (!is_ptr(a))
        return 0;
    bool zero = b ? sc_is_const(b) && b->s.umin == 0 : in->imm == 0;
    if (!is32 && (op == MKS_BPF_JEQ || op == MKS_BPF_JNE) && zero)
        return 0;
    return verr(v, i, MKS_VERR_PTR_CMP, "r%u is %s; expected a pointer only in a 64-bit == 0 or != 0 test (a branch on a pointer reveals its address)",
                dst, type_name(a));
}

/* Apply "condition is `taken`" to the state; false when infeasible.  The
 * operands passed check_ptr_cmp(). */
static bool branch_apply(struct vf_state *st, const struct mks_insn *in, bool taken)
{
    struct vf_frame *f = cur_frame(st);
    uint8_t op = in->code & 0xf0, dst = mks_insn_dst(in), src = mks_insn_src(in);
    bool x = (in->code & MKS_BPF_X) != 0;
    struct vf_reg *a = &f->regs[dst], *b = x ? &f->regs[src] : NULL;

    if (is_ptr(a)) {
        bool is_null = (op == MKS_BPF_JEQ) == taken;
        if (a->type != VT_MAP_VALUE_OR_NULL)
            return !is_null; /* never NULL: the answer is known */
        /* Null check of a looked-up map value. */
        uint32_t id = a->id;
        FOR_EACH_REG(st, q, {
            if (q->type == VT_MAP_VALUE_OR_NULL && q->id == id) {
                if (is_null)
                    sc_const(q, 0);
                else
                    q->type = VT_MAP_VALUE;
            }
        });
        return true;
    }
    if (a->type != VT_SCALAR || (b && b->type != VT_SCALAR))
        return true;
    struct vf_scalar na = a->s, nb = b ? b->s : a->s;
    if (!vfs_branch(in->code, in->imm, taken, &na, b ? &nb : NULL))
        return false;
    a->s = na;
    propagate(st, a);
    if (b) {
        b->s = nb;
        propagate(st, b);
    }
    return true;
}

/* ---- pruning ------------------------------------------------------------ */


static bool idmap_ok(struct idmap *m, uint32_t t, uint32_t s)
{
    for (uint32_t k = 0; k < m->n; k++) {
        if (m->t[k] == t || m->s[k] == s)
            return m->t[k] == t && m->s[k] == s;
    }
    if (m->n >= sizeof(m->t) / sizeof(m->t[0]))
        return false;
    m->t[m->n] = t;
    m->s[m->n++] = s;
    return true;
}

/* Kept register t covers new register s: every value s can hold, t could. */
static bool reg_covers(const struct vf_reg *t, const struct vf_reg *s, struct idmap *m)
{
    if (t->type == VT_NOT_INIT)
        return true;
    if (t->type != s->type)
        return false;
    switch (t->type) {
    case VT_SCALAR:
        if (t->id && !(s->id && idmap_ok(m, t->id, s->id)))
            return false;
        return vfs_covers(&t->s, &s->s);
    case VT_MAP_VALUE_OR_NULL:
        if (!idmap_ok(m, t->id, s->id))
            return false;
        /* fallthrough */
    case VT_CTX:
    case VT_STACK:
    case VT_MAP:
    case VT_MAP_VALUE:
        return t->map == s->map && t->frame == s->frame && vfs_covers(&t->s, &s->s);
    default:
        return false;
    }
}

/* need: registers of the current frame whose scalar ranges matter here
 * (see the precision pass); the others need only agree in kind. */
static bool state_covers(struct idmap *mp, const struct vf_state *t, const struct vf_state *s, uint16_t need)
{
    if (t->nframes != s->nframes)
        return false;
    mp->n = 0;
    for (uint32_t f = 0; f < t->nframes; f++) {
        const struct vf_frame *tf = &t->fr[f], *sf = &s->fr[f];
        if (tf->callsite != sf->callsite)
            return false;
        for (uint32_t r = 0; r < MKS_BPF_NREGS; r++) {
            if (f + 1 == t->nframes && !(need & RBIT(r)) && tf->regs[r].type == VT_SCALAR &&
                sf->regs[r].type == VT_SCALAR)
                continue;
            if (!reg_covers(&tf->regs[r], &sf->regs[r], mp))
                return false;
        }
        for (uint32_t b = 0; b < MKS_BPF_STACK; b++) {
            if (b % 8 == 0) {
                /* fast path over whole 8-byte slots: unwritten, or the
                 * same scalar data in both */
                uint64_t tw, sw;
                memcpy(&tw, &tf->slot[b], 8);
                memcpy(&sw, &sf->slot[b], 8);
                if (tw == 0 || (tw == sw && tw == 0x0101010101010101ull * SL_MISC)) {
                    b += 7;
                    continue;
                }
            }
            uint8_t ts = tf->slot[b], ss = sf->slot[b];
            if (ts == SL_INVALID)
                continue;
            if (ts == SL_MISC) {
                if (ss == SL_MISC || (ss == SL_SPILL && sf->spill[b / 8].type == VT_SCALAR))
                    continue;
                return false;
            }
            if (ss != SL_SPILL)
                return false;
            if (b % 8 == 0 && !reg_covers(&tf->spill[b / 8], &sf->spill[b / 8], mp))
                return false;
        }
    }
    return true;
}

/* Widening: s is joined with t (ranges widened to cover both) when the two
 * agree in kind everywhere: the same registers initialised, pointers to the
 * same objects, the same stack bytes written.  Otherwise they are kept
 * apart. */
static bool reg_mergeable(const struct vf_reg *s, const struct vf_reg *t)
{
    if (s->type != t->type)
        return false;
    if (s->type == VT_MAP_VALUE_OR_NULL && s->id != t->id)
        return false;
    return s->type == VT_SCALAR || s->type == VT_NOT_INIT || (s->map == t->map && s->frame == t->frame);
}

static void reg_merge(struct vf_reg *s, const struct vf_reg *t)
{
    if (s->type == VT_NOT_INIT)
        return;
    if (s->type == VT_SCALAR) {
        vfs_join(&s->s, &t->s);
        if (s->id != t->id)
            s->id = 0;
        return;
    }
    vfs_join(&s->s, &t->s); /* a pointer's offset */
}

static bool state_mergeable(const struct vf_state *s, const struct vf_state *t)
{
    if (t->nframes != s->nframes)
        return false;
    for (uint32_t f = 0; f < t->nframes; f++) {
        const struct vf_frame *tf = &t->fr[f], *sf = &s->fr[f];
        if (tf->callsite != sf->callsite)
            return false;
        for (uint32_t r = 0; r < MKS_BPF_NREGS; r++)
            if (!reg_mergeable(&sf->regs[r], &tf->regs[r]))
                return false;
        for (uint32_t q = 0; q < MKS_BPF_STACK / 8; q++) {
            const uint8_t *ts = &tf->slot[q * 8], *ss = &sf->slot[q * 8];
            if (memcmp(ts, ss, 8) == 0) {
                if (ts[0] == SL_SPILL && !reg_mergeable(&sf->spill[q], &tf->spill[q]))
                    return false;
                continue;
            }
            for (int k = 0; k < 8; k++) {
                bool tsc = ts[k] == SL_MISC || (ts[k] == SL_SPILL && tf->spill[q].type == VT_SCALAR);
                bool ssc = ss[k] == SL_MISC || (ss[k] == SL_SPILL && sf->spill[q].type == VT_SCALAR);
                if (ts[k] != ss[k] && !(tsc && ssc))
                    return false;
            }
        }
    }
    return true;
}

static void state_merge(struct vf_state *s, const struct vf_state *t)
{
    for (uint32_t f = 0; f < t->nframes; f++) {
        const struct vf_frame *tf = &t->fr[f];
        struct vf_frame *sf = &s->fr[f];
        for (uint32_t r = 0; r < MKS_BPF_NREGS; r++)
            reg_merge(&sf->regs[r], &tf->regs[r]);
        for (uint32_t q = 0; q < MKS_BPF_STACK / 8; q++) {
            uint8_t *ss = &sf->slot[q * 8];
            const uint8_t *ts = &tf->slot[q * 8];
            if (ss[0] == SL_SPILL && ts[0] == SL_SPILL) {
                reg_merge(&sf->spill[q], &tf->spill[q]);
            } else if (memcmp(ss, ts, 8) != 0) {
                /* scalar data in one, a spilled scalar in the other */
                for (int k = 0; k < 8; k++)
                    ss[k] = SL_MISC;
            }
        }
    }
}

/* ---- interpretation ----------------------------------------------------- */

static int push_state(struct vf *v, const struct vf_state *st, uint32_t insn)
{
    if (v->stack_len == v->stack_cap) {
        uint32_t ncap = v->stack_cap ? v->stack_cap * 2 : 64;
        struct vf_state **ns = realloc(v->stack, ncap * sizeof(*ns));
        if (!ns)
            return -ENOMEM;
        v->stack = ns;
        v->stack_cap = ncap;
    }
    struct vf_state *c = st_dup(v, st);
    if (!c)
        return st_nomem(v, insn);
    c->insn = insn;
    v->stack[v->stack_len++] = c;
    return 0;
}

/* Returns 1 when the path ends (exit of the entry function or pruned),
 * 0 to continue at st->insn, negative on rejection. */
static int step(struct vf *v, struct vf_state *st)
{
    uint32_t i = st->insn;
    const struct mks_insn *in = &v->insns[i];
    struct vf_frame *f = cur_frame(st);
    uint8_t cls = MKS_BPF_CLASS(in->code), op = in->code & 0xf0;
    int rc;

    if (++v->steps > VF_MAX_STEPS)
        return verr(v, i, MKS_VERR_COMPLEXITY, "program too complex: %u instructions processed; expected fewer branches that multiply paths",
                    VF_MAX_STEPS);
    if (st->steps >= VF_MAX_PATH) {
        if (st->last_back >= 0) {
            uint32_t b = (uint32_t)st->last_back;
            return verr(v, b, MKS_VERR_LOOP, "loop back to insn %" PRId64 " still running after %u instructions on some path; expected a bound the verifier can see (compare the counter with a constant or a masked value)",
                        jump_target(&v->insns[b], b), VF_MAX_PATH);
        }
        return verr(v, i, MKS_VERR_LOOP, "a path runs more than %u instructions; expected at most that many per run",
                    VF_MAX_PATH);
    }

    if (v->info[i] & VI_JOIN) {
        /* A complete kept state that covers this one: the path ends here,
         * as long as the longest way on from the kept state. */
        for (struct vf_kept *k = v->kept[i]; k; k = k->next) {
            if (k->complete && (v->compared += st->nframes) > VF_MAX_COMPARED_FRAMES)
                return verr(v, i, MKS_VERR_COMPLEXITY, "program too complex: %u call frames compared to prune paths; expected fewer branches that multiply paths",
                            VF_MAX_COMPARED_FRAMES);
            if (k->complete && state_covers(&v->idmap, k->st, st, v->need[i])) {
                v->path_has_len = k->has_path;
                v->path_len = st->steps + k->remaining;
                return 1;
            }
        }
        /* Many distinct states here: widen the new one over a complete
         * kept one and explore the union, which covers both.  Not inside
         * loops: there the kept states are earlier iterations, and joining
         * the counter's values would lose the loop's bound. */
        if (v->n_kept[i] >= VF_WIDEN_AFTER && !(v->info[i] & VI_INLOOP)) {
            for (struct vf_kept *k = v->kept[i]; k; k = k->next) {
                if (k->complete && (v->compared += st->nframes) <= VF_MAX_COMPARED_FRAMES &&
                    state_mergeable(st, k->st)) {
                    state_merge(st, k->st);
                    break;
                }
            }
        }
        if (v->n_kept[i] < VF_MAX_KEPT_PER_INSN) {
            struct vf_kept *k = calloc(1, sizeof(*k));
            struct vf_state *c = k ? st_dup(v, st) : NULL;
            if (!k || !c) {
                free(k);
                return st_nomem(v, i);
            }
            k->st = c;
            k->next = v->kept[i];
            v->kept[i] = k;
            k->all_next = v->all_kept;
            v->all_kept = k;
            /* this path now counts against k instead of its old parent */
            k->parent = st->parent;
            k->branches = 1;
            k->depth = st->steps;
            st->parent = k;
            v->n_kept[i]++;
            v->states++;
        }
    }
    st->steps++;

    switch (cls) {
    case MKS_BPF_ALU:
    case MKS_BPF_ALU64:
        rc = do_alu(v, i, st);
        st->insn = i + 1;
        return rc;
    case MKS_BPF_LDX:
        rc = do_load(v, i, st);
        st->insn = i + 1;
        return rc;
    case MKS_BPF_ST:
        rc = do_store(v, i, st);
        st->insn = i + 1;
        return rc;
    case MKS_BPF_STX:
        rc = (in->code & 0xe0) == MKS_BPF_ATOMIC ? do_atomic(v, i, st) : do_store(v, i, st);
        st->insn = i + 1;
        return rc;
    case MKS_BPF_LD: {
        uint8_t dst = mks_insn_dst(in), src = mks_insn_src(in);
        struct vf_reg *d = &f->regs[dst];
        if (src == 0) {
            sc_const(d, (uint64_t)(uint32_t)in->imm | ((uint64_t)(uint32_t)v->insns[i + 1].imm << 32));
        } else {
            if (in->imm < 0 || (uint32_t)in->imm >= v->o->n_maps)
                return verr(v, i, MKS_VERR_MAP_REF, "reference to map %d; expected a map index below %u (the program's maps)",
                            in->imm, v->o->n_maps);
            memset(d, 0, sizeof(*d));
            d->map = (uint16_t)in->imm;
            if (src == MKS_PSEUDO_MAP_IDX) {
                d->type = VT_MAP;
            } else {
                const struct mks_map_spec *m = &v->o->maps[in->imm];
                int32_t off = v->insns[i + 1].imm;
                if (m->type != MKS_MAP_ARRAY || m->max_entries != 1)
                    return verr(v, i, MKS_VERR_MAP_REF, "direct value address of map '%s' (type %s, %u entries); expected a global-data map (ARRAY of one entry)",
                                m->name, map_type_name(m->type), m->max_entries);
                if (off < 0 || (uint32_t)off >= m->value_size)
                    return verr(v, i, MKS_VERR_MAP_BOUNDS, "offset %d into map '%s' value out of bounds; expected within its %u-byte value",
                                off, m->name, m->value_size);
                d->type = VT_MAP_VALUE;
                vfs_const(&d->s, (uint64_t)(int64_t)off);
            }
        }
        st->insn = i + 2;
        return 0;
    }
    case MKS_BPF_JMP:
    case MKS_BPF_JMP32:
        break;
    default:
        return verr(v, i, MKS_VERR_INTERNAL, "verifier bug: class %u", cls);
    }

    if (op == MKS_BPF_CALL) {
        if (!is_local_call(in)) {
            rc = do_helper(v, i, st);
            st->insn = i + 1;
            return rc;
        }
        if (st->nframes >= MKS_BPF_MAX_FRAMES)
            return verr(v, i, MKS_VERR_CALL_DEPTH, "local call would nest %u frames; expected at most %u", st->nframes + 1,
                        MKS_BPF_MAX_FRAMES);
        struct vf_frame *nf = &st->fr[st->nframes];
        frame_init(nf, st->nframes, (int32_t)i);
        for (uint32_t r = 1; r <= 5; r++)
            nf->regs[r] = f->regs[r];
        st->nframes++;
        st->insn = i + 1 + (uint32_t)in->imm;
        return 0;
    }
    if (op == MKS_BPF_EXIT) {
        struct vf_reg *r0 = &f->regs[0];
        if (r0->type == VT_NOT_INIT)
            return verr(v, i, MKS_VERR_R0_EXIT, "r0 is not set at %s; expected the return value in r0 on every path",
                        st->nframes > 1 ? "subprogram exit" : "exit");
        if (st->nframes > 1) {
            if (r0->type == VT_STACK && r0->frame == st->nframes - 1)
                return verr(v, i, MKS_VERR_PTR_LEAK, "subprogram returns a pointer to its own stack; expected a value or a caller's pointer");
            struct vf_reg ret = *r0;
            uint32_t callsite = (uint32_t)f->callsite;
            st->nframes--;
            f = cur_frame(st);
            for (uint32_t r = 1; r <= 5; r++)
                memset(&f->regs[r], 0, sizeof(f->regs[r]));
            f->regs[0] = ret;
            st->insn = callsite + 1;
            return 0;
        }
        if (r0->type != VT_SCALAR)
            return verr(v, i, MKS_VERR_PTR_LEAK, "r0 is %s at exit; expected a scalar (pointers must not leave the program)",
                        type_name(r0));
        if (v->prog_type == MKS_PROG_CONTROL && (r0->s.smin < 0 || r0->s.smax > MKS_PRIO_HINT_MAX))
            return verr(v, i, MKS_VERR_R0_EXIT, "CONTROL program returns r0 in [%" PRId64 ", %" PRId64 "]; expected a priority hint in [0, %d] (clamp or mask it)",
                        r0->s.smin, r0->s.smax, MKS_PRIO_HINT_MAX);
        v->path_has_len = true;
        v->path_len = st->steps;
        return 1;
    }
    int64_t t = jump_target(in, i);
    if (op == MKS_BPF_JA) {
        if (t <= (int64_t)i)
            st->last_back = i;
        st->insn = (uint32_t)t;
        return 0;
    }
    uint8_t dst = mks_insn_dst(in), src = mks_insn_src(in);
    if ((rc = check_reg_init(v, i, &f->regs[dst], dst)))
        return rc;
    if ((in->code & MKS_BPF_X) && (rc = check_reg_init(v, i, &f->regs[src], src)))
        return rc;
    if ((rc = check_ptr_cmp(v, i, f)))
        return rc;

    struct vf_state *other = st_dup(v, st);
    if (!other)
        return st_nomem(v, i);
    bool take = branch_apply(other, in, true);
    bool fall = branch_apply(st, in, false);
    rc = 0;
    if (take && t <= (int64_t)i)
        other->last_back = i;
    if (take && fall) {
        other->insn = (uint32_t)t;
        if (v->stack_len == v->stack_cap) {
            uint32_t ncap = v->stack_cap ? v->stack_cap * 2 : 64;
            struct vf_state **ns = realloc(v->stack, ncap * sizeof(*ns));
            if (!ns) {
                st_free(v, other);
                return -ENOMEM;
            }
            v->stack = ns;
            v->stack_cap = ncap;
        }
        v->stack[v->stack_len++] = other;
        if (st->parent)
            st->parent->branches++;
        st->insn = i + 1;
        return 0;
    }
    if (take) {
        memcpy(st, other, st_size(other->nframes));
        st->insn = (uint32_t)t;
    } else if (fall) {
        st->insn = i + 1;
    } else {
        rc = 1; /* neither side feasible: the state itself was impossible */
        v->path_has_len = false;
    }
    st_free(v, other);
    return rc;
}

/* A path ended: its length counts for every kept state on it, and kept
 * states with no path left below them are complete. */
static void path_done(struct vf *v, const struct vf_state *st)
{
    if (v->path_has_len) {
        if (v->path_len > v->max_cost)
            v->max_cost = v->path_len;
        for (struct vf_kept *k = st->parent; k; k = k->parent) {
            if (!k->has_path || v->path_len - k->depth > k->remaining)
                k->remaining = v->path_len - k->depth;
            k->has_path = true;
        }
    }
    for (struct vf_kept *k = st->parent; k && --k->branches == 0; k = k->parent)
        k->complete = true;
}

static int explore(struct vf *v)
{
    struct vf_state *st = malloc(st_size(MKS_BPF_MAX_FRAMES));
    int rc = 0;

    if (!st)
        return -ENOMEM;
    memset(st, 0, st_size(1));
    st->nframes = 1; /* steps 0, no parent */
    st->last_back = -1;
    frame_init(&st->fr[0], 0, -1);
    st->fr[0].regs[1].type = VT_CTX;
    rc = push_state(v, st, 0);
    while (rc == 0 && v->stack_len > 0) {
        struct vf_state *cur = v->stack[--v->stack_len];
        memcpy(st, cur, st_size(cur->nframes));
        st_free(v, cur);
        v->path_has_len = false;
        while ((rc = step(v, st)) == 0)
            ;
        if (rc == 1) {
            path_done(v, st);
            rc = 0;
        }
    }
    free(st);
    return rc;
}

/* ---- entry -------------------------------------------------------------- */

int mks_verify(const struct mks_insn *insns, uint32_t n_insns, const struct mks_verify_opts *opts,
               struct mks_verify_result *res, char *log, size_t log_len)
{
    struct vf v;
    int rc;

    memset(&v, 0, sizeof(v));
    v.insns = insns;
    v.n = n_insns;
    v.o = opts;
    v.log = log;
    v.log_len = log_len;
    if (log && log_len)
        log[0] = '\0';
    if (!opts || opts->sz < offsetof(struct mks_verify_opts, n_allowed_helpers) + sizeof(uint32_t) ||
        (n_insns && !insns) || (opts->n_maps && !opts->maps) || opts->n_maps > UINT16_MAX)
        return verr(&v, UINT32_MAX, EINVAL, "mks_verify: invalid arguments");
    if (opts->sz > sizeof(*opts)) {
        for (size_t b = sizeof(*opts); b < opts->sz; b++)
            if (((const uint8_t *)opts)[b] != 0)
                return verr(&v, UINT32_MAX, EINVAL, "mks_verify: options struct larger than this library knows, with non-zero tail");
    }
    v.prog_type = opts->prog_type;
    v.abi = opts->abi_version;
    if (v.prog_type != MKS_PROG_OBSERVE && v.prog_type != MKS_PROG_CONTROL)
        return verr(&v, UINT32_MAX, MKS_VERR_ABI, "program type %u; expected OBSERVE (1) or CONTROL (2)", v.prog_type);
    v.ctx_size = mks_hook_ctx_size(v.abi);
    if (v.ctx_size == 0)
        return verr(&v, UINT32_MAX, MKS_VERR_ABI, "program declares hook ABI v%u; expected a version this runtime knows (1..%u)",
                    v.abi, MKS_HOOK_ABI_VERSION);
    v.ctx_fields_end = VF_CTX_V1_FIELDS_END;
    if (opts->hook < -1 || opts->hook >= (int32_t)MKS_EV_COUNT)
        return verr(&v, UINT32_MAX, MKS_VERR_HOOK, "hook %d; expected an event 0..%d or -1", opts->hook, MKS_EV_COUNT - 1);
    if (v.prog_type == MKS_PROG_CONTROL && opts->hook != -1 && opts->hook != MKS_EV_TASK_READY &&
        opts->hook != MKS_EV_TASK_ASSIGN)
        return verr(&v, UINT32_MAX, MKS_VERR_HOOK, "CONTROL program at hook %s; expected task_ready or task_assign (the only places a priority hint means something)",
                    mks_hook_event_name((uint32_t)opts->hook));
    if (n_insns == 0)
        return verr(&v, UINT32_MAX, MKS_VERR_EMPTY, "program has no instructions; expected at least an exit");
    if (n_insns > MKS_BPF_MAX_INSNS)
        return verr(&v, UINT32_MAX, MKS_VERR_TOO_LONG, "program has %u instructions; expected at most %u", n_insns,
                    MKS_BPF_MAX_INSNS);
    for (uint32_t m = 0; m < opts->n_maps; m++) {
        uint32_t t = opts->maps[m].type;
        if (t < MKS_MAP_ARRAY || t > MKS_MAP_RINGBUF)
            return verr(&v, UINT32_MAX, MKS_VERR_MAP_REF, "map %u '%s' has type %#x; expected an mkscope map type", m,
                        opts->maps[m].name, t);
    }

    /* Helper set: the type's default, narrowed by the caller's list. */
    static const int32_t control_helpers[] = {MKS_HELPER_MAP_LOOKUP, MKS_HELPER_TIME_NS, MKS_HELPER_WORKER_ID,
                                              MKS_HELPER_SM_ID, MKS_HELPER_RANK};
    static const int32_t observe_helpers[] = {
        MKS_HELPER_MAP_LOOKUP, MKS_HELPER_MAP_UPDATE, MKS_HELPER_MAP_DELETE, MKS_HELPER_TIME_NS, MKS_HELPER_WORKER_ID,
        MKS_HELPER_SM_ID,      MKS_HELPER_RANK,       MKS_HELPER_HIST_ADD,   MKS_HELPER_RINGBUF_OUTPUT};
    const int32_t *hs = v.prog_type == MKS_PROG_CONTROL ? control_helpers : observe_helpers;
    size_t nh = v.prog_type == MKS_PROG_CONTROL ? sizeof(control_helpers) / sizeof(*hs)
                                                 : sizeof(observe_helpers) / sizeof(*hs);
    for (size_t k = 0; k < nh; k++) {
        bool ok = opts->allowed_helpers == NULL;
        for (uint32_t q = 0; !ok && q < opts->n_allowed_helpers; q++)
            ok = opts->allowed_helpers[q] == (uint64_t)hs[k];
        v.helper_ok[hs[k]] = ok;
    }

    v.info = calloc(n_insns, 1);
    v.func_of = calloc(n_insns, sizeof(*v.func_of));
    v.funcs = calloc(n_insns + 1, sizeof(*v.funcs));
    v.cost = calloc(n_insns + 2, sizeof(*v.cost));
    v.kept = calloc(n_insns, sizeof(*v.kept));
    v.n_kept = calloc(n_insns, sizeof(*v.n_kept));
    v.need = calloc(n_insns, sizeof(*v.need));
    if (!v.info || !v.func_of || !v.funcs || !v.cost || !v.kept || !v.n_kept || !v.need) {
        rc = verr(&v, UINT32_MAX, ENOMEM, "mks_verify: out of memory");
        goto out;
    }
    rc = static_pass(&v);
    if (rc == 0)
        rc = precision_pass(&v);
    if (rc == 0)
        rc = explore(&v);
    if (rc == -ENOMEM && log && log_len)
        snprintf(log, log_len, "mks_verify: out of memory");
    /* Without loops the cost is the graph's longest path; every explored
     * path must fit in it, or the bookkeeping is wrong. */
    if (rc == 0 && !v.has_loops && v.max_cost > v.cost[0])
        rc = verr(&v, UINT32_MAX, MKS_VERR_INTERNAL, "verifier bug: explored path of %" PRIu64 " instructions, graph says at most %" PRIu64,
                  v.max_cost, v.cost[0]);
    if (rc == 0 && res) {
        res->cost = v.has_loops ? v.max_cost : v.cost[0];
        res->n_insns = n_insns;
        res->states = v.states;
    }
out:
    for (struct vf_kept *k = v.all_kept, *nx; k; k = nx) {
        nx = k->all_next;
        free(k->st);
        free(k);
    }
    for (uint32_t s = 0; s < v.stack_len; s++)
        free(v.stack[s]);
    free(v.stack);
    free(v.info);
    free(v.func_of);
    free(v.funcs);
    free(v.cost);
    free(v.kept);
    free(v.n_kept);
    free(v.need);
    return rc;
}

/*
 * Predicates over one hook context: evaluated in C, and compiled to an eBPF
 * filter program for device-side filtering during escalation.
 *
 * Code generation is short-circuit, by jump targets: gen(p, T, F) emits code
 * that jumps to label T when p holds and to F otherwise.  r1 is the context
 * pointer on entry and is never written; r2/r3 hold a field and a constant.
 * Comparisons are unsigned, as every context field is; derived fields
 * (run = t_now - t_start, queue = t_start - t_ready) wrap the same way in C
 * and in the VM, so the two always agree.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "lang.h"

/* ---- evaluation in C ------------------------------------------------------ */

uint64_t mks_q_ctx_field(const struct mks_hook_ctx *c, enum q_field f)
{
    switch (f) {
    case F_RUN: return c->t_now - c->t_start;
    case F_QUEUE: return c->t_start - c->t_ready;
    default: break;
    }
    const uint8_t *base = (const uint8_t *)c;
    int off = mks_q_fields[f].ctx_off;
    switch (mks_q_fields[f].ctx_size) {
    case 2: {
        uint16_t v;
        memcpy(&v, base + off, 2);
        return v;
    }
    case 4: {
        uint32_t v;
        memcpy(&v, base + off, 4);
        return v;
    }
    default: {
        uint64_t v;
        memcpy(&v, base + off, 8);
        return v;
    }
    }
}

static bool ctx_usable(enum q_field f)
{
    return mks_q_fields[f].ctx_off >= 0 || f == F_RUN || f == F_QUEUE;
}

int mks_q_cmp_value(const struct mks_pred *p, mks_class_resolver resolve, void *arg, uint64_t *v)
{
    if (!p->is_str) {
        *v = (uint64_t)p->num;
        return 0;
    }
    int64_t id = resolve ? resolve(p->str, arg) : -1;
    if (id < 0)
        return -ENOENT;
    *v = (uint64_t)id;
    return 0;
}

static bool cmp_u64(uint64_t a, enum q_op op, uint64_t b)
{
    switch (op) {
    case OP_EQ: return a == b;
    case OP_NE: return a != b;
    case OP_LT: return a < b;
    case OP_LE: return a <= b;
    case OP_GT: return a > b;
    default: return a >= b;
    }
}

int mks_pred_eval(const struct mks_pred *p, const struct mks_hook_ctx *ctx,
                  mks_class_resolver resolve, void *arg)
{
    int a, b;
    switch (p->kind) {
    case N_AND:
        if ((a = mks_pred_eval(p->a, ctx, resolve, arg)) <= 0)
            return a;
        return mks_pred_eval(p->b, ctx, resolve, arg);
    case N_OR:
        if ((a = mks_pred_eval(p->a, ctx, resolve, arg)) != 0)
            return a;
        return mks_pred_eval(p->b, ctx, resolve, arg);
    case N_NOT:
        if ((a = mks_pred_eval(p->a, ctx, resolve, arg)) < 0)
            return a;
        return !a;
    case N_CMP:
        break;
    }
    if (!ctx_usable(p->field))
        return -EINVAL;
    uint64_t v;
    if ((b = mks_q_cmp_value(p, resolve, arg, &v)))
        return b;
    return cmp_u64(mks_q_ctx_field(ctx, p->field), p->op, v);
}

/* ---- compilation ------------------------------------------------------------------ */

void mks_q_emit(struct q_gen *g, uint8_t code, uint8_t dst, uint8_t src, int16_t off, int32_t imm)
{
    if (g->oom)
        return;
    if (g->n == g->cap) {
        uint32_t cap = g->cap ? g->cap * 2 : 64;
        struct mks_insn *p = realloc(g->insns, cap * sizeof(*p));
        if (!p) {
            g->oom = true;
            return;
        }
        g->insns = p, g->cap = cap;
    }
    g->insns[g->n++] = (struct mks_insn){
        .code = code, .regs = (uint8_t)((src << 4) | (dst & 0x0f)), .off = off, .imm = imm};
}

int mks_q_label(struct q_gen *g)
{
    if (g->n_labels == Q_MAX_LABELS)
        return -1;
    g->label_at[g->n_labels] = -1;
    return g->n_labels++;
}

void mks_q_place(struct q_gen *g, int label)
{
    g->label_at[label] = (int32_t)g->n;
}

void mks_q_jump(struct q_gen *g, uint8_t code, uint8_t dst, uint8_t src, int32_t imm, int label)
{
    if (g->oom)
        return;
    if (g->n_fix == g->cap_fix) {
        uint32_t cap = g->cap_fix ? g->cap_fix * 2 : 64;
        void *p = realloc(g->fix, cap * sizeof(*g->fix));
        if (!p) {
            g->oom = true;
            return;
        }
        g->fix = p, g->cap_fix = cap;
    }
    g->fix[g->n_fix].insn = g->n;
    g->fix[g->n_fix].label = label;
    g->n_fix++;
    mks_q_emit(g, code, dst, src, 0, imm);
}

static uint8_t ldx_size(int size)
{
    return size == 2 ? MKS_BPF_H : size == 4 ? MKS_BPF_W : MKS_BPF_DW;
}

/* A filter's loads: the context is r1, never written. */
static void filter_load(struct q_gen *g, enum q_field f, uint8_t dst)
{
    if (f == F_RUN || f == F_QUEUE) {
        int hi = f == F_RUN ? 80 : 96, lo = f == F_RUN ? 96 : 88;
        mks_q_emit(g, MKS_BPF_LDX | MKS_BPF_MEM | MKS_BPF_DW, dst, 1, (int16_t)hi, 0);
        mks_q_emit(g, MKS_BPF_LDX | MKS_BPF_MEM | MKS_BPF_DW, 3, 1, (int16_t)lo, 0);
        mks_q_emit(g, MKS_BPF_ALU64 | MKS_BPF_SUB | MKS_BPF_X, dst, 3, 0, 0);
        return;
    }
    mks_q_emit(g, MKS_BPF_LDX | MKS_BPF_MEM | ldx_size(mks_q_fields[f].ctx_size), dst, 1,
               (int16_t)mks_q_fields[f].ctx_off, 0);
}

static const uint8_t jmp_op[] = {MKS_BPF_JEQ, MKS_BPF_JNE, MKS_BPF_JLT,
                                 MKS_BPF_JLE, MKS_BPF_JGT, MKS_BPF_JGE};

int mks_q_gen_pred(struct q_gen *g, const struct mks_pred *p, int t, int f)
{
    int rc, mid;
    switch (p->kind) {
    case N_AND:
        if ((mid = mks_q_label(g)) < 0)
            return mks_q_err(g->e, 0, 1, "predicate too complex");
        if ((rc = mks_q_gen_pred(g, p->a, mid, f)))
            return rc;
        mks_q_place(g, mid);
        return mks_q_gen_pred(g, p->b, t, f);
    case N_OR:
        if ((mid = mks_q_label(g)) < 0)
            return mks_q_err(g->e, 0, 1, "predicate too complex");
        if ((rc = mks_q_gen_pred(g, p->a, t, mid)))
            return rc;
        mks_q_place(g, mid);
        return mks_q_gen_pred(g, p->b, t, f);
    case N_NOT:
        return mks_q_gen_pred(g, p->a, f, t);
    case N_CMP:
        break;
    }
    uint64_t v;
    if (mks_q_cmp_value(p, g->resolve, g->arg, &v))
        return mks_q_err(g->e, p->vpos, p->vlen, "unknown task class '%s'", p->str);
    g->load(g, p->field, 2);
    /* JMP with an immediate sign-extends imm to 64 bits: only values that
     * survive that round trip go inline, the rest through r3. */
    if (v <= (uint64_t)INT32_MAX) {
        mks_q_jump(g, MKS_BPF_JMP | jmp_op[p->op] | MKS_BPF_K, 2, 0, (int32_t)v, t);
    } else {
        mks_q_emit(g, MKS_BPF_LD | MKS_BPF_IMM | MKS_BPF_DW, 3, 0, 0, (int32_t)(uint32_t)v);
        mks_q_emit(g, 0, 0, 0, 0, (int32_t)(uint32_t)(v >> 32));
        mks_q_jump(g, MKS_BPF_JMP | jmp_op[p->op] | MKS_BPF_X, 2, 3, 0, t);
    }
    mks_q_jump(g, MKS_BPF_JMP | MKS_BPF_JA, 0, 0, 0, f);
    return 0;
}

int mks_q_gen_finish(struct q_gen *g, int rc, const char *what, struct mks_insn **insns_p,
                     uint32_t *n_p)
{
    if (!rc && g->oom)
        rc = -ENOMEM;
    if (!rc && g->n > MKS_BPF_MAX_INSNS)
        rc = mks_q_err(g->e, 0, 1, "%s of %u instructions exceeds the %u limit", what, g->n,
                       MKS_BPF_MAX_INSNS);
    for (uint32_t i = 0; !rc && i < g->n_fix; i++) {
        int32_t to = g->label_at[g->fix[i].label];
        int32_t off = to - (int32_t)g->fix[i].insn - 1;
        if (to < 0 || off < INT16_MIN || off > INT16_MAX)
            rc = mks_q_err(g->e, 0, 1, "%s jump out of range", what);
        else
            g->insns[g->fix[i].insn].off = (int16_t)off;
    }
    free(g->fix);
    g->fix = NULL;
    if (rc) {
        free(g->insns);
        g->insns = NULL;
        return rc;
    }
    *insns_p = g->insns;
    *n_p = g->n;
    g->insns = NULL;
    return 0;
}

/* Every field of a filter must be in the hook context. */
static int check_usable(const struct mks_pred *p, struct mks_query_error *e)
{
    if (p->kind != N_CMP) {
        int rc = check_usable(p->a, e);
        return rc || !p->b ? rc : check_usable(p->b, e);
    }
    if (!ctx_usable(p->field))
        return mks_q_err(e, p->fpos, p->flen,
                         "'%s' is not in the hook context: filters test rank, worker, class,"
                         " step, event, comm_gen, run, queue, ...",
                         mks_q_fields[p->field].name);
    return 0;
}

int mks_pred_compile_bpf(const struct mks_pred *pred, mks_class_resolver resolve, void *arg,
                         struct mks_insn **insns_p, uint32_t *n_insns_p,
                         struct mks_query_error *e)
{
    if (!pred || !insns_p || !n_insns_p)
        return mks_q_err(e, 0, 1, "nothing to compile");
    int rc = check_usable(pred, e);
    if (rc)
        return rc;
    struct q_gen g = {.resolve = resolve, .arg = arg, .e = e, .load = filter_load};
    int t = mks_q_label(&g), f = mks_q_label(&g);
    rc = mks_q_gen_pred(&g, pred, t, f);
    if (!rc) {
        mks_q_place(&g, t);
        mks_q_emit(&g, MKS_BPF_ALU64 | MKS_BPF_MOV | MKS_BPF_K, 0, 0, 0, 1);
        mks_q_emit(&g, MKS_BPF_JMP | MKS_BPF_EXIT, 0, 0, 0, 0);
        mks_q_place(&g, f);
        mks_q_emit(&g, MKS_BPF_ALU64 | MKS_BPF_MOV | MKS_BPF_K, 0, 0, 0, 0);
        mks_q_emit(&g, MKS_BPF_JMP | MKS_BPF_EXIT, 0, 0, 0, 0);
    }
    return mks_q_gen_finish(&g, rc, "filter", insns_p, n_insns_p);
}

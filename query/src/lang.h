/*
 * Internal representation of the query language shared by the parser, the
 * SQL planner and the eBPF compiler.
 */
#ifndef MKS_QUERY_LANG_H
#define MKS_QUERY_LANG_H

#include <stdbool.h>
#include <stdint.h>

#include "mkscope/query.h"

enum q_field {
    F_RANK, F_CLASS, F_STEP, F_REQ_GEN, F_EPOCH, F_TIME, F_WORKER, F_PEER, F_COMM_GEN,
    F_SM, F_TASK_GEN, F_DEP_CLASS, F_TILE_X, F_TILE_Y, F_DEP_EVENT, F_QUEUE_DEPTH,
    F_T_NOW, F_T_READY, F_T_START, F_VALUE, F_EVENT, F_FLAGS, F_RUN, F_QUEUE,
    F_T_END, F_WAIT, F_CHANNEL, F_COMM_OP,
    F_COUNT
};

struct q_field_info {
    const char *name;
    int ctx_off;   /* offset in struct mks_hook_ctx, -1: not a context field */
    int ctx_size;  /* 2, 4 or 8 */
    bool sql;      /* usable in store queries */
};

extern const struct q_field_info mks_q_fields[F_COUNT];

enum q_op { OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE };

enum q_node { N_CMP, N_AND, N_OR, N_NOT };

struct mks_pred {
    enum q_node kind;
    /* N_CMP */
    enum q_field field;
    enum q_op op;
    bool is_str;   /* value is a name (class or event), in str */
    int64_t num;
    bool neg;      /* the value was written negative (relative time) */
    char *str;
    int fpos, flen; /* field token */
    int vpos, vlen; /* value token */
    /* N_AND, N_OR: a, b; N_NOT: a */
    struct mks_pred *a, *b;
};

enum q_agg { A_COUNT, A_SUM, A_MEAN, A_MIN, A_MAX, A_P50, A_P90, A_P99 };
enum q_metric { M_TASK, M_RUN, M_QUEUE, M_STEP, M_REMOTE_WAIT, M_LOCAL_WAIT, M_IDLE, M_BUSY,
                M_DEPTH };

#define Q_MAX_AGGS   16
#define Q_MAX_GROUPS 6

struct q_agg_item {
    enum q_agg agg;
    enum q_metric metric;
    int pos, len;
};

struct mks_query {
    struct q_agg_item aggs[Q_MAX_AGGS];
    int n_aggs;
    enum q_field groups[Q_MAX_GROUPS];
    int gpos[Q_MAX_GROUPS], glen[Q_MAX_GROUPS];
    int n_groups;
    struct mks_pred *where;
    int64_t limit;
};

int mks_q_err(struct mks_query_error *e, int pos, int len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---- the lexer and the predicate parser, shared by queries and probes ---- */

enum tok_kind { T_END, T_IDENT, T_NUM, T_STR, T_LP, T_RP, T_COMMA, T_OP, T_AND, T_OR, T_NOT };

struct q_tok {
    enum tok_kind kind;
    int pos, len;
    int64_t num;
    int neg; /* written with a leading '-' */
    enum q_op op;
    char text[128]; /* identifier or string contents */
};

struct q_lexer {
    const char *s;
    int pos;
    struct q_tok cur;
    struct mks_query_error *e;
    int depth; /* '(' and 'not' open around the token */
    int terms; /* comparisons so far */
};


int mks_q_lexer_init(struct q_lexer *lx, const char *text, struct mks_query_error *e);
int mks_q_lex_next(struct q_lexer *lx);
/* The predicate starting at the current token (or-expression). */
int mks_q_parse_pred(struct q_lexer *lx, struct mks_pred **out);
/* The clauses of a query or a probe, from the lexer's current token, as
 * both grammars have them: AGG, ... [by FIELD, ...] [where PREDICATE] [limit N], each
 * clause at most once, in any order after the aggregates.  What differs is
 * given: how one aggregate parses, which fields may be grouped by, whether
 * there is a limit; the results go where the pointers say. */
struct q_clauses {
    int max_aggs;
    const char *aggs_in; /* "" or " in a probe": "at most N aggregates<aggs_in>" */
    /* Parse the aggregate at the current token into the caller's item i
     * (the lexer left after it). */
    int (*parse_agg)(struct q_lexer *lx, int i, void *arg);
    int max_groups;
    /* 0 when field f (-1: not a field) at the current token may be grouped
     * by, else the error (mks_q_err). */
    int (*check_group)(struct q_lexer *lx, int f, void *arg);
    bool unique_groups;   /* a field grouped by twice is an error */
    bool has_limit;       /* `limit N`, 1..1000000 */
    const char *no_limit; /* without one: the error for a `limit`, or NULL */
    const char *expected; /* what may follow the aggregates: "',', by, where or" */
    void *arg;
    int *n_aggs;
    enum q_field *groups;
    int *gpos, *glen, *n_groups;
    struct mks_pred **where;
    int64_t *limit;
};
/* The clauses from the current token to the end of the text.  On an error
 * what was parsed stays where the pointers say, for the caller to free. */
int mks_q_parse_clauses(struct q_lexer *lx, const struct q_clauses *c);
int mks_q_field_lookup(const char *name); /* -1 when unknown */
const char *mks_q_field_list(void);
const char *mks_q_event_name(int ev); /* "task_end", "?" when out of range */

/* ---- code generation, shared by filters and probes --------------------------
 * Short-circuit code by jump targets: mks_q_gen_pred(g, p, T, F) emits code
 * that jumps to label T when p holds and to F otherwise.  Field values come
 * from g->load, which puts field f into register dst (r3 and up to r5 free
 * for it to use); the comparison uses dst and r3. */

#define Q_MAX_LABELS 1024

struct q_gen {
    struct mks_insn *insns;
    uint32_t n, cap;
    int32_t label_at[Q_MAX_LABELS]; /* insn index of each label, -1 unplaced */
    int n_labels;
    struct {
        uint32_t insn;
        int label;
    } *fix; /* jumps to patch: insn index and label */
    uint32_t n_fix, cap_fix;
    mks_class_resolver resolve;
    void *arg;
    struct mks_query_error *e;
    bool oom;
    /* Puts field f (checked usable by the caller) into register dst. */
    void (*load)(struct q_gen *g, enum q_field f, uint8_t dst);
    void *user;
};

void mks_q_emit(struct q_gen *g, uint8_t code, uint8_t dst, uint8_t src, int16_t off, int32_t imm);
int mks_q_label(struct q_gen *g); /* -1 when out of labels */
void mks_q_place(struct q_gen *g, int label);
/* A jump whose offset is filled in once the label is placed. */
void mks_q_jump(struct q_gen *g, uint8_t code, uint8_t dst, uint8_t src, int32_t imm, int label);
/* Compare-and-branch code of a predicate whose every field g->load can load. */
int mks_q_gen_pred(struct q_gen *g, const struct mks_pred *p, int t, int f);
/* Patch the jumps and hand over the instructions (freeing g's own memory
 * either way); what = "filter", "probe" for the messages. */
int mks_q_gen_finish(struct q_gen *g, int rc, const char *what, struct mks_insn **insns_p,
                     uint32_t *n_p);
/* The value a comparison stands for (a class name resolved): 0 or -ENOENT. */
int mks_q_cmp_value(const struct mks_pred *p, mks_class_resolver resolve, void *arg, uint64_t *v);
/* Field f of a context as the filters read it (derived run and queue
 * included, wrapping as the VM does). */
uint64_t mks_q_ctx_field(const struct mks_hook_ctx *c, enum q_field f);

#endif

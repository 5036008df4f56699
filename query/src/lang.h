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

#endif

/*
 * Lexer and recursive-descent parser of the query language.
 *
 * Every token remembers its byte position and length so that an error can
 * point at it.  Numbers take an optional duration unit (ns, us, ms, s, m, h)
 * and are kept in nanoseconds; a leading '-' is allowed (relative times).
 * Strings are double-quoted; a bare word on the right of a comparison is a
 * name too (class = attn, event = task_end).
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lang.h"

const struct q_field_info mks_q_fields[F_COUNT] = {
    [F_RANK] = {"rank", 8, 4, true},
    [F_CLASS] = {"class", 20, 4, true},
    [F_STEP] = {"step", 40, 4, true},
    [F_REQ_GEN] = {"req_gen", 32, 8, true},
    [F_EPOCH] = {"epoch", -1, 0, true},
    [F_TIME] = {"time", -1, 0, true},
    [F_WORKER] = {"worker", 12, 4, true},
    [F_PEER] = {"peer", 72, 4, true},
    [F_COMM_GEN] = {"comm_gen", 64, 8, true},
    [F_SM] = {"sm", 16, 4, false},
    [F_TASK_GEN] = {"task_gen", 24, 8, false},
    [F_DEP_CLASS] = {"dep_class", 44, 4, false},
    [F_TILE_X] = {"tile_x", 48, 4, false},
    [F_TILE_Y] = {"tile_y", 52, 4, false},
    [F_DEP_EVENT] = {"dep_event", 56, 8, false},
    [F_QUEUE_DEPTH] = {"queue_depth", 76, 4, false},
    [F_T_NOW] = {"t_now", 80, 8, false},
    [F_T_READY] = {"t_ready", 88, 8, false},
    [F_T_START] = {"t_start", 96, 8, false},
    [F_VALUE] = {"value", 104, 8, false},
    [F_EVENT] = {"event", 4, 2, false},
    [F_FLAGS] = {"flags", 6, 2, false},
    [F_RUN] = {"run", -1, 0, false},   /* t_now - t_start */
    [F_QUEUE] = {"queue", -1, 0, false}, /* t_start - t_ready */
    [F_T_END] = {"t_end", 112, 8, false},
    /* Probes only (probe.c): a dependency wait, dep_wait_begin to
     * dep_wait_end of one worker; a communication generation's channel and
     * operator (comm-ids' STEP and REQ layouts). */
    [F_WAIT] = {"wait", -1, 0, false},
    [F_CHANNEL] = {"channel", -1, 0, false},
    [F_COMM_OP] = {"comm_op", -1, 0, false},
};

int mks_q_err(struct mks_query_error *e, int pos, int len, const char *fmt, ...)
{
    if (e) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
        va_end(ap);
        /* one line, also when it quotes a string of the query */
        for (char *c = e->msg; *c; c++)
            if ((unsigned char)*c < 0x20 || *c == 0x7f)
                *c = '?';
        e->pos = pos;
        e->len = len > 0 ? len : 1;
    }
    return -EINVAL;
}

int mks_query_error_format(const char *text, const struct mks_query_error *e, char *buf,
                           size_t len)
{
    if (!text || !e || !buf || !len)
        return -EINVAL;
    int tlen = (int)strlen(text);
    int pos = e->pos < 0 ? 0 : e->pos > tlen ? tlen : e->pos;
    /* A long text is shown around the place, so that the caret line fits
     * (40 characters either side, "..." where it is cut). */
    int from = 0, to = tlen, carets = e->len;
    if (tlen > 120) {
        from = pos > 40 ? pos - 40 : 0;
        to = pos + (carets < 40 ? carets : 40) + 40;
        if (to > tlen)
            to = tlen;
    }
    if (carets > to - pos)
        carets = to - pos > 0 ? to - pos : 1;
    const char *pre = from ? "..." : "", *post = to < tlen ? "..." : "";
    int col = pos - from + (int)strlen(pre);
    /* The text as one line: a newline or tab in it would move the caret. */
    char shown[300];
    int k = 0;
    for (int i = from; i < to && k < (int)sizeof(shown) - 1; i++)
        shown[k++] = (unsigned char)text[i] < 0x20 || text[i] == 0x7f ? ' ' : text[i];
    shown[k] = 0;
    int n = snprintf(buf, len, "query:1:%d: %s\n  %s%s%s\n  %*s", pos + 1, e->msg, pre, shown,
                     post, col, "");
    for (int i = 0; i < carets && n >= 0 && (size_t)n + 1 < len; i++)
        buf[n++] = '^';
    if (n >= 0 && (size_t)n < len)
        buf[n] = 0;
    return 0;
}

/* ---- lexer ------------------------------------------------------------------ */

/* Bounds of a predicate: the parser recurses once per '(' or 'not', and the
 * tree it builds is walked recursively again by the planner, the evaluator
 * and the filter compiler (and SQLite, whose expressions stop at depth
 * 1000).  No real predicate comes near; a deeper one is refused as a usage
 * error rather than taking the stack. */
#define Q_MAX_NEST  32
#define Q_MAX_TERMS 256

static int lex_number(struct q_lexer *lx, struct q_tok *t)
{
    const char *s = lx->s;
    int p = lx->pos;
    int neg = 0;
    if (s[p] == '-')
        neg = 1, p++;
    t->neg = neg;
    long double v = 0;
    int start = p;
    if (s[p] == '0' && (s[p + 1] == 'x' || s[p + 1] == 'X')) {
        p += 2;
        unsigned long long h = 0;
        int digits = 0;
        while (isxdigit((unsigned char)s[p])) {
            if (h >> 60)
                return mks_q_err(lx->e, t->pos, p - t->pos + 1, "number too large");
            h = h * 16 + (unsigned)(isdigit((unsigned char)s[p]) ? s[p] - '0'
                                                                  : tolower(s[p]) - 'a' + 10);
            p++, digits++;
        }
        if (!digits)
            return mks_q_err(lx->e, t->pos, p - t->pos, "hex number without digits");
        /* Ids such as comm_gen use all 64 bits: keep the bit pattern. */
        t->num = (int64_t)h;
        if (neg)
            t->num = -t->num;
        t->len = p - t->pos;
        lx->pos = p;
        return 0;
    }
    while (isdigit((unsigned char)s[p]))
        v = v * 10 + (s[p++] - '0');
    if (s[p] == '.') {
        long double scale = 0.1L;
        p++;
        while (isdigit((unsigned char)s[p])) {
            v += (s[p++] - '0') * scale;
            scale /= 10;
        }
    }
    if (p == start)
        return mks_q_err(lx->e, t->pos, 1, "expected a number after '-'");
    static const struct {
        const char *unit;
        long double mult;
    } units[] = {{"ns", 1}, {"us", 1e3L}, {"ms", 1e6L}, {"s", 1e9L}, {"m", 60e9L}, {"h", 3600e9L}};
    int ulen = 0;
    while (isalpha((unsigned char)s[p + ulen]))
        ulen++;
    if (ulen) {
        size_t i;
        for (i = 0; i < sizeof(units) / sizeof(units[0]); i++)
            if ((int)strlen(units[i].unit) == ulen && !strncmp(s + p, units[i].unit, (size_t)ulen))
                break;
        if (i == sizeof(units) / sizeof(units[0]))
            return mks_q_err(lx->e, p, ulen, "unknown unit '%.*s' (use ns, us, ms, s, m, h)", ulen,
                             s + p);
        v *= units[i].mult;
        p += ulen;
    }
    if (v > (long double)INT64_MAX)
        return mks_q_err(lx->e, t->pos, p - t->pos, "number too large");
    t->num = neg ? -(int64_t)v : (int64_t)v;
    t->len = p - t->pos;
    lx->pos = p;
    return 0;
}

int mks_q_lex_next(struct q_lexer *lx)
{
    const char *s = lx->s;
    while (isspace((unsigned char)s[lx->pos]))
        lx->pos++;
    struct q_tok *t = &lx->cur;
    memset(t, 0, sizeof(*t));
    t->pos = lx->pos;
    char c = s[lx->pos];
    if (!c) {
        t->kind = T_END;
        return 0;
    }
    if (isalpha((unsigned char)c) || c == '_') {
        int p = lx->pos;
        while (isalnum((unsigned char)s[p]) || s[p] == '_' || s[p] == '.' || s[p] == '-')
            p++;
        t->len = p - lx->pos;
        if (t->len >= (int)sizeof(t->text))
            return mks_q_err(lx->e, t->pos, t->len, "name longer than %zu characters",
                             sizeof(t->text) - 1);
        memcpy(t->text, s + lx->pos, (size_t)t->len);
        lx->pos = p;
        if (!strcmp(t->text, "and"))
            t->kind = T_AND;
        else if (!strcmp(t->text, "or"))
            t->kind = T_OR;
        else if (!strcmp(t->text, "not"))
            t->kind = T_NOT;
        else
            t->kind = T_IDENT;
        return 0;
    }
    if (isdigit((unsigned char)c) || (c == '-' && (isdigit((unsigned char)s[lx->pos + 1]) ||
                                                   s[lx->pos + 1] == '.'))) {
        t->kind = T_NUM;
        return lex_number(lx, t);
    }
    if (c == '"') {
        int p = lx->pos + 1, n = 0;
        while (s[p] && s[p] != '"') {
            if (n + 1 >= (int)sizeof(t->text))
                return mks_q_err(lx->e, t->pos, p - t->pos, "string longer than %zu characters",
                                 sizeof(t->text) - 1);
            t->text[n++] = s[p++];
        }
        if (s[p] != '"')
            return mks_q_err(lx->e, t->pos, p - t->pos, "string not closed: add '\"'");
        t->kind = T_STR;
        t->len = p + 1 - lx->pos;
        lx->pos = p + 1;
        return 0;
    }
    t->len = 1;
    lx->pos++;
    switch (c) {
    case '(': t->kind = T_LP; return 0;
    case ')': t->kind = T_RP; return 0;
    case ',': t->kind = T_COMMA; return 0;
    case '=':
        t->kind = T_OP, t->op = OP_EQ;
        if (s[lx->pos] == '=')
            lx->pos++, t->len = 2;
        return 0;
    case '!':
        if (s[lx->pos] == '=') {
            lx->pos++, t->len = 2, t->kind = T_OP, t->op = OP_NE;
            return 0;
        }
        t->kind = T_NOT;
        return 0;
    case '<':
    case '>':
        t->kind = T_OP;
        if (s[lx->pos] == '=') {
            lx->pos++, t->len = 2;
            t->op = c == '<' ? OP_LE : OP_GE;
        } else {
            t->op = c == '<' ? OP_LT : OP_GT;
        }
        return 0;
    case '&':
    case '|':
        if (s[lx->pos] == c) {
            lx->pos++, t->len = 2;
            t->kind = c == '&' ? T_AND : T_OR;
            return 0;
        }
        break;
    }
    return mks_q_err(lx->e, t->pos, 1, "unexpected character '%c'", c);
}

/* ---- predicates ------------------------------------------------------------------ */

int mks_q_field_lookup(const char *name)
{
    for (int i = 0; i < F_COUNT; i++)
        if (!strcmp(mks_q_fields[i].name, name))
            return i;
    return -1;
}

const char *mks_q_field_list(void)
{
    return "rank, class, step, req_gen, epoch, time, worker, peer, comm_gen, event, sm, "
           "task_gen, dep_class, tile_x, tile_y, dep_event, queue_depth, t_now, t_ready, "
           "t_start, t_end, value, flags, run, queue, wait, channel, comm_op";
}

static const char *const event_names[MKS_EV_COUNT] = {
    "task_ready",   "task_assign", "task_start", "task_end",    "dep_wait_begin", "dep_wait_end",
    "dep_release",  "comm_begin",  "comm_end",   "gen_advance", "queue_pressure"};

const char *mks_q_event_name(int ev)
{
    return ev >= 0 && ev < MKS_EV_COUNT ? event_names[ev] : "?";
}

void mks_pred_free(struct mks_pred *p)
{
    if (!p)
        return;
    mks_pred_free(p->a);
    mks_pred_free(p->b);
    free(p->str);
    free(p);
}


static int parse_cmp(struct q_lexer *lx, struct mks_pred **out)
{
    struct q_tok ft = lx->cur;
    if (++lx->terms > Q_MAX_TERMS)
        return mks_q_err(lx->e, ft.pos, ft.len > 0 ? ft.len : 1,
                         "more than %d conditions: split the question", Q_MAX_TERMS);
    if (ft.kind != T_IDENT)
        return mks_q_err(lx->e, ft.pos, ft.len,
                         ft.kind == T_END ? "expected a condition, found the end"
                                          : "expected a field name");
    int f = mks_q_field_lookup(ft.text);
    if (f < 0)
        return mks_q_err(lx->e, ft.pos, ft.len, "unknown field '%s' (fields: %s)", ft.text,
                         mks_q_field_list());
    int rc = mks_q_lex_next(lx);
    if (rc)
        return rc;
    if (lx->cur.kind != T_OP)
        return mks_q_err(lx->e, lx->cur.pos, lx->cur.len,
                         "expected a comparison (= != < <= > >=) after '%s'", ft.text);
    enum q_op op = lx->cur.op;
    if ((rc = mks_q_lex_next(lx)))
        return rc;
    struct q_tok vt = lx->cur;
    struct mks_pred *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    p->kind = N_CMP;
    p->field = (enum q_field)f;
    p->op = op;
    p->fpos = ft.pos, p->flen = ft.len, p->vpos = vt.pos, p->vlen = vt.len;
    if (vt.kind == T_NUM) {
        p->num = vt.num;
        p->neg = vt.neg;
        if (vt.neg && f != F_TIME) {
            mks_pred_free(p);
            return mks_q_err(lx->e, vt.pos, vt.len,
                             "negative value: '%s' is unsigned (only time takes -DURATION)",
                             ft.text);
        }
    } else if (vt.kind == T_STR || vt.kind == T_IDENT) {
        if (f != F_CLASS && f != F_EVENT) {
            mks_pred_free(p);
            return mks_q_err(lx->e, vt.pos, vt.len, "'%s' compares with numbers, not names",
                             ft.text);
        }
        if (op != OP_EQ && op != OP_NE) {
            mks_pred_free(p);
            return mks_q_err(lx->e, vt.pos, vt.len, "names compare only with = or !=");
        }
        p->is_str = true;
        p->str = strdup(vt.text);
        if (!p->str) {
            mks_pred_free(p);
            return -ENOMEM;
        }
        if (f == F_EVENT) {
            int k;
            for (k = 0; k < MKS_EV_COUNT; k++)
                if (!strcmp(event_names[k], vt.text))
                    break;
            if (k == MKS_EV_COUNT) {
                mks_pred_free(p);
                return mks_q_err(lx->e, vt.pos, vt.len, "unknown event '%s' (task_ready ..."
                                 " queue_pressure)", vt.text);
            }
            p->is_str = false;
            p->num = k;
        }
    } else {
        mks_pred_free(p);
        return mks_q_err(lx->e, vt.pos, vt.len, "expected a value after the comparison");
    }
    if ((rc = mks_q_lex_next(lx))) {
        mks_pred_free(p);
        return rc;
    }
    *out = p;
    return 0;
}

static int parse_unary(struct q_lexer *lx, struct mks_pred **out)
{
    int rc;
    if ((lx->cur.kind == T_NOT || lx->cur.kind == T_LP) && lx->depth >= Q_MAX_NEST)
        return mks_q_err(lx->e, lx->cur.pos, lx->cur.len > 0 ? lx->cur.len : 1,
                         "nested more than %d deep ('(' and 'not')", Q_MAX_NEST);
    if (lx->cur.kind == T_NOT) {
        if ((rc = mks_q_lex_next(lx)))
            return rc;
        struct mks_pred *a;
        lx->depth++;
        rc = parse_unary(lx, &a);
        lx->depth--;
        if (rc)
            return rc;
        struct mks_pred *p = calloc(1, sizeof(*p));
        if (!p) {
            mks_pred_free(a);
            return -ENOMEM;
        }
        p->kind = N_NOT, p->a = a;
        *out = p;
        return 0;
    }
    if (lx->cur.kind == T_LP) {
        struct q_tok open = lx->cur;
        if ((rc = mks_q_lex_next(lx)))
            return rc;
        lx->depth++;
        rc = mks_q_parse_pred(lx, out);
        lx->depth--;
        if (rc)
            return rc;
        if (lx->cur.kind != T_RP) {
            mks_pred_free(*out);
            *out = NULL;
            return mks_q_err(lx->e, open.pos, 1, "'(' is never closed");
        }
        /* what follows the ')' may not lex: the tree is then nobody's */
        if ((rc = mks_q_lex_next(lx))) {
            mks_pred_free(*out);
            *out = NULL;
        }
        return rc;
    }
    return parse_cmp(lx, out);
}

static int parse_bin(struct q_lexer *lx, struct mks_pred **out, enum tok_kind tk, enum q_node nk,
                     int (*sub)(struct q_lexer *, struct mks_pred **))
{
    struct mks_pred *a;
    int rc = sub(lx, &a);
    if (rc)
        return rc;
    while (lx->cur.kind == tk) {
        struct mks_pred *b;
        if ((rc = mks_q_lex_next(lx)) || (rc = sub(lx, &b))) {
            mks_pred_free(a);
            return rc;
        }
        struct mks_pred *p = calloc(1, sizeof(*p));
        if (!p) {
            mks_pred_free(a);
            mks_pred_free(b);
            return -ENOMEM;
        }
        p->kind = nk, p->a = a, p->b = b;
        a = p;
    }
    *out = a;
    return 0;
}

static int parse_and(struct q_lexer *lx, struct mks_pred **out)
{
    return parse_bin(lx, out, T_AND, N_AND, parse_unary);
}

int mks_q_parse_pred(struct q_lexer *lx, struct mks_pred **out)
{
    return parse_bin(lx, out, T_OR, N_OR, parse_and);
}

int mks_q_lexer_init(struct q_lexer *lx, const char *text, struct mks_query_error *e)
{
    memset(lx, 0, sizeof(*lx));
    lx->s = text;
    lx->e = e;
    if (e)
        memset(e, 0, sizeof(*e));
    if (strlen(text) > 4096)
        return mks_q_err(e, 4096, 1, "text longer than 4096 characters");
    return mks_q_lex_next(lx);
}

int mks_pred_parse(const char *text, struct mks_pred **pred_p, struct mks_query_error *e)
{
    if (!text || !pred_p)
        return mks_q_err(e, 0, 1, "no predicate");
    struct q_lexer lx;
    int rc = mks_q_lexer_init(&lx, text, e);
    if (rc)
        return rc;
    struct mks_pred *p;
    if ((rc = mks_q_parse_pred(&lx, &p)))
        return rc;
    if (lx.cur.kind != T_END) {
        mks_pred_free(p);
        return mks_q_err(e, lx.cur.pos, lx.cur.len, "unexpected '%.*s': expected and, or or the end",
                         lx.cur.len, text + lx.cur.pos);
    }
    *pred_p = p;
    return 0;
}

/* ---- queries ------------------------------------------------------------------------ */

static const char *const agg_names[] = {"count", "sum", "mean", "min", "max", "p50", "p90", "p99"};
static const char *const metric_names[] = {"task",       "run",  "queue", "step", "remote_wait",
                                           "local_wait", "idle", "busy",  "depth"};

const char *mks_q_agg_name(int a) { return agg_names[a]; }
const char *mks_q_metric_name(int m) { return metric_names[m]; }

static int parse_agg(struct q_lexer *lx, struct q_agg_item *it)
{
    struct q_tok t = lx->cur;
    int rc;
    if (t.kind != T_IDENT)
        return mks_q_err(lx->e, t.pos, t.len,
                         "expected an aggregate such as count(task), p99(run), mean(queue)");
    int a;
    for (a = 0; a < (int)(sizeof(agg_names) / sizeof(agg_names[0])); a++)
        if (!strcmp(agg_names[a], t.text))
            break;
    if (!strcmp(t.text, "avg"))
        a = A_MEAN;
    if (a == (int)(sizeof(agg_names) / sizeof(agg_names[0])))
        return mks_q_err(lx->e, t.pos, t.len,
                         "unknown aggregate '%s' (count, sum, mean, min, max, p50, p90, p99)",
                         t.text);
    if ((rc = mks_q_lex_next(lx)))
        return rc;
    if (lx->cur.kind != T_LP)
        return mks_q_err(lx->e, lx->cur.pos, lx->cur.len, "expected '(' after '%s'", t.text);
    if ((rc = mks_q_lex_next(lx)))
        return rc;
    struct q_tok m = lx->cur;
    int k;
    if (m.kind != T_IDENT)
        return mks_q_err(lx->e, m.pos, m.len, "expected a metric (%s)",
                         "task, run, queue, step, remote_wait, local_wait, idle, busy, depth");
    for (k = 0; k < (int)(sizeof(metric_names) / sizeof(metric_names[0])); k++)
        if (!strcmp(metric_names[k], m.text))
            break;
    if (!strcmp(m.text, "tasks"))
        k = M_TASK;
    if (k == (int)(sizeof(metric_names) / sizeof(metric_names[0])))
        return mks_q_err(lx->e, m.pos, m.len,
                         "unknown metric '%s' (task, run, queue, step, remote_wait, local_wait,"
                         " idle, busy, depth)",
                         m.text);
    if ((rc = mks_q_lex_next(lx)))
        return rc;
    if (lx->cur.kind != T_RP)
        return mks_q_err(lx->e, lx->cur.pos, lx->cur.len, "expected ')'");
    it->agg = (enum q_agg)a;
    it->metric = (enum q_metric)k;
    it->pos = t.pos;
    it->len = lx->cur.pos + 1 - t.pos;
    return mks_q_lex_next(lx);
}

void mks_query_free(struct mks_query *q)
{
    if (!q)
        return;
    mks_pred_free(q->where);
    free(q);
}

/* ---- the clauses of queries and probes ------------------------------------------ */

int mks_q_parse_clauses(struct q_lexer *lx, const struct q_clauses *c)
{
    struct mks_query_error *e = lx->e;
    const char *text = lx->s;
    int rc;
    for (;;) {
        if (*c->n_aggs == c->max_aggs)
            return mks_q_err(e, lx->cur.pos, lx->cur.len, "at most %d aggregates%s", c->max_aggs,
                             c->aggs_in);
        if ((rc = c->parse_agg(lx, (*c->n_aggs)++, c->arg)))
            return rc;
        if (lx->cur.kind != T_COMMA)
            break;
        if ((rc = mks_q_lex_next(lx)))
            return rc;
    }
    bool seen_by = false, seen_where = false, seen_limit = false;
    while (lx->cur.kind == T_IDENT) {
        struct q_tok kw = lx->cur;
        if (!strcmp(kw.text, "by") && !seen_by) {
            seen_by = true;
            do {
                if ((rc = mks_q_lex_next(lx)))
                    return rc;
                int f = lx->cur.kind == T_IDENT ? mks_q_field_lookup(lx->cur.text) : -1;
                if ((rc = c->check_group(lx, f, c->arg)))
                    return rc;
                int n = *c->n_groups;
                if (n == c->max_groups)
                    return mks_q_err(e, lx->cur.pos, lx->cur.len, "at most %d group fields",
                                     c->max_groups);
                for (int i = 0; c->unique_groups && i < n; i++)
                    if (c->groups[i] == (enum q_field)f)
                        return mks_q_err(e, lx->cur.pos, lx->cur.len, "'%s' is grouped by twice",
                                         lx->cur.text);
                c->gpos[n] = lx->cur.pos, c->glen[n] = lx->cur.len;
                c->groups[n] = (enum q_field)f;
                *c->n_groups = n + 1;
                if ((rc = mks_q_lex_next(lx)))
                    return rc;
            } while (lx->cur.kind == T_COMMA);
        } else if (!strcmp(kw.text, "where") && !seen_where) {
            seen_where = true;
            if ((rc = mks_q_lex_next(lx)) || (rc = mks_q_parse_pred(lx, c->where)))
                return rc;
        } else if (!strcmp(kw.text, "limit") && !seen_limit && c->has_limit) {
            seen_limit = true;
            if ((rc = mks_q_lex_next(lx)))
                return rc;
            if (lx->cur.kind != T_NUM || lx->cur.num <= 0 || lx->cur.num > 1000000)
                return mks_q_err(e, lx->cur.pos, lx->cur.len, "limit wants a number 1..1000000");
            *c->limit = lx->cur.num;
            if ((rc = mks_q_lex_next(lx)))
                return rc;
        } else {
            break;
        }
    }
    if (lx->cur.kind == T_END)
        return 0;
    if (c->no_limit && lx->cur.kind == T_IDENT && !strcmp(lx->cur.text, "limit"))
        return mks_q_err(e, lx->cur.pos, lx->cur.len, "%s", c->no_limit);
    return mks_q_err(e, lx->cur.pos, lx->cur.len, "unexpected '%.*s': expected %s the end",
                     lx->cur.len, text + lx->cur.pos, c->expected);
}

/* ---- parsing a query -------------------------------------------------------------- */

static int query_agg(struct q_lexer *lx, int i, void *arg)
{
    return parse_agg(lx, &((struct mks_query *)arg)->aggs[i]);
}

/* Store queries group by what the store keeps per row. */
static int query_group(struct q_lexer *lx, int f, void *arg)
{
    (void)arg;
    if (f < 0 || !mks_q_fields[f].sql || f == F_TIME || f == F_COMM_GEN)
        return mks_q_err(lx->e, lx->cur.pos, lx->cur.len,
                         "cannot group by '%.*s' (rank, class, step, req_gen, epoch, worker,"
                         " peer)",
                         lx->cur.len, lx->s + lx->cur.pos);
    return 0;
}

int mks_query_parse(const char *text, struct mks_query **q_p, struct mks_query_error *e)
{
    if (!text || !q_p)
        return mks_q_err(e, 0, 1, "no query");
    struct q_lexer lx;
    int rc = mks_q_lexer_init(&lx, text, e);
    if (rc)
        return rc;
    struct mks_query *q = calloc(1, sizeof(*q));
    if (!q)
        return -ENOMEM;
    q->limit = 10000;
    const struct q_clauses c = {
        .max_aggs = Q_MAX_AGGS,
        .aggs_in = "",
        .parse_agg = query_agg,
        .max_groups = Q_MAX_GROUPS,
        .check_group = query_group,
        .has_limit = true,
        .expected = "',', by, where, limit or",
        .arg = q,
        .n_aggs = &q->n_aggs,
        .groups = q->groups,
        .gpos = q->gpos,
        .glen = q->glen,
        .n_groups = &q->n_groups,
        .where = &q->where,
        .limit = &q->limit,
    };
    if ((rc = mks_q_parse_clauses(&lx, &c))) {
        mks_query_free(q);
        return rc;
    }
    *q_p = q;
    return 0;
}

/*
 * Communication generation ids: encoding, decoding and the text form.  The bit
 * layout is documented in commid.h; the shifts below are its only other copy.
 */
#include "mkscope/commid.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KIND_SHIFT 62
#define CH_SHIFT   56
#define SRC_SHIFT  48
#define DST_SHIFT  40
#define STEP_SHIFT 20
#define OP_SHIFT   8

#define NCCL_FUNC_SHIFT 58
#define NCCL_COMM_SHIFT 36
#define NCCL_COMM_MASK  ((1u << MKS_COMMID_NCCL_COMM_BITS) - 1u)

static const char *const nccl_func_names[MKS_NCCL_FUNC_COUNT] = {
    "Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce", "SendRecv",
    "Send",      "Recv",   "AlltoAll",  "Scatter",       "Gather",
};

static int is_graph_kind(uint32_t kind)
{
    return kind == MKS_COMMID_STEP || kind == MKS_COMMID_REQ;
}

uint32_t mks_commid_nccl_comm_fold(uint64_t comm_hash)
{
    /* xor-fold all 64 bits so that communicators differing anywhere in the
     * hash still differ in the fold with high probability */
    uint64_t h = comm_hash;
    h ^= h >> 44;
    h ^= h >> 22;
    return (uint32_t)(h & NCCL_COMM_MASK);
}

int mks_commid_make(const struct mks_commid_fields *f, uint64_t *id_p)
{
    if (!f || !id_p)
        return -EINVAL;
    if (is_graph_kind(f->kind)) {
        if (f->channel >= MKS_COMMID_CHANNELS || f->src_rank >= MKS_COMMID_RANKS ||
            f->dst_rank >= MKS_COMMID_RANKS || f->op >= MKS_COMMID_OPS || f->seq >= MKS_COMMID_SEQS)
            return -ERANGE;
        *id_p = ((uint64_t)f->kind << KIND_SHIFT) | ((uint64_t)f->channel << CH_SHIFT) |
                ((uint64_t)f->src_rank << SRC_SHIFT) | ((uint64_t)f->dst_rank << DST_SHIFT) |
                ((uint64_t)(f->step % MKS_COMMID_STEP_WRAP) << STEP_SHIFT) |
                ((uint64_t)f->op << OP_SHIFT) | f->seq;
        return 0;
    }
    if (f->kind == MKS_COMMID_NCCL) {
        if (f->channel >= MKS_NCCL_FUNC_COUNT || f->step > NCCL_COMM_MASK || f->src_rank ||
            f->dst_rank || f->op)
            return -ERANGE;
        *id_p = ((uint64_t)MKS_COMMID_NCCL << KIND_SHIFT) |
                ((uint64_t)f->channel << NCCL_FUNC_SHIFT) |
                ((uint64_t)f->step << NCCL_COMM_SHIFT) | (f->seq % MKS_COMMID_NCCL_SEQ_WRAP);
        return 0;
    }
    return -EINVAL;
}

int mks_commid_decode(uint64_t id, struct mks_commid_fields *f_p)
{
    struct mks_commid_fields f = {.kind = mks_commid_kind(id)};

    if (!f_p)
        return -EINVAL;
    if (is_graph_kind(f.kind)) {
        f.channel = (uint32_t)(id >> CH_SHIFT) & (MKS_COMMID_CHANNELS - 1u);
        f.src_rank = (uint32_t)(id >> SRC_SHIFT) & (MKS_COMMID_RANKS - 1u);
        f.dst_rank = (uint32_t)(id >> DST_SHIFT) & (MKS_COMMID_RANKS - 1u);
        f.step = (uint32_t)(id >> STEP_SHIFT) & (MKS_COMMID_STEP_WRAP - 1u);
        f.op = (uint32_t)(id >> OP_SHIFT) & (MKS_COMMID_OPS - 1u);
        f.seq = id & (MKS_COMMID_SEQS - 1u);
    } else if (f.kind == MKS_COMMID_NCCL) {
        f.channel = (uint32_t)(id >> NCCL_FUNC_SHIFT) & 0xfu;
        if (f.channel >= MKS_NCCL_FUNC_COUNT)
            return -EINVAL;
        f.step = (uint32_t)(id >> NCCL_COMM_SHIFT) & NCCL_COMM_MASK;
        f.seq = id & (MKS_COMMID_NCCL_SEQ_WRAP - 1u);
    } else {
        return -EINVAL;
    }
    *f_p = f;
    return 0;
}

static uint64_t make_graph(uint32_t kind, uint32_t channel, uint32_t src, uint32_t dst,
                           uint32_t step, uint32_t op, uint32_t seq)
{
    struct mks_commid_fields f = {.kind = kind, .channel = channel, .src_rank = src,
                                  .dst_rank = dst, .step = step, .op = op, .seq = seq};
    uint64_t id;

    return mks_commid_make(&f, &id) == 0 ? id : 0;
}

uint64_t mks_commid_for_transfer(uint32_t channel, uint32_t src_rank, uint32_t dst_rank,
                                 uint32_t step, uint32_t op, uint32_t seq)
{
    return make_graph(MKS_COMMID_STEP, channel, src_rank, dst_rank, step, op, seq);
}

uint64_t mks_commid_for_request(uint32_t channel, uint32_t src_rank, uint32_t dst_rank,
                                uint64_t req_gen, uint32_t op, uint32_t seq)
{
    return make_graph(MKS_COMMID_REQ, channel, src_rank, dst_rank,
                      (uint32_t)(req_gen % MKS_COMMID_STEP_WRAP), op, seq);
}

uint64_t mks_commid_for_nccl(uint64_t comm_hash, uint32_t func, uint64_t seq)
{
    struct mks_commid_fields f = {.kind = MKS_COMMID_NCCL, .channel = func,
                                  .step = mks_commid_nccl_comm_fold(comm_hash), .seq = seq};
    uint64_t id;

    return mks_commid_make(&f, &id) == 0 ? id : 0;
}

static struct mks_commid_fields decoded(uint64_t id)
{
    struct mks_commid_fields f = {0};

    (void)mks_commid_decode(id, &f);
    return f;
}

uint32_t mks_commid_channel(uint64_t id) { return decoded(id).channel; }
uint32_t mks_commid_src_rank(uint64_t id) { return decoded(id).src_rank; }
uint32_t mks_commid_dst_rank(uint64_t id) { return decoded(id).dst_rank; }
uint32_t mks_commid_step(uint64_t id) { return decoded(id).step; }
uint32_t mks_commid_op(uint64_t id) { return decoded(id).op; }
uint64_t mks_commid_seq(uint64_t id) { return decoded(id).seq; }

const char *mks_commid_nccl_func_name(uint32_t func)
{
    return func < MKS_NCCL_FUNC_COUNT ? nccl_func_names[func] : NULL;
}

int mks_commid_nccl_func_from_name(const char *name)
{
    if (!name)
        return -1;
    for (int i = 0; i < (int)MKS_NCCL_FUNC_COUNT; i++)
        if (strcmp(name, nccl_func_names[i]) == 0)
            return i;
    return -1;
}

int mks_commid_format(uint64_t id, char *buf, size_t len)
{
    struct mks_commid_fields f;

    if (mks_commid_decode(id, &f) != 0) {
        if (buf && len)
            snprintf(buf, len, "invalid comm id 0x%016" PRIx64, id);
        return -EINVAL;
    }
    if (f.kind == MKS_COMMID_NCCL)
        return snprintf(buf, len, "nccl %s comm 0x%06" PRIx32 " seq %" PRIu64,
                        nccl_func_names[f.channel], f.step, f.seq);
    return snprintf(buf, len, "comm %" PRIu32 " %s %" PRIu32 " op %" PRIu32 " seq %" PRIu64
                    " from rank %" PRIu32 " to rank %" PRIu32,
                    f.channel, f.kind == MKS_COMMID_STEP ? "step" : "req", f.step, f.op, f.seq,
                    f.src_rank, f.dst_rank);
}

/* Text scanning: each token is a word or an unsigned number; strtoull alone
 * would accept signs and leading spaces, which the text form never has. */
static const char *skip_spaces(const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

static int expect_word(const char **pp, const char *word)
{
    const char *p = skip_spaces(*pp);
    size_t n = strlen(word);

    if (strncmp(p, word, n) != 0 || (p[n] != ' ' && p[n] != '\t' && p[n] != '\0'))
        return -EINVAL;
    *pp = p + n;
    return 0;
}

static int read_number(const char **pp, int base, uint64_t max, uint64_t *v_p)
{
    const char *p = skip_spaces(*pp);
    char *end;
    uint64_t v;

    if (base == 16) {
        if (p[0] != '0' || (p[1] != 'x' && p[1] != 'X'))
            return -EINVAL;
        p += 2;
        if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X'))
            return -EINVAL; /* strtoull would skip a second prefix */
    }
    if (!((*p >= '0' && *p <= '9') || (base == 16 && ((*p >= 'a' && *p <= 'f') ||
                                                      (*p >= 'A' && *p <= 'F')))))
        return -EINVAL;
    errno = 0;
    v = strtoull(p, &end, base);
    if (errno == ERANGE || v > max)
        return -ERANGE;
    if (*end != ' ' && *end != '\t' && *end != '\0')
        return -EINVAL;
    *v_p = v;
    *pp = end;
    return 0;
}

static int parse_nccl(const char *p, uint64_t *id_p)
{
    struct mks_commid_fields f = {.kind = MKS_COMMID_NCCL};
    char name[32];
    size_t n = 0;
    uint64_t comm, seq;
    int func, err;

    p = skip_spaces(p);
    while (p[n] && p[n] != ' ' && p[n] != '\t' && n < sizeof(name) - 1) {
        name[n] = p[n];
        n++;
    }
    name[n] = '\0';
    func = mks_commid_nccl_func_from_name(name);
    if (func < 0)
        return -EINVAL;
    p += n;
    if ((err = expect_word(&p, "comm")) || (err = read_number(&p, 16, NCCL_COMM_MASK, &comm)) ||
        (err = expect_word(&p, "seq")) ||
        (err = read_number(&p, 10, MKS_COMMID_NCCL_SEQ_WRAP - 1u, &seq)))
        return err;
    if (*skip_spaces(p) != '\0')
        return -EINVAL;
    f.channel = (uint32_t)func;
    f.step = (uint32_t)comm;
    f.seq = seq;
    return mks_commid_make(&f, id_p);
}

int mks_commid_parse(const char *text, uint64_t *id_p)
{
    struct mks_commid_fields f = {0};
    const char *p = text;
    uint64_t ch, step, op, seq, src, dst;
    int err;

    if (!text || !id_p)
        return -EINVAL;
    if (expect_word(&p, "nccl") == 0)
        return parse_nccl(p, id_p);
    if ((err = expect_word(&p, "comm")) ||
        (err = read_number(&p, 10, MKS_COMMID_CHANNELS - 1u, &ch)))
        return err;
    if (expect_word(&p, "step") == 0)
        f.kind = MKS_COMMID_STEP;
    else if (expect_word(&p, "req") == 0)
        f.kind = MKS_COMMID_REQ;
    else
        return -EINVAL;
    if ((err = read_number(&p, 10, MKS_COMMID_STEP_WRAP - 1u, &step)) ||
        (err = expect_word(&p, "op")) || (err = read_number(&p, 10, MKS_COMMID_OPS - 1u, &op)) ||
        (err = expect_word(&p, "seq")) || (err = read_number(&p, 10, MKS_COMMID_SEQS - 1u, &seq)) ||
        (err = expect_word(&p, "from")) || (err = expect_word(&p, "rank")) ||
        (err = read_number(&p, 10, MKS_COMMID_RANKS - 1u, &src)) || (err = expect_word(&p, "to")) ||
        (err = expect_word(&p, "rank")) || (err = read_number(&p, 10, MKS_COMMID_RANKS - 1u, &dst)))
        return err;
    if (*skip_spaces(p) != '\0')
        return -EINVAL;
    f.channel = (uint32_t)ch;
    f.step = (uint32_t)step;
    f.op = (uint32_t)op;
    f.seq = seq;
    f.src_rank = (uint32_t)src;
    f.dst_rank = (uint32_t)dst;
    return mks_commid_make(&f, id_p);
}

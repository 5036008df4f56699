/*
 * Communication generation ids: one 64-bit name for one logical transfer that
 * every rank computes on its own from the task graph, without talking.
 *
 * The producer stamps the id on the remote event it releases
 * (mks_hook_ctx.comm_gen at MKS_EV_DEP_RELEASE / MKS_EV_COMM_END); the consumer
 * carries the same id in its wait context (MKS_EV_DEP_WAIT_BEGIN/END).  The
 * collector joins the two on the id.  0 means "no communication" in the hook
 * context, so no valid id is 0 (the kind field is never 0).
 *
 * Bit layout (bit 63 is the most significant):
 *
 *   kind STEP (1) and REQ (2), transfers of a megakernel task graph:
 *     63..62 kind | 61..56 channel (6) | 55..48 src rank (8) | 47..40 dst rank (8)
 *     | 39..20 step or request generation (20) | 19..8 op (12) | 7..0 seq (8)
 *   kind NCCL (3), collectives of kernel-per-operator runs:
 *     63..62 kind | 61..58 NCCL function (4) | 57..36 communicator (22) | 35..0 seq (36)
 *
 * Graph-derived inputs (what producer and consumer must both know):
 *   channel  the communication channel the graph declares (MoE dispatch, MoE
 *            combine, tensor-parallel all-reduce, KV handoff, ...);
 *   src/dst  the producing and the consuming rank of the transfer;
 *   step     the decode step (kind STEP), or the request generation for
 *            transfers owned by one request, not a step (kind REQ);
 *   op       the operator's index in the step's graph, e.g.
 *            layer * ops_per_layer + op_in_layer;
 *   seq      the transfer's index within (channel, src, dst, step, op): a chunk
 *            number, a local expert's block, a request slot.  For tasks created
 *            at run time from data (MoE token counts, requests joining) it is
 *            numbered from data both sides hold (the counts the consumer is told),
 *            never from arrival order.
 * The step field wraps modulo 2^20: two ids collide only if they are 2^20 steps
 * apart, far longer than any join window.  Every other field is checked: a
 * value that does not fit is an error, never silently truncated.
 *
 * NCCL ids: communicator is a 22-bit fold of NCCL's 64-bit commHash (the same
 * on every rank of a communicator), function is enum mks_commid_nccl_func and
 * seq is NCCL's per-function collective sequence number (same on every rank
 * because all ranks issue the same collectives in the same order).
 *
 * Text form (mks_commid_format, mks_commid_parse round-trip):
 *   "comm 3 step 37 op 4 seq 12 from rank 1 to rank 2"
 *   "comm 3 req 9 op 0 seq 0 from rank 0 to rank 5"
 *   "nccl AllReduce comm 0x2a3b1c seq 12"
 */
#ifndef MKSCOPE_COMMID_H
#define MKSCOPE_COMMID_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum mks_commid_kind {
    MKS_COMMID_NONE = 0, /* not an id (0 in the hook context) */
    MKS_COMMID_STEP = 1, /* graph transfer of one decode step */
    MKS_COMMID_REQ = 2,  /* graph transfer owned by one request generation */
    MKS_COMMID_NCCL = 3, /* NCCL collective or point-to-point call */
};

/* Field limits (exclusive maxima) of the STEP/REQ layout. */
#define MKS_COMMID_CHANNELS   64u
#define MKS_COMMID_RANKS      256u
#define MKS_COMMID_STEP_WRAP  (1u << 20)
#define MKS_COMMID_OPS        4096u
#define MKS_COMMID_SEQS       256u
/* Field limits of the NCCL layout. */
#define MKS_COMMID_NCCL_COMM_BITS 22u
#define MKS_COMMID_NCCL_SEQ_WRAP  (1ull << 36)

/* NCCL functions, in NCCL's own numbering (ncclFunc_t). */
enum mks_commid_nccl_func {
    MKS_NCCL_BROADCAST = 0,
    MKS_NCCL_REDUCE = 1,
    MKS_NCCL_ALLGATHER = 2,
    MKS_NCCL_REDUCESCATTER = 3,
    MKS_NCCL_ALLREDUCE = 4,
    MKS_NCCL_SENDRECV = 5,
    MKS_NCCL_SEND = 6,
    MKS_NCCL_RECV = 7,
    MKS_NCCL_ALLTOALL = 8,
    MKS_NCCL_SCATTER = 9,
    MKS_NCCL_GATHER = 10,
    MKS_NCCL_FUNC_COUNT = 11
};

/* The decoded fields.  For STEP/REQ ids `step` is the step or request
 * generation (already reduced modulo MKS_COMMID_STEP_WRAP when decoded); for
 * NCCL ids channel is the function, step the communicator fold, seq the
 * collective sequence number, and src/dst/op are 0. */
struct mks_commid_fields {
    uint32_t kind; /* enum mks_commid_kind */
    uint32_t channel;
    uint32_t src_rank;
    uint32_t dst_rank;
    uint32_t step;
    uint32_t op;
    uint64_t seq;
};

/* Encode fields into *id_p.  Returns 0, -EINVAL for an unknown kind or NULL
 * argument, -ERANGE when a field does not fit (the step of STEP/REQ ids wraps
 * instead).  *id_p is written only on success. */
int mks_commid_make(const struct mks_commid_fields *f, uint64_t *id_p);

/* Decode.  Returns 0, or -EINVAL when id is not a valid id (kind 0, or a NCCL
 * function out of range); *f_p is written only on success. */
int mks_commid_decode(uint64_t id, struct mks_commid_fields *f_p);

/* The id of a graph transfer in decode step `step` (kind STEP), derived from
 * the graph inputs described above.  Returns 0 (no id) when a field is out of
 * range.  Producer and consumer call it with the same arguments. */
uint64_t mks_commid_for_transfer(uint32_t channel, uint32_t src_rank, uint32_t dst_rank,
                                 uint32_t step, uint32_t op, uint32_t seq);

/* The id of a transfer owned by request generation `req_gen` (kind REQ). */
uint64_t mks_commid_for_request(uint32_t channel, uint32_t src_rank, uint32_t dst_rank,
                                uint64_t req_gen, uint32_t op, uint32_t seq);

/* The id of NCCL collective number `seq` of function `func` on the
 * communicator whose NCCL commHash is comm_hash.  0 if func is out of range. */
uint64_t mks_commid_for_nccl(uint64_t comm_hash, uint32_t func, uint64_t seq);

/* The 22-bit communicator fold used in NCCL ids. */
uint32_t mks_commid_nccl_comm_fold(uint64_t comm_hash);

/* Field accessors; each returns 0 for an id of the wrong kind. */
static inline uint32_t mks_commid_kind(uint64_t id) { return (uint32_t)(id >> 62); }
uint32_t mks_commid_channel(uint64_t id);
uint32_t mks_commid_src_rank(uint64_t id);
uint32_t mks_commid_dst_rank(uint64_t id);
uint32_t mks_commid_step(uint64_t id);
uint32_t mks_commid_op(uint64_t id);
uint64_t mks_commid_seq(uint64_t id);

/* Name of an NCCL function ("AllReduce"), NULL when out of range; and back
 * (-1 when unknown).  Names are NCCL's. */
const char *mks_commid_nccl_func_name(uint32_t func);
int mks_commid_nccl_func_from_name(const char *name);

/* Longest text mks_commid_format writes, with the terminating NUL. */
#define MKS_COMMID_TEXT_MAX 96u

/* Human-readable form of id into buf (always NUL-terminated when len > 0).
 * Returns the length the full text has, like snprintf, or -EINVAL for an
 * invalid id (then buf holds "invalid comm id 0x..."). */
int mks_commid_format(uint64_t id, char *buf, size_t len);

/* Parse the text mks_commid_format writes (extra spaces allowed).  Returns 0,
 * or -EINVAL for text that is not an id, -ERANGE for a field out of range;
 * *id_p is written only on success. */
int mks_commid_parse(const char *text, uint64_t *id_p);

#ifdef __cplusplus
}
#endif

#endif /* MKSCOPE_COMMID_H */

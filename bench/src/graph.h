/*
 * The layout of a decode step's graph that the CPU backend (workload.c) and
 * the CUDA megakernel share: the operators of a layer, in order, whose
 * events are numbered 1 + layer * BW_OPS + op, and the channels of the
 * all-reduce transfers.  Both must agree: channel and op go into every
 * communication generation id, which producer and consumer compute on their
 * own, and the collector compares a transfer with the same one in other
 * steps by them.  C and CUDA include this file.
 */
#ifndef MKS_BENCH_GRAPH_H
#define MKS_BENCH_GRAPH_H

enum {
    OP_NORM,
    OP_QKV,
    OP_ATTN,
    OP_OPROJ,
    OP_SEND1,
    OP_AR1,
    OP_ROUTER,
    OP_EXPERT,
    OP_COMB,
    OP_SEND2,
    OP_AR2,
    BW_OPS /* operators per layer */
};

/* Channels of the graph's transfers (comm-ids channel field). */
#define BW_CH_AR_ATTN 1u
#define BW_CH_AR_MOE  2u

#endif

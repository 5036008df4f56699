/*
 * The collector's ingest path: agents' requests on the ingest socket, read
 * in batches, stored in one transaction per batch and answered only once
 * that transaction has committed, so that nothing acknowledged can be lost
 * by a crash or a failed commit (an agent whose request got no answer sends
 * it again, and the store keeps one copy of each summary).
 *
 * The socket is a raw-mode NN_REP (AF_SP_RAW): nn_recvmsg gives each
 * request's routing header as control data and nn_sendmsg with that header
 * answers it, so many requests can be read before any is answered, which a
 * cooked REP socket does not allow.  A batch is whatever waits on the socket
 * when the loop gets to it, up to MKS_INGEST_BATCH messages or
 * MKS_INGEST_BATCH_NS of work: at low load one message, under load as many
 * as came in meanwhile, with no timer adding latency.
 *
 * Pressure: over the last half second, the share of wall time the loop
 * spent ingesting and the messages a batch held (agents waiting for an
 * ack).  Every Ack carries it as a level (0 keeping up, 1 busy, 2 behind:
 * docs/wire.md), which agents use to send less detail before their
 * summaries queue up.
 */
#ifndef MKS_COLLECTOR_INGEST_H
#define MKS_COLLECTOR_INGEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "collector.h"
#include "mkscope/fresh.h"

/* Messages in one transaction at most: bounds the batch's memory and the
 * time its first message waits for its ack. */
#define MKS_INGEST_BATCH 512u
/* Work in one batch at most, in ns (the p99 ack latency target is 100 ms). */
#define MKS_INGEST_BATCH_NS 20000000ull

struct mks_ingest;

struct mks_ingest_opts {
    size_t sz;                      /* sizeof(struct mks_ingest_opts) */
    int sock;                       /* raw NN_REP socket, bound */
    struct mks_store *st;           /* the loop's (writing) store */
    const struct mks_wire_key *key; /* NULL: no MAC */
    struct mks_ingest_stats *stats;
    bool verbose;
    /* After the commit, for each stored envelope (may be NULL). */
    void (*on_stored)(void *arg, const mks_envelope *env);
    void *arg;
    /* Nonces of what was accepted (mkscope/fresh.h), shared with the loop's
     * other receivers; NULL: none kept. */
    struct mks_fresh *fresh;
};

int mks_ingest_create(const struct mks_ingest_opts *opts, struct mks_ingest **ing_p, char *err,
                      size_t errlen);
void mks_ingest_destroy(struct mks_ingest *ing); /* accepts NULL */

/* Read one batch, store it, answer it.  Returns the messages handled (0:
 * none was waiting). */
int mks_ingest_run(struct mks_ingest *ing);

/* The pressure level the Acks carry now (0, 1 or 2). */
uint32_t mks_ingest_pressure(const struct mks_ingest *ing);

#endif /* MKS_COLLECTOR_INGEST_H */

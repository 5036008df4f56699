/*
 * The collector's CLI server: mkscope requests are answered off the ingest
 * loop, so that no query, SQL statement or diagnosis delays a summary's ack.
 *
 * A dispatcher thread owns the CLI socket (nanomsg REP in raw mode, so that
 * several requests can be in progress at once, each reply routed back by its
 * own header).  Read-only requests go to a few worker threads, each with
 * its own read-only connection to the store (WAL: readers never block the
 * writer, nor the writer them).  Requests that write the store (attach,
 * detach, trigger add/rm) or need the survey socket are handed to the
 * collector's loop through an eventfd and answered once the loop is done.
 * When every worker is busy and the queue is full, a request is answered
 * at once with MKS_EXIT_BUSY instead of waiting.
 */
#ifndef MKS_COLLECTOR_CLISERV_H
#define MKS_COLLECTOR_CLISERV_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "collector.h"
#include "mkscope/fresh.h"

struct mks_cliserv;
struct mks_cliserv_req;

struct mks_cliserv_opts {
    size_t sz;                       /* sizeof(struct mks_cliserv_opts) */
    const char *url;                 /* CLI socket to bind */
    const char *db_path;             /* the store's file, opened read-only by each worker */
    const struct mks_wire_key *key;  /* MAC key of requests and replies, NULL: none */
    struct mks_ingest_stats *stats;  /* counters shared with the loop (atomic) */
    unsigned workers;                /* threads answering read-only requests; 0: 2 */
    unsigned queue;                  /* requests waiting for a worker; 0: 16 */
    uint64_t limit_ns;               /* work limit of one request; 0: MKS_SERVE_LIMIT_NS */
    /* Freshness of requests (window, replay cache), as for the ingest
     * loop; NULL: mks_fresh's defaults, nothing required. */
    const struct mks_fresh_opts *fresh;
};

/* Bind the socket, open the workers' connections and start the threads. */
int mks_cliserv_start(const struct mks_cliserv_opts *opts, struct mks_cliserv **cs_p, char *err,
                      size_t errlen);
/* Stop the threads (interrupting work in progress) and free; accepts NULL. */
void mks_cliserv_stop(struct mks_cliserv *cs);

/* Readable when requests wait for the loop (mks_cliserv_loop_take). */
int mks_cliserv_loop_fd(const struct mks_cliserv *cs);
/* The next request for the loop, or NULL.  The loop answers each one with
 * mks_cliserv_done, at once or later (a survey, at its deadline). */
struct mks_cliserv_req *mks_cliserv_loop_take(struct mks_cliserv *cs);
const mks_envelope *mks_cliserv_req_env(const struct mks_cliserv_req *r);
/* Answer r (status, a one-line error when status != 0, the JSON answer or
 * NULL; answer's reference is taken over) and give it back. */
void mks_cliserv_done(struct mks_cliserv *cs, struct mks_cliserv_req *r, int status,
                      const char *error, json_t *answer);

/* Whether a verb must run on the loop (it writes the store or surveys). */
int mks_cliserv_needs_loop(const char *verb);

#endif

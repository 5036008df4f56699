/*
 * The collector's UCX endpoint for raw event batches: a ucp listener on a
 * TCP sockaddr that accepts one stream connection per escalating agent and
 * cuts each connection's byte stream into frames (4-byte little-endian
 * length, then an encoded Envelope; docs/agent.md).  The worker's event fd
 * joins the collector's poll loop: no thread of its own.
 */
#ifndef MKS_COLLECTOR_UCX_RX_H
#define MKS_COLLECTOR_UCX_RX_H

#include <stddef.h>
#include <stdint.h>

struct mks_ucxrx;

/* Called with each complete frame's envelope bytes. */
typedef void (*mks_ucxrx_frame_fn)(void *arg, const void *buf, size_t len);

/* Listen on host:port (port 0: any free port).  Returns 0, or a negative
 * errno with one line in err. */
int mks_ucxrx_create(const char *host, uint16_t port, struct mks_ucxrx **rx_p, char *err,
                     size_t errlen);
void mks_ucxrx_destroy(struct mks_ucxrx *rx); /* accepts NULL */

/* The port actually listened on. */
uint16_t mks_ucxrx_port(const struct mks_ucxrx *rx);

/* The fd to poll for POLLIN. */
int mks_ucxrx_fd(const struct mks_ucxrx *rx);

/* Make progress: accept connections, read, deliver whole frames to fn,
 * drop connections that closed or sent a bad frame.  Returns 1 when the
 * worker is armed (the caller may sleep in poll on the fd), 0 when more
 * work is pending (poll with a zero timeout and call again). */
int mks_ucxrx_progress(struct mks_ucxrx *rx, mks_ucxrx_frame_fn fn, void *arg);

/* Frames delivered, connections accepted, and connections dropped for a
 * bad frame, for metrics and tests. */
void mks_ucxrx_counts(const struct mks_ucxrx *rx, uint64_t *frames, uint64_t *conns, uint64_t *bad);

#endif

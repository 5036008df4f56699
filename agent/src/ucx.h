/*
 * Raw event batches to the collector over UCX (ucp stream API, a TCP
 * sockaddr connection: TCP on loopback in tests, RDMA where UCX finds it).
 *
 * Framing on the stream: a 4-byte little-endian length, then that many bytes
 * of an encoded mkscope.v1 Envelope (a RawEventBatch).  The agent drives the
 * UCX worker from its event loop (agt_ucx_progress); UCX may run its own
 * progress thread for connection management, the agent's logic does not.
 */
#ifndef MKS_AGENT_UCX_H
#define MKS_AGENT_UCX_H

#include <stddef.h>
#include <stdint.h>

struct agt_ucx;

/* Connect to "host:port".  err gets one line on failure. */
int agt_ucx_connect(const char *endpoint, struct agt_ucx **u_p, char *err, size_t err_len);

/* Queue one framed message; the buffer is copied.  -ECONNRESET once the
 * connection has failed. */
int agt_ucx_send(struct agt_ucx *u, const void *buf, size_t len);

/* Drive sends and connection state; call often while messages are pending. */
void agt_ucx_progress(struct agt_ucx *u);

/* Sends not completed yet. */
size_t agt_ucx_pending(const struct agt_ucx *u);
int agt_ucx_failed(const struct agt_ucx *u);

/* Non-blocking: 1 once everything sent has reached the collector (a UCX
 * flush completed), the connection failed, or timeout_ms passed since the
 * first call; 0 while the flush is in flight.  Call from the event loop
 * until it says 1, then destroy: a collector busy storing other ranks'
 * batches may take seconds, and closing before would lose the last ones. */
int agt_ucx_flushed(struct agt_ucx *u, unsigned timeout_ms);

/* Wait up to timeout_ms for pending sends, close and free.  Accepts NULL. */
void agt_ucx_destroy(struct agt_ucx *u, unsigned timeout_ms);

#endif /* MKS_AGENT_UCX_H */

/*
 * The agent's request/reply link to the collector's ingest socket (nanomsg
 * NN_REQ).  One request is in flight at a time, as REQ allows; the link never
 * blocks: sends use NN_DONTWAIT and replies are read when the socket's
 * receive fd polls readable.  A request with no reply after timeout_ms is
 * reported as timed out (after each timeout in a row the next request waits
 * twice as long, up to 4x timeout_ms; after a reply the next one waits
 * twice as long as that reply took, at least timeout_ms and at most 16x),
 * and the agent
 * decides what to resend (nanomsg's own resend is switched off so that every
 * byte sent is one the agent chose and counted).
 */
#ifndef MKS_AGENT_LINK_H
#define MKS_AGENT_LINK_H

#include <stddef.h>
#include <stdint.h>

struct agt_link;

int agt_link_create(const char *url, uint64_t timeout_ms, struct agt_link **link_p);
void agt_link_destroy(struct agt_link *link); /* accepts NULL */

int agt_link_fd(const struct agt_link *link); /* readable when a reply may be there */
int agt_link_busy(const struct agt_link *link);

/* Send a request: 0, or -EAGAIN when nanomsg cannot take it now, or another
 * negative errno. */
int agt_link_send(struct agt_link *link, const void *buf, size_t len, uint64_t now_ns);

/* Receive a reply if one is there: 0 with *buf_p (free with
 * agt_link_msg_free), -EAGAIN when none.  now_ns times the reply. */
int agt_link_recv(struct agt_link *link, void **buf_p, size_t *len_p, uint64_t now_ns);

/* When the request answered last was sent (its reply's latency). */
uint64_t agt_link_sent_ns(const struct agt_link *link);
void agt_link_msg_free(void *buf);

/* True (once) when the request in flight has waited longer than the timeout;
 * the link is then idle again. */
int agt_link_expired(struct agt_link *link, uint64_t now_ns);

/* Milliseconds until the request in flight expires (-1: nothing in flight). */
int agt_link_wait_ms(const struct agt_link *link, uint64_t now_ns);

#endif /* MKS_AGENT_LINK_H */

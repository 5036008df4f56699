/* nanomsg REQ link to the collector (see link.h). */
#include "link.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <nanomsg/nn.h>
#include <nanomsg/reqrep.h>

#include "log.h"
#include "mkscope/wire.h"

/* A request waits at most this many timeouts for its reply, when earlier
 * replies took that long. */
#define MAX_WAIT_FACTOR 16

struct agt_link {
    int sock;
    int rcvfd;
    uint64_t timeout_ns; /* as configured */
    uint64_t wait_ns;    /* the current request's: doubled after each expiry */
    uint64_t sent_ns;
    int busy;
};

int agt_link_create(const char *url, uint64_t timeout_ms, struct agt_link **link_p)
{
    struct agt_link *l = calloc(1, sizeof(*l));
    if (!l)
        return -ENOMEM;
    l->sock = -1;
    l->timeout_ns = (timeout_ms ? timeout_ms : 1000) * 1000000ull;
    l->wait_ns = l->timeout_ns;
    l->sock = nn_socket(AF_SP, NN_REQ);
    if (l->sock < 0) {
        int err = -nn_errno();
        agt_log_err("collector link: nn_socket: %s", nn_strerror(-err));
        free(l);
        return err;
    }
    int resend = INT_MAX; /* resends are the agent's decision */
    int linger = 0;
    /* An ack may carry an attach with its object (8 MiB): nanomsg's default
     * 1 MiB limit would drop it without a word. */
    int maxsz = (int)MKS_WIRE_MAX_MSG + 1024;
    size_t sz = sizeof(l->rcvfd);
    if (nn_setsockopt(l->sock, NN_REQ, NN_REQ_RESEND_IVL, &resend, sizeof(resend)) < 0 ||
        nn_setsockopt(l->sock, NN_SOL_SOCKET, NN_RCVMAXSIZE, &maxsz, sizeof(maxsz)) < 0 ||
        nn_setsockopt(l->sock, NN_SOL_SOCKET, NN_LINGER, &linger, sizeof(linger)) < 0 ||
        nn_getsockopt(l->sock, NN_SOL_SOCKET, NN_RCVFD, &l->rcvfd, &sz) < 0) {
        int err = -nn_errno();
        agt_log_err("collector link: socket options: %s", nn_strerror(-err));
        agt_link_destroy(l);
        return err;
    }
    if (nn_connect(l->sock, url) < 0) {
        int err = -nn_errno();
        agt_log_err("collector link: cannot use '%s': %s", url, nn_strerror(-err));
        agt_link_destroy(l);
        return err;
    }
    *link_p = l;
    return 0;
}

void agt_link_destroy(struct agt_link *l)
{
    if (!l)
        return;
    if (l->sock >= 0)
        nn_close(l->sock);
    free(l);
}

int agt_link_fd(const struct agt_link *l)
{
    return l->rcvfd;
}

int agt_link_busy(const struct agt_link *l)
{
    return l->busy;
}

int agt_link_send(struct agt_link *l, const void *buf, size_t len, uint64_t now_ns)
{
    if (nn_send(l->sock, buf, len, NN_DONTWAIT) < 0) {
        int err = nn_errno();
        if (err == EAGAIN || err == EINTR)
            return -EAGAIN;
        agt_log_err("collector link: send: %s", nn_strerror(err));
        return -err;
    }
    l->busy = 1;
    l->sent_ns = now_ns;
    return 0;
}

int agt_link_recv(struct agt_link *l, void **buf_p, size_t *len_p, uint64_t now_ns)
{
    void *msg = NULL;
    int n = nn_recv(l->sock, &msg, NN_MSG, NN_DONTWAIT);
    if (n < 0) {
        int err = nn_errno();
        if (err == EAGAIN || err == EINTR || err == EFSM)
            return -EAGAIN;
        agt_log_err("collector link: receive: %s", nn_strerror(err));
        return -err;
    }
    l->busy = 0;
    /* The next request may wait twice as long as this one took (at least
     * the timeout): a collector that answers slowly but answers is not taken
     * for gone, which would make the agent register again and again and
     * never get a summary through. */
    uint64_t rtt = now_ns > l->sent_ns ? now_ns - l->sent_ns : 0;
    l->wait_ns = 2 * rtt > l->timeout_ns ? 2 * rtt : l->timeout_ns;
    if (l->wait_ns > MAX_WAIT_FACTOR * l->timeout_ns)
        l->wait_ns = MAX_WAIT_FACTOR * l->timeout_ns;
    *buf_p = msg;
    *len_p = (size_t)n;
    return 0;
}

uint64_t agt_link_sent_ns(const struct agt_link *l)
{
    return l->sent_ns;
}

void agt_link_msg_free(void *buf)
{
    if (buf)
        nn_freemsg(buf);
}

int agt_link_expired(struct agt_link *l, uint64_t now_ns)
{
    if (l->busy && now_ns - l->sent_ns >= l->wait_ns) {
        l->busy = 0;
        /* A collector that is only slow (a loaded node) answers after the
         * timeout; resending at the same pace would cancel every request
         * before its answer came.  Wait longer each time, up to 4x, until
         * an answer arrives (longer only when answers took that long: a
         * collector that restarted is found again soon). */
        if (l->wait_ns < 4 * l->timeout_ns)
            l->wait_ns *= 2;
        return 1;
    }
    return 0;
}

int agt_link_wait_ms(const struct agt_link *l, uint64_t now_ns)
{
    if (!l->busy)
        return -1;
    uint64_t end = l->sent_ns + l->wait_ns;
    return end <= now_ns ? 0 : (int)((end - now_ns + 999999) / 1000000);
}

/*
 * UCX listener for raw event batches (see ucx_rx.h).
 *
 * Agents connect with the ucp stream API over a sockaddr (client-server)
 * connection and write frames back to back; a stream has no message
 * boundaries, so each connection keeps a buffer of what arrived and cuts
 * complete frames from its front.  A frame longer than the wire limit, or a
 * connection whose peer went away, is closed; whatever complete frames
 * arrived before are still delivered.  The agent closes its connection once
 * the escalation's last batch is sent.
 */
#include "ucx_rx.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ucp/api/ucp.h>

#include "mkscope/netif.h"
#include "mkscope/wire.h"

/* Connections at once: one per escalating rank; more are refused. */
#define MAX_CONNS 1024

struct conn {
    struct conn *next;
    struct mks_ucxrx *rx;
    ucp_ep_h ep;
    uint8_t *buf;
    size_t have, cap;
    bool dead;
};

struct mks_ucxrx {
    ucp_context_h ctx;
    ucp_worker_h worker;
    ucp_listener_h listener;
    int efd;
    uint16_t port;
    struct conn *conns;
    size_t n_conns;
    uint64_t frames, accepted, bad;
};

static void on_ep_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    struct conn *c = arg;
    (void)ep, (void)status;
    /* The peer closed (normal after its last batch) or failed: read what is
     * buffered, then close on the next progress. */
    c->dead = true;
}

static void on_conn(ucp_conn_request_h req, void *arg)
{
    struct mks_ucxrx *rx = arg;
    struct conn *c = rx->n_conns < MAX_CONNS ? calloc(1, sizeof(*c)) : NULL;
    if (!c) {
        fprintf(stderr, "mkscope-collector: UCX: refusing a raw event connection (%zu open)\n",
                rx->n_conns);
        ucp_listener_reject(rx->listener, req);
        return;
    }
    c->rx = rx;
    ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST |
                                        UCP_EP_PARAM_FIELD_ERR_HANDLER |
                                        UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
                          .conn_request = req,
                          .err_mode = UCP_ERR_HANDLING_MODE_PEER,
                          .err_handler = {.cb = on_ep_error, .arg = c}};
    ucs_status_t st = ucp_ep_create(rx->worker, &ep, &c->ep);
    if (st != UCS_OK) {
        fprintf(stderr, "mkscope-collector: UCX: cannot accept a connection: %s\n",
                ucs_status_string(st));
        free(c);
        return;
    }
    c->next = rx->conns;
    rx->conns = c;
    rx->n_conns++;
    rx->accepted++;
}

int mks_ucxrx_create(const char *host, uint16_t port, struct mks_ucxrx **rx_p, char *err,
                     size_t errlen)
{
    struct addrinfo hints = {.ai_family = AF_INET,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE},
                    *ai = NULL;
    char ports[8];
    snprintf(ports, sizeof(ports), "%u", port);
    int gai = getaddrinfo(host, ports, &hints, &ai);
    if (gai != 0) {
        snprintf(err, errlen, "UCX listen address '%s': %s", host, gai_strerror(gai));
        return -EINVAL;
    }
    struct mks_ucxrx *rx = calloc(1, sizeof(*rx));
    if (!rx) {
        freeaddrinfo(ai);
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    rx->efd = -1;
    const char *what = "init";
    ucp_params_t p = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                      .features = UCP_FEATURE_STREAM | UCP_FEATURE_WAKEUP};
    /* UCX's transports open listening sockets of their own on every
     * interface; keep them on the interface of the address we listen on
     * (the one the log names), unless UCX_NET_DEVICES says otherwise. */
    ucp_config_t *cfg = NULL;
    char ifname[64];
    if (!getenv("UCX_NET_DEVICES") &&
        mks_netif_of_addr(ai->ai_addr, ifname, sizeof(ifname)) &&
        ucp_config_read(NULL, NULL, &cfg) == UCS_OK)
        ucp_config_modify(cfg, "NET_DEVICES", ifname);
    ucs_status_t st = ucp_init(&p, cfg, &rx->ctx);
    if (cfg)
        ucp_config_release(cfg);
    if (st == UCS_OK) {
        what = "worker";
        ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE |
                                                UCP_WORKER_PARAM_FIELD_EVENTS,
                                  .thread_mode = UCS_THREAD_MODE_SINGLE,
                                  .events = UCP_WAKEUP_RX | UCP_WAKEUP_TX};
        st = ucp_worker_create(rx->ctx, &wp, &rx->worker);
    }
    if (st == UCS_OK) {
        what = "event fd";
        st = ucp_worker_get_efd(rx->worker, &rx->efd);
    }
    if (st == UCS_OK) {
        what = "listen";
        ucp_listener_params_t lp = {.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
                                                  UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
                                    .sockaddr = {.addr = ai->ai_addr, .addrlen = ai->ai_addrlen},
                                    .conn_handler = {.cb = on_conn, .arg = rx}};
        st = ucp_listener_create(rx->worker, &lp, &rx->listener);
    }
    freeaddrinfo(ai);
    if (st == UCS_OK) {
        what = "listener address";
        ucp_listener_attr_t la = {.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR};
        st = ucp_listener_query(rx->listener, &la);
        if (st == UCS_OK)
            rx->port = ntohs(((const struct sockaddr_in *)&la.sockaddr)->sin_port);
    }
    if (st != UCS_OK) {
        snprintf(err, errlen, "UCX %s on %s:%u: %s", what, host, port,
                 st == UCS_ERR_BUSY ? "port in use" : ucs_status_string(st));
        mks_ucxrx_destroy(rx);
        return st == UCS_ERR_BUSY ? -EADDRINUSE : -EIO;
    }
    *rx_p = rx;
    return 0;
}

static void conn_close(struct conn *c)
{
    if (c->ep) {
        ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                  .flags = UCP_EP_CLOSE_FLAG_FORCE};
        ucs_status_ptr_t r = ucp_ep_close_nbx(c->ep, &rp);
        /* A forced close completes without the peer; the worker finishes
         * it on later progress once the handle is released. */
        if (UCS_PTR_IS_PTR(r))
            ucp_request_free(r);
    }
    free(c->buf);
    free(c);
}

void mks_ucxrx_destroy(struct mks_ucxrx *rx)
{
    if (!rx)
        return;
    while (rx->conns) {
        struct conn *c = rx->conns;
        rx->conns = c->next;
        conn_close(c);
    }
    if (rx->listener)
        ucp_listener_destroy(rx->listener);
    if (rx->worker) {
        while (ucp_worker_progress(rx->worker))
            ;
        ucp_worker_destroy(rx->worker);
    }
    if (rx->ctx)
        ucp_cleanup(rx->ctx);
    free(rx);
}

uint16_t mks_ucxrx_port(const struct mks_ucxrx *rx)
{
    return rx->port;
}

int mks_ucxrx_fd(const struct mks_ucxrx *rx)
{
    return rx->efd;
}

void mks_ucxrx_counts(const struct mks_ucxrx *rx, uint64_t *frames, uint64_t *conns, uint64_t *bad)
{
    *frames = rx->frames;
    *conns = rx->accepted;
    *bad = rx->bad;
}

/* Read what the stream holds and deliver complete frames; false when the
 * connection sent something that is not a frame. */
static bool conn_read(struct conn *c, mks_ucxrx_frame_fn fn, void *arg)
{
    for (;;) {
        size_t len = 0;
        ucs_status_ptr_t data = ucp_stream_recv_data_nb(c->ep, &len);
        if (data == NULL)
            break;
        if (UCS_PTR_IS_ERR(data)) {
            c->dead = true;
            break;
        }
        if (c->have + len > c->cap) {
            size_t cap = c->cap ? c->cap : 64 * 1024;
            while (cap < c->have + len)
                cap *= 2;
            uint8_t *nb = realloc(c->buf, cap);
            if (!nb) {
                ucp_stream_data_release(c->ep, data);
                fprintf(stderr, "mkscope-collector: UCX: out of memory for a raw event frame\n");
                return false;
            }
            c->buf = nb;
            c->cap = cap;
        }
        memcpy(c->buf + c->have, data, len);
        c->have += len;
        ucp_stream_data_release(c->ep, data);
        /* Cut frames as they complete, so the buffer holds at most one. */
        size_t off = 0;
        while (c->have - off >= 4) {
            const uint8_t *h = c->buf + off;
            uint32_t n =
                (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
            if (n == 0 || n > MKS_WIRE_MAX_MSG) {
                fprintf(stderr,
                        "mkscope-collector: UCX: frame of %u bytes (limit %u): closing the"
                        " connection\n",
                        n, MKS_WIRE_MAX_MSG);
                return false;
            }
            if (c->have - off - 4 < n)
                break;
            c->rx->frames++;
            fn(arg, h + 4, n);
            off += 4 + (size_t)n;
        }
        if (off) {
            memmove(c->buf, c->buf + off, c->have - off);
            c->have -= off;
        }
    }
    return true;
}

int mks_ucxrx_progress(struct mks_ucxrx *rx, mks_ucxrx_frame_fn fn, void *arg)
{
    while (ucp_worker_progress(rx->worker))
        ;
    for (struct conn **pc = &rx->conns; *pc;) {
        struct conn *c = *pc;
        bool ok = conn_read(c, fn, arg);
        if (!ok)
            rx->bad++;
        if (!ok || c->dead) {
            if (ok && c->have)
                fprintf(stderr,
                        "mkscope-collector: UCX: connection closed inside a frame (%zu"
                        " bytes dropped)\n",
                        c->have);
            *pc = c->next;
            rx->n_conns--;
            conn_close(c);
            continue;
        }
        pc = &c->next;
    }
    ucs_status_t st = ucp_worker_arm(rx->worker);
    return st == UCS_ERR_BUSY ? 0 : 1;
}

/* UCX stream transport for raw event batches (see ucx.h). */
#include "ucx.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <ucp/api/ucp.h>

#include "log.h"
#include "mkscope/netif.h"

struct agt_ucx {
    ucp_context_h ctx;
    ucp_worker_h worker;
    ucp_ep_h ep;
    size_t pending;
    int failed;
    /* agt_ucx_flushed: the flush request, when it gives up, and its
     * generation (a send after a flush began makes that flush stale). */
    void *flush_req;
    int flush_started, flushed;
    unsigned flush_gen;
    uint64_t flush_deadline_ms;
};

struct flush_ctx {
    struct agt_ucx *u;
    unsigned gen;
};

static void on_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    struct agt_ucx *u = arg;
    (void)ep;
    if (!u->failed)
        agt_log_warn("raw events over UCX: connection failed: %s", ucs_status_string(status));
    u->failed = 1;
}

static void on_sent(void *request, ucs_status_t status, void *user_data)
{
    struct agt_ucx *u = *(struct agt_ucx **)user_data;
    free(user_data);
    if (status != UCS_OK)
        u->failed = 1;
    u->pending--;
    ucp_request_free(request);
}

int agt_ucx_connect(const char *endpoint, struct agt_ucx **u_p, char *err, size_t err_len)
{
    char host[256];
    const char *colon = endpoint ? strrchr(endpoint, ':') : NULL;
    if (!colon || colon == endpoint || (size_t)(colon - endpoint) >= sizeof(host) || !colon[1]) {
        snprintf(err, err_len, "UCX endpoint '%s': expected HOST:PORT", endpoint ? endpoint : "");
        return -EINVAL;
    }
    memcpy(host, endpoint, (size_t)(colon - endpoint));
    host[colon - endpoint] = '\0';
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    int gai = getaddrinfo(host, colon + 1, &hints, &ai);
    if (gai != 0) {
        snprintf(err, err_len, "UCX endpoint '%s': %s", endpoint, gai_strerror(gai));
        return -EINVAL;
    }
    struct agt_ucx *u = calloc(1, sizeof(*u));
    if (!u) {
        freeaddrinfo(ai);
        return -ENOMEM;
    }
    ucp_params_t p = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_STREAM};
    /* UCX's transports listen on every interface otherwise: keep them on
     * the one the collector is reached through (UCX_NET_DEVICES wins). */
    ucp_config_t *cfg = NULL;
    char ifname[64];
    if (!getenv("UCX_NET_DEVICES") && mks_netif_toward(ai->ai_addr, ifname, sizeof(ifname)) &&
        ucp_config_read(NULL, NULL, &cfg) == UCS_OK)
        ucp_config_modify(cfg, "NET_DEVICES", ifname);
    ucs_status_t st = ucp_init(&p, cfg, &u->ctx);
    if (cfg)
        ucp_config_release(cfg);
    if (st == UCS_OK) {
        ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                                  .thread_mode = UCS_THREAD_MODE_SINGLE};
        st = ucp_worker_create(u->ctx, &wp, &u->worker);
    }
    if (st == UCS_OK) {
        ucp_ep_params_t ep = {
            .field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                          UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
            .flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
            .sockaddr = {.addr = ai->ai_addr, .addrlen = ai->ai_addrlen},
            .err_mode = UCP_ERR_HANDLING_MODE_PEER,
            .err_handler = {.cb = on_error, .arg = u},
        };
        st = ucp_ep_create(u->worker, &ep, &u->ep);
    }
    freeaddrinfo(ai);
    if (st != UCS_OK) {
        snprintf(err, err_len, "UCX endpoint '%s': %s", endpoint, ucs_status_string(st));
        agt_ucx_destroy(u, 0);
        return -ECONNREFUSED;
    }
    *u_p = u;
    return 0;
}

int agt_ucx_send(struct agt_ucx *u, const void *buf, size_t len)
{
    if (u->failed)
        return -ECONNRESET;
    if (u->flush_started) {
        /* A flush that began before this send does not cover it. */
        u->flush_gen++;
        u->flush_started = u->flushed = 0;
        if (u->flush_req)
            ucp_request_free(u->flush_req);
        u->flush_req = NULL;
    }
    if (len > UINT32_MAX)
        return -E2BIG;
    /* frame = [4-byte length][message]; the completion frees it */
    struct agt_ucx **frame = malloc(sizeof(*frame) + 4 + len);
    if (!frame)
        return -ENOMEM;
    *frame = u;
    uint8_t *data = (uint8_t *)(frame + 1);
    uint32_t n = (uint32_t)len;
    for (int i = 0; i < 4; i++)
        data[i] = (uint8_t)(n >> (8 * i));
    memcpy(data + 4, buf, len);
    ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                              UCP_OP_ATTR_FIELD_USER_DATA,
                              .cb = {.send = on_sent},
                              .user_data = frame};
    ucs_status_ptr_t req = ucp_stream_send_nbx(u->ep, data, 4 + len, &rp);
    if (req == NULL) {
        free(frame);
        return 0;
    }
    if (UCS_PTR_IS_ERR(req)) {
        free(frame);
        u->failed = 1;
        agt_log_warn("raw events over UCX: send: %s", ucs_status_string(UCS_PTR_STATUS(req)));
        return -ECONNRESET;
    }
    u->pending++;
    return 0;
}

void agt_ucx_progress(struct agt_ucx *u)
{
    while (ucp_worker_progress(u->worker) != 0)
        ;
}

size_t agt_ucx_pending(const struct agt_ucx *u)
{
    return u->pending;
}

int agt_ucx_failed(const struct agt_ucx *u)
{
    return u->failed;
}

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void on_flushed(void *request, ucs_status_t status, void *user_data)
{
    struct flush_ctx *fc = user_data;
    (void)request;
    if (fc->gen == fc->u->flush_gen) {
        if (status != UCS_OK)
            fc->u->failed = 1;
        fc->u->flushed = 1;
    }
    free(fc);
}

int agt_ucx_flushed(struct agt_ucx *u, unsigned timeout_ms)
{
    if (u->failed || u->flushed)
        return 1;
    if (!u->flush_started) {
        struct flush_ctx *fc = malloc(sizeof(*fc));
        if (!fc)
            return 1;
        *fc = (struct flush_ctx){u, u->flush_gen};
        u->flush_started = 1;
        u->flush_deadline_ms = mono_ms() + timeout_ms;
        ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                                  UCP_OP_ATTR_FIELD_USER_DATA,
                                  .cb = {.send = on_flushed},
                                  .user_data = fc};
        ucs_status_ptr_t r = ucp_ep_flush_nbx(u->ep, &rp);
        if (r == NULL || UCS_PTR_IS_ERR(r)) {
            free(fc);
            if (r)
                u->failed = 1;
            return u->flushed = 1;
        }
        u->flush_req = r;
    }
    agt_ucx_progress(u);
    if (u->flushed || u->failed)
        return 1;
    if (mono_ms() >= u->flush_deadline_ms) {
        agt_log_warn("raw events over UCX: the collector took none of the last sends for %u ms;"
                     " closing",
                     timeout_ms);
        return 1;
    }
    return 0;
}

void agt_ucx_destroy(struct agt_ucx *u, unsigned timeout_ms)
{
    if (!u)
        return;
    uint64_t end = mono_ms() + timeout_ms;
    if (u->flush_req) {
        if (!u->flushed)
            ucp_request_cancel(u->worker, u->flush_req);
        ucp_request_free(u->flush_req);
        u->flush_req = NULL;
    }
    if (u->worker) {
        while (u->pending && !u->failed && mono_ms() < end)
            agt_ucx_progress(u);
        if (u->ep) {
            ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                      .flags = u->failed ? UCP_EP_CLOSE_FLAG_FORCE : 0};
            ucs_status_ptr_t req = ucp_ep_close_nbx(u->ep, &rp);
            if (UCS_PTR_IS_PTR(req)) {
                while (ucp_request_check_status(req) == UCS_INPROGRESS && mono_ms() < end + 200)
                    ucp_worker_progress(u->worker);
                ucp_request_free(req);
            }
        }
        ucp_worker_destroy(u->worker);
    }
    if (u->ctx)
        ucp_cleanup(u->ctx);
    free(u);
}

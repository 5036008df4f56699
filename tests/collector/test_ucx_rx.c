/*
 * The collector's UCX listener (collector/src/ucx_rx.c) against a ucp
 * stream client on loopback: frames split across sends and packed into one
 * send come out whole and in order; a second connection is accepted; a
 * frame with an impossible length drops its connection (counted as bad)
 * without losing the frames before it; the event fd wakes poll when data
 * arrives.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <unistd.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <ucp/api/ucp.h>

#include "ucx_rx.h"

struct got {
    char frames[16][64];
    size_t n;
};

static void on_frame(void *arg, const void *buf, size_t len)
{
    struct got *g = arg;
    assert_true(len < sizeof(g->frames[0]));
    assert_true(g->n < 16);
    memcpy(g->frames[g->n], buf, len);
    g->frames[g->n][len] = 0;
    g->n++;
}

struct client {
    ucp_context_h ctx;
    ucp_worker_h w;
    ucp_ep_h ep;
};

static void cl_err(void *arg, ucp_ep_h ep, ucs_status_t st)
{
    (void)arg, (void)ep, (void)st;
}

static void cl_open(struct client *c, uint16_t port)
{
    ucp_params_t p = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_STREAM};
    assert_int_equal(ucp_init(&p, NULL, &c->ctx), UCS_OK);
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    assert_int_equal(ucp_worker_create(c->ctx, &wp, &c->w), UCS_OK);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                                        UCP_EP_PARAM_FIELD_ERR_HANDLER |
                                        UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
                          .flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
                          .sockaddr = {.addr = (struct sockaddr *)&sa, .addrlen = sizeof(sa)},
                          .err_mode = UCP_ERR_HANDLING_MODE_PEER,
                          .err_handler = {.cb = cl_err, .arg = c}};
    assert_int_equal(ucp_ep_create(c->w, &ep, &c->ep), UCS_OK);
}

/* Drive both sides until the request completes. */
static void wait_req(struct client *c, struct mks_ucxrx *rx, struct got *g, ucs_status_ptr_t r)
{
    assert_false(UCS_PTR_IS_ERR(r));
    if (r == NULL)
        return;
    for (int i = 0; i < 100000 && ucp_request_check_status(r) == UCS_INPROGRESS; i++) {
        ucp_worker_progress(c->w);
        mks_ucxrx_progress(rx, on_frame, g);
    }
    assert_int_equal(ucp_request_check_status(r), UCS_OK);
    ucp_request_free(r);
}

static void cl_send(struct client *c, struct mks_ucxrx *rx, struct got *g, const void *d, size_t n)
{
    ucp_request_param_t rp = {.op_attr_mask = 0};
    wait_req(c, rx, g, ucp_stream_send_nbx(c->ep, d, n, &rp));
}

static size_t frame(uint8_t *out, const char *s)
{
    uint32_t n = (uint32_t)strlen(s);
    for (int i = 0; i < 4; i++)
        out[i] = (uint8_t)(n >> (8 * i));
    memcpy(out + 4, s, n);
    return 4 + n;
}

static void cl_close(struct client *c, struct mks_ucxrx *rx, struct got *g)
{
    ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = 0};
    ucs_status_ptr_t r = ucp_ep_close_nbx(c->ep, &rp);
    if (UCS_PTR_IS_PTR(r)) {
        for (int i = 0; i < 100000 && ucp_request_check_status(r) == UCS_INPROGRESS; i++) {
            ucp_worker_progress(c->w);
            mks_ucxrx_progress(rx, on_frame, g);
        }
        ucp_request_free(r);
    }
    ucp_worker_destroy(c->w);
    ucp_cleanup(c->ctx);
}

/* Progress the receiver until it holds n frames (or give up). */
static void pump(struct client *c, struct mks_ucxrx *rx, struct got *g, size_t n)
{
    for (int i = 0; i < 200000 && g->n < n; i++) {
        if (c)
            ucp_worker_progress(c->w);
        mks_ucxrx_progress(rx, on_frame, g);
    }
}

static void test_frames(void **state)
{
    (void)state;
    struct mks_ucxrx *rx = NULL;
    char err[256];
    if (mks_ucxrx_create("127.0.0.1", 0, &rx, err, sizeof(err)))
        fail_msg("listener: %s", err);
    uint16_t port = mks_ucxrx_port(rx);
    assert_true(port > 0);
    assert_true(mks_ucxrx_fd(rx) >= 0);
    struct got g = {.n = 0};
    struct client a;
    cl_open(&a, port);
    uint8_t buf[256];
    /* "one" in one send; "two" split inside its header; "three" and
     * "four" packed into one send. */
    size_t n = frame(buf, "one");
    cl_send(&a, rx, &g, buf, n);
    n = frame(buf, "two");
    cl_send(&a, rx, &g, buf, 2);
    pump(&a, rx, &g, 2);
    assert_int_equal(g.n, 1);
    cl_send(&a, rx, &g, buf + 2, n - 2);
    n = frame(buf, "three");
    n += frame(buf + n, "four");
    cl_send(&a, rx, &g, buf, n);
    pump(&a, rx, &g, 4);
    assert_int_equal(g.n, 4);
    assert_string_equal(g.frames[0], "one");
    assert_string_equal(g.frames[1], "two");
    assert_string_equal(g.frames[2], "three");
    assert_string_equal(g.frames[3], "four");

    /* Idle: the worker arms and the fd sleeps; a send wakes it. */
    int armed = 0;
    for (int i = 0; i < 1000 && !armed; i++)
        armed = mks_ucxrx_progress(rx, on_frame, &g);
    assert_true(armed);

    /* A second connection: "five", then a frame of length 0, which is not a
     * frame: that connection is dropped and counted, "five" still comes. */
    struct client b;
    cl_open(&b, port);
    n = frame(buf, "five");
    memset(buf + n, 0, 4);
    cl_send(&b, rx, &g, buf, n + 4);
    pump(&b, rx, &g, 5);
    assert_int_equal(g.n, 5);
    assert_string_equal(g.frames[4], "five");
    uint64_t frames, conns, bad;
    for (int i = 0; i < 1000; i++) {
        mks_ucxrx_counts(rx, &frames, &conns, &bad);
        if (bad)
            break;
        ucp_worker_progress(b.w);
        mks_ucxrx_progress(rx, on_frame, &g);
    }
    mks_ucxrx_counts(rx, &frames, &conns, &bad);
    assert_int_equal(frames, 5);
    assert_int_equal(conns, 2);
    assert_int_equal(bad, 1);

    /* The first connection is unaffected, and once the worker is armed its
     * event fd wakes poll when "six" arrives. */
    armed = 0;
    for (int i = 0; i < 1000 && !armed; i++)
        armed = mks_ucxrx_progress(rx, on_frame, &g);
    assert_true(armed);
    n = frame(buf, "six");
    ucp_request_param_t rp = {.op_attr_mask = 0};
    ucs_status_ptr_t r = ucp_stream_send_nbx(a.ep, buf, n, &rp);
    assert_false(UCS_PTR_IS_ERR(r));
    for (int i = 0; i < 1000; i++)
        ucp_worker_progress(a.w);
    struct pollfd pf = {.fd = mks_ucxrx_fd(rx), .events = POLLIN};
    assert_int_equal(poll(&pf, 1, 5000), 1);
    wait_req(&a, rx, &g, r);
    pump(&a, rx, &g, 6);
    assert_int_equal(g.n, 6);
    assert_string_equal(g.frames[5], "six");
    cl_close(&a, rx, &g);
    cl_close(&b, rx, &g);
    mks_ucxrx_destroy(rx);
    mks_ucxrx_destroy(NULL);
}

/* Every TCP socket this process listens on, as "a.b.c.d:port" lines. */
static size_t own_listeners(char out[][32], size_t max)
{
    /* Our sockets' inodes, from /proc/self/fd. */
    unsigned long inodes[256];
    size_t n_ino = 0, n = 0;
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)) && n_ino < 256) {
        char path[300], link[64];
        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        ssize_t l = readlink(path, link, sizeof(link) - 1);
        if (l <= 0)
            continue;
        link[l] = 0;
        unsigned long ino;
        if (sscanf(link, "socket:[%lu]", &ino) == 1)
            inodes[n_ino++] = ino;
    }
    closedir(d);
    FILE *f = fopen("/proc/self/net/tcp", "r");
    assert_non_null(f);
    char line[512];
    while (fgets(line, sizeof(line), f) && n < max) {
        unsigned a, port, st;
        unsigned long ino;
        if (sscanf(line, " %*d: %8X:%4X %*8X:%*4X %2X %*s %*s %*s %*d %*d %lu", &a, &port, &st,
                   &ino) != 4 || st != 0x0A)
            continue;
        for (size_t i = 0; i < n_ino; i++)
            if (inodes[i] == ino) {
                struct in_addr ia = {.s_addr = a};
                snprintf(out[n++], 32, "%s:%u", inet_ntoa(ia), port);
            }
    }
    fclose(f);
    return n;
}

/* Listening on 127.0.0.1, the process listens on loopback only: UCX's own
 * transport sockets (it opens one per interface unless told) stay on the
 * interface of that address, where the collector's log says it listens. */
static void test_listens_where_asked(void **state)
{
    (void)state;
    struct mks_ucxrx *rx;
    char err[256];
    assert_int_equal(mks_ucxrx_create("127.0.0.1", 0, &rx, err, sizeof(err)), 0);
    mks_ucxrx_progress(rx, NULL, NULL);
    char l[64][32];
    size_t n = own_listeners(l, 64);
    assert_true(n >= 1);
    for (size_t i = 0; i < n; i++)
        if (strncmp(l[i], "127.", 4))
            fail_msg("listening on %s, asked for 127.0.0.1", l[i]);
    mks_ucxrx_destroy(rx);
}

static void test_bad_address(void **state)
{
    (void)state;
    struct mks_ucxrx *rx = NULL;
    char err[256];
    assert_true(mks_ucxrx_create("no such host.invalid", 0, &rx, err, sizeof(err)) < 0);
    assert_null(rx);
    assert_non_null(strstr(err, "no such host.invalid"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_frames),
        cmocka_unit_test(test_bad_address),
        cmocka_unit_test(test_listens_where_asked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

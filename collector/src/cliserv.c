/*
 * The collector's CLI server (see cliserv.h): a dispatcher thread, worker
 * threads with read-only store connections, and a hand-off to the loop.
 *
 * Why threads in a daemon that otherwise runs one poll() loop: a request
 * can be long (raw SQL, a query over a day of summaries, a diagnosis) and
 * SQLite work cannot be split into slices a loop would interleave with
 * ingest.  Acks must never wait for it, so the reading side runs where it
 * can take its time: on its own connections, which in WAL mode neither
 * block the writer nor see a half-written summary.  Everything that
 * writes stays on the loop's single connection, so there is still one
 * writer and no lock is held across SQLite calls.
 *
 * The CLI socket is a raw-mode NN_REP: nn_recvmsg gives each request's
 * routing header as control data, and nn_sendmsg with that header sends the
 * reply to the right requester whatever the order in which replies leave.
 *
 * Request life: dispatcher receives and decodes it (checking the MAC), then
 *   - a verb of the loop (mks_cliserv_needs_loop) goes to loop_q, and
 *     loop_fd is signalled; the loop calls mks_cliserv_done when finished;
 *   - any other verb goes to work_q for a worker, unless work_q is full: then
 *     it is answered at once with MKS_EXIT_BUSY;
 *   - a worker answers on its connection under the request's work limit;
 * finished requests go to done_q, done_fd wakes the dispatcher, which
 * encodes and sends the reply.  Only the dispatcher touches the socket.
 */
#include "cliserv.h"

#include <errno.h>
#include <inttypes.h>
#include <nanomsg/nn.h>
#include <nanomsg/reqrep.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "args.h"
#include "mkscope/query.h"
#include "serve.h"

#define DEFAULT_WORKERS 2u
#define DEFAULT_QUEUE   16u
#define MAX_WORKERS     16u
/* The CLI waits 5 s for an answer by default. */
#define STALE_NS        5000000000ull

struct mks_cliserv_req {
    struct mks_cliserv_req *next;
    void *header;        /* nanomsg routing header (NN_MSG control), sent back with the reply */
    mks_envelope *env;   /* decoded request, NULL when it could not be decoded */
    uint64_t queued_mono_ns;
    int status;
    char error[512];
    json_t *answer;
};

struct queue {
    struct mks_cliserv_req *head, *tail;
    unsigned n;
};

struct worker {
    struct mks_cliserv *cs;
    pthread_t thread;
    bool started;
    struct mks_store *st;
    _Atomic(sqlite3 *) busy_db; /* the connection while a request runs, for stop */
};

struct mks_cliserv {
    int sock, rcv_fd;
    int done_fd, loop_fd; /* eventfds */
    struct mks_wire_key key;
    bool have_key;
    struct mks_ingest_stats *stats;
    /* The dispatcher's alone: which requests it accepted, and its refusal
     * log lines. */
    struct mks_fresh *fresh;
    struct mks_ratelog reflog[MKS_REFUSED_COUNT];
    uint64_t limit_ns;
    unsigned queue_max;

    pthread_mutex_t mu;
    pthread_cond_t work_cv;
    struct queue work_q, loop_q, done_q;
    bool stopping;

    pthread_t dispatcher;
    bool dispatcher_started;
    unsigned n_workers;
    struct worker workers[MAX_WORKERS];
};

static int fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

static void q_push(struct queue *q, struct mks_cliserv_req *r)
{
    r->next = NULL;
    if (q->tail)
        q->tail->next = r;
    else
        q->head = r;
    q->tail = r;
    q->n++;
}

static struct mks_cliserv_req *q_pop(struct queue *q)
{
    struct mks_cliserv_req *r = q->head;
    if (r) {
        q->head = r->next;
        if (!q->head)
            q->tail = NULL;
        q->n--;
    }
    return r;
}

static void signal_fd(int fd)
{
    uint64_t one = 1;
    ssize_t n = write(fd, &one, sizeof(one));
    (void)n; /* an eventfd only fails when its counter would overflow: it is readable then */
}

static void drain_fd(int fd)
{
    uint64_t v;
    ssize_t n = read(fd, &v, sizeof(v));
    (void)n;
}

static void req_free(struct mks_cliserv_req *r)
{
    if (!r)
        return;
    if (r->header)
        nn_freemsg(r->header);
    mks_wire_free(r->env);
    json_decref(r->answer);
    free(r);
}

int mks_cliserv_needs_loop(const char *verb)
{
    return !strcmp(verb, "survey") || !strcmp(verb, "attach") || !strcmp(verb, "detach") ||
           !strcmp(verb, "trigger-add") || !strcmp(verb, "trigger-rm") ||
           !strcmp(verb, "probe") || !strcmp(verb, "probe-stop");
}

/* ---- finishing a request ----------------------------------------------------- */

static void finish(struct mks_cliserv *cs, struct mks_cliserv_req *r, int status, const char *error,
                   json_t *answer)
{
    r->status = status;
    snprintf(r->error, sizeof(r->error), "%s", status && error ? error : "");
    if (r->answer != answer) {
        json_decref(r->answer);
        r->answer = answer;
    }
    pthread_mutex_lock(&cs->mu);
    q_push(&cs->done_q, r);
    pthread_mutex_unlock(&cs->mu);
    signal_fd(cs->done_fd);
}

void mks_cliserv_done(struct mks_cliserv *cs, struct mks_cliserv_req *r, int status,
                      const char *error, json_t *answer)
{
    finish(cs, r, status, error, answer);
}

/* Encode and send r's reply on the socket (dispatcher thread). */
static void send_reply(struct mks_cliserv *cs, struct mks_cliserv_req *r)
{
    char *text = r->answer ? json_dumps(r->answer, JSON_COMPACT) : NULL;
    int status = r->status;
    const char *error = r->error;
    if (r->answer && !text) {
        status = MKS_EXIT_ERROR;
        error = "out of memory writing the answer";
    } else if (text && strlen(text) > MKS_WIRE_MAX_TEXT) {
        /* Too large for one message: say so rather than leave the CLI
         * waiting for an answer that cannot be sent. */
        status = MKS_EXIT_ERROR;
        error = "the answer is larger than one message (16 MiB): narrow the request (LIMIT, a"
                " WHERE on step or time, --steps)";
        free(text);
        text = NULL;
    }
    mks_envelope out;
    Mkscope__V1__CliReply rep = MKSCOPE__V1__CLI_REPLY__INIT;
    mks_wire_init(&out, "", 0, r->env ? r->env->seq : 0);
    /* The reply names the request it answers: a CLI takes no other. */
    out.reply_to = r->env ? r->env->nonce : 0;
    rep.id = r->env && r->env->body_case == MKSCOPE__V1__ENVELOPE__BODY_CLI_REQUEST
                 ? r->env->cli_request->id
                 : 0;
    rep.status = status;
    rep.error = (char *)(status ? error : "");
    rep.json = text && !status ? text : "";
    out.body_case = MKSCOPE__V1__ENVELOPE__BODY_CLI_REPLY;
    out.cli_reply = &rep;
    uint8_t *buf = NULL;
    size_t len = 0;
    char err[256];
    if (mks_wire_encode(&out, cs->have_key ? &cs->key : NULL, &buf, &len, err, sizeof(err))) {
        fprintf(stderr, "mkscope-collector: cannot encode a CLI reply: %s\n", err);
        free(text);
        return;
    }
    free(text);
    struct nn_iovec iov = {.iov_base = buf, .iov_len = len};
    struct nn_msghdr hdr = {.msg_iov = &iov, .msg_iovlen = 1};
    if (r->header) {
        hdr.msg_control = &r->header;
        hdr.msg_controllen = NN_MSG;
    }
    if (nn_sendmsg(cs->sock, &hdr, NN_DONTWAIT) < 0)
        fprintf(stderr, "mkscope-collector: send CLI reply: %s\n", nn_strerror(nn_errno()));
    else
        r->header = NULL; /* nanomsg took it */
    free(buf);
}

static void stats_busy(struct mks_cliserv *cs)
{
    if (cs->stats)
        cs->stats->cli_busy++;
}

/* ---- workers ----------------------------------------------------------------- */

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct mks_cliserv *cs = w->cs;
    sqlite3 *db = mks_store_db(w->st);
    for (;;) {
        pthread_mutex_lock(&cs->mu);
        while (!cs->stopping && !cs->work_q.head)
            pthread_cond_wait(&cs->work_cv, &cs->mu);
        struct mks_cliserv_req *r = cs->stopping ? NULL : q_pop(&cs->work_q);
        pthread_mutex_unlock(&cs->mu);
        if (!r)
            return NULL;
        /* A request that waited longer than the CLI's default timeout most
         * likely has no reader left: the CLI gave up and said "busy". */
        if (mks_mono_ns() - r->queued_mono_ns > STALE_NS) {
            stats_busy(cs);
            finish(cs, r, MKS_EXIT_BUSY,
                   "collector busy: the request waited for a free worker longer than the CLI"
                   " waits by default (5 s); retry",
                   NULL);
            continue;
        }
        struct mks_serve_env se = {.st = w->st, .stats = cs->stats, .now_ns = mks_real_ns(),
                                   .limit_ns = cs->limit_ns};
        char err[512] = "";
        json_t *answer = NULL;
        struct mks_serve_limit lim;
        atomic_store(&w->busy_db, db);
        mks_serve_limit_begin(db, &lim, cs->limit_ns);
        int status = mks_serve_cli(&se, r->env->cli_request, &answer, err, sizeof(err));
        mks_serve_limit_end(db);
        atomic_store(&w->busy_db, NULL);
        /* Work cut short answers nothing: a diagnosis or a query that read
         * half its rows would look like a real answer. */
        if (mks_serve_limit_check(&lim, r->env->cli_request->verb, err, sizeof(err))) {
            json_decref(answer);
            answer = NULL;
            status = MKS_EXIT_ERROR;
        }
        finish(cs, r, status, err, answer);
    }
}

/* ---- dispatcher ---------------------------------------------------------------- */

static void take_request(struct mks_cliserv *cs, void *body, int len, void *header)
{
    struct mks_cliserv_req *r = calloc(1, sizeof(*r));
    if (!r) {
        nn_freemsg(header);
        return;
    }
    r->header = header;
    r->queued_mono_ns = mks_mono_ns();
    if (cs->stats)
        cs->stats->cli_requests++;
    char err[512], line[700];
    int rc = mks_wire_decode_for(body, (size_t)len, MKS_WIRE_BODY(CLI_REQUEST),
                                 cs->have_key ? &cs->key : NULL, &r->env, err, sizeof(err));
    if (rc) {
        r->env = NULL;
        r->status = MKS_EXIT_ERROR;
        snprintf(line, sizeof(line), "a CLI request: %s", err);
        mks_refused(cs->stats, cs->reflog,
                    rc == -EACCES ? MKS_REFUSED_UNAUTHENTICATED : MKS_REFUSED_INVALID, line);
        /* A sender who is not authenticated learns nothing but that. */
        snprintf(r->error, sizeof(r->error), "%s", rc == -EACCES ? MKS_WIRE_REFUSAL : err);
        send_reply(cs, r);
        req_free(r);
        return;
    }
    /* What every request's arguments must be (args.c), before any of them
     * is read: a request is input from outside like any other. */
    const Mkscope__V1__CliRequest *cr = r->env->cli_request;
    size_t lo, hi;
    if (mks_args_positional(cr->verb, &lo, &hi) == 0 &&
        mks_args_check(cr->verb, cr->args, cr->n_args, lo, hi, err, sizeof(err))) {
        r->status = MKS_EXIT_USAGE;
        snprintf(r->error, sizeof(r->error), "%.64s: %.400s", cr->verb, err);
        send_reply(cs, r);
        req_free(r);
        return;
    }
    rc = mks_fresh_check_env(cs->fresh, r->env, mks_real_ns(), err, sizeof(err));
    if (rc) {
        snprintf(line, sizeof(line), "CLI request '%s': %s", r->env->cli_request->verb, err);
        mks_refused(cs->stats, cs->reflog,
                    rc == -EALREADY ? MKS_REFUSED_REPLAYED : MKS_REFUSED_STALE, line);
        r->status = MKS_EXIT_ERROR;
        snprintf(r->error, sizeof(r->error), "%.400s%s", err,
                 rc == -EALREADY ? ": nothing done again" : "");
        send_reply(cs, r);
        req_free(r);
        return;
    }
    pthread_mutex_lock(&cs->mu);
    if (mks_cliserv_needs_loop(r->env->cli_request->verb)) {
        q_push(&cs->loop_q, r);
        pthread_mutex_unlock(&cs->mu);
        signal_fd(cs->loop_fd);
        return;
    }
    if (cs->work_q.n >= cs->queue_max) {
        pthread_mutex_unlock(&cs->mu);
        stats_busy(cs);
        r->status = MKS_EXIT_BUSY;
        snprintf(r->error, sizeof(r->error),
                 "collector busy: %u requests are waiting for %u workers; retry in a moment",
                 cs->queue_max, cs->n_workers);
        send_reply(cs, r);
        req_free(r);
        return;
    }
    q_push(&cs->work_q, r);
    pthread_cond_signal(&cs->work_cv);
    pthread_mutex_unlock(&cs->mu);
}

static void *dispatcher_main(void *arg)
{
    struct mks_cliserv *cs = arg;
    for (;;) {
        struct pollfd pf[2] = {{.fd = cs->rcv_fd, .events = POLLIN},
                               {.fd = cs->done_fd, .events = POLLIN}};
        if (poll(pf, 2, -1) < 0 && errno != EINTR) {
            perror("mkscope-collector: CLI server poll");
            return NULL;
        }
        if (pf[1].revents & POLLIN)
            drain_fd(cs->done_fd);
        for (;;) {
            pthread_mutex_lock(&cs->mu);
            bool stop = cs->stopping;
            struct mks_cliserv_req *r = q_pop(&cs->done_q);
            pthread_mutex_unlock(&cs->mu);
            if (stop) {
                req_free(r);
                return NULL;
            }
            if (!r)
                break;
            send_reply(cs, r);
            req_free(r);
        }
        if (!(pf[0].revents & POLLIN))
            continue;
        for (;;) {
            void *body = NULL, *header = NULL;
            struct nn_iovec iov = {.iov_base = &body, .iov_len = NN_MSG};
            struct nn_msghdr hdr = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = &header,
                                    .msg_controllen = NN_MSG};
            int n = nn_recvmsg(cs->sock, &hdr, NN_DONTWAIT);
            if (n < 0) {
                int e = nn_errno();
                if (e != EAGAIN && e != EINTR)
                    fprintf(stderr, "mkscope-collector: CLI receive: %s\n", nn_strerror(e));
                break;
            }
            take_request(cs, body, n, header);
            nn_freemsg(body);
        }
    }
}

/* ---- the loop's side ------------------------------------------------------------ */

int mks_cliserv_loop_fd(const struct mks_cliserv *cs)
{
    return cs ? cs->loop_fd : -1;
}

struct mks_cliserv_req *mks_cliserv_loop_take(struct mks_cliserv *cs)
{
    if (!cs)
        return NULL;
    drain_fd(cs->loop_fd);
    pthread_mutex_lock(&cs->mu);
    struct mks_cliserv_req *r = q_pop(&cs->loop_q);
    bool more = cs->loop_q.head != NULL;
    pthread_mutex_unlock(&cs->mu);
    if (more)
        signal_fd(cs->loop_fd); /* keep the fd readable for the rest */
    return r;
}

const mks_envelope *mks_cliserv_req_env(const struct mks_cliserv_req *r)
{
    return r ? r->env : NULL;
}

/* ---- start and stop ---------------------------------------------------------------- */

int mks_cliserv_start(const struct mks_cliserv_opts *opts, struct mks_cliserv **cs_p, char *err,
                      size_t errlen)
{
    if (!opts || !cs_p || !opts->url || !opts->db_path)
        return fail(err, errlen, "CLI server: no socket URL or store path");
    if (opts->sz < sizeof(size_t) || opts->sz > sizeof(struct mks_cliserv_opts))
        return fail(err, errlen, "CLI server: options of unknown size %zu", opts->sz);
    struct mks_cliserv_opts o = {0};
    memcpy(&o, opts, opts->sz);
    struct mks_cliserv *cs = calloc(1, sizeof(*cs));
    if (!cs)
        return fail(err, errlen, "CLI server: out of memory");
    cs->sock = cs->rcv_fd = cs->done_fd = cs->loop_fd = -1;
    pthread_mutex_init(&cs->mu, NULL);
    pthread_cond_init(&cs->work_cv, NULL);
    cs->stats = o.stats;
    cs->limit_ns = o.limit_ns ? o.limit_ns : MKS_SERVE_LIMIT_NS;
    cs->queue_max = o.queue ? o.queue : DEFAULT_QUEUE;
    cs->n_workers = o.workers ? o.workers : DEFAULT_WORKERS;
    if (cs->n_workers > MAX_WORKERS)
        cs->n_workers = MAX_WORKERS;
    if (o.key) {
        cs->key = *o.key;
        cs->have_key = true;
    }
    if (mks_fresh_create(o.fresh, &cs->fresh)) {
        fail(err, errlen, "CLI server: cannot make the replay cache");
        goto bad;
    }
    cs->done_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    cs->loop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (cs->done_fd < 0 || cs->loop_fd < 0) {
        fail(err, errlen, "CLI server: eventfd: %s", strerror(errno));
        goto bad;
    }
    for (unsigned i = 0; i < cs->n_workers; i++) {
        struct mks_store_opts so = {.sz = sizeof(so), .path = o.db_path, .read_only = 1};
        cs->workers[i].cs = cs;
        if (mks_store_open(&so, &cs->workers[i].st, err, errlen))
            goto bad;
        mks_query_register_sql(mks_store_db(cs->workers[i].st));
    }
    cs->sock = nn_socket(AF_SP_RAW, NN_REP);
    if (cs->sock < 0) {
        fail(err, errlen, "cli socket: %s", nn_strerror(nn_errno()));
        goto bad;
    }
    /* Nothing larger than a CLI request is read off the socket. */
    int zero = 0,
        maxsz = (int)mks_wire_body_limit(MKSCOPE__V1__ENVELOPE__BODY_CLI_REQUEST) + 1024;
    nn_setsockopt(cs->sock, NN_SOL_SOCKET, NN_RCVMAXSIZE, &maxsz, sizeof(maxsz));
    nn_setsockopt(cs->sock, NN_SOL_SOCKET, NN_LINGER, &zero, sizeof(zero));
    if (nn_bind(cs->sock, o.url) < 0) {
        fail(err, errlen,
             "cannot bind cli socket to %s: %s (is another collector running? pick another URL"
             " with --cli)",
             o.url, nn_strerror(nn_errno()));
        goto bad;
    }
    size_t sz = sizeof(cs->rcv_fd);
    if (nn_getsockopt(cs->sock, NN_SOL_SOCKET, NN_RCVFD, &cs->rcv_fd, &sz) < 0) {
        fail(err, errlen, "cli socket: %s", nn_strerror(nn_errno()));
        goto bad;
    }
    for (unsigned i = 0; i < cs->n_workers; i++) {
        if (pthread_create(&cs->workers[i].thread, NULL, worker_main, &cs->workers[i])) {
            fail(err, errlen, "CLI server: cannot start a worker thread");
            goto bad;
        }
        cs->workers[i].started = true;
    }
    if (pthread_create(&cs->dispatcher, NULL, dispatcher_main, cs)) {
        fail(err, errlen, "CLI server: cannot start its thread");
        goto bad;
    }
    cs->dispatcher_started = true;
    *cs_p = cs;
    return 0;
bad:
    mks_cliserv_stop(cs);
    return -1;
}

void mks_cliserv_stop(struct mks_cliserv *cs)
{
    if (!cs)
        return;
    pthread_mutex_lock(&cs->mu);
    cs->stopping = true;
    pthread_cond_broadcast(&cs->work_cv);
    pthread_mutex_unlock(&cs->mu);
    for (unsigned i = 0; i < cs->n_workers; i++) {
        sqlite3 *db = atomic_load(&cs->workers[i].busy_db);
        if (db)
            sqlite3_interrupt(db);
    }
    if (cs->done_fd >= 0)
        signal_fd(cs->done_fd);
    if (cs->dispatcher_started)
        pthread_join(cs->dispatcher, NULL);
    for (unsigned i = 0; i < cs->n_workers; i++) {
        if (cs->workers[i].started)
            pthread_join(cs->workers[i].thread, NULL);
        mks_store_close(cs->workers[i].st);
    }
    struct queue *qs[] = {&cs->work_q, &cs->loop_q, &cs->done_q};
    for (size_t i = 0; i < 3; i++) {
        struct mks_cliserv_req *r;
        while ((r = q_pop(qs[i])))
            req_free(r);
    }
    if (cs->sock >= 0)
        nn_close(cs->sock);
    if (cs->done_fd >= 0)
        close(cs->done_fd);
    if (cs->loop_fd >= 0)
        close(cs->loop_fd);
    mks_fresh_destroy(cs->fresh);
    pthread_cond_destroy(&cs->work_cv);
    pthread_mutex_destroy(&cs->mu);
    free(cs);
}

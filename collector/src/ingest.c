/*
 * Batched ingest of agents' requests (see ingest.h): read what waits on the
 * raw NN_REP socket, decode and store each message in its own savepoint of
 * one transaction, encode each answer, commit, then send the answers.  A
 * message that cannot be decoded or stored is refused on its own; a commit
 * that fails answers nothing of the batch (the agents time out and send
 * again, the store having kept none of it).
 */
#include "ingest.h"

#include <errno.h>
#include <inttypes.h>
#include <nanomsg/nn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Commands handed to one agent per Ack: bounds the reply size. */
#define MAX_CMDS_PER_ACK 16
/* The pressure is the busy share of windows this long. */
#define PRESSURE_WINDOW_NS 500000000ull

struct pending {
    void *hdr;          /* routing header (NN_MSG control chunk) */
    mks_envelope *env;  /* stored: handed to on_stored after the commit */
    uint8_t *reply;
    size_t reply_len;
    int refused;        /* a refusal is sent whether or not the batch commits */
};

struct mks_ingest {
    struct mks_ingest_opts o;
    struct mks_ratelog reflog[MKS_REFUSED_COUNT];
    struct pending p[MKS_INGEST_BATCH];
    uint64_t win_start, win_busy, win_msgs, win_batches;
    uint32_t pressure;
    /* any command waiting to be handed out, looked at once per batch (the
     * loop queues commands between batches): most acks then skip the
     * per-rank query */
    bool cmds_pending;
};

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t real_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int mks_ingest_create(const struct mks_ingest_opts *opts, struct mks_ingest **ing_p, char *err,
                      size_t errlen)
{
    if (!opts || !ing_p || opts->sz < sizeof(size_t) || opts->sz > sizeof(*opts) ||
        opts->sock < 0 || !opts->st) {
        snprintf(err, errlen, "ingest: bad options");
        return -EINVAL;
    }
    struct mks_ingest *ing = calloc(1, sizeof(*ing));
    if (!ing) {
        snprintf(err, errlen, "ingest: out of memory");
        return -ENOMEM;
    }
    memcpy(&ing->o, opts, opts->sz);
    ing->win_start = mono_ns();
    *ing_p = ing;
    return 0;
}

void mks_ingest_destroy(struct mks_ingest *ing)
{
    free(ing);
}

uint32_t mks_ingest_pressure(const struct mks_ingest *ing)
{
    return ing ? ing->pressure : 0;
}

/* Encode env into the pending slot's reply; an encoding failure (a bug) is
 * logged and leaves the request unanswered, which the agent survives. */
static void set_reply(struct mks_ingest *ing, struct pending *p, const mks_envelope *env)
{
    char err[256];
    if (mks_wire_encode(env, ing->o.key, &p->reply, &p->reply_len, err, sizeof(err))) {
        fprintf(stderr, "mkscope-collector: cannot encode %s: %s\n",
                mks_wire_body_name(env->body_case), err);
        p->reply = NULL;
    }
}

/* A refusal; reply_to is the request's nonce, 0 when its sender is not
 * authenticated (nothing of its message is worth echoing). */
static void refuse(struct mks_ingest *ing, struct pending *p, uint64_t reply_to,
                   const char *reason)
{
    mks_envelope env;
    Mkscope__V1__RegisterAck ack = MKSCOPE__V1__REGISTER_ACK__INIT;
    mks_wire_init(&env, "", 0, 0);
    env.reply_to = reply_to;
    ack.accepted = 0;
    ack.reason = (char *)reason;
    ack.collector_time_ns = real_ns();
    env.body_case = MKSCOPE__V1__ENVELOPE__BODY_REGISTER_ACK;
    env.register_ack = &ack;
    set_reply(ing, p, &env);
    p->refused = 1;
}

/* The answer to a request that was applied, or (applied false) to a copy
 * that changed nothing: an ack without commands, which are for the
 * requests that were. */
static void answer(struct mks_ingest *ing, struct pending *p, const mks_envelope *env,
                   uint64_t seq, uint64_t now, bool applied)
{
    struct mks_ingest_stats *stats = ing->o.stats;
    mks_envelope out;
    mks_wire_init(&out, env->job, env->rank, env->seq);
    out.reply_to = env->nonce;
    if (env->body_case == MKSCOPE__V1__ENVELOPE__BODY_REGISTER) {
        Mkscope__V1__RegisterAck ack = MKSCOPE__V1__REGISTER_ACK__INIT;
        ack.accepted = 1;
        ack.reason = "";
        ack.collector_time_ns = now;
        ack.stored_seq = seq;
        ack.compact_summaries = 1; /* mks_wire_decode_for expands them */
        out.body_case = MKSCOPE__V1__ENVELOPE__BODY_REGISTER_ACK;
        out.register_ack = &ack;
        set_reply(ing, p, &out);
        return;
    }
    Mkscope__V1__Ack ack = MKSCOPE__V1__ACK__INIT;
    Mkscope__V1__Command *cmds[MAX_CMDS_PER_ACK];
    if (env->body_case == MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY) {
        stats->summaries++;
        if (env->epoch_summary->pressure)
            stats->summaries_pressured++;
    } else {
        mks_store_acked_seq(ing->o.st, env->job, env->rank, &seq);
    }
    ack.up_to_seq = seq;
    ack.pressure = ing->pressure;
    size_t n = applied && ing->cmds_pending
                   ? mks_store_take_commands(ing->o.st, env->job, env->rank, now, cmds,
                                             MAX_CMDS_PER_ACK)
                   : 0;
    ack.commands = cmds;
    ack.n_commands = n;
    out.body_case = MKSCOPE__V1__ENVELOPE__BODY_ACK;
    out.ack = &ack;
    set_reply(ing, p, &out);
    for (size_t i = 0; i < n; i++)
        mkscope__v1__command__free_unpacked(cmds[i], NULL);
}

/* Decode, check and store one request, and make its answer (sent after the
 * commit).  In order: decoded for this socket (with a key, a sender that
 * does not authenticate gets MKS_WIRE_REFUSAL and nothing more); fresh
 * (every body but a summary, which the store keeps once per seq: a copy of
 * a heartbeat, reply or raw batch is acked and changes nothing, a copy of a
 * registration is refused); then what the store allows (docs/collector.md). */
static void handle(struct mks_ingest *ing, struct pending *p, const void *buf, size_t len)
{
    char err[512], line[700];
    mks_envelope *env = NULL;
    struct mks_ingest_stats *stats = ing->o.stats;
    stats->messages++;
    int rc = mks_wire_decode_for(buf, len, MKS_WIRE_ACCEPT_INGEST, ing->o.key, &env, err,
                                 sizeof(err));
    if (rc) {
        stats->decode_errors++;
        snprintf(line, sizeof(line), "a message from an agent: %s", err);
        mks_refused(stats, ing->reflog,
                    rc == -EACCES ? MKS_REFUSED_UNAUTHENTICATED : MKS_REFUSED_INVALID, line);
        refuse(ing, p, 0, rc == -EACCES ? MKS_WIRE_REFUSAL : err);
        return;
    }
    if (ing->o.verbose)
        fprintf(stderr, "mkscope-collector: %s from %s rank %u seq %" PRIu64 "\n",
                mks_wire_body_name(env->body_case), env->job, env->rank, env->seq);
    uint64_t seq = 0, now = real_ns();
    bool summary = env->body_case == MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY;
    if (!summary && (rc = mks_fresh_check_env(ing->o.fresh, env, now, err, sizeof(err)))) {
        snprintf(line, sizeof(line), "%s from %s rank %u: %s", mks_wire_body_name(env->body_case),
                 env->job, env->rank, err);
        mks_refused(stats, ing->reflog,
                    rc == -EALREADY ? MKS_REFUSED_REPLAYED : MKS_REFUSED_STALE, line);
        if (rc == -EALREADY && env->body_case != MKSCOPE__V1__ENVELOPE__BODY_REGISTER) {
            answer(ing, p, env, 0, now, false);
            p->refused = 1; /* nothing stored: sent whether or not the batch commits */
        } else {
            refuse(ing, p, env->nonce, err);
        }
        mks_wire_free(env);
        return;
    }
    rc = mks_store_ingest(ing->o.st, env, now, &seq, err, sizeof(err));
    if (rc && rc != -EALREADY) {
        enum mks_refusal why = mks_refusal_of_store(rc);
        if (why == MKS_REFUSED_COUNT) {
            stats->store_errors++;
            fprintf(stderr, "mkscope-collector: %s\n", err);
        } else {
            mks_refused(stats, ing->reflog, why, err);
        }
        /* Not stored: a resend of the same bytes must be taken. */
        mks_fresh_forget_env(ing->o.fresh, env);
        refuse(ing, p, env->nonce, err);
        mks_wire_free(env);
        return;
    }
    if (rc == -EALREADY) {
        /* Older than what is applied (a delayed or replayed registration or
         * heartbeat): acked as accepted, nothing changed. */
        mks_refused(stats, ing->reflog, MKS_REFUSED_OUT_OF_ORDER, err);
        answer(ing, p, env, seq, now, false);
        p->refused = 1;
        mks_wire_free(env);
        return;
    }
    answer(ing, p, env, seq, now, true);
    p->env = env;
}

static void send_reply(struct mks_ingest *ing, struct pending *p)
{
    if (!p->reply)
        return;
    struct nn_iovec iov = {.iov_base = p->reply, .iov_len = p->reply_len};
    struct nn_msghdr h = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = &p->hdr,
                          .msg_controllen = NN_MSG};
    if (nn_sendmsg(ing->o.sock, &h, NN_DONTWAIT) < 0) {
        /* the agent left, or its connection is full: it sends again */
        if (ing->o.verbose)
            fprintf(stderr, "mkscope-collector: ack not sent: %s\n", nn_strerror(nn_errno()));
    } else {
        p->hdr = NULL; /* nn_sendmsg took the header chunk */
    }
}

/* Busy or behind takes both: the loop (nearly) never idle, by wall time,
 * and messages queueing for it, seen as batches that are not small (each
 * agent has one request in flight, so a batch is the agents waiting).  The
 * wall time alone would read a machine whose other programs take the CPU
 * as pressure even with a handful of agents. */
static void update_pressure(struct mks_ingest *ing, uint64_t now, bool full)
{
    uint64_t span = now - ing->win_start;
    if (span < PRESSURE_WINDOW_NS && !full)
        return;
    double busy = span ? (double)ing->win_busy / (double)span : 1.0;
    double batch = ing->win_batches ? (double)ing->win_msgs / (double)ing->win_batches : 0;
    if (full)
        busy = 1.0, batch = MKS_INGEST_BATCH; /* a batch hit its bound: messages wait */
    uint32_t prev = ing->pressure;
    ing->pressure = busy >= 0.9 && batch >= 32                                 ? 2
                    : (busy >= 0.7 || (prev >= 1 && busy >= 0.5)) && batch >= 8 ? 1
                                                                                : 0;
    if (ing->pressure != prev)
        fprintf(stderr,
                "mkscope-collector: ingest %s (%.0f%% of the time ingesting, %.0f messages a"
                " batch)\n",
                ing->pressure == 2   ? "behind: agents asked to send counts only"
                : ing->pressure == 1 ? "busy: agents asked to send less detail"
                                     : "keeps up again",
                100 * busy, batch);
    ing->o.stats->pressure = ing->pressure;
    if (span >= PRESSURE_WINDOW_NS) {
        ing->win_start = now;
        ing->win_busy = ing->win_msgs = ing->win_batches = 0;
    }
}

int mks_ingest_run(struct mks_ingest *ing)
{
    uint64_t t0 = mono_ns();
    char err[256];
    update_pressure(ing, t0, false); /* the answers of this batch carry it */
    int n = 0;
    bool batch = mks_store_batch_begin(ing->o.st, err, sizeof(err)) == 0;
    ing->cmds_pending = mks_store_commands_pending(ing->o.st);
    if (!batch)
        fprintf(stderr, "mkscope-collector: %s; storing message by message\n", err);
    while (n < (int)MKS_INGEST_BATCH) {
        struct pending *p = &ing->p[n];
        void *body = NULL;
        *p = (struct pending){0};
        struct nn_iovec iov = {.iov_base = &body, .iov_len = NN_MSG};
        struct nn_msghdr h = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = &p->hdr,
                              .msg_controllen = NN_MSG};
        int len = nn_recvmsg(ing->o.sock, &h, NN_DONTWAIT);
        if (len < 0) {
            int e = nn_errno();
            if (e != EAGAIN && e != EINTR)
                fprintf(stderr, "mkscope-collector: receive: %s\n", nn_strerror(e));
            break;
        }
        handle(ing, p, body, (size_t)len);
        nn_freemsg(body);
        n++;
        if (mono_ns() - t0 >= MKS_INGEST_BATCH_NS)
            break;
    }
    bool committed = true;
    if (batch && mks_store_batch_commit(ing->o.st, err, sizeof(err))) {
        committed = false;
        ing->o.stats->store_errors += (uint64_t)n;
        fprintf(stderr, "mkscope-collector: %s: %d messages not stored, not acknowledged (the"
                        " agents send them again)\n",
                err, n);
    }
    if (n)
        ing->o.stats->batches++;
    for (int i = 0; i < n; i++) {
        struct pending *p = &ing->p[i];
        /* Nothing of a batch that did not commit is stored: resends of it
         * must be taken, not refused as copies. */
        if (!committed && p->env)
            mks_fresh_forget_env(ing->o.fresh, p->env);
        if (committed || p->refused)
            send_reply(ing, p);
        if (committed && p->env && ing->o.on_stored)
            ing->o.on_stored(ing->o.arg, p->env);
        mks_wire_free(p->env);
        free(p->reply);
        if (p->hdr)
            nn_freemsg(p->hdr);
    }
    uint64_t t1 = mono_ns();
    if (n) {
        ing->win_busy += t1 - t0;
        ing->win_msgs += (uint64_t)n;
        ing->win_batches++;
    }
    update_pressure(ing, t1, n == (int)MKS_INGEST_BATCH);
    return n;
}

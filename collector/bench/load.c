/*
 * mkscope-load run: N simulated agents against one collector.
 *
 * Each simulated agent speaks the agents' protocol (docs/wire.md): it
 * registers with the schema a real agent sent, sends an epoch summary every
 * 1/RATE s and a heartbeat every --heartbeat-ms, keeps one request in flight
 * and the rest in the agent's own bounded buffer (agt_spool, the agent's
 * code: oldest first, overflow counted as lost and reported in the next
 * summary), resends after --timeout-ms, and MACs every message with --key.
 * Summaries are those of a recording (load.h) of a real run, the source rank
 * rank % R of an R-rank recording, with job, rank, incarnation, seq, epoch,
 * steps, communication generations, peer ranks and times rewritten, so the
 * store fills as it would from a job of N ranks.
 *
 * One thread.  nanomsg allows 512 sockets per process, so the agents share a
 * few raw (AF_SP_RAW) NN_REQ sockets, each connected --conns / sockets times:
 * the collector sees one TCP connection per agent by default, and every
 * request carries its own request id (agent index and attempt), by which the
 * reply finds its agent.
 *
 * Measured per rate: summaries offered and acknowledged per second, send to
 * ack and due to ack latency (due: when the epoch ended, so queueing in the
 * agent counts), backlog, timeouts, losses, the collector's CPU and memory
 * (/proc/PID of --pid) and the store's size (--db).  A rate is kept up with
 * when every summary due was acknowledged within the phase but for one per
 * agent in flight, nothing was lost or timed out, and the p99 due-to-ack
 * latency stays below --max-p99-ms; with --rates A,B,C the first rate that
 * is not kept up with is the knee.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <nanomsg/nn.h>
#include <nanomsg/reqrep.h>
#include <poll.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "load.h"
#include "mkscope/commid.h"
#include "budget.h"
#include "spool.h"

#define MAX_RATES 32
/* Agents per raw socket: nanomsg's limit is 512 sockets a process. */
#define AGENTS_PER_SOCKET 256
/* Bit 61 alone set in a comm_gen names a local release (docs/wire.md). */
#define LOCAL_RELEASE_BIT (1ull << 61)

enum req_kind { RQ_NONE, RQ_REGISTER, RQ_HEARTBEAT, RQ_SUMMARY };

/* One source rank of the recording: its registration, a heartbeat and its
 * summaries, each decoded twice (pristine values and a copy rewritten per
 * send). */
struct tmpl {
    mks_envelope *reg, *hb;
    mks_envelope **orig, **work;
    size_t n;
    uint64_t step_lo, step_hi;
    double bytes; /* mean encoded summary size */
};

struct sim {
    uint32_t rank, src;
    uint64_t inc;
    struct agt_spool *spool;
    uint64_t seq, acked, lost_reported;
    uint64_t seq0; /* seq before the current phase */
    enum req_kind inflight;
    uint32_t req_id, attempt;
    uint64_t sent_ns, inflight_seq;
    bool registered, hb_due, queued;
    struct agt_pressure coll; /* the collector's load, as an agent reads it */
    uint64_t last_hb_ns, phase_ns;
    int sock;
};

struct phase {
    double rate;
    uint64_t t0, t_end, t_drained, period;
    uint64_t produced, acked, acked_in_window, hb_acked, timeouts, late, send_fail;
    uint64_t coarsened; /* summaries made at a coarser tier under the collector's pressure */
    uint64_t bytes, lost0, lost1, backlog_end, backlog_max;
    uint32_t *lat_send, *lat_due; /* microseconds */
    size_t n_lat, cap_lat;
    double cpu_s, wall_s, self_cpu_s;
    long rss_kb, hwm_kb;
    json_t *series;
    bool kept_up;
};

struct load {
    const char *url, *job, *key_path, *db, *out, *format;
    struct mks_wire_key key;
    bool have_key, verbose, stop, honour_pressure;
    uint32_t n_ranks, n_conns, n_socks, hb_ms;
    uint64_t timeout_ns, drain_ns, buffer_bytes;
    double seconds, rates[MAX_RATES], max_p99_ms;
    int n_rates;
    int pid;
    struct tmpl *tm;
    uint32_t n_src;
    struct sim *sims;
    int socks[16], rcvfd[16], sndfd[16];
    int sigfd;
    /* agents waiting for the link (a send nanomsg could not take yet) */
    uint32_t *queue, q_head, q_len;
    struct phase ph[MAX_RATES];
    struct phase *cur;
    uint64_t regs_acked;
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: mkscope-load run --recording FILE [OPTIONS]\n"
            "\n"
            "N simulated agents replay a recording's summaries against one collector at a\n"
            "chosen epoch rate and measure what it keeps up with. Stops by itself after\n"
            "each rate's --seconds and its drain (or on SIGINT/SIGTERM).\n"
            "\n"
            "OPTIONS\n"
            "  --collector URL     the collector's ingest socket [tcp://127.0.0.1:7400]\n"
            "  --recording FILE    envelopes of a real run (`mkscope-load record`)\n"
            "  --ranks N           simulated agents (default 1024)\n"
            "  --rate R            epochs per second per agent (default 10)\n"
            "  --rates A,B,...     several rates in turn (ascending): the knee is the first\n"
            "                      one not kept up with\n"
            "  --seconds S         length of each rate's phase (default 60)\n"
            "  --job NAME          job of the simulated agents (default load<pid>)\n"
            "  --key FILE          shared MAC key, as given to the collector\n"
            "  --conns N           TCP connections in all (default: one per agent)\n"
            "  --heartbeat-ms MS   heartbeat interval (default 1000, as the agent)\n"
            "  --timeout-ms MS     reply timeout before a resend (default 5000)\n"
            "  --buffer-bytes B    each agent's buffer of unacknowledged summaries (8 MiB)\n"
            "  --drain-ms MS       after each phase, time to deliver what is buffered\n"
            "                      (default 20000)\n"
            "  --max-p99-ms MS     p99 due-to-ack latency still counted as keeping up (100)\n"
            "  --ignore-pressure   send full detail whatever the collector's acks say (agents\n"
            "                      coarsen their summaries under pressure; a rate kept up with\n"
            "                      only by coarsening is reported as not kept up with)\n"
            "  --pid PID           the collector's process: CPU and memory from /proc\n"
            "  --db PATH           the collector's store: size, and the summaries it holds\n"
            "  -f text|json        report format (default text)\n"
            "  -o FILE             write the report to FILE\n"
            "  -v                  a line per second while running\n"
            "  -h, --help\n"
            "\n"
            "EXAMPLE\n"
            "  taskset -c 0 mkscope-collector --ingest tcp://127.0.0.1:7400 --db /tmp/l.db &\n"
            "  taskset -c 1 mkscope-load run --recording collector/bench/bench4.mksrec \\\n"
            "      --ranks 1024 --rate 10 --seconds 60 --pid $! --db /tmp/l.db\n");
}

/* ---- the recording as templates -------------------------------------------- */

static int build_templates(struct load *L, const struct load_rec *rec, char *err, size_t errlen)
{
    uint32_t n_src = 0;
    mks_envelope **envs = calloc(rec->n, sizeof(*envs));
    if (!envs)
        return -ENOMEM;
    int rc = 0;
    for (size_t i = 0; i < rec->n; i++) {
        char why[256];
        if (mks_wire_decode(rec->msg[i], rec->len[i], NULL, &envs[i], why, sizeof(why))) {
            snprintf(err, errlen, "recording envelope %zu: %s", i, why);
            rc = -EINVAL;
            goto out;
        }
        if (envs[i]->rank >= 4096) {
            snprintf(err, errlen, "recording envelope %zu: rank %u", i, envs[i]->rank);
            rc = -EINVAL;
            goto out;
        }
        if (envs[i]->rank + 1 > n_src)
            n_src = envs[i]->rank + 1;
    }
    L->tm = calloc(n_src, sizeof(*L->tm));
    if (!L->tm) {
        rc = -ENOMEM;
        goto out;
    }
    L->n_src = n_src;
    for (size_t i = 0; i < rec->n; i++) {
        struct tmpl *t = &L->tm[envs[i]->rank];
        switch (envs[i]->body_case) {
        case MKSCOPE__V1__ENVELOPE__BODY_REGISTER:
            mks_wire_free(t->reg);
            t->reg = envs[i];
            envs[i] = NULL;
            break;
        case MKSCOPE__V1__ENVELOPE__BODY_HEARTBEAT:
            if (!t->hb) {
                t->hb = envs[i];
                envs[i] = NULL;
            }
            break;
        case MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY: {
            mks_envelope **o = realloc(t->orig, (t->n + 1) * sizeof(*o));
            if (o)
                t->orig = o;
            mks_envelope **w = o ? realloc(t->work, (t->n + 1) * sizeof(*w)) : NULL;
            if (!w) {
                rc = -ENOMEM;
                goto out;
            }
            t->work = w;
            char why[256];
            if (mks_wire_decode(rec->msg[i], rec->len[i], NULL, &t->work[t->n], why,
                                sizeof(why))) {
                rc = -EINVAL;
                goto out;
            }
            t->orig[t->n] = envs[i];
            t->bytes += (double)rec->len[i];
            const Mkscope__V1__EpochSummary *s = envs[i]->epoch_summary;
            for (size_t k = 0; k < s->n_steps; k++) {
                uint64_t st = s->steps[k]->step;
                if (!t->step_hi || st < t->step_lo)
                    t->step_lo = st;
                if (st + 1 > t->step_hi)
                    t->step_hi = st + 1;
            }
            t->n++;
            envs[i] = NULL;
            break;
        }
        default: break;
        }
    }
    for (uint32_t r = 0; r < n_src; r++) {
        struct tmpl *t = &L->tm[r];
        if (!t->reg || !t->n) {
            snprintf(err, errlen, "the recording has %s for rank %u: record a longer run",
                     t->reg ? "no summary" : "no registration", r);
            rc = -EINVAL;
            goto out;
        }
        t->bytes /= (double)t->n;
    }
out:
    for (size_t i = 0; i < rec->n; i++)
        mks_wire_free(envs[i]);
    free(envs);
    return rc;
}

static void free_templates(struct load *L)
{
    for (uint32_t r = 0; L->tm && r < L->n_src; r++) {
        struct tmpl *t = &L->tm[r];
        mks_wire_free(t->reg);
        mks_wire_free(t->hb);
        for (size_t i = 0; i < t->n; i++) {
            mks_wire_free(t->orig[i]);
            mks_wire_free(t->work[i]);
        }
        free(t->orig);
        free(t->work);
    }
    free(L->tm);
}

/* A communication generation of the recording moved by `shift` steps. */
static uint64_t shift_gen(uint64_t gen, uint64_t shift)
{
    if ((gen >> 62) == 0 && (gen & LOCAL_RELEASE_BIT)) {
        uint64_t step = (gen & (LOCAL_RELEASE_BIT - 1)) >> 8;
        return LOCAL_RELEASE_BIT | (((step + shift) << 8) & (LOCAL_RELEASE_BIT - 1)) |
               (gen & 0xff);
    }
    struct mks_commid_fields f;
    if (mks_commid_decode(gen, &f) || (f.kind != MKS_COMMID_STEP))
        return gen;
    f.step = (uint32_t)((f.step + shift) % MKS_COMMID_STEP_WRAP);
    uint64_t out = gen;
    mks_commid_make(&f, &out);
    return out;
}

/* The recorded rank's peer as a rank of the simulated job: the simulated
 * ranks form groups of the recording's size. */
static uint32_t map_peer(const struct load *L, const struct sim *s, uint32_t peer)
{
    uint32_t base = s->rank - s->src;
    return peer < L->n_src && base + peer < L->n_ranks ? base + peer : peer;
}

/* Rewrite summary k of the sim's template for seq (the epoch that ended at
 * due_real / due_mono) and encode it. */
static int make_summary(struct load *L, struct sim *s, uint64_t seq, uint64_t lost,
                        uint64_t due_mono, uint64_t due_real, uint8_t **buf, size_t *len)
{
    uint32_t level = L->honour_pressure ? s->coll.level : 0;
    struct tmpl *t = &L->tm[s->src];
    size_t k = (size_t)((seq - 1) % t->n);
    uint64_t cycle = (seq - 1) / t->n;
    const mks_envelope *oe = t->orig[k];
    mks_envelope *we = t->work[k];
    const Mkscope__V1__EpochSummary *o = oe->epoch_summary;
    Mkscope__V1__EpochSummary *w = we->epoch_summary;
    uint64_t sstep = cycle * (t->step_hi - t->step_lo);
    /* device times as if the epoch ended now (the CPU backend's device
     * clock is CLOCK_MONOTONIC) */
    uint64_t dshift = o->t_end_dev_ns ? due_mono - o->t_end_dev_ns : 0;
#define DEV(x) ((x) ? (x) + dshift : 0)
    char *job = we->job;
    /* the wire's freshness fields of a message of its own (nonce, time) */
    mks_envelope fresh;
    mks_wire_init(&fresh, L->job, s->rank, seq);
    we->nonce = fresh.nonce;
    we->sent_ns = fresh.sent_ns;
    we->job = (char *)L->job;
    we->rank = s->rank;
    we->incarnation = s->inc;
    we->seq = seq;
    w->epoch = seq;
    w->t_end_host_ns = due_real;
    w->t_begin_host_ns = due_real - (o->t_end_host_ns - o->t_begin_host_ns);
    w->t_begin_dev_ns = DEV(o->t_begin_dev_ns);
    w->t_end_dev_ns = DEV(o->t_end_dev_ns);
    w->lost_summaries = lost;
    for (size_t i = 0; i < o->n_task_stats; i++)
        w->task_stats[i]->step = (uint32_t)(o->task_stats[i]->step + sstep);
    for (size_t i = 0; i < o->n_steps; i++) {
        w->steps[i]->step = (uint32_t)(o->steps[i]->step + sstep);
        w->steps[i]->t_begin_dev_ns = DEV(o->steps[i]->t_begin_dev_ns);
        w->steps[i]->t_end_dev_ns = DEV(o->steps[i]->t_end_dev_ns);
    }
    for (size_t i = 0; i < o->n_remote_waits; i++) {
        const Mkscope__V1__RemoteWait *a = o->remote_waits[i];
        Mkscope__V1__RemoteWait *b = w->remote_waits[i];
        b->comm_gen = shift_gen(a->comm_gen, sstep);
        b->peer_rank = map_peer(L, s, a->peer_rank);
        b->step = (uint32_t)(a->step + sstep);
        b->t_begin_dev_ns = DEV(a->t_begin_dev_ns);
        b->t_end_dev_ns = DEV(a->t_end_dev_ns);
    }
    for (size_t i = 0; i < o->n_releases; i++) {
        const Mkscope__V1__Release *a = o->releases[i];
        Mkscope__V1__Release *b = w->releases[i];
        b->comm_gen = shift_gen(a->comm_gen, sstep);
        b->consumer_rank = a->consumer_rank == oe->rank ? s->rank : map_peer(L, s, a->consumer_rank);
        b->step = (uint32_t)(a->step + sstep);
        b->t_ready_dev_ns = DEV(a->t_ready_dev_ns);
        b->t_start_dev_ns = DEV(a->t_start_dev_ns);
        b->t_end_dev_ns = DEV(a->t_end_dev_ns);
        b->t_comm_begin_dev_ns = DEV(a->t_comm_begin_dev_ns);
        b->t_comm_end_dev_ns = DEV(a->t_comm_end_dev_ns);
        b->t_release_dev_ns = DEV(a->t_release_dev_ns);
    }
    for (size_t i = 0; i < o->n_local_waits; i++)
        w->local_waits[i]->step = (uint32_t)(o->local_waits[i]->step + sstep);
    for (size_t i = 0; i < o->n_workers; i++)
        w->workers[i]->step = (uint32_t)(o->workers[i]->step + sstep);
    for (size_t i = 0; i < o->n_gens; i++) {
        w->gens[i]->step = (uint32_t)(o->gens[i]->step + sstep);
        w->gens[i]->t_dev_ns = DEV(o->gens[i]->t_dev_ns);
    }
#undef DEV
    /* Under the collector's pressure an agent sends a coarser tier (budget.h):
     * level 1 without wait and release records and user maps, level 2 also
     * without per-step tables and histograms.  Fields are hidden for the
     * encoding and put back after. */
    size_t n_w = w->n_remote_waits, n_r = w->n_releases, n_m = w->n_maps, n_s = w->n_steps;
    size_t n_lw = w->n_local_waits, n_wk = w->n_workers, n_g = w->n_gens;
    uint32_t tier = w->detail_tier;
    uint64_t dropped = w->waits_dropped;
    Mkscope__V1__Hist *hists[2 * 4096];
    size_t n_h = w->n_task_stats < 4096 ? w->n_task_stats : 4096;
    w->pressure = level;
    if (level >= 1 && tier > 1) {
        w->waits_dropped += n_w + n_r;
        w->n_remote_waits = w->n_releases = w->n_maps = 0;
        w->detail_tier = 1;
    }
    if (level >= 2 && tier > 0) {
        w->n_steps = w->n_local_waits = w->n_workers = w->n_gens = 0;
        w->n_remote_waits = w->n_releases = w->n_maps = 0;
        for (size_t i = 0; i < n_h; i++) {
            hists[2 * i] = w->task_stats[i]->queue;
            hists[2 * i + 1] = w->task_stats[i]->run;
            w->task_stats[i]->queue = w->task_stats[i]->run = NULL;
        }
        w->detail_tier = 0;
    }
    if (w->detail_tier != tier && L->cur)
        L->cur->coarsened++;
    char why[256];
    int rc = mks_wire_encode(we, L->have_key ? &L->key : NULL, buf, len, why, sizeof(why));
    if (level >= 2 && tier > 0)
        for (size_t i = 0; i < n_h; i++) {
            w->task_stats[i]->queue = hists[2 * i];
            w->task_stats[i]->run = hists[2 * i + 1];
        }
    w->n_remote_waits = n_w, w->n_releases = n_r, w->n_maps = n_m, w->n_steps = n_s;
    w->n_local_waits = n_lw, w->n_workers = n_wk, w->n_gens = n_g;
    w->detail_tier = tier;
    w->waits_dropped = dropped;
    we->job = job;
    if (rc)
        fprintf(stderr, "mkscope-load: cannot encode a summary: %s\n", why);
    return rc;
}

/* ---- requests ---------------------------------------------------------------- */

static int send_raw(struct load *L, struct sim *s, uint32_t idx, const void *buf, size_t len)
{
    uint32_t id = 0x80000000u | (idx << 8) | (s->attempt++ & 0xffu);
    unsigned char ctl[NN_CMSG_SPACE(sizeof(size_t) + 4)];
    memset(ctl, 0, sizeof(ctl));
    struct nn_cmsghdr *c = (struct nn_cmsghdr *)ctl;
    c->cmsg_len = NN_CMSG_LEN(sizeof(size_t) + 4);
    c->cmsg_level = PROTO_SP;
    c->cmsg_type = SP_HDR;
    /* SP_HDR data: the header's length, then the header (the request id,
     * big-endian, top bit set: the bottom of the REQ/REP backtrace) */
    unsigned char *d = NN_CMSG_DATA(c);
    size_t hl = 4;
    memcpy(d, &hl, sizeof(hl));
    d += sizeof(hl);
    d[0] = (unsigned char)(id >> 24), d[1] = (unsigned char)(id >> 16);
    d[2] = (unsigned char)(id >> 8), d[3] = (unsigned char)id;
    struct nn_iovec iov = {(void *)buf, len};
    struct nn_msghdr h = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
                          .msg_controllen = sizeof(ctl)};
    if (nn_sendmsg(L->socks[s->sock], &h, NN_DONTWAIT) < 0)
        return -nn_errno();
    s->req_id = id;
    s->sent_ns = load_mono_ns();
    if (L->cur)
        L->cur->bytes += len;
    return 0;
}

static void fill_env(struct load *L, const struct sim *s, mks_envelope *env)
{
    mks_wire_init(env, L->job, s->rank, s->seq);
    env->incarnation = s->inc;
}

/* Encode (with the MAC) and send a request made on the spot. */
static int send_env(struct load *L, struct sim *s, uint32_t idx, const mks_envelope *env)
{
    uint8_t *buf;
    size_t len;
    char why[256];
    if (mks_wire_encode(env, L->have_key ? &L->key : NULL, &buf, &len, why, sizeof(why))) {
        fprintf(stderr, "mkscope-load: cannot encode %s: %s\n",
                mks_wire_body_name(env->body_case), why);
        return -EINVAL;
    }
    int rc = send_raw(L, s, idx, buf, len);
    free(buf);
    return rc;
}

static int send_register(struct load *L, struct sim *s, uint32_t idx)
{
    const mks_envelope *t = L->tm[s->src].reg;
    Mkscope__V1__Register r = *t->register_;
    r.n_ranks = L->n_ranks;
    r.pid = (int32_t)getpid();
    r.heartbeat_ns = (uint64_t)L->hb_ms * 1000000ull;
    mks_envelope env;
    fill_env(L, s, &env);
    env.body_case = MKSCOPE__V1__ENVELOPE__BODY_REGISTER;
    env.register_ = &r;
    return send_env(L, s, idx, &env);
}

static int send_heartbeat(struct load *L, struct sim *s, uint32_t idx)
{
    Mkscope__V1__Heartbeat hb = MKSCOPE__V1__HEARTBEAT__INIT;
    const mks_envelope *t = L->tm[s->src].hb;
    if (t)
        hb = *t->heartbeat;
    struct agt_spool_stats st;
    agt_spool_stats(s->spool, &st);
    hb.agent_time_ns = load_real_ns();
    hb.last_seq = s->seq;
    hb.app_alive = 1;
    hb.unacked = st.entries;
    hb.lost_summaries = st.lost;
    mks_envelope env;
    fill_env(L, s, &env);
    env.body_case = MKSCOPE__V1__ENVELOPE__BODY_HEARTBEAT;
    env.heartbeat = &hb;
    return send_env(L, s, idx, &env);
}

/* Send the agent's next request if nothing is in flight, in the agent's
 * order: registration, heartbeat when due, the oldest buffered summary.
 * Returns -EAGAIN when nanomsg could not take it (retried later). */
static int pump(struct load *L, uint32_t idx)
{
    struct sim *s = &L->sims[idx];
    if (s->inflight != RQ_NONE)
        return 0;
    int rc = 0;
    if (!s->registered) {
        if ((rc = send_register(L, s, idx)) == 0)
            s->inflight = RQ_REGISTER;
    } else if (s->hb_due) {
        if ((rc = send_heartbeat(L, s, idx)) == 0) {
            s->inflight = RQ_HEARTBEAT;
            s->hb_due = false;
        }
    } else {
        uint64_t seq;
        const void *buf;
        size_t len;
        if (agt_spool_head(s->spool, &seq, &buf, &len) == 0 &&
            (rc = send_raw(L, s, idx, buf, len)) == 0) {
            s->inflight = RQ_SUMMARY;
            s->inflight_seq = seq;
            agt_spool_pin(s->spool, seq);
        }
    }
    return rc;
}

static void enqueue(struct load *L, uint32_t idx)
{
    struct sim *s = &L->sims[idx];
    if (s->queued)
        return;
    s->queued = true;
    L->queue[(L->q_head + L->q_len++) % L->n_ranks] = idx;
}

/* Pump every queued agent once; those nanomsg could not take stay queued. */
static void run_queue(struct load *L)
{
    uint32_t n = L->q_len;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t idx = L->queue[L->q_head];
        L->q_head = (L->q_head + 1) % L->n_ranks;
        L->q_len--;
        L->sims[idx].queued = false;
        int rc = pump(L, idx);
        if (rc == -EAGAIN) {
            enqueue(L, idx);
        } else if (rc) {
            if (L->cur)
                L->cur->send_fail++;
        }
    }
}

static void add_lat(struct phase *p, uint64_t send_ns, uint64_t due_ns)
{
    if (p->n_lat == p->cap_lat) {
        size_t cap = p->cap_lat ? 2 * p->cap_lat : 65536;
        uint32_t *a = realloc(p->lat_send, cap * sizeof(*a));
        if (a)
            p->lat_send = a;
        uint32_t *b = a ? realloc(p->lat_due, cap * sizeof(*b)) : NULL;
        if (!b)
            return;
        p->lat_due = b;
        p->cap_lat = cap;
    }
    p->lat_send[p->n_lat] = (uint32_t)(send_ns / 1000 > UINT32_MAX ? UINT32_MAX : send_ns / 1000);
    p->lat_due[p->n_lat++] = (uint32_t)(due_ns / 1000 > UINT32_MAX ? UINT32_MAX : due_ns / 1000);
}

static void on_reply(struct load *L, uint32_t id, const void *buf, size_t len)
{
    uint32_t idx = (id & 0x7fffffffu) >> 8;
    struct phase *p = L->cur;
    if (idx >= L->n_ranks || L->sims[idx].inflight == RQ_NONE || L->sims[idx].req_id != id) {
        if (p)
            p->late++;
        return;
    }
    struct sim *s = &L->sims[idx];
    uint64_t now = load_mono_ns();
    enum req_kind was = s->inflight;
    s->inflight = RQ_NONE;
    agt_spool_pin(s->spool, 0);
    mks_envelope *env = NULL;
    char why[256];
    if (mks_wire_decode(buf, len, L->have_key ? &L->key : NULL, &env, why, sizeof(why))) {
        fprintf(stderr, "mkscope-load: rank %u: reply rejected: %s\n", s->rank, why);
        enqueue(L, idx);
        return;
    }
    if (env->body_case == MKSCOPE__V1__ENVELOPE__BODY_REGISTER_ACK) {
        if (!env->register_ack->accepted) {
            fprintf(stderr, "mkscope-load: rank %u: collector refused: %s\n", s->rank,
                    env->register_ack->reason);
            if (was != RQ_REGISTER && p)
                p->send_fail++;
        } else if (was == RQ_REGISTER) {
            s->registered = true;
            L->regs_acked++;
            agt_spool_ack(s->spool, env->register_ack->stored_seq);
        }
    } else if (env->body_case == MKSCOPE__V1__ENVELOPE__BODY_ACK) {
        agt_pressure_note(&s->coll, env->ack->pressure, now - s->sent_ns,
                          L->cur ? L->cur->period : 100000000ull);
        if (was == RQ_SUMMARY) {
            uint64_t up = env->ack->up_to_seq < s->seq ? env->ack->up_to_seq : s->seq;
            if (up >= s->inflight_seq && p) {
                p->acked++;
                if (now <= p->t_end)
                    p->acked_in_window++;
                uint64_t due = s->inflight_seq > s->seq0
                                   ? p->t0 + s->phase_ns + (s->inflight_seq - s->seq0) * p->period
                                   : s->sent_ns;
                add_lat(p, now - s->sent_ns, now > due ? now - due : 0);
            }
            if (up > s->acked)
                s->acked = up;
            agt_spool_ack(s->spool, up);
        } else if (was == RQ_HEARTBEAT && p) {
            p->hb_acked++;
        }
    }
    mks_wire_free(env);
    enqueue(L, idx);
}

static void drain_socket(struct load *L, int k)
{
    for (;;) {
        void *body = NULL, *ctl = NULL;
        struct nn_iovec iov = {&body, NN_MSG};
        struct nn_msghdr h = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = &ctl,
                              .msg_controllen = NN_MSG};
        int n = nn_recvmsg(L->socks[k], &h, NN_DONTWAIT);
        if (n < 0)
            return;
        uint32_t id = 0;
        struct nn_cmsghdr *c = NN_CMSG_FIRSTHDR(&h);
        for (; c; c = NN_CMSG_NXTHDR(&h, c)) {
            if (c->cmsg_level != PROTO_SP || c->cmsg_type != SP_HDR)
                continue;
            const unsigned char *d = NN_CMSG_DATA(c);
            size_t hl;
            memcpy(&hl, d, sizeof(hl));
            if (hl >= 4) {
                d += sizeof(hl) + hl - 4;
                id = (uint32_t)d[0] << 24 | (uint32_t)d[1] << 16 | (uint32_t)d[2] << 8 | d[3];
            }
        }
        if (id)
            on_reply(L, id, body, (size_t)n);
        nn_freemsg(body);
        if (ctl)
            nn_freemsg(ctl);
    }
}

/* ---- the collector's process ---------------------------------------------- */

static int proc_cpu(int pid, double *secs)
{
    char path[64], buf[2048];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -errno;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    /* fields after the command name, which may hold spaces and ')' */
    char *p = strrchr(buf, ')');
    if (!p)
        return -EINVAL;
    unsigned long long ut = 0, st = 0;
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -EINVAL;
    *secs = (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
    return 0;
}

static void proc_mem(int pid, long *rss_kb, long *hwm_kb)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", pid);
    FILE *f = fopen(path, "r");
    *rss_kb = *hwm_kb = -1;
    if (!f)
        return;
    while (fgets(line, sizeof(line), f)) {
        sscanf(line, "VmRSS: %ld", rss_kb);
        sscanf(line, "VmHWM: %ld", hwm_kb);
    }
    fclose(f);
}

/* This process's CPU time, every thread (nanomsg's own included). */
static double self_cpu(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static long long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : 0;
}

/* ---- phases -------------------------------------------------------------------- */

static uint64_t backlog(const struct load *L)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < L->n_ranks; i++) {
        struct agt_spool_stats st;
        agt_spool_stats(L->sims[i].spool, &st);
        n += st.entries;
    }
    return n;
}

static uint64_t lost_total(const struct load *L)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < L->n_ranks; i++) {
        struct agt_spool_stats st;
        agt_spool_stats(L->sims[i].spool, &st);
        n += st.lost;
    }
    return n;
}

static void check_timeouts(struct load *L, uint64_t now)
{
    for (uint32_t i = 0; i < L->n_ranks; i++) {
        struct sim *s = &L->sims[i];
        if (s->inflight == RQ_NONE || now < s->sent_ns + L->timeout_ns)
            continue;
        /* As the agent: the collector may have restarted, register again
         * before the summary is sent again. */
        if (L->cur)
            L->cur->timeouts++;
        s->inflight = RQ_NONE;
        s->registered = false;
        agt_spool_pin(s->spool, 0);
        enqueue(L, i);
    }
}

/* Wait up to wait_ns for replies (and, while agents wait for nanomsg to
 * take a request, for a socket to take more), then read them all. */
static void wait_io(struct load *L, uint64_t wait_ns)
{
    struct pollfd pf[33];
    int n = 0;
    for (uint32_t k = 0; k < L->n_socks; k++)
        pf[n++] = (struct pollfd){L->rcvfd[k], POLLIN, 0};
    for (uint32_t k = 0; L->q_len && k < L->n_socks; k++)
        pf[n++] = (struct pollfd){L->sndfd[k], POLLIN, 0};
    pf[n++] = (struct pollfd){L->sigfd, POLLIN, 0};
    struct timespec ts = {.tv_sec = (time_t)(wait_ns / 1000000000ull),
                          .tv_nsec = (long)(wait_ns % 1000000000ull)};
    if (ppoll(pf, (nfds_t)n, &ts, NULL) < 0)
        return;
    if (pf[n - 1].revents & POLLIN) {
        fprintf(stderr, "mkscope-load: stopping on a signal\n");
        L->stop = true;
    }
    for (uint32_t k = 0; k < L->n_socks; k++)
        if (pf[k].revents & POLLIN)
            drain_socket(L, (int)k);
}

static void produce(struct load *L, struct sim *s, uint32_t idx, uint64_t due_mono, uint64_t now)
{
    struct agt_spool_stats st;
    agt_spool_stats(s->spool, &st);
    uint64_t lost = st.lost + st.lost_tags.v[0] - s->lost_reported;
    uint8_t *buf;
    size_t len;
    uint64_t due_real = load_real_ns() - (now - due_mono);
    if (make_summary(L, s, s->seq + 1, lost, due_mono, due_real, &buf, &len) == 0) {
        struct agt_spool_tag tag = {.v = {lost}};
        if (agt_spool_push(s->spool, s->seq + 1, buf, len, &tag) == 0) {
            s->seq++;
            s->lost_reported = st.lost + st.lost_tags.v[0];
            L->cur->produced++;
        }
        free(buf);
    }
    if (now - s->last_hb_ns >= (uint64_t)L->hb_ms * 1000000ull) {
        s->hb_due = true;
        s->last_hb_ns = now;
    }
    enqueue(L, idx);
}

static void series_point(struct load *L, struct phase *p, uint64_t now, uint64_t *last_prod,
                         uint64_t *last_ack, double *last_cpu)
{
    double cpu = 0;
    if (L->pid > 0)
        proc_cpu(L->pid, &cpu);
    uint64_t bl = backlog(L);
    if (bl > p->backlog_max)
        p->backlog_max = bl;
    json_array_append_new(p->series,
                          json_pack("{s:f, s:I, s:I, s:I, s:f}", "t", (double)(now - p->t0) / 1e9,
                                    "produced", (json_int_t)(p->produced - *last_prod), "acked",
                                    (json_int_t)(p->acked - *last_ack), "backlog", (json_int_t)bl,
                                    "collector_cpu", cpu - *last_cpu));
    if (L->verbose)
        fprintf(stderr, "mkscope-load: rate %g t=%.0fs produced %" PRIu64 "/s acked %" PRIu64
                        "/s backlog %" PRIu64 " collector cpu %.0f%%\n",
                p->rate, (double)(now - p->t0) / 1e9, p->produced - *last_prod,
                p->acked - *last_ack, bl, 100 * (cpu - *last_cpu));
    *last_prod = p->produced, *last_ack = p->acked, *last_cpu = cpu;
}

static void run_phase(struct load *L, struct phase *p)
{
    uint32_t N = L->n_ranks;
    p->period = (uint64_t)(1e9 / p->rate);
    p->series = json_array();
    L->cur = p;
    p->lost0 = lost_total(L);
    for (uint32_t i = 0; i < N; i++) {
        /* spread evenly over the period, as agents started at different
         * times would be */
        L->sims[i].phase_ns = (uint64_t)((double)p->period * i / N);
        L->sims[i].seq0 = L->sims[i].seq;
    }
    double cpu0 = 0, self0 = self_cpu();
    if (L->pid > 0)
        proc_cpu(L->pid, &cpu0);
    p->t0 = load_mono_ns();
    p->t_end = p->t0 + (uint64_t)(L->seconds * 1e9);
    uint64_t k = 1; /* the epoch that ends next */
    uint32_t cur = 0;
    uint64_t next_tick = p->t0, next_series = p->t0 + 1000000000ull;
    uint64_t lp = 0, la = 0;
    double lc = cpu0;
    while (!L->stop) {
        uint64_t now = load_mono_ns();
        if (now >= p->t_end)
            break;
        for (;;) {
            uint64_t due = p->t0 + k * p->period + L->sims[cur].phase_ns;
            if (due > now || due >= p->t_end)
                break;
            produce(L, &L->sims[cur], cur, due, now);
            if (++cur == N)
                cur = 0, k++;
        }
        run_queue(L);
        if (now >= next_tick) {
            check_timeouts(L, now);
            next_tick = now + 10000000ull;
        }
        if (now >= next_series) {
            series_point(L, p, now, &lp, &la, &lc);
            next_series += 1000000000ull;
        }
        /* Epochs end every few tens of microseconds at a thousand agents:
         * sleep at least 1 ms and make what came due meanwhile together (its
         * due time, which the latency is measured from, stays exact). */
        uint64_t due = p->t0 + k * p->period + L->sims[cur].phase_ns;
        uint64_t wait = due > now ? due - now : 0;
        if (wait < 1000000ull)
            wait = 1000000ull;
        if (wait > 10000000ull)
            wait = 10000000ull;
        wait_io(L, wait);
    }
    double cpu1 = cpu0;
    if (L->pid > 0)
        proc_cpu(L->pid, &cpu1);
    uint64_t t1 = load_mono_ns();
    p->cpu_s = cpu1 - cpu0;
    p->self_cpu_s = self_cpu() - self0;
    p->wall_s = (double)(t1 - p->t0) / 1e9;
    p->backlog_end = backlog(L);
    /* deliver what is buffered, counting it still as this phase's */
    uint64_t deadline = t1 + L->drain_ns;
    while (!L->stop && load_mono_ns() < deadline) {
        bool idle = L->q_len == 0;
        for (uint32_t i = 0; idle && i < N; i++) {
            struct agt_spool_stats st;
            agt_spool_stats(L->sims[i].spool, &st);
            idle = st.entries == 0 && L->sims[i].inflight == RQ_NONE;
        }
        if (idle)
            break;
        run_queue(L);
        check_timeouts(L, load_mono_ns());
        wait_io(L, (L->q_len ? 1 : 10) * 1000000ull);
    }
    p->t_drained = load_mono_ns();
    p->lost1 = lost_total(L);
    if (L->pid > 0)
        proc_mem(L->pid, &p->rss_kb, &p->hwm_kb);
}

/* ---- report ------------------------------------------------------------------ */

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static double pct(const uint32_t *v, size_t n, double q)
{
    if (!n)
        return 0;
    size_t i = (size_t)ceil(q * (double)n) - 1;
    return v[i < n ? i : n - 1] / 1000.0; /* ms */
}

/* Sort the latencies and decide whether the phase's rate was kept up with. */
static void judge(const struct load *L, struct phase *p)
{
    qsort(p->lat_send, p->n_lat, sizeof(uint32_t), cmp_u32);
    qsort(p->lat_due, p->n_lat, sizeof(uint32_t), cmp_u32);
    p->kept_up = p->lost1 == p->lost0 && p->timeouts == 0 && p->send_fail == 0 &&
                 p->backlog_end <= L->n_ranks &&
                 pct(p->lat_due, p->n_lat, 0.99) <= L->max_p99_ms && p->acked == p->produced &&
                 p->coarsened == 0;
}

static json_t *phase_json(const struct load *L, const struct phase *p)
{
    double secs = L->seconds;
    double p99_due = pct(p->lat_due, p->n_lat, 0.99);
    uint64_t lost = p->lost1 - p->lost0;
    return json_pack(
        "{s:f, s:f, s:I, s:f, s:I, s:f, s:f, s:{s:f, s:f, s:f, s:f}, s:{s:f, s:f, s:f, s:f},"
        " s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:f, s:I, s:I, s:b, s:o}",
        "rate", p->rate, "offered_per_s", (double)p->produced / secs, "produced",
        (json_int_t)p->produced, "acked_per_s", (double)p->acked_in_window / secs, "acked",
        (json_int_t)p->acked, "bytes_per_s", (double)p->bytes / secs, "drain_s",
        (double)(p->t_drained - p->t_end) / 1e9 > 0 ? (double)(p->t_drained - p->t_end) / 1e9
                                                     : 0.0,
        "send_to_ack_ms", "p50", pct(p->lat_send, p->n_lat, 0.5), "p90",
        pct(p->lat_send, p->n_lat, 0.9), "p99", pct(p->lat_send, p->n_lat, 0.99), "max",
        pct(p->lat_send, p->n_lat, 1.0), "due_to_ack_ms", "p50", pct(p->lat_due, p->n_lat, 0.5),
        "p90", pct(p->lat_due, p->n_lat, 0.9), "p99", p99_due, "max",
        pct(p->lat_due, p->n_lat, 1.0), "heartbeats_acked", (json_int_t)p->hb_acked, "timeouts",
        (json_int_t)p->timeouts, "late_replies", (json_int_t)p->late, "send_failures",
        (json_int_t)p->send_fail, "coarsened", (json_int_t)p->coarsened, "lost",
        (json_int_t)lost, "backlog_end",
        (json_int_t)p->backlog_end, "backlog_max", (json_int_t)p->backlog_max, "collector_cpu",
        L->pid > 0 ? p->cpu_s / p->wall_s : -1.0, "generator_cpu", p->self_cpu_s / p->wall_s,
        "phase_s", p->wall_s, "collector_rss_kb",
        (json_int_t)p->rss_kb, "collector_hwm_kb", (json_int_t)p->hwm_kb, "kept_up", p->kept_up,
        "series", json_incref(p->series));
}

static json_t *store_json(const struct load *L)
{
    if (!L->db)
        return json_null();
    char wal[4200];
    snprintf(wal, sizeof(wal), "%s-wal", L->db);
    json_t *j = json_pack("{s:s, s:I, s:I}", "path", L->db, "db_bytes",
                          (json_int_t)file_size(L->db), "wal_bytes", (json_int_t)file_size(wal));
    sqlite3 *db = NULL;
    sqlite3_stmt *s = NULL;
    if (sqlite3_open_v2(L->db, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(db,
                           "SELECT (SELECT COUNT(*) FROM epochs WHERE job=?1),"
                           " (SELECT COUNT(*) FROM ranks WHERE job=?1),"
                           " (SELECT COALESCE(SUM(lost_summaries),0) FROM ranks WHERE job=?1)",
                           -1, &s, NULL) == SQLITE_OK) {
        sqlite3_busy_timeout(db, 5000);
        sqlite3_bind_text(s, 1, L->job, -1, SQLITE_STATIC);
        if (sqlite3_step(s) == SQLITE_ROW) {
            json_object_set_new(j, "summaries", json_integer(sqlite3_column_int64(s, 0)));
            json_object_set_new(j, "ranks", json_integer(sqlite3_column_int64(s, 1)));
            json_object_set_new(j, "lost_reported", json_integer(sqlite3_column_int64(s, 2)));
        }
    } else {
        json_object_set_new(j, "error", json_string(db ? sqlite3_errmsg(db) : "cannot open"));
    }
    sqlite3_finalize(s);
    sqlite3_close(db);
    return j;
}

static void print_text(FILE *f, const struct load *L, json_t *rep)
{
    fprintf(f, "mkscope-load: %u agents (%u sources of %s), %u connections, summary %.0f B mean\n",
            L->n_ranks, L->n_src, json_string_value(json_object_get(rep, "recording")),
            L->n_conns, json_real_value(json_object_get(rep, "summary_bytes")));
    fprintf(f, "%8s %9s %9s %9s %9s %9s %9s %8s %6s %6s %7s %8s %8s %7s %s\n", "rate", "offered/s",
            "acked/s", "send p50", "send p99", "due p99", "due max", "backlog", "lost", "tmo",
            "coarse", "cpu", "gen cpu", "rss MB", "kept up");
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(rep, "phases"), i, p)
    {
        json_t *sa = json_object_get(p, "send_to_ack_ms"), *da = json_object_get(p, "due_to_ack_ms");
        fprintf(f, "%8g %9.0f %9.0f %7.1fms %7.1fms %7.1fms %7.0fms %8lld %6lld %6lld %7lld %7.0f%% %7.0f%% %7.1f %s\n",
                json_real_value(json_object_get(p, "rate")),
                json_real_value(json_object_get(p, "offered_per_s")),
                json_real_value(json_object_get(p, "acked_per_s")),
                json_real_value(json_object_get(sa, "p50")),
                json_real_value(json_object_get(sa, "p99")),
                json_real_value(json_object_get(da, "p99")),
                json_real_value(json_object_get(da, "max")),
                (long long)json_integer_value(json_object_get(p, "backlog_end")),
                (long long)json_integer_value(json_object_get(p, "lost")),
                (long long)json_integer_value(json_object_get(p, "timeouts")),
                (long long)json_integer_value(json_object_get(p, "coarsened")),
                100 * json_real_value(json_object_get(p, "collector_cpu")),
                100 * json_real_value(json_object_get(p, "generator_cpu")),
                (double)json_integer_value(json_object_get(p, "collector_rss_kb")) / 1024,
                json_is_true(json_object_get(p, "kept_up")) ? "yes" : "no");
    }
    json_t *knee = json_object_get(rep, "knee");
    if (json_is_object(knee))
        fprintf(f, "knee: kept up with %.0f summaries/s (rate %g), not with %.0f (rate %g)\n",
                json_real_value(json_object_get(knee, "kept_up_per_s")),
                json_real_value(json_object_get(knee, "kept_up_rate")),
                json_real_value(json_object_get(knee, "behind_per_s")),
                json_real_value(json_object_get(knee, "behind_rate")));
    else if (json_is_string(knee))
        fprintf(f, "knee: %s\n", json_string_value(knee));
    json_t *st = json_object_get(rep, "store");
    if (json_is_object(st))
        fprintf(f, "store: %lld summaries of this job, %lld ranks, %lld lost as reported;"
                   " %.1f MB (+ %.1f MB WAL)\n",
                (long long)json_integer_value(json_object_get(st, "summaries")),
                (long long)json_integer_value(json_object_get(st, "ranks")),
                (long long)json_integer_value(json_object_get(st, "lost_reported")),
                (double)json_integer_value(json_object_get(st, "db_bytes")) / 1e6,
                (double)json_integer_value(json_object_get(st, "wal_bytes")) / 1e6);
}

/* ---- setup ----------------------------------------------------------------------- */

static int parse_rates(struct load *L, const char *arg)
{
    char buf[512];
    snprintf(buf, sizeof(buf), "%s", arg);
    L->n_rates = 0;
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char *end;
        double r = strtod(t, &end);
        if (*end || !(r > 0) || r > 1000 || L->n_rates == MAX_RATES ||
            (L->n_rates && r <= L->rates[L->n_rates - 1]))
            return -EINVAL;
        L->rates[L->n_rates++] = r;
    }
    return L->n_rates ? 0 : -EINVAL;
}

static int num_opt(const char *name, const char *arg, double lo, double hi, double *out)
{
    char *end;
    double v = strtod(arg, &end);
    if (!*arg || *end || !(v >= lo) || !(v <= hi)) {
        fprintf(stderr, "mkscope-load run: --%s wants a number from %g to %g, got '%s'\n", name,
                lo, hi, arg);
        return -1;
    }
    *out = v;
    return 0;
}

static int setup_sockets(struct load *L)
{
    int maxsz = (int)MKS_WIRE_MAX_MSG + 1024;
    for (uint32_t k = 0; k < L->n_socks; k++) {
        int s = nn_socket(AF_SP_RAW, NN_REQ);
        size_t sz = sizeof(L->rcvfd[k]);
        size_t sz2 = sizeof(L->sndfd[k]);
        if (s < 0 || nn_setsockopt(s, NN_SOL_SOCKET, NN_RCVMAXSIZE, &maxsz, sizeof(maxsz)) < 0 ||
            nn_getsockopt(s, NN_SOL_SOCKET, NN_RCVFD, &L->rcvfd[k], &sz) < 0 ||
            nn_getsockopt(s, NN_SOL_SOCKET, NN_SNDFD, &L->sndfd[k], &sz2) < 0) {
            fprintf(stderr, "mkscope-load: socket: %s\n", nn_strerror(nn_errno()));
            return -1;
        }
        L->socks[k] = s;
    }
    for (uint32_t c = 0; c < L->n_conns; c++) {
        if (nn_connect(L->socks[c % L->n_socks], L->url) < 0) {
            fprintf(stderr, "mkscope-load: cannot connect to %s: %s\n", L->url,
                    nn_strerror(nn_errno()));
            return -1;
        }
    }
    return 0;
}

/* Register every agent (not timed); false when they did not all get in. */
static bool register_all(struct load *L)
{
    for (uint32_t i = 0; i < L->n_ranks; i++)
        enqueue(L, i);
    uint64_t deadline = load_mono_ns() + 60000000000ull;
    while (!L->stop && L->regs_acked < L->n_ranks && load_mono_ns() < deadline) {
        run_queue(L);
        check_timeouts(L, load_mono_ns());
        wait_io(L, (L->q_len ? 1 : 10) * 1000000ull);
    }
    if (L->regs_acked < L->n_ranks) {
        fprintf(stderr, "mkscope-load: only %" PRIu64 " of %u agents registered (is the collector"
                        " at %s?)\n",
                L->regs_acked, L->n_ranks, L->url);
        return false;
    }
    return true;
}

int load_run_main(int argc, char **argv)
{
    static struct load L0;
    struct load *L = &L0;
    char jobbuf[64];
    snprintf(jobbuf, sizeof(jobbuf), "load%d", (int)getpid());
    *L = (struct load){.url = "tcp://127.0.0.1:7400", .job = jobbuf, .format = "text",
                       .n_ranks = 1024, .hb_ms = 1000, .timeout_ns = 5000000000ull,
                       .drain_ns = 20000000000ull, .buffer_bytes = 8u << 20, .seconds = 60,
                       .max_p99_ms = 100, .rates = {10}, .n_rates = 1, .sigfd = -1,
                       .honour_pressure = true};
    const char *recording = NULL;
    static const struct option lo[] = {
        {"collector", required_argument, NULL, 'c'}, {"recording", required_argument, NULL, 'r'},
        {"ranks", required_argument, NULL, 'n'},     {"rate", required_argument, NULL, 'R'},
        {"rates", required_argument, NULL, 'S'},     {"seconds", required_argument, NULL, 't'},
        {"job", required_argument, NULL, 'j'},       {"key", required_argument, NULL, 'k'},
        {"conns", required_argument, NULL, 'C'},     {"heartbeat-ms", required_argument, NULL, 'H'},
        {"timeout-ms", required_argument, NULL, 'T'}, {"buffer-bytes", required_argument, NULL, 'B'},
        {"drain-ms", required_argument, NULL, 'D'},  {"max-p99-ms", required_argument, NULL, 'P'},
        {"pid", required_argument, NULL, 'p'},       {"db", required_argument, NULL, 'd'},
        {"ignore-pressure", no_argument, NULL, 'I'},
        {"help", no_argument, NULL, 'h'},            {NULL, 0, NULL, 0}};
    int opt;
    double v;
    uint32_t conns = 0;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "f:o:vh", lo, NULL)) != -1) {
        switch (opt) {
        case 'c': L->url = optarg; break;
        case 'r': recording = optarg; break;
        case 'j': L->job = optarg; break;
        case 'k': L->key_path = optarg; break;
        case 'd': L->db = optarg; break;
        case 'o': L->out = optarg; break;
        case 'f':
            if (strcmp(optarg, "text") && strcmp(optarg, "json")) {
                fprintf(stderr, "mkscope-load run: -f wants text or json, got '%s'\n", optarg);
                return 2;
            }
            L->format = optarg;
            break;
        case 'v': L->verbose = true; break;
        case 'I': L->honour_pressure = false; break;
        case 'n':
            if (num_opt("ranks", optarg, 1, 1 << 20, &v))
                return 2;
            L->n_ranks = (uint32_t)v;
            break;
        case 'R':
        case 'S':
            if (parse_rates(L, optarg)) {
                fprintf(stderr, "mkscope-load run: --%s wants %s epochs per second (0 < R <= 1000),"
                                " got '%s'\n",
                        opt == 'R' ? "rate" : "rates", opt == 'R' ? "a rate in" : "ascending rates,",
                        optarg);
                return 2;
            }
            if (opt == 'R' && L->n_rates != 1) {
                fprintf(stderr, "mkscope-load run: --rate wants one rate; use --rates A,B,...\n");
                return 2;
            }
            break;
        case 't':
            if (num_opt("seconds", optarg, 0.1, 86400, &L->seconds))
                return 2;
            break;
        case 'C':
            if (num_opt("conns", optarg, 1, 1 << 20, &v))
                return 2;
            conns = (uint32_t)v;
            break;
        case 'H':
            if (num_opt("heartbeat-ms", optarg, 1, 3600000, &v))
                return 2;
            L->hb_ms = (uint32_t)v;
            break;
        case 'T':
            if (num_opt("timeout-ms", optarg, 1, 3600000, &v))
                return 2;
            L->timeout_ns = (uint64_t)v * 1000000ull;
            break;
        case 'D':
            if (num_opt("drain-ms", optarg, 0, 3600000, &v))
                return 2;
            L->drain_ns = (uint64_t)v * 1000000ull;
            break;
        case 'B':
            if (num_opt("buffer-bytes", optarg, 4096, 1ull << 40, &v))
                return 2;
            L->buffer_bytes = (uint64_t)v;
            break;
        case 'P':
            if (num_opt("max-p99-ms", optarg, 0.001, 3600000, &L->max_p99_ms))
                return 2;
            break;
        case 'p':
            if (num_opt("pid", optarg, 1, 1 << 30, &v))
                return 2;
            L->pid = (int)v;
            break;
        case 'h': usage(stdout); return 0;
        default:
            fprintf(stderr, "mkscope-load run: unknown option or missing value '%s'; see --help\n",
                    argv[optind - 1]);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "mkscope-load run: unexpected argument '%s'; see --help\n", argv[optind]);
        return 2;
    }
    if (!recording) {
        fprintf(stderr, "mkscope-load run: --recording FILE is required (see `mkscope-load"
                        " record --help`)\n");
        return 2;
    }
    if (L->n_ranks >= (1u << 23)) {
        fprintf(stderr, "mkscope-load run: at most %u agents\n", (1u << 23) - 1);
        return 2;
    }
    L->n_conns = conns ? conns : L->n_ranks;
    char err[512];
    if (L->key_path) {
        if (mks_wire_key_load(L->key_path, &L->key, err, sizeof(err))) {
            fprintf(stderr, "mkscope-load run: %s\n", err);
            return 2;
        }
        L->have_key = true;
    }
    struct load_rec rec;
    if (load_rec_read(recording, &rec, err, sizeof(err))) {
        fprintf(stderr, "mkscope-load run: %s\n", err);
        return 1;
    }
    int rc = build_templates(L, &rec, err, sizeof(err));
    load_rec_free(&rec);
    if (rc) {
        fprintf(stderr, "mkscope-load run: %s: %s\n", recording, err);
        free_templates(L);
        return 1;
    }
    rc = 1;
    L->sims = calloc(L->n_ranks, sizeof(*L->sims));
    L->queue = calloc(L->n_ranks, sizeof(*L->queue));
    if (!L->sims || !L->queue)
        goto out;
    uint64_t inc = load_real_ns();
    double bytes = 0;
    L->n_socks = (L->n_ranks + AGENTS_PER_SOCKET - 1) / AGENTS_PER_SOCKET;
    if (L->n_socks > 16)
        L->n_socks = 16;
    for (uint32_t i = 0; i < L->n_ranks; i++) {
        struct sim *s = &L->sims[i];
        s->rank = i;
        s->src = i % L->n_src;
        s->inc = inc + i;
        s->sock = (int)(i % L->n_socks);
        struct agt_spool_opts so = {.sz = sizeof(so), .mem_bytes = L->buffer_bytes};
        if (agt_spool_create(&so, &s->spool)) {
            fprintf(stderr, "mkscope-load: out of memory for %u agents\n", L->n_ranks);
            goto out;
        }
        bytes += L->tm[s->src].bytes;
    }
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    L->sigfd = signalfd(-1, &mask, SFD_CLOEXEC);
    if (setup_sockets(L))
        goto out;
    uint64_t t_reg = load_mono_ns();
    if (!register_all(L))
        goto out;
    double reg_s = (double)(load_mono_ns() - t_reg) / 1e9;
    if (L->verbose)
        fprintf(stderr, "mkscope-load: %u agents registered in %.2f s\n", L->n_ranks, reg_s);
    int n_done = 0;
    for (int r = 0; r < L->n_rates && !L->stop; r++) {
        L->ph[r].rate = L->rates[r];
        run_phase(L, &L->ph[r]);
        n_done = r + 1;
        judge(L, &L->ph[r]);
        if (!L->ph[r].kept_up && r + 1 < L->n_rates) {
            fprintf(stderr, "mkscope-load: rate %g not kept up with; higher rates skipped\n",
                    L->rates[r]);
            break;
        }
    }
    json_t *phases = json_array();
    for (int r = 0; r < n_done; r++)
        json_array_append_new(phases, phase_json(L, &L->ph[r]));
    json_t *knee;
    int last_ok = -1, first_bad = -1;
    for (int r = 0; r < n_done; r++) {
        if (L->ph[r].kept_up && first_bad < 0)
            last_ok = r;
        else if (!L->ph[r].kept_up && first_bad < 0)
            first_bad = r;
    }
    if (first_bad >= 0 && last_ok >= 0)
        knee = json_pack("{s:f, s:f, s:f, s:f, s:f}", "kept_up_rate", L->rates[last_ok],
                         "kept_up_per_s", L->rates[last_ok] * L->n_ranks, "behind_rate",
                         L->rates[first_bad], "behind_per_s", L->rates[first_bad] * L->n_ranks,
                         "behind_acked_per_s",
                         (double)L->ph[first_bad].acked_in_window / L->seconds);
    else if (first_bad >= 0)
        knee = json_sprintf("behind already at the lowest rate (%g)", L->rates[0]);
    else
        knee = json_sprintf("not reached: kept up with every rate up to %g (%.0f summaries/s)",
                            L->rates[n_done ? n_done - 1 : 0],
                            L->rates[n_done ? n_done - 1 : 0] * L->n_ranks);
    json_t *rep = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:f, s:f, s:b, s:f, s:o, s:o, s:o}",
                            "collector", L->url, "job", L->job, "recording", recording, "ranks",
                            (json_int_t)L->n_ranks, "sources", (json_int_t)L->n_src, "conns",
                            (json_int_t)L->n_conns, "summary_bytes", bytes / L->n_ranks,
                            "seconds", L->seconds, "mac", L->have_key, "register_s", reg_s,
                            "phases", phases, "knee", knee, "store", store_json(L));
    FILE *f = stdout;
    if (L->out && !(f = fopen(L->out, "w"))) {
        fprintf(stderr, "mkscope-load run: cannot write %s: %s\n", L->out, strerror(errno));
        f = stdout;
    }
    if (!strcmp(L->format, "json")) {
        json_dumpf(rep, f, JSON_INDENT(1));
        fputc('\n', f);
    } else {
        print_text(f, L, rep);
    }
    if (f != stdout)
        fclose(f);
    json_decref(rep);
    rc = L->stop ? 1 : 0;
out:
    for (uint32_t i = 0; L->sims && i < L->n_ranks; i++)
        agt_spool_destroy(L->sims[i].spool);
    for (int r = 0; r < MAX_RATES; r++) {
        free(L->ph[r].lat_send);
        free(L->ph[r].lat_due);
        json_decref(L->ph[r].series);
    }
    free(L->sims);
    free(L->queue);
    for (uint32_t k = 0; k < L->n_socks; k++)
        nn_close(L->socks[k]);
    if (L->sigfd >= 0)
        close(L->sigfd);
    free_templates(L);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "record"))
        return load_record_main(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "run"))
        return load_run_main(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "info"))
        return load_info_main(argc - 1, argv + 1);
    if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        printf("usage: mkscope-load record|run|info [OPTIONS]   (mkscope-load COMMAND --help)\n"
               "\n"
               "  record   stand in for the collector and save what real agents send\n"
               "  run      replay it as N simulated agents against a collector and measure\n"
               "  info     what a recording holds\n");
        return 0;
    }
    fprintf(stderr, "mkscope-load: give a command: record, run or info; see --help\n");
    return 2;
}

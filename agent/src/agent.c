/*
 * mkscope-agent's event loop.
 *
 * One thread, one poll(): a signalfd (SIGINT/SIGTERM), a timerfd that ticks
 * once per epoch, the ingest link's receive fd and the survey socket's.  (The
 * nanomsg library runs its own I/O thread underneath; the agent's logic never
 * runs anywhere but here.)
 *
 * Each tick: find the rank's control block if it is not open yet (the
 * application may start after the agent, or restart), renew the lease,
 * advance the epoch and turn the snapshot into a summary.  A summary gets the
 * next seq, is encoded at the finest detail tier the budget allows (or held
 * and merged into the next one when none fits) and goes into the spool; the
 * link sends the spool's oldest entry whenever it is idle, so after an outage
 * summaries are replayed in order.  Acks are cumulative and drop entries
 * from the spool; commands piggybacked on acks are executed at once and
 * answered with CommandReply requests.
 *
 * Backpressure: every Ack says how loaded the collector's ingest is
 * (Ack.pressure), and the agent times its own summaries' acks.  When either
 * says the collector is behind, summaries are capped at a coarser detail
 * tier (the budget may coarsen them further), they say so in their
 * `pressure` field and the agent logs each change: the collector sheds load
 * before summaries queue up, and the application never waits for it.
 *
 * A request without a reply within the timeout means the collector is gone
 * (or restarted): the agent registers again before anything else, which also
 * tells it (RegisterAck.stored_seq) what the collector already has.
 */
#include "agent.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <nanomsg/nn.h>
#include <nanomsg/survey.h>

#include "budget.h"
#include "encode.h"
#include "escalate.h"
#include "link.h"
#include "log.h"
#include "mkscope/ctl.h"
#include "mkscope/fresh.h"
#include "mkscope/loader.h"
#include "mkscope/wire.h"
#include "probe.h"
#include "progs.h"
#include "spool.h"
#include "steps.h"
#include "summary.h"
#include "ucx.h"

#define AGT_VERSION "mkscope-agent " MKS_AGENT_VERSION
/* Outgoing requests other than summaries: command replies and raw event
 * batches of an escalation (whose own budget bounds them further). */
#define MAX_REPLIES 256
/* Wait between registration attempts the collector refused. */
#define REGISTER_RETRY_NS 1000000000ull

/* A spool entry's tag (spool.h): v[TAG_LOSSES] the losses its summary
 * reports, v[TAG_EVENTS + hook] the events it accounts for (its own eligible
 * events and the undelivered ones it reports: what the next summary must
 * report again if it is lost), v[TAG_OWN + hook] its own eligible events
 * (what was never delivered, for --stats). */
enum { TAG_LOSSES = 0, TAG_EVENTS = 1, TAG_OWN = 1 + MKS_EV_COUNT };
_Static_assert(TAG_OWN + MKS_EV_COUNT <= AGT_SPOOL_TAG_N, "spool tag too small");

/* IF_REPLAY: a summary an earlier agent of this spool left behind (spool.h). */
enum inflight { IF_NONE, IF_REGISTER, IF_SUMMARY, IF_HEARTBEAT, IF_REPLY, IF_REPLAY };

struct reply {
    uint8_t *buf;
    size_t len;
};

struct agent {
    struct agt_opts o;
    struct mks_wire_key key;
    int have_key;
    uint64_t incarnation;
    char host[256];
    uint64_t epoch_ns;

    int sigfd, timerfd, survey_sock, survey_fd;
    struct agt_link *link;
    int registered;
    /* The collector's last RegisterAck said it reads compact summaries
     * (docs/wire.md): they are sent so from then on. */
    int coll_compact;
    /* What a registration must say changed (schema, application) this many
     * times; a RegisterAck counts only if its request carried the latest. */
    uint64_t reg_want, reg_sent;
    uint64_t register_after_ns;
    enum inflight inflight;
    uint64_t inflight_seq;
    uint64_t inflight_nonce; /* the collector's reply must name it (reply_to) */
    /* Commands and survey requests already run (nonce, time): a copy of one
     * is not run again; with a key, one outside the window is refused. */
    struct mks_fresh *fresh;
    struct mks_ratelog refusal_log;
    int outage_logged;

    struct agt_spool *spool;
    uint64_t seq;      /* last seq given to a summary */
    uint64_t acked;    /* highest seq acknowledged */
    uint32_t refusals; /* consecutive refusals of the head summary */
    uint64_t refused;  /* summaries dropped because the collector refused them */
    /* Losses reported so far: summaries (TAG_LOSSES) and per hook the
     * eligible events they held (TAG_EVENTS), as the spool's lost_tags and
     * lost counts stood when the last summary was made. */
    uint64_t lost_reported;
    uint64_t undelivered_reported[MKS_EV_COUNT];
    uint64_t elig_total[MKS_EV_COUNT]; /* eligible events of every epoch summarised */
    uint64_t lost_logged, lost_log_ns; /* losses said in the log, and when */
    struct agt_budget budget;
    struct agt_detail detail; /* which steps carry per-step detail */
    uint32_t sample_shift;            /* largest shift in force (reported in summaries) */
    uint32_t cmd_shift[MKS_EV_COUNT]; /* set by the collector's SetBudget */
    uint64_t cmd_insns[MKS_EV_COUNT];
    uint32_t auto_shift;       /* the agent's own, on the detail hooks */
    uint32_t pressure, relief; /* consecutive epochs over / within the budget */
    struct agt_pressure coll; /* the collector's load (budget.h) */
    uint64_t n_pressured;     /* summaries whose detail it capped */
    struct reply replies[MAX_REPLIES];
    int n_replies;

    struct mks_ctl *ctl;
    struct agt_probe *probes[AGT_MAX_PROBES]; /* attached probes (probe.h) */
    int n_probes;
    struct agt_esc *esc; /* escalation in progress */
    struct agt_ucx *ucx; /* its raw events' transport, when the command named one */
    struct agt_esc_env esc_env;
    uint64_t raw_dropped; /* batches that found the outgoing queue full */
    struct mks_ctl_info info;
    int have_info;
    uint64_t last_app_start;
    Mkscope__V1__TaskSchema *schema;
    int open_err_logged; /* last open error reported */
    uint32_t lease_lapses;
    uint64_t lease_renewed_ns;
    int schema_err_logged;
    struct agt_progs progs;
    struct agt_summary *pending;
    struct agt_steps *steps; /* decode steps not yet ended */
    uint64_t prev_host_ns, prev_dev_ns;
    struct mks_coverage last_cov[MKS_EV_COUNT];
    uint64_t last_epoch;

    uint64_t last_send_ns, first_send_ns, last_heartbeat_ns;
    int final_heartbeat; /* tell the collector at once that the application ended */
    /* The collector said (survey "commands") that commands wait for this
     * rank: ask for them with the next request the link can take, rather
     * than with the next summary's ack, up to an epoch later. */
    int commands_due;
    uint64_t n_wakeups;  /* such notices acted on (--stats) */
    int app_alive;       /* as last seen (kept when the agent stops on a signal) */
    int stopping;
    uint64_t stop_deadline_ns;
    int exit_code;

    /* counters for logs, heartbeats and --stats */
    uint64_t n_summaries, n_epochs, n_held, n_sends, n_resends, n_attaches;
    uint64_t tiers[AGT_TIER_COUNT];
    uint64_t class_counts[MKS_MON_MAX_CLASSES];
    uint64_t start_mono_ns;
};

static uint64_t clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t mono_ns(void)
{
    return clock_ns(CLOCK_MONOTONIC);
}

/* The device clock of the CPU backend is CLOCK_MONOTONIC; a GPU's
 * globaltimer is not readable from here, so its anchor stays 0 (unknown). */
static uint64_t dev_ns(const struct agent *a)
{
    return a->have_info && a->info.gpu_uuid[0] == '\0' ? mono_ns() : 0;
}

/* ---- snapshot access through struct agt_snap_ops ----------------------- */

static uint64_t snap_epoch(void *snap)
{
    return mks_epoch_snapshot_epoch(snap);
}

static int snap_cov(void *snap, enum mks_hook_event ev, struct mks_coverage *cov)
{
    return mks_epoch_snapshot_coverage(snap, ev, cov);
}

static int snap_map(void *snap, uint32_t id, mks_map_iter_fn fn, void *arg)
{
    return mks_epoch_snapshot_map(snap, id, fn, arg);
}

static const struct agt_snap_ops snap_ops = {snap_epoch, snap_cov, snap_map};

/* ---- sending ----------------------------------------------------------- */

static int encode_env(struct agent *a, mks_envelope *env, uint8_t **buf, size_t *len)
{
    char why[256];
    int err = mks_wire_encode(env, a->have_key ? &a->key : NULL, buf, len, why, sizeof(why));
    if (err)
        agt_log_err("cannot encode %s: %s", mks_wire_body_name(env->body_case), why);
    return err;
}

static void env_init(struct agent *a, mks_envelope *env, uint64_t seq)
{
    mks_wire_init(env, a->o.job, a->o.rank, seq);
    env->incarnation = a->incarnation;
}

static int send_buf(struct agent *a, const uint8_t *buf, size_t len, enum inflight kind,
                    uint64_t seq, uint64_t now)
{
    int err = agt_link_send(a->link, buf, len, now);
    if (err)
        return err;
    a->inflight = kind;
    a->inflight_seq = seq;
    a->inflight_nonce = mks_wire_nonce_of(buf, len);
    a->last_send_ns = now;
    if (!a->first_send_ns)
        a->first_send_ns = now;
    a->n_sends++;
    if (kind != IF_SUMMARY && kind != IF_REPLAY) /* charged when they were made */
        agt_budget_charge(&a->budget, len);
    return 0;
}

/* Encode and send a request made on the spot (registration, heartbeat). */
static int send_env(struct agent *a, mks_envelope *env, enum inflight kind, uint64_t now)
{
    uint8_t *buf;
    size_t len;
    int err = encode_env(a, env, &buf, &len);
    if (err)
        return err;
    err = send_buf(a, buf, len, kind, 0, now);
    free(buf);
    return err;
}

static int send_register(struct agent *a, uint64_t now)
{
    Mkscope__V1__Register r = MKSCOPE__V1__REGISTER__INIT;
    r.n_ranks = a->info.n_ranks;
    r.host = a->host;
    r.pid = a->info.app_pid;
    r.gpu_uuid = a->info.gpu_uuid;
    r.hook_abi_version = a->info.abi_version;
    r.schema = a->schema;
    r.agent_version = (char *)AGT_VERSION;
    r.n_workers = a->info.n_workers;
    r.epoch_ns = a->epoch_ns;
    r.heartbeat_ns = a->o.heartbeat_ms * 1000000ull;
    r.app_start_ns = a->info.app_start_ns;
    mks_envelope env;
    env_init(a, &env, a->seq);
    env.body_case = MKSCOPE__V1__ENVELOPE__BODY_REGISTER;
    env.register_ = &r;
    int err = send_env(a, &env, IF_REGISTER, now);
    if (!err)
        a->reg_sent = a->reg_want;
    return err;
}

/* The attached programs as wire messages (ps and psp hold AGT_MAX_PROGS). */
static size_t fill_programs(const struct agent *a, Mkscope__V1__ProgramState *ps,
                            Mkscope__V1__ProgramState **psp)
{
    for (uint32_t i = 0; i < a->progs.n; i++) {
        const struct agt_prog *p = &a->progs.progs[i];
        mkscope__v1__program_state__init(&ps[i]);
        ps[i].name = (char *)p->name;
        ps[i].hook = (uint32_t)p->hook;
        ps[i].prog_gen = p->gen;
        ps[i].cost = p->cost;
        ps[i].prog_type = p->prog_type;
        psp[i] = &ps[i];
    }
    return a->progs.n;
}

static int send_heartbeat(struct agent *a, uint64_t now)
{
    Mkscope__V1__Heartbeat hb = MKSCOPE__V1__HEARTBEAT__INIT;
    Mkscope__V1__ProgramState ps[AGT_MAX_PROGS], *psp[AGT_MAX_PROGS];
    struct agt_spool_stats st;
    agt_spool_stats(a->spool, &st);
    hb.agent_time_ns = clock_ns(CLOCK_REALTIME);
    hb.last_seq = a->seq;
    hb.app_alive = a->app_alive;
    hb.unacked = st.entries;
    hb.lost_summaries = st.lost + st.stale;
    hb.programs = psp;
    hb.n_programs = fill_programs(a, ps, psp);
    mks_envelope env;
    env_init(a, &env, a->seq);
    env.body_case = MKSCOPE__V1__ENVELOPE__BODY_HEARTBEAT;
    env.heartbeat = &hb;
    return send_env(a, &env, IF_HEARTBEAT, now);
}

/* Send the next request if the link is idle.  Order: registration, command
 * replies and raw batches, a heartbeat when due, buffered summaries (oldest
 * first). */
static void pump(struct agent *a, uint64_t now)
{
    if (agt_link_busy(a->link) || !a->have_info)
        return;
    if (!a->registered) {
        if (now >= a->register_after_ns)
            send_register(a, now);
        return;
    }
    if (a->n_replies) {
        send_buf(a, a->replies[0].buf, a->replies[0].len, IF_REPLY, 0, now);
        return;
    }
    /* Heartbeats go out on their own clock, also while summaries flow: they
     * carry the attached programs and liveness, which summaries do not.  One
     * goes out at once when commands wait: its ack brings them (a summary
     * due meanwhile waits a round trip, the commands no epoch). */
    if (a->final_heartbeat || a->commands_due ||
        now - a->last_heartbeat_ns >= a->o.heartbeat_ms * 1000000ull) {
        if (send_heartbeat(a, now) == 0) {
            a->final_heartbeat = 0;
            a->commands_due = 0;
            a->last_heartbeat_ns = now;
        }
        return;
    }
    uint64_t seq;
    const void *buf;
    size_t len;
    /* An earlier agent's summaries first: they are older than ours. */
    while (agt_spool_replay_head(a->spool, &buf, &len) == 0) {
        mks_envelope *env = NULL;
        char why[256];
        if (mks_wire_decode(buf, len, a->have_key ? &a->key : NULL, &env, why, sizeof(why)) == 0 &&
            env->body_case == MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY) {
            mks_wire_free(env);
            send_buf(a, buf, len, IF_REPLAY, 0, now);
            return;
        }
        agt_log_warn("spool: a summary left by an earlier agent is not valid (%s); counting it as"
                     " lost",
                     env ? "not a summary" : why);
        mks_wire_free(env);
        agt_spool_replay_pop(a->spool, 0);
    }
    if (agt_spool_head(a->spool, &seq, &buf, &len) == 0) {
        if (send_buf(a, buf, len, IF_SUMMARY, seq, now) == 0)
            agt_spool_pin(a->spool, seq);
    }
}

static void ack_up_to(struct agent *a, uint64_t up_to)
{
    if (up_to > a->seq)
        up_to = a->seq; /* never trust an ack for summaries not made yet */
    if (up_to > a->acked)
        a->acked = up_to;
    agt_spool_ack(a->spool, up_to);
}

static void queue_reply(struct agent *a, Mkscope__V1__CommandReply *r)
{
    r->applied_host_ns = clock_ns(CLOCK_REALTIME);
    mks_envelope env;
    env_init(a, &env, a->seq);
    env.body_case = MKSCOPE__V1__ENVELOPE__BODY_COMMAND_REPLY;
    env.command_reply = r;
    uint8_t *buf;
    size_t len;
    if (encode_env(a, &env, &buf, &len))
        return;
    if (a->n_replies == MAX_REPLIES) {
        agt_log_warn("command %" PRIu64 ": reply dropped: %d replies already waiting", r->id,
                     MAX_REPLIES);
        free(buf);
        return;
    }
    a->replies[a->n_replies++] = (struct reply){buf, len};
}

/* How long a finished escalation's connection waits for the collector to
 * take its last batches (it may be storing every other rank's). */
#define UCX_FLUSH_MS 20000u

static void esc_emit(const uint8_t *buf, size_t len, void *arg)
{
    struct agent *a = arg;
    if (a->ucx && agt_ucx_send(a->ucx, buf, len) == 0)
        return;
    /* no UCX endpoint, or it failed: the ingest socket takes raw batches too */
    if (a->n_replies == MAX_REPLIES) {
        a->raw_dropped++;
        return;
    }
    uint8_t *copy = malloc(len);
    if (!copy) {
        a->raw_dropped++;
        return;
    }
    memcpy(copy, buf, len);
    a->replies[a->n_replies++] = (struct reply){copy, len};
}

static void esc_poll(struct agent *a, uint64_t now, int stop)
{
    if (a->ucx) {
        agt_ucx_progress(a->ucx);
        /* Once the window has closed and every batch is handed to UCX, wait
         * (without blocking the loop) until the collector has taken them. */
        if (!a->esc && (stop || agt_ucx_failed(a->ucx) ||
                        (agt_ucx_pending(a->ucx) == 0 && agt_ucx_flushed(a->ucx, UCX_FLUSH_MS)))) {
            agt_ucx_destroy(a->ucx, 1000);
            a->ucx = NULL;
        }
    }
    if (!a->esc)
        return;
    if (agt_esc_poll(a->esc, a->ctl, now, stop, &a->esc_env, esc_emit, a) == 1) {
        agt_log_info("escalation %llu: window closed", (unsigned long long)agt_esc_id(a->esc));
        agt_esc_free(a->esc);
        a->esc = NULL;
    }
}

static void pop_reply(struct agent *a)
{
    if (!a->n_replies)
        return;
    free(a->replies[0].buf);
    memmove(&a->replies[0], &a->replies[1], (size_t)(a->n_replies - 1) * sizeof(a->replies[0]));
    a->n_replies--;
}

/* Something the collector sent (or someone sent in its name) was refused:
 * one line per 10 s at most, whatever floods the sockets. */
static void refused(struct agent *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void refused(struct agent *a, const char *fmt, ...)
{
    uint64_t more = 0;
    if (!mks_ratelog_due(&a->refusal_log, mono_ns(), 10000000000ull, &more))
        return;
    char line[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    agt_log_warn("%s%s", line, more ? " (and more refusals in the last 10 s)" : "");
}

/* ---- commands ---------------------------------------------------------- */

/* Program and built-in names, as the CLI and collector check them. */
static int valid_name(const char *s)
{
    return mks_wire_prog_name_valid(s);
}

/* What detach and replace may name: an attachment ("count") or one of its
 * programs as `mkscope programs` lists it ("count/count"). */
static int valid_prog_ref(const char *s)
{
    const char *slash = s ? strchr(s, '/') : NULL;
    if (!slash)
        return valid_name(s);
    char head[64];
    size_t l = (size_t)(slash - s);
    if (l >= sizeof(head) || strchr(slash + 1, '/'))
        return 0;
    memcpy(head, s, l);
    head[l] = 0;
    return valid_name(head) && valid_name(slash + 1);
}

static void fill_install_reply(Mkscope__V1__CommandReply *r, int err,
                               const struct agt_install_result *res, char *log_buf)
{
    r->ok = err == 0;
    strcpy(log_buf, res->log);
    if (err)
        r->error = log_buf;
    else
        r->verifier_log = log_buf;
    r->cost = res->cost;
    r->n_insns = res->n_insns;
    r->prog_gen = res->prog_gen;
}

static int install_attach(struct agent *a, const Mkscope__V1__AttachProgram *ap,
                          const char *replace, struct agt_install_result *res)
{
    memset(res, 0, sizeof(*res));
    const char *name = ap->name && *ap->name ? ap->name : ap->builtin;
    if (!valid_name(name)) {
        snprintf(res->log, sizeof(res->log), "program name must be " MKS_WIRE_PROG_GRAMMAR);
        return -EINVAL;
    }
    if (ap->hook < -1 || ap->hook >= MKS_EV_COUNT) {
        snprintf(res->log, sizeof(res->log), "hook %d out of range", ap->hook);
        return -EINVAL;
    }
    struct mks_obj *obj = NULL;
    char err[256] = "";
    int rc;
    if (ap->builtin && *ap->builtin) {
        if (!valid_name(ap->builtin)) {
            snprintf(res->log, sizeof(res->log), "built-in monitor name '%s' is not valid",
                     ap->builtin);
            return -EINVAL;
        }
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s.bpf.o", a->o.monitors_dir, ap->builtin);
        rc = mks_obj_open_file(path, &obj, err, sizeof(err));
    } else if (ap->bpf_object.len) {
        rc =
            mks_obj_open_mem(ap->bpf_object.data, ap->bpf_object.len, name, &obj, err, sizeof(err));
    } else {
        snprintf(res->log, sizeof(res->log), "attach: neither a BPF object nor a built-in name");
        return -EINVAL;
    }
    if (rc) {
        snprintf(res->log, sizeof(res->log), "%s: %s", name, err);
        return rc;
    }
    rc = agt_progs_install(&a->progs, a->ctl, obj, name, ap->builtin && *ap->builtin, ap->hook,
                           replace, res);
    mks_obj_close(obj);
    if (rc == 0)
        a->n_attaches++;
    return rc;
}

/* Hooks whose monitors produce the detail the budget drops first (wait and
 * release records, queue and generation tables).  Sampling them saves the
 * device the work whose output could not be shipped anyway; task_start and
 * task_end, which carry the counts and latencies, are never sampled by the
 * agent on its own. */
static int detail_hook(int ev)
{
    return ev == MKS_EV_DEP_WAIT_BEGIN || ev == MKS_EV_DEP_WAIT_END || ev == MKS_EV_COMM_END ||
           ev == MKS_EV_TASK_ASSIGN || ev == MKS_EV_QUEUE_PRESSURE || ev == MKS_EV_GEN_ADVANCE;
}

/* Put the sampling in force that the collector's commands and the agent's
 * own budget pressure ask for (the larger of the two per hook). */
static int apply_sampling(struct agent *a)
{
    uint32_t top = 0;
    int err = 0;
    for (int e = 0; e < MKS_EV_COUNT; e++) {
        uint32_t shift = a->cmd_shift[e];
        if (detail_hook(e) && a->auto_shift > shift)
            shift = a->auto_shift;
        if (shift > top)
            top = shift;
        if (a->ctl && !err)
            err = mks_ctl_set_budget(a->ctl, (enum mks_hook_event)e, shift, a->cmd_insns[e]);
    }
    a->sample_shift = top;
    return err;
}

/* Over the budget for a while: sample the detail hooks one step more; well
 * within it for a while: one step less.  Coverage shows what was skipped. */
#define AUTO_SHIFT_MAX     6
#define AUTO_PRESSURE_RISE 5
#define AUTO_RELIEF_FALL   20

static void adapt_sampling(struct agent *a, int tier)
{
    if (!a->budget.bytes_per_sec) {
        if (a->auto_shift) {
            a->auto_shift = 0;
            apply_sampling(a);
        }
        return;
    }
    if (tier != AGT_TIER_FULL) {
        a->relief = 0;
        if (++a->pressure >= AUTO_PRESSURE_RISE && a->auto_shift < AUTO_SHIFT_MAX) {
            a->auto_shift++;
            a->pressure = 0;
            agt_log_info("over budget: sampling detail hooks 1 in %u", 1u << a->auto_shift);
            apply_sampling(a);
        }
    } else {
        a->pressure = 0;
        if (++a->relief >= AUTO_RELIEF_FALL && a->auto_shift > 0) {
            a->auto_shift--;
            a->relief = 0;
            agt_log_info("within budget: sampling detail hooks 1 in %u", 1u << a->auto_shift);
            apply_sampling(a);
        }
    }
}

/* The attached probe a detach names ("probe-7" or one of its programs). */
static struct agt_probe *find_probe(struct agent *a, const char *name)
{
    for (int i = 0; name && i < a->n_probes; i++) {
        const char *n = agt_probe_name(a->probes[i]);
        size_t l = strlen(n);
        if (!strncmp(name, n, l) && (name[l] == 0 || name[l] == '/'))
            return a->probes[i];
    }
    return NULL;
}

static void free_probes(struct agent *a)
{
    for (int i = 0; i < a->n_probes; i++)
        agt_probe_free(a->probes[i]);
    a->n_probes = 0;
}

static void run_command(struct agent *a, const Mkscope__V1__Command *c)
{
    if (c->n_ranks) {
        int mine = 0;
        for (size_t i = 0; i < c->n_ranks; i++)
            mine |= c->ranks[i] == a->o.rank;
        if (!mine)
            return;
    }
    Mkscope__V1__CommandReply r = MKSCOPE__V1__COMMAND_REPLY__INIT;
    char msg[600] = "";
    r.id = c->id;
    /* A command runs once: a copy of one already run (an old ack played
     * again, the same command handed out twice) is skipped, its reply went
     * out the first time.  With a key, one without nonce and time, or
     * issued outside the window, is refused. */
    char why[300];
    int fr = mks_fresh_check(a->fresh, "collector", 9, c->nonce, c->issued_ns,
                             clock_ns(CLOCK_REALTIME), why, sizeof(why));
    if (fr == -EALREADY) {
        refused(a, "command %" PRIu64 ": %s; not run again", c->id, why);
        return;
    }
    if (fr) {
        refused(a, "command %" PRIu64 " refused: %s", c->id, why);
        snprintf(msg, sizeof(msg), "rank %u refused the command: %s", a->o.rank, why);
        r.error = msg;
        queue_reply(a, &r);
        return;
    }
    struct agt_install_result res;
    if (!a->ctl && c->kind_case != MKSCOPE__V1__COMMAND__KIND_BUDGET) {
        snprintf(msg, sizeof(msg), "rank %u: application not running", a->o.rank);
        r.error = msg;
        queue_reply(a, &r);
        return;
    }
    switch (c->kind_case) {
    case MKSCOPE__V1__COMMAND__KIND_ATTACH: {
        int err = install_attach(a, c->attach, NULL, &res);
        fill_install_reply(&r, err, &res, msg);
        break;
    }
    case MKSCOPE__V1__COMMAND__KIND_REPLACE: {
        if (!c->replace->program || !valid_prog_ref(c->replace->old_name)) {
            snprintf(msg, sizeof(msg), "replace: needs a program and the old program's name");
            r.error = msg;
            break;
        }
        int err = install_attach(a, c->replace->program, c->replace->old_name, &res);
        fill_install_reply(&r, err, &res, msg);
        break;
    }
    case MKSCOPE__V1__COMMAND__KIND_DETACH: {
        uint64_t gen = 0;
        int32_t hook = c->detach->hook;
        struct agt_probe *pr = find_probe(a, c->detach->name);
        if (pr) {
            /* a probe ends at the next epoch, its last result read first */
            agt_probe_stop(pr, "stopped");
            snprintf(msg, sizeof(msg), "%s: stops at the end of this epoch", agt_probe_name(pr));
            r.ok = 1;
            r.verifier_log = msg;
            break;
        }
        int n = valid_prog_ref(c->detach->name) && hook >= -1 && hook < MKS_EV_COUNT
                    ? agt_progs_remove(&a->progs, a->ctl, c->detach->name, hook, &gen)
                    : -EINVAL;
        r.ok = n > 0;
        r.prog_gen = gen;
        if (n > 0)
            snprintf(msg, sizeof(msg), "%s: %d program%s detached", c->detach->name, n,
                     n == 1 ? "" : "s");
        else
            snprintf(msg, sizeof(msg), "detach %s: %s", c->detach->name ? c->detach->name : "",
                     n == -ENOENT ? "no such program" : "bad name or hook");
        if (n > 0)
            r.verifier_log = msg;
        else
            r.error = msg;
        break;
    }
    case MKSCOPE__V1__COMMAND__KIND_BUDGET: {
        const Mkscope__V1__SetBudget *b = c->budget;
        if (b->hook < -1 || b->hook >= MKS_EV_COUNT || b->sample_shift > 31) {
            snprintf(msg, sizeof(msg), "set budget: hook or sample shift out of range");
            r.error = msg;
            break;
        }
        agt_budget_set(&a->budget, b->bytes_per_sec, mono_ns());
        for (int e = 0; e < MKS_EV_COUNT; e++)
            if (b->hook < 0 || b->hook == e) {
                a->cmd_shift[e] = b->sample_shift;
                a->cmd_insns[e] = b->insn_budget;
            }
        int err = apply_sampling(a);
        if (err) {
            snprintf(msg, sizeof(msg), "set budget: %s", strerror(-err));
            r.error = msg;
            break;
        }
        r.ok = 1;
        agt_log_info("budget: %" PRIu64 " bytes/s, sample shift %u, %" PRIu64 " insns per epoch",
                     b->bytes_per_sec, b->sample_shift, b->insn_budget);
        break;
    }
    case MKSCOPE__V1__COMMAND__KIND_ESCALATE: {
        if (a->esc) {
            snprintf(msg, sizeof(msg), "escalation %llu is still running",
                     (unsigned long long)agt_esc_id(a->esc));
            r.error = msg;
            break;
        }
        uint64_t cost = 0;
        uint32_t n_insns = 0;
        int err = agt_esc_start(a->ctl, c->escalate, mono_ns(), &a->esc, &cost, &n_insns, msg,
                                sizeof(msg));
        const char *ep = c->escalate->ucx_endpoint;
        if (!err && ep && *ep && !a->ucx) {
            char why[256];
            size_t l = strlen(msg);
            if (agt_ucx_connect(ep, &a->ucx, why, sizeof(why)) == 0)
                snprintf(msg + l, sizeof(msg) - l, "; raw events over UCX to %s", ep);
            else
                snprintf(msg + l, sizeof(msg) - l, "; %s: raw events go on the ingest socket", why);
        }
        r.ok = err == 0;
        r.cost = cost;
        r.n_insns = n_insns;
        if (err)
            r.error = msg;
        else
            r.verifier_log = msg;
        break;
    }
    case MKSCOPE__V1__COMMAND__KIND_PROBE: {
        const Mkscope__V1__ProbeStart *ps = c->probe;
        if (a->n_probes == AGT_MAX_PROBES) {
            snprintf(msg, sizeof(msg), "%s: %d probes already attached; wait for one to end",
                     ps->name, AGT_MAX_PROBES);
            r.error = msg;
            break;
        }
        if (find_probe(a, ps->name)) {
            snprintf(msg, sizeof(msg), "%s is already attached", ps->name);
            r.error = msg;
            break;
        }
        uint64_t cost = 0;
        uint32_t n_insns = 0;
        struct agt_probe *pr = NULL;
        int err = agt_probe_start(&a->progs, a->ctl, ps, a->o.probe_max_cost, mono_ns(),
                                  clock_ns(CLOCK_REALTIME), &pr, &cost, &n_insns, msg,
                                  sizeof(msg));
        if (!err)
            a->probes[a->n_probes++] = pr;
        r.ok = err == 0;
        r.cost = cost;
        r.n_insns = n_insns;
        if (err)
            r.error = msg;
        else
            r.verifier_log = msg;
        break;
    }
    default:
        snprintf(msg, sizeof(msg), "unknown command kind %d", (int)c->kind_case);
        r.error = msg;
        break;
    }
    if (!r.ok)
        agt_log_warn("command %" PRIu64 ": %s", c->id, msg);
    else
        agt_log_info("command %" PRIu64 ": %s", c->id, msg[0] ? msg : "done");
    queue_reply(a, &r);
}

/* ---- replies from the collector --------------------------------------- */

/* The collector's load: what its Acks say and how long they take (budget.h);
 * each change of the level in force is logged once. */
static void note_collector_load(struct agent *a, uint32_t hint, uint64_t latency_ns)
{
    uint32_t was = a->coll.level;
    if (agt_pressure_note(&a->coll, hint, latency_ns, a->epoch_ns) == was)
        return;
    if (a->coll.level)
        agt_log_warn("collector %s (its ack says %u, acks take %.0f ms): sending %s until it"
                     " keeps up",
                     a->coll.level == 2 ? "behind" : "busy", a->coll.hint, a->coll.lat_ns / 1e6,
                     a->coll.level == 2 ? "counts only" : "at most the histogram tier");
    else
        agt_log_info("collector keeps up again (acks take %.0f ms): full detail",
                     a->coll.lat_ns / 1e6);
}

static void on_reply(struct agent *a, const void *buf, size_t len)
{
    mks_envelope *env = NULL;
    char why[256];
    enum inflight was = a->inflight;
    a->inflight = IF_NONE;
    agt_spool_pin(a->spool, 0);
    int err = mks_wire_decode_for(buf, len, MKS_WIRE_ACCEPT_AGENT_LINK,
                                  a->have_key ? &a->key : NULL, &env, why, sizeof(why));
    if (err) {
        refused(a, "collector reply rejected: %s", why);
        return; /* the request is sent again */
    }
    /* The reply must answer the request in flight: a copy of an older reply
     * (with the commands it carried) is not one. */
    if ((a->have_key || env->reply_to) && env->reply_to != a->inflight_nonce) {
        refused(a, "a reply that answers another request than the one in flight; ignored");
        mks_wire_free(env);
        return;
    }
    if (a->outage_logged) {
        agt_log_info("collector answers again");
        a->outage_logged = 0;
    }
    note_collector_load(a, env->body_case == MKSCOPE__V1__ENVELOPE__BODY_ACK
                               ? env->ack->pressure
                               : a->coll.hint,
                        mono_ns() - agt_link_sent_ns(a->link));
    if (was == IF_REGISTER) {
        if (env->body_case != MKSCOPE__V1__ENVELOPE__BODY_REGISTER_ACK) {
            agt_log_warn("collector answered register with %s", mks_wire_body_name(env->body_case));
        } else if (!env->register_ack->accepted) {
            agt_log_err("collector refused registration: %s", env->register_ack->reason);
            a->register_after_ns = mono_ns() + REGISTER_RETRY_NS;
        } else {
            /* A schema published (or an application found) while this
             * registration was on its way needs one more. */
            a->registered = a->reg_sent == a->reg_want;
            a->coll_compact = env->register_ack->compact_summaries;
            ack_up_to(a, env->register_ack->stored_seq);
            agt_log_info("registered with the collector (stored seq %" PRIu64 ")",
                         env->register_ack->stored_seq);
        }
        mks_wire_free(env);
        return;
    }
    if (env->body_case == MKSCOPE__V1__ENVELOPE__BODY_REGISTER_ACK &&
        !env->register_ack->accepted) {
        /* The collector refused the request.  A summary it cannot store
         * would block the queue for ever: after a few refusals it is
         * dropped and counted as lost, like an overflow. */
        agt_log_warn("collector refused %s seq %" PRIu64 ": %s",
                     was == IF_SUMMARY ? "summary" : "request", a->inflight_seq,
                     env->register_ack->reason);
        /* The collector may not know this agent any more (a store started
         * afresh, an incarnation it has not seen): register again before
         * the next try, which says what it stores. */
        if (was == IF_SUMMARY || was == IF_HEARTBEAT || was == IF_REPLY)
            a->registered = 0;
        if (was == IF_SUMMARY && ++a->refusals >= 3) {
            agt_log_err("dropping summary seq %" PRIu64 " the collector refuses; its events are"
                        " reported as undelivered",
                        a->inflight_seq);
            if (agt_spool_drop(a->spool, a->inflight_seq))
                agt_spool_ack(a->spool, a->inflight_seq);
            a->refused++;
            a->refusals = 0;
        } else if (was == IF_REPLAY && ++a->refusals >= 3) {
            agt_log_err("dropping a summary of an earlier agent the collector refuses");
            agt_spool_replay_pop(a->spool, 0); /* counted lost there */
            a->refusals = 0;
        } else if (was == IF_REPLY) {
            pop_reply(a);
        }
        mks_wire_free(env);
        return;
    }
    if (env->body_case != MKSCOPE__V1__ENVELOPE__BODY_ACK) {
        agt_log_warn("collector answered with %s, expected ack",
                     mks_wire_body_name(env->body_case));
        mks_wire_free(env);
        return;
    }
    a->refusals = 0;
    /* Only the reply to a summary speaks for this incarnation's summaries:
     * the collector answers other requests with what it last stored for the
     * rank, which may belong to an earlier agent. */
    if (was == IF_SUMMARY)
        ack_up_to(a, env->ack->up_to_seq);
    if (was == IF_REPLAY) /* the ack speaks for the earlier incarnation */
        agt_spool_replay_pop(a->spool, 1);
    if (was == IF_REPLY)
        pop_reply(a);
    for (size_t i = 0; i < env->ack->n_commands; i++)
        run_command(a, env->ack->commands[i]);
    mks_wire_free(env);
}

/* ---- the application and its control block ---------------------------- */

static void close_app(struct agent *a)
{
    esc_poll(a, mono_ns(), 1); /* the block is still mapped: drain, send the last batch */
    free_probes(a);
    agt_progs_reset(&a->progs);
    mks_ctl_close(a->ctl);
    a->ctl = NULL;
}

static void attach_builtins(struct agent *a)
{
    char list[512];
    snprintf(list, sizeof(list), "%s", a->o.monitors ? a->o.monitors : "");
    char *save = NULL;
    for (char *m = strtok_r(list, ",", &save); m; m = strtok_r(NULL, ",", &save)) {
        if (!valid_name(m)) {
            agt_log_err("monitor name '%s' is not valid", m);
            continue;
        }
        struct agt_install_result res;
        if (agt_progs_install_builtin(&a->progs, a->ctl, a->o.monitors_dir, m, &res) == 0) {
            agt_log_info("%s", res.log);
            a->n_attaches++;
        } else {
            agt_log_err("%s", res.log);
        }
    }
}

static int try_open(struct agent *a, uint64_t now)
{
    struct mks_ctl *ctl = NULL;
    char why[256] = "";
    int err = mks_ctl_open_err(a->o.job, a->o.rank, &ctl, why, sizeof(why));
    if (err) {
        /* Not there yet (-ENOENT) or left behind by an application that
         * died (-ESRCH): wait for the next one.  Anything else is worth a
         * line, once until it changes. */
        if (err != a->open_err_logged) {
            if (err == -ENOENT || err == -ESRCH)
                agt_log_info("waiting for the application: %s", why);
            else
                agt_log_err("%s", why);
            a->open_err_logged = err;
        }
        return err;
    }
    struct mks_ctl_info info;
    err = mks_ctl_info(ctl, &info);
    if (err) {
        agt_log_err("control block of rank %u: cannot read its info: %s", a->o.rank,
                    strerror(-err));
        mks_ctl_close(ctl);
        return err;
    }
    if (info.rank != a->o.rank || info.n_ranks == 0 || info.rank >= info.n_ranks) {
        agt_log_err("control block says rank %u of %u, expected rank %u", info.rank, info.n_ranks,
                    a->o.rank);
        mks_ctl_close(ctl);
        return -EINVAL;
    }
    Mkscope__V1__TaskSchema *schema = NULL;
    if (info.schema && info.schema_len) {
        char why[256];
        if (mks_wire_schema_decode(info.schema, info.schema_len, &schema, why, sizeof(why)))
            agt_log_warn("task schema of rank %u is not valid (%s); registering without it",
                         a->o.rank, why);
    }
    a->open_err_logged = 0;
    a->schema_err_logged = 0;
    mks_wire_schema_free(a->schema);
    a->schema = schema;
    int restarted = a->have_info && info.app_start_ns != a->last_app_start;
    a->ctl = ctl;
    a->info = info;
    a->info.schema = NULL; /* points into the block; decoded copy kept above */
    a->have_info = 1;
    a->app_alive = 1;
    a->last_app_start = info.app_start_ns;
    a->lease_lapses = info.lease_lapses;
    a->registered = 0; /* (re-)register: pid, app start and schema may be new */
    agt_steps_reset(a->steps); /* a new application counts its steps anew */
    a->reg_want++;
    a->prev_host_ns = clock_ns(CLOCK_REALTIME);
    a->prev_dev_ns = dev_ns(a);
    agt_log_info("%s application pid %d: rank %u of %u, %u workers, hook ABI v%u%s%s",
                 restarted ? "reattached to restarted" : "attached to", info.app_pid, info.rank,
                 info.n_ranks, info.n_workers, info.abi_version, info.gpu_uuid[0] ? ", GPU " : "",
                 info.gpu_uuid);
    attach_builtins(a);
    if (a->sample_shift || a->auto_shift)
        apply_sampling(a); /* a restarted application starts with none */
    (void)now;
    return 0;
}

/* Summaries the spool dropped since the log last said so: one line, at most
 * once a second, so an overflow is never silent and never floods the log. */
static void say_losses(struct agent *a, const struct agt_spool_stats *st)
{
    uint64_t lost = st->lost + st->stale, now = mono_ns();
    if (lost == a->lost_logged || (a->lost_log_ns && now - a->lost_log_ns < 1000000000ull))
        return;
    uint64_t events = 0;
    for (int ev = 0; ev < MKS_EV_COUNT; ev++)
        events += st->lost_tags.v[TAG_OWN + ev];
    agt_log_warn("dropped %" PRIu64 " summaries (%" PRIu64 " in all, %" PRIu64
                 " events never delivered): %" PRIu64 " unacknowledged summaries filled the"
                 " buffer (--buffer-bytes, --spool-dir); the next summary reports them",
                 lost - a->lost_logged, lost, events, st->entries);
    a->lost_logged = lost;
    a->lost_log_ns = now;
}

/* Make a summary of `s` (possibly merged with held ones) and spool it. */
static void emit(struct agent *a, struct agt_summary *s, int force)
{
    if (a->pending) {
        if (agt_summary_merge(a->pending, s) != 0) {
            agt_log_err("epoch %" PRIu64 ": out of memory merging summaries", s->epoch_last);
        }
        agt_summary_free(s);
        s = a->pending;
        a->pending = NULL;
    }
    struct agt_spool_stats st;
    agt_spool_stats(a->spool, &st);
    say_losses(a, &st);
    /* What this summary reports lost: the summaries dropped since the last
     * one was made, and the reports those carried (lost_tags), so that a
     * report lost in turn is made again; per hook the same for their
     * events. */
    uint64_t lost_total = st.lost + st.lost_tags.v[TAG_LOSSES] + st.stale;
    uint64_t undelivered[MKS_EV_COUNT];
    for (int ev = 0; ev < MKS_EV_COUNT; ev++)
        undelivered[ev] = st.lost_tags.v[TAG_EVENTS + ev] - a->undelivered_reported[ev];
    struct agt_encode_meta meta = {
        .job = a->o.job,
        .rank = a->o.rank,
        .incarnation = a->incarnation,
        .seq = a->seq + 1,
        .lost_summaries = lost_total - a->lost_reported,
        .undelivered = undelivered,
        .sample_shift = a->sample_shift,
        .compact = a->coll_compact,
        .prog_names = (const char *const *)a->progs.names_by_id,
        .n_prog_names = sizeof(a->progs.names_by_id) / sizeof(a->progs.names_by_id[0])};
    /* The steps whose own rows go; the policy's state is put back if the
     * summary is held (it is chosen again, merged with the next). */
    struct agt_detail detail_before = a->detail;
    uint32_t *dsteps = NULL;
    size_t n_dsteps = 0;
    int err = agt_detail_choose(&a->detail, s, &dsteps, &n_dsteps);
    meta.withheld_steps = dsteps;
    meta.n_withheld_steps = n_dsteps;
    const struct mks_wire_key *key = a->have_key ? &a->key : NULL;
    uint8_t *bufs[AGT_TIER_COUNT] = {0};
    size_t sizes[AGT_TIER_COUNT] = {0};
    /* The collector's pressure caps the detail (AGT_TIER_* grow coarser
     * with the level: 1 histograms, 2 counts); the summary carries the
     * level in force. */
    int cap = (int)a->coll.level;
    int tier = cap;
    meta.pressure = a->coll.level;
    if (err) {
        /* no memory for the choice: nothing encoded, said below */
    } else if (a->budget.bytes_per_sec) {
        for (int t = 0; t < AGT_TIER_COUNT && !err; t++)
            err = agt_summary_encode(s, (enum agt_tier)t, &meta, key, &bufs[t], &sizes[t]);
        if (!err) {
            tier = agt_budget_choose(&a->budget, sizes);
            if (tier < 0 && force)
                tier = AGT_TIER_COUNTS;
            if (tier >= 0 && tier < cap)
                tier = cap;
        }
    } else {
        err = agt_summary_encode(s, (enum agt_tier)tier, &meta, key, &bufs[tier], &sizes[tier]);
    }
    if (!err && a->budget.bytes_per_sec && a->ctl)
        adapt_sampling(a, tier);
    if (!err && tier < 0) {
        a->detail = detail_before;
        a->n_held++;
        a->pending = s;
        s = NULL;
    } else if (!err) {
        if (tier != AGT_TIER_FULL) { /* no step had rows of its own: none withheld */
            a->detail.kept = detail_before.kept;
            a->detail.withheld = detail_before.withheld;
        }
        struct agt_spool_tag tag = {.v = {[TAG_LOSSES] = meta.lost_summaries}};
        for (int ev = 0; ev < MKS_EV_COUNT; ev++) {
            tag.v[TAG_EVENTS + ev] = s->cov[ev].eligible + undelivered[ev];
            tag.v[TAG_OWN + ev] = s->cov[ev].eligible;
        }
        err = agt_spool_push(a->spool, meta.seq, bufs[tier], sizes[tier], &tag);
        if (!err) {
            a->seq = meta.seq;
            a->lost_reported = lost_total;
            for (int ev = 0; ev < MKS_EV_COUNT; ev++)
                a->undelivered_reported[ev] = st.lost_tags.v[TAG_EVENTS + ev];
            agt_budget_charge(&a->budget, sizes[tier]);
            a->tiers[tier]++;
            a->n_summaries++;
            if (meta.pressure)
                a->n_pressured++;
            for (int c = 0; c < MKS_MON_MAX_CLASSES; c++)
                a->class_counts[c] += s->cls[c].count;
            agt_log_debug("summary seq %" PRIu64 ": epochs %" PRIu64 "..%" PRIu64 ", %" PRIu64
                          " tasks, %zu bytes, tier %u",
                          meta.seq, s->epoch_first, s->epoch_last, agt_summary_total(s),
                          sizes[tier], agt_tier_wire((enum agt_tier)tier));
        }
    }
    if (err)
        agt_log_err("epoch %" PRIu64 ": summary not made: %s", s ? s->epoch_last : 0,
                    strerror(-err));
    for (int t = 0; t < AGT_TIER_COUNT; t++)
        free(bufs[t]);
    free(dsteps);
    agt_summary_free(s);
}

/* Advance the epoch and summarise it; app_ended: the application is gone,
 * so its last step has ended too. */
static void snapshot(struct agent *a, int force, int app_ended)
{
    struct mks_epoch_snapshot *snap = NULL;
    uint64_t now = mono_ns();
    /* probes that end are detached before the flip, so that this epoch's
     * snapshot holds all they saw */
    for (int i = 0; i < a->n_probes; i++)
        agt_probe_before_snapshot(a->probes[i], &a->progs, a->ctl, now,
                                  app_ended ? "application ended"
                                  : a->stopping ? "agent stopped"
                                                : NULL);
    int err = mks_ctl_epoch_advance(a->ctl, &snap);
    if (err) {
        agt_log_warn("epoch advance failed: %s", strerror(-err));
        if (force && a->pending) {
            struct agt_summary *empty = agt_summary_new();
            if (empty)
                emit(a, empty, 1);
        }
        return;
    }
    uint64_t host = clock_ns(CLOCK_REALTIME), dev = dev_ns(a);
    struct agt_summary *s = agt_summary_new();
    int attached[MKS_EV_COUNT];
    agt_progs_attached(&a->progs, attached);
    if (!s) {
        mks_epoch_snapshot_free(snap);
        return;
    }
    err = agt_summary_build(s, &snap_ops, snap, a->progs.maps, a->progs.n_maps, attached);
    for (int i = 0; !err && i < a->n_probes;) {
        if (agt_probe_collect(a->probes[i], &a->progs, a->ctl, &snap_ops, snap, s->cov, now, s)) {
            agt_probe_free(a->probes[i]);
            a->probes[i] = a->probes[--a->n_probes];
        } else {
            i++;
        }
    }
    mks_epoch_snapshot_free(snap);
    if (err) {
        agt_summary_free(s);
        return;
    }
    if (agt_steps_feed(a->steps, s, a->info.n_workers, app_ended))
        agt_log_err("epoch %" PRIu64 ": out of memory following decode steps", s->epoch_last);
    /* The host CPU wait of each step that ended, while the pump's samples
     * of its span are still kept (they reach 2 s back; a step is handed
     * over an epoch after it ended at most). */
    for (size_t i = 0; i < s->n_done; i++) {
        struct agt_step_done *d = &s->done[i];
        d->cpu_wait_known =
            d->t_begin && d->t_end >= d->t_begin &&
            mks_ctl_cpu_wait(a->ctl, d->t_begin, d->t_end, &d->cpu_wait, &d->cpu_runs) == 0;
    }
    for (int ev = 0; ev < MKS_EV_COUNT; ev++)
        a->elig_total[ev] += s->cov[ev].eligible;
    s->t_host_begin = a->prev_host_ns;
    s->t_host_end = host;
    s->t_dev_begin = a->prev_dev_ns;
    s->t_dev_end = dev;
    a->prev_host_ns = host;
    a->prev_dev_ns = dev;
    memcpy(a->last_cov, s->cov, sizeof(a->last_cov));
    a->last_epoch = s->epoch_last;
    a->n_epochs++;
    emit(a, s, force);
}

static int unreported_losses(const struct agent *a, const struct agt_spool_stats *st)
{
    if (st->lost + st->lost_tags.v[TAG_LOSSES] + st->stale != a->lost_reported)
        return 1;
    for (int ev = 0; ev < MKS_EV_COUNT; ev++)
        if (st->lost_tags.v[TAG_EVENTS + ev] != a->undelivered_reported[ev])
            return 1;
    return 0;
}

/* A summary of no epoch that carries only the losses still unreported. */
static void report_losses(struct agent *a)
{
    struct agt_summary *s = agt_summary_new();
    if (!s)
        return;
    s->epoch_first = s->epoch_last = a->last_epoch;
    s->t_host_begin = s->t_host_end = a->prev_host_ns;
    s->t_dev_begin = s->t_dev_end = a->prev_dev_ns;
    emit(a, s, 1);
}

static void begin_stop(struct agent *a, const char *why)
{
    if (a->stopping)
        return;
    agt_log_info("stopping: %s", why);
    a->stopping = 1;
    a->stop_deadline_ns = mono_ns() + a->o.drain_ms * 1000000ull;
    if (a->ctl) {
        /* An application that ended since the last tick left its last epoch
         * in the block, still mapped here: taken as the tick would. */
        int alive = mks_ctl_alive(a->ctl);
        snapshot(a, 1, !alive);
        /* leave the rank as we found it */
        while (alive && a->progs.n) {
            uint64_t gen;
            char name[96];
            snprintf(name, sizeof(name), "%s", a->progs.progs[0].name);
            agt_progs_remove(&a->progs, a->ctl, name, -1, &gen);
        }
    } else if (a->pending) {
        struct agt_summary *empty = agt_summary_new();
        if (empty)
            emit(a, empty, 1);
    }
    close_app(a);
}

/* The runtime may publish its task schema after the agent attached (or only
 * just before it exits): pick it up and register again, so that the
 * collector learns the class names. */
static void refresh_schema(struct agent *a)
{
    struct mks_ctl_info info;
    if (a->schema || mks_ctl_info(a->ctl, &info) != 0 || !info.schema || !info.schema_len)
        return;
    char why[256];
    if (mks_wire_schema_decode(info.schema, info.schema_len, &a->schema, why, sizeof(why)) == 0) {
        a->registered = 0;
        a->reg_want++;
    } else if (!a->schema_err_logged++) {
        agt_log_warn("task schema of rank %u is not valid: %s", a->o.rank, why);
    }
}

static void tick(struct agent *a, uint64_t now)
{
    agt_budget_refill(&a->budget, now);
    if (a->stopping)
        return;
    if (!a->ctl) {
        try_open(a, now);
        return;
    }
    refresh_schema(a);
    if (!mks_ctl_alive(a->ctl)) {
        /* The application ended or restarted.  Its control block is still
         * mapped here: take what the last epoch counted, if the block still
         * allows it, then let go and look for the next incarnation. */
        agt_log_info("application pid %d is gone", a->info.app_pid);
        snapshot(a, 1, 1);
        close_app(a);
        a->app_alive = 0;
        a->final_heartbeat = 1;
        if (a->o.exit_with_app)
            begin_stop(a, "the application exited");
        return;
    }
    int err = mks_ctl_lease(a->ctl, a->o.lease_ms * 1000000ull);
    if (err)
        agt_log_warn("lease renewal failed: %s", strerror(-err));
    struct mks_ctl_info info;
    if (mks_ctl_info(a->ctl, &info) == 0 && info.lease_lapses != a->lease_lapses) {
        /* We were too slow once and the application detached everything;
         * the programs are still loaded, put them back. */
        agt_log_warn("lease lapsed (%u times); re-attaching %u programs", info.lease_lapses,
                     a->progs.n);
        a->lease_lapses = info.lease_lapses;
        for (uint32_t i = 0; i < a->progs.n; i++) {
            struct agt_prog *p = &a->progs.progs[i];
            if (p->detached)
                continue;
            err = mks_ctl_attach(a->ctl, p->prog_id, (enum mks_hook_event)p->hook, -1, &p->gen);
            if (err && err != -EEXIST && err != -EALREADY)
                agt_log_err("%s: re-attach failed: %s", p->name, strerror(-err));
        }
    }
    snapshot(a, 0, 0);
}

/* ---- survey ---------------------------------------------------------------- */

static void on_survey(struct agent *a)
{
    void *msg = NULL;
    int n = nn_recv(a->survey_sock, &msg, NN_MSG, NN_DONTWAIT);
    if (n < 0)
        return;
    mks_envelope *env = NULL;
    char why[256];
    int err = mks_wire_decode_for(msg, (size_t)n, MKS_WIRE_BODY(SURVEY_REQUEST),
                                  a->have_key ? &a->key : NULL, &env, why, sizeof(why));
    nn_freemsg(msg);
    if (err) {
        refused(a, "survey request rejected: %s", why);
        return;
    }
    if ((err = mks_fresh_check_env(a->fresh, env, clock_ns(CLOCK_REALTIME), why, sizeof(why)))) {
        refused(a, "survey request refused: %s", why);
        mks_wire_free(env);
        return;
    }
    /* "commands" (filter: the job) is a notice, not a question: commands
     * wait at the collector for some ranks of the job.  Not answered; the
     * next request fetches them (pump). */
    const Mkscope__V1__SurveyRequest *sq = env->survey_request;
    if (sq->what && !strcmp(sq->what, "commands")) {
        if (sq->filter && !strcmp(sq->filter, a->o.job) && a->registered) {
            a->commands_due = 1;
            a->n_wakeups++;
            agt_log_debug("commands wait at the collector: asking for them now");
        }
        mks_wire_free(env);
        return;
    }
    Mkscope__V1__SurveyReply r = MKSCOPE__V1__SURVEY_REPLY__INIT;
    Mkscope__V1__Coverage cov[MKS_EV_COUNT], *covp[MKS_EV_COUNT];
    Mkscope__V1__ProgramState ps[AGT_MAX_PROGS], *psp[AGT_MAX_PROGS];
    r.id = env->survey_request->id;
    r.ok = 1;
    r.epoch = a->last_epoch;
    r.last_seq = a->seq;
    agt_coverage_fill(a->last_cov, NULL, cov, covp);
    r.coverage = covp;
    r.n_coverage = MKS_EV_COUNT;
    r.programs = psp;
    r.n_programs = fill_programs(a, ps, psp);
    mks_envelope out;
    env_init(a, &out, env->seq);
    out.reply_to = env->nonce;
    out.body_case = MKSCOPE__V1__ENVELOPE__BODY_SURVEY_REPLY;
    out.survey_reply = &r;
    uint8_t *buf;
    size_t len;
    if (encode_env(a, &out, &buf, &len) == 0) {
        if (nn_send(a->survey_sock, buf, len, NN_DONTWAIT) < 0)
            agt_log_debug("survey reply not sent: %s", nn_strerror(nn_errno()));
        free(buf);
    }
    mks_wire_free(env);
}

/* ---- setup and the loop --------------------------------------------------- */

static void write_stats(struct agent *a)
{
    if (!a->o.stats_path)
        return;
    FILE *f = fopen(a->o.stats_path, "w");
    if (!f) {
        agt_log_err("cannot write %s: %s", a->o.stats_path, strerror(errno));
        return;
    }
    struct agt_spool_stats st;
    agt_spool_stats(a->spool, &st);
    double secs = (double)(mono_ns() - a->start_mono_ns) / 1e9;
    fprintf(f,
            "{\"rank\":%u,\"incarnation\":%" PRIu64 ",\"seconds\":%.3f,\"epochs\":%" PRIu64
            ",\"summaries\":%" PRIu64 ",\"acked_seq\":%" PRIu64 ",\"last_seq\":%" PRIu64
            ",\"unacked\":%" PRIu64 ",\"lost\":%" PRIu64 ",\"held_epochs\":%" PRIu64
            ",\"bytes_sent\":%" PRIu64 ",\"sending_seconds\":%.3f,\"sends\":%" PRIu64
            ",\"resends\":%" PRIu64 ",\"attaches\":%" PRIu64 ",\"raw_batches_dropped\":%" PRIu64
            ",\"pressured\":%" PRIu64 ",\"wakeups\":%" PRIu64 ",\"steps_detailed\":%" PRIu64
            ",\"steps_withheld\":%" PRIu64 ",\"tiers\":[%" PRIu64 ",%" PRIu64 ",%" PRIu64
            "],\"class_counts\":{",
            a->o.rank, a->incarnation, secs, a->n_epochs, a->n_summaries, a->acked, a->seq,
            st.entries, st.lost + st.stale, a->n_held, a->budget.sent,
            (double)(a->last_send_ns - a->first_send_ns) / 1e9, a->n_sends, a->n_resends,
            a->n_attaches, a->raw_dropped, a->n_pressured, a->n_wakeups, a->detail.kept,
            a->detail.withheld, a->tiers[AGT_TIER_COUNTS], a->tiers[AGT_TIER_HIST],
            a->tiers[AGT_TIER_FULL]);
    int first = 1;
    for (int c = 0; c < MKS_MON_MAX_CLASSES; c++) {
        if (!a->class_counts[c])
            continue;
        fprintf(f, "%s\"%d\":%" PRIu64, first ? "" : ",", c, a->class_counts[c]);
        first = 0;
    }
    /* Per hook: every eligible event the agent summarised, and those of
     * the summaries it dropped (what the collector should count as
     * eligible, and as undelivered). */
    fprintf(f, "},\"refused\":%" PRIu64 ",\"eligible\":[", a->refused);
    for (int ev = 0; ev < MKS_EV_COUNT; ev++)
        fprintf(f, "%s%" PRIu64, ev ? "," : "", a->elig_total[ev]);
    fprintf(f, "],\"undelivered\":[");
    for (int ev = 0; ev < MKS_EV_COUNT; ev++)
        fprintf(f, "%s%" PRIu64, ev ? "," : "", st.lost_tags.v[TAG_OWN + ev]);
    fprintf(f, "]}\n");
    fclose(f);
}

static int setup(struct agent *a)
{
    a->epoch_ns = a->o.epoch_ms * 1000000ull;
    a->incarnation = clock_ns(CLOCK_REALTIME);
    a->start_mono_ns = mono_ns();
    if (gethostname(a->host, sizeof(a->host) - 1) != 0)
        snprintf(a->host, sizeof(a->host), "unknown");
    if (a->o.key_path) {
        char why[256];
        int err = mks_wire_key_load(a->o.key_path, &a->key, why, sizeof(why));
        if (err) {
            agt_log_err("--key %s: %s", a->o.key_path, why);
            return err;
        }
        a->have_key = 1;
    }
    struct mks_fresh_opts fo = {.sz = sizeof(fo),
                                .window_ns = a->o.fresh_window_ms * 1000000ull,
                                .capacity = 4096, /* commands and surveys: a few a second */
                                .enforce_window = a->have_key,
                                .require = a->have_key};
    int ferr = mks_fresh_create(&fo, &a->fresh);
    if (ferr) {
        agt_log_err("replay cache: %s", strerror(-ferr));
        return ferr;
    }
    /* One directory per (job, rank) below --spool-dir: the agents of a node
     * can share the option, and the next agent of this rank finds what a
     * crashed one left. */
    char spool_dir[4096];
    if (a->o.spool_dir) {
        if (mkdir(a->o.spool_dir, 0700) != 0 && errno != EEXIST) {
            int err = -errno;
            agt_log_err("--spool-dir %s: %s", a->o.spool_dir, strerror(errno));
            return err;
        }
        int n = snprintf(spool_dir, sizeof(spool_dir), "%s/%s.%u", a->o.spool_dir, a->o.job,
                         a->o.rank);
        if (n < 0 || (size_t)n >= sizeof(spool_dir)) {
            agt_log_err("--spool-dir %s: path too long", a->o.spool_dir);
            return -ENAMETOOLONG;
        }
    }
    struct agt_spool_opts so = {.sz = sizeof(so),
                                .mem_bytes = a->o.buffer_bytes,
                                .dir = a->o.spool_dir ? spool_dir : NULL,
                                .disk_bytes = a->o.spool_bytes,
                                .spill_only = a->o.spool_spill_only};
    a->steps = agt_steps_new();
    if (!a->steps)
        return -ENOMEM;
    int err = agt_spool_create(&so, &a->spool);
    if (err)
        return err;
    agt_budget_init(&a->budget, a->o.budget, a->epoch_ns, mono_ns());
    agt_detail_init(&a->detail, &a->o.detail);
    a->esc_env = (struct agt_esc_env){.job = a->o.job,
                                      .rank = a->o.rank,
                                      .incarnation = a->incarnation,
                                      .key = a->have_key ? &a->key : NULL};
    err = agt_link_create(a->o.collector, a->o.timeout_ms, &a->link);
    if (err)
        return err;
    a->survey_sock = -1;
    if (a->o.survey) {
        a->survey_sock = nn_socket(AF_SP, NN_RESPONDENT);
        size_t sz = sizeof(a->survey_fd);
        if (a->survey_sock < 0 ||
            nn_getsockopt(a->survey_sock, NN_SOL_SOCKET, NN_RCVFD, &a->survey_fd, &sz) < 0 ||
            nn_connect(a->survey_sock, a->o.survey) < 0) {
            agt_log_err("--survey %s: %s", a->o.survey, nn_strerror(nn_errno()));
            return -EINVAL;
        }
    }
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigprocmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    a->sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    a->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (a->sigfd < 0 || a->timerfd < 0) {
        agt_log_err("signalfd/timerfd: %s", strerror(errno));
        return -errno;
    }
    struct itimerspec its = {
        .it_interval = {.tv_sec = (time_t)(a->epoch_ns / 1000000000ull),
                        .tv_nsec = (long)(a->epoch_ns % 1000000000ull)},
        .it_value = {.tv_sec = 0, .tv_nsec = 1000000},
    };
    if (timerfd_settime(a->timerfd, 0, &its, NULL) != 0) {
        agt_log_err("timerfd_settime: %s", strerror(errno));
        return -errno;
    }
    return 0;
}

static void teardown(struct agent *a)
{
    struct agt_spool_stats st = {0};
    if (a->spool)
        agt_spool_stats(a->spool, &st);
    if (st.entries)
        agt_log_warn("%" PRIu64 " summaries (seq %" PRIu64 "..%" PRIu64
                     ") were not acknowledged before exit",
                     st.entries, a->acked + 1, a->seq);
    if (a->spool)
        write_stats(a);
    close_app(a);
    agt_ucx_destroy(a->ucx, 1000);
    agt_summary_free(a->pending);
    agt_steps_free(a->steps);
    mks_wire_schema_free(a->schema);
    for (int i = 0; i < a->n_replies; i++)
        free(a->replies[i].buf);
    agt_spool_destroy(a->spool);
    agt_link_destroy(a->link);
    mks_fresh_destroy(a->fresh);
    if (a->survey_sock >= 0)
        nn_close(a->survey_sock);
    if (a->sigfd >= 0)
        close(a->sigfd);
    if (a->timerfd >= 0)
        close(a->timerfd);
}

int agt_run(const struct agt_opts *opts)
{
    struct agent *a = calloc(1, sizeof(*a));
    if (!a)
        return 1;
    a->o = *opts;
    a->progs.lease_ns = a->o.lease_ms * 1000000ull;
    a->sigfd = a->timerfd = a->survey_sock = -1;
    agt_log_setup(a->o.verbose ? (a->o.verbose > 1 ? AGT_LOG_DEBUG : AGT_LOG_INFO) : AGT_LOG_WARN,
                  a->o.rank);
    if (setup(a) != 0) {
        teardown(a);
        free(a);
        return 1;
    }
    agt_log_info("job %s rank %u: collector %s, epoch %" PRIu64 " ms, budget %s", a->o.job,
                 a->o.rank, a->o.collector, a->o.epoch_ms, a->o.budget ? "limited" : "unlimited");
    for (;;) {
        uint64_t now = mono_ns();
        if (agt_link_expired(a->link, now)) {
            a->n_resends++;
            if (!a->outage_logged) {
                agt_log_warn("collector %s not answering; buffering summaries", a->o.collector);
                a->outage_logged = 1;
            }
            /* it may have restarted: register again, then replay.  A summary
             * in flight stays pinned: a slow collector may still store it,
             * and the RegisterAck's stored_seq says so; dropping it on
             * overflow meanwhile would count as lost a summary that was
             * stored. */
            a->inflight = IF_NONE;
            a->registered = 0;
        }
        /* Renew the lease on every wake-up, not only at epoch ticks: on a
         * loaded machine a late tick must not cost the rank its monitors. */
        if (a->ctl && !a->stopping && now - a->lease_renewed_ns >= 10000000ull) {
            mks_ctl_lease(a->ctl, a->o.lease_ms * 1000000ull);
            a->lease_renewed_ns = now;
        }
        if (a->esc || a->ucx)
            esc_poll(a, now, 0);
        pump(a, now);
        if (a->stopping) {
            struct agt_spool_stats st;
            agt_spool_stats(a->spool, &st);
            /* Summaries dropped after the last one was made (the last
             * pushes overflowed the buffer) are reported by one more, empty
             * summary once the buffer has drained, so no loss goes unsaid. */
            if (st.entries == 0 && !a->pending && unreported_losses(a, &st)) {
                report_losses(a);
                agt_spool_stats(a->spool, &st);
            }
            int idle = st.entries == 0 && a->n_replies == 0 && !a->pending && !a->final_heartbeat &&
                       !agt_link_busy(a->link);
            if (idle || now >= a->stop_deadline_ns || !a->have_info)
                break;
        }
        struct pollfd pf[4] = {{a->sigfd, POLLIN, 0},
                               {a->timerfd, POLLIN, 0},
                               {agt_link_fd(a->link), POLLIN, 0},
                               {a->survey_sock >= 0 ? a->survey_fd : -1, POLLIN, 0}};
        int wait = agt_link_wait_ms(a->link, now);
        if (wait < 0 || wait > 50)
            wait = 50; /* retry sends the link could not take */
        if ((a->esc || a->ucx) && wait > 10)
            wait = 10; /* drain raw rings and drive UCX often during an escalation */
        if (poll(pf, 4, wait) < 0 && errno != EINTR) {
            agt_log_err("poll: %s", strerror(errno));
            a->exit_code = 1;
            break;
        }
        now = mono_ns();
        if (pf[0].revents & POLLIN) {
            struct signalfd_siginfo si;
            while (read(a->sigfd, &si, sizeof(si)) == sizeof(si))
                ;
            if (a->stopping)
                break; /* a second signal: do not wait for the drain */
            begin_stop(a, "signal");
        }
        if (pf[1].revents & POLLIN) {
            uint64_t n;
            if (read(a->timerfd, &n, sizeof(n)) == sizeof(n))
                tick(a, now);
        }
        if (pf[2].revents & POLLIN) {
            void *buf;
            size_t len;
            while (agt_link_recv(a->link, &buf, &len, now) == 0) {
                on_reply(a, buf, len);
                agt_link_msg_free(buf);
            }
        }
        if (pf[3].revents & POLLIN)
            on_survey(a);
    }
    int code = a->exit_code;
    teardown(a);
    free(a);
    return code;
}

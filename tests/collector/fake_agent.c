/*
 * Fake agent for collector tests (see fake_agent.h).
 */
#include "fake_agent.h"

#include <errno.h>
#include <nanomsg/nn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Send an encoded envelope, wait for the reply and decode it. */
static int send_recv(int sock, const uint8_t *buf, size_t len, mks_envelope **reply)
{
    char err[256];
    if (nn_send(sock, buf, len, 0) < 0)
        return -nn_errno();
    void *msg;
    int n = nn_recv(sock, &msg, NN_MSG, 0);
    if (n < 0)
        return -nn_errno();
    int rc = mks_wire_decode(msg, (size_t)n, NULL, reply, err, sizeof(err));
    nn_freemsg(msg);
    if (rc)
        fprintf(stderr, "fake agent: reply: %s\n", err);
    return rc;
}

static int roundtrip(int sock, const mks_envelope *env, mks_envelope **reply)
{
    uint8_t *buf;
    size_t len;
    char err[256];
    if (mks_wire_encode(env, NULL, &buf, &len, err, sizeof(err))) {
        fprintf(stderr, "fake agent: encode: %s\n", err);
        return -EINVAL;
    }
    int rc = send_recv(sock, buf, len, reply);
    free(buf);
    return rc;
}

void fa_raw_batch(mks_envelope *env, Mkscope__V1__RawEventBatch *b, const char *job, uint32_t rank,
                  uint64_t inc, uint64_t escalation, Mkscope__V1__RawEvent **events, size_t n,
                  int last)
{
    mkscope__v1__raw_event_batch__init(b);
    b->escalation_id = escalation;
    b->events = events;
    b->n_events = n;
    b->last = last;
    mks_wire_init(env, job, rank, 0);
    env->incarnation = inc;
    env->body_case = MKSCOPE__V1__ENVELOPE__BODY_RAW_EVENT_BATCH;
    env->raw_event_batch = b;
}

void fa_register_env(mks_envelope *env, Mkscope__V1__Register *reg, const char *job,
                     uint32_t rank, uint32_t n_ranks, uint64_t inc)
{
    mkscope__v1__register__init(reg);
    reg->n_ranks = n_ranks;
    reg->host = "testhost";
    reg->gpu_uuid = "";
    reg->hook_abi_version = 1;
    reg->agent_version = "test";
    reg->n_workers = 4;
    reg->epoch_ns = 100000000;
    mks_wire_init(env, job, rank, 0);
    env->incarnation = inc;
    env->body_case = MKSCOPE__V1__ENVELOPE__BODY_REGISTER;
    env->register_ = reg;
}

int fa_send_envelope(int sock, const mks_envelope *env, mks_envelope **reply)
{
    return roundtrip(sock, env, reply);
}

int fa_send_register(int sock, const char *job, uint32_t rank, uint32_t n_ranks, uint64_t inc,
                     const char *const *class_names, int n_classes, mks_envelope **reply)
{
    mks_envelope env;
    Mkscope__V1__Register reg = MKSCOPE__V1__REGISTER__INIT;
    Mkscope__V1__TaskSchema schema = MKSCOPE__V1__TASK_SCHEMA__INIT;
    Mkscope__V1__TaskClass cls[FA_MAX_CLASSES], *cp[FA_MAX_CLASSES];
    char names[FA_MAX_CLASSES][16];
    for (int i = 0; i < n_classes; i++) {
        mkscope__v1__task_class__init(&cls[i]);
        cls[i].id = (uint32_t)i;
        snprintf(names[i], sizeof(names[i]), "c%d", i);
        cls[i].name = class_names ? (char *)class_names[i] : names[i];
        cp[i] = &cls[i];
    }
    schema.classes = cp;
    schema.n_classes = (size_t)n_classes;
    reg.n_ranks = n_ranks;
    reg.host = "testhost";
    reg.pid = 1000 + (int)rank;
    reg.gpu_uuid = "";
    reg.hook_abi_version = 1;
    reg.schema = &schema;
    reg.agent_version = "test";
    reg.n_workers = 4;
    reg.epoch_ns = 100000000;
    mks_wire_init(&env, job, rank, 0);
    env.incarnation = inc;
    env.body_case = MKSCOPE__V1__ENVELOPE__BODY_REGISTER;
    env.register_ = &reg;
    return roundtrip(sock, &env, reply);
}

int fa_send_heartbeat(int sock, const char *job, uint32_t rank, uint64_t inc, uint64_t seq,
                      mks_envelope **reply)
{
    mks_envelope env;
    Mkscope__V1__Heartbeat hb = MKSCOPE__V1__HEARTBEAT__INIT;
    Mkscope__V1__ProgramState ps = MKSCOPE__V1__PROGRAM_STATE__INIT, *pp = &ps;
    ps.name = "count";
    ps.hook = 3;
    ps.prog_gen = 2;
    ps.cost = 17;
    ps.prog_type = 1;
    hb.agent_time_ns = 1;
    hb.last_seq = seq;
    hb.app_alive = 1;
    hb.programs = &pp;
    hb.n_programs = 1;
    mks_wire_init(&env, job, rank, seq);
    env.incarnation = inc;
    env.body_case = MKSCOPE__V1__ENVELOPE__BODY_HEARTBEAT;
    env.heartbeat = &hb;
    return roundtrip(sock, &env, reply);
}

/* Storage for one summary's message structs. */
struct sum_msgs {
    Mkscope__V1__EpochSummary sum;
    Mkscope__V1__TaskStat ts[FA_MAX_CLASSES * FA_MAX_STEPS], *tsp[FA_MAX_CLASSES * FA_MAX_STEPS];
    Mkscope__V1__Hist hq[FA_MAX_CLASSES * FA_MAX_STEPS], hr[FA_MAX_CLASSES * FA_MAX_STEPS];
    Mkscope__V1__StepTime st[FA_MAX_STEPS], *stp[FA_MAX_STEPS];
    Mkscope__V1__RemoteWait rw[FA_MAX_WAITS], *rwp[FA_MAX_WAITS];
    Mkscope__V1__Release rl[FA_MAX_WAITS], *rlp[FA_MAX_WAITS];
    Mkscope__V1__WorkerStat ws[FA_MAX_WORKERS * FA_MAX_STEPS], *wsp[FA_MAX_WORKERS * FA_MAX_STEPS];
    Mkscope__V1__Coverage cov, *covp;
    Mkscope__V1__GenProgress gp, *gpp;
    Mkscope__V1__MapDump md, *mdp;
    Mkscope__V1__MapEntry me, *mep;
};

static void build_summary(struct sum_msgs *m, const struct fa_summary *s)
{
    mkscope__v1__epoch_summary__init(&m->sum);
    m->sum.epoch = s->epoch;
    m->sum.t_begin_host_ns = 1000 + s->epoch * 100;
    m->sum.t_end_host_ns = 1100 + s->epoch * 100;
    m->sum.t_begin_dev_ns = 5000 + s->epoch * 100;
    m->sum.t_end_dev_ns = 5100 + s->epoch * 100;
    if (s->clocks[0] || s->clocks[1] || s->clocks[2] || s->clocks[3]) {
        m->sum.t_begin_host_ns = s->clocks[0], m->sum.t_end_host_ns = s->clocks[1];
        m->sum.t_begin_dev_ns = s->clocks[2], m->sum.t_end_dev_ns = s->clocks[3];
    }
    for (int i = 0; i < s->n_ts; i++) {
        const struct fa_taskstat *t = &s->ts[i];
        mkscope__v1__task_stat__init(&m->ts[i]);
        mkscope__v1__hist__init(&m->hq[i]);
        mkscope__v1__hist__init(&m->hr[i]);
        m->ts[i].task_class = t->cls;
        m->ts[i].step = t->step;
        m->ts[i].count = t->count;
        m->ts[i].sum_run_ns = t->sum_run;
        m->hr[i].count = t->count;
        m->hr[i].sum = t->sum_run;
        m->hr[i].max = t->run_max;
        m->hr[i].buckets = (uint64_t *)t->run_b;
        m->hr[i].n_buckets = MKS_WIRE_MAX_HIST_BUCKETS;
        m->hq[i].count = t->count;
        m->hq[i].sum = t->queue_sum;
        m->hq[i].max = t->queue_max;
        m->hq[i].buckets = (uint64_t *)t->queue_b;
        m->hq[i].n_buckets = MKS_WIRE_MAX_HIST_BUCKETS;
        m->ts[i].run = &m->hr[i];
        m->ts[i].queue = &m->hq[i];
        m->tsp[i] = &m->ts[i];
    }
    m->sum.task_stats = m->tsp;
    m->sum.n_task_stats = (size_t)s->n_ts;
    for (int i = 0; i < s->n_steps; i++) {
        mkscope__v1__step_time__init(&m->st[i]);
        m->st[i].step = s->steps[i].step;
        m->st[i].t_begin_dev_ns = s->steps[i].t_begin;
        m->st[i].t_end_dev_ns = s->steps[i].t_end;
        m->st[i].complete = 1;
        m->st[i].queued_while_idle_ns = s->steps[i].queued_while_idle;
        m->st[i].cpu_wait_measured = s->steps[i].cpu_wait_measured;
        m->st[i].cpu_wait_ns = s->steps[i].cpu_wait;
        m->st[i].cpu_runs = s->steps[i].cpu_runs;
        m->stp[i] = &m->st[i];
    }
    m->sum.steps = m->stp;
    m->sum.n_steps = (size_t)s->n_steps;
    for (int i = 0; i < s->n_waits; i++) {
        const struct fa_wait *w = &s->waits[i];
        mkscope__v1__remote_wait__init(&m->rw[i]);
        m->rw[i].comm_gen = w->comm_gen;
        m->rw[i].peer_rank = w->peer;
        m->rw[i].waiter_class = w->waiter_class;
        m->rw[i].step = w->step;
        m->rw[i].worker = w->worker;
        m->rw[i].t_begin_dev_ns = w->t_begin;
        m->rw[i].t_end_dev_ns = w->t_end;
        m->rwp[i] = &m->rw[i];
    }
    m->sum.remote_waits = m->rwp;
    m->sum.n_remote_waits = (size_t)s->n_waits;
    for (int i = 0; i < s->n_rels; i++) {
        const struct fa_release *r = &s->rels[i];
        mkscope__v1__release__init(&m->rl[i]);
        m->rl[i].comm_gen = r->comm_gen;
        m->rl[i].consumer_rank = r->consumer;
        m->rl[i].task_class = r->cls;
        m->rl[i].step = r->step;
        m->rl[i].worker = r->worker;
        m->rl[i].t_ready_dev_ns = r->t_ready;
        m->rl[i].t_start_dev_ns = r->t_start;
        m->rl[i].t_end_dev_ns = r->t_end;
        m->rl[i].t_comm_begin_dev_ns = r->t_comm_begin;
        m->rl[i].t_comm_end_dev_ns = r->t_comm_end;
        m->rl[i].t_release_dev_ns = r->t_release;
        m->rlp[i] = &m->rl[i];
    }
    m->sum.releases = m->rlp;
    m->sum.n_releases = (size_t)s->n_rels;
    for (int i = 0; i < s->n_workers; i++) {
        const struct fa_worker *w = &s->workers[i];
        mkscope__v1__worker_stat__init(&m->ws[i]);
        m->ws[i].worker = w->worker;
        m->ws[i].step = w->step;
        m->ws[i].busy_ns = w->busy;
        m->ws[i].idle_ns = w->idle;
        m->ws[i].dep_wait_ns = w->dep_wait;
        m->ws[i].over_threshold_ns = w->over_threshold;
        m->ws[i].max_queue_depth = w->max_depth;
        m->wsp[i] = &m->ws[i];
    }
    m->sum.workers = m->wsp;
    m->sum.n_workers = (size_t)s->n_workers;
    mkscope__v1__coverage__init(&m->cov);
    m->cov.hook = 3;
    m->cov.eligible = s->cov_eligible;
    m->cov.ran = s->cov_ran;
    m->cov.throttled = s->cov_throttled;
    m->cov.lost = s->cov_lost;
    m->covp = &m->cov;
    m->sum.coverage = &m->covp;
    m->sum.n_coverage = s->cov_eligible ? 1 : 0;
    if (s->t_gen) {
        mkscope__v1__gen_progress__init(&m->gp);
        m->gp.step = s->gen_step;
        m->gp.t_dev_ns = s->t_gen;
        m->gpp = &m->gp;
        m->sum.gens = &m->gpp;
        m->sum.n_gens = 1;
    }
    if (s->map_name) {
        mkscope__v1__map_dump__init(&m->md);
        mkscope__v1__map_entry__init(&m->me);
        m->md.prog_name = (char *)(s->map_prog ? s->map_prog : "");
        m->md.map_name = (char *)s->map_name;
        m->me.key.data = (uint8_t *)s->map_key;
        m->me.key.len = s->map_key_len;
        m->me.value.data = (uint8_t *)s->map_value;
        m->me.value.len = s->map_value_len;
        m->mep = &m->me;
        m->md.entries = &m->mep;
        m->md.n_entries = 1;
        m->mdp = &m->md;
        m->sum.maps = &m->mdp;
        m->sum.n_maps = 1;
    }
}

int fa_encode_summary(const char *job, uint32_t rank, uint64_t inc, uint64_t seq,
                      const struct fa_summary *s, uint8_t **buf, size_t *len)
{
    struct sum_msgs *m = calloc(1, sizeof(*m));
    if (!m)
        return -ENOMEM;
    build_summary(m, s);
    mks_envelope env;
    mks_wire_init(&env, job, rank, seq);
    env.incarnation = inc;
    env.body_case = MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY;
    env.epoch_summary = &m->sum;
    char err[256];
    int rc = mks_wire_encode(&env, NULL, buf, len, err, sizeof(err));
    if (rc)
        fprintf(stderr, "fake agent: encode summary: %s\n", err);
    free(m);
    return rc;
}

int fa_send_summary(int sock, const char *job, uint32_t rank, uint64_t inc, uint64_t seq,
                    const struct fa_summary *s, mks_envelope **reply)
{
    uint8_t *buf;
    size_t len;
    int rc = fa_encode_summary(job, rank, inc, seq, s, &buf, &len);
    if (rc)
        return rc;
    rc = send_recv(sock, buf, len, reply);
    free(buf);
    return rc;
}

/*
 * Building and merging epoch summaries (see summary.h).
 *
 * The standard monitors' maps are recognised by name (monitors.h) only when
 * they belong to a built-in monitor object and have the declared key and
 * value sizes; a user program's map that happens to share a name is carried
 * raw like any other user map.
 */
#include "summary.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

struct agt_summary *agt_summary_new(void)
{
    return calloc(1, sizeof(struct agt_summary));
}

void agt_summary_free(struct agt_summary *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n_user; i++)
        free(s->user[i].bytes);
    free(s->user);
    free(s->remote);
    free(s->release);
    free(s->queue);
    free(s->gen);
    free(s->wtime);
    free(s->lstep);
    for (size_t i = 0; i < s->n_done; i++) {
        free(s->done[i].busy);
        free(s->done[i].tasks);
    }
    free(s->done);
    for (size_t i = 0; i < s->n_probes; i++)
        free(s->probes[i].buf);
    free(s->probes);
    free(s);
}

int agt_summary_add_probe(struct agt_summary *s, const uint8_t *buf, size_t len)
{
    if (s->n_probes == s->cap_probes) {
        size_t cap = s->cap_probes ? 2 * s->cap_probes : 4;
        struct agt_blob *b = realloc(s->probes, cap * sizeof(*b));
        if (!b)
            return -ENOMEM;
        s->probes = b;
        s->cap_probes = cap;
    }
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy)
        return -ENOMEM;
    memcpy(copy, buf, len);
    s->probes[s->n_probes++] = (struct agt_blob){copy, len};
    return 0;
}

/* Grow a dynamic array by one element; returns the new element or NULL. */
static void *push(void **arr, size_t *n, size_t *cap, size_t elem)
{
    if (*n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 16;
        void *na = realloc(*arr, ncap * elem);
        if (!na)
            return NULL;
        *arr = na;
        *cap = ncap;
    }
    void *e = (char *)*arr + *n * elem;
    memset(e, 0, elem);
    (*n)++;
    return e;
}
#define PUSH(s, field) push((void **)&(s)->field, &(s)->n_##field, &(s)->cap_##field, sizeof(*(s)->field))

static void hist_add(struct mks_hist *dst, const struct mks_hist *src)
{
    dst->count += src->count;
    dst->sum += src->sum;
    for (int b = 0; b < MKS_HIST_BUCKETS; b++)
        dst->buckets[b] += src->buckets[b];
}

static int hist_empty(const struct mks_hist *h)
{
    return h->count == 0;
}

/* ---- decoding one map ----------------------------------------------------- */

struct iter_ctx {
    struct agt_summary *s;
    const struct agt_mapref *m;
    int err;
};

static uint32_t key_u32(const void *key)
{
    uint32_t k;
    memcpy(&k, key, sizeof(k));
    return k;
}

static int it_count(const void *key, const void *value, void *arg)
{
    struct iter_ctx *c = arg;
    uint32_t k = key_u32(key);
    uint64_t v;
    memcpy(&v, value, sizeof(v));
    if (k >= MKS_MON_MAX_CLASSES || v == 0)
        return 0;
    c->s->cls[k].count += v;
    c->s->cls[k].present = 1;
    return 0;
}

static int it_lat(const void *key, const void *value, void *arg)
{
    struct iter_ctx *c = arg;
    uint32_t k = key_u32(key);
    struct mks_hist h;
    memcpy(&h, value, sizeof(h));
    if (k >= MKS_MON_LAT_ENTRIES || hist_empty(&h))
        return 0;
    struct agt_lat *l = &c->s->lat[k];
    hist_add(strcmp(c->m->spec.name, MKS_MON_LAT_READY_MAP) == 0 ? &l->ready : &l->run, &h);
    l->present = 1;
    return 0;
}

static int it_lat_step(const void *key, const void *value, void *arg)
{
    struct iter_ctx *c = arg;
    uint32_t k = key_u32(key);
    struct mks_mon_lat_step v;
    memcpy(&v, value, sizeof(v));
    if (k >= MKS_MON_LAT_STEP_ENTRIES || !v.tag || (!v.count && !v.queue_count))
        return 0;
    struct agt_lat_step *e = PUSH(c->s, lstep);
    if (!e)
        return c->err = -ENOMEM;
    e->cls = k / MKS_MON_LAT_STEP_SLOTS;
    e->v = v;
    return 0;
}

static int *flag_lstep(struct agt_summary *s)
{
    return &s->have_lstep;
}

static int it_wtime(const void *key, const void *value, void *arg)
{
    struct iter_ctx *c = arg;
    uint32_t k = key_u32(key);
    struct mks_mon_worker_time v;
    memcpy(&v, value, sizeof(v));
    if (k >= MKS_MON_WORKER_ENTRIES || v.tasks == 0 || !v.tag)
        return 0;
    struct agt_wtime *w = PUSH(c->s, wtime);
    if (!w)
        return c->err = -ENOMEM;
    w->worker = k / MKS_MON_LAT_STEP_SLOTS;
    w->slot = k % MKS_MON_LAT_STEP_SLOTS;
    w->v = v;
    return 0;
}

static int *flag_wtime(struct agt_summary *s)
{
    return &s->have_wtime;
}

static int it_wait(const void *key, const void *value, void *arg)
{
    struct iter_ctx *c = arg;
    uint32_t k = key_u32(key);
    struct mks_hist h;
    memcpy(&h, value, sizeof(h));
    if (k >= MKS_MON_WAIT_ENTRIES || hist_empty(&h))
        return 0;
    hist_add(&c->s->wait[k], &h);
    return 0;
}

static int it_wait_max(const void *key, const void *value, void *arg)
{
    struct iter_ctx *c = arg;
    uint32_t k = key_u32(key);
    uint64_t v;
    memcpy(&v, value, sizeof(v));
    if (k < MKS_MON_WAIT_ENTRIES && v > c->s->wait_max[k])
        c->s->wait_max[k] = v;
    return 0;
}

static int it_wait_stats(const void *key, const void *value, void *arg)
{
    struct iter_ctx *c = arg;
    struct mks_mon_wait_stats st;
    if (key_u32(key) != 0)
        return 0;
    memcpy(&st, value, sizeof(st));
    c->s->wait_stats.waits += st.waits;
    c->s->wait_stats.unmatched += st.unmatched;
    c->s->wait_stats.remote_dropped += st.remote_dropped;
    return 0;
}

static int it_remote(const void *key, const void *value, void *arg)
{
    struct iter_ctx *c = arg;
    struct agt_remote *r = PUSH(c->s, remote);
    if (!r)
        return c->err = -ENOMEM;
    memcpy(&r->key, key, sizeof(r->key));
    memcpy(&r->v, value, sizeof(r->v));
    return 0;
}

static int it_release(const void *key, const void *value, void *arg)
{
    struct iter_ctx *c = arg;
    struct agt_release *r = PUSH(c->s, release);
    if (!r)
        return c->err = -ENOMEM;
    memcpy(&r->key, key, sizeof(r->key));
    memcpy(&r->v, value, sizeof(r->v));
    return 0;
}

static int it_queue(const void *key, const void *value, void *arg)
{
    struct iter_ctx *c = arg;
    struct mks_mon_queue q;
    memcpy(&q, value, sizeof(q));
    if (q.assigns == 0 && q.pressure == 0)
        return 0;
    struct agt_queue *e = PUSH(c->s, queue);
    if (!e)
        return c->err = -ENOMEM;
    e->worker = key_u32(key);
    e->v = q;
    return 0;
}

static int it_gen(const void *key, const void *value, void *arg)
{
    struct iter_ctx *c = arg;
    struct mks_mon_gen g;
    (void)key;
    memcpy(&g, value, sizeof(g));
    if (g.advances == 0 && g.tasks_done == 0)
        return 0;
    struct mks_mon_gen *e = PUSH(c->s, gen);
    if (!e)
        return c->err = -ENOMEM;
    *e = g;
    return 0;
}

static int add_user(struct agt_summary *s, uint32_t prog_id, const char *map, const void *key,
                    uint32_t klen, const void *value, uint32_t vlen)
{
    if (s->user_bytes + klen + vlen > AGT_USER_MAP_BYTES) {
        s->user_dropped++;
        return 0;
    }
    struct agt_user_entry *u = PUSH(s, user);
    if (!u)
        return -ENOMEM;
    u->bytes = malloc((size_t)klen + vlen + 1);
    if (!u->bytes) {
        s->n_user--;
        return -ENOMEM;
    }
    memcpy(u->bytes, key, klen);
    memcpy(u->bytes + klen, value, vlen);
    u->prog_id = prog_id;
    snprintf(u->map, sizeof(u->map), "%s", map);
    u->key_len = klen;
    u->value_len = vlen;
    s->user_bytes += (size_t)klen + vlen;
    return 0;
}

static int value_is_zero(const void *value, uint32_t len)
{
    const uint8_t *p = value;
    for (uint32_t i = 0; i < len; i++)
        if (p[i])
            return 0;
    return 1;
}

static int it_user(const void *key, const void *value, void *arg)
{
    struct iter_ctx *c = arg;
    const struct mks_map_spec *sp = &c->m->spec;
    /* Arrays list every index; only entries a program wrote carry news. */
    if (sp->type != MKS_MAP_HASH && value_is_zero(value, sp->value_size))
        return 0;
    int err = add_user(c->s, c->m->prog_id, sp->name, key, sp->key_size, value, sp->value_size);
    return err ? (c->err = err) : 0;
}

struct builtin_map {
    const char *name;
    uint32_t key_size, value_size;
    mks_map_iter_fn fn;
    int *(*flag)(struct agt_summary *s);
};

static int *flag_counts(struct agt_summary *s)
{
    return &s->have_counts;
}
static int *flag_lat(struct agt_summary *s)
{
    return &s->have_lat;
}
static int *flag_wait(struct agt_summary *s)
{
    return &s->have_wait;
}

static const struct builtin_map builtin_maps[] = {
    {MKS_MON_COUNT_MAP, 4, 8, it_count, flag_counts},
    {MKS_MON_LAT_READY_MAP, 4, sizeof(struct mks_hist), it_lat, flag_lat},
    {MKS_MON_LAT_RUN_MAP, 4, sizeof(struct mks_hist), it_lat, flag_lat},
    {MKS_MON_LAT_STEP_MAP, 4, sizeof(struct mks_mon_lat_step), it_lat_step, flag_lstep},
    {MKS_MON_WORKER_MAP, 4, sizeof(struct mks_mon_worker_time), it_wtime, flag_wtime},
    {MKS_MON_WAIT_HIST_MAP, 4, sizeof(struct mks_hist), it_wait, flag_wait},
    {MKS_MON_WAIT_STATS_MAP, 4, sizeof(struct mks_mon_wait_stats), it_wait_stats, NULL},
    {MKS_MON_WAIT_MAX_MAP, 4, 8, it_wait_max, NULL},
    {MKS_MON_REMOTE_MAP, sizeof(struct mks_mon_comm_key), sizeof(struct mks_mon_remote_wait),
     it_remote, NULL},
    {MKS_MON_RELEASE_MAP, sizeof(struct mks_mon_comm_key), sizeof(struct mks_mon_release),
     it_release, NULL},
    {MKS_MON_QUEUE_MAP, 4, sizeof(struct mks_mon_queue), it_queue, NULL},
    {MKS_MON_GEN_MAP, 4, sizeof(struct mks_mon_gen), it_gen, NULL},
    /* private to depwait: a worker's open wait, nothing to report */
    {MKS_MON_WAIT_BEGIN_MAP, 4, 8, NULL, NULL},
};

static const struct builtin_map *find_builtin(const struct agt_mapref *m)
{
    if (!m->builtin)
        return NULL;
    for (size_t i = 0; i < sizeof(builtin_maps) / sizeof(builtin_maps[0]); i++) {
        const struct builtin_map *b = &builtin_maps[i];
        if (strcmp(b->name, m->spec.name) == 0 && b->key_size == m->spec.key_size &&
            b->value_size == m->spec.value_size)
            return b;
    }
    return NULL;
}

int agt_summary_build(struct agt_summary *s, const struct agt_snap_ops *ops, void *snap,
                      const struct agt_mapref *maps, size_t n_maps, const int *attached)
{
    if (!s || !ops || (!maps && n_maps))
        return -EINVAL;
    uint64_t ep = ops->epoch(snap);
    s->epoch_first = s->epoch_last = ep;
    s->n_epochs = 1;
    for (uint32_t ev = 0; ev < MKS_EV_COUNT; ev++) {
        s->attached[ev] = attached ? attached[ev] : 0;
        int err = ops->coverage(snap, (enum mks_hook_event)ev, &s->cov[ev]);
        if (err) {
            agt_log_err("epoch %llu: cannot read coverage of hook %u: %s",
                        (unsigned long long)ep, ev, strerror(-err));
            return err;
        }
    }
    for (size_t i = 0; i < n_maps; i++) {
        const struct agt_mapref *m = &maps[i];
        const struct builtin_map *b = find_builtin(m);
        struct iter_ctx c = {.s = s, .m = m};
        mks_map_iter_fn fn = b ? b->fn : it_user;
        if (!fn)
            continue;
        if (m->spec.type == MKS_MAP_RINGBUF || m->builtin == AGT_KIND_PROBE)
            continue; /* rings are drained, probes read by probe.c: not raw */
        if (b && b->flag == flag_counts && s->have_counts)
            continue; /* count.bpf.o beside latency.bpf.o: the same events, once */
        int err = ops->map_iter(snap, m->map_id, fn, &c);
        if (c.err)
            return c.err;
        if (err) {
            agt_log_err("epoch %llu: cannot read map %s (id %u): %s", (unsigned long long)ep,
                        m->spec.name, m->map_id, strerror(-err));
            return err;
        }
        if (b && b->flag)
            *b->flag(s) = 1;
    }
    return 0;
}

/* ---- merging -------------------------------------------------------------- */

static struct agt_remote *find_remote(struct agt_summary *s, const struct mks_mon_comm_key *k)
{
    for (size_t i = 0; i < s->n_remote; i++)
        if (s->remote[i].key.comm_gen == k->comm_gen && s->remote[i].key.peer == k->peer)
            return &s->remote[i];
    return NULL;
}

static struct agt_release *find_release(struct agt_summary *s, const struct mks_mon_comm_key *k)
{
    for (size_t i = 0; i < s->n_release; i++)
        if (s->release[i].key.comm_gen == k->comm_gen && s->release[i].key.peer == k->peer)
            return &s->release[i];
    return NULL;
}

int agt_summary_merge(struct agt_summary *d, const struct agt_summary *s)
{
    if (!d || !s)
        return -EINVAL;
    /* probe results are each an epoch's delta: the merged summary carries
     * them all, the collector adds them up */
    for (size_t i = 0; i < s->n_probes; i++) {
        int err = agt_summary_add_probe(d, s->probes[i].buf, s->probes[i].len);
        if (err)
            return err;
    }
    if (s->n_epochs == 0)
        return 0;
    if (d->n_epochs == 0) {
        d->epoch_first = s->epoch_first;
        d->t_host_begin = s->t_host_begin;
        d->t_dev_begin = s->t_dev_begin;
    }
    d->epoch_last = s->epoch_last;
    d->n_epochs += s->n_epochs;
    d->t_host_end = s->t_host_end;
    d->t_dev_end = s->t_dev_end;

    for (int i = 0; i < MKS_MON_MAX_CLASSES; i++) {
        d->cls[i].count += s->cls[i].count;
        d->cls[i].present |= s->cls[i].present;
    }
    d->have_counts |= s->have_counts;
    for (int i = 0; i < MKS_MON_LAT_ENTRIES; i++) {
        if (!s->lat[i].present)
            continue;
        hist_add(&d->lat[i].ready, &s->lat[i].ready);
        hist_add(&d->lat[i].run, &s->lat[i].run);
        d->lat[i].present = 1;
    }
    d->have_lat |= s->have_lat;
    /* Step entries side by side; the encoder adds up those of one step. */
    for (size_t i = 0; i < s->n_lstep; i++) {
        struct agt_lat_step *e = PUSH(d, lstep);
        if (!e)
            return -ENOMEM;
        *e = s->lstep[i];
    }
    d->have_lstep |= s->have_lstep;
    for (int i = 0; i < MKS_MON_WAIT_ENTRIES; i++) {
        hist_add(&d->wait[i], &s->wait[i]);
        if (s->wait_max[i] > d->wait_max[i])
            d->wait_max[i] = s->wait_max[i];
    }
    d->have_wait |= s->have_wait;
    d->wait_stats.waits += s->wait_stats.waits;
    d->wait_stats.unmatched += s->wait_stats.unmatched;
    d->wait_stats.remote_dropped += s->wait_stats.remote_dropped;

    for (size_t i = 0; i < s->n_remote; i++) {
        const struct agt_remote *r = &s->remote[i];
        struct agt_remote *e = find_remote(d, &r->key);
        if (!e) {
            if (d->n_remote >= MKS_MON_REMOTE_RECORDS) {
                d->wait_stats.remote_dropped++;
                continue;
            }
            e = PUSH(d, remote);
            if (!e)
                return -ENOMEM;
            *e = *r;
            continue;
        }
        e->v.count += r->v.count;
        e->v.total_ns += r->v.total_ns;
        if (r->v.max_ns > e->v.max_ns)
            e->v.max_ns = r->v.max_ns;
        if (r->v.first_begin && (!e->v.first_begin || r->v.first_begin < e->v.first_begin))
            e->v.first_begin = r->v.first_begin;
        if (r->v.last_end > e->v.last_end) {
            e->v.last_end = r->v.last_end;
            e->v.dep_event = r->v.dep_event;
            e->v.task_class = r->v.task_class;
            e->v.worker = r->v.worker;
            e->v.step = r->v.step;
        }
    }
    for (size_t i = 0; i < s->n_release; i++) {
        const struct agt_release *r = &s->release[i];
        struct agt_release *e = find_release(d, &r->key);
        if (!e) {
            if (d->n_release >= MKS_MON_REMOTE_RECORDS) {
                d->wait_stats.remote_dropped++;
                continue;
            }
            e = PUSH(d, release);
            if (!e)
                return -ENOMEM;
            *e = *r;
            continue;
        }
        /* The parts of one release may come in different epochs (a
         * postponed dep_release): keep each time, the latest where both
         * have one. */
        struct mks_mon_release m = r->v.t_release >= e->v.t_release ? r->v : e->v;
        const struct mks_mon_release *o = r->v.t_release >= e->v.t_release ? &e->v : &r->v;
        m.count = e->v.count + r->v.count;
        if (o->t_end > m.t_end)
            m.t_end = o->t_end;
        if (o->t_notify > m.t_notify)
            m.t_notify = o->t_notify;
        e->v = m;
    }
    for (size_t i = 0; i < s->n_queue; i++) {
        const struct agt_queue *q = &s->queue[i];
        struct agt_queue *e = NULL;
        for (size_t j = 0; j < d->n_queue; j++)
            if (d->queue[j].worker == q->worker)
                e = &d->queue[j];
        if (!e) {
            e = PUSH(d, queue);
            if (!e)
                return -ENOMEM;
            *e = *q;
            continue;
        }
        e->v.assigns += q->v.assigns;
        e->v.depth_sum += q->v.depth_sum;
        if (q->v.depth_max > e->v.depth_max)
            e->v.depth_max = q->v.depth_max;
        e->v.pressure += q->v.pressure;
        if (q->v.pressure) {
            e->v.threshold = q->v.threshold;
            e->v.t_last_pressure = q->v.t_last_pressure;
        }
    }
    for (size_t i = 0; i < s->n_gen; i++) {
        const struct mks_mon_gen *g = &s->gen[i];
        struct mks_mon_gen *e = NULL;
        for (size_t j = 0; j < d->n_gen; j++)
            if (d->gen[j].step == g->step)
                e = &d->gen[j];
        if (!e) {
            e = PUSH(d, gen);
            if (!e)
                return -ENOMEM;
            *e = *g;
            continue;
        }
        e->advances += g->advances;
        e->tasks_done += g->tasks_done;
        if (g->t_first && (!e->t_first || g->t_first < e->t_first))
            e->t_first = g->t_first;
        if (g->t_last > e->t_last)
            e->t_last = g->t_last;
        if (g->max_gen > e->max_gen)
            e->max_gen = g->max_gen;
        if (g->t_task_first && (!e->t_task_first || g->t_task_first < e->t_task_first))
            e->t_task_first = g->t_task_first;
        if (g->t_task_last > e->t_task_last)
            e->t_task_last = g->t_task_last;
    }
    /* Steps that ended, each once.  (Per-bucket worker times are consumed
     * per epoch, before any merge: a bucket means another step in another
     * epoch.) */
    for (size_t i = 0; i < s->n_done; i++) {
        struct agt_step_done *e = PUSH(d, done);
        if (!e)
            return -ENOMEM;
        *e = s->done[i];
        size_t n = s->done[i].n_workers;
        e->busy = e->tasks = NULL;
        if (s->done[i].busy && n) {
            e->busy = malloc(n * sizeof(uint64_t));
            e->tasks = malloc(n * sizeof(uint64_t));
            if (!e->busy || !e->tasks) {
                free(e->busy);
                free(e->tasks);
                d->n_done--;
                return -ENOMEM;
            }
            memcpy(e->busy, s->done[i].busy, n * sizeof(uint64_t));
            memcpy(e->tasks, s->done[i].tasks, n * sizeof(uint64_t));
        }
    }
    d->have_wtime |= s->have_wtime;
    /* User map entries of several epochs are kept side by side: their
     * meaning (counter, gauge, last value) is the program's, so the agent
     * does not combine them. */
    for (size_t i = 0; i < s->n_user; i++) {
        const struct agt_user_entry *u = &s->user[i];
        int err = add_user(d, u->prog_id, u->map, u->bytes, u->key_len, u->bytes + u->key_len,
                           u->value_len);
        if (err)
            return err;
    }
    d->user_dropped += s->user_dropped;

    for (int ev = 0; ev < MKS_EV_COUNT; ev++) {
        d->cov[ev].eligible += s->cov[ev].eligible;
        d->cov[ev].ran += s->cov[ev].ran;
        d->cov[ev].throttled += s->cov[ev].throttled;
        d->cov[ev].lost += s->cov[ev].lost;
        d->cov[ev].prog_gen = s->cov[ev].prog_gen;
        d->attached[ev] |= s->attached[ev];
    }
    return 0;
}

void agt_summary_bucket_steps(const struct agt_summary *s, int64_t map[MKS_MON_STEP_BUCKETS])
{
    int seen[MKS_MON_STEP_BUCKETS] = {0};
    for (int b = 0; b < MKS_MON_STEP_BUCKETS; b++)
        map[b] = -1;
    for (size_t i = 0; i < s->n_gen; i++) {
        uint64_t st = s->gen[i].step;
        int b = (int)(st % MKS_MON_STEP_BUCKETS);
        if (seen[b] && map[b] != (int64_t)st)
            map[b] = -2;
        else if (!seen[b])
            map[b] = (int64_t)st;
        seen[b] = 1;
    }
    for (int b = 0; b < MKS_MON_STEP_BUCKETS; b++)
        if (map[b] < 0 || map[b] > UINT32_MAX)
            map[b] = -1;
}

uint64_t agt_summary_total(const struct agt_summary *s)
{
    uint64_t t = 0;
    for (int i = 0; i < MKS_MON_MAX_CLASSES; i++)
        t += s->cls[i].count;
    return t;
}

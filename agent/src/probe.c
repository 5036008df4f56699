/* Probes in the agent (see probe.h). */
#include "probe.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "mkscope/loader.h"
#include "mkscope/probe.h"

struct agt_probe {
    uint64_t id;
    char name[64];
    uint32_t hooks;             /* aggregating hooks (bit per event) */
    uint32_t map_groups, map_other, map_stats;
    uint32_t key_words, value_words;
    uint64_t deadline_ns;       /* monotonic */
    uint64_t attached_host_ns;
    uint64_t mark_ns;           /* monotonic: attached time is counted from here */
    int detached;
    const char *stop_why;       /* asked to stop */
    const char *ended;          /* why it was detached */
};

uint64_t agt_probe_id(const struct agt_probe *pr)
{
    return pr->id;
}

const char *agt_probe_name(const struct agt_probe *pr)
{
    return pr->name;
}

void agt_probe_free(struct agt_probe *pr)
{
    free(pr);
}

static int name_of(const char *prog, const char *name)
{
    size_t l = strlen(name);
    return !strncmp(prog, name, l) && prog[l] == '/';
}

int agt_probe_start(struct agt_progs *ps, struct mks_ctl *ctl, const Mkscope__V1__ProbeStart *cmd,
                    uint64_t max_cost, uint64_t now_mono_ns, uint64_t now_host_ns,
                    struct agt_probe **pr_p, uint64_t *cost_p, uint32_t *n_insns_p, char *log,
                    size_t log_len)
{
    *cost_p = 0;
    *n_insns_p = 0;
    if (!mks_wire_prog_name_valid(cmd->name)) {
        snprintf(log, log_len, "probe %" PRIu64 ": name must be " MKS_WIRE_PROG_GRAMMAR,
                 cmd->probe_id);
        return -EINVAL;
    }
    if (!cmd->duration_ms || cmd->duration_ms > AGT_PROBE_MAX_MS) {
        snprintf(log, log_len, "%s: window must be 1..%u ms", cmd->name, AGT_PROBE_MAX_MS);
        return -EINVAL;
    }
    if (!cmd->n_programs || cmd->n_programs > MKS_EV_COUNT || cmd->n_maps < MKS_PROBE_MAP_BEGIN ||
        cmd->n_maps > MKS_PROBE_MAPS) {
        snprintf(log, log_len, "%s: %zu programs and %zu maps; expected 1..%d and %d..%d",
                 cmd->name, cmd->n_programs, cmd->n_maps, MKS_EV_COUNT, MKS_PROBE_MAP_BEGIN,
                 MKS_PROBE_MAPS);
        return -EINVAL;
    }
    /* The readers' expectations of the maps (probe.h's layout): anything
     * else is not a probe this agent can read back. */
    const Mkscope__V1__ProbeMap *g = cmd->maps[MKS_PROBE_MAP_GROUPS];
    const Mkscope__V1__ProbeMap *o = cmd->maps[MKS_PROBE_MAP_OTHER];
    const Mkscope__V1__ProbeMap *st = cmd->maps[MKS_PROBE_MAP_STATS];
    if (g->type != MKS_MAP_HASH || g->key_size % 8 || g->value_size % 8 || !g->key_size ||
        g->key_size > 8 * MKS_PROBE_MAX_KEYS || !g->value_size ||
        g->value_size > 8 * MKS_PROBE_MAX_WORDS || o->type != MKS_MAP_ARRAY ||
        o->value_size != g->value_size || st->type != MKS_MAP_ARRAY ||
        st->value_size != 8 * MKS_PROBE_ST_WORDS || st->max_entries != MKS_EV_COUNT) {
        snprintf(log, log_len, "%s: its maps are not laid out as a probe's", cmd->name);
        return -EINVAL;
    }
    struct agt_probe *pr = calloc(1, sizeof(*pr));
    struct mks_obj_prog progs[MKS_EV_COUNT];
    struct mks_insn *insns[MKS_EV_COUNT] = {0};
    struct mks_map_spec maps[MKS_PROBE_MAPS];
    char fnames[MKS_EV_COUNT][32];
    int err = pr ? 0 : -ENOMEM;
    for (size_t i = 0; !err && i < cmd->n_maps; i++) {
        memset(&maps[i], 0, sizeof(maps[i]));
        snprintf(maps[i].name, sizeof(maps[i].name), "%s", cmd->maps[i]->name);
        maps[i].type = cmd->maps[i]->type;
        maps[i].key_size = cmd->maps[i]->key_size;
        maps[i].value_size = cmd->maps[i]->value_size;
        maps[i].max_entries = cmd->maps[i]->max_entries;
    }
    for (size_t i = 0; !err && i < cmd->n_programs; i++) {
        const Mkscope__V1__ProbeProgram *pp = cmd->programs[i];
        const char *hn = mks_hook_event_name(pp->hook);
        if (!hn || !pp->n_insns || pp->n_insns > MKS_BPF_MAX_INSNS) {
            snprintf(log, log_len, "%s: program %zu: hook %u and %zu instructions", cmd->name, i,
                     pp->hook, pp->n_insns);
            err = -EINVAL;
            break;
        }
        if (!(insns[i] = calloc(pp->n_insns, sizeof(*insns[i])))) {
            err = -ENOMEM;
            break;
        }
        for (size_t k = 0; k < pp->n_insns; k++) {
            uint64_t v = pp->insns[k]; /* struct mks_insn as little-endian u64 */
            insns[i][k].code = (uint8_t)v;
            insns[i][k].regs = (uint8_t)(v >> 8);
            insns[i][k].off = (int16_t)(uint16_t)(v >> 16);
            insns[i][k].imm = (int32_t)(uint32_t)(v >> 32);
        }
        snprintf(fnames[i], sizeof(fnames[i]), "%s", hn);
        progs[i] = (struct mks_obj_prog){.name = fnames[i],
                                         .section = NULL,
                                         .hook = (int32_t)pp->hook,
                                         .prog_type = MKS_PROG_OBSERVE,
                                         .abi_version = MKS_HOOK_ABI_VERSION,
                                         .insns = insns[i],
                                         .n_insns = (uint32_t)pp->n_insns};
        if (pp->aggregates)
            pr->hooks |= 1u << pp->hook;
    }
    struct agt_install_result res;
    if (!err) {
        struct agt_install_spec spec = {.name = cmd->name,
                                        .kind = AGT_KIND_PROBE,
                                        .progs = progs,
                                        .n_progs = (uint32_t)cmd->n_programs,
                                        .maps = maps,
                                        .n_maps = (uint32_t)cmd->n_maps,
                                        .max_cost = cmd->max_cost && cmd->max_cost < max_cost
                                                        ? cmd->max_cost
                                                        : max_cost};
        err = agt_progs_install_spec(ps, ctl, &spec, &res);
        if (err)
            snprintf(log, log_len, "%s", res.log);
    }
    for (size_t i = 0; i < MKS_EV_COUNT; i++)
        free(insns[i]);
    if (err) {
        free(pr);
        return err;
    }
    /* the maps are the first program's */
    uint32_t first = UINT32_MAX;
    for (uint32_t k = 0; k < ps->n && first == UINT32_MAX; k++)
        if (name_of(ps->progs[k].name, cmd->name))
            first = ps->progs[k].group;
    if (first == UINT32_MAX || mks_ctl_prog_map(ctl, first, MKS_PROBE_MAP_GROUPS, &pr->map_groups) ||
        mks_ctl_prog_map(ctl, first, MKS_PROBE_MAP_OTHER, &pr->map_other) ||
        mks_ctl_prog_map(ctl, first, MKS_PROBE_MAP_STATS, &pr->map_stats)) {
        snprintf(log, log_len, "%s: installed, but its maps are not found", cmd->name);
        agt_progs_remove(ps, ctl, cmd->name, -1, NULL);
        free(pr);
        return -EIO;
    }
    pr->id = cmd->probe_id;
    snprintf(pr->name, sizeof(pr->name), "%s", cmd->name);
    pr->key_words = g->key_size / 8;
    pr->value_words = g->value_size / 8;
    pr->deadline_ns = now_mono_ns + (uint64_t)cmd->duration_ms * 1000000ull;
    pr->attached_host_ns = now_host_ns;
    pr->mark_ns = now_mono_ns;
    *cost_p = res.cost;
    *n_insns_p = res.n_insns;
    snprintf(log, log_len, "%s: %u programs verified and attached for %u ms, cost %llu insns per"
                           " event at most",
             cmd->name, res.n_progs, cmd->duration_ms, (unsigned long long)res.cost);
    *pr_p = pr;
    return 0;
}

void agt_probe_stop(struct agt_probe *pr, const char *why)
{
    if (!pr->stop_why)
        pr->stop_why = why;
}

void agt_probe_before_snapshot(struct agt_probe *pr, struct agt_progs *ps, struct mks_ctl *ctl,
                               uint64_t now_mono_ns, const char *why)
{
    if (pr->detached)
        return;
    if (!why)
        why = pr->stop_why ? pr->stop_why : now_mono_ns >= pr->deadline_ns ? "window" : NULL;
    if (!why)
        return;
    /* detached before the flip: the snapshot holds every event they saw */
    if (ctl)
        agt_progs_detach(ps, ctl, pr->name);
    pr->detached = 1;
    pr->ended = why;
}

/* ---- reading the maps ------------------------------------------------------------ */

struct rows {
    const struct agt_probe *pr;
    Mkscope__V1__ProbeRow *rows, **rowp;
    uint64_t *words; /* key then value words of every row */
    size_t n, cap;
    int err;
};

static int take_row(const void *key, const void *value, void *arg)
{
    struct rows *r = arg;
    if (r->n == r->cap) {
        r->err = -E2BIG; /* more than the map holds: never */
        return 1;
    }
    size_t per = r->pr->key_words + r->pr->value_words;
    uint64_t *w = r->words + r->n * per;
    memcpy(w, key, 8 * r->pr->key_words);
    memcpy(w + r->pr->key_words, value, 8 * r->pr->value_words);
    Mkscope__V1__ProbeRow *row = &r->rows[r->n];
    mkscope__v1__probe_row__init(row);
    row->key = w;
    row->n_key = r->pr->key_words;
    row->words = w + r->pr->key_words;
    row->n_words = r->pr->value_words;
    r->rowp[r->n++] = row;
    return 0;
}

struct entry {
    uint32_t index, words;
    uint64_t *out;
    int found;
};

static int take_entry(const void *key, const void *value, void *arg)
{
    struct entry *e = arg;
    if (*(const uint32_t *)key != e->index)
        return 0;
    memcpy(e->out, value, 8 * e->words);
    e->found = 1;
    return 0;
}

int agt_probe_collect(struct agt_probe *pr, struct agt_progs *ps, struct mks_ctl *ctl,
                      const struct agt_snap_ops *ops, void *snap,
                      const struct mks_coverage cov[MKS_EV_COUNT], uint64_t now_mono_ns,
                      struct agt_summary *s)
{
    Mkscope__V1__ProbeResult r = MKSCOPE__V1__PROBE_RESULT__INIT;
    r.probe_id = pr->id;
    r.attached_host_ns = pr->attached_host_ns;
    r.ran_ns = now_mono_ns > pr->mark_ns ? now_mono_ns - pr->mark_ns : 0;
    r.epochs = 1;
    pr->mark_ns = now_mono_ns;
    const struct mks_map_spec *gspec = NULL;
    for (uint32_t i = 0; i < ps->n_maps; i++)
        if (ps->maps[i].map_id == pr->map_groups)
            gspec = &ps->maps[i].spec;
    size_t cap = gspec ? gspec->max_entries : 0;
    struct rows rows = {.pr = pr, .cap = cap};
    rows.rows = calloc(cap ? cap : 1, sizeof(*rows.rows));
    rows.rowp = calloc(cap ? cap : 1, sizeof(*rows.rowp));
    rows.words = calloc((cap ? cap : 1) * (pr->key_words + pr->value_words), sizeof(uint64_t));
    uint64_t other[MKS_PROBE_MAX_WORDS] = {0}, zero_key[MKS_PROBE_MAX_KEYS] = {0};
    uint64_t st[MKS_EV_COUNT][MKS_PROBE_ST_WORDS];
    Mkscope__V1__ProbeRow orow = MKSCOPE__V1__PROBE_ROW__INIT;
    Mkscope__V1__ProbeHook hooks[MKS_EV_COUNT], *hookp[MKS_EV_COUNT];
    int err = rows.rows && rows.rowp && rows.words ? 0 : -ENOMEM;
    if (!err)
        err = ops->map_iter(snap, pr->map_groups, take_row, &rows);
    if (!err)
        err = rows.err;
    if (!err) {
        struct entry e = {.index = 0, .words = pr->value_words, .out = other};
        err = ops->map_iter(snap, pr->map_other, take_entry, &e);
    }
    for (uint32_t ev = 0; !err && ev < MKS_EV_COUNT; ev++) {
        memset(st[ev], 0, sizeof(st[ev]));
        if (!(pr->hooks & (1u << ev)))
            continue;
        struct entry e = {.index = ev, .words = MKS_PROBE_ST_WORDS, .out = st[ev]};
        err = ops->map_iter(snap, pr->map_stats, take_entry, &e);
        Mkscope__V1__ProbeHook *h = &hooks[r.n_hooks];
        mkscope__v1__probe_hook__init(h);
        h->hook = ev;
        h->observed = st[ev][MKS_PROBE_ST_OBSERVED];
        h->matched = st[ev][MKS_PROBE_ST_MATCHED];
        h->unknown = st[ev][MKS_PROBE_ST_UNKNOWN];
        h->overflowed = st[ev][MKS_PROBE_ST_OVERFLOWED];
        h->dropped = st[ev][MKS_PROBE_ST_DROPPED];
        h->contended = st[ev][MKS_PROBE_ST_CONTENDED];
        /* Throttled events never reach a program: the hook's, which for an
         * epoch the probe was attached in part of may include events from
         * before (an upper bound: coverage is never overstated). */
        h->throttled = cov[ev].throttled;
        h->lost = cov[ev].lost;
        h->eligible = h->observed + h->throttled;
        hookp[r.n_hooks++] = h;
    }
    if (err) {
        agt_log_err("%s: cannot read its maps: %s", pr->name, strerror(-err));
    } else {
        r.rows = rows.rowp;
        r.n_rows = rows.n;
        r.hooks = hookp;
        if (other[0]) {
            orow.key = zero_key;
            orow.n_key = pr->key_words;
            orow.words = other;
            orow.n_words = pr->value_words;
            r.other = &orow;
        }
        if (pr->detached) {
            r.last = 1;
            r.ended = (char *)pr->ended;
        }
        size_t len = mkscope__v1__probe_result__get_packed_size(&r);
        uint8_t *buf = malloc(len ? len : 1);
        if (!buf)
            err = -ENOMEM;
        else {
            mkscope__v1__probe_result__pack(&r, buf);
            err = agt_summary_add_probe(s, buf, len);
            free(buf);
        }
        if (err)
            agt_log_err("%s: result of epoch lost: %s", pr->name, strerror(-err));
    }
    free(rows.rows);
    free(rows.rowp);
    free(rows.words);
    if (!pr->detached)
        return 0;
    if (ctl)
        agt_progs_remove(ps, ctl, pr->name, -1, NULL);
    agt_log_info("%s: detached (%s)", pr->name, pr->ended);
    return 1;
}

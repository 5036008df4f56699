/* Installing verified programs in the control block (see progs.h). */
#include "progs.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "mkscope/verifier.h"

static int name_matches(const char *prog, const char *name)
{
    size_t l = strlen(name);
    return strcmp(prog, name) == 0 || (strncmp(prog, name, l) == 0 && prog[l] == '/');
}

static void set_id_name(struct agt_progs *ps, uint32_t id, const char *name)
{
    if (id >= sizeof(ps->names_by_id) / sizeof(ps->names_by_id[0]))
        return;
    free(ps->names_by_id[id]);
    ps->names_by_id[id] = name ? strdup(name) : NULL;
}

/* Maps of objects none of whose programs is installed any more. */
static void forget_unused_maps(struct agt_progs *ps)
{
    uint32_t mw = 0;
    for (uint32_t j = 0; j < ps->n_maps; j++) {
        int used = 0;
        for (uint32_t k = 0; k < ps->n; k++)
            used |= ps->progs[k].group == ps->maps[j].prog_id;
        if (used)
            ps->maps[mw++] = ps->maps[j];
    }
    ps->n_maps = mw;
}

int agt_progs_install(struct agt_progs *ps, struct mks_ctl *ctl, const struct mks_obj *obj,
                      const char *name, int builtin, int32_t hook, const char *replace_name,
                      struct agt_install_result *res)
{
    uint32_t n = mks_obj_prog_count(obj), nm = mks_obj_map_count(obj);
    struct mks_obj_prog progs[AGT_MAX_PROGS];
    const void *init[MKS_MAX_PROG_MAPS];
    size_t init_len[MKS_MAX_PROG_MAPS];
    memset(res, 0, sizeof(*res));
    if (n > AGT_MAX_PROGS) {
        snprintf(res->log, sizeof(res->log), "%s: %u programs, at most %u", name, n,
                 AGT_MAX_PROGS);
        return -E2BIG;
    }
    for (uint32_t i = 0; i < n; i++) {
        progs[i] = *mks_obj_prog(obj, i);
        if (hook >= 0 && n == 1)
            progs[i].hook = hook;
    }
    for (uint32_t j = 0; j < nm && j < MKS_MAX_PROG_MAPS; j++)
        if (mks_obj_map_init(obj, j, &init[j], &init_len[j]) != 0) {
            init[j] = NULL;
            init_len[j] = 0;
        }
    struct agt_install_spec spec = {.name = name,
                                    .kind = builtin ? AGT_KIND_BUILTIN : AGT_KIND_USER,
                                    .progs = progs,
                                    .n_progs = n,
                                    .maps = mks_obj_maps(obj),
                                    .n_maps = nm,
                                    .map_init = init,
                                    .map_init_len = init_len,
                                    .replace_name = replace_name};
    return agt_progs_install_spec(ps, ctl, &spec, res);
}

int agt_progs_install_spec(struct agt_progs *ps, struct mks_ctl *ctl,
                           const struct agt_install_spec *in, struct agt_install_result *res)
{
    memset(res, 0, sizeof(*res));
    const char *name = in->name, *replace_name = in->replace_name;
    int builtin = in->kind;
    uint32_t n = in->n_progs, nm = in->n_maps;
    const struct mks_map_spec *maps = in->maps;
    if (n == 0) {
        snprintf(res->log, sizeof(res->log), "%s: object has no programs", name);
        return -ENOENT;
    }
    if (nm > MKS_MAX_PROG_MAPS) {
        snprintf(res->log, sizeof(res->log), "%s: %u maps, at most %u per program", name, nm,
                 MKS_MAX_PROG_MAPS);
        return -E2BIG;
    }
    if (ps->n + n > AGT_MAX_PROGS || ps->n_maps + nm > AGT_MAX_MAPS) {
        snprintf(res->log, sizeof(res->log), "%s: the agent holds %u programs, no room for %u more",
                 name, ps->n, n);
        return -ENOSPC;
    }
    uint32_t ids[AGT_MAX_PROGS];
    int32_t hooks[AGT_MAX_PROGS];
    uint32_t loaded = 0, attached = 0;
    int err = 0;
    int32_t share[MKS_MAX_PROG_MAPS];
    const void *init[MKS_MAX_PROG_MAPS];
    size_t init_len[MKS_MAX_PROG_MAPS];
    for (uint32_t j = 0; j < nm; j++) {
        init[j] = in->map_init ? in->map_init[j] : NULL;
        init_len[j] = in->map_init_len ? in->map_init_len[j] : 0;
    }

    for (uint32_t i = 0; i < n && !err; i++) {
        const struct mks_obj_prog *p = &in->progs[i];
        int32_t h = p->hook;
        if (h < 0 || h >= MKS_EV_COUNT) {
            snprintf(res->log, sizeof(res->log), "%s/%s: no hook (section '%s')", name, p->name,
                     p->section ? p->section : "");
            err = -EINVAL;
            break;
        }
        struct mks_verify_opts vo = {.sz = sizeof(vo),
                                     .prog_type = p->prog_type,
                                     .abi_version = p->abi_version,
                                     .hook = h,
                                     .maps = maps,
                                     .n_maps = nm};
        struct mks_verify_result vr = {0};
        char vlog[400] = "";
        if (ps->lease_ns && ctl)
            mks_ctl_lease(ctl, ps->lease_ns);
        err = mks_verify(p->insns, p->n_insns, &vo, &vr, vlog, sizeof(vlog));
        if (err) {
            snprintf(res->log, sizeof(res->log), "%s/%s: rejected by the verifier: %s", name,
                     p->name, vlog);
            break;
        }
        if (in->max_cost && vr.cost > in->max_cost) {
            snprintf(res->log, sizeof(res->log),
                     "%s/%s: costs %llu instructions per event at %s, above the %llu this"
                     " agent allows (mkscope-agent --probe-max-cost)",
                     name, p->name, (unsigned long long)vr.cost,
                     mks_hook_event_name((uint32_t)h), (unsigned long long)in->max_cost);
            err = -E2BIG;
            break;
        }
        agt_log_info("%s/%s: verified for %s: %u insns, worst case %llu insns per run, %u states",
                     name, p->name, mks_hook_event_name((uint32_t)h), vr.n_insns,
                     (unsigned long long)vr.cost, vr.states);
        for (uint32_t j = 0; j < nm; j++) {
            share[j] = -1;
            uint32_t mid;
            if (i > 0 && mks_ctl_prog_map(ctl, ids[0], j, &mid) == 0)
                share[j] = (int32_t)mid;
        }
        char full[96];
        snprintf(full, sizeof(full), "%s/%s", name, p->name);
        struct mks_prog_spec spec = {.sz = sizeof(spec),
                                     .name = full,
                                     .prog_type = p->prog_type,
                                     .abi_version = p->abi_version,
                                     .insns = p->insns,
                                     .n_insns = p->n_insns,
                                     .n_maps = nm,
                                     .maps = maps,
                                     .share_maps = share,
                                     .cost = vr.cost,
                                     .map_init = init,
                                     .map_init_len = init_len};
        err = mks_ctl_prog_load(ctl, &spec, &ids[i]);
        if (err) {
            snprintf(res->log, sizeof(res->log), "%s: cannot load into the control block: %s",
                     full, strerror(-err));
            break;
        }
        hooks[i] = h;
        loaded++;
        if (vr.cost > res->cost)
            res->cost = vr.cost;
        res->n_insns += vr.n_insns;
        struct agt_prog *ap = &ps->progs[ps->n + i];
        memset(ap, 0, sizeof(*ap));
        snprintf(ap->name, sizeof(ap->name), "%s", full);
        ap->prog_id = ids[i];
        ap->hook = h;
        ap->prog_type = p->prog_type;
        ap->n_insns = vr.n_insns;
        ap->cost = vr.cost;
        ap->builtin = builtin;
    }

    /* Attach, swapping out a program being replaced in the same publication. */
    int replaced[AGT_MAX_PROGS] = {0};
    for (uint32_t i = 0; i < loaded && !err; i++) {
        int32_t rep = -1;
        if (replace_name) {
            for (uint32_t k = 0; k < ps->n; k++)
                if (!replaced[k] && ps->progs[k].hook == hooks[i] &&
                    name_matches(ps->progs[k].name, replace_name)) {
                    rep = (int32_t)ps->progs[k].prog_id;
                    replaced[k] = 1;
                    break;
                }
        }
        uint64_t gen = 0;
        err = mks_ctl_attach(ctl, ids[i], (enum mks_hook_event)hooks[i], rep, &gen);
        if (err) {
            if (rep >= 0)
                for (uint32_t k = 0; k < ps->n; k++)
                    if ((int32_t)ps->progs[k].prog_id == rep)
                        replaced[k] = 0;
            if (err == -ENOSPC)
                snprintf(res->log, sizeof(res->log),
                         "%s: hook %s is full (%d programs attached); detach one there first",
                         ps->progs[ps->n + i].name, mks_hook_event_name((uint32_t)hooks[i]),
                         MKS_MAX_PROGS_PER_HOOK);
            else
                snprintf(res->log, sizeof(res->log), "%s: cannot attach at %s: %s",
                         ps->progs[ps->n + i].name, mks_hook_event_name((uint32_t)hooks[i]),
                         strerror(-err));
            break;
        }
        ps->progs[ps->n + i].gen = gen;
        res->prog_gen = gen;
        attached++;
    }
    if (err) {
        for (uint32_t i = 0; i < attached; i++) {
            uint64_t g;
            mks_ctl_detach(ctl, ids[i], (enum mks_hook_event)hooks[i], &g);
        }
        for (uint32_t i = 0; i < loaded; i++)
            mks_ctl_prog_unload(ctl, ids[i]);
        /* A half-done replacement put the old program back? Not possible:
         * replacement is one publication per hook, and a failed attach
         * published nothing. */
        agt_log_warn("%s", res->log);
        return err;
    }

    for (uint32_t i = 0; i < n; i++) {
        ps->progs[ps->n + i].group = ids[0];
        set_id_name(ps, ids[i], ps->progs[ps->n + i].name);
    }
    for (uint32_t j = 0; j < nm; j++) {
        uint32_t mid;
        if (mks_ctl_prog_map(ctl, ids[0], j, &mid) != 0)
            continue;
        struct agt_mapref *m = &ps->maps[ps->n_maps++];
        memset(m, 0, sizeof(*m));
        m->map_id = mid;
        m->prog_id = ids[0];
        m->spec = maps[j];
        m->builtin = builtin;
    }
    ps->n += n;
    res->n_progs = n;

    /* Unload what was replaced (detached by the publication above). */
    uint32_t w = 0;
    for (uint32_t k = 0; k < ps->n; k++) {
        if (k < ps->n - n && replaced[k]) {
            mks_ctl_prog_unload(ctl, ps->progs[k].prog_id);
            set_id_name(ps, ps->progs[k].prog_id, NULL);
            continue;
        }
        ps->progs[w++] = ps->progs[k];
    }
    ps->n = w;
    forget_unused_maps(ps);
    snprintf(res->log, sizeof(res->log), "%s: %u program%s verified and attached, cost %llu insns",
             name, n, n == 1 ? "" : "s", (unsigned long long)res->cost);
    return 0;
}

int agt_progs_remove(struct agt_progs *ps, struct mks_ctl *ctl, const char *name, int32_t hook,
                     uint64_t *gen_p)
{
    int removed = 0;
    uint32_t w = 0;
    for (uint32_t k = 0; k < ps->n; k++) {
        struct agt_prog *p = &ps->progs[k];
        if (name_matches(p->name, name) && (hook < 0 || p->hook == hook)) {
            uint64_t gen = 0;
            int err = p->detached ? 0
                                  : mks_ctl_detach(ctl, p->prog_id, (enum mks_hook_event)p->hook,
                                                   &gen);
            if (err)
                agt_log_warn("%s: detach failed: %s", p->name, strerror(-err));
            else if (gen_p && !p->detached)
                *gen_p = gen;
            mks_ctl_prog_unload(ctl, p->prog_id);
            set_id_name(ps, p->prog_id, NULL);
            removed++;
            continue;
        }
        ps->progs[w++] = *p;
    }
    ps->n = w;
    forget_unused_maps(ps);
    return removed ? removed : -ENOENT;
}

int agt_progs_detach(struct agt_progs *ps, struct mks_ctl *ctl, const char *name)
{
    int n = 0;
    for (uint32_t k = 0; k < ps->n; k++) {
        struct agt_prog *p = &ps->progs[k];
        if (!name_matches(p->name, name) || p->detached)
            continue;
        uint64_t gen;
        int err = mks_ctl_detach(ctl, p->prog_id, (enum mks_hook_event)p->hook, &gen);
        if (err && err != -ENOENT)
            agt_log_warn("%s: detach failed: %s", p->name, strerror(-err));
        p->detached = 1;
        n++;
    }
    return n ? n : -ENOENT;
}

void agt_progs_reset(struct agt_progs *ps)
{
    for (size_t i = 0; i < sizeof(ps->names_by_id) / sizeof(ps->names_by_id[0]); i++)
        free(ps->names_by_id[i]);
    uint64_t lease_ns = ps->lease_ns; /* a setting, not state */
    memset(ps, 0, sizeof(*ps));
    ps->lease_ns = lease_ns;
}

void agt_progs_attached(const struct agt_progs *ps, int attached[MKS_EV_COUNT])
{
    for (int e = 0; e < MKS_EV_COUNT; e++)
        attached[e] = 0;
    for (uint32_t k = 0; k < ps->n; k++)
        if (ps->progs[k].hook >= 0 && ps->progs[k].hook < MKS_EV_COUNT && !ps->progs[k].detached)
            attached[ps->progs[k].hook] = 1;
}

int agt_progs_install_builtin(struct agt_progs *ps, struct mks_ctl *ctl, const char *dir,
                              const char *name, struct agt_install_result *res)
{
    char path[4096], err[256] = "";
    snprintf(path, sizeof(path), "%s/%s.bpf.o", dir, name);
    struct mks_obj *obj = NULL;
    int rc = mks_obj_open_file(path, &obj, err, sizeof(err));
    if (rc) {
        memset(res, 0, sizeof(*res));
        snprintf(res->log, sizeof(res->log), "monitor %s: %s", name, err);
        agt_log_err("%s", res->log);
        return rc;
    }
    rc = agt_progs_install(ps, ctl, obj, name, 1, -1, NULL, res);
    mks_obj_close(obj);
    return rc;
}

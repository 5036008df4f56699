/*
 * The programs an agent has installed in its rank's control block: built-in
 * monitors loaded at start and programs the collector sent.  Every program is
 * verified here with mks_verify() before mks_ctl_prog_load(); nothing
 * unverified reaches the control block.
 *
 * Names: a program is called "<name>/<function>" where <name> is the monitor
 * (built-ins: the object's file name without .bpf.o) or the name in the
 * collector's AttachProgram; detach and replace match either the full name
 * or every program under <name>/.
 */
#ifndef MKS_AGENT_PROGS_H
#define MKS_AGENT_PROGS_H

#include <stddef.h>
#include <stdint.h>

#include "mkscope/ctl.h"
#include "mkscope/loader.h"
#include "summary.h"

#define AGT_MAX_PROGS 64
#define AGT_MAX_MAPS  256

struct agt_prog {
    char name[96];
    int detached;   /* detached, still loaded (a probe's last epoch is read first) */
    uint32_t prog_id;
    int32_t hook;
    uint32_t prog_type;
    uint32_t n_insns;
    uint64_t cost;
    uint64_t gen;   /* hook generation after our attach */
    uint32_t group; /* prog_id of the object's first program: owns the maps */
    int builtin;    /* enum agt_kind */
};

struct agt_progs {
    struct agt_prog progs[AGT_MAX_PROGS];
    uint32_t n;
    struct agt_mapref maps[AGT_MAX_MAPS];
    uint32_t n_maps;
    char *names_by_id[AGT_MAX_PROGS * 4]; /* prog_id -> name for MapDump */
    /* Renewed before each program is verified (0: not), so that a hostile
     * object's verification, bounded per program but up to 64 programs,
     * cannot let the lease lapse and detach everything. */
    uint64_t lease_ns;
};

/* What installing an object did (for logs and CommandReply). */
struct agt_install_result {
    uint32_t n_progs;
    uint64_t cost;      /* largest verified cost */
    uint32_t n_insns;   /* total instructions */
    uint64_t prog_gen;  /* generation of the last hook attached */
    char log[512];      /* verifier or loader message on failure, verdict on success */
};

/* Programs to install under one name, sharing their maps. */
struct agt_install_spec {
    const char *name;
    int kind; /* enum agt_kind */
    const struct mks_obj_prog *progs; /* name (the function), hook, type, ABI, instructions */
    uint32_t n_progs;
    const struct mks_map_spec *maps;
    uint32_t n_maps;
    const void *const *map_init; /* optional, per map (mks_obj_map_init) */
    const size_t *map_init_len;
    const char *replace_name; /* optional: swapped out in the same publication */
    uint64_t max_cost;        /* refuse a program costing more per event; 0: no limit */
};

/* Verify, load and attach every program of in: all or none. */
int agt_progs_install_spec(struct agt_progs *ps, struct mks_ctl *ctl,
                           const struct agt_install_spec *in, struct agt_install_result *res);

/* Verify, load and attach every program of obj under `name`.  hook >= 0
 * overrides the section's hook (for single-program objects).  With
 * replace_name, programs of that name at the same hook are swapped out in
 * the same publication.  On error nothing of obj stays installed. */
int agt_progs_install(struct agt_progs *ps, struct mks_ctl *ctl, const struct mks_obj *obj,
                      const char *name, int builtin, int32_t hook, const char *replace_name,
                      struct agt_install_result *res);

/* Detach and unload programs matching name (all hooks when hook < 0).
 * Returns the number removed, or -ENOENT. */
int agt_progs_remove(struct agt_progs *ps, struct mks_ctl *ctl, const char *name, int32_t hook,
                     uint64_t *gen_p);

/* Detach the programs matching name but keep them loaded, maps and all
 * (agt_progs_remove unloads them later).  Returns the number, or -ENOENT. */
int agt_progs_detach(struct agt_progs *ps, struct mks_ctl *ctl, const char *name);

/* Forget everything (the control block went away with its application). */
void agt_progs_reset(struct agt_progs *ps);

/* Which hooks have a program of ours. */
void agt_progs_attached(const struct agt_progs *ps, int attached[MKS_EV_COUNT]);

/* Open a built-in monitor "<dir>/<name>.bpf.o" and install it. */
int agt_progs_install_builtin(struct agt_progs *ps, struct mks_ctl *ctl, const char *dir,
                              const char *name, struct agt_install_result *res);

#endif /* MKS_AGENT_PROGS_H */

/*
 * The control block: one POSIX shared-memory object per rank, created by the
 * application (runtime.c) and driven by the agent (ctl.c).  Plain data with
 * offsets only, so every mapping (and a device copy) reads the same bytes.
 *
 *   struct mks_cb            header, hooks, program table, map table
 *   workers[n_workers]       per-worker epoch sequence words (a cache line each)
 *   cov[2][n_workers][EV]    coverage counters per bank, written only by their worker
 *   insns[MAX_PROGS][4096]   program text, one fixed slot per program
 *   schema[SCHEMA_MAX]       the published task schema
 *   arena[arena_len]         map banks and rings
 *
 * Publication: the agent fills a program slot, then publishes a hook's
 * program list as one 64-bit word (four 16-bit program slot numbers + 1) with
 * release semantics; a worker reads the word once per event (acquire), so an
 * event sees either the old list or the new one, never a mix.  A program slot
 * is reused only after every worker has left the hook once (grace period).
 *
 * Epochs: a worker announces (epoch << 1 | 1) in its sequence word, re-reads
 * the epoch (both sequentially consistent) and uses bank epoch & 1; the agent
 * increments the epoch and waits until no worker is still inside the old one,
 * then copies and resets the old bank.
 */
#ifndef MKS_DEVHOOKS_CB_H
#define MKS_DEVHOOKS_CB_H

#include <stddef.h>
#include <stdint.h>

#include "dev.h"
#include "mkscope/bpf_isa.h"
#include "mkscope/ctl.h"
#include "mkscope/hook_abi.h"
#include "mkscope/maps.h"

#define MKS_CB_MAGIC       0x314b4c4243534b4dull /* "MKSCBLK1" little-endian */
#define MKS_CB_LAYOUT      1u
/* Layout 2 = layout 1 and the host CPU wait ring after the arena (a runtime
 * whose workers are host threads); an agent of layout 1 refuses it by its
 * layout, not as corrupt; this one reads both. */
#define MKS_CB_LAYOUT_CPU  2u
#define MKS_CB_MAX_PROGS   64u
#define MKS_CB_SCHEMA_MAX  (256u * 1024u) /* a schema is a few KiB per hundred classes */
#define MKS_CB_MAX_WORKERS 65536u
#define MKS_CB_ARENA_DEFAULT (16ull << 20)
#define MKS_CB_ARENA_MAX     (1ull << 32)

enum mks_cb_prog_state { MKS_PROG_FREE = 0, MKS_PROG_LOADED = 1 };

struct mks_cb_hook {
    uint64_t progs;          /* 4 x u16: program slot + 1, 0 = empty; low half first */
    uint64_t gen;            /* program generation, bumped by every publication */
    uint32_t sample_shift;   /* run on one event in 2^sample_shift */
    uint32_t pad;
    uint64_t insn_budget;    /* per epoch, 0 = unlimited */
    uint64_t budget_used[2]; /* instructions run in each bank */
};

struct mks_cb_prog {
    uint32_t state; /* enum mks_cb_prog_state */
    uint32_t type;
    uint32_t abi_version;
    uint32_t n_insns;
    uint32_t n_maps;
    uint32_t map_ids[MKS_MAX_PROG_MAPS];
    uint32_t load_seq; /* bumped each time the slot is loaded */
    uint64_t cost;
    char name[32];
};

struct mks_cb_worker {
    uint64_t seq;                   /* epoch << 1 | inside-hook */
    uint32_t sample_ctr[MKS_EV_COUNT]; /* written by the worker only */
    uint8_t pad[64 - 8 - 4 * MKS_EV_COUNT];
};
MKS_STATIC_ASSERT(sizeof(struct mks_cb_worker) == 64, "one cache line per worker");

#ifdef __cplusplus
#define MKS_ALIGN64 alignas(64)
#else
#define MKS_ALIGN64 _Alignas(64)
#endif

struct mks_cb_cov {
    uint64_t eligible, ran, throttled, lost;
};

struct mks_cb {
    uint64_t magic; /* written last by the creator */
    uint32_t layout;
    uint32_t header_size;
    uint64_t total_size;
    uint32_t abi_version;
    uint32_t rank, n_ranks, n_workers;
    int32_t app_pid;
    uint32_t uid;
    uint64_t app_start_ns; /* CLOCK_REALTIME at creation: the incarnation */
    uint32_t closed;       /* set by mks_rt_destroy() before unlinking */
    uint32_t lease_lapses; /* times the pump detached everything */
    char job[72];
    char gpu_uuid[64];
    uint64_t workers_off, cov_off, insns_off, schema_off, arena_off, arena_len;
    uint64_t schema_len;
    uint64_t arena_brk; /* bump allocator of the arena (agent only) */
    uint32_t agent_deaths; /* of those, times because the lease holder died */
    /* Host CPU wait ring (struct mks_cb_cpu at cpu_off), only in layout 2:
     * in the padding before attach_mask, so the header keeps its size. */
    uint32_t cpu_ring;     /* samples the ring holds; 0: none (not measured) */
    uint64_t cpu_off;

    MKS_ALIGN64 uint32_t attach_mask; /* the hot word: its own cache line */
    MKS_ALIGN64 uint64_t epoch;
    uint64_t lease_deadline_ns; /* CLOCK_MONOTONIC; 0 = no lease taken yet */
    uint32_t on_device;         /* programs run on the GPU: the pump copies banks */
    uint32_t dev_gen;           /* device mirror only: bumped by the pump after each
                                 * change of hooks, mask or epoch there (workers poll
                                 * it once per task); unused in shared memory */
    uint64_t pump_epoch;        /* GPU: last epoch whose old bank the pump copied back */
    uint64_t ctl_seq;           /* bumped by every change the device must see */
    /* The lease holder's identity, so that the pump notices its death within
     * a tick instead of a lease: a seqlock (odd while written) over the pid,
     * its start time (/proc stat field 22, clock ticks since boot: guards
     * against pid reuse) and the inode of its PID namespace (0 = unknown; a
     * pid of another namespace means nothing here).  Fits in this line's
     * padding, so older layouts read it as zero: lease only. */
    uint32_t agent_seq;
    int32_t agent_pid;
    uint64_t agent_start;
    uint64_t agent_pidns;

    MKS_ALIGN64 struct mks_cb_hook hooks[MKS_EV_COUNT];
    struct mks_cb_prog progs[MKS_CB_MAX_PROGS];
    struct mks_map_desc maps[MKS_MAX_MAPS];
};

MKS_STATIC_ASSERT(offsetof(struct mks_cb, attach_mask) == 320,
                  "the CPU wait fields fit in the padding before attach_mask");

/* The CPU backend's measure of contention for the host's CPUs: the pump
 * samples, each tick, how long the rank's worker threads have been runnable
 * but waiting for a CPU (Linux schedstat run_delay, summed over the threads
 * that declared themselves with mks_rt_worker_thread(), each from its
 * declaration on).  A worker that waits for a core looks, through the hooks,
 * exactly like a held queue; this says which it was.  Written only by the
 * pump: sample i at s[i % MKS_CB_CPU_RING], then head = i + 1 (release). */
#define MKS_CB_CPU_RING    1024u /* 2 s of samples at the pump's 2 ms tick */
/* A thread that sleeps more (an injected delay, a slow body that blocks)
 * is put on a CPU more often and waits at each: the runs tell that from a
 * host that makes every run wait longer. */
#define MKS_CB_CPU_THREADS 256u  /* host worker threads measured at most */
struct mks_cb_cpu_sample {
    uint64_t t_ns;    /* CLOCK_MONOTONIC when read (the CPU backend's device clock) */
    uint64_t wait_ns; /* sum over the declared threads, cumulative */
    uint64_t runs;    /* times they were put on a CPU (schedstat's third field), likewise */
    uint64_t pad;
};
struct mks_cb_cpu {
    uint64_t head;       /* samples written */
    uint32_t n_threads;  /* threads in the latest sample's sum */
    uint32_t unreadable; /* a declared thread's schedstat could not be read: not measured */
    uint8_t pad[48];
    struct mks_cb_cpu_sample s[MKS_CB_CPU_RING];
};

MKS_HD struct mks_cb_worker *mks_cb_workers(struct mks_cb *cb)
{
    return (struct mks_cb_worker *)((uint8_t *)cb + cb->workers_off);
}
MKS_HD struct mks_cb_cov *mks_cb_cov(struct mks_cb *cb, uint32_t bank, uint32_t worker,
                                            uint32_t ev)
{
    struct mks_cb_cov *c = (struct mks_cb_cov *)((uint8_t *)cb + cb->cov_off);
    return &c[((uint64_t)bank * cb->n_workers + worker) * MKS_EV_COUNT + ev];
}
MKS_HD struct mks_insn *mks_cb_insns(struct mks_cb *cb, uint32_t slot)
{
    return (struct mks_insn *)((uint8_t *)cb + cb->insns_off) + (uint64_t)slot * MKS_BPF_MAX_INSNS;
}
MKS_HD uint8_t *mks_cb_arena(struct mks_cb *cb)
{
    return (uint8_t *)cb + cb->arena_off;
}

/* Layout of a block for n_workers and arena bytes, with the CPU wait ring
 * when cpu (cb->cpu_ring set to its size); returns the total size. */
static inline uint64_t mks_cb_layout(struct mks_cb *cb, uint32_t n_workers, uint64_t arena,
                                     int cpu)
{
    uint64_t off = (sizeof(struct mks_cb) + 63) & ~63ull;
    cb->workers_off = off;
    off += (uint64_t)n_workers * sizeof(struct mks_cb_worker);
    off = (off + 63) & ~63ull;
    cb->cov_off = off;
    off += 2ull * n_workers * MKS_EV_COUNT * sizeof(struct mks_cb_cov);
    off = (off + 63) & ~63ull;
    cb->insns_off = off;
    off += (uint64_t)MKS_CB_MAX_PROGS * MKS_BPF_MAX_INSNS * sizeof(struct mks_insn);
    cb->schema_off = off;
    off += MKS_CB_SCHEMA_MAX;
    off = (off + 4095) & ~4095ull;
    cb->arena_off = off;
    cb->arena_len = arena;
    off += arena;
    cb->cpu_ring = cpu ? MKS_CB_CPU_RING : 0;
    cb->cpu_off = cpu ? off : 0;
    return cpu ? off + sizeof(struct mks_cb_cpu) : off;
}

/* Hook program word helpers. */
MKS_HD uint32_t mks_cb_word_slot(uint64_t word, uint32_t i)
{
    return (uint32_t)(word >> (16 * i)) & 0xffffu; /* slot + 1, 0 = empty */
}

/* One hook run against a block (hook.c; host and device). */
MKS_DEVFN int32_t mksi_hook_run(struct mks_cb *cb, uint32_t rank, struct mks_hook_ctx *ctx);
MKS_DEVFN uint64_t mksi_hook_enter(struct mks_cb *cb, uint32_t w);
MKS_DEVFN void mksi_hook_leave(struct mks_cb *cb, uint32_t w, uint64_t epoch);
MKS_DEVFN int32_t mksi_hook_exec(struct mks_cb *cb, uint32_t rank, struct mks_hook_ctx *ctx,
                                 uint64_t epoch, uint64_t word);
MKS_DEVFN int32_t mksi_hook_exec_cov(struct mks_cb *cb, uint32_t rank, struct mks_hook_ctx *ctx,
                                     uint64_t epoch, uint64_t word, struct mks_cb_cov *cov);
/* The parts of mksi_hook_exec_cov, for a runner that runs the programs its
 * own way (the device's monitor warp). */
struct mks_vm_env;
MKS_DEVFN int mksi_hook_admit(struct mks_cb *cb, const struct mks_hook_ctx *ctx, uint64_t epoch,
                              uint64_t word, struct mks_cb_cov *cov);
MKS_DEVFN void mksi_hook_maps(struct mks_cb *cb, uint32_t rank, const struct mks_hook_ctx *ctx,
                              uint64_t epoch, struct mks_maps *maps);
MKS_DEVFN int mksi_hook_env(struct mks_cb *cb, uint32_t s, struct mks_hook_ctx *ctx,
                            struct mks_maps *maps, struct mks_vm_env *env);
MKS_DEVFN void mksi_hook_hint(const struct mks_cb_prog *p, uint64_t r0, int32_t *hint);
MKS_DEVFN void mksi_hook_done(struct mks_cb *cb, uint32_t ev, uint64_t epoch, uint64_t used_total,
                              uint32_t lost, const struct mks_maps *maps, struct mks_cb_cov *cov);
MKS_DEVFN void mksi_hook_lost(struct mks_cb *cb, uint32_t worker, uint32_t ev, uint32_t n);

#endif /* MKS_DEVHOOKS_CB_H */

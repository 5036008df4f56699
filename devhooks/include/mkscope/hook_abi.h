/*
 * mkscope hook ABI v1: the contract between a megakernel's in-kernel scheduler
 * and the monitors that run at its task transitions.
 *
 * A runtime fills one struct mks_hook_ctx per event and hands it to the hook.
 * Monitors (eBPF programs) read it; they never see compiler objects, only
 * stable identifiers and bounded metadata.  The struct is plain data shared by
 * host code (C11), device code (CUDA C) and BPF programs (clang -target bpf),
 * so it uses fixed-width fields, natural alignment and no padding the compiler
 * could choose differently.
 *
 * Versioning: fields are only ever appended.  A program declares the ABI
 * version it was built for; the verifier checks every context access against
 * mks_hook_ctx_size(version), so a program built for v1 keeps working when v2
 * appends fields, and a v1 runtime rejects a v2 program that reads past v1.
 */
#ifndef MKSCOPE_HOOK_ABI_H
#define MKSCOPE_HOOK_ABI_H

#ifdef __bpf__
/* BPF programs get the fixed-width types from the user header. */
#else
#include <stdint.h>
#endif

#define MKS_HOOK_ABI_VERSION 1u

/* Events, the seed list of DESIGN.md.  Values are part of the ABI. */
enum mks_hook_event {
    MKS_EV_TASK_READY = 0,      /* all inputs of a task are satisfied */
    MKS_EV_TASK_ASSIGN = 1,     /* scheduler put the task on a worker queue */
    MKS_EV_TASK_START = 2,      /* worker began executing the task */
    MKS_EV_TASK_END = 3,        /* worker finished the task body */
    MKS_EV_DEP_WAIT_BEGIN = 4,  /* worker starts waiting on a dependency event */
    MKS_EV_DEP_WAIT_END = 5,    /* that wait was satisfied */
    MKS_EV_DEP_RELEASE = 6,     /* a task released (triggered) an event */
    MKS_EV_COMM_BEGIN = 7,      /* a communication task started a transfer */
    MKS_EV_COMM_END = 8,        /* that transfer completed (remote event released) */
    MKS_EV_GEN_ADVANCE = 9,     /* request or decode-step generation advanced */
    MKS_EV_QUEUE_PRESSURE = 10, /* a queue crossed its declared pressure threshold */
    MKS_EV_COUNT = 11
};

/* Program types.  OBSERVE programs cannot influence the runtime; CONTROL
 * programs may return a bounded priority hint at TASK_READY/TASK_ASSIGN and do
 * nothing else (the verifier enforces both). */
enum mks_prog_type {
    MKS_PROG_OBSERVE = 1,
    MKS_PROG_CONTROL = 2,
};

/* A CONTROL program's return value is clamped to this range by the runtime;
 * the verifier also proves it when it can.  Larger hints would let a monitor
 * starve tasks, which a priority "hint" must never do. */
#define MKS_PRIO_HINT_MAX 15

/* Dependency classes (ctx.dep_class). */
enum mks_dep_class {
    MKS_DEP_NONE = 0,
    MKS_DEP_LOCAL = 1,  /* event released by a task on this rank */
    MKS_DEP_REMOTE = 2, /* event released by a task on another rank */
};

/* "Absent": the runtime does not know this field.  Every field that has no
 * other way to say so carries one of these when its runtime cannot fill it
 * (docs/mpk.md: which fields MPK leaves absent and why), never an invented
 * number; monitors and the diagnosis treat it as unknown, not as a value.
 * Times (t_ready, t_start, t_end), comm_gen and dep_class keep their own
 * 0 = unknown / none; every other id, index and count uses all ones. */
#define MKS_CTX_ABSENT32 0xffffffffu
#define MKS_CTX_ABSENT64 0xffffffffffffffffull
/* True when a 32- or 64-bit context field holds its absent value. */
#define MKS_CTX_IS_ABSENT32(v) ((v) == MKS_CTX_ABSENT32)
#define MKS_CTX_IS_ABSENT64(v) ((v) == MKS_CTX_ABSENT64)

/* ctx.flags bits. */
#define MKS_CTX_F_DYNAMIC 0x1u /* task created at run time (MoE expert, joining request) */
#define MKS_CTX_F_COMM    0x2u /* task is a communication task */

/*
 * The context.  Offsets are ABI; see the static asserts below.  Times are in
 * nanoseconds of the rank's device clock (globaltimer on the GPU,
 * CLOCK_MONOTONIC on the CPU backend); the collector aligns them across ranks.
 */
struct mks_hook_ctx {
    uint16_t abi_version; /*   0: MKS_HOOK_ABI_VERSION of the runtime */
    uint16_t size;        /*   2: sizeof(struct mks_hook_ctx) of the runtime */
    uint16_t event;       /*   4: enum mks_hook_event */
    uint16_t flags;       /*   6: MKS_CTX_F_* */
    uint32_t rank;        /*   8: this process's rank */
    uint32_t worker;      /*  12: worker (block) index */
    uint32_t sm;          /*  16: SM the worker runs on (CPU: worker) */
    uint32_t task_class;  /*  20: index into the published task schema */
    uint64_t task_gen;    /*  24: distinguishes repeated runs of one logical tile */
    uint64_t req_gen;     /*  32: distinguishes reuse of a request slot */
    uint32_t step;        /*  40: decode step */
    uint32_t dep_class;   /*  44: enum mks_dep_class of dep_event */
    uint32_t tile_x;      /*  48: tile coordinates within the operator */
    uint32_t tile_y;      /*  52 */
    uint64_t dep_event;   /*  56: dependency event id (waited on or released) */
    uint64_t comm_gen;    /*  64: communication generation (comm-ids), 0 if none */
    uint32_t peer_rank;   /*  72: peer of a remote dependency or transfer */
    uint32_t queue_depth; /*  76: depth of the worker's queue at the event */
    uint64_t t_now;       /*  80: time of the event */
    uint64_t t_ready;     /*  88: when the task became ready (0 if unknown) */
    uint64_t t_start;     /*  96: when the task started (0 if not yet) */
    uint64_t value;       /* 104: event-specific: wait target count, bytes moved,
                                  pressure threshold, new generation */
    uint64_t t_end;       /* 112: when the task body ended (TASK_END, DEP_RELEASE,
                                  COMM_*), 0 if not yet */
    uint64_t reserved[1]; /* 120: zero; room for v1 additions without resizing */
};
/* Fields a runtime may leave absent (MKS_CTX_ABSENT32/64): task_class,
 * task_gen, req_gen, step, tile_x, tile_y, dep_event, peer_rank,
 * queue_depth, value.  rank, worker, sm, event and t_now are always set
 * (a scheduler's events carry its own hook slot as worker). */

#define MKS_HOOK_CTX_V1_SIZE 128u

#if !defined(__bpf__)
#ifdef __cplusplus
#define MKS_STATIC_ASSERT static_assert
#define MKS_ALIGNOF       alignof
#else
#define MKS_STATIC_ASSERT _Static_assert
#define MKS_ALIGNOF       _Alignof
#endif
MKS_STATIC_ASSERT(sizeof(struct mks_hook_ctx) == MKS_HOOK_CTX_V1_SIZE, "hook ctx v1 size");
MKS_STATIC_ASSERT(__builtin_offsetof(struct mks_hook_ctx, rank) == 8, "ctx.rank");
MKS_STATIC_ASSERT(__builtin_offsetof(struct mks_hook_ctx, task_class) == 20, "ctx.task_class");
MKS_STATIC_ASSERT(__builtin_offsetof(struct mks_hook_ctx, task_gen) == 24, "ctx.task_gen");
MKS_STATIC_ASSERT(__builtin_offsetof(struct mks_hook_ctx, step) == 40, "ctx.step");
MKS_STATIC_ASSERT(__builtin_offsetof(struct mks_hook_ctx, dep_event) == 56, "ctx.dep_event");
MKS_STATIC_ASSERT(__builtin_offsetof(struct mks_hook_ctx, comm_gen) == 64, "ctx.comm_gen");
MKS_STATIC_ASSERT(__builtin_offsetof(struct mks_hook_ctx, t_now) == 80, "ctx.t_now");
MKS_STATIC_ASSERT(__builtin_offsetof(struct mks_hook_ctx, value) == 104, "ctx.value");
MKS_STATIC_ASSERT(__builtin_offsetof(struct mks_hook_ctx, t_end) == 112, "ctx.t_end");
MKS_STATIC_ASSERT(__builtin_offsetof(struct mks_hook_ctx, reserved) == 120, "ctx.reserved");
MKS_STATIC_ASSERT(MKS_ALIGNOF(struct mks_hook_ctx) == 8, "ctx alignment");
#endif

/* Size of the context a program built for `version` may read; 0 if unknown. */
static inline uint32_t mks_hook_ctx_size(uint32_t version)
{
    return version == 1u ? MKS_HOOK_CTX_V1_SIZE : 0u;
}

#endif /* MKSCOPE_HOOK_ABI_H */

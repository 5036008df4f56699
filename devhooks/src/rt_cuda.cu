/*
 * The GPU backend's pump: keeps a device mirror of the control block in step
 * with the shared-memory block the agent drives.  Runs in the runtime's pump
 * thread (pump_ext), on its own non-blocking stream, while the persistent
 * kernel runs; nothing here touches the kernel's stream.
 *
 * Each period:
 *   - programs: when the agent changed anything (ctl_seq), copy new program
 *     text, the program and map tables, new maps' banks, then each hook's
 *     program word and settings, then the attach mask: the device sees a hook
 *     list only after the programs it names;
 *   - epochs: when the agent flipped the epoch to N, load the new bank's
 *     reset contents to the device, publish N on the device, wait until no
 *     device worker is still inside epoch N-1, copy the old bank and its
 *     coverage back into shared memory and tell the agent (pump_epoch);
 *   - rings: copy records produced on the device since the last period into
 *     the shared-memory ring, and the agent's consumer positions back.
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rt_internal.h"
#include "mkscope/devhook.cuh"
#include "mkscope/maps.h"
#include "mkscope/vm.h"

/* A device worker stays in a hook for microseconds; a second means the
 * kernel is gone or hung, and the agent must not wait forever. */
#define GRACE_TIMEOUT_NS (1000ull * 1000000ull)

/* A device worker's sequence word: epoch << 1 | inside, and in the top 16
 * bits an entry count (mks_dev_hook_run_cached() stays inside across events
 * and re-enters the same epoch after a program change). */
#define SEQ_EPOCH_MASK ((1ull << 48) - 1u)

struct cuda_pump {
    uint8_t *dev;
    cudaStream_t stream;
    uint64_t ctl_seq;
    uint64_t epoch;
    uint32_t prog_seq[MKS_CB_MAX_PROGS]; /* load_seq pushed, 0 = none */
    struct mks_map_desc maps[MKS_MAX_MAPS];
    uint64_t tail_pushed[MKS_MAX_MAPS];  /* sum of tails last pushed (change detector) */
    struct mks_cb_worker *seqs;          /* staging for the device workers' words */
    struct mks_ring *hdrs;               /* staging for ring headers */
    uint32_t dev_gen;                    /* last value of the device's dev_gen */
    int device;                          /* the kernel's GPU: current in the pump thread too */
    uint32_t mask;                       /* attach mask last pushed */
    uint64_t *gate_words;                /* mks_rt_cuda_gate(): the workers' polled words */
    uint32_t gate_n, gate_stride;        /* gate_n published last, with release */
    uint32_t gate_pushed;                /* high half last written, MKS_DEV_GATE_PENDING: none */
    uint32_t *gate_stage;                /* gate_n copies of the high half */
    int failed;
    int registered;                      /* the shared block is pinned for the GPU */
    struct mks_dinsn *dec;               /* each program slot's decoded text (staging) */
};

static int cu_ok(struct cuda_pump *p, cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return 1;
    if (!p || !p->failed)
        fprintf(stderr, "mkscope: GPU pump: %s: %s; device monitors stop updating\n", what,
                cudaGetErrorString(e));
    if (p)
        p->failed = 1;
    return 0;
}
#define CU(p, call) cu_ok((p), (call), #call)

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int h2d(struct cuda_pump *p, uint64_t off, const void *src, size_t len)
{
    return CU(p, cudaMemcpyAsync(p->dev + off, src, len, cudaMemcpyHostToDevice, p->stream));
}
static int d2h(struct cuda_pump *p, void *dst, uint64_t off, size_t len)
{
    return CU(p, cudaMemcpyAsync(dst, p->dev + off, len, cudaMemcpyDeviceToHost, p->stream));
}
static int sync_stream(struct cuda_pump *p)
{
    return CU(p, cudaStreamSynchronize(p->stream));
}

/* Tell the device workers that hooks, mask or epoch changed: each compares
 * this word once per task (mks_dev_worker_task()).  After the change's own
 * copies in stream order. */
static int bump_gen(struct cuda_pump *p)
{
    p->dev_gen++;
    return h2d(p, offsetof(struct mks_cb, dev_gen), &p->dev_gen, sizeof(p->dev_gen));
}

static uint64_t map_bytes(const struct mks_map_desc *d)
{
    return d->bank_bytes * (d->type == MKS_MAP_RINGBUF ? 1u : d->init_off ? 3u : 2u);
}

/* Wait until every device worker that was inside a hook has left it. */
static int device_grace(struct mks_rt *rt, struct cuda_pump *p)
{
    struct mks_cb *cb = rt->cb;
    struct mks_cb_worker *now;
    uint64_t deadline = mono_ns() + GRACE_TIMEOUT_NS;
    int inside;
    if (!d2h(p, p->seqs, cb->workers_off, (size_t)cb->n_workers * sizeof(*p->seqs)) ||
        !sync_stream(p))
        return 0;
    now = (struct mks_cb_worker *)malloc((size_t)cb->n_workers * sizeof(*now));
    if (!now)
        return 0;
    do {
        if (!d2h(p, now, cb->workers_off, (size_t)cb->n_workers * sizeof(*now)) || !sync_stream(p))
            break;
        inside = 0;
        for (uint32_t w = 0; w < cb->n_workers && !inside; w++)
            inside = (p->seqs[w].seq & 1u) && now[w].seq == p->seqs[w].seq;
    } while (inside && mono_ns() < deadline);
    free(now);
    return !p->failed;
}

static int push_hooks(struct mks_rt *rt, struct cuda_pump *p, const uint8_t *rewrite)
{
    struct mks_cb *cb = rt->cb;
    struct mks_cb_hook hk[MKS_EV_COUNT];
    uint32_t mask = 0;
    memcpy(hk, cb->hooks, sizeof(hk));
    for (uint32_t ev = 0; ev < MKS_EV_COUNT; ev++) {
        uint64_t word = 0;
        uint32_t k = 0;
        for (uint32_t i = 0; i < MKS_MAX_PROGS_PER_HOOK; i++) {
            uint32_t s = mks_cb_word_slot(hk[ev].progs, i);
            if (s && !(rewrite && rewrite[s - 1]))
                word |= (uint64_t)s << (16 * k++);
        }
        hk[ev].progs = word;
        if (word)
            mask |= 1u << ev;
        if (!h2d(p, offsetof(struct mks_cb, hooks) + ev * sizeof(struct mks_cb_hook), &hk[ev],
                 offsetof(struct mks_cb_hook, budget_used)))
            return 0;
    }
    mask &= __atomic_load_n(&cb->attach_mask, __ATOMIC_ACQUIRE) | (rewrite ? 0u : ~0u);
    p->mask = mask;
    return h2d(p, offsetof(struct mks_cb, attach_mask), &mask, sizeof(mask)) && bump_gen(p) &&
           sync_stream(p);
}

/* A gate value no mask produces: the words were never written. */
#define MKS_DEV_GATE_PENDING 0x7fffffffu

/* The high halves of the workers' polled words: the gate bit and the mask
 * while anything is attached.  After the hooks and programs they name are
 * on the device (push_hooks synchronised the stream), so a worker that sees
 * the bit finds its programs. */
static void push_gate(struct cuda_pump *p)
{
    uint32_t n = __atomic_load_n(&p->gate_n, __ATOMIC_ACQUIRE);
    uint32_t v = p->mask ? MKS_DEV_GATE_ON | p->mask : 0u;
    if (!n || v == p->gate_pushed)
        return;
    for (uint32_t i = 0; i < n; i++)
        p->gate_stage[i] = v;
    if (!CU(p, cudaMemcpy2DAsync((uint8_t *)p->gate_words + 4, p->gate_stride, p->gate_stage,
                                 sizeof(uint32_t), sizeof(uint32_t), n, cudaMemcpyHostToDevice,
                                 p->stream)) ||
        !sync_stream(p))
        return;
    p->gate_pushed = v;
}

/* Program slot i's text into the device mirror, decoded here, once per
 * attach, into the form the device runs (vm_decoded.c): the device never
 * decodes an opcode byte.  Each slot has its own staging, so an asynchronous
 * copy never reads text rewritten for another slot. */
static int push_text(struct cuda_pump *p, struct mks_cb *cb, uint32_t i)
{
    const uint32_t n = cb->progs[i].n_insns;
    struct mks_dinsn *d = p->dec + (size_t)i * MKS_BPF_MAX_INSNS;
    if (n == 0 || n > MKS_BPF_MAX_INSNS)
        return 1; /* the device refuses to run it (mksi_hook_env, the VM) */
    if (mks_vm_decode(mks_cb_insns(cb, i), n, d) != 0)
        return 0;
    return h2d(p, cb->insns_off + (uint64_t)i * MKS_BPF_MAX_INSNS * sizeof(struct mks_insn), d,
               (size_t)n * sizeof(*d));
}

static void push_programs(struct mks_rt *rt, struct cuda_pump *p)
{
    struct mks_cb *cb = rt->cb;
    uint64_t seq = __atomic_load_n(&cb->ctl_seq, __ATOMIC_ACQUIRE);
    uint8_t rewrite[MKS_CB_MAX_PROGS];
    int reuse = 0;
    if (seq == p->ctl_seq)
        return;
    /* A slot that held another program on the device: unpublish it there
     * and wait for the device's grace period before its text changes. */
    for (uint32_t i = 0; i < MKS_CB_MAX_PROGS; i++) {
        const struct mks_cb_prog *pr = &cb->progs[i];
        rewrite[i] = __atomic_load_n(&pr->state, __ATOMIC_ACQUIRE) == MKS_PROG_LOADED &&
                     pr->load_seq != p->prog_seq[i];
        reuse |= rewrite[i] && p->prog_seq[i] != 0;
    }
    /* So does arena space of a map the device knew that is gone or remade:
     * a program still running there could write into its successor. */
    for (uint32_t id = 0; id < MKS_MAX_MAPS; id++)
        reuse |= p->maps[id].state == MKS_MAPSTATE_LIVE &&
                 (__atomic_load_n(&cb->maps[id].state, __ATOMIC_ACQUIRE) != MKS_MAPSTATE_LIVE ||
                  cb->maps[id].gen != p->maps[id].gen);
    if (reuse && (!push_hooks(rt, p, rewrite) || !device_grace(rt, p)))
        return;
    for (uint32_t i = 0; i < MKS_CB_MAX_PROGS; i++) {
        const struct mks_cb_prog *pr = &cb->progs[i];
        if (!rewrite[i])
            continue;
        if (!push_text(p, cb, i))
            return;
        p->prog_seq[i] = pr->load_seq;
    }
    for (uint32_t id = 0; id < MKS_MAX_MAPS; id++) {
        const struct mks_map_desc *d = &cb->maps[id];
        if (__atomic_load_n(&d->state, __ATOMIC_ACQUIRE) != MKS_MAPSTATE_LIVE)
            continue;
        if (p->maps[id].state == MKS_MAPSTATE_LIVE && p->maps[id].gen == d->gen)
            continue; /* already on the device */
        if (!h2d(p, cb->arena_off + d->alloc_off, mks_cb_arena(cb) + d->alloc_off, map_bytes(d)))
            return;
        p->tail_pushed[id] = 0;
    }
    if (!h2d(p, offsetof(struct mks_cb, progs), cb->progs, sizeof(cb->progs)) ||
        !h2d(p, offsetof(struct mks_cb, maps), cb->maps, sizeof(cb->maps)) ||
        !push_hooks(rt, p, NULL))
        return;
    memcpy(p->maps, cb->maps, sizeof(p->maps));
    p->ctl_seq = seq;
}

/* Copy bank b of every live map and its coverage from the device into shared
 * memory (rings travel through pump_rings). */
static int bank_to_host(struct mks_rt *rt, struct cuda_pump *p, uint32_t b)
{
    struct mks_cb *cb = rt->cb;
    uint64_t cov_bank = (uint64_t)cb->n_workers * MKS_EV_COUNT * sizeof(struct mks_cb_cov);
    for (uint32_t id = 0; id < MKS_MAX_MAPS; id++) {
        const struct mks_map_desc *d = &p->maps[id];
        if (d->state != MKS_MAPSTATE_LIVE || d->type == MKS_MAP_RINGBUF)
            continue;
        if (!d2h(p, mks_cb_arena(cb) + d->bank_off[b], cb->arena_off + d->bank_off[b],
                 d->bank_bytes))
            return 0;
    }
    return d2h(p, (uint8_t *)cb + cb->cov_off + b * cov_bank, cb->cov_off + b * cov_bank,
               cov_bank) &&
           sync_stream(p);
}

static void flip_epoch(struct mks_rt *rt, struct cuda_pump *p, uint64_t n)
{
    struct mks_cb *cb = rt->cb;
    uint32_t b = (uint32_t)(n & 1u), o = b ^ 1u;
    uint64_t cov_bank = (uint64_t)cb->n_workers * MKS_EV_COUNT * sizeof(struct mks_cb_cov);
    uint64_t zero = 0, busy = ((n - 1) << 1) | 1u, deadline;
    int inside;

    /* The new bank: the agent reset it in shared memory after its last snapshot. */
    for (uint32_t id = 0; id < MKS_MAX_MAPS; id++) {
        const struct mks_map_desc *d = &p->maps[id];
        if (d->state != MKS_MAPSTATE_LIVE || d->type == MKS_MAP_RINGBUF)
            continue;
        if (!h2d(p, cb->arena_off + d->bank_off[b], mks_cb_arena(cb) + d->bank_off[b],
                 d->bank_bytes))
            return;
    }
    if (!h2d(p, cb->cov_off + b * cov_bank, (uint8_t *)cb + cb->cov_off + b * cov_bank, cov_bank))
        return;
    for (uint32_t ev = 0; ev < MKS_EV_COUNT; ev++)
        if (!h2d(p, offsetof(struct mks_cb, hooks) + ev * sizeof(struct mks_cb_hook) +
                        offsetof(struct mks_cb_hook, budget_used) + b * sizeof(uint64_t),
                 &zero, sizeof(zero)))
            return;
    if (!h2d(p, offsetof(struct mks_cb, epoch), &n, sizeof(n)) || !bump_gen(p) || !sync_stream(p))
        return;
    /* Grace period: no device worker still inside epoch n - 1. */
    deadline = mono_ns() + GRACE_TIMEOUT_NS;
    do {
        if (!d2h(p, p->seqs, cb->workers_off, (size_t)cb->n_workers * sizeof(*p->seqs)) ||
            !sync_stream(p))
            return;
        inside = 0;
        for (uint32_t w = 0; w < cb->n_workers && !inside; w++)
            inside = (p->seqs[w].seq & SEQ_EPOCH_MASK) == busy;
    } while (inside && mono_ns() < deadline);
    if (!bank_to_host(rt, p, o))
        return;
    p->epoch = n;
    __atomic_store_n(&cb->pump_epoch, n, __ATOMIC_RELEASE);
}

static void pump_rings(struct mks_rt *rt, struct cuda_pump *p)
{
    struct mks_cb *cb = rt->cb;
    for (uint32_t id = 0; id < MKS_MAX_MAPS && !p->failed; id++) {
        const struct mks_map_desc *d = &p->maps[id];
        uint64_t stride, base, tails = 0;
        if (d->state != MKS_MAPSTATE_LIVE || d->type != MKS_MAP_RINGBUF)
            continue;
        stride = sizeof(struct mks_ring) + d->n_slots;
        base = d->bank_off[0];
        /* Headers first: the data up to a header's head is complete. */
        if (!CU(p, cudaMemcpy2DAsync(p->hdrs, sizeof(struct mks_ring), p->dev + cb->arena_off + base,
                                     stride, sizeof(struct mks_ring), d->n_workers,
                                     cudaMemcpyDeviceToHost, p->stream)) ||
            !sync_stream(p))
            return;
        for (uint32_t w = 0; w < d->n_workers; w++) {
            struct mks_ring *r = (struct mks_ring *)(mks_cb_arena(cb) + base + w * stride);
            uint64_t from = r->head, to = p->hdrs[w].head, mask = d->n_slots - 1u;
            uint8_t *data = (uint8_t *)(r + 1);
            uint64_t doff = cb->arena_off + base + w * stride + sizeof(struct mks_ring);
            if (to > from && to - from <= d->n_slots) {
                uint64_t a = from & mask, len = to - from;
                uint64_t first = len < d->n_slots - a ? len : d->n_slots - a;
                if (!d2h(p, data + a, doff + a, first) ||
                    (len > first && !d2h(p, data, doff, len - first)))
                    return;
            }
        }
        if (!sync_stream(p))
            return;
        for (uint32_t w = 0; w < d->n_workers; w++) {
            struct mks_ring *r = (struct mks_ring *)(mks_cb_arena(cb) + base + w * stride);
            uint64_t tail = __atomic_load_n(&r->tail, __ATOMIC_ACQUIRE);
            if (p->hdrs[w].head > r->head && p->hdrs[w].head - r->head <= d->n_slots)
                __atomic_store_n(&r->head, p->hdrs[w].head, __ATOMIC_RELEASE);
            __atomic_store_n(&r->dropped, p->hdrs[w].dropped, __ATOMIC_RELEASE);
            tails += tail;
            if (tail != p->hdrs[w].tail &&
                !h2d(p, cb->arena_off + base + w * stride + offsetof(struct mks_ring, tail), &r->tail,
                     sizeof(uint64_t)))
                return;
        }
        if (tails != p->tail_pushed[id] && !sync_stream(p))
            return;
        p->tail_pushed[id] = tails;
    }
}

static void cuda_pump_run(struct mks_rt *rt)
{
    struct cuda_pump *p = (struct cuda_pump *)rt->ext;
    uint64_t e;
    if (p->failed)
        return;
    /* the pump thread starts on device 0; a rank on another GPU needs its own */
    if (!CU(p, cudaSetDevice(p->device)))
        return;
    push_programs(rt, p);
    if (!p->failed)
        push_gate(p);
    e = __atomic_load_n(&rt->cb->epoch, __ATOMIC_ACQUIRE);
    while (p->epoch < e && !p->failed)
        flip_epoch(rt, p, p->epoch + 1);
    if (!p->failed)
        pump_rings(rt, p);
}

static void cuda_pump_free(struct mks_rt *rt)
{
    struct cuda_pump *p = (struct cuda_pump *)rt->ext;
    if (!p)
        return;
    /* Called once the pump thread has stopped, after the application's
     * kernels have finished.  The events since the last epoch flip are
     * still only in the device's current bank: flips the agent asked for
     * meanwhile are done, then that bank and the last ring records go back
     * to shared memory, where the agent's last snapshot (taken once the
     * application is gone, as on the CPU) finds them.  Without this a rank
     * lost up to an epoch of counts at its end. */
    if (p->dev && __atomic_load_n(&rt->pump_ext, __ATOMIC_ACQUIRE)) {
        cuda_pump_run(rt);
        if (!p->failed)
            bank_to_host(rt, p, (uint32_t)(p->epoch & 1u));
    }
    if (p->stream)
        cudaStreamDestroy(p->stream);
    if (p->registered)
        cudaHostUnregister(rt->cb);
    cudaFree(p->dev);
    cudaFreeHost(p->seqs);
    cudaFreeHost(p->hdrs);
    free(p->gate_stage);
    free(p->dec);
    free(p);
    rt->ext = NULL;
}

extern "C" int mks_rt_cuda_enable(struct mks_rt *rt, struct mks_dev_rt *dev_p)
{
    struct cuda_pump *p;
    struct mks_cb *cb;
    if (!rt || !dev_p || rt->ext)
        return -EINVAL;
    cb = rt->cb;
    p = (struct cuda_pump *)calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    rt->ext = p;
    p->dec = (struct mks_dinsn *)malloc((size_t)MKS_CB_MAX_PROGS * MKS_BPF_MAX_INSNS *
                                        sizeof(struct mks_dinsn));
    if (!p->dec) {
        cuda_pump_free(rt);
        return -ENOMEM;
    }
    if (!CU(p, cudaGetDevice(&p->device)) ||
        !CU(p, cudaMallocHost((void **)&p->seqs, cb->n_workers * sizeof(*p->seqs))) ||
        !CU(p, cudaMallocHost((void **)&p->hdrs, cb->n_workers * sizeof(*p->hdrs)))) {
        cuda_pump_free(rt);
        return -ENODEV;
    }
    /* Pinned, the pump's copies run beside the kernel without staging; if
     * the system refuses, pageable copies still work, only slower. */
    if (cudaHostRegister(cb, rt->size, cudaHostRegisterDefault) == cudaSuccess)
        p->registered = 1;
    else
        cudaGetLastError();
    if (!CU(p, cudaStreamCreateWithFlags(&p->stream, cudaStreamNonBlocking)) ||
        !CU(p, cudaMalloc((void **)&p->dev, rt->size))) {
        cuda_pump_free(rt);
        return -ENODEV;
    }
    p->ctl_seq = __atomic_load_n(&cb->ctl_seq, __ATOMIC_ACQUIRE);
    p->epoch = __atomic_load_n(&cb->epoch, __ATOMIC_ACQUIRE);
    memcpy(p->maps, cb->maps, sizeof(p->maps));
    for (uint32_t i = 0; i < MKS_CB_MAX_PROGS; i++)
        p->prog_seq[i] = cb->progs[i].state == MKS_PROG_LOADED ? cb->progs[i].load_seq : 0;
    if (!CU(p, cudaMemcpy(p->dev, cb, rt->size, cudaMemcpyHostToDevice))) {
        cuda_pump_free(rt);
        return -ENODEV;
    }
    /* the programs already loaded, in the device's form */
    for (uint32_t i = 0; i < MKS_CB_MAX_PROGS; i++)
        if (p->prog_seq[i] && !push_text(p, cb, i)) {
            cuda_pump_free(rt);
            return -ENODEV;
        }
    if (!sync_stream(p)) {
        cuda_pump_free(rt);
        return -ENODEV;
    }
    __atomic_store_n(&cb->pump_epoch, p->epoch, __ATOMIC_RELEASE);
    __atomic_store_n(&cb->on_device, 1u, __ATOMIC_RELEASE);
    dev_p->cb = p->dev;
    dev_p->mask = (const uint32_t *)(p->dev + offsetof(struct mks_cb, attach_mask));
    dev_p->rank = rt->rank;
    dev_p->gen = (const uint32_t *)(p->dev + offsetof(struct mks_cb, dev_gen));
    p->dev_gen = cb->dev_gen;
    p->mask = cb->attach_mask;
    p->gate_pushed = MKS_DEV_GATE_PENDING;
    rt->pump_ext_free = cuda_pump_free;
    {
        void (*run)(struct mks_rt *) = cuda_pump_run;
        __atomic_store_n(&rt->pump_ext, run, __ATOMIC_RELEASE);
    }
    return 0;
}

extern "C" int mks_rt_cuda_gate(struct mks_rt *rt, uint64_t *words, uint32_t n_words,
                                uint32_t stride_bytes)
{
    struct cuda_pump *p;
    if (!rt || !rt->ext || !words || n_words == 0 || ((uintptr_t)words & 7u) ||
        stride_bytes < sizeof(uint64_t) || (stride_bytes & 7u)) {
        fprintf(stderr, "mkscope: mks_rt_cuda_gate: need mks_rt_cuda_enable() first and "
                        "n_words > 0 8-aligned words at a stride of 8 bytes or more\n");
        return -EINVAL;
    }
    p = (struct cuda_pump *)rt->ext;
    if (p->gate_stage)
        return -EBUSY;
    p->gate_stage = (uint32_t *)malloc((size_t)n_words * sizeof(uint32_t));
    if (!p->gate_stage)
        return -ENOMEM;
    p->gate_words = words;
    p->gate_stride = stride_bytes;
    /* The pump thread reads the rest after it sees n. */
    __atomic_store_n(&p->gate_n, n_words, __ATOMIC_RELEASE);
    return 0;
}

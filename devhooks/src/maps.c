/*
 * Map operations shared by the CPU backend and the device, and the host-only
 * parts (layout, bank reset, snapshot visits, ring consumption).
 *
 * The device-compatible functions (mksi_map_*) use only dev.h: no libc, no
 * locks.  Concurrency: array and histogram values are updated by programs
 * with atomics or plain stores (their choice, as in Linux); the hash claims
 * slots with a CAS on the slot state, so two workers inserting the same key at
 * once end with one entry; a ring has one producer (its worker) and one
 * consumer (the drain), ordered by release/acquire on head and tail.
 *
 * nvcc compiles this file into the device library through vm.cu with
 * MKS_DEVFN = __device__; the host-only half is hidden from it.
 */
#include "mkscope/maps.h"

#include "dev.h"

#ifndef EINVAL
#include <errno.h>
#endif
#ifdef __CUDACC__
/* errno values as on Linux, the device has no errno.h */
#ifndef ENOENT
#define ENOENT 2
#define E2BIG  7
#define EEXIST 17
#define EINVAL 22
#define ENOSPC 28
#define EBUSY  16
#endif
#endif

/* Waiting on a slot another worker is filling: a few stores away, so a bound
 * far above that turns a corrupted bank into an error instead of a hang. */
#define MKSI_SPIN_MAX (1u << 20)

MKS_DEVFN static inline uint32_t mksi_hash(const uint8_t *key, uint32_t n)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (uint32_t i = 0; i < n; i++)
        h = (h ^ key[i]) * 16777619u;
    return h;
}

MKS_DEVFN static inline uint8_t *mksi_bank(struct mks_maps *m, const struct mks_map_desc *d)
{
    return m->arena + d->bank_off[m->bank & 1u];
}

MKS_DEVFN static inline uint32_t mksi_round8(uint32_t v)
{
    return (v + 7u) & ~7u;
}

/* Hash slot fields. */
#define MKSI_SLOT_STATE(s) ((uint32_t *)(s))
#define MKSI_SLOT_HASH(s)  ((uint32_t *)((s) + 4))
#define MKSI_SLOT_KEY(s)   ((s) + 8)
#define MKSI_SLOT_VAL(s, d) ((s) + 8 + mksi_round8((d)->key_size))

/* Wait out a worker that is filling the slot; returns the settled state. */
MKS_DEVFN static inline uint32_t mksi_slot_settle(uint8_t *s)
{
    uint32_t st = MKS_A_LOAD_ACQ32(MKSI_SLOT_STATE(s));
    for (uint32_t spin = 0; st == MKS_HSLOT_BUSY && spin < MKSI_SPIN_MAX; spin++)
        st = MKS_A_LOAD_ACQ32(MKSI_SLOT_STATE(s));
    return st;
}

MKS_DEVFN static uint8_t *mksi_hash_find(struct mks_maps *m, const struct mks_map_desc *d,
                                         const uint8_t *key)
{
    uint8_t *base = mksi_bank(m, d) + MKS_HASH_HDR;
    uint32_t h = mksi_hash(key, d->key_size), mask = d->n_slots - 1u;
    for (uint32_t i = 0; i < d->n_slots; i++) {
        uint8_t *s = base + (uint64_t)((h + i) & mask) * d->stride;
        uint32_t st = mksi_slot_settle(s);
        if (st == MKS_HSLOT_EMPTY || st == MKS_HSLOT_BUSY)
            return 0;
        if (st == MKS_HSLOT_LIVE && *MKSI_SLOT_HASH(s) == h &&
            mks_dev_memeq(MKSI_SLOT_KEY(s), key, d->key_size))
            return s;
    }
    return 0;
}

MKS_DEVFN void *mksi_map_lookup(struct mks_maps *m, const struct mks_map_desc *d,
                                const void *key)
{
    switch (d->type) {
    case MKS_MAP_ARRAY:
    case MKS_MAP_HIST: {
        uint32_t idx = *(const uint32_t *)key;
        if (idx >= d->max_entries)
            return 0;
        return mksi_bank(m, d) + (uint64_t)idx * d->stride;
    }
    case MKS_MAP_PERWORKER_ARRAY: {
        uint32_t idx = *(const uint32_t *)key;
        if (idx >= d->max_entries || m->worker >= d->n_workers)
            return 0;
        return mksi_bank(m, d) + ((uint64_t)m->worker * d->max_entries + idx) * d->stride;
    }
    case MKS_MAP_HASH: {
        uint8_t *s = mksi_hash_find(m, d, (const uint8_t *)key);
        return s ? MKSI_SLOT_VAL(s, d) : 0;
    }
    default:
        return 0;
    }
}

MKS_DEVFN static int mksi_hash_update(struct mks_maps *m, const struct mks_map_desc *d,
                                      const uint8_t *key, const void *value, uint64_t flags)
{
    uint8_t *bank = mksi_bank(m, d);
    uint32_t *used = (uint32_t *)bank;
    uint8_t *base = bank + MKS_HASH_HDR;
    uint32_t h = mksi_hash(key, d->key_size), mask = d->n_slots - 1u;
    for (uint32_t i = 0; i < d->n_slots; i++) {
        uint8_t *s = base + (uint64_t)((h + i) & mask) * d->stride;
        uint32_t st = MKS_A_LOAD_ACQ32(MKSI_SLOT_STATE(s));
        if (st == MKS_HSLOT_EMPTY) {
            if (flags == MKS_MAP_EXIST)
                return -ENOENT;
            /* Reserve capacity first: slots never return to empty within a
             * bank, so the probe always ends at an empty slot. */
            if (MKS_A_ADD32(used, 1u) >= d->max_entries) {
                MKS_A_ADD32(used, (uint32_t)-1);
                return -E2BIG;
            }
            st = MKS_A_CAS32(MKSI_SLOT_STATE(s), MKS_HSLOT_EMPTY, MKS_HSLOT_BUSY);
            if (st == MKS_HSLOT_EMPTY) {
                *MKSI_SLOT_HASH(s) = h;
                mks_dev_memcpy(MKSI_SLOT_KEY(s), key, d->key_size);
                mks_dev_memcpy(MKSI_SLOT_VAL(s, d), value, d->value_size);
                MKS_A_STORE_REL32(MKSI_SLOT_STATE(s), MKS_HSLOT_LIVE);
                return 0;
            }
            MKS_A_ADD32(used, (uint32_t)-1);
            /* Lost the race: this slot now holds someone's key, maybe ours. */
        }
        if (st == MKS_HSLOT_BUSY)
            st = mksi_slot_settle(s);
        if (st == MKS_HSLOT_BUSY)
            return -EBUSY;
        if (st == MKS_HSLOT_LIVE && *MKSI_SLOT_HASH(s) == h &&
            mks_dev_memeq(MKSI_SLOT_KEY(s), key, d->key_size)) {
            if (flags == MKS_MAP_NOEXIST)
                return -EEXIST;
            mks_dev_memcpy(MKSI_SLOT_VAL(s, d), value, d->value_size);
            return 0;
        }
    }
    return -E2BIG;
}

MKS_DEVFN int mksi_map_update(struct mks_maps *m, const struct mks_map_desc *d, const void *key,
                              const void *value, uint64_t flags)
{
    if (flags > MKS_MAP_EXIST)
        return -EINVAL;
    switch (d->type) {
    case MKS_MAP_ARRAY:
    case MKS_MAP_PERWORKER_ARRAY:
    case MKS_MAP_HIST: {
        void *v;
        if (flags == MKS_MAP_NOEXIST)
            return -EEXIST; /* array entries always exist */
        v = mksi_map_lookup(m, d, key);
        if (!v)
            return -E2BIG;
        mks_dev_memcpy(v, value, d->value_size);
        return 0;
    }
    case MKS_MAP_HASH:
        return mksi_hash_update(m, d, (const uint8_t *)key, value, flags);
    default:
        return -EINVAL;
    }
}

MKS_DEVFN int mksi_map_delete(struct mks_maps *m, const struct mks_map_desc *d, const void *key)
{
    uint8_t *s;
    if (d->type != MKS_MAP_HASH)
        return -EINVAL;
    s = mksi_hash_find(m, d, (const uint8_t *)key);
    if (!s)
        return -ENOENT;
    if (MKS_A_CAS32(MKSI_SLOT_STATE(s), MKS_HSLOT_LIVE, MKS_HSLOT_DEAD) != MKS_HSLOT_LIVE)
        return -ENOENT; /* deleted by another worker meanwhile */
    return 0;
}

MKS_DEVFN int mksi_map_hist_add(struct mks_maps *m, const struct mks_map_desc *d,
                                const void *key, uint64_t value)
{
    struct mks_hist *h;
    uint32_t b;
    if (d->type != MKS_MAP_HIST)
        return -EINVAL;
    h = (struct mks_hist *)mksi_map_lookup(m, d, key);
    if (!h)
        return -E2BIG;
    b = value ? 64u - MKS_CLZ64(value) : 0u;
    if (b >= MKS_HIST_BUCKETS)
        b = MKS_HIST_BUCKETS - 1u;
    MKS_A_RED_ADD64(&h->count, 1u);
    MKS_A_RED_ADD64(&h->sum, value);
    MKS_A_RED_ADD64(&h->buckets[b], 1u);
    return 0;
}

MKS_DEVFN static inline struct mks_ring *mksi_ring(uint8_t *arena, const struct mks_map_desc *d,
                                                   uint32_t worker)
{
    return (struct mks_ring *)(arena + d->bank_off[0] +
                               (uint64_t)worker * (sizeof(struct mks_ring) + d->n_slots));
}

MKS_DEVFN int mksi_map_ringbuf_output(struct mks_maps *m, const struct mks_map_desc *d,
                                      const void *data, uint64_t size)
{
    struct mks_ring *r;
    uint8_t *buf;
    uint64_t head, tail, rec;
    uint32_t cap = d->n_slots, mask = d->n_slots - 1u;
    if (d->type != MKS_MAP_RINGBUF || m->worker >= d->n_workers)
        return -EINVAL;
    if (size == 0 || size > cap - 8u)
        return -EINVAL;
    r = mksi_ring(m->arena, d, m->worker);
    buf = (uint8_t *)(r + 1);
    rec = 8u + mksi_round8((uint32_t)size);
    head = r->head; /* only this worker writes it */
    tail = MKS_A_LOAD_ACQ64(&r->tail);
    if (head + rec - tail > cap) {
        MKS_A_STORE_REL64(&r->dropped, r->dropped + 1u);
        m->lost++;
        return -ENOSPC;
    }
    *(uint32_t *)(buf + (head & mask)) = (uint32_t)size;
    *(uint32_t *)(buf + ((head + 4u) & mask)) = 0u;
    for (uint32_t i = 0; i < (uint32_t)size; i++)
        buf[(head + 8u + i) & mask] = ((const uint8_t *)data)[i];
    MKS_A_STORE_REL64(&r->head, head + rec);
    return 0;
}

#ifndef __CUDACC__
/* ---- host-only ----------------------------------------------------------- */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *mks_map_lookup(struct mks_maps *m, const struct mks_map_desc *d, const void *key)
{
    return mksi_map_lookup(m, d, key);
}
int mks_map_update(struct mks_maps *m, const struct mks_map_desc *d, const void *key,
                   const void *value, uint64_t flags)
{
    return mksi_map_update(m, d, key, value, flags);
}
int mks_map_delete(struct mks_maps *m, const struct mks_map_desc *d, const void *key)
{
    return mksi_map_delete(m, d, key);
}
int mks_map_hist_add(struct mks_maps *m, const struct mks_map_desc *d, const void *key,
                     uint64_t value)
{
    return mksi_map_hist_add(m, d, key, value);
}
int mks_map_ringbuf_output(struct mks_maps *m, const struct mks_map_desc *d, const void *data,
                           uint64_t size)
{
    return mksi_map_ringbuf_output(m, d, data, size);
}

/* Limits: a map must fit comfortably in an arena of a few hundred MiB and a
 * key must be cheap to hash and compare on the device. */
#define MKSI_MAX_ENTRIES   (1u << 24)
#define MKSI_MAX_VALUE     (1u << 20)
#define MKSI_MAX_KEY       512u
#define MKSI_MAX_RING      (1u << 24)
#define MKSI_MIN_RING      64u

static int layout_err(char *err, size_t len, const char *name, const char *what)
{
    if (err && len)
        snprintf(err, len, "map '%.32s': %s", name, what);
    return -EINVAL;
}

static uint32_t pow2_at_least(uint32_t v)
{
    uint32_t p = 1;
    while (p < v)
        p <<= 1;
    return p;
}

int mks_map_layout(struct mks_map_desc *d, uint32_t n_workers, char *err, size_t err_len)
{
    uint64_t bytes;
    char name[33];
    memcpy(name, d->name, 32);
    name[32] = 0;
    if (n_workers == 0)
        return layout_err(err, err_len, name, "no workers");
    d->n_workers = n_workers;
    if (d->type == MKS_MAP_RINGBUF) {
        if (d->max_entries < MKSI_MIN_RING || d->max_entries > MKSI_MAX_RING)
            return layout_err(err, err_len, name,
                              "ring buffer size must be 64 bytes .. 16 MiB per worker");
        d->n_slots = pow2_at_least(d->max_entries);
        d->stride = 0;
        d->bank_bytes = (uint64_t)n_workers * (sizeof(struct mks_ring) + d->n_slots);
        return 0;
    }
    if (d->max_entries == 0 || d->max_entries > MKSI_MAX_ENTRIES)
        return layout_err(err, err_len, name, "max_entries must be 1 .. 16777216");
    if (d->value_size == 0 || d->value_size > MKSI_MAX_VALUE)
        return layout_err(err, err_len, name, "value size must be 1 .. 1 MiB");
    switch (d->type) {
    case MKS_MAP_ARRAY:
    case MKS_MAP_PERWORKER_ARRAY:
    case MKS_MAP_HIST:
        if (d->key_size != 4)
            return layout_err(err, err_len, name, "array and histogram keys must be 4 bytes (u32)");
        if (d->type == MKS_MAP_HIST && d->value_size != sizeof(struct mks_hist))
            return layout_err(err, err_len, name,
                              "histogram value must be struct mks_hist (528 bytes)");
        d->stride = mksi_round8(d->value_size);
        d->n_slots = d->max_entries;
        bytes = (uint64_t)d->stride * d->max_entries;
        if (d->type == MKS_MAP_PERWORKER_ARRAY)
            bytes *= n_workers;
        break;
    case MKS_MAP_HASH:
        if (d->key_size == 0 || d->key_size > MKSI_MAX_KEY)
            return layout_err(err, err_len, name, "hash key size must be 1 .. 512 bytes");
        d->stride = 8u + mksi_round8(d->key_size) + mksi_round8(d->value_size);
        /* Twice the capacity keeps linear probes short. */
        d->n_slots = pow2_at_least(d->max_entries * 2u);
        bytes = MKS_HASH_HDR + (uint64_t)d->stride * d->n_slots;
        break;
    default:
        return layout_err(err, err_len, name, "unsupported map type");
    }
    d->bank_bytes = (bytes + 63u) & ~(uint64_t)63u;
    return 0;
}

void mks_map_bank_reset(uint8_t *arena, const struct mks_map_desc *d, uint32_t bank)
{
    uint8_t *b = arena + d->bank_off[bank & 1u];
    if (d->type == MKS_MAP_RINGBUF)
        return;
    if (d->init_off)
        memcpy(b, arena + d->init_off, d->bank_bytes);
    else
        memset(b, 0, d->bank_bytes);
}

int mks_map_bank_visit(const uint8_t *bank, const struct mks_map_desc *d, mks_map_visit_fn fn,
                       void *arg)
{
    int rc = 0;
    switch (d->type) {
    case MKS_MAP_ARRAY:
    case MKS_MAP_HIST:
        for (uint32_t i = 0; i < d->max_entries; i++)
            if ((rc = fn(&i, bank + (uint64_t)i * d->stride, arg)) != 0)
                return rc;
        return 0;
    case MKS_MAP_PERWORKER_ARRAY: {
        uint32_t words = d->value_size / 8u;
        uint64_t *sum;
        if (d->value_size % 8u)
            return -EINVAL;
        if (!(sum = malloc((size_t)words * 8u)))
            return -ENOMEM;
        for (uint32_t i = 0; i < d->max_entries; i++) {
            memset(sum, 0, words * 8u);
            for (uint32_t w = 0; w < d->n_workers; w++) {
                const uint64_t *v =
                    (const uint64_t *)(bank + ((uint64_t)w * d->max_entries + i) * d->stride);
                for (uint32_t k = 0; k < words; k++)
                    sum[k] += v[k];
            }
            if ((rc = fn(&i, sum, arg)) != 0)
                break;
        }
        free(sum);
        return rc;
    }
    case MKS_MAP_HASH:
        for (uint32_t i = 0; i < d->n_slots; i++) {
            const uint8_t *s = bank + MKS_HASH_HDR + (uint64_t)i * d->stride;
            if (*(const uint32_t *)s != MKS_HSLOT_LIVE)
                continue;
            if ((rc = fn(s + 8, s + 8 + mksi_round8(d->key_size), arg)) != 0)
                return rc;
        }
        return 0;
    default:
        return -EINVAL;
    }
}

int mks_map_ring_consume(uint8_t *arena, const struct mks_map_desc *d, uint32_t worker,
                         mks_map_ring_fn fn, void *arg, uint64_t *dropped_p)
{
    struct mks_ring *r;
    uint8_t *buf, *rec;
    uint64_t head, tail;
    uint32_t mask;
    int rc = 0;
    if (d->type != MKS_MAP_RINGBUF || worker >= d->n_workers)
        return -EINVAL;
    r = mksi_ring(arena, d, worker);
    buf = (uint8_t *)(r + 1);
    mask = d->n_slots - 1u;
    if (!(rec = malloc(d->n_slots)))
        return -ENOMEM;
    head = __atomic_load_n(&r->head, __ATOMIC_ACQUIRE);
    tail = r->tail;
    if (dropped_p)
        *dropped_p = __atomic_load_n(&r->dropped, __ATOMIC_ACQUIRE);
    while (tail < head) {
        uint32_t len = *(const uint32_t *)(buf + (tail & mask));
        uint64_t sz = 8u + mksi_round8(len);
        if (len == 0 || len > d->n_slots - 8u || tail + sz > head) {
            /* A producer never writes this; drop what is there rather than
             * hand garbage to the consumer. */
            tail = head;
            rc = -EBADMSG;
            break;
        }
        for (uint32_t i = 0; i < len; i++)
            rec[i] = buf[(tail + 8u + i) & mask];
        tail += sz;
        if (fn && (rc = fn(worker, rec, len, arg)) != 0)
            break;
    }
    __atomic_store_n(&r->tail, tail, __ATOMIC_RELEASE);
    free(rec);
    return rc;
}
#endif /* !__CUDACC__ */

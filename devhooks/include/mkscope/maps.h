/*
 * Maps: the memory programs aggregate into, laid out by offsets from an arena
 * base so the same bytes mean the same thing in the application's mapping of
 * the control block, the agent's mapping and a device copy.
 *
 * Each map has a descriptor (in the control block's map table) and, except
 * ring buffers, two banks in the arena: workers update the bank of the
 * current epoch while the agent snapshots and zeroes the other
 * (mks_ctl_epoch_advance()).  Layouts per type:
 *   ARRAY            max_entries x stride (value size rounded up to 8)
 *   PERWORKER_ARRAY  n_workers x max_entries x stride
 *   HIST             max_entries x struct mks_hist
 *   HASH             header (used slots) then n_slots x stride slots, each
 *                    {u32 state, u32 hash, key (rounded to 8), value};
 *                    open addressing with linear probing, slots claimed by
 *                    CAS, so many workers may insert concurrently; deleted
 *                    slots stay tombstones until the bank is zeroed
 *   RINGBUF          not banked: per worker a struct mks_ring header and
 *                    n_slots data bytes (a power of two); one producer (the
 *                    worker) and one consumer (the drain), records are
 *                    {u32 len, u32 0, data rounded up to 8}
 */
#ifndef MKSCOPE_MAPS_H
#define MKSCOPE_MAPS_H

#include <stddef.h>
#include <stdint.h>

#include "mkscope/bpf_isa.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MKS_MAX_MAPS 64 /* maps per control block */

enum mks_map_state {
    MKS_MAPSTATE_FREE = 0,
    MKS_MAPSTATE_LIVE = 1,
};

/* update flags, as Linux's BPF_ANY / BPF_NOEXIST / BPF_EXIST */
#define MKS_MAP_ANY     0u
#define MKS_MAP_NOEXIST 1u
#define MKS_MAP_EXIST   2u

/* hash slot states */
#define MKS_HSLOT_EMPTY 0u
#define MKS_HSLOT_BUSY  1u /* being filled by an inserting worker */
#define MKS_HSLOT_LIVE  2u
#define MKS_HSLOT_DEAD  3u /* deleted: tombstone until the bank is zeroed */
#define MKS_HASH_HDR    64u /* bytes before the first slot (used count) */

struct mks_map_desc {
    uint32_t state;       /* enum mks_map_state */
    uint32_t type;        /* enum mks_map_type */
    uint32_t key_size;
    uint32_t value_size;
    uint32_t max_entries;
    uint32_t stride;      /* bytes per entry or slot */
    uint32_t n_slots;     /* hash: slots (power of two); ring: data bytes per worker */
    uint32_t n_workers;   /* copies of a per-worker array, rings */
    uint64_t bank_off[2]; /* arena offsets of the two banks (rings: both the same) */
    uint64_t bank_bytes;
    uint64_t init_off;    /* arena offset of the initial image of bank bytes, 0: zeros */
    uint64_t alloc_off;   /* the whole allocation, reused after unload */
    uint64_t alloc_bytes;
    uint32_t refs;        /* programs using the map */
    uint32_t gen;         /* bumped each time the descriptor is (re)created */
    char name[32];
};

/* Per-worker ring header; producer writes head, consumer writes tail. */
struct mks_ring {
    uint64_t head;    /* bytes produced (monotonic) */
    uint64_t tail;    /* bytes consumed (monotonic) */
    uint64_t dropped; /* records that did not fit, monotonic */
    uint64_t pad[5];  /* head and tail on their own cache line pair */
};

/* One worker's view of the maps for one run. */
struct mks_maps {
    struct mks_map_desc *descs; /* map table */
    uint32_t n_descs;
    uint32_t bank;              /* 0 or 1: current epoch's bank */
    uint8_t *arena;
    uint64_t arena_len;
    uint32_t worker, sm, rank;
    uint32_t lost;              /* ring records this run dropped */
};

/* Compute a map's layout (stride, n_slots, bank_bytes) for n_workers.
 * -EINVAL with a reason in err for bad sizes or types. */
int mks_map_layout(struct mks_map_desc *d, uint32_t n_workers, char *err, size_t err_len);

/* Host-side map operations (the device has the same code compiled by nvcc).
 * lookup returns the value's address or NULL. */
void *mks_map_lookup(struct mks_maps *m, const struct mks_map_desc *d, const void *key);
int mks_map_update(struct mks_maps *m, const struct mks_map_desc *d, const void *key,
                   const void *value, uint64_t flags);
int mks_map_delete(struct mks_maps *m, const struct mks_map_desc *d, const void *key);
int mks_map_hist_add(struct mks_maps *m, const struct mks_map_desc *d, const void *key,
                     uint64_t value);
int mks_map_ringbuf_output(struct mks_maps *m, const struct mks_map_desc *d, const void *data,
                           uint64_t size);

/* Bucket of a value in a struct mks_hist. */
static inline uint32_t mks_hist_bucket(uint64_t v)
{
    uint32_t b = v ? 64u - (uint32_t)__builtin_clzll(v) : 0u;
    return b < MKS_HIST_BUCKETS ? b : MKS_HIST_BUCKETS - 1u;
}

/* Reset a bank to its initial contents (zeros or the map's init image). */
void mks_map_bank_reset(uint8_t *arena, const struct mks_map_desc *d, uint32_t bank);

/* Visit a bank's entries: arrays/hists by index (u32 key), per-worker arrays
 * summed over workers as u64 counters (the value size must be a multiple of
 * 8), hashes by present key.  Stops early and returns fn's non-zero result. */
typedef int (*mks_map_visit_fn)(const void *key, const void *value, void *arg);
int mks_map_bank_visit(const uint8_t *bank, const struct mks_map_desc *d, mks_map_visit_fn fn,
                       void *arg);

/* Consume the records of one worker's ring. */
typedef int (*mks_map_ring_fn)(uint32_t worker, const void *rec, uint32_t len, void *arg);
int mks_map_ring_consume(uint8_t *arena, const struct mks_map_desc *d, uint32_t worker,
                         mks_map_ring_fn fn, void *arg, uint64_t *dropped_p);

#ifdef __cplusplus
}
#endif

#endif /* MKSCOPE_MAPS_H */

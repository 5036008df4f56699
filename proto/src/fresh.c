/*
 * The replay cache and time window of mkscope/fresh.h.
 *
 * ring[] holds the accepted entries in the order they came (a FIFO of
 * `capacity`); index[] maps a fingerprint to its ring slot (slot + 1, 0 is
 * empty) by linear probing, and deletes shift later entries back instead of
 * leaving tombstones, so a lookup never walks further than the cluster it
 * hashes into.  The table has at least twice as many slots as the ring.
 */
#include "mkscope/fresh.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

struct entry {
    uint64_t fp, sent_ns;
};

struct mks_fresh {
    uint64_t window_ns;
    int enforce_window, require;
    uint32_t capacity, head, count;
    uint64_t floor_ns; /* newest time of an entry given up */
    struct entry *ring;
    uint32_t *index;
    size_t mask;
    uint8_t key[crypto_shorthash_KEYBYTES];
    struct mks_fresh_stats st;
};

static int fail(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t errlen, int code, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

int mks_fresh_create(const struct mks_fresh_opts *opts, struct mks_fresh **fresh_p)
{
    struct mks_fresh_opts o = {0};
    if (!fresh_p)
        return -EINVAL;
    if (opts) {
        if (opts->sz < sizeof(size_t) || opts->sz > sizeof(o))
            return -EINVAL;
        memcpy(&o, opts, opts->sz);
    }
    if (o.capacity > MKS_FRESH_MAX_CAPACITY)
        return -EINVAL;
    if (sodium_init() < 0)
        return -EIO;
    struct mks_fresh *f = calloc(1, sizeof(*f));
    if (!f)
        return -ENOMEM;
    f->window_ns = o.window_ns ? o.window_ns : MKS_FRESH_WINDOW_NS;
    f->enforce_window = o.enforce_window;
    f->require = o.require;
    f->capacity = o.capacity ? o.capacity : MKS_FRESH_CAPACITY;
    size_t slots = 16;
    while (slots < 2 * (size_t)f->capacity)
        slots *= 2;
    f->mask = slots - 1;
    f->ring = calloc(f->capacity, sizeof(*f->ring));
    f->index = calloc(slots, sizeof(*f->index));
    if (!f->ring || !f->index) {
        mks_fresh_destroy(f);
        return -ENOMEM;
    }
    randombytes_buf(f->key, sizeof(f->key));
    f->st.capacity = f->capacity;
    *fresh_p = f;
    return 0;
}

void mks_fresh_destroy(struct mks_fresh *f)
{
    if (!f)
        return;
    free(f->ring);
    free(f->index);
    free(f);
}

static size_t home(const struct mks_fresh *f, uint64_t fp)
{
    return (size_t)(fp ^ (fp >> 29)) & f->mask;
}

/* Table position of ring slot `slot` (whose fingerprint is fp), or of the
 * first entry with fingerprint fp when slot is UINT32_MAX; -1 if none. */
static long find(const struct mks_fresh *f, uint64_t fp, uint32_t slot)
{
    for (size_t i = home(f, fp);; i = (i + 1) & f->mask) {
        uint32_t v = f->index[i];
        if (!v)
            return -1;
        if (f->ring[v - 1].fp == fp && (slot == UINT32_MAX || v - 1 == slot))
            return (long)i;
    }
}

static void unindex(struct mks_fresh *f, size_t i)
{
    size_t j = i;
    for (;;) {
        f->index[i] = 0;
        for (;;) {
            j = (j + 1) & f->mask;
            if (!f->index[j])
                return;
            size_t k = home(f, f->ring[f->index[j] - 1].fp);
            /* The entry at j stays when its home lies cyclically in (i, j]. */
            if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
                continue;
            break;
        }
        f->index[i] = f->index[j];
        i = j;
    }
}

static void pop_oldest(struct mks_fresh *f)
{
    struct entry *e = &f->ring[f->head];
    long i = find(f, e->fp, f->head);
    if (i >= 0)
        unindex(f, (size_t)i);
    if (e->sent_ns > f->floor_ns)
        f->floor_ns = e->sent_ns;
    f->head = (f->head + 1) % f->capacity;
    f->count--;
}

static double secs(uint64_t ns)
{
    return (double)ns / 1e9;
}

static uint64_t fingerprint(const struct mks_fresh *f, const void *sender, size_t sender_len,
                            uint64_t nonce)
{
    uint8_t buf[512];
    size_t n = sender_len < sizeof(buf) - 8 ? sender_len : sizeof(buf) - 8;
    if (n)
        memcpy(buf, sender, n);
    for (int b = 0; b < 8; b++)
        buf[n + (size_t)b] = (uint8_t)(nonce >> (8 * b));
    uint8_t h[crypto_shorthash_BYTES];
    crypto_shorthash(h, buf, n + 8, f->key);
    uint64_t fp = 0;
    for (int b = 0; b < 8; b++)
        fp |= (uint64_t)h[b] << (8 * b);
    return fp;
}

/* The sender of an envelope: (job, rank, incarnation). */
static size_t env_sender(const mks_envelope *env, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%s/%u/%" PRIu64, env->job ? env->job : "", env->rank,
                     env->incarnation);
    if (n < 0)
        return 0;
    return (size_t)n >= len ? len - 1 : (size_t)n;
}

int mks_fresh_check(struct mks_fresh *f, const void *sender, size_t sender_len, uint64_t nonce,
                    uint64_t sent_ns, uint64_t now_ns, char *err, size_t errlen)
{
    if (!f)
        return 0;
    if (!nonce || !sent_ns) {
        if (!f->require)
            return 0;
        f->st.missing++;
        return fail(err, errlen, -EBADMSG,
                    "message carries no %s, which a key requires: upgrade the sender",
                    nonce ? "time" : "nonce");
    }
    if (f->enforce_window) {
        if (sent_ns < now_ns && now_ns - sent_ns > f->window_ns) {
            f->st.stale++;
            return fail(err, errlen, -ESTALE,
                        "message sent %.1f s ago, outside the %.0f s window: a replay, or the"
                        " sender's clock is behind (synchronise the clocks)",
                        secs(now_ns - sent_ns), secs(f->window_ns));
        }
        if (sent_ns > now_ns && sent_ns - now_ns > f->window_ns) {
            f->st.stale++;
            return fail(err, errlen, -ESTALE,
                        "message dated %.1f s ahead, outside the %.0f s window: the sender's"
                        " clock is ahead (synchronise the clocks)",
                        secs(sent_ns - now_ns), secs(f->window_ns));
        }
        while (f->count && f->ring[f->head].sent_ns < now_ns &&
               now_ns - f->ring[f->head].sent_ns > f->window_ns)
            pop_oldest(f);
    }
    if (sent_ns <= f->floor_ns) {
        f->st.stale++;
        return fail(err, errlen, -ESTALE,
                    "message older than the replay cache reaches (%u entries, full): refused so"
                    " that nothing is accepted twice",
                    f->capacity);
    }
    uint64_t fp = fingerprint(f, sender, sender_len, nonce);
    if (find(f, fp, UINT32_MAX) >= 0) {
        f->st.replayed++;
        return fail(err, errlen, -EALREADY, "message %016" PRIx64 " was received before: a replay",
                    nonce);
    }
    if (f->count == f->capacity)
        pop_oldest(f);
    uint32_t slot = (f->head + f->count) % f->capacity;
    f->ring[slot] = (struct entry){fp, sent_ns};
    f->count++;
    size_t i = home(f, fp);
    while (f->index[i])
        i = (i + 1) & f->mask;
    f->index[i] = slot + 1;
    f->st.accepted++;
    return 0;
}

int mks_fresh_check_env(struct mks_fresh *f, const mks_envelope *env, uint64_t now_ns, char *err,
                        size_t errlen)
{
    char sender[MKS_WIRE_MAX_JOB + 64];
    size_t n = env_sender(env, sender, sizeof(sender));
    return mks_fresh_check(f, sender, n, env->nonce, env->sent_ns, now_ns, err, errlen);
}

void mks_fresh_forget_env(struct mks_fresh *f, const mks_envelope *env)
{
    if (!f || !env->nonce)
        return;
    char sender[MKS_WIRE_MAX_JOB + 64];
    size_t n = env_sender(env, sender, sizeof(sender));
    /* Out of the index only: its ring slot goes in its turn (and still
     * raises the floor then, which refuses nothing fresh). */
    long i = find(f, fingerprint(f, sender, n, env->nonce), UINT32_MAX);
    if (i >= 0) {
        unindex(f, (size_t)i);
        f->st.accepted--;
    }
}

void mks_fresh_stats(const struct mks_fresh *f, struct mks_fresh_stats *st)
{
    if (!f) {
        memset(st, 0, sizeof(*st));
        return;
    }
    *st = f->st;
    st->entries = f->count;
}

uint64_t mks_fresh_window_ns(const struct mks_fresh *f)
{
    return f ? f->window_ns : MKS_FRESH_WINDOW_NS;
}

int mks_ratelog_due(struct mks_ratelog *r, uint64_t mono_ns, uint64_t interval_ns,
                    uint64_t *suppressed_p)
{
    if (mono_ns >= r->next_ns) {
        if (suppressed_p)
            *suppressed_p = r->suppressed;
        r->suppressed = 0;
        r->next_ns = mono_ns + interval_ns;
        return 1;
    }
    r->suppressed++;
    return 0;
}

/*
 * The compact form of an EpochSummary (docs/wire.md "Compact summaries").
 *
 * A summary's rows carry absolute device times (a GPU's globaltimer is
 * nanoseconds since 1970: 9 bytes a varint) and 64-bit comm_gen ids (10
 * bytes), most of them within microseconds of each other or of the row
 * before.  In the compact form each row's times travel in one packed
 * dev_times list: the first known one as its distance from the summary's
 * dev_time_base (below every time of the summary), each later one as the
 * zigzag of its difference from the one before, plus 1 (0 stays
 * "unknown"); the waits and releases are sorted by comm_gen and carry it
 * as the difference from the row before.  The transform is exact: the
 * decoder gives back every value the agent had, and the rest of the
 * collector sees the plain form only.
 */
#include "mkscope/wire.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The device times of each kind of row, in their dev_times order. */
static const size_t step_times[] = {
    offsetof(Mkscope__V1__StepTime, t_begin_dev_ns),
    offsetof(Mkscope__V1__StepTime, t_end_dev_ns),
};
static const size_t gen_times[] = {
    offsetof(Mkscope__V1__GenProgress, t_dev_ns),
};
static const size_t wait_times[] = {
    offsetof(Mkscope__V1__RemoteWait, t_begin_dev_ns),
    offsetof(Mkscope__V1__RemoteWait, t_end_dev_ns),
};
static const size_t release_times[] = {
    offsetof(Mkscope__V1__Release, t_ready_dev_ns),
    offsetof(Mkscope__V1__Release, t_start_dev_ns),
    offsetof(Mkscope__V1__Release, t_end_dev_ns),
    offsetof(Mkscope__V1__Release, t_comm_begin_dev_ns),
    offsetof(Mkscope__V1__Release, t_comm_end_dev_ns),
    offsetof(Mkscope__V1__Release, t_release_dev_ns),
};
#define N_OF(a) (sizeof(a) / sizeof((a)[0]))
#define AT(row, off) ((uint64_t *)(void *)((char *)(row) + (off)))

/* One list of rows of one kind: where its rows, their dev_times and (waits
 * and releases) comm_gen fields are. */
struct kind {
    const char *name;
    void **rows;
    size_t n;
    const size_t *times;
    size_t n_times;
    size_t dt_n, dt_p;           /* offsets of n_dev_times, dev_times */
    size_t gen, gen_delta;       /* offsets of comm_gen, comm_gen_delta; 0: none */
};

#define KIND(nm, arr, cnt, ty, tt, g, gd)                                                          \
    {                                                                                              \
        nm, (void **)(arr), (cnt), tt, N_OF(tt), offsetof(ty, n_dev_times),                        \
            offsetof(ty, dev_times), g, gd                                                         \
    }

static size_t kinds_of(Mkscope__V1__EpochSummary *es, struct kind k[4])
{
    struct kind v[4] = {
        KIND("steps", es->steps, es->n_steps, Mkscope__V1__StepTime, step_times, 0, 0),
        KIND("gens", es->gens, es->n_gens, Mkscope__V1__GenProgress, gen_times, 0, 0),
        KIND("remote_waits", es->remote_waits, es->n_remote_waits, Mkscope__V1__RemoteWait,
             wait_times, offsetof(Mkscope__V1__RemoteWait, comm_gen),
             offsetof(Mkscope__V1__RemoteWait, comm_gen_delta)),
        KIND("releases", es->releases, es->n_releases, Mkscope__V1__Release, release_times,
             offsetof(Mkscope__V1__Release, comm_gen),
             offsetof(Mkscope__V1__Release, comm_gen_delta)),
    };
    memcpy(k, v, sizeof(v));
    return N_OF(v);
}

static uint64_t zigzag(int64_t d)
{
    return d >= 0 ? (uint64_t)d << 1 : (((uint64_t)-(d + 1)) << 1) | 1;
}

static int64_t unzigzag(uint64_t z)
{
    return (z & 1) ? -(int64_t)(z >> 1) - 1 : (int64_t)(z >> 1);
}

size_t mks_wire_summary_compact_words(const Mkscope__V1__EpochSummary *es)
{
    if (!es)
        return 0;
    return es->n_steps * N_OF(step_times) + es->n_gens * N_OF(gen_times) +
           es->n_remote_waits * N_OF(wait_times) + es->n_releases * N_OF(release_times);
}

/* Rows sorted by comm_gen, so that each differs little from the row before
 * (qsort over the pointers; the key is at the same offset in every row of a
 * list). */
static _Thread_local size_t sort_gen_off;
static int cmp_gen(const void *a, const void *b)
{
    uint64_t x = *AT(*(void *const *)a, sort_gen_off), y = *AT(*(void *const *)b, sort_gen_off);
    return x < y ? -1 : x > y;
}

int mks_wire_summary_compact(Mkscope__V1__EpochSummary *es, uint64_t *words, size_t n_words)
{
    if (!es || es->dev_time_base || n_words < mks_wire_summary_compact_words(es) ||
        (!words && n_words))
        return -EINVAL;
    struct kind k[4];
    size_t nk = kinds_of(es, k);
    uint64_t min = UINT64_MAX;
    for (size_t i = 0; i < nk; i++)
        for (size_t r = 0; r < k[i].n; r++) {
            if (*(size_t *)((char *)k[i].rows[r] + k[i].dt_n))
                return -EINVAL; /* compact already */
            for (size_t t = 0; t < k[i].n_times; t++) {
                uint64_t v = *AT(k[i].rows[r], k[i].times[t]);
                if (v > MKS_WIRE_MAX_TIME)
                    return 0; /* left plain: validation refuses it with its reason */
                if (v && v < min)
                    min = v;
            }
        }
    if (min == UINT64_MAX)
        return 0; /* no device time: nothing to gain, the plain form goes */
    es->dev_time_base = min - 1;
    size_t used = 0;
    for (size_t i = 0; i < nk; i++) {
        if (k[i].gen && k[i].n > 1) {
            sort_gen_off = k[i].gen;
            qsort(k[i].rows, k[i].n, sizeof(void *), cmp_gen);
        }
        uint64_t prev_gen = 0;
        for (size_t r = 0; r < k[i].n; r++) {
            void *row = k[i].rows[r];
            if (k[i].gen) {
                uint64_t g = *AT(row, k[i].gen);
                *AT(row, k[i].gen_delta) = g - prev_gen;
                *AT(row, k[i].gen) = 0;
                prev_gen = g;
            }
            uint64_t *w = words + used, prev = 0;
            size_t n = 0;
            for (size_t t = 0; t < k[i].n_times; t++) {
                uint64_t *v = AT(row, k[i].times[t]);
                if (!*v) {
                    w[t] = 0;
                    continue;
                }
                w[t] = prev ? zigzag((int64_t)(*v - prev)) + 1 : *v - es->dev_time_base;
                prev = *v;
                *v = 0;
                n = t + 1; /* trailing unknowns are not sent */
            }
            *(size_t *)((char *)row + k[i].dt_n) = n;
            *(uint64_t **)((char *)row + k[i].dt_p) = n ? w : NULL;
            used += n;
        }
    }
    return 0;
}

static int bad(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int bad(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -EBADMSG;
}

int mks_wire_summary_expand(Mkscope__V1__EpochSummary *es, char *err, size_t errlen)
{
    if (!es)
        return -EINVAL;
    struct kind k[4];
    size_t nk = kinds_of(es, k);
    uint64_t base = es->dev_time_base;
    for (size_t i = 0; i < nk; i++) {
        uint64_t gen = 0;
        for (size_t r = 0; r < k[i].n; r++) {
            void *row = k[i].rows[r];
            size_t n = *(size_t *)((char *)row + k[i].dt_n);
            const uint64_t *w = *(uint64_t **)((char *)row + k[i].dt_p);
            if (!base) {
                /* the plain form: nothing of the compact one in it */
                if (n || (k[i].gen && *AT(row, k[i].gen_delta)))
                    return bad(err, errlen,
                               "epoch_summary: %s[%zu] in the compact form without dev_time_base",
                               k[i].name, r);
                continue;
            }
            if (n > k[i].n_times)
                return bad(err, errlen, "epoch_summary: %s[%zu]: %zu dev_times, at most %zu",
                           k[i].name, r, n, k[i].n_times);
            if (k[i].gen) {
                uint64_t d = *AT(row, k[i].gen_delta);
                if (*AT(row, k[i].gen))
                    return bad(err, errlen,
                               "epoch_summary: %s[%zu]: comm_gen in a compact summary",
                               k[i].name, r);
                if (d > UINT64_MAX - gen)
                    return bad(err, errlen,
                               "epoch_summary: %s[%zu]: comm_gen_delta past 2^64", k[i].name, r);
                gen += d;
                *AT(row, k[i].gen) = gen;
                *AT(row, k[i].gen_delta) = 0;
            }
            uint64_t prev = 0;
            for (size_t t = 0; t < k[i].n_times; t++) {
                uint64_t *v = AT(row, k[i].times[t]);
                if (*v)
                    return bad(err, errlen,
                               "epoch_summary: %s[%zu]: a plain device time in a compact summary",
                               k[i].name, r);
                if (t >= n || !w[t])
                    continue;
                if (!prev) {
                    if (w[t] > UINT64_MAX - base)
                        return bad(err, errlen,
                                   "epoch_summary: %s[%zu]: dev_times[%zu] past 2^64", k[i].name,
                                   r, t);
                    *v = base + w[t];
                } else {
                    int64_t d = unzigzag(w[t] - 1);
                    if ((d < 0 && (uint64_t)-(d + 1) >= prev - 1) ||
                        (d > 0 && (uint64_t)d > UINT64_MAX - prev))
                        return bad(err, errlen,
                                   "epoch_summary: %s[%zu]: dev_times[%zu] outside 1..2^64",
                                   k[i].name, r, t);
                    *v = prev + (uint64_t)d;
                }
                prev = *v;
            }
            *(size_t *)((char *)row + k[i].dt_n) = 0;
        }
    }
    es->dev_time_base = 0;
    return 0;
}

/*
 * A protobuf wire-format writer in a header, for the few messages written
 * without protobuf-c: the task schema a megakernel publishes at init (the
 * bench runtime links nothing beyond devhooks and comm-ids, as a megakernel
 * on a bare GPU machine must) and the Perfetto traces of the collector and
 * the CLI (Perfetto's schema is not ours to generate code for).  Nothing
 * here needs the proto library: include the header, no link.
 *
 * A buffer grows as fields are appended.  Out of memory is sticky: every
 * later call does nothing and the caller checks `oom` once at the end.
 *
 *     struct mks_pbw msg = {0}, sub = {0};
 *     mks_pbw_uint(&sub, 1, 42);
 *     mks_pbw_sub(&msg, 2, &sub);     // sub emptied for reuse
 *     mks_pbw_free(&sub);
 *     if (msg.oom) ...                // else msg.p, msg.len
 */
#ifndef MKSCOPE_PBWRITE_H
#define MKSCOPE_PBWRITE_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { MKS_PBW_VARINT = 0, MKS_PBW_I64 = 1, MKS_PBW_LEN = 2 };

struct mks_pbw {
    uint8_t *p;
    size_t len, cap;
    bool oom;
};

static inline void mks_pbw_free(struct mks_pbw *b)
{
    free(b->p);
    memset(b, 0, sizeof(*b));
}

static inline void mks_pbw_put(struct mks_pbw *b, const void *d, size_t n)
{
    if (b->oom || !n)
        return;
    if (n > SIZE_MAX / 2 - b->len) {
        b->oom = true;
        return;
    }
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n)
            cap *= 2;
        uint8_t *np = (uint8_t *)realloc(b->p, cap);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, d, n);
    b->len += n;
}

static inline void mks_pbw_varint(struct mks_pbw *b, uint64_t v)
{
    uint8_t t[10];
    size_t n = 0;
    do {
        t[n] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v)
            t[n] |= 0x80;
        n++;
    } while (v);
    mks_pbw_put(b, t, n);
}

static inline void mks_pbw_tag(struct mks_pbw *b, unsigned field, unsigned wire_type)
{
    mks_pbw_varint(b, (uint64_t)field << 3 | wire_type);
}

/* A varint field, written also when v is 0 (explicit presence). */
static inline void mks_pbw_uint(struct mks_pbw *b, unsigned field, uint64_t v)
{
    mks_pbw_tag(b, field, MKS_PBW_VARINT);
    mks_pbw_varint(b, v);
}

/* A varint field of a proto3 message: 0 is the default and is left out. */
static inline void mks_pbw_uint3(struct mks_pbw *b, unsigned field, uint64_t v)
{
    if (v)
        mks_pbw_uint(b, field, v);
}

static inline void mks_pbw_fixed64(struct mks_pbw *b, unsigned field, uint64_t v)
{
    uint8_t t[8];
    for (int i = 0; i < 8; i++)
        t[i] = (uint8_t)(v >> (8 * i));
    mks_pbw_tag(b, field, MKS_PBW_I64);
    mks_pbw_put(b, t, 8);
}

static inline void mks_pbw_bytes(struct mks_pbw *b, unsigned field, const void *d, size_t n)
{
    mks_pbw_tag(b, field, MKS_PBW_LEN);
    mks_pbw_varint(b, n);
    mks_pbw_put(b, d, n);
}

static inline void mks_pbw_str(struct mks_pbw *b, unsigned field, const char *s)
{
    mks_pbw_bytes(b, field, s, strlen(s));
}

/* Append sub as a length-delimited field of b (a nested message or a packed
 * repeated field) and empty sub for reuse; its memory stays with it. */
static inline void mks_pbw_sub(struct mks_pbw *b, unsigned field, struct mks_pbw *sub)
{
    if (sub->oom)
        b->oom = true;
    mks_pbw_bytes(b, field, sub->p, sub->len);
    sub->len = 0;
    sub->oom = false;
}

/* The finished message: b's bytes to the caller (free() them) and 0, or
 * -ENOMEM when any write into b failed (b freed). */
static inline int mks_pbw_take(struct mks_pbw *b, uint8_t **buf_p, size_t *len_p)
{
    if (b->oom) {
        mks_pbw_free(b);
        return -ENOMEM;
    }
    *buf_p = b->p;
    *len_p = b->len;
    return 0;
}

#endif /* MKSCOPE_PBWRITE_H */

/*
 * Decoding a map key or value along its BTF type (maps_decode.h): the walk
 * behind `mkscope maps`.  The bytes come from an agent's dump and the types
 * from a user's object, so neither is trusted: every read is checked
 * against the bytes, the nesting is bounded, and what does not fit is shown
 * in hex with the reason.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <bpf/btf.h>

#include "maps_decode.h"

/* Nesting of types followed in one value (the kernel's BTF resolve depth). */
#define MAPS_MAX_DEPTH 32
/* Parts (leaves and containers) of one decoded value.  Members of a struct
 * or union may overlap, so a small value can name a huge tree of parts
 * (65535 members, each an array over the whole value): the walk stops. */
#define MAPS_MAX_PARTS (1u << 18)

static json_t *hex(const uint8_t *p, size_t n)
{
    char *s = malloc(2 * n + 3);
    if (!s)
        return json_null();
    s[0] = '0', s[1] = 'x';
    for (size_t i = 0; i < n; i++)
        snprintf(s + 2 + 2 * i, 3, "%02x", p[i]);
    if (!n)
        s[2] = 0;
    json_t *j = json_string(s);
    free(s);
    return j;
}

static uint64_t load_le(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n && i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static json_t *uint_json(uint64_t v)
{
    /* ids as strings beyond what a double holds, as everywhere in the CLI */
    if (v > (1ull << 53)) {
        char b[24];
        snprintf(b, sizeof(b), "%" PRIu64, v);
        return json_string(b);
    }
    return json_integer((json_int_t)v);
}

struct walk {
    const struct btf *btf;
    const uint8_t *data;
    size_t len;
    uint32_t parts; /* made so far (MAPS_MAX_PARTS) */
    char why[160]; /* the first reason a value did not fit */
};

/* A name of the BTF; "" where the offset is not in its strings (libbpf
 * checks the offsets of the types it resolves, not of every name). */
static const char *name_of(const struct btf *b, uint32_t off)
{
    const char *n = btf__name_by_offset(b, off);
    return n ? n : "";
}

static uint32_t skip_mods(const struct btf *b, uint32_t id)
{
    for (int i = 0; i < MAPS_MAX_DEPTH; i++) {
        const struct btf_type *t = btf__type_by_id(b, id);
        if (!t)
            return id;
        switch (btf_kind(t)) {
        case BTF_KIND_TYPEDEF:
        case BTF_KIND_VOLATILE:
        case BTF_KIND_CONST:
        case BTF_KIND_RESTRICT:
        case BTF_KIND_TYPE_TAG:
        case BTF_KIND_DECL_TAG:
        case BTF_KIND_VAR:
            id = t->type;
            break;
        default:
            return id;
        }
    }
    return id;
}

static json_t *fail_fit(struct walk *w, const char *fmt, uint32_t a, uint64_t b)
{
    if (!*w->why)
        snprintf(w->why, sizeof(w->why), fmt, a, b);
    return NULL;
}

/* The value of type id at byte off (and bit offset bits, bit field width
 * nbits when > 0) of w's data; NULL with w->why when it does not fit. */
static json_t *walk(struct walk *w, uint32_t id, size_t off, uint32_t bits, uint32_t nbits,
                    int depth)
{
    if (depth > MAPS_MAX_DEPTH)
        return fail_fit(w, "types nested deeper than %u (at byte %" PRIu64 ")", MAPS_MAX_DEPTH,
                        off);
    if (++w->parts > MAPS_MAX_PARTS)
        return fail_fit(w, "a type of more than %u parts (at byte %" PRIu64 ")", MAPS_MAX_PARTS,
                        off);
    id = skip_mods(w->btf, id);
    const struct btf_type *t = btf__type_by_id(w->btf, id);
    if (!t)
        return fail_fit(w, "type %u is not in the object's BTF (at byte %" PRIu64 ")", id, off);
    off += bits / 8, bits %= 8;
    uint32_t kind = btf_kind(t);
    if (nbits) { /* a bit field: an integer or enum of nbits at bits */
        size_t need = (bits + nbits + 7) / 8;
        if (nbits > 64 || off + need > w->len || need > 8)
            return fail_fit(w, "bit field of %u bits past the value's end (byte %" PRIu64 ")",
                            nbits, off);
        uint64_t v = load_le(w->data + off, need) >> bits;
        if (nbits < 64)
            v &= (1ull << nbits) - 1;
        if (kind == BTF_KIND_INT && (btf_int_encoding(t) & BTF_INT_SIGNED) && nbits < 64 &&
            (v >> (nbits - 1)) & 1)
            return json_integer((json_int_t)(v | ~((1ull << nbits) - 1)));
        return uint_json(v);
    }
    switch (kind) {
    case BTF_KIND_INT: {
        uint32_t sz = t->size, enc = btf_int_encoding(t);
        if (sz > 16 || off + sz > w->len)
            return fail_fit(w, "an integer of %u bytes past the value's end (byte %" PRIu64 ")", sz,
                            off);
        if (sz > 8)
            return hex(w->data + off, sz);
        /* libbpf accepts any bit range within 128 bits: the range must lie
         * within the integer's own bytes */
        uint32_t ioff = btf_int_offset(t), ibits = btf_int_bits(t);
        if (!ibits || ioff + ibits > 8 * sz)
            return fail_fit(w, "an integer of %u bytes whose bits lie outside it (byte %" PRIu64 ")",
                            sz, off);
        uint64_t v = load_le(w->data + off, sz);
        if (ioff || ibits < 64) { /* the integer's own bit range */
            v >>= ioff;
            if (ibits < 64)
                v &= (1ull << ibits) - 1;
        }
        if (enc & BTF_INT_BOOL)
            return json_boolean(v != 0);
        if ((enc & BTF_INT_SIGNED) && ibits < 64 && (v >> (ibits - 1)) & 1)
            return json_integer((json_int_t)(v | ~((1ull << ibits) - 1)));
        if (enc & BTF_INT_SIGNED)
            return json_integer((json_int_t)v);
        return uint_json(v);
    }
    case BTF_KIND_ENUM:
    case BTF_KIND_ENUM64: {
        uint32_t sz = t->size;
        if (sz > 8 || off + sz > w->len)
            return fail_fit(w, "an enum of %u bytes past the value's end (byte %" PRIu64 ")", sz,
                            off);
        uint64_t v = load_le(w->data + off, sz);
        uint16_t n = btf_vlen(t);
        for (uint16_t i = 0; i < n; i++) {
            uint64_t ev = kind == BTF_KIND_ENUM ? (uint64_t)(uint32_t)btf_enum(t)[i].val
                                                : btf_enum64_value(&btf_enum64(t)[i]);
            uint32_t name =
                kind == BTF_KIND_ENUM ? btf_enum(t)[i].name_off : btf_enum64(t)[i].name_off;
            if (sz < 8)
                ev &= (1ull << (8 * sz)) - 1;
            if (ev == v)
                return json_string(name_of(w->btf, name));
        }
        return uint_json(v);
    }
    case BTF_KIND_FLOAT: {
        if (off + t->size > w->len)
            return fail_fit(w, "a float of %u bytes past the value's end (byte %" PRIu64 ")",
                            t->size, off);
        if (t->size == 4) {
            float f;
            memcpy(&f, w->data + off, 4);
            return json_real(f);
        }
        if (t->size == 8) {
            double d;
            memcpy(&d, w->data + off, 8);
            return json_real(d);
        }
        return hex(w->data + off, t->size);
    }
    case BTF_KIND_PTR:
        if (off + 8 > w->len)
            return fail_fit(w, "a pointer past the value's end (byte %u of %" PRIu64 ")",
                            (uint32_t)off, (uint64_t)w->len);
        return hex(w->data + off, 8);
    case BTF_KIND_ARRAY: {
        const struct btf_array *a = btf_array(t);
        uint32_t et = skip_mods(w->btf, a->type);
        const struct btf_type *e = btf__type_by_id(w->btf, et);
        __s64 esz = btf__resolve_size(w->btf, et);
        if (!e || esz <= 0 || (uint64_t)esz * a->nelems > w->len - (off < w->len ? off : w->len))
            return fail_fit(w, "an array of %u elements past the value's end (byte %" PRIu64 ")",
                            a->nelems, off);
        if (btf_kind(e) == BTF_KIND_INT && e->size == 1 &&
            ((btf_int_encoding(e) & BTF_INT_CHAR) ||
             !strcmp(name_of(w->btf, e->name_off), "char"))) {
            /* char[N]: the text up to its NUL, when it is text */
            const char *c = (const char *)w->data + off;
            size_t n = strnlen(c, a->nelems);
            bool text = true;
            for (size_t i = 0; i < n; i++)
                text &= (unsigned char)c[i] >= 0x20 && (unsigned char)c[i] < 0x7f;
            if (text) {
                json_t *j = json_stringn(c, n);
                return j ? j : json_null();
            }
        }
        json_t *arr = json_array();
        for (uint32_t i = 0; i < a->nelems; i++) {
            json_t *x = walk(w, et, off + (size_t)i * (size_t)esz, 0, 0, depth + 1);
            if (!x) {
                json_decref(arr);
                return NULL;
            }
            json_array_append_new(arr, x);
        }
        return arr;
    }
    case BTF_KIND_STRUCT:
    case BTF_KIND_UNION: {
        if (off + t->size > w->len)
            return fail_fit(w, "a struct of %u bytes past the value's end (byte %" PRIu64 ")",
                            t->size, off);
        json_t *o = json_object();
        const struct btf_member *m = btf_members(t);
        for (uint16_t i = 0; i < btf_vlen(t); i++) {
            uint32_t bo = btf_member_bit_offset(t, i), bf = btf_member_bitfield_size(t, i);
            json_t *x = walk(w, m[i].type, off, bo, bf, depth + 1);
            if (!x) {
                json_decref(o);
                return NULL;
            }
            const char *name = name_of(w->btf, m[i].name_off);
            char anon[24];
            if (!*name) {
                snprintf(anon, sizeof(anon), "(anonymous %u)", i);
                name = anon;
            }
            json_object_set_new(o, name, x);
        }
        return o;
    }
    case BTF_KIND_DATASEC: {
        json_t *o = json_object();
        const struct btf_var_secinfo *v = btf_var_secinfos(t);
        for (uint16_t i = 0; i < btf_vlen(t); i++) {
            const struct btf_type *var = btf__type_by_id(w->btf, v[i].type);
            json_t *x = walk(w, v[i].type, off + v[i].offset, 0, 0, depth + 1);
            if (!x) {
                json_decref(o);
                return NULL;
            }
            const char *name = var ? name_of(w->btf, var->name_off) : "";
            json_object_set_new(o, *name ? name : "?", x);
        }
        return o;
    }
    default:
        return fail_fit(w, "type %u of a kind with no value (at byte %" PRIu64 ")", id, off);
    }
}

/* A key or value: decoded when the type is known and fits, else hex (and
 * the reason into why, once). */
json_t *mks_maps_decode(const struct btf *b, uint32_t type, const void *data, size_t len,
                        char *why, size_t why_len)
{
    if (b && type) {
        struct walk w = {.btf = b, .data = data, .len = len};
        json_t *j = walk(&w, type, 0, 0, 0, 0);
        __s64 size = btf__resolve_size(b, type);
        if (j && size >= 0 && (size_t)size == len)
            return j;
        json_decref(j);
        if (!*why)
            snprintf(why, why_len, "%s", *w.why ? w.why : "the bytes sent are not the type's size");
    }
    return hex(data, len);
}


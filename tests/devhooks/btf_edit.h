/*
 * Editing the .BTF section of a BPF object in memory, for tests that turn a
 * good object into a hostile one (a typedef that refers to itself, a struct
 * that contains itself, ...) and for making the loader fuzzer's seeds.
 * Only rewrites fields in place, so every other offset in the file stays
 * valid.  Types are found by kind and indexed by id (1..n).
 */
#ifndef MKS_TEST_BTF_EDIT_H
#define MKS_TEST_BTF_EDIT_H

#include <elf.h>
#include <linux/btf.h>
#include <stdint.h>
#include <string.h>

#define BTF_EDIT_MAX 4096

struct btf_edit {
    uint8_t *types;  /* first type record */
    const char *strs;
    uint32_t type_len, str_len;
    uint32_t n;      /* types, ids 1..n */
    uint32_t off[BTF_EDIT_MAX + 1];
};

static inline uint32_t btf_edit_get(const struct btf_edit *e, uint32_t id, int word)
{
    uint32_t v;
    memcpy(&v, e->types + e->off[id] + 4 * word, 4);
    return v;
}

static inline void btf_edit_set(struct btf_edit *e, uint32_t id, int word, uint32_t v)
{
    memcpy(e->types + e->off[id] + 4 * word, &v, 4);
}

static inline uint32_t btf_edit_kind(const struct btf_edit *e, uint32_t id)
{
    return (btf_edit_get(e, id, 1) >> 24) & 0x1f;
}

static inline uint32_t btf_edit_vlen(const struct btf_edit *e, uint32_t id)
{
    return btf_edit_get(e, id, 1) & 0xffff;
}

static inline void btf_edit_set_kind(struct btf_edit *e, uint32_t id, uint32_t kind)
{
    btf_edit_set(e, id, 1, (btf_edit_get(e, id, 1) & ~(0x1fu << 24)) | (kind << 24));
}

static inline const char *btf_edit_name(const struct btf_edit *e, uint32_t id)
{
    return e->strs + btf_edit_get(e, id, 0);
}

/* First type of `kind` after `after` (0: from the start), 0 if none. */
static inline uint32_t btf_edit_find(const struct btf_edit *e, uint32_t kind, uint32_t after)
{
    for (uint32_t id = after + 1; id <= e->n; id++)
        if (btf_edit_kind(e, id) == kind)
            return id;
    return 0;
}

/* Bytes after the 12-byte record (kind data) of type id. */
static inline uint32_t btf_edit_extra(const struct btf_edit *e, uint32_t id)
{
    uint32_t vlen = btf_edit_vlen(e, id);
    switch (btf_edit_kind(e, id)) {
    case BTF_KIND_INT: case BTF_KIND_VAR: case BTF_KIND_DECL_TAG: return 4;
    case BTF_KIND_ARRAY: return 12;
    case BTF_KIND_STRUCT: case BTF_KIND_UNION: case BTF_KIND_DATASEC: case BTF_KIND_ENUM64: return 12 * vlen;
    case BTF_KIND_ENUM: case BTF_KIND_FUNC_PROTO: return 8 * vlen;
    default: return 0;
    }
}

/* Word w of type id's kind data. */
static inline uint32_t btf_edit_xget(const struct btf_edit *e, uint32_t id, uint32_t w)
{
    uint32_t v;
    memcpy(&v, e->types + e->off[id] + 12 + 4 * w, 4);
    return v;
}

static inline void btf_edit_xset(struct btf_edit *e, uint32_t id, uint32_t w, uint32_t v)
{
    memcpy(e->types + e->off[id] + 12 + 4 * w, &v, 4);
}

/* Offset of the section header named `name` in a well-formed object, 0 if
 * there is none (edit it with memcpy: the file need not be aligned). */
static inline size_t elf_edit_section(const uint8_t *elf, size_t len, const char *name)
{
    Elf64_Ehdr eh;
    Elf64_Shdr sh, strsh;
    if (len < sizeof(eh))
        return 0;
    memcpy(&eh, elf, sizeof(eh));
    memcpy(&strsh, elf + eh.e_shoff + (size_t)eh.e_shstrndx * sizeof(sh), sizeof(sh));
    for (size_t i = 0; i < eh.e_shnum; i++) {
        size_t at = eh.e_shoff + i * sizeof(sh);
        memcpy(&sh, elf + at, sizeof(sh));
        if (strcmp((const char *)elf + strsh.sh_offset + sh.sh_name, name) == 0)
            return at;
    }
    return 0;
}

/* Index the .BTF section of a well-formed object; 0 on success. */
static inline int btf_edit_open(uint8_t *elf, size_t len, struct btf_edit *e)
{
    Elf64_Ehdr eh;
    Elf64_Shdr sh, strsh;
    if (len < sizeof(eh))
        return -1;
    memcpy(&eh, elf, sizeof(eh));
    memcpy(&strsh, elf + eh.e_shoff + (size_t)eh.e_shstrndx * sizeof(sh), sizeof(sh));
    for (size_t i = 0; i < eh.e_shnum; i++) {
        memcpy(&sh, elf + eh.e_shoff + i * sizeof(sh), sizeof(sh));
        if (strcmp((const char *)elf + strsh.sh_offset + sh.sh_name, ".BTF") != 0)
            continue;
        uint8_t *d = elf + sh.sh_offset;
        uint32_t h[5];
        memcpy(h, d + 4, sizeof(h));
        e->types = d + h[0] + h[1];
        e->type_len = h[2];
        e->strs = (const char *)d + h[0] + h[3];
        e->str_len = h[4];
        e->n = 0;
        for (uint32_t off = 0; off < e->type_len && e->n < BTF_EDIT_MAX;) {
            e->off[++e->n] = off;
            off += 12 + btf_edit_extra(e, e->n);
        }
        return 0;
    }
    return -1;
}

#endif /* MKS_TEST_BTF_EDIT_H */

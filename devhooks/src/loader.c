/*
 * Loader: BPF ELF object -> relocated programs and map specs, with libbpf and
 * no bpf() system call.
 *
 * How it works: the object is read into memory and first checked by a small
 * ELF walker of our own (header, section table, string and symbol tables,
 * relocation entries and BTF type references all inside the buffer; no
 * extern symbols; no CO-RE relocations), because libbpf trusts the ELF it
 * is given and a corrupted object must get an error line, not a crash.  Then
 * libbpf opens it, every program gets a Linux program type (libbpf needs one;
 * the mkscope type comes from the section name), and bpf_object__gen_loader()
 * makes bpf_object__load() record what it would ask the kernel instead of
 * asking it.  What load leaves behind is exactly what we want: map references
 * are ld_imm64 with src_reg 5 (map index) or 6 (map index + offset, for
 * .rodata/.data/.bss), subprograms are appended and called by relative
 * offset.  Everything is copied out and the libbpf object is closed, so an
 * mks_obj is plain memory.
 *
 * .rodata, .data and .bss become MKS_MAP_ARRAY maps of one entry whose value
 * is the section; their initial content is kept (mks_obj_map_init) for
 * whoever creates the maps.
 *
 * libbpf reports problems through a process-wide print callback; while one of
 * our calls runs it is redirected to capture its most specific message, which
 * becomes the error line, and restored afterwards.  So opening objects is not
 * safe from two threads at once (the agent does it from its event loop).
 */
#include <elf.h>
#include <linux/btf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bpf/libbpf.h>
/* From <bpf/btf.h>, which cannot be included here: its inline btf_kind()
 * and friends have the names of this file's own raw-BTF walk below. */
LIBBPF_API const void *btf__raw_data(const struct btf *btf, __u32 *size);

#include "mkscope/bpf_isa.h"
#include "mkscope/hook_abi.h"
#include "mkscope/loader.h"
#include "msg.h"

#ifndef EM_BPF
#define EM_BPF 247
#endif

/* Programs one object may hold: a control block has 64 program slots, and
 * each program costs a verification (bounded, but not free). */
#define MKS_OBJ_MAX_PROGS 64
/* Objects larger than this are not monitors; refuse before parsing. */
#define MKS_OBJ_MAX_BYTES (64u << 20)
/* Map limits: a map lives in the control block's arena (16 MiB by default). */
#define MKS_MAP_MAX_VALUE   (1u << 20)
#define MKS_MAP_MAX_ENTRIES (1u << 24)
#define MKS_MAP_MAX_KEY     512u

struct mks_obj {
    char *name;
    struct mks_obj_prog *progs;
    uint32_t n_progs;
    struct mks_map_spec *maps;
    void **map_init; /* per map: initial value of an internal map, else NULL */
    size_t *map_init_len;
    uint32_t n_maps;
    /* The object's BTF (raw, as libbpf left it after relocation) and per
     * map its key and value type ids (0: none), kept so that whoever reads
     * the maps back can decode them with the program's own types. */
    void *btf;
    size_t btf_len;
    uint32_t *map_btf; /* 2 per map: key, value */
};

/* ---- libbpf messages --------------------------------------------------- */

/* The most specific message libbpf printed during the current call: the
 * last warning that is neither a "continuing anyway" note nor the generic
 * "failed to load object" trailer; failing any warning, the last debug
 * line (some failures print only those). */
static char ld_msg[256], ld_dbg[256];

static void ld_store(char *dst, size_t len, const char *fmt, va_list ap)
{
    char tmp[256];
    const char *m = tmp;
    vsnprintf(tmp, sizeof(tmp), fmt, ap);
    if (strncmp(m, "libbpf: ", 8) == 0)
        m += 8;
    snprintf(dst, len, "%s", m);
    size_t n = strlen(dst);
    while (n > 0 && (dst[n - 1] == '\n' || dst[n - 1] == ' ' || dst[n - 1] == '.'))
        dst[--n] = '\0';
}

static int ld_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
    char tmp[256];
    va_list cp;
    va_copy(cp, ap);
    ld_store(tmp, sizeof(tmp), fmt, cp);
    va_end(cp);
    if (level == LIBBPF_WARN) {
        if (!strstr(tmp, "Ignored and continue") && strncmp(tmp, "failed to load object", 21) != 0)
            snprintf(ld_msg, sizeof(ld_msg), "%s", tmp);
    } else if (tmp[0]) {
        snprintf(ld_dbg, sizeof(ld_dbg), "%s", tmp);
    }
    return 0;
}

/* What to say about a libbpf failure with code rc. */
static const char *ld_reason(int rc)
{
    if (ld_msg[0])
        return ld_msg;
    if (ld_dbg[0])
        return ld_dbg;
    return strerror(-rc);
}

__attribute__((format(printf, 4, 5))) static int ld_err(char *err, size_t len, int code,
                                                        const char *fmt, ...)
{
    if (err && len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, len, fmt, ap);
        va_end(ap);
        mks_msg_one_line(err);
    }
    return code;
}

/* ---- ELF pre-check ----------------------------------------------------- */

struct elf_view {
    const uint8_t *buf;
    size_t len;
    Elf64_Ehdr eh;
    const char *shstr;
    size_t shstr_len;
};

static int elf_shdr(const struct elf_view *ev, size_t i, Elf64_Shdr *sh)
{
    memcpy(sh, ev->buf + ev->eh.e_shoff + i * sizeof(*sh), sizeof(*sh));
    return 0;
}

static const char *elf_secname(const struct elf_view *ev, const Elf64_Shdr *sh)
{
    if (!ev->shstr || sh->sh_name >= ev->shstr_len)
        return "?";
    return ev->shstr + sh->sh_name;
}

/* True when [off, off+size) lies inside the buffer (no overflow). */
static int elf_in(const struct elf_view *ev, uint64_t off, uint64_t size)
{
    return off <= ev->len && size <= ev->len - off;
}

static int btf_check(const char *name, const uint8_t *d, uint64_t len, char *err, size_t elen);

/* Checks that every table libbpf will walk lies inside the buffer. */
static int elf_check(const char *name, const uint8_t *buf, size_t len, char *err, size_t elen)
{
    struct elf_view ev = {.buf = buf, .len = len};
    Elf64_Shdr sh;

    if (len < EI_NIDENT || memcmp(buf, ELFMAG, SELFMAG) != 0)
        return ld_err(err, elen, -ENOEXEC, "%s: not an ELF file (bad magic); expected a BPF object from clang -target bpf", name);
    if (len < sizeof(Elf64_Ehdr))
        return ld_err(err, elen, -ENOEXEC, "%s: truncated: %zu bytes, shorter than an ELF header", name, len);
    memcpy(&ev.eh, buf, sizeof(ev.eh));
    if (buf[EI_CLASS] != ELFCLASS64 || buf[EI_DATA] != ELFDATA2LSB)
        return ld_err(err, elen, -ENOEXEC, "%s: not a 64-bit little-endian ELF; expected clang -target bpf output", name);
    if (ev.eh.e_machine != EM_BPF)
        return ld_err(err, elen, -ENOEXEC, "%s: ELF machine %u is not BPF (%u); compile with clang -target bpf", name,
                      ev.eh.e_machine, EM_BPF);
    if (ev.eh.e_type != ET_REL)
        return ld_err(err, elen, -ENOEXEC, "%s: ELF type %u is not a relocatable object; expected clang -c output", name,
                      ev.eh.e_type);
    if (ev.eh.e_shentsize != sizeof(Elf64_Shdr) || ev.eh.e_shnum == 0 ||
        !elf_in(&ev, ev.eh.e_shoff, (uint64_t)ev.eh.e_shnum * sizeof(Elf64_Shdr)))
        return ld_err(err, elen, -ENOEXEC, "%s: truncated or corrupt: section header table (offset %llu, %u entries) outside the %zu-byte file",
                      name, (unsigned long long)ev.eh.e_shoff, ev.eh.e_shnum, len);
    if (ev.eh.e_shstrndx == SHN_UNDEF || ev.eh.e_shstrndx >= ev.eh.e_shnum)
        return ld_err(err, elen, -ENOEXEC, "%s: corrupt: section name table index %u out of range", name, ev.eh.e_shstrndx);
    elf_shdr(&ev, ev.eh.e_shstrndx, &sh);
    if (sh.sh_type != SHT_STRTAB || !elf_in(&ev, sh.sh_offset, sh.sh_size) || sh.sh_size == 0 ||
        buf[sh.sh_offset + sh.sh_size - 1] != '\0')
        return ld_err(err, elen, -ENOEXEC, "%s: truncated or corrupt: section name table", name);
    ev.shstr = (const char *)buf + sh.sh_offset;
    ev.shstr_len = sh.sh_size;

    size_t n_symtab = 0, n_syms = 0, symtab_idx = 0;
    for (size_t i = 0; i < ev.eh.e_shnum; i++) {
        elf_shdr(&ev, i, &sh);
        if (sh.sh_name >= ev.shstr_len)
            return ld_err(err, elen, -ENOEXEC, "%s: corrupt: section %zu name offset %u outside the name table", name, i,
                          sh.sh_name);
        if (sh.sh_type != SHT_NOBITS && sh.sh_type != SHT_NULL && !elf_in(&ev, sh.sh_offset, sh.sh_size))
            return ld_err(err, elen, -ENOEXEC, "%s: truncated: section '%s' (%llu bytes at %llu) ends beyond the %zu-byte file",
                          name, elf_secname(&ev, &sh), (unsigned long long)sh.sh_size,
                          (unsigned long long)sh.sh_offset, len);
        /* Global data becomes a map whose value is the section: libbpf
         * allocates and copies that much before we see the map (a .bss of
         * 1.5 GB in an 8 KB file took that much memory). */
        const char *sn = elf_secname(&ev, &sh);
        if ((sh.sh_type == SHT_NOBITS || strncmp(sn, ".data", 5) == 0 || strncmp(sn, ".rodata", 7) == 0 ||
             strncmp(sn, ".bss", 4) == 0) &&
            sh.sh_size > MKS_MAP_MAX_VALUE)
            return ld_err(err, elen, -E2BIG, "%s: section '%s' is %llu bytes; expected global data of at most %u bytes",
                          name, sn, (unsigned long long)sh.sh_size, MKS_MAP_MAX_VALUE);
        if (sh.sh_type == SHT_SYMTAB) {
            n_symtab++;
            symtab_idx = i;
        }
        if (sh.sh_type == SHT_PROGBITS && strcmp(elf_secname(&ev, &sh), ".BTF") == 0) {
            int rc = btf_check(name, buf + sh.sh_offset, sh.sh_size, err, elen);
            if (rc)
                return rc;
        }
        /* .BTF.ext: libbpf checks its tables' offsets for alignment but
         * not the header's length they are relative to, and then reads
         * the records as u32s in place. */
        if (sh.sh_type == SHT_PROGBITS && strcmp(elf_secname(&ev, &sh), ".BTF.ext") == 0) {
            uint32_t hl;
            if (sh.sh_size < 8) /* libbpf copies from its NULL data */
                return ld_err(err, elen, -ENOEXEC, "%s: corrupt .BTF.ext: %llu bytes, shorter than its header", name,
                              (unsigned long long)sh.sh_size);
            memcpy(&hl, buf + sh.sh_offset + 4, 4);
            if (hl % 4)
                return ld_err(err, elen, -ENOEXEC, "%s: corrupt .BTF.ext: header length %u is not a multiple of 4", name,
                              hl);
        }
    }
    if (n_symtab != 1)
        return ld_err(err, elen, -ENOEXEC, "%s: %zu symbol tables; expected exactly one (clang -c output)", name, n_symtab);

    /* Symbol table and its strings. */
    Elf64_Shdr symsh, strsh;
    elf_shdr(&ev, symtab_idx, &symsh);
    if (symsh.sh_entsize != sizeof(Elf64_Sym) || symsh.sh_size % sizeof(Elf64_Sym) != 0 ||
        symsh.sh_link == 0 || symsh.sh_link >= ev.eh.e_shnum)
        return ld_err(err, elen, -ENOEXEC, "%s: corrupt: symbol table layout", name);
    elf_shdr(&ev, symsh.sh_link, &strsh);
    if (strsh.sh_type != SHT_STRTAB || strsh.sh_size == 0 ||
        buf[strsh.sh_offset + strsh.sh_size - 1] != '\0')
        return ld_err(err, elen, -ENOEXEC, "%s: corrupt: symbol string table", name);
    n_syms = symsh.sh_size / sizeof(Elf64_Sym);
    for (size_t s = 0; s < n_syms; s++) {
        Elf64_Sym sym;
        memcpy(&sym, buf + symsh.sh_offset + s * sizeof(sym), sizeof(sym));
        if (sym.st_name >= strsh.sh_size)
            return ld_err(err, elen, -ENOEXEC, "%s: corrupt: symbol %zu name outside the string table", name, s);
        if (sym.st_shndx == SHN_UNDEF && ELF64_ST_BIND(sym.st_info) != STB_LOCAL && sym.st_name != 0)
            return ld_err(err, elen, -EOPNOTSUPP, "%s: extern symbol '%s' (kernel symbol or config); expected no externs: monitors run on no kernel",
                          name, (const char *)buf + strsh.sh_offset + sym.st_name);
        if (sym.st_shndx != SHN_UNDEF && sym.st_shndx < SHN_LORESERVE && sym.st_shndx >= ev.eh.e_shnum)
            return ld_err(err, elen, -ENOEXEC, "%s: corrupt: symbol %zu in section %u of %u", name, s, sym.st_shndx,
                          ev.eh.e_shnum);
        if (sym.st_shndx != SHN_UNDEF && sym.st_shndx < ev.eh.e_shnum) {
            Elf64_Shdr tsh;
            elf_shdr(&ev, sym.st_shndx, &tsh);
            if (sym.st_value > tsh.sh_size || sym.st_size > tsh.sh_size - sym.st_value)
                return ld_err(err, elen, -ENOEXEC, "%s: corrupt: symbol %zu (%llu bytes at %llu) outside its section '%s'",
                              name, s, (unsigned long long)sym.st_size, (unsigned long long)sym.st_value,
                              elf_secname(&ev, &tsh));
        }
    }

    /* Relocations: entries, targets and symbols in range. */
    for (size_t i = 0; i < ev.eh.e_shnum; i++) {
        elf_shdr(&ev, i, &sh);
        if (sh.sh_type == SHT_RELA)
            return ld_err(err, elen, -ENOEXEC, "%s: section '%s' has RELA relocations; BPF objects use REL", name,
                          elf_secname(&ev, &sh));
        if (sh.sh_type != SHT_REL)
            continue;
        Elf64_Shdr tsh;
        if (sh.sh_entsize != sizeof(Elf64_Rel) || sh.sh_size % sizeof(Elf64_Rel) != 0 ||
            sh.sh_link != symtab_idx || sh.sh_info == 0 || sh.sh_info >= ev.eh.e_shnum)
            return ld_err(err, elen, -ENOEXEC, "%s: corrupt: relocation section '%s' layout", name, elf_secname(&ev, &sh));
        elf_shdr(&ev, sh.sh_info, &tsh);
        for (size_t r = 0; r < sh.sh_size / sizeof(Elf64_Rel); r++) {
            Elf64_Rel rel;
            memcpy(&rel, buf + sh.sh_offset + r * sizeof(rel), sizeof(rel));
            if (ELF64_R_SYM(rel.r_info) >= n_syms || rel.r_offset >= tsh.sh_size ||
                tsh.sh_size - rel.r_offset < 4)
                return ld_err(err, elen, -ENOEXEC, "%s: corrupt: relocation %zu of '%s' out of range", name, r,
                              elf_secname(&ev, &sh));
        }
    }
    return 0;
}

/*
 * BTF check.  libbpf 1.1 follows type ids from map definitions and variables
 * without checking them: an id past the last type is a NULL dereference, a
 * typedef or modifier that refers back to itself an endless loop in
 * skip_mods_and_typedefs() (seen: `mkscope verify` and the agent hung in
 * bpf_object__open), a struct that contains itself unbounded recursion.  So
 * before libbpf sees the object, every record must lie inside the type
 * section, every name inside the strings, every type id a type refers to
 * must name a type, and the type graph must be finite:
 *   - a chain of single references (typedef, const, volatile, restrict,
 *     type tag, pointer, var, func, decl tag) reaches another kind within
 *     BTF_MAX_DEPTH steps, so it has no cycle;
 *   - what a type is made of (array elements and index, struct and union
 *     members, function return and parameters, section variables, and the
 *     single references except pointers) has no cycle and nests at most
 *     BTF_MAX_DEPTH deep.  A cycle through a pointer (struct node { struct
 *     node *next; }) is fine: nothing resolves through a pointer.
 * The depth is the Linux BTF verifier's MAX_RESOLVE_DEPTH.  Layout
 * (linux/btf.h): header {u16 magic 0xeb9f, u8 version, u8 flags, u32
 * hdr_len, u32 type_off, u32 type_len, u32 str_off, u32 str_len}, then
 * types of 12 bytes {name_off, info (vlen bits 0-15, kind bits 24-28), size
 * or type} plus kind data.
 */
#define BTF_MAX_DEPTH 32
/* More types than any monitor has (hundreds); bounds the check's memory. */
#define BTF_MAX_TYPES (1u << 20)

struct btf_view {
    const char *name; /* object, for messages */
    const uint8_t *types;
    const char *strs;
    uint32_t str_len;
    uint32_t n;          /* types, ids 1..n */
    uint32_t *off;       /* per id: offset of its record in types */
};

static const char *btf_kind_name(uint32_t kind)
{
    static const char *const names[] = {"void",     "int",      "ptr",        "array",   "struct",
                                        "union",    "enum",     "fwd",        "typedef", "volatile",
                                        "const",    "restrict", "func",       "func_proto", "var",
                                        "datasec",  "float",    "decl_tag",   "type_tag", "enum64"};
    return kind < sizeof(names) / sizeof(names[0]) ? names[kind] : "?";
}

static void btf_rec(const struct btf_view *b, uint32_t id, uint32_t t[3])
{
    memcpy(t, b->types + b->off[id], 12);
}

static uint32_t btf_kind(const uint32_t t[3])
{
    return (t[1] >> 24) & 0x1f;
}

/* Kinds whose record refers to exactly one type through t[2]. */
static int btf_is_ref(uint32_t kind)
{
    switch (kind) {
    case BTF_KIND_PTR: case BTF_KIND_TYPEDEF: case BTF_KIND_VOLATILE: case BTF_KIND_CONST:
    case BTF_KIND_RESTRICT: case BTF_KIND_FUNC: case BTF_KIND_VAR: case BTF_KIND_DECL_TAG:
    case BTF_KIND_TYPE_TAG:
        return 1;
    default:
        return 0;
    }
}

/* The k-th type id type `id` refers to, in *to; 0 past the last.  With
 * parts, only what it is made of (no pointer target).  The answer is apart
 * from the id: every u32, 0xffffffff included, is a reference to check. */
static int btf_edge(const struct btf_view *b, uint32_t id, uint32_t k, int parts, uint32_t *to)
{
    uint32_t t[3], kind, vlen, x[3];
    const uint8_t *extra = b->types + b->off[id] + 12;
    btf_rec(b, id, t);
    kind = btf_kind(t);
    vlen = t[1] & 0xffff;
    switch (kind) {
    case BTF_KIND_PTR:
        if (parts || k != 0)
            return 0;
        *to = t[2];
        return 1;
    case BTF_KIND_ARRAY:
        if (k >= 2)
            return 0;
        memcpy(x, extra, 12);
        *to = x[k];
        return 1;
    case BTF_KIND_STRUCT:
    case BTF_KIND_UNION:
        if (k >= vlen)
            return 0;
        memcpy(x, extra + 12ull * k, 12);
        *to = x[1];
        return 1;
    case BTF_KIND_FUNC_PROTO:
        if (k > vlen)
            return 0;
        if (k == 0) {
            *to = t[2];
            return 1;
        }
        memcpy(x, extra + 8ull * (k - 1), 8);
        *to = x[1];
        return 1;
    case BTF_KIND_DATASEC:
        if (k >= vlen)
            return 0;
        memcpy(x, extra + 12ull * k, 12);
        *to = x[0];
        return 1;
    default:
        if (!btf_is_ref(kind) || k != 0)
            return 0;
        *to = t[2];
        return 1;
    }
}

/* "type 7 (typedef 'u32')" */
static const char *btf_desc(const struct btf_view *b, uint32_t id, char *buf, size_t len)
{
    uint32_t t[3];
    btf_rec(b, id, t);
    const char *nm = b->strs + t[0];
    if (nm[0])
        snprintf(buf, len, "type %u (%s '%.40s')", id, btf_kind_name(btf_kind(t)), nm);
    else
        snprintf(buf, len, "type %u (%s)", id, btf_kind_name(btf_kind(t)));
    return buf;
}

/* Records, names and references of every type. */
static int btf_scan(struct btf_view *b, uint32_t type_len, int pass, char *err, size_t elen)
{
    uint64_t off = 0;
    uint32_t id = 0;
    while (off < type_len) {
        uint32_t t[3];
        if (type_len - off < 12)
            return ld_err(err, elen, -ENOEXEC, "%s: corrupt BTF: type %u truncated", b->name, id + 1);
        if (id + 1 >= BTF_MAX_TYPES)
            return ld_err(err, elen, -E2BIG, "%s: BTF has more than %u types; expected a monitor's few hundred", b->name,
                          BTF_MAX_TYPES - 1);
        memcpy(t, b->types + off, 12);
        id++;
        if (pass == 1)
            b->off[id] = (uint32_t)off;
        off += 12;
        uint32_t vlen = t[1] & 0xffff, kind = btf_kind(t);
        uint64_t extra = 0, names = 0, name_stride = 0;
        switch (kind) {
        case BTF_KIND_INT: extra = 4; break;
        case BTF_KIND_ARRAY: extra = 12; break;
        case BTF_KIND_STRUCT: case BTF_KIND_UNION: extra = 12ull * vlen; names = vlen; name_stride = 12; break;
        case BTF_KIND_ENUM: extra = 8ull * vlen; names = vlen; name_stride = 8; break;
        case BTF_KIND_ENUM64: extra = 12ull * vlen; names = vlen; name_stride = 12; break;
        case BTF_KIND_FUNC_PROTO: extra = 8ull * vlen; names = vlen; name_stride = 8; break;
        case BTF_KIND_VAR: case BTF_KIND_DECL_TAG: extra = 4; break;
        case BTF_KIND_DATASEC: extra = 12ull * vlen; break;
        case BTF_KIND_FWD: case BTF_KIND_FLOAT: break;
        default:
            if (!btf_is_ref(kind))
                return ld_err(err, elen, -ENOEXEC, "%s: corrupt BTF: type %u has unknown kind %u", b->name, id, kind);
        }
        if (extra > type_len - off)
            return ld_err(err, elen, -ENOEXEC, "%s: corrupt BTF: type %u (%s) truncated", b->name, id, btf_kind_name(kind));
        if (t[0] >= b->str_len)
            return ld_err(err, elen, -ENOEXEC, "%s: corrupt BTF: type %u name offset %u outside the %u bytes of strings",
                          b->name, id, t[0], b->str_len);
        for (uint64_t k = 0; k < names; k++) {
            uint32_t no;
            memcpy(&no, b->types + off + k * name_stride, 4);
            if (no >= b->str_len)
                return ld_err(err, elen, -ENOEXEC, "%s: corrupt BTF: type %u (%s) member %llu name offset %u outside the %u bytes of strings",
                              b->name, id, btf_kind_name(kind), (unsigned long long)k, no, b->str_len);
        }
        off += extra;
        if (pass == 1) {
            uint32_t to;
            for (uint32_t k = 0; btf_edge(b, id, k, 0, &to); k++) {
                if (to > b->n)
                    return ld_err(err, elen, -ENOEXEC, "%s: corrupt BTF: type %u (%s) refers to type %u, which does not exist (%u types)",
                                  b->name, id, btf_kind_name(kind), to, b->n);
                if (kind == BTF_KIND_DATASEC && to == 0)
                    return ld_err(err, elen, -ENOEXEC, "%s: corrupt BTF: type %u (datasec) lists void as a variable", b->name, id);
            }
        }
    }
    b->n = id;
    return 0;
}

/* Cycles and depth, see above.  depth[id]: 0 unvisited, BTF_MAX_DEPTH + 2
 * on the current path, else the nesting depth below id plus one. */
static int btf_graph(const struct btf_view *b, char *err, size_t elen)
{
    const uint32_t onpath = BTF_MAX_DEPTH + 2;
    char d1[96], d2[96];
    uint8_t *depth = calloc((size_t)b->n + 1, 1);
    struct frame {
        uint32_t id, k;
    } *stk = calloc(BTF_MAX_DEPTH + 2, sizeof(*stk));
    int rc = 0;
    if (!depth || !stk) {
        rc = ld_err(err, elen, -ENOMEM, "%s: out of memory", b->name);
        goto out;
    }
    /* Chains of single references, pointers included. */
    for (uint32_t id = 1; id <= b->n && rc == 0; id++) {
        uint32_t t[3], cur = id, steps = 0;
        for (;;) {
            if (cur == 0)
                break;
            btf_rec(b, cur, t);
            if (!btf_is_ref(btf_kind(t)))
                break;
            if (++steps > BTF_MAX_DEPTH) {
                rc = ld_err(err, elen, -ENOEXEC, "%s: corrupt BTF: %s starts a chain of references that is cyclic or longer than %u; expected a chain that ends in a base, struct or function type",
                            b->name, btf_desc(b, id, d1, sizeof(d1)), BTF_MAX_DEPTH);
                break;
            }
            cur = t[2];
        }
    }
    /* What types are made of: depth first, iteratively, each type once. */
    for (uint32_t root = 1; root <= b->n && rc == 0; root++) {
        uint32_t sp = 0;
        if (depth[root])
            continue;
        stk[sp++] = (struct frame){root, 0};
        depth[root] = (uint8_t)onpath;
        while (sp > 0 && rc == 0) {
            struct frame *f = &stk[sp - 1];
            uint32_t to;
            if (!btf_edge(b, f->id, f->k++, 1, &to)) {
                uint32_t best = 0;
                for (uint32_t k = 0; btf_edge(b, f->id, k, 1, &to); k++)
                    if (to && depth[to] > best)
                        best = depth[to];
                depth[f->id] = (uint8_t)(best + 1);
                sp--;
                continue;
            }
            if (to == 0)
                continue;
            if (depth[to] == onpath) {
                rc = ld_err(err, elen, -ENOEXEC, "%s: corrupt BTF: %s contains itself (through %s); expected no cycle except through a pointer",
                            b->name, btf_desc(b, to, d1, sizeof(d1)), btf_desc(b, f->id, d2, sizeof(d2)));
                break;
            }
            if (depth[to] + sp > BTF_MAX_DEPTH || (depth[to] == 0 && sp >= BTF_MAX_DEPTH)) {
                rc = ld_err(err, elen, -ENOEXEC, "%s: corrupt BTF: %s nests types more than %u deep; expected at most %u",
                            b->name, btf_desc(b, root, d1, sizeof(d1)), BTF_MAX_DEPTH, BTF_MAX_DEPTH);
                break;
            }
            if (depth[to])
                continue;
            depth[to] = (uint8_t)onpath;
            stk[sp++] = (struct frame){to, 0};
        }
    }
out:
    free(depth);
    free(stk);
    return rc;
}

static int btf_check(const char *name, const uint8_t *d, uint64_t len, char *err, size_t elen)
{
    uint32_t h[5];
    uint16_t magic;
    int rc;

    if (len < 24)
        return ld_err(err, elen, -ENOEXEC, "%s: corrupt BTF: section shorter than its header", name);
    memcpy(&magic, d, 2);
    memcpy(h, d + 4, sizeof(h));
    uint32_t hdr_len = h[0], type_off = h[1], type_len = h[2], str_off = h[3], str_len = h[4];
    if (magic != 0xeb9f || d[2] != 1 || hdr_len < 24 || hdr_len > len)
        return ld_err(err, elen, -ENOEXEC, "%s: corrupt BTF header (magic %#x, version %u)", name, magic, d[2]);
    /* libbpf reads the records in place as u32s: it checks type_off's
     * alignment but not the header's length. */
    if (hdr_len % 4 || type_off % 4)
        return ld_err(err, elen, -ENOEXEC, "%s: corrupt BTF header: length %u or type offset %u not a multiple of 4", name,
                      hdr_len, type_off);
    uint64_t tb = (uint64_t)hdr_len + type_off, sb = (uint64_t)hdr_len + str_off;
    if (tb + type_len > len || sb + str_len > len || str_len == 0 || d[sb + str_len - 1] != '\0' || type_len % 4)
        return ld_err(err, elen, -ENOEXEC, "%s: corrupt BTF: type or string section outside the data", name);

    /* First pass counts the types, second records their offsets and checks
     * what they refer to. */
    struct btf_view b = {.name = name, .types = d + tb, .strs = (const char *)d + sb, .str_len = str_len};
    rc = btf_scan(&b, type_len, 0, err, elen);
    if (rc)
        return rc;
    b.off = calloc((size_t)b.n + 1, sizeof(*b.off));
    if (!b.off)
        return ld_err(err, elen, -ENOMEM, "%s: out of memory", name);
    rc = btf_scan(&b, type_len, 1, err, elen);
    if (rc == 0)
        rc = btf_graph(&b, err, elen);
    free(b.off);
    return rc;
}

/* CO-RE relocations need a kernel's BTF to resolve; a monitor has none.
 * .BTF.ext header: magic u16, version u8, flags u8, hdr_len u32, then
 * func/line info off+len, then (hdr_len >= 32) core_relo off+len. */
static int elf_has_core_relos(const uint8_t *buf, size_t len)
{
    Elf64_Ehdr eh;
    Elf64_Shdr sh, strsh;

    memcpy(&eh, buf, sizeof(eh));
    memcpy(&strsh, buf + eh.e_shoff + (size_t)eh.e_shstrndx * sizeof(sh), sizeof(sh));
    for (size_t i = 0; i < eh.e_shnum; i++) {
        memcpy(&sh, buf + eh.e_shoff + i * sizeof(sh), sizeof(sh));
        /* libbpf reads only a PROGBITS .BTF.ext (and the last of several),
         * whose bytes elf_check() found inside the file. */
        if (sh.sh_type != SHT_PROGBITS || strcmp((const char *)buf + strsh.sh_offset + sh.sh_name, ".BTF.ext") != 0)
            continue;
        uint32_t hdr[8];
        if (sh.sh_size < sizeof(hdr) || sh.sh_offset > len || len - sh.sh_offset < sizeof(hdr))
            continue;
        memcpy(hdr, buf + sh.sh_offset, sizeof(hdr));
        uint32_t hdr_len = hdr[1];
        /* core_relo_len covers a u32 record size and per-section tables. */
        if (hdr_len >= sizeof(hdr) && hdr[7] > sizeof(uint32_t))
            return 1;
    }
    return 0;
}

/* ---- sections and hooks ------------------------------------------------ */

static const char *const ev_names[MKS_EV_COUNT] = {
    [MKS_EV_TASK_READY] = "task_ready",
    [MKS_EV_TASK_ASSIGN] = "task_assign",
    [MKS_EV_TASK_START] = "task_start",
    [MKS_EV_TASK_END] = "task_end",
    [MKS_EV_DEP_WAIT_BEGIN] = "dep_wait_begin",
    [MKS_EV_DEP_WAIT_END] = "dep_wait_end",
    [MKS_EV_DEP_RELEASE] = "dep_release",
    [MKS_EV_COMM_BEGIN] = "comm_begin",
    [MKS_EV_COMM_END] = "comm_end",
    [MKS_EV_GEN_ADVANCE] = "gen_advance",
    [MKS_EV_QUEUE_PRESSURE] = "queue_pressure",
};

const char *mks_hook_event_name(uint32_t ev)
{
    return ev < MKS_EV_COUNT ? ev_names[ev] : NULL;
}

int mks_hook_from_section(const char *section, int32_t *hook_p, uint32_t *prog_type_p)
{
    static const char obs[] = "mkscope/", ctl[] = "mkscope.control/";
    const char *ev;
    uint32_t type;

    if (!section)
        return -EINVAL;
    if (strncmp(section, obs, sizeof(obs) - 1) == 0) {
        ev = section + sizeof(obs) - 1;
        type = MKS_PROG_OBSERVE;
    } else if (strncmp(section, ctl, sizeof(ctl) - 1) == 0) {
        ev = section + sizeof(ctl) - 1;
        type = MKS_PROG_CONTROL;
    } else {
        return -ENOENT;
    }
    for (uint32_t i = 0; i < MKS_EV_COUNT; i++) {
        if (strcmp(ev, ev_names[i]) == 0) {
            if (hook_p)
                *hook_p = (int32_t)i;
            if (prog_type_p)
                *prog_type_p = type;
            return 0;
        }
    }
    return -ENOENT;
}

/* ---- object ------------------------------------------------------------ */

void mks_obj_close(struct mks_obj *obj)
{
    if (!obj)
        return;
    for (uint32_t i = 0; i < obj->n_progs; i++) {
        free((void *)obj->progs[i].name);
        free((void *)obj->progs[i].section);
        free((void *)obj->progs[i].insns);
    }
    for (uint32_t i = 0; i < obj->n_maps; i++)
        free(obj->map_init ? obj->map_init[i] : NULL);
    free(obj->map_init);
    free(obj->map_init_len);
    free(obj->map_btf);
    free(obj->btf);
    free(obj->maps);
    free(obj->progs);
    free(obj->name);
    free(obj);
}

static const char *map_type_hint(uint32_t t)
{
    switch (t) {
    case 1: return " (Linux BPF_MAP_TYPE_HASH: use MKS_MAP_HASH)";
    case 2: return " (Linux BPF_MAP_TYPE_ARRAY: use MKS_MAP_ARRAY)";
    case 6: return " (Linux BPF_MAP_TYPE_PERCPU_ARRAY: use MKS_MAP_PERWORKER_ARRAY)";
    case 27: return " (Linux BPF_MAP_TYPE_RINGBUF: use MKS_MAP_RINGBUF)";
    default: return "";
    }
}

/* Checks one user map's declaration against what its type can hold. */
static int map_check(const char *oname, const struct mks_map_spec *m, char *err, size_t elen)
{
    const char *what = NULL;

    switch (m->type) {
    case MKS_MAP_ARRAY:
    case MKS_MAP_PERWORKER_ARRAY:
        if (m->key_size != 4)
            what = "key must be __u32 (4 bytes)";
        else if (m->value_size == 0 || m->value_size > MKS_MAP_MAX_VALUE)
            what = "value size must be 1..1 MiB";
        break;
    case MKS_MAP_HIST:
        if (m->key_size != 4)
            what = "key must be __u32 (4 bytes)";
        else if (m->value_size != sizeof(struct mks_hist))
            what = "value must be struct mks_hist";
        break;
    case MKS_MAP_HASH:
        if (m->key_size == 0 || m->key_size > MKS_MAP_MAX_KEY)
            what = "key size must be 1..512 bytes";
        else if (m->value_size == 0 || m->value_size > MKS_MAP_MAX_VALUE)
            what = "value size must be 1..1 MiB";
        break;
    case MKS_MAP_RINGBUF:
        if (m->key_size != 0 || m->value_size != 0)
            what = "a ring buffer declares no key or value, only max_entries (bytes)";
        else if (m->max_entries < 64 || (m->max_entries & (m->max_entries - 1)) != 0)
            what = "max_entries (ring bytes per worker) must be a power of two >= 64";
        break;
    default:
        return ld_err(err, elen, -EOPNOTSUPP,
                      "%s: map '%s': unsupported map type %u%s; expected MKS_MAP_ARRAY, MKS_MAP_PERWORKER_ARRAY, MKS_MAP_HASH, MKS_MAP_HIST or MKS_MAP_RINGBUF",
                      oname, m->name, m->type, map_type_hint(m->type));
    }
    if (!what && (m->max_entries == 0 || m->max_entries > MKS_MAP_MAX_ENTRIES))
        what = "max_entries must be 1..16M";
    if (what)
        return ld_err(err, elen, -EINVAL, "%s: map '%s' (key %u, value %u, max_entries %u): %s", oname, m->name,
                      m->key_size, m->value_size, m->max_entries, what);
    return 0;
}

/* Reads the object's mkscope_abi global (MKS_ABI_VERSION) from the ELF:
 * its symbol gives section and offset.  1 when the object has none. */
static int obj_abi_version(const char *oname, const uint8_t *buf, uint32_t *ver_p, char *err, size_t elen)
{
    Elf64_Ehdr eh;
    Elf64_Shdr sh, symsh, strsh;

    memcpy(&eh, buf, sizeof(eh));
    *ver_p = 1;
    for (size_t i = 0; i < eh.e_shnum; i++) {
        memcpy(&symsh, buf + eh.e_shoff + i * sizeof(sh), sizeof(sh));
        if (symsh.sh_type != SHT_SYMTAB)
            continue;
        memcpy(&strsh, buf + eh.e_shoff + (size_t)symsh.sh_link * sizeof(sh), sizeof(sh));
        for (size_t s = 0; s < symsh.sh_size / sizeof(Elf64_Sym); s++) {
            Elf64_Sym sym;
            memcpy(&sym, buf + symsh.sh_offset + s * sizeof(sym), sizeof(sym));
            if (strcmp((const char *)buf + strsh.sh_offset + sym.st_name, "mkscope_abi") != 0)
                continue;
            if (sym.st_shndx == SHN_UNDEF || sym.st_shndx >= eh.e_shnum || sym.st_size != 4)
                return ld_err(err, elen, -EINVAL, "%s: mkscope_abi must be a defined __u32; use MKS_ABI_VERSION(n)", oname);
            memcpy(&sh, buf + eh.e_shoff + (size_t)sym.st_shndx * sizeof(sh), sizeof(sh));
            if (sh.sh_type != SHT_PROGBITS)
                return ld_err(err, elen, -EINVAL, "%s: mkscope_abi has no initial value; use MKS_ABI_VERSION(n)", oname);
            uint32_t v;
            memcpy(&v, buf + sh.sh_offset + sym.st_value, sizeof(v));
            if (v == 0)
                return ld_err(err, elen, -EINVAL, "%s: mkscope_abi is 0; expected the hook ABI version (1)", oname);
            *ver_p = v;
            return 0;
        }
    }
    return 0;
}

/* Name of an internal map: libbpf prefixes the object name
 * ("count.rodata"); we keep the section name (".rodata"). */
static void map_name(struct mks_map_spec *m, const struct bpf_map *bm)
{
    const char *n = bpf_map__name(bm);
    if (bpf_map__is_internal(bm)) {
        const char *dot = strchr(n, '.');
        if (dot)
            n = dot;
    }
    snprintf(m->name, sizeof(m->name), "%s", n);
}

static int obj_extract(struct mks_obj *obj, struct bpf_object *bo, uint32_t abi, char *err, size_t elen)
{
    struct bpf_program *p;
    struct bpf_map *bm;
    uint32_t n;

    n = 0;
    bpf_object__for_each_map(bm, bo) n++;
    if (n > MKS_MAX_PROG_MAPS)
        return ld_err(err, elen, -E2BIG, "%s: %u maps (with .rodata/.data/.bss); at most %u per object", obj->name, n,
                      MKS_MAX_PROG_MAPS);
    obj->maps = calloc(n ? n : 1, sizeof(*obj->maps));
    obj->map_init = calloc(n ? n : 1, sizeof(*obj->map_init));
    obj->map_init_len = calloc(n ? n : 1, sizeof(*obj->map_init_len));
    obj->map_btf = calloc(2 * (n ? n : 1), sizeof(*obj->map_btf));
    if (!obj->maps || !obj->map_init || !obj->map_init_len || !obj->map_btf)
        return ld_err(err, elen, -ENOMEM, "%s: out of memory", obj->name);
    const struct btf *btf = bpf_object__btf(bo);
    if (btf) {
        uint32_t sz = 0;
        const void *raw = btf__raw_data(btf, &sz);
        if (raw && sz && (obj->btf = malloc(sz))) {
            memcpy(obj->btf, raw, sz);
            obj->btf_len = sz;
        }
    }
    bpf_object__for_each_map(bm, bo) {
        struct mks_map_spec *m = &obj->maps[obj->n_maps];
        uint32_t i = obj->n_maps++;
        map_name(m, bm);
        if (obj->btf) {
            obj->map_btf[2 * i] = bpf_map__btf_key_type_id(bm);
            obj->map_btf[2 * i + 1] = bpf_map__btf_value_type_id(bm);
        }
        if (bpf_map__is_internal(bm)) {
            size_t sz = 0;
            const void *init = bpf_map__initial_value(bm, &sz);
            if (strncmp(m->name, ".kconfig", 8) == 0)
                return ld_err(err, elen, -EOPNOTSUPP, "%s: extern kernel config variables (.kconfig) are not supported: monitors run on no kernel", obj->name);
            m->type = MKS_MAP_ARRAY;
            m->key_size = 4;
            m->value_size = bpf_map__value_size(bm);
            m->max_entries = 1;
            obj->map_init_len[i] = m->value_size;
            obj->map_init[i] = calloc(1, m->value_size ? m->value_size : 1);
            if (!obj->map_init[i])
                return ld_err(err, elen, -ENOMEM, "%s: out of memory", obj->name);
            if (init && sz <= m->value_size)
                memcpy(obj->map_init[i], init, sz);
            if (m->value_size == 0 || m->value_size > MKS_MAP_MAX_VALUE)
                return ld_err(err, elen, -EINVAL, "%s: section %s is %u bytes; expected 1..1 MiB", obj->name, m->name,
                              m->value_size);
            continue;
        }
        if (strlen(bpf_map__name(bm)) >= sizeof(m->name))
            return ld_err(err, elen, -ENAMETOOLONG, "%s: map name '%s' is too long; expected at most %zu characters",
                          obj->name, bpf_map__name(bm), sizeof(m->name) - 1);
        m->type = bpf_map__type(bm);
        m->key_size = bpf_map__key_size(bm);
        m->value_size = bpf_map__value_size(bm);
        m->max_entries = bpf_map__max_entries(bm);
        int rc = map_check(obj->name, m, err, elen);
        if (rc)
            return rc;
    }

    n = 0;
    bpf_object__for_each_program(p, bo) n++;
    if (n == 0)
        return ld_err(err, elen, -ENOENT, "%s: no programs; expected a function in SEC(\"mkscope/<event>\")", obj->name);
    if (n > MKS_OBJ_MAX_PROGS)
        return ld_err(err, elen, -E2BIG, "%s: %u programs; at most %u per object (the control block's program slots)",
                      obj->name, n, MKS_OBJ_MAX_PROGS);
    obj->progs = calloc(n, sizeof(*obj->progs));
    if (!obj->progs)
        return ld_err(err, elen, -ENOMEM, "%s: out of memory", obj->name);
    bpf_object__for_each_program(p, bo) {
        struct mks_obj_prog *op = &obj->progs[obj->n_progs++];
        const struct bpf_insn *in = bpf_program__insns(p);
        size_t cnt = bpf_program__insn_cnt(p);

        op->name = strdup(bpf_program__name(p));
        op->section = strdup(bpf_program__section_name(p));
        if (!op->name || !op->section)
            return ld_err(err, elen, -ENOMEM, "%s: out of memory", obj->name);
        if (mks_hook_from_section(op->section, &op->hook, &op->prog_type) != 0)
            return ld_err(err, elen, -ENOENT,
                          "%s: program '%s' in unknown section '%s'; expected mkscope/<event> or mkscope.control/<event> (event: task_ready, task_end, ...)",
                          obj->name, op->name, op->section);
        op->abi_version = abi;
        if (cnt > MKS_BPF_MAX_INSNS)
            return ld_err(err, elen, -E2BIG, "%s: program '%s' has %zu instructions with its subprograms; at most %u",
                          obj->name, op->name, cnt, MKS_BPF_MAX_INSNS);
        if (!in || cnt == 0)
            return ld_err(err, elen, -ENOEXEC, "%s: program '%s' has no instructions", obj->name, op->name);
        struct mks_insn *copy = malloc(cnt * sizeof(*copy));
        if (!copy)
            return ld_err(err, elen, -ENOMEM, "%s: out of memory", obj->name);
        _Static_assert(sizeof(struct mks_insn) == sizeof(struct bpf_insn), "insn size");
        memcpy(copy, in, cnt * sizeof(*copy));
        op->insns = copy;
        op->n_insns = (uint32_t)cnt;
    }
    return 0;
}

int mks_obj_open_mem(const void *buf, size_t len, const char *name, struct mks_obj **obj_p, char *err,
                     size_t err_len)
{
    struct bpf_object *bo = NULL;
    struct mks_obj *obj = NULL;
    libbpf_print_fn_t old_print;
    uint32_t abi = 1;
    int rc;

    if (err && err_len)
        err[0] = '\0';
    if (!obj_p || (!buf && len))
        return ld_err(err, err_len, -EINVAL, "mks_obj_open_mem: invalid arguments");
    if (!name || !name[0])
        name = "<memory>";
    if (len > MKS_OBJ_MAX_BYTES)
        return ld_err(err, err_len, -EFBIG, "%s: %zu bytes; BPF objects larger than %u bytes are refused", name, len,
                      MKS_OBJ_MAX_BYTES);
    rc = elf_check(name, buf, len, err, err_len);
    if (rc)
        return rc;
    if (elf_has_core_relos(buf, len))
        return ld_err(err, err_len, -EOPNOTSUPP,
                      "%s: CO-RE relocations (preserve_access_index, bpf_core_read) need a kernel's BTF; mkscope programs read struct mks_hook_ctx directly",
                      name);
    rc = obj_abi_version(name, buf, &abi, err, err_len);
    if (rc)
        return rc;

    obj = calloc(1, sizeof(*obj));
    if (!obj || !(obj->name = strdup(name))) {
        free(obj);
        return ld_err(err, err_len, -ENOMEM, "%s: out of memory", name);
    }

    ld_msg[0] = ld_dbg[0] = '\0';
    old_print = libbpf_set_print(ld_print);
    /* libbpf's object name only prefixes its internal map names
     * ("<name>.rodata"); without dots, the section name follows the first. */
    char oname[64];
    const char *base = strrchr(name, '/');
    snprintf(oname, sizeof(oname), "%s", base ? base + 1 : name);
    for (char *c = oname; *c; c++)
        if (*c == '.')
            *c = '_';
    LIBBPF_OPTS(bpf_object_open_opts, oopts, .object_name = oname);
    bo = bpf_object__open_mem(buf, len, &oopts);
    if (!bo) {
        rc = -errno;
        if (rc == 0)
            rc = -EINVAL;
        ld_err(err, err_len, rc, "%s: libbpf cannot open the object: %s", name, ld_reason(rc));
        goto out;
    }
    struct bpf_program *p;
    bpf_object__for_each_program(p, bo) {
        int32_t hook;
        uint32_t type;
        if (mks_hook_from_section(bpf_program__section_name(p), &hook, &type) != 0) {
            rc = ld_err(err, err_len, -ENOENT,
                        "%s: program '%s' in unknown section '%s'; expected mkscope/<event> or mkscope.control/<event> (event: task_ready, task_end, ...)",
                        name, bpf_program__name(p), bpf_program__section_name(p));
            goto out;
        }
        /* libbpf needs a Linux type to relocate; any plain one will do. */
        bpf_program__set_type(p, BPF_PROG_TYPE_SOCKET_FILTER);
    }
    LIBBPF_OPTS(gen_loader_opts, gopts);
    rc = bpf_object__gen_loader(bo, &gopts);
    if (rc) {
        ld_err(err, err_len, rc, "%s: libbpf refused offline relocation: %s", name, ld_reason(rc));
        goto out;
    }
    rc = bpf_object__load(bo);
    if (rc) {
        ld_err(err, err_len, rc, "%s: relocation failed: %s", name, ld_reason(rc));
        goto out;
    }
    rc = obj_extract(obj, bo, abi, err, err_len);
out:
    bpf_object__close(bo);
    libbpf_set_print(old_print);
    if (rc) {
        mks_obj_close(obj);
        return rc;
    }
    *obj_p = obj;
    return 0;
}

int mks_obj_open_file(const char *path, struct mks_obj **obj_p, char *err, size_t err_len)
{
    FILE *f;
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    int rc;

    if (err && err_len)
        err[0] = '\0';
    if (!path || !obj_p)
        return ld_err(err, err_len, -EINVAL, "mks_obj_open_file: invalid arguments");
    /* Non-blocking, so that a FIFO or a device does not hold us in open();
     * only a regular file is read (a FIFO's writer need never come). */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0) {
        rc = -errno;
        return ld_err(err, err_len, rc, "%s: cannot open: %s", path, strerror(-rc));
    }
    if (fstat(fd, &st) != 0) {
        rc = -errno;
        close(fd);
        return ld_err(err, err_len, rc, "%s: cannot stat: %s", path, strerror(-rc));
    }
    if (!S_ISREG(st.st_mode)) {
        rc = S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
        close(fd);
        return ld_err(err, err_len, rc, "%s: not a regular file (%s); expected a BPF object file from clang -target bpf",
                      path, S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO" :
                      S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device" : S_ISSOCK(st.st_mode) ? "a socket" : "not a file");
    }
    if ((uint64_t)st.st_size > MKS_OBJ_MAX_BYTES) {
        close(fd);
        return ld_err(err, err_len, -EFBIG, "%s: %lld bytes; BPF objects larger than %u bytes are refused", path,
                      (long long)st.st_size, MKS_OBJ_MAX_BYTES);
    }
    f = fdopen(fd, "rb");
    if (!f) {
        rc = -errno;
        close(fd);
        return ld_err(err, err_len, rc, "%s: cannot open: %s", path, strerror(-rc));
    }
    for (;;) {
        if (len == cap) {
            size_t ncap = cap ? cap * 2 : 65536;
            if (ncap > (size_t)MKS_OBJ_MAX_BYTES + 1)
                ncap = (size_t)MKS_OBJ_MAX_BYTES + 1;
            if (ncap == cap) {
                fclose(f);
                free(buf);
                return ld_err(err, err_len, -EFBIG, "%s: larger than %u bytes; not a monitor object", path,
                              MKS_OBJ_MAX_BYTES);
            }
            uint8_t *nb = realloc(buf, ncap);
            if (!nb) {
                fclose(f);
                free(buf);
                return ld_err(err, err_len, -ENOMEM, "%s: out of memory", path);
            }
            buf = nb;
            cap = ncap;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        rc = -EIO;
        fclose(f);
        free(buf);
        return ld_err(err, err_len, rc, "%s: read error", path);
    }
    fclose(f);
    rc = mks_obj_open_mem(buf, len, path, obj_p, err, err_len);
    free(buf);
    return rc;
}

uint32_t mks_obj_prog_count(const struct mks_obj *obj)
{
    return obj ? obj->n_progs : 0;
}

const struct mks_obj_prog *mks_obj_prog(const struct mks_obj *obj, uint32_t i)
{
    return obj && i < obj->n_progs ? &obj->progs[i] : NULL;
}

uint32_t mks_obj_map_count(const struct mks_obj *obj)
{
    return obj ? obj->n_maps : 0;
}

const struct mks_map_spec *mks_obj_maps(const struct mks_obj *obj)
{
    return obj ? obj->maps : NULL;
}

int mks_obj_map_init(const struct mks_obj *obj, uint32_t i, const void **data_p, size_t *len_p)
{
    if (!obj || i >= obj->n_maps)
        return -EINVAL;
    if (!obj->map_init[i])
        return -ENOENT;
    if (data_p)
        *data_p = obj->map_init[i];
    if (len_p)
        *len_p = obj->map_init_len[i];
    return 0;
}

int mks_obj_btf(const struct mks_obj *obj, const void **data_p, size_t *len_p)
{
    if (!obj)
        return -EINVAL;
    if (!obj->btf)
        return -ENOENT;
    if (data_p)
        *data_p = obj->btf;
    if (len_p)
        *len_p = obj->btf_len;
    return 0;
}

int mks_obj_map_btf(const struct mks_obj *obj, uint32_t i, uint32_t *key_type_p,
                    uint32_t *value_type_p)
{
    if (!obj || i >= obj->n_maps)
        return -EINVAL;
    if (!obj->btf || (!obj->map_btf[2 * i] && !obj->map_btf[2 * i + 1]))
        return -ENOENT;
    if (key_type_p)
        *key_type_p = obj->map_btf[2 * i];
    if (value_type_p)
        *value_type_p = obj->map_btf[2 * i + 1];
    return 0;
}

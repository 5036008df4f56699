/*
 * Loader: opens a BPF ELF object compiled by `clang -target bpf -O2 -g` from
 * C written against mkscope.bpf.h, and relocates it with libbpf without any
 * bpf() system call.  The result is, per program, its section (which names
 * the hook: "mkscope/task_end", "mkscope.control/task_ready"), type, ABI
 * version, relocated instructions and the object's maps.
 */
#ifndef MKSCOPE_LOADER_H
#define MKSCOPE_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "mkscope/ctl.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mks_obj;

struct mks_obj_prog {
    const char *name;
    const char *section;
    int32_t hook;         /* enum mks_hook_event from the section name */
    uint32_t prog_type;   /* enum mks_prog_type */
    uint32_t abi_version; /* from the object's "mkscope_abi" global, default 1 */
    const struct mks_insn *insns;
    uint32_t n_insns;
};

/* Open from a file or from memory (BPF objects sent over the wire). Errors
 * are negative errno with one line in err (bad ELF, not BPF, unknown
 * section, unsupported map type, ...). */
int mks_obj_open_file(const char *path, struct mks_obj **obj_p, char *err, size_t err_len);
int mks_obj_open_mem(const void *buf, size_t len, const char *name, struct mks_obj **obj_p,
                     char *err, size_t err_len);
void mks_obj_close(struct mks_obj *obj); /* accepts NULL */

uint32_t mks_obj_prog_count(const struct mks_obj *obj);
const struct mks_obj_prog *mks_obj_prog(const struct mks_obj *obj, uint32_t i);
uint32_t mks_obj_map_count(const struct mks_obj *obj);
const struct mks_map_spec *mks_obj_maps(const struct mks_obj *obj);

/* Initial content of map i when it stands for a global-data section
 * (.rodata, .data, .bss: an MKS_MAP_ARRAY of one entry named after the
 * section, whose value is the section).  Whoever creates the maps copies it
 * into entry 0.  -ENOENT for ordinary maps, which start zeroed. */
int mks_obj_map_init(const struct mks_obj *obj, uint32_t i, const void **data_p, size_t *len_p);

/* The object's BTF, raw (btf__new() reads it), kept from the object so that
 * its maps' contents can be decoded with the program's own types (mkscope
 * maps); -ENOENT when the object has none (built without -g). */
int mks_obj_btf(const struct mks_obj *obj, const void **data_p, size_t *len_p);
/* The BTF type ids of map i's key and value (0: not given, e.g. the key of a
 * .rodata map); -ENOENT when the map has neither. */
int mks_obj_map_btf(const struct mks_obj *obj, uint32_t i, uint32_t *key_type_p,
                    uint32_t *value_type_p);

/* Hook from a section name: "mkscope/<event>" (OBSERVE) or
 * "mkscope.control/<event>" (CONTROL). */
int mks_hook_from_section(const char *section, int32_t *hook_p, uint32_t *prog_type_p);
const char *mks_hook_event_name(uint32_t ev); /* "task_end", ... or NULL */

#ifdef __cplusplus
}
#endif

#endif /* MKSCOPE_LOADER_H */

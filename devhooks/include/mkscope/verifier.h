/*
 * Host-side verifier for mkscope programs: abstract interpretation over
 * register and stack states.  Accepts a program only if every path is safe
 * for its program type and ABI version, and computes the worst-case number of
 * instructions one invocation can execute (the program's declared cost).
 *
 * Every rejection is one line written to the caller's log:
 *   "insn 12 (r0 = *(u64 *)(r1 +136)): ctx read at offset 136 size 8 out of
 *    bounds: ABI v1 context is 128 bytes"
 * and a distinct negative return code (enum mks_verify_err).
 */
#ifndef MKSCOPE_VERIFIER_H
#define MKSCOPE_VERIFIER_H

#include <stddef.h>
#include <stdint.h>

#include "mkscope/bpf_isa.h"
#include "mkscope/ctl.h"
#include "mkscope/hook_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mks_verify_opts {
    size_t sz;                 /* sizeof(struct mks_verify_opts) */
    uint32_t prog_type;        /* enum mks_prog_type */
    uint32_t abi_version;      /* ABI the program declares */
    int32_t hook;              /* enum mks_hook_event, or -1 for "any" */
    const struct mks_map_spec *maps; /* maps referenced by index */
    uint32_t n_maps;
    const uint64_t *allowed_helpers; /* NULL: the program type's default set */
    uint32_t n_allowed_helpers;
};

struct mks_verify_result {
    uint64_t cost;       /* worst-case instructions per invocation */
    uint32_t n_insns;
    uint32_t states;     /* states explored (for reporting) */
};

/* Returns 0 when accepted, a negative code when rejected (log holds the
 * reason, NUL-terminated, truncated to log_len). */
int mks_verify(const struct mks_insn *insns, uint32_t n_insns, const struct mks_verify_opts *opts,
               struct mks_verify_result *res, char *log, size_t log_len);

/* Disassemble one instruction (for logs and `mkscope verify`). */
int mks_insn_disasm(const struct mks_insn *insns, uint32_t n_insns, uint32_t idx, char *buf,
                    size_t len);

#ifdef __cplusplus
}
#endif

#endif /* MKSCOPE_VERIFIER_H */

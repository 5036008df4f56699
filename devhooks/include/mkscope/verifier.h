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
#include <stdio.h>

#include "mkscope/bpf_isa.h"
#include "mkscope/ctl.h"
#include "mkscope/hook_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Rejection codes: mks_verify() returns the negated value.  They lie above
 * errno values so a caller can tell "rejected" from "could not run". */
enum mks_verify_err {
    MKS_VERR_BASE = 4000,
    MKS_VERR_EMPTY,         /* no instructions */
    MKS_VERR_TOO_LONG,      /* more than MKS_BPF_MAX_INSNS */
    MKS_VERR_OPCODE,        /* unknown opcode or reserved field set */
    MKS_VERR_REG,           /* register number out of range, or r10 written */
    MKS_VERR_LDIMM64,       /* malformed 64-bit immediate load */
    MKS_VERR_JUMP_RANGE,    /* jump or call target outside the program */
    MKS_VERR_JUMP_MIDDLE,   /* jump or call into the second half of a ld_imm64 */
    MKS_VERR_UNREACHABLE,   /* instruction no path reaches */
    MKS_VERR_LOOP,          /* loop without a bound the verifier sees, or recursion */
    MKS_VERR_FALLTHROUGH,   /* function runs off its end */
    MKS_VERR_UNINIT_REG,    /* read of an uninitialised register */
    MKS_VERR_UNINIT_STACK,  /* read of uninitialised stack bytes */
    MKS_VERR_STACK_BOUNDS,  /* stack access outside the 512-byte frame */
    MKS_VERR_CTX_ACCESS,    /* context access outside the ABI's fields */
    MKS_VERR_CTX_WRITE,     /* store to the read-only context */
    MKS_VERR_MAP_BOUNDS,    /* map value access outside the value */
    MKS_VERR_MAP_NULL,      /* map value used before its null check */
    MKS_VERR_MAP_WRITE,     /* write to a map the program may not write */
    MKS_VERR_MAP_REF,       /* bad map index, map type not valid for the use */
    MKS_VERR_HELPER,        /* helper unknown or not allowed for the program type */
    MKS_VERR_HELPER_ARG,    /* helper argument of the wrong type or size */
    MKS_VERR_PTR_ARITH,     /* arithmetic on a pointer that is not allowed */
    MKS_VERR_PTR_LEAK,      /* pointer stored to a map or returned */
    MKS_VERR_MEM_ACCESS,    /* memory access through a non-pointer or bad size */
    MKS_VERR_R0_EXIT,       /* r0 unset, a pointer, or out of range at exit */
    MKS_VERR_HOOK,          /* program type not allowed at this hook */
    MKS_VERR_CALL_DEPTH,    /* local calls nested deeper than MKS_BPF_MAX_FRAMES */
    MKS_VERR_COMPLEXITY,    /* too many states to explore */
    MKS_VERR_ABI,           /* unknown ABI version or program type */
    MKS_VERR_DIV_ZERO,      /* division by constant zero, bad shift */
    MKS_VERR_INTERNAL,      /* verifier bug */
    MKS_VERR_PTR_CMP,       /* pointer in a conditional jump other than a null test */
};

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

/* Disassemble one instruction (for logs and `mkscope verify`).  Returns the
 * length written (snprintf-like) or -EINVAL. */
int mks_insn_disasm(const struct mks_insn *insns, uint32_t n_insns, uint32_t idx, char *buf,
                    size_t len);

/* Name of a helper id ("mks_map_lookup"), or NULL if unknown. */
const char *mks_helper_name(int32_t id);

/* `mkscope verify [-v] OBJ...`: open each BPF object, verify every program
 * for its section's hook and type, print one verdict per program (or its
 * rejection line).  argv[0] is the command name.  Returns the exit status:
 * 0 all accepted, 1 a program rejected, 2 usage or file error. */
int mks_cmd_verify(int argc, char **argv, FILE *out, FILE *err);

#ifdef __cplusplus
}
#endif

#endif /* MKSCOPE_VERIFIER_H */

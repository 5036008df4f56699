/*
 * The mkscope eBPF interpreter (RFC 9669), one source for the CPU backend and
 * the device.
 *
 * A run executes one program against one environment: the instructions, the
 * memory regions it may touch (its stack frames, the read-only context, the
 * map arena, an optional extra region), the maps it references and an
 * instruction limit.  Every load and store is checked against those regions
 * and every instruction is counted, so a program that slipped past the
 * verifier still cannot touch the megakernel's memory or run forever: the run
 * stops with a distinct negative code (enum mks_vm_err), which the runtime
 * counts as "lost" in coverage.
 *
 * Division by zero is not an error (RFC 9669: the quotient is 0, the
 * remainder leaves the dividend unchanged).
 */
#ifndef MKSCOPE_VM_H
#define MKSCOPE_VM_H

#include <stdint.h>

#include "mkscope/bpf_isa.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mks_maps;

/* Run-time guard failures.  Distinct from negative errno so a caller can tell
 * a guard from a helper's own error code. */
enum mks_vm_err {
    MKS_VM_OK = 0,
    MKS_VM_EMEM = -1001,    /* load/store outside every allowed region */
    MKS_VM_ELIMIT = -1002,  /* instruction limit reached */
    MKS_VM_EINSN = -1003,   /* unknown or malformed instruction */
    MKS_VM_EJUMP = -1004,   /* jump or fall-through outside the program */
    MKS_VM_ECALL = -1005,   /* unknown helper, bad map handle, call depth */
    MKS_VM_EALIGN = -1006,  /* misaligned atomic */
    MKS_VM_EARG = -1007,    /* bad environment */
};

/* flags */
#define MKS_VM_F_UNWIND_HELPER 0x1u /* helper 5 is the conformance "unwind" */

/* Extra memory a run may read (and write when writable is set). */
struct mks_vm_region {
    uint64_t base;
    uint64_t len;
    uint32_t writable;
};

struct mks_vm_env {
    const struct mks_insn *insns;
    uint32_t n_insns;
    uint32_t flags;          /* MKS_VM_F_* */
    uint64_t insn_limit;     /* 0: no limit */
    const void *ctx;         /* read-only context, r1 at entry for hooks */
    uint32_t ctx_len;
    uint32_t n_maps;         /* program map index -> map id */
    const uint32_t *map_ids;
    struct mks_maps *maps;   /* may be NULL when the program uses no maps */
    struct mks_vm_region extra; /* len 0: none */
};

/* Execute from instruction 0 with r1, r2 as given and r10 at the top of a
 * fresh 512-byte frame.  On success returns 0 and writes r0 to *r0_p; returns
 * a negative enum mks_vm_err otherwise.  *insns_p (optional) receives the
 * number of instructions executed in either case (the limit when the limit
 * stopped the run). */
int mks_vm_run(const struct mks_vm_env *env, uint64_t r1, uint64_t r2, uint64_t *r0_p,
               uint64_t *insns_p);

/* The decoded form the device runs (devhooks/src/vm_decoded.c): one 8-byte
 * instruction per raw slot, the operation class resolved, jump and call
 * targets absolute.  mks_vm_decode() writes n of them (n < 65535, else
 * MKS_VM_EARG); it accepts any text: what the VM would refuse decodes to an
 * instruction that stops the run with the same error when reached.
 * mks_vm_run_decoded() runs such text (env->insns points at it, n_insns as
 * decoded) with mks_vm_run()'s guards, answers and counts. */
struct mks_dinsn {
    uint8_t op;
    uint8_t regs;
    uint16_t aux;
    int32_t imm;
};
int mks_vm_decode(const struct mks_insn *insns, uint32_t n, struct mks_dinsn *out);
int mks_vm_run_decoded(const struct mks_vm_env *env, uint64_t r1, uint64_t r2, uint64_t *r0_p,
                       uint64_t *insns_p);

/* Short text for an enum mks_vm_err ("memory access out of bounds", ...). */
const char *mks_vm_strerror(int err);

#ifdef __cplusplus
}
#endif

#endif /* MKSCOPE_VM_H */

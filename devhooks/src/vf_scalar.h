/*
 * The verifier's abstract domain for scalars (vf_scalar.c): what the
 * verifier knows about the value of a register that holds a number.
 *
 * Four intervals and a bit pattern, all of which hold at once:
 *   umin..umax   the 64-bit value, unsigned
 *   smin..smax   the 64-bit value, signed
 *   u32min..     the low 32 bits, unsigned
 *   s32min..     the low 32 bits, signed
 *   tv, tm       a tristate number: bits set in tm are unknown, the others
 *                are the bits of tv (tv & tm == 0)
 * A value is possible when it lies in all of them.  Each operation computes
 * every part from the operands' parts by its own sound rule, then
 * vfs_sync() tightens each part from the others.
 *
 * The contract, checked by tests/devhooks/vf_scalar_test.c against the VM
 * on every ALU opcode: for operands the abstract values contain, the VM's
 * result is contained in the abstract result (and a branch refinement
 * keeps every value consistent with the branch outcome).  Semantics are
 * the VM's: shift counts masked with 31 or 63, x/0 = 0, x%0 = x, signed
 * INT_MIN/-1 = INT_MIN and INT_MIN%-1 = 0, 32-bit results zero-extended,
 * `le` truncating, `be` and ALU64 `bswap` swapping.
 */
#ifndef MKS_VF_SCALAR_H
#define MKS_VF_SCALAR_H

#include <stdbool.h>
#include <stdint.h>

struct vf_scalar {
    uint64_t umin, umax;
    int64_t smin, smax;
    uint32_t u32min, u32max;
    int32_t s32min, s32max;
    uint64_t tv, tm;
};

void vfs_unknown(struct vf_scalar *r);
void vfs_const(struct vf_scalar *r, uint64_t c);
/* The value of a load of `size` bytes (1, 2, 4, 8), sign-extended when sx. */
void vfs_width(struct vf_scalar *r, uint32_t size, bool sx);
/* Values in [lo, hi] unsigned. */
void vfs_urange(struct vf_scalar *r, uint64_t lo, uint64_t hi);

bool vfs_is_const(const struct vf_scalar *r);
/* x is a possible value of r. */
bool vfs_contains(const struct vf_scalar *r, uint64_t x);
/* Every value of s is a value of t. */
bool vfs_covers(const struct vf_scalar *t, const struct vf_scalar *s);
/* s becomes a value that covers both s and t. */
void vfs_join(struct vf_scalar *s, const struct vf_scalar *t);
/* Tightens every part from the others; false when no value is possible. */
bool vfs_sync(struct vf_scalar *r);

/* dst = dst <op> src for the ALU or ALU64 instruction (code, off, imm):
 * src is the source register's value for the X form, unused for K.  The
 * caller has refused division by constant 0 and constant shifts out of
 * range (the result is still sound for them). */
void vfs_alu(uint8_t code, int16_t off, int32_t imm, struct vf_scalar *dst, const struct vf_scalar *src);

/* Narrows a and b to the values for which the conditional jump (code, imm;
 * b is the source register's value for the X form, else ignored and left
 * alone) goes the way `taken` says.  Returns false when no such values
 * exist (that side of the branch cannot happen).  JSET narrows only with a
 * constant. */
bool vfs_branch(uint8_t code, int32_t imm, bool taken, struct vf_scalar *a, struct vf_scalar *b);

#endif /* MKS_VF_SCALAR_H */

/*
 * Verifier rejections: each case is a small hand-assembled program that must
 * be refused with its own code and a message naming the instruction, what was
 * found and what was expected.  One cmocka test per case, named after it.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mkscope/verifier.h"
#include "verifier_insn.h"

#define OBS MKS_PROG_OBSERVE
#define CTL MKS_PROG_CONTROL
#define END MKS_EV_TASK_END
#define RDY MKS_EV_TASK_READY

struct rcase {
    const char *name;
    const struct mks_insn *insns;
    uint32_t n;
    uint32_t type;
    int32_t hook;
    int code;        /* enum mks_verify_err */
    const char *msg; /* substring the log line must contain */
    const char *msg2; /* and this one, when set */
};

#define P(...) (const struct mks_insn[]){__VA_ARGS__}, \
               (uint32_t)(sizeof((const struct mks_insn[]){__VA_ARGS__}) / sizeof(struct mks_insn))
#define ADD MKS_BPF_ADD
#define HLP(h) CALL(MKS_HELPER_##h)

static const struct rcase cases[] = {
    /* decoding */
    {"unknown_alu_opcode", P(VI(0xff, 0, 0, 0, 0), MOV_IMM(0, 0), EXIT()), OBS, END, MKS_VERR_OPCODE,
     "insn 0 (", "unknown opcode 0xff"},
    {"unknown_jmp_opcode", P(VI(0xe5, 0, 0, 0, 0), MOV_IMM(0, 0), EXIT()), OBS, END, MKS_VERR_OPCODE,
     "insn 0 (", "unknown opcode 0xe5"},
    {"reserved_src_field", P(VI(0x07, 1, 2, 0, 1), MOV_IMM(0, 0), EXIT()), OBS, END, MKS_VERR_OPCODE,
     "reserved field set (src_reg 2", "expected zero in unused fields"},
    {"legacy_packet_load", P(VI(0x20, 0, 0, 0, 0), EXIT()), OBS, END, MKS_VERR_OPCODE, "unknown opcode 0x20",
     "legacy packet load"},
    {"atomic_unknown_op", P(MOV_IMM(1, 1), ATOMIC(DW, 10, 1, -8, 0x10), MOV_IMM(0, 0), EXIT()), OBS, END,
     MKS_VERR_OPCODE, "insn 1 (", "unknown atomic operation 0x10"},
    {"register_r11", P(MOV_IMM(11, 0), MOV_IMM(0, 0), EXIT()), OBS, END, MKS_VERR_REG,
     "r11 does not exist; expected r0..r10", NULL},
    {"write_r10", P(MOV_IMM(10, 0), MOV_IMM(0, 0), EXIT()), OBS, END, MKS_VERR_REG, "insn 0 (r10 = 0): write to r10",
     "read-only"},
    {"ldimm64_last", P(MOV_IMM(0, 0), VI(0x18, 1, 0, 0, 0)), OBS, END, MKS_VERR_LDIMM64,
     "insn 1 (", "ld_imm64 is the last instruction"},
    {"ldimm64_bad_second_half", P(VI(0x18, 1, 0, 0, 5), VI(0x07, 0, 0, 0, 0), MOV_IMM(0, 0), EXIT()), OBS, END,
     MKS_VERR_LDIMM64, "second half of ld_imm64 has code 0x07", NULL},
    {"ldimm64_kernel_map_fd", P(VI(0x18, 1, 1, 0, 3), VI(0, 0, 0, 0, 0), MOV_IMM(0, 0), EXIT()), OBS, END,
     MKS_VERR_LDIMM64, "ld_imm64 with src_reg 1", "expected 0, 5 (map index) or 6 (map value)"},

    /* control flow */
    {"jump_past_end", P(MOV_IMM(0, 0), JA(5), EXIT()), OBS, END, MKS_VERR_JUMP_RANGE,
     "insn 1 (goto +5): jump target 7 is outside the program; expected 0..2", NULL},
    {"jump_before_start", P(JA(-2), MOV_IMM(0, 0), EXIT()), OBS, END, MKS_VERR_JUMP_RANGE,
     "jump target -1 is outside the program", NULL},
    {"call_past_end", P(CALL_LOCAL(10), MOV_IMM(0, 0), EXIT()), OBS, END, MKS_VERR_JUMP_RANGE,
     "insn 0 (call pc+10): call target 11 is outside the program", NULL},
    {"jump_into_ldimm64", P(JA(1), LD64(1, 1, 0), MOV_IMM(0, 0), EXIT()), OBS, END, MKS_VERR_JUMP_MIDDLE,
     "jump target 2 is the second half of a ld_imm64", NULL},
    {"unreachable_code", P(MOV_IMM(0, 0), EXIT(), MOV_IMM(0, 1), EXIT()), OBS, END, MKS_VERR_UNREACHABLE,
     "insn 2 (r0 = 1): unreachable instruction", "remove dead code"},
    {"loop_without_exit", P(MOV_IMM(0, 0), JMP_IMM(MKS_BPF_JEQ, 0, 0, -1), EXIT()), OBS, END, MKS_VERR_LOOP,
     "insn 1 (if r0 == 0 goto -1): loop back to insn 1 still running after 32768 instructions",
     "expected a bound the verifier can see"},
    {"loop_bound_unknown",
     P(LDX(W, 2, 1, CTX_STEP), MOV_IMM(3, 0), ALU64_IMM(ADD, 3, 1), JMP_REG(MKS_BPF_JLT, 3, 2, -2), MOV_IMM(0, 0),
       EXIT()),
     OBS, END, MKS_VERR_LOOP, "insn 3 (if r3 < r2 goto -2): loop back to insn 2 still running", NULL},
    {"loop_counter_reset",
     P(MOV_IMM(3, 0), ALU64_IMM(ADD, 3, 1), MOV_IMM(3, 0), JMP_IMM(MKS_BPF_JLT, 3, 10, -3), MOV_IMM(0, 0), EXIT()),
     OBS, END, MKS_VERR_LOOP, "insn 3 (if r3 < 10 goto -3): loop back to insn 1 still running", NULL},
    {"falls_off_end", P(MOV_IMM(0, 0)), OBS, END, MKS_VERR_FALLTHROUGH,
     "insn 0 (r0 = 0): execution continues past the last instruction", NULL},
    {"falls_into_next_function",
     P(CALL_LOCAL(2), CALL_LOCAL(2), EXIT(), MOV_IMM(0, 1), MOV_IMM(0, 2), EXIT()), OBS, END,
     MKS_VERR_FALLTHROUGH, "insn 3 (r0 = 1): function ends without exit and falls into the function at insn 4",
     NULL},
    {"jump_into_other_function", P(CALL_LOCAL(2), JA(1), EXIT(), MOV_IMM(0, 1), EXIT()), OBS, END,
     MKS_VERR_JUMP_RANGE, "jump to insn 3 in another function", NULL},
    {"recursion", P(CALL_LOCAL(1), EXIT(), CALL_LOCAL(-1), EXIT()), OBS, END, MKS_VERR_LOOP,
     "insn 2 (call pc-1): recursive call to the function at insn 2", NULL},
    {"call_depth",
     P(CALL_LOCAL(1), EXIT(), CALL_LOCAL(1), EXIT(), CALL_LOCAL(1), EXIT(), CALL_LOCAL(1), EXIT(), CALL_LOCAL(1),
       EXIT(), CALL_LOCAL(1), EXIT(), CALL_LOCAL(1), EXIT(), CALL_LOCAL(1), EXIT(), CALL_LOCAL(1), EXIT(),
       MOV_IMM(0, 0), EXIT()),
     OBS, END, MKS_VERR_CALL_DEPTH, "local calls nested 9 deep; expected at most 8 frames", NULL},

    /* registers */
    {"uninit_register", P(MOV_REG(0, 2), EXIT()), OBS, END, MKS_VERR_UNINIT_REG,
     "insn 0 (r0 = r2): r2 is read before it is written", NULL},
    {"uninit_branch_register", P(JMP_IMM(MKS_BPF_JEQ, 3, 0, 1), MOV_IMM(0, 0), MOV_IMM(0, 1), EXIT()), OBS, END,
     MKS_VERR_UNINIT_REG, "r3 is read before it is written", NULL},
    {"helper_clobbers_r1", P(HLP(TIME_NS), MOV_REG(0, 1), EXIT()), OBS, END, MKS_VERR_UNINIT_REG,
     "insn 1 (r0 = r1): r1 is read before it is written", NULL},
    {"r0_unset", P(EXIT()), OBS, END, MKS_VERR_R0_EXIT, "insn 0 (exit): r0 is not set at exit", NULL},
    {"r0_unset_on_one_path", P(LDX(W, 2, 1, CTX_STEP), JMP_IMM(MKS_BPF_JEQ, 2, 0, 1), MOV_IMM(0, 0), EXIT()),
     OBS, END, MKS_VERR_R0_EXIT, "insn 3 (exit): r0 is not set at exit", NULL},
    {"subprog_r0_unset", P(CALL_LOCAL(1), EXIT(), EXIT()), OBS, END, MKS_VERR_R0_EXIT,
     "insn 2 (exit): r0 is not set at subprogram exit", NULL},

    /* stack */
    {"uninit_stack", P(LDX(DW, 0, 10, -8), EXIT()), OBS, END, MKS_VERR_UNINIT_STACK,
     "load reads 8 bytes at fp-8 but fp-8 was never written", NULL},
    {"partly_init_stack", P(ST(W, 10, -8, 0), LDX(DW, 0, 10, -8), EXIT()), OBS, END, MKS_VERR_UNINIT_STACK,
     "but fp-4 was never written", NULL},
    {"stack_below_frame", P(MOV_IMM(1, 0), STX(DW, 10, 1, -520), MOV_IMM(0, 0), EXIT()), OBS, END,
     MKS_VERR_STACK_BOUNDS, "stack access of 8 bytes at fp-520 outside the frame; expected within fp-512..fp-1",
     NULL},
    {"stack_above_frame", P(ST(W, 10, 0, 1), MOV_IMM(0, 0), EXIT()), OBS, END, MKS_VERR_STACK_BOUNDS,
     "stack access of 4 bytes at fp0 outside the frame", NULL},
    {"stack_variable_offset",
     P(LDX(W, 2, 1, CTX_STEP), ALU64_IMM(MKS_BPF_AND, 2, 7), MOV_REG(3, 10), ALU64_REG(ADD, 3, 2), ST(B, 3, -8, 0),
       MOV_IMM(0, 0), EXIT()),
     OBS, END, MKS_VERR_STACK_BOUNDS, "insn 4 (", "stack access at a variable offset"},
    {"pointer_bytes_after_partial_overwrite", P(STX(DW, 10, 1, -8), ST(W, 10, -8, 0), LDX(W, 0, 10, -4), EXIT()),
     OBS, END, MKS_VERR_UNINIT_STACK, "insn 2 (", "but fp-4 was never written"},
    {"partial_read_of_spilled_pointer", P(STX(DW, 10, 1, -8), LDX(W, 0, 10, -8), EXIT()), OBS, END,
     MKS_VERR_MEM_ACCESS, "partial read of a pointer spilled at fp-8", NULL},

    /* context */
    {"ctx_past_end", P(LDX(DW, 0, 1, 128), EXIT()), OBS, END, MKS_VERR_CTX_ACCESS,
     "context read at offset 128 size 8 out of bounds; expected within the ABI v1 context (128 bytes)", NULL},
    {"ctx_reserved_field", P(LDX(DW, 0, 1, 120), EXIT()), OBS, END, MKS_VERR_CTX_ACCESS,
     "touches reserved bytes 120..127; expected a declared field of ABI v1", NULL},
    {"ctx_negative_offset", P(LDX(W, 0, 1, -4), EXIT()), OBS, END, MKS_VERR_CTX_ACCESS,
     "context read at offset -4 size 4 out of bounds", NULL},
    {"ctx_misaligned", P(LDX(W, 0, 1, 2), EXIT()), OBS, END, MKS_VERR_CTX_ACCESS,
     "misaligned context read at offset 2 size 4", NULL},
    {"ctx_variable_offset",
     P(LDX(W, 2, 1, CTX_STEP), ALU64_IMM(MKS_BPF_AND, 2, 7), ALU64_REG(ADD, 1, 2), LDX(W, 0, 1, 0), EXIT()), OBS,
     END, MKS_VERR_CTX_ACCESS, "context access at a variable offset", NULL},
    {"ctx_store_observe", P(ST(W, 1, CTX_STEP, 5), MOV_IMM(0, 0), EXIT()), OBS, END, MKS_VERR_CTX_WRITE,
     "write to the context at offset 40; expected no stores: the context is read-only", NULL},
    {"ctx_store_control", P(ST(W, 1, CTX_STEP, 5), MOV_IMM(0, 0), EXIT()), CTL, RDY, MKS_VERR_CTX_WRITE,
     "write to the context at offset 40", NULL},
    {"ctx_store_register", P(MOV_IMM(2, 1), STX(DW, 1, 2, CTX_T_NOW), MOV_IMM(0, 0), EXIT()), OBS, END,
     MKS_VERR_CTX_WRITE, "insn 1 (*(u64 *)(r1 +80) = r2): write to the context at offset 80", NULL},
    {"ctx_atomic", P(MOV_IMM(2, 1), ATOMIC(DW, 1, 2, CTX_T_NOW, ADD), MOV_IMM(0, 0), EXIT()), OBS, END,
     MKS_VERR_CTX_WRITE, "atomic operation on the context", NULL},

    /* maps */
    {"map_value_before_null_check", P(LOOKUP_ARR0, LDX(DW, 0, 0, 0), EXIT()), OBS, END, MKS_VERR_MAP_NULL,
     "insn 6 (r0 = *(u64 *)(r0 +0)): r0 may be NULL (mks_map_lookup of map 'arr' at insn 5)",
     "expected a null check"},
    {"map_null_pointer_arith", P(LOOKUP_ARR0, ALU64_IMM(ADD, 0, 8), MOV_IMM(0, 0), EXIT()), OBS, END,
     MKS_VERR_MAP_NULL, "arithmetic on r0 which may be NULL", NULL},
    {"map_null_branch_deref", P(LOOKUP_ARR0, JMP_IMM(MKS_BPF_JNE, 0, 0, 1), LDX(DW, 1, 0, 0), MOV_IMM(0, 0), EXIT()),
     OBS, END, MKS_VERR_MEM_ACCESS, "insn 7 (", "r0 is a scalar, not a pointer"},
    {"map_value_const_oob", P(LOOKUP_ARR0, JMP_IMM(MKS_BPF_JEQ, 0, 0, 1), LDX(DW, 1, 0, 16), MOV_IMM(0, 0), EXIT()),
     OBS, END, MKS_VERR_MAP_BOUNDS,
     "access of 8 bytes at offset 16..16 of map 'arr' value out of bounds; expected within its 16-byte value",
     NULL},
    {"map_value_var_oob",
     P(MOV_REG(6, 1), LOOKUP_ARR0, JMP_IMM(MKS_BPF_JEQ, 0, 0, 4), LDX(W, 2, 6, CTX_TASK_CLASS),
       ALU64_IMM(MKS_BPF_AND, 2, 255), ALU64_REG(ADD, 0, 2), LDX(DW, 1, 0, 0), MOV_IMM(0, 0), EXIT()),
     OBS, END, MKS_VERR_MAP_BOUNDS, "insn 11 (", "offset 0..255 of map 'arr' value out of bounds"},
    {"map_value_off_by_one_check",
     P(MOV_REG(6, 1), LOOKUP_ARR0, JMP_IMM(MKS_BPF_JEQ, 0, 0, 4), LDX(W, 2, 6, CTX_TASK_CLASS),
       JMP_IMM(MKS_BPF_JGT, 2, 9, 2), ALU64_REG(ADD, 0, 2), LDX(DW, 1, 0, 0), MOV_IMM(0, 0), EXIT()),
     OBS, END, MKS_VERR_MAP_BOUNDS, "offset 0..9 of map 'arr' value out of bounds", NULL},
    /* Two paths join with r3 = 0 (explored first) and r3 = 100: the join must
     * not prune the second, since r3 becomes a pointer offset. */
    {"join_keeps_offset_range",
     P(MOV_REG(6, 1), LOOKUP_ARR0, JMP_IMM(MKS_BPF_JEQ, 0, 0, 7), LDX(W, 2, 6, CTX_STEP), MOV_IMM(3, 0),
       JMP_IMM(MKS_BPF_JEQ, 2, 7, 1), JA(1), MOV_IMM(3, 100), ALU64_REG(ADD, 0, 3), LDX(DW, 1, 0, 0), MOV_IMM(0, 0),
       EXIT()),
     OBS, END, MKS_VERR_MAP_BOUNDS, "insn 14 (", "offset 100..100 of map 'arr' value out of bounds"},
    /* The same through a spill: the offset goes to the stack and back. */
    {"join_keeps_spilled_offset_range",
     P(MOV_REG(6, 1), LOOKUP_ARR0, JMP_IMM(MKS_BPF_JEQ, 0, 0, 9), LDX(W, 2, 6, CTX_STEP), MOV_IMM(3, 0),
       JMP_IMM(MKS_BPF_JEQ, 2, 7, 1), JA(1), MOV_IMM(3, 100), STX(DW, 10, 3, -8), LDX(DW, 4, 10, -8),
       ALU64_REG(ADD, 0, 4), LDX(DW, 1, 0, 0), MOV_IMM(0, 0), EXIT()),
     OBS, END, MKS_VERR_MAP_BOUNDS, "insn 16 (", "offset 100..100 of map 'arr' value out of bounds"},
    /* ... and through a branch: r3 decides whether the access happens. */
    {"join_keeps_branch_range",
     P(MOV_REG(6, 1), LOOKUP_ARR0, JMP_IMM(MKS_BPF_JEQ, 0, 0, 7), LDX(W, 2, 6, CTX_STEP), MOV_IMM(3, 0),
       JMP_IMM(MKS_BPF_JEQ, 2, 7, 1), JA(1), MOV_IMM(3, 100), JMP_IMM(MKS_BPF_JLT, 3, 50, 1), LDX(DW, 1, 0, 16),
       MOV_IMM(0, 0), EXIT()),
     OBS, END, MKS_VERR_MAP_BOUNDS, "insn 14 (", "offset 16..16 of map 'arr' value out of bounds"},
    {"rodata_write", P(LD_MAPVAL(1, M_RODATA, 0), ST(DW, 1, 0, 1), MOV_IMM(0, 0), EXIT()), OBS, END,
     MKS_VERR_MAP_WRITE, "write to read-only map '.rodata'", NULL},
    {"control_map_write", P(LOOKUP_ARR0, JMP_IMM(MKS_BPF_JEQ, 0, 0, 1), ST(DW, 0, 0, 1), MOV_IMM(0, 0), EXIT()), CTL,
     RDY, MKS_VERR_MAP_WRITE, "write to map 'arr' by a CONTROL program", "acts only through r0"},
    {"control_atomic",
     P(LOOKUP_ARR0, JMP_IMM(MKS_BPF_JEQ, 0, 0, 2), MOV_IMM(1, 1), ATOMIC(DW, 0, 1, 0, ADD), MOV_IMM(0, 0), EXIT()),
     CTL, RDY, MKS_VERR_MAP_WRITE, "atomic operation in a CONTROL program", NULL},
    {"map_index_out_of_range", P(LD_MAP(1, 9), MOV_IMM(0, 0), EXIT()), OBS, END, MKS_VERR_MAP_REF,
     "reference to map 9; expected a map index below 6", NULL},
    {"direct_value_of_plain_map", P(LD_MAPVAL(1, M_ARR, 0), MOV_IMM(0, 0), EXIT()), OBS, END, MKS_VERR_MAP_REF,
     "direct value address of map 'arr'", NULL},
    {"lookup_on_ringbuf",
     P(ST(W, 10, -4, 0), LD_MAP(1, M_RING), MOV_REG(2, 10), ALU64_IMM(ADD, 2, -4), HLP(MAP_LOOKUP), MOV_IMM(0, 0),
       EXIT()),
     OBS, END, MKS_VERR_MAP_REF, "mks_map_lookup on ring buffer map 'ring'", NULL},
    {"hist_add_on_array",
     P(ST(W, 10, -4, 0), LD_MAP(1, M_ARR), MOV_REG(2, 10), ALU64_IMM(ADD, 2, -4), MOV_IMM(3, 1), HLP(HIST_ADD),
       MOV_IMM(0, 0), EXIT()),
     OBS, END, MKS_VERR_MAP_REF, "mks_hist_add on map 'arr' of type ARRAY; expected an MKS_MAP_HIST map", NULL},
    {"deref_map_reference", P(LD_MAP(1, M_ARR), LDX(DW, 0, 1, 0), EXIT()), OBS, END, MKS_VERR_MEM_ACCESS,
     "r1 is a reference to map 'arr', not its value", NULL},
    {"deref_scalar", P(MOV_IMM(1, 64), LDX(DW, 0, 1, 0), EXIT()), OBS, END, MKS_VERR_MEM_ACCESS,
     "r1 is a scalar, not a pointer", NULL},

    /* helpers */
    {"unknown_helper", P(CALL(5), MOV_IMM(0, 0), EXIT()), OBS, END, MKS_VERR_HELPER,
     "insn 0 (call #5): unknown helper 5", NULL},
    {"control_map_update",
     P(ST(DW, 10, -8, 0), LD_MAP(1, M_HASH), MOV_REG(2, 10), ALU64_IMM(ADD, 2, -8), MOV_REG(3, 10),
       ALU64_IMM(ADD, 3, -8), MOV_IMM(4, 0), HLP(MAP_UPDATE), MOV_IMM(0, 0), EXIT()),
     CTL, RDY, MKS_VERR_HELPER, "mks_map_update (helper 2) is not allowed in a CONTROL program", NULL},
    {"control_ringbuf_output",
     P(ST(DW, 10, -8, 0), LD_MAP(1, M_RING), MOV_REG(2, 10), ALU64_IMM(ADD, 2, -8), MOV_IMM(3, 8), MOV_IMM(4, 0),
       HLP(RINGBUF_OUTPUT), MOV_IMM(0, 0), EXIT()),
     CTL, RDY, MKS_VERR_HELPER, "mks_ringbuf_output (helper 105) is not allowed in a CONTROL program", NULL},
    {"lookup_map_arg_scalar",
     P(ST(W, 10, -4, 0), MOV_IMM(1, 0), MOV_REG(2, 10), ALU64_IMM(ADD, 2, -4), HLP(MAP_LOOKUP), MOV_IMM(0, 0),
       EXIT()),
     OBS, END, MKS_VERR_HELPER_ARG, "mks_map_lookup: r1 is a scalar; expected a map reference", NULL},
    {"lookup_key_uninit",
     P(LD_MAP(1, M_ARR), MOV_REG(2, 10), ALU64_IMM(ADD, 2, -4), HLP(MAP_LOOKUP), MOV_IMM(0, 0), EXIT()), OBS, END,
     MKS_VERR_UNINIT_STACK, "mks_map_lookup key r2 reads 4 bytes at fp-4 but fp-4 was never written", NULL},
    {"lookup_key_scalar", P(LD_MAP(1, M_ARR), MOV_IMM(2, 0), HLP(MAP_LOOKUP), MOV_IMM(0, 0), EXIT()), OBS, END,
     MKS_VERR_HELPER_ARG, "mks_map_lookup key r2: r2 is a scalar, not a pointer", NULL},
    {"lookup_key_too_short",
     P(ST(W, 10, -4, 0), LD_MAP(1, M_HASH), MOV_REG(2, 10), ALU64_IMM(ADD, 2, -4), HLP(MAP_LOOKUP), MOV_IMM(0, 0),
       EXIT()),
     OBS, END, MKS_VERR_STACK_BOUNDS, "stack access of 8 bytes at fp-4 outside the frame", NULL},
    {"ringbuf_size_unbounded",
     P(LDX(DW, 3, 1, CTX_VALUE), MOV_REG(2, 1), LD_MAP(1, M_RING), MOV_IMM(4, 0), HLP(RINGBUF_OUTPUT),
       MOV_IMM(0, 0), EXIT()),
     OBS, END, MKS_VERR_HELPER_ARG, "size r3 may be up to 18446744073709551615; expected a bounded size", NULL},
    {"ringbuf_size_may_be_zero",
     P(LDX(W, 3, 1, CTX_STEP), ALU64_IMM(MKS_BPF_AND, 3, 15), MOV_REG(2, 1), LD_MAP(1, M_RING), MOV_IMM(4, 0),
       HLP(RINGBUF_OUTPUT), MOV_IMM(0, 0), EXIT()),
     OBS, END, MKS_VERR_HELPER_ARG, "size r3 may be 0; expected a size of at least 1", NULL},
    {"ringbuf_data_past_stack",
     P(ST(DW, 10, -8, 0), LD_MAP(1, M_RING), MOV_REG(2, 10), ALU64_IMM(ADD, 2, -8), MOV_IMM(3, 16), MOV_IMM(4, 0),
       HLP(RINGBUF_OUTPUT), MOV_IMM(0, 0), EXIT()),
     OBS, END, MKS_VERR_STACK_BOUNDS, "stack access of 16 bytes at fp-8 outside the frame", NULL},

    /* pointers */
    {"pointer_multiply", P(ALU64_IMM(MKS_BPF_MUL, 1, 2), MOV_IMM(0, 0), EXIT()), OBS, END, MKS_VERR_PTR_ARITH,
     "'*' on the context pointer; expected only += or -= of a scalar", NULL},
    {"pointer_alu32", P(ALU32_IMM(ADD, 1, 4), MOV_IMM(0, 0), EXIT()), OBS, END, MKS_VERR_PTR_ARITH,
     "32-bit arithmetic on the context pointer", NULL},
    {"pointer_unbounded_offset", P(LDX(DW, 2, 1, CTX_VALUE), ALU64_REG(ADD, 1, 2), MOV_IMM(0, 0), EXIT()), OBS,
     END, MKS_VERR_PTR_ARITH, "expected a bounded offset", NULL},
    {"pointer_stored_in_map", P(MOV_REG(6, 1), LOOKUP_ARR0, JMP_IMM(MKS_BPF_JEQ, 0, 0, 1), STX(DW, 0, 6, 0),
                                MOV_IMM(0, 0), EXIT()),
     OBS, END, MKS_VERR_PTR_LEAK, "stores r6 (the context pointer) into map 'arr'", NULL},
    {"pointer_returned", P(MOV_REG(0, 1), EXIT()), OBS, END, MKS_VERR_PTR_LEAK,
     "r0 is the context pointer at exit; expected a scalar", NULL},
    {"pointer_minus_pointer", P(MOV_REG(2, 10), ALU64_REG(MKS_BPF_SUB, 2, 10), MOV_IMM(0, 0), EXIT()), OBS, END,
     MKS_VERR_PTR_ARITH, "insn 1 (r2 -= r10): - of two pointers", NULL},
    /* a branch on a pointer tells the program about the address */
    {"pointer_compared_with_constant",
     P(JMP_IMM(MKS_BPF_JGT, 1, 0x1000, 1), MOV_IMM(0, 0), MOV_IMM(0, 1), EXIT()), OBS, END, MKS_VERR_PTR_CMP,
     "insn 0 (if r1 > 4096 goto +1): r1 is the context pointer",
     "expected a pointer only in a 64-bit == 0 or != 0 test"},
    {"pointer_bit_tested", P(JMP_IMM(MKS_BPF_JSET, 10, 0x10, 1), MOV_IMM(0, 0), MOV_IMM(0, 1), EXIT()), OBS, END,
     MKS_VERR_PTR_CMP, "r10 is a stack pointer", NULL},
    {"pointer_compared_with_register",
     P(MOV_IMM(2, 5), JMP_REG(MKS_BPF_JEQ, 2, 1, 1), MOV_IMM(0, 0), MOV_IMM(0, 1), EXIT()), OBS, END,
     MKS_VERR_PTR_CMP, "insn 1 (if r2 == r1 goto +1): r1 is the context pointer",
     "expected only scalars compared with registers"},
    {"pointer_null_test_32bit",
     P(LOOKUP_ARR0, JMP32_IMM(MKS_BPF_JEQ, 0, 0, 1), LDX(DW, 1, 0, 0), MOV_IMM(0, 0), EXIT()), OBS, END,
     MKS_VERR_PTR_CMP, "insn 6 (", "r0 is a map value pointer that may be NULL"},
    {"pointer_compared_with_nonzero", P(LOOKUP_ARR0, JMP_IMM(MKS_BPF_JEQ, 0, 8, 1), MOV_IMM(1, 0), MOV_IMM(0, 0), EXIT()),
     OBS, END, MKS_VERR_PTR_CMP, "insn 6 (if r0 == 8 goto +1)", NULL},
    /* A 32-bit shift by a register holding 32 shifts by 32 & 31 = 0 in the
     * VM: 0xffffffff stays, and is no offset a map value can take (the
     * verifier once shifted by 32 here, found 0 and let r0 + r3 through). */
    {"shift32_count_masked",
     P(LOOKUP_ARR0, JMP_IMM(MKS_BPF_JEQ, 0, 0, 5), MOV_IMM(2, 32), ALU32_IMM(MKS_BPF_MOV, 3, -1),
       ALU32_REG(MKS_BPF_RSH, 3, 2), ALU64_REG(ADD, 0, 3), LDX(B, 1, 0, 0), MOV_IMM(0, 0), EXIT()),
     OBS, END, MKS_VERR_PTR_ARITH, "insn 10 (r0 += r3): adds scalar with range [4294967295, 4294967295]", NULL},
    /* mks_hist_add fails with -E2BIG for a key past max_entries: the
     * failing side must be explored (it was taken for 0 always, and what
     * followed a test of its result went unchecked) */
    {"hist_add_may_fail",
     P(ST(W, 10, -4, 9), LD_MAP(1, M_HIST), MOV_REG(2, 10), ALU64_IMM(ADD, 2, -4), MOV_IMM(3, 1), HLP(HIST_ADD),
       JMP_IMM(MKS_BPF_JEQ, 0, 0, 1), LDX(DW, 0, 10, -520), EXIT()),
     OBS, END, MKS_VERR_STACK_BOUNDS, "insn 8 (", "stack access of 8 bytes at fp-520 outside the frame"},
    /* offset 0 or 4: the VM refuses the misaligned one (only the lowest
     * offset used to be checked) */
    {"atomic_offset_may_be_misaligned",
     P(MOV_REG(6, 1), LOOKUP_ARR0, JMP_IMM(MKS_BPF_JEQ, 0, 0, 5), LDX(W, 2, 6, CTX_STEP), ALU64_IMM(MKS_BPF_AND, 2, 4),
       ALU64_REG(ADD, 0, 2), MOV_IMM(3, 1), ATOMIC(DW, 0, 3, 0, MKS_BPF_ADD), MOV_IMM(0, 0), EXIT()),
     OBS, END, MKS_VERR_MEM_ACCESS, "insn 12 (", "misaligned atomic operation at offset 0..4 size 8"},
    {"subprog_returns_own_stack", P(CALL_LOCAL(1), EXIT(), MOV_REG(0, 10), EXIT()), OBS, END, MKS_VERR_PTR_LEAK,
     "subprogram returns a pointer to its own stack", NULL},

    /* program type, hook, ABI, arithmetic */
    {"control_hint_unbounded", P(LDX(W, 0, 1, CTX_STEP), EXIT()), CTL, RDY, MKS_VERR_R0_EXIT,
     "CONTROL program returns r0 in [0, 4294967295]; expected a priority hint in [0, 15]", NULL},
    {"control_hint_negative", P(MOV_IMM(0, -1), EXIT()), CTL, MKS_EV_TASK_ASSIGN, MKS_VERR_R0_EXIT,
     "returns r0 in [-1, -1]", NULL},
    {"control_at_task_end", P(MOV_IMM(0, 0), EXIT()), CTL, END, MKS_VERR_HOOK,
     "CONTROL program at hook task_end; expected task_ready or task_assign", NULL},
    {"division_by_zero", P(MOV_IMM(0, 1), ALU64_IMM(MKS_BPF_DIV, 0, 0), EXIT()), OBS, END, MKS_VERR_DIV_ZERO,
     "division by constant 0", NULL},
    {"shift_too_far", P(MOV_IMM(0, 1), ALU64_IMM(MKS_BPF_LSH, 0, 64), EXIT()), OBS, END, MKS_VERR_DIV_ZERO,
     "shift by 64; expected a shift amount in 0..63", NULL},
};

static void run_case(void **state)
{
    const struct rcase *c = *state;
    struct mks_verify_opts o = {
        .sz = sizeof(o),
        .prog_type = c->type,
        .abi_version = 1,
        .hook = c->hook,
        .maps = test_maps,
        .n_maps = M_COUNT,
    };
    struct mks_verify_result res = {0};
    char log[512];
    int rc = mks_verify(c->insns, c->n, &o, &res, log, sizeof(log));
    if (rc != -c->code || !strstr(log, c->msg) || (c->msg2 && !strstr(log, c->msg2)))
        print_error("case %s: rc %d (want %d)\n  log:  %s\n  want: %s%s%s\n", c->name, rc, -c->code, log, c->msg,
                    c->msg2 ? " ... " : "", c->msg2 ? c->msg2 : "");
    assert_int_equal(rc, -c->code);
    assert_non_null(strstr(log, c->msg));
    if (c->msg2)
        assert_non_null(strstr(log, c->msg2));
    /* One line: the message is for a human and for a log file. */
    assert_null(strchr(log, '\n'));
    assert_true(strstr(log, "; expected") != NULL);
}

/* Rejections that need options or sizes a table entry cannot carry. */
static int verify_simple(const struct mks_insn *p, uint32_t n, uint32_t type, uint32_t abi, char *log, size_t len,
                         const uint64_t *allowed, uint32_t n_allowed)
{
    struct mks_verify_opts o = {
        .sz = sizeof(o),
        .prog_type = type,
        .abi_version = abi,
        .hook = -1,
        .maps = test_maps,
        .n_maps = M_COUNT,
        .allowed_helpers = allowed,
        .n_allowed_helpers = n_allowed,
    };
    return mks_verify(p, n, &o, NULL, log, len);
}

static void test_empty(void **state)
{
    (void)state;
    char log[256];
    struct mks_insn one = EXIT();
    assert_int_equal(verify_simple(&one, 0, OBS, 1, log, sizeof(log), NULL, 0), -MKS_VERR_EMPTY);
    assert_non_null(strstr(log, "program has no instructions; expected at least an exit"));
}

static void test_too_long(void **state)
{
    (void)state;
    uint32_t n = MKS_BPF_MAX_INSNS + 1;
    struct mks_insn *p = calloc(n, sizeof(*p));
    char log[256];
    assert_non_null(p);
    for (uint32_t i = 0; i + 1 < n; i++)
        p[i] = (struct mks_insn)MOV_IMM(0, 0);
    p[n - 1] = (struct mks_insn)EXIT();
    assert_int_equal(verify_simple(p, n, OBS, 1, log, sizeof(log), NULL, 0), -MKS_VERR_TOO_LONG);
    assert_non_null(strstr(log, "program has 4097 instructions; expected at most 4096"));
    /* exactly the limit is fine */
    assert_int_equal(verify_simple(p + 1, n - 1, OBS, 1, log, sizeof(log), NULL, 0), 0);
    free(p);
}

static void test_unknown_abi(void **state)
{
    (void)state;
    struct mks_insn p[] = {MOV_IMM(0, 0), EXIT()};
    char log[256];
    assert_int_equal(verify_simple(p, 2, OBS, 2, log, sizeof(log), NULL, 0), -MKS_VERR_ABI);
    assert_non_null(strstr(log, "program declares hook ABI v2"));
    assert_int_equal(verify_simple(p, 2, OBS, 0, log, sizeof(log), NULL, 0), -MKS_VERR_ABI);
    assert_int_equal(verify_simple(p, 2, 7, 1, log, sizeof(log), NULL, 0), -MKS_VERR_ABI);
    assert_non_null(strstr(log, "program type 7; expected OBSERVE (1) or CONTROL (2)"));
}

static void test_helper_outside_allowed_set(void **state)
{
    (void)state;
    struct mks_insn p[] = {HLP(WORKER_ID), EXIT()};
    const uint64_t allowed[] = {MKS_HELPER_TIME_NS};
    char log[256];
    assert_int_equal(verify_simple(p, 2, OBS, 1, log, sizeof(log), allowed, 1), -MKS_VERR_HELPER);
    assert_non_null(strstr(log, "mks_worker_id (helper 101) is not in this program's allowed helper set"));
    /* the same program with the helper allowed passes */
    const uint64_t allowed2[] = {MKS_HELPER_TIME_NS, MKS_HELPER_WORKER_ID};
    assert_int_equal(verify_simple(p, 2, OBS, 1, log, sizeof(log), allowed2, 2), 0);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    struct mks_insn p[] = {MOV_IMM(0, 0), EXIT()};
    char log[128];
    assert_int_equal(mks_verify(p, 2, NULL, NULL, log, sizeof(log)), -EINVAL);
    struct mks_verify_opts o = {.sz = 4, .prog_type = OBS, .abi_version = 1};
    assert_int_equal(mks_verify(p, 2, &o, NULL, log, sizeof(log)), -EINVAL);
}

/* A short log buffer truncates the line but keeps it terminated. */
static void test_log_truncation(void **state)
{
    (void)state;
    struct mks_insn p[] = {LDX(DW, 0, 1, 128), EXIT()};
    char log[16];
    memset(log, 'x', sizeof(log));
    assert_int_equal(verify_simple(p, 2, OBS, 1, log, sizeof(log), NULL, 0), -MKS_VERR_CTX_ACCESS);
    assert_int_equal(strlen(log), sizeof(log) - 1);
    assert_int_equal(verify_simple(p, 2, OBS, 1, NULL, 0, NULL, 0), -MKS_VERR_CTX_ACCESS);
}

/* A map's name comes from the object and may hold any byte: the message
 * quoting it stays one line. */
static void test_log_one_line(void **state)
{
    (void)state;
    static const struct mks_map_spec odd = {"a\nb\rc", MKS_MAP_ARRAY, 4, 8, 1};
    struct mks_insn p[] = {LD_MAPVAL(1, 0, 0), LDX(DW, 0, 1, 8), EXIT()};
    struct mks_verify_opts o = {.sz = sizeof(o), .prog_type = OBS, .abi_version = 1, .hook = -1, .maps = &odd, .n_maps = 1};
    char log[256];
    assert_int_equal(mks_verify(p, 4, &o, NULL, log, sizeof(log)), -MKS_VERR_MAP_BOUNDS);
    assert_non_null(strstr(log, "map 'a?b?c'"));
    assert_null(strchr(log, '\n'));
}

/* Branches that each spill a different kind of pointer cannot be pruned or
 * widened; exploration stops at its cap with a clear line. */
static void test_too_complex(void **state)
{
    (void)state;
    enum { K = 24 };
    struct mks_insn p[1 + 5 * K + 2];
    uint32_t n = 0;
    p[n++] = (struct mks_insn)MOV_REG(6, 1);
    for (int k = 0; k < K; k++) {
        p[n++] = (struct mks_insn)LDX(W, 2, 6, CTX_STEP);
        p[n++] = (struct mks_insn)JMP_IMM(MKS_BPF_JEQ, 2, k, 2);
        p[n++] = (struct mks_insn)STX(DW, 10, 6, -8 * (k + 1));
        p[n++] = (struct mks_insn)JA(1);
        p[n++] = (struct mks_insn)STX(DW, 10, 10, -8 * (k + 1));
    }
    p[n++] = (struct mks_insn)MOV_IMM(0, 0);
    p[n++] = (struct mks_insn)EXIT();
    char log[256];
    assert_int_equal(verify_simple(p, n, OBS, 1, log, sizeof(log), NULL, 0), -MKS_VERR_COMPLEXITY);
    assert_non_null(strstr(log, "program too complex: "));
    assert_null(strchr(log, '\n'));
}

/* Four times as many such branches: comparing the states kept at the joins
 * is what costs, and it is capped (this took 1.3 s of CPU, and eight calls
 * deep 5 s, before the instruction cap ended it). */
static void test_comparisons_bounded(void **state)
{
    (void)state;
    enum { K = 100 };
    struct mks_insn p[1 + 5 * K + 2];
    uint32_t n = 0;
    p[n++] = (struct mks_insn)MOV_REG(6, 1);
    for (int k = 0; k < K; k++) {
        p[n++] = (struct mks_insn)LDX(W, 2, 6, CTX_STEP);
        p[n++] = (struct mks_insn)JMP_IMM(MKS_BPF_JEQ, 2, k, 2);
        p[n++] = (struct mks_insn)STX(DW, 10, 6, -8 * (k % 64 + 1));
        p[n++] = (struct mks_insn)JA(1);
        p[n++] = (struct mks_insn)STX(DW, 10, 10, -8 * (k % 64 + 1));
    }
    p[n++] = (struct mks_insn)MOV_IMM(0, 0);
    p[n++] = (struct mks_insn)EXIT();
    char log[256];
    assert_int_equal(verify_simple(p, n, OBS, 1, log, sizeof(log), NULL, 0), -MKS_VERR_COMPLEXITY);
    assert_non_null(strstr(log, "program too complex: 1000000 call frames compared to prune paths"));
}

/* The same kind of program eight calls deep: every state then carries eight
 * frames (about 50 KB), and what exploration keeps is capped in memory
 * before the instruction count is reached (uncapped it took gigabytes). */
static void test_state_memory_bounded(void **state)
{
    (void)state;
    enum { K = 780, DEPTH = 7 };
    static struct mks_insn p[2 * DEPTH + 2 + 5 * K + 2];
    uint32_t n = 0;
    /* main and six more functions each call the next */
    for (int d = 0; d < DEPTH; d++) {
        p[n++] = (struct mks_insn)CALL_LOCAL(1);
        p[n++] = (struct mks_insn)EXIT();
    }
    /* the deepest function: branches that each spill another pointer */
    p[n++] = (struct mks_insn)MOV_REG(6, 1);
    for (int k = 0; k < K; k++) {
        p[n++] = (struct mks_insn)LDX(W, 2, 6, CTX_STEP);
        p[n++] = (struct mks_insn)JMP_IMM(MKS_BPF_JEQ, 2, k, 2);
        p[n++] = (struct mks_insn)STX(DW, 10, 6, -8 * (k % 64 + 1));
        p[n++] = (struct mks_insn)JA(1);
        p[n++] = (struct mks_insn)STX(DW, 10, 10, -8 * (k % 64 + 1));
    }
    p[n++] = (struct mks_insn)MOV_IMM(0, 0);
    p[n++] = (struct mks_insn)EXIT();
    char log[256];
    int rc = verify_simple(p, n, OBS, 1, log, sizeof(log), NULL, 0);
    if (!strstr(log, "exceed 64 MiB"))
        print_error("%s\n", log);
    assert_int_equal(rc, -MKS_VERR_COMPLEXITY);
    assert_non_null(strstr(log, "program too complex: the states kept to explore it exceed 64 MiB"));
}

/* Every case has its own name and the suite covers every rejection code. */
static void test_codes_covered(void **state)
{
    (void)state;
    size_t n = sizeof(cases) / sizeof(cases[0]);
    bool seen[MKS_VERR_PTR_CMP - MKS_VERR_BASE] = {0};
    for (size_t i = 0; i < n; i++) {
        seen[cases[i].code - MKS_VERR_BASE - 1] = true;
        for (size_t j = i + 1; j < n; j++)
            assert_string_not_equal(cases[i].name, cases[j].name);
    }
    /* covered outside the table */
    seen[MKS_VERR_EMPTY - MKS_VERR_BASE - 1] = seen[MKS_VERR_TOO_LONG - MKS_VERR_BASE - 1] = true;
    seen[MKS_VERR_ABI - MKS_VERR_BASE - 1] = true;
    seen[MKS_VERR_COMPLEXITY - MKS_VERR_BASE - 1] = true;
    seen[MKS_VERR_INTERNAL - MKS_VERR_BASE - 1] = true; /* no program reaches it */
    for (int c = MKS_VERR_BASE + 1; c <= MKS_VERR_PTR_CMP; c++) {
        if (!seen[c - MKS_VERR_BASE - 1])
            print_error("rejection code %d has no case\n", c);
        assert_true(seen[c - MKS_VERR_BASE - 1]);
    }
    assert_true(n >= 40);
}

int main(void)
{
    size_t n = sizeof(cases) / sizeof(cases[0]);
    struct CMUnitTest *tests = calloc(n + 16, sizeof(*tests));
    if (!tests)
        return 1;
    for (size_t i = 0; i < n; i++) {
        tests[i].name = cases[i].name;
        tests[i].test_func = run_case;
        tests[i].initial_state = (void *)&cases[i];
    }
    const struct CMUnitTest extra[] = {
        cmocka_unit_test(test_empty),        cmocka_unit_test(test_too_long),
        cmocka_unit_test(test_unknown_abi),  cmocka_unit_test(test_helper_outside_allowed_set),
        cmocka_unit_test(test_bad_arguments), cmocka_unit_test(test_log_truncation), cmocka_unit_test(test_log_one_line),
        cmocka_unit_test(test_codes_covered),  cmocka_unit_test(test_too_complex),
        cmocka_unit_test(test_state_memory_bounded), cmocka_unit_test(test_comparisons_bounded),
    };
    memcpy(&tests[n], extra, sizeof(extra));
    int rc = _cmocka_run_group_tests("verifier_reject", tests, n + sizeof(extra) / sizeof(extra[0]), NULL, NULL);
    free(tests);
    return rc;
}

/*
 * mkscope-vm-conformance: the mkscope VM as a plugin of the public
 * bpf_conformance runner.
 *
 * Protocol (as the runner drives plugins): the program's bytes arrive on
 * stdin as hex ("b7 00 00 00 ..."; whitespace anywhere), the input memory as
 * hex in argv[1] (r1 points at it and r2 holds its length).  The runner leaves
 * the memory argument out when a case has none and puts its --plugin_options
 * words after it, so argv[1] is memory only when it does not begin with '-'.
 * With the runner's --elf true the word "--elf" follows and stdin holds, in
 * hex, an ELF object whose executable section is the program (calls between
 * functions of that section are pc-relative and need no relocation; an object
 * with relocations for it is refused).  Empty words are skipped; any other
 * option word is refused with a one-line error.  On success r0 is printed in
 * hex on stdout and the exit status is 0; otherwise the error text goes to
 * stdout (the runner compares it with a case's expected error) and the exit
 * status is 1.
 * Helper 5 is the suite's "unwind" helper.
 */
#include <ctype.h>
#include <elf.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mkscope/vm.h"

/* Larger programs are rejected by the verifier anyway; this bounds the read. */
#define MAX_PROG_BYTES (MKS_BPF_MAX_INSNS * 8 * 4)
#define MAX_MEM_BYTES  (1u << 20)
/* Room for the headers, symbols and strings around an ELF program. */
#define MAX_ELF_EXTRA (64u << 10)
/* The conformance programs are short; a loop that does not end is a failure. */
#define INSN_LIMIT 10000000ull

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = tolower(c);
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Parse hex digit pairs separated by optional whitespace. */
static long parse_hex(const char *s, uint8_t *out, size_t cap)
{
    size_t n = 0;
    while (*s) {
        int hi, lo;
        if (isspace((unsigned char)*s)) {
            s++;
            continue;
        }
        if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
            s += 2;
        hi = hexval((unsigned char)s[0]);
        lo = s[1] ? hexval((unsigned char)s[1]) : -1;
        if (hi < 0 || lo < 0 || n >= cap)
            return -1;
        out[n++] = (uint8_t)(hi << 4 | lo);
        s += 2;
    }
    return (long)n;
}

/*
 * The executable section of an ELF64 little-endian BPF object, every offset
 * checked against len.  Returns NULL with *err set when the object is
 * malformed, has no program, or has relocations the program would need.
 */
static const uint8_t *elf_program(const uint8_t *buf, size_t len, size_t *size, const char **err)
{
    Elf64_Ehdr eh;
    Elf64_Shdr sh, strsh;
    const uint8_t *prog = NULL;
    uint16_t i, text_idx = 0;

    if (len < sizeof(eh) || memcmp(buf, ELFMAG, SELFMAG) != 0) {
        *err = "ELF input: not an ELF object";
        return NULL;
    }
    memcpy(&eh, buf, sizeof(eh));
    if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB ||
        eh.e_machine != EM_BPF) {
        *err = "ELF input: not a 64-bit little-endian BPF object";
        return NULL;
    }
    if (eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shnum == 0 || eh.e_shoff > len ||
        (len - eh.e_shoff) / sizeof(Elf64_Shdr) < eh.e_shnum || eh.e_shstrndx >= eh.e_shnum) {
        *err = "ELF input: section header table out of bounds";
        return NULL;
    }
    memcpy(&strsh, buf + eh.e_shoff + (size_t)eh.e_shstrndx * sizeof(sh), sizeof(strsh));
    if (strsh.sh_offset > len || strsh.sh_size > len - strsh.sh_offset) {
        *err = "ELF input: section name table out of bounds";
        return NULL;
    }
    for (i = 1; i < eh.e_shnum; i++) {
        memcpy(&sh, buf + eh.e_shoff + (size_t)i * sizeof(sh), sizeof(sh));
        if (sh.sh_type == SHT_NOBITS)
            continue;
        if (sh.sh_offset > len || sh.sh_size > len - sh.sh_offset) {
            *err = "ELF input: section out of bounds";
            return NULL;
        }
        if (sh.sh_type == SHT_PROGBITS && (sh.sh_flags & SHF_EXECINSTR) && sh.sh_size > 0) {
            if (prog) {
                *err = "ELF input: more than one executable section";
                return NULL;
            }
            prog = buf + sh.sh_offset;
            *size = (size_t)sh.sh_size;
            text_idx = i;
        }
    }
    for (i = 1; prog && i < eh.e_shnum; i++) {
        memcpy(&sh, buf + eh.e_shoff + (size_t)i * sizeof(sh), sizeof(sh));
        if ((sh.sh_type == SHT_REL || sh.sh_type == SHT_RELA) && sh.sh_info == text_idx &&
            sh.sh_size > 0) {
            *err = "ELF input: relocations are not supported";
            return NULL;
        }
    }
    if (!prog)
        *err = "ELF input: no executable section";
    return prog;
}

static int fail(const char *msg)
{
    printf("%s\n", msg);
    return 1;
}

int main(int argc, char **argv)
{
    static char text[(MAX_PROG_BYTES + MAX_ELF_EXTRA) * 4 + 1];
    static uint8_t prog[MAX_PROG_BYTES + MAX_ELF_EXTRA];
    static uint8_t mem[MAX_MEM_BYTES];
    static struct mks_insn insns[MAX_PROG_BYTES / 8];
    static char why[256];
    const char *memhex = NULL, *err = NULL;
    const uint8_t *code = prog;
    size_t len, code_len;
    long n_prog, n_mem = 0;
    int elf = 0;
    struct mks_vm_env env;
    uint64_t r0 = 0;
    int rc, i = 1;

    if (argc > 1 && argv[1][0] != '-')
        memhex = argv[i++];
    for (; i < argc; i++) {
        if (!argv[i][0])
            continue;
        if (!strcmp(argv[i], "--elf")) {
            elf = 1;
            continue;
        }
        snprintf(why, sizeof(why), "unknown plugin option '%.200s'", argv[i]);
        return fail(why);
    }
    len = fread(text, 1, sizeof(text) - 1, stdin);
    if (!feof(stdin))
        return fail("program too large");
    text[len] = 0;
    n_prog = parse_hex(text, prog, sizeof(prog));
    if (n_prog < 0)
        return fail("program is not hex bytes");
    code_len = (size_t)n_prog;
    if (elf && !(code = elf_program(prog, code_len, &code_len, &err)))
        return fail(err);
    if (code_len > MAX_PROG_BYTES)
        return fail("program too large");
    if (code_len == 0 || code_len % 8 != 0)
        return fail("program length is not a multiple of 8 bytes");
    if (memhex && (n_mem = parse_hex(memhex, mem, sizeof(mem))) < 0)
        return fail("memory argument is not hex bytes (at most 1 MiB)");
    memcpy(insns, code, code_len);

    memset(&env, 0, sizeof(env));
    env.insns = insns;
    env.n_insns = (uint32_t)(code_len / 8);
    env.flags = MKS_VM_F_UNWIND_HELPER;
    env.insn_limit = INSN_LIMIT;
    env.extra.base = (uint64_t)(uintptr_t)mem;
    env.extra.len = (uint64_t)n_mem;
    env.extra.writable = 1;
    rc = mks_vm_run(&env, n_mem ? (uint64_t)(uintptr_t)mem : 0, (uint64_t)n_mem, &r0, NULL);
    if (rc != 0)
        return fail(mks_vm_strerror(rc));
    printf("%" PRIx64 "\n", r0);
    return 0;
}

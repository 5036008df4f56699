/*
 * mkscope-vm-conformance: the mkscope VM as a plugin of the public
 * bpf_conformance runner.
 *
 * Protocol (as the runner drives plugins): the program's bytes arrive on
 * stdin as hex ("b7 00 00 00 ..."; whitespace anywhere), the input memory as
 * hex in argv[1] (r1 points at it and r2 holds its length).  The runner leaves
 * the memory argument out when a case has none and puts its --plugin_options
 * words after it, so argv[1] is memory only when it does not begin with '-'.
 * This plugin takes no options: empty words are skipped, "--elf" (the
 * runner's --elf true, an ELF object on stdin) and any other word is refused
 * with a one-line error.  On success r0 is printed in hex on stdout and the
 * exit status is 0; otherwise the error text goes to stdout (the runner
 * compares it with a case's expected error) and the exit status is 1.
 * Helper 5 is the suite's "unwind" helper.
 */
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mkscope/vm.h"

/* Larger programs are rejected by the verifier anyway; this bounds the read. */
#define MAX_PROG_BYTES (MKS_BPF_MAX_INSNS * 8 * 4)
#define MAX_MEM_BYTES  (1u << 20)
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

static int fail(const char *msg)
{
    printf("%s\n", msg);
    return 1;
}

int main(int argc, char **argv)
{
    static char text[MAX_PROG_BYTES * 4 + 1];
    static uint8_t prog[MAX_PROG_BYTES];
    static uint8_t mem[MAX_MEM_BYTES];
    static struct mks_insn insns[MAX_PROG_BYTES / 8];
    static char why[256];
    const char *memhex = NULL;
    size_t len;
    long n_prog, n_mem = 0;
    struct mks_vm_env env;
    uint64_t r0 = 0;
    int rc, i = 1;

    if (argc > 1 && argv[1][0] != '-')
        memhex = argv[i++];
    for (; i < argc; i++) {
        if (!argv[i][0])
            continue;
        if (!strcmp(argv[i], "--elf"))
            return fail("ELF input is not supported: run the runner without --elf");
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
    if (n_prog == 0 || n_prog % 8 != 0)
        return fail("program length is not a multiple of 8 bytes");
    if (memhex && (n_mem = parse_hex(memhex, mem, sizeof(mem))) < 0)
        return fail("memory argument is not hex bytes (at most 1 MiB)");
    memcpy(insns, prog, (size_t)n_prog);

    memset(&env, 0, sizeof(env));
    env.insns = insns;
    env.n_insns = (uint32_t)(n_prog / 8);
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

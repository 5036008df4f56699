/*
 * mkscope-vm-conformance spawned with exactly the argument vectors the public
 * bpf_conformance runner builds: no memory argument when a case has none,
 * --plugin_options words after the memory, "--elf" and an ELF object.  The
 * conformance suite test only drives the "memory, empty option" form, so a
 * plugin that mistook an option for memory would pass it and fail the runner.
 *
 * Usage: devhooks_conformance_plugin_args PLUGIN
 */
#include <elf.h>
#include <fcntl.h>
#include <setjmp.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

static const char *plugin;

/* mov r0, 42; exit */
#define PROG_42 "b7 00 00 00 2a 00 00 00 95 00 00 00 00 00 00 00"
/* ldxb r0, [r1 + 1]; exit */
#define PROG_LDXB1 "71 10 01 00 00 00 00 00 95 00 00 00 00 00 00 00"
/* mov r0, r2; exit */
#define PROG_LEN "bf 20 00 00 00 00 00 00 95 00 00 00 00 00 00 00"

struct result {
    int status; /* exit status, or -1 when the plugin did not exit normally */
    char out[512];
};

/* Run the plugin with `prog` on stdin and args after argv[0]; capture stdout. */
static void run(const char *prog, const char *const *args, struct result *r)
{
    char in_path[] = "/tmp/mks-cpa-in-XXXXXX", out_path[] = "/tmp/mks-cpa-out-XXXXXX";
    int in_fd = mkstemp(in_path), out_fd = mkstemp(out_path);
    posix_spawn_file_actions_t fa;
    char *argv[8];
    size_t n = 0;
    pid_t pid;
    ssize_t got;
    int ws;

    assert_true(in_fd >= 0 && out_fd >= 0);
    assert_int_equal(write(in_fd, prog, strlen(prog)), (ssize_t)strlen(prog));
    assert_int_equal(lseek(in_fd, 0, SEEK_SET), 0);
    argv[n++] = (char *)plugin;
    while (*args && n < 7)
        argv[n++] = (char *)*args++;
    argv[n] = NULL;

    assert_int_equal(posix_spawn_file_actions_init(&fa), 0);
    assert_int_equal(posix_spawn_file_actions_adddup2(&fa, in_fd, 0), 0);
    assert_int_equal(posix_spawn_file_actions_adddup2(&fa, out_fd, 1), 0);
    assert_int_equal(posix_spawn(&pid, plugin, &fa, NULL, argv, NULL), 0);
    posix_spawn_file_actions_destroy(&fa);
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    r->status = WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;

    memset(r->out, 0, sizeof(r->out));
    got = pread(out_fd, r->out, sizeof(r->out) - 1, 0);
    assert_true(got >= 0);
    r->out[strcspn(r->out, "\n")] = 0;
    close(in_fd);
    close(out_fd);
    unlink(in_path);
    unlink(out_path);
}

static void test_no_memory_argument(void **state)
{
    const char *args[] = {NULL};
    struct result r;
    (void)state;
    run(PROG_42, args, &r);
    assert_int_equal(r.status, 0);
    assert_string_equal(r.out, "2a");
}

static void test_memory_then_options(void **state)
{
    /* The runner splits --plugin_options on spaces: empty words can occur. */
    const char *with_empty[] = {"11 22 33", "", NULL};
    const char *plain[] = {"11 22 33", NULL};
    const char *packed[] = {"aabbccdd", NULL};
    struct result r;
    (void)state;
    run(PROG_LDXB1, with_empty, &r);
    assert_int_equal(r.status, 0);
    assert_string_equal(r.out, "22");
    run(PROG_LDXB1, plain, &r);
    assert_int_equal(r.status, 0);
    assert_string_equal(r.out, "22");
    run(PROG_LEN, packed, &r);
    assert_int_equal(r.status, 0);
    assert_string_equal(r.out, "4");
}

static void test_option_is_not_memory(void **state)
{
    const char *no_mem[] = {"--bogus", NULL};
    const char *with_mem[] = {"11 22", "--bogus", NULL};
    struct result r;
    (void)state;
    run(PROG_42, no_mem, &r);
    assert_int_equal(r.status, 1);
    assert_string_equal(r.out, "unknown plugin option '--bogus'");
    run(PROG_42, with_mem, &r);
    assert_int_equal(r.status, 1);
    assert_string_equal(r.out, "unknown plugin option '--bogus'");
}

/*
 * An ELF object in the runner's --elf form: .text holding `code`, a section
 * name table, and when `rel` a relocation section aimed at .text.  Returned
 * as hex in `hex`.  `machine` lets a test give a non-BPF machine.
 */
static void make_elf(const uint8_t *code, size_t code_len, uint16_t machine, int rel, char *hex,
                     size_t hex_cap)
{
    static const char names[] = "\0.text\0.shstrtab\0.rel.text";
    uint8_t buf[1024];
    Elf64_Ehdr eh;
    Elf64_Shdr sh[4];
    Elf64_Rel r;
    size_t off = sizeof(eh), i, n_sh = rel ? 4 : 3;

    memset(buf, 0, sizeof(buf));
    memset(&eh, 0, sizeof(eh));
    memset(sh, 0, sizeof(sh));
    memset(&r, 0, sizeof(r));
    assert_true(sizeof(eh) + code_len + sizeof(names) + sizeof(r) + sizeof(sh) <= sizeof(buf));
    memcpy(eh.e_ident, ELFMAG, SELFMAG);
    eh.e_ident[EI_CLASS] = ELFCLASS64;
    eh.e_ident[EI_DATA] = ELFDATA2LSB;
    eh.e_ident[EI_VERSION] = EV_CURRENT;
    eh.e_type = ET_REL;
    eh.e_machine = machine;
    eh.e_version = EV_CURRENT;
    eh.e_ehsize = sizeof(eh);
    eh.e_shentsize = sizeof(Elf64_Shdr);
    eh.e_shnum = (uint16_t)n_sh;
    eh.e_shstrndx = 2;

    sh[1].sh_name = 1;
    sh[1].sh_type = SHT_PROGBITS;
    sh[1].sh_flags = SHF_ALLOC | SHF_EXECINSTR;
    sh[1].sh_offset = off;
    sh[1].sh_size = code_len;
    memcpy(buf + off, code, code_len);
    off += code_len;
    sh[2].sh_name = 7;
    sh[2].sh_type = SHT_STRTAB;
    sh[2].sh_offset = off;
    sh[2].sh_size = sizeof(names);
    memcpy(buf + off, names, sizeof(names));
    off += sizeof(names);
    if (rel) {
        sh[3].sh_name = 17;
        sh[3].sh_type = SHT_REL;
        sh[3].sh_info = 1;
        sh[3].sh_offset = off;
        sh[3].sh_size = sizeof(r);
        memcpy(buf + off, &r, sizeof(r));
        off += sizeof(r);
    }
    off = (off + 7) & ~(size_t)7;
    eh.e_shoff = off;
    memcpy(buf, &eh, sizeof(eh));
    memcpy(buf + off, sh, n_sh * sizeof(Elf64_Shdr));
    off += n_sh * sizeof(Elf64_Shdr);

    assert_true(off * 3 + 1 <= hex_cap);
    for (i = 0; i < off; i++)
        snprintf(hex + 3 * i, 4, "%02x ", buf[i]);
}

static const uint8_t code_42[] = {0xb7, 0, 0, 0, 0x2a, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0};
static const uint8_t code_ldxb1[] = {0x71, 0x10, 1, 0, 0, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0};

static void test_elf(void **state)
{
    const char *no_mem[] = {"--elf", NULL};
    const char *with_mem[] = {"11 22", "--elf", NULL};
    static char hex[4096];
    struct result r;
    (void)state;
    make_elf(code_42, sizeof(code_42), EM_BPF, 0, hex, sizeof(hex));
    run(hex, no_mem, &r);
    assert_int_equal(r.status, 0);
    assert_string_equal(r.out, "2a");
    make_elf(code_ldxb1, sizeof(code_ldxb1), EM_BPF, 0, hex, sizeof(hex));
    run(hex, with_mem, &r);
    assert_int_equal(r.status, 0);
    assert_string_equal(r.out, "22");
    /* The plain hex program is not an ELF object. */
    run(PROG_42, no_mem, &r);
    assert_int_equal(r.status, 1);
    assert_string_equal(r.out, "ELF input: not an ELF object");
    make_elf(code_42, sizeof(code_42), EM_X86_64, 0, hex, sizeof(hex));
    run(hex, no_mem, &r);
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.out, "not a 64-bit little-endian BPF object"));
    make_elf(code_42, sizeof(code_42), EM_BPF, 1, hex, sizeof(hex));
    run(hex, no_mem, &r);
    assert_int_equal(r.status, 1);
    assert_string_equal(r.out, "ELF input: relocations are not supported");
    /* Cut before the section headers: the table is out of bounds. */
    make_elf(code_42, sizeof(code_42), EM_BPF, 0, hex, sizeof(hex));
    hex[3 * 80] = 0;
    run(hex, no_mem, &r);
    assert_int_equal(r.status, 1);
    assert_string_equal(r.out, "ELF input: section header table out of bounds");
}

static void test_malformed_input(void **state)
{
    const char *bad_mem[] = {"1z", NULL};
    const char *none[] = {NULL};
    struct result r;
    (void)state;
    run(PROG_42, bad_mem, &r);
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.out, "memory argument is not hex"));
    run("b7 00 0", none, &r);
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.out, "program is not hex"));
    run("b7 00 00 00", none, &r);
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.out, "multiple of 8"));
    /* A load through r1 with no memory is a run-time error, not a result. */
    run(PROG_LDXB1, none, &r);
    assert_int_equal(r.status, 1);
    assert_true(r.out[0] != 0);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_memory_argument),
        cmocka_unit_test(test_memory_then_options),
        cmocka_unit_test(test_option_is_not_memory),
        cmocka_unit_test(test_elf),
        cmocka_unit_test(test_malformed_input),
    };
    if (argc != 2) {
        fprintf(stderr, "usage: %s PLUGIN\n", argv[0]);
        return 2;
    }
    plugin = argv[1];
    return cmocka_run_group_tests(tests, NULL, NULL);
}

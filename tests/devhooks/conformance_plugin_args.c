/*
 * mkscope-vm-conformance spawned with exactly the argument vectors the public
 * bpf_conformance runner builds: no memory argument when a case has none,
 * --plugin_options words after the memory, "--elf" for ELF input.  The
 * conformance suite test only drives the "memory, empty option" form, so a
 * plugin that mistook an option for memory would pass it and fail the runner.
 *
 * Usage: devhooks_conformance_plugin_args PLUGIN
 */
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

static void test_elf_refused(void **state)
{
    const char *no_mem[] = {"--elf", NULL};
    const char *with_mem[] = {"11", "--elf", NULL};
    struct result r;
    (void)state;
    run("7f 45 4c 46", no_mem, &r);
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.out, "ELF input is not supported"));
    run("7f 45 4c 46", with_mem, &r);
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.out, "ELF input is not supported"));
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
        cmocka_unit_test(test_elf_refused),
        cmocka_unit_test(test_malformed_input),
    };
    if (argc != 2) {
        fprintf(stderr, "usage: %s PLUGIN\n", argv[0]);
        return 2;
    }
    plugin = argv[1];
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * `mkscope verify`: output and exit status of mks_cmd_verify() on accepted,
 * rejected and unreadable objects.  argv[1] is the directory of the compiled
 * BPF objects.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mkscope/verifier.h"

static const char *progdir = ".";

struct run {
    int rc;
    char out[8192];
    char err[2048];
};

static void slurp(FILE *f, char *buf, size_t len)
{
    rewind(f);
    size_t n = fread(buf, 1, len - 1, f);
    buf[n] = '\0';
    fclose(f);
}

/* Runs `mkscope verify` with the given arguments; "@x" names progdir/x. */
static void run(struct run *r, int argc, const char **args)
{
    char paths[8][512];
    char *argv[10];
    argv[0] = "mkscope verify";
    for (int i = 0; i < argc && i < 8; i++) {
        if (args[i][0] == '@')
            snprintf(paths[i], sizeof(paths[i]), "%s/%s", progdir, args[i] + 1);
        else
            snprintf(paths[i], sizeof(paths[i]), "%s", args[i]);
        argv[i + 1] = paths[i];
    }
    argv[argc + 1] = NULL;
    FILE *out = tmpfile(), *err = tmpfile();
    assert_non_null(out);
    assert_non_null(err);
    r->rc = mks_cmd_verify(argc + 1, argv, out, err);
    slurp(out, r->out, sizeof(r->out));
    slurp(err, r->err, sizeof(r->err));
}

static void test_accepts(void **state)
{
    (void)state;
    struct run r;
    run(&r, 1, (const char *[]){"@count.bpf.o"});
    assert_int_equal(r.rc, 0);
    assert_non_null(strstr(r.out, "count.bpf.o: 1 program, 2 maps"));
    assert_non_null(strstr(r.out, "mkscope/task_end count (OBSERVE, ABI v1): accepted, worst case "));
    assert_non_null(strstr(r.out, " instructions per run"));
    assert_string_equal(r.err, "");
}

static void test_rejects(void **state)
{
    (void)state;
    struct run r;
    run(&r, 2, (const char *[]){"@count.bpf.o", "@rejected.bpf.o"});
    assert_int_equal(r.rc, 1);
    assert_non_null(strstr(r.out, "mkscope/task_end good (OBSERVE, ABI v1): accepted"));
    assert_non_null(strstr(r.out, "mkscope/task_start reads_reserved (OBSERVE, ABI v1): rejected\n    insn "));
    assert_non_null(strstr(r.out, "touches reserved bytes 120..127"));
    assert_non_null(strstr(r.out, "mkscope.control/task_end control_at_end (CONTROL, ABI v1): rejected"));
    assert_non_null(strstr(r.out, "still running after 32768 instructions"));
}

static void test_verbose_lists_maps(void **state)
{
    (void)state;
    struct run r;
    run(&r, 2, (const char *[]){"-v", "@depwait.bpf.o"});
    assert_int_equal(r.rc, 0);
    assert_non_null(strstr(r.out, "remote_waits     hash            key 16 value 72 max_entries 4096"));
    assert_non_null(strstr(r.out, "states kept"));
}

static void test_errors(void **state)
{
    (void)state;
    struct run r;
    run(&r, 1, (const char *[]){"@no-such.bpf.o"});
    assert_int_equal(r.rc, 2);
    assert_non_null(strstr(r.err, "no-such.bpf.o: cannot open: No such file or directory"));
    run(&r, 1, (const char *[]){"@linux_map.bpf.o"});
    assert_int_equal(r.rc, 2);
    assert_non_null(strstr(r.err, "unsupported map type 2"));
    run(&r, 0, (const char *[]){NULL});
    assert_int_equal(r.rc, 2);
    assert_non_null(strstr(r.err, "no object given"));
    run(&r, 2, (const char *[]){"--frobnicate", "@count.bpf.o"});
    assert_int_equal(r.rc, 2);
    assert_non_null(strstr(r.err, "unknown option '--frobnicate'"));
}

static void test_json(void **state)
{
    (void)state;
    struct run r;
    run(&r, 4, (const char *[]){"-f", "json", "@count.bpf.o", "@rejected.bpf.o"});
    assert_int_equal(r.rc, 1);
    assert_true(r.out[0] == '[');
    assert_non_null(strstr(r.out, "\"programs\": ["));
    assert_non_null(strstr(r.out, "{\"name\": \"count_by_class\", \"type\": \"array\", \"key_size\": 4, "
                                  "\"value_size\": 8, \"max_entries\": 64}"));
    assert_non_null(strstr(r.out, "{\"section\": \"mkscope/task_end\", \"name\": \"count\", \"type\": "
                                  "\"OBSERVE\", \"abi\": 1, \"insns\": "));
    assert_non_null(strstr(r.out, "\"verdict\": \"accepted\", \"cost\": "));
    assert_non_null(strstr(r.out, "\"name\": \"reads_reserved\""));
    char want[96];
    snprintf(want, sizeof(want), "\"verdict\": \"rejected\", \"code\": %d, \"error\": \"insn ", MKS_VERR_CTX_ACCESS);
    assert_non_null(strstr(r.out, want));
    assert_non_null(strstr(r.out, "\n]\n"));
    /* an unreadable object is an entry with its error */
    run(&r, 3, (const char *[]){"--format", "json", "@no-such.bpf.o"});
    assert_int_equal(r.rc, 2);
    assert_non_null(strstr(r.out, "\"error\": \""));
    assert_non_null(strstr(r.out, "no-such.bpf.o: cannot open: No such file or directory\"}"));
    run(&r, 3, (const char *[]){"-f", "yaml", "@count.bpf.o"});
    assert_int_equal(r.rc, 2);
    assert_non_null(strstr(r.err, "format 'yaml' unknown; expected text or json"));
}

static void test_help(void **state)
{
    (void)state;
    struct run r;
    run(&r, 1, (const char *[]){"--help"});
    assert_int_equal(r.rc, 0);
    assert_non_null(strstr(r.out, "usage: mkscope verify [-v] [-f text|json] OBJ..."));
    assert_non_null(strstr(r.out, "EXIT STATUS"));
    assert_non_null(strstr(r.out, "EXAMPLES"));
}

int main(int argc, char **argv)
{
    if (argc > 1)
        progdir = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accepts), cmocka_unit_test(test_rejects), cmocka_unit_test(test_verbose_lists_maps),
        cmocka_unit_test(test_errors),  cmocka_unit_test(test_json),              cmocka_unit_test(test_help),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

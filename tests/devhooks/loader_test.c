/*
 * Loader tests over clang-compiled objects (progs/<name>.bpf.c and the standard
 * monitors): what comes out of relocation, the error line for each kind of
 * bad object, that damaged objects (truncated, bytes flipped) never crash,
 * and that no bpf() system call is made (a seccomp filter kills the process
 * that tries).  argv[1] is the directory of the compiled objects.
 */
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "btf_edit.h"
#include "mkscope/loader.h"
#include "mkscope/verifier.h"

static const char *progdir = ".";

static void *read_obj(const char *file, size_t *len)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", progdir, file);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc((size_t)n);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static int open_file(const char *file, struct mks_obj **obj, char *err, size_t len)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", progdir, file);
    return mks_obj_open_file(path, obj, err, len);
}

static const struct mks_map_spec *find_map(const struct mks_obj *obj, const char *name, uint32_t *idx)
{
    for (uint32_t i = 0; i < mks_obj_map_count(obj); i++) {
        if (strcmp(mks_obj_maps(obj)[i].name, name) == 0) {
            if (idx)
                *idx = i;
            return &mks_obj_maps(obj)[i];
        }
    }
    return NULL;
}

/* The object's BTF and its maps' key and value types are kept (mkscope maps
 * decodes dumps with them). */
static void test_btf_kept(void **state)
{
    (void)state;
    struct mks_obj *obj = NULL;
    char err[512];
    assert_int_equal(open_file("multi.bpf.o", &obj, err, sizeof(err)), 0);
    const void *raw = NULL;
    size_t len = 0;
    assert_int_equal(mks_obj_btf(obj, &raw, &len), 0);
    assert_true(len > 24);
    assert_int_equal(((const uint8_t *)raw)[0] | ((const uint8_t *)raw)[1] << 8, 0xeb9f);
    uint32_t i, k = 0, v = 0, k2 = 0, v2 = 0;
    assert_non_null(find_map(obj, "by_gen", &i));
    assert_int_equal(mks_obj_map_btf(obj, i, &k, &v), 0);
    assert_true(k > 0 && v > 0 && k != v); /* __u64 key, __u32 value */
    assert_non_null(find_map(obj, "counts", &i));
    assert_int_equal(mks_obj_map_btf(obj, i, &k2, &v2), 0);
    assert_true(k2 > 0 && v2 == k); /* __u32 key, __u64 value: the same types */
    assert_non_null(find_map(obj, ".rodata", &i));
    assert_int_equal(mks_obj_map_btf(obj, i, &k2, &v2), 0);
    assert_true(v2 > 0); /* the section's DATASEC */
    assert_int_equal(mks_obj_map_btf(obj, mks_obj_map_count(obj), &k2, &v2), -EINVAL);
    assert_int_equal(mks_obj_btf(NULL, &raw, &len), -EINVAL);
    mks_obj_close(obj);
}

static void test_multi(void **state)
{
    (void)state;
    struct mks_obj *obj = NULL;
    char err[512];
    int rc = open_file("multi.bpf.o", &obj, err, sizeof(err));
    if (rc)
        print_error("%s\n", err);
    assert_int_equal(rc, 0);

    /* programs: sections map to hooks and types */
    assert_int_equal(mks_obj_prog_count(obj), 2);
    const struct mks_obj_prog *end = mks_obj_prog(obj, 0), *prio = mks_obj_prog(obj, 1);
    assert_string_equal(end->name, "on_end");
    assert_string_equal(end->section, "mkscope/task_end");
    assert_int_equal(end->hook, MKS_EV_TASK_END);
    assert_int_equal(end->prog_type, MKS_PROG_OBSERVE);
    assert_int_equal(end->abi_version, 1);
    assert_string_equal(prio->section, "mkscope.control/task_ready");
    assert_int_equal(prio->hook, MKS_EV_TASK_READY);
    assert_int_equal(prio->prog_type, MKS_PROG_CONTROL);
    assert_null(mks_obj_prog(obj, 2));

    /* BTF-defined maps read back, global data as one-entry arrays */
    static const struct mks_map_spec want[] = {
        {"counts", MKS_MAP_ARRAY, 4, 8, 64},
        {"per_worker", MKS_MAP_PERWORKER_ARRAY, 4, 8, 2},
        {"by_gen", MKS_MAP_HASH, 8, 4, 128},
        {"lat", MKS_MAP_HIST, 4, sizeof(struct mks_hist), 4},
        {"events", MKS_MAP_RINGBUF, 0, 0, 4096},
        {".rodata", MKS_MAP_ARRAY, 4, 16, 1}, /* scale (8) + mkscope_abi (4), padded */
        {".data", MKS_MAP_ARRAY, 4, 8, 1},
        {".bss", MKS_MAP_ARRAY, 4, 8, 1},
    };
    assert_int_equal(mks_obj_map_count(obj), sizeof(want) / sizeof(want[0]));
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        const struct mks_map_spec *m = find_map(obj, want[i].name, NULL);
        if (!m)
            print_error("map %s missing\n", want[i].name);
        assert_non_null(m);
        assert_int_equal(m->type, want[i].type);
        assert_int_equal(m->key_size, want[i].key_size);
        assert_int_equal(m->value_size, want[i].value_size);
        assert_int_equal(m->max_entries, want[i].max_entries);
    }

    /* initial contents of global data; ordinary maps have none */
    uint32_t ro = UINT32_MAX, da = UINT32_MAX, bs = UINT32_MAX, cnt = UINT32_MAX;
    const void *data;
    size_t len;
    assert_non_null(find_map(obj, ".rodata", &ro));
    assert_non_null(find_map(obj, ".data", &da));
    assert_non_null(find_map(obj, ".bss", &bs));
    assert_non_null(find_map(obj, "counts", &cnt));
    assert_int_equal(mks_obj_map_init(obj, ro, &data, &len), 0);
    assert_int_equal(len, 16);
    /* the order of the two variables is clang's choice */
    uint64_t w0, w1;
    memcpy(&w0, data, 8);
    memcpy(&w1, (const char *)data + 8, 8);
    assert_true((w0 == 3 && (uint32_t)w1 == 1) || ((uint32_t)w0 == 1 && w1 == 3));
    assert_int_equal(mks_obj_map_init(obj, da, &data, &len), 0);
    uint64_t total;
    memcpy(&total, data, 8);
    assert_int_equal(total, 7);
    assert_int_equal(mks_obj_map_init(obj, bs, &data, &len), 0);
    assert_int_equal(((const uint8_t *)data)[0], 0);
    assert_int_equal(mks_obj_map_init(obj, cnt, &data, &len), -ENOENT);
    assert_int_equal(mks_obj_map_init(obj, 99, &data, &len), -EINVAL);

    /* relocated code: map refs by index (src 5), global data by index and
     * offset (src 6), the subprogram appended and called relatively */
    int n_map = 0, n_val = 0, n_call = 0;
    for (uint32_t i = 0; i < end->n_insns; i++) {
        const struct mks_insn *in = &end->insns[i];
        if (in->code == 0x18) {
            uint8_t src = mks_insn_src(in);
            assert_true(src == MKS_PSEUDO_MAP_IDX || src == MKS_PSEUDO_MAP_IDX_VALUE);
            assert_true(in->imm >= 0 && (uint32_t)in->imm < mks_obj_map_count(obj));
            if (src == MKS_PSEUDO_MAP_IDX) {
                n_map++;
            } else {
                n_val++;
                const struct mks_map_spec *m = &mks_obj_maps(obj)[in->imm];
                assert_true(m->name[0] == '.');
                assert_true((uint32_t)end->insns[i + 1].imm < m->value_size);
            }
            i++;
        } else if (in->code == 0x85 && mks_insn_src(in) == MKS_PSEUDO_CALL) {
            n_call++;
            assert_true((int64_t)i + 1 + in->imm < end->n_insns);
        }
    }
    assert_int_equal(n_map, 3); /* counts, lat, events */
    assert_true(n_val >= 3);    /* total (load, store), seen, and scale in the subprogram */
    assert_int_equal(n_call, 1);
    mks_obj_close(obj);
}

/* From memory: same result as from the file; the buffer may go away. */
static void test_open_mem(void **state)
{
    (void)state;
    size_t len;
    void *buf = read_obj("multi.bpf.o", &len);
    struct mks_obj *a = NULL, *b = NULL;
    char err[512];
    assert_int_equal(mks_obj_open_mem(buf, len, "multi", &a, err, sizeof(err)), 0);
    memset(buf, 0, len);
    free(buf);
    assert_int_equal(open_file("multi.bpf.o", &b, err, sizeof(err)), 0);
    assert_int_equal(mks_obj_prog_count(a), mks_obj_prog_count(b));
    for (uint32_t i = 0; i < mks_obj_prog_count(a); i++) {
        const struct mks_obj_prog *pa = mks_obj_prog(a, i), *pb = mks_obj_prog(b, i);
        assert_int_equal(pa->n_insns, pb->n_insns);
        assert_memory_equal(pa->insns, pb->insns, pa->n_insns * sizeof(struct mks_insn));
    }
    mks_obj_close(a);
    mks_obj_close(b);
    mks_obj_close(NULL);
}

static void expect_error(const char *file, int code, const char *msg)
{
    struct mks_obj *obj = (struct mks_obj *)0x1;
    char err[512];
    int rc = open_file(file, &obj, err, sizeof(err));
    if (rc != code || !strstr(err, msg))
        print_error("%s: rc %d err '%s' (want %d '%s')\n", file, rc, err, code, msg);
    assert_int_equal(rc, code);
    assert_non_null(strstr(err, msg));
    assert_null(strchr(err, '\n'));
    assert_ptr_equal(obj, (struct mks_obj *)0x1); /* untouched on error */
}

static void test_bad_objects(void **state)
{
    (void)state;
    expect_error("no-such-file.bpf.o", -ENOENT, "cannot open");
    expect_error("bad_section.bpf.o", -ENOENT,
                 "program 'p' in unknown section 'mkscope/task_finish'; expected mkscope/<event>");
    expect_error("linux_map.bpf.o", -EOPNOTSUPP, "map 'arr': unsupported map type 2 (Linux BPF_MAP_TYPE_ARRAY");
    expect_error("bad_hist.bpf.o", -EINVAL, "map 'h' (key 4, value 8, max_entries 4): value must be struct mks_hist");
    expect_error("core.bpf.o", -EOPNOTSUPP, "CO-RE relocations");
    expect_error("too_big.bpf.o", -E2BIG, "instructions with its subprograms; at most 4096");
    expect_error("many_progs.bpf.o", -E2BIG, "65 programs; at most 64 per object (the control block's program slots)");
    expect_error("extern.bpf.o", -EOPNOTSUPP, "extern symbol 'LINUX_KERNEL_VERSION' (kernel symbol or config)");

    /* a FIFO with no writer would block open() and read() forever; a
     * directory or a device is no object either */
    char fifo[64];
    snprintf(fifo, sizeof(fifo), "/tmp/mks_loader_fifo.%d", (int)getpid());
    assert_int_equal(mkfifo(fifo, 0600), 0);
    {
        struct mks_obj *o = NULL;
        char e[512];
        alarm(10);
        int rc = mks_obj_open_file(fifo, &o, e, sizeof(e));
        alarm(0);
        unlink(fifo);
        assert_int_equal(rc, -EINVAL);
        assert_non_null(strstr(e, "not a regular file (a FIFO)"));
        assert_int_equal(mks_obj_open_file("/dev/zero", &o, e, sizeof(e)), -EINVAL);
        assert_non_null(strstr(e, "not a regular file (a device)"));
        assert_int_equal(mks_obj_open_file("/tmp", &o, e, sizeof(e)), -EISDIR);
        assert_non_null(strstr(e, "not a regular file (a directory)"));
        assert_null(o);
    }

    /* a declared ABI the runtime lacks opens; the verifier refuses it */
    struct mks_obj *obj = NULL;
    char err[512];
    assert_int_equal(open_file("abi_v2.bpf.o", &obj, err, sizeof(err)), 0);
    assert_int_equal(mks_obj_prog(obj, 0)->abi_version, 2);
    mks_obj_close(obj);
}

static void test_not_bpf(void **state)
{
    (void)state;
    char err[512];
    struct mks_obj *obj = NULL;
    static const char text[] = "this is not an ELF object\n";
    assert_int_equal(mks_obj_open_mem(text, sizeof(text), "text", &obj, err, sizeof(err)), -ENOEXEC);
    assert_non_null(strstr(err, "text: not an ELF file"));
    assert_int_equal(mks_obj_open_mem("", 0, "empty", &obj, err, sizeof(err)), -ENOEXEC);
    assert_non_null(strstr(err, "empty: not an ELF file"));
    /* this test program: an ELF, but for the host's machine */
    assert_int_equal(mks_obj_open_file("/proc/self/exe", &obj, err, sizeof(err)), -ENOEXEC);
    assert_non_null(strstr(err, "is not BPF (247); compile with clang -target bpf"));
    assert_int_equal(mks_obj_open_mem(NULL, 5, "x", &obj, err, sizeof(err)), -EINVAL);
}

static void check_damaged(const void *buf, size_t len, int *n_ok, int *n_err)
{
    struct mks_obj *obj = NULL;
    char err[512];
    err[0] = '\0';
    int rc = mks_obj_open_mem(buf, len, "damaged", &obj, err, sizeof(err));
    if (rc == 0) {
        /* what opens must also be safe to verify */
        for (uint32_t i = 0; i < mks_obj_prog_count(obj); i++) {
            const struct mks_obj_prog *p = mks_obj_prog(obj, i);
            struct mks_verify_opts o = {.sz = sizeof(o), .prog_type = p->prog_type, .abi_version = p->abi_version,
                                        .hook = p->hook, .maps = mks_obj_maps(obj), .n_maps = mks_obj_map_count(obj)};
            char log[512];
            (void)mks_verify(p->insns, p->n_insns, &o, NULL, log, sizeof(log));
        }
        mks_obj_close(obj);
        (*n_ok)++;
    } else {
        assert_true(rc < 0);
        assert_true(err[0] != '\0');
        assert_null(strchr(err, '\n'));
        (*n_err)++;
    }
}

static void test_truncated(void **state)
{
    (void)state;
    size_t len;
    uint8_t *buf = read_obj("multi.bpf.o", &len);
    int ok = 0, bad = 0, tries = 0;
    size_t stepsz = len / 300 + 1;
    for (size_t n = 0; n < len; n += stepsz, tries++) {
        uint8_t *copy = malloc(n ? n : 1); /* exact size, so ASan sees overreads */
        memcpy(copy, buf, n);
        check_damaged(copy, n, &ok, &bad);
        free(copy);
    }
    /* the section header table sits at the end: every strict prefix fails */
    assert_int_equal(ok, 0);
    assert_int_equal(bad, tries);
    assert_true(tries >= 250);
    free(buf);
}

static void test_flipped_bytes(void **state)
{
    (void)state;
    const char *files[] = {"multi.bpf.o", "depwait.bpf.o"};
    int ok = 0, bad = 0;
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    for (size_t f = 0; f < 2; f++) {
        size_t len;
        uint8_t *buf = read_obj(files[f], &len);
        uint8_t *copy = malloc(len);
        for (int iter = 0; iter < 400; iter++) {
            memcpy(copy, buf, len);
            int flips = 1 + iter % 4;
            for (int k = 0; k < flips; k++) {
                seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                size_t pos = (size_t)(seed >> 33) % len;
                copy[pos] ^= (uint8_t)(1u << ((seed >> 20) & 7));
            }
            check_damaged(copy, len, &ok, &bad);
        }
        free(copy);
        free(buf);
    }
    /* flips in debug info leave the object usable, flips in headers don't */
    print_message("flipped bytes: %d objects opened, %d refused\n", ok, bad);
    assert_true(ok > 0);
    assert_true(bad > 0);
}

/* ---- hostile BTF ------------------------------------------------------
 * Each case rewrites a few fields of a good object's BTF; the loader must
 * refuse it with one line naming the problem, promptly.  libbpf 1.1 loops
 * forever on a self-referencing typedef and recurses without end on a
 * struct that contains itself, so each open runs in a child with an alarm:
 * a hang fails the case instead of the whole test run. */
struct btf_case {
    const char *name;
    const char *expect; /* in the error line */
    int (*edit)(struct btf_edit *e); /* 0 on success, -1: the object lacks the types */
};

static uint32_t maps_var(const struct btf_edit *e)
{
    for (uint32_t id = btf_edit_find(e, BTF_KIND_DATASEC, 0); id; id = btf_edit_find(e, BTF_KIND_DATASEC, id))
        if (strcmp(btf_edit_name(e, id), ".maps") == 0 && btf_edit_vlen(e, id) > 0)
            return btf_edit_xget(e, id, 0);
    return 0;
}

static int edit_typedef_self_var(struct btf_edit *e)
{
    uint32_t t = btf_edit_find(e, BTF_KIND_TYPEDEF, 0), v = maps_var(e);
    if (!t || !v)
        return -1;
    btf_edit_set(e, t, 2, t);
    btf_edit_set(e, v, 2, t); /* the map variable's type: what libbpf resolves first */
    return 0;
}

static int edit_typedef_self(struct btf_edit *e)
{
    uint32_t t = btf_edit_find(e, BTF_KIND_TYPEDEF, 0);
    if (!t)
        return -1;
    btf_edit_set(e, t, 2, t);
    return 0;
}

/* Two kinds without kind data become const -> volatile -> const. */
static int edit_modifier_cycle(struct btf_edit *e)
{
    uint32_t a = btf_edit_find(e, BTF_KIND_TYPEDEF, 0), b = btf_edit_find(e, BTF_KIND_PTR, 0);
    if (!a || !b)
        return -1;
    btf_edit_set_kind(e, a, BTF_KIND_CONST);
    btf_edit_set(e, a, 2, b);
    btf_edit_set_kind(e, b, BTF_KIND_VOLATILE);
    btf_edit_set(e, b, 2, a);
    return 0;
}

static int edit_ptr_self(struct btf_edit *e)
{
    uint32_t p = btf_edit_find(e, BTF_KIND_PTR, 0);
    if (!p)
        return -1;
    btf_edit_set(e, p, 2, p);
    return 0;
}

static uint32_t some_struct(const struct btf_edit *e)
{
    for (uint32_t id = btf_edit_find(e, BTF_KIND_STRUCT, 0); id; id = btf_edit_find(e, BTF_KIND_STRUCT, id))
        if (btf_edit_vlen(e, id) > 0)
            return id;
    return 0;
}

static int edit_struct_self(struct btf_edit *e)
{
    uint32_t s = some_struct(e);
    if (!s)
        return -1;
    btf_edit_xset(e, s, 1, s); /* member 0: {name_off, type, offset} */
    return 0;
}

static int edit_struct_via_typedef(struct btf_edit *e)
{
    uint32_t s = some_struct(e), t = btf_edit_find(e, BTF_KIND_TYPEDEF, 0);
    if (!s || !t)
        return -1;
    btf_edit_xset(e, s, 1, t);
    btf_edit_set(e, t, 2, s);
    return 0;
}

static int edit_array_self(struct btf_edit *e)
{
    uint32_t a = btf_edit_find(e, BTF_KIND_ARRAY, 0);
    if (!a)
        return -1;
    btf_edit_xset(e, a, 0, a); /* {type, index_type, nelems} */
    return 0;
}

static int edit_missing_type(struct btf_edit *e)
{
    uint32_t t = btf_edit_find(e, BTF_KIND_TYPEDEF, 0);
    if (!t)
        return -1;
    btf_edit_set(e, t, 2, e->n + 7);
    return 0;
}

/* A reference to type 0xffffffff: the check once took that id for "no more
 * references" and let it through, and the chain walk then read the record
 * of type 4294967295 (found by fuzz_loader: a VAR of type 0xffffffff). */
static int edit_var_type_max(struct btf_edit *e)
{
    uint32_t v = btf_edit_find(e, BTF_KIND_VAR, 0);
    if (!v)
        return -1;
    btf_edit_set(e, v, 2, 0xffffffffu);
    return 0;
}

static int edit_typedef_type_max(struct btf_edit *e)
{
    uint32_t t = btf_edit_find(e, BTF_KIND_TYPEDEF, 0);
    if (!t)
        return -1;
    btf_edit_set(e, t, 2, 0xffffffffu);
    return 0;
}

static int edit_member_type_max(struct btf_edit *e)
{
    uint32_t s = some_struct(e);
    if (!s)
        return -1;
    btf_edit_xset(e, s, 1, 0xffffffffu);
    return 0;
}

static int edit_array_type_max(struct btf_edit *e)
{
    uint32_t a = btf_edit_find(e, BTF_KIND_ARRAY, 0);
    if (!a)
        return -1;
    btf_edit_xset(e, a, 1, 0xffffffffu); /* the index type */
    return 0;
}

static int edit_name_offset(struct btf_edit *e)
{
    uint32_t t = btf_edit_find(e, BTF_KIND_TYPEDEF, 0);
    if (!t)
        return -1;
    btf_edit_set(e, t, 0, e->str_len + 100);
    return 0;
}

static int edit_member_name(struct btf_edit *e)
{
    uint32_t s = some_struct(e);
    if (!s)
        return -1;
    btf_edit_xset(e, s, 0, 0xfffffff0u);
    return 0;
}

static int edit_datasec_void(struct btf_edit *e)
{
    for (uint32_t id = btf_edit_find(e, BTF_KIND_DATASEC, 0); id; id = btf_edit_find(e, BTF_KIND_DATASEC, id))
        if (btf_edit_vlen(e, id) > 0) {
            btf_edit_xset(e, id, 0, 0);
            return 0;
        }
    return -1;
}

static const struct btf_case btf_cases[] = {
    {"typedef of the map variable refers to itself", "cyclic", edit_typedef_self_var},
    {"typedef refers to itself", "cyclic", edit_typedef_self},
    {"const -> volatile -> const", "cyclic", edit_modifier_cycle},
    {"pointer to itself", "cyclic", edit_ptr_self},
    {"struct contains itself", "contains itself", edit_struct_self},
    {"struct contains a typedef of itself", "contains itself", edit_struct_via_typedef},
    {"array of itself", "contains itself", edit_array_self},
    {"reference past the last type", "does not exist", edit_missing_type},
    {"type name outside the strings", "outside", edit_name_offset},
    {"member name outside the strings", "outside", edit_member_name},
    {"section variable of type void", "void", edit_datasec_void},
    {"variable of type 0xffffffff", "refers to type 4294967295, which does not exist", edit_var_type_max},
    {"typedef of type 0xffffffff", "refers to type 4294967295, which does not exist", edit_typedef_type_max},
    {"struct member of type 0xffffffff", "refers to type 4294967295, which does not exist", edit_member_type_max},
    {"array index of type 0xffffffff", "refers to type 4294967295, which does not exist", edit_array_type_max},
};

/* Child: 0 when refused with `expect` in the one-line error, 1 accepted,
 * 2 another error; an alarm ends a hang. */
static int open_hostile(const uint8_t *buf, size_t len, const char *expect)
{
    struct mks_obj *obj = NULL;
    char err[512] = "";
    alarm(5);
    int rc = mks_obj_open_mem(buf, len, "hostile.bpf.o", &obj, err, sizeof(err));
    if (rc == 0) {
        mks_obj_close(obj);
        return 1;
    }
    if (!strstr(err, expect) || strchr(err, '\n') || !strstr(err, "hostile.bpf.o: ")) {
        fprintf(stderr, "unexpected error line: %s\n", err);
        return 2;
    }
    return 0;
}

static void test_hostile_btf(void **state)
{
    (void)state;
    const char *files[] = {"count.bpf.o", "depwait.bpf.o", "multi.bpf.o"};
    int ran = 0, failed = 0;
    for (size_t f = 0; f < sizeof(files) / sizeof(files[0]); f++) {
        size_t len;
        uint8_t *orig = read_obj(files[f], &len);
        uint8_t *buf = malloc(len);
        for (size_t c = 0; c < sizeof(btf_cases) / sizeof(btf_cases[0]); c++) {
            static struct btf_edit e;
            memcpy(buf, orig, len);
            assert_int_equal(btf_edit_open(buf, len, &e), 0);
            if (btf_cases[c].edit(&e) != 0)
                continue;
            fflush(NULL);
            pid_t pid = fork();
            assert_true(pid >= 0);
            if (pid == 0)
                _exit(open_hostile(buf, len, btf_cases[c].expect));
            int status = 0;
            assert_int_equal(waitpid(pid, &status, 0), pid);
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                print_error("%s, %s: %s\n", files[f], btf_cases[c].name,
                            WIFSIGNALED(status) ? (WTERMSIG(status) == SIGALRM ? "hung (5 s)" : "crashed")
                            : WEXITSTATUS(status) == 1 ? "accepted" : "wrong error");
                failed++;
            }
            ran++;
        }
        free(buf);
        free(orig);
    }
    assert_int_equal(failed, 0);
    /* every case applies to at least one of the objects */
    assert_true(ran >= (int)(sizeof(btf_cases) / sizeof(btf_cases[0])));
}

/* A .BTF or .BTF.ext header whose length is not a multiple of 4: libbpf
 * reads the records behind it as u32s in place, misaligned (UBSan in an
 * instrumented libbpf, found by fuzz_loader); refused before libbpf. */
static void test_misaligned_btf_headers(void **state)
{
    (void)state;
    static const struct {
        const char *sec, *expect;
    } cases[] = {
        {".BTF", "corrupt BTF header: length 25 or type offset 0 not a multiple of 4"},
        {".BTF.ext", "corrupt .BTF.ext: header length 33 is not a multiple of 4"},
    };
    size_t len;
    uint8_t *orig = read_obj("count.bpf.o", &len), *buf = malloc(len);
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        memcpy(buf, orig, len);
        size_t at = elf_edit_section(buf, len, cases[k].sec);
        assert_true(at > 0);
        Elf64_Shdr sh;
        memcpy(&sh, buf + at, sizeof(sh));
        uint32_t hl;
        memcpy(&hl, buf + sh.sh_offset + 4, 4);
        assert_true(hl == 24 || hl == 32);
        hl++;
        memcpy(buf + sh.sh_offset + 4, &hl, 4);
        struct mks_obj *obj = NULL;
        char err[512];
        assert_int_equal(mks_obj_open_mem(buf, len, "odd.bpf.o", &obj, err, sizeof(err)), -ENOEXEC);
        if (!strstr(err, cases[k].expect))
            fail_msg("%s: %s", cases[k].sec, err);
        assert_null(obj);
    }
    /* an empty .BTF.ext: libbpf copied from its NULL data (UBSan) */
    memcpy(buf, orig, len);
    size_t at = elf_edit_section(buf, len, ".BTF.ext");
    assert_true(at > 0);
    Elf64_Shdr sh;
    memcpy(&sh, buf + at, sizeof(sh));
    sh.sh_size = 0;
    memcpy(buf + at, &sh, sizeof(sh));
    struct mks_obj *obj = NULL;
    char err[512];
    assert_int_equal(mks_obj_open_mem(buf, len, "odd.bpf.o", &obj, err, sizeof(err)), -ENOEXEC);
    assert_non_null(strstr(err, "corrupt .BTF.ext: 0 bytes, shorter than its header"));
    free(buf);
    free(orig);
}

/* A .bss (or .data) far larger than its file: refused before libbpf, which
 * allocated all of it (1.5 GB for an 8 KB object; found by fuzz_loader). */
static void test_huge_global_data(void **state)
{
    (void)state;
    static const char *const secs[] = {".bss", ".data", ".rodata"};
    size_t len;
    uint8_t *orig = read_obj("multi.bpf.o", &len), *buf = malloc(len);
    for (size_t k = 0; k < sizeof(secs) / sizeof(secs[0]); k++) {
        memcpy(buf, orig, len);
        size_t at = elf_edit_section(buf, len, secs[k]);
        assert_true(at > 0);
        Elf64_Shdr sh;
        memcpy(&sh, buf + at, sizeof(sh));
        sh.sh_type = SHT_NOBITS; /* no bytes in the file to bound it */
        sh.sh_size = 0x5b000000;
        memcpy(buf + at, &sh, sizeof(sh));
        struct mks_obj *obj = NULL;
        char err[512];
        assert_int_equal(mks_obj_open_mem(buf, len, "big.bpf.o", &obj, err, sizeof(err)), -E2BIG);
        assert_non_null(strstr(err, "is 1526726656 bytes; expected global data of at most 1048576 bytes"));
    }
    free(buf);
    free(orig);
}

/* Runs fn in a child where the bpf() system call kills the process;
 * returns the wait status. */
static int run_without_bpf(int (*fn)(void))
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct sock_filter filt[] = {
            BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
            BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_bpf, 0, 1),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        };
        struct sock_fprog prog = {.len = sizeof(filt) / sizeof(filt[0]), .filter = filt};
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
            syscall(__NR_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0)
            _exit(3);
        _exit(fn());
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return status;
}

static int open_all(void)
{
    const char *files[] = {"multi.bpf.o", "count.bpf.o", "latency.bpf.o", "depwait.bpf.o", "queue.bpf.o",
                           "genprog.bpf.o"};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        struct mks_obj *obj = NULL;
        char err[512];
        if (open_file(files[i], &obj, err, sizeof(err)) != 0)
            return 4;
        mks_obj_close(obj);
    }
    return 0;
}

static int call_bpf(void)
{
    return syscall(__NR_bpf, 0, NULL, 0) == -1 ? 5 : 6;
}

/* Open and relocate with bpf() forbidden: a call would kill the child. */
static void test_no_bpf_syscall(void **state)
{
    (void)state;
    /* the trap works: a direct bpf() call dies of SIGSYS */
    int status = run_without_bpf(call_bpf);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGSYS);

    status = run_without_bpf(open_all);
    if (!WIFEXITED(status))
        print_error("child killed by signal %d (a bpf() call?)\n", WIFSIGNALED(status) ? WTERMSIG(status) : -1);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_sections(void **state)
{
    (void)state;
    int32_t hook = -2;
    uint32_t type = 0;
    assert_int_equal(mks_hook_from_section("mkscope/task_end", &hook, &type), 0);
    assert_int_equal(hook, MKS_EV_TASK_END);
    assert_int_equal(type, MKS_PROG_OBSERVE);
    assert_int_equal(mks_hook_from_section("mkscope.control/task_assign", &hook, &type), 0);
    assert_int_equal(hook, MKS_EV_TASK_ASSIGN);
    assert_int_equal(type, MKS_PROG_CONTROL);
    assert_int_equal(mks_hook_from_section("mkscope/queue_pressure", &hook, NULL), 0);
    assert_int_equal(hook, MKS_EV_QUEUE_PRESSURE);
    assert_int_equal(mks_hook_from_section("mkscope/", &hook, &type), -ENOENT);
    assert_int_equal(mks_hook_from_section("kprobe/task_end", &hook, &type), -ENOENT);
    assert_int_equal(mks_hook_from_section("mkscope/task_end2", &hook, &type), -ENOENT);
    assert_int_equal(mks_hook_from_section(NULL, &hook, &type), -EINVAL);
    for (uint32_t e = 0; e < MKS_EV_COUNT; e++) {
        char sec[64];
        snprintf(sec, sizeof(sec), "mkscope/%s", mks_hook_event_name(e));
        assert_int_equal(mks_hook_from_section(sec, &hook, NULL), 0);
        assert_int_equal(hook, (int32_t)e);
    }
    assert_null(mks_hook_event_name(MKS_EV_COUNT));
}

/* loader_test PROGDIR --write-corpus DIR: the loader fuzzer's seeds, every
 * test object and monitor as built and each hostile BTF case of count.bpf.o
 * and multi.bpf.o. */
static int write_corpus(const char *dir)
{
    static const char *const files[] = {"count.bpf.o", "latency.bpf.o", "depwait.bpf.o", "queue.bpf.o",
                                        "genprog.bpf.o", "multi.bpf.o", "loops.bpf.o", "rejected.bpf.o",
                                        "core.bpf.o", "extern.bpf.o", "abi_v2.bpf.o", "bad_hist.bpf.o",
                                        "linux_map.bpf.o", "bad_section.bpf.o"};
    static struct btf_edit e;
    char path[1024];
    for (size_t f = 0; f < sizeof(files) / sizeof(files[0]); f++) {
        size_t len;
        uint8_t *buf = read_obj(files[f], &len);
        uint8_t *copy = malloc(len);
        for (int c = -1; c < (int)(sizeof(btf_cases) / sizeof(btf_cases[0])); c++) {
            memcpy(copy, buf, len);
            if (c >= 0) {
                if ((strcmp(files[f], "count.bpf.o") && strcmp(files[f], "multi.bpf.o")) ||
                    btf_edit_open(copy, len, &e) != 0 || btf_cases[c].edit(&e) != 0)
                    continue;
                snprintf(path, sizeof(path), "%s/btf%02d-%.*s", dir, c, (int)(strlen(files[f]) - 6), files[f]);
            } else {
                snprintf(path, sizeof(path), "%s/%.*s", dir, (int)(strlen(files[f]) - 6), files[f]);
            }
            FILE *out = fopen(path, "wb");
            if (!out || fwrite(copy, 1, len, out) != len || fclose(out) != 0) {
                perror(path);
                return 1;
            }
        }
        free(copy);
        free(buf);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        progdir = argv[1];
    if (argc > 3 && strcmp(argv[2], "--write-corpus") == 0)
        return write_corpus(argv[3]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_multi),         cmocka_unit_test(test_open_mem),
        cmocka_unit_test(test_bad_objects),   cmocka_unit_test(test_not_bpf),
        cmocka_unit_test(test_truncated),     cmocka_unit_test(test_flipped_bytes),
        cmocka_unit_test(test_no_bpf_syscall), cmocka_unit_test(test_sections),
        cmocka_unit_test(test_hostile_btf),
        cmocka_unit_test(test_btf_kept),
        cmocka_unit_test(test_huge_global_data),
        cmocka_unit_test(test_misaligned_btf_headers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

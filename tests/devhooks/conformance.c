/*
 * RFC 9669 conformance of the mkscope VM against the public bpf_conformance
 * cases (shared/conformance beside the checkout, or the folder in argv[1]).
 *
 *   devhooks_conformance [DIR]                    run each case in the VM
 *   devhooks_conformance --plugin EXE [DIR]       drive EXE the way the public
 *                                                 runner drives a plugin
 * Each case also runs in the decoded form the device runs (mks_vm_decode,
 * mks_vm_run_decoded), which must answer exactly as the VM: the same error,
 * r0 and count of executed instructions.  Built with MKS_CONF_GPU
 * (mkscope-vm-conformance-gpu, with conformance_gpu.cu) the cases run, in
 * addition, on the GPU: the VM compiled for it, the decoded form on one
 * thread and the decoded form in a warp, each held to the same.
 *
 * Each failure is printed with the case name and the reason; the last line is
 * "N passed, M failed".  The test fails when fewer than 300 cases pass or
 * when a failing case is not listed under "Unsupported ISA features" in
 * docs/devhooks.md.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mkscope/vm.h"

#define MAX_INSNS 8192
#define MAX_MEM   65536
#define MIN_PASS  300

struct conf_case {
    char name[256];
    struct mks_insn insns[MAX_INSNS];
    uint32_t n_insns;
    uint8_t mem[MAX_MEM];
    uint32_t mem_len;
    int expect_error;
    uint64_t result;
};

static char unsupported[64][128];
static int n_unsupported;

/* Case names listed as "- `name`" under the "Unsupported ISA features"
 * heading of docs/devhooks.md. */
static void load_unsupported(void)
{
    const char *src = getenv("MKS_SOURCE_DIR");
    char path[4096], line[512];
    int in = 0;
    FILE *f;
    snprintf(path, sizeof(path), "%s/docs/devhooks.md", src ? src : ".");
    if (!(f = fopen(path, "r")))
        return;
    while (fgets(line, sizeof(line), f)) {
        char *a, *b;
        if (line[0] == '#') {
            in = strstr(line, "Unsupported ISA features") != NULL;
            continue;
        }
        if (!in || strncmp(line, "- `", 3) != 0 || n_unsupported >= 64)
            continue;
        a = line + 3;
        if (!(b = strchr(a, '`')) || b - a >= 128)
            continue;
        memcpy(unsupported[n_unsupported], a, (size_t)(b - a));
        unsupported[n_unsupported++][b - a] = 0;
    }
    fclose(f);
}

static int is_unsupported(const char *name)
{
    for (int i = 0; i < n_unsupported; i++)
        if (strcmp(unsupported[i], name) == 0)
            return 1;
    return 0;
}

static int parse_case(const char *path, struct conf_case *c, char *why, size_t why_len)
{
    char line[1024];
    enum { NONE, ASM, RAW, MEM, RESULT, ERROR } sec = NONE;
    int have_result = 0;
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(why, why_len, "cannot open: %s", strerror(errno));
        return -1;
    }
    c->n_insns = 0;
    c->mem_len = 0;
    c->expect_error = 0;
    while (fgets(line, sizeof(line), f)) {
        char *p = line;
        if (line[0] == '#')
            continue;
        if (strncmp(line, "-- ", 3) == 0) {
            sec = !strncmp(line + 3, "asm", 3)      ? ASM
                  : !strncmp(line + 3, "raw", 3)    ? RAW
                  : !strncmp(line + 3, "mem", 3)    ? MEM
                  : !strncmp(line + 3, "result", 6) ? RESULT
                  : !strncmp(line + 3, "error", 5)  ? ERROR
                                                    : NONE;
            if (sec == ERROR)
                c->expect_error = 1;
            continue;
        }
        switch (sec) {
        case RAW: {
            char *end;
            uint64_t v;
            while (*p == ' ' || *p == '\t')
                p++;
            if (*p == '\n' || *p == 0)
                break;
            v = strtoull(p, &end, 16);
            if (end == p || c->n_insns >= MAX_INSNS) {
                fclose(f);
                snprintf(why, why_len, "bad raw line '%.40s'", line);
                return -1;
            }
            memcpy(&c->insns[c->n_insns++], &v, 8);
            break;
        }
        case MEM:
            for (;;) {
                char *end;
                unsigned long b = strtoul(p, &end, 16);
                if (end == p)
                    break;
                if (b > 0xff || c->mem_len >= MAX_MEM) {
                    fclose(f);
                    snprintf(why, why_len, "bad mem byte");
                    return -1;
                }
                c->mem[c->mem_len++] = (uint8_t)b;
                p = end;
            }
            break;
        case RESULT: {
            char *end;
            while (*p == ' ')
                p++;
            if (*p == '\n' || *p == 0)
                break;
            c->result = strtoull(p, &end, 16);
            have_result = end != p;
            break;
        }
        default:
            break;
        }
    }
    fclose(f);
    if (c->n_insns == 0) {
        snprintf(why, why_len, "no instructions");
        return -1;
    }
    if (!have_result && !c->expect_error) {
        snprintf(why, why_len, "neither result nor error");
        return -1;
    }
    return 0;
}

/* What one runner answered for a case. */
struct conf_run {
    uint64_t r0, insns;
    int rc;
};

#ifdef MKS_CONF_GPU
/* The device's runners (conformance_gpu.cu): the raw VM, the decoded form
 * on one thread, the decoded form in a warp with one lane running, then with
 * all 32 (one result per lane), into out[0..CONF_GPU_RUNNERS - 1]. */
#define CONF_GPU_RUNNERS (3 + 32)
int mks_conf_gpu_run(const struct mks_insn *insns, const struct mks_dinsn *dec, uint32_t n_insns,
                     const uint8_t *mem, uint32_t mem_len, struct conf_run *out);
static const char *gpu_runner_name(int i)
{
    static char lane[64];
    if (i < 3)
        return i == 0 ? "device VM" : i == 1 ? "device decoded" : "device decoded, warp";
    snprintf(lane, sizeof(lane), "device decoded, 32-lane warp, lane %d", i - 3);
    return lane;
}
#endif

/* One host run, raw or decoded, on a fresh copy of the case's memory. */
static void run_host(const struct conf_case *c, const struct mks_insn *text, int decoded,
                     uint8_t *mem, struct conf_run *out)
{
    struct mks_vm_env env;
    memcpy(mem, c->mem, c->mem_len);
    memset(&env, 0, sizeof(env));
    env.insns = text;
    env.n_insns = c->n_insns;
    env.flags = MKS_VM_F_UNWIND_HELPER;
    env.insn_limit = 10000000;
    env.extra.base = (uint64_t)(uintptr_t)mem;
    env.extra.len = c->mem_len;
    env.extra.writable = 1;
    out->r0 = 0;
    out->insns = 0;
    out->rc = (decoded ? mks_vm_run_decoded : mks_vm_run)(&env, c->mem_len ? (uint64_t)(uintptr_t)mem : 0,
                                                        c->mem_len, &out->r0, &out->insns);
}

/* Another runner's answer against the raw VM's: the same error, r0 and
 * count of executed instructions. */
static int same_run(const struct conf_run *ref, const struct conf_run *o, const char *who,
                    char *why, size_t why_len)
{
    if (o->rc == ref->rc && o->insns == ref->insns && (ref->rc != 0 || o->r0 == ref->r0))
        return 1;
    snprintf(why, why_len, "%s differs from the VM: rc %d/%d, r0 0x%" PRIx64 "/0x%" PRIx64
             ", insns %" PRIu64 "/%" PRIu64, who, o->rc, ref->rc, o->r0, ref->r0, o->insns, ref->insns);
    return 0;
}

/* In-process run: the raw VM, judged against the case, and the decoded form
 * (on the host; with MKS_CONF_GPU also the device's runners), each of which
 * must answer exactly as the raw VM.  Returns 1 on pass, 0 on fail with the
 * reason. */
static int run_vm(struct conf_case *c, char *why, size_t why_len)
{
    static uint8_t mem[MAX_MEM];
    static struct mks_dinsn dec[MAX_INSNS];
    struct conf_run ref, d;
    const uint64_t r0 = (run_host(c, c->insns, 0, mem, &ref), ref.r0);
    const int rc = ref.rc;
    if (mks_vm_decode(c->insns, c->n_insns, dec) != 0) {
        snprintf(why, why_len, "decode refused the program");
        return 0;
    }
    run_host(c, (const struct mks_insn *)dec, 1, mem, &d);
    if (!same_run(&ref, &d, "decoded", why, why_len))
        return 0;
#ifdef MKS_CONF_GPU
    {
        struct conf_run g[CONF_GPU_RUNNERS];
        if (mks_conf_gpu_run(c->insns, dec, c->n_insns, c->mem, c->mem_len, g) != 0) {
            snprintf(why, why_len, "CUDA failure");
            return 0;
        }
        for (int i = 0; i < CONF_GPU_RUNNERS; i++)
            if (!same_run(&ref, &g[i], gpu_runner_name(i), why, why_len))
                return 0;
    }
#endif
    if (c->expect_error) {
        if (rc != 0)
            return 1;
        snprintf(why, why_len, "expected an error, got r0=0x%" PRIx64, r0);
        return 0;
    }
    if (rc != 0) {
        snprintf(why, why_len, "error: %s", mks_vm_strerror(rc));
        return 0;
    }
    if (r0 != c->result) {
        snprintf(why, why_len, "r0=0x%" PRIx64 ", expected 0x%" PRIx64, r0, c->result);
        return 0;
    }
    return 1;
}

static void write_hex(FILE *f, const uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%02x  ", b[i]); /* the runner's spacing */
}

/* Drive the plugin as the public runner does: memory hex as argv[1], options
 * as argv[2], program hex on stdin, r0 compared in its low 32 bits. */
static int run_plugin(const char *plugin, struct conf_case *c, char *why, size_t why_len)
{
    char tmp[] = "/tmp/mks-conf-XXXXXX", cmd[8192], out[512] = "";
    size_t o = 0;
    int fd = mkstemp(tmp), status;
    FILE *f, *p;
    char *memhex;
    if (fd < 0 || !(f = fdopen(fd, "w"))) {
        snprintf(why, why_len, "temp file: %s", strerror(errno));
        return 0;
    }
    write_hex(f, (const uint8_t *)c->insns, c->n_insns * 8u);
    fputc('\n', f);
    fclose(f);
    memhex = calloc(1, c->mem_len * 4u + 1);
    if (!memhex) {
        unlink(tmp);
        snprintf(why, why_len, "out of memory");
        return 0;
    }
    for (uint32_t i = 0; i < c->mem_len; i++)
        sprintf(memhex + i * 4, "%02x  ", c->mem[i]);
    if (strlen(memhex) + strlen(plugin) + 64 > sizeof(cmd)) {
        free(memhex);
        unlink(tmp);
        snprintf(why, why_len, "memory too large for the command line");
        return 0;
    }
    snprintf(cmd, sizeof(cmd), "'%s' '%s' '' < %s", plugin, memhex, tmp);
    free(memhex);
    p = popen(cmd, "r");
    if (!p) {
        unlink(tmp);
        snprintf(why, why_len, "popen: %s", strerror(errno));
        return 0;
    }
    while (o + 1 < sizeof(out) && fgets(out + o, (int)(sizeof(out) - o), p))
        o = strlen(out);
    status = pclose(p);
    unlink(tmp);
    out[strcspn(out, "\n")] = 0;
    if (status != 0) {
        if (c->expect_error)
            return 1;
        snprintf(why, why_len, "plugin exit %d: %s", status, out);
        return 0;
    }
    if (c->expect_error) {
        snprintf(why, why_len, "expected an error, plugin printed %s", out);
        return 0;
    }
    if ((uint32_t)strtoull(out, NULL, 16) != (uint32_t)c->result) {
        snprintf(why, why_len, "plugin printed '%s', expected 0x%" PRIx64, out, c->result);
        return 0;
    }
    return 1;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
    const char *plugin = NULL, *dir = NULL;
    char defdir[4096], path[4600], why[512];
    char *names[2048];
    int n = 0, passed = 0, failed = 0, undocumented = 0;
    struct conf_case *c;
    DIR *d;
    struct dirent *e;

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--plugin") && i + 1 < argc)
            plugin = argv[++i];
        else
            dir = argv[i];
    }
    if (!dir) {
        const char *src = getenv("MKS_SOURCE_DIR");
        snprintf(defdir, sizeof(defdir), "%s/../shared/conformance", src ? src : "..");
        dir = defdir;
    }
    load_unsupported();
    if (!(d = opendir(dir))) {
        fprintf(stderr, "conformance: cannot open %s: %s\n", dir, strerror(errno));
        return 1;
    }
    while ((e = readdir(d)) && n < 2048) {
        size_t l = strlen(e->d_name);
        if (l > 5 && !strcmp(e->d_name + l - 5, ".data"))
            names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof(names[0]), cmp_names);
    c = malloc(sizeof(*c));
    if (!c)
        return 1;
    for (int i = 0; i < n; i++) {
        int ok;
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        snprintf(c->name, sizeof(c->name), "%.*s", (int)(strlen(names[i]) - 5), names[i]);
        if (parse_case(path, c, why, sizeof(why)) != 0)
            ok = 0;
        else if (plugin)
            ok = run_plugin(plugin, c, why, sizeof(why));
        else
            ok = run_vm(c, why, sizeof(why));
        if (ok) {
            passed++;
        } else {
            int doc = is_unsupported(c->name);
            failed++;
            undocumented += !doc;
            printf("FAIL %s: %s%s\n", c->name, why, doc ? " (documented as unsupported)" : "");
        }
        free(names[i]);
    }
    free(c);
    printf("%d passed, %d failed\n", passed, failed);
    if (passed < MIN_PASS) {
        fprintf(stderr, "conformance: fewer than %d cases passed\n", MIN_PASS);
        return 1;
    }
    if (undocumented) {
        fprintf(stderr, "conformance: %d failures not listed in docs/devhooks.md\n", undocumented);
        return 1;
    }
    return 0;
}

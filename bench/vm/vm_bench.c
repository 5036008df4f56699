/*
 * mkscope-vm-bench: nanoseconds per run of a monitor-shaped eBPF program
 * (monitor_prog.h: a 32-instruction latency histogram) in the mkscope VM, and, in the same run, in the uBPF
 * interpreter (and its JIT, for reference) when MKS_UBPF_LIB names a shared
 * build of uBPF (libubpf.so).  uBPF is loaded with dlopen so the repository
 * neither contains nor links it.
 *
 * Both VMs run the same instructions with bounds checks on; the only
 * difference is how the map is named: the mkscope program loads it with a
 * 64-bit immediate map reference (src 5), the uBPF one with a plain 64-bit
 * immediate that its helper ignores.  Same instruction count.
 *
 *   mkscope-vm-bench [runs]        default 1,000,000 runs x 11 repetitions
 * Prints the median ns/run of each engine and the ratio of the medians, and
 * the median (and range) of the per-repetition ratios: each repetition times
 * both engines back to back, so on a shared, loaded machine its ratio is
 * steadier than either time.
 */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mkscope/hook_abi.h"
#include "mkscope/maps.h"
#include "mkscope/vm.h"
#include "monitor_prog.h"

#define REPS    11
#define NCTX    1024
#define BUCKETS 64

static const struct mks_insn prog_mks[] = MKS_BMONITOR(5);
static const struct mks_insn prog_ubpf[] = MKS_BMONITOR(0);
#define N_INSNS ((uint32_t)(sizeof(prog_mks) / sizeof(prog_mks[0])))

static struct mks_hook_ctx ctxs[NCTX];
static uint64_t ubpf_counts[BUCKETS];

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v)
{
    qsort(v, REPS, sizeof(double), cmp_double);
    return v[REPS / 2];
}

/* ---- uBPF through dlopen ------------------------------------------------ */

typedef uint64_t (*ext_fn)(uint64_t, uint64_t, uint64_t, uint64_t, uint64_t);
struct ubpf_api {
    void *(*create)(void);
    void (*destroy)(void *);
    int (*reg)(void *, unsigned int, const char *, ext_fn);
    int (*load)(void *, const void *, uint32_t, char **);
    int (*exec)(const void *, void *, size_t, uint64_t *);
    void *(*compile)(void *, char **);
    int (*bounds)(void *, void *, bool (*)(void *, uint64_t, uint64_t));
};

static uint64_t ubpf_lookup(uint64_t map, uint64_t key, uint64_t a, uint64_t b, uint64_t c)
{
    uint32_t k = *(const uint32_t *)(uintptr_t)key;
    (void)map, (void)a, (void)b, (void)c;
    return k < BUCKETS ? (uint64_t)(uintptr_t)&ubpf_counts[k] : 0;
}

/* Let uBPF's bounds check accept the map's memory, as ours accepts the arena. */
static bool ubpf_in_map(void *arg, uint64_t addr, uint64_t size)
{
    uint64_t base = (uint64_t)(uintptr_t)ubpf_counts;
    (void)arg;
    return addr >= base && addr + size <= base + sizeof(ubpf_counts);
}

static int ubpf_open(struct ubpf_api *u, const char *path)
{
    void *h = dlopen(path, RTLD_NOW);
    if (!h) {
        fprintf(stderr, "vm-bench: cannot load uBPF from %s: %s\n", path, dlerror());
        return -1;
    }
    *(void **)&u->create = dlsym(h, "ubpf_create");
    *(void **)&u->destroy = dlsym(h, "ubpf_destroy");
    *(void **)&u->reg = dlsym(h, "ubpf_register");
    *(void **)&u->load = dlsym(h, "ubpf_load");
    *(void **)&u->exec = dlsym(h, "ubpf_exec");
    *(void **)&u->compile = dlsym(h, "ubpf_compile");
    *(void **)&u->bounds = dlsym(h, "ubpf_register_data_bounds_check");
    if (!u->create || !u->destroy || !u->reg || !u->load || !u->exec) {
        fprintf(stderr, "vm-bench: %s lacks the uBPF API (ubpf_create/load/exec/register)\n", path);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    long runs = argc > 1 ? atol(argv[1]) : 1000000;
    double t_mks[REPS], t_ubpf[REPS], t_jit[REPS], ratio[REPS];
    const char *ubpf_path = getenv("MKS_UBPF_LIB");
    struct mks_map_desc desc;
    struct mks_maps maps;
    struct mks_vm_env env;
    uint32_t map_id = 0;
    uint64_t sink = 0, count = 0, steps = 0;
    uint8_t *arena;
    int have_ubpf = 0, have_jit = 0;
    struct ubpf_api u = {0};
    void *uvm = NULL;
    uint64_t (*jit)(void *, size_t) = NULL;

    if (runs <= 0) {
        fprintf(stderr, "usage: mkscope-vm-bench [runs > 0]\n");
        return 2;
    }
    /* Latencies spread over many buckets so the branches are not all alike. */
    srand(1);
    for (int i = 0; i < NCTX; i++) {
        ctxs[i].t_start = 1000000;
        ctxs[i].t_now = 1000000 + ((uint64_t)rand() % (1u << (rand() % 19)));
    }

    memset(&desc, 0, sizeof(desc));
    desc.type = MKS_MAP_ARRAY;
    desc.key_size = 4;
    desc.value_size = 8;
    desc.max_entries = BUCKETS;
    if (mks_map_layout(&desc, 1, NULL, 0) != 0)
        return 1;
    desc.bank_off[1] = desc.bank_bytes;
    desc.state = MKS_MAPSTATE_LIVE;
    arena = calloc(2, desc.bank_bytes);
    if (!arena)
        return 1;
    memset(&maps, 0, sizeof(maps));
    maps.descs = &desc;
    maps.n_descs = 1;
    maps.arena = arena;
    maps.arena_len = 2 * desc.bank_bytes;
    memset(&env, 0, sizeof(env));
    env.insns = prog_mks;
    env.n_insns = N_INSNS;
    env.insn_limit = 4 * N_INSNS;
    env.ctx_len = sizeof(struct mks_hook_ctx);
    env.n_maps = 1;
    env.map_ids = &map_id;
    env.maps = &maps;

    if (ubpf_path && ubpf_open(&u, ubpf_path) == 0) {
        char *err = NULL;
        uvm = u.create();
        if (!uvm || u.reg(uvm, 1, "map_lookup", ubpf_lookup) != 0 ||
            u.load(uvm, prog_ubpf, (uint32_t)sizeof(prog_ubpf), &err) != 0) {
            fprintf(stderr, "vm-bench: uBPF rejected the program: %s\n", err ? err : "?");
            return 1;
        }
        if (u.bounds)
            u.bounds(uvm, NULL, ubpf_in_map);
        have_ubpf = 1;
        if (u.compile && (jit = (uint64_t(*)(void *, size_t))u.compile(uvm, &err)) != NULL)
            have_jit = 1;
    } else if (!ubpf_path) {
        printf("uBPF: MKS_UBPF_LIB not set, comparing against the recorded figure only\n");
    }

    for (int rep = 0; rep < REPS; rep++) {
        uint64_t t0 = now_ns();
        for (long i = 0; i < runs; i++) {
            struct mks_hook_ctx *c = &ctxs[i & (NCTX - 1)];
            uint64_t r0 = 0, n = 0;
            env.ctx = c;
            if (mks_vm_run(&env, (uint64_t)(uintptr_t)c, 0, &r0, &n) != 0) {
                fprintf(stderr, "vm-bench: mkscope VM error\n");
                return 1;
            }
            steps += n;
            sink += r0;
        }
        t_mks[rep] = (double)(now_ns() - t0) / (double)runs;
        if (have_ubpf) {
            t0 = now_ns();
            for (long i = 0; i < runs; i++) {
                uint64_t r0 = 0;
                if (u.exec(uvm, &ctxs[i & (NCTX - 1)], sizeof(struct mks_hook_ctx), &r0) != 0) {
                    fprintf(stderr, "vm-bench: uBPF error\n");
                    return 1;
                }
                sink += r0;
            }
            t_ubpf[rep] = (double)(now_ns() - t0) / (double)runs;
            ratio[rep] = t_ubpf[rep] / t_mks[rep];
        }
        if (have_jit) {
            t0 = now_ns();
            for (long i = 0; i < runs; i++)
                sink += jit(&ctxs[i & (NCTX - 1)], sizeof(struct mks_hook_ctx));
            t_jit[rep] = (double)(now_ns() - t0) / (double)runs;
        }
    }
    for (int b = 0; b < BUCKETS; b++)
        count += *(uint64_t *)(arena + (uint64_t)b * desc.stride);
    if (count != (uint64_t)runs * REPS || (have_ubpf && ubpf_counts[0] + count == 0)) {
        fprintf(stderr, "vm-bench: counted %llu of %llu runs\n", (unsigned long long)count,
                (unsigned long long)runs * REPS);
        return 1;
    }
    printf("program: %u instructions, %.1f executed per run (sink %llu)\n", N_INSNS,
           (double)steps / ((double)runs * REPS), (unsigned long long)(sink & 1));
    printf("mkscope VM:        %7.1f ns/run (median of %d x %ld runs)\n", median(t_mks), REPS,
           runs);
    if (have_ubpf) {
        double m = median(t_mks), ub = median(t_ubpf);
        printf("uBPF interpreter:  %7.1f ns/run\n", ub);
        if (have_jit)
            printf("uBPF x86 JIT:      %7.1f ns/run\n", median(t_jit));
        printf("speedup over the uBPF interpreter: %.2fx (ratio of the medians)\n", ub / m);
        double mr = median(ratio); /* sorts ratio */
        printf("per-repetition speedup: median %.2fx, range %.2f-%.2fx\n", mr, ratio[0],
               ratio[REPS - 1]);
    } else {
        printf("speedup over the recorded uBPF interpreter figure (340 ns/run): %.2fx\n",
               340.0 / median(t_mks));
    }
    if (uvm)
        u.destroy(uvm);
    free(arena);
    return 0;
}

/*
 * mkscope-bench: run the reference megakernel.
 *
 *   mkscope-bench run [options]      all ranks (forked), or one with --rank
 *   mkscope-bench reference [options] the plain reference's tokens
 *
 * Exit codes: 0 ok, 1 run failed, 2 bad command line, 3 output mismatch
 * against the reference (--check).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_int.h"
#include "cuda_backend.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: mkscope-bench run [OPTIONS]\n"
            "       mkscope-bench reference [OPTIONS]\n"
            "\n"
            "Runs decode steps of a small tensor-parallel MoE transformer as a persistent\n"
            "megakernel task graph, one process per rank, with every mkscope hook in place.\n"
            "\n"
            "OPTIONS\n"
            "  --backend cpu|cuda   where tasks run (default cpu)\n"
            "  --cuda-mode MODE     persistent (one megakernel, default), per-op (a kernel\n"
            "                       per operator, NCCL all-reduce) or graph (per-op as a\n"
            "                       CUDA Graph)\n"
            "  --ranks N            ranks, one process each (default 1)\n"
            "  --rank R             run only rank R of a job launched elsewhere; the ranks\n"
            "                       meet in shared memory named by --job\n"
            "  --job NAME           job name: shared memory and devhooks control blocks\n"
            "                       (/mkscope.NAME.RANK); default mksbench\n"
            "  --steps N            decode steps (default 20)\n"
            "  --layers N --hidden N --heads N (per rank) --head-dim N --experts N --topk N\n"
            "  --ffn N --vocab N --tiles N --workers N (per rank) --batch N --max-len N\n"
            "  --seed N             weights and requests (default 1)\n"
            "  --queue-pressure N   worker queue depth raising QUEUE_PRESSURE (default 8)\n"
            "  --step-interval-us N start steps at most every N us, idling in between\n"
            "                       (CPU backend; paces long demo runs; default 0)\n"
            "  --wait-agents MS     before the first step each rank waits up to MS ms for an\n"
            "                       agent to attach programs (hooks build; default 0)\n"
            "  --ar-relay           rank r sends its all-reduce contribution only after rank\n"
            "                       r-1's has arrived (waits chain rank to rank; CPU backend\n"
            "                       and --cuda-mode persistent)\n"
            "  --fault SPEC         inject a fault; repeat to combine. SPEC is\n"
            "                       TYPE:key=value,... with TYPE one of task-delay, moe-skew,\n"
            "                       notify-delay, queue-oversub, comm-delay, tile-starve,\n"
            "                       slow-rank and keys rank, class (task class name), gen,\n"
            "                       magnitude (microseconds added per affected step), steps\n"
            "                       (N or N-M; all, or no steps key: every step, persistent),\n"
            "                       worker (queue-oversub), tile (tile-starve), expert (moe-skew)\n"
            "  --truth FILE         write the ground truth of the faults (JSON)\n"
            "  --baseline FILE      a clean run's --json of this configuration: the fault\n"
            "                       plan then scales its delays so that each faulted step\n"
            "                       grows by the magnitude (docs/bench.md)\n"
            "  --json FILE          write results: per-rank step times, per-class task\n"
            "                       counts, tokens (JSON)\n"
            "  --trace PREFIX       native profiler trace PREFIX.rankR.json (profiler build)\n"
            "  --counters PREFIX    fixed per-step counters PREFIX.rankR.json (counters build)\n"
            "  --check              compare tokens with the reference; exit 3 on mismatch\n"
            "  -q, --quiet          no summary on stdout\n"
            "  -h, --help\n"
            "  --version            the version\n"
            "\n"
            "EXAMPLES\n"
            "  mkscope-bench run --ranks 4 --steps 20 --json out.json\n"
            "  mkscope-bench run --ranks 4 --fault comm-delay:rank=2,gen=1,magnitude=2000,"
            "steps=5-9 \\\n"
            "      --truth truth.json --json out.json --check\n"
            "  mkscope-bench run --ranks 2 --fault task-delay:rank=1,class=attention,"
            "magnitude=1500\n"
            "  mkscope-bench run --ranks 4 --steps 3000 --step-interval-us 2000 --job demo\n"
            "  srun -n 4 sh -c 'mkscope-bench run --ranks 4 --rank $SLURM_PROCID --job j1'\n");
}

enum {
    O_BACKEND = 256,
    O_RANKS,
    O_RANK,
    O_JOB,
    O_STEPS,
    O_LAYERS,
    O_HIDDEN,
    O_HEADS,
    O_HEAD_DIM,
    O_EXPERTS,
    O_TOPK,
    O_FFN,
    O_VOCAB,
    O_TILES,
    O_WORKERS,
    O_BATCH,
    O_MAX_LEN,
    O_SEED,
    O_QP,
    O_FAULT,
    O_TRUTH,
    O_BASELINE,
    O_JSON,
    O_TRACE,
    O_COUNTERS,
    O_CHECK,
    O_CUDA_MODE,
    O_INTERVAL,
    O_WAIT_AGENTS,
    O_AR_RELAY,
};

static const struct option opts[] = {
    {"backend", required_argument, NULL, O_BACKEND},
    {"ranks", required_argument, NULL, O_RANKS},
    {"rank", required_argument, NULL, O_RANK},
    {"job", required_argument, NULL, O_JOB},
    {"steps", required_argument, NULL, O_STEPS},
    {"layers", required_argument, NULL, O_LAYERS},
    {"hidden", required_argument, NULL, O_HIDDEN},
    {"heads", required_argument, NULL, O_HEADS},
    {"head-dim", required_argument, NULL, O_HEAD_DIM},
    {"experts", required_argument, NULL, O_EXPERTS},
    {"topk", required_argument, NULL, O_TOPK},
    {"ffn", required_argument, NULL, O_FFN},
    {"vocab", required_argument, NULL, O_VOCAB},
    {"tiles", required_argument, NULL, O_TILES},
    {"workers", required_argument, NULL, O_WORKERS},
    {"batch", required_argument, NULL, O_BATCH},
    {"max-len", required_argument, NULL, O_MAX_LEN},
    {"seed", required_argument, NULL, O_SEED},
    {"queue-pressure", required_argument, NULL, O_QP},
    {"step-interval-us", required_argument, NULL, O_INTERVAL},
    {"wait-agents", required_argument, NULL, O_WAIT_AGENTS},
    {"ar-relay", no_argument, NULL, O_AR_RELAY},
    {"fault", required_argument, NULL, O_FAULT},
    {"truth", required_argument, NULL, O_TRUTH},
    {"baseline", required_argument, NULL, O_BASELINE},
    {"json", required_argument, NULL, O_JSON},
    {"trace", required_argument, NULL, O_TRACE},
    {"counters", required_argument, NULL, O_COUNTERS},
    {"check", no_argument, NULL, O_CHECK},
    {"cuda-mode", required_argument, NULL, O_CUDA_MODE},
    {"quiet", no_argument, NULL, 'q'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static int num(const char *opt, const char *v, uint64_t max, uint64_t *out)
{
    char *end;
    errno = 0;
    if (!*v || *v == '-') {
        fprintf(stderr, "mkscope-bench: --%s needs a non-negative number, got '%s'\n", opt, v);
        return -1;
    }
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || *end || x > max) {
        fprintf(stderr, "mkscope-bench: --%s: '%s' is not a number up to %" PRIu64 "\n", opt, v,
                max);
        return -1;
    }
    *out = x;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "--version")) {
        printf("mkscope-bench %s\n", MKS_VERSION);
        return 0;
    }
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    int is_ref = !strcmp(cmd, "reference");
    if (!is_ref && strcmp(cmd, "run")) {
        fprintf(stderr, "mkscope-bench: unknown command '%s' (run, reference; --help)\n", cmd);
        return 2;
    }
    struct mks_bench_config cfg;
    mks_bench_config_default(&cfg);
    const char *backend = "cpu", *truth = NULL, *json = NULL, *baseline = NULL;
    const char *fault_spec[MKS_BENCH_MAX_FAULTS];
    uint32_t n_spec = 0;
    int64_t rank = -1;
    int check = 0, quiet = 0, c;
    uint64_t v;
    optind = 2;
    while ((c = getopt_long(argc, argv, "qh", opts, NULL)) != -1) {
        const char *name = NULL;
        for (const struct option *o = opts; o->name; o++)
            if (o->val == c)
                name = o->name;
        switch (c) {
#define U32(O, field)                                                                              \
    case O:                                                                                        \
        if (num(name, optarg, UINT32_MAX, &v))                                                     \
            return 2;                                                                              \
        cfg.field = (uint32_t)v;                                                                   \
        break;
            U32(O_RANKS, ranks)
            U32(O_STEPS, steps)
            U32(O_LAYERS, layers)
            U32(O_HIDDEN, hidden)
            U32(O_HEADS, heads)
            U32(O_HEAD_DIM, head_dim)
            U32(O_EXPERTS, experts)
            U32(O_TOPK, topk)
            U32(O_FFN, ffn)
            U32(O_VOCAB, vocab)
            U32(O_TILES, tiles)
            U32(O_WORKERS, workers)
            U32(O_BATCH, batch)
            U32(O_MAX_LEN, max_len)
            U32(O_QP, queue_pressure)
            U32(O_INTERVAL, step_interval_us)
            U32(O_WAIT_AGENTS, wait_agents_ms)
#undef U32
        case O_SEED:
            if (num(name, optarg, UINT64_MAX, &v))
                return 2;
            cfg.seed = v;
            break;
        case O_RANK:
            if (num(name, optarg, MKS_BENCH_MAX_RANKS - 1, &v))
                return 2;
            rank = (int64_t)v;
            break;
        case O_BACKEND:
            if (strcmp(optarg, "cpu") && strcmp(optarg, "cuda")) {
                fprintf(stderr, "mkscope-bench: --backend must be cpu or cuda, got '%s'\n", optarg);
                return 2;
            }
            backend = optarg;
            break;
        case O_JOB:
            cfg.job = optarg;
            break;
        case O_CUDA_MODE:
            if (!strcmp(optarg, "persistent"))
                cfg.cuda_mode = MKS_BENCH_CUDA_PERSISTENT;
            else if (!strcmp(optarg, "per-op"))
                cfg.cuda_mode = MKS_BENCH_CUDA_PER_OP;
            else if (!strcmp(optarg, "graph"))
                cfg.cuda_mode = MKS_BENCH_CUDA_GRAPH;
            else {
                fprintf(
                    stderr,
                    "mkscope-bench: --cuda-mode must be persistent, per-op or graph, got '%s'\n",
                    optarg);
                return 2;
            }
            break;
        case O_FAULT:
            if (n_spec >= MKS_BENCH_MAX_FAULTS) {
                fprintf(stderr, "mkscope-bench: at most %u --fault options\n",
                        MKS_BENCH_MAX_FAULTS);
                return 2;
            }
            fault_spec[n_spec++] = optarg;
            break;
        case O_TRUTH:
            truth = optarg;
            break;
        case O_BASELINE:
            baseline = optarg;
            break;
        case O_JSON:
            json = optarg;
            break;
        case O_TRACE:
            cfg.trace = optarg;
            break;
        case O_COUNTERS:
            cfg.counters = optarg;
            break;
        case O_CHECK:
            check = 1;
            break;
        case O_AR_RELAY:
            cfg.ar_relay = 1;
            break;
        case 'q':
            quiet = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            fprintf(stderr, "mkscope-bench: bad option (see --help)\n");
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "mkscope-bench: unexpected argument '%s' (see --help)\n", argv[optind]);
        return 2;
    }
    char err[512] = "";
    if (mks_bench_config_check(&cfg, err, sizeof(err))) {
        fprintf(stderr, "mkscope-bench: %s\n", err);
        return 2;
    }
    if (rank >= (int64_t)cfg.ranks) {
        fprintf(stderr, "mkscope-bench: --rank %" PRId64 " not in 0..%u\n", rank, cfg.ranks - 1);
        return 2;
    }
#ifndef MKS_BENCH_PROFILER
    if (cfg.trace) {
        fprintf(stderr, "mkscope-bench: --trace needs the profiler build (mkscope-bench-prof)\n");
        return 2;
    }
#endif
#ifndef MKS_BENCH_COUNTERS
    if (cfg.counters) {
        fprintf(stderr, "mkscope-bench: --counters needs the counters build "
                        "(mkscope-bench-counters, mkscope-bench-obs)\n");
        return 2;
    }
#endif
    struct mks_fault faults[MKS_BENCH_MAX_FAULTS];
    for (uint32_t i = 0; i < n_spec; i++) {
        if (mks_fault_parse(fault_spec[i], &cfg, &faults[i], err, sizeof(err))) {
            fprintf(stderr, "mkscope-bench: %s\n", err);
            return 2;
        }
    }
    uint64_t *baseline_ns = NULL;
    if (baseline) {
        if (mks_bench_baseline_load(&cfg, baseline, &baseline_ns, err, sizeof(err))) {
            fprintf(stderr, "mkscope-bench: %s\n", err);
            return 2;
        }
        cfg.baseline_ns = baseline_ns;
    }
    struct mks_bench_result *res = NULL, *ref = NULL;
    int rc;
    if (is_ref) {
        rc = mks_bench_reference(&cfg, faults, n_spec, &res);
        if (rc)
            snprintf(err, sizeof(err), "reference: %s", strerror(-rc));
    } else {
        if (truth && rank <= 0 &&
            mks_bench_truth_write(&cfg, faults, n_spec, truth, err, sizeof(err))) {
            fprintf(stderr, "mkscope-bench: %s\n", err);
            free(baseline_ns);
            return 1;
        }
        if (!strcmp(backend, "cuda") && cfg.ar_relay &&
            cfg.cuda_mode != MKS_BENCH_CUDA_PERSISTENT) {
            /* per-op and graph builds all-reduce with NCCL, which has no relay */
            fprintf(stderr, "mkscope-bench: --ar-relay needs --cuda-mode persistent\n");
            free(baseline_ns);
            return 2;
        }
        if (!strcmp(backend, "cuda"))
            rc = mks_bench_cuda_run(&cfg, faults, n_spec, (int32_t)rank, &res, err, sizeof(err));
        else if (rank >= 0)
            rc = mks_bench_run_rank(&cfg, faults, n_spec, (uint32_t)rank, &res, err, sizeof(err));
        else
            rc = mks_bench_run(&cfg, faults, n_spec, &res, err, sizeof(err));
    }
    free(baseline_ns); /* the ranks are done with it */
    cfg.baseline_ns = NULL;
    if (rc) {
        fprintf(stderr, "mkscope-bench: %s\n", err);
        return 1;
    }
    if (!res)
        return 0; /* a rank other than 0 */
    int status = 0;
    if (json && mks_bench_result_write_json(res, &cfg, is_ref ? "reference" : backend, json, err,
                                            sizeof(err))) {
        fprintf(stderr, "mkscope-bench: %s\n", err);
        status = 1;
    }
    uint32_t mismatches = 0;
    if (check && !is_ref) {
        if (mks_bench_reference(&cfg, faults, n_spec, &ref)) {
            fprintf(stderr, "mkscope-bench: reference failed\n");
            status = 1;
        } else {
            for (size_t i = 0; i < (size_t)cfg.steps * cfg.batch; i++)
                mismatches += res->tokens[i] != ref->tokens[i];
            if (mismatches) {
                fprintf(stderr, "mkscope-bench: %u of %zu tokens differ from the reference\n",
                        mismatches, (size_t)cfg.steps * cfg.batch);
                status = status ? status : 3;
            }
        }
    }
    if (!quiet) {
        uint64_t ntok = 0;
        for (size_t i = 0; i < (size_t)cfg.steps * cfg.batch; i++)
            ntok += res->tokens[i] >= 0;
        printf("%s: %u ranks, %u steps, %" PRIu64 " tokens, wall %.1f ms\n",
               is_ref ? "reference" : backend, cfg.ranks, cfg.steps, ntok, res->wall_ns / 1e6);
        for (uint32_t r = 0; res->step_ns && r < res->ranks; r++) {
            uint64_t tot = 0, mx = 0;
            for (uint32_t s = 0; s < res->steps; s++) {
                uint64_t x = res->step_ns[(size_t)r * res->steps + s];
                tot += x;
                mx = x > mx ? x : mx;
            }
            printf("  rank %u: step mean %.1f us, max %.1f us\n", r, tot / 1e3 / res->steps,
                   mx / 1e3);
        }
        if (check && ref)
            printf("check: tokens %s the reference\n", mismatches ? "DIFFER from" : "match");
    }
    mks_bench_result_free(ref);
    mks_bench_result_free(res);
    return status;
}

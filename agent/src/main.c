/*
 * mkscope-agent: command line.  The daemon itself is agent.c.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"
#include "mkscope/probe.h"
#include "mkscope/wire.h"

#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef MKS_MONITORS_BUILD_DIR
#define MKS_MONITORS_BUILD_DIR ""
#endif

/* Built-in monitors: $MKS_MONITORS_DIR, else next to an installed binary
 * (<prefix>/lib/mkscope/monitors), else the build tree this binary came from. */
static const char *default_monitors_dir(void)
{
    static char dir[PATH_MAX];
    const char *env = getenv("MKS_MONITORS_DIR");
    if (env && *env)
        return env;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            struct stat st;
            int len = snprintf(dir, sizeof(dir), "%.*s/../lib/mkscope/monitors",
                               (int)(sizeof(dir) - 32), exe);
            if (len > 0 && stat(dir, &st) == 0 && S_ISDIR(st.st_mode))
                return dir;
        }
    }
    return MKS_MONITORS_BUILD_DIR;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: mkscope-agent --job NAME --rank N [OPTIONS]\n"
            "\n"
            "Runs beside one rank of a megakernel job: attaches the standard monitors to the\n"
            "rank's hooks, summarises every epoch and streams the summaries to the collector.\n"
            "\n"
            "OPTIONS\n"
            "  --job NAME            job name, as the application's runtime was given it\n"
            "  --rank N              rank to serve\n"
            "  --collector URL       collector ingest socket (default tcp://127.0.0.1:7400)\n"
            "  --survey URL          collector survey socket for live queries (default: none)\n"
            "  --epoch-ms MS         epoch length (default 100)\n"
            "  --budget BYTES        telemetry budget in bytes per second (default: unlimited)\n"
            "  --step-detail MODE    all: per-step rows (task classes, workers, waits,\n"
            "                        releases) for every step (default); auto: only for steps\n"
            "                        longer than 1.2 x the median of the recent ones (and\n"
            "                        the rest of such a run), their neighbours, every\n"
            "                        --detail-every'th step and the first --detail-warmup;\n"
            "                        the others' tasks in rows of no step, their other rows\n"
            "                        counted as withheld (docs/agent.md)\n"
            "  --detail-every K      with --step-detail auto: steps 0, K, 2K... keep their\n"
            "                        detail on every rank, and every 2nd of steps 0..63\n"
            "                        (default 4; 0: none by number)\n"
            "  --detail-warmup N     with --step-detail auto: steps 0..N-1 keep it (default 0)\n"
            "  --buffer-bytes BYTES  memory for summaries the collector has not acked (8 MiB)\n"
            "  --spool-dir DIR       keep every unacked summary in DIR/JOB.RANK too (a crashed\n"
            "                        agent's are sent by the next one) and spill there when\n"
            "                        memory is full; the agents of a node may share DIR\n"
            "  --spool-bytes BYTES   bound of the disk spool (default 256 MiB)\n"
            "  --spool-spill-only    write to --spool-dir only what overflows memory\n"
            "  --key FILE            shared MAC key (32 bytes or 64 hex digits, mode 600)\n"
            "  --fresh-window SEC    with --key: refuse commands and surveys sent more than SEC\n"
            "                        away from this host's clock (default 60)\n"
            "  --monitors DIR        built-in monitor objects (default %s)\n"
            "  --attach LIST         built-in monitors to attach, comma-separated\n"
            "                        (default latency,depwait,queue,genprog; '' for none)\n"
            "  --lease-ms MS         lease on the hooks (default 3 epochs, at least 1000): if\n"
            "                        the agent stops, the hooks detach this long after its\n"
            "                        last renewal\n"
            "  --heartbeat-ms MS     heartbeat when nothing else was sent (default 1000)\n"
            "  --timeout-ms MS       reply timeout before resending (default 1000)\n"
            "  --drain-ms MS         at exit, time to deliver what is buffered (default 3000)\n"
            "  --exit-with-app       exit once the application has ended and all is delivered\n"
            "  --stats FILE          write counters as one JSON line at exit\n"
            "  --probe-max-cost N    instructions per event a probe's program may cost, as\n"
            "                        the verifier states it (default %d; mkscope probe)\n"
            "  -v, --verbose         more log lines (twice: per summary)\n"
            "  -h, --help            this text\n"
            "  --version             the version\n"
            "\n"
            "EXAMPLES\n"
            "  mkscope-agent --job llm --rank 0 --collector tcp://10.0.0.5:7400 --budget 20000\n"
            "  mkscope-agent --job t1 --rank 3 --collector ipc:///tmp/t1/ingest --exit-with-app\n",
            default_monitors_dir(), MKS_PROBE_COST_DEFAULT);
}

static int parse_u64(const char *opt, const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    char *end;
    errno = 0;
    if (!s || !*s || *s == '-') {
        fprintf(stderr, "mkscope-agent: %s needs a number\n", opt);
        return -1;
    }
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v < min || v > max) {
        fprintf(stderr, "mkscope-agent: %s '%s': expected a number in %" PRIu64 "..%" PRIu64 "\n",
                opt, s, min, max);
        return -1;
    }
    *out = v;
    return 0;
}

/* --attach LIST: comma-separated built-in monitor names, each as the
 * collector checks a program's name (no path); empty: none. */
static int check_attach_list(const char *list)
{
    char buf[512];
    if (!*list)
        return 0;
    if (strlen(list) >= sizeof(buf)) {
        fprintf(stderr, "mkscope-agent: --attach: the list is longer than %zu bytes\n",
                sizeof(buf) - 1);
        return -1;
    }
    snprintf(buf, sizeof(buf), "%s", list);
    for (char *m = buf, *next; m; m = next) {
        next = strchr(m, ',');
        if (next)
            *next++ = 0;
        if (!mks_wire_prog_name_valid(m)) {
            fprintf(stderr,
                    "mkscope-agent: --attach: monitor name '%s' is not " MKS_WIRE_PROG_GRAMMAR "\n",
                    mks_wire_one_line(m));
            return -1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "--version")) {
        printf("mkscope-agent %s\n", MKS_VERSION);
        return 0;
    }
    enum {
        O_JOB = 256, O_RANK, O_COLLECTOR, O_SURVEY, O_EPOCH, O_BUDGET, O_BUFFER, O_SPOOL_DIR,
        O_SPOOL_BYTES, O_KEY, O_MONITORS, O_ATTACH, O_LEASE, O_HEARTBEAT, O_TIMEOUT, O_DRAIN,
        O_EXIT_WITH_APP, O_STATS, O_SPILL_ONLY, O_FRESH, O_PROBE_COST, O_STEP_DETAIL,
        O_DETAIL_EVERY, O_DETAIL_WARMUP
    };
    static const struct option lo[] = {
        {"job", required_argument, 0, O_JOB},
        {"rank", required_argument, 0, O_RANK},
        {"collector", required_argument, 0, O_COLLECTOR},
        {"survey", required_argument, 0, O_SURVEY},
        {"epoch-ms", required_argument, 0, O_EPOCH},
        {"budget", required_argument, 0, O_BUDGET},
        {"step-detail", required_argument, 0, O_STEP_DETAIL},
        {"detail-every", required_argument, 0, O_DETAIL_EVERY},
        {"detail-warmup", required_argument, 0, O_DETAIL_WARMUP},
        {"buffer-bytes", required_argument, 0, O_BUFFER},
        {"spool-dir", required_argument, 0, O_SPOOL_DIR},
        {"spool-bytes", required_argument, 0, O_SPOOL_BYTES},
        {"spool-spill-only", no_argument, 0, O_SPILL_ONLY},
        {"key", required_argument, 0, O_KEY},
        {"monitors", required_argument, 0, O_MONITORS},
        {"attach", required_argument, 0, O_ATTACH},
        {"lease-ms", required_argument, 0, O_LEASE},
        {"heartbeat-ms", required_argument, 0, O_HEARTBEAT},
        {"timeout-ms", required_argument, 0, O_TIMEOUT},
        {"drain-ms", required_argument, 0, O_DRAIN},
        {"exit-with-app", no_argument, 0, O_EXIT_WITH_APP},
        {"stats", required_argument, 0, O_STATS},
        {"fresh-window", required_argument, 0, O_FRESH},
        {"probe-max-cost", required_argument, 0, O_PROBE_COST},
        {"verbose", no_argument, 0, 'v'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    struct agt_opts o = {
        .sz = sizeof(o),
        .collector = "tcp://127.0.0.1:7400",
        .epoch_ms = 100,
        .monitors_dir = default_monitors_dir(),
        .monitors = "latency,depwait,queue,genprog",
        .heartbeat_ms = 1000,
        .timeout_ms = 1000,
        .drain_ms = 3000,
        .probe_max_cost = MKS_PROBE_COST_DEFAULT,
        .detail = {.mode = AGT_DETAIL_ALL, .every = 4, .slow_frac = 0.2},
    };
    uint64_t v;
    int have_rank = 0, c;
    bool monitors_given = false;
    opterr = 0; /* one line of ours instead of getopt's and ours */
    while ((c = getopt_long(argc, argv, "vh", lo, NULL)) != -1) {
        switch (c) {
        case O_JOB:
            o.job = optarg;
            break;
        case O_RANK:
            if (parse_u64("--rank", optarg, 0, UINT32_MAX - 1, &v))
                return 2;
            o.rank = (uint32_t)v;
            have_rank = 1;
            break;
        case O_COLLECTOR:
            o.collector = optarg;
            break;
        case O_SURVEY:
            o.survey = optarg;
            break;
        case O_EPOCH:
            if (parse_u64("--epoch-ms", optarg, 1, 60000, &o.epoch_ms))
                return 2;
            break;
        case O_BUDGET:
            if (parse_u64("--budget", optarg, 0, UINT64_MAX / 2, &o.budget))
                return 2;
            break;
        case O_STEP_DETAIL:
            if (agt_detail_mode_parse(optarg, &o.detail.mode)) {
                fprintf(stderr, "mkscope-agent: --step-detail '%s': expected all or auto\n",
                        optarg);
                return 2;
            }
            break;
        case O_DETAIL_EVERY:
            if (parse_u64("--detail-every", optarg, 0, UINT32_MAX, &v))
                return 2;
            o.detail.every = (uint32_t)v;
            break;
        case O_DETAIL_WARMUP:
            if (parse_u64("--detail-warmup", optarg, 0, UINT32_MAX, &v))
                return 2;
            o.detail.warmup = (uint32_t)v;
            break;
        case O_BUFFER:
            if (parse_u64("--buffer-bytes", optarg, 1024, UINT64_MAX / 2, &o.buffer_bytes))
                return 2;
            break;
        case O_SPOOL_DIR:
            o.spool_dir = optarg;
            break;
        case O_SPILL_ONLY:
            o.spool_spill_only = 1;
            break;
        case O_SPOOL_BYTES:
            if (parse_u64("--spool-bytes", optarg, 1024, UINT64_MAX / 2, &o.spool_bytes))
                return 2;
            break;
        case O_KEY:
            o.key_path = optarg;
            break;
        case O_MONITORS:
            o.monitors_dir = optarg;
            monitors_given = true;
            break;
        case O_ATTACH:
            o.monitors = optarg;
            break;
        case O_LEASE:
            if (parse_u64("--lease-ms", optarg, 1, 600000, &o.lease_ms))
                return 2;
            break;
        case O_HEARTBEAT:
            if (parse_u64("--heartbeat-ms", optarg, 10, 600000, &o.heartbeat_ms))
                return 2;
            break;
        case O_TIMEOUT:
            if (parse_u64("--timeout-ms", optarg, 10, 600000, &o.timeout_ms))
                return 2;
            break;
        case O_DRAIN:
            if (parse_u64("--drain-ms", optarg, 0, 600000, &o.drain_ms))
                return 2;
            break;
        case O_EXIT_WITH_APP:
            o.exit_with_app = 1;
            break;
        case O_STATS:
            o.stats_path = optarg;
            break;
        case O_FRESH:
            if (parse_u64("--fresh-window", optarg, 1, 3600, &v))
                return 2;
            o.fresh_window_ms = v * 1000;
            break;
        case O_PROBE_COST:
            if (parse_u64("--probe-max-cost", optarg, 1, 32768, &o.probe_max_cost))
                return 2;
            break;
        case 'v':
            o.verbose++;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            if (optopt > 0 && optopt < 256)
                fprintf(stderr, "mkscope-agent: unknown option '-%c'; see --help\n", optopt);
            else if (optopt)
                fprintf(stderr, "mkscope-agent: %s needs a value; see --help\n", argv[optind - 1]);
            else
                fprintf(stderr, "mkscope-agent: unknown option '%s'; see --help\n",
                        argv[optind - 1]);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "mkscope-agent: unexpected argument '%s'; see --help\n", argv[optind]);
        return 2;
    }
    if (!o.job || !have_rank) {
        fprintf(stderr, "mkscope-agent: --job and --rank are required; see --help\n");
        return 2;
    }
    if (o.spool_spill_only && !o.spool_dir) {
        fprintf(stderr, "mkscope-agent: --spool-spill-only needs --spool-dir\n");
        return 2;
    }
    if (!mks_wire_job_valid(o.job)) {
        char shown[65];
        snprintf(shown, sizeof(shown), "%s", o.job);
        fprintf(stderr, "mkscope-agent: --job '%s': a job name is " MKS_WIRE_JOB_GRAMMAR "\n",
                mks_wire_one_line(shown));
        return 2;
    }
    if (o.monitors && check_attach_list(o.monitors))
        return 2;
    struct stat st;
    int st_rc = monitors_given ? stat(o.monitors_dir, &st) : 0;
    if (monitors_given && (st_rc || !S_ISDIR(st.st_mode))) {
        char shown[256];
        snprintf(shown, sizeof(shown), "%s", o.monitors_dir);
        fprintf(stderr, "mkscope-agent: --monitors '%s': %s\n", mks_wire_one_line(shown),
                st_rc ? strerror(errno) : "not a directory");
        return 2;
    }
    /* Long enough that an agent starved of CPU for a moment (a busy node,
     * a sanitizer build) does not cost its rank the monitors; short enough
     * that a dead agent's hooks detach soon. */
    if (!o.lease_ms)
        o.lease_ms = 3 * o.epoch_ms > 1000 ? 3 * o.epoch_ms : 1000;
    return agt_run(&o);
}

/*
 * mks-countcheck: compare what the megakernel says it executed (mkscope-bench
 * --json) with what the collector learned from the agents (`mkscope -f json
 * query 'count(task) by rank, class'`), and optionally check the coverage of
 * `mkscope -f json status`.  Prints one line per (rank, class) and exits 0
 * only when every count matches (and coverage is complete when asked).
 *
 * Used by deploy/demo.sh and the integration tests, so that both judge the
 * same way and neither needs jq or python on the machine.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

struct row {
    int64_t rank;
    char cls[64];
    int64_t bench, collector;
};

static struct row *rows;
static size_t n_rows, cap_rows;

static struct row *find(int64_t rank, const char *cls)
{
    for (size_t i = 0; i < n_rows; i++)
        if (rows[i].rank == rank && strcmp(rows[i].cls, cls) == 0)
            return &rows[i];
    if (n_rows == cap_rows) {
        cap_rows = cap_rows ? cap_rows * 2 : 64;
        rows = realloc(rows, cap_rows * sizeof(*rows));
        if (!rows) {
            fprintf(stderr, "mks-countcheck: out of memory\n");
            exit(1);
        }
    }
    struct row *r = &rows[n_rows++];
    memset(r, 0, sizeof(*r));
    r->rank = rank;
    snprintf(r->cls, sizeof(r->cls), "%s", cls);
    return r;
}

static json_t *load(const char *path)
{
    json_error_t e;
    json_t *j = json_load_file(path, 0, &e);
    if (!j)
        fprintf(stderr, "mks-countcheck: %s:%d: %s\n", path, e.line, e.text);
    return j;
}

static int read_bench(const char *path)
{
    json_t *j = load(path), *ranks, *r;
    size_t i;
    if (!j)
        return -1;
    ranks = json_object_get(j, "ranks");
    if (!json_is_array(ranks)) {
        fprintf(stderr, "mks-countcheck: %s: no \"ranks\" array (not mkscope-bench --json output?)\n",
                path);
        json_decref(j);
        return -1;
    }
    json_array_foreach(ranks, i, r)
    {
        json_t *cc = json_object_get(r, "class_counts"), *v;
        const char *k;
        if (!json_is_integer(json_object_get(r, "rank")) || !json_is_object(cc)) {
            fprintf(stderr, "mks-countcheck: %s: rank entry %zu lacks rank/class_counts\n", path,
                    i);
            json_decref(j);
            return -1;
        }
        int64_t rank = json_integer_value(json_object_get(r, "rank"));
        json_object_foreach(cc, k, v)
        {
            if (json_is_integer(v) && json_integer_value(v) > 0)
                find(rank, k)->bench = json_integer_value(v);
        }
    }
    json_decref(j);
    return 0;
}

static int read_query(const char *path)
{
    json_t *j = load(path), *arr, *r;
    size_t i;
    if (!j)
        return -1;
    arr = json_object_get(j, "rows");
    if (!json_is_array(arr)) {
        fprintf(stderr, "mks-countcheck: %s: no \"rows\" array (not mkscope -f json query?)\n",
                path);
        json_decref(j);
        return -1;
    }
    json_array_foreach(arr, i, r)
    {
        json_t *rank = json_object_get(r, "rank"), *cls = json_object_get(r, "class"),
               *n = json_object_get(r, "count(task)");
        if (!json_is_integer(rank) || !json_is_string(cls) || !json_is_integer(n)) {
            fprintf(stderr, "mks-countcheck: %s: row %zu lacks rank, class or count(task)\n", path,
                    i);
            json_decref(j);
            return -1;
        }
        find(json_integer_value(rank), json_string_value(cls))->collector = json_integer_value(n);
    }
    json_decref(j);
    return 0;
}

/* Per-rank totals the agents observed (their --stats files) against the
 * collector's: delivery is exact whatever the megakernel did before its
 * agent attached.  0 when all agree. */
static int check_agents(char **paths, int n, int quiet)
{
    int bad = 0;
    for (int i = 0; i < n; i++) {
        json_t *j = load(paths[i]), *cc, *v;
        const char *k;
        if (!j)
            return -1;
        cc = json_object_get(j, "class_counts");
        if (!json_is_integer(json_object_get(j, "rank")) || !json_is_object(cc)) {
            fprintf(stderr, "mks-countcheck: %s: not an mkscope-agent --stats file\n", paths[i]);
            json_decref(j);
            return -1;
        }
        int64_t rank = json_integer_value(json_object_get(j, "rank")), seen = 0, stored = 0;
        json_object_foreach(cc, k, v)
        {
            seen += json_integer_value(v);
        }
        for (size_t r = 0; r < n_rows; r++)
            if (rows[r].rank == rank)
                stored += rows[r].collector;
        if (!quiet)
            printf("rank %" PRId64 ": agent observed %" PRId64 " tasks, collector stored %" PRId64
                   "%s\n",
                   rank, seen, stored, seen == stored ? "" : "   MISMATCH");
        bad |= seen != stored;
        json_decref(j);
    }
    return bad;
}

/* Coverage per rank from `mkscope -f json status`; 0 when complete. */
static int check_status(const char *path, int want_full, int quiet)
{
    json_t *j = load(path), *ranks, *r;
    size_t i;
    int bad = 0;
    if (!j)
        return -1;
    ranks = json_object_get(j, "ranks");
    if (!json_is_array(ranks)) {
        fprintf(stderr, "mks-countcheck: %s: no \"ranks\" array (not mkscope -f json status?)\n",
                path);
        json_decref(j);
        return -1;
    }
    json_array_foreach(ranks, i, r)
    {
        json_t *cov = json_object_get(r, "coverage");
        int64_t rank = json_integer_value(json_object_get(r, "rank"));
        int64_t el = json_integer_value(json_object_get(cov, "eligible"));
        int64_t ran = json_integer_value(json_object_get(cov, "ran"));
        int64_t thr = json_integer_value(json_object_get(cov, "throttled"));
        int64_t lost = json_integer_value(json_object_get(cov, "lost"));
        int full = el > 0 && ran == el && thr == 0 && lost == 0;
        if (!quiet)
            printf("coverage rank %" PRId64 ": %" PRId64 " of %" PRId64
                   " hook events observed, %" PRId64 " throttled, %" PRId64 " lost%s\n",
                   rank, ran, el, thr, lost, full ? " (100%)" : "");
        if (want_full && !full)
            bad = 1;
    }
    json_decref(j);
    return bad;
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {{"bench", required_argument, 0, 'b'},
                                       {"query", required_argument, 0, 'q'},
                                       {"status", required_argument, 0, 's'},
                                       {"full-coverage", no_argument, 0, 'F'},
                                       {"agents-only", no_argument, 0, 'A'},
                                       {"format", required_argument, 0, 'f'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
    const char *bench = NULL, *query = NULL, *status = NULL, *fmt = "text";
    int full = 0, agents_only = 0, c;
    while ((c = getopt_long(argc, argv, "f:h", lo, NULL)) != -1) {
        switch (c) {
        case 'b': bench = optarg; break;
        case 'q': query = optarg; break;
        case 's': status = optarg; break;
        case 'F': full = 1; break;
        case 'A': agents_only = 1; break;
        case 'f': fmt = optarg; break;
        case 'h':
            printf("usage: mks-countcheck --bench BENCH.json --query QUERY.json [--status "
                   "STATUS.json [--full-coverage]] [--agents-only] [-f text|json] "
                   "[AGENT-STATS.json...]\n"
                   "  AGENT-STATS: mkscope-agent --stats files, compared per rank with the\n"
                   "  collector; --agents-only: judge by those alone, not by the megakernel\n");
            return 0;
        default:
            return 2;
        }
    }
    if (!bench || !query || (strcmp(fmt, "text") && strcmp(fmt, "json"))) {
        fprintf(stderr, "mks-countcheck: --bench and --query are required; -f text|json\n");
        return 2;
    }
    if (read_bench(bench) || read_query(query))
        return 1;
    int json = !strcmp(fmt, "json");
    size_t bad = 0;
    int64_t tb = 0, tc = 0;
    json_t *out = json ? json_array() : NULL;
    if (!json)
        printf("%-5s %-20s %12s %12s\n", "RANK", "CLASS", "MEGAKERNEL", "COLLECTOR");
    for (size_t i = 0; i < n_rows; i++) {
        struct row *r = &rows[i];
        int ok = r->bench == r->collector;
        bad += !ok;
        tb += r->bench;
        tc += r->collector;
        if (json)
            json_array_append_new(out, json_pack("{sIsssIsIsb}", "rank", (json_int_t)r->rank,
                                                 "class", r->cls, "megakernel",
                                                 (json_int_t)r->bench, "collector",
                                                 (json_int_t)r->collector, "match", ok));
        else
            printf("%-5" PRId64 " %-20s %12" PRId64 " %12" PRId64 "%s\n", r->rank, r->cls,
                   r->bench, r->collector, ok ? "" : "   MISMATCH");
    }
    int cov_bad = status ? check_status(status, full, json) : 0;
    int agents_bad = optind < argc ? check_agents(argv + optind, argc - optind, json) : 0;
    if (agents_only) {
        if (optind >= argc) {
            fprintf(stderr, "mks-countcheck: --agents-only needs agent stats files\n");
            return 2;
        }
        bad = 0; /* reported above, not judged */
    }
    if (json) {
        json_t *doc = json_pack("{sosIsIsIsb}", "counts", out, "mismatches", (json_int_t)bad,
                                "megakernel_total", (json_int_t)tb, "collector_total",
                                (json_int_t)tc, "coverage_complete", cov_bad == 0);
        char *txt = json_dumps(doc, JSON_INDENT(2));
        printf("%s\n", txt);
        free(txt);
        json_decref(doc);
    } else {
        printf("total: megakernel %" PRId64 " tasks, collector %" PRId64 " tasks; %zu of %zu "
               "(rank, class) counts differ\n",
               tb, tc, bad, n_rows);
    }
    free(rows);
    return bad || cov_bad || agents_bad || n_rows == 0 ? 1 : 0;
}

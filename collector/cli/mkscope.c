/*
 * mkscope: the operator's command line.  Every subcommand except `verify`
 * is one CliRequest to the collector (nanomsg NN_REQ) whose JSON answer is
 * printed as is (-f json) or rendered as text.  `verify` runs the verifier
 * locally, exactly as an agent would.
 *
 * Exit status: 0 ok, 1 error, 2 usage, 3 no collector, 4 no data, 5 collector busy.
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <nanomsg/nn.h>
#include <nanomsg/reqrep.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define DEFAULT_COLLECTOR "tcp://127.0.0.1:7402"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: mkscope [OPTIONS] COMMAND [ARGS]\n"
            "\n"
            "Observe persistent GPU megakernels: ask the mkscope collector what the\n"
            "agents of a job reported, diagnose slow steps, attach monitors.\n"
            "\n"
            "COMMANDS\n"
            "  jobs                        the jobs heard from, the latest first\n"
            "  status                      ranks, agents, epochs, coverage\n"
            "  ranks                       per-rank details (host, pid, versions, seq)\n"
            "  query QUERY                 aggregates over the summaries (docs/query.md)\n"
            "  sql SELECT...               read-only SQL on the store (docs/collector.md)\n"
            "  diagnose [--last N]         root cause of slow steps and stragglers, with the\n"
            "                              wait chain (--step N, --steps A-B)\n"
            "  waitchain [--step N]        the wait chain as a text tree (-f dot: a graph)\n"
            "  programs                    programs attached per rank\n"
            "  maps PROG/MAP [--sum]       a map of your own monitor, decoded with its BTF\n"
            "  attach OBJ|--builtin NAME   attach a BPF object or built-in monitor\n"
            "         [--name N] [--ranks all|0,2] [--wait MS]\n"
            "  detach NAME [--ranks ...]   detach a program\n"
            "  trigger add 'SLO'           e.g. 'p99(step) > 2ms'; list; rm ID\n"
            "  trace list                  escalations: asked, answered, events\n"
            "  trace export [-o FILE]      Chrome JSON trace of the last escalation\n"
            "  top [--interval S]          live per-rank view (q or Ctrl-C quits)\n"
            "  probe 'AGG by F where P'    a new question of the running kernel, compiled to\n"
            "        [--for D] [--dry-run] verified in-kernel aggregation (docs/probes.md)\n"
            "  survey [WHAT]               ask every agent live (status, coverage, programs)\n"

            "  metrics                     the Prometheus metrics as text\n"
            "  verify OBJ...               verifier verdict and worst-case cost, locally\n"
            "  help COMMAND                a command's options and examples (or COMMAND --help)\n"
            "\n"
            "OPTIONS\n"
            "  --collector URL   collector CLI socket [$MKSCOPE_COLLECTOR or " DEFAULT_COLLECTOR
            "]\n"
            "  -f, --format F    text (default) or json\n"
            "  --job NAME        job to ask about [the one heard from last]\n"
            "  --timeout MS      how long to wait for the collector [5000]\n"
            "  --key FILE        shared MAC key, as given to the collector\n"
            "  -o FILE           write output to FILE\n"
            "  -h, --help        this text\n"
            "  --version         the version\n"
            "\n"
            "EXIT STATUS\n"
            "  0 ok, 1 error, 2 usage, 3 no collector answered, 4 no data yet,\n"
            "  5 collector busy (it is there but could not answer in time: retry)\n"
            "\n"
            "EXAMPLES\n"
            "  mkscope status\n"
            "  mkscope query 'count(task) by class where rank = 1'\n"
            "  mkscope query 'p99(run), mean(queue) by class where step >= 30' -f json\n"
            "  mkscope diagnose -f json\n"
            "  mkscope waitchain --step 37 -f dot | dot -Tsvg > chain.svg\n"
            "  mkscope attach monitor.bpf.o --ranks all\n"
            "  mkscope probe 'count() by dep_event where event = dep_wait_end and wait > 20us'\n"
            "  mkscope trigger add 'p99(step) > 2ms'\n"

            "  mkscope sql 'SELECT rank, COUNT(*) FROM epochs GROUP BY rank'\n");
}

/* ---- talking to the collector ------------------------------------------------ */

int mks_cli_call(struct mks_cli *cli, const char *verb, char **args, size_t n_args,
                 const void *blob, size_t blob_len, json_t **answer)
{
    *answer = NULL;
    int s = nn_socket(AF_SP, NN_REQ);
    if (s < 0) {
        fprintf(stderr, "mkscope: nanomsg socket: %s\n", nn_strerror(nn_errno()));
        return MKS_EXIT_ERROR;
    }
    int to = cli->timeout_ms, zero = 0, maxsz = -1;
    nn_setsockopt(s, NN_SOL_SOCKET, NN_SNDTIMEO, &to, sizeof(to));
    nn_setsockopt(s, NN_SOL_SOCKET, NN_RCVTIMEO, &to, sizeof(to));
    nn_setsockopt(s, NN_SOL_SOCKET, NN_LINGER, &zero, sizeof(zero));
    nn_setsockopt(s, NN_SOL_SOCKET, NN_RCVMAXSIZE, &maxsz, sizeof(maxsz));
    if (nn_connect(s, cli->collector) < 0) {
        fprintf(stderr, "mkscope: bad collector URL '%s': %s (use tcp://HOST:PORT or ipc://PATH)\n",
                cli->collector, nn_strerror(nn_errno()));
        nn_close(s);
        return MKS_EXIT_USAGE;
    }
    /* Named options travel as "--name=value" after the positional ones. */
    char *all[64];
    size_t n = 0;
    char jobarg[128];
    for (size_t i = 0; i < n_args && n < 62; i++)
        all[n++] = args[i];
    if (cli->job) {
        snprintf(jobarg, sizeof(jobarg), "--job=%s", cli->job);
        all[n++] = jobarg;
    }
    mks_envelope env;
    Mkscope__V1__CliRequest req = MKSCOPE__V1__CLI_REQUEST__INIT;
    mks_wire_init(&env, "", 0, (uint64_t)getpid());
    /* A request id of its own, random: the collector runs a command of a
     * given id once (an attach retried with it is not installed twice). */
    req.id = env.nonce;
    req.verb = (char *)verb;
    req.args = all;
    req.n_args = n;
    req.blob.data = (uint8_t *)blob;
    req.blob.len = blob_len;
    env.body_case = MKSCOPE__V1__ENVELOPE__BODY_CLI_REQUEST;
    env.cli_request = &req;
    uint8_t *buf;
    size_t len;
    char err[1024];
    if (mks_wire_encode(&env, cli->have_key ? &cli->key : NULL, &buf, &len, err, sizeof(err))) {
        fprintf(stderr, "mkscope: %s\n", err);
        nn_close(s);
        return MKS_EXIT_USAGE;
    }
    int rc = nn_send(s, buf, len, 0);
    free(buf);
    void *msg = NULL;
    int got = rc < 0 ? -1 : nn_recv(s, &msg, NN_MSG, 0);
    if (got < 0) {
        /* Something accepted our connection (nanomsg counts it even when the
         * protocol handshake never completed): a collector that is there but
         * did not answer, not a missing one. */
        uint64_t est = nn_get_statistic(s, NN_STAT_ESTABLISHED_CONNECTIONS);
        uint64_t cur = nn_get_statistic(s, NN_STAT_CURRENT_CONNECTIONS);
        nn_close(s);
        if (est != (uint64_t)-1 && cur != (uint64_t)-1 && (est > 0 || cur > 0)) {
            fprintf(stderr,
                    "mkscope: collector busy: %s accepted the connection but did not answer"
                    " within %d ms; retry, or raise --timeout\n",
                    cli->collector, cli->timeout_ms);
            return MKS_EXIT_BUSY;
        }
        fprintf(stderr,
                "mkscope: no collector answered at %s within %d ms: start mkscope-collector or"
                " pass --collector URL\n",
                cli->collector, cli->timeout_ms);
        return MKS_EXIT_UNREACHABLE;
    }
    mks_envelope *rep = NULL;
    rc = mks_wire_decode_for(msg, (size_t)got, MKS_WIRE_BODY(CLI_REPLY),
                             cli->have_key ? &cli->key : NULL, &rep, err, sizeof(err));
    nn_freemsg(msg);
    nn_close(s);
    if (rc) {
        fprintf(stderr, "mkscope: bad answer from the collector: %s%s\n", err,
                rc == -EACCES ? " (is --key the collector's?)" : "");
        return MKS_EXIT_ERROR;
    }
    /* It must answer this request: with a key, a copy of an old answer is
     * no answer. */
    if ((cli->have_key || rep->reply_to) && rep->reply_to != env.nonce) {
        fprintf(stderr, "mkscope: the collector's answer is not to this request\n");
        mks_wire_free(rep);
        return MKS_EXIT_ERROR;
    }
    int status = rep->cli_reply->status;
    if (status) {
        /* Verbs such as "trigger-add" are "trigger add" to the user. */
        char shown[64];
        snprintf(shown, sizeof(shown), "%s", verb);
        for (char *p = shown; *p; p++)
            if (*p == '-')
                *p = ' ';
        fprintf(stderr, "mkscope %s: %s\n", shown,
                *rep->cli_reply->error ? rep->cli_reply->error : "failed");
    } else if (*rep->cli_reply->json) {
        json_error_t je;
        *answer = json_loads(rep->cli_reply->json, 0, &je);
        if (!*answer) {
            fprintf(stderr, "mkscope: the collector's answer is not JSON: %s\n", je.text);
            status = MKS_EXIT_ERROR;
        }
    }
    mks_wire_free(rep);
    return status < 0 || status > 255 ? MKS_EXIT_ERROR : status;
}

/* ---- text rendering --------------------------------------------------------------- */

void mks_cli_value(FILE *f, json_t *v, int width)
{
    char buf[64];
    const char *s = buf;
    if (json_is_integer(v))
        snprintf(buf, sizeof(buf), "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v)) {
        double d = json_real_value(v);
        if (fabs(d) >= 1e6 || (fabs(d) < 1e-3 && d != 0))
            snprintf(buf, sizeof(buf), "%.4g", d);
        else
            snprintf(buf, sizeof(buf), "%.3f", d);
    } else if (json_is_string(v))
        s = json_string_value(v);
    else if (json_is_true(v))
        s = "yes";
    else if (json_is_false(v))
        s = "no";
    else
        s = "-";
    fprintf(f, "%-*s", width, s);
}

void mks_cli_ns(char *buf, size_t len, double ns)
{
    if (ns >= 1e18) { /* since 1970: after 2001-09 */
        time_t t = (time_t)(ns / 1e9);
        struct tm tm;
        localtime_r(&t, &tm);
        strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm);
    } else if (fabs(ns) < 1e3) {
        snprintf(buf, len, "%.0f ns", ns);
    } else if (fabs(ns) < 1e6) {
        snprintf(buf, len, "%.4g \u00b5s", ns / 1e3);
    } else if (fabs(ns) < 1e9) {
        snprintf(buf, len, "%.4g ms", ns / 1e6);
    } else {
        snprintf(buf, len, "%.4g s", ns / 1e9);
    }
}

/* Whether column col holds nanoseconds: an aggregate of a time metric of
 * the query language (count() is a count), or a name ending in _ns. */
static bool ns_column(const char *col)
{
    static const char *const aggs[] = {"sum(", "mean(", "avg(", "min(", "max(", "p50(", "p90(",
                                       "p99("};
    static const char *const metrics[] = {"run)", "queue)", "step)", "remote_wait)",
                                          "local_wait)", "idle)", "busy)"};
    size_t n = strlen(col);
    if (n > 3 && !strcmp(col + n - 3, "_ns"))
        return true;
    for (size_t a = 0; a < sizeof(aggs) / sizeof(aggs[0]); a++) {
        size_t al = strlen(aggs[a]);
        if (strncmp(col, aggs[a], al))
            continue;
        for (size_t m = 0; m < sizeof(metrics) / sizeof(metrics[0]); m++)
            if (!strcmp(col + al, metrics[m]))
                return true;
    }
    return false;
}

/* A cell: nanoseconds with their unit (a duration in ns, us, ms or s; a
 * wall-clock time, which no duration reaches, as local time), the rest as
 * mks_cli_value prints it. */
static void cell(FILE *f, const char *col, json_t *v, int width)
{
    /* 64-bit values come as decimal strings (beyond what a JSON number
     * holds exactly) */
    char *end = NULL;
    double ns = json_is_number(v)   ? json_number_value(v)
                : json_is_string(v) ? strtod(json_string_value(v), &end)
                                    : 0;
    if (!ns_column(col) || !(json_is_number(v) || (json_is_string(v) && end && !*end &&
                                                   end != json_string_value(v)))) {
        mks_cli_value(f, v, width);
        return;
    }
    char buf[64];
    mks_cli_ns(buf, sizeof(buf), ns);
    /* width counts bytes; the micro sign takes two */
    fprintf(f, "%-*s", width + (strstr(buf, "\u00b5") ? 1 : 0), buf);
}

/* A table of rows (objects) with the given columns; widths fit the data. */
void mks_cli_table(FILE *f, json_t *cols, json_t *rows)
{
    size_t nc = json_array_size(cols), i, k;
    int *w = calloc(nc ? nc : 1, sizeof(int));
    json_t *row, *col;
    json_array_foreach(cols, k, col) w[k] = (int)strlen(json_string_value(col));
    json_array_foreach(rows, i, row)
    {
        json_array_foreach(cols, k, col)
        {
            char *tmp = NULL;
            size_t tl = 0;
            FILE *m = open_memstream(&tmp, &tl);
            cell(m, json_string_value(col), json_object_get(row, json_string_value(col)), 0);
            fclose(m);
            if (tmp && strstr(tmp, "\u00b5"))
                tl--; /* one column on the screen, two bytes */
            if ((int)tl > w[k])
                w[k] = (int)tl;
            free(tmp);
        }
    }
    json_array_foreach(cols, k, col)
    {
        char up[128];
        snprintf(up, sizeof(up), "%s", json_string_value(col));
        for (char *p = up; *p; p++)
            if (*p >= 'a' && *p <= 'z')
                *p = (char)(*p - 32);
        fprintf(f, "%-*s%s", w[k], up, k + 1 < nc ? "  " : "\n");
    }
    json_array_foreach(rows, i, row)
    {
        json_array_foreach(cols, k, col)
        {
            cell(f, json_string_value(col), json_object_get(row, json_string_value(col)),
                 k + 1 < nc ? w[k] : 0);
            fputs(k + 1 < nc ? "  " : "\n", f);
        }
    }
    free(w);
}

static json_t *colnames(const char *first, ...)
{
    json_t *a = json_array();
    va_list ap;
    va_start(ap, first);
    for (const char *c = first; c; c = va_arg(ap, const char *))
        json_array_append_new(a, json_string(c));
    va_end(ap);
    return a;
}

static void render_status(struct mks_cli *cli, json_t *a, bool detail)
{
    FILE *f = cli->out;
    json_t *cov = json_object_get(a, "coverage");
    fprintf(f, "job %s: %lld ranks, %lld epochs stored\n",
            json_string_value(json_object_get(a, "job")),
            (long long)json_integer_value(json_object_get(a, "n_ranks")),
            (long long)json_integer_value(json_object_get(a, "epochs")));
    json_t *rows = json_array(), *r;
    size_t i;
    json_array_foreach(json_object_get(a, "ranks"), i, r)
    {
        json_t *row = json_deep_copy(r);
        json_t *c = json_object_get(r, "coverage");
        json_t *ratio = json_object_get(c, "ratio");
        char buf[32] = "-";
        if (json_is_real(ratio))
            snprintf(buf, sizeof(buf), "%.1f%%", 100.0 * json_real_value(ratio));
        json_object_set_new(row, "coverage", json_string(buf));
        json_object_set_new(row, "lost", json_deep_copy(json_object_get(c, "lost")));
        json_object_set_new(row, "undelivered", json_deep_copy(json_object_get(c, "undelivered")));
        json_array_append_new(rows, row);
    }
    json_t *cols = detail ? colnames("rank", "host", "pid", "agent", "state", "app_alive", "epochs",
                                     "last_epoch", "last_seq", "acked_seq", "unacked",
                                     "duplicates", "lost_summaries", "n_workers", "agent_version",
                                     NULL)
                          : colnames("rank", "host", "agent", "state", "epochs", "last_epoch", "tasks",
                                     "coverage", "lost", "undelivered", "lost_summaries",
                                     "last_seen_s", NULL);
    mks_cli_table(f, cols, rows);
    json_decref(cols);
    json_decref(rows);
    if (json_is_real(cov))
        fprintf(f, "coverage over all ranks: %.1f%%\n", 100.0 * json_real_value(cov));
}

static void render_query(struct mks_cli *cli, json_t *a)
{
    mks_cli_table(cli->out, json_object_get(a, "columns"), json_object_get(a, "rows"));
    json_t *c = json_object_get(a, "coverage");
    json_t *ratio = json_object_get(c, "ratio");
    fprintf(cli->out, "(%zu rows; %lld epochs; coverage %s", json_array_size(json_object_get(a, "rows")),
            (long long)json_integer_value(json_object_get(c, "epochs")),
            json_is_real(ratio) ? "" : "n/a");
    if (json_is_real(ratio))
        fprintf(cli->out, "%.1f%%, %lld throttled, %lld lost", 100.0 * json_real_value(ratio),
                (long long)json_integer_value(json_object_get(c, "throttled")),
                (long long)json_integer_value(json_object_get(c, "lost")));
    long long undel = json_integer_value(json_object_get(c, "undelivered"));
    long long lsum = json_integer_value(json_object_get(c, "lost_summaries"));
    if (undel || lsum)
        fprintf(cli->out, ", %lld in %lld summaries the agents dropped", undel, lsum);
    fprintf(cli->out, ")\n");
    mks_cli_rolled(cli->out, json_object_get(a, "rolled_up"));
}

void mks_cli_rolled(FILE *f, json_t *r)
{
    if (!json_is_object(r))
        return;
    char until[64];
    mks_cli_ns(until, sizeof(until), (double)json_integer_value(json_object_get(r, "until_ns")));
    json_t *steps = json_object_get(r, "steps_to");
    char st[48] = "";
    if (json_is_integer(steps))
        snprintf(st, sizeof(st), ", steps up to %lld,", (long long)json_integer_value(steps));
    char rd[48] = "";
    if (json_is_integer(json_object_get(r, "read")))
        snprintf(rd, sizeof(rd), ", %lld of them read",
                 (long long)json_integer_value(json_object_get(r, "read")));
    fprintf(f,
            "(detail received up to %s%s is rolled up per rank and minute: %lld epochs%s; no"
            " step, worker or transfer in them)\n",
            until, st, (long long)json_integer_value(json_object_get(r, "epochs")), rd);
}

static void render_rows(struct mks_cli *cli, json_t *rows)
{
    if (!json_array_size(rows)) {
        fprintf(cli->out, "(none)\n");
        return;
    }
    json_t *cols = json_array();
    json_t *first = json_array_get(rows, 0);
    const char *key;
    json_t *v;
    /* jansson keeps insertion order: the statement's column order. */
    json_object_foreach(first, key, v) json_array_append_new(cols, json_string(key));
    mks_cli_table(cli->out, cols, rows);
    json_decref(cols);
}

static void render_survey(struct mks_cli *cli, json_t *a)
{
    json_t *rows = json_array(), *r;
    size_t i;
    json_array_foreach(json_object_get(a, "answers"), i, r)
    {
        json_t *row = json_pack("{s:O, s:O, s:O, s:i, s:O}", "rank", json_object_get(r, "rank"),
                                "ok", json_object_get(r, "ok"), "epoch",
                                json_object_get(r, "epoch"), "programs",
                                (int)json_array_size(json_object_get(r, "programs")), "error",
                                json_object_get(r, "error"));
        if (row)
            json_array_append_new(rows, row);
    }
    json_t *cols = colnames("rank", "ok", "epoch", "programs", "error", NULL);
    fprintf(cli->out, "job %s: %zu agents answered\n", json_string_value(json_object_get(a, "job")),
            json_array_size(rows));
    mks_cli_table(cli->out, cols, rows);
    json_decref(cols);
    json_decref(rows);
    json_t *miss = json_object_get(a, "missing");
    if (json_array_size(miss)) {
        fprintf(cli->out, "did not answer before the deadline: rank");
        json_array_foreach(miss, i, r) fprintf(cli->out, " %lld", (long long)json_integer_value(r));
        fputc('\n', cli->out);
    }
}

/* A decoded key or value in one line, C-like: {a = 1, b = [2, 3], c = "x"}. */
static void put_value(FILE *f, json_t *v)
{
    size_t i;
    json_t *x;
    const char *k;
    if (json_is_object(v)) {
        fputc('{', f);
        i = 0;
        json_object_foreach(v, k, x)
        {
            fprintf(f, "%s%s = ", i++ ? ", " : "", k);
            put_value(f, x);
        }
        fputc('}', f);
    } else if (json_is_array(v)) {
        fputc('[', f);
        json_array_foreach(v, i, x)
        {
            if (i)
                fputs(", ", f);
            put_value(f, x);
        }
        fputc(']', f);
    } else if (json_is_string(v) && strncmp(json_string_value(v), "0x", 2)) {
        fprintf(f, "\"%s\"", json_string_value(v));
    } else {
        char *s = json_dumps(v, JSON_ENCODE_ANY);
        fputs(s && json_is_string(v) ? json_string_value(v) : s ? s : "?", f);
        free(s);
    }
}

static void render_maps(struct mks_cli *cli, json_t *a)
{
    bool sum = json_is_true(json_object_get(a, "sum"));
    fprintf(cli->out, "%s/%s, job %s: %s\n", json_string_value(json_object_get(a, "program")),
            json_string_value(json_object_get(a, "map")), json_string_value(json_object_get(a, "job")),
            sum ? "every stored epoch's entries added up per rank (--sum)"
                : "each rank's newest epoch (the maps are per epoch: --sum adds them up)");
    if (json_is_string(json_object_get(a, "note")))
        fprintf(cli->out, "note: %s\n", json_string_value(json_object_get(a, "note")));
    size_t i;
    json_t *r;
    long long last = -1;
    json_array_foreach(json_object_get(a, "rows"), i, r)
    {
        long long rank = (long long)json_integer_value(json_object_get(r, "rank"));
        if (rank != last) {
            if (sum)
                fprintf(cli->out, "rank %lld:\n", rank);
            else
                fprintf(cli->out, "rank %lld, epoch %lld:\n", rank,
                        (long long)json_integer_value(json_object_get(r, "epoch")));
            last = rank;
        }
        fputs("  ", cli->out);
        put_value(cli->out, json_object_get(r, "key"));
        fputs(" => ", cli->out);
        put_value(cli->out, json_object_get(r, "value"));
        if (sum) {
            long long ne = (long long)json_integer_value(json_object_get(r, "epochs"));
            fprintf(cli->out, "  (%lld epoch%s)", ne, ne == 1 ? "" : "s");
        }
        fputc('\n', cli->out);
    }
}

/* ---- subcommands ----------------------------------------------------------------------- */

static int print_json(struct mks_cli *cli, json_t *a)
{
    if (a)
        json_dumpf(a, cli->out, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    fputc('\n', cli->out);
    return 0;
}

static int cmd_simple(struct mks_cli *cli, const char *verb, char **args, size_t n)
{
    json_t *a;
    int rc = mks_cli_call(cli, verb, args, n, NULL, 0, &a);
    if (rc)
        return rc;
    if (cli->json)
        print_json(cli, a);
    else if (!strcmp(verb, "status"))
        render_status(cli, a, false);
    else if (!strcmp(verb, "ranks"))
        render_status(cli, a, true);
    else if (!strcmp(verb, "query"))
        render_query(cli, a);
    else if (!strcmp(verb, "sql"))
        render_rows(cli, json_object_get(a, "rows"));
    else if (!strcmp(verb, "programs"))
        render_rows(cli, json_object_get(a, "programs"));
    else if (!strcmp(verb, "jobs"))
        render_rows(cli, json_object_get(a, "jobs"));
    else if (!strcmp(verb, "trigger-list"))
        render_rows(cli, json_object_get(a, "triggers"));
    else if (!strcmp(verb, "maps"))
        render_maps(cli, a);
    else if (!strcmp(verb, "trace-list"))
        render_rows(cli, json_object_get(a, "escalations"));
    else if (!strcmp(verb, "trigger-add"))
        fprintf(cli->out, "trigger %lld added: %s\n",
                (long long)json_integer_value(json_object_get(a, "id")),
                json_string_value(json_object_get(a, "expr")));
    else if (!strcmp(verb, "trigger-rm"))
        fprintf(cli->out, "trigger %lld removed\n",
                (long long)json_integer_value(json_object_get(a, "removed")));
    else if (!strcmp(verb, "survey"))
        render_survey(cli, a);
    else if (!strcmp(verb, "metrics"))
        fputs(json_string_value(json_object_get(a, "text")), cli->out);
    else
        print_json(cli, a);
    json_decref(a);
    return 0;
}

int main(int argc, char **argv)
{
    struct mks_cli cli = {.timeout_ms = 5000, .out = stdout};
    struct mks_cli_args a;
    char err[600];
    /* Everything on the command line is checked before anything is opened
     * or sent (parse.c). */
    int rc = mks_cli_parse(argc, argv, &a, err, sizeof(err));
    if (a.version) {
        printf("mkscope %s\n", MKS_VERSION);
        mks_cli_args_free(&a);
        return 0;
    }
    if (a.help) {
        if (a.np > 0 && mks_cli_help(stdout, a.pos[0]) == 0)
            rc = 0;
        else
            usage(stdout);
        mks_cli_args_free(&a);
        return 0;
    }
    if (rc) {
        if (*err)
            fprintf(stderr, "%s\n", err);
        else
            usage(stderr);
        mks_cli_args_free(&a);
        return rc;
    }
    cli.collector = a.collector;
    if (!cli.collector)
        cli.collector = getenv("MKSCOPE_COLLECTOR");
    if (!cli.collector || !*cli.collector)
        cli.collector = DEFAULT_COLLECTOR;
    cli.job = a.job;
    cli.json = a.json;
    cli.dot = a.dot;
    cli.timeout_ms = a.timeout_ms;
    const char *cmd = a.pos[0];
    if (!strcmp(cmd, "help")) {
        rc = 0;
        if (a.np < 2)
            usage(stdout);
        else if (mks_cli_help(stdout, a.pos[1])) {
            fprintf(stderr, "mkscope help: unknown command '%.64s'; see mkscope --help\n",
                    a.pos[1]);
            rc = MKS_EXIT_USAGE;
        }
        mks_cli_args_free(&a);
        return rc;
    }
    if (a.key_file) {
        if (mks_wire_key_load(a.key_file, &cli.key, err, sizeof(err))) {
            fprintf(stderr, "mkscope: %s\n", err);
            mks_cli_args_free(&a);
            return MKS_EXIT_USAGE;
        }
        cli.have_key = true;
    }
    if (a.outfile) {
        cli.outfile = a.outfile;
        cli.out = fopen(a.outfile, "w");
        if (!cli.out) {
            fprintf(stderr, "mkscope: cannot write %s: %s\n", a.outfile, strerror(errno));
            mks_cli_args_free(&a);
            return MKS_EXIT_ERROR;
        }
    }
    /* Positional arguments first, then the options, as the collector reads
     * them. */
    char *args[2 * MKS_CLI_MAX_ARGS];
    size_t na = 0;
    for (size_t i = 1; i < a.np; i++)
        args[na++] = a.pos[i];
    for (size_t i = 0; i < a.nn; i++)
        args[na++] = a.named[i];
    size_t npos = a.np - 1;
    if (!strcmp(cmd, "status") || !strcmp(cmd, "ranks") || !strcmp(cmd, "programs") ||
        !strcmp(cmd, "metrics") || !strcmp(cmd, "jobs") || !strcmp(cmd, "query") ||
        !strcmp(cmd, "sql") || !strcmp(cmd, "survey") || !strcmp(cmd, "maps")) {
        rc = cmd_simple(&cli, cmd, args, na);
    } else if (!strcmp(cmd, "diagnose") || !strcmp(cmd, "waitchain")) {
        rc = mks_cli_diagnose(&cli, cmd, args, na);
    } else if (!strcmp(cmd, "attach") || !strcmp(cmd, "detach")) {
        rc = mks_cli_attach(&cli, cmd, args, npos, na);
    } else if (!strcmp(cmd, "trigger")) {
        char verb[32];
        snprintf(verb, sizeof(verb), "trigger-%s", args[0]);
        rc = cmd_simple(&cli, verb, args + 1, na - 1);
    } else if (!strcmp(cmd, "trace")) {
        if (!strcmp(args[0], "list"))
            rc = cmd_simple(&cli, "trace-list", args + 1, na - 1);
        else
            rc = mks_cli_trace(&cli, args + 1, na - 1);
    } else if (!strcmp(cmd, "top")) {
        rc = mks_cli_top(&cli, args, na);
    } else if (!strcmp(cmd, "probe")) {
        rc = mks_cli_probe(&cli, args, npos, na);
    } else {
        rc = mks_cli_verify(&cli, a.np, a.pos);
    }
    mks_cli_args_free(&a);
    if (cli.out != stdout && fclose(cli.out) && !rc) {
        fprintf(stderr, "mkscope: writing %s failed\n", cli.outfile);
        rc = MKS_EXIT_ERROR;
    }
    return rc;
}

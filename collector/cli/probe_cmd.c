/*
 * mkscope probe: ask a running megakernel a new question (docs/probes.md).
 *
 *   mkscope probe 'count() by dep_event where event = dep_wait_end and wait > 20us' --for 10s
 *
 * One request has the collector compile, verify and send the probe (or,
 * with --dry-run, show its programs, cost and maps); then the CLI reads the
 * answer back every --interval (as soon as the first results are in and
 * as each rank's first comes, then at the interval) and prints it as it
 * grows, until every rank has sent its last result, and prints it once
 * more, whole.  Ctrl-C asks the ranks to
 * stop at their next epoch and prints what they sent.  --id N follows (or
 * shows again) a probe started earlier.
 *
 * Text: a table of the groups (the biggest first by the first aggregate),
 * the other row when the map was full, histograms as bars, and a coverage
 * line; -f json: one object per refresh, one per line, the last with
 * "final": true.
 */
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

static const char *named(char **args, size_t n, const char *name)
{
    size_t l = strlen(name);
    for (size_t i = 0; i < n; i++)
        if (!strncmp(args[i], "--", 2) && !strncmp(args[i] + 2, name, l) &&
            (args[i][2 + l] == '=' || args[i][2 + l] == 0))
            return args[i][2 + l] == '=' ? args[i] + 3 + l : "";
    return NULL;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static const char *jstr(json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "-";
}

/* An integer that may come as a decimal string (beyond 2^53). */
static double jnum(json_t *v)
{
    if (json_is_number(v))
        return json_number_value(v);
    if (json_is_string(v))
        return strtod(json_string_value(v), NULL);
    return NAN;
}

/* A value of the answer as the text shows it. */
static void fmt_value(char *buf, size_t len, json_t *v, const char *unit)
{
    if (json_is_null(v) || !v) {
        snprintf(buf, len, "-");
    } else if (json_is_object(v)) { /* hist: its count */
        snprintf(buf, len, "%.0f", jnum(json_object_get(v, "count")));
    } else if (json_is_string(v) && strcmp(unit, "ns") && strcmp(unit, "number")) {
        snprintf(buf, len, "%s", json_string_value(v));
    } else if (!strcmp(unit, "ns")) {
        mks_cli_ns(buf, len, jnum(v));
    } else if (json_is_real(v)) {
        snprintf(buf, len, "%.4g", json_real_value(v));
    } else if (json_is_string(v)) {
        snprintf(buf, len, "%s", json_string_value(v));
    } else {
        snprintf(buf, len, "%.0f", jnum(v));
    }
}

static void bars(FILE *f, json_t *row, const char *col, const char *label, const char *unit)
{
    json_t *h = json_object_get(row, col);
    json_t *bk = json_object_get(h, "buckets");
    size_t n = json_array_size(bk), first = n, i;
    double top = 0;
    json_t *b;
    json_array_foreach(bk, i, b)
    {
        double c = jnum(b);
        if (c > 0 && first == n)
            first = i;
        if (c > top)
            top = c;
    }
    if (first == n)
        return;
    fprintf(f, "%s, %s:\n", col, label);
    for (i = first; i < n; i++) {
        double c = jnum(json_array_get(bk, i));
        char lo[32], hi[32];
        bool ns = !strcmp(unit, "ns");
        if (i == 0) {
            snprintf(lo, sizeof(lo), "0");
            snprintf(hi, sizeof(hi), "1");
        } else if (ns) {
            mks_cli_ns(lo, sizeof(lo), ldexp(1.0, (int)i - 1));
            mks_cli_ns(hi, sizeof(hi), ldexp(1.0, (int)i));
        } else {
            snprintf(lo, sizeof(lo), "%.0f", ldexp(1.0, (int)i - 1));
            snprintf(hi, sizeof(hi), "%.0f", ldexp(1.0, (int)i));
        }
        char range[80];
        snprintf(range, sizeof(range), "[%s, %s)", lo, hi);
        int w = top > 0 ? (int)lround(40.0 * c / top) : 0;
        /* the micro sign is two bytes and one column */
        int pad = 26;
        for (const char *m = range; (m = strstr(m, "\u00b5")); m += 2)
            pad++;
        fprintf(f, "  %-*s %8.0f |%.*s%*s|\n", pad, range, c, w,
                "@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@", 40 - w, "");
    }
}

static void render_text(FILE *f, json_t *a, bool final)
{
    json_t *keys = json_object_get(a, "keys"), *cols = json_object_get(a, "columns");
    json_t *ranks = json_object_get(a, "ranks");
    size_t i, k;
    json_t *v, *r;
    double elapsed = jnum(json_object_get(a, "elapsed_ns")) / 1e9,
           dur = jnum(json_object_get(a, "duration_ns")) / 1e9;
    fprintf(f, "probe %s: %s\n", jstr(a, "probe"), jstr(a, "text"));
    fprintf(f, "%s on %zu rank%s, %.1f of %.1f s%s\n", final ? "answer" : jstr(a, "state"),
            json_array_size(ranks), json_array_size(ranks) == 1 ? "" : "s",
            elapsed < dur || !final ? (elapsed < dur ? elapsed : dur) : dur, dur,
            final ? "" : " (live)");
    json_t *tcols = json_array(), *trows = json_array();
    json_array_foreach(keys, k, v) json_array_append_new(tcols, json_string(jstr(v, "name")));
    json_array_foreach(cols, k, v) json_array_append_new(tcols, json_string(jstr(v, "name")));
    json_t *all = json_deep_copy(json_object_get(a, "rows"));
    if (json_is_object(json_object_get(a, "other")))
        json_array_append(all, json_object_get(a, "other"));
    json_array_foreach(all, i, r)
    {
        json_t *tr = json_object();
        json_array_foreach(keys, k, v)
        {
            char buf[64];
            fmt_value(buf, sizeof(buf), json_object_get(r, jstr(v, "name")), jstr(v, "unit"));
            json_object_set_new(tr, jstr(v, "name"), json_string(buf));
        }
        json_array_foreach(cols, k, v)
        {
            char buf[64];
            fmt_value(buf, sizeof(buf), json_object_get(r, jstr(v, "name")), jstr(v, "unit"));
            json_object_set_new(tr, jstr(v, "name"), json_string(buf));
        }
        json_array_append_new(trows, tr);
    }
    if (json_array_size(trows))
        mks_cli_table(f, tcols, trows);
    else
        fprintf(f, "(no event matched yet)\n");
    /* histograms: the first groups' */
    json_array_foreach(cols, k, v)
    {
        const char *name = jstr(v, "name");
        if (strncmp(name, "hist(", 5))
            continue;
        json_array_foreach(all, i, r)
        {
            if (i == 8) {
                fprintf(f, "(%zu more groups: -f json has every histogram)\n",
                        json_array_size(all) - 8);
                break;
            }
            char label[256] = "";
            size_t off = 0, kk;
            json_t *kv;
            json_array_foreach(keys, kk, kv)
            {
                char buf[64];
                fmt_value(buf, sizeof(buf), json_object_get(r, jstr(kv, "name")),
                          jstr(kv, "unit"));
                int w = snprintf(label + off, sizeof(label) - off, "%s%s %s", off ? ", " : "",
                                 jstr(kv, "name"), buf);
                off = w > 0 && (size_t)w < sizeof(label) - off ? off + (size_t)w : off;
            }
            bars(f, r, name, off ? label : "all", jstr(v, "unit"));
        }
    }
    json_decref(all);
    json_decref(tcols);
    json_decref(trows);
    json_t *c = json_object_get(a, "coverage");
    double elig = jnum(json_object_get(c, "eligible")), obs = jnum(json_object_get(c, "observed"));
    fprintf(f, "coverage: %.0f eligible, %.0f observed", elig, obs);
    if (elig > 0)
        fprintf(f, " (%.1f%%)", 100.0 * obs / elig);
    fprintf(f, ", %.0f throttled, %.0f lost, %.0f overflowed, %.0f unknown",
            jnum(json_object_get(c, "throttled")), jnum(json_object_get(c, "lost")),
            jnum(json_object_get(c, "overflowed")), jnum(json_object_get(c, "unknown")));
    double dropped = jnum(json_object_get(c, "dropped")), cont = jnum(json_object_get(c, "contended"));
    if (dropped > 0 || cont > 0)
        fprintf(f, ", %.0f dropped, %.0f contended", dropped, cont);
    fprintf(f, "; %.0f matched\n", jnum(json_object_get(c, "matched")));
    /* per rank: the time it really ran, and what did not go well */
    fprintf(f, "ran:");
    json_array_foreach(ranks, i, r)
    {
        char t[32] = "-";
        if (!json_is_null(json_object_get(r, "ran_ns")) && json_object_get(r, "ran_ns"))
            mks_cli_ns(t, sizeof(t), jnum(json_object_get(r, "ran_ns")));
        fprintf(f, "%s rank %.0f %s", i ? "," : "", jnum(json_object_get(r, "rank")), t);
        const char *st = jstr(r, "state");
        if (strcmp(st, "running") && strcmp(st, "done"))
            fprintf(f, " (%s%s%s)", st, json_is_string(json_object_get(r, "error")) ? ": " : "",
                    json_is_string(json_object_get(r, "error")) ? jstr(r, "error") : "");
        else if (final && json_is_string(json_object_get(r, "ended")) &&
                 strcmp(jstr(r, "ended"), "window"))
            fprintf(f, " (ended: %s)", jstr(r, "ended"));
    }
    fputc('\n', f);
}

static void render_plan(FILE *f, json_t *p)
{
    size_t i, k;
    json_t *h, *m, *line;
    fprintf(f, "probe: %s\n", jstr(p, "text"));
    fprintf(f, "groups: up to %.0f per epoch and rank (the rest counted in other);"
               " worst-case cost %.0f instructions per event (budget %.0f)\n",
            jnum(json_object_get(p, "groups")), jnum(json_object_get(p, "cost")),
            jnum(json_object_get(p, "max_cost")));
    json_array_foreach(json_object_get(p, "hooks"), i, h)
    {
        fprintf(f, "\nprogram at %s (%s): %.0f instructions, cost %.0f per event, %.0f verifier"
                   " states",
                jstr(h, "hook"),
                json_is_true(json_object_get(h, "aggregates")) ? "aggregates"
                                                               : "notes the wait's begin",
                jnum(json_object_get(h, "insns")), jnum(json_object_get(h, "cost")),
                jnum(json_object_get(h, "states")));
        if (json_is_number(json_object_get(h, "events_per_s")))
            fprintf(f, "; at the last 10 s' %.0f events/s, at most %.3g instructions/s",
                    jnum(json_object_get(h, "events_per_s")),
                    jnum(json_object_get(h, "insns_per_s")));
        fputc('\n', f);
        json_array_foreach(json_object_get(h, "program"), k, line)
            fprintf(f, "  %s\n", json_string_value(line));
    }
    fprintf(f, "\nmaps (each rank, two banks, %.0f workers):\n",
            jnum(json_object_get(p, "workers")));
    json_array_foreach(json_object_get(p, "maps"), i, m)
        fprintf(f, "  map[%zu] %-7s %-16s key %3.0f B  value %5.0f B  %6.0f entries  %9.0f bytes\n",
                i, jstr(m, "name"), jstr(m, "type"), jnum(json_object_get(m, "key_size")),
                jnum(json_object_get(m, "value_size")), jnum(json_object_get(m, "max_entries")),
                jnum(json_object_get(m, "bytes")));
    fprintf(f, "  total %.0f bytes\n", jnum(json_object_get(p, "map_bytes")));
}

static int finished(json_t *a)
{
    const char *st = jstr(a, "state");
    return !strcmp(st, "done") || !strcmp(st, "incomplete");
}

/* Ranks whose first result is in, and ranks still to send one (neither
 * refused nor done). */
static void rank_counts(json_t *a, size_t *answered, size_t *to_come)
{
    *answered = *to_come = 0;
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(a, "ranks"), i, r)
    {
        const char *st = jstr(r, "state");
        if (jnum(json_object_get(r, "epochs")) > 0)
            ++*answered;
        else if (strcmp(st, "refused") && strcmp(st, "done"))
            ++*to_come;
    }
}

static void emit(struct mks_cli *cli, json_t *a, bool final)
{
    if (cli->json) {
        json_object_set_new(a, "final", json_boolean(final));
        json_dumpf(a, cli->out, JSON_COMPACT | JSON_PRESERVE_ORDER);
        fputc('\n', cli->out);
    } else {
        fputc('\n', cli->out);
        render_text(cli->out, a, final);
    }
    fflush(cli->out);
}

int mks_cli_probe(struct mks_cli *cli, char **args, size_t npos, size_t n)
{
    const char *id_s = named(args, n, "id");
    const char *iv_s = named(args, n, "interval");
    double interval = iv_s ? strtod(iv_s, NULL) : 1.0;
    char id[32] = "";
    double deadline;
    json_t *a = NULL;
    int rc;
    if (id_s) {
        snprintf(id, sizeof(id), "%s", id_s);
        deadline = now_s() + 3600 + 30;
    } else {
        /* the collector ignores --interval; it says when to read */
        char *req[2 * MKS_CLI_MAX_ARGS];
        size_t nr = 0;
        for (size_t i = 0; i < n; i++)
            if (i < npos || strncmp(args[i], "--interval", 10))
                req[nr++] = args[i];
        if ((rc = mks_cli_call(cli, "probe", req, nr, NULL, 0, &a)))
            return rc;
        if (json_is_true(json_object_get(a, "dry_run"))) {
            if (cli->json) {
                json_dumpf(a, cli->out, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
                fputc('\n', cli->out);
            } else {
                render_plan(cli->out, a);
            }
            json_decref(a);
            return 0;
        }
        snprintf(id, sizeof(id), "%s", jstr(a, "probe"));
        double dur = jnum(json_object_get(a, "duration_ns")) / 1e9;
        if (!cli->json)
            fprintf(cli->out, "probe %s sent to %zu ranks: worst case %.0f instructions per event\n",
                    id, json_array_size(json_object_get(a, "commands")),
                    jnum(json_object_get(a, "cost")));
        json_decref(a);
        a = NULL;
        /* the window, the agents' pickup and their last epochs */
        deadline = now_s() + dur + 15;
    }
    char idarg[48];
    snprintf(idarg, sizeof(idarg), "--id=%s", id);
    char *qa[1] = {idarg};
    struct sigaction sa = {.sa_handler = on_sigint}, old;
    sigaction(SIGINT, &sa, &old);
    bool stop_sent = false;
    size_t shown = 0; /* ranks with results in the last answer printed */
    double next = now_s(), started = next, stop_deadline = 0;
    rc = 0;
    for (;;) {
        json_decref(a);
        a = NULL;
        if ((rc = mks_cli_call(cli, "probe-read", qa, 1, NULL, 0, &a)))
            break;
        if (finished(a))
            break;
        if (interrupted && !stop_sent) {
            json_t *s = NULL;
            if (mks_cli_call(cli, "probe-stop", qa, 1, NULL, 0, &s) == 0 && !cli->json)
                fprintf(stderr, "mkscope probe: stopping probe %s at the ranks' next epoch\n", id);
            json_decref(s);
            stop_sent = true;
            stop_deadline = now_s() + 5;
        }
        double t = now_s();
        if (t >= deadline || (stop_sent && t >= stop_deadline))
            break;
        /* live: as soon as anything came and whenever another rank's
         * first result did, then at the interval */
        bool any = json_array_size(json_object_get(a, "rows")) ||
                   json_is_object(json_object_get(a, "other")) ||
                   jnum(json_object_get(json_object_get(a, "coverage"), "observed")) > 0;
        size_t answered, to_come;
        rank_counts(a, &answered, &to_come);
        if (any && (t >= next || answered > shown) && !stop_sent) {
            emit(cli, a, false);
            shown = answered;
            next = t + interval;
        }
        /* until every rank's first result, poll often: each comes within
         * an epoch of the command, and a coarse poll would add to that (for
         * 5 s at most: a rank that never answers is no reason to keep on) */
        usleep((to_come || !any) && t < started + 5 ? 10000 : 100000);
    }
    sigaction(SIGINT, &old, NULL);
    if (rc) {
        json_decref(a);
        return rc;
    }
    emit(cli, a, true);
    /* a rank that refused or never sent its end is said, and fails */
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(a, "ranks"), i, r)
    {
        const char *st = jstr(r, "state");
        if (!strcmp(st, "done"))
            continue;
        rc = MKS_EXIT_ERROR;
        fprintf(stderr, "mkscope probe: rank %.0f %s%s%s\n", jnum(json_object_get(r, "rank")),
                !strcmp(st, "refused") ? "refused the probe"
                : !strcmp(st, "waiting") || !strcmp(st, "sent")
                    ? "never answered the probe (is its agent running? see mkscope status)"
                    : "did not send its last result",
                json_is_string(json_object_get(r, "error")) ? ": " : "",
                json_is_string(json_object_get(r, "error")) ? jstr(r, "error") : "");
    }
    json_decref(a);
    return rc;
}

/*
 * The mkscope subcommands that do more than print one answer: diagnose and
 * waitchain (text, DOT, JSON lines), attach/detach (queue, then wait for
 * every rank's reply), trace export, top and verify.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "perfetto.h"

#ifdef MKS_HAVE_VERIFY
#include "mkscope/hook_abi.h"
#include "mkscope/loader.h"
#include "mkscope/verifier.h"
#endif

static const char *jstr(json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "-";
}

static double jnum(json_t *o, const char *k)
{
    return json_number_value(json_object_get(o, k));
}

static void fmt_ns(char *buf, size_t len, double ns)
{
    if (ns >= 1e9)
        snprintf(buf, len, "%.2f s", ns / 1e9);
    else if (ns >= 1e6)
        snprintf(buf, len, "%.2f ms", ns / 1e6);
    else if (ns >= 1e3)
        snprintf(buf, len, "%.1f us", ns / 1e3);
    else
        snprintf(buf, len, "%.0f ns", ns);
}

/* ---- diagnose / waitchain ---------------------------------------------------- */

static void text_group(FILE *f, json_t *g, bool tree)
{
    char slow[32], med[32];
    json_t *steps = json_object_get(g, "steps");
    fmt_ns(slow, sizeof(slow), jnum(g, "step_ns"));
    fmt_ns(med, sizeof(med), jnum(g, "median_step_ns"));
    json_t *root = json_object_get(g, "root");
    size_t i;
    json_t *v;
    if (json_is_true(json_object_get(g, "straggler"))) {
        char late[32];
        fmt_ns(late, sizeof(late), jnum(g, "excess_ns"));
        fprintf(f, "steps %lld-%lld (%zu, straggler since step %lld): %s a step (median %s),"
                   " peers wait %s a step on rank %lld\n",
                (long long)json_integer_value(json_object_get(g, "since_step")),
                (long long)json_integer_value(json_object_get(g, "until_step")),
                json_array_size(steps),
                (long long)json_integer_value(json_object_get(g, "since_step")), slow, med, late,
                (long long)json_integer_value(json_object_get(root, "rank")));
    } else {
        fprintf(f, "steps");
        json_array_foreach(steps, i, v)
        {
            if (i == 8) {
                fprintf(f, " ... (%zu)", json_array_size(steps));
                break;
            }
            fprintf(f, "%s%lld", i ? "," : " ", (long long)json_integer_value(v));
        }
        fprintf(f, ": %s (median %s) on rank %lld\n", slow, med,
                (long long)json_integer_value(json_object_get(g, "rank")));
    }
    fprintf(f, "  cause: %s", jstr(g, "cause"));
    if (json_is_object(root)) {
        fprintf(f, " at rank %lld", (long long)json_integer_value(json_object_get(root, "rank")));
        if (json_is_string(json_object_get(root, "task_class")))
            fprintf(f, ", task class %s", jstr(root, "task_class"));
        if (json_is_string(json_object_get(root, "comm")))
            fprintf(f, ", %s", jstr(root, "comm"));
    }
    fputc('\n', f);
    json_t *ru = json_object_get(g, "runner_up");
    if (json_is_number(json_object_get(g, "share")) && strcmp(jstr(g, "cause"), "undecided")) {
        fprintf(f, "  explains %.0f%% of the delay", 100.0 * jnum(g, "share"));
        if (json_is_object(ru))
            fprintf(f, "; runner-up %s, %.0f%%", jstr(ru, "cause"), 100.0 * jnum(ru, "share"));
        fputc('\n', f);
    }
    json_t *ev = json_object_get(g, "evidence");
    if (json_is_object(ev) && json_is_string(json_object_get(ev, "text")) &&
        *jstr(ev, "text"))
        fprintf(f, "  evidence (against %s): %s\n", jstr(ev, "reference"), jstr(ev, "text"));
    if (json_is_string(json_object_get(g, "reason")))
        fprintf(f, "  why: %s\n", jstr(g, "reason"));
    json_t *cov = json_object_get(g, "coverage");
    if (json_is_object(cov) && json_is_number(json_object_get(cov, "ratio")))
        fprintf(f, "  coverage: %.1f%% of events observed\n", 100.0 * jnum(cov, "ratio"));
    json_t *chain = json_object_get(g, "chain");
    json_array_foreach(chain, i, v)
    {
        char late[32];
        fmt_ns(late, sizeof(late), jnum(v, "lateness_ns"));
        if (tree)
            fprintf(f, "  %*s%s rank %lld: %s, %s late%s%s\n", (int)(2 * i), "",
                    i ? "└─" : "", (long long)json_integer_value(json_object_get(v, "rank")),
                    jstr(v, "cause"), late,
                    json_is_string(json_object_get(v, "task_class")) ? ", class " : "",
                    json_is_string(json_object_get(v, "task_class")) ? jstr(v, "task_class")
                                                                     : "");
        else
            fprintf(f, "  %s rank %lld (%s, %s)", i ? "->" : "chain:",
                    (long long)json_integer_value(json_object_get(v, "rank")), jstr(v, "cause"),
                    late);
    }
    if (!tree && json_array_size(chain))
        fputc('\n', f);
}

static void dot_groups(FILE *f, json_t *groups, json_t *lost)
{
    fprintf(f, "digraph waitchain {\n  rankdir=LR;\n  node [shape=box, fontname=\"monospace\"];\n");
    size_t gi, i;
    json_t *g, *v;
    /* lost ranks: the stalled ranks' chains, the lost rank in red */
    json_array_foreach(lost, gi, g)
    {
        json_t *chain;
        if (strcmp(jstr(g, "cause"), "rank_lost"))
            continue;
        fprintf(f, "  lost%lld [label=\"rank %lld\\nlost (%s)\", style=bold, color=red];\n",
                (long long)json_integer_value(json_object_get(g, "rank")),
                (long long)json_integer_value(json_object_get(g, "rank")), jstr(g, "state"));
        json_array_foreach(json_object_get(g, "chains"), i, chain)
        {
            size_t k, n = json_array_size(chain);
            for (k = 0; k + 1 < n; k++) {
                long long a = (long long)json_integer_value(json_array_get(chain, k));
                long long b = (long long)json_integer_value(json_array_get(chain, k + 1));
                fprintf(f, "  stalled%lld [label=\"rank %lld\\nstalled\"];\n", a, a);
                if (k + 2 == n)
                    fprintf(f, "  stalled%lld -> lost%lld [label=\"waits on\"];\n", a, b);
                else
                    fprintf(f, "  stalled%lld -> stalled%lld [label=\"waits on\"];\n", a, b);
            }
        }
    }
    json_array_foreach(groups, gi, g)
    {
        json_t *chain = json_object_get(g, "chain");
        json_array_foreach(chain, i, v)
        {
            char late[32];
            fmt_ns(late, sizeof(late), jnum(v, "lateness_ns"));
            fprintf(f, "  g%zu_%zu [label=\"rank %lld\\n%s\\n%s late%s%s\"%s];\n", gi, i,
                    (long long)json_integer_value(json_object_get(v, "rank")), jstr(v, "cause"),
                    late, json_is_string(json_object_get(v, "task_class")) ? "\\n" : "",
                    json_is_string(json_object_get(v, "task_class")) ? jstr(v, "task_class") : "",
                    i + 1 == json_array_size(chain) ? ", style=bold, color=red" : "");
            if (i)
                fprintf(f, "  g%zu_%zu -> g%zu_%zu [label=\"waits on\"];\n", gi, i - 1, gi, i);
        }
    }
    fprintf(f, "}\n");
}

/* A lost rank and the peers it stalls (the collector's "lost_ranks"). */
static void text_lost(FILE *f, json_t *g)
{
    if (strcmp(jstr(g, "cause"), "rank_lost")) {
        fprintf(f, "undecided: %s\n", jstr(g, "reason"));
        return;
    }
    json_t *stalled = json_object_get(g, "stalled"), *v;
    size_t i;
    fprintf(f, "rank %lld lost (%s; last heard %.1f s ago", (long long)json_integer_value(
                                                                json_object_get(g, "rank")),
            !strcmp(jstr(g, "state"), "exited") ? "its application exited" : "its agent is silent",
            json_real_value(json_object_get(g, "last_heard_s")));
    if (json_is_real(json_object_get(g, "last_progress_s")))
        fprintf(f, ", last task %.1f s ago", json_real_value(json_object_get(g, "last_progress_s")));
    fprintf(f, ")");
    if (json_array_size(stalled)) {
        fprintf(f, ": root of the stall of rank%s", json_array_size(stalled) == 1 ? "" : "s");
        json_array_foreach(stalled, i, v)
        {
            fprintf(f, "%s %lld", i ? "," : "", (long long)json_integer_value(v));
        }
        json_t *steps = json_object_get(g, "steps");
        if (json_array_size(steps)) {
            fprintf(f, " (step");
            json_array_foreach(steps, i, v)
            {
                fprintf(f, "%s %lld", i ? "," : "", (long long)json_integer_value(v));
            }
            fprintf(f, ")");
        }
    }
    fprintf(f, "\n");
    json_t *chain;
    json_array_foreach(json_object_get(g, "chains"), i, chain)
    {
        size_t k;
        fprintf(f, "  ");
        json_array_foreach(chain, k, v)
        {
            fprintf(f, "%s%lld", k ? " -> " : "", (long long)json_integer_value(v));
        }
        fprintf(f, " (waits on it)\n");
    }
}

int mks_cli_diagnose(struct mks_cli *cli, const char *cmd, char **args, size_t n)
{
    json_t *a;
    int rc = mks_cli_call(cli, cmd, args, n, NULL, 0, &a);
    if (rc)
        return rc;
    json_t *groups = json_object_get(a, "groups");
    json_t *lost = json_object_get(a, "lost_ranks");
    size_t i;
    json_t *g;
    if (cli->json) {
        /* One JSON object per lost rank, then per slow step group, one per
         * line. */
        json_array_foreach(lost, i, g)
        {
            json_dumpf(g, cli->out, JSON_COMPACT | JSON_PRESERVE_ORDER);
            fputc('\n', cli->out);
        }
        json_array_foreach(groups, i, g)
        {
            json_dumpf(g, cli->out, JSON_COMPACT | JSON_PRESERVE_ORDER);
            fputc('\n', cli->out);
        }
        if (!json_array_size(groups) && !json_array_size(lost)) {
            json_t *none = json_pack("{s:s, s:O, s:O}", "cause", "none", "reason",
                                     json_object_get(a, "reason") ? json_object_get(a, "reason")
                                                                  : json_null(),
                                     "coverage", json_object_get(a, "coverage")
                                                     ? json_object_get(a, "coverage")
                                                     : json_null());
            json_dumpf(none, cli->out, JSON_COMPACT | JSON_PRESERVE_ORDER);
            fputc('\n', cli->out);
            json_decref(none);
        }
    } else if (cli->dot) {
        dot_groups(cli->out, groups, lost);
    } else {
        json_array_foreach(lost, i, g)
        {
            text_lost(cli->out, g);
        }
        if (!json_array_size(groups))
            fprintf(cli->out, "no slow steps: %s\n",
                    json_is_string(json_object_get(a, "reason")) ? jstr(a, "reason")
                                                                 : "nothing stands out");
        json_array_foreach(groups, i, g)
        {
            text_group(cli->out, g, !strcmp(cmd, "waitchain"));
        }
        json_int_t n_slow = json_integer_value(json_object_get(a, "slow_steps")),
                   n_exam = json_integer_value(json_object_get(a, "slow_steps_examined"));
        if (json_is_integer(json_object_get(a, "slow_steps_examined")) && n_exam < n_slow)
            fprintf(cli->out,
                    "(%lld slow steps; the %lld slowest examined: narrow with --steps A-B or "
                    "--last N to examine every one)\n",
                    (long long)n_slow, (long long)n_exam);
        json_int_t n_cont = json_integer_value(json_object_get(a, "contended_steps"));
        if (n_cont > 0)
            fprintf(cli->out,
                    "(%lld slow step%s explained by host CPU contention: the worker threads "
                    "waited for a core, no scheduler cause)\n",
                    (long long)n_cont, n_cont == 1 ? "" : "s");
        json_int_t hidden = json_integer_value(json_object_get(a, "hidden_groups"));
        if (hidden > 0)
            fprintf(cli->out, "(%lld shorter group%s of slow steps left out by --min-steps)\n",
                    (long long)hidden, hidden == 1 ? "" : "s");
        mks_cli_rolled(cli->out, json_object_get(a, "rolled_up"));
        /* a long job read step by step (docs/collector.md, Step aggregates) */
        if (json_is_string(json_object_get(a, "step_times_note")))
            fprintf(cli->out, "(%s)\n", jstr(a, "step_times_note"));
    }
    json_decref(a);
    return 0;
}

/* ---- attach / detach -------------------------------------------------------------- */

/* A BPF object file: a regular file of at most 8 MiB.  Opened without
 * blocking, so that a FIFO, a device or a directory named by mistake is
 * refused, never waited on. */
static int read_file(const char *path, void **buf_p, size_t *len_p)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st)) {
        int e = errno;
        close(fd);
        return -e;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
    }
    if (st.st_size <= 0 || st.st_size > (off_t)MKS_WIRE_MAX_OBJECT) {
        close(fd);
        return st.st_size <= 0 ? -ENODATA : -EFBIG;
    }
    size_t len = (size_t)st.st_size, got = 0;
    uint8_t *buf = malloc(len);
    if (!buf) {
        close(fd);
        return -ENOMEM;
    }
    while (got < len) {
        ssize_t n = read(fd, buf + got, len - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int e = n < 0 ? errno : EIO; /* shorter than fstat said: it changed */
            free(buf);
            close(fd);
            return -e;
        }
        got += (size_t)n;
    }
    close(fd);
    *buf_p = buf;
    *len_p = len;
    return 0;
}

static const char *named(char **args, size_t n, const char *name)
{
    size_t l = strlen(name);
    for (size_t i = 0; i < n; i++)
        if (!strncmp(args[i], "--", 2) && !strncmp(args[i] + 2, name, l) && args[i][2 + l] == '=')
            return args[i] + 3 + l;
    return NULL;
}

/* Verify every program of the object here, as each agent will, before it
 * is sent: a rejection needs no round trip, and the verdict and cost are
 * shown next to the agents'. */
static int verify_local(struct mks_cli *cli, const char *path, const void *blob, size_t len,
                        const char *hook_name)
{
#ifdef MKS_HAVE_VERIFY
    char err[512];
    struct mks_obj *obj = NULL;
    if (mks_obj_open_mem(blob, len, path, &obj, err, sizeof(err))) {
        fprintf(stderr, "mkscope attach: %s: %s (give a clang -target bpf object built against"
                        " mkscope/hook_abi.h)\n",
                path, err);
        return MKS_EXIT_USAGE;
    }
    int32_t hook_override = -1;
    if (hook_name) {
        for (uint32_t h = 0; h < MKS_EV_COUNT; h++)
            if (mks_hook_event_name(h) && !strcmp(mks_hook_event_name(h), hook_name))
                hook_override = (int32_t)h;
        if (hook_override < 0) {
            char *end;
            long v = strtol(hook_name, &end, 10);
            if (*end || v < 0 || v >= MKS_EV_COUNT) {
                fprintf(stderr, "mkscope attach: --hook '%s' is not a hook (task_ready,"
                                " task_end, dep_wait_begin, ... or 0..%d)\n",
                        hook_name, MKS_EV_COUNT - 1);
                mks_obj_close(obj);
                return MKS_EXIT_USAGE;
            }
            hook_override = (int32_t)v;
        }
    }
    int status = 0;
    FILE *f = cli->json ? stderr : cli->out;
    for (uint32_t i = 0; i < mks_obj_prog_count(obj); i++) {
        const struct mks_obj_prog *p = mks_obj_prog(obj, i);
        struct mks_verify_opts o = {.sz = sizeof(o),
                                    .prog_type = p->prog_type,
                                    .abi_version = p->abi_version,
                                    .hook = hook_override >= 0 ? hook_override : p->hook,
                                    .maps = mks_obj_maps(obj),
                                    .n_maps = mks_obj_map_count(obj)};
        struct mks_verify_result r = {0};
        char log[1024] = "";
        const char *hn = mks_hook_event_name((uint32_t)o.hook);
        if (mks_verify(p->insns, p->n_insns, &o, &r, log, sizeof(log))) {
            char *nl = strchr(log, '\n');
            if (nl)
                *nl = 0;
            fprintf(stderr, "mkscope attach: %s at %s rejected here, not sent: %s\n", p->name,
                    hn ? hn : "?", log);
            status = MKS_EXIT_ERROR;
        } else {
            fprintf(f, "verified here: %s at %s: %u insns, cost %llu insns per run\n", p->name,
                    hn ? hn : "?", r.n_insns, (unsigned long long)r.cost);
        }
    }
    mks_obj_close(obj);
    return status;
#else
    (void)cli, (void)path, (void)blob, (void)len, (void)hook_name;
    return 0;
#endif
}

int mks_cli_attach(struct mks_cli *cli, const char *cmd, char **args, size_t npos, size_t n)
{
    bool attach = !strcmp(cmd, "attach");
    const char *builtin = named(args, n, "builtin");
    const char *wait_s = named(args, n, "wait");
    char *end = NULL;
    long wait_ms = wait_s ? strtol(wait_s, &end, 10) : 10000;
    if (wait_s && (*end || end == wait_s || wait_ms <= 0 || wait_ms > 3600000)) {
        fprintf(stderr, "mkscope %s: --wait wants milliseconds (1..3600000), got '%s'\n", cmd,
                wait_s);
        return MKS_EXIT_USAGE;
    }
    void *blob = NULL;
    size_t blob_len = 0;
    char name[128];
    char *req[66];
    size_t nr = 0;
    if (!npos && !(attach && builtin)) {
        fprintf(stderr, "mkscope %s: give %s; see mkscope %s --help\n", cmd,
                attach ? "a BPF object file or --builtin NAME" : "the program's name", cmd);
        return MKS_EXIT_USAGE;
    }
    if (attach && npos) {
        int rc = read_file(args[0], &blob, &blob_len);
        if (rc) {
            fprintf(stderr, "mkscope attach: cannot read %s: %s (give a regular file, a clang"
                            " -target bpf object of at most 8 MiB)\n",
                    args[0],
                    rc == -EINVAL ? "not a regular file" : rc == -ENODATA ? "empty" : strerror(-rc));
            return MKS_EXIT_USAGE;
        }
        rc = verify_local(cli, args[0], blob, blob_len, named(args, n, "hook"));
        if (rc) {
            free(blob);
            return rc;
        }
        const char *base = strrchr(args[0], '/');
        snprintf(name, sizeof(name), "%s", base ? base + 1 : args[0]);
        char *dot = strstr(name, ".bpf.o");
        if (!dot)
            dot = strrchr(name, '.');
        if (dot && dot != name)
            *dot = 0;
    } else {
        snprintf(name, sizeof(name), "%s", npos ? args[0] : builtin);
    }
    if (named(args, n, "name"))
        snprintf(name, sizeof(name), "%s", named(args, n, "name"));
    if (!mks_wire_prog_name_valid(name)) {
        fprintf(stderr, "mkscope %s: '%.64s' (from the file name) is not a program name ("
                        MKS_WIRE_PROG_GRAMMAR "): give one with --name\n",
                cmd, name);
        free(blob);
        return MKS_EXIT_USAGE;
    }
    req[nr++] = name;
    for (size_t i = npos; i < n && nr < 64; i++)
        req[nr++] = args[i];
    json_t *a;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = mks_cli_call(cli, cmd, req, nr, blob, blob_len, &a);
    free(blob);
    if (rc)
        return rc;
    /* Wait until every rank's agent replied (it picks commands up with its
     * next summary or heartbeat). */
    char ids[48 * 1024] = ""; /* up to 4096 ranks' command ids */
    size_t off = 0, i;
    json_t *c;
    json_array_foreach(json_object_get(a, "commands"), i, c)
    {
        int w = snprintf(ids + off, sizeof(ids) - off, "%s%lld", i ? "," : "",
                         (long long)json_integer_value(json_object_get(c, "id")));
        if (w < 0 || (size_t)w >= sizeof(ids) - off) {
            ids[off] = 0; /* never a number cut short */
            break;
        }
        off += (size_t)w;
    }
    size_t want = json_array_size(json_object_get(a, "commands"));
    json_decref(a);
    if (!want) {
        fprintf(stderr, "mkscope %s: no rank to send it to; see mkscope status\n", cmd);
        return MKS_EXIT_NODATA;
    }
    char idarg[sizeof(ids) + 8];
    snprintf(idarg, sizeof(idarg), "--ids=%s", ids);
    char *qa[1] = {idarg};
    json_t *res = NULL;
    size_t replied = 0;
    for (;;) {
        json_decref(res);
        res = NULL;
        if ((rc = mks_cli_call(cli, "commands", qa, 1, NULL, 0, &res)))
            return rc;
        replied = 0;
        json_array_foreach(json_object_get(res, "commands"), i, c)
        {
            if (!json_is_null(json_object_get(c, "replied_ns")))
                replied++;
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
        if (replied == want || ms >= (double)wait_ms)
            break;
        usleep(50000);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    int status = 0;
    json_array_foreach(json_object_get(res, "commands"), i, c)
    {
        if (json_is_null(json_object_get(c, "replied_ns")) || !json_is_true(json_object_get(c, "ok"))) {
            if (!json_is_integer(json_object_get(c, "ok")) ||
                !json_integer_value(json_object_get(c, "ok")))
                status = MKS_EXIT_ERROR;
        }
    }
    if (cli->json) {
        json_t *o = json_pack("{s:s, s:I, s:I, s:f, s:O}", "program", name, "ranks",
                              (json_int_t)want, "replied", (json_int_t)replied, "elapsed_ms", ms,
                              "commands", json_object_get(res, "commands"));
        json_dumpf(o, cli->out, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        fputc('\n', cli->out);
        json_decref(o);
    } else {
        json_t *cols = json_array();
        const char *names[] = {"rank", "ok", "cost", "n_insns", "prog_gen", "error"};
        for (size_t k = 0; k < 6; k++)
            json_array_append_new(cols, json_string(names[k]));
        mks_cli_table(cli->out, cols, json_object_get(res, "commands"));
        json_decref(cols);
        fprintf(cli->out, "%s %s: %zu of %zu ranks replied in %.0f ms\n", cmd, name, replied,
                want, ms);
    }
    if (replied < want)
        fprintf(stderr, "mkscope %s: %zu ranks did not answer within %ld ms: are their agents"
                        " running? see mkscope status\n",
                cmd, want - replied, wait_ms);
    json_decref(res);
    return status;
}

/* ---- trace export ------------------------------------------------------------------- */

/* Perfetto when asked (--as perfetto) or when the output file is named
 * like a Perfetto trace; Chrome JSON otherwise. */
static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

int mks_cli_trace(struct mks_cli *cli, char **args, size_t n)
{
    const char *as = named(args, n, "as");
    if (as && strcmp(as, "perfetto") && strcmp(as, "json")) {
        fprintf(stderr, "mkscope trace export: --as takes perfetto or json, got '%s'\n", as);
        return MKS_EXIT_USAGE;
    }
    bool perfetto = as ? !strcmp(as, "perfetto")
                       : cli->outfile && (ends_with(cli->outfile, ".pftrace") ||
                                          ends_with(cli->outfile, ".perfetto-trace"));
    /* --as is for this side only; the collector sends Chrome JSON. */
    char *fwd[130];
    size_t nf = 0;
    for (size_t i = 0; i < n && nf < 130; i++)
        if (strncmp(args[i], "--as=", 5))
            fwd[nf++] = args[i];
    json_t *a;
    int rc = mks_cli_call(cli, "trace", fwd, nf, NULL, 0, &a);
    if (rc)
        return rc;
    size_t events = json_array_size(json_object_get(a, "traceEvents"));
    if (perfetto) {
        uint8_t *buf;
        size_t len;
        rc = mks_trace_perfetto(a, &buf, &len);
        if (rc) {
            fprintf(stderr, "mkscope trace export: cannot encode the Perfetto trace: %s\n",
                    strerror(-rc));
            json_decref(a);
            return MKS_EXIT_ERROR;
        }
        if (cli->out == stdout && isatty(STDOUT_FILENO)) {
            fprintf(stderr, "mkscope trace export: a Perfetto trace is binary: pass -o FILE\n");
            free(buf);
            json_decref(a);
            return MKS_EXIT_USAGE;
        }
        fwrite(buf, 1, len, cli->out);
        free(buf);
    } else {
        json_dumpf(a, cli->out, JSON_COMPACT | JSON_PRESERVE_ORDER);
        fputc('\n', cli->out);
    }
    if (cli->out != stdout) {
        const json_t *od = json_object_get(a, "otherData");
        size_t asked = json_array_size(json_object_get(od, "ranks_asked"));
        size_t done = json_array_size(json_object_get(od, "ranks_done"));
        char ranks[96] = "";
        if (asked && done < asked)
            snprintf(ranks, sizeof(ranks), " (only %zu of the %zu ranks asked have sent theirs)",
                     done, asked);
        else if (asked)
            snprintf(ranks, sizeof(ranks), " (all %zu ranks asked)", asked);
        fprintf(stderr, "mkscope trace: %zu events of escalation %s written as %s%s\n", events,
                json_string_value(json_object_get(od, "escalation_id")),
                perfetto ? "Perfetto protobuf" : "Chrome JSON", ranks);
    }
    json_decref(a);
    return 0;
}

static uint64_t mks_cli_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- top ------------------------------------------------------------------------------ */

static volatile sig_atomic_t top_stop;
static void on_sigint(int sig)
{
    (void)sig;
    top_stop = 1;
}

int mks_cli_top(struct mks_cli *cli, char **args, size_t n)
{
    const char *iv = named(args, n, "interval"), *it = named(args, n, "iterations");
    bool once = false;
    for (size_t i = 0; i < n; i++)
        once |= !strcmp(args[i], "--once");
    char *end = NULL;
    double interval = iv ? strtod(iv, &end) : 1.0;
    if (iv && (*end || end == iv || !(interval > 0) || interval > 3600)) {
        fprintf(stderr, "mkscope top: --interval wants seconds (0 < S <= 3600), got '%s'\n", iv);
        return MKS_EXIT_USAGE;
    }
    long iterations = it ? strtol(it, &end, 10) : 0;
    if (it && (*end || end == it || iterations <= 0)) {
        fprintf(stderr, "mkscope top: --iterations wants a positive count, got '%s'\n", it);
        return MKS_EXIT_USAGE;
    }
    if (once)
        iterations = 1;
    if (interval < 0.05)
        interval = 0.05;
    signal(SIGINT, on_sigint);
    bool tty = !once && isatty(fileno(cli->out)) && isatty(STDIN_FILENO);
    for (long k = 0; !top_stop && (!iterations || k < iterations); k++) {
        json_t *a;
        int rc = mks_cli_call(cli, "status", NULL, 0, NULL, 0, &a);
        if (rc)
            return rc;
        json_t *q = NULL;
        char *qa[1] = {"p99(run), mean(queue), count(task) by rank where time > -5s"};
        mks_cli_call(cli, "query", qa, 1, NULL, 0, &q);
        if (cli->json) {
            /* One JSON object per refresh and line: the ranks' status and
             * the last 5 s of latencies, as the text view shows them. */
            json_t *o = json_pack("{s:I, s:O, s:O}", "time_ns", (json_int_t)mks_cli_now_ns(),
                                  "status", a, "last_5s", q ? q : json_null());
            char *text = json_dumps(o, JSON_COMPACT);
            if (text)
                fprintf(cli->out, "%s\n", text);
            free(text);
            json_decref(o);
            json_decref(q);
            json_decref(a);
            fflush(cli->out);
            if (iterations && k + 1 >= iterations)
                break;
            struct timespec ts = {(time_t)interval, (long)((interval - (time_t)interval) * 1e9)};
            nanosleep(&ts, NULL);
            continue;
        }
        if (tty)
            fputs("\033[H\033[2J", cli->out);
        time_t now = time(NULL);
        fprintf(cli->out, "mkscope top — %s", ctime(&now));
        json_t *cols = json_array();
        const char *names[] = {"rank", "agent", "epochs", "last_epoch", "tasks", "lost_summaries"};
        for (size_t i = 0; i < 6; i++)
            json_array_append_new(cols, json_string(names[i]));
        mks_cli_table(cli->out, cols, json_object_get(a, "ranks"));
        json_decref(cols);
        if (q) {
            fprintf(cli->out, "\nlast 5 s:\n");
            mks_cli_table(cli->out, json_object_get(q, "columns"), json_object_get(q, "rows"));
            json_decref(q);
        }
        fflush(cli->out);
        json_decref(a);
        if (iterations && k + 1 >= iterations)
            break;
        struct pollfd pf = {.fd = tty ? STDIN_FILENO : -1, .events = POLLIN};
        if (poll(&pf, 1, (int)(interval * 1000)) > 0) {
            char ch;
            if (read(STDIN_FILENO, &ch, 1) == 1 && (ch == 'q' || ch == 'Q'))
                break;
        }
    }
    return 0;
}

/* ---- verify ------------------------------------------------------------------------------ */

int mks_cli_verify(struct mks_cli *cli, size_t argc, char **argv)
{
#ifdef MKS_HAVE_VERIFY
    /* The global -f (taken by mkscope's own parsing) goes to the verifier. */
    char *av[70];
    size_t n = 0;
    for (size_t i = 0; i < argc && n < 66; i++) {
        av[n++] = argv[i];
        if (i == 0 && cli->json) {
            av[n++] = "-f";
            av[n++] = "json";
        }
    }
    return mks_cmd_verify((int)n, av, cli->out, stderr);
#else
    (void)cli, (void)argc, (void)argv;
    fprintf(stderr, "mkscope verify: this build has no verifier (configure with devhooks)\n");
    return MKS_EXIT_ERROR;
#endif
}

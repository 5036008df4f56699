/*
 * mkscope-collector: receives agents' registrations, heartbeats and epoch
 * summaries over nanomsg, stores them in SQLite, answers the mkscope CLI,
 * fans live queries out to agents (survey), receives escalations' raw event
 * batches over UCX and serves Prometheus metrics.
 *
 * The ingest loop is one thread and one poll() over: the ingest socket
 * (raw NN_REP, read in batches, one transaction each: ingest.c), the survey socket (NN_SURVEYOR), the UCX worker's event fd, the
 * CLI server's hand-off eventfd and a signalfd for SIGINT/SIGTERM.  It is
 * the store's only writer.  CLI requests are received and answered by the
 * CLI server's threads (cliserv.c), each reading the store on its own
 * connection, and /metrics by libmicrohttpd's thread on another: a request,
 * however long, never delays an ack.  Only requests that write the store or
 * survey the agents come to the loop, which answers them as quickly as an
 * ingest message.
 */
#include <ctype.h>
#include <errno.h>
#include <arpa/inet.h>
#include <getopt.h>
#include <inttypes.h>
#include <malloc.h>
#include <microhttpd.h>
#include <nanomsg/nn.h>
#include <nanomsg/reqrep.h>
#include <nanomsg/survey.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cliserv.h"
#include "collector.h"
#include "ingest.h"
#include "mkscope/fresh.h"
#include "serve.h"
#include "perfetto.h"
#include "trace.h"
#include "trigger.h"
#include "ucx_rx.h"

#define DEFAULT_INGEST  "tcp://127.0.0.1:7400"
#define DEFAULT_SURVEY  "tcp://127.0.0.1:7401"
#define DEFAULT_CLI     "tcp://127.0.0.1:7402"
#define DEFAULT_METRICS "127.0.0.1:7403"
#define DEFAULT_DB      "mkscope.db"
#define DEFAULT_UCX_PORT_S "7404"
/* /healthz fails when the loop has not gone round for this long (it wakes
 * at least once a second). */
#define HEALTH_STALL_NS (10ull * 1000000000ull)
/* Escalations whose trace waits for more ranks, and for how long. */
#define MAX_PENDING_TRACES 16
#define TRACE_WAIT_NS      (10ull * 1000000000ull)
/* Survey requests waiting while one is out (each holds a CLI request). */
#define MAX_QUEUED_SURVEYS 8

struct collector {
    int ingest, survey;
    struct mks_ingest *ing;
    int sigfd;
    struct MHD_Daemon *mhd;
    struct mks_store *st;
    /* When the loop last went round (/healthz reads it from libmicrohttpd's
     * thread). */
    _Atomic uint64_t loop_beat_ns;
    /* Read by libmicrohttpd's thread only (/metrics). */
    struct mks_store *metrics_st;
    struct mks_cliserv *cli;
    struct mks_wire_key key;
    bool have_key;
    bool verbose;
    struct mks_ingest_stats stats;
    /* What the loop accepted of agents' messages (nonce, time: the ingest
     * path and UCX frames share it), and one log line per reason and
     * interval for what the loop itself refused. */
    struct mks_fresh *fresh;
    struct mks_ratelog reflog[MKS_REFUSED_COUNT];
    const char *trace_dir;
    /* Escalations some of whose ranks have sent their last batch: the trace
     * is written once all have, or TRACE_WAIT_NS after the first did. */
    struct {
        bool used;
        char job[MKS_WIRE_MAX_JOB + 1];
        uint64_t esc, since_mono;
    } pend[MAX_PENDING_TRACES];
    /* Raw event batches over UCX; its "host:port" goes into Escalate. */
    struct mks_ucxrx *ucx;
    char ucx_endpoint[300];
    /* Triggers run over the epochs received since their last evaluation. */
    bool new_summaries;
    int64_t trig_since_epoch; /* epochs from this id on are new to the triggers */
    uint64_t trig_last_mono, trig_hold_off_ns;
    /* A live survey in flight: the CLI request waits for it; later
     * survey requests wait in `queued` for their turn. */
    struct {
        bool active;
        uint64_t id, deadline_ns;
        uint64_t nonce; /* of the survey request: replies answer it */
        struct mks_cliserv_req *req;
        json_t *answers;
        char job[MKS_WIRE_MAX_JOB + 1];
        struct mks_cliserv_req *queued[MAX_QUEUED_SURVEYS];
        unsigned n_queued;
    } sv;
    /* Commands up to this id were announced to their agents (wake_agents);
     * looked for after what may queue some (CLI requests, triggers). */
    int64_t woke_id;
    bool wake_check;
};

static void refused(struct collector *c, enum mks_refusal why, const char *what)
{
    mks_refused(&c->stats, c->reflog, why, what);
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: mkscope-collector [OPTIONS]\n"
            "\n"
            "Receives epoch summaries from mkscope agents, stores them and answers the\n"
            "mkscope CLI.\n"
            "\n"
            "OPTIONS\n"
            "  --ingest URL     agents connect here (NN_REP)       [" DEFAULT_INGEST "]\n"
            "  --survey URL     live queries to agents (NN_SURVEYOR) [" DEFAULT_SURVEY "]\n"
            "  --cli URL        the mkscope CLI connects here       [" DEFAULT_CLI "]\n"
            "  --metrics ADDR   Prometheus /metrics, HOST:PORT or off [" DEFAULT_METRICS "]\n"
            "  --db PATH        SQLite database (WAL)               [" DEFAULT_DB "]\n"
            "  --max-age D      drop epochs older than D (s, m, h, d) [24h]\n"
            "  --max-bytes N    keep the store's pages in use under N (K, M, G; 0: no bound):\n"
            "                   epochs older than a minute rolled up, then the oldest go [100G]\n"
            "  --detail-age D   roll up epochs older than D into one per rank and minute (no\n"
            "                   step, release or transfer records; sums, maxima and\n"
            "                   histograms stay; 0: keep)           [1h]\n"
            "  --max-epochs N   at most N epochs per rank           [no limit]\n"
            "  --key FILE       shared MAC key (32 bytes or 64 hex digits, mode 600)\n"
            "  --trace-dir DIR  write each finished escalation's trace there (.json: Chrome\n"
            "                   JSON, .pftrace: Perfetto)\n"
            "  --ucx-port PORT  raw event batches over UCX (0: any free port; off)  [7404]\n"
            "  --ucx-host HOST  address to listen on and to give agents         [127.0.0.1]\n"
            "  --request-timeout MS  work limit of one CLI request (SQL, query, diagnose) [4000]\n"
            "  --cli-threads N  threads answering CLI requests, each with its own read-only\n"
            "                   store connection                     [2]\n"
            "  --trigger-hold-off D  after a trigger escalated, escalate again only D later\n"
            "                   (90s, 5m, 1h; per trigger: trigger add --hold-off) [5m]\n"
            "  --fresh-window SEC  with --key: refuse requests sent more than SEC away from\n"
            "                   this host's clock (replays; hosts' clocks must agree) [60]\n"
            "  --replay-cache N nonces remembered to refuse copies (size it for the window x\n"
            "                   requests per second)                  [65536]\n"
            "  -v, --verbose    log every message\n"
            "  -h, --help\n"
            "  --version        the version\n"
            "\n"
            "EXAMPLES\n"
            "  mkscope-collector --db /var/lib/mkscope/job.db\n"
            "  mkscope-collector --ingest ipc:///tmp/mks/ingest --cli ipc:///tmp/mks/cli \\\n"
            "                    --survey ipc:///tmp/mks/survey --metrics off --db :memory:\n");
}

/* Retention by default: a day of epochs, in at most 100 GiB of pages, the
 * wait, release and worker detail of the last hour (docs/collector.md,
 * Retention: what a rank costs per hour and tier). */
#define DEFAULT_MAX_AGE_NS    (24ull * 3600 * 1000000000ull)
#define DEFAULT_MAX_BYTES     (100ull << 30)
#define DEFAULT_DETAIL_AGE_NS (3600ull * 1000000000ull)

struct unit {
    const char *suffix;
    uint64_t mult;
};
static const struct unit parse_duration_units[] = {
    {"", 1000000000ull},          {"s", 1000000000ull}, {"m", 60000000000ull},
    {"h", 3600000000000ull},      {"d", 86400000000000ull}, {NULL, 0}};
static const struct unit parse_byte_units[] = {{"", 1},           {"K", 1ull << 10},
                                               {"M", 1ull << 20}, {"G", 1ull << 30},
                                               {"T", 1ull << 40}, {NULL, 0}};

/* A count with one of units' suffixes, into *out; -EINVAL when it is none
 * or overflows. */
static int parse_size(const char *s, const struct unit *units, uint64_t *out)
{
    char *end;
    if (!s || !isdigit((unsigned char)*s))
        return -EINVAL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return -EINVAL;
    for (const struct unit *u = units; u->suffix; u++) {
        if (strcmp(end, u->suffix))
            continue;
        if (v > UINT64_MAX / u->mult)
            return -EINVAL;
        *out = (uint64_t)v * u->mult;
        return 0;
    }
    return -EINVAL;
}

/* --trace-dir: made when missing (parents too) and written to once, so an
 * unusable directory is an error at start rather than a failure at every
 * escalation. */
static int check_trace_dir(const char *dir)
{
    char path[4096];
    if (!*dir || strlen(dir) >= sizeof(path) - 32) {
        fprintf(stderr, "mkscope-collector: --trace-dir '%s' is not a usable path\n", dir);
        return -1;
    }
    snprintf(path, sizeof(path), "%s", dir);
    for (char *p = path + 1;; p++) {
        char c = *p;
        if (c != '/' && c != 0)
            continue;
        *p = 0;
        if (mkdir(path, 0750) && errno != EEXIST) {
            fprintf(stderr, "mkscope-collector: --trace-dir: cannot create %s: %s\n", path,
                    strerror(errno));
            return -1;
        }
        *p = c;
        if (!c)
            break;
    }
    struct stat sb;
    if (stat(dir, &sb) || !S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "mkscope-collector: --trace-dir %s is not a directory\n", dir);
        return -1;
    }
    snprintf(path, sizeof(path), "%s/.mkscope-probe-XXXXXX", dir);
    int fd = mkstemp(path);
    if (fd < 0) {
        fprintf(stderr, "mkscope-collector: --trace-dir %s is not writable: %s\n", dir,
                strerror(errno));
        return -1;
    }
    close(fd);
    unlink(path);
    return 0;
}

/* A temporary store's file and its WAL companions. */
static void remove_db(const char *path)
{
    if (!path || !*path)
        return;
    char p[4200];
    unlink(path);
    snprintf(p, sizeof(p), "%s-wal", path);
    unlink(p);
    snprintf(p, sizeof(p), "%s-shm", path);
    unlink(p);
}

static int nn_open(int domain, int proto, const char *url, const char *what, size_t max_msg)
{
    int s = nn_socket(domain, proto);
    if (s < 0) {
        fprintf(stderr, "mkscope-collector: %s socket: %s\n", what, nn_strerror(nn_errno()));
        return -1;
    }
    int zero = 0;
    /* Agents send summaries of a large epoch; nanomsg's default 1 MiB limit
     * would drop them silently.  No more than the socket takes, either:
     * nanomsg drops a larger message before it is read. */
    int maxsz = (int)max_msg + 1024;
    nn_setsockopt(s, NN_SOL_SOCKET, NN_RCVMAXSIZE, &maxsz, sizeof(maxsz));
    nn_setsockopt(s, NN_SOL_SOCKET, NN_LINGER, &zero, sizeof(zero));
    if (nn_bind(s, url) < 0) {
        fprintf(stderr, "mkscope-collector: cannot bind %s socket to %s: %s (is another collector"
                        " running? pick another URL with --%s)\n",
                what, url, nn_strerror(nn_errno()), what);
        nn_close(s);
        return -1;
    }
    return s;
}

static int nn_fd(int s, int opt)
{
    int fd;
    size_t sz = sizeof(fd);
    if (nn_getsockopt(s, NN_SOL_SOCKET, opt, &fd, &sz) < 0)
        return -1;
    return fd;
}

/* Encode and send an envelope; errors are logged, the caller carries on. */
static void send_env(struct collector *c, int sock, const mks_envelope *env)
{
    uint8_t *buf;
    size_t len;
    char err[256];
    if (mks_wire_encode(env, c->have_key ? &c->key : NULL, &buf, &len, err, sizeof(err))) {
        fprintf(stderr, "mkscope-collector: cannot encode %s: %s\n",
                mks_wire_body_name(env->body_case), err);
        return;
    }
    if (nn_send(sock, buf, len, NN_DONTWAIT) < 0)
        fprintf(stderr, "mkscope-collector: send %s: %s\n", mks_wire_body_name(env->body_case),
                nn_strerror(nn_errno()));
    free(buf);
}

/* Write buf to path through a temporary name, so a reader never sees a
 * half-written trace. */
static bool write_whole(const char *path, const void *buf, size_t len)
{
    char tmp[4200];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    bool ok = f && fwrite(buf, 1, len, f) == len;
    if (f && fclose(f))
        ok = false;
    if (ok && rename(tmp, path))
        ok = false;
    if (!ok) {
        int e = errno;
        unlink(tmp);
        errno = e;
    }
    return ok;
}

static void write_trace(struct collector *c, const char *job, uint64_t esc)
{
    json_t *t = NULL;
    char err[256], path[4096];
    if (mks_trace_build(c->st, job, (int64_t)esc, &t, err, sizeof(err))) {
        fprintf(stderr, "mkscope-collector: trace of escalation %" PRIu64 ": %s\n", esc, err);
        return;
    }
    const json_t *od = json_object_get(t, "otherData");
    size_t done = json_array_size(json_object_get(od, "ranks_done"));
    size_t asked = json_array_size(json_object_get(od, "ranks_asked"));
    char *text = json_dumps(t, JSON_COMPACT);
    snprintf(path, sizeof(path), "%s/mkscope-%s-%" PRIu64 ".json", c->trace_dir, job, esc);
    if (!text || !write_whole(path, text, strlen(text)))
        fprintf(stderr, "mkscope-collector: cannot write %s: %s\n", path, strerror(errno));
    else
        fprintf(stderr, "mkscope-collector: wrote %s (ranks %zu of %zu asked)\n", path, done,
                asked);
    free(text);
    /* The same trace in Perfetto's own format. */
    uint8_t *buf;
    size_t len;
    if (mks_trace_perfetto(t, &buf, &len) == 0) {
        snprintf(path, sizeof(path), "%s/mkscope-%s-%" PRIu64 ".pftrace", c->trace_dir, job, esc);
        if (write_whole(path, buf, len))
            fprintf(stderr, "mkscope-collector: wrote %s\n", path);
        else
            fprintf(stderr, "mkscope-collector: cannot write %s: %s\n", path, strerror(errno));
        free(buf);
    }
    json_decref(t);
}

/* A rank's last batch of escalation `esc` arrived: write the trace once
 * every rank asked has sent its own (building it stalls this loop, so once,
 * not per rank); until then remember it, so that a rank that never answers
 * (its agent died) delays the trace by TRACE_WAIT_NS at most. */
static void trace_rank_done(struct collector *c, const char *job, uint64_t esc)
{
    if (!c->trace_dir)
        return;
    json_t *asked, *done;
    mks_trace_ranks(c->st, job, (int64_t)esc, &asked, &done);
    size_t n_asked = json_array_size(asked), n_done = json_array_size(done);
    json_decref(asked);
    json_decref(done);
    size_t k, free_k = MAX_PENDING_TRACES;
    for (k = 0; k < MAX_PENDING_TRACES; k++) {
        if (c->pend[k].used && c->pend[k].esc == esc && !strcmp(c->pend[k].job, job))
            break;
        if (!c->pend[k].used && free_k == MAX_PENDING_TRACES)
            free_k = k;
    }
    if (n_done >= n_asked) {
        if (k < MAX_PENDING_TRACES)
            c->pend[k].used = false;
        write_trace(c, job, esc);
        return;
    }
    if (k < MAX_PENDING_TRACES)
        return;
    if (free_k == MAX_PENDING_TRACES) {
        /* More escalations in flight than we track: write what is there. */
        write_trace(c, job, esc);
        return;
    }
    c->pend[free_k].used = true;
    c->pend[free_k].esc = esc;
    c->pend[free_k].since_mono = mks_mono_ns();
    snprintf(c->pend[free_k].job, sizeof(c->pend[free_k].job), "%s", job);
    fprintf(stderr,
            "mkscope-collector: escalation %" PRIu64 ": %zu of %zu ranks sent their raw events;"
            " the trace is written when all have (at most %llu s from now)\n",
            esc, n_done, n_asked, TRACE_WAIT_NS / 1000000000ull);
}

/* Write the traces that waited too long for a rank. */
static void flush_traces(struct collector *c)
{
    uint64_t now = mks_mono_ns();
    for (size_t k = 0; k < MAX_PENDING_TRACES; k++) {
        if (!c->pend[k].used || now - c->pend[k].since_mono < TRACE_WAIT_NS)
            continue;
        c->pend[k].used = false;
        fprintf(stderr,
                "mkscope-collector: escalation %" PRIu64 ": not every rank asked sent its raw"
                " events within %llu s; writing the trace of those that did\n",
                c->pend[k].esc, TRACE_WAIT_NS / 1000000000ull);
        write_trace(c, c->pend[k].job, c->pend[k].esc);
    }
}

/* Evaluate triggers at most once a second, when new summaries arrived. */
static void run_triggers(struct collector *c)
{
    uint64_t mono = mks_mono_ns();
    if (!c->new_summaries || mono - c->trig_last_mono < 1000000000ull)
        return;
    c->new_summaries = false;
    c->trig_last_mono = mono;
    char job[MKS_WIRE_MAX_JOB + 1];
    mks_store_latest_job(c->st, job, sizeof(job));
    if (!*job)
        return;
    uint64_t now = mks_real_ns();
    struct mks_serve_env se = {.st = c->st, .stats = &c->stats, .now_ns = now,
                               .ucx_endpoint = c->ucx_endpoint};
    /* Only what arrived since the last evaluation: the loop is the only
     * writer, so nothing lands between reading the newest id and now. */
    int64_t newest = 0;
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(mks_store_db(c->st), "SELECT COALESCE(MAX(id), 0) FROM epochs", -1, &s,
                           NULL) == SQLITE_OK) {
        if (sqlite3_step(s) == SQLITE_ROW)
            newest = sqlite3_column_int64(s, 0);
        sqlite3_finalize(s);
    }
    json_t *fired = json_array();
    int n = mks_trigger_eval(&se, job, c->trig_since_epoch, c->trig_hold_off_ns, fired);
    c->trig_since_epoch = newest + 1;
    size_t i;
    json_t *f;
    json_array_foreach(fired, i, f)
    {
        char ranks[256] = "";
        size_t k, off = 0;
        json_t *r;
        json_t *on = json_object_get(f, "escalation_ranks");
        if (!on)
            on = json_object_get(f, "probe_ranks");
        json_array_foreach(on, k, r)
        {
            if (off < sizeof(ranks))
                off += (size_t)snprintf(ranks + off, sizeof(ranks) - off, "%s%lld",
                                        k ? "," : " of ranks ", (long long)json_integer_value(r));
        }
        bool esc = json_is_true(json_object_get(f, "escalated"));
        const char *what = json_string_value(json_object_get(f, "escalation"));
        const char *probe = json_string_value(json_object_get(f, "probe"));
        fprintf(stderr, "mkscope-collector: trigger %lld '%s' fired on rank %lld (value %g)%s%s%s\n",
                (long long)json_integer_value(json_object_get(f, "trigger")),
                json_string_value(json_object_get(f, "expr")),
                (long long)json_integer_value(json_object_get(f, "rank")),
                json_real_value(json_object_get(f, "value")),
                !esc     ? " (within its hold-off)"
                : probe  ? ": probe "
                : what   ? ": escalation "
                         : ": its probe did not start",
                !esc ? "" : probe ? probe : what ? what : "", esc && (probe || what) ? ranks : "");
    }
    /* Per trigger: the ranks it fired on, and the escalation it started. */
    for (i = 0; i < json_array_size(fired); i++) {
        json_int_t id = json_integer_value(json_object_get(json_array_get(fired, i), "trigger"));
        bool first = true;
        for (size_t k = 0; k < i && first; k++)
            first = json_integer_value(json_object_get(json_array_get(fired, k), "trigger")) != id;
        if (!first)
            continue;
        uint64_t n_fired = 0, n_esc = 0;
        for (size_t k = i; k < json_array_size(fired); k++) {
            f = json_array_get(fired, k);
            if (json_integer_value(json_object_get(f, "trigger")) != id)
                continue;
            n_fired++;
            if (json_is_true(json_object_get(f, "escalated")))
                n_esc = json_array_size(json_object_get(f, "escalation_ranks"));
            /* a probe is not an escalation: no raw trace was asked for */
        }
        mks_metrics_trigger(c->stats.registry, job, id, n_fired, n_esc);
    }
    (void)n;
    json_decref(fired);
}

/* After an ingest batch committed: triggers look at new summaries; the last
 * raw batch of an escalation completes its trace. */
static void on_stored(void *arg, const mks_envelope *env)
{
    struct collector *c = arg;
    mks_metrics_observe(c->stats.registry, env);
    if (env->body_case == MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY)
        c->new_summaries = true;
    if (env->body_case == MKSCOPE__V1__ENVELOPE__BODY_RAW_EVENT_BATCH &&
        env->raw_event_batch->last)
        trace_rank_done(c, env->job, env->raw_event_batch->escalation_id);
}

/* A frame from the UCX listener: only raw event batches travel there, and
 * nothing is answered (the stream is one way). */
static void handle_ucx_frame(void *arg, const void *buf, size_t len)
{
    struct collector *c = arg;
    char err[512], line[700];
    mks_envelope *env = NULL;
    c->stats.messages++;
    int rc = mks_wire_decode_for(buf, len, MKS_WIRE_BODY(RAW_EVENT_BATCH),
                                 c->have_key ? &c->key : NULL, &env, err, sizeof(err));
    if (rc) {
        c->stats.decode_errors++;
        snprintf(line, sizeof(line), "a UCX frame: %s", err);
        refused(c, rc == -EACCES ? MKS_REFUSED_UNAUTHENTICATED : MKS_REFUSED_INVALID, line);
        return;
    }
    if ((rc = mks_fresh_check_env(c->fresh, env, mks_real_ns(), err, sizeof(err)))) {
        snprintf(line, sizeof(line), "a UCX frame from %s rank %u: %s", env->job, env->rank, err);
        refused(c, rc == -EALREADY ? MKS_REFUSED_REPLAYED : MKS_REFUSED_STALE, line);
        mks_wire_free(env);
        return;
    }
    c->stats.ucx_batches++;
    if (c->verbose)
        fprintf(stderr, "mkscope-collector: raw_event_batch over UCX from %s rank %u: %zu events\n",
                env->job, env->rank, env->raw_event_batch->n_events);
    rc = mks_store_ingest(c->st, env, mks_real_ns(), NULL, err, sizeof(err));
    if (rc && mks_refusal_of_store(rc) != MKS_REFUSED_COUNT) {
        refused(c, mks_refusal_of_store(rc), err);
    } else if (rc) {
        c->stats.store_errors++;
        fprintf(stderr, "mkscope-collector: %s\n", err);
    } else if (env->raw_event_batch->last) {
        trace_rank_done(c, env->job, env->raw_event_batch->escalation_id);
    }
    mks_wire_free(env);
}

/* --ucx-port PORT (not off): 0 on success, else a one-line error. */
static int parse_ucx_port(const char *port_spec, long *port)
{
    char *end;
    errno = 0;
    *port = strtol(port_spec, &end, 10);
    if (errno || *end || !*port_spec || *port < 0 || *port > 65535) {
        fprintf(stderr, "mkscope-collector: --ucx-port wants a port number or off, got '%s'\n",
                port_spec);
        return -1;
    }
    return 0;
}

static int start_ucx(struct collector *c, const char *host, const char *port_spec)
{
    if (!strcmp(port_spec, "off"))
        return 0;
    long port;
    if (parse_ucx_port(port_spec, &port))
        return -1;
    char err[256];
    if (mks_ucxrx_create(host, (uint16_t)port, &c->ucx, err, sizeof(err))) {
        /* Agents fall back to the ingest socket when no UCX listener is
         * named, so a collector without one still gets every batch. */
        fprintf(stderr,
                "mkscope-collector: %s; raw events will come over the ingest socket (pick a free"
                " port with --ucx-port, or --ucx-port off)\n",
                err);
        return 0;
    }
    const char *adv = host;
    char hn[256];
    if (!strcmp(host, "0.0.0.0") && gethostname(hn, sizeof(hn)) == 0) {
        hn[sizeof(hn) - 1] = 0;
        adv = hn;
    }
    snprintf(c->ucx_endpoint, sizeof(c->ucx_endpoint), "%s:%u", adv, mks_ucxrx_port(c->ucx));
    fprintf(stderr, "mkscope-collector: raw events over UCX on %s\n", c->ucx_endpoint);
    return 0;
}

static void start_survey(struct collector *c, struct mks_cliserv_req *req);

/* A CLI request the CLI server handed to the loop: one that writes the
 * store (attach, detach, trigger add/rm) or surveys the agents. */
static void handle_cli(struct collector *c, struct mks_cliserv_req *req)
{
    const Mkscope__V1__CliRequest *r = mks_cliserv_req_env(req)->cli_request;
    char err[512] = "";
    if (!strcmp(r->verb, "survey")) {
        char job[MKS_WIRE_MAX_JOB + 1];
        const char *what = mks_serve_pos(r, 0);
        if (what && strcmp(what, "status") && strcmp(what, "coverage") && strcmp(what, "maps") &&
            strcmp(what, "programs")) {
            mks_cliserv_done(c->cli, req, MKS_EXIT_USAGE,
                             "survey: ask for status, coverage, maps or programs", NULL);
            return;
        }
        mks_store_latest_job(c->st, job, sizeof(job));
        if (!*job) {
            mks_cliserv_done(c->cli, req, MKS_EXIT_NODATA,
                             "no agent has registered yet: start mkscope-agent next to each rank",
                             NULL);
        } else if (c->sv.active) {
            if (c->sv.n_queued < MAX_QUEUED_SURVEYS)
                c->sv.queued[c->sv.n_queued++] = req;
            else
                mks_cliserv_done(c->cli, req, MKS_EXIT_BUSY,
                                 "collector busy: too many surveys waiting; retry", NULL);
        } else {
            start_survey(c, req);
        }
        return;
    }
    struct mks_serve_env se = {.st = c->st, .stats = &c->stats, .now_ns = mks_real_ns()};
    json_t *answer = NULL;
    int status = mks_serve_cli(&se, r, &answer, err, sizeof(err));
    mks_cliserv_done(c->cli, req, status, err, answer);
}

/* ---- live survey ------------------------------------------------------------ */

static void start_survey(struct collector *c, struct mks_cliserv_req *req)
{
    const Mkscope__V1__CliRequest *r = mks_cliserv_req_env(req)->cli_request;
    const char *what = mks_serve_pos(r, 0) ? mks_serve_pos(r, 0) : "status";
    const char *dl_s = mks_serve_pos(r, 1);
    uint32_t deadline_ms = 1000;
    if (dl_s && mks_serve_uint(dl_s, 1, 60000, &deadline_ms)) {
        mks_cliserv_done(c->cli, req, MKS_EXIT_USAGE, "survey: the deadline is 1..60000 ms", NULL);
        return;
    }
    mks_envelope env;
    Mkscope__V1__SurveyRequest sr = MKSCOPE__V1__SURVEY_REQUEST__INIT;
    static uint64_t next_id = 1;
    mks_wire_init(&env, "", 0, next_id);
    sr.id = next_id++;
    sr.deadline_ms = deadline_ms;
    sr.what = (char *)what;
    sr.filter = "";
    env.body_case = MKSCOPE__V1__ENVELOPE__BODY_SURVEY_REQUEST;
    env.survey_request = &sr;
    c->sv.nonce = env.nonce;
    int dl = (int)deadline_ms;
    nn_setsockopt(c->survey, NN_SURVEYOR, NN_SURVEYOR_DEADLINE, &dl, sizeof(dl));
    c->sv.active = true;
    c->sv.id = sr.id;
    c->sv.req = req;
    c->sv.deadline_ns = mks_mono_ns() + (uint64_t)deadline_ms * 1000000ull;
    c->sv.answers = json_array();
    mks_store_latest_job(c->st, c->sv.job, sizeof(c->sv.job));
    send_env(c, c->survey, &env);
}

static void survey_reply(struct collector *c, const void *buf, size_t len)
{
    char err[512], line[600];
    mks_envelope *env = NULL;
    int rc = mks_wire_decode_for(buf, len, MKS_WIRE_BODY(SURVEY_REPLY),
                                 c->have_key ? &c->key : NULL, &env, err, sizeof(err));
    if (rc) {
        snprintf(line, sizeof(line), "a survey reply: %s", err);
        refused(c, rc == -EACCES ? MKS_REFUSED_UNAUTHENTICATED : MKS_REFUSED_INVALID, line);
        return;
    }
    /* An answer to this survey's request, not to an earlier one (a copy of
     * an old answer names the old request's nonce). */
    if ((c->have_key || env->reply_to) && env->reply_to != c->sv.nonce) {
        refused(c, MKS_REFUSED_STALE, "a survey reply that answers another request");
        mks_wire_free(env);
        return;
    }
    if (env->survey_reply->id == c->sv.id) {
        const Mkscope__V1__SurveyReply *r = env->survey_reply;
        json_t *cov = json_array();
        for (size_t i = 0; i < r->n_coverage; i++)
            json_array_append_new(
                cov, json_pack("{s:s, s:I, s:I, s:I, s:I}", "hook",
                               mks_wire_hook_name(r->coverage[i]->hook) ? mks_wire_hook_name(r->coverage[i]->hook) : "unknown",
                               "eligible", (json_int_t)r->coverage[i]->eligible, "ran",
                               (json_int_t)r->coverage[i]->ran, "throttled",
                               (json_int_t)r->coverage[i]->throttled, "lost",
                               (json_int_t)r->coverage[i]->lost));
        json_t *progs = json_array();
        for (size_t i = 0; i < r->n_programs; i++)
            json_array_append_new(progs, json_pack("{s:s, s:s, s:I}", "name",
                                                   r->programs[i]->name, "hook",
                                                   mks_wire_hook_name(r->programs[i]->hook) ? mks_wire_hook_name(r->programs[i]->hook) : "unknown", "prog_gen",
                                                   (json_int_t)r->programs[i]->prog_gen));
        json_array_append_new(c->sv.answers,
                              json_pack("{s:i, s:s, s:b, s:s, s:I, s:I, s:o, s:o}", "rank",
                                        (int)env->rank, "job", env->job, "ok", r->ok, "error",
                                        r->error, "epoch", (json_int_t)r->epoch, "last_seq",
                                        (json_int_t)r->last_seq, "coverage", cov, "programs",
                                        progs));
    }
    mks_wire_free(env);
}

static void finish_survey(struct collector *c)
{
    /* Which registered ranks of the job did not answer in time. */
    json_t *missing = json_array();
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(mks_store_db(c->st), "SELECT rank FROM ranks WHERE job=? ORDER BY rank",
                           -1, &s, NULL) == SQLITE_OK) {
        sqlite3_bind_text(s, 1, c->sv.job, -1, SQLITE_TRANSIENT);
        while (sqlite3_step(s) == SQLITE_ROW) {
            int rank = sqlite3_column_int(s, 0);
            bool seen = false;
            size_t i;
            json_t *a;
            json_array_foreach(c->sv.answers, i, a)
            {
                if (json_integer_value(json_object_get(a, "rank")) == rank)
                    seen = true;
            }
            if (!seen)
                json_array_append_new(missing, json_integer(rank));
        }
        sqlite3_finalize(s);
    }
    json_t *answer = json_pack("{s:s, s:o, s:o}", "job", c->sv.job, "answers", c->sv.answers,
                               "missing", missing);
    mks_cliserv_done(c->cli, c->sv.req, MKS_EXIT_OK, NULL, answer);
    c->sv.active = false;
    c->sv.answers = NULL;
    c->sv.req = NULL;
    if (c->sv.n_queued) {
        struct mks_cliserv_req *next = c->sv.queued[0];
        memmove(c->sv.queued, c->sv.queued + 1, --c->sv.n_queued * sizeof(c->sv.queued[0]));
        start_survey(c, next);
    }
}

/* Tell the agents of every job with newly queued commands, through the
 * survey socket, that commands wait (a SurveyRequest "commands", filter the
 * job; not answered): each asks for them with a request of its own at once
 * and runs them on its ack, instead of with the ack of its next summary, up
 * to an epoch later (docs/probes.md: a probe's start).  Agents without the
 * survey socket still get them that way.  A survey sent while another is
 * out would cancel it: the notice waits until it is over. */
static void wake_agents(struct collector *c)
{
    if (!c->wake_check || c->sv.active)
        return;
    c->wake_check = false;
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(mks_store_db(c->st),
                           "SELECT id, job FROM commands WHERE id > ? AND sent_ns IS NULL"
                           " ORDER BY id",
                           -1, &s, NULL) != SQLITE_OK)
        return;
    sqlite3_bind_int64(s, 1, c->woke_id);
    char told[8][MKS_WIRE_MAX_JOB + 1];
    unsigned n_told = 0;
    while (sqlite3_step(s) == SQLITE_ROW) {
        c->woke_id = sqlite3_column_int64(s, 0);
        const char *job = (const char *)sqlite3_column_text(s, 1);
        bool seen = !job;
        for (unsigned i = 0; !seen && i < n_told; i++)
            seen = !strcmp(told[i], job);
        if (seen)
            continue;
        if (n_told < 8)
            snprintf(told[n_told++], sizeof(told[0]), "%s", job);
        mks_envelope env;
        Mkscope__V1__SurveyRequest sr = MKSCOPE__V1__SURVEY_REQUEST__INIT;
        mks_wire_init(&env, "", 0, 0);
        sr.what = "commands";
        sr.filter = (char *)job;
        env.body_case = MKSCOPE__V1__ENVELOPE__BODY_SURVEY_REQUEST;
        env.survey_request = &sr;
        send_env(c, c->survey, &env);
    }
    sqlite3_finalize(s);
}

/* ---- metrics ------------------------------------------------------------------ */

static enum MHD_Result metrics_handler(void *cls, struct MHD_Connection *conn, const char *url,
                                      const char *method, const char *version,
                                      const char *upload_data, size_t *upload_data_size,
                                      void **con_cls)
{
    struct collector *c = cls;
    (void)version, (void)upload_data, (void)upload_data_size, (void)con_cls;
    struct MHD_Response *resp;
    enum MHD_Result ret;
    if (!strcmp(method, "GET") && !strcmp(url, "/healthz")) {
        /* Healthy: the loop that ingests went round lately (a stalled loop
         * acknowledges nothing) and the store answers. */
        char msg[160];
        uint64_t age = mks_mono_ns() - c->loop_beat_ns;
        unsigned code = MHD_HTTP_OK;
        sqlite3_stmt *s = NULL;
        if (age > HEALTH_STALL_NS) {
            snprintf(msg, sizeof(msg), "stalled: the ingest loop has not run for %.1f s\n",
                     (double)age / 1e9);
            code = MHD_HTTP_SERVICE_UNAVAILABLE;
        } else if (sqlite3_prepare_v2(mks_store_db(c->metrics_st), "SELECT COUNT(*) FROM ranks",
                                      -1, &s, NULL) != SQLITE_OK ||
                   sqlite3_step(s) != SQLITE_ROW) {
            snprintf(msg, sizeof(msg), "store: %s\n", sqlite3_errmsg(mks_store_db(c->metrics_st)));
            code = MHD_HTTP_SERVICE_UNAVAILABLE;
        } else {
            snprintf(msg, sizeof(msg), "ok\n");
        }
        sqlite3_finalize(s);
        resp = MHD_create_response_from_buffer(strlen(msg), msg, MHD_RESPMEM_MUST_COPY);
        MHD_add_response_header(resp, "Content-Type", "text/plain");
        ret = MHD_queue_response(conn, code, resp);
        MHD_destroy_response(resp);
        return ret;
    }
    if (strcmp(method, "GET") || strcmp(url, "/metrics")) {
        static const char nf[] = "not found: try /metrics or /healthz\n";
        resp = MHD_create_response_from_buffer(sizeof(nf) - 1, (void *)nf, MHD_RESPMEM_PERSISTENT);
        ret = MHD_queue_response(conn, MHD_HTTP_NOT_FOUND, resp);
        MHD_destroy_response(resp);
        return ret;
    }
    struct mks_serve_env se = {.st = c->metrics_st, .stats = &c->stats, .now_ns = mks_real_ns()};
    char *text = mks_metrics_render(&se);
    if (!text)
        return MHD_NO;
    resp = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(resp, "Content-Type", "text/plain; version=0.0.4");
    ret = MHD_queue_response(conn, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* --metrics HOST:PORT (not off) into sa and host: 0 on success, else a
 * one-line error. */
static int parse_metrics(const char *spec, struct sockaddr_in *sa, char host[64])
{
    const char *colon = strrchr(spec, ':');
    if (!colon || colon == spec || colon - spec >= 64) {
        fprintf(stderr, "mkscope-collector: --metrics wants HOST:PORT or off, got '%s'\n", spec);
        return -1;
    }
    memcpy(host, spec, (size_t)(colon - spec));
    host[colon - spec] = 0;
    char *end;
    errno = 0;
    long port = strtol(colon + 1, &end, 10);
    if (errno || *end || !colon[1] || port < 0 || port > 65535) {
        fprintf(stderr, "mkscope-collector: --metrics port '%s' is not a port number\n", colon + 1);
        return -1;
    }
    *sa = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &sa->sin_addr) != 1) {
        fprintf(stderr, "mkscope-collector: --metrics host '%s' is not an IPv4 address\n", host);
        return -1;
    }
    return 0;
}

static int start_metrics(struct collector *c, const char *spec)
{
    if (!strcmp(spec, "off"))
        return 0;
    char host[64];
    struct sockaddr_in sa;
    if (parse_metrics(spec, &sa, host))
        return -1;
    long port = ntohs(sa.sin_port);
    /* libmicrohttpd's own thread answers, reading the store through its own
     * connection: a scrape of a large store never delays ingest. */
    c->mhd = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL, (uint16_t)port,
                              NULL, NULL, metrics_handler, c, MHD_OPTION_SOCK_ADDR,
                              (struct sockaddr *)&sa, MHD_OPTION_END);
    if (!c->mhd) {
        fprintf(stderr, "mkscope-collector: cannot serve metrics on %s (port in use? use"
                        " --metrics HOST:PORT or off)\n",
                spec);
        return -1;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(c->mhd, MHD_DAEMON_INFO_BIND_PORT);
    fprintf(stderr, "mkscope-collector: metrics on http://%s:%u/metrics (health: /healthz)\n",
            host, info ? info->port : (unsigned)port);
    return 0;
}

/* ---- main loop ------------------------------------------------------------------ */

static void drain(struct collector *c, int sock, void (*fn)(struct collector *, const void *,
                                                            size_t))
{
    for (;;) {
        void *msg = NULL;
        int n = nn_recv(sock, &msg, NN_MSG, NN_DONTWAIT);
        if (n < 0) {
            int e = nn_errno();
            if (e != EAGAIN && e != EFSM && e != ETIMEDOUT)
                fprintf(stderr, "mkscope-collector: receive: %s\n", nn_strerror(e));
            return;
        }
        fn(c, msg, (size_t)n);
        nn_freemsg(msg);
    }
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "--version")) {
        printf("mkscope-collector %s\n", MKS_VERSION);
        return 0;
    }
    /* Every message decodes into many small allocations and its rows into
     * a buffer that grows with the batch: glibc's default would hand the
     * heap's top back to the kernel and ask for it again, batch after batch
     * (thousands of brk calls a second under load).  The heap keeps what it
     * grew to instead; a collector's peak is its steady state. */
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
    mallopt(M_TOP_PAD, 16 << 20);
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    const char *ingest_url = DEFAULT_INGEST, *survey_url = DEFAULT_SURVEY, *cli_url = DEFAULT_CLI;
    const char *metrics = DEFAULT_METRICS, *db = DEFAULT_DB, *key_file = NULL;
    const char *ucx_host = "127.0.0.1", *ucx_port = DEFAULT_UCX_PORT_S;
    struct mks_store_opts so = {.sz = sizeof(so), .checkpoint_thread = 1,
                                .max_age_ns = DEFAULT_MAX_AGE_NS, .max_bytes = DEFAULT_MAX_BYTES,
                                .detail_age_ns = DEFAULT_DETAIL_AGE_NS};
    struct mks_fresh_opts fo = {.sz = sizeof(fo)};
    static const struct option longopts[] = {
        {"ingest", required_argument, NULL, 'i'},  {"survey", required_argument, NULL, 's'},
        {"cli", required_argument, NULL, 'c'},     {"metrics", required_argument, NULL, 'm'},
        {"db", required_argument, NULL, 'd'},      {"max-epochs", required_argument, NULL, 'E'},
        {"max-age", required_argument, NULL, 'A'}, {"key", required_argument, NULL, 'k'},
        {"max-bytes", required_argument, NULL, 'B'},
        {"detail-age", required_argument, NULL, 'D'},
        {"verbose", no_argument, NULL, 'v'},       {"help", no_argument, NULL, 'h'},
        {"trace-dir", required_argument, NULL, 'T'}, {"ucx-port", required_argument, NULL, 'U'},
        {"ucx-host", required_argument, NULL, 'H'},
        {"request-timeout", required_argument, NULL, 'R'},
        {"cli-threads", required_argument, NULL, 'W'},
        {"trigger-hold-off", required_argument, NULL, 'O'},
        {"fresh-window", required_argument, NULL, 'F'},
        {"replay-cache", required_argument, NULL, 'C'},
        {NULL, 0, NULL, 0}};
    struct collector c = {.ingest = -1, .survey = -1, .sigfd = -1,
                          .trig_hold_off_ns = MKS_TRIGGER_HOLD_OFF_NS};
    uint64_t request_limit_ns = 0;
    unsigned cli_threads = 0;
    int opt;
    while ((opt = getopt_long(argc, argv, "vh", longopts, NULL)) != -1) {
        char *end;
        switch (opt) {
        case 'i': ingest_url = optarg; break;
        case 's': survey_url = optarg; break;
        case 'c': cli_url = optarg; break;
        case 'm': metrics = optarg; break;
        case 'd': db = optarg; break;
        case 'k': key_file = optarg; break;
        case 'T': c.trace_dir = optarg; break;
        case 'U': ucx_port = optarg; break;
        case 'H': ucx_host = optarg; break;
        case 'v': c.verbose = true; break;
        case 'E': {
            unsigned long long v = strtoull(optarg, &end, 10);
            if (*end || !*optarg || *optarg == '-' || v == 0) {
                fprintf(stderr, "mkscope-collector: --max-epochs wants a positive number, got"
                                " '%s'\n",
                        optarg);
                return MKS_EXIT_USAGE;
            }
            so.max_epochs = v;
            break;
        }
        case 'A':
        case 'D': {
            uint64_t ns;
            if (parse_size(optarg, parse_duration_units, &ns) || (opt == 'A' && !ns)) {
                fprintf(stderr,
                        "mkscope-collector: --%s wants a duration such as 3600, 90m, 24h or 7d%s,"
                        " got '%s'\n",
                        opt == 'A' ? "max-age" : "detail-age", opt == 'D' ? " (0: keep)" : "",
                        optarg);
                return MKS_EXIT_USAGE;
            }
            *(opt == 'A' ? &so.max_age_ns : &so.detail_age_ns) = ns;
            break;
        }
        case 'B':
            if (parse_size(optarg, parse_byte_units, &so.max_bytes)) {
                fprintf(stderr, "mkscope-collector: --max-bytes wants a size such as 20G, 512M or"
                                " 0 (no bound), got '%s'\n",
                        optarg);
                return MKS_EXIT_USAGE;
            }
            break;
        case 'R':
        case 'W': {
            unsigned long long v = strtoull(optarg, &end, 10);
            unsigned long long max = opt == 'R' ? 3600000ull : 16ull;
            if (*end || !*optarg || *optarg == '-' || v == 0 || v > max) {
                fprintf(stderr, "mkscope-collector: --%s wants a number from 1 to %llu, got '%s'\n",
                        opt == 'R' ? "request-timeout" : "cli-threads", max, optarg);
                return MKS_EXIT_USAGE;
            }
            if (opt == 'R')
                request_limit_ns = v * 1000000ull;
            else
                cli_threads = (unsigned)v;
            break;
        }
        case 'O':
            if (mks_trigger_hold_off(optarg, &c.trig_hold_off_ns)) {
                fprintf(stderr, "mkscope-collector: --trigger-hold-off wants a duration such as 90s,"
                                " 5m or 1h (at most a week), got '%s'\n",
                        optarg);
                return MKS_EXIT_USAGE;
            }
            break;
        case 'F':
        case 'C': {
            unsigned long long v = strtoull(optarg, &end, 10);
            unsigned long long lo = opt == 'F' ? 1 : 1024;
            unsigned long long hi = opt == 'F' ? 3600 : MKS_FRESH_MAX_CAPACITY;
            if (*end || !*optarg || *optarg == '-' || v < lo || v > hi) {
                fprintf(stderr, "mkscope-collector: --%s wants a number from %llu to %llu, got"
                                " '%s'\n",
                        opt == 'F' ? "fresh-window" : "replay-cache", lo, hi, optarg);
                return MKS_EXIT_USAGE;
            }
            if (opt == 'F')
                fo.window_ns = v * 1000000000ull;
            else
                fo.capacity = (uint32_t)v;
            break;
        }
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return MKS_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "mkscope-collector: unexpected argument '%s'; see --help\n", argv[optind]);
        return MKS_EXIT_USAGE;
    }
    if (c.trace_dir && check_trace_dir(c.trace_dir))
        return MKS_EXIT_USAGE;
    {
        /* Malformed addresses are usage errors, found before anything starts. */
        struct sockaddr_in sa;
        char host[64];
        long port;
        if ((strcmp(metrics, "off") && parse_metrics(metrics, &sa, host)) ||
            (strcmp(ucx_port, "off") && parse_ucx_port(ucx_port, &port)))
            return MKS_EXIT_USAGE;
    }
    char err[512];
    if (key_file) {
        if (mks_wire_key_load(key_file, &c.key, err, sizeof(err))) {
            fprintf(stderr, "mkscope-collector: %s\n", err);
            return MKS_EXIT_USAGE;
        }
        c.have_key = true;
    }
    /* With a key every request must be fresh (nonce and time, inside the
     * window); without one, copies are still dropped by nonce, but a time is
     * not held against a sender whose clock differs: anybody could forge a
     * fresh one. */
    fo.enforce_window = fo.require = c.have_key;
    if (mks_fresh_create(&fo, &c.fresh)) {
        fprintf(stderr, "mkscope-collector: out of memory for the replay cache\n");
        return MKS_EXIT_ERROR;
    }
    /* The CLI server's threads read the store on connections of their own,
     * which an in-memory database cannot have: ":memory:" is a temporary
     * file instead, removed at exit. */
    char tmp_db[4096] = "";
    if (!strcmp(db, ":memory:")) {
        const char *tmpdir = getenv("TMPDIR");
        snprintf(tmp_db, sizeof(tmp_db), "%s/mkscope-collector-XXXXXX",
                 tmpdir && *tmpdir ? tmpdir : "/tmp");
        int fd = mkstemp(tmp_db);
        if (fd < 0) {
            fprintf(stderr, "mkscope-collector: --db :memory: needs a temporary file in %s: %s\n",
                    tmpdir && *tmpdir ? tmpdir : "/tmp", strerror(errno));
            return MKS_EXIT_ERROR;
        }
        close(fd);
        db = tmp_db;
    }
    so.path = db;
    if (mks_store_open(&so, &c.st, err, sizeof(err))) {
        fprintf(stderr, "mkscope-collector: %s\n", err);
        remove_db(tmp_db);
        return MKS_EXIT_ERROR;
    }
    int rc = MKS_EXIT_ERROR;
    if (mks_metrics_create(&c.stats.registry)) {
        fprintf(stderr, "mkscope-collector: out of memory\n");
        mks_store_close(c.st);
        remove_db(tmp_db);
        return MKS_EXIT_ERROR;
    }
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    c.sigfd = signalfd(-1, &mask, SFD_CLOEXEC);
    struct mks_store_opts ro = {.sz = sizeof(ro), .path = db, .read_only = 1};
    struct mks_cliserv_opts co = {.sz = sizeof(co), .url = cli_url, .db_path = db,
                                  .key = c.have_key ? &c.key : NULL, .stats = &c.stats,
                                  .workers = cli_threads, .limit_ns = request_limit_ns,
                                  .fresh = &fo};
    /* Raw REP: ingest reads a batch of requests before answering any. */
    if ((c.ingest = nn_open(AF_SP_RAW, NN_REP, ingest_url, "ingest", MKS_WIRE_MAX_MSG)) < 0 ||
        (c.survey = nn_open(AF_SP, NN_SURVEYOR, survey_url, "survey",
                            mks_wire_body_limit(MKSCOPE__V1__ENVELOPE__BODY_SURVEY_REPLY))) < 0)
        goto out;
    struct mks_ingest_opts io = {.sz = sizeof(io), .sock = c.ingest, .st = c.st,
                                 .key = c.have_key ? &c.key : NULL, .stats = &c.stats,
                                 .verbose = c.verbose, .on_stored = on_stored, .arg = &c,
                                 .fresh = c.fresh};
    if (mks_ingest_create(&io, &c.ing, err, sizeof(err))) {
        fprintf(stderr, "mkscope-collector: %s\n", err);
        goto out;
    }
    if (mks_cliserv_start(&co, &c.cli, err, sizeof(err))) {
        fprintf(stderr, "mkscope-collector: %s\n", err);
        goto out;
    }
    if (strcmp(metrics, "off") && mks_store_open(&ro, &c.metrics_st, err, sizeof(err))) {
        fprintf(stderr, "mkscope-collector: metrics: %s\n", err);
        goto out;
    }
    if (start_metrics(&c, metrics) || start_ucx(&c, ucx_host, ucx_port))
        goto out;
    int ingest_fd = nn_fd(c.ingest, NN_RCVFD);
    int survey_fd = nn_fd(c.survey, NN_RCVFD);
    int loop_fd = mks_cliserv_loop_fd(c.cli);
    fprintf(stderr, "mkscope-collector: ingest %s, cli %s, survey %s, db %s\n", ingest_url,
            cli_url, survey_url, tmp_db[0] ? ":memory: (a temporary file)" : db);
    c.loop_beat_ns = mks_mono_ns();
    for (;;) {
        c.loop_beat_ns = mks_mono_ns();
        /* Progress UCX before sleeping; armed means its fd will wake us. */
        bool ucx_armed = !c.ucx || mks_ucxrx_progress(c.ucx, handle_ucx_frame, &c);
        struct pollfd pf[5] = {
            {.fd = ingest_fd, .events = POLLIN},
            {.fd = loop_fd, .events = POLLIN},
            /* An idle NN_SURVEYOR's fd stays readable (recv says EFSM):
             * polled only while a survey is out, or the loop would spin. */
            {.fd = c.sv.active ? survey_fd : -1, .events = POLLIN},
            {.fd = c.sigfd, .events = POLLIN},
            {.fd = c.ucx ? mks_ucxrx_fd(c.ucx) : -1, .events = POLLIN},
        };
        int timeout = ucx_armed ? 1000 : 0;
        if (c.sv.active) {
            uint64_t now = mks_mono_ns();
            timeout = now >= c.sv.deadline_ns ? 0 : (int)((c.sv.deadline_ns - now) / 1000000) + 1;
        }
        if (!ucx_armed)
            timeout = 0;
        int n = poll(pf, 5, timeout);
        if (n < 0 && errno != EINTR) {
            perror("mkscope-collector: poll");
            goto out;
        }
        if (pf[3].revents & POLLIN) {
            fprintf(stderr, "mkscope-collector: stopping\n");
            rc = 0;
            goto out;
        }
        /* One batch per turn: CLI hand-offs and surveys are served between
         * batches, and the socket stays readable while more wait. */
        if (pf[0].revents & POLLIN)
            mks_ingest_run(c.ing);
        else if (mks_store_idle(c.st, mks_real_ns()))
            fprintf(stderr, "mkscope-collector: retention: %s\n", sqlite3_errmsg(mks_store_db(c.st)));
        if (pf[1].revents & POLLIN) {
            struct mks_cliserv_req *req;
            while ((req = mks_cliserv_loop_take(c.cli)))
                handle_cli(&c, req);
            c.wake_check = true;
        }
        if (pf[2].revents & POLLIN && c.sv.active)
            drain(&c, c.survey, survey_reply);
        if (c.sv.active && mks_mono_ns() >= c.sv.deadline_ns)
            finish_survey(&c);
        uint64_t trig_was = c.trig_last_mono;
        run_triggers(&c);
        c.wake_check |= c.trig_last_mono != trig_was;
        wake_agents(&c);
        flush_traces(&c);
    }
out:
    /* Requests the loop still holds are answered before the server stops. */
    if (c.sv.req)
        mks_cliserv_done(c.cli, c.sv.req, MKS_EXIT_BUSY, "the collector is stopping", NULL);
    for (unsigned i = 0; i < c.sv.n_queued; i++)
        mks_cliserv_done(c.cli, c.sv.queued[i], MKS_EXIT_BUSY, "the collector is stopping", NULL);
    mks_cliserv_stop(c.cli);
    mks_ucxrx_destroy(c.ucx);
    mks_fresh_destroy(c.fresh);
    if (c.sv.answers)
        json_decref(c.sv.answers);
    if (c.mhd)
        MHD_stop_daemon(c.mhd);
    mks_store_close(c.metrics_st);
    if (c.survey >= 0)
        nn_close(c.survey);
    mks_ingest_destroy(c.ing);
    if (c.ingest >= 0)
        nn_close(c.ingest);
    /* after everything that observes into it (ingest, the HTTP thread) */
    mks_metrics_destroy(c.stats.registry);
    if (c.sigfd >= 0)
        close(c.sigfd);
    mks_store_close(c.st);
    remove_db(tmp_db);
    return rc;
}

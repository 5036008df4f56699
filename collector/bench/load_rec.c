/*
 * Recordings of mkscope-load (format in load.h) and `mkscope-load record`:
 * a stand-in collector that accepts every registration, acknowledges every
 * summary and writes what real agents sent to a file, so that the load
 * generator replays summaries of a real run rather than made-up ones.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <nanomsg/nn.h>
#include <nanomsg/reqrep.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "load.h"

uint64_t load_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t load_real_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int load_rec_append(FILE *f, const void *buf, size_t len)
{
    uint8_t hdr[4] = {(uint8_t)len, (uint8_t)(len >> 8), (uint8_t)(len >> 16),
                      (uint8_t)(len >> 24)};
    if (fwrite(hdr, 1, 4, f) != 4 || fwrite(buf, 1, len, f) != len)
        return -EIO;
    return 0;
}

void load_rec_free(struct load_rec *rec)
{
    if (!rec)
        return;
    for (size_t i = 0; i < rec->n; i++)
        free(rec->msg[i]);
    free(rec->msg);
    free(rec->len);
    *rec = (struct load_rec){0};
}

int load_rec_read(const char *path, struct load_rec *rec, char *err, size_t errlen)
{
    *rec = (struct load_rec){0};
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot open recording %s: %s", path, strerror(errno));
        return -errno;
    }
    char magic[sizeof(LOAD_REC_MAGIC) - 1];
    int rc = 0;
    if (fread(magic, 1, sizeof(magic), f) != sizeof(magic) ||
        memcmp(magic, LOAD_REC_MAGIC, sizeof(magic))) {
        snprintf(err, errlen, "%s is not a mkscope-load recording (make one with"
                              " `mkscope-load record`)", path);
        rc = -EINVAL;
        goto out;
    }
    for (;;) {
        uint8_t hdr[4];
        size_t got = fread(hdr, 1, 4, f);
        if (got == 0 && feof(f))
            break;
        if (got != 4) {
            snprintf(err, errlen, "%s: truncated after %zu envelopes", path, rec->n);
            rc = -EINVAL;
            goto out;
        }
        size_t len = (size_t)hdr[0] | (size_t)hdr[1] << 8 | (size_t)hdr[2] << 16 |
                     (size_t)hdr[3] << 24;
        if (len == 0 || len > MKS_WIRE_MAX_MSG) {
            snprintf(err, errlen, "%s: envelope %zu has length %zu (at most %u)", path, rec->n,
                     len, MKS_WIRE_MAX_MSG);
            rc = -EINVAL;
            goto out;
        }
        if (rec->n == rec->cap) {
            size_t cap = rec->cap ? 2 * rec->cap : 64;
            uint8_t **m = realloc(rec->msg, cap * sizeof(*m));
            if (m)
                rec->msg = m;
            size_t *l = m ? realloc(rec->len, cap * sizeof(*l)) : NULL;
            if (!l) {
                snprintf(err, errlen, "out of memory reading %s", path);
                rc = -ENOMEM;
                goto out;
            }
            rec->len = l;
            rec->cap = cap;
        }
        uint8_t *buf = malloc(len);
        if (!buf || fread(buf, 1, len, f) != len) {
            free(buf);
            snprintf(err, errlen, "%s: envelope %zu truncated", path, rec->n);
            rc = -EINVAL;
            goto out;
        }
        rec->msg[rec->n] = buf;
        rec->len[rec->n++] = len;
    }
out:
    fclose(f);
    if (rc)
        load_rec_free(rec);
    return rc;
}

/* ---- record ------------------------------------------------------------ */

static void rec_usage(FILE *f)
{
    fprintf(f,
            "usage: mkscope-load record --ingest URL -o FILE [OPTIONS]\n"
            "\n"
            "Stands in for the collector: accepts every agent, acknowledges every summary\n"
            "and writes the envelopes the agents sent to FILE, for `mkscope-load run`.\n"
            "Stops after --summaries summaries, after --seconds, or on SIGINT/SIGTERM.\n"
            "\n"
            "OPTIONS\n"
            "  --ingest URL      where the agents connect (NN_REP)\n"
            "  -o, --out FILE    the recording to write\n"
            "  --summaries N     stop after N epoch summaries (default 64)\n"
            "  --skip N          leave out each rank's first N summaries (the run's start;\n"
            "                    default 2)\n"
            "  --seconds S       stop after S seconds (default 120)\n"
            "  -h, --help\n"
            "\n"
            "EXAMPLE\n"
            "  mkscope-load record --ingest ipc:///tmp/rec -o bench4.mksrec --summaries 40 &\n"
            "  deploy/local/mkscope-launch --ranks 4 --steps 3000 --collector ipc:///tmp/rec\n");
}

#define REC_MAX_RANKS 256

static void reply(int sock, const mks_envelope *req, uint64_t up_to)
{
    mks_envelope out;
    mks_wire_init(&out, req->job, req->rank, req->seq);
    Mkscope__V1__RegisterAck rack = MKSCOPE__V1__REGISTER_ACK__INIT;
    Mkscope__V1__Ack ack = MKSCOPE__V1__ACK__INIT;
    if (req->body_case == MKSCOPE__V1__ENVELOPE__BODY_REGISTER) {
        rack.accepted = 1;
        rack.reason = "";
        rack.collector_time_ns = load_real_ns();
        out.body_case = MKSCOPE__V1__ENVELOPE__BODY_REGISTER_ACK;
        out.register_ack = &rack;
    } else {
        ack.up_to_seq = up_to;
        out.body_case = MKSCOPE__V1__ENVELOPE__BODY_ACK;
        out.ack = &ack;
    }
    uint8_t *buf;
    size_t len;
    char err[256];
    if (mks_wire_encode(&out, NULL, &buf, &len, err, sizeof(err)) == 0) {
        nn_send(sock, buf, len, 0);
        free(buf);
    }
}

int load_record_main(int argc, char **argv)
{
    const char *url = NULL, *out = NULL;
    unsigned long summaries = 64, skip = 2, seconds = 120;
    static const struct option lo[] = {{"ingest", required_argument, NULL, 'i'},
                                       {"out", required_argument, NULL, 'o'},
                                       {"summaries", required_argument, NULL, 'n'},
                                       {"skip", required_argument, NULL, 'k'},
                                       {"seconds", required_argument, NULL, 't'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
    int opt;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "o:h", lo, NULL)) != -1) {
        char *end = NULL;
        switch (opt) {
        case 'i': url = optarg; break;
        case 'o': out = optarg; break;
        case 'n':
        case 'k':
        case 't': {
            unsigned long v = strtoul(optarg, &end, 10);
            if (!*optarg || *end || (opt != 'k' && v == 0)) {
                fprintf(stderr, "mkscope-load record: --%s wants a %snumber, got '%s'\n",
                        opt == 'n' ? "summaries" : opt == 'k' ? "skip" : "seconds",
                        opt == 'k' ? "" : "positive ", optarg);
                return 2;
            }
            *(opt == 'n' ? &summaries : opt == 'k' ? &skip : &seconds) = v;
            break;
        }
        case 'h': rec_usage(stdout); return 0;
        default:
            fprintf(stderr, "mkscope-load record: unknown option or missing value '%s'; see"
                            " --help\n",
                    argv[optind - 1]);
            return 2;
        }
    }
    if (!url || !out || optind < argc) {
        fprintf(stderr, "mkscope-load record: needs --ingest URL and -o FILE; see --help\n");
        return 2;
    }
    FILE *f = fopen(out, "wb");
    if (!f) {
        fprintf(stderr, "mkscope-load record: cannot write %s: %s\n", out, strerror(errno));
        return 1;
    }
    fputs(LOAD_REC_MAGIC, f);
    int sock = nn_socket(AF_SP, NN_REP);
    int maxsz = (int)MKS_WIRE_MAX_MSG + 1024;
    if (sock < 0 ||
        nn_setsockopt(sock, NN_SOL_SOCKET, NN_RCVMAXSIZE, &maxsz, sizeof(maxsz)) < 0 ||
        nn_bind(sock, url) < 0) {
        fprintf(stderr, "mkscope-load record: cannot bind %s: %s\n", url,
                nn_strerror(nn_errno()));
        fclose(f);
        return 1;
    }
    int rcvfd;
    size_t sz = sizeof(rcvfd);
    nn_getsockopt(sock, NN_SOL_SOCKET, NN_RCVFD, &rcvfd, &sz);
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    int sigfd = signalfd(-1, &mask, SFD_CLOEXEC);
    /* Per rank: summaries seen (for --skip) and the highest seq, acked. */
    uint64_t seen[REC_MAX_RANKS] = {0}, top[REC_MAX_RANKS] = {0};
    unsigned long kept = 0, regs = 0, hbs = 0;
    uint64_t deadline = load_mono_ns() + seconds * 1000000000ull;
    int rc = 0;
    while (kept < summaries) {
        uint64_t now = load_mono_ns();
        if (now >= deadline) {
            fprintf(stderr, "mkscope-load record: %lu s are up\n", seconds);
            break;
        }
        struct pollfd pf[2] = {{rcvfd, POLLIN, 0}, {sigfd, POLLIN, 0}};
        if (poll(pf, 2, (int)((deadline - now) / 1000000) + 1) < 0 && errno != EINTR)
            break;
        if (pf[1].revents & POLLIN)
            break;
        if (!(pf[0].revents & POLLIN))
            continue;
        void *msg = NULL;
        int n = nn_recv(sock, &msg, NN_MSG, NN_DONTWAIT);
        if (n < 0)
            continue;
        mks_envelope *env = NULL;
        char err[256];
        if (mks_wire_decode(msg, (size_t)n, NULL, &env, err, sizeof(err))) {
            fprintf(stderr, "mkscope-load record: not recorded: %s\n", err);
            nn_freemsg(msg);
            nn_send(sock, "", 0, 0); /* REP must answer before the next request */
            continue;
        }
        uint32_t r = env->rank < REC_MAX_RANKS ? env->rank : REC_MAX_RANKS - 1;
        int keep = 0;
        switch (env->body_case) {
        case MKSCOPE__V1__ENVELOPE__BODY_REGISTER: keep = 1, regs++; break;
        case MKSCOPE__V1__ENVELOPE__BODY_HEARTBEAT: keep = 1, hbs++; break;
        case MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY:
            if (env->seq > top[r])
                top[r] = env->seq;
            keep = ++seen[r] > skip;
            kept += (unsigned long)keep;
            break;
        default: break;
        }
        if (keep && load_rec_append(f, msg, (size_t)n)) {
            fprintf(stderr, "mkscope-load record: write %s: %s\n", out, strerror(errno));
            rc = 1;
        }
        reply(sock, env, top[r]);
        mks_wire_free(env);
        nn_freemsg(msg);
        if (rc)
            break;
    }
    if (fclose(f) && !rc) {
        fprintf(stderr, "mkscope-load record: write %s: %s\n", out, strerror(errno));
        rc = 1;
    }
    fprintf(stderr, "mkscope-load record: %s: %lu summaries, %lu registrations, %lu heartbeats\n",
            out, kept, regs, hbs);
    nn_close(sock);
    close(sigfd);
    return rc;
}

/* ---- info ---------------------------------------------------------------- */

int load_info_main(int argc, char **argv)
{
    if (argc != 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        fprintf(argc == 2 ? stdout : stderr,
                "usage: mkscope-load info FILE\n\nOne line per envelope of a recording: rank,"
                " body, bytes, and for summaries\nthe detail tier and the rows of each table.\n");
        return argc == 2 ? 0 : 2;
    }
    struct load_rec rec;
    char err[512];
    if (load_rec_read(argv[1], &rec, err, sizeof(err))) {
        fprintf(stderr, "mkscope-load info: %s\n", err);
        return 1;
    }
    size_t n_sum = 0, bytes = 0;
    for (size_t i = 0; i < rec.n; i++) {
        mks_envelope *env = NULL;
        if (mks_wire_decode(rec.msg[i], rec.len[i], NULL, &env, err, sizeof(err))) {
            printf("%zu: not valid: %s\n", i, err);
            continue;
        }
        printf("%zu: rank %u %s seq %" PRIu64 ", %zu bytes", i, env->rank,
               mks_wire_body_name(env->body_case), env->seq, rec.len[i]);
        if (env->body_case == MKSCOPE__V1__ENVELOPE__BODY_EPOCH_SUMMARY) {
            const Mkscope__V1__EpochSummary *s = env->epoch_summary;
            printf(", tier %u: %zu task stats, %zu steps, %zu waits, %zu releases, %zu local"
                   " waits, %zu workers, %zu gens, %zu maps, %zu coverage",
                   s->detail_tier, s->n_task_stats, s->n_steps, s->n_remote_waits,
                   s->n_releases, s->n_local_waits, s->n_workers, s->n_gens, s->n_maps,
                   s->n_coverage);
            n_sum++;
            bytes += rec.len[i];
        }
        printf("\n");
        mks_wire_free(env);
    }
    printf("%zu summaries, %.0f bytes mean\n", n_sum, n_sum ? (double)bytes / (double)n_sum : 0);
    load_rec_free(&rec);
    return 0;
}

/*
 * mks-tcpproxy: a byte proxy for the fault tests, standing between agents
 * and the collector.  It forwards every connection to the target as is
 * (nanomsg's framing passes through untouched) and, on commands read from
 * a control FIFO, breaks the link the ways a network does:
 *
 *   cut        stop forwarding in both directions and accept no connection:
 *              the peers see silence, as with a pulled cable or a partition
 *              (their TCP buffers fill; nothing is refused)
 *   reset      close every connection and refuse new ones (a peer that
 *              restarts, a firewall that rejects)
 *   pass       forward again (what a cut held back flows on, in order)
 *   delay MS   hold every chunk from the target for MS ms before passing
 *              it on (0: none): a collector slow to answer
 *
 * Addresses are unix:PATH or tcp:HOST:PORT (PORT 0: any; the port is
 * written to --port-file).  Each command is acknowledged by a line
 * "ok <command>" appended to --log (stderr by default), so a test can wait
 * for it to be in force.  One thread, one poll().
 *
 * usage: mks-tcpproxy --listen ADDR --to ADDR --control FIFO [--port-file F]
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS 512
#define CHUNK     65536
/* Bytes held per direction before the proxy stops reading that side: a
 * delayed or cut direction pushes back on the sender like a full network. */
#define MAX_HELD (4u << 20)

struct chunk {
    struct chunk *next;
    uint64_t due_ns;
    size_t len, off;
    char data[];
};

/* One direction of a connection: bytes read from `from`, held until due,
 * written to `to`. */
struct dir {
    struct chunk *head, *tail;
    size_t held;
};

struct conn {
    int c, s;        /* client side, target side */
    struct dir up;   /* client -> target */
    struct dir down; /* target -> client (delayed) */
    bool used;
};

static struct conn conns[MAX_CONNS];
static bool cut, refusing;
static uint64_t delay_ns;
static FILE *logf;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int parse_addr(const char *spec, struct sockaddr_storage *ss, socklen_t *len)
{
    memset(ss, 0, sizeof(*ss));
    if (!strncmp(spec, "unix:", 5)) {
        struct sockaddr_un *un = (struct sockaddr_un *)ss;
        if (strlen(spec + 5) >= sizeof(un->sun_path))
            return -1;
        un->sun_family = AF_UNIX;
        strcpy(un->sun_path, spec + 5);
        *len = sizeof(*un);
        return 0;
    }
    if (!strncmp(spec, "tcp:", 4)) {
        char host[64];
        const char *colon = strrchr(spec + 4, ':');
        if (!colon || (size_t)(colon - spec - 4) >= sizeof(host))
            return -1;
        memcpy(host, spec + 4, (size_t)(colon - spec - 4));
        host[colon - spec - 4] = 0;
        struct sockaddr_in *in = (struct sockaddr_in *)ss;
        in->sin_family = AF_INET;
        in->sin_port = htons((uint16_t)atoi(colon + 1));
        if (inet_pton(AF_INET, host, &in->sin_addr) != 1)
            return -1;
        *len = sizeof(*in);
        return 0;
    }
    return -1;
}

static int listen_on(const char *spec, const char *port_file)
{
    struct sockaddr_storage ss;
    socklen_t len;
    if (parse_addr(spec, &ss, &len)) {
        fprintf(stderr, "mks-tcpproxy: bad address '%s' (unix:PATH or tcp:HOST:PORT)\n", spec);
        return -1;
    }
    if (ss.ss_family == AF_UNIX)
        unlink(((struct sockaddr_un *)&ss)->sun_path);
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (fd < 0 || bind(fd, (struct sockaddr *)&ss, len) < 0 || listen(fd, 128) < 0) {
        fprintf(stderr, "mks-tcpproxy: cannot listen on %s: %s\n", spec, strerror(errno));
        return -1;
    }
    if (port_file && ss.ss_family == AF_INET) {
        struct sockaddr_in got;
        socklen_t gl = sizeof(got);
        getsockname(fd, (struct sockaddr *)&got, &gl);
        FILE *f = fopen(port_file, "w");
        if (f) {
            fprintf(f, "%u\n", ntohs(got.sin_port));
            fclose(f);
        }
    }
    return fd;
}

static void dir_free(struct dir *d)
{
    while (d->head) {
        struct chunk *n = d->head->next;
        free(d->head);
        d->head = n;
    }
    d->tail = NULL;
    d->held = 0;
}

static void conn_close(struct conn *k)
{
    if (k->c >= 0)
        close(k->c);
    if (k->s >= 0)
        close(k->s);
    dir_free(&k->up);
    dir_free(&k->down);
    k->used = false;
}

/* Read what `from` has into d, due after `delay`; false when it closed. */
static bool pull(int from, struct dir *d, uint64_t delay)
{
    while (d->held < MAX_HELD) {
        struct chunk *ch = malloc(sizeof(*ch) + CHUNK);
        if (!ch)
            return true;
        ssize_t n = read(from, ch->data, CHUNK);
        if (n <= 0) {
            free(ch);
            return n < 0 && (errno == EAGAIN || errno == EINTR);
        }
        ch->len = (size_t)n;
        ch->off = 0;
        ch->next = NULL;
        ch->due_ns = now_ns() + delay;
        if (d->tail)
            d->tail->next = ch;
        else
            d->head = ch;
        d->tail = ch;
        d->held += (size_t)n;
    }
    return true;
}

/* Write the chunks of d that are due to `to`; false when it failed. */
static bool push(int to, struct dir *d, uint64_t now)
{
    while (d->head && d->head->due_ns <= now) {
        struct chunk *ch = d->head;
        ssize_t n = write(to, ch->data + ch->off, ch->len - ch->off);
        if (n < 0)
            return errno == EAGAIN || errno == EINTR;
        ch->off += (size_t)n;
        d->held -= (size_t)n;
        if (ch->off < ch->len)
            return true;
        d->head = ch->next;
        if (!d->head)
            d->tail = NULL;
        free(ch);
    }
    return true;
}

static int connect_to(const char *spec)
{
    struct sockaddr_storage ss;
    socklen_t len;
    if (parse_addr(spec, &ss, &len))
        return -1;
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&ss, len) < 0) {
        close(fd);
        return -1;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    int one = 1;
    if (ss.ss_family == AF_INET)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

static void command(char *line)
{
    line[strcspn(line, "\r\n")] = 0;
    if (!strcmp(line, "cut")) {
        cut = true;
    } else if (!strcmp(line, "reset")) {
        refusing = true;
        for (int i = 0; i < MAX_CONNS; i++)
            if (conns[i].used)
                conn_close(&conns[i]);
    } else if (!strcmp(line, "pass")) {
        cut = refusing = false;
    } else if (!strncmp(line, "delay ", 6)) {
        delay_ns = strtoull(line + 6, NULL, 10) * 1000000ull;
    } else {
        fprintf(logf, "unknown command '%s'\n", line);
        fflush(logf);
        return;
    }
    fprintf(logf, "ok %s\n", line);
    fflush(logf);
}

int main(int argc, char **argv)
{
    const char *listen_spec = NULL, *to = NULL, *control = NULL, *port_file = NULL, *log = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--listen"))
            listen_spec = argv[i + 1];
        else if (!strcmp(argv[i], "--to"))
            to = argv[i + 1];
        else if (!strcmp(argv[i], "--control"))
            control = argv[i + 1];
        else if (!strcmp(argv[i], "--port-file"))
            port_file = argv[i + 1];
        else if (!strcmp(argv[i], "--log"))
            log = argv[i + 1];
    }
    if (!listen_spec || !to || !control) {
        fprintf(stderr, "usage: mks-tcpproxy --listen ADDR --to ADDR --control FIFO"
                        " [--port-file F] [--log F]\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    logf = log ? fopen(log, "a") : stderr;
    if (!logf)
        logf = stderr;
    if (mkfifo(control, 0600) < 0 && errno != EEXIST) {
        fprintf(stderr, "mks-tcpproxy: mkfifo %s: %s\n", control, strerror(errno));
        return 1;
    }
    /* read-write, so that a writer closing it is no end of file */
    int ctl = open(control, O_RDWR | O_NONBLOCK | O_CLOEXEC);
    int lfd = listen_on(listen_spec, port_file);
    if (ctl < 0 || lfd < 0)
        return 1;
    char cbuf[512];
    size_t clen = 0;
    for (int i = 0; i < MAX_CONNS; i++)
        conns[i].c = conns[i].s = -1;
    for (;;) {
        struct pollfd pf[2 + 2 * MAX_CONNS];
        int map[2 + 2 * MAX_CONNS];
        int n = 0;
        pf[n++] = (struct pollfd){ctl, POLLIN, 0};
        pf[n++] = (struct pollfd){cut || refusing ? -1 : lfd, POLLIN, 0};
        uint64_t now = now_ns(), next_due = UINT64_MAX;
        for (int i = 0; i < MAX_CONNS; i++) {
            struct conn *k = &conns[i];
            if (!k->used)
                continue;
            short ce = 0, se = 0;
            if (!cut) {
                if (k->up.held < MAX_HELD)
                    ce |= POLLIN;
                if (k->down.held < MAX_HELD)
                    se |= POLLIN;
                if (k->up.head)
                    se |= POLLOUT;
                if (k->down.head) {
                    if (k->down.head->due_ns <= now)
                        ce |= POLLOUT;
                    else if (k->down.head->due_ns < next_due)
                        next_due = k->down.head->due_ns;
                }
            }
            map[n] = i;
            pf[n++] = (struct pollfd){k->c, ce, 0};
            map[n] = i;
            pf[n++] = (struct pollfd){k->s, se, 0};
        }
        int wait = next_due == UINT64_MAX ? 200 : (int)((next_due - now) / 1000000) + 1;
        if (poll(pf, (nfds_t)n, wait) < 0 && errno != EINTR)
            return 1;
        if (pf[0].revents & POLLIN) {
            ssize_t r = read(ctl, cbuf + clen, sizeof(cbuf) - 1 - clen);
            if (r > 0) {
                clen += (size_t)r;
                cbuf[clen] = 0;
                char *nl;
                while ((nl = strchr(cbuf, '\n'))) {
                    *nl = 0;
                    command(cbuf);
                    memmove(cbuf, nl + 1, clen - (size_t)(nl + 1 - cbuf) + 1);
                    clen -= (size_t)(nl + 1 - cbuf);
                }
                if (clen == sizeof(cbuf) - 1)
                    clen = 0;
            }
        }
        if (pf[1].revents & POLLIN) {
            int c = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
            int slot = -1;
            for (int i = 0; i < MAX_CONNS && c >= 0; i++)
                if (!conns[i].used) {
                    slot = i;
                    break;
                }
            int s = slot >= 0 ? connect_to(to) : -1;
            if (s < 0) {
                if (c >= 0)
                    close(c); /* no target (yet): the peer retries */
            } else {
                conns[slot] = (struct conn){.c = c, .s = s, .used = true};
            }
        }
        now = now_ns();
        for (int p = 2; p < n; p += 2) {
            struct conn *k = &conns[map[p]];
            if (!k->used || cut)
                continue;
            bool ok = true;
            if (pf[p].revents & (POLLIN | POLLHUP | POLLERR))
                ok = pull(k->c, &k->up, 0);
            if (ok && pf[p + 1].revents & (POLLIN | POLLHUP | POLLERR))
                ok = pull(k->s, &k->down, delay_ns);
            if (ok)
                ok = push(k->s, &k->up, now) && push(k->c, &k->down, now);
            if (!ok)
                conn_close(k);
        }
    }
}

/*
 * hostile_bench: what one unauthenticated 16 MiB message costs a running
 * mkscope-collector started with --key: the time until its ingest loop
 * answers it (all that time the loop serves nobody else) and the
 * collector's peak RSS, read from /proc.  The message is an epoch summary
 * of empty coverage records (2 bytes each on the wire, ~70 decoded) with a
 * MAC field of the right shape and wrong bytes.  Give it the collector of
 * another build to compare (docs/PERF.md, "wire").
 *
 * usage: hostile_bench COLLECTOR_BIN [MIB] [ROUNDS] [nokey]   (defaults 16, 3)
 * nokey starts the collector without --key: the message is then decoded
 * (under the decoder's allocation budget) and refused as a phantom rank.
 */
#include <errno.h>
#include <fcntl.h>
#include <nanomsg/nn.h>
#include <nanomsg/reqrep.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* VmRSS or VmHWM of pid, in MB; -1 when unreadable. */
static double vm(pid_t pid, const char *what)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    double mb = -1;
    while (f && fgets(line, sizeof(line), f))
        if (!strncmp(line, what, strlen(what)))
            mb = atof(line + strlen(what) + 1) / 1024.0;
    if (f)
        fclose(f);
    return mb;
}

static uint8_t *hostile(size_t len, size_t *len_p)
{
    uint8_t *b = malloc(len + 35);
    size_t at = 0, body;
    b[at++] = 0x08, b[at++] = 0x01, b[at++] = 0x1a, b[at++] = 0x01, b[at++] = 'j', b[at++] = 0x6a;
    body = (len - at - 4) & ~(size_t)1;
    for (int i = 0; i < 4; i++)
        b[at++] = (uint8_t)(((body >> (7 * i)) & 0x7f) | (i < 3 ? 0x80 : 0));
    for (size_t i = 0; i < body / 2; i++)
        b[at++] = 0x72, b[at++] = 0x00;
    memcpy(b + at, "\xa2\x06\x20", 3);
    memset(b + at + 3, 0x42, 32);
    *len_p = at + 35;
    return b;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: hostile_bench COLLECTOR_BIN [MIB] [ROUNDS] [nokey]\n");
        return 2;
    }
    size_t mib = argc > 2 ? (size_t)atoi(argv[2]) : 16;
    int rounds = argc > 3 ? atoi(argv[3]) : 3;
    int nokey = argc > 4 && !strcmp(argv[4], "nokey");
    if (mib < 1 || mib > 16 || rounds < 1 || rounds > 100 || argc > 5 || (argc > 4 && !nokey)) {
        fprintf(stderr, "hostile_bench: MIB 1..16, ROUNDS 1..100, then nothing or nokey\n");
        return 2;
    }
    char dir[] = "/tmp/mks-hostile-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    char key[128], ingest[128], cli[128], survey[128], db[128];
    snprintf(key, sizeof(key), "%s/key", dir);
    snprintf(ingest, sizeof(ingest), "ipc://%s/ingest", dir);
    snprintf(cli, sizeof(cli), "ipc://%s/cli", dir);
    snprintf(survey, sizeof(survey), "ipc://%s/survey", dir);
    snprintf(db, sizeof(db), "%s/store.db", dir);
    int fd = open(key, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || write(fd, "0123456789abcdef0123456789abcdef", 32) != 32)
        return 1;
    close(fd);
    pid_t pid = fork();
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 2);
        execl(argv[1], argv[1], "--ingest", ingest, "--cli", cli, "--survey", survey, "--metrics",
              "off", "--ucx-port", "off", "--db", db, nokey ? (char *)NULL : "--key", key,
              (char *)NULL);
        _exit(127);
    }
    int s = nn_socket(AF_SP, NN_REQ);
    int to = 60000, big = -1;
    nn_setsockopt(s, NN_SOL_SOCKET, NN_RCVTIMEO, &to, sizeof(to));
    nn_setsockopt(s, NN_SOL_SOCKET, NN_RCVMAXSIZE, &big, sizeof(big));
    nn_connect(s, ingest);
    usleep(500000);
    double rss0 = vm(pid, "VmRSS:");
    size_t len;
    uint8_t *msg = hostile((mib << 20) - 64 - 35, &len);
    printf("collector %s, %s; message of %zu bytes, %zu empty coverage records\n", argv[1],
           nokey ? "no key" : "--key", len, (len - 45) / 2);
    printf("RSS before: %.1f MB\n", rss0);
    int rc = 0;
    for (int r = 0; r < rounds; r++) {
        double t = now_s();
        if (nn_send(s, msg, len, 0) != (int)len) {
            fprintf(stderr, "hostile_bench: send: %s\n", nn_strerror(nn_errno()));
            rc = 1;
            break;
        }
        void *rep = NULL;
        int n = nn_recv(s, &rep, NN_MSG, 0);
        t = now_s() - t;
        if (n < 0) {
            fprintf(stderr, "hostile_bench: no answer: %s\n", nn_strerror(nn_errno()));
            rc = 1;
            break;
        }
        nn_freemsg(rep);
        printf("round %d: answered in %.1f ms, RSS %.1f MB, peak RSS %.1f MB\n", r + 1, t * 1e3,
               vm(pid, "VmRSS:"), vm(pid, "VmHWM:"));
    }
    free(msg);
    nn_close(s);
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    char cmd[160];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        rc = 1;
    return rc;
}

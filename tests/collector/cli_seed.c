/*
 * cli_seed INGEST_URL: stores a small known job in a running collector for
 * the CLI's RUN/EXPECT tests: job "seed", two ranks with classes gemm and
 * attn, ten epochs each (gemm 4 tasks, attn 2 per epoch, full coverage), a
 * heartbeat listing program "count", and one escalation's raw events on
 * rank 1 (escalation 5: a gemm task and a wait on rank 0's release).
 */
#include <nanomsg/nn.h>
#include <nanomsg/reqrep.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_agent.h"

/* Called as check(send(..., &rep), &rep, ...): the reply is read after the
 * send returned. */
static int check(int rc, mks_envelope **reply_p, const char *what)
{
    mks_envelope *reply = *reply_p;
    *reply_p = NULL;
    if (rc || !reply) {
        fprintf(stderr, "cli_seed: %s: no reply (%d)\n", what, rc);
        return 1;
    }
    mks_wire_free(reply);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: cli_seed INGEST_URL\n");
        return 2;
    }
    int s = nn_socket(AF_SP, NN_REQ);
    int to = 5000;
    nn_setsockopt(s, NN_SOL_SOCKET, NN_RCVTIMEO, &to, sizeof(to));
    if (s < 0 || nn_connect(s, argv[1]) < 0) {
        fprintf(stderr, "cli_seed: cannot connect to %s\n", argv[1]);
        return 1;
    }
    static const char *const names[] = {"gemm", "attn"};
    mks_envelope *rep = NULL;
    int bad = 0;
    static struct fa_summary sum;
    for (uint32_t r = 0; r < 2; r++) {
        bad |= check(fa_send_register(s, "seed", r, 2, 1, names, 2, &rep), &rep, "register");
        for (uint64_t q = 1; q <= 10; q++) {
            memset(&sum, 0, sizeof(sum));
            sum.epoch = q;
            sum.n_ts = 2;
            sum.ts[0] =
                (struct fa_taskstat){.cls = 0, .step = (uint32_t)q, .count = 4, .sum_run = 4000};
            sum.ts[0].run_b[11] = 4;
            sum.ts[1] =
                (struct fa_taskstat){.cls = 1, .step = (uint32_t)q, .count = 2, .sum_run = 2000};
            sum.ts[1].run_b[11] = 2;
            sum.cov_eligible = sum.cov_ran = 6;
            bad |= check(fa_send_summary(s, "seed", r, 1, q, &sum, &rep), &rep, "summary");
        }
        bad |= check(fa_send_heartbeat(s, "seed", r, 1, 10, &rep), &rep, "heartbeat");
    }
    Mkscope__V1__RawEvent e[3], *pe[3];
    for (int i = 0; i < 3; i++) {
        mkscope__v1__raw_event__init(&e[i]);
        pe[i] = &e[i];
    }
    e[0].event = 4, e[0].worker = 1, e[0].comm_gen = 77, e[0].t_now = 1000;  /* wait begin */
    e[1].event = 5, e[1].worker = 1, e[1].comm_gen = 77, e[1].t_now = 3000;  /* wait end */
    e[2].event = 3, e[2].worker = 1, e[2].t_start = 3100, e[2].t_now = 5000; /* gemm end */
    Mkscope__V1__RawEventBatch b;
    mks_envelope env;
    fa_raw_batch(&env, &b, "seed", 1, 1, 5, pe, 3, 1);
    bad |= check(fa_send_envelope(s, &env, &rep), &rep, "raw batch");
    nn_close(s);
    return bad;
}

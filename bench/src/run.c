/*
 * Launching ranks on the CPU backend: `mks_bench_run` forks one process per
 * rank around a shared segment it creates; `mks_bench_run_rank` is one rank
 * of a job started elsewhere, meeting the others in the segment rank 0
 * creates.  Rank 0 (or the parent) collects the results and checks that all
 * ranks sampled the same tokens.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_int.h"
#include "runtime/shm.h"
#include "workload.h"

#define COLLECT_NS (120ull * 1000000000ull)

/* SIGTERM, SIGINT, SIGHUP: every rank stops at its next wait, as when a
 * rank fails, so that each one removes its control block and rank 0 (or the
 * parent) the shared segment: a job stopped from outside leaves nothing in
 * /dev/shm.  The handler only stores to the segment's abort word. */
static _Atomic uint32_t *stop_word;
static volatile sig_atomic_t stop_sig;

static void on_stop(int sig)
{
    stop_sig = sig;
    if (stop_word)
        atomic_store(stop_word, 1);
}

static void catch_stop(struct bs_shm *shm)
{
    stop_word = bs_abort(shm);
    struct sigaction sa = {.sa_handler = on_stop};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

static void layout_of(const struct mks_bench_config *cfg, struct bs_layout *lay)
{
    memset(lay, 0, sizeof(*lay));
    lay->ranks = cfg->ranks;
    lay->slot_floats = cfg->batch * cfg->hidden;
    lay->steps = cfg->steps;
    lay->batch = cfg->batch;
    lay->n_classes = mks_bench_class_count(cfg);
}

static int collect(struct bs_shm *shm, const struct mks_bench_config *cfg, uint64_t t0,
                   struct mks_bench_result **res_p, char *err, size_t err_len)
{
    const uint32_t R = cfg->ranks, S = cfg->steps, B = cfg->batch;
    const uint32_t C = mks_bench_class_count(cfg);
    struct mks_bench_result *res = bb_result_alloc(R, S, B, C, 1);
    if (!res)
        return bb_err(err, err_len, -ENOMEM, "out of memory for results");
    struct bs_result r0;
    bs_result(shm, 0, &r0);
    for (uint32_t r = 0; r < R; r++) {
        struct bs_result rr;
        bs_result(shm, r, &rr);
        memcpy(res->step_ns + (size_t)r * S, rr.step_ns, sizeof(uint64_t) * S);
        memcpy(res->class_counts + (size_t)r * C, rr.class_counts, sizeof(uint64_t) * C);
        res->prof_dropped += *rr.prof_dropped;
        res->faulted[r] = *rr.faulted;
        if (memcmp(rr.tokens, r0.tokens, sizeof(int32_t) * S * B)) {
            mks_bench_result_free(res);
            return bb_err(err, err_len, -EPROTO, "rank %u sampled other tokens than rank 0", r);
        }
    }
    memcpy(res->tokens, r0.tokens, sizeof(int32_t) * S * B);
    memcpy(res->req_gen, r0.req_gen, sizeof(uint64_t) * S * B);
    memcpy(res->logit_sum, r0.logit_sum, sizeof(double) * S);
    res->wall_ns = bb_now_ns() - t0;
    *res_p = res;
    return 0;
}

int bb_launch(const struct mks_bench_config *cfg, const struct mks_fault *faults, uint32_t n_faults,
              bb_rank_fn rank_main, struct mks_bench_result **res_p, char *err, size_t err_len)
{
    int rc = mks_bench_config_check(cfg, err, err_len);
    if (rc)
        return rc;
    struct bs_layout lay;
    layout_of(cfg, &lay);
    struct bs_shm *shm;
    rc = bs_create(cfg->job, &lay, &shm);
    if (rc)
        return bb_err(err, err_len, rc, "shared memory /mksbench.%s: %s", cfg->job, strerror(-rc));
    catch_stop(shm);
    uint64_t t0 = bb_now_ns();
    pid_t pids[MKS_BENCH_MAX_RANKS];
    uint32_t started = 0;
    fflush(NULL);
    for (uint32_t r = 0; r < cfg->ranks; r++) {
        pid_t p = fork();
        if (p < 0) {
            rc = bb_err(err, err_len, -errno, "fork rank %u: %s", r, strerror(errno));
            atomic_store(bs_abort(shm), 1);
            break;
        }
        if (p == 0) {
            char e[256] = "";
            int crc = rank_main(shm, cfg, faults, n_faults, r, e, sizeof(e));
            if (crc && e[0] && crc != -ECANCELED)
                fprintf(stderr, "mkscope-bench: %s\n", e);
            bs_result_set_done(shm, r, crc ? 2 : 1);
            fflush(NULL);
            /* 3: stopped because another rank failed, not a cause */
            _exit(crc == -ECANCELED ? 3 : crc ? 1 : 0);
        }
        pids[started++] = p;
    }
    int cause_rank = -1, cause_sig = 0, any_bad = 0;
    /* reap in the order ranks end, so the first to die stops the others at
     * once instead of at their remote-wait timeout */
    for (uint32_t left = started; left > 0;) {
        int st;
        pid_t p = waitpid(-1, &st, 0);
        if (p < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        uint32_t i = 0;
        while (i < started && pids[i] != p)
            i++;
        if (i == started)
            continue; /* not a rank of ours */
        left--;
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
            continue;
        /* a rank that failed or died: the others stop at their next wait */
        atomic_store(bs_abort(shm), 1);
        any_bad = 1;
        if (cause_rank < 0 && !(WIFEXITED(st) && WEXITSTATUS(st) == 3)) {
            cause_rank = (int)i;
            cause_sig = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
        }
    }
    if (!rc && stop_sig)
        rc = bb_err(err, err_len, -EINTR, "stopped by signal %d", (int)stop_sig);
    if (!rc && any_bad) {
        if (cause_sig)
            rc = bb_err(err, err_len, -ECHILD, "rank %d died of signal %d", cause_rank, cause_sig);
        else
            rc =
                bb_err(err, err_len, -ECHILD, "rank %d failed (see its message above)", cause_rank);
    }
    if (!rc)
        rc = collect(shm, cfg, t0, res_p, err, err_len);
    bs_close(shm, 1);
    return rc;
}

int bb_launch_rank(const struct mks_bench_config *cfg, const struct mks_fault *faults,
                   uint32_t n_faults, uint32_t rank, bb_rank_fn rank_main,
                   struct mks_bench_result **res_p, char *err, size_t err_len)
{
    *res_p = NULL;
    int rc = mks_bench_config_check(cfg, err, err_len);
    if (rc)
        return rc;
    if (rank >= cfg->ranks)
        return bb_err(err, err_len, -EINVAL, "rank %u not in 0..%u", rank, cfg->ranks - 1);
    struct bs_layout lay;
    layout_of(cfg, &lay);
    struct bs_shm *shm;
    if (rank == 0) {
        rc = bs_create(cfg->job, &lay, &shm);
        if (rc)
            return bb_err(err, err_len, rc, "shared memory /mksbench.%s: %s", cfg->job,
                          strerror(-rc));
    } else {
        rc = bs_open(cfg->job, &lay, 60ull * 1000000000ull, &shm, err, err_len);
        if (rc)
            return rc;
    }
    catch_stop(shm);
    uint64_t t0 = bb_now_ns();
    rc = rank_main(shm, cfg, faults, n_faults, rank, err, err_len);
    if (stop_sig)
        rc = bb_err(err, err_len, -EINTR, "stopped by signal %d", (int)stop_sig);
    bs_result_set_done(shm, rank, rc ? 2 : 1);
    if (rc) {
        atomic_store(bs_abort(shm), 1);
        bs_close(shm, rank == 0);
        return rc;
    }
    if (rank != 0) {
        bs_close(shm, 0);
        return 0;
    }
    /* rank 0 waits for the others' results */
    for (uint32_t r = 1; r < cfg->ranks; r++) {
        uint32_t d;
        while (!(d = bs_result_done(shm, r))) {
            if (bb_now_ns() - t0 > COLLECT_NS || atomic_load(bs_abort(shm))) {
                bs_close(shm, 1);
                return bb_err(err, err_len, -ETIMEDOUT, "rank %u did not report its results", r);
            }
            bb_sleep_ns(1000 * 1000);
        }
        if (d != 1) {
            bs_close(shm, 1);
            return bb_err(err, err_len, -ECHILD, "rank %u failed", r);
        }
    }
    rc = collect(shm, cfg, t0, res_p, err, err_len);
    bs_close(shm, 1);
    return rc;
}

int mks_bench_run(const struct mks_bench_config *cfg, const struct mks_fault *faults,
                  uint32_t n_faults, struct mks_bench_result **res_p, char *err, size_t err_len)
{
    return bb_launch(cfg, faults, n_faults, bw_rank_main, res_p, err, err_len);
}

int mks_bench_run_rank(const struct mks_bench_config *cfg, const struct mks_fault *faults,
                       uint32_t n_faults, uint32_t rank, struct mks_bench_result **res_p, char *err,
                       size_t err_len)
{
    return bb_launch_rank(cfg, faults, n_faults, rank, bw_rank_main, res_p, err, err_len);
}

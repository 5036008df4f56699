/*
 * mkscope-nccl-dump: print the records of one process's NCCL record ring, one
 * line each, and optionally remove the ring.  For checking a run without an
 * agent (bench/gpu/nccl_ids.sh) and for debugging the plugin.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mkscope/commid.h"
#include "mkscope/nccl_ring.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: mkscope-nccl-dump [--unlink] (--ring NAME | --job JOB --rank N)\n"
               "\n"
               "Drains the NCCL record ring written by libmkscope-nccl-profiler.so and\n"
               "prints one line per collective:\n"
               "  comm_gen rank nranks func seq bytes t_start t_stop  # decoded id\n"
               "\n"
               "OPTIONS\n"
               "  --ring NAME   shared-memory name (/mkscope.JOB.nccl.RANK)\n"
               "  --job JOB     MKSCOPE_JOB of the run\n"
               "  --rank N      MKSCOPE_RANK of the process\n"
               "  --unlink      remove the ring afterwards\n"
               "\n"
               "EXAMPLES\n"
               "  mkscope-nccl-dump --job demo --rank 1 --unlink\n");
}

int main(int argc, char **argv)
{
    const char *job = NULL, *ring_arg = NULL;
    char name[MKS_NCCL_RING_NAME_MAX], text[MKS_COMMID_TEXT_MAX];
    long rank = -1;
    int do_unlink = 0, n, err;
    struct mks_nccl_ring *ring;
    struct mks_nccl_record recs[256];

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--unlink") == 0) {
            do_unlink = 1;
        } else if (strcmp(argv[i], "--ring") == 0 && i + 1 < argc) {
            ring_arg = argv[++i];
        } else if (strcmp(argv[i], "--job") == 0 && i + 1 < argc) {
            job = argv[++i];
        } else if (strcmp(argv[i], "--rank") == 0 && i + 1 < argc) {
            char *end;
            errno = 0;
            rank = strtol(argv[++i], &end, 10);
            if (errno || *end || rank < 0 || rank > (long)UINT32_MAX) {
                fprintf(stderr, "mkscope-nccl-dump: --rank needs a non-negative integer\n");
                return 2;
            }
        } else if (strcmp(argv[i], "--version") == 0) {
            printf("mkscope-nccl-dump %s\n", MKS_VERSION);
            return 0;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "mkscope-nccl-dump: unknown argument '%s'; see --help\n", argv[i]);
            return 2;
        }
    }
    if (ring_arg) {
        if (strlen(ring_arg) >= sizeof(name)) {
            fprintf(stderr, "mkscope-nccl-dump: ring name too long\n");
            return 2;
        }
        strcpy(name, ring_arg);
    } else if (!job || rank < 0 || mks_nccl_ring_name(job, (uint32_t)rank, name, sizeof(name)) != 0) {
        fprintf(stderr, "mkscope-nccl-dump: give --ring NAME, or --job JOB ([A-Za-z0-9._-]) and --rank N\n");
        return 2;
    }
    err = mks_nccl_ring_open(name, &ring);
    if (err) {
        fprintf(stderr, "mkscope-nccl-dump: cannot open ring %s: %s\n", name,
                err == -EBADMSG ? "not an mkscope NCCL ring" : strerror(-err));
        return 1;
    }
    while ((n = mks_nccl_ring_drain(ring, recs, sizeof(recs) / sizeof(recs[0]))) > 0) {
        for (int i = 0; i < n; i++) {
            const struct mks_nccl_record *r = &recs[i];
            mks_commid_format(r->comm_gen, text, sizeof(text));
            const char *fn = mks_commid_nccl_func_name(r->func);
            printf("0x%016" PRIx64 " %" PRIu32 " %" PRIu32 " %s %" PRIu64 " %" PRIu64 " %" PRIu64
                   " %" PRIu64 "  # %s\n",
                   r->comm_gen, r->rank, r->nranks, fn ? fn : "?", r->seq, r->bytes, r->t_start,
                   r->t_stop, text);
        }
    }
    if (mks_nccl_ring_dropped(ring))
        fprintf(stderr, "mkscope-nccl-dump: %" PRIu64 " records were dropped (ring full)\n",
                mks_nccl_ring_dropped(ring));
    mks_nccl_ring_close(ring);
    if (n < 0) {
        fprintf(stderr, "mkscope-nccl-dump: ring %s is corrupted (counters out of range)\n", name);
        return 1;
    }
    if (do_unlink && mks_nccl_ring_unlink(name) != 0) {
        fprintf(stderr, "mkscope-nccl-dump: cannot unlink %s\n", name);
        return 1;
    }
    return 0;
}

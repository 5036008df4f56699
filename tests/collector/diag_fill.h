/*
 * The diagnosis tests' way into a store: a fake agent's registration and
 * summaries ingested as the collector ingests them, no socket between.
 */
#ifndef MKS_TEST_DIAG_FILL_H
#define MKS_TEST_DIAG_FILL_H

#include <stddef.h>
#include <stdint.h>

#include "fake_agent.h"
#include "mkscope/store.h"

/* Register `rank` of `job` with n task classes names[i] (comm[i]: a
 * communication class; comm may be NULL).  0, or -1 with one line in err. */
int df_register(struct mks_store *st, const char *job, uint32_t rank, uint32_t n_ranks,
                uint32_t n_workers, const char *const *names, const int *comm, int n, char *err,
                size_t errlen);
/* Ingest one summary of `rank` (incarnation 1, sequence seq).  0, or -1. */
int df_summary(struct mks_store *st, const char *job, uint32_t rank, uint64_t seq,
               const struct fa_summary *sum, char *err, size_t errlen);
/* The same with the sender's incarnation and the collector's time `now`. */
int df_summary_at(struct mks_store *st, const char *job, uint32_t rank, uint64_t incarnation,
                  uint64_t seq, const struct fa_summary *sum, int64_t now, char *err,
                  size_t errlen);
/* The first column of the first row of `sql` on the store's database; a
 * statement that fails or returns no row ends the test (abort). */
int64_t df_one(struct mks_store *st, const char *sql);

#endif

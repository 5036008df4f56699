/*
 * See diag_fill.h.
 */
#include "diag_fill.h"

#include <stdio.h>
#include <stdlib.h>

#include <sqlite3.h>

#define DF_MAX_CLASSES 64

int df_register(struct mks_store *st, const char *job, uint32_t rank, uint32_t n_ranks,
                uint32_t n_workers, const char *const *names, const int *comm, int n, char *err,
                size_t errlen)
{
    if (n < 0 || n > DF_MAX_CLASSES) {
        snprintf(err, errlen, "df_register: %d classes (at most %d)", n, DF_MAX_CLASSES);
        return -1;
    }
    mks_envelope env;
    Mkscope__V1__Register reg = MKSCOPE__V1__REGISTER__INIT;
    Mkscope__V1__TaskSchema sch = MKSCOPE__V1__TASK_SCHEMA__INIT;
    Mkscope__V1__TaskClass cls[DF_MAX_CLASSES], *cp[DF_MAX_CLASSES];
    for (int i = 0; i < n; i++) {
        mkscope__v1__task_class__init(&cls[i]);
        cls[i].id = (uint32_t)i;
        cls[i].name = (char *)names[i];
        cls[i].comm = comm && comm[i];
        cp[i] = &cls[i];
    }
    sch.classes = cp, sch.n_classes = (size_t)n;
    reg.n_ranks = n_ranks, reg.hook_abi_version = 1, reg.n_workers = n_workers;
    reg.schema = &sch;
    mks_wire_init(&env, job, rank, 0);
    env.incarnation = 1; /* the summaries' (df_summary) */
    env.body_case = MKSCOPE__V1__ENVELOPE__BODY_REGISTER;
    env.register_ = &reg;
    uint64_t seq;
    return mks_store_ingest(st, &env, 1, &seq, err, errlen) ? -1 : 0;
}

int df_summary(struct mks_store *st, const char *job, uint32_t rank, uint64_t seq,
               const struct fa_summary *sum, char *err, size_t errlen)
{
    return df_summary_at(st, job, rank, 1, seq, sum, 2, err, errlen);
}

int df_summary_at(struct mks_store *st, const char *job, uint32_t rank, uint64_t incarnation,
                  uint64_t seq, const struct fa_summary *sum, int64_t now, char *err,
                  size_t errlen)
{
    uint8_t *buf;
    size_t len;
    if (fa_encode_summary(job, rank, incarnation, seq, sum, &buf, &len)) {
        snprintf(err, errlen, "df_summary: cannot encode");
        return -1;
    }
    mks_envelope *e = NULL;
    int rc = mks_wire_decode(buf, len, NULL, &e, err, errlen);
    free(buf);
    if (rc)
        return -1;
    uint64_t stored;
    rc = mks_store_ingest(st, e, now, &stored, err, errlen);
    mks_wire_free(e);
    return rc ? -1 : 0;
}

int64_t df_one(struct mks_store *st, const char *sql)
{
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(mks_store_db(st), sql, -1, &s, NULL) != SQLITE_OK ||
        sqlite3_step(s) != SQLITE_ROW) {
        fprintf(stderr, "df_one: %s: %s\n", sql, sqlite3_errmsg(mks_store_db(st)));
        abort();
    }
    int64_t v = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    return v;
}

/*
 * Fuzz target: what the collector does with an agent's message once it has
 * decoded it.  The input is an envelope; decoded for the ingest socket
 * (without a key: the store must hold against anything a peer may send
 * then), it goes through the replay cache and into a store where a few
 * ranks have registered.
 * Invariants: no crash, no SQLite misuse, an error is one line, and the
 * store never holds a rank that did not register.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "mkscope/fresh.h"
#include "mkscope/store.h"
#include "mkscope/wire.h"

static struct mks_store *st;
static struct mks_fresh *fresh;
static unsigned runs;

static void open_store(void)
{
    mks_store_close(st);
    struct mks_store_opts o = {.sz = sizeof(o), .path = ":memory:", .max_epochs = 64};
    char err[256];
    if (mks_store_open(&o, &st, err, sizeof(err)))
        abort();
    /* ranks 0, 1 of "j", and rank 2 of "job-1" as the seeds (test_wire's
     * messages) name it */
    for (uint32_t r = 0; r < 3; r++) {
        mks_envelope env;
        Mkscope__V1__Register reg = MKSCOPE__V1__REGISTER__INIT;
        reg.n_ranks = 4, reg.hook_abi_version = 1, reg.n_workers = 2;
        mks_wire_init(&env, r < 2 ? "j" : "job-1", r, 0);
        env.incarnation = r < 2 ? 5 : 0x1234567890ull;
        env.body_case = MKSCOPE__V1__ENVELOPE__BODY_REGISTER;
        env.register_ = &reg;
        if (mks_store_ingest(st, &env, 1, NULL, err, sizeof(err)))
            abort();
    }
    if (!fresh) {
        struct mks_fresh_opts fo = {.sz = sizeof(fo), .capacity = 4096};
        if (mks_fresh_create(&fo, &fresh))
            abort();
    }
}

static int64_t count(const char *sql)
{
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(mks_store_db(st), sql, -1, &s, NULL) != SQLITE_OK)
        abort();
    int64_t v = sqlite3_step(s) == SQLITE_ROW ? sqlite3_column_int64(s, 0) : -1;
    sqlite3_finalize(s);
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!st || ++runs % 5000 == 0)
        open_store();
    char err[512];
    mks_envelope *env = NULL;
    if (mks_wire_decode_for(data, size, MKS_WIRE_ACCEPT_INGEST, NULL, &env, err, sizeof(err)))
        return 0;
    if (mks_fresh_check_env(fresh, env, env->sent_ns, err, sizeof(err)) == 0) {
        uint64_t seq = 0;
        int rc = mks_store_ingest(st, env, 1000000000ull, &seq, err, sizeof(err));
        if (rc && (rc > 0 || !err[0] || strchr(err, '\n')))
            abort(); /* an error says why, in one line */
        if (rc == -EIO)
            abort(); /* the store failed on a valid message */
    }
    /* Only registered ranks exist: nothing but a Register makes one. */
    if (count("SELECT COUNT(*) FROM ranks WHERE registered_ns IS NULL") != 0)
        abort();
    mks_wire_free(env);
    return 0;
}

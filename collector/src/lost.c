/*
 * Lost ranks and the peers they stall (see lost.h).
 *
 * Per running rank, from its own epochs (the epochs_rank index, newest
 * first): the last epoch whose summary has a task that ended (its progress)
 * and the last epoch at all.  A rank whose agent went on reporting for a
 * stall window after its progress stopped, in the middle of a step, is
 * stalled; the peers it waited on in its last epochs with progress are its
 * wait edges.  A breadth-first walk over the edges from each stalled rank
 * finds the nearest lost rank, and the path is the chain.
 */
#include "lost.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Epochs of a rank looked at before its progress stopped (SQL text). */
#define RECENT_EPOCHS "8"

uint64_t mks_rank_silent_after(uint64_t heartbeat_ns, uint64_t epoch_ns)
{
    if (heartbeat_ns)
        return 2 * heartbeat_ns;
    uint64_t w = 3 * epoch_ns;
    return w < 2000000000ull ? 2000000000ull : w;
}

const char *mks_rank_state(int app_alive, uint64_t last_seen_ns, uint64_t heartbeat_ns,
                           uint64_t epoch_ns, uint64_t now_ns)
{
    if (!app_alive)
        return "exited";
    if (!last_seen_ns || (now_ns > last_seen_ns &&
                          now_ns - last_seen_ns > mks_rank_silent_after(heartbeat_ns, epoch_ns)))
        return "silent";
    return "running";
}

struct rk {
    int64_t rank;
    const char *state;
    uint64_t last_seen, epoch_ns, registered;
    int64_t last_eid, prog_eid;
    uint64_t last_rx, prog_rx;
    int64_t step;       /* highest step seen before progress stopped; -1 unknown */
    bool step_complete, stalled, lost;
    int64_t *peers;     /* ranks waited on in the last epochs with progress */
    size_t n_peers;
    int from;           /* BFS: previous rank on the path, -1 none */
};

static int64_t one_i64(sqlite3 *db, const char *sql, const char *job, int64_t rank, int64_t a,
                       int64_t *b)
{
    sqlite3_stmt *s;
    int64_t v = -1;
    if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_text(s, 1, job, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, rank);
    sqlite3_bind_int64(s, 3, a);
    if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_type(s, 0) != SQLITE_NULL) {
        v = sqlite3_column_int64(s, 0);
        if (b)
            *b = sqlite3_column_int64(s, 1);
    }
    sqlite3_finalize(s);
    return v;
}

static int load_rank(sqlite3 *db, const char *job, struct rk *r)
{
    int64_t t = 0;
    r->step = -1;
    r->last_eid = one_i64(db, "SELECT MAX(id), MAX(received_ns) FROM epochs WHERE job=?1 AND"
                              " rank=?2",
                          job, r->rank, 0, &t);
    r->last_rx = (uint64_t)t;
    t = 0;
    r->prog_eid = one_i64(db,
                          "SELECT e.id, e.received_ns FROM epochs e WHERE e.job=?1 AND e.rank=?2"
                          " AND EXISTS (SELECT 1 FROM task_stats t WHERE"
                          " t.epoch_id = e.id AND t.count > 0) ORDER BY e.id DESC LIMIT 1",
                          job, r->rank, 0, &t);
    r->prog_rx = r->prog_eid >= 0 ? (uint64_t)t : r->registered;
    int64_t upto = r->prog_eid >= 0 ? r->prog_eid : r->last_eid;
    if (upto < 0)
        return 0;
    int64_t done = 0;
    r->step = one_i64(db,
                      "SELECT s.step, MAX(s.complete) FROM steps s WHERE s.epoch_id IN (SELECT id"
                      " FROM epochs WHERE job=?1 AND rank=?2 AND id <= ?3 ORDER BY id DESC"
                      " LIMIT " RECENT_EPOCHS ") GROUP BY s.step ORDER BY s.step DESC LIMIT 1",
                      job, r->rank, upto, &done);
    r->step_complete = done != 0;
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(db,
                           "SELECT DISTINCT w.peer_rank FROM waits w WHERE w.epoch_id IN (SELECT"
                           " id FROM epochs WHERE job=?1 AND rank=?2 AND id <= ?3 ORDER BY id"
                           " DESC LIMIT " RECENT_EPOCHS ") ORDER BY 1",
                           -1, &s, NULL) != SQLITE_OK)
        return -EIO;
    sqlite3_bind_text(s, 1, job, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, r->rank);
    sqlite3_bind_int64(s, 3, upto);
    size_t cap = 0;
    while (sqlite3_step(s) == SQLITE_ROW) {
        if (r->n_peers == cap) {
            cap = cap ? 2 * cap : 8;
            int64_t *p = realloc(r->peers, cap * sizeof(*p));
            if (!p) {
                sqlite3_finalize(s);
                return -ENOMEM;
            }
            r->peers = p;
        }
        r->peers[r->n_peers++] = sqlite3_column_int64(s, 0);
    }
    sqlite3_finalize(s);
    return 0;
}

static int find(const struct rk *rs, size_t n, int64_t rank)
{
    size_t lo = 0, hi = n; /* rs sorted by rank */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (rs[mid].rank < rank)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && rs[lo].rank == rank ? (int)lo : -1;
}

/* The nearest lost rank from stalled rank `start` over wait edges through
 * stalled ranks; -1 when none.  rs[].from holds the path. */
static int walk(struct rk *rs, size_t n, int start, int *queue)
{
    for (size_t i = 0; i < n; i++)
        rs[i].from = -2;
    int head = 0, tail = 0;
    queue[tail++] = start;
    rs[start].from = -1;
    while (head < tail) {
        int cur = queue[head++];
        for (size_t k = 0; k < rs[cur].n_peers; k++) {
            int nx = find(rs, n, rs[cur].peers[k]);
            if (nx < 0 || rs[nx].from != -2)
                continue;
            rs[nx].from = cur;
            if (rs[nx].lost)
                return nx;
            if (rs[nx].stalled)
                queue[tail++] = nx;
        }
    }
    return -1;
}

static json_t *lost_group(const struct rk *r, uint64_t now)
{
    json_t *g = json_object();
    char root[32];
    snprintf(root, sizeof(root), "%" PRId64, r->rank);
    json_object_set_new(g, "cause", json_string("rank_lost"));
    json_object_set_new(g, "root", json_string(root));
    json_object_set_new(g, "rank", json_integer(r->rank));
    json_object_set_new(g, "state", json_string(r->state));
    json_object_set_new(g, "last_heard_s",
                        json_real(now > r->last_seen ? (double)(now - r->last_seen) / 1e9 : 0));
    json_object_set_new(g, "last_progress_s",
                        r->prog_eid >= 0 && now > r->prog_rx
                            ? json_real((double)(now - r->prog_rx) / 1e9)
                            : json_null());
    json_object_set_new(g, "steps", json_array());
    json_object_set_new(g, "stalled", json_array());
    json_object_set_new(g, "chains", json_array());
    json_object_set_new(g, "chain", json_array());
    json_object_set_new(g, "evidence", json_null());
    json_object_set_new(g, "reason", json_null());
    return g;
}

static void add_step(json_t *steps, int64_t step)
{
    size_t i;
    json_t *v;
    json_array_foreach(steps, i, v)
    {
        if (json_integer_value(v) == step)
            return;
    }
    json_array_append_new(steps, json_integer(step));
}

int mks_lost_ranks(struct mks_store *st, const char *job, uint64_t now_ns, json_t **out,
                   char *err, size_t errlen)
{
    sqlite3 *db = mks_store_db(st);
    sqlite3_stmt *s;
    *out = NULL;
    if (sqlite3_prepare_v2(db,
                           "SELECT rank, app_alive, last_seen_ns, heartbeat_ns, epoch_ns,"
                           " registered_ns FROM ranks WHERE job=? ORDER BY rank",
                           -1, &s, NULL) != SQLITE_OK) {
        snprintf(err, errlen, "lost ranks: %s", sqlite3_errmsg(db));
        return -EIO;
    }
    sqlite3_bind_text(s, 1, job, -1, SQLITE_STATIC);
    struct rk *rs = NULL;
    size_t n = 0, cap = 0, n_lost = 0;
    int rc = 0;
    while (sqlite3_step(s) == SQLITE_ROW) {
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            struct rk *p = realloc(rs, cap * sizeof(*p));
            if (!p) {
                rc = -ENOMEM;
                break;
            }
            rs = p;
        }
        struct rk *r = &rs[n++];
        *r = (struct rk){.rank = sqlite3_column_int64(s, 0),
                         .last_seen = (uint64_t)sqlite3_column_int64(s, 2),
                         .epoch_ns = (uint64_t)sqlite3_column_int64(s, 4),
                         .registered = (uint64_t)sqlite3_column_int64(s, 5)};
        int alive = sqlite3_column_type(s, 1) == SQLITE_NULL || sqlite3_column_int(s, 1);
        r->state = mks_rank_state(alive, r->last_seen, (uint64_t)sqlite3_column_int64(s, 3),
                                  r->epoch_ns, now_ns);
        r->lost = strcmp(r->state, "running") != 0;
        n_lost += r->lost;
    }
    sqlite3_finalize(s);
    /* A job none of whose ranks runs any more has ended: its ranks exited
     * (or went silent) with it, none of them is lost to the others. */
    bool any_running = false;
    for (size_t i = 0; i < n; i++)
        any_running |= !rs[i].lost;
    if (!any_running) {
        for (size_t i = 0; i < n; i++)
            rs[i].lost = false;
        n_lost = 0;
    }
    json_t *groups = json_array();
    int *queue = rc ? NULL : calloc(n ? n : 1, sizeof(*queue));
    if (!rc && !queue)
        rc = -ENOMEM;
    /* Running ranks: stalled? and whom did they wait on. */
    for (size_t i = 0; !rc && n_lost && i < n; i++) {
        struct rk *r = &rs[i];
        if ((rc = load_rank(db, job, r)))
            break;
        if (r->lost || r->last_eid < 0)
            continue;
        uint64_t window = 3 * r->epoch_ns > 500000000ull ? 3 * r->epoch_ns : 500000000ull;
        r->stalled = r->last_rx >= r->prog_rx + window && (r->step < 0 || !r->step_complete);
    }
    /* One group per lost rank; each stalled rank joins the group of the
     * lost rank its waits lead to. */
    json_t **by = rc ? NULL : calloc(n ? n : 1, sizeof(*by));
    if (!rc && !by)
        rc = -ENOMEM;
    for (size_t i = 0; !rc && i < n; i++)
        if (rs[i].lost) {
            by[i] = lost_group(&rs[i], now_ns);
            json_array_append_new(groups, by[i]);
        }
    json_t *unexplained = json_array();
    for (size_t i = 0; !rc && i < n; i++) {
        if (!rs[i].stalled)
            continue;
        int root = walk(rs, n, (int)i, queue);
        bool by_waits = root >= 0;
        if (root < 0 && n_lost == 1 && rs[i].n_peers == 0) {
            /* summaries without wait records (a coarse tier): the one
             * lost rank, said as such */
            for (size_t k = 0; k < n; k++)
                if (rs[k].lost)
                    root = (int)k;
            rs[root].from = (int)i;
            rs[i].from = -1;
        }
        if (root < 0) {
            json_array_append_new(unexplained, json_integer(rs[i].rank));
            continue;
        }
        json_t *g = by[root];
        json_array_append_new(json_object_get(g, "stalled"), json_integer(rs[i].rank));
        if (rs[i].step >= 0)
            add_step(json_object_get(g, "steps"), rs[i].step);
        /* the path, stalled rank first */
        json_t *path = json_array();
        int stack[64], depth = 0;
        for (int k = root; k >= 0 && depth < 64; k = rs[k].from)
            stack[depth++] = k;
        for (int k = depth - 1; k >= 0; k--)
            json_array_append_new(path, json_integer(rs[stack[k]].rank));
        json_array_append_new(json_object_get(g, "chains"), path);
        if (!json_array_size(json_object_get(g, "chain"))) {
            json_t *c = json_object_get(g, "chain");
            for (int k = depth - 1; k >= 0; k--) {
                char node[48];
                snprintf(node, sizeof(node), "%" PRId64 ":%s", rs[stack[k]].rank,
                         k == 0 ? "rank_lost" : "remote_stall");
                json_array_append_new(c, json_string(node));
            }
        }
        /* how each stalled rank was tied to it */
        json_t *ev = json_object_get(g, "evidence");
        if (!json_is_object(ev)) {
            ev = json_pack("{s:s, s:[], s:[]}", "stalled",
                           "progress stopped mid-step while the agent reported on",
                           "by_waits", "only_lost_rank");
            json_object_set_new(g, "evidence", ev);
        }
        json_array_append_new(json_object_get(ev, by_waits ? "by_waits" : "only_lost_rank"),
                              json_integer(rs[i].rank));
    }
    if (!rc && json_array_size(unexplained)) {
        json_t *g = json_pack("{s:s, s:s, s:o, s:o, s:s}", "cause", "undecided", "root", "",
                              "stalled", json_incref(unexplained), "steps", json_array(),
                              "reason", "ranks stalled with no wait record that leads to a lost"
                                        " rank");
        json_array_append_new(groups, g);
    }
    json_decref(unexplained);
    for (size_t i = 0; i < n; i++)
        free(rs[i].peers);
    free(rs);
    free(queue);
    free(by);
    if (rc) {
        json_decref(groups);
        snprintf(err, errlen, "lost ranks: %s", rc == -ENOMEM ? "out of memory" : "store error");
        return rc;
    }
    *out = groups;
    return 0;
}

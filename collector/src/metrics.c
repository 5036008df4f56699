/*
 * Prometheus text exposition (format 0.0.4) of what the collector knows per
 * rank: summaries received, lost and replayed, the last epoch, heartbeat
 * age, coverage ratios per hook over the last epoch, task counts by class.
 * Label values come from agents (job names, class names) and are escaped.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collector.h"
#include "lost.h"

struct out {
    char *buf;
    size_t len;
    FILE *f;
};

/* Escape a label value: backslash, double quote and newline. */
static void label(FILE *f, const char *s)
{
    fputc('"', f);
    for (; s && *s; s++) {
        if (*s == '\\' || *s == '"')
            fputc('\\', f), fputc(*s, f);
        else if (*s == '\n')
            fputs("\\n", f);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}

static const char *const hook_names[] = {"task_ready",  "task_assign",    "task_start",
                                         "task_end",    "dep_wait_begin", "dep_wait_end",
                                         "dep_release", "comm_begin",     "comm_end",
                                         "gen_advance", "queue_pressure"};

static void per_rank(FILE *f, sqlite3 *db, const char *name, const char *help, const char *type,
                     const char *sql, uint64_t now)
{
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) != SQLITE_OK)
        return;
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
    sqlite3_bind_int64(s, 1, (int64_t)now);
    while (sqlite3_step(s) == SQLITE_ROW) {
        fprintf(f, "%s{job=", name);
        label(f, (const char *)sqlite3_column_text(s, 0));
        fprintf(f, ",rank=\"%lld\"", (long long)sqlite3_column_int64(s, 1));
        int nc = sqlite3_column_count(s);
        /* Extra label columns sit between rank and the value. */
        for (int i = 2; i < nc - 1; i++) {
            const char *col = sqlite3_column_name(s, i);
            if (!strcmp(col, "hook")) {
                int h = sqlite3_column_int(s, i);
                fprintf(f, ",hook=");
                label(f, h >= 0 && h < 11 ? hook_names[h] : "unknown");
            } else {
                fprintf(f, ",%s=", col);
                label(f, (const char *)sqlite3_column_text(s, i));
            }
        }
        if (sqlite3_column_type(s, nc - 1) == SQLITE_FLOAT)
            fprintf(f, "} %.6g\n", sqlite3_column_double(s, nc - 1));
        else
            fprintf(f, "} %lld\n", (long long)sqlite3_column_int64(s, nc - 1));
    }
    sqlite3_finalize(s);
}

/* Each rank's state (lost.h), one series per state with 1 for the one it
 * is in: a rank whose application died or whose agent went silent shows
 * at the next scrape. */
static void rank_states(FILE *f, sqlite3 *db, uint64_t now)
{
    static const char *const states[] = {"running", "exited", "silent"};
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(db,
                           "SELECT job, rank, app_alive, last_seen_ns, heartbeat_ns, epoch_ns"
                           " FROM ranks ORDER BY job, rank",
                           -1, &s, NULL) != SQLITE_OK)
        return;
    fprintf(f, "# HELP mkscope_rank_state The rank's state: running, exited (its application"
               " ended) or silent (its agent unheard for two heartbeats)\n"
               "# TYPE mkscope_rank_state gauge\n");
    while (sqlite3_step(s) == SQLITE_ROW) {
        const char *st = mks_rank_state(
            sqlite3_column_type(s, 2) == SQLITE_NULL || sqlite3_column_int(s, 2),
            (uint64_t)sqlite3_column_int64(s, 3), (uint64_t)sqlite3_column_int64(s, 4),
            (uint64_t)sqlite3_column_int64(s, 5), now);
        for (int k = 0; k < 3; k++) {
            fprintf(f, "mkscope_rank_state{job=");
            label(f, (const char *)sqlite3_column_text(s, 0));
            fprintf(f, ",rank=\"%lld\",state=\"%s\"} %d\n", (long long)sqlite3_column_int64(s, 1),
                    states[k], !strcmp(st, states[k]));
        }
    }
    sqlite3_finalize(s);
}

char *mks_metrics_render(const struct mks_serve_env *env)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return NULL;
    sqlite3 *db = mks_store_db(env->st);
    per_rank(f, db, "mkscope_summaries_received_total", "Epoch summaries stored", "counter",
             "SELECT job, rank, summaries FROM ranks WHERE ?1 IS NOT NULL ORDER BY job, rank",
             env->now_ns);
    per_rank(f, db, "mkscope_summaries_lost_total",
             "Summaries the agent dropped (buffer overflow)", "counter",
             "SELECT job, rank, lost_summaries FROM ranks WHERE ?1 IS NOT NULL ORDER BY job, rank",
             env->now_ns);
    per_rank(f, db, "mkscope_summaries_duplicate_total", "Replayed summaries already stored",
             "counter",
             "SELECT job, rank, duplicates FROM ranks WHERE ?1 IS NOT NULL ORDER BY job, rank",
             env->now_ns);
    per_rank(f, db, "mkscope_last_epoch", "Last epoch number received", "gauge",
             "SELECT job, rank, COALESCE(last_epoch, 0) FROM ranks WHERE ?1 IS NOT NULL"
             " ORDER BY job, rank",
             env->now_ns);
    per_rank(f, db, "mkscope_last_seen_seconds", "Seconds since the agent was last heard from",
             "gauge",
             "SELECT job, rank, (?1 - last_seen_ns) / 1e9 FROM ranks ORDER BY job, rank",
             env->now_ns);
    per_rank(f, db, "mkscope_coverage_ratio",
             "Events the programs ran on / eligible events, last epoch, per hook", "gauge",
             "SELECT e.job, e.rank, c.hook, CAST(c.ran AS REAL) / c.eligible FROM coverage c"
             " JOIN epochs e ON e.id = c.epoch_id WHERE ?1 IS NOT NULL AND c.eligible > 0 AND"
             " e.id = (SELECT MAX(id) FROM epochs x WHERE x.job = e.job AND x.rank = e.rank)"
             " ORDER BY e.job, e.rank, c.hook",
             env->now_ns);
    per_rank(f, db, "mkscope_events_lost_total", "Events lost (ring full, guard aborts) per hook",
             "counter",
             "SELECT e.job, e.rank, c.hook, SUM(c.lost) FROM coverage c JOIN epochs e ON"
             " e.id = c.epoch_id WHERE ?1 IS NOT NULL GROUP BY e.job, e.rank, c.hook"
             " ORDER BY e.job, e.rank, c.hook",
             env->now_ns);
    per_rank(f, db, "mkscope_tasks_total", "Tasks that ended, by task class", "counter",
             "SELECT e.job, e.rank, COALESCE((SELECT name FROM task_classes tc WHERE"
             " tc.job = e.job AND tc.rank = e.rank AND tc.id = t.class), 'class' || t.class)"
             " AS class, SUM(t.count) FROM task_stats t JOIN epochs e ON e.id = t.epoch_id"
             " WHERE ?1 IS NOT NULL GROUP BY e.job, e.rank, t.class ORDER BY e.job, e.rank, 3",
             env->now_ns);
    rank_states(f, db, env->now_ns);
    if (env->stats) {
        fprintf(f, "# HELP mkscope_ingest_pressure Ingest load the acks carry: 0 keeping up,"
                   " 1 busy, 2 behind\n"
                   "# TYPE mkscope_ingest_pressure gauge\n"
                   "mkscope_ingest_pressure %u\n"
                   "# HELP mkscope_ingest_batches_total Ingest transactions (batches of messages)\n"
                   "# TYPE mkscope_ingest_batches_total counter\n"
                   "mkscope_ingest_batches_total %llu\n"
                   "# HELP mkscope_summaries_pressured_total Summaries whose detail the collector's"
                   " pressure capped\n"
                   "# TYPE mkscope_summaries_pressured_total counter\n"
                   "mkscope_summaries_pressured_total %llu\n",
                (unsigned)env->stats->pressure, (unsigned long long)env->stats->batches,
                (unsigned long long)env->stats->summaries_pressured);
        fprintf(f, "# HELP mkscope_ingest_messages_total Messages received from agents\n"
                   "# TYPE mkscope_ingest_messages_total counter\n"
                   "mkscope_ingest_messages_total %llu\n"
                   "# HELP mkscope_ingest_errors_total Messages rejected (decode or store)\n"
                   "# TYPE mkscope_ingest_errors_total counter\n"
                   "mkscope_ingest_errors_total{kind=\"decode\"} %llu\n"
                   "mkscope_ingest_errors_total{kind=\"store\"} %llu\n"
                   "# HELP mkscope_cli_requests_total CLI requests served\n"
                   "# TYPE mkscope_cli_requests_total counter\n"
                   "mkscope_cli_requests_total %llu\n"
                   "# HELP mkscope_cli_busy_total CLI requests answered busy (no worker free)\n"
                   "# TYPE mkscope_cli_busy_total counter\n"
                   "mkscope_cli_busy_total %llu\n"
                   "# HELP mkscope_ucx_raw_batches_total Raw event batches received over UCX\n"
                   "# TYPE mkscope_ucx_raw_batches_total counter\n"
                   "mkscope_ucx_raw_batches_total %llu\n",
                (unsigned long long)env->stats->messages,
                (unsigned long long)env->stats->decode_errors,
                (unsigned long long)env->stats->store_errors,
                (unsigned long long)env->stats->cli_requests,
                (unsigned long long)env->stats->cli_busy,
                (unsigned long long)env->stats->ucx_batches);
    }
    if (fclose(f)) {
        free(buf);
        return NULL;
    }
    return buf;
}

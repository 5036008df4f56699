/*
 * The agent's bounded buffer of encoded summaries that the collector has not
 * acknowledged yet.
 *
 * Entries are kept in sequence order.  Payloads live in memory up to
 * mem_bytes; beyond that the oldest payloads move to a disk spool (one file
 * per entry) when a directory is configured, bounded by disk_bytes.  When
 * neither has room, the oldest entries are dropped and counted as lost: the
 * agent reports that count in its next summary, so an overflow is never
 * silent.  The link always sends the oldest entry first (nanomsg REQ has one
 * request in flight), which is what keeps replays in order.
 *
 * With a directory, every entry is also written to its own file there when
 * pushed (unless spill_only), and removed when acknowledged.  An agent that
 * crashes leaves those files behind.  The next agent with the same directory
 * moves them to DIR/replay and sends them, as they are (each a complete
 * envelope of the earlier incarnation, which the collector stores under
 * that incarnation), before its own.
 */
#ifndef MKS_AGENT_SPOOL_H
#define MKS_AGENT_SPOOL_H

#include <stddef.h>
#include <stdint.h>

struct agt_spool_opts {
    size_t sz;         /* sizeof(struct agt_spool_opts) */
    size_t mem_bytes;  /* payload bytes held in memory; 0 = default (8 MiB) */
    const char *dir;   /* disk spool directory, NULL for memory only */
    size_t disk_bytes; /* payload bytes on disk; 0 = default (256 MiB) when dir is set */
    int spill_only;    /* 0: every entry is written to dir when pushed, so a crash
                          leaves all of them (within disk_bytes) for the next agent;
                          1: only what overflows mem_bytes goes there */
};

/* The caller's numbers for an entry, added up over the entries dropped: the
 * agent's are how many losses the summary reports (v[0]) and per hook the
 * events it accounts for (v[1 + hook]: its own eligible events and those of
 * lost summaries it reports), so that a report lost in turn is made again. */
#define AGT_SPOOL_TAG_N 24
struct agt_spool_tag {
    uint64_t v[AGT_SPOOL_TAG_N];
};

struct agt_spool_stats {
    uint64_t entries;     /* unacknowledged entries held */
    uint64_t mem_bytes;   /* payload bytes in memory */
    uint64_t disk_bytes;  /* payload bytes on disk */
    uint64_t lost;        /* entries dropped on overflow since creation */
    struct agt_spool_tag lost_tags; /* sum of the tags of those entries */
    uint64_t stale;       /* summaries of an earlier agent that could not be replayed */
    uint64_t replay_left; /* summaries of an earlier agent still to send */
    uint64_t replayed;    /* summaries of an earlier agent the collector stored */
};

struct agt_spool;

int agt_spool_create(const struct agt_spool_opts *opts, struct agt_spool **sp_p);
void agt_spool_destroy(struct agt_spool *sp); /* accepts NULL; removes its files */

/* Append a copy of an encoded summary.  seq must be larger than every seq
 * pushed before (-EINVAL otherwise).  Overflow drops the oldest entries.
 * tag (NULL: zeros) is the caller's numbers for the entry; the tags of
 * dropped entries add up in lost_tags. */
int agt_spool_push(struct agt_spool *sp, uint64_t seq, const void *buf, size_t len,
                   const struct agt_spool_tag *tag);

/* Give up on the oldest entry, seq (the collector refuses it): dropped and
 * counted as lost like an overflow, its tag into lost_tags.  -ENOENT when
 * the oldest entry is not seq. */
int agt_spool_drop(struct agt_spool *sp, uint64_t seq);

/* The oldest unacknowledged entry: -ENOENT when empty.  *buf_p stays valid
 * until the next call on the spool. */
int agt_spool_head(struct agt_spool *sp, uint64_t *seq_p, const void **buf_p, size_t *len_p);

/* Mark the entry of seq as in flight (0: none).  Overflow then drops the
 * next oldest instead: the collector may be storing that very entry, and
 * counting it lost would over-report. */
void agt_spool_pin(struct agt_spool *sp, uint64_t seq);

/* Cumulative acknowledgement: drops every entry with seq <= up_to.  Returns
 * the number of entries dropped. */
uint64_t agt_spool_ack(struct agt_spool *sp, uint64_t up_to);

/* The oldest summary of an earlier agent still to send: -ENOENT when none
 * is left.  An unreadable file is counted lost and skipped.  *buf_p stays
 * valid until the next call on the spool. */
int agt_spool_replay_head(struct agt_spool *sp, const void **buf_p, size_t *len_p);

/* Done with the replay head: stored by the collector (delivered != 0) or
 * given up on (counted as lost in `stale`).  Its file is removed. */
void agt_spool_replay_pop(struct agt_spool *sp, int delivered);

void agt_spool_stats(const struct agt_spool *sp, struct agt_spool_stats *st);

#endif /* MKS_AGENT_SPOOL_H */

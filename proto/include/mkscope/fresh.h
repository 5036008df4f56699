/*
 * Freshness of messages: a time window and a bounded replay cache, so that a
 * captured message cannot be played again (docs/wire.md, "Freshness").
 *
 * Every envelope carries a random nonce and the sender's CLOCK_REALTIME
 * (sent_ns), both under the MAC.  A receiver remembers (sender, nonce) of
 * what it accepted and refuses:
 *   - a message whose time is outside the window (only where it is enforced:
 *     with a key; without one anybody can forge a fresh message anyway and
 *     hosts' clocks need not agree);
 *   - a (sender, nonce) it has seen;
 *   - a message not newer than the oldest entry the cache had to give up
 *     (the floor): the cache holds `capacity` entries, and when it is full
 *     the oldest goes, so that a message it no longer holds can never be
 *     accepted twice.  Sized for the window (capacity >= window x message
 *     rate), the floor stays behind the window and never refuses anything.
 * Entries are 64-bit keyed hashes (SipHash, a random key per process) of the
 * sender and nonce, in a FIFO ring indexed by an open-addressing table: O(1)
 * per message, capacity x 24 bytes of memory.
 *
 * A rate-limited logger for the refusals sits here too: a daemon says once
 * per interval that it refused messages, and how many, instead of a line per
 * message an attacker sends.
 */
#ifndef MKSCOPE_FRESH_H
#define MKSCOPE_FRESH_H

#include <stddef.h>
#include <stdint.h>

#include "mkscope/wire.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Default window: messages may be this much older or newer than the
 * receiver's clock. */
#define MKS_FRESH_WINDOW_NS (60ull * 1000000000ull)
/* Default capacity: a minute of 1000 state-changing messages a second. */
#define MKS_FRESH_CAPACITY (1u << 16)
#define MKS_FRESH_MAX_CAPACITY (1u << 24)

struct mks_fresh;

struct mks_fresh_opts {
    size_t sz;          /* sizeof(struct mks_fresh_opts) */
    uint64_t window_ns; /* 0: MKS_FRESH_WINDOW_NS */
    uint32_t capacity;  /* entries; 0: MKS_FRESH_CAPACITY */
    int enforce_window; /* refuse times outside the window */
    int require;        /* refuse messages without nonce or time */
};

struct mks_fresh_stats {
    uint64_t accepted, replayed, stale, missing;
    uint32_t entries, capacity;
};

int mks_fresh_create(const struct mks_fresh_opts *opts, struct mks_fresh **fresh_p);
void mks_fresh_destroy(struct mks_fresh *fresh); /* accepts NULL */

/* Check one message of sender (any bytes naming it) and remember it.
 * now_ns is the receiver's CLOCK_REALTIME.  Returns 0 (new), -EALREADY
 * (seen before), -ESTALE (outside the window, or older than the cache
 * reaches) or -EBADMSG (no nonce or time while required), with one line in
 * err.  A message without nonce and time passes when they are not
 * required (nothing to check). */
int mks_fresh_check(struct mks_fresh *fresh, const void *sender, size_t sender_len, uint64_t nonce,
                    uint64_t sent_ns, uint64_t now_ns, char *err, size_t errlen);
/* The same for an envelope: the sender is (job, rank, incarnation). */
int mks_fresh_check_env(struct mks_fresh *fresh, const mks_envelope *env, uint64_t now_ns,
                        char *err, size_t errlen);
/* Forget what mks_fresh_check_env accepted of env (its storing failed: the
 * sender's resend of the same bytes must be taken).  No-op when unknown. */
void mks_fresh_forget_env(struct mks_fresh *fresh, const mks_envelope *env);
void mks_fresh_stats(const struct mks_fresh *fresh, struct mks_fresh_stats *stats);
uint64_t mks_fresh_window_ns(const struct mks_fresh *fresh);

/* Rate-limited logging: mks_ratelog_due() returns 1 when a line may be
 * written now (at most one per interval_ns) and sets *suppressed_p to how
 * many were held back since the last one; else counts this one and
 * returns 0.  Zero-initialise the struct. */
struct mks_ratelog {
    uint64_t next_ns, suppressed;
};
int mks_ratelog_due(struct mks_ratelog *r, uint64_t mono_ns, uint64_t interval_ns,
                    uint64_t *suppressed_p);

#ifdef __cplusplus
}
#endif

#endif /* MKSCOPE_FRESH_H */

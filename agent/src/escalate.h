/*
 * Escalation: a narrow raw trace for a bounded window.
 *
 * On the collector's Escalate command the agent builds one program from the
 * command's compiled filter (r1 = context, r0 = 1 keep / 0 drop, no helpers,
 * maps or stack) wrapped so that a kept event's context is copied to the
 * stack and written to a ring buffer, verifies it for every requested hook,
 * and attaches it.  While the window lasts the agent drains the rings and
 * turns the records into RawEventBatch messages; when the window or the
 * byte budget is spent it detaches, unloads and sends a last batch.
 */
#ifndef MKS_AGENT_ESCALATE_H
#define MKS_AGENT_ESCALATE_H

#include <stddef.h>
#include <stdint.h>

#include "mkscope/ctl.h"
#include "mkscope/wire.h"

/* Ring bytes per worker: 2048 records of 128 bytes between drains. */
#define AGT_ESC_RING_BYTES (256u << 10)
/* Raw events per batch message. */
#define AGT_ESC_BATCH_EVENTS 512u
/* Longest window the agent accepts. */
#define AGT_ESC_MAX_MS 60000u

struct agt_esc;

/* Called with each encoded batch (an Envelope with a RawEventBatch). */
typedef void (*agt_esc_emit_fn)(const uint8_t *buf, size_t len, void *arg);

struct agt_esc_env {
    const char *job;
    uint32_t rank;
    uint64_t incarnation;
    const struct mks_wire_key *key;
};

/* Build, verify, load and attach.  On failure nothing stays installed and
 * log holds the reason; the verifier's cost and instruction count go to
 * cost_p and n_insns_p. */
int agt_esc_start(struct mks_ctl *ctl, const Mkscope__V1__Escalate *cmd, uint64_t now_ns,
                  struct agt_esc **esc_p, uint64_t *cost_p, uint32_t *n_insns_p, char *log,
                  size_t log_len);

/* Drain the rings and emit full batches; at the end of the window or
 * budget (or with stop set) detach, emit the rest with last = true and
 * return 1: the escalation is over and may be freed. */
int agt_esc_poll(struct agt_esc *esc, struct mks_ctl *ctl, uint64_t now_ns, int stop,
                 const struct agt_esc_env *env, agt_esc_emit_fn emit, void *arg);

/* Free (after agt_esc_poll returned 1, or when the control block is gone). */
void agt_esc_free(struct agt_esc *esc); /* accepts NULL */

uint64_t agt_esc_id(const struct agt_esc *esc);

/* Build the wrapped program (for tests): filter exits become jumps to the
 * ring output.  *insns_p is malloc()ed. */
int agt_esc_build(const struct mks_insn *filter, uint32_t n, struct mks_insn **insns_p,
                  uint32_t *n_p);

#endif /* MKS_AGENT_ESCALATE_H */

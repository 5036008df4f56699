/*
 * Decode steps across epochs: which steps ended, their whole span, and per
 * worker the time its tasks ran in each.
 *
 * The generation monitor reports per epoch what it saw of each step: the
 * first start and last end of the step's tasks that ended in the epoch; the
 * latency monitor per (worker, step) how long those tasks ran.  A
 * step usually spans two epochs, so neither is the step.  The tracker keeps
 * the steps still open, merges each epoch into them and, once a later step
 * has begun (or the application has ended), hands the step over as ended:
 * the summary of that epoch reports it once, complete, with its span and
 * each worker's busy and idle time in it (idle = span - busy).
 */
#ifndef MKS_AGENT_STEPS_H
#define MKS_AGENT_STEPS_H

#include <stdint.h>

#include "summary.h"

struct agt_steps;

struct agt_steps *agt_steps_new(void);
void agt_steps_free(struct agt_steps *t); /* accepts NULL */
/* Forget every open step (the application restarted: steps start again). */
void agt_steps_reset(struct agt_steps *t);

/* Take one epoch's summary s (fresh from agt_summary_build, not merged):
 * its steps and worker times go into the open steps, and the steps that
 * ended are appended to s->done.  n_workers is the rank's worker count (0:
 * the workers seen); app_ended closes every open step. */
int agt_steps_feed(struct agt_steps *t, struct agt_summary *s, uint32_t n_workers, int app_ended);

#endif

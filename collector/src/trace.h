/*
 * Chrome JSON / Perfetto trace of an escalation's raw events.
 */
#ifndef MKS_COLLECTOR_TRACE_H
#define MKS_COLLECTOR_TRACE_H

#include <jansson.h>
#include <stdint.h>

#include "mkscope/store.h"

/* Build the trace of raw events of `escalation` (-1: the latest) of `job`:
 * otherData names the ranks asked and those done (mks_trace_ranks).
 * Returns 0, or an exit status with one line in err. */
int mks_trace_build(struct mks_store *st, const char *job, int64_t escalation, json_t **out,
                    char *err, size_t errlen);

/* The ranks escalation `escalation` of `job` asked (arrays of integers) and
 * those whose last batch has arrived; both new references. */
void mks_trace_ranks(struct mks_store *st, const char *job, int64_t escalation, json_t **asked_p,
                     json_t **done_p);

#endif

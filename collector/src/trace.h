/*
 * Chrome JSON / Perfetto trace of an escalation's raw events.
 */
#ifndef MKS_COLLECTOR_TRACE_H
#define MKS_COLLECTOR_TRACE_H

#include <jansson.h>
#include <stdint.h>

#include "mkscope/store.h"

/* Build the trace of raw events of `escalation` (-1: the latest) of `job`.
 * Returns 0, or an exit status with one line in err. */
int mks_trace_build(struct mks_store *st, const char *job, int64_t escalation, json_t **out,
                    char *err, size_t errlen);

#endif

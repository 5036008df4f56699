/*
 * SLO triggers: syntax check and per-epoch evaluation with escalation.
 */
#ifndef MKS_COLLECTOR_TRIGGER_H
#define MKS_COLLECTOR_TRIGGER_H

#include <jansson.h>
#include <stdint.h>

#include "collector.h"

/* 0 when expr is a valid trigger, else -EINVAL with the reason (a caret
 * under the offending token when the query language rejects it). */
int mks_trigger_check(const char *expr, char *err, size_t errlen);

/* Evaluate every enabled trigger over the epochs of `job` received at or
 * after since_ns; each firing (trigger, rank) updates the trigger's row,
 * queues an Escalate command for the rank and, when fired is not NULL, is
 * appended to it.  Returns the number of firings or a negative errno. */
int mks_trigger_eval(const struct mks_serve_env *env, const char *job, uint64_t since_ns,
                     json_t *fired);

#endif

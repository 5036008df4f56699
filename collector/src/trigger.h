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

/* Default hold-off of a trigger: after it escalated, it escalates again
 * only this much later (it keeps counting firings meanwhile). */
#define MKS_TRIGGER_HOLD_OFF_NS (300ull * 1000000000ull)

/* Evaluate every enabled trigger over the epochs of `job` with id >=
 * since_epoch_id; each firing (trigger, rank) updates the trigger's row and,
 * when fired is not NULL, is appended to it.  A trigger outside its
 * hold-off (its own, else hold_off_ns) queues one escalation for the ranks
 * that fired and the ranks their remote waits lead to.  Returns the number
 * of firings or a negative errno. */
int mks_trigger_eval(const struct mks_serve_env *env, const char *job, int64_t since_epoch_id,
                     uint64_t hold_off_ns, json_t *fired);

/* A hold-off such as "90s", "5m", "1h" or "0" (seconds without a unit), in
 * ns; -EINVAL when it is none. */
int mks_trigger_hold_off(const char *text, uint64_t *ns_p);

#endif

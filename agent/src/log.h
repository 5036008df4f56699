/*
 * Agent logging: one line per message on stderr, prefixed with the rank the
 * agent serves so that the lines of several agents sharing a terminal (the
 * demo, the local launcher) can be told apart.
 */
#ifndef MKS_AGENT_LOG_H
#define MKS_AGENT_LOG_H

#include <stdint.h>

enum agt_log_level { AGT_LOG_ERR = 0, AGT_LOG_WARN = 1, AGT_LOG_INFO = 2, AGT_LOG_DEBUG = 3 };

void agt_log_setup(int level, int64_t rank);
void agt_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define agt_log_err(...)   agt_log(AGT_LOG_ERR, __VA_ARGS__)
#define agt_log_warn(...)  agt_log(AGT_LOG_WARN, __VA_ARGS__)
#define agt_log_info(...)  agt_log(AGT_LOG_INFO, __VA_ARGS__)
#define agt_log_debug(...) agt_log(AGT_LOG_DEBUG, __VA_ARGS__)

#endif /* MKS_AGENT_LOG_H */

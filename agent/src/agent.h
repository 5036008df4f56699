/*
 * mkscope-agent's daemon: options and the event loop (agent.c).
 */
#ifndef MKS_AGENT_AGENT_H
#define MKS_AGENT_AGENT_H

#include <stddef.h>
#include <stdint.h>

#include "detail.h"

struct agt_opts {
    size_t sz;
    const char *job;
    uint32_t rank;
    const char *collector;    /* ingest URL (NN_REQ connects) */
    const char *survey;       /* survey URL (NN_RESPONDENT connects), NULL: none */
    uint64_t epoch_ms;
    uint64_t budget;          /* bytes per second, 0 unlimited */
    const char *spool_dir;
    uint64_t spool_bytes;     /* disk spool bound */
    int spool_spill_only;     /* only what overflows buffer_bytes goes to spool_dir */
    uint64_t buffer_bytes;    /* memory buffer bound */
    const char *key_path;     /* MAC key file */
    const char *monitors_dir; /* built-in monitor objects */
    const char *monitors;     /* comma-separated built-ins to attach */
    uint64_t lease_ms;
    uint64_t heartbeat_ms;
    uint64_t timeout_ms;      /* reply timeout before a resend */
    uint64_t drain_ms;        /* at exit: how long to try delivering what is buffered */
    int exit_with_app;        /* exit once the application is gone and all is delivered */
    const char *stats_path;   /* write a JSON line of counters at exit */
    int verbose;
    uint64_t fresh_window_ms; /* with a key: commands and surveys older/newer than this are
                                 refused; 0: 60 s */
    uint64_t probe_max_cost;  /* instructions per event a probe's program may cost */
    struct agt_detail_opts detail; /* which steps carry per-step detail (detail.h) */
};

/* Run until SIGINT/SIGTERM (or the application's end with exit_with_app).
 * Returns the process exit code. */
int agt_run(const struct agt_opts *opts);

#endif /* MKS_AGENT_AGENT_H */

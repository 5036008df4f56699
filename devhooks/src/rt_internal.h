/*
 * struct mks_rt, shared by the CPU runtime (runtime.c) and the CUDA pump
 * (rt_cuda.cu), which plugs into the pump thread through pump_ext.
 */
#ifndef MKS_DEVHOOKS_RT_INTERNAL_H
#define MKS_DEVHOOKS_RT_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "cb.h"
#include "mkscope/runtime.h"

struct mks_rt {
    struct mks_rt_hot hot; /* first: MKS_HOOK reads it without a call */
    struct mks_cb *cb;
    size_t size;
    char name[96];
    uint32_t n_workers, rank;
    pthread_t pump;
    int pump_started;
    int stop; /* atomic */
    /* Device backend: called by the pump thread every period, and once at
     * destroy after the pump stopped.  Set before the pump can see it. */
    void (*pump_ext)(struct mks_rt *rt);
    void (*pump_ext_free)(struct mks_rt *rt);
    void *ext;
    /* The pump's watch on the lease holder (cb->agent_*): the seqlock value
     * it last examined, and how it watches that process. */
    uint32_t watch_seq;
    int watch_mode; /* WATCH_* in runtime.c */
    int32_t watch_pid;
    int watch_fd; /* pidfd, or -1 */
    uint64_t watch_start;
    uint64_t own_pidns;
    uint32_t watch_ticks;
};

/* Identity of a process for death detection (ctl.c): its start time in clock
 * ticks since boot and whether it is a zombie, from /proc/<pid>/stat (pid 0 =
 * self); -ESRCH when there is no such process, -EIO when unreadable. */
int mksi_proc_start(int32_t pid, uint64_t *start_p, int *zombie_p);
/* Inode of this process's PID namespace, 0 when unknown. */
uint64_t mksi_own_pidns(void);

#endif /* MKS_DEVHOOKS_RT_INTERNAL_H */

/*
 * struct mks_rt, shared by the CPU runtime (runtime.c) and the CUDA pump
 * (rt_cuda.cu), which plugs into the pump thread through pump_ext.
 */
#ifndef MKS_DEVHOOKS_RT_INTERNAL_H
#define MKS_DEVHOOKS_RT_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "cb.h"
#include "mkscope/runtime.h"

/* Where POSIX shared memory objects live (glibc's shm_open), and room for a
 * block's longest name: "/mkscope." job (64) "." rank "~u" uid "." 16 hex. */
#define MKSI_SHM_DIR      "/dev/shm"
#define MKSI_SHM_NAME_MAX 128

struct mks_rt {
    struct mks_rt_hot hot; /* first: MKS_HOOK reads it without a call */
    struct mks_cb *cb;
    size_t size;
    char name[MKSI_SHM_NAME_MAX];
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
    /* Host CPU wait (MKS_RT_F_HOST_WORKERS): per worker the thread id it
     * declared (0 none; written by the worker, read by the pump), and the
     * pump's own view of each: its schedstat file, its run delay when the
     * pump first read it and when it read it last. */
    int32_t *cpu_tid;
    int *cpu_fd;
    uint64_t *cpu_base, *cpu_last; /* [2 * n]: run delay, runs */
    int host_workers; /* MKS_RT_F_HOST_WORKERS */
    uint32_t cpu_n; /* workers measured (n_workers, at most MKS_CB_CPU_THREADS) */
};

/* Identity of a process for death detection (ctl.c): its start time in clock
 * ticks since boot and whether it is a zombie, from /proc/<pid>/stat (pid 0 =
 * self); -ESRCH when there is no such process, -EIO when unreadable. */
int mksi_proc_start(int32_t pid, uint64_t *start_p, int *zombie_p);
/* Inode of this process's PID namespace, 0 when unknown. */
uint64_t mksi_own_pidns(void);

/* Control block names (ctl.c).  The fallback prefix of (job, rank) for a
 * uid: "/mkscope.<job>.<rank>~u<uid>.", followed by 16 random hex digits. */
int mksi_ctl_fallback_prefix(const char *job, uint32_t rank, uint32_t uid, char *buf, size_t len);
/* lstat of a shared memory object by its name ("/mkscope..."); -errno. */
int mksi_shm_lstat(const char *name, struct stat *st);
/* "uid 1001 (mallory)" or "uid 1001". */
const char *mksi_user_name(uint32_t uid, char *buf, size_t len);
/* Calls fn(name, arg) for each fallback block of (job, rank) that is a
 * regular file of this process's uid, until fn returns non-zero; returns
 * fn's negative result, else 0. */
int mksi_ctl_each_fallback(const char *job, uint32_t rank, int (*fn)(const char *name, void *arg), void *arg);

#endif /* MKS_DEVHOOKS_RT_INTERNAL_H */

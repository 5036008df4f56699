/*
 * libmkscope-gate.so: hold a megakernel's start until its agent has attached,
 * for runtimes that cannot wait for it themselves (mks_rt_wait_attached()).
 *
 *   LD_PRELOAD=libmkscope-gate.so MKSCOPE_GATE_MS=10000 ./megakernel ...
 *
 * How: mks_rt_create() starts the runtime's pump thread right after the
 * control block is complete, before the first task can run.  This library
 * interposes pthread_create(); the first call made while a control block of
 * this process exists waits until an agent has advanced the block's epoch
 * (an agent takes its first snapshot only after attaching its monitors), or
 * until MKSCOPE_GATE_MS (default 10000) has passed, and then lets the thread
 * start.  Threads created before the block exists pass straight through.
 * MKSCOPE_GATE_JOB limits the search to that job's blocks (opening a block
 * renews its lease, which other jobs' blocks should not see).
 * The demo's launcher uses it when the megakernel has no wait of its own, so
 * that the agents' counts cover every task the megakernel ran.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mkscope/ctl.h"

typedef int (*create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);

static int gated;

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* The control block this process created, or NULL. */
static struct mks_ctl *own_block(void)
{
    DIR *d = opendir("/dev/shm");
    struct dirent *de;
    struct mks_ctl *found = NULL;
    const char *only = getenv("MKSCOPE_GATE_JOB");
    if (!d)
        return NULL;
    while (!found && (de = readdir(d))) {
        char job[80];
        const char *name = de->d_name, *dot;
        if (strncmp(name, "mkscope.", 8) != 0 || !(dot = strrchr(name + 8, '.')) ||
            dot == name + 8 || (size_t)(dot - (name + 8)) >= sizeof(job))
            continue;
        char *end;
        unsigned long rank = strtoul(dot + 1, &end, 10);
        if (*end || dot[1] == '\0' || rank > UINT32_MAX)
            continue;
        memcpy(job, name + 8, (size_t)(dot - (name + 8)));
        job[dot - (name + 8)] = '\0';
        if (only && *only && strcmp(job, only) != 0)
            continue;
        struct mks_ctl *ctl;
        struct mks_ctl_info info;
        char err[256];
        if (mks_ctl_open_err(job, (uint32_t)rank, &ctl, err, sizeof(err)) != 0)
            continue;
        if (mks_ctl_info(ctl, &info) == 0 && info.app_pid == (int32_t)getpid())
            found = ctl;
        else
            mks_ctl_close(ctl);
    }
    closedir(d);
    return found;
}

static void gate(void)
{
    struct mks_ctl *ctl = own_block();
    if (!ctl)
        return;
    __atomic_store_n(&gated, 1, __ATOMIC_RELEASE);
    const char *env = getenv("MKSCOPE_GATE_MS");
    uint64_t limit = env && *env ? strtoull(env, NULL, 10) : 10000;
    uint64_t end = mono_ms() + limit;
    struct mks_ctl_info info;
    struct timespec nap = {0, 1000000};
    while (mks_ctl_info(ctl, &info) == 0 && info.epoch == 0) {
        if (mono_ms() >= end) {
            fprintf(stderr, "mkscope-gate: rank %u: no agent attached within %llu ms; starting "
                            "unobserved\n",
                    info.rank, (unsigned long long)limit);
            break;
        }
        nanosleep(&nap, NULL);
    }
    mks_ctl_close(ctl);
}

int pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
    static create_fn real;
    if (!real) {
        real = (create_fn)dlsym(RTLD_NEXT, "pthread_create");
        if (!real) {
            fprintf(stderr, "mkscope-gate: no pthread_create to forward to\n");
            return EAGAIN;
        }
    }
    if (!__atomic_load_n(&gated, __ATOMIC_ACQUIRE))
        gate();
    return real(thread, attr, fn, arg);
}

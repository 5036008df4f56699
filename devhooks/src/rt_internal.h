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
};

#endif /* MKS_DEVHOOKS_RT_INTERNAL_H */

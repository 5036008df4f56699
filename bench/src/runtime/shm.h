/*
 * The ranks' shared memory on the CPU backend: a rendezvous and barrier, one
 * inbox per (destination, source) rank pair standing in for peer memory (a
 * release counter that is never reset and two data slots used alternately),
 * and per-rank result areas rank 0 collects.
 */
#ifndef MKS_BENCH_SHM_H
#define MKS_BENCH_SHM_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

struct bs_layout {
    uint32_t ranks;
    uint32_t slot_floats; /* floats in one inbox data slot */
    uint32_t steps, batch, n_classes;
};

struct bs_shm;

/* Create (unlinking a stale object of the same name first) or open the
 * segment "/mksbench.<job>".  Opening waits up to timeout_ns for a live
 * creator whose layout matches. */
int bs_create(const char *job, const struct bs_layout *lay, struct bs_shm **shm_p);
int bs_open(const char *job, const struct bs_layout *lay, uint64_t timeout_ns,
            struct bs_shm **shm_p, char *err, size_t err_len);
/* Unmap; unlink too when `unlink` is set.  Accepts NULL. */
void bs_close(struct bs_shm *shm, int unlink);

/* Barrier over all ranks; -ECANCELED on abort, -ETIMEDOUT. */
int bs_barrier(struct bs_shm *shm, uint64_t timeout_ns);
_Atomic uint32_t *bs_abort(struct bs_shm *shm);

_Atomic uint32_t *bs_inbox_count(struct bs_shm *shm, uint32_t dst, uint32_t src);
float *bs_inbox_data(struct bs_shm *shm, uint32_t dst, uint32_t src, uint32_t parity);
/* Publish count (release) and wake waiters in any process. */
void bs_inbox_release(struct bs_shm *shm, uint32_t dst, uint32_t src);

struct bs_result {
    _Atomic uint32_t done; /* 1 ok, 2 failed */
    uint32_t pad;
    uint64_t *prof_dropped;
    uint64_t *faulted;
    uint64_t *step_ns;      /* [steps] */
    uint64_t *class_counts; /* [n_classes] */
    int32_t *tokens;        /* [steps * batch] */
    uint64_t *req_gen;      /* [steps * batch] */
    double *logit_sum;      /* [steps] */
};
/* Pointers into rank r's result area. */
void bs_result(struct bs_shm *shm, uint32_t rank, struct bs_result *r);

/* All-gather of a small blob per rank (device memory handles, a NCCL unique
 * id): write mine, meet at a barrier, read everyone's (R * len bytes). */
#define BS_BLOB_MAX 512u
int bs_allgather(struct bs_shm *shm, uint32_t rank, const void *mine, size_t len, void *all,
                 uint64_t timeout_ns);
void bs_result_set_done(struct bs_shm *shm, uint32_t rank, uint32_t v);
uint32_t bs_result_done(struct bs_shm *shm, uint32_t rank);

#endif

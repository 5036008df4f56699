/*
 * One rank of the bench megakernel on the CPU backend: the decode-step task
 * graph built on the runtime (rt.h), its task bodies, fault planning, the
 * task schema, and the rank's life from rendezvous to results.
 */
#ifndef MKS_BENCH_WORKLOAD_H
#define MKS_BENCH_WORKLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "graph.h"
#include "mkscope/bench.h"

struct bs_shm;

/* Run rank `rank` of a job whose shared memory is attached.  0 or a negative
 * errno with one line in err. */
int bw_rank_main(struct bs_shm *shm, const struct mks_bench_config *cfg,
                 const struct mks_fault *faults, uint32_t n_faults, uint32_t rank, char *err,
                 size_t err_len);

/* The serialized mkscope.v1.TaskSchema of a configuration (malloc'd). */
int bw_schema_encode(const struct mks_bench_config *cfg, uint32_t rank, uint8_t **buf_p,
                     size_t *len_p);

/* The communication generation of all-reduce k (0..2L-1) of step s from
 * src to dst. */
uint64_t bw_comm_gen(uint32_t step, uint32_t k, uint32_t src, uint32_t dst);

#endif

/*
 * Native task profiler records, MPK style: per worker, a begin/end record per
 * task (and per remote wait) with the time and the task's class and tile,
 * into a fixed per-worker buffer with a drop counter.  Shared by the CPU
 * runtime and the CUDA megakernel (plain C, readable by nvcc's host compiler).
 */
#ifndef MKS_BENCH_PROF_H
#define MKS_BENCH_PROF_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum br_prof_kind {
    BR_PROF_BEGIN = 0,
    BR_PROF_END = 1,
    BR_PROF_WAIT_BEGIN = 2,
    BR_PROF_WAIT_END = 3
};

struct br_prof_rec {
    uint64_t t; /* ns, the rank's clock */
    uint16_t cls;
    uint8_t kind; /* enum br_prof_kind */
    uint8_t pad;
    uint32_t tile; /* tile_x | tile_y << 16 */
};

/* Write a Chrome/Perfetto JSON trace: worker w's records are
 * recs[w * stride .. + counts[w]).  0 or a negative errno. */
int br_prof_write(const char *path, uint32_t rank, uint32_t n_workers,
                  const struct br_prof_rec *recs, uint32_t stride, const uint32_t *counts,
                  uint64_t dropped, const char *(*cls_name)(void *user, uint32_t cls), void *user);

#ifdef __cplusplus
}
#endif

#endif

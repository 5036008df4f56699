/*
 * The monitor the devhooks cost benchmarks run (CPU: bench/vm/vm_bench.c,
 * GPU: bench/gpu/devhooks_cost.cu): latency = t_now - t_start from the hook
 * context in ~microseconds, floor(log2) by binary search into 8 buckets,
 * lookup of the bucket's counter in an array map, increment.  32
 * instructions (31 with the atomic increment), the shape of a real
 * histogram monitor, hand-assembled so no compiler is involved.
 */
#ifndef MKS_BENCH_MONITOR_PROG_H
#define MKS_BENCH_MONITOR_PROG_H

#define MKS_BI(code, dst, src, off, imm)                                                           \
    {(uint8_t)(code), (uint8_t)((dst) | ((src) << 4)), (int16_t)(off), (int32_t)(imm)}
#define MKS_BLOG2_STEP(s)                                                                          \
    MKS_BI(0xbf, 4, 2, 0, 0), MKS_BI(0x77, 4, 0, 0, s), MKS_BI(0x15, 4, 0, 2, 0),                  \
        MKS_BI(0x07, 3, 0, 0, s), MKS_BI(0xbf, 2, 4, 0, 0)

/* Up to the map lookup; map_src is 5 for an mkscope map reference, 0 for a
 * plain immediate (uBPF, whose helper knows the map). */
#define MKS_BMONITOR_HEAD(map_src)                                                                 \
    MKS_BI(0x79, 2, 1, 80, 0),              /* r2 = ctx->t_now */                                  \
        MKS_BI(0x79, 3, 1, 96, 0),          /* r3 = ctx->t_start */                                \
        MKS_BI(0x1f, 2, 3, 0, 0),           /* r2 -= r3: latency */                                \
        MKS_BI(0x77, 2, 0, 0, 10),          /* r2 >>= 10 */                                        \
        MKS_BI(0xb7, 3, 0, 0, 0),           /* r3 = bucket */                                      \
        MKS_BLOG2_STEP(4), MKS_BLOG2_STEP(2), MKS_BLOG2_STEP(1),                                   \
        MKS_BI(0x63, 10, 3, -4, 0),         /* *(u32 *)(fp - 4) = bucket */                        \
        MKS_BI(0x18, 1, map_src, 0, 0), MKS_BI(0, 0, 0, 0, 0), /* r1 = map */                      \
        MKS_BI(0xbf, 2, 10, 0, 0), MKS_BI(0x07, 2, 0, 0, -4),  /* r2 = fp - 4 */                   \
        MKS_BI(0x85, 0, 0, 0, 1)            /* call map_lookup */

/* (*r0)++ with a plain load and store: one thread. */
#define MKS_BMONITOR(map_src)                                                                      \
    {                                                                                              \
        MKS_BMONITOR_HEAD(map_src), MKS_BI(0x15, 0, 0, 3, 0), MKS_BI(0x79, 1, 0, 0, 0),            \
            MKS_BI(0x07, 1, 0, 0, 1), MKS_BI(0x7b, 0, 1, 0, 0), MKS_BI(0xb7, 0, 0, 0, 0),          \
            MKS_BI(0x95, 0, 0, 0, 0),                                                              \
    }

/* (*r0)++ as an atomic add: many workers. */
#define MKS_BMONITOR_ATOMIC(map_src)                                                               \
    {                                                                                              \
        MKS_BMONITOR_HEAD(map_src), MKS_BI(0x15, 0, 0, 2, 0), MKS_BI(0xb7, 1, 0, 0, 1),            \
            MKS_BI(0xdb, 0, 1, 0, 0), MKS_BI(0xb7, 0, 0, 0, 0), MKS_BI(0x95, 0, 0, 0, 0),          \
    }

#endif /* MKS_BENCH_MONITOR_PROG_H */

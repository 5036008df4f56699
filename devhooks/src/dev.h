/*
 * What lets one C source compile for the CPU (gcc/clang) and the device
 * (nvcc): function qualifiers, atomics and the clock.  The VM and the map
 * helpers use only these and plain C; nothing from libc on the device path.
 */
#ifndef MKS_DEVHOOKS_DEV_H
#define MKS_DEVHOOKS_DEV_H

#include <stdint.h>

#ifdef __CUDACC__
#define MKS_DEVFN __device__
#define MKS_INLINE __device__ __forceinline__
#define MKS_HD __host__ __device__ __forceinline__
/* GPU scope is enough: the only other parties are device threads and the
 * pump's copies, which read and write device memory through the L2. */
#define MKS_FENCE() __threadfence()
#define MKS_A_LOAD64(p) (*(volatile uint64_t *)(p))
#define MKS_A_STORE64(p, v) (*(volatile uint64_t *)(p) = (v))

MKS_INLINE uint64_t mks_dev_time_ns(void)
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
#define MKS_A_ADD64(p, v) ((uint64_t)atomicAdd((unsigned long long *)(p), (unsigned long long)(v)))
#define MKS_A_OR64(p, v)  ((uint64_t)atomicOr((unsigned long long *)(p), (unsigned long long)(v)))
#define MKS_A_AND64(p, v) ((uint64_t)atomicAnd((unsigned long long *)(p), (unsigned long long)(v)))
#define MKS_A_XOR64(p, v) ((uint64_t)atomicXor((unsigned long long *)(p), (unsigned long long)(v)))
#define MKS_A_XCHG64(p, v) ((uint64_t)atomicExch((unsigned long long *)(p), (unsigned long long)(v)))
#define MKS_A_CAS64(p, e, d)                                                                       \
    ((uint64_t)atomicCAS((unsigned long long *)(p), (unsigned long long)(e), (unsigned long long)(d)))
#define MKS_A_ADD32(p, v)  ((uint32_t)atomicAdd((unsigned int *)(p), (unsigned int)(v)))
#define MKS_A_OR32(p, v)   ((uint32_t)atomicOr((unsigned int *)(p), (unsigned int)(v)))
#define MKS_A_AND32(p, v)  ((uint32_t)atomicAnd((unsigned int *)(p), (unsigned int)(v)))
#define MKS_A_XOR32(p, v)  ((uint32_t)atomicXor((unsigned int *)(p), (unsigned int)(v)))
#define MKS_A_XCHG32(p, v) ((uint32_t)atomicExch((unsigned int *)(p), (unsigned int)(v)))
#define MKS_A_CAS32(p, e, d) ((uint32_t)atomicCAS((unsigned int *)(p), (unsigned int)(e), (unsigned int)(d)))
/* Loads and stores other agents see: volatile plus a fence where ordering matters. */
#define MKS_A_LOAD32(p)     (*(volatile uint32_t *)(p))
#define MKS_A_LOAD_ACQ32(p)     mks_dev_load_acq32((const uint32_t *)(p))
#define MKS_A_STORE_REL32(p, v) mks_dev_store_rel32((uint32_t *)(p), (uint32_t)(v))
#define MKS_A_LOAD_ACQ64(p)     mks_dev_load_acq64((const uint64_t *)(p))
#define MKS_A_STORE_REL64(p, v) mks_dev_store_rel64((uint64_t *)(p), (uint64_t)(v))
/* sm_70+ acquire/release operations: ordering without a full fence. */
MKS_INLINE uint32_t mks_dev_load_acq32(const uint32_t *p)
{
    uint32_t v;
    asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
MKS_INLINE uint64_t mks_dev_load_acq64(const uint64_t *p)
{
    uint64_t v;
    asm volatile("ld.acquire.gpu.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
MKS_INLINE void mks_dev_store_rel32(uint32_t *p, uint32_t v)
{
    asm volatile("st.release.gpu.u32 [%0], %1;" : : "l"(p), "r"(v) : "memory");
}
MKS_INLINE void mks_dev_store_rel64(uint64_t *p, uint64_t v)
{
    asm volatile("st.release.gpu.u64 [%0], %1;" : : "l"(p), "l"(v) : "memory");
}
/* An atomic add whose old value nobody reads (a BPF add without FETCH, a
 * histogram's counters): the lanes of a warp that reach it together and
 * add to the same address add their sum once.  A monitor warp runs 32
 * events side by side, and the same histogram bucket or counter is the
 * common target: one L2 atomic instead of up to 32 on one address. */
MKS_INLINE uint32_t mks_dev_laneid(void)
{
    uint32_t l;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(l));
    return l;
}
MKS_INLINE void mks_dev_red_add64(uint64_t *p, uint64_t v)
{
    const unsigned m = __activemask();
    const unsigned g = __match_any_sync(m, (unsigned long long)(uintptr_t)p);
    if (__popc(g) == 1) {
        atomicAdd((unsigned long long *)p, (unsigned long long)v);
        return;
    }
    uint64_t sum = 0;
    for (unsigned rest = g; rest; rest &= rest - 1)
        sum += __shfl_sync(g, v, __ffs(rest) - 1);
    if (mks_dev_laneid() == (uint32_t)(__ffs(g) - 1))
        atomicAdd((unsigned long long *)p, (unsigned long long)sum);
}
MKS_INLINE void mks_dev_red_add32(uint32_t *p, uint32_t v)
{
    const unsigned m = __activemask();
    const unsigned g = __match_any_sync(m, (unsigned long long)(uintptr_t)p);
    uint32_t sum = __popc(g) == 1 ? v : __reduce_add_sync(g, v);
    if (mks_dev_laneid() == (uint32_t)(__ffs(g) - 1))
        atomicAdd((unsigned int *)p, sum);
}
#define MKS_A_RED_ADD64(p, v) mks_dev_red_add64((uint64_t *)(p), (uint64_t)(v))
#define MKS_A_RED_ADD32(p, v) mks_dev_red_add32((uint32_t *)(p), (uint32_t)(v))
/* A join point every path to it passes through: the value is opaque to the
 * compiler there, so it cannot thread the paths that set it around the
 * join (the VM's instruction join, where a warp's lanes reconverge). */
#define MKS_JOIN_POINT(v) asm volatile("// mks join point" : "+r"(v))
#define MKS_CLZ64(v) ((uint32_t)__clzll((long long)(v)))
#define MKS_LIKELY(x) (x)
#define MKS_UNLIKELY(x) (x)

#else /* host */
#include <time.h>

#define MKS_DEVFN
#define MKS_INLINE static inline
#define MKS_HD static inline
#define MKS_FENCE() __atomic_thread_fence(__ATOMIC_SEQ_CST)
#define MKS_A_LOAD64(p) __atomic_load_n((const uint64_t *)(p), __ATOMIC_RELAXED)
#define MKS_A_STORE64(p, v) __atomic_store_n((uint64_t *)(p), (uint64_t)(v), __ATOMIC_RELAXED)

MKS_INLINE uint64_t mks_dev_time_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
#define MKS_A_ADD64(p, v)    __atomic_fetch_add((uint64_t *)(p), (uint64_t)(v), __ATOMIC_SEQ_CST)
#define MKS_A_OR64(p, v)     __atomic_fetch_or((uint64_t *)(p), (uint64_t)(v), __ATOMIC_SEQ_CST)
#define MKS_A_AND64(p, v)    __atomic_fetch_and((uint64_t *)(p), (uint64_t)(v), __ATOMIC_SEQ_CST)
#define MKS_A_XOR64(p, v)    __atomic_fetch_xor((uint64_t *)(p), (uint64_t)(v), __ATOMIC_SEQ_CST)
#define MKS_A_XCHG64(p, v)   __atomic_exchange_n((uint64_t *)(p), (uint64_t)(v), __ATOMIC_SEQ_CST)
#define MKS_A_ADD32(p, v)    __atomic_fetch_add((uint32_t *)(p), (uint32_t)(v), __ATOMIC_SEQ_CST)
#define MKS_A_OR32(p, v)     __atomic_fetch_or((uint32_t *)(p), (uint32_t)(v), __ATOMIC_SEQ_CST)
#define MKS_A_AND32(p, v)    __atomic_fetch_and((uint32_t *)(p), (uint32_t)(v), __ATOMIC_SEQ_CST)
#define MKS_A_XOR32(p, v)    __atomic_fetch_xor((uint32_t *)(p), (uint32_t)(v), __ATOMIC_SEQ_CST)
#define MKS_A_XCHG32(p, v)   __atomic_exchange_n((uint32_t *)(p), (uint32_t)(v), __ATOMIC_SEQ_CST)
#define MKS_A_RED_ADD64(p, v) ((void)__atomic_fetch_add((uint64_t *)(p), (uint64_t)(v), __ATOMIC_SEQ_CST))
#define MKS_A_RED_ADD32(p, v) ((void)__atomic_fetch_add((uint32_t *)(p), (uint32_t)(v), __ATOMIC_SEQ_CST))
MKS_INLINE uint64_t mks_a_cas64(uint64_t *p, uint64_t e, uint64_t d)
{
    __atomic_compare_exchange_n(p, &e, d, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return e; /* the old value either way */
}
MKS_INLINE uint32_t mks_a_cas32(uint32_t *p, uint32_t e, uint32_t d)
{
    __atomic_compare_exchange_n(p, &e, d, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return e;
}
#define MKS_A_CAS64(p, e, d) mks_a_cas64((uint64_t *)(p), (e), (d))
#define MKS_A_CAS32(p, e, d) mks_a_cas32((uint32_t *)(p), (e), (d))
#define MKS_A_LOAD32(p)         __atomic_load_n((const uint32_t *)(p), __ATOMIC_RELAXED)
#define MKS_A_LOAD_ACQ32(p)     __atomic_load_n((const uint32_t *)(p), __ATOMIC_ACQUIRE)
#define MKS_A_STORE_REL32(p, v) __atomic_store_n((uint32_t *)(p), (uint32_t)(v), __ATOMIC_RELEASE)
#define MKS_A_LOAD_ACQ64(p)     __atomic_load_n((const uint64_t *)(p), __ATOMIC_ACQUIRE)
#define MKS_A_STORE_REL64(p, v) __atomic_store_n((uint64_t *)(p), (uint64_t)(v), __ATOMIC_RELEASE)
#define MKS_JOIN_POINT(v)       ((void)(v))
#define MKS_CLZ64(v)            ((uint32_t)__builtin_clzll(v))
#define MKS_LIKELY(x)           __builtin_expect(!!(x), 1)
#define MKS_UNLIKELY(x)         __builtin_expect(!!(x), 0)
#endif

/* Byte-wise copy and compare: no libc on the device path. */
MKS_INLINE void mks_dev_memcpy(void *dst, const void *src, uint32_t n)
{
    uint8_t *d = (uint8_t *)dst;
    const uint8_t *s = (const uint8_t *)src;
    for (uint32_t i = 0; i < n; i++)
        d[i] = s[i];
}
MKS_INLINE int mks_dev_memeq(const void *a, const void *b, uint32_t n)
{
    const uint8_t *x = (const uint8_t *)a, *y = (const uint8_t *)b;
    for (uint32_t i = 0; i < n; i++)
        if (x[i] != y[i])
            return 0;
    return 1;
}
MKS_INLINE void mks_dev_memzero(void *dst, uint32_t n)
{
    uint8_t *d = (uint8_t *)dst;
    for (uint32_t i = 0; i < n; i++)
        d[i] = 0;
}

#endif /* MKS_DEVHOOKS_DEV_H */

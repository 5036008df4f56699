/*
 * mkscope.bpf.h: the header a monitor written in C includes.  Compile with
 *   clang -target bpf -O2 -g -I<mkscope>/devhooks/include -c mon.bpf.c
 *
 * It gives the program the hook context (struct mks_hook_ctx), the helpers of
 * the mkscope environment, BTF map definition macros and the section names
 * that bind a program to a hook:
 *
 *   SEC("mkscope/task_end")            OBSERVE program at MKS_EV_TASK_END
 *   SEC("mkscope.control/task_ready")  CONTROL program at MKS_EV_TASK_READY
 *
 * Event names are those of enum mks_hook_event in lower case without the
 * prefix: task_ready, task_assign, task_start, task_end, dep_wait_begin,
 * dep_wait_end, dep_release, comm_begin, comm_end, gen_advance,
 * queue_pressure.
 *
 * A map is declared as libbpf's BTF-defined maps are, with mkscope's types:
 *
 *   struct {
 *       __uint(type, MKS_MAP_ARRAY);
 *       __uint(max_entries, 64);
 *       __type(key, __u32);
 *       __type(value, __u64);
 *   } counts SEC(".maps");
 *
 * Every object states the hook ABI version it was built for with
 * MKS_ABI_VERSION(); the loader reads it and the verifier checks context
 * accesses against that version's layout.  Without it the loader assumes 1.
 */
#ifndef MKSCOPE_BPF_H
#define MKSCOPE_BPF_H

#ifndef __bpf__
#error "mkscope.bpf.h is for BPF programs: compile with clang -target bpf"
#endif

/* Fixed-width types, for the program and for the shared ABI headers. */
typedef unsigned char __u8;
typedef signed char __s8;
typedef unsigned short __u16;
typedef short __s16;
typedef unsigned int __u32;
typedef int __s32;
typedef unsigned long long __u64;
typedef long long __s64;
typedef __u8 uint8_t;
typedef __s8 int8_t;
typedef __u16 uint16_t;
typedef __s16 int16_t;
typedef __u32 uint32_t;
typedef __s32 int32_t;
typedef __u64 uint64_t;
typedef __s64 int64_t;

#include "mkscope/bpf_isa.h"
#include "mkscope/hook_abi.h"

#define SEC(name) __attribute__((section(name), used))
#ifndef __always_inline
#define __always_inline inline __attribute__((always_inline))
#endif
#define __mks_noinline __attribute__((noinline))

/*
 * BTF map definitions.  The loader reads each field back from BTF: an int
 * field's value is encoded as the element count of an array type, a key or
 * value type as a pointer to it.
 */
#define __uint(name, val)  int(*name)[val]
#define __type(name, val)  __typeof__(val) *name
#define __array(name, val) __typeof__(val) *name[]

/* ABI version of the program: a read-only global the loader reads from
 * .rodata.  volatile so clang keeps it even when nothing reads it. */
#define MKS_ABI_VERSION(v) const volatile __u32 mkscope_abi SEC(".rodata") = (v)

/* License string (Linux tools expect one; mkscope ignores it). */
#define MKS_LICENSE(s) char _license[] SEC("license") = s

/*
 * Helpers (enum mks_helper_id).  Calling through a constant function pointer
 * makes clang emit `call <id>`.  Which a program may call depends on its type:
 * CONTROL programs get lookup, time and ids only.
 */
static void *(*mks_map_lookup)(void *map, const void *key) = (void *)MKS_HELPER_MAP_LOOKUP;
static long (*mks_map_update)(void *map, const void *key, const void *value,
                              __u64 flags) = (void *)MKS_HELPER_MAP_UPDATE;
static long (*mks_map_delete)(void *map, const void *key) = (void *)MKS_HELPER_MAP_DELETE;
static __u64 (*mks_time_ns)(void) = (void *)MKS_HELPER_TIME_NS;
static __u64 (*mks_worker_id)(void) = (void *)MKS_HELPER_WORKER_ID;
static __u64 (*mks_sm_id)(void) = (void *)MKS_HELPER_SM_ID;
static __u64 (*mks_rank)(void) = (void *)MKS_HELPER_RANK;
static long (*mks_hist_add)(void *map, const void *key, __u64 value) = (void *)MKS_HELPER_HIST_ADD;
static long (*mks_ringbuf_output)(void *map, const void *data, __u64 size,
                                  __u64 flags) = (void *)MKS_HELPER_RINGBUF_OUTPUT;

/* Flags of mks_map_update, as in Linux. */
#define MKS_ANY     0
#define MKS_NOEXIST 1
#define MKS_EXIST   2

#endif /* MKSCOPE_BPF_H */

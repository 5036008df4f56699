/*
 * The parts of NCCL's profiler plugin ABI this plugin uses, declared by hand
 * from NCCL's documented interface (ext-profiler in the NCCL sources).  NCCL
 * dlopens the library named by NCCL_PROFILER_PLUGIN and looks up the symbol
 * ncclProfiler_v5, then ncclProfiler_v4, ... (newest first).  NCCL 2.28 (CUDA
 * 13) loads v5; v4 serves NCCL 2.27.
 *
 * Only the `coll` and `kernelCh` arms of the descriptor union are read here;
 * the union is padded to the size of NCCL's largest arm.
 */
#ifndef MKS_NCCL_PROFILER_ABI_H
#define MKS_NCCL_PROFILER_ABI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
} ncclResult_t;

typedef enum {
    NCCL_LOG_NONE = 0,
    NCCL_LOG_VERSION = 1,
    NCCL_LOG_WARN = 2,
    NCCL_LOG_INFO = 3,
    NCCL_LOG_ABORT = 4,
    NCCL_LOG_TRACE = 5
} ncclDebugLogLevel;

#define MKS_NCCL_LOGSUB_INIT    0x1ul
#define MKS_NCCL_LOGSUB_PROFILE 0x4000ul

typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags, const char *file,
                                  int line, const char *fmt, ...);

/* Event types (activation mask bits). */
enum {
    ncclProfileGroup = 1 << 0,
    ncclProfileColl = 1 << 1,
    ncclProfileP2p = 1 << 2,
    ncclProfileProxyOp = 1 << 3,
    ncclProfileProxyStep = 1 << 4,
    ncclProfileProxyCtrl = 1 << 5,
    ncclProfileKernelCh = 1 << 6,
    ncclProfileNetPlugin = 1 << 7,
};

/* Event states are an int-sized enum in NCCL. */
typedef int ncclProfilerEventState_t;
#define MKS_NCCL_STATE_KERNEL_CH_STOP 22 /* ncclProfilerKernelChStop */

/* The `kernelCh` arm (v4 and v5). */
struct mks_nccl_kernel_ch_descr {
    uint8_t channelId;
    uint64_t pTimer; /* GPU globaltimer at the channel's start */
};

/* The `coll` arm, identical in v4 and v5 up to parentGroup (v5 only). */
struct mks_nccl_coll_descr {
    uint64_t seqNumber;
    const char *func;
    void const *sendBuff;
    void *recvBuff;
    size_t count;
    int root;
    const char *datatype;
    uint8_t nChannels;
    uint8_t nWarps;
    const char *algo;
    const char *proto;
    void *parentGroup; /* v5 */
};

/* Largest other arm: proxyOp {pid_t, uint8_t, int, int, int, int} and the API
 * arms with a few pointers; 96 bytes covers every arm of v4 and v5. */
typedef struct {
    uint64_t type;
    void *parentObj;
    int rank;
    union {
        struct mks_nccl_coll_descr coll;
        struct mks_nccl_kernel_ch_descr kernelCh;
        unsigned char size_[96];
    };
} ncclProfilerEventDescr_v5_t;

typedef struct {
    uint8_t type;
    void *parentObj;
    int rank;
    union {
        struct mks_nccl_coll_descr coll; /* parentGroup absent in v4 */
        struct mks_nccl_kernel_ch_descr kernelCh;
        unsigned char size_[96];
    };
} ncclProfilerEventDescr_v4_t;

typedef union {
    struct {
        size_t transSize;
    } proxyStep;
    struct {
        int appendedProxyOps;
    } proxyCtrl;
    struct {
        void *data;
    } netPlugin;
    struct {
        uint64_t pTimer;
    } kernelCh;
} ncclProfilerEventStateArgs_t;

typedef struct {
    const char *name;
    ncclResult_t (*init)(void **context, uint64_t commId, int *eActivationMask, const char *commName,
                         int nNodes, int nranks, int rank, ncclDebugLogger_t logfn);
    ncclResult_t (*startEvent)(void *context, void **eHandle, ncclProfilerEventDescr_v5_t *eDescr);
    ncclResult_t (*stopEvent)(void *eHandle);
    ncclResult_t (*recordEventState)(void *eHandle, ncclProfilerEventState_t eState,
                                     ncclProfilerEventStateArgs_t *eStateArgs);
    ncclResult_t (*finalize)(void *context);
} ncclProfiler_v5_t;

typedef struct {
    const char *name;
    ncclResult_t (*init)(void **context, int *eActivationMask, const char *commName, uint64_t commHash,
                         int nNodes, int nranks, int rank, ncclDebugLogger_t logfn);
    ncclResult_t (*startEvent)(void *context, void **eHandle, ncclProfilerEventDescr_v4_t *eDescr);
    ncclResult_t (*stopEvent)(void *eHandle);
    ncclResult_t (*recordEventState)(void *eHandle, ncclProfilerEventState_t eState,
                                     ncclProfilerEventStateArgs_t *eStateArgs);
    ncclResult_t (*finalize)(void *context);
} ncclProfiler_v4_t;

#endif /* MKS_NCCL_PROFILER_ABI_H */

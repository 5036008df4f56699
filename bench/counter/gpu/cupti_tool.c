/*
 * libmks_cupti.so: the CUPTI baselines of the counterexample benchmark, as a
 * CUPTI injection library (CUDA_INJECTION64_PATH=libmks_cupti.so), so the
 * observed program is the unchanged mkscope-bench binary.
 *
 *   MKS_CUPTI_MODE=activity  the kernel-level timeline: every kernel (name,
 *                            start, end, grid, graph node), memcpy and memset
 *                            of the process, from CUPTI's activity API
 *   MKS_CUPTI_MODE=pcsamp    PC sampling with stall reasons (CUPTI's PC
 *                            sampling API, continuous mode): per sampled PC its
 *                            function, offset and samples per stall reason
 *   MKS_CUPTI_OUT=PREFIX     writes PREFIX.rankR.jsonl, R from MKS_CUPTI_RANK
 *                            (bench/counter/gpu.sh starts one process a rank),
 *                            else the process id
 *
 * One JSON object a line: {"kind":"kernel","name","start","end","device",
 * "stream","grid","graph_node","corr"}, {"kind":"memcpy","bytes","start",
 * "end","copy_kind"}, {"kind":"memset",...}, {"kind":"pc","function","pc",
 * "stall":{"reason":samples,...}}, and last {"kind":"end","records","bytes",
 * "dropped"}: the bytes CUPTI handed over (activity) or the sampled PCs'
 * records (pcsamp), what the tool costs in telemetry.  bench/counter/
 * baselines.c (tools kernels and pcsamp) reads the files.
 */
#include <cupti.h>
#include <cupti_pcsampling.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BUF_SIZE    (8u << 20)
#define PC_BUF_PCS  8192u
#define MAX_REASONS 64u

static FILE *out;
static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t n_records, n_bytes, n_dropped;
static int pc_mode;
static CUpti_SubscriberHandle sub;

/* stall reasons of the device, index -> name */
static size_t n_reasons;
static uint32_t reason_idx[MAX_REASONS];
static char *reason_name[MAX_REASONS];

#define CUPTI_CALL(call)                                                                           \
    do {                                                                                           \
        CUptiResult r_ = (call);                                                                   \
        if (r_ != CUPTI_SUCCESS) {                                                                 \
            const char *s_ = NULL;                                                                 \
            cuptiGetResultString(r_, &s_);                                                         \
            fprintf(stderr, "mks_cupti: %s: %s\n", #call, s_ ? s_ : "?");                          \
        }                                                                                          \
    } while (0)

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; s && *s; s++) {
        if (*s == '"' || *s == '\\')
            fputc('\\', f);
        if ((unsigned char)*s >= 0x20)
            fputc(*s, f);
    }
    fputc('"', f);
}

/* ---- activity: the kernel-level timeline ----------------------------------- */

static void CUPTIAPI buf_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *buffer = aligned_alloc(8, BUF_SIZE);
    *size = *buffer ? BUF_SIZE : 0;
    *max_records = 0;
}

static void CUPTIAPI buf_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                                   size_t valid)
{
    (void)ctx;
    (void)stream;
    (void)size;
    CUpti_Activity *rec = NULL;
    pthread_mutex_lock(&out_mu);
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        n_records++;
        switch (rec->kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
            const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
            fprintf(out, "{\"kind\":\"kernel\",\"name\":");
            json_str(out, k->name);
            fprintf(out,
                    ",\"start\":%" PRIu64 ",\"end\":%" PRIu64 ",\"device\":%u,\"stream\":%u,"
                    "\"grid\":%d,\"graph_node\":%" PRIu64 ",\"corr\":%u}\n",
                    k->start, k->end, k->deviceId, k->streamId, k->gridX * k->gridY * k->gridZ,
                    k->graphNodeId, k->correlationId);
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
            const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)rec;
            fprintf(out,
                    "{\"kind\":\"memcpy\",\"bytes\":%" PRIu64 ",\"start\":%" PRIu64
                    ",\"end\":%" PRIu64 ",\"copy_kind\":%u,\"device\":%u}\n",
                    m->bytes, m->start, m->end, m->copyKind, m->deviceId);
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
            const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)rec;
            fprintf(out,
                    "{\"kind\":\"memset\",\"bytes\":%" PRIu64 ",\"start\":%" PRIu64
                    ",\"end\":%" PRIu64 ",\"device\":%u}\n",
                    m->bytes, m->start, m->end, m->deviceId);
            break;
        }
        default:
            break;
        }
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS)
        n_dropped += dropped;
    n_bytes += valid;
    pthread_mutex_unlock(&out_mu);
    free(buffer);
}

/* ---- PC sampling with stall reasons ----------------------------------------- */

static CUpti_PCSamplingData pc_data;

static void pc_configure(CUcontext ctx)
{
    CUpti_PCSamplingEnableParams en = {.size = CUpti_PCSamplingEnableParamsSize, .ctx = ctx};
    CUPTI_CALL(cuptiPCSamplingEnable(&en));
    CUpti_PCSamplingGetNumStallReasonsParams np = {.size =
                                                       CUpti_PCSamplingGetNumStallReasonsParamsSize,
                                                   .ctx = ctx,
                                                   .numStallReasons = &n_reasons};
    CUPTI_CALL(cuptiPCSamplingGetNumStallReasons(&np));
    if (n_reasons > MAX_REASONS)
        n_reasons = MAX_REASONS;
    for (size_t i = 0; i < n_reasons; i++)
        reason_name[i] = calloc(CUPTI_STALL_REASON_STRING_SIZE, 1);
    CUpti_PCSamplingGetStallReasonsParams sp = {.size = CUpti_PCSamplingGetStallReasonsParamsSize,
                                                .ctx = ctx,
                                                .numStallReasons = n_reasons,
                                                .stallReasonIndex = reason_idx,
                                                .stallReasons = reason_name};
    CUPTI_CALL(cuptiPCSamplingGetStallReasons(&sp));
    /* the buffer CUPTI fills with parsed records: PC_BUF_PCS PCs, each with
     * room for every stall reason */
    pc_data.size = sizeof(pc_data);
    pc_data.collectNumPcs = PC_BUF_PCS;
    pc_data.pPcData = calloc(PC_BUF_PCS, sizeof(CUpti_PCSamplingPCData));
    for (size_t i = 0; i < PC_BUF_PCS && pc_data.pPcData; i++) {
        pc_data.pPcData[i].size = sizeof(CUpti_PCSamplingPCData);
        pc_data.pPcData[i].stallReason = calloc(n_reasons, sizeof(CUpti_PCSamplingStallReason));
    }
    CUpti_PCSamplingConfigurationInfo cfg[5];
    memset(cfg, 0, sizeof(cfg));
    cfg[0].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_STALL_REASON;
    cfg[0].attributeData.stallReasonData.stallReasonCount = n_reasons;
    cfg[0].attributeData.stallReasonData.pStallReasonIndex = reason_idx;
    cfg[1].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_DATA_BUFFER;
    cfg[1].attributeData.samplingDataBufferData.samplingDataBuffer = &pc_data;
    cfg[2].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_PERIOD;
    /* 2^(5+period) cycles between samples of an SM; 2^12 = about 2 us on an H200 */
    cfg[2].attributeData.samplingPeriodData.samplingPeriod = 7;
    cfg[3].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_COLLECTION_MODE;
    cfg[3].attributeData.collectionModeData.collectionMode =
        CUPTI_PC_SAMPLING_COLLECTION_MODE_CONTINUOUS;
    cfg[4].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_OUTPUT_DATA_FORMAT;
    cfg[4].attributeData.outputDataFormatData.outputDataFormat =
        CUPTI_PC_SAMPLING_OUTPUT_DATA_FORMAT_PARSED;
    CUpti_PCSamplingConfigurationInfoParams cp = {.size =
                                                      CUpti_PCSamplingConfigurationInfoParamsSize,
                                                  .ctx = ctx,
                                                  .numAttributes = 5,
                                                  .pPCSamplingConfigurationInfo = cfg};
    CUPTI_CALL(cuptiPCSamplingSetConfigurationAttribute(&cp));
}

static void pc_write(void)
{
    for (size_t i = 0; i < pc_data.totalNumPcs && i < pc_data.collectNumPcs; i++) {
        const CUpti_PCSamplingPCData *p = &pc_data.pPcData[i];
        fprintf(out, "{\"kind\":\"pc\",\"function\":");
        json_str(out, p->functionName);
        fprintf(out, ",\"pc\":%" PRIu64 ",\"stall\":{", p->pcOffset);
        for (size_t k = 0; k < p->stallReasonCount; k++) {
            const char *nm = "?";
            for (size_t j = 0; j < n_reasons; j++)
                if (reason_idx[j] == p->stallReason[k].pcSamplingStallReasonIndex)
                    nm = reason_name[j];
            fprintf(out, "%s", k ? "," : "");
            json_str(out, nm);
            fprintf(out, ":%u", p->stallReason[k].samples);
        }
        fprintf(out, "}}\n");
        n_records++;
        n_bytes += sizeof(*p) + p->stallReasonCount * sizeof(CUpti_PCSamplingStallReason);
    }
    n_dropped += pc_data.droppedSamples;
}

static void pc_drain(CUcontext ctx)
{
    pthread_mutex_lock(&out_mu);
    for (int guard = 0; guard < 1 << 20; guard++) {
        CUpti_PCSamplingGetDataParams gp = {
            .size = CUpti_PCSamplingGetDataParamsSize, .ctx = ctx, .pcSamplingData = &pc_data};
        if (cuptiPCSamplingGetData(&gp) != CUPTI_SUCCESS)
            break;
        pc_write();
        if (!pc_data.remainingNumPcs)
            break;
    }
    pthread_mutex_unlock(&out_mu);
}

static void CUPTIAPI on_callback(void *user, CUpti_CallbackDomain dom, CUpti_CallbackId id,
                                 const void *data)
{
    (void)user;
    if (dom != CUPTI_CB_DOMAIN_RESOURCE)
        return;
    const CUpti_ResourceData *rd = data;
    if (id == CUPTI_CBID_RESOURCE_CONTEXT_CREATED && pc_mode)
        pc_configure(rd->context);
    if (id == CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING) {
        if (pc_mode) {
            pc_drain(rd->context);
            CUpti_PCSamplingDisableParams dp = {.size = CUpti_PCSamplingDisableParamsSize,
                                                .ctx = rd->context};
            CUPTI_CALL(cuptiPCSamplingDisable(&dp));
            /* disabling hands over what was still buffered */
            pthread_mutex_lock(&out_mu);
            pc_write();
            pthread_mutex_unlock(&out_mu);
        } else {
            CUPTI_CALL(cuptiActivityFlushAll(1));
        }
    }
}

static void at_exit(void)
{
    if (!pc_mode)
        cuptiActivityFlushAll(1);
    pthread_mutex_lock(&out_mu);
    if (out) {
        fprintf(out,
                "{\"kind\":\"end\",\"mode\":\"%s\",\"records\":%" PRIu64 ",\"bytes\":%" PRIu64
                ",\"dropped\":%" PRIu64 "}\n",
                pc_mode ? "pcsamp" : "activity", n_records, n_bytes, n_dropped);
        fclose(out);
        out = NULL;
    }
    pthread_mutex_unlock(&out_mu);
}

/* The entry point CUDA calls when it loads an injection library. */
int InitializeInjection(void);
int InitializeInjection(void)
{
    const char *mode = getenv("MKS_CUPTI_MODE"), *prefix = getenv("MKS_CUPTI_OUT");
    const char *rank = getenv("MKS_CUPTI_RANK");
    if (!prefix || !*prefix) {
        fprintf(stderr, "mks_cupti: MKS_CUPTI_OUT is not set; recording nothing\n");
        return 1;
    }
    pc_mode = mode && !strcmp(mode, "pcsamp");
    if (mode && strcmp(mode, "pcsamp") && strcmp(mode, "activity")) {
        fprintf(stderr, "mks_cupti: MKS_CUPTI_MODE is activity or pcsamp, not '%s'\n", mode);
        return 1;
    }
    char path[4096];
    if (rank && *rank)
        snprintf(path, sizeof(path), "%s.rank%s.jsonl", prefix, rank);
    else
        snprintf(path, sizeof(path), "%s.pid%d.jsonl", prefix, (int)getpid());
    out = fopen(path, "w");
    if (!out) {
        perror(path);
        return 1;
    }
    CUPTI_CALL(cuptiSubscribe(&sub, on_callback, NULL));
    CUPTI_CALL(cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_RESOURCE));
    if (!pc_mode) {
        CUPTI_CALL(cuptiActivityRegisterCallbacks(buf_requested, buf_completed));
        CUPTI_CALL(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
        CUPTI_CALL(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY));
        CUPTI_CALL(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET));
    }
    atexit(at_exit);
    return 1;
}

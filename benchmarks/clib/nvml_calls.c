/*
 * Per-call cost of fakegpu's libnvidia-ml.so.1 from C: each query N times, every call timed with
 * CLOCK_MONOTONIC; prints one JSON object {"<call>": [ns, ns, ...], ...} (benchmarks/fakegpu_cabi.py
 * builds it with cc and reads it). The machine comes from FAKEGPU_STATE_DIR, as for any client.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef void *nvmlDevice_t;
typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;
typedef struct {
    unsigned int id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount;
    unsigned int copyEngineCount, decoderCount, encoderCount, jpegCount, ofaCount;
    unsigned long long memorySizeMB;
} nvmlGpuInstanceProfileInfo_t;

int nvmlInit_v2(void);
int nvmlShutdown(void);
int nvmlDeviceGetCount_v2(unsigned int *);
int nvmlDeviceGetHandleByIndex_v2(unsigned int, nvmlDevice_t *);
int nvmlDeviceGetName(nvmlDevice_t, char *, unsigned int);
int nvmlDeviceGetUUID(nvmlDevice_t, char *, unsigned int);
int nvmlDeviceGetMemoryInfo(nvmlDevice_t, nvmlMemory_t *);
int nvmlDeviceGetPciInfo_v3(nvmlDevice_t, nvmlPciInfo_t *);
int nvmlDeviceGetMigMode(nvmlDevice_t, unsigned int *, unsigned int *);
int nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t, unsigned int, nvmlGpuInstanceProfileInfo_t *);
int nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t, unsigned int, nvmlDevice_t *);

static int n;
static nvmlDevice_t gpu, mig;
static char buf[96];

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

#define TIMED(label, call)                                      \
    do {                                                        \
        printf("%s\"%s\": [", first ? "" : ", ", label);        \
        first = 0;                                              \
        for (int i = 0; i < n; i++) {                           \
            long long t0 = now_ns();                            \
            int rc = (call);                                    \
            long long t1 = now_ns();                            \
            if (rc != 0) {                                      \
                fprintf(stderr, "%s: %d\n", label, rc);         \
                exit(1);                                        \
            }                                                   \
            printf(i ? ",%lld" : "%lld", t1 - t0);              \
        }                                                       \
        printf("]");                                            \
    } while (0)

int main(int argc, char **argv) {
    n = argc > 1 ? atoi(argv[1]) : 2000;
    if (nvmlInit_v2() != 0) return 1;
    unsigned int count, cur, pend;
    nvmlMemory_t mem;
    nvmlPciInfo_t pci;
    nvmlGpuInstanceProfileInfo_t info;
    nvmlDevice_t h;
    nvmlDeviceGetHandleByIndex_v2(2, &gpu);
    nvmlDeviceGetMigDeviceHandleByIndex(gpu, 0, &mig);
    int first = 1;
    printf("{");
    TIMED("nvmlDeviceGetCount", nvmlDeviceGetCount_v2(&count));
    TIMED("nvmlDeviceGetHandleByIndex", nvmlDeviceGetHandleByIndex_v2(2, &h));
    TIMED("nvmlDeviceGetName", nvmlDeviceGetName(gpu, buf, sizeof buf));
    TIMED("nvmlDeviceGetUUID", nvmlDeviceGetUUID(gpu, buf, sizeof buf));
    TIMED("nvmlDeviceGetMemoryInfo", nvmlDeviceGetMemoryInfo(gpu, &mem));
    TIMED("nvmlDeviceGetPciInfo", nvmlDeviceGetPciInfo_v3(gpu, &pci));
    TIMED("nvmlDeviceGetMigMode", nvmlDeviceGetMigMode(gpu, &cur, &pend));
    TIMED("nvmlDeviceGetGpuInstanceProfileInfo", nvmlDeviceGetGpuInstanceProfileInfo(gpu, 0, &info));
    TIMED("nvmlDeviceGetMigDeviceHandleByIndex", nvmlDeviceGetMigDeviceHandleByIndex(gpu, 0, &h));
    TIMED("nvmlDeviceGetName(MIG device)", nvmlDeviceGetName(mig, buf, sizeof buf));
    printf("}\n");
    nvmlShutdown();
    return 0;
}

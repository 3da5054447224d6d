/*
 * A C client of the fake libnvidia-ml.so.1 (tests/fakegpu/test_clib.py builds it with cc and links
 * it with -lnvidia-ml). It declares what it uses itself, from nvml.h's definitions, prints one
 * "key value" line per fact and "waiting" before it waits for an event (the test then injects an
 * XID through the fakegpu CLI). Exit status 0 unless a call it needs fails.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void *nvmlDevice_t;
typedef void *nvmlGpuInstance_t;
typedef void *nvmlComputeInstance_t;
typedef void *nvmlEventSet_t;

typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
    unsigned int version, id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount;
    unsigned int copyEngineCount, decoderCount, encoderCount, jpegCount, ofaCount;
    unsigned long long memorySizeMB;
    char name[96];
} nvmlGpuInstanceProfileInfo_v2_t;
typedef struct {
    unsigned int start, size;
} nvmlGpuInstancePlacement_t;
typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType, eventData;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlEventData_t;

#define VERSION(type, v) ((unsigned int)(sizeof(type) | ((v) << 24)))

int nvmlInit_v2(void);
int nvmlShutdown(void);
const char *nvmlErrorString(int);
int nvmlSystemGetDriverVersion(char *, unsigned int);
int nvmlDeviceGetCount_v2(unsigned int *);
int nvmlDeviceGetHandleByIndex_v2(unsigned int, nvmlDevice_t *);
int nvmlDeviceGetHandleByUUID(const char *, nvmlDevice_t *);
int nvmlDeviceGetUUID(nvmlDevice_t, char *, unsigned int);
int nvmlDeviceGetName(nvmlDevice_t, char *, unsigned int);
int nvmlDeviceGetMemoryInfo(nvmlDevice_t, nvmlMemory_t *);
int nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t, nvmlMemory_v2_t *);
int nvmlDeviceSetMigMode(nvmlDevice_t, unsigned int, int *);
int nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t, unsigned int, nvmlGpuInstanceProfileInfo_v2_t *);
int nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t, unsigned int, const nvmlGpuInstancePlacement_t *,
                                             nvmlGpuInstance_t *);
int nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t, unsigned int, nvmlComputeInstance_t *);
int nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t, unsigned int, nvmlDevice_t *);
int nvmlComputeInstanceDestroy(nvmlComputeInstance_t);
int nvmlGpuInstanceDestroy(nvmlGpuInstance_t);
int nvmlEventSetCreate(nvmlEventSet_t *);
int nvmlDeviceRegisterEvents(nvmlDevice_t, unsigned long long, nvmlEventSet_t);
int nvmlEventSetWait_v2(nvmlEventSet_t, nvmlEventData_t *, unsigned int);
int nvmlEventSetFree(nvmlEventSet_t);
int nvmlDeviceGetAddressingMode(nvmlDevice_t, void *);

static void check(const char *what, int rc) {
    if (rc != 0) {
        printf("error %s %d %s\n", what, rc, nvmlErrorString(rc));
        fflush(stdout);
        exit(1);
    }
}

int main(void) {
    char text[96];
    check("init", nvmlInit_v2());
    check("driver", nvmlSystemGetDriverVersion(text, sizeof text));
    printf("driver %s\n", text);
    unsigned int count = 0;
    check("count", nvmlDeviceGetCount_v2(&count));
    printf("count %u\n", count);
    nvmlDevice_t gpu0 = NULL;
    for (unsigned int i = 0; i < count; i++) {
        nvmlDevice_t dev;
        check("handle", nvmlDeviceGetHandleByIndex_v2(i, &dev));
        check("uuid", nvmlDeviceGetUUID(dev, text, sizeof text));
        printf("uuid %u %s\n", i, text);
        nvmlDevice_t again;
        check("by-uuid", nvmlDeviceGetHandleByUUID(text, &again));
        printf("same %u %d\n", i, again == dev);
        if (i == 0) gpu0 = dev;
    }
    check("name", nvmlDeviceGetName(gpu0, text, sizeof text));
    printf("name %s\n", text);
    printf("small-buffer %d\n", nvmlDeviceGetName(gpu0, text, 4));
    nvmlMemory_t m1;
    check("memory", nvmlDeviceGetMemoryInfo(gpu0, &m1));
    printf("memory %llu %llu %llu\n", m1.total, m1.free, m1.used);
    nvmlMemory_v2_t m2 = {.version = VERSION(nvmlMemory_v2_t, 2)};
    check("memory-v2", nvmlDeviceGetMemoryInfo_v2(gpu0, &m2));
    printf("memory-v2 %llu %llu %llu %llu\n", m2.total, m2.reserved, m2.free, m2.used);
    nvmlMemory_v2_t bad = {.version = 0};
    printf("memory-v2-unversioned %d\n", nvmlDeviceGetMemoryInfo_v2(gpu0, &bad));
    printf("unmodelled %d\n", nvmlDeviceGetAddressingMode(gpu0, NULL));

    /* MIG: on, one 3g GPU instance at slice 4 with a compute instance spanning it, then gone */
    int activation = -1;
    check("mig-on", nvmlDeviceSetMigMode(gpu0, 1, &activation));
    printf("mig-activation %d\n", activation);
    nvmlGpuInstanceProfileInfo_v2_t info = {.version = VERSION(nvmlGpuInstanceProfileInfo_v2_t, 2)};
    check("gi-profile", nvmlDeviceGetGpuInstanceProfileInfoV(gpu0, 2, &info)); /* 3 slice */
    printf("gi-profile %u %s %llu\n", info.id, info.name, info.memorySizeMB);
    nvmlGpuInstancePlacement_t at = {.start = 4, .size = 4};
    nvmlGpuInstance_t gi;
    check("gi-create", nvmlDeviceCreateGpuInstanceWithPlacement(gpu0, info.id, &at, &gi));
    nvmlComputeInstance_t ci;
    check("ci-create", nvmlGpuInstanceCreateComputeInstance(gi, 2, &ci)); /* 3c: the whole GI */
    nvmlDevice_t mig;
    check("mig-handle", nvmlDeviceGetMigDeviceHandleByIndex(gpu0, 0, &mig));
    check("mig-uuid", nvmlDeviceGetUUID(mig, text, sizeof text));
    printf("mig-uuid %s\n", text);
    check("mig-name", nvmlDeviceGetName(mig, text, sizeof text));
    printf("mig-name %s\n", text);
    fflush(stdout);
    if (getenv("NVML_CHECK_PAUSE")) { /* the test looks at the machine from outside now */
        printf("paused\n");
        fflush(stdout);
        getchar();
    }
    check("ci-destroy", nvmlComputeInstanceDestroy(ci));
    check("gi-destroy", nvmlGpuInstanceDestroy(gi));
    printf("mig-after-destroy %d\n", nvmlDeviceGetMigDeviceHandleByIndex(gpu0, 0, &mig));

    /* events: wait for the XID the test injects */
    nvmlEventSet_t set;
    check("set", nvmlEventSetCreate(&set));
    check("register", nvmlDeviceRegisterEvents(gpu0, 0x8, set)); /* XidCriticalError */
    nvmlEventData_t data;
    printf("timeout %d\n", nvmlEventSetWait_v2(set, &data, 10));
    printf("waiting\n");
    fflush(stdout);
    check("wait", nvmlEventSetWait_v2(set, &data, 20000));
    printf("event %llu %llu %d\n", data.eventType, data.eventData, data.device == gpu0);
    check("set-free", nvmlEventSetFree(set));
    check("shutdown", nvmlShutdown());
    printf("after-shutdown %d\n", nvmlDeviceGetCount_v2(&count));
    printf("done\n");
    return 0;
}

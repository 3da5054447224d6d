/*
 * fakegpu's libnvidia-ml.so.1, the front: what an NVML client loads.
 *
 * It has no Python in it. At the first nvmlInit it makes sure a Python is in the process (the
 * host's own when the host is Python, else the libpython the library was built for, loaded
 * RTLD_GLOBAL), then loads the bridge beside it (libfakegpu-bridge.so, built against that
 * Python's headers) and from then on hands every modelled call to it as an index and six raw
 * values. The typed function per symbol, the list of exports and the error strings are
 * generated into symbols.c from fakegpu/_csyms.py and fakegpu/_codes.py (fakegpu/_libbuild.py).
 *
 * A failure to load answers nvmlInit with NVML_ERROR_LIBRARY_NOT_FOUND and one line on stderr
 * that names the cause and the fix; it never ends the host process.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "fakegpu_build.h"

#define FG_ERROR_UNINITIALIZED 1
#define FG_ERROR_LIBRARY_NOT_FOUND 12

typedef int (*fg_call_fn)(int, const uint64_t *);
typedef int (*fg_init_fn)(char *, size_t);

static pthread_mutex_t fg_mutex = PTHREAD_MUTEX_INITIALIZER;
static fg_call_fn fg_bridge_call; /* set once the bridge is up, never reset */

static int fg_fail(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("fakegpu: nvmlInit: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return code;
}

/* Whether a Py_GetVersion() text ("3.11.7 (main, ...") is of the Python this was built for. */
static int fg_same_python(const char *version) {
    size_t n = strlen(FG_PY_VERSION);
    return strncmp(version, FG_PY_VERSION, n) == 0 && version[n] == '.';
}

static int fg_load_locked(void) {
    const char *(*get_version)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT, "Py_GetVersion");
    if (get_version != NULL) {
        /* Python is in this process already (a Python host, or an earlier try of ours) */
        const char *version = get_version();
        if (!fg_same_python(version)) {
            return fg_fail(FG_ERROR_LIBRARY_NOT_FOUND,
                           "this process runs Python %.6s but the library was built for Python %s (%s); "
                           "build one with this process's Python: `python -m fakegpu lib`",
                           version, FG_PY_VERSION, FG_PYTHON_EXE);
        }
    } else if (dlopen(FG_LIBPYTHON, RTLD_NOW | RTLD_GLOBAL) == NULL) {
        return fg_fail(FG_ERROR_LIBRARY_NOT_FOUND,
                       "cannot load %s (%s): the library was built for the Python %s; run `fakegpu lib` "
                       "again with the Python that has fakegpu installed and use the directory it prints",
                       FG_LIBPYTHON, dlerror(), FG_PYTHON_EXE);
    }
    Dl_info self;
    if (dladdr((void *)&fg_load_locked, &self) == 0 || self.dli_fname == NULL) {
        return fg_fail(FG_ERROR_LIBRARY_NOT_FOUND, "cannot find where this library lies (dladdr failed)");
    }
    char path[4096];
    const char *slash = strrchr(self.dli_fname, '/');
    int dir_len = slash ? (int)(slash - self.dli_fname) : 1;
    const char *dir = slash ? self.dli_fname : ".";
    if (snprintf(path, sizeof path, "%.*s/%s", dir_len, dir, FG_BRIDGE_NAME) >= (int)sizeof path) {
        return fg_fail(FG_ERROR_LIBRARY_NOT_FOUND, "the library's path is too long: %s", self.dli_fname);
    }
    void *bridge = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (bridge == NULL) {
        return fg_fail(FG_ERROR_LIBRARY_NOT_FOUND, "cannot load the bridge %s (%s); run `fakegpu lib` again",
                       path, dlerror());
    }
    fg_init_fn init = (fg_init_fn)dlsym(bridge, "fg_bridge_init");
    fg_call_fn call = (fg_call_fn)dlsym(bridge, "fg_bridge_call");
    if (init == NULL || call == NULL) {
        return fg_fail(FG_ERROR_LIBRARY_NOT_FOUND, "%s is not fakegpu's bridge; run `fakegpu lib` again", path);
    }
    char err[2048] = "";
    int rc = init(err, sizeof err);
    if (rc != 0) {
        return fg_fail(rc, "%s", err);
    }
    __atomic_store_n(&fg_bridge_call, call, __ATOMIC_RELEASE);
    return 0;
}

/* A modelled call other than nvmlInit*: answered by the fake once nvmlInit brought it up. */
int fg_call(int index, const uint64_t *args) {
    fg_call_fn call = __atomic_load_n(&fg_bridge_call, __ATOMIC_ACQUIRE);
    if (call == NULL) {
        return FG_ERROR_UNINITIALIZED;
    }
    return call(index, args);
}

/* nvmlInit, nvmlInit_v2, nvmlInitWithFlags: load Python and the bridge first when needed. */
int fg_call_init(int index, const uint64_t *args) {
    int rc = 0;
    pthread_mutex_lock(&fg_mutex);
    if (__atomic_load_n(&fg_bridge_call, __ATOMIC_ACQUIRE) == NULL) {
        rc = fg_load_locked();
    }
    pthread_mutex_unlock(&fg_mutex);
    return rc != 0 ? rc : fg_call(index, args);
}

/*
 * nvmlInternalGetExportTable: NVML's private, undocumented entry point. NVIDIA's nvidia-smi calls
 * it right after nvmlInitWithFlags with a 16-byte table id and, when it fails, stops with
 * "Mismatch in versions between nvidia-smi and NVML". The table it gets is a size word (bytes,
 * itself included) followed by function pointers whose meanings NVIDIA does not publish.
 *
 * We answer as the real library does where that can be observed (libnvidia-ml 535.261.03, called
 * before nvmlInit): the one id nvidia-smi asks for succeeds, any other id answers
 * NVML_ERROR_INVALID_ARGUMENT and a NULL table, a NULL argument answers INVALID_ARGUMENT. No
 * nvmlInit is needed. The table we hand out holds only its size word, no entries: we do not
 * know what any entry does, so we offer none. nvidia-smi checks the size before it calls an
 * entry and falls back to the public NVML calls (fakegpu/README.md, "NVIDIA's nvidia-smi").
 */
#define FG_ERROR_INVALID_ARGUMENT 2

/* 6c3efec4-8fc9-4e6c-a327-ee696e12f7c4 in memory order: the id nvidia-smi 535 asks for */
static const unsigned char fg_smi_table_id[16] = {0xc4, 0xfe, 0x3e, 0x6c, 0xc9, 0x8f, 0x6c, 0x4e,
                                                  0xa3, 0x27, 0xee, 0x69, 0x6e, 0x12, 0xf7, 0xc4};
static const uint64_t fg_smi_table[1] = {sizeof fg_smi_table}; /* the size word, no entries */

__attribute__((visibility("default"))) int nvmlInternalGetExportTable(const void **table, const void *id) {
    if (table == NULL || id == NULL) {
        return FG_ERROR_INVALID_ARGUMENT;
    }
    if (memcmp(id, fg_smi_table_id, sizeof fg_smi_table_id) != 0) {
        *table = NULL;
        return FG_ERROR_INVALID_ARGUMENT;
    }
    *table = fg_smi_table;
    return 0;
}

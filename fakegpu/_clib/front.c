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

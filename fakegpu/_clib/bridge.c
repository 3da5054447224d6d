/*
 * fakegpu's bridge from the C library into Python (libfakegpu-bridge.so).
 *
 * Built against one Python's headers and, like an extension module, not linked to libpython:
 * its Py* symbols bind to the Python already in the process (the host's, or the libpython the
 * front loaded RTLD_GLOBAL). fg_bridge_init starts that Python when nobody has (isolated, no
 * signal handlers: the host keeps its own), puts fakegpu on its path (FG_BOOTSTRAP, written at
 * build time) and imports fakegpu._cabi; fg_bridge_call runs one call under the GIL, from any
 * thread.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdio.h>

#include "fakegpu_build.h"

#define FG_ERROR_LIBRARY_NOT_FOUND 12
#define FG_ERROR_UNKNOWN 999

#define FG_EXPORT __attribute__((visibility("default")))

static PyObject *fg_dispatch;

/* The pending Python exception as one line into err; clears it. */
static int fg_python_error(char *err, size_t size, const char *what) {
    PyObject *type = NULL, *value = NULL, *tb = NULL;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *text = value ? PyObject_Str(value) : NULL;
    const char *msg = text ? PyUnicode_AsUTF8(text) : NULL;
    const char *kind = type ? ((PyTypeObject *)type)->tp_name : "error";
    snprintf(err, size, "%s: %s: %s", what, kind, msg ? msg : "(no message)");
    Py_XDECREF(text);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    PyErr_Clear();
    return FG_ERROR_LIBRARY_NOT_FOUND;
}

static int fg_start_python(char *err, size_t size) {
    PyConfig config;
    PyConfig_InitIsolatedConfig(&config);
    config.install_signal_handlers = 0;
    PyStatus status = PyConfig_SetBytesString(&config, &config.home, FG_PYTHON_HOME);
    if (!PyStatus_Exception(status)) {
        status = PyConfig_SetBytesString(&config, &config.program_name, FG_PYTHON_EXE);
    }
    if (!PyStatus_Exception(status)) {
        status = Py_InitializeFromConfig(&config);
    }
    PyConfig_Clear(&config);
    if (PyStatus_Exception(status)) {
        snprintf(err, size, "cannot start Python %s (home %s): %s", FG_PY_VERSION, FG_PYTHON_HOME,
                 status.err_msg ? status.err_msg : "unknown error");
        return FG_ERROR_LIBRARY_NOT_FOUND;
    }
    return 0;
}

static int fg_import(int embedded, char *err, size_t size) {
    PyObject *globals = PyDict_New();
    if (globals == NULL) {
        return fg_python_error(err, size, "cannot set up fakegpu");
    }
    PyDict_SetItemString(globals, "__builtins__", PyEval_GetBuiltins());
    PyObject *flag = PyBool_FromLong(embedded);
    PyDict_SetItemString(globals, "embedded", flag);
    Py_DECREF(flag);
    PyObject *ran = PyRun_String(FG_BOOTSTRAP, Py_file_input, globals, globals);
    Py_DECREF(globals);
    if (ran == NULL) {
        return fg_python_error(err, size, "cannot put fakegpu on the Python path");
    }
    Py_DECREF(ran);
    PyObject *module = PyImport_ImportModule("fakegpu._cabi");
    if (module == NULL) {
        return fg_python_error(err, size, "cannot import fakegpu (run `fakegpu lib` again with the "
                                          "Python that has it installed)");
    }
    PyObject *why = PyObject_CallMethod(module, "attach", "s", FG_TABLE_DIGEST);
    if (why == NULL) {
        Py_DECREF(module);
        return fg_python_error(err, size, "fakegpu refused the library");
    }
    int rc = 0;
    if (why != Py_None) {
        const char *text = PyUnicode_AsUTF8(why);
        snprintf(err, size, "%s", text ? text : "fakegpu refused the library");
        PyErr_Clear();
        rc = FG_ERROR_LIBRARY_NOT_FOUND;
    } else {
        fg_dispatch = PyObject_GetAttrString(module, "dispatch");
        if (fg_dispatch == NULL) {
            rc = fg_python_error(err, size, "fakegpu has no dispatch");
        }
    }
    Py_DECREF(why);
    Py_DECREF(module);
    return rc;
}

FG_EXPORT int fg_bridge_init(char *err, size_t size) {
    if (!Py_IsInitialized()) {
        int rc = fg_start_python(err, size);
        if (rc != 0) {
            return rc;
        }
        rc = fg_import(1, err, size);
        PyEval_SaveThread(); /* the GIL is taken per call from now on, by whichever thread calls */
        return rc;
    }
    PyGILState_STATE gil = PyGILState_Ensure();
    int rc = fg_import(0, err, size);
    PyGILState_Release(gil);
    return rc;
}

FG_EXPORT int fg_bridge_call(int index, const uint64_t *a) {
    PyGILState_STATE gil = PyGILState_Ensure();
    int rc = FG_ERROR_UNKNOWN;
    PyObject *result = PyObject_CallFunction(fg_dispatch, "iKKKKKK", index, (unsigned long long)a[0],
                                             (unsigned long long)a[1], (unsigned long long)a[2],
                                             (unsigned long long)a[3], (unsigned long long)a[4],
                                             (unsigned long long)a[5]);
    if (result != NULL) {
        long value = PyLong_AsLong(result);
        rc = (value == -1 && PyErr_Occurred()) ? FG_ERROR_UNKNOWN : (int)value;
        Py_DECREF(result);
    }
    PyErr_Clear();
    PyGILState_Release(gil);
    return rc;
}

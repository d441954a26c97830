/* What the compiled parts (_gather.c, _decode.c) share: asking for memory ahead, checking an
 * index buffer, and copying records to their slots. Header-only: each module is built alone
 * (setup.py), so everything here is static inline. */
#ifndef SNAPSHOT_CLI_RECORDS_H
#define SNAPSHOT_CLI_RECORDS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(p) __builtin_prefetch((p), 0, 0)
#define PREFETCH_W(p) __builtin_prefetch((p), 1, 0)
#else
#define PREFETCH(p) ((void)(p))
#define PREFETCH_W(p) ((void)(p))
#endif
/* Records ahead whose first bytes are asked for before they are copied: a gather of small
   records waits on memory for each one (random reads), unless the reads overlap. */
#define AHEAD 16

/* A C-contiguous, aligned buffer of int32 or int64 (itemsize 4 or 8) held in view: 0, or -1
   with TypeError naming it (name) and nothing held. */
static inline int
get_ints(PyObject *obj, Py_buffer *view, Py_ssize_t itemsize, const char *name)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        return -1;
    }
    const char *f = view->format == NULL ? "B" : view->format;
    if (*f == '<' || *f == '=' || *f == '@') {
        f++;
    }
    int ok = view->itemsize == itemsize && f[0] != '\0' && f[1] == '\0' &&
             (itemsize == 8 ? (f[0] == 'q' || f[0] == 'l') : (f[0] == 'i' || f[0] == 'l')) &&
             (uintptr_t)view->buf % (uintptr_t)itemsize == 0;
    if (!ok) {
        PyErr_Format(PyExc_TypeError, "%s must be an aligned buffer of int%zd, got format %s",
                     name, 8 * itemsize, view->format == NULL ? "(none)" : view->format);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* Record i of from (width bytes each) to row to[i] of dest, for i < count, the writes asked
   for ahead (a slot window's rows are random places in memory). No bounds are checked:
   the caller has. Without the GIL. */
static inline void
put_records(unsigned char *dest, Py_ssize_t width, const int64_t *to, Py_ssize_t count,
            const unsigned char *from)
{
#define PUT_LOOP(W)                                                                \
    for (Py_ssize_t i = 0; i < count; i++) {                                       \
        if (i + AHEAD < count) {                                                   \
            PREFETCH_W(dest + to[i + AHEAD] * (W));                                \
        }                                                                          \
        memcpy(dest + to[i] * (W), from + i * (W), (size_t)(W));                   \
    }
    switch (width) { /* the common widths as constants: memcpy becomes a few moves */
    case 1: PUT_LOOP(1) break;
    case 2: PUT_LOOP(2) break;
    case 4: PUT_LOOP(4) break;
    case 8: PUT_LOOP(8) break;
    case 16: PUT_LOOP(16) break;
    case 32: PUT_LOOP(32) break;
    default: PUT_LOOP(width)
    }
#undef PUT_LOOP
}

#endif

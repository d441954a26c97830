/* Part of snapshot_cli._gather (included by _gather.c alone): scatter(slots, columns), a
 * slot window's copy of a decoded record batch: record i of each src (src[i*width:(i+1)*
 * width]) to slot slots[i] of its dest (dest[slots[i]*width:...]), without the GIL, the
 * destinations asked for ahead (random writes to a large window each wait on memory unless
 * they overlap; put_records of _records.h).
 */
#ifndef SNAPSHOT_CLI_GATHER_SCATTER_H
#define SNAPSHOT_CLI_GATHER_SCATTER_H

#include "_records.h"

#define SCATTER_MAX 64 /* columns of one scatter call */

/* scatter(slots, columns): for each (dest, width, src) of columns, record i of src (width
   bytes) to slot slots[i] of dest, the GIL let go once for all of them (a read thread calls
   this once per record batch: each hand-back of the GIL costs it a wait while the consumer
   runs Python). Nothing is copied unless every slot is inside every dest, every src holds
   its records and no dest overlaps slots. */
static PyObject *
scatter(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *slots_obj, *cols_obj;
    if (!PyArg_ParseTuple(args, "OO:scatter", &slots_obj, &cols_obj)) {
        return NULL;
    }
    /* a tuple of its own: a width's __index__ may run Python code that changes a list */
    PyObject *fast = PySequence_Tuple(cols_obj);
    if (fast == NULL) {
        return NULL;
    }
    const Py_ssize_t ncols = PyTuple_GET_SIZE(fast);
    if (ncols > SCATTER_MAX) {
        PyErr_Format(PyExc_ValueError, "at most %d columns, got %zd", SCATTER_MAX, ncols);
        Py_DECREF(fast);
        return NULL;
    }
    Py_buffer slots, dest[SCATTER_MAX], src[SCATTER_MAX];
    PyObject *dest_obj[SCATTER_MAX], *src_obj[SCATTER_MAX]; /* borrowed: fast holds them */
    Py_ssize_t width[SCATTER_MAX];
    Py_ssize_t held = 0; /* columns whose two views are held */
    int have_slots = 0;
    PyObject *result = NULL;
    PyObject **items = &PyTuple_GET_ITEM(fast, 0);
    /* Every column converted and every view taken (a width's __index__, or a buffer's, may
       run Python code that changes the slots) before the slots are read and checked: from
       then on no Python code runs until the copy is done. */
    for (Py_ssize_t c = 0; c < ncols; c++) {
        if (!PyArg_ParseTuple(items[c], "OnO:scatter column", &dest_obj[c], &width[c],
                              &src_obj[c])) {
            goto done;
        }
        if (width[c] <= 0) {
            PyErr_Format(PyExc_ValueError, "column %zd: width must be > 0, got %zd", c,
                         width[c]);
            goto done;
        }
    }
    for (; held < ncols; held++) {
        if (PyObject_GetBuffer(dest_obj[held], &dest[held],
                               PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
            goto done;
        }
        if (PyObject_GetBuffer(src_obj[held], &src[held], PyBUF_C_CONTIGUOUS) < 0) {
            PyBuffer_Release(&dest[held]);
            goto done;
        }
    }
    if (get_ints(slots_obj, &slots, 8, "slots") < 0) {
        goto done;
    }
    have_slots = 1;
    const Py_ssize_t count = slots.len / 8;
    const int64_t *to = (const int64_t *)slots.buf;
    Py_ssize_t least = count ? to[0] : 0, most = least;
    for (Py_ssize_t i = 1; i < count; i++) {
        least = to[i] < least ? to[i] : least;
        most = to[i] > most ? to[i] : most;
    }
    for (Py_ssize_t c = 0; c < ncols; c++) {
        const Py_ssize_t w = width[c], capacity = dest[c].len / w;
        if (overlap(&dest[c], &slots)) {
            PyErr_Format(PyExc_ValueError, "column %zd: dest overlaps slots", c);
        } else if (src[c].len / w < count) {
            PyErr_Format(PyExc_ValueError,
                         "column %zd: src holds %zd bytes, %zd records of %zd need more", c,
                         src[c].len, count, w);
        } else if (count && (least < 0 || most >= capacity)) {
            PyErr_Format(PyExc_IndexError, "column %zd: slot %lld of %zd", c,
                         (long long)(least < 0 ? least : most), capacity);
        } else {
            continue;
        }
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t c = 0; c < ncols; c++) {
        put_records((unsigned char *)dest[c].buf, dest[c].len, width[c], to, count,
                    (const unsigned char *)src[c].buf);
    }
    Py_END_ALLOW_THREADS
    Py_INCREF(Py_None);
    result = Py_None;
done:
    for (Py_ssize_t c = 0; c < held; c++) {
        PyBuffer_Release(&src[c]);
        PyBuffer_Release(&dest[c]);
    }
    if (have_slots) {
        PyBuffer_Release(&slots);
    }
    Py_DECREF(fast);
    return result;
}

#endif /* SNAPSHOT_CLI_GATHER_SCATTER_H */

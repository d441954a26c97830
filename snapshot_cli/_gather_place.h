/* Part of snapshot_cli._gather (included by _gather.c alone): place(seg, row, slots,
 * lengths), a gathered window's placement: each record's segment and row noted at its slot,
 * the whole window in one pass without the GIL.
 */
#ifndef SNAPSHOT_CLI_GATHER_PLACE_H
#define SNAPSHOT_CLI_GATHER_PLACE_H

#include "_records.h"

/* place(seg, row, slots, lengths): the records of consecutive segments (lengths[k] records
   each, in read order) noted at their slots: record r, the j-th of segment k, goes to slot
   s = slots[r] (slots None: s = r), where seg[s] = k and row[s] = j. A gathered window's
   placement of a whole window in one pass (numpy needs a repeat, a subtraction and two
   fancy assignments, each over every record, with their temporaries). Nothing is written
   unless every length is >= 0, they add up to at most len(seg) == len(row) (and len(slots))
   and every slot is inside seg. */
static PyObject *
place(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *seg_obj, *row_obj, *slots_obj, *lengths_obj;
    if (!PyArg_ParseTuple(args, "OOOO:place", &seg_obj, &row_obj, &slots_obj, &lengths_obj)) {
        return NULL;
    }
    Py_buffer seg, row, slots, lengths;
    int held = 0; /* buffers acquired, in that order (slots only when not None) */
    const int with_slots = slots_obj != Py_None;
    PyObject *result = NULL;
    if (get_ints(seg_obj, &seg, 4, "seg") < 0) goto done;
    held = 1;
    if (get_ints(row_obj, &row, 4, "row") < 0) goto done;
    held = 2;
    if (get_ints(lengths_obj, &lengths, 8, "lengths") < 0) goto done;
    held = 3;
    if (with_slots) {
        if (get_ints(slots_obj, &slots, 8, "slots") < 0) goto done;
        held = 4;
    }
    if (seg.readonly || row.readonly) {
        PyErr_SetString(PyExc_ValueError, "seg and row must be writable");
        goto done;
    }
    const Py_ssize_t capacity = seg.len / 4, nseg = lengths.len / 8;
    if (row.len != seg.len) {
        PyErr_SetString(PyExc_ValueError, "seg and row must have equal lengths");
        goto done;
    }
    if (overlap(&seg, &row) || overlap(&seg, &lengths) || overlap(&row, &lengths) ||
        (with_slots && (overlap(&seg, &slots) || overlap(&row, &slots)))) {
        PyErr_SetString(PyExc_ValueError, "seg and row must not overlap each other or the "
                        "indices");
        goto done;
    }
    if (nseg > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "%zd segments: at most %d", nseg, INT32_MAX);
        goto done;
    }
    const int64_t *len = (const int64_t *)lengths.buf;
    Py_ssize_t total = 0;
    for (Py_ssize_t k = 0; k < nseg; k++) {
        if (len[k] < 0 || len[k] > capacity - total || len[k] > (int64_t)INT32_MAX + 1) {
            PyErr_Format(PyExc_ValueError, "segment %zd: %lld records, after %zd, where %zd "
                         "fit", k, (long long)len[k], total, capacity);
            goto done;
        }
        total += (Py_ssize_t)len[k];
    }
    const int64_t *to = with_slots ? (const int64_t *)slots.buf : NULL;
    if (with_slots) {
        if (slots.len / 8 < total) {
            PyErr_Format(PyExc_ValueError, "%zd slots for %zd records", slots.len / 8, total);
            goto done;
        }
        for (Py_ssize_t r = 0; r < total; r++) {
            if (to[r] < 0 || to[r] >= capacity) {
                PyErr_Format(PyExc_IndexError, "record %zd: slot %lld of %zd", r,
                             (long long)to[r], capacity);
                goto done;
            }
        }
    }
    int32_t *sg = (int32_t *)seg.buf, *rw = (int32_t *)row.buf;
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t r = 0;
    for (Py_ssize_t k = 0; k < nseg && r < total; k++) {
        /* read again without the GIL: kept inside what was checked, whatever happened */
        const Py_ssize_t n = len[k] < 0 ? 0 : len[k] > total - r ? total - r : (Py_ssize_t)len[k];
        if (to == NULL) {
            for (Py_ssize_t j = 0; j < n; j++, r++) {
                sg[r] = (int32_t)k;
                rw[r] = (int32_t)j;
            }
            continue;
        }
        for (Py_ssize_t j = 0; j < n; j++, r++) {
            if (r + AHEAD < total) {
                PREFETCH_W(sg + to[r + AHEAD]);
                PREFETCH_W(rw + to[r + AHEAD]);
            }
            sg[to[r]] = (int32_t)k;
            rw[to[r]] = (int32_t)j;
        }
    }
    Py_END_ALLOW_THREADS
    Py_INCREF(Py_None);
    result = Py_None;
done:
    if (held > 3) PyBuffer_Release(&slots);
    if (held > 2) PyBuffer_Release(&lengths);
    if (held > 1) PyBuffer_Release(&row);
    if (held > 0) PyBuffer_Release(&seg);
    return result;
}

#endif /* SNAPSHOT_CLI_GATHER_PLACE_H */

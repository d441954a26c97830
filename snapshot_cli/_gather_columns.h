/* Part of snapshot_cli._gather (included by _gather.c alone): a gather of records from a
 * Sources object into one or more columns, the GIL let go once: each column's buffers taken
 * and their sizes checked (column_open), every record checked inside its source
 * (column_check), then copied (column_copy, the hot loop: COPY_LOOP with the common widths
 * as constants); gather_columns does all of it for Sources.gather and .gather_columns.
 */
#ifndef SNAPSHOT_CLI_GATHER_COLUMNS_H
#define SNAPSHOT_CLI_GATHER_COLUMNS_H

#include "_records.h"
#include "_gather_sources.h"

/* Record i: out at dest (moving on by width, and to the next batch every batch_rows
   records), from source byte base[seg[i]] + row[i] * W of source src[seg[i]]. */
#define COPY_LOOP(W)                                                                   \
    for (Py_ssize_t i = 0; i < count; i++) {                                           \
        if (i + AHEAD < count) {                                                       \
            const int32_t ka = seg[i + AHEAD];                                         \
            PREFETCH(bases[src[ka]] + base[ka] + (int64_t)row[i + AHEAD] * (W));       \
        }                                                                              \
        const int32_t k = seg[i];                                                      \
        memcpy(out, bases[src[k]] + base[k] + (int64_t)row[i] * (W), (size_t)(W));    \
        out += (W);                                                                    \
        if (++in_batch == batch_rows) {                                                \
            in_batch = 0;                                                              \
            batch_start += batch_stride;                                               \
            out = batch_start;                                                         \
        }                                                                              \
    }

/* One column of a gather: where its records go (out, batches batch_stride bytes apart), how
   wide they are, and where each segment's records are (seg_source, seg_base). */
typedef struct {
    Py_buffer out, src, base;
    int held; /* buffers acquired */
    Py_ssize_t width, stride;
} Column;

static void
column_close(Column *c)
{
    if (c->held > 2) PyBuffer_Release(&c->base);
    if (c->held > 1) PyBuffer_Release(&c->src);
    if (c->held > 0) PyBuffer_Release(&c->out);
    c->held = 0;
}

/* Acquire a column's buffers and check their sizes against count records in batches of
   batch_rows (stride 0: batch_rows * width); -1 with an exception set otherwise. Their
   contents are checked by column_check, once every column's buffers are held (taking a view
   may run Python code, which must find nothing checked yet). */
static int
column_open(Column *c, PyObject *out, Py_ssize_t width, PyObject *src, PyObject *base,
            Py_ssize_t stride, Py_ssize_t count, Py_ssize_t batch_rows)
{
    c->held = 0;
    c->width = width;
    if (width <= 0) {
        PyErr_Format(PyExc_ValueError, "width must be > 0, got %zd", width);
        return -1;
    }
    if (batch_rows > PY_SSIZE_T_MAX / width) {
        PyErr_Format(PyExc_ValueError, "batches of %zd records of %zd bytes are too large",
                     batch_rows, width);
        return -1;
    }
    c->stride = stride > 0 ? stride : batch_rows * width;
    if (PyObject_GetBuffer(out, &c->out, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) return -1;
    c->held = 1;
    if (get_ints(src, &c->src, 8, "seg_source") < 0) return -1;
    c->held = 2;
    if (get_ints(base, &c->base, 8, "seg_base") < 0) return -1;
    c->held = 3;
    if (c->base.len != c->src.len) {
        PyErr_SetString(PyExc_ValueError, "seg_source and seg_base must have equal lengths");
        return -1;
    }
    if (c->stride < batch_rows * width) {
        PyErr_Format(PyExc_ValueError, "batches of %zd records of %zd bytes cannot start %zd "
                     "bytes apart", batch_rows, width, c->stride);
        return -1;
    }
    if (count > 0) {
        const Py_ssize_t last = count - 1, whole = last / batch_rows;
        const Py_ssize_t tail = (last % batch_rows + 1) * width; /* <= batch_rows * width */
        if (whole > (PY_SSIZE_T_MAX - tail) / c->stride) {
            PyErr_Format(PyExc_ValueError, "%zd records in batches %zd bytes apart are too "
                         "large", count, c->stride);
            return -1;
        }
        const Py_ssize_t need = whole * c->stride + tail;
        if (c->out.len < need) {
            PyErr_Format(PyExc_ValueError, "out holds %zd bytes, %zd records need %zd",
                         c->out.len, count, need);
            return -1;
        }
    }
    return 0;
}

/* Every record of an opened column inside its source: 0, or -1 with IndexError. Runs no
   Python code. */
static int
column_check(SourcesObject *self, const Column *c, const int32_t *seg, const int32_t *row,
             Py_ssize_t count)
{
    const Py_ssize_t segments = c->src.len / 8, width = c->width;
    const int64_t *srcs = (const int64_t *)c->src.buf, *bases = (const int64_t *)c->base.buf;
    for (Py_ssize_t i = 0; i < count; i++) {
        const int32_t k = seg[i];
        if (k < 0 || k >= segments) {
            PyErr_Format(PyExc_IndexError, "record %zd: segment %d of %zd", i, (int)k,
                         segments);
            return -1;
        }
        const int64_t s = srcs[k];
        if (s < 0 || s >= self->n) {
            PyErr_Format(PyExc_IndexError, "record %zd: source %lld of %zd", i, (long long)s,
                         self->n);
            return -1;
        }
        /* base + row * width + width <= len, worked out so that nothing overflows */
        const int64_t len = self->views[s].len;
        if (row[i] < 0 || bases[k] < 0 || len < width || bases[k] > len - width ||
            row[i] > (len - width - bases[k]) / width) {
            PyErr_Format(PyExc_IndexError,
                         "record %zd: row %d of a segment at byte %lld, %zd bytes each, is "
                         "outside source %lld of %lld bytes", i, (int)row[i],
                         (long long)bases[k], width, (long long)s, (long long)len);
            return -1;
        }
    }
    return 0;
}

/* The copy of one checked column (without the GIL). */
static void
column_copy(const Column *c, const char **bases, const int32_t *seg, const int32_t *row,
            Py_ssize_t count, Py_ssize_t batch_rows)
{
    const int64_t *src = (const int64_t *)c->src.buf, *base = (const int64_t *)c->base.buf;
    const Py_ssize_t width = c->width, batch_stride = c->stride;
    char *batch_start = (char *)c->out.buf, *out = batch_start;
    Py_ssize_t in_batch = 0;
    switch (width) { /* constant widths: the copies are single moves */
    case 1: COPY_LOOP(1) break;
    case 2: COPY_LOOP(2) break;
    case 4: COPY_LOOP(4) break;
    case 8: COPY_LOOP(8) break;
    case 16: COPY_LOOP(16) break;
    case 32: COPY_LOOP(32) break;
    default: COPY_LOOP(width)
    }
}

/* Gather the columns (each (out, width, seg_source, seg_base, batch_stride)) of count
   records whose segment and row are seg and row, in batches of batch_rows records: one
   release of the GIL for all of them. */
static PyObject *
gather_columns(SourcesObject *self, PyObject *columns, PyObject *seg_obj, PyObject *row_obj,
               Py_ssize_t batch_rows)
{
    /* A tuple of our own, every column parsed first: converting a width or stride may run
       Python code (__index__), which must find nothing taken or checked yet. */
    PyObject *fast = PySequence_Tuple(columns);
    if (fast == NULL) return NULL;
    const Py_ssize_t ncol = PyTuple_GET_SIZE(fast);
    Column *cols = PyMem_Calloc(ncol > 0 ? (size_t)ncol : 1, sizeof(Column));
    PyObject **objs = PyMem_Calloc(ncol > 0 ? 3 * (size_t)ncol : 1, sizeof(PyObject *));
    Py_ssize_t *ints = PyMem_Calloc(ncol > 0 ? 2 * (size_t)ncol : 1, sizeof(Py_ssize_t));
    const char **bases = NULL;
    Py_buffer seg, row;
    int have_seg = 0, have_row = 0;
    PyObject *result = NULL;
    Py_ssize_t opened = 0;
    if (cols == NULL || objs == NULL || ints == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t j = 0; j < ncol; j++) { /* borrowed: the tuples are held by fast */
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(fast, j),
                              "OnOOn;a column is (out, width, seg_source, seg_base, "
                              "batch_stride)", &objs[3 * j], &ints[2 * j], &objs[3 * j + 1],
                              &objs[3 * j + 2], &ints[2 * j + 1])) {
            goto done;
        }
    }
    if (get_ints(seg_obj, &seg, 4, "seg") < 0) goto done;
    have_seg = 1;
    if (get_ints(row_obj, &row, 4, "row") < 0) goto done;
    have_row = 1;
    if (row.len != seg.len) {
        PyErr_SetString(PyExc_ValueError, "seg and row must have equal lengths");
        goto done;
    }
    const Py_ssize_t count = seg.len / 4;
    if (batch_rows <= 0) batch_rows = count > 0 ? count : 1; /* one batch */
    const int32_t *segs = (const int32_t *)seg.buf, *rows = (const int32_t *)row.buf;
    for (; opened < ncol; opened++) {
        if (column_open(&cols[opened], objs[3 * opened], ints[2 * opened],
                        objs[3 * opened + 1], objs[3 * opened + 2], ints[2 * opened + 1], count,
                        batch_rows) < 0) {
            opened++; /* its buffers so far are released below */
            goto done;
        }
    }
    /* Every buffer held: from here no Python code runs (it might release the sources or
       change the indices) until the copy is done. */
    if (self->views == NULL || self->released) {
        PyErr_SetString(PyExc_ValueError, "gather from released sources");
        goto done;
    }
    for (Py_ssize_t j = 0; j < ncol; j++) {
        if (column_check(self, &cols[j], segs, rows, count) < 0) goto done;
    }
    bases = PyMem_Malloc((self->n > 0 ? (size_t)self->n : 1) * sizeof(char *));
    if (bases == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t j = 0; j < ncol; j++) { /* no copy may write over what is read */
        int bad = overlap(&cols[j].out, &seg) || overlap(&cols[j].out, &row);
        for (Py_ssize_t i = 0; i < ncol && !bad; i++) {
            bad = overlap(&cols[j].out, &cols[i].src) || overlap(&cols[j].out, &cols[i].base) ||
                  (i != j && overlap(&cols[j].out, &cols[i].out));
        }
        if (bad) {
            PyErr_Format(PyExc_ValueError, "column %zd: out overlaps the indices or another "
                         "column's out", j);
            goto done;
        }
    }
    for (Py_ssize_t s = 0; s < self->n; s++) {
        bases[s] = (const char *)self->views[s].buf;
    }
    self->active++;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t j = 0; j < ncol; j++) {
        column_copy(&cols[j], bases, segs, rows, count, batch_rows);
    }
    Py_END_ALLOW_THREADS
    self->active--;
    if (self->released && self->active == 0) {
        drop_views(self);
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    for (Py_ssize_t j = 0; j < opened; j++) column_close(&cols[j]);
    if (have_row) PyBuffer_Release(&row);
    if (have_seg) PyBuffer_Release(&seg);
    PyMem_Free((void *)bases);
    PyMem_Free(ints);
    PyMem_Free(objs);
    PyMem_Free(cols);
    Py_DECREF(fast);
    return result;
}

#endif /* SNAPSHOT_CLI_GATHER_COLUMNS_H */

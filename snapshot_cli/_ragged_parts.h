/* Part of snapshot_cli._ragged (included by _ragged.c alone, after its offset helpers): a
 * Parts object, a window's variable-width column as the record batches' own arrays, each
 * held in view, and the takes of _ragged.c across them.
 *
 *   parts = Parts(offsets_list, data_list)     # part k: offsets_list[k], data_list[k]
 *   total = parts.bounds(rows, out_bounds)
 *   parts.take_values(width, rows, out)
 *   parts.take_text(rows, binary) -> list
 *
 * Window record r is record r - starts[k] of the part k whose records hold it (the parts one
 * after the other). Before Parts the window joined its parts into one Arrow array first: a
 * copy of every value into fresh memory each window, whose pages the kernel zeroed (a
 * shuffled epoch of 20,000 records of 10-50 KB bytes: 40 % of the CPU in page faults).
 * Every row is checked against the records and its part's offsets against that part's
 * values, as the one-array takes check theirs.
 */
#ifndef SNAPSHOT_CLI_RAGGED_PARTS_H
#define SNAPSHOT_CLI_RAGGED_PARTS_H

/* Records a step of the index: record r's part is found from that of record r & ~(STEP - 1)
   by at most STEP steps, one where parts hold STEP records or more (a binary search over
   the parts cost ~20 % of a shuffled batch of text: a mispredicted branch per step). */
#define STEP_SHIFT 6
#define STEP ((int64_t)1 << STEP_SHIFT)

typedef struct {
    PyObject_HEAD
    Py_ssize_t n;       /* parts */
    Py_buffer *off;     /* n offsets views (int32 or int64) */
    Py_buffer *data;    /* n views of the values they index */
    int64_t *starts;    /* n + 1: the first window record of each part, then the records */
    Py_ssize_t *index;  /* the part of record k * STEP, for every k */
} PartsObject;

static void
Parts_drop(PartsObject *self)
{
    for (Py_ssize_t k = 0; k < self->n; k++) {
        if (self->off != NULL && self->off[k].obj != NULL) {
            PyBuffer_Release(&self->off[k]);
        }
        if (self->data != NULL && self->data[k].obj != NULL) {
            PyBuffer_Release(&self->data[k]);
        }
    }
    PyMem_Free(self->off);
    PyMem_Free(self->data);
    PyMem_Free(self->starts);
    PyMem_Free(self->index);
    self->off = self->data = NULL;
    self->starts = NULL;
    self->index = NULL;
    self->n = 0;
}

static void
Parts_dealloc(PartsObject *self)
{
    Parts_drop(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
Parts_init(PartsObject *self, PyObject *args, PyObject *kwds)
{
    PyObject *offs_obj, *data_obj;
    static char *kwlist[] = {"offsets", "data", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO:Parts", kwlist, &offs_obj, &data_obj)) {
        return -1;
    }
    if (self->starts != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Parts is already initialised");
        return -1;
    }
    PyObject *offs = PySequence_Fast(offs_obj, "offsets must be a sequence of buffers");
    PyObject *data = offs == NULL ? NULL
                                  : PySequence_Fast(data_obj, "data must be a sequence of buffers");
    int ok = data != NULL;
    const Py_ssize_t n = ok ? PySequence_Fast_GET_SIZE(offs) : 0;
    if (ok && PySequence_Fast_GET_SIZE(data) != n) {
        PyErr_Format(PyExc_ValueError, "%zd offsets but %zd data buffers", n,
                     PySequence_Fast_GET_SIZE(data));
        ok = 0;
    }
    if (ok) {
        self->off = PyMem_Calloc(n > 0 ? (size_t)n : 1, sizeof(Py_buffer));
        self->data = PyMem_Calloc(n > 0 ? (size_t)n : 1, sizeof(Py_buffer));
        self->starts = PyMem_Calloc((size_t)n + 1, sizeof(int64_t));
        if (self->off == NULL || self->data == NULL || self->starts == NULL) {
            PyErr_NoMemory();
            ok = 0;
        }
    }
    for (Py_ssize_t k = 0; ok && k < n; k++) {
        self->n = k + 1; /* (what Parts_drop releases) */
        PyObject *o = PySequence_Fast_GET_ITEM(offs, k), *d = PySequence_Fast_GET_ITEM(data, k);
        if (get_offsets(o, &self->off[k]) < 0) {
            ok = 0;
        } else if (PyObject_GetBuffer(d, &self->data[k], PyBUF_C_CONTIGUOUS) < 0) {
            ok = 0;
        } else {
            const int64_t records = self->off[k].len / self->off[k].itemsize - 1;
            ok = add_fits(self->starts[k], records, &self->starts[k + 1]);
            if (!ok) {
                PyErr_SetString(PyExc_OverflowError, "the parts hold over 2**63 - 1 records");
            }
        }
    }
    Py_XDECREF(data);
    Py_XDECREF(offs);
    if (ok) {
        const int64_t steps = (self->starts[n] + STEP - 1) >> STEP_SHIFT;
        self->index = PyMem_Malloc((steps > 0 ? (size_t)steps : 1) * sizeof(Py_ssize_t));
        if (self->index == NULL) {
            PyErr_NoMemory();
            ok = 0;
        }
        for (Py_ssize_t k = 0, step = 0; ok && step < steps; step++) {
            while (self->starts[k + 1] <= step * STEP) { /* (the first part holding it) */
                k++;
            }
            self->index[step] = k;
        }
    }
    if (!ok) {
        Parts_drop(self);
    }
    return ok ? 0 : -1;
}

static Py_ssize_t
Parts_len(PartsObject *self)
{
    return self->starts == NULL ? 0 : (Py_ssize_t)self->starts[self->n];
}

/* For each of the n rows: its part (part[i]) and record there (local[i]), every row checked
   against the records and its offsets against its part's values of width bytes: 0, or -1
   with IndexError/ValueError naming the window's row. */
static int
parts_locate(const PartsObject *self, const int64_t *rows, Py_ssize_t n, Py_ssize_t width,
             Py_ssize_t *part, int64_t *local)
{
    const int64_t total = self->starts == NULL ? 0 : self->starts[self->n];
    Py_ssize_t k = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const int64_t r = rows[i];
        if (r < 0 || r >= total) {
            PyErr_Format(PyExc_IndexError, "row %lld of a column of %lld records",
                         (long long)r, (long long)total);
            return -1;
        }
        if (r < self->starts[k] || r >= self->starts[k + 1]) { /* (rows in order: no search) */
            k = self->index[r >> STEP_SHIFT];
            while (self->starts[k + 1] <= r) {
                k++;
            }
        }
        const Py_buffer *off = &self->off[k];
        const int64_t at = r - self->starts[k];
        const int64_t start = offset_at(off, at), end = offset_at(off, at + 1);
        if (start < 0 || end < start || end > (int64_t)(self->data[k].len / width)) {
            PyErr_Format(PyExc_ValueError, "record %lld spans [%lld, %lld) of the %lld values "
                         "of its part: damaged offsets", (long long)r, (long long)start,
                         (long long)end, (long long)(self->data[k].len / width));
            return -1;
        }
        part[i] = k;
        local[i] = at;
    }
    return 0;
}

/* The rows (int64) in view and each one's part and record: 0, or -1 with nothing held. */
static int
parts_rows(const PartsObject *self, PyObject *rows_obj, Py_ssize_t width, Py_buffer *rows,
           Py_ssize_t **part, int64_t **local)
{
    if (get_ints(rows_obj, rows, 8, "rows") < 0) {
        return -1;
    }
    const Py_ssize_t n = rows->len / 8;
    *part = PyMem_Malloc((n > 0 ? (size_t)n : 1) * sizeof(Py_ssize_t));
    *local = PyMem_Malloc((n > 0 ? (size_t)n : 1) * sizeof(int64_t));
    if (*part == NULL || *local == NULL) {
        PyErr_NoMemory();
    } else if (parts_locate(self, rows->buf, n, width, *part, *local) == 0) {
        return 0;
    }
    PyMem_Free(*part);
    PyMem_Free(*local);
    PyBuffer_Release(rows);
    return -1;
}

/* The span of taken record i: its part's offsets at local[i] and local[i] + 1. */
#define SPAN_START(i) offset_at(&self->off[part[i]], local[i])
#define SPAN_END(i) offset_at(&self->off[part[i]], local[i] + 1)

/* The values of the n taken records added up (each checked by parts_locate) into *total,
   and bounds[i] (NULL: not kept) where taken record i starts: 0, or -1 with ValueError. */
static int
parts_spans(const PartsObject *self, const Py_ssize_t *part, const int64_t *local,
            Py_ssize_t n, int64_t *bounds, int64_t *total)
{
    int64_t sum = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (bounds != NULL) {
            bounds[i] = sum;
        }
        if (!add_fits(sum, SPAN_END(i) - SPAN_START(i), &sum)) {
            PyErr_Format(PyExc_ValueError, "the %zd records taken hold more than 2**63 - 1 "
                         "values: damaged offsets", n);
            return -1;
        }
    }
    if (bounds != NULL) {
        bounds[n] = sum;
    }
    *total = sum;
    return 0;
}

static PyObject *
Parts_bounds(PartsObject *self, PyObject *args)
{
    PyObject *rows_obj, *out_obj;
    if (!PyArg_ParseTuple(args, "OO:bounds", &rows_obj, &out_obj)) {
        return NULL;
    }
    Py_buffer rows, out;
    Py_ssize_t *part;
    int64_t *local, total;
    if (parts_rows(self, rows_obj, 1, &rows, &part, &local) < 0) {
        return NULL;
    }
    PyObject *result = NULL;
    const Py_ssize_t n = rows.len / 8;
    if (get_ints(out_obj, &out, 8, "out_bounds") == 0) {
        if (out.readonly || out.len / 8 != n + 1) {
            PyErr_Format(PyExc_ValueError, "out_bounds must be writable and hold %zd items",
                         n + 1);
        } else if (overlap(&out, &rows)) {
            PyErr_SetString(PyExc_ValueError, "out_bounds must not overlap rows");
        } else if (parts_spans(self, part, local, n, out.buf, &total) == 0) {
            result = PyLong_FromLongLong(total);
        }
        PyBuffer_Release(&out);
    }
    PyMem_Free(part);
    PyMem_Free(local);
    PyBuffer_Release(&rows);
    return result;
}

static PyObject *
Parts_take_values(PartsObject *self, PyObject *args)
{
    PyObject *rows_obj, *out_obj;
    Py_ssize_t width;
    if (!PyArg_ParseTuple(args, "nOO:take_values", &width, &rows_obj, &out_obj)) {
        return NULL;
    }
    if (width <= 0) {
        PyErr_Format(PyExc_ValueError, "width must be positive, got %zd", width);
        return NULL;
    }
    Py_buffer rows, out;
    Py_ssize_t *part;
    int64_t *local, total;
    if (parts_rows(self, rows_obj, width, &rows, &part, &local) < 0) {
        return NULL;
    }
    const Py_ssize_t n = rows.len / 8;
    int ok = PyObject_GetBuffer(out_obj, &out, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) == 0;
    int held = ok;
    for (Py_ssize_t k = 0; ok && k < self->n; k++) {
        if (overlap(&out, &self->off[k]) || overlap(&out, &self->data[k])) {
            PyErr_SetString(PyExc_ValueError, "out must not overlap the parts' buffers");
            ok = 0; /* (they are read while out is written) */
        }
    }
    ok = ok && parts_spans(self, part, local, n, NULL, &total) == 0;
    ok = ok && out_fits(total, width, out.len);
    if (ok) {
        unsigned char *dest = out.buf;
        PyThreadState *released = out.len >= RELEASE_MIN ? PyEval_SaveThread() : NULL;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (i + AHEAD < n) {
                const Py_ssize_t a = i + AHEAD;
                PREFETCH((const unsigned char *)self->data[part[a]].buf + SPAN_START(a) * width);
            }
            const int64_t start = SPAN_START(i);
            const size_t bytes = (size_t)((SPAN_END(i) - start) * width);
            memcpy(dest, (const unsigned char *)self->data[part[i]].buf + start * width, bytes);
            dest += bytes;
        }
        if (released != NULL) {
            PyEval_RestoreThread(released);
        }
    }
    if (held) {
        PyBuffer_Release(&out);
    }
    PyMem_Free(part);
    PyMem_Free(local);
    PyBuffer_Release(&rows);
    if (!ok) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
Parts_take_text(PartsObject *self, PyObject *args)
{
    PyObject *rows_obj;
    int binary;
    if (!PyArg_ParseTuple(args, "Op:take_text", &rows_obj, &binary)) {
        return NULL;
    }
    Py_buffer rows;
    Py_ssize_t *part;
    int64_t *local;
    if (parts_rows(self, rows_obj, 1, &rows, &part, &local) < 0) {
        return NULL;
    }
    const Py_ssize_t n = rows.len / 8;
    PyObject *list = PyList_New(n);
    for (Py_ssize_t i = 0; list != NULL && i < n; i++) {
        if (i + AHEAD < n) {
            PREFETCH((const char *)self->data[part[i + AHEAD]].buf + SPAN_START(i + AHEAD));
        }
        const char *src = (const char *)self->data[part[i]].buf + SPAN_START(i);
        const Py_ssize_t size = (Py_ssize_t)(SPAN_END(i) - SPAN_START(i));
        PyObject *item = binary ? PyBytes_FromStringAndSize(src, size)
                                : PyUnicode_DecodeUTF8(src, size, "strict");
        if (item == NULL) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, i, item);
    }
    PyMem_Free(part);
    PyMem_Free(local);
    PyBuffer_Release(&rows);
    return list;
}

#undef SPAN_START
#undef SPAN_END
#undef STEP
#undef STEP_SHIFT

static PyMethodDef Parts_methods[] = {
    {"bounds", (PyCFunction)Parts_bounds, METH_VARARGS,
     "bounds(rows, out_bounds) -> total: where each taken record starts"},
    {"take_values", (PyCFunction)Parts_take_values, METH_VARARGS,
     "take_values(width, rows, out): the records' values into out"},
    {"take_text", (PyCFunction)Parts_take_text, METH_VARARGS,
     "take_text(rows, binary) -> list of str (or bytes)"},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods Parts_as_sequence = {
    .sq_length = (lenfunc)Parts_len,
};

static PyTypeObject PartsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "snapshot_cli._ragged.Parts",
    .tp_doc = "Parts(offsets, data): a column as consecutive arrays, each held in view",
    .tp_basicsize = sizeof(PartsObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Parts_init,
    .tp_dealloc = (destructor)Parts_dealloc,
    .tp_methods = Parts_methods,
    .tp_as_sequence = &Parts_as_sequence,
};

#endif

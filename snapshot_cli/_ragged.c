/* snapshot_cli._ragged: a shuffled batch of a variable-width column (token ids, text), taken
 * from a window's Arrow array in C.
 *
 *   total = bounds(offsets, rows, out_bounds)          # where each taken record starts
 *   take_values(offsets, values, width, rows, out)     # their values, one copy
 *   take_text(offsets, data, rows, binary)             # a list of str (or bytes)
 *   Parts(offsets_list, data_list)                     # the same takes across arrays
 *
 * offsets is the column's Arrow offsets (int32, or int64 for large types; n + 1 of them for n
 * records), values or data the buffer they index (width bytes a value; data in bytes), rows
 * the records to take (int64). Record rows[i] is values[offsets[r]:offsets[r + 1]]. In numpy
 * the same take needs a repeat, an arange and a fancy index over every value of the batch
 * (temporaries of ~100 KiB a batch of 256 token lists: 150 us a batch, measured, against
 * ~10 here); Arrow's take of text, then to_pylist, made each str through an Arrow scalar.
 *
 * Nothing is read outside the buffers: every row is checked against the offsets, and every
 * record's offsets against the values (IndexError or ValueError naming the row; a damaged
 * record batch read with verify=False can hold anything), their sums without overflow. No
 * other thread may change the buffers during a call (the loader's window is its own and
 * read-only once whole).
 */
#include "_records.h"

/* Offsets (int32 or int64) as int64: record r of off spans [start, end). */
static inline int64_t
offset_at(const Py_buffer *off, Py_ssize_t i)
{
    return off->itemsize == 8 ? ((const int64_t *)off->buf)[i]
                              : (int64_t)((const int32_t *)off->buf)[i];
}

/* The offsets buffer in view (int32 or int64, at least one item), or -1 with an error. */
static int
get_offsets(PyObject *obj, Py_buffer *view)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        return -1;
    }
    const Py_ssize_t itemsize = view->itemsize;
    PyBuffer_Release(view);
    if (itemsize != 4 && itemsize != 8) {
        PyErr_Format(PyExc_TypeError, "offsets must be int32 or int64, got %zd-byte items",
                     itemsize);
        return -1;
    }
    if (get_ints(obj, view, itemsize, "offsets") < 0) {
        return -1;
    }
    if (view->len < itemsize) {
        PyErr_SetString(PyExc_ValueError, "offsets must hold at least one item");
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* Every row of rows in [0, records) and each record's span inside [0, limit) units: 0, or
   -1 with IndexError/ValueError naming the first that is not. */
static int
check_rows(const Py_buffer *off, const int64_t *rows, Py_ssize_t n, int64_t limit)
{
    const Py_ssize_t records = off->len / off->itemsize - 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        const int64_t r = rows[i];
        if (r < 0 || r >= records) {
            PyErr_Format(PyExc_IndexError, "row %lld of a column of %zd records",
                         (long long)r, records);
            return -1;
        }
        const int64_t start = offset_at(off, r), end = offset_at(off, r + 1);
        if (start < 0 || end < start) {
            PyErr_Format(PyExc_ValueError, "record %lld spans [%lld, %lld): damaged offsets",
                         (long long)r, (long long)start, (long long)end);
            return -1;
        }
        if (end > limit) {
            PyErr_Format(PyExc_ValueError,
                         "record %lld spans [%lld, %lld), outside the %lld values of its column",
                         (long long)r, (long long)start, (long long)end, (long long)limit);
            return -1;
        }
    }
    return 0;
}

/* The values of the n records rows (checked by check_rows) added up without overflow (the
   int64 offsets of a damaged column may span up to 2**63 - 1 values each) into *total, and
   bounds[i] (where bounds is not NULL: n + 1 items) the first value of taken record i,
   bounds[n] the total: 0, or -1 with ValueError. */
static int
sum_spans(const Py_buffer *off, const int64_t *rows, Py_ssize_t n, int64_t *bounds,
          int64_t *total)
{
    int64_t sum = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (bounds != NULL) {
            bounds[i] = sum;
        }
        const int64_t span = offset_at(off, rows[i] + 1) - offset_at(off, rows[i]);
        if (!add_fits(sum, span, &sum)) {
            PyErr_Format(PyExc_ValueError, "the %zd records taken hold more than 2**63 - 1 "
                         "values: damaged offsets (record %lld spans %lld)", n,
                         (long long)rows[i], (long long)span);
            return -1;
        }
    }
    if (bounds != NULL) {
        bounds[n] = sum;
    }
    *total = sum;
    return 0;
}

/* bounds(offsets, rows, out_bounds) -> total: out_bounds[i] (int64, len(rows) + 1 items) the
   first value of taken record i in the batch, out_bounds[len(rows)] the batch's values. Rows
   are checked against the offsets only (take_values checks the values). */
static PyObject *
bounds(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *off_obj, *rows_obj, *out_obj;
    if (!PyArg_ParseTuple(args, "OOO:bounds", &off_obj, &rows_obj, &out_obj)) {
        return NULL;
    }
    Py_buffer off, rows, out;
    if (get_offsets(off_obj, &off) < 0) {
        return NULL;
    }
    if (get_ints(rows_obj, &rows, 8, "rows") < 0) {
        PyBuffer_Release(&off);
        return NULL;
    }
    if (get_ints(out_obj, &out, 8, "out_bounds") < 0) {
        PyBuffer_Release(&rows);
        PyBuffer_Release(&off);
        return NULL;
    }
    const Py_ssize_t n = rows.len / 8;
    PyObject *result = NULL;
    int64_t total;
    if (out.readonly || out.len / 8 != n + 1) {
        PyErr_Format(PyExc_ValueError, "out_bounds must be writable and hold %zd items", n + 1);
    } else if (overlap(&out, &rows) || overlap(&out, &off)) {
        PyErr_SetString(PyExc_ValueError, "out_bounds must not overlap rows or offsets");
    } else if (check_rows(&off, rows.buf, n, INT64_MAX) == 0 &&
               sum_spans(&off, rows.buf, n, out.buf, &total) == 0) {
        result = PyLong_FromLongLong(total);
    }
    PyBuffer_Release(&out);
    PyBuffer_Release(&rows);
    PyBuffer_Release(&off);
    return result;
}

/* Copies of at least this many bytes let go of the GIL. A batch of 256 token lists (~60 KiB)
   is copied in a few us; letting go of the GIL for it hands the GIL to a training step that
   runs Python, and taking it back waits up to a switch interval (5 ms). Measured, 500,000
   such records shuffled under benchmarks/replay.py's Python-busy consumer: 14-15 % of the
   epoch waiting for batches held, 28-29 % released (30-32 % with numpy's gather); with an
   idle consumer, 0.82-0.93 M records/s held, 1.00-1.03 released. */
#define RELEASE_MIN (1 << 20)

/* Whether out (len bytes) holds exactly total values of width bytes: 1, or 0 with
   ValueError. */
static int
out_fits(int64_t total, Py_ssize_t width, Py_ssize_t len)
{
    int64_t need;
    if (!mul_fits(total, width, &need)) {
        PyErr_Format(PyExc_ValueError, "the records hold %lld values of %zd bytes: more "
                     "than 2**63 - 1 bytes", (long long)total, width);
        return 0;
    }
    if (need != (int64_t)len) {
        PyErr_Format(PyExc_ValueError, "out holds %zd bytes, the records %lld", len,
                     (long long)need);
        return 0;
    }
    return 1;
}

/* take_values(offsets, values, width, rows, out): the values of records rows, one after the
   other, into out (writable, exactly their bytes); the GIL let go for RELEASE_MIN bytes. */
static PyObject *
take_values(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *off_obj, *val_obj, *rows_obj, *out_obj;
    Py_ssize_t width;
    if (!PyArg_ParseTuple(args, "OOnOO:take_values", &off_obj, &val_obj, &width, &rows_obj,
                          &out_obj)) {
        return NULL;
    }
    if (width <= 0) {
        PyErr_Format(PyExc_ValueError, "width must be positive, got %zd", width);
        return NULL;
    }
    Py_buffer off, val, rows, out;
    if (get_offsets(off_obj, &off) < 0) {
        return NULL;
    }
    if (PyObject_GetBuffer(val_obj, &val, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&off);
        return NULL;
    }
    if (get_ints(rows_obj, &rows, 8, "rows") < 0) {
        PyBuffer_Release(&val);
        PyBuffer_Release(&off);
        return NULL;
    }
    if (PyObject_GetBuffer(out_obj, &out, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&rows);
        PyBuffer_Release(&val);
        PyBuffer_Release(&off);
        return NULL;
    }
    const Py_ssize_t n = rows.len / 8;
    const int64_t *r = rows.buf;
    int64_t total;
    int ok = 1;
    if (overlap(&out, &rows) || overlap(&out, &off) || overlap(&out, &val)) {
        PyErr_SetString(PyExc_ValueError, "out must not overlap rows, offsets or values");
        ok = 0;  /* (they are read again while out is written) */
    }
    ok = ok && check_rows(&off, r, n, (int64_t)(val.len / width)) == 0 &&
         sum_spans(&off, r, n, NULL, &total) == 0;
    ok = ok && out_fits(total, width, out.len);
    if (ok) {
        const unsigned char *src = val.buf;
        unsigned char *dest = out.buf;
        PyThreadState *released = out.len >= RELEASE_MIN ? PyEval_SaveThread() : NULL;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (i + AHEAD < n) {
                PREFETCH(src + offset_at(&off, r[i + AHEAD]) * width);
            }
            const int64_t start = offset_at(&off, r[i]);
            const size_t bytes = (size_t)((offset_at(&off, r[i] + 1) - start) * width);
            memcpy(dest, src + start * width, bytes);
            dest += bytes;
        }
        if (released != NULL) {
            PyEval_RestoreThread(released);
        }
    }
    PyBuffer_Release(&out);
    PyBuffer_Release(&rows);
    PyBuffer_Release(&val);
    PyBuffer_Release(&off);
    if (!ok) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* take_text(offsets, data, rows, binary) -> list: record rows[i] as a str (UTF-8; a
   UnicodeDecodeError if it is not) or, binary true, as bytes. */
static PyObject *
take_text(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *off_obj, *data_obj, *rows_obj;
    int binary;
    if (!PyArg_ParseTuple(args, "OOOp:take_text", &off_obj, &data_obj, &rows_obj, &binary)) {
        return NULL;
    }
    Py_buffer off, data, rows;
    if (get_offsets(off_obj, &off) < 0) {
        return NULL;
    }
    if (PyObject_GetBuffer(data_obj, &data, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&off);
        return NULL;
    }
    if (get_ints(rows_obj, &rows, 8, "rows") < 0) {
        PyBuffer_Release(&data);
        PyBuffer_Release(&off);
        return NULL;
    }
    const Py_ssize_t n = rows.len / 8;
    const int64_t *r = rows.buf;
    const char *src = data.buf;
    PyObject *list = NULL;
    if (check_rows(&off, r, n, (int64_t)data.len) == 0) {
        list = PyList_New(n);
        for (Py_ssize_t i = 0; list != NULL && i < n; i++) {
            if (i + AHEAD < n) {
                PREFETCH(src + offset_at(&off, r[i + AHEAD]));
            }
            const int64_t start = offset_at(&off, r[i]);
            const Py_ssize_t size = (Py_ssize_t)(offset_at(&off, r[i] + 1) - start);
            PyObject *item = binary ? PyBytes_FromStringAndSize(src + start, size)
                                    : PyUnicode_DecodeUTF8(src + start, size, "strict");
            if (item == NULL) {
                Py_CLEAR(list);
                break;
            }
            PyList_SET_ITEM(list, i, item);
        }
    }
    PyBuffer_Release(&rows);
    PyBuffer_Release(&data);
    PyBuffer_Release(&off);
    return list;
}

#include "_ragged_parts.h"

static PyMethodDef module_methods[] = {
    {"bounds", bounds, METH_VARARGS,
     "bounds(offsets, rows, out_bounds) -> total: where each taken record starts"},
    {"take_values", take_values, METH_VARARGS,
     "take_values(offsets, values, width, rows, out): the records' values into out"},
    {"take_text", take_text, METH_VARARGS,
     "take_text(offsets, data, rows, binary) -> list of str (or bytes)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef ragged_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "snapshot_cli._ragged",
    .m_doc = "A shuffled batch of a variable-width column, taken from a window in C.",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC
PyInit__ragged(void)
{
    if (PyType_Ready(&PartsType) < 0) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&ragged_module);
    if (module != NULL && PyModule_AddObjectRef(module, "Parts", (PyObject *)&PartsType) < 0) {
        Py_CLEAR(module);
    }
    return module;
}

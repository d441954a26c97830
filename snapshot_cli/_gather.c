/* snapshot_cli._gather: the loader's copies of records, in C and without the GIL.
 *
 * A shuffled batch of 256 records of an uncompressed snapshot has its records in 256 places
 * of the page cache (or of decoded record batches). numpy can gather them only into a new,
 * unaligned array (fancy indexing), or from a single contiguous array (np.take); copying
 * them one by one from Python holds the GIL. This does the copy the batch needs, once, into
 * the loader's own aligned buffer, with the GIL released, after checking that every record
 * lies inside its source.
 *
 *   sources = Sources([buf0, buf1, ...])   # holds a buffer view of each until release()
 *   sources.gather(out, width, seg_source, seg_base, seg, row[, batch_rows, batch_stride])
 *   sources.gather_columns([(out, width, seg_source, seg_base, batch_stride), ...],
 *                          seg, row, batch_rows)   # several columns, the GIL let go once
 *   sources.release()                      # let the buffers go (an mmap may then close)
 *   place(seg, row, slots, lengths)        # each record's segment and row, at its slot
 *
 * Records come in segments (runs of consecutive records of one source, width bytes apart):
 * segment k starts at byte seg_base[k] of source seg_source[k] (int64 buffers, one item per
 * segment). Record i of out (out[i*width:(i+1)*width]) is record row[i] of segment seg[i]
 * (int32 buffers, one item per record): eight bytes per record say where it is, whatever
 * the number of columns. In out the records follow each other, or (batch_rows > 0) go in
 * batches of batch_rows records, each batch starting batch_stride bytes after the last (a
 * group of batches in one call, each batch aligned as the caller chose). Nothing is copied
 * unless every record is in bounds (IndexError otherwise) and no out overlaps the indices;
 * the indices are read again while copying, so no other thread may change them during a
 * call (the loader's are its own, made for it). Several threads may gather from
 * one Sources at once; release() while a gather runs waits for the last one to finish
 * before the views go (the count of running gathers is kept with the GIL held: this module
 * is not for Python's free-threaded build).
 *
 * Two more copies for slot windows (snapshot_cli.readers.window and .slabs):
 *   scatter(slots, [(dest, width, src), ...])  # record i of each src to slot slots[i]
 *   populate(buffer, start, length)        # map those pages now (MADV_POPULATE_WRITE)
 *   discard(buffer, start, length, part)   # give those pages back (MADV_DONTNEED)
 * and for the shard files' maps (snapshot_cli.readers.blocks):
 *   drop(file_map, start, length)          # their pages out of RSS (MADV_DONTNEED)
 *
 * The parts, each a header of static functions included here alone (one translation unit:
 * what the loops call is inlined as it was in one file): _gather_sources.h (a Sources
 * object's buffers), _gather_columns.h (a gather: checked, then copied), _gather_scatter.h,
 * _gather_pages.h (populate, discard, drop), _gather_place.h. Here: Sources's methods and type,
 * and the module.
 */
#include "_records.h"
#include "_gather_sources.h"
#include "_gather_columns.h"
#include "_gather_scatter.h"
#include "_gather_pages.h"
#include "_gather_place.h"

/* gather(out, width, seg_source, seg_base, seg, row[, batch_rows, batch_stride]): record i
   is record row[i] of segment seg[i], whose records start at byte seg_base[seg[i]] of source
   seg_source[seg[i]], width bytes apart. In out, records follow each other, or go in
   batches of batch_rows records that start batch_stride bytes apart. */
static PyObject *
Sources_gather(SourcesObject *self, PyObject *args)
{
    PyObject *out, *src, *base, *seg, *row;
    Py_ssize_t width, batch_rows = 0, batch_stride = 0;
    if (!PyArg_ParseTuple(args, "OnOOOO|nn:gather", &out, &width, &src, &base, &seg, &row,
                          &batch_rows, &batch_stride)) {
        return NULL;
    }
    PyObject *column = Py_BuildValue("((OnOOn))", out, width, src, base,
                                     batch_rows > 0 ? batch_stride : (Py_ssize_t)0);
    if (column == NULL) return NULL;
    PyObject *result = gather_columns(self, column, seg, row, batch_rows);
    Py_DECREF(column);
    return result;
}

/* gather_columns(columns, seg, row, batch_rows): several columns of the same records, each
   (out, width, seg_source, seg_base, batch_stride), in one call (the GIL let go once). */
static PyObject *
Sources_gather_columns(SourcesObject *self, PyObject *args)
{
    PyObject *columns, *seg, *row;
    Py_ssize_t batch_rows;
    if (!PyArg_ParseTuple(args, "OOOn:gather_columns", &columns, &seg, &row, &batch_rows)) {
        return NULL;
    }
    return gather_columns(self, columns, seg, row, batch_rows);
}

static PyObject *
Sources_release(SourcesObject *self, PyObject *Py_UNUSED(ignored))
{
    self->released = 1;
    if (self->active == 0) {
        drop_views(self);
    }
    Py_RETURN_NONE;
}

static PyObject *
Sources_len(SourcesObject *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSsize_t(self->views == NULL ? 0 : self->n);
}

static PyMethodDef Sources_methods[] = {
    {"gather", (PyCFunction)Sources_gather, METH_VARARGS,
     "gather(out, width, seg_source, seg_base, seg, row[, batch_rows, batch_stride])"},
    {"gather_columns", (PyCFunction)Sources_gather_columns, METH_VARARGS,
     "gather_columns(columns, seg, row, batch_rows): each column (out, width, seg_source, "
     "seg_base, batch_stride), the GIL let go once"},
    {"release", (PyCFunction)Sources_release, METH_NOARGS,
     "Let the sources' buffers go (after any gather still running)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Sources_getset[] = {
    {"held", (getter)Sources_len, NULL, "sources whose buffers are held", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject SourcesType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "snapshot_cli._gather.Sources",
    .tp_doc = "Buffers to gather records from, held until release().",
    .tp_basicsize = sizeof(SourcesObject),
    .tp_itemsize = 0,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Sources_init,
    .tp_dealloc = (destructor)Sources_dealloc,
    .tp_methods = Sources_methods,
    .tp_getset = Sources_getset,
};

static PyMethodDef module_methods[] = {
    {"scatter", scatter, METH_VARARGS,
     "scatter(slots, [(dest, width, src), ...]): record i of each src to slot slots[i] of "
     "its dest"},
    {"populate", populate, METH_VARARGS,
     "populate(buffer, start, length) -> bool: map those pages now (see the source)"},
    {"discard", discard, METH_VARARGS,
     "discard(buffer, start, length, part=0) -> bool: give those pages back (see the "
     "source)"},
    {"drop", drop, METH_VARARGS,
     "drop(file_map, start, length) -> bool: a file map's pages out of RSS (see the source)"},
    {"place", place, METH_VARARGS,
     "place(seg, row, slots, lengths): each record's segment and row at its slot"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef gather_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "snapshot_cli._gather",
    .m_doc = "Copy records from many buffers into one, without the GIL.",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC
PyInit__gather(void)
{
    if (PyType_Ready(&SourcesType) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&gather_module);
    if (m == NULL) {
        return NULL;
    }
    Py_INCREF(&SourcesType);
    if (PyModule_AddObject(m, "Sources", (PyObject *)&SourcesType) < 0) {
        Py_DECREF(&SourcesType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

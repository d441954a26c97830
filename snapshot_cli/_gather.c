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
 */
#include "_records.h"
#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

typedef struct {
    PyObject_HEAD
    Py_ssize_t n;        /* sources */
    Py_buffer *views;    /* n views, held until release */
    Py_ssize_t active;   /* gathers running (changed with the GIL held) */
    int released;        /* release() was called: no new gathers */
} SourcesObject;

static void
drop_views(SourcesObject *self)
{
    if (self->views == NULL) {
        return;
    }
    for (Py_ssize_t i = 0; i < self->n; i++) {
        if (self->views[i].obj != NULL) {
            PyBuffer_Release(&self->views[i]);
        }
    }
    PyMem_Free(self->views);
    self->views = NULL;
}

static int
Sources_init(SourcesObject *self, PyObject *args, PyObject *kwds)
{
    PyObject *seq = NULL;
    static char *kwlist[] = {"sources", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:Sources", kwlist, &seq)) {
        return -1;
    }
    if (self->views != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Sources is already initialised");
        return -1;
    }
    PyObject *fast = PySequence_Fast(seq, "sources must be a sequence of buffers");
    if (fast == NULL) {
        return -1;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    self->views = PyMem_Calloc(n > 0 ? (size_t)n : 1, sizeof(Py_buffer));
    if (self->views == NULL) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return -1;
    }
    self->n = n;
    PyObject **items = PySequence_Fast_ITEMS(fast);
    for (Py_ssize_t i = 0; i < n; i++) {
        /* PyBUF_SIMPLE: contiguous bytes, read-only is fine */
        if (PyObject_GetBuffer(items[i], &self->views[i], PyBUF_SIMPLE) < 0) {
            drop_views(self);
            Py_DECREF(fast);
            return -1;
        }
    }
    Py_DECREF(fast);
    return 0;
}

static void
Sources_dealloc(SourcesObject *self)
{
    drop_views(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}


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

/* scatter(dest, width, slots, src): record i of src (src[i*width:(i+1)*width]) goes to
   slot slots[i] of dest (dest[slots[i]*width:...]): a slot window's copy of a decoded record
   batch, without the GIL, the destinations asked for ahead (random writes to a large window
   each wait on memory unless they overlap). Nothing is copied unless every slot is inside
   dest and src holds len(slots) records. */
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

/* The advice populate and discard give (-1: not on this system). */
#if defined(__linux__) && defined(MADV_POPULATE_WRITE)
#define ADVICE_POPULATE MADV_POPULATE_WRITE
#else
#define ADVICE_POPULATE (-1)
#endif
#if defined(__linux__) && defined(MADV_DONTNEED)
#define ADVICE_DISCARD MADV_DONTNEED
#else
#define ADVICE_DISCARD (-1)
#endif

/* advise(format, args, advice) -> True where done, False where it cannot be done here or the
   kernel refused (nothing happened after that), NULL with an exception set on bad arguments:
   madvise(advice) of the pages of buffer[start:start + length] that hold whole pages, without
   the GIL (args: buffer, start, length and, where the format takes it, part; advice < 0: not
   on this system). With part > 0, one call per part of that many bytes (rounded up to whole
   pages): the process's map lock is let go between two. */
static PyObject *
advise(const char *format, PyObject *args, int advice)
{
    PyObject *obj;
    Py_ssize_t start, length, part = 0;
    if (!PyArg_ParseTuple(args, format, &obj, &start, &length, &part)) {
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        return NULL;
    }
    int done = 0;
    if (start < 0 || length < 0 || start > view.len || length > view.len - start || part < 0) {
        PyBuffer_Release(&view);
        PyErr_Format(PyExc_ValueError, "%zd bytes from byte %zd (parts of %zd) are outside a "
                     "buffer of %zd", length, start, part, view.len);
        return NULL;
    }
#if defined(__linux__)
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t first = (uintptr_t)view.buf + (uintptr_t)start;
    uintptr_t end = first + (uintptr_t)length;
    first = (first + page - 1) / page * page;
    end = end / page * page;
    uintptr_t step = part > 0 ? ((uintptr_t)part + page - 1) / page * page : end - first;
    if (advice >= 0 && end > first) {
        int rc = 0;
        Py_BEGIN_ALLOW_THREADS
        for (uintptr_t at = first; at < end && rc == 0; at += step) {
            rc = madvise((void *)at, end - at < step ? end - at : step, advice);
        }
        Py_END_ALLOW_THREADS
        done = rc == 0;
    }
#else
    (void)advice;
#endif
    PyBuffer_Release(&view);
    return PyBool_FromLong(done);
}

/* populate(buffer, start, length) -> bool: have the kernel map (and zero) the pages of
   buffer[start:start + length] that hold whole pages, writable, in one call and without the
   GIL (MADV_POPULATE_WRITE, Linux 5.14), instead of one page fault per page when they are
   first written. False where that cannot be done here (nothing happened). The contents of
   pages already there are kept. */
static PyObject *
populate(PyObject *Py_UNUSED(module), PyObject *args)
{
    return advise("Onn:populate", args, ADVICE_POPULATE);
}

/* discard(buffer, start, length, part=0) -> bool: give the pages of buffer[start:start +
   length] that hold whole pages back to the system (MADV_DONTNEED), without the GIL, in
   parts of ``part`` bytes (0: at once); private anonymous memory reads as zeros afterwards.
   Only for memory nothing else uses: snapshot_cli.readers.slabs gives back a slab no batch
   refers to any more (unmapping 512 MiB at once held every map of the process up for ~50
   ms; a part at a time, a map waits for one part). False where that cannot be done here
   (nothing happened) or the kernel refused (the parts before were given back). */
static PyObject *
discard(PyObject *Py_UNUSED(module), PyObject *args)
{
    return advise("Onn|n:discard", args, ADVICE_DISCARD);
}

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

static PyMethodDef module_methods[] = {
    {"scatter", scatter, METH_VARARGS,
     "scatter(slots, [(dest, width, src), ...]): record i of each src to slot slots[i] of "
     "its dest"},
    {"populate", populate, METH_VARARGS,
     "populate(buffer, start, length) -> bool: map those pages now (see the source)"},
    {"discard", discard, METH_VARARGS,
     "discard(buffer, start, length, part=0) -> bool: give those pages back (see the "
     "source)"},
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

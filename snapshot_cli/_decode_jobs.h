/* Part of snapshot_cli._decode (included by _decode.c alone): a job, one record batch's
 * part of a decode call, and everything done to it with the GIL before it runs: its
 * arguments taken and its views held (job_prepare, job_release), its slots and buffers
 * checked against its dests and its message (job_check: whether it is in the form placed
 * directly), and the dests of all the jobs of a call against all their slots
 * (check_overlaps). job_run, which runs it without the GIL, is in _decode.c.
 */
#ifndef SNAPSHOT_CLI_DECODE_JOBS_H
#define SNAPSHOT_CLI_DECODE_JOBS_H

#include "_records.h"
#include "_decode_crc32c.h"
#include "_decode_codecs.h"

/* columns of one job: their descriptions are allocated per job, so only a bound on an
   argument that is nonsense beyond it (Arrow schemas of tens of thousands of columns) */
#define MAX_COLUMNS 65536

typedef struct {
    Py_buffer dest;
    Py_ssize_t begin, length, width; /* its values at message[begin:begin+length] */
    const unsigned char *values; /* plain values, or the compressed stream */
    size_t size;                 /* bytes of the compressed stream */
    size_t plain;                /* bytes it decompresses to (0: stored plain) */
} Column;

/* One record batch's part: what decode(...) is given, its views, and what became of it. */
typedef struct {
    Py_buffer message, slots;
    int have_message, have_slots;
    int codec;
    Py_ssize_t start, stop, rows, ncols, held; /* held: columns whose dest view is held */
    long long expected, crc;
    int direct;          /* in the form placed here (else nothing is done: -2) */
    const char *problem; /* the decompressor's complaint, of column failed */
    Py_ssize_t failed;
    Column *cols;
} Job;

static void
job_release(Job *j)
{
    for (Py_ssize_t k = 0; k < j->held; k++) {
        PyBuffer_Release(&j->cols[k].dest);
    }
    j->held = 0;
    PyMem_Free(j->cols);
    j->cols = NULL;
    if (j->have_slots) {
        PyBuffer_Release(&j->slots);
        j->have_slots = 0;
    }
    if (j->have_message) {
        PyBuffer_Release(&j->message);
        j->have_message = 0;
    }
}

/* Take a job's arguments (a tuple of decode's) and hold its views, with the GIL: 0, or -1
   with an exception set (the job's views are then released). Converting an argument may run
   Python code (a width's __index__) that changes the slots or the message: nothing read
   from them here is kept; job_check reads them once every job's arguments are taken. */
static int
job_prepare(PyObject *args, Job *j)
{
    PyObject *message_obj, *columns_obj, *slots_obj;
    memset(j, 0, sizeof(*j));
    j->failed = -1;
    if (!PyArg_ParseTuple(args, "OiOOnnnL:decode", &message_obj, &j->codec, &columns_obj,
                          &slots_obj, &j->start, &j->stop, &j->rows, &j->expected)) {
        return -1;
    }
    if (j->codec < -1 || j->codec > 1) {
        PyErr_Format(PyExc_ValueError, "codec must be -1, 0 or 1, got %d", j->codec);
        return -1;
    }
    if (j->start < 0 || j->stop < j->start || j->rows < j->stop) {
        PyErr_Format(PyExc_ValueError, "records [%zd, %zd) of %zd", j->start, j->stop,
                     j->rows);
        return -1;
    }
    if (j->expected >= 0 && !hw_crc) {
        PyErr_SetString(PyExc_ValueError, "no crc32c instruction here (HW_CRC is False)");
        return -1;
    }
    /* a tuple of its own: converting an item may run Python code that changes a list */
    PyObject *columns = PySequence_Tuple(columns_obj);
    if (columns == NULL) {
        return -1;
    }
    j->ncols = PyTuple_GET_SIZE(columns);
    if (j->ncols > MAX_COLUMNS) {
        PyErr_Format(PyExc_ValueError, "at most %d columns, got %zd", MAX_COLUMNS, j->ncols);
        goto fail;
    }
    j->cols = PyMem_Calloc(j->ncols > 0 ? (size_t)j->ncols : 1, sizeof(Column));
    if (j->cols == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    if (PyObject_GetBuffer(message_obj, &j->message, PyBUF_C_CONTIGUOUS) < 0) {
        goto fail;
    }
    j->have_message = 1;
    if (get_ints(slots_obj, &j->slots, 8, "slots") < 0) {
        goto fail;
    }
    j->have_slots = 1;
    const Py_ssize_t count = j->stop - j->start;
    if (j->slots.len / 8 < count) {
        PyErr_Format(PyExc_ValueError, "%zd slots for %zd records", j->slots.len / 8, count);
        goto fail;
    }
    for (Py_ssize_t k = 0; k < j->ncols; k++) {
        Column *c = &j->cols[k];
        PyObject *dest;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(columns, k), "nnOn:decode column", &c->begin,
                              &c->length, &dest, &c->width)) {
            goto fail;
        }
        if (c->width <= 0) {
            PyErr_Format(PyExc_ValueError, "column %zd: width must be > 0, got %zd", k,
                         c->width);
            goto fail;
        }
        if (PyObject_GetBuffer(dest, &c->dest, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
            goto fail;
        }
        j->held = k + 1;
    }
    Py_DECREF(columns);
    return 0;
fail:
    Py_DECREF(columns);
    job_release(j);
    return -1;
}

/* A prepared job's slots checked against every dest and its buffers against the message,
   with the GIL and without running any Python code (the slots are read here, and again
   without the GIL: nothing may change them in between): 0, or -1 with IndexError (ValueError
   for a dest over the message). A buffer that cannot hold the records the record batch
   declares (rows * width bytes, worked out so that nothing overflows: a forged count of
   2**53 - 1 records of 2 KiB wraps int64) leaves the job not direct (-2, nothing done). */
static int
job_check(Job *j)
{
    const Py_ssize_t count = j->stop - j->start;
    const int64_t *to = (const int64_t *)j->slots.buf;
    int64_t least = 0, most = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        least = (i == 0 || to[i] < least) ? to[i] : least;
        most = (i == 0 || to[i] > most) ? to[i] : most;
    }
    j->direct =
        j->codec == -1 || (j->codec == 0 ? lz4f_create != NULL : zstd_decompress != NULL);
    const unsigned char *base = (const unsigned char *)j->message.buf;
    const Py_ssize_t length_of_message = j->message.len;
    for (Py_ssize_t k = 0; k < j->ncols; k++) {
        Column *c = &j->cols[k];
        const Py_ssize_t width = c->width, begin = c->begin, length = c->length;
        if (count && (least < 0 || most >= c->dest.len / width)) {
            PyErr_Format(PyExc_IndexError, "column %zd: slot %lld of %zd", k,
                         (long long)(least < 0 ? least : most), c->dest.len / width);
            return -1;
        }
        if (overlap(&c->dest, &j->message)) { /* a copy would read what it wrote */
            PyErr_Format(PyExc_ValueError, "column %zd: dest overlaps the message", k);
            return -1;
        }
        int64_t need;
        if (!mul_fits(j->rows, width, &need)) {
            j->direct = 0; /* more bytes than any buffer holds: left to Arrow's decoder */
            continue;
        }
        if (begin < 0 || length < 0 || begin > length_of_message ||
            length > length_of_message - begin) {
            j->direct = 0; /* outside the message: left to Arrow's decoder */
            continue;
        }
        const unsigned char *raw = base + begin;
        if (j->codec == -1) {
            j->direct = j->direct && length >= need;
            c->values = raw;
            continue;
        }
        int64_t stated = -2;
        if (length >= 8) {
            memcpy(&stated, raw, 8); /* little-endian, as Arrow writes it */
        }
        if (stated == -1) { /* stored plain: it did not shrink */
            j->direct = j->direct && length - 8 >= need;
            c->values = raw + 8;
        } else if (stated >= need && stated - need < 64) { /* padded to 8 bytes */
            c->values = raw + 8;
            c->size = (size_t)(length - 8);
            c->plain = (size_t)stated;
        } else {
            j->direct = 0;
        }
    }
    return 0;
}

typedef struct {
    uintptr_t start, end;
} Span;

static int
span_order(const void *a, const void *b)
{
    const uintptr_t x = ((const Span *)a)->start, y = ((const Span *)b)->start;
    return (x > y) - (x < y);
}

/* No dest of any of the n jobs shares a byte with the slots of any of them: a record written
   there would change a slot after the slots were checked (in decode_many, one job's dest over
   another job's slots as much as over its own). 0, or -1 with ValueError naming the column. */
static int
check_overlaps(const Job *all, Py_ssize_t n)
{
    Span *spans = PyMem_Malloc((n > 0 ? (size_t)n : 1) * sizeof(Span));
    if (spans == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t m = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        if (all[k].slots.len > 0) {
            spans[m].start = (uintptr_t)all[k].slots.buf;
            spans[m].end = spans[m].start + (uintptr_t)all[k].slots.len;
            m++;
        }
    }
    qsort(spans, (size_t)m, sizeof(Span), span_order);
    Py_ssize_t merged = 0; /* sorted and disjoint after this */
    for (Py_ssize_t i = 0; i < m; i++) {
        if (merged > 0 && spans[i].start <= spans[merged - 1].end) {
            if (spans[i].end > spans[merged - 1].end) {
                spans[merged - 1].end = spans[i].end;
            }
        } else {
            spans[merged++] = spans[i];
        }
    }
    int result = 0;
    for (Py_ssize_t k = 0; k < n && result == 0; k++) {
        for (Py_ssize_t c = 0; c < all[k].ncols; c++) {
            const Py_buffer *d = &all[k].cols[c].dest;
            if (d->len <= 0) {
                continue;
            }
            const uintptr_t lo = (uintptr_t)d->buf, hi = lo + (uintptr_t)d->len;
            Py_ssize_t a = 0, b = merged; /* the spans that start before hi: [0, a) */
            while (a < b) {
                const Py_ssize_t mid = a + (b - a) / 2;
                if (spans[mid].start < hi) {
                    a = mid + 1;
                } else {
                    b = mid;
                }
            }
            if (a > 0 && spans[a - 1].end > lo) {
                if (n == 1) {
                    PyErr_Format(PyExc_ValueError, "column %zd: dest overlaps slots", c);
                } else {
                    PyErr_Format(PyExc_ValueError, "job %zd, column %zd: dest overlaps the "
                                 "slots of a job", k, c);
                }
                result = -1;
                break;
            }
        }
    }
    PyMem_Free(spans);
    return result;
}

#endif /* SNAPSHOT_CLI_DECODE_JOBS_H */

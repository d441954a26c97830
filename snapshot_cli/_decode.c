/* snapshot_cli._decode: a record batch's fixed-width columns checked, decoded and put in
 * their slots of a shuffled window, in one call that lets go of the GIL once.
 *
 * A read thread used to make four or more calls per record batch that each let go of the
 * GIL (the crc32c, one decompression per column, each in two steps, the scatter). Each time
 * it wants the GIL back, a consumer running Python keeps it for up to the interpreter's
 * switch interval (5 ms): with a training step that holds the GIL, the read threads spent a
 * third of their time waiting for it, and the loop waited for data (measured: 14 % of the
 * epoch). Here all of it happens between one release and one re-acquisition.
 *
 *   decode(message, codec, columns, slots, start, stop, rows, expected) -> int
 *   decode_many([(message, codec, ...), ...]) -> [int or str, ...]  # many, one release
 *
 * message: the record batch's whole IPC message (its crc32c is the manifest's); codec: -1
 * (buffers stored plain), 0 (LZ4 frame) or 1 (zstd), Arrow's IPC body compression; columns:
 * (begin, length, dest, width) per column: its values buffer at message[begin:begin+length],
 * rows records of width bytes each; record start + i goes to row slots[i] of dest (a
 * writable buffer of rows of width bytes), for the records [start, stop). expected: the
 * crc32c the message must have (-1: not checked here).
 *
 * Returns the message's crc32c (-1 when not checked). When it is not `expected`, nothing is
 * written: the caller raises. Returns -2, nothing written and nothing checked, when a buffer
 * is not in the form placed directly (the caller then decodes it another way): a buffer
 * outside the message, too short for its records (rows * width bytes: a count read from a
 * file, multiplied without overflow), a compressed buffer whose stated size does not fit, a
 * codec whose library is not there. DecompressError (a ValueError) when the decompressor
 * fails (damaged data whose checksum was not checked; columns before it may have been
 * written), IndexError for a slot outside a dest, ValueError for a dest that overlaps the
 * slots (of any job, in decode_many) or its message. Every argument is converted (which may
 * run Python code: a width's __index__) before the slots are read and checked.
 *
 * The decompressors are the system's liblz4 and libzstd (loaded at import, by their stable
 * C API; Debian, Ubuntu and Fedora install them with the package manager itself, and dlopen
 * finds them where the system's linker would): LZ4 and ZSTD say whether each was found. The
 * crc32c is computed with the CPU's crc32 instruction (SSE 4.2, three streams at once), where
 * there is one: HW_CRC; where AVX-512 has VPCLMULQDQ, long messages are folded 256 bytes at a
 * time with it instead, 2x faster: CRC_FOLD. Without them the loader
 * keeps its other paths (crc32c package, Arrow's decompression).
 *
 * The parts, each a header of static functions included here alone (one translation unit:
 * what the loops call is inlined as it was in one file): _decode_crc32c.h (the crc32c),
 * _decode_codecs.h (liblz4 and libzstd), _decode_jobs.h (a job's arguments taken and
 * checked, with the GIL). Here: a job run without the GIL, and the module's functions.
 */
#include "_records.h"
#include "_decode_crc32c.h"
#include "_decode_codecs.h"
#include "_decode_jobs.h"

/* Without the GIL: check, decompress, put. Nothing is written on a checksum mismatch. */
static void
job_run(Job *j)
{
    j->crc = -1;
    if (!j->direct) {
        return;
    }
#ifdef HAVE_X86_CRC
    if (j->expected >= 0) {
        j->crc = crc32c_hw(0, (const unsigned char *)j->message.buf, (size_t)j->message.len);
        if (j->crc != j->expected) {
            return;
        }
    }
#endif
    const int64_t *to = (const int64_t *)j->slots.buf;
    const Py_ssize_t count = j->stop - j->start;
    /* every record, to consecutive rows (a window kept in order): a column that decompresses
       to exactly its records' bytes is decompressed straight into them, one write per byte
       (into a scratch buffer and then copied, 16 MiB of lz4 ran at 3.5 GB/s, straight 5.7) */
    int in_order = j->start == 0 && count == j->rows;
    for (Py_ssize_t i = 1; in_order && i < count; i++) {
        in_order = to[i] == to[0] + i;
    }
    for (Py_ssize_t k = 0; k < j->ncols; k++) {
        Column *c = &j->cols[k];
        const unsigned char *from = c->values;
        unsigned char *scratch = NULL;
        if (c->plain && in_order && count > 0 && c->plain == (size_t)(count * c->width)) {
            j->problem = inflate(j->codec, c->values, c->size,
                                 (unsigned char *)c->dest.buf + to[0] * c->width, c->plain);
            if (j->problem != NULL) {
                j->failed = k;
                return;
            }
            continue;
        }
        if (c->plain) {
            scratch = malloc(c->plain);
            j->problem = scratch == NULL
                             ? "out of memory"
                             : inflate(j->codec, c->values, c->size, scratch, c->plain);
            from = scratch;
        }
        if (j->problem == NULL) {
            put_records((unsigned char *)c->dest.buf, c->dest.len, c->width, to, count,
                        from + j->start * c->width);
        }
        free(scratch);
        if (j->problem != NULL) {
            j->failed = k;
            return;
        }
    }
}

/* A job's outcome: its crc32c (-1 unchecked), -2 (not placed here), or the decompressor's
   complaint (a str). */
static PyObject *
job_result(const Job *j)
{
    if (!j->direct) {
        return PyLong_FromLong(-2);
    }
    if (j->problem != NULL) {
        return PyUnicode_FromFormat("column %zd cannot be decompressed: %s", j->failed,
                                    j->problem);
    }
    return PyLong_FromLongLong(j->crc);
}

static PyObject *
decode(PyObject *Py_UNUSED(module), PyObject *args)
{
    Job j;
    if (job_prepare(args, &j) < 0) {
        return NULL;
    }
    if (check_overlaps(&j, 1) < 0 || job_check(&j) < 0) {
        job_release(&j);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    job_run(&j);
    Py_END_ALLOW_THREADS
    PyObject *result = job_result(&j);
    job_release(&j);
    if (result != NULL && PyUnicode_Check(result)) {
        PyErr_SetObject(DecompressError, result);
        Py_DECREF(result);
        return NULL;
    }
    return result;
}

/* decode_many(jobs) -> list: decode(*job) for each job (a tuple of decode's arguments), the
   GIL let go once for all of them. Each item of the list is what decode returns for its job,
   or, where its data could not be decompressed, what DecompressError would say (a str; the
   other jobs are done). A job with wrong arguments raises, and no job is done. */
static PyObject *
decode_many(PyObject *Py_UNUSED(module), PyObject *arg)
{
    PyObject *jobs = PySequence_Tuple(arg);
    if (jobs == NULL) {
        return NULL;
    }
    const Py_ssize_t n = PyTuple_GET_SIZE(jobs);
    Job *all = PyMem_Calloc(n > 0 ? (size_t)n : 1, sizeof(Job));
    PyObject *out = NULL;
    Py_ssize_t ready = 0;
    if (all == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (; ready < n; ready++) {
        if (job_prepare(PyTuple_GET_ITEM(jobs, ready), &all[ready]) < 0) {
            goto done;
        }
    }
    /* every job's arguments taken (which may run Python code) before any is checked */
    if (check_overlaps(all, n) < 0) {
        goto done;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        if (job_check(&all[k]) < 0) {
            goto done;
        }
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < n; k++) {
        job_run(&all[k]);
    }
    Py_END_ALLOW_THREADS
    out = PyList_New(n);
    for (Py_ssize_t k = 0; out != NULL && k < n; k++) {
        PyObject *item = job_result(&all[k]);
        if (item == NULL) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, k, item);
    }
done:
    for (Py_ssize_t k = 0; k < ready; k++) {
        job_release(&all[k]);
    }
    PyMem_Free(all);
    Py_DECREF(jobs);
    return out;
}

/* crc32c(data, crc=0, fold=True) -> int: the CPU's crc32c of data, continuing crc (needs
   HW_CRC); fold=False: the three streams alone, where CRC_FOLD would fold (for tests). The
   GIL is let go for 32 KiB or more (as the crc32c package does). */
#define CRC_NOGIL_MIN (32 << 10)
static PyObject *
crc32c(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_buffer data;
    unsigned int crc = 0;
    int fold = 1;
    if (!PyArg_ParseTuple(args, "y*|Ip:crc32c", &data, &crc, &fold)) {
        return NULL;
    }
    if (!hw_crc) {
        PyBuffer_Release(&data);
        PyErr_SetString(PyExc_ValueError, "no crc32c instruction here (HW_CRC is False)");
        return NULL;
    }
    uint32_t out = crc;
#ifdef HAVE_X86_CRC
    const unsigned char *buf = (const unsigned char *)data.buf;
    const size_t len = (size_t)data.len;
    if (len >= CRC_NOGIL_MIN) {
        Py_BEGIN_ALLOW_THREADS
        out = fold ? crc32c_hw(crc, buf, len) : crc32c_streams(crc, buf, len);
        Py_END_ALLOW_THREADS
    }
    else {
        out = fold ? crc32c_hw(crc, buf, len) : crc32c_streams(crc, buf, len);
    }
#endif
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(out);
}

static PyMethodDef module_methods[] = {
    {"decode", decode, METH_VARARGS,
     "decode(message, codec, columns, slots, start, stop, rows, expected) -> crc32c, -1 or "
     "-2 (see the source)"},
    {"decode_many", decode_many, METH_O,
     "decode_many(jobs) -> list: decode(*job) for each, the GIL let go once (see the source)"},
    {"crc32c", crc32c, METH_VARARGS, "crc32c(data, crc=0, fold=True) -> int (see the source)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef decode_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "snapshot_cli._decode",
    .m_doc = "A record batch's columns checked, decoded and put in their slots, without the "
             "GIL.",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC
PyInit__decode(void)
{
#ifdef HAVE_X86_CRC
    __builtin_cpu_init();
    hw_crc = __builtin_cpu_supports("sse4.2");
#endif
    crc_init();
    load_codecs();
    PyObject *m = PyModule_Create(&decode_module);
    if (m == NULL) {
        return NULL;
    }
    DecompressError = PyErr_NewException("snapshot_cli._decode.DecompressError",
                                         PyExc_ValueError, NULL);
    if (DecompressError == NULL ||
        PyModule_AddObjectRef(m, "DecompressError", DecompressError) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddObject(m, "HW_CRC", PyBool_FromLong(hw_crc)) < 0 ||
        PyModule_AddObject(m, "CRC_FOLD", PyBool_FromLong(fold_ok)) < 0 ||
        PyModule_AddObject(m, "LZ4", PyBool_FromLong(lz4f_create != NULL)) < 0 ||
        PyModule_AddObject(m, "ZSTD", PyBool_FromLong(zstd_decompress != NULL)) < 0 ||
        PyModule_AddIntConstant(m, "MAX_COLUMNS", MAX_COLUMNS) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

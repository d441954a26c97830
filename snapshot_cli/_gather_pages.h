/* Part of snapshot_cli._gather (included by _gather.c alone): a buffer's pages mapped ahead
 * or given back, by madvise without the GIL, for slot windows (snapshot_cli.readers.slabs):
 *
 *   populate(buffer, start, length)        # map those pages now (MADV_POPULATE_WRITE)
 *   discard(buffer, start, length, part)   # give those pages back (MADV_DONTNEED)
 *   drop(file_map, start, length)          # a file map's pages out of RSS (MADV_DONTNEED)
 */
#ifndef SNAPSHOT_CLI_GATHER_PAGES_H
#define SNAPSHOT_CLI_GATHER_PAGES_H

#include "_records.h"
#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

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

/* advise(format, args, advice, flags, to_end) -> True where done, False where it cannot be
   done here or the kernel refused (nothing happened after that), NULL with an exception set on
   bad arguments: madvise(advice) of the pages of buffer[start:start + length] that hold whole
   pages, without the GIL (args: buffer, start, length and, where the format takes it, part;
   advice < 0: not on this system; flags: the buffer asked for, PyBUF_WRITABLE but for a map
   of a file; to_end: a range to the buffer's end takes its last page too, which a file's end
   leaves in part). With part > 0, one call per part of that many bytes (rounded up to whole
   pages): the process's map lock is let go between two. */
static PyObject *
advise(const char *format, PyObject *args, int advice, int flags, int to_end)
{
    PyObject *obj;
    Py_ssize_t start, length, part = 0;
    if (!PyArg_ParseTuple(args, format, &obj, &start, &length, &part)) {
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, flags | PyBUF_C_CONTIGUOUS) < 0) {
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
    end = to_end && start + length == view.len ? (end + page - 1) / page * page
                                               : end / page * page;
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
    return advise("Onn:populate", args, ADVICE_POPULATE, PyBUF_WRITABLE, 0);
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
    return advise("Onn|n:discard", args, ADVICE_DISCARD, PyBUF_WRITABLE, 0);
}

/* drop(file_map, start, length) -> bool: the pages of file_map[start:start + length] (to the
   map's end: its last page too), a map of a file shared with the page cache (an mmap.mmap of
   a file, read-only or not), leave this process's page tables, and so its RSS, without the
   GIL (MADV_DONTNEED): they stay in the page cache, and a later read maps them again.
   Python's mmap.madvise holds the GIL through the call: a loader's read threads drop every
   shard map's pages every 16 MiB they read, 59 ms of a first epoch's 0.6 s with one thread,
   which the others' Python waited for. Only for maps of files: private memory would read as
   zeros afterwards. */
static PyObject *
drop(PyObject *Py_UNUSED(module), PyObject *args)
{
    /* an mmap.mmap only (or a subclass): any other buffer may be private memory, or share
       its last page with other data */
    PyObject *obj = PyTuple_GET_SIZE(args) > 0 ? PyTuple_GET_ITEM(args, 0) : NULL;
    PyTypeObject *type = obj ? Py_TYPE(obj) : NULL;
    while (type && strcmp(type->tp_name, "mmap.mmap") != 0) type = type->tp_base;
    if (obj && !type) {
        PyErr_Format(PyExc_TypeError, "drop takes an mmap.mmap of a file, not %.100s",
                     Py_TYPE(obj)->tp_name);
        return NULL;
    }
    return advise("Onn:drop", args, ADVICE_DISCARD, PyBUF_SIMPLE, 1);
}

#endif /* SNAPSHOT_CLI_GATHER_PAGES_H */

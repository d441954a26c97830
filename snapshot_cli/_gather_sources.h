/* Part of snapshot_cli._gather (included by _gather.c alone: one translation unit, so the
 * calls of its loops are compiled as before the parts were split): the state of a Sources
 * object, the buffers records are gathered from, each held in view until release(), and
 * its making and unmaking. Its methods and type object are in _gather.c.
 */
#ifndef SNAPSHOT_CLI_GATHER_SOURCES_H
#define SNAPSHOT_CLI_GATHER_SOURCES_H

#include "_records.h"

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

#endif /* SNAPSHOT_CLI_GATHER_SOURCES_H */

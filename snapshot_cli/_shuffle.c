/* snapshot_cli._shuffle: the shuffle of a window's order (snapshot_cli.readers.plan), numpy's
 * own algorithm with its far items asked for ahead.
 *
 *   shuffle(bit_generator, array)          # Generator.shuffle(array), the same result
 *
 * A window of millions of records is shuffled by Fisher-Yates: each swap's far item is a
 * random place in an array of tens of MiB, a wait on memory. numpy's Generator.shuffle draws
 * each far index (random_interval) and swaps through memcpy; this draws the same indices in
 * the same order from the same generator, so the permutation and the generator's state after
 * are numpy's (tests/readers/test_plan.py holds it to Generator.permutation for every numpy
 * bit generator), and asks for the far items a few swaps ahead.
 */
#include "_records.h"

/* numpy's bit generator interface (numpy/random/bitgen.h; a BitGenerator's "capsule"). */
typedef struct {
    void *state;
    uint64_t (*next_uint64)(void *st);
    uint32_t (*next_uint32)(void *st);
    double (*next_double)(void *st);
    uint64_t (*next_raw)(void *st);
} bitgen_t;

/* numpy's random_interval: a uniform integer in [0, max], by masked rejection (what its
   Generator.shuffle draws, in the same order from the same generator). */
static inline uint64_t
interval(bitgen_t *bg, uint64_t max)
{
    if (max == 0) return 0;
    uint64_t mask = max, value;
    mask |= mask >> 1;
    mask |= mask >> 2;
    mask |= mask >> 4;
    mask |= mask >> 8;
    mask |= mask >> 16;
    mask |= mask >> 32;
    if (max <= 0xffffffffUL) {
        while ((value = (bg->next_uint32(bg->state) & mask)) > max) {
        }
    } else {
        while ((value = (bg->next_uint64(bg->state) & mask)) > max) {
        }
    }
    return value;
}

/* Draws made ahead of the swaps that use them (a power of 2): the swap's far item is then
   asked for early. A window's order of millions of items is swapped at random places, each
   a wait on memory unless they overlap; the draws do not depend on the items, so drawing
   ahead changes nothing but the timing. */
#define SHUFFLE_AHEAD 32

/* shuffle(bit_generator, array): array (1-d, 8-byte items, contiguous, writable) shuffled in
   place by bit_generator (a numpy BitGenerator, held for the call; hold its .lock), exactly as
   numpy's Generator.shuffle does for a 1-d array (Fisher-Yates from the end, j drawn by
   random_interval(i)): the same permutation, the generator left in the same state. numpy
   swaps one item at a time through memcpy, waiting on memory at each far item (38 ns an item
   for 4 million, measured); here the far items are asked for ahead. */
static PyObject *
shuffle(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *generator, *obj;
    if (!PyArg_ParseTuple(args, "OO:shuffle", &generator, &obj)) {
        return NULL;
    }
    /* The capsule does not keep its generator alive; the argument does, for the call. */
    PyObject *capsule = PyObject_GetAttrString(generator, "capsule");
    if (capsule == NULL) {
        return NULL;
    }
    bitgen_t *bg = (bitgen_t *)PyCapsule_GetPointer(capsule, "BitGenerator");
    Py_DECREF(capsule); /* the pointer is the generator's, which the caller holds */
    if (bg == NULL) {
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) <
        0) {
        return NULL;
    }
    if (view.ndim != 1 || view.itemsize != 8 || (uintptr_t)view.buf % 8 != 0) {
        PyErr_Format(PyExc_TypeError, "shuffle needs a 1-d, aligned array of 8-byte items, "
                     "got %d dimensions of %zd-byte items", view.ndim, view.itemsize);
        PyBuffer_Release(&view);
        return NULL;
    }
    uint64_t *d = (uint64_t *)view.buf;
    const Py_ssize_t n = view.len / 8;
    Py_BEGIN_ALLOW_THREADS
    if (n > 1) {
        uint64_t ring[SHUFFLE_AHEAD];
        Py_ssize_t next = n - 1; /* the next i to draw for (numpy's order: n-1 down to 1) */
        for (int k = 0; k < SHUFFLE_AHEAD && next >= 1; k++, next--) {
            ring[k] = interval(bg, (uint64_t)next);
            PREFETCH_W(d + ring[k]);
        }
        int pos = 0;
        for (Py_ssize_t i = n - 1; i >= 1; i--) {
            const uint64_t j = ring[pos];
            if (next >= 1) {
                ring[pos] = interval(bg, (uint64_t)next);
                PREFETCH_W(d + ring[pos]);
                next--;
            }
            pos = (pos + 1) & (SHUFFLE_AHEAD - 1);
            const uint64_t t = d[j];
            d[j] = d[i];
            d[i] = t;
        }
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"shuffle", shuffle, METH_VARARGS,
     "shuffle(bit_generator, array): numpy's Generator.shuffle of a 1-d array of 8-byte "
     "items"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef shuffle_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "snapshot_cli._shuffle",
    .m_doc = "numpy's Generator.shuffle of a window's order, its far items asked for ahead.",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC
PyInit__shuffle(void)
{
    return PyModule_Create(&shuffle_module);
}

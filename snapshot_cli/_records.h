/* What the compiled parts (_gather.c, _decode.c) share: asking for memory ahead, checking an
 * index buffer, and copying records to their slots. Header-only: each module is built alone
 * (setup.py), so everything here is static inline. */
#ifndef SNAPSHOT_CLI_RECORDS_H
#define SNAPSHOT_CLI_RECORDS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(p) __builtin_prefetch((p), 0, 0)
#define PREFETCH_W(p) __builtin_prefetch((p), 1, 0)
#else
#define PREFETCH(p) ((void)(p))
#define PREFETCH_W(p) ((void)(p))
#endif
/* Records ahead whose first bytes are asked for before they are copied: a gather of small
   records waits on memory for each one (random reads), unless the reads overlap. */
#define AHEAD 16

/* A C-contiguous, aligned buffer of int32 or int64 (itemsize 4 or 8) held in view: 0, or -1
   with TypeError naming it (name) and nothing held. */
static inline int
get_ints(PyObject *obj, Py_buffer *view, Py_ssize_t itemsize, const char *name)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        return -1;
    }
    const char *f = view->format == NULL ? "B" : view->format;
    if (*f == '<' || *f == '=' || *f == '@') {
        f++;
    }
    int ok = view->itemsize == itemsize && f[0] != '\0' && f[1] == '\0' &&
             (itemsize == 8 ? (f[0] == 'q' || f[0] == 'l') : (f[0] == 'i' || f[0] == 'l')) &&
             (uintptr_t)view->buf % (uintptr_t)itemsize == 0;
    if (!ok) {
        PyErr_Format(PyExc_TypeError, "%s must be an aligned buffer of int%zd, got format %s",
                     name, 8 * itemsize, view->format == NULL ? "(none)" : view->format);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* Whether two buffers share a byte: a copy into one must not change the indices it reads
   from the other (they are read again, without the GIL, after they were checked). */
static inline int
overlap(const Py_buffer *a, const Py_buffer *b)
{
    const char *p = (const char *)a->buf, *q = (const char *)b->buf;
    return a->len > 0 && b->len > 0 && p < q + b->len && q < p + a->len;
}

/* a * b into *out for a, b >= 0: 1, or 0 where it does not fit (nothing written). Sizes in
   bytes come from a file or a caller (a record count of up to 2**53 - 1, times a record's
   width): a product that wraps would pass a bounds check on a buffer it overruns. */
static inline int
mul_fits(int64_t a, int64_t b, int64_t *out)
{
    if (a < 0 || b < 0 || (b != 0 && a > INT64_MAX / b)) {
        return 0;
    }
    *out = a * b;
    return 1;
}

/* a + b into *out for a, b >= 0: 1, or 0 where it does not fit (nothing written). */
static inline int
add_fits(int64_t a, int64_t b, int64_t *out)
{
    if (a < 0 || b < 0 || a > INT64_MAX - b) {
        return 0;
    }
    *out = a + b;
    return 1;
}

#if defined(__SSE2__) || defined(__x86_64__) || defined(_M_X64)
#include <emmintrin.h>
#define HAVE_STREAM 1
/* Records of at least STREAM_MIN bytes bound for a buffer of at least STREAM_DEST_MIN are
   written past the CPU's caches (non-temporal stores): a slot window is up to 256 MiB, read
   only once it is whole, so a cached write only reads each line from memory first and
   evicts what the reads need. Measured, 2 GB of 12 KiB records in fresh processes: slot
   windows 1.07x (uncompressed) and 1.10x (lz4) in a first epoch, 1.16x and 1.21x later. A
   smaller window may still be in the caches when its batches are used: written as before. */
#define STREAM_MIN 1024
#define STREAM_DEST_MIN (16 << 20)

/* n bytes (a multiple of 64) from src to dest (16-byte aligned), past the caches. */
static inline void
stream_copy(unsigned char *dest, const unsigned char *src, size_t n)
{
    for (size_t i = 0; i < n; i += 64) {
        const __m128i a = _mm_loadu_si128((const __m128i *)(src + i));
        const __m128i b = _mm_loadu_si128((const __m128i *)(src + i + 16));
        const __m128i c = _mm_loadu_si128((const __m128i *)(src + i + 32));
        const __m128i d = _mm_loadu_si128((const __m128i *)(src + i + 48));
        _mm_stream_si128((__m128i *)(dest + i), a);
        _mm_stream_si128((__m128i *)(dest + i + 16), b);
        _mm_stream_si128((__m128i *)(dest + i + 32), c);
        _mm_stream_si128((__m128i *)(dest + i + 48), d);
    }
}
#endif

/* Record i of from (width bytes each) to row to[i] of dest (dest_len bytes), for i < count,
   the writes asked for ahead (a slot window's rows are random places in memory), large
   records to a large buffer written past the caches. No bounds are checked: the caller has.
   Without the GIL. */
static inline void
put_records(unsigned char *dest, Py_ssize_t dest_len, Py_ssize_t width, const int64_t *to,
            Py_ssize_t count, const unsigned char *from)
{
#ifdef HAVE_STREAM
    if (width >= STREAM_MIN && width % 64 == 0 && dest_len >= STREAM_DEST_MIN &&
        (uintptr_t)dest % 16 == 0) {
        for (Py_ssize_t i = 0; i < count; i++) {
            stream_copy(dest + to[i] * width, from + i * width, (size_t)width);
        }
        _mm_sfence(); /* the stores are seen before anything this thread does next */
        return;
    }
#endif
#define PUT_LOOP(W)                                                                \
    for (Py_ssize_t i = 0; i < count; i++) {                                       \
        if (i + AHEAD < count) {                                                   \
            PREFETCH_W(dest + to[i + AHEAD] * (W));                                \
        }                                                                          \
        memcpy(dest + to[i] * (W), from + i * (W), (size_t)(W));                   \
    }
    switch (width) { /* the common widths as constants: memcpy becomes a few moves */
    case 1: PUT_LOOP(1) break;
    case 2: PUT_LOOP(2) break;
    case 4: PUT_LOOP(4) break;
    case 8: PUT_LOOP(8) break;
    case 16: PUT_LOOP(16) break;
    case 32: PUT_LOOP(32) break;
    default: PUT_LOOP(width)
    }
#undef PUT_LOOP
}

#endif

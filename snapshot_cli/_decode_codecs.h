/* Part of snapshot_cli._decode (included by _decode.c alone): the system's decompressors,
 * liblz4 and libzstd, loaded at import by their stable C APIs (dlopen finds them where the
 * system's linker would; a function pointer left NULL: not found), and one buffer
 * decompressed with them.
 *
 *   load_codecs()                          # at import: lz4f_create, zstd_decompress set
 *   inflate(codec, src, size, dst, want)   # NULL, or what the decompressor said was wrong
 *   DecompressError                        # what decode raises with it (a ValueError)
 */
#ifndef SNAPSHOT_CLI_DECODE_CODECS_H
#define SNAPSHOT_CLI_DECODE_CODECS_H

#include "_records.h"
#if defined(__unix__) || defined(__APPLE__)
#include <dlfcn.h>
#define HAVE_DL 1
#endif

typedef size_t (*lz4f_create_t)(void **, unsigned);
typedef size_t (*lz4f_free_t)(void *);
typedef size_t (*lz4f_decompress_t)(void *, void *, size_t *, const void *, size_t *,
                                    const void *);
typedef unsigned (*is_error_t)(size_t);
typedef const char *(*error_name_t)(size_t);
typedef size_t (*zstd_decompress_t)(void *, size_t, const void *, size_t);

static lz4f_create_t lz4f_create;
static lz4f_free_t lz4f_free;
static lz4f_decompress_t lz4f_decompress;
static is_error_t lz4f_is_error, zstd_is_error;
static error_name_t lz4f_error_name, zstd_error_name;
static zstd_decompress_t zstd_decompress;
static PyObject *DecompressError; /* a ValueError: the data, not the call, is wrong */
#define LZ4F_VERSION 100

static void *
open_library(const char *const *names)
{
#ifdef HAVE_DL
    for (; *names != NULL; names++) {
        void *lib = dlopen(*names, RTLD_NOW | RTLD_LOCAL);
        if (lib != NULL) {
            return lib;
        }
    }
#else
    (void)names;
#endif
    return NULL;
}

static void
load_codecs(void)
{
#ifdef HAVE_DL
    static const char *const lz4_names[] = {"liblz4.so.1", "liblz4.so", "liblz4.1.dylib",
                                            "liblz4.dylib", NULL};
    static const char *const zstd_names[] = {"libzstd.so.1", "libzstd.so", "libzstd.1.dylib",
                                             "libzstd.dylib", NULL};
    void *lz4 = open_library(lz4_names);
    if (lz4 != NULL) {
        lz4f_create = (lz4f_create_t)dlsym(lz4, "LZ4F_createDecompressionContext");
        lz4f_free = (lz4f_free_t)dlsym(lz4, "LZ4F_freeDecompressionContext");
        lz4f_decompress = (lz4f_decompress_t)dlsym(lz4, "LZ4F_decompress");
        lz4f_is_error = (is_error_t)dlsym(lz4, "LZ4F_isError");
        lz4f_error_name = (error_name_t)dlsym(lz4, "LZ4F_getErrorName");
        if (!lz4f_create || !lz4f_free || !lz4f_decompress || !lz4f_is_error ||
            !lz4f_error_name) {
            lz4f_create = NULL;
        }
    }
    void *zstd = open_library(zstd_names);
    if (zstd != NULL) {
        zstd_decompress = (zstd_decompress_t)dlsym(zstd, "ZSTD_decompress");
        zstd_is_error = (is_error_t)dlsym(zstd, "ZSTD_isError");
        zstd_error_name = (error_name_t)dlsym(zstd, "ZSTD_getErrorName");
        if (!zstd_decompress || !zstd_is_error || !zstd_error_name) {
            zstd_decompress = NULL;
        }
    }
#endif
}

/* Decompress src into exactly want bytes of dst; NULL, or what went wrong. */
static const char *
inflate(int codec, const unsigned char *src, size_t size, unsigned char *dst, size_t want)
{
    if (codec == 1) {
        size_t got = zstd_decompress(dst, want, src, size);
        if (zstd_is_error(got)) {
            return zstd_error_name(got);
        }
        return got == want ? NULL : "decompressed to another size than the record batch says";
    }
    void *ctx = NULL;
    size_t status = lz4f_create(&ctx, LZ4F_VERSION);
    if (lz4f_is_error(status)) {
        return lz4f_error_name(status);
    }
    const char *problem = NULL;
    size_t out = 0, in = 0;
    for (;;) {
        size_t dst_size = want - out, src_size = size - in;
        status = lz4f_decompress(ctx, dst + out, &dst_size, src + in, &src_size, NULL);
        if (lz4f_is_error(status)) {
            problem = lz4f_error_name(status);
            break;
        }
        out += dst_size;
        in += src_size;
        if (status == 0) { /* the frame is complete */
            if (out != want) {
                problem = "decompressed to another size than the record batch says";
            }
            break;
        }
        if (in >= size || (dst_size == 0 && src_size == 0)) {
            problem = out >= want ? "decompressed to more than the record batch says"
                                  : "the compressed buffer ends before its frame";
            break;
        }
    }
    lz4f_free(ctx);
    return problem;
}

#endif /* SNAPSHOT_CLI_DECODE_CODECS_H */

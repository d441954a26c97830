/* Part of snapshot_cli._decode (included by _decode.c alone: one translation unit, so the
 * calls of its loops are compiled as before the parts were split): the crc32c (Castagnoli)
 * of a message with the CPU's crc32 instruction (SSE 4.2), three streams at once, joined by
 * tables that shift a crc over a block of zero bytes (zeros_table, filled at import).
 *
 *   crc32c_hw(crc, data, len)   # where HAVE_X86_CRC; only where hw_crc says the CPU has it
 *   hw_crc                      # set at import (PyInit__decode): HW_CRC
 */
#ifndef SNAPSHOT_CLI_DECODE_CRC32C_H
#define SNAPSHOT_CLI_DECODE_CRC32C_H

#include "_records.h"
#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define HAVE_X86_CRC 1
#endif

#define POLY 0x82f63b78u
#define LONG_BLOCK 8192
#define SHORT_BLOCK 256

static uint32_t long_shift[4][256], short_shift[4][256];
static int hw_crc = 0;

static uint32_t
gf2_times(const uint32_t *mat, uint32_t vec)
{
    uint32_t sum = 0;
    while (vec) {
        if (vec & 1) {
            sum ^= *mat;
        }
        vec >>= 1;
        mat++;
    }
    return sum;
}

static void
gf2_square(uint32_t *square, const uint32_t *mat)
{
    for (int n = 0; n < 32; n++) {
        square[n] = gf2_times(mat, mat[n]);
    }
}

/* The operator that appends len zero bytes to a crc register. */
static void
zeros_operator(uint32_t *even, size_t len)
{
    uint32_t odd[32], row = 1;
    odd[0] = POLY;
    for (int n = 1; n < 32; n++) {
        odd[n] = row;
        row <<= 1;
    }
    gf2_square(even, odd); /* 2 zero bits */
    gf2_square(odd, even); /* 4 zero bits */
    do {
        gf2_square(even, odd);
        len >>= 1;
        if (len == 0) {
            return;
        }
        gf2_square(odd, even);
        len >>= 1;
    } while (len);
    memcpy(even, odd, sizeof(odd));
}

static void
zeros_table(uint32_t table[4][256], size_t len)
{
    uint32_t op[32];
    zeros_operator(op, len);
    for (uint32_t n = 0; n < 256; n++) {
        table[0][n] = gf2_times(op, n);
        table[1][n] = gf2_times(op, n << 8);
        table[2][n] = gf2_times(op, n << 16);
        table[3][n] = gf2_times(op, n << 24);
    }
}

static inline uint32_t
shift(uint32_t table[4][256], uint32_t crc)
{
    return table[0][crc & 0xff] ^ table[1][(crc >> 8) & 0xff] ^ table[2][(crc >> 16) & 0xff] ^
           table[3][crc >> 24];
}

#ifdef HAVE_X86_CRC
__attribute__((target("sse4.2"))) static uint32_t
crc32c_hw(uint32_t crc, const unsigned char *next, size_t len)
{
    uint64_t crc0 = crc ^ 0xffffffffu, crc1, crc2, word;
    while (len && ((uintptr_t)next & 7) != 0) {
        crc0 = _mm_crc32_u8((uint32_t)crc0, *next++);
        len--;
    }
#define THREE_STREAMS(BLOCK, TABLE)                                                      \
    while (len >= 3 * (BLOCK)) {                                                         \
        crc1 = crc2 = 0;                                                                 \
        const unsigned char *end = next + (BLOCK);                                       \
        do {                                                                             \
            memcpy(&word, next, 8);                                                      \
            crc0 = _mm_crc32_u64(crc0, word);                                            \
            memcpy(&word, next + (BLOCK), 8);                                            \
            crc1 = _mm_crc32_u64(crc1, word);                                            \
            memcpy(&word, next + 2 * (BLOCK), 8);                                        \
            crc2 = _mm_crc32_u64(crc2, word);                                            \
            next += 8;                                                                   \
        } while (next < end);                                                            \
        crc0 = shift(TABLE, (uint32_t)crc0) ^ crc1;                                      \
        crc0 = shift(TABLE, (uint32_t)crc0) ^ crc2;                                      \
        next += 2 * (BLOCK);                                                             \
        len -= 3 * (BLOCK);                                                              \
    }
    THREE_STREAMS(LONG_BLOCK, long_shift)
    THREE_STREAMS(SHORT_BLOCK, short_shift)
#undef THREE_STREAMS
    while (len >= 8) {
        memcpy(&word, next, 8);
        crc0 = _mm_crc32_u64(crc0, word);
        next += 8;
        len -= 8;
    }
    while (len) {
        crc0 = _mm_crc32_u8((uint32_t)crc0, *next++);
        len--;
    }
    return (uint32_t)crc0 ^ 0xffffffffu;
}
#endif

#endif /* SNAPSHOT_CLI_DECODE_CRC32C_H */

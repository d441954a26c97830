/* The floor of a shuffled epoch of an uncompressed snapshot: the least work any loader that
 * hands out batches of its own must do, in C, no Python, no queues, two threads, for
 * benchmarks/floor.py (which builds it, writes its table and checks what it delivers).
 *
 *   floor MODE THREADS WINDOW_MB BATCH CHECK TABLE PATH...
 *
 * TABLE: int64 little-endian: ncols, the columns' record widths, then for every record batch
 * its file (an index into PATH...), its records, the start and length of its body (what is
 * checksummed) and where each column's values start in the file. Record batches are shuffled
 * and cut into windows of WINDOW_MB; each window's records go to random places (the plan is
 * made before the clock starts: a loader's plan is cheap). MODE:
 *
 *   base         decode + one copy, as benchmarks/_common.pyarrow_alone(copy=True): each
 *                record batch's columns, in file order (a thread per file in turn), copied
 *                into a buffer the thread reuses (in the CPU's caches);
 *   first        a first epoch through slot windows: each record batch's crc32c (snap's own
 *                code, snapshot_cli/_decode_crc32c.h), then each record copied to its slot of
 *                a window (records of 1 KiB or more past the caches, as snap does); two
 *                windows' memory goes round, its pages mapped on first use in one call per
 *                part; a batch is then a view of the window, so nothing more is done;
 *   first-huge   the same, the windows' memory in transparent huge pages (MADV_HUGEPAGE);
 *   first-gather a first epoch that gathers: each record batch's crc32c, then batches of BATCH
 *                records copied from the shard files' maps into 16 buffers going round;
 *   later        a later epoch: batches gathered from maps of the shard files made for each
 *                window and unmapped after it (no checksum);
 *   later-whole  the same from maps kept for the whole epoch (more memory mapped).
 *
 * CHECK 1: also digest what was delivered (a check run is not timed): per column, the sum of
 * every delivered record's first 8 bytes (fewer if narrower) as a little-endian integer; the
 * xor of the record batches' crc32c is always given. Prints one JSON line.
 */
#define _GNU_SOURCE
#include "_decode_crc32c.h"
#ifndef HAVE_X86_CRC
#error "floor.c checks with snap's crc32c, which needs x86-64 and GCC or clang"
#endif

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#define MAXCOL 16
#define RING 16 /* batch buffers going round (a loader's prefetch) */

typedef struct {
    int64_t file, nrec, body, body_len, col[MAXCOL];
} Rb;

enum { BASE, FIRST, FIRST_GATHER, LATER, LATER_WHOLE, FIRST_HUGE };

static int mode, nthreads, check, nfiles;
static int64_t ncols, width[MAXCOL], nrb, batch, total;
static Rb *rbs;
static char **paths;
static size_t *sizes;
static unsigned char **maps;          /* the whole epoch's maps (all modes but LATER) */
static unsigned char **wmaps;         /* LATER: this window's maps */
static int64_t *order, nwin, *wstart; /* record batches shuffled; window w: wstart[w].. */
static int64_t **slot;                /* window w's record k (in window order) goes to slot */
static int64_t **at;                  /* ... and slot i holds window record at[w][i] */
static int64_t **recrb, **recrow;     /* window record k: its record batch, its row there */
static int64_t *wrows;                /* records of window w */
static unsigned char *slab[2][MAXCOL];
static int64_t slab_rows;
static pthread_barrier_t bar;
static uint32_t crc_xor[64];
static uint64_t sums[64][MAXCOL];
static uint64_t rng = 88172645463325252ull;

static uint64_t
next_random(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void
shuffle(int64_t *a, int64_t n)
{
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(next_random() % (uint64_t)(i + 1)), t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

static double
seconds(clockid_t clock)
{
    struct timespec t;
    clock_gettime(clock, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t
head(const unsigned char *p, int64_t w)
{
    uint64_t v = 0;
    memcpy(&v, p, (size_t)(w < 8 ? w : 8));
    return v;
}

static void
map_all(unsigned char **into)
{
    for (int f = 0; f < nfiles; f++) {
        int fd = open(paths[f], O_RDONLY);
        if (fd < 0 || (into[f] = mmap(NULL, sizes[f], PROT_READ, MAP_SHARED, fd, 0)) == MAP_FAILED) {
            perror(paths[f]);
            exit(2);
        }
        close(fd);
    }
}

static void
unmap_all(unsigned char **from)
{
    for (int f = 0; f < nfiles; f++) munmap(from[f], sizes[f]);
}

static void
copy_record(unsigned char *to, const unsigned char *from, int64_t w, int stream)
{
#ifdef HAVE_STREAM
    if (stream) {
        stream_copy(to, from, (size_t)w);
        return;
    }
#endif
    memcpy(to, from, (size_t)w);
}

static unsigned char *
buffer(int64_t bytes)
{
    unsigned char *p = aligned_alloc(64, (size_t)((bytes + 127) / 64 * 64));
    if (!p) {
        fprintf(stderr, "floor: out of memory\n");
        exit(2);
    }
    return p;
}

static void
checksum(long tid, const Rb *r, const unsigned char *const *m)
{
    crc_xor[tid] ^= crc32c_hw(0, m[r->file] + r->body, (size_t)r->body_len);
}

static void
base_epoch(long tid)
{
    unsigned char *buf[MAXCOL];
    int64_t most = 0;
    for (int64_t i = 0; i < nrb; i++) most = rbs[i].nrec > most ? rbs[i].nrec : most;
    for (int64_t c = 0; c < ncols; c++) buf[c] = buffer(most * width[c]);
    for (int64_t i = 0; i < nrb; i++) {
        const Rb *r = &rbs[i];
        if (r->file % nthreads != tid) continue;
        for (int64_t c = 0; c < ncols; c++) {
            memcpy(buf[c], maps[r->file] + r->col[c], (size_t)(r->nrec * width[c]));
            if (check)
                for (int64_t k = 0; k < r->nrec; k++) sums[tid][c] += head(buf[c] + k * width[c], width[c]);
        }
    }
    for (int64_t c = 0; c < ncols; c++) free(buf[c]);
}

static void
slot_epoch(long tid)
{
    for (int64_t w = 0; w < nwin; w++) {
        const int s = (int)(w & 1);
        const int64_t rows = wrows[w];
        if (w < 2) /* the window's memory, first used: this thread's part of its pages */
            for (int64_t c = 0; c < ncols; c++) {
                const size_t bytes = (size_t)(rows * width[c]), part = bytes / (size_t)nthreads;
                const size_t a = (part * (size_t)tid) & ~(size_t)4095;
                const size_t b = tid == nthreads - 1 ? bytes : (part * (size_t)(tid + 1)) & ~(size_t)4095;
                if (b > a) madvise(slab[s][c] + a, b - a, MADV_POPULATE_WRITE);
            }
        pthread_barrier_wait(&bar);
        int64_t k = 0;
        for (int64_t j = wstart[w]; j < wstart[w + 1]; k += rbs[order[j]].nrec, j++) {
            if ((j - wstart[w]) % nthreads != tid) continue;
            const Rb *r = &rbs[order[j]];
            checksum(tid, r, (const unsigned char *const *)maps);
            for (int64_t c = 0; c < ncols; c++) {
                const unsigned char *from = maps[r->file] + r->col[c];
                const int stream = width[c] >= 1024 && width[c] % 64 == 0;
                for (int64_t q = 0; q < r->nrec; q++)
                    copy_record(slab[s][c] + slot[w][k + q] * width[c], from + q * width[c], width[c], stream);
            }
#ifdef HAVE_STREAM
            _mm_sfence();
#endif
        }
        pthread_barrier_wait(&bar);
        if (check)
            for (int64_t c = 0; c < ncols; c++)
                for (int64_t i = tid; i < rows; i += nthreads) sums[tid][c] += head(slab[s][c] + i * width[c], width[c]);
        pthread_barrier_wait(&bar); /* the window is served: its memory may be written again */
    }
}

static void
gather_epoch(long tid)
{
    unsigned char *ring[RING][MAXCOL];
    for (int b = 0; b < RING; b++)
        for (int64_t c = 0; c < ncols; c++) ring[b][c] = buffer(batch * width[c]);
    int64_t batchno = 0;
    for (int64_t w = 0; w < nwin; w++) {
        unsigned char **m = maps;
        if (mode == LATER) {
            if (tid == 0) map_all(wmaps);
            pthread_barrier_wait(&bar);
            m = wmaps;
        }
        if (mode == FIRST_GATHER) {
            for (int64_t j = wstart[w] + tid; j < wstart[w + 1]; j += nthreads) checksum(tid, &rbs[order[j]], (const unsigned char *const *)m);
            pthread_barrier_wait(&bar); /* nothing of a window is served before it is checked */
        }
        const int64_t rows = wrows[w];
        for (int64_t first = 0; first < rows; first += batch, batchno++) {
            if (batchno % nthreads != tid) continue;
            const int64_t n = rows - first < batch ? rows - first : batch;
            unsigned char **out = ring[batchno % RING];
            for (int64_t c = 0; c < ncols; c++) {
                for (int64_t i = 0; i < n; i++) {
                    if (i + 4 < n) {
                        const int64_t a = at[w][first + i + 4];
                        __builtin_prefetch(m[rbs[recrb[w][a]].file] + rbs[recrb[w][a]].col[c] + recrow[w][a] * width[c]);
                    }
                    const int64_t k = at[w][first + i];
                    const Rb *r = &rbs[recrb[w][k]];
                    memcpy(out[c] + i * width[c], m[r->file] + r->col[c] + recrow[w][k] * width[c], (size_t)width[c]);
                }
                if (check)
                    for (int64_t i = 0; i < n; i++) sums[tid][c] += head(out[c] + i * width[c], width[c]);
            }
        }
        pthread_barrier_wait(&bar);
        if (mode == LATER && tid == 0) unmap_all(wmaps);
    }
    for (int b = 0; b < RING; b++)
        for (int64_t c = 0; c < ncols; c++) free(ring[b][c]);
}

static void *
worker(void *arg)
{
    const long tid = (long)arg;
    if (mode == BASE) base_epoch(tid);
    else if (mode == FIRST || mode == FIRST_HUGE) slot_epoch(tid);
    else gather_epoch(tid);
    return NULL;
}

static void *
need(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

/* Record batches shuffled and cut into windows of window bytes, each window's records given
   random slots. */
static void
plan(int64_t window)
{
    order = need(sizeof(int64_t) * (size_t)nrb);
    for (int64_t i = 0; i < nrb; i++) order[i] = i;
    shuffle(order, nrb);
    wstart = need(sizeof(int64_t) * (size_t)(nrb + 1));
    wrows = need(sizeof(int64_t) * (size_t)(nrb + 1));
    slot = need(sizeof(int64_t *) * (size_t)nrb);
    at = need(sizeof(int64_t *) * (size_t)nrb);
    recrb = need(sizeof(int64_t *) * (size_t)nrb);
    recrow = need(sizeof(int64_t *) * (size_t)nrb);
    int64_t row_bytes = 0, bytes = 0, rows = 0;
    for (int64_t c = 0; c < ncols; c++) row_bytes += width[c];
    nwin = 0;
    wstart[0] = 0;
    slab_rows = 0;
    for (int64_t j = 0; j < nrb; j++) {
        rows += rbs[order[j]].nrec;
        bytes += rbs[order[j]].nrec * row_bytes;
        if (bytes < window && j < nrb - 1) continue;
        const int64_t w = nwin++;
        wstart[nwin] = j + 1;
        wrows[w] = rows;
        slot[w] = need(sizeof(int64_t) * (size_t)rows);
        at[w] = need(sizeof(int64_t) * (size_t)rows);
        recrb[w] = need(sizeof(int64_t) * (size_t)rows);
        recrow[w] = need(sizeof(int64_t) * (size_t)rows);
        int64_t k = 0;
        for (int64_t x = wstart[w]; x < wstart[w + 1]; x++)
            for (int64_t q = 0; q < rbs[order[x]].nrec; q++, k++) {
                recrb[w][k] = order[x];
                recrow[w][k] = q;
            }
        for (int64_t i = 0; i < rows; i++) slot[w][i] = i;
        shuffle(slot[w], rows);
        for (int64_t i = 0; i < rows; i++) at[w][slot[w][i]] = i;
        slab_rows = rows > slab_rows ? rows : slab_rows;
        rows = bytes = 0;
    }
}

int
main(int argc, char **argv)
{
    static const char *names[] = {"base", "first", "first-gather", "later", "later-whole", "first-huge"};
    if (argc < 8) {
        fprintf(stderr, "usage: floor MODE THREADS WINDOW_MB BATCH CHECK TABLE PATH...\n");
        return 2;
    }
    mode = -1;
    for (int i = 0; i < 6; i++)
        if (!strcmp(argv[1], names[i])) mode = i;
    nthreads = atoi(argv[2]);
    const int64_t window = (int64_t)atol(argv[3]) << 20;
    batch = atol(argv[4]);
    check = atoi(argv[5]);
    if (mode < 0 || nthreads < 1 || nthreads > 64 || window <= 0 || batch < 1) {
        fprintf(stderr, "floor: bad arguments\n");
        return 2;
    }
    FILE *t = fopen(argv[6], "rb");
    if (!t || fread(&ncols, 8, 1, t) != 1 || ncols < 1 || ncols > MAXCOL ||
        fread(width, 8, (size_t)ncols, t) != (size_t)ncols) {
        fprintf(stderr, "floor: cannot read the table %s\n", argv[6]);
        return 2;
    }
    for (int64_t c = 0; c < ncols; c++)
        if (width[c] < 1) {
            fprintf(stderr, "floor: column %ld of the table is %ld bytes wide\n", (long)c, (long)width[c]);
            return 2;
        }
    const size_t per = (size_t)(4 + ncols);
    int64_t row[4 + MAXCOL], room = 0;
    rbs = NULL;
    nrb = 0;
    while (fread(row, 8, per, t) == per) {
        if (nrb == room) {
            room = room ? 2 * room : 1024;
            Rb *more = realloc(rbs, sizeof(Rb) * (size_t)room);
            if (!more) {
                fprintf(stderr, "floor: out of memory reading the table\n");
                return 2;
            }
            rbs = more;
        }
        Rb *r = &rbs[nrb++];
        r->file = row[0], r->nrec = row[1], r->body = row[2], r->body_len = row[3];
        for (int64_t c = 0; c < ncols; c++) r->col[c] = row[4 + c];
        total += r->nrec;
    }
    fclose(t);
    nfiles = argc - 7;
    paths = argv + 7;
    sizes = need(sizeof(size_t) * (size_t)nfiles);
    maps = need(sizeof(unsigned char *) * (size_t)nfiles);
    wmaps = need(sizeof(unsigned char *) * (size_t)nfiles);
    for (int f = 0; f < nfiles; f++) {
        struct stat st;
        if (stat(paths[f], &st) != 0) {
            perror(paths[f]);
            return 2;
        }
        sizes[f] = (size_t)st.st_size;
    }
    for (int64_t i = 0; i < nrb; i++) {
        const Rb *r = &rbs[i];
        if (r->file < 0 || r->file >= nfiles || r->nrec < 0) {
            fprintf(stderr, "floor: record batch %ld of the table names file %ld of %d\n", (long)i,
                    (long)r->file, nfiles);
            return 2;
        }
        /* what it checks and copies lies inside the file (a wrong table: an error, not a crash) */
        const int64_t size = (int64_t)sizes[r->file];
        int inside = r->body >= 0 && r->body_len >= 0 && r->body_len <= size - r->body;
        for (int64_t c = 0; c < ncols && inside; c++)
            inside = r->col[c] >= 0 && r->nrec <= (size - r->col[c]) / width[c];
        if (!inside) {
            fprintf(stderr, "floor: record batch %ld of the table reaches past the end of %s "
                    "(%ld bytes)\n", (long)i, paths[r->file], (long)size);
            return 2;
        }
    }
    hw_crc = __builtin_cpu_supports("sse4.2");
    if (!hw_crc) {
        fprintf(stderr, "floor: this CPU has no crc32 instruction\n");
        return 2;
    }
    crc_init();
    plan(window);
    if (mode == FIRST || mode == FIRST_HUGE)
        for (int s = 0; s < 2; s++)
            for (int64_t c = 0; c < ncols; c++) {
                slab[s][c] = mmap(NULL, (size_t)(slab_rows * width[c]), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                if (slab[s][c] == MAP_FAILED) {
                    perror("mmap");
                    return 2;
                }
                if (mode == FIRST_HUGE) madvise(slab[s][c], (size_t)(slab_rows * width[c]), MADV_HUGEPAGE);
            }
    pthread_barrier_init(&bar, NULL, (unsigned)nthreads);
    pthread_t th[64];
    const double wall = seconds(CLOCK_MONOTONIC), cpu = seconds(CLOCK_PROCESS_CPUTIME_ID);
    if (mode != LATER) map_all(maps);
    for (long i = 0; i < nthreads; i++) pthread_create(&th[i], NULL, worker, (void *)i);
    for (long i = 0; i < nthreads; i++) pthread_join(th[i], NULL);
    if (mode != LATER) unmap_all(maps);
    const double took = seconds(CLOCK_MONOTONIC) - wall, used = seconds(CLOCK_PROCESS_CPUTIME_ID) - cpu;
    int64_t row_bytes = 0;
    for (int64_t c = 0; c < ncols; c++) row_bytes += width[c];
    uint32_t crcs = 0;
    for (int i = 0; i < nthreads; i++) crcs ^= crc_xor[i];
    printf("{\"mode\": \"%s\", \"seconds\": %.6f, \"cpu\": %.6f, \"bytes\": %ld, \"records\": %ld, "
           "\"windows\": %ld, \"crc_xor\": %u, \"sums\": [",
           names[mode], took, used, (long)(total * row_bytes), (long)total, (long)nwin, crcs);
    for (int64_t c = 0; c < ncols; c++) {
        uint64_t sum = 0;
        for (int i = 0; i < nthreads; i++) sum += sums[i][c];
        printf("%s%llu", c ? ", " : "", (unsigned long long)sum);
    }
    printf("]}\n");
    return 0;
}

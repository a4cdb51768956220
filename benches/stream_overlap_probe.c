/*
 * Stream-overlap probe (x86-64): how fast can a core read weights from memory while it does a
 * batched decode step's arithmetic on them?
 *
 * A decode step of B sequences reads every weight once and does B multiply-adds with each, so
 * its floor is the time memory takes to deliver the weights, as long as the arithmetic hides
 * under the stream. These hand-written loops, none of gptcore's code, each read a buffer of
 * their own per thread (256 MiB, huge pages advised) line after line, and alternate in rounds
 * in one process; each prints GB/s of buffer read per round. All but `read` do the arithmetic
 * of R rows of float32 against each 64-byte line (16 columns), one FMA chain per element, the
 * values in registers, A's values broadcast from L1:
 *
 *   read      two vector adds a line: the rate memory gives these threads
 *   rows4     4 rows x 16 columns (8 FMAs a line), a prefetch 48 lines ahead
 *   rows6     6 rows x 16 columns (12 FMAs a line, the AVX2 tile's depth step), the same
 *   rows8     the AVX2 tile kernel's eight rows: the buffer in chunks of two halves of 96
 *             lines; a 6-row strip through each half (12 FMAs a line, prefetching), then a
 *             2-row strip through both halves side by side (32 columns, 8 accumulators) from L1
 *   rows8p    rows8 with its memory prefetches spread evenly over the arithmetic: a cursor
 *             96 lines ahead fetches one line every 16 FMAs (3 steps of 4 in the 6-row
 *             strips, 1 of 2 in the 2-row strip), instead of each 6-row strip fetching 48
 *             lines ahead of itself and the 2-row strip none
 *   rows8r    the same cursor, half a chunk's lines to the two 6-row strips and half to the
 *             2-row strip (an equal share a tile, so three times the pace in the 2-row strip)
 *   rows8x4   eight rows as two 4-row strips through each half (the second from L1)
 *   rows8x1   eight rows, one 8-column vector at a time (8 FMAs, 8 broadcasts a step), two
 *             strips through each half (the second from L1)
 *   rows6ac   rows6 as gptcore's loops feed it: depth blocks of 384 steps, the A values of
 *             the block (9 KiB, 6 a step) read chunk by chunk, and each 96-step strip loading
 *             its 6 x 16 C tile (rows 12 KiB apart) at the start and storing it at the end
 *   rows8z    (AVX-512F only) 8 rows x 16 columns in 512-bit vectors, a broadcast memory
 *             operand per FMA (8 FMAs a line)
 *
 * `ratio` is the median over rounds of the loop's rate over `read`'s in the same round. A
 * loop that stays near 1 hides its arithmetic under the stream; one that falls below it
 * leaves memory idle while it computes, whatever the prefetch (48 lines ahead here; 96 to
 * 1024 lines, prefetcht1 and several interleaved prefetch streams ran the same on the Zen 3
 * of benches/JOURNAL.md). With `l1` as third argument every loop reads one 12 KiB chunk over
 * and over instead (rows6ac: one 48 KiB panel, from L2): its arithmetic rate with no memory in
 * the way (GB/s then counts the bytes the arithmetic went through).
 *
 * Build and run (needs AVX2 and FMA; rows8z is skipped without AVX-512F):
 *
 *   cc -O2 -pthread -o /tmp/stream_overlap_probe benches/stream_overlap_probe.c
 *   /tmp/stream_overlap_probe 2 11          # 2 threads, 11 rounds
 *   /tmp/stream_overlap_probe 2 5 l1
 */
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define BYTES (256ul << 20)
#define LINES (BYTES / 64)
/* A chunk: two halves of HALF lines (the packed panel's two 16-column halves, 96 depth steps). */
#define HALF 96
#define PF 48
#define MAXT 16
#define MAXR 64

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int in_l1 = 0;
/* A's values: up to 8 rows a step, HALF steps (read from L1). */
static float A[8 * HALF] __attribute__((aligned(64)));

typedef struct {
    const float *buf;
    int loop;
    int tid;
    float sink;
} Work;

#define ACC12 __m256 c0 = _mm256_setzero_ps(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, \
    c6 = c0, c7 = c0, c8 = c0, c9 = c0, c10 = c0, c11 = c0
#define FMA(c, x, b) c = _mm256_fmadd_ps(x, b, c)
#define SUM12 (_mm256_add_ps(_mm256_add_ps(_mm256_add_ps(c0, c1), _mm256_add_ps(c2, c3)), \
    _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(c4, c5), _mm256_add_ps(c6, c7)), \
    _mm256_add_ps(_mm256_add_ps(c8, c9), _mm256_add_ps(c10, c11)))))

#define first(v) _mm256_cvtss_f32(v)

/* Where the chunk from `line` on lies: in the buffer, or the first chunk again with `l1`. */
static const float *chunk_at(const float *buf, size_t line) {
    return in_l1 ? buf : buf + line * 16;
}

/* One depth step of R (4 or 6) rows x 16 columns: the line at b against R values of A, into the
 * accumulators c0 .. c11 of the enclosing scope. */
#define STEP_ROWS(R, a, b)                                                                        \
    do {                                                                                          \
        __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps((b) + 8), x;                         \
        x = _mm256_broadcast_ss((a) + 0); FMA(c0, x, b0); FMA(c1, x, b1);                        \
        x = _mm256_broadcast_ss((a) + 1); FMA(c2, x, b0); FMA(c3, x, b1);                        \
        x = _mm256_broadcast_ss((a) + 2); FMA(c4, x, b0); FMA(c5, x, b1);                        \
        x = _mm256_broadcast_ss((a) + 3); FMA(c6, x, b0); FMA(c7, x, b1);                        \
        if ((R) > 4) {                                                                            \
            x = _mm256_broadcast_ss((a) + 4); FMA(c8, x, b0); FMA(c9, x, b1);                    \
            x = _mm256_broadcast_ss((a) + 5); FMA(c10, x, b0); FMA(c11, x, b1);                  \
        }                                                                                         \
    } while (0)

/* R (4 or 6) rows x 16 columns through n lines from b, A `as` values a step. */
#define ROWS_STRIP(NAME, R)                                                                      \
    __attribute__((target("avx2,fma"))) static float NAME(const float *b, const float *a, int as, \
                                                          int n, int prefetch) {                  \
        ACC12;                                                                                    \
        _Pragma("GCC unroll 2")                                                                   \
        for (int k = 0; k < n; k++) {                                                             \
            if (prefetch) _mm_prefetch((const char *)(b + PF * 16), _MM_HINT_T0);                 \
            STEP_ROWS(R, a, b);                                                                   \
            a += as;                                                                              \
            b += 16;                                                                              \
        }                                                                                         \
        return first(SUM12);                                                                      \
    }
ROWS_STRIP(strip4, 4)
ROWS_STRIP(strip6, 6)

/* C tiles of the 8 panels of a column group, 6 rows of a 3072-column C, a thread's own. */
#define LDC 3072
static float C[MAXT][6 * LDC] __attribute__((aligned(64)));
/* A of one 384-step depth block, 6 values a step. */
static float A6[6 * 384] __attribute__((aligned(64)));

/* 6 rows x 16 columns through n lines, C loaded before and stored after (rows LDC apart). */
__attribute__((target("avx2,fma"))) static void strip6c(const float *b, const float *a, int n,
                                                        float *c) {
    __m256 c0 = _mm256_loadu_ps(c), c1 = _mm256_loadu_ps(c + 8);
    __m256 c2 = _mm256_loadu_ps(c + LDC), c3 = _mm256_loadu_ps(c + LDC + 8);
    __m256 c4 = _mm256_loadu_ps(c + 2 * LDC), c5 = _mm256_loadu_ps(c + 2 * LDC + 8);
    __m256 c6 = _mm256_loadu_ps(c + 3 * LDC), c7 = _mm256_loadu_ps(c + 3 * LDC + 8);
    __m256 c8 = _mm256_loadu_ps(c + 4 * LDC), c9 = _mm256_loadu_ps(c + 4 * LDC + 8);
    __m256 c10 = _mm256_loadu_ps(c + 5 * LDC), c11 = _mm256_loadu_ps(c + 5 * LDC + 8);
#pragma GCC unroll 2
    for (int k = 0; k < n; k++) {
        _mm_prefetch((const char *)(b + PF * 16), _MM_HINT_T0);
        STEP_ROWS(6, a, b);
        a += 6;
        b += 16;
    }
    _mm256_storeu_ps(c, c0); _mm256_storeu_ps(c + 8, c1);
    _mm256_storeu_ps(c + LDC, c2); _mm256_storeu_ps(c + LDC + 8, c3);
    _mm256_storeu_ps(c + 2 * LDC, c4); _mm256_storeu_ps(c + 2 * LDC + 8, c5);
    _mm256_storeu_ps(c + 3 * LDC, c6); _mm256_storeu_ps(c + 3 * LDC + 8, c7);
    _mm256_storeu_ps(c + 4 * LDC, c8); _mm256_storeu_ps(c + 4 * LDC + 8, c9);
    _mm256_storeu_ps(c + 5 * LDC, c10); _mm256_storeu_ps(c + 5 * LDC + 8, c11);
}

/* 2 rows x 32 columns: both halves (h floats apart) side by side, n steps. */
__attribute__((target("avx2,fma"))) static float strip2x32(const float *b, size_t h,
                                                           const float *a, int as, int n) {
    ACC12;
#pragma GCC unroll 2
    for (int k = 0; k < n; k++) {
        __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
        __m256 b2 = _mm256_loadu_ps(b + h), b3 = _mm256_loadu_ps(b + h + 8), x;
        x = _mm256_broadcast_ss(a + 0); FMA(c0, x, b0); FMA(c1, x, b1); FMA(c2, x, b2); FMA(c3, x, b3);
        x = _mm256_broadcast_ss(a + 1); FMA(c4, x, b0); FMA(c5, x, b1); FMA(c6, x, b2); FMA(c7, x, b3);
        a += as;
        b += 16;
    }
    return first(SUM12);
}

/* Paced: the strips below fetch the line at `*pf` on the steps whose number modulo 4 is below
 * `share` (0 to 4), and advance it. */
#define PACED_FETCH(k, share, p)                                                                  \
    do {                                                                                          \
        if (((k) & 3) < (share)) {                                                                \
            _mm_prefetch((const char *)(p), _MM_HINT_T0);                                         \
            (p) += 16;                                                                            \
        }                                                                                         \
    } while (0)

__attribute__((target("avx2,fma"))) static float strip6p(const float *b, const float *a, int n,
                                                         const float **pf, int share) {
    ACC12;
    const float *p = *pf;
#pragma GCC unroll 4
    for (int k = 0; k < n; k++) {
        PACED_FETCH(k, share, p);
        STEP_ROWS(6, a, b);
        a += 8;
        b += 16;
    }
    *pf = p;
    return first(SUM12);
}

__attribute__((target("avx2,fma"))) static float strip2x32p(const float *b, size_t h,
                                                            const float *a, int n,
                                                            const float **pf, int share) {
    ACC12;
    const float *p = *pf;
#pragma GCC unroll 4
    for (int k = 0; k < n; k++) {
        PACED_FETCH(k, share, p);
        __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
        __m256 b2 = _mm256_loadu_ps(b + h), b3 = _mm256_loadu_ps(b + h + 8), x;
        x = _mm256_broadcast_ss(a + 0); FMA(c0, x, b0); FMA(c1, x, b1); FMA(c2, x, b2); FMA(c3, x, b3);
        x = _mm256_broadcast_ss(a + 1); FMA(c4, x, b0); FMA(c5, x, b1); FMA(c6, x, b2); FMA(c7, x, b3);
        a += 8;
        b += 16;
    }
    *pf = p;
    return first(SUM12);
}

/* 8 rows x one 8-column vector (at b, lines 16 floats apart), n steps. */
__attribute__((target("avx2,fma"))) static float strip8x1(const float *b, const float *a, int n,
                                                          int prefetch) {
    ACC12;
#pragma GCC unroll 2
    for (int k = 0; k < n; k++) {
        if (prefetch) _mm_prefetch((const char *)(b + PF * 16), _MM_HINT_T0);
        __m256 b0 = _mm256_loadu_ps(b);
        FMA(c0, _mm256_broadcast_ss(a + 0), b0); FMA(c1, _mm256_broadcast_ss(a + 1), b0);
        FMA(c2, _mm256_broadcast_ss(a + 2), b0); FMA(c3, _mm256_broadcast_ss(a + 3), b0);
        FMA(c4, _mm256_broadcast_ss(a + 4), b0); FMA(c5, _mm256_broadcast_ss(a + 5), b0);
        FMA(c6, _mm256_broadcast_ss(a + 6), b0); FMA(c7, _mm256_broadcast_ss(a + 7), b0);
        a += 8;
        b += 16;
    }
    return first(SUM12);
}

__attribute__((target("avx512f"))) static float rows8z(const float *buf) {
    __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0, c7 = c0;
    for (size_t l = 0; l < LINES; l += 2 * HALF) {
        const float *b = chunk_at(buf, l);
        const float *a = A;
        for (int k = 0; k < 2 * HALF; k++) {
            _mm_prefetch((const char *)(b + PF * 16), _MM_HINT_T0);
            __m512 v = _mm512_loadu_ps(b);
            c0 = _mm512_fmadd_ps(_mm512_set1_ps(a[0]), v, c0);
            c1 = _mm512_fmadd_ps(_mm512_set1_ps(a[1]), v, c1);
            c2 = _mm512_fmadd_ps(_mm512_set1_ps(a[2]), v, c2);
            c3 = _mm512_fmadd_ps(_mm512_set1_ps(a[3]), v, c3);
            c4 = _mm512_fmadd_ps(_mm512_set1_ps(a[4]), v, c4);
            c5 = _mm512_fmadd_ps(_mm512_set1_ps(a[5]), v, c5);
            c6 = _mm512_fmadd_ps(_mm512_set1_ps(a[6]), v, c6);
            c7 = _mm512_fmadd_ps(_mm512_set1_ps(a[7]), v, c7);
            a = (k % HALF == HALF - 1) ? A : a + 8;
            b += 16;
        }
    }
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c0, c1), _mm512_add_ps(c2, c3)),
                             _mm512_add_ps(_mm512_add_ps(c4, c5), _mm512_add_ps(c6, c7)));
    return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"))) static float read_all(const float *buf) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0;
    for (size_t l = 0; l < LINES; l++) {
        const float *b = in_l1 ? buf + (l % (2 * HALF)) * 16 : buf + l * 16;
        s0 = _mm256_add_ps(s0, _mm256_loadu_ps(b));
        s1 = _mm256_add_ps(s1, _mm256_loadu_ps(b + 8));
    }
    return first(_mm256_add_ps(s0, s1));
}

enum { READ, ROWS4, ROWS6, ROWS6AC, ROWS8, ROWS8P, ROWS8R, ROWS8X4, ROWS8X1, ROWS8Z, NLOOPS };
static const char *NAMES[NLOOPS] = {"read",   "rows4",   "rows6",   "rows6ac", "rows8",
                                    "rows8p", "rows8r",  "rows8x4", "rows8x1", "rows8z"};
/* Rows of arithmetic per line, for the FLOP rate. */
static const int ROWS[NLOOPS] = {0, 4, 6, 6, 8, 8, 8, 8, 8, 8};

static void *run(void *p) {
    Work *w = p;
    const float *buf = w->buf;
    float s = 0;
    const size_t h = HALF * 16;
    switch (w->loop) {
    case READ:
        s = read_all(buf);
        break;
    case ROWS4:
    case ROWS6:
        for (size_t l = 0; l < LINES; l += 2 * HALF) {
            const float *b = chunk_at(buf, l);
            for (int half = 0; half < 2; half++)
                s += w->loop == ROWS4 ? strip4(b + half * h, A, 8, HALF, 1)
                                      : strip6(b + half * h, A, 8, HALF, 1);
        }
        break;
    case ROWS6AC:
        /* Panels of two 384-step halves; 8 panels a column group, each its own C tile. */
        for (size_t l = 0; l < LINES; l += 2 * 384) {
            const float *b = chunk_at(buf, l);
            float *c = C[w->tid] + ((l / 768) % 8) * 32;
            for (int k = 0; k < 384; k += HALF) {
                strip6c(b + k * 16, A6 + k * 6, HALF, c);
                strip6c(b + (384 + k) * 16, A6 + k * 6, HALF, c + 16);
            }
        }
        s = C[w->tid][0];
        break;
    case ROWS8:
        for (size_t l = 0; l < LINES; l += 2 * HALF) {
            const float *b = chunk_at(buf, l);
            s += strip6(b, A, 8, HALF, 1);
            s += strip6(b + h, A, 8, HALF, 1);
            s += strip2x32(b, h, A + 6, 8, HALF);
        }
        break;
    case ROWS8P:
    case ROWS8R: {
        /* A chunk's 192 lines: 144 by the 6-row strips and 48 by the 2-row one (P), or 96
         * and 96 (R); the cursor starts 96 lines ahead (one chunk's half). */
        int s6 = w->loop == ROWS8P ? 3 : 2, s2 = w->loop == ROWS8P ? 2 : 4;
        const float *pf = buf + (in_l1 ? 0 : HALF * 16);
        for (size_t l = 0; l < LINES; l += 2 * HALF) {
            const float *b = chunk_at(buf, l);
            if (in_l1)
                pf = buf;
            s += strip6p(b, A, HALF, &pf, s6);
            s += strip6p(b + h, A, HALF, &pf, s6);
            s += strip2x32p(b, h, A + 6, HALF, &pf, s2);
        }
        break;
    }
    case ROWS8X4:
        for (size_t l = 0; l < LINES; l += 2 * HALF) {
            const float *b = chunk_at(buf, l);
            for (int half = 0; half < 2; half++) {
                s += strip4(b + half * h, A, 8, HALF, 1);
                s += strip4(b + half * h, A + 4, 8, HALF, 0);
            }
        }
        break;
    case ROWS8X1:
        for (size_t l = 0; l < LINES; l += 2 * HALF) {
            const float *b = chunk_at(buf, l);
            for (int half = 0; half < 2; half++) {
                s += strip8x1(b + half * h, A, HALF, 1);
                s += strip8x1(b + half * h + 8, A, HALF, 0);
            }
        }
        break;
    case ROWS8Z:
        s = rows8z(buf);
        break;
    }
    w->sink = s;
    return NULL;
}

static int by_value(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static double median(double *v, int n) {
    double s[MAXR];
    memcpy(s, v, n * sizeof(double));
    qsort(s, n, sizeof(double), by_value);
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    int rounds = argc > 2 ? atoi(argv[2]) : 11;
    in_l1 = argc > 3 && strcmp(argv[3], "l1") == 0;
    if (threads < 1 || threads > MAXT || rounds < 1 || rounds > MAXR) {
        fprintf(stderr, "usage: %s [threads 1-%d] [rounds 1-%d] [l1]\n", argv[0], MAXT, MAXR);
        return 2;
    }
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
        fprintf(stderr, "this probe needs AVX2 and FMA\n");
        return 2;
    }
    int nloops = __builtin_cpu_supports("avx512f") ? NLOOPS : NLOOPS - 1;
    for (int i = 0; i < 8 * HALF; i++) A[i] = 1e-6f * (float)(i % 97);
    for (int i = 0; i < 6 * 384; i++) A6[i] = 1e-6f * (float)(i % 89);
    float *bufs[MAXT];
    for (int t = 0; t < threads; t++) {
        /* Room for the prefetches past the end; every byte written, so every page is there. */
        bufs[t] = aligned_alloc(2 << 20, BYTES + (2 << 20));
        if (!bufs[t]) {
            fprintf(stderr, "cannot allocate %lu bytes\n", BYTES);
            return 1;
        }
        madvise(bufs[t], BYTES + (2 << 20), MADV_HUGEPAGE);
        memset(bufs[t], 0, BYTES + (2 << 20));
    }
    static double rate[NLOOPS][MAXR];
    float sink = 0;
    printf("%d threads, %s, GB/s a round:\n", threads,
           in_l1 ? "one 12 KiB chunk again and again (L1)" : "256 MiB a thread from memory");
    for (int r = 0; r < rounds; r++) {
        for (int j = 0; j < nloops; j++) {
            int i = r % 2 ? nloops - 1 - j : j; /* A B ..., then ... B A */
            pthread_t th[MAXT];
            Work w[MAXT];
            double t0 = seconds();
            for (int t = 0; t < threads; t++) {
                w[t] = (Work){bufs[t], i, t, 0};
                pthread_create(&th[t], NULL, run, &w[t]);
            }
            for (int t = 0; t < threads; t++) {
                pthread_join(th[t], NULL);
                sink += w[t].sink;
            }
            rate[i][r] = (double)threads * BYTES / (seconds() - t0) / 1e9;
        }
        for (int i = 0; i < nloops; i++) printf(" %s %.1f", NAMES[i], rate[i][r]);
        printf("\n");
    }
    printf("\n| loop | GB/s (median) | ratio to read | GFLOP/s |\n|:--|--:|--:|--:|\n");
    for (int i = 0; i < nloops; i++) {
        double q[MAXR];
        for (int r = 0; r < rounds; r++) q[r] = rate[i][r] / rate[READ][r];
        double g = median(rate[i], rounds);
        /* 2 FLOPs per row and column: 32 per row a 64-byte line. */
        printf("| %s | %.1f | %.2f | %.0f |\n", NAMES[i], g, median(q, rounds),
               g / 64 * 32 * ROWS[i]);
    }
    return sink == 12345.0f; /* keeps the arithmetic */
}

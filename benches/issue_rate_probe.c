/*
 * Issue-rate probe (x86-64): does this core keep its FMA rate when a loop also needs many
 * instructions or loads a cycle?
 *
 * Seven hand-written loops, everything in registers or L1, alternate in rounds of a fixed time;
 * each prints its float32 GFLOP/s per round. All do the same FMA work per unit (twelve 256-bit
 * FMAs, or six 512-bit ones); they differ in what comes with it:
 *
 *   fma       twelve FMAs on registers, loop control: 13 instructions an iteration
 *   avx512    the AVX-512 tile's shape: one 512-bit load and twelve FMAs with a broadcast
 *             memory operand (16 instructions for 12 cycles of FMAs)
 *   avx2      the AVX2 tile's depth step (6 rows x 16 columns): 2 loads of B, 6 broadcasts
 *             of A, 12 FMAs, a prefetch, loop control: 24 instructions for 6 cycles of FMAs
 *   avx2x4    the same step four times an iteration, no prefetch: about 21 a step
 *   pairs     the same step with A's values broadcast two at a time (rows 2i and 2i+1) and
 *             a copy with the two swapped in each lane pair: 3 broadcasts and 3 in-register
 *             swaps instead of 6 broadcasts, so as many instructions as `avx2` (24) and 5
 *             loads instead of 8 (each accumulator holds a row pair's products interleaved)
 *   fma+int   `fma` with an independent integer move after each FMA: 25, no loads
 *   fma+mem   twelve FMAs, each with a 256-bit memory operand: 13, two loads a cycle
 *
 * A loop whose rate falls below `fma`'s, and moves from round to round while `fma` stays,
 * is limited by something other than the FMA units: on a core whose second hardware thread
 * is busy (another process, or another virtual machine's CPU), the front end and the load
 * pipes are shared, the FMA units less so.
 *
 * Build and run (needs AVX2 and FMA; the avx512 loop is skipped without AVX-512F):
 *
 *   cc -O2 -o /tmp/issue_rate_probe benches/issue_rate_probe.c
 *   /tmp/issue_rate_probe 30 0.25        # 30 rounds of 0.25 s per loop
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* A: 6 values a step, B: 16 a step, 256 steps (6 KiB + 16 KiB, in L1). */
#define STEPS 256
static float A[6 * STEPS + 64] __attribute__((aligned(64)));
static float B[16 * STEPS + 1024] __attribute__((aligned(64)));

#define REP12(op) op(0) op(1) op(2) op(3) op(4) op(5) op(6) op(7) op(8) op(9) op(10) op(11)
/* Every loop overwrites vector registers 0-15 and leaves the upper halves clean (vzeroupper). */
#define VECTORS                                                                               \
    "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",  \
        "xmm11", "xmm12", "xmm13", "xmm14", "xmm15"

/* Each function runs `units` units of 12 ymm FMAs (192 flops). */

static void fma_regs(long units) {
#define FMA_REG(i) "vfmadd231ps %%ymm14, %%ymm15, %%ymm" #i "\n\t"
    __asm__ volatile("vxorps %%ymm14, %%ymm14, %%ymm14\n\t"
                     "vxorps %%ymm15, %%ymm15, %%ymm15\n\t"
                     "1:\n\t" REP12(FMA_REG) "dec %0\n\tjnz 1b\n\tvzeroupper\n\t"
                     : "+r"(units)::"memory", "cc", VECTORS);
}

static void fma_int(long units) {
#define FMA_INT(i) "vfmadd231ps %%ymm14, %%ymm15, %%ymm" #i "\n\tmov $" #i ", %%r8d\n\t"
    __asm__ volatile("vxorps %%ymm14, %%ymm14, %%ymm14\n\t"
                     "vxorps %%ymm15, %%ymm15, %%ymm15\n\t"
                     "1:\n\t" REP12(FMA_INT) "dec %0\n\tjnz 1b\n\tvzeroupper\n\t"
                     : "+r"(units)::"memory", "cc", "r8", VECTORS);
}

static void fma_mem(long units) {
#define FMA_MEM(i) "vfmadd231ps " #i "*32(%1), %%ymm15, %%ymm" #i "\n\t"
    const float *b = B;
    __asm__ volatile("vxorps %%ymm15, %%ymm15, %%ymm15\n\t"
                     "1:\n\t" REP12(FMA_MEM) "dec %0\n\tjnz 1b\n\tvzeroupper\n\t"
                     : "+r"(units), "+r"(b)::"memory", "cc", VECTORS);
}

/* One depth step of the 6 x 16 tile: rows 0..5 accumulate in ymm{2r, 2r+1}. */
#define STEP_AVX2(a_off, b_off)                                                               \
    "vmovaps " #b_off "(%2), %%ymm12\n\t"                                                  \
    "vmovaps " #b_off "+32(%2), %%ymm13\n\t"                                               \
    "vbroadcastss " #a_off "(%1), %%ymm14\n\t"                                             \
    "vfmadd231ps %%ymm12, %%ymm14, %%ymm0\n\tvfmadd231ps %%ymm13, %%ymm14, %%ymm1\n\t"      \
    "vbroadcastss " #a_off "+4(%1), %%ymm15\n\t"                                           \
    "vfmadd231ps %%ymm12, %%ymm15, %%ymm2\n\tvfmadd231ps %%ymm13, %%ymm15, %%ymm3\n\t"      \
    "vbroadcastss " #a_off "+8(%1), %%ymm14\n\t"                                           \
    "vfmadd231ps %%ymm12, %%ymm14, %%ymm4\n\tvfmadd231ps %%ymm13, %%ymm14, %%ymm5\n\t"      \
    "vbroadcastss " #a_off "+12(%1), %%ymm15\n\t"                                          \
    "vfmadd231ps %%ymm12, %%ymm15, %%ymm6\n\tvfmadd231ps %%ymm13, %%ymm15, %%ymm7\n\t"      \
    "vbroadcastss " #a_off "+16(%1), %%ymm14\n\t"                                          \
    "vfmadd231ps %%ymm12, %%ymm14, %%ymm8\n\tvfmadd231ps %%ymm13, %%ymm14, %%ymm9\n\t"      \
    "vbroadcastss " #a_off "+20(%1), %%ymm15\n\t"                                          \
    "vfmadd231ps %%ymm12, %%ymm15, %%ymm10\n\tvfmadd231ps %%ymm13, %%ymm15, %%ymm11\n\t"

static void avx2(long units) {
    for (long r = 0; r < units / STEPS; r++) {
        long n = STEPS;
        const float *a = A, *b = B;
        __asm__ volatile("1:\n\t"
                         "prefetcht0 3072(%2)\n\t" STEP_AVX2(0, 0)
                         "add $24, %1\n\tadd $64, %2\n\tdec %0\n\tjnz 1b\n\tvzeroupper\n\t"
                         : "+r"(n), "+r"(a), "+r"(b)::"memory", "cc", VECTORS);
    }
}

/* Rows 2i and 2i+1 of one depth step: ymm14 = (a_2i, a_2i+1) in every lane pair, ymm15 the
 * same swapped; ymm{4i}..ymm{4i+3} accumulate their products with both halves of B. */
#define ROW_PAIR(a_off, acc0, acc1, acc2, acc3)                                                \
    "vbroadcastsd " #a_off "(%1), %%ymm14\n\t"                                              \
    "vpermilps $0xB1, %%ymm14, %%ymm15\n\t"                                                   \
    "vfmadd231ps %%ymm12, %%ymm14, %%ymm" #acc0 "\n\t"                                       \
    "vfmadd231ps %%ymm13, %%ymm14, %%ymm" #acc1 "\n\t"                                       \
    "vfmadd231ps %%ymm12, %%ymm15, %%ymm" #acc2 "\n\t"                                       \
    "vfmadd231ps %%ymm13, %%ymm15, %%ymm" #acc3 "\n\t"

static void pairs(long units) {
    for (long r = 0; r < units / STEPS; r++) {
        long n = STEPS;
        const float *a = A, *b = B;
        __asm__ volatile("1:\n\t"
                         "prefetcht0 3072(%2)\n\t"
                         "vmovaps (%2), %%ymm12\n\tvmovaps 32(%2), %%ymm13\n\t"
                         ROW_PAIR(0, 0, 1, 2, 3) ROW_PAIR(8, 4, 5, 6, 7) ROW_PAIR(16, 8, 9, 10, 11)
                         "add $24, %1\n\tadd $64, %2\n\tdec %0\n\tjnz 1b\n\tvzeroupper\n\t"
                         : "+r"(n), "+r"(a), "+r"(b)::"memory", "cc", VECTORS);
    }
}

static void avx2x4(long units) {
    for (long r = 0; r < units / STEPS; r++) {
        long n = STEPS / 4;
        const float *a = A, *b = B;
        __asm__ volatile("1:\n\t" STEP_AVX2(0, 0) STEP_AVX2(24, 64) STEP_AVX2(48, 128)
                             STEP_AVX2(72, 192)
                         "add $96, %1\n\tadd $256, %2\n\tdec %0\n\tjnz 1b\n\tvzeroupper\n\t"
                         : "+r"(n), "+r"(a), "+r"(b)::"memory", "cc", VECTORS);
    }
}

/* Two units per iteration: twelve 512-bit FMAs (384 flops). */
__attribute__((target("avx512f"))) static void avx512(long units) {
#define FMA_BCAST(i) "vfmadd231ps " #i "*4(%1)%{1to16%}, %%zmm12, %%zmm" #i "\n\t"
    for (long r = 0; r < units / STEPS; r++) {
        long n = STEPS / 2;
        const float *a = A, *b = B;
        __asm__ volatile("1:\n\tvmovaps (%2), %%zmm12\n\t" REP12(FMA_BCAST)
                         "add $48, %1\n\tadd $64, %2\n\tdec %0\n\tjnz 1b\n\tvzeroupper\n\t"
                         : "+r"(n), "+r"(a), "+r"(b)::"memory", "cc", VECTORS);
    }
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 20;
    double secs = argc > 2 ? atof(argv[2]) : 0.25;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
        fprintf(stderr, "needs AVX2 and FMA\n");
        return 1;
    }
    int has512 = __builtin_cpu_supports("avx512f");
    for (int i = 0; i < 6 * STEPS + 64; i++) A[i] = 1e-3f;
    for (int i = 0; i < 16 * STEPS + 1024; i++) B[i] = 1e-3f;
    const char *names[7] = {"fma", "avx512", "avx2", "avx2x4", "pairs", "fma+int", "fma+mem"};
    void (*loops[7])(long) = {fma_regs, avx512, avx2, avx2x4, pairs, fma_int, fma_mem};
    const long units = 1L << 18;
    printf("float32 GFLOP/s per round (one thread)\n");
    for (int w = 0; w < 7; w++) printf(" %8s", names[w]);
    printf("\n");
    for (int r = 0; r < rounds; r++) {
        for (int w = 0; w < 7; w++) {
            if (w == 1 && !has512) {
                printf(" %8s", "-");
                continue;
            }
            double t0 = seconds(), t;
            double flops = 0;
            do {
                loops[w](units);
                flops += units * 192.0;
                t = seconds();
            } while (t - t0 < secs);
            printf(" %8.1f", flops / (t - t0) / 1e9);
        }
        printf("\n");
        fflush(stdout);
    }
    return 0;
}

/* The register block both of our AVX2 kernels are built on (ot_kernel.c, bert_kernels.c): six rows by sixteen
 * columns of products over the whole depth, in twelve 8-wide accumulators. The Python side that builds a kernel puts
 * this file's text before the kernel's own (retromae_ir/encode/fused_max_pool.py, kernel_backbone.py). */
#include <immintrin.h>
#include <stdint.h>

#define MR 6
#define NR 16

/* acc[i][.] = sum over k < depth of a[k * MR + i] * b[k * NR + 0..15]: a is a packed panel of MR rows, b one of NR
 * columns */
static inline void packed_block(const float *a, const float *b, int64_t depth, __m256 acc[MR][2]) {
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00,
           c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    for (int64_t k = 0; k < depth; k++, a += MR, b += NR) {
        __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8), x;
        x = _mm256_broadcast_ss(a + 0); c00 = _mm256_fmadd_ps(x, b0, c00); c01 = _mm256_fmadd_ps(x, b1, c01);
        x = _mm256_broadcast_ss(a + 1); c10 = _mm256_fmadd_ps(x, b0, c10); c11 = _mm256_fmadd_ps(x, b1, c11);
        x = _mm256_broadcast_ss(a + 2); c20 = _mm256_fmadd_ps(x, b0, c20); c21 = _mm256_fmadd_ps(x, b1, c21);
        x = _mm256_broadcast_ss(a + 3); c30 = _mm256_fmadd_ps(x, b0, c30); c31 = _mm256_fmadd_ps(x, b1, c31);
        x = _mm256_broadcast_ss(a + 4); c40 = _mm256_fmadd_ps(x, b0, c40); c41 = _mm256_fmadd_ps(x, b1, c41);
        x = _mm256_broadcast_ss(a + 5); c50 = _mm256_fmadd_ps(x, b0, c50); c51 = _mm256_fmadd_ps(x, b1, c51);
    }
    acc[0][0] = c00; acc[0][1] = c01; acc[1][0] = c10; acc[1][1] = c11; acc[2][0] = c20; acc[2][1] = c21;
    acc[3][0] = c30; acc[3][1] = c31; acc[4][0] = c40; acc[4][1] = c41; acc[5][0] = c50; acc[5][1] = c51;
}

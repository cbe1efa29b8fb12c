/* DupMAE's OT max-pool on a CPU with AVX2 and FMA: the decoder's products with each document's max fused in, so no
 * logits are ever written. Loaded by retromae_ir/encode/fused_max_pool.py, which packs the operands, splits the
 * vocabulary panels between threads and explains why this kernel exists.
 *
 * rows: packed ordinary-token rows (after the head's transform) in panels of MR: rows_packed[r][k][MR], zero past
 *       the last row;
 * weights: the decoder's rows (vocabulary entries) in panels of NR: weights_packed[p][k][NR], zero past the last;
 * out: [documents, stride] running maxima, -inf before the first call; owner[n]: the document of row n.
 * Each call covers vocabulary panels [panel_begin, panel_end): calls on disjoint ranges may run concurrently. */
#include <immintrin.h>
#include <stdint.h>

#define MR 6
#define NR 16

int ot_kernel_mr(void) { return MR; }
int ot_kernel_nr(void) { return NR; }

/* one MR x NR block of products over the whole depth, in twelve accumulators (six rows by two halves of NR) */
static inline void block(const float *a, const float *b, int64_t depth, __m256 acc[MR][2]) {
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

/* Vocabulary panels outermost: a panel's weights (depth x NR floats, 24 KiB at depth 384) stay in the L1 cache while
 * every row panel streams past them. */
void ot_max_pool(const float *rows_packed, int64_t rows, int64_t depth, const float *weights_packed,
                 int64_t panel_begin, int64_t panel_end, const int64_t *owner, float *out, int64_t stride) {
    int64_t row_panels = (rows + MR - 1) / MR;
    for (int64_t p = panel_begin; p < panel_end; p++) {
        const float *b = weights_packed + p * depth * NR;
        for (int64_t r = 0; r < row_panels; r++) {
            __m256 acc[MR][2];
            block(rows_packed + r * depth * MR, b, depth, acc);
            for (int i = 0; i < MR && r * MR + i < rows; i++) {
                float *o = out + owner[r * MR + i] * stride + p * NR;
                _mm256_storeu_ps(o, _mm256_max_ps(_mm256_loadu_ps(o), acc[i][0]));
                _mm256_storeu_ps(o + 8, _mm256_max_ps(_mm256_loadu_ps(o + 8), acc[i][1]));
            }
        }
    }
}

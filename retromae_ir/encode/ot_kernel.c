/* DupMAE's OT max-pool on a CPU with AVX2 and FMA: the decoder's products with each document's max fused in, so no
 * logits are ever written. Loaded by retromae_ir/encode/fused_max_pool.py, which packs the operands, splits the
 * vocabulary panels between threads and explains why this kernel exists.
 *
 * rows: packed ordinary-token rows (after the head's transform) in panels of MR: rows_packed[r][k][MR], zero past
 *       the last row;
 * weights: the decoder's rows (vocabulary entries) in panels of NR: weights_packed[p][k][NR], zero past the last;
 * out: [documents, stride] running maxima, -inf before the first call; owner[n]: the document of row n.
 * Each call covers vocabulary panels [panel_begin, panel_end): calls on disjoint ranges may run concurrently.
 * Built after register_block.h (MR, NR, packed_block). */

int ot_kernel_mr(void) { return MR; }
int ot_kernel_nr(void) { return NR; }

/* Vocabulary panels outermost: a panel's weights (depth x NR floats, 24 KiB at depth 384) stay in the L1 cache while
 * every row panel streams past them. */
void ot_max_pool(const float *rows_packed, int64_t rows, int64_t depth, const float *weights_packed,
                 int64_t panel_begin, int64_t panel_end, const int64_t *owner, float *out, int64_t stride) {
    int64_t row_panels = (rows + MR - 1) / MR;
    for (int64_t p = panel_begin; p < panel_end; p++) {
        const float *b = weights_packed + p * depth * NR;
        for (int64_t r = 0; r < row_panels; r++) {
            __m256 acc[MR][2];
            packed_block(rows_packed + r * depth * MR, b, depth, acc);
            for (int i = 0; i < MR && r * MR + i < rows; i++) {
                float *o = out + owner[r * MR + i] * stride + p * NR;
                _mm256_storeu_ps(o, _mm256_max_ps(_mm256_loadu_ps(o), acc[i][0]));
                _mm256_storeu_ps(o + 8, _mm256_max_ps(_mm256_loadu_ps(o + 8), acc[i][1]));
            }
        }
    }
}

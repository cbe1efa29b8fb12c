/* A BERT encoder layer's work on a CPU with AVX2 and FMA, for --compile kernels: linear layers with their bias,
 * GELU, residual add and LayerNorm fused into the product's epilogue, and self-attention over each document's own
 * tokens (no padding). Loaded by retromae_ir/encode/kernel_backbone.py, which lays the operands out, splits the work
 * between threads and explains why these kernels exist.
 *
 * Matrices are row-major with a row stride (ld*). A linear layer's weight comes packed in panels of NR outputs:
 * w_packed[p][k][NR] = W[p * NR + j][k], so its width is a multiple of NR. Each call splits its rows (or tasks)
 * between `threads` OpenMP threads: compiled with -fopenmp after PyTorch has loaded its OpenMP runtime, these are
 * PyTorch's own workers, which would otherwise spin for milliseconds after each of its operations on the cores a
 * second pool's threads need. Built after register_block.h (MR, NR, packed_block). */
#include <math.h>
#include <omp.h>
#include <stdlib.h>

int bert_kernels_mr(void) { return MR; }
int bert_kernels_nr(void) { return NR; }

/* acc[i][.] = sum over k < depth of a[i][k] * b[k * ldb + 0..15]: six rows by two halves of NR, in registers */
static inline void block(const float *const a[MR], const float *b, int64_t ldb, int64_t depth, __m256 acc[MR][2]) {
    const float *a0 = a[0], *a1 = a[1], *a2 = a[2], *a3 = a[3], *a4 = a[4], *a5 = a[5];
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00,
           c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    for (int64_t k = 0; k < depth; k++, b += ldb) {
        __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8), x;
        x = _mm256_broadcast_ss(a0 + k); c00 = _mm256_fmadd_ps(x, b0, c00); c01 = _mm256_fmadd_ps(x, b1, c01);
        x = _mm256_broadcast_ss(a1 + k); c10 = _mm256_fmadd_ps(x, b0, c10); c11 = _mm256_fmadd_ps(x, b1, c11);
        x = _mm256_broadcast_ss(a2 + k); c20 = _mm256_fmadd_ps(x, b0, c20); c21 = _mm256_fmadd_ps(x, b1, c21);
        x = _mm256_broadcast_ss(a3 + k); c30 = _mm256_fmadd_ps(x, b0, c30); c31 = _mm256_fmadd_ps(x, b1, c31);
        x = _mm256_broadcast_ss(a4 + k); c40 = _mm256_fmadd_ps(x, b0, c40); c41 = _mm256_fmadd_ps(x, b1, c41);
        x = _mm256_broadcast_ss(a5 + k); c50 = _mm256_fmadd_ps(x, b0, c50); c51 = _mm256_fmadd_ps(x, b1, c51);
    }
    acc[0][0] = c00; acc[0][1] = c01; acc[1][0] = c10; acc[1][1] = c11; acc[2][0] = c20; acc[2][1] = c21;
    acc[3][0] = c30; acc[3][1] = c31; acc[4][0] = c40; acc[4][1] = c41; acc[5][0] = c50; acc[5][1] = c51;
}

/* the rows r .. r + MR - 1 of a (those past `end` repeat the last row: computed, never stored) */
static inline void row_pointers(const float *a, int64_t lda, int64_t r, int64_t end, const float *rows[MR]) {
    for (int i = 0; i < MR; i++)
        rows[i] = a + (r + i < end ? r + i : end - 1) * lda;
}

/* e^x to about 2 ulp over the range softmax and erf use (Cephes' polynomial after x = n ln 2 + r) */
static inline __m256 exp8(__m256 x) {
    x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.0f)), _mm256_set1_ps(-87.3365447505531f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i scale = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(scale));
}

/* BERT's GELU, x / 2 * (1 + erf(x / sqrt 2)), with erf to within 1.5e-7 (Abramowitz and Stegun 7.1.26) */
static inline __m256 gelu8(__m256 x) {
    const __m256 sign_bit = _mm256_set1_ps(-0.0f);
    __m256 z = _mm256_mul_ps(x, _mm256_set1_ps(0.70710678118654752f));
    __m256 az = _mm256_andnot_ps(sign_bit, z);
    /* t = 1 / (1 + p |z|): the reciprocal estimate and one Newton step (to about 1e-7; a division costs more) */
    __m256 d = _mm256_fmadd_ps(_mm256_set1_ps(0.3275911f), az, _mm256_set1_ps(1.0f)), t = _mm256_rcp_ps(d);
    t = _mm256_mul_ps(t, _mm256_fnmadd_ps(d, t, _mm256_set1_ps(2.0f)));
    __m256 p = _mm256_set1_ps(1.061405429f);
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.453152027f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.421413741f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.284496736f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.254829592f));
    p = _mm256_mul_ps(p, t);
    __m256 erf_abs = _mm256_fnmadd_ps(p, exp8(_mm256_mul_ps(_mm256_xor_ps(az, sign_bit), az)), _mm256_set1_ps(1.0f));
    __m256 erf = _mm256_or_ps(erf_abs, _mm256_and_ps(sign_bit, z));
    return _mm256_mul_ps(_mm256_mul_ps(x, _mm256_set1_ps(0.5f)), _mm256_add_ps(erf, _mm256_set1_ps(1.0f)));
}

/* rows[i][c] -> rows[c][i] */
static inline void transpose8(__m256 rows[8]) {
    __m256 t0 = _mm256_unpacklo_ps(rows[0], rows[1]), t1 = _mm256_unpackhi_ps(rows[0], rows[1]),
           t2 = _mm256_unpacklo_ps(rows[2], rows[3]), t3 = _mm256_unpackhi_ps(rows[2], rows[3]),
           t4 = _mm256_unpacklo_ps(rows[4], rows[5]), t5 = _mm256_unpackhi_ps(rows[4], rows[5]),
           t6 = _mm256_unpacklo_ps(rows[6], rows[7]), t7 = _mm256_unpackhi_ps(rows[6], rows[7]);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE),
           u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE),
           u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE),
           u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    rows[0] = _mm256_permute2f128_ps(u0, u4, 0x20); rows[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    rows[2] = _mm256_permute2f128_ps(u2, u6, 0x20); rows[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    rows[4] = _mm256_permute2f128_ps(u0, u4, 0x31); rows[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    rows[6] = _mm256_permute2f128_ps(u2, u6, 0x31); rows[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

static inline float sum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float max8(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* x = (x - mean) / sqrt(var + eps) * gamma + beta over one row of `width` (a multiple of 8) */
static void layer_norm_row(float *x, int64_t width, const float *gamma, const float *beta, float eps) {
    __m256 s = _mm256_setzero_ps();
    for (int64_t j = 0; j < width; j += 8) s = _mm256_add_ps(s, _mm256_loadu_ps(x + j));
    __m256 mean = _mm256_set1_ps(sum8(s) / (float)width), v = _mm256_setzero_ps();
    for (int64_t j = 0; j < width; j += 8) {
        __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + j), mean);
        v = _mm256_fmadd_ps(d, d, v);
    }
    __m256 rstd = _mm256_set1_ps(1.0f / sqrtf(sum8(v) / (float)width + eps));
    for (int64_t j = 0; j < width; j += 8) {
        __m256 d = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + j), mean), rstd);
        _mm256_storeu_ps(x + j, _mm256_fmadd_ps(d, _mm256_loadu_ps(gamma + j), _mm256_loadu_ps(beta + j)));
    }
}

/* rows [r, r + MR) of a (those past `end` repeat the last row: computed, never stored) as one panel:
 * packed[k][i] = a[r + i][k], so the product's six broadcasts of each depth index read one cache line */
static void pack_rows(const float *a, int64_t lda, int64_t r, int64_t end, int64_t depth, float *packed) {
    const float *rows[MR];
    row_pointers(a, lda, r, end, rows);
    for (int64_t k = 0; k < depth; k++)
        for (int i = 0; i < MR; i++) packed[k * MR + i] = rows[i][k];
}

/* out[r] = epilogue(a[r] W^T + bias) for rows [row_begin, row_end) of `rows`: then GELU (gelu != 0), then
 * + residual[r] (residual may be out itself: each element is read just before it is written), then LayerNorm over
 * the row (gamma != NULL). head_size > 0 (a multiple of NR; no residual, no LayerNorm): out is head-major instead,
 * [outputs / head_size][rows][head_size], so that attention reads each head's rows one after another. Rows go in chunks, packed once into row panels that stay in the L2 cache while every weight
 * panel passes. Returns 0, or -1 when the chunk's buffer could not be allocated. */
static int linear_rows(const float *a, int64_t lda, int64_t row_begin, int64_t row_end, int64_t rows,
                       int64_t depth, const float *w_packed, int64_t panels, const float *bias, int gelu,
                       const float *residual, int64_t ldr, const float *gamma, const float *beta, float eps,
                       float *out, int64_t ldo, int64_t head_size) {
    int64_t chunk = (65536 / depth) / MR * MR;
    if (chunk < MR) chunk = MR;
    float *packed = malloc(sizeof(float) * chunk * depth);
    if (!packed) return -1;
    for (int64_t m0 = row_begin; m0 < row_end; m0 += chunk) {
        int64_t m1 = m0 + chunk < row_end ? m0 + chunk : row_end;
        for (int64_t r = m0; r < m1; r += MR) pack_rows(a, lda, r, m1, depth, packed + (r - m0) * depth);
        for (int64_t p = 0; p < panels; p++) {
            const float *b = w_packed + p * depth * NR;
            __m256 bias0 = _mm256_loadu_ps(bias + p * NR), bias1 = _mm256_loadu_ps(bias + p * NR + 8);
            for (int64_t r = m0; r < m1; r += MR) {
                __m256 acc[MR][2];
                packed_block(packed + (r - m0) * depth, b, depth, acc);
                for (int i = 0; i < MR && r + i < m1; i++) {
                    __m256 x0 = _mm256_add_ps(acc[i][0], bias0), x1 = _mm256_add_ps(acc[i][1], bias1);
                    if (gelu) { x0 = gelu8(x0); x1 = gelu8(x1); }
                    if (residual) {
                        const float *res = residual + (r + i) * ldr + p * NR;
                        x0 = _mm256_add_ps(x0, _mm256_loadu_ps(res));
                        x1 = _mm256_add_ps(x1, _mm256_loadu_ps(res + 8));
                    }
                    float *o = head_size ? out + ((p * NR / head_size) * rows + r + i) * head_size + p * NR % head_size
                                         : out + (r + i) * ldo + p * NR;
                    _mm256_storeu_ps(o, x0);
                    _mm256_storeu_ps(o + 8, x1);
                }
            }
        }
        if (gamma)
            for (int64_t r = m0; r < m1; r++) layer_norm_row(out + r * ldo, panels * NR, gamma, beta, eps);
    }
    free(packed);
    return 0;
}

/* Self-attention of one head over one document's `length` tokens, for `queries` query rows (every token, or the
 * first only), the queries scaled already (1 / sqrt(head_dim) folded into their weights). k_panels: scratch of ceil(length / NR) * head_dim * NR floats; scores: MR * that many / head_dim. */
static void attend(const float *q, int64_t ldq, int64_t queries, const float *k, const float *v, int64_t ldkv,
                   int64_t length, int64_t head_dim, float *out, int64_t ldo,
                   float *k_panels, float *scores) {
    int64_t key_panels = (length + NR - 1) / NR, padded = key_panels * NR;
    for (int64_t j = 0; j < padded; j += 8)  /* K^T in panels: k_panels[j / NR][c][j % NR], 8 x 8 at a time */
        for (int64_t c = 0; c < head_dim; c += 8) {
            __m256 rows[8];
            for (int i = 0; i < 8; i++)
                rows[i] = j + i < length ? _mm256_loadu_ps(k + (j + i) * ldkv + c) : _mm256_setzero_ps();
            transpose8(rows);
            for (int i = 0; i < 8; i++) _mm256_storeu_ps(k_panels + (j / NR) * head_dim * NR + (c + i) * NR + j % NR,
                                                         rows[i]);
        }
    for (int64_t r = 0; r < queries; r += MR) {
        const float *rows[MR], *weights[MR];
        __m256 acc[MR][2];
        float inverse[MR];
        row_pointers(q, ldq, r, queries, rows);
        for (int64_t jp = 0; jp < key_panels; jp++) {
            block(rows, k_panels + jp * head_dim * NR, NR, head_dim, acc);
            for (int i = 0; i < MR; i++) {
                _mm256_storeu_ps(scores + i * padded + jp * NR, acc[i][0]);
                _mm256_storeu_ps(scores + i * padded + jp * NR + 8, acc[i][1]);
            }
        }
        for (int i = 0; i < MR; i++) {
            float *s = scores + i * padded;
            for (int64_t j = length; j < padded; j++) s[j] = -INFINITY;
            __m256 m = _mm256_set1_ps(-INFINITY);
            for (int64_t j = 0; j < padded; j += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(s + j));
            __m256 top = _mm256_set1_ps(max8(m)), total = _mm256_setzero_ps();
            for (int64_t j = 0; j < padded; j += 8) {
                __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), top));
                _mm256_storeu_ps(s + j, e);
                if (j + 8 <= length) total = _mm256_add_ps(total, e);
            }
            float sum = sum8(total);
            for (int64_t j = length / 8 * 8; j < length; j++) sum += s[j];
            for (int64_t j = length; j < padded; j++) s[j] = 0.0f;
            inverse[i] = 1.0f / sum;
            weights[i] = s;
        }
        for (int64_t c = 0; c < head_dim; c += NR) {
            block(weights, v + c, ldkv, length, acc);
            for (int i = 0; i < MR && r + i < queries; i++) {
                __m256 norm = _mm256_set1_ps(inverse[i]);
                _mm256_storeu_ps(out + (r + i) * ldo + c, _mm256_mul_ps(acc[i][0], norm));
                _mm256_storeu_ps(out + (r + i) * ldo + c + 8, _mm256_mul_ps(acc[i][1], norm));
            }
        }
    }
}

/* this thread's part of `items`, in whole groups of `multiple` (a range starting mid-block would compute the
 * block's rows twice) */
static void share(int64_t items, int64_t multiple, int64_t *begin, int64_t *end) {
    int64_t groups = (items + multiple - 1) / multiple, t = omp_get_thread_num(), n = omp_get_num_threads();
    *begin = groups * t / n * multiple;
    *end = groups * (t + 1) / n * multiple;
    if (*end > items) *end = items;
}

int bert_linear(const float *a, int64_t lda, int64_t rows, int64_t depth, const float *w_packed, int64_t panels,
                const float *bias, int gelu, const float *residual, int64_t ldr, const float *gamma,
                const float *beta, float eps, float *out, int64_t ldo, int64_t head_size, int threads) {
    int failed = 0;
#pragma omp parallel num_threads(threads) reduction(| : failed)
    {
        int64_t begin, end;
        share(rows, MR, &begin, &end);
        if (begin < end)
            failed |= linear_rows(a, lda, begin, end, rows, depth, w_packed, panels, bias, gelu, residual, ldr,
                                  gamma, beta, eps, out, ldo, head_size);
    }
    return failed;
}

/* Tasks [task_begin, task_end) of documents x heads (task t: document t / heads, head t % heads). q, k and v are
 * head-major ([heads][rows][head_dim], q of q_rows, k and v of kv_rows); starts[d] .. starts[d + 1]: document
 * d's rows of k and v. first_only: one query row per document (q's and out's row d), else every token (q's and
 * out's rows starts[d] ...); out is row-major, head h's columns at h * head_dim. Returns 0, or -1 when the scratch
 * could not be allocated. */
static int attention_tasks(const float *q, int64_t q_rows, const float *k, const float *v, int64_t kv_rows,
                           const int64_t *starts, int64_t heads, int64_t head_dim, int first_only,
                           float *out, int64_t ldo, int64_t task_begin, int64_t task_end) {
    int64_t longest = 0;
    for (int64_t t = task_begin; t < task_end; t++) {
        int64_t d = t / heads, length = starts[d + 1] - starts[d];
        if (length > longest) longest = length;
    }
    int64_t padded = (longest + NR - 1) / NR * NR;
    float *k_panels = malloc(sizeof(float) * (padded * head_dim + MR * padded + 1));
    if (!k_panels) return -1;
    float *scores = k_panels + padded * head_dim;
    for (int64_t t = task_begin; t < task_end; t++) {
        int64_t d = t / heads, h = t % heads, start = starts[d], length = starts[d + 1] - start;
        if (length == 0) continue;
        int64_t first_row = first_only ? d : start, queries = first_only ? 1 : length;
        attend(q + (h * q_rows + first_row) * head_dim, head_dim, queries, k + (h * kv_rows + start) * head_dim,
               v + (h * kv_rows + start) * head_dim, head_dim, length, head_dim,
               out + first_row * ldo + h * head_dim, ldo, k_panels, scores);
    }
    free(k_panels);
    return 0;
}

/* Self-attention of `documents` x `heads` tasks (see attention_tasks), split between `threads` threads. */
int bert_attention(const float *q, int64_t q_rows, const float *k, const float *v, int64_t kv_rows,
                   const int64_t *starts, int64_t documents, int64_t heads, int64_t head_dim, int first_only,
                   float *out, int64_t ldo, int threads) {
    int failed = 0;
#pragma omp parallel num_threads(threads) reduction(| : failed)
    {
        int64_t begin, end;
        share(documents * heads, 1, &begin, &end);
        if (begin < end)
            failed |= attention_tasks(q, q_rows, k, v, kv_rows, starts, heads, head_dim, first_only, out, ldo,
                                      begin, end);
    }
    return failed;
}

/* cpu_graph.c: the CPU's kernels of the graph layers (dl_backend_ops,
 * "the graph layers' kernels"): broadcasting binaries, strided copies and
 * reductions, the unary elementwise family, layernorm and softmax on an
 * axis. Strided ops walk rows: every dimension but the last is one row,
 * the last an inner loop at each operand's stride; rows are split over
 * the pool. Each op picks its operation once, then loops. */
#include "tensor/cpu/cpu.h"

#include <math.h>
#include <string.h>

/* ---- walking a dl_strided -------------------------------------------------- */

/* A walk over the rows of g (all dimensions but the last): the row's
 * coordinates and the three operands' offsets, advanced a row at a time
 * without the divisions of locating each. */
typedef struct row_walk {
    const dl_strided *g;
    int64_t c[DL_STRIDED_DIMS];
    int64_t off[3];
} row_walk;

static void walk_at(row_walk *w, const dl_strided *g, int64_t r)
{
    w->g = g;
    w->off[0] = w->off[1] = w->off[2] = 0;
    for (int d = g->nd - 2; d >= 0; d--) {
        w->c[d] = r % g->shape[d];
        r /= g->shape[d];
        for (int k = 0; k < 3; k++)
            w->off[k] += w->c[d] * g->st[k][d];
    }
}

static inline void walk_next(row_walk *w)
{
    const dl_strided *g = w->g;
    for (int d = g->nd - 2; d >= 0; d--) {
        for (int k = 0; k < 3; k++)
            w->off[k] += g->st[k][d];
        if (++w->c[d] < g->shape[d])
            return;
        for (int k = 0; k < 3; k++)
            w->off[k] -= g->shape[d] * g->st[k][d];
        w->c[d] = 0;
    }
}

static int64_t rows_of(const dl_strided *g)
{
    return g->nd > 1 ? dl_shape_numel(g->nd - 1, g->shape) : 1;
}

static int64_t inner_of(const dl_strided *g) { return g->nd > 0 ? g->shape[g->nd - 1] : 1; }

/* The inner stride of operand k. */
static int64_t inner_st(const dl_strided *g, int k) { return g->nd > 0 ? g->st[k][g->nd - 1] : 0; }

/* Whether operand k lies contiguously in g's order (its strides those of
 * a dense row-major tensor of g's shape). */
static bool dense(const dl_strided *g, int k)
{
    int64_t want = 1;
    for (int d = g->nd - 1; d >= 0; d--) {
        if (g->shape[d] != 1 && g->st[k][d] != want)
            return false;
        want *= g->shape[d];
    }
    return true;
}

/* Rows a task should take at least: about CPU_GRAIN elements. */
static int64_t row_grain(const dl_strided *g)
{
    int64_t in = inner_of(g);
    return in >= CPU_GRAIN ? 1 : CPU_GRAIN / (in > 0 ? in : 1);
}

/* ---- binary ops ------------------------------------------------------------ */

/* Offsets of the three operands at position j of shape (nd dimensions). */
static void pos_at(const int64_t *shape, const int64_t (*st)[DL_STRIDED_DIMS], int nd,
                   int64_t j, int64_t off[3])
{
    off[0] = off[1] = off[2] = 0;
    for (int d = nd - 1; d >= 0; d--) {
        int64_t c = j % shape[d];
        j /= shape[d];
        for (int q = 0; q < 3; q++)
            off[q] += c * st[q][d];
    }
}

typedef struct bin_job {
    dl_binop op;
    const dl_strided *g;
    const float *a, *b, *dy;
    float *y;
    const dl_act *post;
    int k;                     /* binary_bwd: the operand */
} bin_job;

/* y[i * sy] = a[i * sa] op b[i * sb], i < n. y may be a or b (in place:
 * no restrict; gcc's overlap check lets equal pointers vectorize). Inlined
 * into each wide clone of its callers: an out-of-line copy runs the
 * default ISA. */
static inline __attribute__((always_inline)) void bin_line(dl_binop op, const float *a, int64_t sa, const float *b, int64_t sb,
                     float *y, int64_t sy, int64_t n)
{
    switch (op) {
    case DL_BIN_ADD:
        for (int64_t i = 0; i < n; i++)
            y[i * sy] = a[i * sa] + b[i * sb];
        break;
    case DL_BIN_SUB:
        for (int64_t i = 0; i < n; i++)
            y[i * sy] = a[i * sa] - b[i * sb];
        break;
    case DL_BIN_MUL:
        for (int64_t i = 0; i < n; i++)
            y[i * sy] = a[i * sa] * b[i * sb];
        break;
    case DL_BIN_DIV:
        for (int64_t i = 0; i < n; i++)
            y[i * sy] = a[i * sa] / b[i * sb];
        break;
    }
}

/* Dense operands: y[i] = a[i] op b[i] over flat ranges, vectorized. */
CPU_WIDE static void bin_flat_task(void *ctx, int64_t b0, int64_t b1)
{
    const bin_job *j = ctx;
    bin_line(j->op, j->a + b0, 1, j->b + b0, 1, j->y + b0, 1, b1 - b0);
    if (j->post)
        cpu_act_rows(*j->post, j->y + b0, b1 - b0);
}

CPU_WIDE static void bin_rows_task(void *ctx, int64_t r0, int64_t r1)
{
    const bin_job *j = ctx;
    const dl_strided *g = j->g;
    int64_t in = inner_of(g);
    row_walk w;
    walk_at(&w, g, r0);
    /* rows of unit strides (a per-channel vector over the blocked layout:
     * rows of a channel block) with literal strides, which vectorize */
    bool unit = inner_st(g, 0) == 1 && inner_st(g, 1) == 1 && inner_st(g, 2) == 1;
    for (int64_t r = r0; r < r1; r++, walk_next(&w)) {
        float *y = j->y + w.off[2];
        if (unit)
            bin_line(j->op, j->a + w.off[0], 1, j->b + w.off[1], 1, y, 1, in);
        else
            bin_line(j->op, j->a + w.off[0], inner_st(g, 0), j->b + w.off[1],
                     inner_st(g, 1), y, inner_st(g, 2), in);
        if (j->post && inner_st(g, 2) == 1)
            cpu_act_rows(*j->post, y, in);
        else
            for (int64_t i = 0; j->post && i < in; i++)
                cpu_act_rows(*j->post, y + i * inner_st(g, 2), 1);
    }
}

/* Whether g's last two dimensions (P, L) are planes: y dense over them,
 * each operand either dense too or repeating one line of L along P (a
 * per-channel vector over the blocked layout: (n, C / B, H * W, B), the
 * vector's strides (C, B, 0, 1)). */
static bool planes(const dl_strided *g)
{
    int nd = g->nd;
    if (nd < 2 || g->st[2][nd - 1] != 1 || g->st[2][nd - 2] != g->shape[nd - 1])
        return false;
    for (int k = 0; k < 2; k++)
        if (g->st[k][nd - 1] != 1 ||
            (g->st[k][nd - 2] != 0 && g->st[k][nd - 2] != g->shape[nd - 1]))
            return false;
    return true;
}

/* One plane: P lines of L, operand a's lines sa apart, b's sb (0: one
 * line repeated). The op picked once, outside the loops. */
#define PLANE_LOOP(expr)                                                      \
    for (int64_t q = 0; q < P; q++) {                                         \
        const float *aq = a + q * sa, *bq = b + q * sb;                       \
        float *yq = y + q * L;                                                \
        for (int64_t i = 0; i < L; i++)                                       \
            yq[i] = (expr);                                                   \
    }

static inline __attribute__((always_inline)) void bin_plane(
    dl_binop op, const float *a, int64_t sa, const float *b, int64_t sb, float *y, int64_t P,
    int64_t L)
{
    switch (op) {
    case DL_BIN_ADD: PLANE_LOOP(aq[i] + bq[i]) break;
    case DL_BIN_SUB: PLANE_LOOP(aq[i] - bq[i]) break;
    case DL_BIN_MUL: PLANE_LOOP(aq[i] * bq[i]) break;
    case DL_BIN_DIV: PLANE_LOOP(aq[i] / bq[i]) break;
    }
}
#undef PLANE_LOOP

/* Planes [p0, p1) (planes() holds): a line at a time, no walk between
 * lines, which are short (a channel block: 16 floats with AVX-512, a
 * length the compiler then knows). */
CPU_WIDE static void bin_planes_task(void *ctx, int64_t p0, int64_t p1)
{
    const bin_job *j = ctx;
    const dl_strided *g = j->g;
    int nd = g->nd;
    int64_t P = g->shape[nd - 2], L = g->shape[nd - 1];
    int64_t sa = g->st[0][nd - 2], sb = g->st[1][nd - 2];
    for (int64_t p = p0; p < p1; p++) {
        int64_t off[3];
        pos_at(g->shape, g->st, nd - 2, p, off);
        const float *a = j->a + off[0], *b = j->b + off[1];
        float *y = j->y + off[2];
        if (L == 16)
            bin_plane(j->op, a, sa, b, sb, y, P, 16);
        else
            bin_plane(j->op, a, sa, b, sb, y, P, L);
        if (j->post)
            cpu_act_rows(*j->post, y, P * L);
    }
}

void cpu_binary_fwd(dl_backend *be, dl_binop op, const dl_strided *g, const float *a,
                           const float *b, const dl_act *post, float *y)
{
    (void)be;
    bin_job j = { .op = op, .g = g, .a = a, .b = b, .y = y, .post = post };
    int64_t plane = g->nd >= 2 ? g->shape[g->nd - 2] * g->shape[g->nd - 1] : 0;
    if (dense(g, 0) && dense(g, 1) && dense(g, 2))
        dl_parallel_for(dl_shape_numel(g->nd, g->shape), CPU_GRAIN, bin_flat_task, &j);
    else if (plane > 0 && planes(g))
        dl_parallel_for(dl_shape_numel(g->nd - 2, g->shape),
                        plane >= CPU_GRAIN ? 1 : CPU_GRAIN / plane, bin_planes_task, &j);
    else
        dl_parallel_for(rows_of(g), row_grain(g), bin_rows_task, &j);
}

/* ---- gathering sums: the gradients of broadcast operands, reductions ------- */

/* g split for operand k: the dimensions it is read along (kept: one
 * element of k each) and those it is repeated along (summed over), each
 * in g's order. */
typedef struct split {
    int     nk, nr;
    int64_t ks[DL_STRIDED_DIMS], rs[DL_STRIDED_DIMS];
    int64_t kst[3][DL_STRIDED_DIMS], rst[3][DL_STRIDED_DIMS];
    int64_t kn, rn;
} split;

static void split_of(const dl_strided *g, int k, split *s)
{
    memset(s, 0, sizeof(*s));
    s->kn = s->rn = 1;
    for (int d = 0; d < g->nd; d++) {
        bool summed = g->st[k][d] == 0 && g->shape[d] > 1;
        int at = summed ? s->nr++ : s->nk++;
        (summed ? s->rs : s->ks)[at] = g->shape[d];
        for (int q = 0; q < 3; q++)
            (summed ? s->rst : s->kst)[q][at] = g->st[q][d];
        *(summed ? &s->rn : &s->kn) *= g->shape[d];
    }
}

/* What a gathered term is: the summed operand (dy or x) alone, negated,
 * or times the partial of a binary op. */
typedef enum term_kind { TERM_ONE, TERM_NEG, TERM_MUL_B, TERM_MUL_A, TERM_DIV_A, TERM_DIV_B } term_kind;

typedef struct gather_job {
    split s;
    int k;                 /* the operand written */
    int src;               /* the operand summed (dy or x) */
    term_kind term;
    const float *ops[3];
    float *out;
    float scale;
    /* The last dimension of g kept, contiguous in the summed and written
     * operands: a line of `line` outputs is summed at once (vectorized
     * across it), the kept dimensions before it split over the pool. */
    int64_t line;
} gather_job;

/* acc[i] += the term at i, over n values at the operands' strides: in
 * `lanes` mode acc has n entries (a line of outputs), else one. */
static void term_line(term_kind t, float *restrict acc, bool lanes, const float *restrict v,
                      int64_t sv, const float *restrict a, int64_t sa, const float *restrict b,
                      int64_t sb, int64_t n)
{
    int64_t w = lanes ? 1 : 0;
    if (!lanes && t == TERM_ONE && sv == 1) {
        acc[0] += cpu_sum_floats(v, n);
        return;
    }
    switch (t) {
    case TERM_ONE:
        for (int64_t i = 0; i < n; i++)
            acc[i * w] += v[i * sv];
        break;
    case TERM_NEG:
        for (int64_t i = 0; i < n; i++)
            acc[i * w] -= v[i * sv];
        break;
    case TERM_MUL_B:
        for (int64_t i = 0; i < n; i++)
            acc[i * w] += v[i * sv] * b[i * sb];
        break;
    case TERM_MUL_A:
        for (int64_t i = 0; i < n; i++)
            acc[i * w] += v[i * sv] * a[i * sa];
        break;
    case TERM_DIV_A:
        for (int64_t i = 0; i < n; i++)
            acc[i * w] += v[i * sv] / b[i * sb];
        break;
    case TERM_DIV_B:
        for (int64_t i = 0; i < n; i++)
            acc[i * w] -= v[i * sv] * a[i * sa] / (b[i * sb] * b[i * sb]);
        break;
    }
}

/* acc[i] = sum over r < rows of v[r * sv + i], i < n. */
static inline __attribute__((always_inline)) void sum_rows(float *restrict acc,
                                                           const float *restrict v, int64_t sv,
                                                           int64_t rows, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        acc[i] = 0.0f;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < n; i++)
            acc[i] += v[r * sv + i];
}

/* Line mode's plain sum over one summed dimension (global average pooling
 * over the blocked layout: lines of a channel block, summed over H * W):
 * out[i * so] = scale * sum over r < rows of v[r * sv + i], i < L, for
 * the kept positions [e0, e1). Inlined into gather_task's wide clones. */
static inline void sum_lines(const gather_job *j, int64_t e0, int64_t e1)
{
    const split *s = &j->s;
    int64_t L = j->line, rows = s->rn, sv = s->rst[j->src][0];
    float acc[256];
    for (int64_t e = e0; e < e1; e++) {
        int64_t kb[3];
        pos_at(s->ks, s->kst, s->nk - 1, e, kb);
        for (int64_t c0 = 0; c0 < L; c0 += 256) {
            int64_t n = L - c0 < 256 ? L - c0 : 256;
            const float *v = j->ops[j->src] + kb[j->src] + c0;
            if (n == 16)                /* a channel block: sums in one register */
                sum_rows(acc, v, sv, rows, 16);
            else
                sum_rows(acc, v, sv, rows, n);
            float *out = j->out + kb[j->k] + c0;
            for (int64_t i = 0; i < n; i++)
                out[i] = acc[i] * j->scale;
        }
    }
}

/* Kept positions [e0, e1): one output each, or (line mode) a line of
 * them. The summed dimensions are walked with their last one as the
 * inner loop (in line mode, the kept last dimension is). */
CPU_WIDE static void gather_task(void *ctx, int64_t e0, int64_t e1)
{
    const gather_job *j = ctx;
    const split *s = &j->s;
    if (j->line > 1 && s->nr == 1 && j->term == TERM_ONE) {
        sum_lines(j, e0, e1);
        return;
    }
    int64_t L = j->line, outer_r = s->rn, inner = 1, ist[3] = { 0, 0, 0 };
    int nk = s->nk - (L > 1 ? 1 : 0), nr = s->nr;
    if (L > 1) {                       /* inner loop: the kept line */
        inner = L;
        for (int q = 0; q < 3; q++)
            ist[q] = s->kst[q][s->nk - 1];
    } else if (nr > 0) {               /* inner loop: the last summed dimension */
        nr--;
        inner = s->rs[nr];
        outer_r = s->rn / inner;
        for (int q = 0; q < 3; q++)
            ist[q] = s->rst[q][nr];
    }
    float acc[256];
    for (int64_t e = e0; e < e1; e++) {
        int64_t kb[3], ro[3];
        pos_at(s->ks, s->kst, nk, e, kb);
        for (int64_t c0 = 0; c0 < (L > 1 ? L : 1); c0 += 256) {
            int64_t n = L > 1 ? (L - c0 < 256 ? L - c0 : 256) : inner;
            memset(acc, 0, (size_t)(L > 1 ? n : 1) * sizeof(float));
            for (int64_t r = 0; r < outer_r; r++) {
                pos_at(s->rs, s->rst, nr, r, ro);
                const float *op[3];
                for (int q = 0; q < 3; q++)
                    op[q] = j->ops[q] ? j->ops[q] + kb[q] + ro[q] + c0 * ist[q] : NULL;
                term_line(j->term, acc, L > 1, op[j->src], ist[j->src], op[0], ist[0], op[1],
                          ist[1], n);
            }
            float *out = j->out + kb[j->k] + c0 * ist[j->k];
            for (int64_t i = 0; i < (L > 1 ? n : 1); i++)
                out[i * ist[j->k]] = acc[i] * j->scale;
        }
    }
}

static void run_gather(gather_job *j)
{
    const split *s = &j->s;
    bool lines = s->nk > 0 && s->kst[j->src][s->nk - 1] == 1 &&
                 s->kst[j->k][s->nk - 1] == 1 && s->ks[s->nk - 1] > 1;
    /* A kept dimension contiguous in both: sum whole lines of it. */
    j->line = lines ? s->ks[s->nk - 1] : 1;
    int64_t units = s->kn / j->line, per = s->rn * j->line;
    dl_parallel_for(units, per >= CPU_GRAIN ? 1 : CPU_GRAIN / per, gather_task, j);
}

static term_kind bin_term(dl_binop op, int k)
{
    switch (op) {
    case DL_BIN_ADD: return TERM_ONE;
    case DL_BIN_SUB: return k == 0 ? TERM_ONE : TERM_NEG;
    case DL_BIN_MUL: return k == 0 ? TERM_MUL_B : TERM_MUL_A;
    default:         return k == 0 ? TERM_DIV_A : TERM_DIV_B;
    }
}

/* Dense, unbroadcast operand k: dx = dy * partial, elementwise. */
CPU_WIDE static void bin_bwd_flat_task(void *ctx, int64_t b0, int64_t b1)
{
    const bin_job *j = ctx;
    const float *restrict dy = j->dy, *restrict a = j->a, *restrict b = j->b;
    float *restrict dx = j->y;
    switch (bin_term(j->op, j->k)) {
    case TERM_ONE:
        memcpy(dx + b0, dy + b0, (size_t)(b1 - b0) * sizeof(float));
        break;
    case TERM_NEG:
        for (int64_t i = b0; i < b1; i++)
            dx[i] = -dy[i];
        break;
    case TERM_MUL_B:
        for (int64_t i = b0; i < b1; i++)
            dx[i] = dy[i] * b[i];
        break;
    case TERM_MUL_A:
        for (int64_t i = b0; i < b1; i++)
            dx[i] = dy[i] * a[i];
        break;
    case TERM_DIV_A:
        for (int64_t i = b0; i < b1; i++)
            dx[i] = dy[i] / b[i];
        break;
    case TERM_DIV_B:
        for (int64_t i = b0; i < b1; i++)
            dx[i] = -dy[i] * a[i] / (b[i] * b[i]);
        break;
    }
}

void cpu_binary_bwd(dl_backend *be, dl_binop op, const dl_strided *g, int k,
                           const float *a, const float *b, const float *dy, float *dx)
{
    (void)be;
    if (dense(g, 0) && dense(g, 1) && dense(g, 2)) {
        bin_job j = { .op = op, .g = g, .a = a, .b = b, .dy = dy, .y = dx, .k = k };
        dl_parallel_for(dl_shape_numel(g->nd, g->shape), CPU_GRAIN, bin_bwd_flat_task, &j);
        return;
    }
    gather_job j = { .k = k, .src = 2, .term = bin_term(op, k), .ops = { a, b, dy },
                     .out = dx, .scale = 1.0f };
    split_of(g, k, &j.s);
    run_gather(&j);
}

void cpu_reduce_fwd(dl_backend *be, const dl_strided *g, const float *x, float *y,
                           float scale)
{
    (void)be;
    gather_job j = { .k = 1, .src = 0, .term = TERM_ONE, .ops = { x, y, NULL }, .out = y,
                     .scale = scale };
    split_of(g, 1, &j.s);
    run_gather(&j);
}

/* ---- strided copies -------------------------------------------------------- */

typedef struct copy_job {
    const dl_strided *g;
    const float *x;
    float *y;
    float scale;
} copy_job;

/* y (st[1]) = scale * x (st[0]), a row at a time. */
CPU_WIDE static void copy_task(void *ctx, int64_t r0, int64_t r1)
{
    const copy_job *j = ctx;
    const dl_strided *g = j->g;
    int64_t in = inner_of(g), sx = inner_st(g, 0), sy = inner_st(g, 1);
    row_walk w;
    walk_at(&w, g, r0);
    for (int64_t r = r0; r < r1; r++, walk_next(&w)) {
        const float *restrict x = j->x + w.off[0];
        float *restrict y = j->y + w.off[1];
        if (j->scale == 1.0f && sx == 1 && sy == 1)
            memcpy(y, x, (size_t)in * sizeof(float));
        else
            for (int64_t i = 0; i < in; i++)
                y[i * sy] = j->scale * x[i * sx];
    }
}

#define TILE 16

/* A transpose: the last two dimensions of g copied in TILE x TILE tiles,
 * so that both x (contiguous along the one) and y (along the other) are
 * read and written a cache line at a time; the dimensions before them
 * split over the pool. */
CPU_WIDE static void transpose_task(void *ctx, int64_t u0, int64_t u1)
{
    const copy_job *j = ctx;
    const dl_strided *g = j->g;
    int nd = g->nd;
    int64_t P = g->shape[nd - 2], I = g->shape[nd - 1];
    int64_t xp = g->st[0][nd - 2], xi = g->st[0][nd - 1];
    int64_t yp = g->st[1][nd - 2], yi = g->st[1][nd - 1];
    for (int64_t u = u0; u < u1; u++) {
        int64_t off[3] = { 0, 0, 0 }, r = u;
        for (int d = nd - 3; d >= 0; d--) {
            int64_t c = r % g->shape[d];
            r /= g->shape[d];
            off[0] += c * g->st[0][d];
            off[1] += c * g->st[1][d];
        }
        const float *x = j->x + off[0];
        float *y = j->y + off[1];
        for (int64_t p0 = 0; p0 < P; p0 += TILE)
            for (int64_t i0 = 0; i0 < I; i0 += TILE)
                for (int64_t p = p0; p < P && p < p0 + TILE; p++)
                    for (int64_t i = i0; i < I && i < i0 + TILE; i++)
                        y[p * yp + i * yi] = x[p * xp + i * xi];
    }
}

void cpu_copy_strided(dl_backend *be, const dl_strided *g, const float *x, float *y)
{
    (void)be;
    int nd = g->nd, p = -1;
    /* x strided along the last dimension but contiguous along another:
     * that one next to last, and tiles. */
    for (int d = 0; nd >= 2 && g->st[0][nd - 1] != 1 && g->st[1][nd - 1] == 1 && d < nd - 1;
         d++)
        if (g->st[0][d] == 1 && g->shape[d] > 1)
            p = d;
    if (p >= 0) {
        dl_strided t = *g;
        for (int d = p; d < nd - 2; d++) {      /* move dimension p to nd - 2 */
            t.shape[d] = g->shape[d + 1];
            t.st[0][d] = g->st[0][d + 1];
            t.st[1][d] = g->st[1][d + 1];
        }
        t.shape[nd - 2] = g->shape[p];
        t.st[0][nd - 2] = g->st[0][p];
        t.st[1][nd - 2] = g->st[1][p];
        copy_job j = { &t, x, y, 1.0f };
        int64_t tile = t.shape[nd - 2] * t.shape[nd - 1];
        dl_parallel_for(dl_shape_numel(nd - 2, t.shape), CPU_GRAIN / (tile ? tile : 1) + 1,
                        transpose_task, &j);
        return;
    }
    copy_job j = { g, x, y, 1.0f };
    dl_parallel_for(rows_of(g), row_grain(g), copy_task, &j);
}

void cpu_reduce_bwd(dl_backend *be, const dl_strided *g, const float *dy, float *dx,
                           float scale)
{
    (void)be;
    /* dx is operand 0 and dy operand 1: copy_task reads st[0], writes st[1]. */
    dl_strided sw = *g;
    memcpy(sw.st[0], g->st[1], sizeof(sw.st[0]));
    memcpy(sw.st[1], g->st[0], sizeof(sw.st[1]));
    copy_job j = { &sw, dy, dx, scale };
    dl_parallel_for(rows_of(&sw), row_grain(&sw), copy_task, &j);
}

/* ---- the unary family ------------------------------------------------------ */

#define GELU_K 0.7978845608028654f          /* sqrt(2 / pi) */
#define INV_SQRT2 0.7071067811865476f
#define INV_SQRT_2PI 0.3989422804014327f
#define TWO_OVER_SQRT_PI 1.1283791670955126f

typedef struct un_job {
    dl_unary u;
    const float *x, *y, *dy;
    float *out;
} un_job;

static float sigm(float x) { return 1.0f / (1.0f + cpu_expf(-x)); }

/* x clamped to [lo, hi], NaN passed on (torch.clamp): compares, which
 * vectorize, where fminf and fmaxf are calls into libm. */
static inline float clampf(float x, float lo, float hi) { return x < lo ? lo : x > hi ? hi : x; }

CPU_WIDE static void un_fwd_task(void *ctx, int64_t b0, int64_t b1)
{
    const un_job *j = ctx;
    const float *x = j->x;   /* y may be x: a layer in place at inference */
    float *y = j->out;
    float a = j->u.a, b = j->u.b;
    switch (j->u.kind) {
    case DL_UN_GELU:
        for (int64_t i = b0; i < b1; i++)
            y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * INV_SQRT2));
        break;
    case DL_UN_GELU_TANH:
        for (int64_t i = b0; i < b1; i++)
            y[i] = 0.5f * x[i] * (1.0f + tanhf(GELU_K * (x[i] + 0.044715f * x[i] * x[i] * x[i])));
        break;
    case DL_UN_SILU:
        for (int64_t i = b0; i < b1; i++)
            y[i] = x[i] * sigm(x[i]);
        break;
    case DL_UN_POW:
        for (int64_t i = b0; i < b1; i++)
            y[i] = powf(x[i], a);
        break;
    case DL_UN_SQRT:
        for (int64_t i = b0; i < b1; i++)
            y[i] = sqrtf(x[i]);
        break;
    case DL_UN_ERF:
        for (int64_t i = b0; i < b1; i++)
            y[i] = erff(x[i]);
        break;
    case DL_UN_LEAKY_RELU:
        for (int64_t i = b0; i < b1; i++)
            y[i] = x[i] > 0.0f ? x[i] : a * x[i];
        break;
    case DL_UN_CLIP:
        for (int64_t i = b0; i < b1; i++)
            y[i] = clampf(x[i], a, b);
        break;
    case DL_UN_HARDSIGMOID:
        for (int64_t i = b0; i < b1; i++)
            y[i] = clampf(a * x[i] + b, 0.0f, 1.0f);
        break;
    case DL_UN_HARDSWISH:   /* as PyTorch writes it */
        for (int64_t i = b0; i < b1; i++)
            y[i] = x[i] < -3.0f ? 0.0f : x[i] > 3.0f ? x[i] : x[i] * (x[i] + 3.0f) / 6.0f;
        break;
    }
}

/* dx = dy * u'(x). At the kinks PyTorch's choices: clip passes the
 * gradient on at its bounds (clamp), hardsigmoid and leaky_relu take the
 * flat side, hardswish the inner one at 3 and the flat one at -3. */
CPU_WIDE static void un_bwd_task(void *ctx, int64_t b0, int64_t b1)
{
    const un_job *j = ctx;
    const float *restrict x = j->x, *restrict y = j->y, *dy = j->dy;
    float *dx = j->out;
    float a = j->u.a, b = j->u.b;
    switch (j->u.kind) {
    case DL_UN_GELU:
        for (int64_t i = b0; i < b1; i++)
            dx[i] = dy[i] * (0.5f * (1.0f + erff(x[i] * INV_SQRT2)) +
                             x[i] * expf(-0.5f * x[i] * x[i]) * INV_SQRT_2PI);
        break;
    case DL_UN_GELU_TANH:
        for (int64_t i = b0; i < b1; i++) {
            float t = tanhf(GELU_K * (x[i] + 0.044715f * x[i] * x[i] * x[i]));
            dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * x[i] * (1.0f - t * t) * GELU_K *
                                                     (1.0f + 3.0f * 0.044715f * x[i] * x[i]));
        }
        break;
    case DL_UN_SILU:
        for (int64_t i = b0; i < b1; i++) {
            float s = sigm(x[i]);
            dx[i] = dy[i] * s * (1.0f + x[i] * (1.0f - s));
        }
        break;
    case DL_UN_POW:
        for (int64_t i = b0; i < b1; i++)
            dx[i] = dy[i] * (a == 0.0f ? 0.0f : a * powf(x[i], a - 1.0f));
        break;
    case DL_UN_SQRT:
        for (int64_t i = b0; i < b1; i++)
            dx[i] = dy[i] * 0.5f / y[i];
        break;
    case DL_UN_ERF:
        for (int64_t i = b0; i < b1; i++)
            dx[i] = dy[i] * TWO_OVER_SQRT_PI * expf(-x[i] * x[i]);
        break;
    case DL_UN_LEAKY_RELU:
        for (int64_t i = b0; i < b1; i++)
            dx[i] = dy[i] * (x[i] > 0.0f ? 1.0f : a);
        break;
    case DL_UN_CLIP:
        for (int64_t i = b0; i < b1; i++)
            dx[i] = x[i] >= a && x[i] <= b ? dy[i] : 0.0f;
        break;
    case DL_UN_HARDSIGMOID:
        for (int64_t i = b0; i < b1; i++) {
            float t = a * x[i] + b;
            dx[i] = t > 0.0f && t < 1.0f ? dy[i] * a : 0.0f;
        }
        break;
    case DL_UN_HARDSWISH:
        for (int64_t i = b0; i < b1; i++)
            dx[i] = dy[i] * (x[i] < -3.0f ? 0.0f : x[i] <= 3.0f ? x[i] / 3.0f + 0.5f : 1.0f);
        break;
    }
}

void cpu_unary_fwd(dl_backend *be, const dl_unary *u, const float *x, float *y,
                          int64_t n)
{
    (void)be;
    un_job j = { .u = *u, .x = x, .out = y };
    dl_parallel_for(n, CPU_GRAIN / 4, un_fwd_task, &j);
}

void cpu_unary_bwd(dl_backend *be, const dl_unary *u, const float *x, const float *y,
                          const float *dy, float *dx, int64_t n)
{
    (void)be;
    un_job j = { .u = *u, .x = x, .y = y, .dy = dy, .out = dx };
    dl_parallel_for(n, CPU_GRAIN / 4, un_bwd_task, &j);
}

/* ---- layernorm ------------------------------------------------------------- */

typedef struct ln_job {
    const float *x, *w, *b, *dy;
    float *y, *dx, *dw, *db;
    int64_t d;
    float eps;
} ln_job;

#define LN_LANES 16

/* The sum of f(x[j]) over a row, f(v) = v (sq false) or (v - mu)^2, in
 * LN_LANES lanes: vectorized inside the CPU_WIDE tasks, the same order on
 * every call. */
static inline float ln_sum(const float *x, int64_t d, float mu, bool sq)
{
    float acc[LN_LANES] = { 0 };
    int64_t j = 0;
    for (; j + LN_LANES <= d; j += LN_LANES)
        for (int k = 0; k < LN_LANES; k++)
            acc[k] += sq ? (x[j + k] - mu) * (x[j + k] - mu) : x[j + k];
    float s = 0.0f;
    for (int k = 0; k < LN_LANES; k++)
        s += acc[k];
    for (; j < d; j++)
        s += sq ? (x[j] - mu) * (x[j] - mu) : x[j];
    return s;
}

/* Mean and 1 / standard deviation (biased variance) of one row, two
 * passes in lanes (serial sums in double took 6% of a transformer
 * encoder's inference). */
static inline void ln_stats(const float *x, int64_t d, float eps, float *mean, float *rstd)
{
    float mu = ln_sum(x, d, 0.0f, false) / (float)d;
    *mean = mu;
    *rstd = 1.0f / sqrtf(ln_sum(x, d, mu, true) / (float)d + eps);
}

CPU_WIDE static void ln_fwd_task(void *ctx, int64_t r0, int64_t r1)
{
    const ln_job *j = ctx;
    int64_t d = j->d;
    for (int64_t r = r0; r < r1; r++) {
        const float *restrict x = j->x + r * d;
        float *restrict y = j->y + r * d;
        float mean, rstd;
        ln_stats(x, d, j->eps, &mean, &rstd);
        for (int64_t c = 0; c < d; c++)
            y[c] = (x[c] - mean) * rstd * j->w[c] + j->b[c];
    }
}

void cpu_layernorm_fwd(dl_backend *be, const float *x, const float *w, const float *b,
                              float *y, int64_t rows, int64_t d, float eps)
{
    (void)be;
    ln_job j = { .x = x, .w = w, .b = b, .y = y, .d = d, .eps = eps };
    dl_parallel_for(rows, CPU_GRAIN / (d > 0 ? d : 1) + 1, ln_fwd_task, &j);
}

/* dx of rows [r0, r1). */
CPU_WIDE static void ln_dx_task(void *ctx, int64_t r0, int64_t r1)
{
    const ln_job *j = ctx;
    int64_t d = j->d;
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = j->x + r * d, *g = j->dy + r * d, *w = j->w;
        float mean, rstd;
        double s1 = 0.0, s2 = 0.0;
        ln_stats(xr, d, j->eps, &mean, &rstd);
        for (int64_t c = 0; c < d; c++) {
            float xh = (xr[c] - mean) * rstd;
            s1 += g[c] * w[c];
            s2 += g[c] * w[c] * xh;
        }
        for (int64_t c = 0; c < d; c++) {
            float xh = (xr[c] - mean) * rstd;
            j->dx[r * d + c] = rstd * (g[c] * w[c] - (float)(s1 / (double)d) -
                                       xh * (float)(s2 / (double)d));
        }
    }
}

void cpu_layernorm_bwd(dl_backend *be, const float *x, const float *w, const float *dy,
                              float *dx, float *dw, float *db, int64_t rows, int64_t d,
                              float eps)
{
    (void)be;
    /* The row statistics once more for dw and db, on this thread: the
     * rows accumulate into one vector in order. */
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * d, *g = dy + r * d;
        float mean, rstd;
        ln_stats(xr, d, eps, &mean, &rstd);
        for (int64_t c = 0; c < d; c++) {
            dw[c] += g[c] * (xr[c] - mean) * rstd;
            db[c] += g[c];
        }
    }
    if (!dx)
        return;
    ln_job j = { .x = x, .w = w, .dy = dy, .dx = dx, .d = d, .eps = eps };
    dl_parallel_for(rows, CPU_GRAIN / (d > 0 ? d : 1) + 1, ln_dx_task, &j);
}

/* ---- softmax and log_softmax on an axis ----------------------------------- */

typedef struct smx_job {
    bool log;
    const float *x, *y, *dy;
    float *out;
    int64_t len, inner;
} smx_job;

static void smx_fwd_task(void *ctx, int64_t c0, int64_t c1)
{
    const smx_job *j = ctx;
    int64_t len = j->len, st = j->inner;
    for (int64_t c = c0; c < c1; c++) {
        int64_t base = (c / st) * len * st + c % st;
        const float *x = j->x + base;
        float *y = j->out + base;
        float mx = x[0];
        for (int64_t q = 1; q < len; q++)
            mx = fmaxf(mx, x[q * st]);
        double s = 0.0;
        for (int64_t q = 0; q < len; q++)
            s += exp((double)(x[q * st] - mx));
        if (j->log)
            for (int64_t q = 0; q < len; q++)
                y[q * st] = x[q * st] - mx - (float)log(s);
        else
            for (int64_t q = 0; q < len; q++)
                y[q * st] = (float)(exp((double)(x[q * st] - mx)) / s);
    }
}

static void smx_bwd_task(void *ctx, int64_t c0, int64_t c1)
{
    const smx_job *j = ctx;
    int64_t len = j->len, st = j->inner;
    for (int64_t c = c0; c < c1; c++) {
        int64_t base = (c / st) * len * st + c % st;
        const float *y = j->y + base, *dy = j->dy + base;
        float *dx = j->out + base;
        double s = 0.0;
        for (int64_t q = 0; q < len; q++)
            s += j->log ? dy[q * st] : dy[q * st] * y[q * st];
        if (j->log)
            for (int64_t q = 0; q < len; q++)
                dx[q * st] = dy[q * st] - expf(y[q * st]) * (float)s;
        else
            for (int64_t q = 0; q < len; q++)
                dx[q * st] = y[q * st] * (dy[q * st] - (float)s);
    }
}

void cpu_softmax_axis_fwd(dl_backend *be, bool log, const float *x, float *y,
                                 int64_t outer, int64_t len, int64_t inner)
{
    (void)be;
    smx_job j = { .log = log, .x = x, .out = y, .len = len, .inner = inner };
    dl_parallel_for(outer * inner, CPU_GRAIN / (len > 0 ? len : 1) + 1, smx_fwd_task, &j);
}

void cpu_softmax_axis_bwd(dl_backend *be, bool log, const float *y, const float *dy,
                                 float *dx, int64_t outer, int64_t len, int64_t inner)
{
    (void)be;
    smx_job j = { .log = log, .y = y, .dy = dy, .out = dx, .len = len, .inner = inner };
    dl_parallel_for(outer * inner, CPU_GRAIN / (len > 0 ? len : 1) + 1, smx_bwd_task, &j);
}

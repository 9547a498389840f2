/*
 * test_par_vocab.c: a padded vocabulary in the parameter table, on two TP
 * ranks under real mpirun (`make test-par-vocab`).
 *
 * A tensor of rows Vp with logical rows V (prt_param.logical_rows: the
 * word embedding or LM head of a vocabulary TP does not divide) must
 *  - start with its real rows equal to the unpadded tensor's, element for
 *    element (normal from (seed, id, row * cols + col)), its padding rows 0;
 *  - keep the padding rows exactly 0 through an AdamW step with weight
 *    decay, given the zero gradient the masked cross-entropy gives them;
 *  - be checkpointed and dumped as the logical (V, cols) tensor, and load
 *    into a layout with another Vp (another tp or vocab_multiple) with the
 *    real rows restored bit for bit and the padding 0.
 * Table-driven over (V, Vp saved, Vp loaded), including a load layout whose
 * TP rank 1 holds only padding. A case fails when it fails on any rank;
 * rank 0 prints the failures and "N passed, N failed"; exit 1 on a failure.
 *
 *   usage: mpirun -np 2 test_par_vocab DIR   (DIR: an empty directory for
 *          the checkpoints and dumps)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <mpi.h>
#include "planrt.h"

enum { COLS = 3 };
static const uint64_t SEED = 1234;
static const float STD = 0.5f;
static int world_rank, passed, failed;

/* Record one check, agreed over the world (every rank saw the same). */
static void check(bool ok, const char *what, size_t V, size_t rows)
{
    int bad = !ok, any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any) {
        failed++;
        if (world_rank == 0) printf("FAIL V %zu, %zu rows: %s\n", V, rows, what);
    } else {
        passed++;
    }
}

/* The one-tensor table of a vocabulary V padded to `rows`. */
static prt_param table(size_t V, size_t rows)
{
    return (prt_param){ "wte.weight", 0, 0, rows, COLS, PRT_SPLIT_ROWS, 1, { rows, 0, 0 },
                        PRT_INIT_NORMAL, STD, true, false, -1, V };
}

/* This TP rank's local row r is global row tp_rank * local_rows + r. */
static size_t global_row(prt_ctx *c, prt_model *m, size_t r)
{
    return (size_t)c->coord.tp * prt_param_rows(m, 0) + r;
}

/* Every real element equals the unpadded tensor's initial value (want ==
 * NULL) or want's; every padding element is 0. */
static bool rows_ok(prt_ctx *c, prt_model *m, size_t V, const float *want)
{
    const float *w = prt_w(m, 0);
    for (size_t r = 0; r < prt_param_rows(m, 0); r++)
        for (size_t k = 0; k < COLS; k++) {
            size_t g = global_row(c, m, r);
            float x = w[r * COLS + k];
            float ref = g >= V ? 0.0f
                      : want ? want[g * COLS + k]
                      : STD * prt_philox_normal(SEED, 0, g * COLS + k);
            if (memcmp(&x, &ref, sizeof x)) return false;
        }
    return true;
}

/* The dump's (rows, cols) of its one tensor and its data (rank 0). */
static bool read_dump(const char *path, uint64_t *rows, uint64_t *cols, float **data)
{
    FILE *f = fopen(path, "rb");
    char magic[8];
    uint32_t count = 0, len = 0;
    char name[64];
    bool ok = f && fread(magic, 1, 8, f) == 8 && fread(&count, 4, 1, f) == 1 && count == 1 &&
              fread(&len, 4, 1, f) == 1 && len < sizeof name && fread(name, 1, len, f) == len &&
              fread(rows, 8, 1, f) == 1 && fread(cols, 8, 1, f) == 1;
    *data = ok ? calloc(*rows * *cols + 1, sizeof(float)) : NULL;
    ok = ok && *data && fread(*data, sizeof(float), *rows * *cols, f) == *rows * *cols;
    if (f) fclose(f);
    return ok;
}

static void run_case(prt_ctx *c, const char *tmp, size_t V, size_t rows_save, size_t rows_load)
{
    prt_adamw_cfg cfg = { .lr = 1e-2f, .min_lr = 1e-3f, .warmup = 0, .total = 10, .beta1 = 0.9f,
                          .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .clip = 0.0f };
    prt_save_info info = { SEED, "vocab-test", "", NULL };   /* no model config: no Hugging Face export */
    prt_param ta = table(V, rows_save), tb = table(V, rows_load);
    prt_model *a = NULL, *b = NULL;
    char root[512], dir[1024], dump_a[600], dump_b[600];
    snprintf(root, sizeof root, "%s/ck-%zu-%zu", tmp, V, rows_save);
    snprintf(dump_a, sizeof dump_a, "%s/a-%zu-%zu.dump", tmp, V, rows_save);
    snprintf(dump_b, sizeof dump_b, "%s/b-%zu-%zu.dump", tmp, V, rows_load);

    check(prt_model_new(c, &ta, 1, 1, 1, 0, SEED, &a) == PRT_OK, "prt_model_new", V, rows_save);
    if (!a) return;
    check(rows_ok(c, a, V, NULL), "initial values: real rows as unpadded, padding 0", V, rows_save);

    /* the gradient the masked cross-entropy and the embedding give: 0 on padding */
    float *g = prt_g(a, 0);
    for (size_t r = 0; r < prt_param_rows(a, 0); r++)
        for (size_t k = 0; k < COLS; k++)
            g[r * COLS + k] = global_row(c, a, r) < V ? 0.25f + 0.01f * (float)k : 0.0f;
    bool stepped = prt_zero_reduce(a, 0) == PRT_OK && prt_zero_norm_reduce(a, 1) == PRT_OK &&
                   prt_zero_opt_step(a, &cfg, 1) == PRT_OK;
    check(stepped, "an AdamW step", V, rows_save);
    float *w0 = calloc(V * COLS, sizeof(float));
    for (size_t i = 0; i < V * COLS; i++) w0[i] = STD * prt_philox_normal(SEED, 0, i);
    check(!rows_ok(c, a, V, w0), "the step moved the real rows", V, rows_save);
    bool pad_zero = true;
    for (size_t r = 0; r < prt_param_rows(a, 0); r++)
        for (size_t k = 0; k < COLS; k++)
            if (global_row(c, a, r) >= V && prt_w(a, 0)[r * COLS + k] != 0.0f) pad_zero = false;
    check(pad_zero, "padding rows still exactly 0 after AdamW with weight decay", V, rows_save);

    check(prt_model_save(a, root, 1, &info, dir, sizeof dir) == PRT_OK, prt_par_last_error(), V, rows_save);
    check(prt_model_dump(a, dump_a) == PRT_OK, "dump", V, rows_save);

    /* the same checkpoint on a layout with another Vp */
    long step = 0;
    check(prt_model_new(c, &tb, 1, 1, 1, 0, SEED + 1, &b) == PRT_OK, "prt_model_new (load)", V, rows_load);
    if (!b) { free(w0); prt_model_free(a); return; }
    check(prt_model_load(b, dir, &info, &step, NULL, 0) == PRT_OK && step == 1,
          "load into another padding (a checkpoint holds the logical rows only)", V, rows_load);
    check(prt_model_dump(b, dump_b) == PRT_OK, "dump (load)", V, rows_load);
    uint64_t ra = 0, ca = 0, rb = 0, cb = 0;
    float *da = NULL, *db = NULL;
    bool same = true;
    if (world_rank == 0)
        same = read_dump(dump_a, &ra, &ca, &da) && read_dump(dump_b, &rb, &cb, &db) &&
               ra == V && rb == V && ca == COLS && cb == COLS && !memcmp(da, db, V * COLS * sizeof(float));
    check(same, "dumps are (V, cols), the loaded one equal to the saved one bit for bit", V, rows_load);
    float *saved = calloc(V * COLS + 1, sizeof(float));
    if (world_rank == 0 && da) memcpy(saved, da, V * COLS * sizeof(float));
    MPI_Bcast(saved, (int)(V * COLS), MPI_FLOAT, 0, MPI_COMM_WORLD);
    check(rows_ok(c, b, V, saved), "loaded: real rows restored, padding rows 0", V, rows_load);
    free(da); free(db); free(saved); free(w0);
    prt_model_free(b);
    prt_model_free(a);
}

int main(int argc, char **argv)
{
    prt_ctx *c = NULL;
    if (prt_init(&argc, &argv, 1, 2, 1, &c) != PRT_OK) {
        fprintf(stderr, "test_par_vocab: needs 2 ranks (mpirun -np 2)\n");
        prt_finalize(NULL);
        return 1;
    }
    world_rank = c->rank;
    if (argc != 2) {
        if (world_rank == 0) fprintf(stderr, "usage: mpirun -np 2 test_par_vocab DIR\n");
        prt_finalize(c);
        return 2;
    }
    const char *tmp = argv[1];
    /* V, rows saved (tp 2: V rounded up to a multiple of 2 * vocab_multiple),
     * rows loaded (another tp or vocab_multiple) */
    static const struct { size_t V, save, load; } cases[] = {
        { 11, 12, 16 },   /* 1 padding row, then 5: rank 1 holds rows 8-10 real, 11-15 padding */
        { 13, 14, 14 },   /* the same padding on both sides */
        { 5,  6,  12 },   /* loaded: rank 1 holds rows 6-11, all padding */
        { 12, 12, 16 },   /* no padding saved, 4 rows loaded */
        { 9,  16, 10 },   /* saved with vocab_multiple 8, loaded with 1 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(c, tmp, cases[i].V, cases[i].save, cases[i].load);
    if (world_rank == 0) printf("padded vocabulary: %d passed, %d failed\n", passed, failed);
    prt_finalize(c);
    return failed ? 1 : 0;
}

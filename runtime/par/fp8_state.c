/*
 * fp8_state.c: delayed scaling's amax histories in a checkpoint (issue 27).
 *
 * A run with `fp8 { recipe delayed }` carries state across steps besides
 * the weights and AdamW moments: each FP8 tensor role's window of past
 * amaxes and the scale the next step casts with (prt_fp8_history). Every
 * rank holds the same histories (the generated program MAX-reduces each
 * step's amaxes over the world before it updates them), so world rank 0
 * writes them once, as text, into the step directory prt_model_save made:
 *
 *   planc fp8 delayed 1
 *   histories H length N
 *   count head scale amax[0] ... amax[N-1]      (H lines, floats as %a)
 *
 * Hexadecimal floats round-trip exactly, so a resumed run casts with the
 * very scales and windows of the uninterrupted one. Reading: every rank
 * reads the file (as every rank reads its checkpoint elements) and all
 * take the worst verdict; a checkpoint without the file (written by a run
 * without delayed scaling, or before this state existed) or one with a
 * different count or length is refused, naming both, rather than started
 * from empty histories, which would cast with other scales than the run
 * that wrote it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <mpi.h>
#include "par_internal.h"

static const char FP8_STATE_FILE[] = "fp8_delayed.txt";
static const char FP8_STATE_MAGIC[] = "planc fp8 delayed 1";

/* Every rank's failure, world-wide (as save.c's agree). */
static int fp8_agree(int bad)
{
    int any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return any;
}

static prt_status write_state(const char *path, const prt_fp8_history *h, size_t n)
{
    FILE *f = fopen(path, "w");
    if (!f) return prtp_fail(PRT_ERR_IO, "fp8 state: cannot write %s", path);
    fprintf(f, "%s\nhistories %zu length %zu\n", FP8_STATE_MAGIC, n, n ? h[0].len : 0);
    for (size_t i = 0; i < n; i++) {
        fprintf(f, "%zu %zu %a", h[i].count, h[i].head, (double)h[i].scale);
        for (size_t j = 0; j < h[i].len; j++) fprintf(f, " %a", (double)h[i].amax[j]);
        fputc('\n', f);
    }
    bool bad = ferror(f) != 0;
    if (fclose(f) || bad) return prtp_fail(PRT_ERR_IO, "fp8 state: writing %s failed", path);
    return PRT_OK;
}

prt_status prt_fp8_state_save(prt_ctx *c, const char *dir, const prt_fp8_history *h, size_t n)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, FP8_STATE_FILE);
    prt_status st = c->rank == 0 ? write_state(path, h, n) : PRT_OK;
    if (fp8_agree(st != PRT_OK)) return st ? st : prtp_fail(PRT_ERR_IO, "fp8 state: rank 0 could not write it");
    return PRT_OK;
}

/* One history line: count head scale amax * len; false when malformed. */
static bool read_line(FILE *f, prt_fp8_history *h)
{
    size_t count, head;
    float scale;
    if (fscanf(f, "%zu %zu %a", &count, &head, &scale) != 3) return false;
    if (count > h->len || head >= h->len || !(scale > 0)) return false;
    for (size_t j = 0; j < h->len; j++)
        if (fscanf(f, "%a", &h->amax[j]) != 1) return false;
    h->count = count, h->head = head, h->scale = scale, h->pending = 0.0f;
    return true;
}

static prt_status read_state(const char *dir, prt_fp8_history *h, size_t n)
{
    char path[4200], magic[64] = "";
    snprintf(path, sizeof path, "%s/%s", dir, FP8_STATE_FILE);
    FILE *f = fopen(path, "r");
    if (!f)
        return prtp_fail(PRT_ERR_FORMAT, "cannot resume: %s has no %s, the amax histories of fp8 recipe delayed "
                         "(the checkpoint was written without delayed scaling); starting them empty would "
                         "cast with other scales than the run that wrote it", dir, FP8_STATE_FILE);
    size_t hn = 0, len = 0;
    prt_status st = PRT_OK;
    if (!fgets(magic, sizeof magic, f) || strncmp(magic, FP8_STATE_MAGIC, sizeof FP8_STATE_MAGIC - 1) ||
        fscanf(f, " histories %zu length %zu", &hn, &len) != 2)
        st = prtp_fail(PRT_ERR_FORMAT, "cannot resume: %s is not a planc fp8 state file", path);
    else if (hn != n || len != (n ? h[0].len : 0))
        st = prtp_fail(PRT_ERR_FORMAT, "cannot resume: %s holds %zu amax histories of length %zu, this program "
                       "keeps %zu of length %zu (another model or amax_history)", path, hn, len, n,
                       n ? h[0].len : 0);
    for (size_t i = 0; !st && i < n; i++)
        if (!read_line(f, &h[i]))
            st = prtp_fail(PRT_ERR_FORMAT, "cannot resume: %s: history %zu is malformed", path, i);
    fclose(f);
    return st;
}

prt_status prt_fp8_state_load(prt_ctx *c, const char *dir, prt_fp8_history *h, size_t n)
{
    (void)c;
    prt_status st = read_state(dir, h, n);
    if (st) prtp_mark_own_failure();
    if (fp8_agree(st != PRT_OK)) return st ? st : prtp_fail(PRT_ERR_FORMAT, "fp8 state: another rank could not read it");
    return PRT_OK;
}

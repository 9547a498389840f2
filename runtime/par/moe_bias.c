/*
 * moe_bias.c: aux-loss-free balancing's expert biases in a checkpoint
 * (issue 29; `moe { expert_bias true }`, DeepSeek-V3's
 * e_score_correction_bias).
 *
 * The bias of each mixture is state, not a parameter: no gradient, no
 * optimizer moments, moved after each step by the sign of its expert's
 * load against the mean (prt_moe_bias_update) on the counts of the whole
 * global batch, which the generated program sums over the world first. So
 * every rank holds the same biases of every mixture, and world rank 0
 * writes them once, as text, into the step directory prt_model_save made:
 *
 *   planc moe expert bias 1
 *   biases N experts E
 *   NAME b[0] ... b[E-1]        (N lines, floats as %a)
 *
 * NAME is the tensor's global name, the router weight's with
 * e_score_correction_bias for its last part (layers.L.block_sparse_moe.
 * gate.e_score_correction_bias: Hugging Face's mlp.gate.
 * e_score_correction_bias of block L). Hexadecimal floats round-trip exactly, so a resumed run
 * routes as the uninterrupted one on any layout. Reading: every rank reads
 * the file and all take the worst verdict; a checkpoint without it, or with
 * other names or another E, is refused naming both (zero biases would route
 * otherwise than the run that wrote it).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <mpi.h>
#include "par_internal.h"

static const char BIAS_FILE[] = "moe_expert_bias.txt";
static const char BIAS_MAGIC[] = "planc moe expert bias 1";

/* Every rank's failure, world-wide (as save.c's agree). */
static int bias_agree(int bad)
{
    int any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return any;
}

/* The bias's name from its router weight's: the last part replaced. */
static void bias_name(char *out, size_t cap, const char *router)
{
    const char *dot = strrchr(router, '.');
    snprintf(out, cap, "%.*s.e_score_correction_bias", (int)(dot ? dot - router : (long)strlen(router)), router);
}

static prt_status write_biases(const char *path, const float *b, size_t n, size_t E, const char *const *names)
{
    char nm[320];
    FILE *f = fopen(path, "w");
    if (!f) return prtp_fail(PRT_ERR_IO, "moe expert bias: cannot write %s", path);
    fprintf(f, "%s\nbiases %zu experts %zu\n", BIAS_MAGIC, n, E);
    for (size_t i = 0; i < n; i++) {
        bias_name(nm, sizeof nm, names[i]);
        fputs(nm, f);
        for (size_t e = 0; e < E; e++) fprintf(f, " %a", (double)b[i * E + e]);
        fputc('\n', f);
    }
    bool bad = ferror(f) != 0;
    if (fclose(f) || bad) return prtp_fail(PRT_ERR_IO, "moe expert bias: writing %s failed", path);
    return PRT_OK;
}

prt_status prt_moe_bias_save(prt_ctx *c, const char *dir, const float *bias, size_t n, size_t E,
                             const char *const *names)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, BIAS_FILE);
    prt_status st = c->rank == 0 ? write_biases(path, bias, n, E, names) : PRT_OK;
    if (bias_agree(st != PRT_OK)) return st ? st : prtp_fail(PRT_ERR_IO, "moe expert bias: rank 0 could not write it");
    return PRT_OK;
}

static prt_status read_biases(const char *dir, float *b, size_t n, size_t E, const char *const *names)
{
    char path[4200], magic[64] = "", name[320], want[320];
    snprintf(path, sizeof path, "%s/%s", dir, BIAS_FILE);
    FILE *f = fopen(path, "r");
    if (!f)
        return prtp_fail(PRT_ERR_FORMAT, "cannot resume: %s has no %s, the experts' routing biases of "
                         "expert_bias true (the checkpoint was written without them); starting them at 0 "
                         "would route otherwise than the run that wrote it", dir, BIAS_FILE);
    size_t fn = 0, fe = 0;
    prt_status st = PRT_OK;
    if (!fgets(magic, sizeof magic, f) || strncmp(magic, BIAS_MAGIC, sizeof BIAS_MAGIC - 1) ||
        fscanf(f, " biases %zu experts %zu", &fn, &fe) != 2)
        st = prtp_fail(PRT_ERR_FORMAT, "cannot resume: %s is not a planc expert bias file", path);
    else if (fn != n || fe != E)
        st = prtp_fail(PRT_ERR_FORMAT, "cannot resume: %s holds %zu biases of %zu experts, this program "
                       "keeps %zu of %zu (another model)", path, fn, fe, n, E);
    for (size_t i = 0; !st && i < n; i++) {
        bias_name(want, sizeof want, names[i]);
        if (fscanf(f, " %319s", name) != 1 || strcmp(name, want)) {
            st = prtp_fail(PRT_ERR_FORMAT, "cannot resume: %s: bias %zu is %s, this program's is %s", path, i,
                           name, want);
            break;
        }
        for (size_t e = 0; !st && e < E; e++)
            if (fscanf(f, "%a", &b[i * E + e]) != 1)
                st = prtp_fail(PRT_ERR_FORMAT, "cannot resume: %s: %s is malformed", path, want);
    }
    fclose(f);
    return st;
}

prt_status prt_moe_bias_load(prt_ctx *c, const char *dir, float *bias, size_t n, size_t E,
                             const char *const *names)
{
    (void)c;
    prt_status st = read_biases(dir, bias, n, E, names);
    if (st) prtp_mark_own_failure();
    if (bias_agree(st != PRT_OK))
        return st ? st : prtp_fail(PRT_ERR_FORMAT, "moe expert bias: another rank could not read it");
    return PRT_OK;
}

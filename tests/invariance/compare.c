/*
 * compare.c: hold one layout's training to the single-rank run.
 *
 *   compare REF.jsonl REF.dump CASE.jsonl CASE.dump
 *
 * Losses (the --log-json lines of the generated executable) must agree
 * step by step within LOSS_RTOL relative; the final parameters (its
 * --dump-params file) tensor by tensor, by name, within PARAM_TOL times
 * the largest magnitude of the reference tensor. Prints one line with the
 * worst errors; on failure, the first mismatches (llm.c's validate_result
 * style) and exit status 1.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LOSS_RTOL 1e-5
#define PARAM_TOL 1e-4
#define MAX_STEPS 4096

typedef struct {
    char    *name;
    uint64_t rows, cols;
    float   *v;
} Tensor;

static int read_losses(const char *path, double *loss, int max)
{
    FILE *f = fopen(path, "r");
    if (!f) { fprintf(stderr, "compare: cannot read %s\n", path); return -1; }
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, f) && n < max) {
        const char *p = strstr(line, "\"loss\":");
        if (p) loss[n++] = strtod(p + 7, NULL);
    }
    fclose(f);
    return n;
}

static void free_dump(Tensor *t, int n)
{
    for (int i = 0; t && i < n; i++) { free(t[i].name); free(t[i].v); }
    free(t);
}

static int read_dump(const char *path, Tensor **out)
{
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "compare: cannot read %s\n", path); return -1; }
    char magic[8];
    uint32_t n = 0;
    if (fread(magic, 1, 8, f) != 8 || memcmp(magic, "PRTDUMP1", 8) || fread(&n, 4, 1, f) != 1) {
        fprintf(stderr, "compare: %s is not a parameter dump\n", path);
        fclose(f);
        return -1;
    }
    Tensor *t = calloc(n + 1, sizeof *t);
    if (!t) { fclose(f); return -1; }
    for (uint32_t i = 0; i < n; i++) {
        uint32_t len;
        if (fread(&len, 4, 1, f) != 1 || len > 4096) goto bad;
        t[i].name = calloc(len + 1, 1);
        if (fread(t[i].name, 1, len, f) != len || fread(&t[i].rows, 8, 1, f) != 1 ||
            fread(&t[i].cols, 8, 1, f) != 1) goto bad;
        size_t k = (size_t)(t[i].rows * t[i].cols);
        t[i].v = malloc((k + 1) * sizeof(float));
        if (fread(t[i].v, sizeof(float), k, f) != k) goto bad;
    }
    fclose(f);
    *out = t;
    return (int)n;
bad:
    fprintf(stderr, "compare: %s is truncated\n", path);
    fclose(f);
    free_dump(t, (int)n);
    return -1;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: compare REF.jsonl REF.dump CASE.jsonl CASE.dump\n");
        return 2;
    }
    static double lr[MAX_STEPS], lc[MAX_STEPS];
    int nr = read_losses(argv[1], lr, MAX_STEPS), nc = read_losses(argv[3], lc, MAX_STEPS);
    if (nr < 0 || nc < 0) return 2;
    int bad = 0;
    double worst_loss = 0, worst_param = 0;
    if (nr != nc || nr == 0) {
        printf("  steps: reference logged %d, this layout %d\n", nr, nc);
        bad++;
    }
    for (int i = 0; i < nr && i < nc; i++) {
        double rel = fabs(lc[i] - lr[i]) / fmax(fabs(lr[i]), 1e-30);
        if (rel > worst_loss) worst_loss = rel;
        if (rel > LOSS_RTOL && bad++ < 5)
            printf("  step %d: loss %.9g, reference %.9g (relative error %.2e > %.0e)\n", i, lc[i],
                   lr[i], rel, LOSS_RTOL);
    }
    Tensor *tr = NULL, *tc = NULL;
    int mr = read_dump(argv[2], &tr), mc = read_dump(argv[4], &tc);
    if (mr < 0 || mc < 0) {
        free_dump(tr, mr);
        free_dump(tc, mc);
        return 2;
    }
    if (mr != mc) {
        printf("  tensors: reference %d, this layout %d\n", mr, mc);
        bad++;
    }
    for (int i = 0; i < mr; i++) {
        Tensor *c = NULL;
        for (int j = 0; j < mc && !c; j++)
            if (!strcmp(tc[j].name, tr[i].name)) c = &tc[j];
        if (!c || c->rows != tr[i].rows || c->cols != tr[i].cols) {
            printf("  %s: missing or of another shape in this layout\n", tr[i].name);
            bad++;
            continue;
        }
        size_t k = (size_t)(tr[i].rows * tr[i].cols), at = 0;
        double big = 0, err = 0;
        for (size_t e = 0; e < k; e++) big = fmax(big, fabs(tr[i].v[e]));
        for (size_t e = 0; e < k; e++) {
            double d = fabs((double)c->v[e] - tr[i].v[e]);
            if (d > err || isnan(d)) { err = isnan(d) ? INFINITY : d; at = e; }
        }
        double rel = big > 0 ? err / big : err;
        if (rel > worst_param) worst_param = rel;
        if (rel > PARAM_TOL && bad++ < 10)
            printf("  %s[%zu]: %.9g, reference %.9g (error %.2e of max |w| %.3g > %.0e)\n",
                   tr[i].name, at, c->v[at], tr[i].v[at], rel, big, PARAM_TOL);
    }
    printf("  %d steps, %d tensors: worst loss error %.2e (tol %.0e), worst parameter error "
           "%.2e of max |w| (tol %.0e): %s\n", nc, mc, worst_loss, LOSS_RTOL, worst_param,
           PARAM_TOL, bad ? "FAIL" : "ok");
    free_dump(tr, mr);
    free_dump(tc, mc);
    return bad ? 1 : 0;
}

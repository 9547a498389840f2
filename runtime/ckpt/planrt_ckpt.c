/*
 * planrt_ckpt.c: the `planrt-ckpt` tool — look at, check and consolidate a
 * sharded checkpoint without starting a run.
 *
 *   planrt-ckpt verify DIR                      checksum every file, check every header
 *   planrt-ckpt list DIR                        tensors, shapes and pieces
 *   planrt-ckpt latest ROOT                     print the newest complete step directory
 *   planrt-ckpt consolidate DIR OUT [--skip P]  one safetensors file of every full tensor
 *   planrt-ckpt export-hf DIR OUT_DIR [--dtype bf16|fp32] [--max-shard-size BYTES]
 *                                               a Hugging Face model directory (issue 28)
 *
 * DIR is a step directory (with index.json) or a checkpoint root, in which
 * case its latest complete step is used. Exit status 0 on success, 1 on a
 * failure (the message names the file and the problem), 2 on a usage error
 * or a model export-hf cannot map exactly (the message names the feature).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "planrt.h"

static int usage(void)
{
    fprintf(stderr,
            "usage: planrt-ckpt verify DIR\n"
            "       planrt-ckpt list DIR\n"
            "       planrt-ckpt latest ROOT\n"
            "       planrt-ckpt consolidate DIR OUT.safetensors [--skip PREFIX]\n"
            "       planrt-ckpt export-hf DIR OUT_DIR [--dtype bf16|fp32] [--max-shard-size BYTES]\n"
            "DIR: a step directory (with index.json) or a root of step-* directories\n");
    return 2;
}

static int fail(const char *what)
{
    fprintf(stderr, "planrt-ckpt: error: %s\n", what);
    return 1;
}

/* A step directory as given, or the latest complete one under a root. */
static int resolve(const char *dir, char *buf, size_t cap)
{
    char idx[4200];
    struct stat sb;
    snprintf(idx, sizeof idx, "%s/index.json", dir);
    if (!stat(idx, &sb) || !strncmp(strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir, "step-", 5)) {
        snprintf(buf, cap, "%s", dir);
        return 0;
    }
    long step;
    return prt_ckpt_latest(dir, buf, cap, &step) ? fail(prt_ckpt_last_error()) : 0;
}

static int cmd_verify(const char *dir)
{
    prt_ckpt *ck;
    if (prt_ckpt_open(dir, &ck)) return fail(prt_ckpt_last_error());
    if (prt_ckpt_verify(ck)) {
        int rc = fail(prt_ckpt_last_error());
        prt_ckpt_close(ck);
        return rc;
    }
    const prt_ckpt_meta *m = prt_ckpt_get_meta(ck);
    size_t pieces = 0, elems = 0;
    for (int i = 0; i < prt_ckpt_count(ck); i++) {
        pieces += (size_t)prt_ckpt_tensor_at(ck, i)->pieces;
        elems += prt_ckpt_tensor_at(ck, i)->rows * prt_ckpt_tensor_at(ck, i)->cols;
    }
    printf("✓ %s: model \"%s\", step %ld, layout dp %d tp %d pp %d zero %d: %d tensors (%zu elements) in %zu pieces; every checksum and header matches the index\n",
           dir, m->model, m->step, m->dp, m->tp, m->pp, m->zero, prt_ckpt_count(ck), elems, pieces);
    prt_ckpt_close(ck);
    return 0;
}

static int cmd_list(const char *dir)
{
    prt_ckpt *ck;
    if (prt_ckpt_open(dir, &ck)) return fail(prt_ckpt_last_error());
    const prt_ckpt_meta *m = prt_ckpt_get_meta(ck);
    printf("# %s: model \"%s\" step %ld seed %llu dp %d tp %d pp %d zero %d plan %s\n", dir, m->model,
           m->step, (unsigned long long)m->seed, m->dp, m->tp, m->pp, m->zero, m->plan_hash);
    printf("# %-40s %-5s %-16s %s\n", "tensor", "dtype", "shape", "pieces");
    for (int i = 0; i < prt_ckpt_count(ck); i++) {
        const prt_ckpt_tensor *t = prt_ckpt_tensor_at(ck, i);
        char shape[64];
        if (t->ndim == 1) snprintf(shape, sizeof shape, "[%zu]", t->rows);
        else snprintf(shape, sizeof shape, "[%zu, %zu]", t->rows, t->cols);
        printf("  %-40s %-5s %-16s %d\n", t->name,
               t->dtype == PRT_FP32 ? "F32" : t->dtype == PRT_BF16 ? "BF16" : t->dtype == PRT_FP16 ? "F16"
               : t->dtype == PRT_INT32 ? "I32" : "I64", shape, t->pieces);
    }
    prt_ckpt_close(ck);
    return 0;
}

/* export-hf DIR OUT_DIR [--dtype T] [--max-shard-size BYTES]. */
static int cmd_export_hf(int argc, char **argv)
{
    char dir[4200];
    const char *dtype = "fp32";
    unsigned long long max = 0;
    for (int i = 4; i < argc; i += 2) {
        if (i + 1 >= argc) return usage();
        if (!strcmp(argv[i], "--dtype") && (!strcmp(argv[i + 1], "fp32") || !strcmp(argv[i + 1], "bf16")))
            dtype = argv[i + 1];
        else if (!strcmp(argv[i], "--max-shard-size")) {
            char *end;
            max = strtoull(argv[i + 1], &end, 10);
            if (!*argv[i + 1] || *end || argv[i + 1][0] == '-' || max == 0) {
                fprintf(stderr, "planrt-ckpt: error: --max-shard-size '%s': expected a number of bytes > 0\n", argv[i + 1]);
                return 2;
            }
        } else return usage();
    }
    if (resolve(argv[2], dir, sizeof dir)) return 1;
    prt_status st = prt_hf_export(dir, argv[3], dtype, max);
    if (st == PRT_ERR_UNSUPPORTED) {
        fprintf(stderr, "planrt-ckpt: error: export-hf %s: no Hugging Face architecture computes this model exactly: %s\n",
                dir, prt_ckpt_last_error());
        return 2;
    }
    if (st) return fail(prt_ckpt_last_error());
    printf("✓ %s: %s as a Hugging Face model directory (%s)\n", argv[3], dir, dtype);
    return 0;
}

int main(int argc, char **argv)
{
    char dir[4200];
    if (argc < 3) return usage();
    if (!strcmp(argv[1], "latest") && argc == 3) {
        long step;
        if (prt_ckpt_latest(argv[2], dir, sizeof dir, &step)) return fail(prt_ckpt_last_error());
        printf("%s\n", dir);
        return 0;
    }
    if (!strcmp(argv[1], "verify") && argc == 3)
        return resolve(argv[2], dir, sizeof dir) ? 1 : cmd_verify(dir);
    if (!strcmp(argv[1], "list") && argc == 3)
        return resolve(argv[2], dir, sizeof dir) ? 1 : cmd_list(dir);
    if (!strcmp(argv[1], "consolidate") && (argc == 4 || (argc == 6 && !strcmp(argv[4], "--skip")))) {
        if (resolve(argv[2], dir, sizeof dir)) return 1;
        if (prt_ckpt_consolidate(dir, argv[3], argc == 6 ? argv[5] : NULL))
            return fail(prt_ckpt_last_error());
        printf("✓ %s: every tensor of %s%s%s\n", argv[3], dir, argc == 6 ? " except " : "",
               argc == 6 ? argv[5] : "");
        return 0;
    }
    if (!strcmp(argv[1], "export-hf") && argc >= 4) return cmd_export_hf(argc, argv);
    return usage();
}

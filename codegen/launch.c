/*
 * launch.c: the sbatch script `planc build --launch slurm` writes beside
 * the executable.
 *
 * The job's shape comes from the plan: dp x tp x pp ranks (one per device),
 * placed gpus_per_node to a node as the cluster block says, so
 * nodes = ceil(ranks / gpus_per_node) and tasks per node = min(ranks,
 * gpus_per_node); the CUDA target asks one GPU per task. srun starts the
 * ranks (Open MPI or MPICH built with Slurm's PMI/PMIx support), each finds
 * its node-local rank and GPU through MPI_Comm_split_type, and
 * --kill-on-bad-exit ends the job when one rank dies.
 *
 * Nothing the user wrote reaches the script as shell text: the model name
 * becomes the job name only through [A-Za-z0-9._-] (anything else is '_'),
 * and the executable's path is single-quoted (a ' inside as '\''), refused
 * when it holds a control character. The script passes its own arguments
 * on to the executable ("$@"), so run options go on the sbatch line.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "codegen/codegen.h"
#include "planner/layout.h"

/* s made into a Slurm job name of at most n-1 safe characters. */
static void job_name(const char *s, char *buf, size_t n)
{
    size_t k = 0;
    for (; s && *s && k + 1 < n; s++) {
        char c = *s;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '-';
        buf[k++] = ok ? c : '_';
    }
    if (k == 0 && n > 6) k = (size_t)snprintf(buf, n, "planc");
    buf[k] = '\0';
}

/* s single-quoted for bash into buf; false if it does not fit or holds a
 * control character (a newline would end the command). */
static bool shell_quote(const char *s, char *buf, size_t n)
{
    size_t k = 0;
    if (n < 3) return false;
    buf[k++] = '\'';
    for (; *s; s++) {
        if ((unsigned char)*s < 0x20 || *s == 0x7f) return false;
        const char *piece = *s == '\'' ? "'\\''" : NULL;
        size_t len = piece ? 4 : 1;
        if (k + len + 2 > n) return false;
        if (piece) memcpy(buf + k, piece, len);
        else buf[k] = *s;
        k += len;
    }
    buf[k++] = '\'';
    buf[k] = '\0';
    return true;
}

bool cg_sbatch(const Plan *p, const char *exe, CgTarget t, FILE *out, char *why, size_t len)
{
    /* the layout the program runs: fields left out or `auto` resolved as
     * emit resolves them (tp 1, pp 1, dp from the cluster), not PLAN_AUTO */
    Layout lay = plan_layout_defaults(p);
    const Layout *l = &lay;
    int64_t ranks = (int64_t)l->dp * l->tp * l->pp, per = p->cluster.gpus_per_node;
    if (per < 1 || ranks < 1) {
        snprintf(why, len, "the cluster block gives no gpus_per_node");
        return false;
    }
    int64_t nodes = (ranks + per - 1) / per, tasks = ranks < per ? ranks : per;
    if (p->cluster.nodes > 0 && nodes > p->cluster.nodes) {
        snprintf(why, len, "%lld ranks need %lld nodes of %lld; the cluster has %lld", (long long)ranks,
                 (long long)nodes, (long long)per, (long long)p->cluster.nodes);
        return false;
    }
    char name[64], q[8192];
    job_name(p->model.name, name, sizeof name);
    if (!shell_quote(exe, q, sizeof q)) {
        snprintf(why, len, "the executable's path holds a control character or is too long for the script");
        return false;
    }
    fprintf(out, "#!/bin/bash\n"
                 "# Written by `planc build --launch slurm`: submit with\n"
                 "#   sbatch THIS_FILE [executable options: --steps S --save DIR --resume DIR ...]\n"
                 "# dp %d x tp %d x pp %d = %lld ranks, %lld per node (the cluster block's gpus_per_node)\n",
            l->dp, l->tp, l->pp, (long long)ranks, (long long)per);
    fprintf(out, "#SBATCH --job-name=%s\n#SBATCH --nodes=%lld\n#SBATCH --ntasks=%lld\n"
                 "#SBATCH --ntasks-per-node=%lld\n", name, (long long)nodes, (long long)ranks,
            (long long)tasks);
    if (t == CG_TARGET_CUDA) fprintf(out, "#SBATCH --gpus-per-task=1\n");
    else fprintf(out, "#SBATCH --cpus-per-task=1\n");
    fprintf(out, "#SBATCH --output=%s-%%j.out\n", name);
    fprintf(out, "set -euo pipefail\n"
                 "cd \"${SLURM_SUBMIT_DIR:-.}\"   # the plan's data path is relative to it\n"
                 "export OPENBLAS_NUM_THREADS=1\n"
                 "# one rank per task; a rank that dies ends the job (the others would wait)\n"
                 "exec srun --kill-on-bad-exit=1 %s \"$@\"\n", q);
    if (ferror(out)) {
        snprintf(why, len, "write error");
        return false;
    }
    return true;
}

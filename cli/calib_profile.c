/*
 * calib_profile.c: planrt-calib's measurement file in, the cluster block
 * of `planc calibrate` out (calib_profile.h).
 *
 * The block is one `cluster NAME { ... }` with `nodes 1`, `gpus_per_node
 * N`, a device and, with more than one rank, `link intra`, in the keys
 * the language reads (README, "the profile keys"):
 *  - device: memory (a GPU's own, or the host's memory over N ranks),
 *    flops (the largest forward GEMM's rate: the 16-bit peak on a GPU,
 *    whose GEMMs ran in bf16), flops_fp32 (a GPU's measured SGEMM; on a
 *    CPU the same GEMM rate), hbm and stream (the elementwise kernels'
 *    bytes/s), sms (a GPU's), launch, overhead, activation, softmax,
 *    gemm_dtype (what the gemm points ran in, so the cost model times
 *    with them the models of that element size only) and the gemm points;
 *  - link: bandwidth and latency (the alpha-beta figures: the all-reduce
 *    of the largest group, per round), efficiency 1, one line per measured
 *    collective and group size (`all-reduce 4 LATENCY BUSBW`) and the
 *    overlap factors.
 * What it must not do: fit or interpret beyond the units (the runtime
 * fits; the planner reads), or let a key it does not know through.
 */
#include "cli/calib_profile.h"

#include <string.h>
#include <time.h>
#include <unistd.h>

/* The collectives a link key may name (sema.c's LINK_KEYS): nothing else
 * from the measurement file reaches the cluster block as a key. */
static const char *const COLLS[] = { "all-reduce", "all-gather", "reduce-scatter", "broadcast",
                                     "reduce", "all-to-all", "p2p" };
#define N_COLLS ((int)(sizeof COLLS / sizeof COLLS[0]))

static bool known_coll(const char *s)
{
    for (int i = 0; i < N_COLLS; i++)
        if (!strcmp(s, COLLS[i])) return true;
    return false;
}

/* The dtypes a gemm_dtype key may name (sema.c's DTYPE_NAMES). */
static bool known_dtype(const char *s)
{
    return !strcmp(s, "fp32") || !strcmp(s, "bf16") || !strcmp(s, "fp16");
}

/* A GEMM point line: gemm fwd|dx|dw M N K SECONDS. */
static void read_gemm(const char *line, PlancCalibRaw *r)
{
    char a[8];
    long m, n, k;
    double x;
    if (r->n_gemm >= PLANC_CALIB_MAX_GEMMS ||
        sscanf(line, "%*s %3s %ld %ld %ld %lf", a, &m, &n, &k, &x) != 5 || !(x > 0) || m <= 0 || n <= 0 ||
        k <= 0 || (strcmp(a, "fwd") && strcmp(a, "dx") && strcmp(a, "dw")))
        return;
    strcpy(r->gemm[r->n_gemm].pass, a);
    r->gemm[r->n_gemm].m = m; r->gemm[r->n_gemm].n = n; r->gemm[r->n_gemm].k = k;
    r->gemm[r->n_gemm++].s = x;
    /* the device's flops: the rate of the largest forward GEMM */
    double fl = 2.0 * (double)m * (double)n * (double)k;
    if (!strcmp(a, "fwd") && fl >= r->gemm_flops) { r->gemm_flops = fl; r->gemm_rate = fl / x; }
}

/* A collective line: coll NAME RANKS LATENCY BUSBW. */
static void read_coll(const char *line, PlancCalibRaw *r)
{
    char a[24];
    int g;
    double x, y;
    if (r->n_coll >= PLANC_CALIB_MAX_COLLS || sscanf(line, "%*s %19s %d %lf %lf", a, &g, &x, &y) != 4 ||
        !known_coll(a) || g < 2 || g > 1024 || (!strcmp(a, "p2p") && g != 2) || !(y > 0) || !(x >= 0))
        return;
    for (int i = 0; i < r->n_coll; i++)   /* one figure per collective and size */
        if (!strcmp(r->coll[i].name, a) && r->coll[i].ranks == g) return;
    strcpy(r->coll[r->n_coll].name, a);
    r->coll[r->n_coll].ranks = g;
    r->coll[r->n_coll].lat = x;
    r->coll[r->n_coll++].bw = y;
}

bool planc_calib_read(FILE *f, PlancCalibRaw *r)
{
    memset(r, 0, sizeof *r);
    strcpy(r->dtype, "fp32");
    char line[256];
    while (fgets(line, sizeof line, f)) {
        char key[32], w[24];
        if (line[0] == '#' || sscanf(line, "%31s", key) != 1) continue;
        if (!strcmp(key, "ranks")) sscanf(line, "%*s %d", &r->ranks);
        else if (!strcmp(key, "backend")) sscanf(line, "%*s %15s", r->backend);
        else if (!strcmp(key, "dtype") && sscanf(line, "%*s %7s", w) == 1 && known_dtype(w)) strcpy(r->dtype, w);
        else if (!strcmp(key, "gpu")) {
            /* a name for the comment only: printable ASCII, no '#' games needed */
            const char *p = line + 3;
            while (*p == ' ') p++;
            size_t n = 0;
            for (; *p && *p != '\n' && n < sizeof r->gpu - 1; p++)
                if (*p >= ' ' && *p <= '~') r->gpu[n++] = *p;
            r->gpu[n] = '\0';
        }
        else if (!strcmp(key, "memory")) sscanf(line, "%*s %lf", &r->memory);
        else if (!strcmp(key, "sms")) sscanf(line, "%*s %d", &r->sms);
        else if (!strcmp(key, "flops_fp32")) sscanf(line, "%*s %lf", &r->flops_fp32);
        else if (!strcmp(key, "stream")) sscanf(line, "%*s %lf", &r->stream);
        else if (!strcmp(key, "launch")) sscanf(line, "%*s %lf", &r->launch);
        else if (!strcmp(key, "overhead")) sscanf(line, "%*s %lf", &r->overhead);
        else if (!strcmp(key, "activation")) sscanf(line, "%*s %lf %lf", &r->act[0], &r->act[1]);
        else if (!strcmp(key, "softmax")) sscanf(line, "%*s %lf %lf", &r->softmax[0], &r->softmax[1]);
        else if (!strcmp(key, "overlap_compute")) sscanf(line, "%*s %lf", &r->ov_compute);
        else if (!strcmp(key, "overlap_comm")) sscanf(line, "%*s %lf", &r->ov_comm);
        else if (!strcmp(key, "gemm")) read_gemm(line, r);
        else if (!strcmp(key, "coll")) read_coll(line, r);
    }
    if (r->sms < 0 || r->sms > 100000) r->sms = 0;
    if (!(r->memory > 0)) r->memory = 0;
    return r->ranks >= 1 && r->n_gemm > 0 && r->gemm_rate > 0 && r->stream > 0;
}

/* The device block's figures, in the language's units. */
static void write_device(FILE *o, const PlancCalibRaw *r)
{
    double mem = r->memory;
    if (!(mem > 0)) {   /* a CPU rank: its share of the host's memory */
        long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGE_SIZE);
        mem = pages > 0 && psz > 0 ? (double)pages * (double)psz / r->ranks : 1024.0 * 1048576.0;
    }
    double f32 = r->flops_fp32 > 0 ? r->flops_fp32 : r->gemm_rate;
    fprintf(o, "    device {\n        memory %.0f MiB\n", mem / 1048576.0 >= 1 ? mem / 1048576.0 : 1);
    fprintf(o, "        flops %.6g GFLOPS\n        flops_fp32 %.6g GFLOPS\n", r->gemm_rate / 1e9, f32 / 1e9);
    fprintf(o, "        hbm %.6g MB/s\n", r->stream / 1e6);
    if (r->sms > 0) fprintf(o, "        sms %d\n", r->sms);
    fprintf(o, "        stream %.6g MB/s\n", r->stream / 1e6);
    fprintf(o, "        launch %.6g us\n        overhead %.6g us\n", r->launch * 1e6, r->overhead * 1e6);
    fprintf(o, "        activation %.6g ns %.6g ns\n        softmax %.6g ns %.6g ns\n", r->act[0] * 1e9,
            r->act[1] * 1e9, r->softmax[0] * 1e9, r->softmax[1] * 1e9);
    fprintf(o, "        gemm_dtype %s\n", r->dtype);
    for (int i = 0; i < r->n_gemm; i++)
        fprintf(o, "        gemm %s %ld %ld %ld %.6g us\n", r->gemm[i].pass, r->gemm[i].m, r->gemm[i].n,
                r->gemm[i].k, r->gemm[i].s * 1e6);
    fprintf(o, "    }\n");
}

/* The link: the alpha-beta figures are the all-reduce's of the largest
 * group (per ring round), for the collectives not measured; then every
 * measured collective by name (ORDER PlanCollective) and group size. */
static void write_link(FILE *o, const PlancCalibRaw *r)
{
    double lat = 5e-6, bw = 1e9;
    int big = 0;
    for (int i = 0; i < r->n_coll; i++)
        if (!strcmp(r->coll[i].name, "all-reduce") && r->coll[i].ranks > big) {
            big = r->coll[i].ranks;
            lat = r->coll[i].lat / (2.0 * (big - 1));
            bw = r->coll[i].bw;
        }
    fprintf(o, "    link intra {\n        bandwidth %.6g MB/s\n        latency %.6g us\n        efficiency 1\n",
            bw / 1e6, lat * 1e6);
    for (int c = 0; c < N_COLLS; c++)
        for (int g = 2; g <= 1024; g++)
            for (int i = 0; i < r->n_coll; i++)
                if (r->coll[i].ranks == g && !strcmp(r->coll[i].name, COLLS[c]))
                    fprintf(o, "        %s %d %.6g us %.6g MB/s\n", COLLS[c], g, r->coll[i].lat * 1e6,
                            r->coll[i].bw / 1e6);
    fprintf(o, "        overlap_compute %.4g\n        overlap_comm %.4g\n    }\n",
            r->ov_compute >= 1 ? r->ov_compute : 1, r->ov_comm >= 1 ? r->ov_comm : 1);
}

void planc_calib_write(FILE *o, const PlancCalibRaw *r, const char *name, const char *how)
{
    char host[64] = "this machine";
    gethostname(host, sizeof host - 1);
    for (char *p = host; *p; p++)
        if (*p < ' ' || *p > '~') *p = '?';
    time_t t = time(NULL);
    char when[32];
    strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", gmtime(&t));
    bool gpu = !strcmp(r->backend, "nccl");
    fprintf(o, "# Written by `%s` on %s, %s.\n", how, host, when);
    if (gpu)
        fprintf(o, "# What one of %d ranks running at once measured with planrt's CUDA kernels\n"
                   "# (%s GEMMs, cuBLAS) and collectives (nccl), one GPU per rank (%s). Times\n"
                   "# are medians, the slowest rank's. Include this file and name the cluster.\n",
                r->ranks, r->dtype, r->gpu[0] ? r->gpu : "CUDA");
    else
        fprintf(o, "# What one of %d ranks running at once measured with planrt's kernels and\n"
                   "# collectives (%s): each rank's device is its share of the machine. Times are\n"
                   "# medians, the slowest rank's. Include this file and name the cluster.\n",
                r->ranks, r->backend[0] ? r->backend : "mpi");
    fprintf(o, "cluster %s {\n    nodes 1\n    gpus_per_node %d\n", name, r->ranks);
    write_device(o, r);
    if (r->ranks > 1) write_link(o, r);
    fprintf(o, "}\n");
}

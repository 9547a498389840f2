/*
 * calib_profile.h: what planrt-calib measured, and the cluster block
 * `planc calibrate` writes from it (cli/calib_profile.c).
 *
 * planrt-calib (runtime/bench/calib.c, either build) writes `key
 * value...` lines in SI units; planc_calib_read reads them back and
 * planc_calib_write prints the one includable `cluster NAME { ... }` in
 * the language's units and canonical form (`planc fmt` keeps it byte for
 * byte). Split from cmd_calibrate.c so tests/test_calib.c can run a
 * synthetic measurement of either target through the writer and sema.
 */
#ifndef PLANC_CALIB_PROFILE_H
#define PLANC_CALIB_PROFILE_H

#include <stdbool.h>
#include <stdio.h>

#define PLANC_CALIB_MAX_GEMMS 512
#define PLANC_CALIB_MAX_COLLS 256   /* 7 collectives x the group sizes of N ranks */

/* One measurement file (SI units: s, bytes, bytes/s, FLOP/s). */
typedef struct {
    int    ranks;
    char   backend[16];     /* "mpi" (CPU) or "nccl" (CUDA) */
    char   dtype[8];        /* what the GEMMs ran in: "fp32" (CPU) or "bf16" (CUDA) */
    char   gpu[64];         /* the GPU's name, "" on a CPU */
    double memory;          /* bytes of one device (CUDA: cudaMemGetInfo); 0: the host's share */
    int    sms;             /* the GPU's SMs; 0: unknown (a CPU) */
    double flops_fp32;      /* a measured fp32 GEMM rate (CUDA); 0: the GEMM points' own */
    double stream, launch, overhead, ov_compute, ov_comm;
    double act[2], softmax[2];          /* s per element, forward and backward */
    int    n_gemm;
    struct { char pass[4]; long m, n, k; double s; } gemm[PLANC_CALIB_MAX_GEMMS];
    int    n_coll;
    struct { char name[20]; int ranks; double lat, bw; } coll[PLANC_CALIB_MAX_COLLS];
    double gemm_rate;       /* FLOP/s of the largest measured forward GEMM */
    double gemm_flops;      /* its FLOPs */
} PlancCalibRaw;

/* Read planrt-calib's file; false when it lacks the ranks, a GEMM or the
 * stream rate (the measurement failed). Unknown keys and collective names
 * are skipped: nothing but known keys reaches the cluster block. */
bool planc_calib_read(FILE *f, PlancCalibRaw *r);

/* Print the cluster block NAME of r, with a comment naming the command
 * (`how`, e.g. "planc calibrate --ranks 2"), the host and the time. */
void planc_calib_write(FILE *o, const PlancCalibRaw *r, const char *name, const char *how);

#endif /* PLANC_CALIB_PROFILE_H */

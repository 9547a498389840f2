/*
 * mem.c: planrt's counting allocator. Every buffer of the training program
 * (weights, gradients, AdamW state, activations, communication buffers) is
 * allocated through prt_mem_alloc with its kind, so the high-water mark of
 * live bytes is counted where the bytes are allocated, not computed from a
 * formula; --mem-report writes it (one JSON line per rank, DESIGN.md).
 *
 * The count is of the bytes asked for (prt_alloc's 64-byte rounding on the
 * CPU and cudaMalloc's granularity are the allocator's slack, which the
 * planner's reserve covers). Sizes are found again at free time through a
 * table keyed by the pointer, since a device pointer has no header to read:
 * the same code counts the CPU and the CUDA build.
 */
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <mpi.h>
#include "par_internal.h"

typedef struct {
    void    *p;      /* NULL: empty; TOMB: freed */
    uint64_t bytes;
    int      kind;
} Entry;

static Entry   *tab;
static size_t   cap, used;   /* slots, slots not empty (live + tombstones) */
static uint64_t live[PRT_MEM_KINDS], total, peak, at_peak[PRT_MEM_KINDS], kind_peak[PRT_MEM_KINDS];
static char     tomb;
#define TOMB ((void *)&tomb)
/* --dry-run: addresses handed out instead of memory, never dereferenced
 * (64-byte steps from 1 MiB up, so never NULL and never a real pointer's
 * alias that matters: the table is all that sees them) */
static bool      dry;
static uintptr_t dry_next = 1u << 20;

static const char *const KIND_NAME[PRT_MEM_KINDS] = {
    "params", "grads", "optimizer", "activations", "buffers", "fp8",
};

static size_t slot_of(const void *p, size_t n)
{
    uint64_t h = (uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 17) & (n - 1);
}

/* Grow (or rebuild without tombstones) to n slots, a power of two. */
static bool rehash(size_t n)
{
    Entry *t = (Entry *)calloc(n, sizeof *t);
    if (!t) return false;
    used = 0;
    for (size_t i = 0; i < cap; i++) {
        if (!tab[i].p || tab[i].p == TOMB) continue;
        size_t j = slot_of(tab[i].p, n);
        while (t[j].p) j = (j + 1) & (n - 1);
        t[j] = tab[i];
        used++;
    }
    free(tab);
    tab = t;
    cap = n;
    return true;
}

static bool remember(void *p, uint64_t bytes, int kind)
{
    if ((used + 1) * 2 > cap && !rehash(cap ? cap * 2 : 1024)) return false;
    size_t j = slot_of(p, cap);
    while (tab[j].p && tab[j].p != TOMB) j = (j + 1) & (cap - 1);
    if (!tab[j].p) used++;
    tab[j] = (Entry){ p, bytes, kind };
    return true;
}

static Entry *find(const void *p)
{
    if (!cap) return NULL;
    for (size_t j = slot_of(p, cap); tab[j].p; j = (j + 1) & (cap - 1))
        if (tab[j].p == p) return &tab[j];
    return NULL;
}

static void count(int kind, uint64_t bytes, bool add)
{
    live[kind] = add ? live[kind] + bytes : live[kind] - bytes;
    total = add ? total + bytes : total - bytes;
    if (live[kind] > kind_peak[kind]) kind_peak[kind] = live[kind];
    if (total > peak) {
        peak = total;
        memcpy(at_peak, live, sizeof live);
    }
}

/* The CPU build's buffers come from glibc's malloc: a fixed mmap threshold
 * of 1 MiB keeps every large buffer (a bucket, a gathered layer, a slot's
 * activations) its own mapping, returned to the system when freed. glibc's
 * default threshold rises to the size of the last large block freed, after
 * which freed buckets stay in the heap and the process's RSS runs above the
 * live bytes counted here (by 20-50 MiB on ZeRO-2 with 25.5M parameters). */
static void fix_mmap_threshold(void)
{
    static bool done;
    if (!done) mallopt(M_MMAP_THRESHOLD, 1 << 20);
    done = true;
}

void *prt_mem_alloc(prt_mem_kind kind, size_t bytes)
{
    if ((int)kind < 0 || kind >= PRT_MEM_KINDS) return NULL;
    fix_mmap_threshold();
    void *p;
    if (dry) {
        p = (void *)dry_next;
        dry_next += (bytes + 63) / 64 * 64 + 64;
    } else if (!(p = prt_alloc(bytes ? bytes : 1))) {
        return NULL;
    }
    if (!remember(p, bytes, (int)kind)) {
        if (!dry) prt_free(p);
        return NULL;
    }
    count((int)kind, bytes, true);
    return p;
}

void prt_mem_free(void *p)
{
    if (!p) return;
    Entry *e = find(p);
    if (e) {
        count(e->kind, e->bytes, false);
        e->p = TOMB;
    }
    if (!dry) prt_free(p);
}

void prt_mem_set_dry(bool on) { dry = on; }
bool prt_mem_dry(void) { return dry; }

void prt_mem_stats_get(prt_mem_stats *out)
{
    memset(out, 0, sizeof *out);
    out->peak_bytes = peak;
    for (int k = 0; k < PRT_MEM_KINDS; k++) {
        out->live[k] = live[k];
        out->at_peak[k] = at_peak[k];
        out->kind_peak[k] = kind_peak[k];
    }
}

/* One rank's line: {"rank", "stage", "peak_bytes", "by_kind": {...}} with
 * by_kind the live bytes of each kind at the moment of the peak (they sum
 * to peak_bytes), then each kind's own high-water mark. */
static void write_line(FILE *f, int rank, int stage, const uint64_t *v)
{
    fprintf(f, "{\"rank\": %d, \"stage\": %d, \"peak_bytes\": %llu, \"by_kind\": {", rank, stage,
            (unsigned long long)v[0]);
    for (int k = 0; k < PRT_MEM_KINDS; k++)
        fprintf(f, "%s\"%s\": %llu", k ? ", " : "", KIND_NAME[k], (unsigned long long)v[1 + k]);
    fprintf(f, "}, \"kind_peak\": {");
    for (int k = 0; k < PRT_MEM_KINDS; k++)
        fprintf(f, "%s\"%s\": %llu", k ? ", " : "", KIND_NAME[k],
                (unsigned long long)v[1 + PRT_MEM_KINDS + k]);
    fprintf(f, "}}\n");
}

prt_status prt_mem_report(const prt_ctx *c, const char *path)
{
    enum { W = 2 + 2 * PRT_MEM_KINDS };   /* stage, peak, at_peak[], kind_peak[] */
    uint64_t mine[W];
    mine[0] = (uint64_t)c->coord.pp;
    mine[1] = peak;
    for (int k = 0; k < PRT_MEM_KINDS; k++) {
        mine[2 + k] = at_peak[k];
        mine[2 + PRT_MEM_KINDS + k] = kind_peak[k];
    }
    uint64_t *all = c->rank == 0 ? (uint64_t *)calloc((size_t)c->size * W, sizeof *all) : NULL;
    int bad = c->rank == 0 && !all;
    MPI_Gather(mine, W, MPI_UINT64_T, all, W, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    if (c->rank == 0 && all) {
        FILE *f = fopen(path, "w");
        if (!f) bad = 1;
        for (int r = 0; f && r < c->size; r++)
            write_line(f, r, (int)all[r * W], all + r * W + 1);
        if (f && fclose(f) != 0) bad = 1;
    }
    free(all);
    MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD);
    return bad ? prtp_fail(PRT_ERR_IO, "%s: cannot write the memory report", path) : PRT_OK;
}

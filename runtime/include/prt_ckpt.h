/*
 * prt_ckpt.h: checkpoints as safetensors files — one per rank, plus an index.
 *
 * A checkpoint of step S is a directory ROOT/step-<S, 8 digits>/ holding
 *
 *   rank-<r, 5 digits>.safetensors  one per writing rank: the pieces of tensors
 *                                   this rank holds, under their global names
 *   index.json                      written last: every tensor's global shape
 *                                   and pieces, and every file's size and CRC-32C
 *
 * Every file is written to a hidden temporary name (".NAME.tmp"), fsynced,
 * renamed, and the directory fsynced, so a crash leaves either the old state
 * or the new file, never half of it. The index comes last: a step directory
 * without a valid index.json is incomplete and ignored by prt_ckpt_latest().
 *
 * A piece is a rectangle rows [r0, r1) x cols [c0, c1) of a global (R, C)
 * tensor (a vector is (R, 1)), stored row-major as a safetensors entry of
 * shape (r1-r0, c1-c0) (or (r1-r0) for a vector). Its key in the rank file is
 * the global name, "NAME#1", "NAME#2", ... for further pieces of the same
 * tensor in that file; the slice is written in the file's __metadata__ under
 * "slice:KEY" as "[r0:r1, c0:c1] of [R, C]" and in the index. TP shards are
 * rectangles; a ZeRO shard is a flat range [f0, f1) of a rectangle's row-major
 * order, which prt_ckpt_put_flat() stores as at most three rectangles (partial
 * first row, whole rows, partial last row). Reading uses the same two forms,
 * so any layout's pieces can be assembled from any other layout's pieces:
 * prt_ckpt_read() reads exactly the bytes of the wanted rectangle from every
 * piece that overlaps it.
 *
 * The checksum is CRC-32C (Castagnoli) of each whole file: it is there to
 * catch accidents (a truncated copy, a flipped bit on disk), not an attacker;
 * CRC-32C detects every burst error up to 32 bits and all odd bit counts,
 * costs a table lookup per byte, and needs no library. A reader verifies each
 * file once, on its first use, before trusting its header.
 *
 * Nothing here uses MPI: a rank writes its file and returns a manifest (a
 * JSON text); the caller gathers the manifests (MPI_Gatherv) and one rank
 * writes the index from them. Functions return prt_status and never exit;
 * the text of the last failure, naming the file and the problem, is
 * prt_ckpt_last_error().
 */
#ifndef PRT_CKPT_H
#define PRT_CKPT_H

#ifdef __cplusplus
extern "C" {
#endif

/* What a checkpoint records besides its tensors (__metadata__ of every file
 * and "metadata" of the index; all values are strings there). */
typedef struct {
    long        step;        /* optimizer steps done */
    uint64_t    seed;        /* the run's seed */
    int         dp, tp, pp;  /* layout that wrote it */
    int         zero;        /* ZeRO stage */
    const char *plan_hash;   /* hash of the plan ("" if none) */
    const char *model;       /* model name */
    int         cp;          /* context-parallel size that wrote it: recorded as "cp" only
                                when > 1 (0 or 1: none, and a file without it reads 1) */
    const char *config;      /* the model's hyperparameters as planc's JSON (codegen/emit.c's
                                MODEL_CONFIG), recorded as "model_config" when not NULL or
                                empty; what prt_hf_export maps to a config.json. NULL when
                                the checkpoint has none (written before issue 28) */
} prt_ckpt_meta;

/* A tensor of a checkpoint, as the whole model sees it. */
typedef struct {
    const char *name;        /* global name */
    prt_dtype   dtype;
    int         ndim;        /* 1 (a vector, cols == 1) or 2 */
    size_t      rows, cols;  /* global shape */
    int         pieces;      /* pieces it is stored in */
} prt_ckpt_tensor;

/* ---- writing ------------------------------------------------------------ */

typedef struct prt_ckpt_writer prt_ckpt_writer;

/* "ROOT/step-%08ld" into buf (cap bytes). */
prt_status prt_ckpt_step_dir(const char *root, long step, char *buf, size_t cap);

/* Start rank `rank`'s file of the checkpoint in dir (created if missing,
 * with its parents). meta is copied. */
prt_status prt_ckpt_writer_new(const char *dir, int rank, const prt_ckpt_meta *meta,
                               prt_ckpt_writer **out);
/* Add the rectangle rows [r0, r1) x cols [c0, c1) of the global (R, C) tensor
 * `name` (ndim 1: C must be 1). data is (r1-r0, c1-c0) row-major host memory
 * that must stay valid until prt_ckpt_writer_finish. */
prt_status prt_ckpt_put(prt_ckpt_writer *w, const char *name, prt_dtype dt, int ndim,
                        size_t R, size_t C, size_t r0, size_t r1, size_t c0, size_t c1,
                        const void *data);
/* Add elements [f0, f1) of that rectangle's row-major order (a ZeRO shard's
 * share of it); data holds those f1-f0 elements. */
prt_status prt_ckpt_put_flat(prt_ckpt_writer *w, const char *name, prt_dtype dt, int ndim,
                             size_t R, size_t C, size_t r0, size_t r1, size_t c0, size_t c1,
                             size_t f0, size_t f1, const void *data);
/* Write the file (temporary name, fsync, rename, fsync of the directory) and
 * free w. *manifest (malloc'd JSON text, *len bytes without the final NUL)
 * describes the file for prt_ckpt_index_write. w is freed on failure too. */
prt_status prt_ckpt_writer_finish(prt_ckpt_writer *w, char **manifest, size_t *len);
/* Drop w without writing. */
void       prt_ckpt_writer_abort(prt_ckpt_writer *w);

/* Write dir/index.json from every writing rank's manifest, atomically. Checks
 * that each tensor's pieces agree on dtype and shape, do not overlap and
 * cover it exactly; names the tensor otherwise. */
prt_status prt_ckpt_index_write(const char *dir, const prt_ckpt_meta *meta,
                                const char *const *manifests, const size_t *lens, int n);

/* ---- reading ------------------------------------------------------------ */

typedef struct prt_ckpt prt_ckpt;

/* The newest ROOT/step-* directory with a valid index.json (path into buf,
 * step into *step). PRT_ERR_IO if there is none; incomplete ones are skipped. */
prt_status prt_ckpt_latest(const char *root, char *buf, size_t cap, long *step);

/* Open a checkpoint directory: parse and check its index and check that each
 * file it names exists with its recorded size. Files are checksummed and
 * their headers parsed on first use. */
prt_status prt_ckpt_open(const char *dir, prt_ckpt **out);
void       prt_ckpt_close(prt_ckpt *ck);

const prt_ckpt_meta *prt_ckpt_get_meta(const prt_ckpt *ck);
/* A metadata value of the index by key ("step", "seed", "model", ...), or NULL. */
const char *prt_ckpt_meta_str(const prt_ckpt *ck, const char *key);
int         prt_ckpt_count(const prt_ckpt *ck);
/* Tensor i (0 <= i < count, sorted by name), or by name (NULL if absent). */
const prt_ckpt_tensor *prt_ckpt_tensor_at(const prt_ckpt *ck, int i);
const prt_ckpt_tensor *prt_ckpt_find(const prt_ckpt *ck, const char *name);

/* Check that the checkpoint holds exactly the model's tensors with their
 * dtypes and shapes, and (if model != NULL) the model name; the error names
 * every mismatch (first few) — another model's checkpoint refuses here. */
prt_status prt_ckpt_check_model(const prt_ckpt *ck, const char *model,
                                const prt_ckpt_tensor *want, int n);

/* Read rows [r0, r1) x cols [c0, c1) of tensor `name` into dst
 * ((r1-r0, c1-c0) row-major), from every piece that overlaps it. */
prt_status prt_ckpt_read(prt_ckpt *ck, const char *name, size_t r0, size_t r1,
                         size_t c0, size_t c1, void *dst);
/* Read elements [f0, f1) of that rectangle's row-major order into dst. */
prt_status prt_ckpt_read_flat(prt_ckpt *ck, const char *name, size_t r0, size_t r1,
                              size_t c0, size_t c1, size_t f0, size_t f1, void *dst);
/* Checksum every file of the checkpoint and parse its header now. */
prt_status prt_ckpt_verify(prt_ckpt *ck);

/* Write one safetensors file with every full tensor of the checkpoint in dir
 * (tensors whose name starts with skip_prefix left out, if it is not NULL),
 * atomically; any safetensors reader loads it. */
prt_status prt_ckpt_consolidate(const char *dir, const char *out_path,
                                const char *skip_prefix);

/* ---- single safetensors files ------------------------------------------- */

typedef struct prt_st prt_st;
typedef struct {
    const char *name;
    const char *dtype;       /* safetensors dtype string: "F32", "BF16", ... */
    int         ndim;
    size_t      shape[8];
    uint64_t    begin, end;  /* byte range in the data section */
} prt_st_entry;

/* Open and strictly check one safetensors file: header length within the
 * file and 100 MB, header is JSON with no duplicate keys, known dtypes,
 * shapes matching byte counts, data offsets contiguous and covering the data
 * exactly. */
prt_status prt_st_open(const char *path, prt_st **out);
void       prt_st_close(prt_st *f);
int        prt_st_count(const prt_st *f);
const prt_st_entry *prt_st_entry_at(const prt_st *f, int i);   /* sorted by name */
const prt_st_entry *prt_st_find(const prt_st *f, const char *name);
const char *prt_st_meta(const prt_st *f, const char *key);     /* __metadata__ value */
/* Read bytes [off, off+n) of entry e's data. */
prt_status prt_st_read(prt_st *f, const prt_st_entry *e, uint64_t off, size_t n, void *dst);

/* CRC-32C of n bytes, continuing from crc (start with 0). */
uint32_t   prt_crc32c(uint32_t crc, const void *buf, size_t n);

/* ---- Hugging Face model directories (hf.c, issue 28) --------------------- */

/* Write the checkpoint in dir as a Hugging Face model directory out_dir:
 * config.json of the architecture the checkpoint's "model_config" maps to
 * (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM,
 * MixtralForCausalLM, GPT2LMHeadModel, GemmaForCausalLM, Gemma2ForCausalLM,
 * Gemma3ForCausalLM, Olmo2ForCausalLM), generation_config.json, and the
 * weights under Hugging Face's names, split and row-permuted as
 * transformers reads them, in dtype "fp32" or "bf16" (NULL: fp32), as
 * model.safetensors or, past max_shard bytes (0: 5 GB, transformers'
 * default), model-0000K-of-0000N.safetensors with model.safetensors.index.json.
 * PRT_ERR_UNSUPPORTED names the feature when the model cannot be mapped
 * exactly (nothing is written then); PRT_ERR_FORMAT when the checkpoint
 * records no model_config. */
prt_status prt_hf_export(const char *dir, const char *out_dir, const char *dtype, uint64_t max_shard);

/* PRT_OK when the model config (planc's JSON) maps exactly onto one
 * Hugging Face architecture, whose class name goes to *arch (may be NULL);
 * PRT_ERR_UNSUPPORTED naming the feature otherwise. The generated program
 * asks before its first step, so --export-hf fails fast. */
prt_status prt_hf_check(const char *config, const char **arch);

typedef struct prt_hf prt_hf;
/* Open the Hugging Face directory dir for a model described by config
 * (planc's JSON, the generated program's MODEL_CONFIG): its config.json
 * must name the architecture config maps to and agree on every field that
 * shapes the weights (a mismatch names the field and both values), and it
 * must hold every tensor with its shape in F32, BF16 or F16 (a missing one
 * is named) and none the model lacks. Only headers are read here. */
prt_status prt_hf_open(const char *dir, const char *config, prt_hf **out);
void       prt_hf_close(prt_hf *hf);
/* Read elements [f0, f1) of the row-major rectangle rows [r0, r1) x cols
 * [c0, c1) of planc's tensor `name` (its checkpoint shape: logical rows)
 * as fp32 into dst, from the Hugging Face tensors it is made of. */
prt_status prt_hf_read_flat(prt_hf *hf, const char *name, size_t r0, size_t r1, size_t c0, size_t c1,
                            size_t f0, size_t f1, float *dst);

/* The text of the last failure of a prt_ckpt / prt_st function. */
const char *prt_ckpt_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* PRT_CKPT_H */

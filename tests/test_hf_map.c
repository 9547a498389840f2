/*
 * test_hf_map.c: the Hugging Face mapping of a model planc's program cannot
 * build yet (cmocka, one process): OLMo-2, `norm_position post` on both
 * sub-blocks with `qk_norm rmsnorm_projection` (emit refuses the
 * whole-projection q/k norm until the runtime has it, so no run writes such
 * a checkpoint and test-hf-roundtrip cannot start one from a directory).
 *
 * A checkpoint is written here the way the generated program writes one
 * (its tensor names: codegen/emit.c's emit_params, no pre-norms, the
 * post-norms last in their layer, q_norm / k_norm over the whole q and k;
 * its model_config as emit_model_config prints it), on two "TP ranks" whose
 * pieces split q and k by heads. Then:
 *
 *   - prt_hf_export writes Olmo2ForCausalLM: config.json's fields, the
 *     tensor names, q_norm and k_norm of H*D and Hkv*D values permuted
 *     within each head as q and k's rows are (RoPE: planc pairs (2i, 2i+1),
 *     transformers' rotate_half (i, i + D/2)), no input_layernorm;
 *   - prt_hf_open of that directory checks config.json against the same
 *     model_config, and prt_hf_read_flat (what --init-from reads with) gives
 *     back every tensor bit for bit, a TP rank's half of q_norm too;
 *   - the refusals: post norms without the projection q/k norm, the
 *     projection q/k norm with pre norms, a logit soft-cap (Gemma 2's) on
 *     it, a directory whose q_norm has the per-head shape (Qwen3's).
 *
 * The export is left in $HF_MAP_DIR/olmo2-hf for test-hf (transformers loads
 * it strictly and computes reference.py's loss).
 *
 * Gemma 3 (Gemma3ForCausalLM, model_type gemma3_text) likewise, on 3 blocks
 * with every 3rd global: its program exists (test-hf-roundtrip trains it),
 * but transformers 4.49, the newest test-hf's torch 1.13 imports, has no
 * Gemma 3, so its config.json is held here field by field (the window
 * pattern as sliding_window_pattern and as layer_types, the local RoPE
 * base, the null caps), its names (four norms a block, q_norm and k_norm
 * of one head's D gains permuted within the head) and --init-from's read
 * bit for bit; google/gemma-3-1b-pt's published config.json is taken for
 * the program of its import.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "planrt.h"

static char root[512];

/* The tiny OLMo-2: vocab 11, dim 16, 2 blocks of 4 heads of 4 (kv 2), MLP 24. */
enum { V = 11, C = 16, BLOCKS = 2, H = 4, KV = 2, D = 4, F = 24, Q = H * D, K = KV * D };

/* codegen/emit.c's MODEL_CONFIG for it (keys in emit_model_config's order). */
static const char CONFIG[] =
    "{\"format\": 1, \"vocab\": 11, \"seq\": 16, \"dim\": 16, \"dtype\": \"fp32\", \"blocks\": 2, "
    "\"position\": \"rope\", \"rope_theta\": 10000, \"rope_scaling\": false, "
    "\"heads\": 4, \"kv_heads\": 2, \"head_dim\": 4, \"window\": 0, \"attn_norm\": \"rmsnorm\", "
    "\"attn_bias\": \"none\", \"qk_norm\": \"rmsnorm_projection\", "
    "\"ffn\": \"mlp\", \"hidden\": 24, \"act\": \"swiglu\", \"ffn_norm\": \"rmsnorm\", \"ffn_bias\": false, "
    "\"experts\": 0, \"top_k\": 0, \"shared\": 0, \"capacity_factor\": 0, \"aux_loss\": 0, "
    "\"attn_norm_position\": \"post\", \"ffn_norm_position\": \"post\", "
    "\"final_norm\": \"rmsnorm\", \"tied\": false, \"norm_eps\": 1.0000000000000001e-05, \"dropout\": 0, "
    "\"embed_scale\": false, \"norm_plus_one\": false, \"attn_softcap\": 0, \"query_scalar\": 0, "
    "\"logit_softcap\": 0, \"uniform\": \"\"}";

typedef struct {
    char   name[64];
    size_t R, Cc;
    int    ndim;
    bool   tp_rows;    /* split by heads over the two TP ranks (q/k norms): two pieces */
    bool   norm;       /* a norm's gains: values near 1 */
} T;

static T tens[32];
static int nt;

static void add(const char *name, size_t R, size_t Cc, bool tp_rows, bool norm)
{
    T *t = &tens[nt++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->R = R, t->Cc = Cc, t->ndim = Cc == 1 ? 1 : 2, t->tp_rows = tp_rows, t->norm = norm;
}

/* The program's tensors of the model (emit_params' names and order). */
static void model_tensors(void)
{
    char n[64];
    nt = 0;
    add("wte.weight", V, C, false, false);
    for (int b = 0; b < BLOCKS; b++) {
        int la = 1 + 2 * b, lf = la + 1;
        snprintf(n, sizeof n, "layers.%d.attn.qkv.weight", la), add(n, Q + 2 * K, C, false, false);
        snprintf(n, sizeof n, "layers.%d.attn.out.weight", la), add(n, C, Q, false, false);
        snprintf(n, sizeof n, "layers.%d.attn.q_norm.weight", la), add(n, Q, 1, true, true);
        snprintf(n, sizeof n, "layers.%d.attn.k_norm.weight", la), add(n, K, 1, true, true);
        snprintf(n, sizeof n, "layers.%d.attn_post_norm.weight", la), add(n, C, 1, false, true);
        snprintf(n, sizeof n, "layers.%d.mlp.up.weight", lf), add(n, 2 * F, C, false, false);
        snprintf(n, sizeof n, "layers.%d.mlp.down.weight", lf), add(n, C, F, false, false);
        snprintf(n, sizeof n, "layers.%d.mlp_post_norm.weight", lf), add(n, C, 1, false, true);
    }
    add("norm.weight", C, 1, false, true);
    add("lm_head.weight", V, C, false, false);
}

/* Element e of tensor id: distinct, fp32-exact, of a size a forward can use. */
static float val(int id, size_t e)
{
    float x = 0.5f * (float)sin(0.37 * (double)e + 1.3 * id);
    return tens[id].norm ? 1.0f + 0.2f * x : x;
}

static void path(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/%s", root, name);
}

/* The checkpoint of the model: rank 0 holds the first heads of q_norm and
 * k_norm and every replicated tensor, rank 1 the other heads (a tp 2
 * layout's pieces, as the program saves them). */
static void write_ckpt(const char *dir, const char *config)
{
    prt_ckpt_meta meta = { .step = 1, .seed = 7, .dp = 1, .tp = 2, .pp = 1, .zero = 0,
                           .plan_hash = "", .model = "tinymodel", .config = config };
    char *man[2];
    size_t len[2];
    float *data[32];
    for (int i = 0; i < nt; i++) {
        size_t n = tens[i].R * tens[i].Cc;
        data[i] = malloc(n * sizeof(float));
        for (size_t e = 0; e < n; e++) data[i][e] = val(i, e);
    }
    for (int r = 0; r < 2; r++) {
        prt_ckpt_writer *w;
        assert_int_equal(prt_ckpt_writer_new(dir, r, &meta, &w), PRT_OK);
        for (int i = 0; i < nt; i++) {
            const T *t = &tens[i];
            if (t->tp_rows) {
                size_t h = t->R / 2;
                assert_int_equal(prt_ckpt_put(w, t->name, PRT_FP32, 1, t->R, 1, r * h, (r + 1) * h, 0, 1,
                                              data[i] + r * h), PRT_OK);
            } else if (r == 0) {
                assert_int_equal(prt_ckpt_put(w, t->name, PRT_FP32, t->ndim, t->R, t->Cc, 0, t->R, 0, t->Cc,
                                              data[i]), PRT_OK);
            }
        }
        assert_int_equal(prt_ckpt_writer_finish(w, &man[r], &len[r]), PRT_OK);
    }
    const char *m[2] = { man[0], man[1] };
    assert_int_equal(prt_ckpt_index_write(dir, &meta, m, len, 2), PRT_OK);
    for (int i = 0; i < nt; i++) free(data[i]);
    free(man[0]);
    free(man[1]);
}

static char *slurp(const char *p)
{
    FILE *f = fopen(p, "rb");
    assert_non_null(f);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

static void expect_error(prt_status st, const char *a)
{
    const char *e = prt_ckpt_last_error();
    if (st == PRT_OK || !strstr(e, a)) fail_msg("expected an error with \"%s\", got status %d: %s", a, (int)st, e);
    printf("    refused as expected: %s\n", e);
}

/* transformers' element j of a head-permuted vector is planc's element
 * planc_of(j): within each head of D, rotate_half's i and i + D/2 are the
 * interleaved pair 2i, 2i+1 (written here independently of hf.c). */
static size_t planc_of(size_t j)
{
    size_t h = j / D, w = j % D;
    return w < D / 2 ? h * D + 2 * w : h * D + 2 * (w - D / 2) + 1;
}

static void test_olmo2_export(void **state)
{
    (void)state;
    char ck[600], out[600], p[700];
    model_tensors();
    path(ck, sizeof ck, "olmo2-ck");
    path(out, sizeof out, "olmo2-hf");
    write_ckpt(ck, CONFIG);
    const char *arch = NULL;
    assert_int_equal(prt_hf_check(CONFIG, &arch), PRT_OK);
    assert_string_equal(arch, "Olmo2ForCausalLM");
    assert_int_equal(prt_hf_export(ck, out, "fp32", 0), PRT_OK);

    snprintf(p, sizeof p, "%s/config.json", out);
    const char *cj = slurp(p);
    const char *want[] = { "\"architectures\": [\"Olmo2ForCausalLM\"]", "\"model_type\": \"olmo2\"",
                           "\"num_key_value_heads\": 2", "\"head_dim\": 4", "\"hidden_act\": \"silu\"",
                           "\"rms_norm_eps\": 1e-05", "\"attention_bias\": false", "\"tie_word_embeddings\": false",
                           "\"intermediate_size\": 24" };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(cj, want[i])) fail_msg("config.json lacks %s:\n%s", want[i], cj);

    prt_st *f;
    snprintf(p, sizeof p, "%s/model.safetensors", out);
    assert_int_equal(prt_st_open(p, &f), PRT_OK);
    /* every block: the two norms after the sub-blocks, none before them */
    assert_null(prt_st_find(f, "model.layers.0.input_layernorm.weight"));
    assert_null(prt_st_find(f, "model.layers.1.pre_feedforward_layernorm.weight"));
    int n_hf = prt_st_count(f);
    assert_int_equal(n_hf, 3 + BLOCKS * 11);   /* embed, norm, lm_head; q k v o, q/k norm, 2 norms, 3 MLP */
    /* HF name, planc tensor id (model_tensors' order), permuted per head */
    struct { const char *hf; int id; bool perm; } chk[] = {
        { "model.layers.0.self_attn.q_norm.weight", 3, true },
        { "model.layers.1.self_attn.k_norm.weight", 12, true },
        { "model.layers.0.post_attention_layernorm.weight", 5, false },
        { "model.layers.1.post_feedforward_layernorm.weight", 16, false },
        { "model.norm.weight", 17, false },
    };
    for (size_t c = 0; c < sizeof chk / sizeof chk[0]; c++) {
        const prt_st_entry *e = prt_st_find(f, chk[c].hf);
        if (!e) fail_msg("the export has no %s", chk[c].hf);
        const T *t = &tens[chk[c].id];
        assert_int_equal(e->ndim, 1);
        assert_int_equal(e->shape[0], t->R);
        float got[64];
        assert_int_equal(prt_st_read(f, e, 0, t->R * 4, got), PRT_OK);
        for (size_t j = 0; j < t->R; j++) {
            float w = val(chk[c].id, chk[c].perm ? planc_of(j) : j);
            if (memcmp(&got[j], &w, 4))
                fail_msg("%s[%zu] = %g, planc's %s[%zu] = %g", chk[c].hf, j, got[j], t->name,
                         chk[c].perm ? planc_of(j) : j, w);
        }
        printf("    %s: %zu values, %s\n", chk[c].hf, t->R,
               chk[c].perm ? "permuted within each head as q and k's rows" : "as they are");
    }
    prt_st_close(f);
}

/* Back in: the directory checked against the plan's model, every tensor
 * read whole and bit for bit, and rank 1's half of q_norm (its heads). */
static void test_olmo2_init_from(void **state)
{
    (void)state;
    char out[600];
    path(out, sizeof out, "olmo2-hf");
    prt_hf *hf;
    assert_int_equal(prt_hf_open(out, CONFIG, &hf), PRT_OK);
    size_t total = 0;
    for (int i = 0; i < nt; i++) {
        const T *t = &tens[i];
        size_t n = t->R * t->Cc;
        float *got = malloc(n * sizeof(float));
        assert_int_equal(prt_hf_read_flat(hf, t->name, 0, t->R, 0, t->Cc, 0, n, got), PRT_OK);
        for (size_t e = 0; e < n; e++) {
            float w = val(i, e);
            if (memcmp(&got[e], &w, 4)) fail_msg("%s[%zu]: %g back, %g written", t->name, e, got[e], w);
        }
        total += n;
        free(got);
    }
    float half[Q / 2];
    assert_int_equal(prt_hf_read_flat(hf, "layers.3.attn.q_norm.weight", Q / 2, Q, 0, 1, 0, Q / 2, half), PRT_OK);
    for (size_t e = 0; e < Q / 2; e++) {
        float w = val(11, Q / 2 + e);
        assert_memory_equal(&half[e], &w, 4);
    }
    printf("    %d tensors, %zu values back bit for bit; TP rank 1's heads of q_norm too\n", nt, total);
    prt_hf_close(hf);
}

/* What does not map is refused, naming it. */
static void test_olmo2_refusals(void **state)
{
    (void)state;
    static char cfg[sizeof CONFIG + 64];
    char *at;
    /* post norms without the whole-projection q/k norm */
    snprintf(cfg, sizeof cfg, "%s", CONFIG);
    at = strstr(cfg, "\"rmsnorm_projection\"");
    memcpy(at, "\"none\"", 6);
    memmove(at + 6, at + 20, strlen(at + 20) + 1);
    expect_error(prt_hf_check(cfg, NULL), "norm_position post without qk_norm rmsnorm_projection");
    /* the projection q/k norm with pre norms */
    snprintf(cfg, sizeof cfg, "%s", CONFIG);
    at = strstr(cfg, "\"attn_norm_position\"");
    memcpy(at, "\"xttn_norm_position\"", 20);   /* absent: pre */
    at = strstr(cfg, "\"ffn_norm_position\"");
    memcpy(at, "\"xfn_norm_position\"", 19);
    expect_error(prt_hf_check(cfg, NULL), "qk_norm rmsnorm_projection with norm_position pre on attention");
    /* OLMo-2's norms with Gemma 2's logit cap: no architecture has both */
    snprintf(cfg, sizeof cfg, "%s", CONFIG);
    at = strstr(cfg, "\"logit_softcap\": 0");
    memcpy(at, "\"logit_softcap\": 9", 18);
    expect_error(prt_hf_check(cfg, NULL), "lm_head softcap with norm_position post: OLMo-2 neither soft-caps");
    /* a directory whose q_norm is one head's (Qwen3's per-head norm) */
    char out[600], bad[600], cmd[3000];
    path(out, sizeof out, "olmo2-hf");
    path(bad, sizeof bad, "olmo2-hf-perhead");
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s' && python3 - '%s/model.safetensors' <<'EOF'\n"
             "import json, struct, sys\n"
             "b = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n])\n"
             "h['model.layers.0.self_attn.q_norm.weight']['shape'] = [4, 4]\n"
             "t = json.dumps(h).encode(); t += b' ' * (-len(t) %% 8)\n"
             "open(sys.argv[1], 'wb').write(struct.pack('<Q', len(t)) + t + b[8 + n:])\n"
             "EOF", bad, out, bad, bad);
    assert_int_equal(system(cmd), 0);
    prt_hf *hf = NULL;
    expect_error(prt_hf_open(bad, CONFIG, &hf), "model.layers.0.self_attn.q_norm.weight has shape [4, 4], the plan's model needs [16, 1]");
}

/* ---- Gemma 3 ------------------------------------------------------------------ */

enum { G3_BLOCKS = 3 };

/* codegen/emit.c's MODEL_CONFIG of a tiny Gemma 3 (the shapes above, 3
 * blocks, a window of 8 with block 2 global, the local blocks at base 100,
 * scores by 1/sqrt(12), no caps, tied head). */
static const char G3_CONFIG[] =
    "{\"format\": 1, \"vocab\": 11, \"seq\": 16, \"dim\": 16, \"dtype\": \"fp32\", \"blocks\": 3, "
    "\"position\": \"rope\", \"rope_theta\": 10000, \"rope_scaling\": false, \"rope_local_theta\": 100, "
    "\"heads\": 4, \"kv_heads\": 2, \"head_dim\": 4, \"window\": 8, \"attn_norm\": \"rmsnorm\", "
    "\"attn_bias\": \"none\", \"qk_norm\": \"rmsnorm\", \"window_every\": 3, "
    "\"ffn\": \"mlp\", \"hidden\": 24, \"act\": \"geglu\", \"ffn_norm\": \"rmsnorm\", \"ffn_bias\": false, "
    "\"experts\": 0, \"top_k\": 0, \"shared\": 0, \"capacity_factor\": 0, \"aux_loss\": 0, "
    "\"attn_norm_position\": \"sandwich\", \"ffn_norm_position\": \"sandwich\", "
    "\"final_norm\": \"rmsnorm\", \"tied\": true, \"norm_eps\": 9.9999999999999995e-07, \"dropout\": 0, "
    "\"embed_scale\": true, \"norm_plus_one\": true, \"attn_softcap\": 0, \"query_scalar\": 12, "
    "\"logit_softcap\": 0, \"uniform\": \"\"}";

/* Its program's tensors (emit_params' names and order): each layer's
 * pre-norm, QKV, out, the q and k gains of D (replicated over TP: rank 0
 * writes them), the post-norm; the tied head has no tensor of its own. */
static void gemma3_tensors(void)
{
    char n[64];
    nt = 0;
    add("wte.weight", V, C, false, false);
    for (int b = 0; b < G3_BLOCKS; b++) {
        int la = 1 + 2 * b, lf = la + 1;
        snprintf(n, sizeof n, "layers.%d.attn_norm.weight", la), add(n, C, 1, false, true);
        snprintf(n, sizeof n, "layers.%d.attn.qkv.weight", la), add(n, Q + 2 * K, C, false, false);
        snprintf(n, sizeof n, "layers.%d.attn.out.weight", la), add(n, C, Q, false, false);
        snprintf(n, sizeof n, "layers.%d.attn.q_norm.weight", la), add(n, D, 1, false, true);
        snprintf(n, sizeof n, "layers.%d.attn.k_norm.weight", la), add(n, D, 1, false, true);
        snprintf(n, sizeof n, "layers.%d.attn_post_norm.weight", la), add(n, C, 1, false, true);
        snprintf(n, sizeof n, "layers.%d.mlp_norm.weight", lf), add(n, C, 1, false, true);
        snprintf(n, sizeof n, "layers.%d.mlp.up.weight", lf), add(n, 2 * F, C, false, false);
        snprintf(n, sizeof n, "layers.%d.mlp.down.weight", lf), add(n, C, F, false, false);
        snprintf(n, sizeof n, "layers.%d.mlp_post_norm.weight", lf), add(n, C, 1, false, true);
    }
    add("norm.weight", C, 1, false, true);
}

static void test_gemma3_export(void **state)
{
    (void)state;
    char ck[600], out[600], p[700];
    gemma3_tensors();
    path(ck, sizeof ck, "gemma3-ck");
    path(out, sizeof out, "gemma3-hf");
    write_ckpt(ck, G3_CONFIG);
    const char *arch = NULL;
    assert_int_equal(prt_hf_check(G3_CONFIG, &arch), PRT_OK);
    assert_string_equal(arch, "Gemma3ForCausalLM");
    assert_int_equal(prt_hf_export(ck, out, "fp32", 0), PRT_OK);

    snprintf(p, sizeof p, "%s/config.json", out);
    const char *cj = slurp(p);
    const char *want[] = { "\"architectures\": [\"Gemma3ForCausalLM\"]", "\"model_type\": \"gemma3_text\"",
                           "\"num_hidden_layers\": 3", "\"num_key_value_heads\": 2", "\"head_dim\": 4",
                           "\"hidden_activation\": \"gelu_pytorch_tanh\"", "\"rms_norm_eps\": 1e-06",
                           "\"rope_theta\": 10000.0", "\"rope_local_base_freq\": 100.0", "\"rope_scaling\": null",
                           "\"tie_word_embeddings\": true", "\"query_pre_attn_scalar\": 12",
                           "\"attn_logit_softcapping\": null", "\"final_logit_softcapping\": null",
                           "\"sliding_window\": 8", "\"sliding_window_pattern\": 3",
                           "\"layer_types\": [\"sliding_attention\", \"sliding_attention\", \"full_attention\"]" };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(cj, want[i])) fail_msg("config.json lacks %s:\n%s", want[i], cj);

    prt_st *f;
    snprintf(p, sizeof p, "%s/model.safetensors", out);
    assert_int_equal(prt_st_open(p, &f), PRT_OK);
    assert_null(prt_st_find(f, "lm_head.weight"));   /* tied */
    /* embed, norm; a block: q k v o, q/k norm, 4 norms, 3 MLP */
    assert_int_equal(prt_st_count(f), 2 + G3_BLOCKS * 13);
    /* HF name, planc tensor id (gemma3_tensors' order: 1 + 10 b + k), permuted per head */
    struct { const char *hf; int id; bool perm; } chk[] = {
        { "model.layers.0.self_attn.q_norm.weight", 4, true },
        { "model.layers.2.self_attn.k_norm.weight", 25, true },
        { "model.layers.1.input_layernorm.weight", 11, false },
        { "model.layers.1.post_attention_layernorm.weight", 16, false },
        { "model.layers.1.pre_feedforward_layernorm.weight", 17, false },
        { "model.layers.2.post_feedforward_layernorm.weight", 30, false },
        { "model.norm.weight", 31, false },
    };
    for (size_t c = 0; c < sizeof chk / sizeof chk[0]; c++) {
        const prt_st_entry *e = prt_st_find(f, chk[c].hf);
        if (!e) fail_msg("the export has no %s", chk[c].hf);
        const T *t = &tens[chk[c].id];
        assert_int_equal(e->ndim, 1);
        assert_int_equal(e->shape[0], t->R);
        float got[64];
        assert_int_equal(prt_st_read(f, e, 0, t->R * 4, got), PRT_OK);
        for (size_t j = 0; j < t->R; j++) {
            float w = val(chk[c].id, chk[c].perm ? planc_of(j) : j);
            if (memcmp(&got[j], &w, 4))
                fail_msg("%s[%zu] = %g, planc's %s[%zu] = %g", chk[c].hf, j, got[j], t->name,
                         chk[c].perm ? planc_of(j) : j, w);
        }
        printf("    %s: %zu values, %s\n", chk[c].hf, t->R,
               chk[c].perm ? "permuted within the head as q and k's rows" : "as they are");
    }
    prt_st_close(f);
}

/* Back in: every tensor bit for bit; then a directory whose layer_types
 * (transformers 4.53 on) or sliding_window_pattern puts the global block
 * elsewhere, and one without rope_local_base_freq (Gemma3TextConfig's
 * 10000, not the plan's 100), are refused naming the field. */
static void test_gemma3_init_from(void **state)
{
    (void)state;
    char out[600], bad[600], cmd[3000];
    path(out, sizeof out, "gemma3-hf");
    prt_hf *hf;
    assert_int_equal(prt_hf_open(out, G3_CONFIG, &hf), PRT_OK);
    size_t total = 0;
    for (int i = 0; i < nt; i++) {
        const T *t = &tens[i];
        size_t n = t->R * t->Cc;
        float *got = malloc(n * sizeof(float));
        assert_int_equal(prt_hf_read_flat(hf, t->name, 0, t->R, 0, t->Cc, 0, n, got), PRT_OK);
        for (size_t e = 0; e < n; e++) {
            float w = val(i, e);
            if (memcmp(&got[e], &w, 4)) fail_msg("%s[%zu]: %g back, %g written", t->name, e, got[e], w);
        }
        total += n;
        free(got);
    }
    printf("    %d tensors, %zu values back bit for bit\n", nt, total);
    prt_hf_close(hf);
    static const struct { const char *edit, *err; } cases[] = {
        { "c['layer_types'] = ['sliding_attention', 'full_attention', 'sliding_attention']",
          "layer_types is \"full_attention\" at block 1, the plan's model has [\"sliding_attention\", \"sliding_attention\", \"full_attention\"]" },
        { "del c['layer_types']; c['sliding_window_pattern'] = 2", "sliding_window_pattern is 2, the plan's model has 3" },
        { "del c['rope_local_base_freq']", "rope_local_base_freq is 10000.0 (left out: transformers' default), the plan's model has 100.0" },
    };
    path(bad, sizeof bad, "gemma3-hf-edited");
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s' && python3 - '%s/config.json' <<'EOF'\n"
                 "import json, sys\n"
                 "c = json.load(open(sys.argv[1])); %s\n"
                 "json.dump(c, open(sys.argv[1], 'w'))\n"
                 "EOF", bad, out, bad, bad, cases[k].edit);
        assert_int_equal(system(cmd), 0);
        hf = NULL;
        expect_error(prt_hf_open(bad, G3_CONFIG, &hf), cases[k].err);
    }
    /* layer_types alone (4.53's save): the pattern not read, the directory taken */
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s' && python3 - '%s/config.json' <<'EOF'\n"
             "import json, sys\n"
             "c = json.load(open(sys.argv[1])); del c['sliding_window_pattern']\n"
             "json.dump(c, open(sys.argv[1], 'w'))\n"
             "EOF", bad, out, bad, bad);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(prt_hf_open(bad, G3_CONFIG, &hf), PRT_OK);
    prt_hf_close(hf);
}

/* G3_CONFIG with its first `from` replaced by `to`, into cfg. */
static const char *g3_edit(char *cfg, size_t cap, const char *from, const char *to)
{
    const char *at = strstr(G3_CONFIG, from);
    assert_non_null(at);
    snprintf(cfg, cap, "%.*s%s%s", (int)(at - G3_CONFIG), G3_CONFIG, to, at + strlen(from));
    return cfg;
}

/* The model_config emit writes for `planc import tests/bridges/gemma-3-1b.json`
 * (google/gemma-3-1b-pt) with seq 32768. */
static const char G3_1B_CONFIG[] =
    "{\"format\": 1, \"vocab\": 262144, \"seq\": 32768, \"dim\": 1152, \"dtype\": \"bf16\", "
    "\"blocks\": 26, \"position\": \"rope\", \"rope_theta\": 1000000, \"rope_scaling\": false, "
    "\"rope_local_theta\": 10000, \"heads\": 4, \"kv_heads\": 1, \"head_dim\": 256, "
    "\"window\": 512, \"attn_norm\": \"rmsnorm\", \"attn_bias\": \"none\", "
    "\"qk_norm\": \"rmsnorm\", \"window_every\": 6, \"ffn\": \"mlp\", \"hidden\": 6912, "
    "\"act\": \"geglu\", \"ffn_norm\": \"rmsnorm\", \"ffn_bias\": false, \"experts\": 0, "
    "\"top_k\": 0, \"shared\": 0, \"capacity_factor\": 0, \"aux_loss\": 0, "
    "\"attn_norm_position\": \"sandwich\", \"ffn_norm_position\": \"sandwich\", "
    "\"final_norm\": \"rmsnorm\", \"tied\": true, \"norm_eps\": 9.9999999999999995e-07, "
    "\"dropout\": 0, \"embed_scale\": true, \"norm_plus_one\": true, \"attn_softcap\": 0, "
    "\"query_scalar\": 256, \"logit_softcap\": 0, \"uniform\": \"\"}";

/* google/gemma-3-1b-pt's own config.json (tests/bridges/gemma-3-1b.json, as
 * published: no tie_word_embeddings, null caps, sliding_window_pattern 6)
 * is what --init-from takes for the program of its import: prt_hf_open
 * gets past config.json to the weights, which this directory lacks; with
 * rope_local_base_freq changed it stops at config.json, naming the field. */
static void test_gemma3_published_config(void **state)
{
    (void)state;
    char dir[600], cmd[2000];
    path(dir, sizeof dir, "gemma-3-1b");
    const char *arch = NULL;
    assert_int_equal(prt_hf_check(G3_1B_CONFIG, &arch), PRT_OK);
    assert_string_equal(arch, "Gemma3ForCausalLM");
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s' && cp tests/bridges/gemma-3-1b.json '%s/config.json'", dir, dir, dir);
    assert_int_equal(system(cmd), 0);
    prt_hf *hf = NULL;
    prt_status st = prt_hf_open(dir, G3_1B_CONFIG, &hf);
    const char *e = prt_ckpt_last_error();
    if (st == PRT_OK || strstr(e, "config.json") || !strstr(e, "model.safetensors"))
        fail_msg("the published config.json was not taken (status %d): %s", (int)st, e);
    printf("    config.json taken; then, as expected: %s\n", e);
    snprintf(cmd, sizeof cmd, "sed -i 's/\"rope_local_base_freq\": 10000/\"rope_local_base_freq\": 20000/' '%s/config.json'", dir);
    assert_int_equal(system(cmd), 0);
    expect_error(prt_hf_open(dir, G3_1B_CONFIG, &hf), "rope_local_base_freq is 20000, the plan's model has 10000.0");
}

/* What Gemma3ForCausalLM cannot say is refused, naming it. */
static void test_gemma3_refusals(void **state)
{
    (void)state;
    static char cfg[sizeof G3_CONFIG + 64];
    /* a window on every block: Gemma 3's every K-th block is global */
    expect_error(prt_hf_check(g3_edit(cfg, sizeof cfg, "\"window_every\": 3", "\"window_every\": 0"), NULL),
                 "sliding_window 8 on every block: Gemma3ForCausalLM's every sliding_window_pattern-th block");
    /* Gemma 3's block with Qwen3's gain w (no norm_plus_one) */
    expect_error(prt_hf_check(g3_edit(cfg, sizeof cfg, "\"norm_plus_one\": true", "\"norm_plus_one\": false"), NULL),
                 "qk_norm rmsnorm with norm_position sandwich but without norm_plus_one true");
    /* the local base without Gemma 3's q/k norm: no architecture */
    expect_error(prt_hf_check(g3_edit(cfg, sizeof cfg, "\"qk_norm\": \"rmsnorm\"", "\"qk_norm\": \"none\""), NULL),
                 "rope_local_theta 100 without Gemma 3's block");
    /* OLMo-2's q/k norm of the whole projection in Gemma 3's block */
    expect_error(prt_hf_check(g3_edit(cfg, sizeof cfg, "\"qk_norm\": \"rmsnorm\"",
                                      "\"qk_norm\": \"rmsnorm_projection\""), NULL),
                 "qk_norm rmsnorm_projection with norm_position sandwich");
}

int main(void)
{
    const char *base = getenv("HF_MAP_DIR");
    snprintf(root, sizeof root, "%s", base ? base : "/tmp/planc-test-hf-map");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_olmo2_export),
        cmocka_unit_test(test_olmo2_init_from),
        cmocka_unit_test(test_olmo2_refusals),
        cmocka_unit_test(test_gemma3_export),
        cmocka_unit_test(test_gemma3_init_from),
        cmocka_unit_test(test_gemma3_refusals),
        cmocka_unit_test(test_gemma3_published_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_ops_train.c: the ops strung into a model (cmocka): the three
 * recomputation modes give the same gradients, and a single-rank training
 * loop on generated text lowers the loss, for a GPT-2-style and a
 * Llama-style (RMSNorm, RoPE, SwiGLU, GQA) model. The model driver is
 * test code (test_ops_gpt.c).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include "test_ops_gpt.h"

static char text_path[256];

/* Text with structure to learn: words from a small list, in a fixed
 * pseudo-random order. */
static int setup(void **state)
{
    (void)state;
    static const char *words[] = {"alpha ", "beta ", "gamma ", "delta ", "planc ",
                                  "trains ", "models. ", "the "};
    snprintf(text_path, sizeof text_path, "/tmp/planc-test-train-%d.txt", (int)getpid());
    FILE *f = fopen(text_path, "w");
    if (!f)
        return -1;
    uint32_t s = 1;
    for (int i = 0; i < 6000; i++) {
        s = s * 1103515245u + 12345u;
        fputs(words[(s >> 16) % 8], f);
    }
    fclose(f);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(text_path);
    return 0;
}

static GptConfig small(bool llama, Recompute rc)
{
    GptConfig c = {.V = 256, .C = 32, .L = 2, .H = 4, .Hkv = llama ? 2 : 4, .F = llama ? 64 : 128,
                   .T = 32, .B = 4, .llama = llama, .recompute = rc};
    return c;
}

static void batch(int32_t *in, int32_t *tg, const GptConfig *c, uint64_t step)
{
    char err[512];
    prt_data *d;
    assert_int_equal(prt_data_open(&d, text_path, PRT_DATA_TEXT, c->T, c->V, err, sizeof err), PRT_OK);
    prt_data_batch(d, 1234, step, 0, c->B, in, tg);
    prt_data_close(d);
}

static void check_recompute(bool llama)
{
    GptConfig c = small(llama, RC_NONE);
    int32_t in[128], tg[128];
    batch(in, tg, &c, 0);
    float *ref = NULL, loss0 = 0;
    for (int rc = RC_NONE; rc <= RC_FULL; rc++) {
        c.recompute = (Recompute)rc;
        Gpt *g = gpt_new(&c, 99);
        gpt_zero_grad(g);
        float loss = gpt_forward_backward(g, in, tg);
        size_t P = gpt_num_params(g);
        if (!ref) {
            ref = malloc(P * sizeof *ref);
            memcpy(ref, gpt_grads(g), P * sizeof *ref);
            loss0 = loss;
        } else {
            assert_float_equal(loss, loss0, 0);
            assert_memory_equal(gpt_grads(g), ref, P * sizeof *ref);
        }
        gpt_free(g);
    }
    free(ref);
}

static void test_recompute_gpt2(void **state) { (void)state; check_recompute(false); }
static void test_recompute_llama(void **state) { (void)state; check_recompute(true); }

/* 100 AdamW steps must take the loss from about ln(256) = 5.55 to well
 * under the unigram (byte-frequency) entropy of the text, 2.62 nats: the
 * model must have learned context, not just letter counts. */
static void check_training(bool llama)
{
    GptConfig c = small(llama, llama ? RC_SELECTIVE : RC_NONE);
    Gpt *g = gpt_new(&c, 7);
    prt_adamw_cfg cfg = {.lr = 3e-3f, .min_lr = 3e-4f, .warmup = 5, .total = 100,
                         .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                         .weight_decay = 0.1f, .clip = 1.0f};
    int32_t in[128], tg[128];
    float first = 0, last = 0;
    for (long step = 0; step < 100; step++) {
        batch(in, tg, &c, (uint64_t)step);
        gpt_zero_grad(g);
        float loss = gpt_forward_backward(g, in, tg);
        assert_true(isfinite(loss));
        if (step == 0)
            first = loss;
        last = loss;
        gpt_adamw(g, &cfg, step + 1);
    }
    print_message("  %s: loss %.3f -> %.3f\n", llama ? "llama" : "gpt2", first, last);
    assert_true(first > 5.0f);
    assert_true(last < 2.2f);
    gpt_free(g);
}

static void test_train_gpt2(void **state) { (void)state; check_training(false); }
static void test_train_llama(void **state) { (void)state; check_training(true); }

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_recompute_gpt2),
        cmocka_unit_test(test_recompute_llama),
        cmocka_unit_test(test_train_gpt2),
        cmocka_unit_test(test_train_llama),
    };
    return cmocka_run_group_tests_name("ops-train", tests, setup, teardown);
}

/* test_flashinfer_loader.c — the `flashinfer` variant without its module, as `make test` runs
 * it: flashinfer_loader.c's reasons (not built, a missing or wrong file named by the setting),
 * the variant's hooks answering them instead of crashing, its problem limits
 * (common/variant_info.c) and its impls (the decode kernel), and the front's workspace bound
 * against the module's own layouts (kernels/flashinfer/flashinfer_layout.h) under either impl. No GPU and no module needed; tests/api/
 * test_flashinfer.py loads stub modules, tests/gpu runs the real one. With
 * ATTND_FLASHINFER_LIBRARY naming a built module (make flashinfer), its host side is checked
 * too, still without a GPU: the route each case takes, the refusals, the workspace, the
 * version.
 *
 * The module loads once per process, so each loader case runs in a forked child that sets
 * the library, loads, and writes what it saw into a pipe.
 */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/variant_info.h"
#include "kernels/flashinfer/flashinfer_layout.h"
#include "kernels/flashinfer_attn.h"
#include "kernels/flashinfer_loader.h"
#include "kernels/variants.h"
#include "tests/unit/check.h"

/* What a child saw. */
typedef struct outcome {
    int ran, rc, api_null, set_same, set_other;
    char why[2048], requested[PATH_MAX + 64], path[PATH_MAX], version[64];
} outcome;

static outcome load_in_child(const char *setting)
{
    outcome o;
    int fds[2];
    pid_t pid;

    memset(&o, 0, sizeof o);
    if (pipe(fds) != 0) return o;
    pid = fork();
    if (pid == 0) {
        outcome c;
        memset(&c, 0, sizeof c);
        close(fds[0]);
        if (setting && flashinfer_set_library(setting) != 0) _exit(3);
        c.ran = 1;
        c.rc = flashinfer_load(c.why, sizeof c.why);
        c.api_null = flashinfer_api_get() == NULL;
        snprintf(c.requested, sizeof c.requested, "%s", flashinfer_library_requested());
        snprintf(c.path, sizeof c.path, "%s", flashinfer_library_path());
        snprintf(c.version, sizeof c.version, "%s", flashinfer_version());
        c.set_same = flashinfer_set_library(setting);
        c.set_other = flashinfer_set_library("/somewhere/else.so");
        _exit(write(fds[1], &c, sizeof c) == (ssize_t)sizeof c ? 0 : 4);
    }
    close(fds[1]);
    if (pid > 0) {
        ssize_t n = read(fds[0], &o, sizeof o);
        if (n != (ssize_t)sizeof o) memset(&o, 0, sizeof o);
        waitpid(pid, NULL, 0);
    }
    close(fds[0]);
    return o;
}

/* The folder of this test binary: the default module is lib/ beside it. */
static void exe_dir(char *out, size_t len)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    char *slash;
    out[0] = '\0';
    if (n <= 0) return;
    exe[n] = '\0';
    slash = strrchr(exe, '/');
    if (slash) *slash = '\0';
    snprintf(out, len, "%s", exe);
}

static void test_not_built(void)
{
    char dir[PATH_MAX], expect[PATH_MAX + 64];
    outcome o = load_in_child(NULL);

    exe_dir(dir, sizeof dir);
    snprintf(expect, sizeof expect, "%s/lib/libattnd_flashinfer.so", dir);
    CHECK(o.ran && o.rc == -1 && o.api_null, "no module beside the binary: not loaded (rc %d)", o.rc);
    CHECK(strstr(o.why, "libattnd_flashinfer.so not built: make flashinfer") && strstr(o.why, expect),
          "the reason says how to build it and where it looked: %s", o.why);
    CHECK(!strcmp(o.requested, expect) && !o.path[0] && !o.version[0], "requested %s, path '%s', version '%s'",
          o.requested, o.path, o.version);
    CHECK(o.set_same == 0 && o.set_other == -1, "the choice is fixed once loading ran (%d, %d)", o.set_same,
          o.set_other);
}

static void test_setting(const char *tmp)
{
    char missing[PATH_MAX], text[PATH_MAX];
    Dl_info info;
    outcome o;
    FILE *f;

    snprintf(missing, sizeof missing, "%s/nowhere/libattnd_flashinfer.so", tmp);
    o = load_in_child(missing);
    CHECK(o.ran && o.rc == -1 && strstr(o.why, "flashinfer_library ") && strstr(o.why, missing) &&
              strstr(o.why, "No such file"),
          "a missing file names the setting: %s", o.why);
    CHECK(!strcmp(o.requested, missing), "requested is the setting: %s", o.requested);

    snprintf(text, sizeof text, "%s/libattnd_flashinfer.so", tmp);
    f = fopen(text, "w");
    CHECK(f != NULL, "write %s", text);
    if (f) {
        fputs("not a shared library\n", f);
        fclose(f);
    }
    o = load_in_child(text);
    CHECK(o.ran && o.rc == -1 && strstr(o.why, "cannot load ") && strstr(o.why, text), "a text file: %s", o.why);

    /* A real shared library that is not attnd's module: the C library. */
    if (dladdr((void *)printf, &info) && info.dli_fname && info.dli_fname[0] == '/') {
        o = load_in_child(info.dli_fname);
        CHECK(o.ran && o.rc == -1 && strstr(o.why, "lacks attnd_fi_abi") && strstr(o.why, "not an attnd FlashInfer module"),
              "another library: %s", o.why);
    }
}

/* In this process no module loads (the default path is absent): every hook answers why. */
static void test_variant_without_module(void)
{
    const variant *v = variant_find("flashinfer");
    attn_problem p = attn_mha(2, 8, 1, 512, 128, ATTN_BF16, ATTN_MASK_NONE, 0.088);
    exec_context ctx;
    attn_tensors t;
    char why[1024] = "";

    CHECK(v && v->info == &variant_info_flashinfer && v->library_ready && v->library_info && v->prepare &&
              v->library_check && v->engine_desc,
          "the flashinfer row has its hooks");
    if (!v) return;
    memset(&t, 0, sizeof t);
    CHECK(v->library_ready(why, sizeof why) == -1 && strstr(why, "make flashinfer"), "not ready: %s", why);
    CHECK(v->library_check(&p, why, sizeof why) == -1 && strstr(why, "make flashinfer"), "check: %s", why);
    CHECK(v->workspace_bytes(&p) == 0 && v->engine_desc(&p) == NULL, "no workspace, no engine");
    memset(&ctx, 0, sizeof ctx);
    ctx.device = 0, ctx.cc = 90;
    CHECK(v->prepare(&ctx, &p, NULL) == -1 && strstr(ctx.error, "not loaded"), "prepare: %s", ctx.error);
    exec_clear_error(&ctx);
    CHECK(v->forward(&ctx, &p, &t, NULL) == -1 && strstr(ctx.error, "not loaded"), "forward: %s", ctx.error);
    {
        variant_library lib;
        memset(&lib, 0, sizeof lib);
        v->library_info(&lib);
        CHECK(!strcmp(lib.name, "FlashInfer") && strstr(lib.requested, "lib/libattnd_flashinfer.so") &&
                  !lib.version[0] && !lib.path[0],
              "library: %s %s '%s' '%s'", lib.name, lib.requested, lib.version, lib.path);
    }
}

static void test_limits(void)
{
    const variant_info *v = &variant_info_flashinfer;
    char why[512];
    attn_problem p = attn_mha(1, 32, 512, 4096, 128, ATTN_BF16, ATTN_MASK_CAUSAL_BOTTOM_RIGHT, 0.088);

    CHECK(variant_info_check(v, &p, 90, why, sizeof why) == 0, "chunked prefill runs: %s", why);
    p.kv_heads = 8;
    CHECK(variant_info_check(v, &p, 90, why, sizeof why) == 0, "GQA runs: %s", why);
    p.kv_heads = 5;
    CHECK(variant_info_check(v, &p, 90, why, sizeof why) == -1 && strstr(why, "kv_heads dividing heads"), "%s", why);
    p.kv_heads = 8, p.head_dim = 96;
    CHECK(variant_info_check(v, &p, 90, why, sizeof why) == -1 && strstr(why, "multiple of 64"), "%s", why);
    p.head_dim = 192;
    CHECK(variant_info_check(v, &p, 90, why, sizeof why) == -1 && strstr(why, "64, 128 and 256"), "%s", why);
    p.head_dim = 64, p.seq_q = 4097;
    CHECK(variant_info_check(v, &p, 90, why, sizeof why) == -1 && strstr(why, "seq_q <= seq_kv") &&
              strstr(why, "bottom-right"),
          "more queries than keys under a causal mask: %s", why);
    p.mask = ATTN_MASK_CAUSAL;
    CHECK(variant_info_check(v, &p, 90, why, sizeof why) == -1 && strstr(why, "causal only with"), "%s", why);
    p.mask = ATTN_MASK_NONE;
    CHECK(variant_info_check(v, &p, 90, why, sizeof why) == 0, "no mask: any lengths: %s", why);
    p.window_keys = 64;
    CHECK(variant_info_check(v, &p, 90, why, sizeof why) == -1 && strstr(why, "sliding window"), "%s", why);
    p.window_keys = 0, p.dtype = ATTN_FP32;
    CHECK(variant_info_check(v, &p, 90, why, sizeof why) == -1 && strstr(why, "dtype fp32"), "%s", why);
    p.dtype = ATTN_FP16;
    CHECK(variant_info_check(v, &p, 75, why, sizeof why) == -1 && strstr(why, "8.0"), "%s", why);
}

/* Paged and ragged batches: offered (validated on the H200), a paged prefill among them (the
 * module says where it runs). */
static void test_serving_limits(void)
{
    const variant_info *v = &variant_info_flashinfer;
    char why[512];
    attn_problem p = attn_mha(4, 32, 1, 1000, 128, ATTN_BF16, ATTN_MASK_NONE, 0.088);

    CHECK((v->features & (VARIANT_PAGED | VARIANT_RAGGED)) == (VARIANT_PAGED | VARIANT_RAGGED) &&
              !(v->pending_features & (VARIANT_PAGED | VARIANT_RAGGED)),
          "paged and ragged are offered by flashinfer");
    p.kv_heads = 8, p.page_size = 16, p.num_pages = 300;
    CHECK(variant_info_check(v, &p, 90, why, sizeof why) == 0, "paged GQA decode: %s", why);
    p.page_size = 1, p.num_pages = 4000;
    CHECK(variant_info_check(v, &p, 90, why, sizeof why) == 0, "page_size 1: %s", why);
    p.seq_q = 4; /* a speculative decode: the module's paged prefill on Hopper; 8.x: its 422 */
    CHECK(variant_info_check(v, &p, 90, why, sizeof why) == 0, "paged prefill: %s", why);
    p.seq_q = 1, p.heads = 40, p.kv_heads = 8; /* a group of 5: the tensor-core decode (the default) */
    CHECK(variant_info_check(v, &p, 90, why, sizeof why) == 0, "paged decode of a group of 5: %s", why);
    p = attn_mha(16, 32, 8192, 8192, 128, ATTN_FP16, ATTN_MASK_CAUSAL_BOTTOM_RIGHT, 0.088);
    p.kv_heads = 8, p.ragged = ATTN_RAGGED_Q | ATTN_RAGGED_KV, p.total_q = p.total_kv = 60000;
    CHECK(variant_info_check(v, &p, 90, why, sizeof why) == 0, "ragged prefill: %s", why);
}

/* The impls: their order is FLASHINFER_IMPL_*'s; one named is a decode's kernel, so a prefill
 * naming one is refused, and cuda_cores takes the groups its kernel is compiled for. */
static void test_impls(void)
{
    const variant_info *v = &variant_info_flashinfer;
    char why[512];
    attn_problem p = attn_mha(4, 32, 1, 1000, 128, ATTN_BF16, ATTN_MASK_NONE, 0.088);

    CHECK(v->impl_count == 2 && !strcmp(v->impls[FLASHINFER_IMPL_TENSOR_CORES - 1].name, "tensor_cores") &&
              !strcmp(v->impls[FLASHINFER_IMPL_CUDA_CORES - 1].name, "cuda_cores"),
          "flashinfer's impls follow FLASHINFER_IMPL_*");
    CHECK(strstr(v->impls[0].summary, "default") && strstr(v->impls[1].summary, "SGLang"), "%s | %s",
          v->impls[0].summary, v->impls[1].summary);
    CHECK(variant_find("flashinfer")->impl_runnable(FLASHINFER_IMPL_CUDA_CORES, 90) &&
              variant_find("flashinfer")->impl_runnable(FLASHINFER_IMPL_TENSOR_CORES, 80) &&
              !variant_find("flashinfer")->impl_runnable(FLASHINFER_IMPL_TENSOR_CORES, 75) &&
              !variant_find("flashinfer")->impl_runnable(3, 90),
          "both run from 8.0");
    p.kv_heads = 8;
    for (int impl = 0; impl <= 2; impl++) {
        p.impl = impl;
        CHECK(variant_info_check(v, &p, 90, why, sizeof why) == 0, "GQA 4 decode, impl %d: %s", impl, why);
        p.page_size = 16, p.num_pages = 300;
        CHECK(variant_info_check(v, &p, 90, why, sizeof why) == 0, "paged decode, impl %d: %s", impl, why);
        p.page_size = 0, p.num_pages = 0;
    }
    p.heads = 40; /* a group of 5: no CUDA-core kernel for it */
    p.impl = FLASHINFER_IMPL_TENSOR_CORES;
    CHECK(variant_info_check(v, &p, 90, why, sizeof why) == 0, "group 5, tensor_cores: %s", why);
    p.impl = FLASHINFER_IMPL_CUDA_CORES;
    CHECK(variant_info_check(v, &p, 90, why, sizeof why) == -1 && strstr(why, "cuda_cores") &&
              strstr(why, "1, 2, 3, 4, 6, 8 and 16") && strstr(why, "not 5"),
          "group 5, cuda_cores: %s", why);
    p.heads = 128; /* a group of 16 */
    CHECK(variant_info_check(v, &p, 90, why, sizeof why) == 0, "group 16, cuda_cores: %s", why);
    p.heads = 32, p.seq_q = 64;
    for (int impl = 1; impl <= 2; impl++) {
        p.impl = impl;
        CHECK(variant_info_check(v, &p, 90, why, sizeof why) == -1 && strstr(why, "chooses the decode kernel") &&
                  strstr(why, "seq_q 1 only") && strstr(why, v->impls[impl - 1].name),
              "prefill naming impl %d: %s", impl, why);
    }
    p.impl = ATTN_IMPL_DEFAULT;
    CHECK(variant_info_check(v, &p, 90, why, sizeof why) == 0, "prefill without impl: %s", why);
    p.seq_q = 1, p.batch = 64, p.kv_heads = 8, p.seq_kv = (int64_t)1 << 23; /* 2^32 rows of keys */
    CHECK(variant_info_check(v, &p, 90, why, sizeof why) == 0, "a decode past the paged view, no impl: %s", why);
    p.impl = FLASHINFER_IMPL_TENSOR_CORES;
    CHECK(variant_info_check(v, &p, 90, why, sizeof why) == -1 && strstr(why, "batch*kv_heads*seq_kv"),
          "a decode past the paged view, named: %s", why);
}

/* What the module asks for a decode: the CUDA-core decode's layout for impl cuda_cores, the
 * tensor-core decode's otherwise. */
static size_t module_decode_bytes(const attnd_fi_case *c)
{
    return c->decode_kernel == ATTND_FI_DECODE_CUDA_CORES ? attnd_fi_decode_layout_of(c).total
                                                          : attnd_fi_decode_tc_layout_of(c).total;
}

/* p's impl as the module's decode_kernel (kernels/flashinfer_attn.c). */
static int decode_kernel_of(int impl)
{
    return impl == FLASHINFER_IMPL_CUDA_CORES ? ATTND_FI_DECODE_CUDA_CORES : ATTND_FI_DECODE_TENSOR_CORES;
}

/* The front reserves workspace_bound; the worker allocates what the module asks, which for a
 * decode is module_decode_bytes under each impl (cuda_cores at the groups it takes) and for an
 * 8.x prefill the staged output. */
static void test_bound_covers_the_module(void)
{
    static const int64_t batches[] = {1, 3, 64}, seqs[] = {1, 15, 16, 17, 129, 4096, 8191, 32768};
    static const int64_t heads[][2] = {{32, 32}, {32, 8}, {64, 8}, {8, 1},  {48, 16},
                                       {40, 8},  {64, 2}, {128, 1}, {96, 1}};
    static const int64_t dims[] = {64, 128, 256};
    for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++)
        for (size_t s = 0; s < sizeof seqs / sizeof seqs[0]; s++)
            for (size_t h = 0; h < sizeof heads / sizeof heads[0]; h++)
                for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++)
                    for (int impl = 0; impl <= 2; impl++) {
                        attn_problem p = attn_mha(batches[b], heads[h][0], 1, seqs[s], dims[d], ATTN_BF16,
                                                  ATTN_MASK_NONE, 0.1);
                        attnd_fi_case c;
                        size_t bound, need;
                        p.kv_heads = heads[h][1], p.impl = impl;
                        if (impl == FLASHINFER_IMPL_CUDA_CORES && !attnd_fi_cuda_cores_group(p.heads / p.kv_heads))
                            continue; /* refused by the check */
                        memset(&c, 0, sizeof c);
                        c.batch = p.batch, c.heads = p.heads, c.kv_heads = p.kv_heads, c.seq_q = 1;
                        c.seq_kv = c.kv_len = p.seq_kv, c.head_dim = p.head_dim, c.decode_kernel = decode_kernel_of(impl);
                        bound = variant_info_flashinfer.workspace_bound(&p);
                        need = module_decode_bytes(&c);
                        CHECK(bound >= need, "decode impl %d B%lld H%lld/%lld Skv%lld D%lld: bound %zu < module %zu",
                              impl, (long long)p.batch, (long long)p.heads, (long long)p.kv_heads, (long long)p.seq_kv,
                              (long long)p.head_dim, bound, need);
                        if (impl != ATTN_IMPL_DEFAULT) continue; /* a prefill takes no impl */
                        p.seq_q = 7;
                        need = attnd_fi_align256((size_t)attn_out_elems(&p) * 2);
                        CHECK(variant_info_flashinfer.workspace_bound(&p) >= need, "prefill staging");
                        c.seq_q = 7; /* Hopper: a speculative decode's paged prefill over the contiguous cache */
                        need = attnd_fi_paged_prefill_layout_of(&c).total;
                        CHECK(variant_info_flashinfer.workspace_bound(&p) >= need,
                              "paged prefill B%lld H%lld/%lld Skv%lld D%lld: bound %zu < module %zu", (long long)p.batch,
                              (long long)p.heads, (long long)p.kv_heads, (long long)p.seq_kv, (long long)p.head_dim,
                              variant_info_flashinfer.workspace_bound(&p), need);
                    }
}

/* The same for serving batches: a paged decode's page table and plan at every page size under
 * each impl, and a ragged batch's plan on either architecture, whatever its lengths (the
 * layouts bound them from the sizes alone). */
static void test_bound_covers_serving(void)
{
    static const int64_t batches[] = {1, 3, 64}, seqs[] = {1, 15, 17, 129, 4096, 8191};
    static const int64_t pages[] = {1, 16, 64, 256};
    static const int64_t heads[][2] = {{32, 32}, {32, 8}, {64, 8}, {8, 1}, {40, 8}, {128, 1}};
    static const int64_t dims[] = {64, 128, 256};
    for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++)
        for (size_t s = 0; s < sizeof seqs / sizeof seqs[0]; s++)
            for (size_t h = 0; h < sizeof heads / sizeof heads[0]; h++)
                for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++) {
                    attn_problem p = attn_mha(batches[b], heads[h][0], 1, seqs[s], dims[d], ATTN_BF16, ATTN_MASK_NONE, 0.1);
                    attnd_fi_case c;
                    size_t need;
                    p.kv_heads = heads[h][1];
                    memset(&c, 0, sizeof c);
                    c.batch = p.batch, c.heads = p.heads, c.kv_heads = p.kv_heads, c.seq_q = 1, c.seq_kv = p.seq_kv;
                    c.kv_len = p.seq_kv, c.head_dim = p.head_dim;
                    for (int impl = 0; impl <= 2; impl++) {
                        if (impl == FLASHINFER_IMPL_CUDA_CORES && !attnd_fi_cuda_cores_group(p.heads / p.kv_heads))
                            continue; /* refused by the check */
                        p.impl = impl, c.decode_kernel = decode_kernel_of(impl);
                        for (size_t g = 0; g < sizeof pages / sizeof pages[0]; g++) {
                            p.page_size = c.page_size = pages[g];
                            need = module_decode_bytes(&c);
                            CHECK(variant_info_flashinfer.workspace_bound(&p) >= need,
                                  "paged decode impl %d B%lld Skv%lld page %lld", impl, (long long)p.batch,
                                  (long long)p.seq_kv, (long long)p.page_size);
                        }
                        p.page_size = c.page_size = 0;
                        p.ragged = ATTN_RAGGED_Q | ATTN_RAGGED_KV, c.ragged = 1;
                        p.total_kv = c.total_kv = p.batch * p.seq_kv;
                        need = module_decode_bytes(&c); /* a ragged decode: its cache as 16-key pages */
                        p.total_q = c.total_q = p.batch;
                        CHECK(variant_info_flashinfer.workspace_bound(&p) >= need, "ragged decode impl %d", impl);
                        p.ragged = 0, c.ragged = 0;
                    }
                    p.impl = ATTN_IMPL_DEFAULT, c.decode_kernel = ATTND_FI_DECODE_TENSOR_CORES;
                    p.ragged = ATTN_RAGGED_Q | ATTN_RAGGED_KV, c.ragged = 1;
                    p.seq_q = c.seq_q = seqs[s];
                    p.total_q = c.total_q = p.batch * p.seq_q - (p.batch > 1); /* one sequence a row short */
                    need = attnd_fi_ragged_layout_of(&c, 1).total;
                    if (attnd_fi_ragged_layout_of(&c, 0).total > need) need = attnd_fi_ragged_layout_of(&c, 0).total;
                    CHECK(variant_info_flashinfer.workspace_bound(&p) >= need, "ragged prefill B%lld Sq%lld",
                          (long long)p.batch, (long long)p.seq_q);
                    for (size_t g = 0; seqs[s] > 1 && g < sizeof pages / sizeof pages[0]; g++) {
                        /* a paged prefill (Hopper), its queries ragged and then [B,H,Sq,D] */
                        p.page_size = c.page_size = pages[g];
                        need = attnd_fi_paged_prefill_layout_of(&c).total;
                        CHECK(variant_info_flashinfer.workspace_bound(&p) >= need, "paged ragged prefill B%lld Sq%lld "
                              "page %lld", (long long)p.batch, (long long)p.seq_q, (long long)p.page_size);
                        p.ragged = 0, c.ragged = 0, p.total_q = c.total_q = 0;
                        need = attnd_fi_paged_prefill_layout_of(&c).total;
                        CHECK(variant_info_flashinfer.workspace_bound(&p) >= need, "paged prefill B%lld Sq%lld page %lld",
                              (long long)p.batch, (long long)p.seq_q, (long long)p.page_size);
                        p.ragged = ATTN_RAGGED_Q | ATTN_RAGGED_KV, c.ragged = 1;
                        p.total_q = c.total_q = p.batch * p.seq_q - (p.batch > 1);
                    }
                }
}

/* A built module (ATTND_FLASHINFER_LIBRARY), in a child: everything it answers before a
 * kernel runs. */
static void test_real_module(const char *path)
{
    pid_t pid = fork();
    int status = 0;

    if (pid == 0) {
        const flashinfer_api *api;
        attnd_fi_case c;
        attnd_fi_decode_layout l;
        char why[1024] = "";
        int sm80, sm90, fails = 0;

        if (flashinfer_set_library(path) != 0) snprintf(why, sizeof why, "the library was chosen already");
        if (why[0] || flashinfer_load(why, sizeof why) != 0) {
            fprintf(stderr, "FAIL: %s does not load: %s\n", path, why);
            _exit(1);
        }
        api = flashinfer_api_get();
        sm90 = strstr(api->build(), "sm_90a") != NULL;
        sm80 = strstr(api->build(), "sm_80") != NULL;
#define EXPECT(cond, ...) do { if (!(cond)) { fails++; fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
                                             fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)
        EXPECT(api->abi() == ATTND_FI_ABI && api->version()[0] && strstr(api->build(), api->version()),
               "abi %d version %s build %s", api->abi(), api->version(), api->build());
        printf("  module: %s\n", api->build());
        memset(&c, 0, sizeof c);
        c.dtype = 0, c.batch = 64, c.heads = 32, c.kv_heads = 8, c.seq_q = 1, c.seq_kv = c.kv_len = 8192;
        c.head_dim = 128, c.sm_scale = 0.088, c.cc = sm90 ? 90 : 80;
        /* the default: the tensor-core decode at every group, as vLLM runs it */
        EXPECT(api->route(&c, why, sizeof why) == ATTND_FI_ROUTE_DECODE_TC, "GQA 4 decode, default: %s", why);
        EXPECT(api->workspace_bytes(&c) == attnd_fi_decode_tc_layout_of(&c).total, "default decode workspace %zu",
               api->workspace_bytes(&c));
        c.heads = c.kv_heads = 8;
        EXPECT(api->route(&c, why, sizeof why) == ATTND_FI_ROUTE_DECODE_TC, "MHA decode, default: %s", why);
        c.heads = 32, c.decode_kernel = ATTND_FI_DECODE_CUDA_CORES; /* impl cuda_cores */
        l = attnd_fi_decode_layout_of(&c);
        EXPECT(api->route(&c, why, sizeof why) == ATTND_FI_ROUTE_DECODE, "GQA decode, cuda_cores: %s", why);
        EXPECT(api->workspace_bytes(&c) == l.total, "decode workspace %zu, layout %zu", api->workspace_bytes(&c),
               l.total);
        EXPECT(strstr(api->describe(&c), "BatchDecodeWithPagedKVCacheDispatched") != NULL, "%s", api->describe(&c));
        EXPECT(api->forward(&c, NULL, NULL, NULL, NULL, NULL, NULL, why, sizeof why) == -1 &&
                   strstr(why, "attnd_fi_prepare first"),
               "a decode forward without its plan: %s", why);
        EXPECT(api->prepare(&c, NULL, 0, NULL, why, sizeof why) == -1 && strstr(why, "smaller"),
               "prepare with no workspace: %s", why);
        c.heads = 40; /* a group of 5: no CUDA-core kernel for it */
        EXPECT(api->route(&c, why, sizeof why) == 0 && strstr(why, "1, 2, 3, 4, 6, 8 and 16") && strstr(why, "not 5"),
               "group 5, cuda_cores: %s", why);
        EXPECT(api->workspace_bytes(&c) == 0, "a refused case has no workspace");
        c.decode_kernel = 2;
        EXPECT(api->route(&c, why, sizeof why) == 0 && strstr(why, "decode_kernel"), "decode_kernel 2: %s", why);
        c.decode_kernel = ATTND_FI_DECODE_TENSOR_CORES;
        EXPECT(api->route(&c, why, sizeof why) == ATTND_FI_ROUTE_DECODE_TC, "group 5, tensor_cores: %s", why);
        c.heads = 64; /* a group of 8 */
        EXPECT(api->route(&c, why, sizeof why) == ATTND_FI_ROUTE_DECODE_TC, "group 8: %s", why);
        EXPECT(api->workspace_bytes(&c) == attnd_fi_decode_tc_layout_of(&c).total, "tensor-core decode workspace %zu, "
               "layout %zu", api->workspace_bytes(&c), attnd_fi_decode_tc_layout_of(&c).total);
        EXPECT(strstr(api->describe(&c), "BatchPrefillWithPagedKVCacheDispatched") != NULL, "%s", api->describe(&c));
        EXPECT(api->forward(&c, NULL, NULL, NULL, NULL, NULL, NULL, why, sizeof why) == -1 &&
                   strstr(why, "attnd_fi_prepare first"),
               "a tensor-core decode forward without its plan: %s", why);
        c.heads = 32, c.seq_q = 4, c.causal = 1; /* a speculative decode: Hopper's paged prefill over the cache */
        EXPECT(api->route(&c, why, sizeof why) == (sm90 ? ATTND_FI_ROUTE_PAGED_SM90 : ATTND_FI_ROUTE_PREFILL_SM80),
               "Sq 4: %s", why);
        if (sm90) {
            EXPECT(api->workspace_bytes(&c) == attnd_fi_paged_prefill_layout_of(&c).total &&
                       attnd_fi_paged_prefill_layout_of(&c).q_staged_off > 0,
                   "Sq 4 workspace %zu", api->workspace_bytes(&c));
            EXPECT(strstr(api->describe(&c), "BatchPrefillWithPagedKVCacheDispatched") &&
                       strstr(api->describe(&c), "HND pages of 16") && strstr(api->describe(&c), "two transposes"),
                   "%s", api->describe(&c));
            EXPECT(api->forward(&c, NULL, NULL, NULL, NULL, NULL, NULL, why, sizeof why) == -1 &&
                       strstr(why, "attnd_fi_prepare first"),
                   "a paged prefill forward without its plan: %s", why);
        }
        c.seq_q = 17;
        EXPECT(api->route(&c, why, sizeof why) == (sm90 ? ATTND_FI_ROUTE_PREFILL_SM90 : ATTND_FI_ROUTE_PREFILL_SM80),
               "Sq 17: %s", why);
        c.seq_q = 512;
        EXPECT(api->route(&c, why, sizeof why) == (sm90 ? ATTND_FI_ROUTE_PREFILL_SM90 : ATTND_FI_ROUTE_PREFILL_SM80),
               "prefill: %s", why);
        c.decode_kernel = ATTND_FI_DECODE_CUDA_CORES;
        EXPECT(api->route(&c, why, sizeof why) == 0 && strstr(why, "decodes only"), "prefill, cuda_cores: %s", why);
        c.decode_kernel = ATTND_FI_DECODE_TENSOR_CORES;
        EXPECT(api->workspace_bytes(&c) == (sm90 ? 0 : attnd_fi_align256((size_t)(64 * 32 * 512 * 128) * 2)),
               "prefill workspace %zu", api->workspace_bytes(&c));
        c.kv_len = 500;
        EXPECT(api->route(&c, why, sizeof why) == 0 && strstr(why, "bottom-right"), "causal, more rows than keys: %s",
               why);
        c.kv_len = 8192, c.head_dim = 96;
        EXPECT(api->route(&c, why, sizeof why) == 0 && strstr(why, "64, 128 and 256"), "head_dim 96: %s", why);
        c.head_dim = 128, c.cc = 100;
        EXPECT(api->route(&c, why, sizeof why) == 0 && strstr(why, "compute capability 10.0"), "cc 10.0: %s", why);
        c.cc = sm90 ? 80 : 90;
        EXPECT((api->route(&c, why, sizeof why) == 0) == !(sm90 && sm80), "the other architecture: %s", why);
        {
            /* Serving batches, with the host arrays the worker hands over: 3 sequences of 1000,
             * 17 and 1 keys in pages of 16 (not multiples of the page), a cache of 70 pages. */
            static const int32_t cu_q1[] = {0, 1, 2, 3}, cu_kv[] = {0, 1000, 1017, 1018};
            static const int32_t cu_q[] = {0, 7, 7, 8}, cu_q_long[] = {0, 7, 25, 26};
            int32_t table[3 * 63];
            for (int i = 0; i < 3 * 63; i++) table[i] = (i * 37) % 70;
            memset(&c, 0, sizeof c);
            c.dtype = 0, c.batch = 3, c.heads = 32, c.kv_heads = 4, c.seq_q = 1, c.seq_kv = c.kv_len = 1000;
            c.head_dim = 128, c.sm_scale = 0.088, c.cc = sm90 ? 90 : 80;
            c.page_size = 16, c.num_pages = 70, c.block_table = table, c.pages_per_seq = 63;
            c.ragged = 1, c.cu_seqlens_q = cu_q1, c.cu_seqlens_kv = cu_kv, c.total_q = 3, c.total_kv = 1018;
            EXPECT(api->route(&c, why, sizeof why) == ATTND_FI_ROUTE_DECODE_TC, "paged ragged decode, group 8: %s", why);
            EXPECT(api->workspace_bytes(&c) == attnd_fi_decode_tc_layout_of(&c).total &&
                       attnd_fi_decode_tc_layout_of(&c).page == 16,
                   "paged decode workspace %zu", api->workspace_bytes(&c));
            EXPECT(strstr(api->describe(&c), "BatchPrefillWithPagedKVCacheDispatched") != NULL, "%s", api->describe(&c));
            c.heads = 16, c.decode_kernel = ATTND_FI_DECODE_CUDA_CORES; /* a group of 4, impl cuda_cores */
            EXPECT(api->route(&c, why, sizeof why) == ATTND_FI_ROUTE_DECODE, "paged ragged decode, group 4: %s", why);
            EXPECT(api->workspace_bytes(&c) == attnd_fi_decode_layout_of(&c).total && attnd_fi_decode_layout_of(&c).page == 16,
                   "paged decode workspace %zu", api->workspace_bytes(&c));
            EXPECT(strstr(api->describe(&c), "BatchDecodeWithPagedKVCacheDispatched") != NULL, "%s", api->describe(&c));
            c.heads = 32, c.decode_kernel = ATTND_FI_DECODE_TENSOR_CORES;
            EXPECT(api->forward(&c, NULL, NULL, NULL, NULL, NULL, NULL, why, sizeof why) == -1 &&
                       strstr(why, "attnd_fi_prepare first"),
                   "a paged forward without its plan: %s", why);
            c.block_table = NULL;
            EXPECT(api->route(&c, why, sizeof why) == 0 && strstr(why, "block table"), "no table: %s", why);
            c.block_table = table, c.page_size = (int64_t)1 << 28;
            EXPECT(api->route(&c, why, sizeof why) == 0 && strstr(why, "32-bit page stride"), "huge page: %s", why);
            c.page_size = 16, c.cu_seqlens_q = cu_q, c.seq_q = 7, c.total_q = 8;
            if (sm90) {
                EXPECT(api->route(&c, why, sizeof why) == ATTND_FI_ROUTE_PAGED_SM90, "paged ragged prefill: %s", why);
                EXPECT(api->workspace_bytes(&c) == attnd_fi_paged_prefill_layout_of(&c).total &&
                           attnd_fi_paged_prefill_layout_of(&c).q_staged_off == 0,
                       "paged ragged prefill workspace %zu", api->workspace_bytes(&c));
                EXPECT(strstr(api->describe(&c), "NHD pages of 16 keys through the block table") &&
                           !strstr(api->describe(&c), "transposes"),
                       "%s", api->describe(&c));
                c.ragged = 0, c.total_q = 0, c.total_kv = 0; /* q [B,H,Sq,D] over the same pages */
                EXPECT(api->route(&c, why, sizeof why) == ATTND_FI_ROUTE_PAGED_SM90, "paged prefill: %s", why);
                EXPECT(strstr(api->describe(&c), "two transposes"), "%s", api->describe(&c));
                c.ragged = 1, c.total_q = 8, c.total_kv = 1018;
            }
            c.cc = 80;
            EXPECT(api->route(&c, why, sizeof why) == 0 && (!sm80 || strstr(why, "9.0 only")), "paged prefill on 8.x: %s",
                   why);
            c.cc = sm90 ? 90 : 80;
            c.page_size = 0, c.block_table = NULL, c.num_pages = 0, c.pages_per_seq = 0;
            EXPECT(api->route(&c, why, sizeof why) == (sm90 ? ATTND_FI_ROUTE_RAGGED_SM90 : ATTND_FI_ROUTE_RAGGED_SM80),
                   "ragged prefill, a sequence of no queries: %s", why);
            EXPECT(api->workspace_bytes(&c) == attnd_fi_ragged_layout_of(&c, sm90).total, "ragged workspace %zu",
                   api->workspace_bytes(&c));
            EXPECT(strstr(api->describe(&c), "BatchPrefillWithRaggedKVCacheDispatched") &&
                       strstr(api->describe(&c), "one launch for 3 sequences"),
                   "%s", api->describe(&c));
            c.causal = 1, c.cu_seqlens_q = cu_q_long, c.seq_q = 18, c.total_q = 26;
            EXPECT(api->route(&c, why, sizeof why) == 0 && strstr(why, "sequence 1: 18 > 17"),
                   "causal, more queries than keys in one sequence: %s", why);
            {
                static const int32_t cu_kv0[] = {0, 1000, 1000, 1001};
                c.causal = 0, c.cu_seqlens_q = cu_q_long, c.cu_seqlens_kv = cu_kv0, c.total_kv = 1001;
                EXPECT(api->route(&c, why, sizeof why) == 0 && strstr(why, "sequence 1 has queries and no keys"),
                       "queries without keys: %s", why);
            }
        }
#undef EXPECT
        fflush(stdout); /* _exit flushes nothing */
        _exit(fails ? 1 : 0);
    }
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the module %s answers as built (see above)", path);
}

int main(void)
{
    char tmp[] = "/tmp/attnd-fi-unit-XXXXXX";
    if (!mkdtemp(tmp)) {
        perror("mkdtemp");
        return 1;
    }
    /* Children first: the parent loads (tries) once, in test_variant_without_module. */
    test_not_built();
    test_setting(tmp);
    if (getenv("ATTND_FLASHINFER_LIBRARY") && getenv("ATTND_FLASHINFER_LIBRARY")[0])
        test_real_module(getenv("ATTND_FLASHINFER_LIBRARY"));
    else
        printf("  (no ATTND_FLASHINFER_LIBRARY: the built module's host side not checked)\n");
    test_variant_without_module();
    test_limits();
    test_serving_limits();
    test_impls();
    test_bound_covers_the_module();
    test_bound_covers_serving();
    {
        char cmd[PATH_MAX + 16];
        snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    }
    return CHECK_DONE();
}

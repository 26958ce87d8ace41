/* test-api.c: the framework API (src/api.c) driven as its two callers drive it.
 *
 *  - t_adapter: as the hooks-only PyTorch adapter would: the test owns every buffer (malloc),
 *    its compute stream is an external stream wrapped with ss_stream_wrap (on cpu-sim the host
 *    stream, which stands for torch's stream), the forward runs on the main thread, backward on
 *    a second thread (as autograd's device thread, while the main thread waits in "backward()"),
 *    releases come from a third thread (the garbage collector) while the next forward runs, and
 *    a monitor thread reads the stage and counters all along. A stand-in executor, installed in
 *    the slot the real one will use (ssi_ctx_set_exec), "swaps out" large tensors (copies them
 *    and queues SS_ACTION_DROP) and, in backward, queues SS_ACTION_ALLOC before each load; the
 *    test executes every action (frees its buffer on DROP, allocates one on ALLOC and hands it
 *    back with ss_ctx_action_done), and each load returns the new buffer with the old bytes.
 *  - t_trainer: as the C trainer would: cpu-sim device, smartswap's allocator, saved blocks
 *    handed over with ss_ctx_save_block and freed by ss_ctx_release; the detailed profile's
 *    memory comes from the allocator without any ss_ctx_set_mem.
 *  - t_errors: every misuse returns its status and changes nothing.
 *  - t_disabled_passthrough: SMARTSWAP_DISABLE-style pass-through with the adapter's calls.
 */
#include "test.h"
#include "api.h"

#include <pthread.h>

/* ---- a stand-in executor ----------------------------------------------------------------- */

typedef struct fake_tensor {
    void    *host;       /* the "swapped out" copy */
    uint64_t bytes;
    int      want_alloc; /* an ALLOC is queued, waiting for action_done */
    void    *in;         /* the buffer the caller handed back */
} fake_tensor;

typedef struct fake_exec {
    uint64_t     min_bytes;
    ss_stream_t *expect_stream;
    int          wrong_stream, saves, loads, releases, drops, allocs, iters;
    uint64_t     pending[64];   /* handles swapped out, in save order (backward: reverse) */
    int          npending;
} fake_exec;

static ss_status fx_iter_begin(void *self, ss_ctx_t *ctx, const ss_plan *plan) {
    (void)ctx; (void)plan;
    ((fake_exec *)self)->iters++;
    return SS_OK;
}

static ss_status fx_save(void *self, ss_ctx_t *ctx, uint64_t handle, ssi_handle *h) {
    fake_exec *fx = self;
    fx->saves++;
    if (h->bytes < fx->min_bytes || (h->flags & SS_SAVE_NOSWAP)) return SS_OK;
    fake_tensor *t = calloc(1, sizeof *t);
    if (!t || !(t->host = malloc(h->bytes))) { free(t); return SS_ERR_HOST_OOM; }
    memcpy(t->host, h->ptr, h->bytes);   /* the "D2H copy" */
    t->bytes = h->bytes;
    h->exec = t;
    h->ptr = NULL;                       /* not resident any more */
    if (fx->npending < 64) fx->pending[fx->npending++] = handle;
    fx->drops++;
    return ssi_ctx_push_action(ctx, SS_ACTION_DROP, handle, h->bytes);
}

/* In backward, before each operator, the next swapped-out tensor is "prefetched": the caller
 * is asked for a buffer. Called lock-free: takes the lock to touch shared state. */
static void fx_op(void *self, ss_ctx_t *ctx, uint32_t idx) {
    fake_exec *fx = self;
    (void)idx;
    pthread_mutex_lock(&ctx->lock);
    if (ctx->phase == SS_OP_BWD && fx->npending) {
        uint64_t hv = fx->pending[--fx->npending];
        ssi_handle *h = ssi_ctx_handle(ctx, hv);
        fake_tensor *t = h ? h->exec : NULL;
        if (t && !t->want_alloc && !t->in) {
            t->want_alloc = 1;
            fx->allocs++;
            ssi_ctx_push_action(ctx, SS_ACTION_ALLOC, hv, t->bytes);
        }
    }
    pthread_mutex_unlock(&ctx->lock);
}

static ss_status fx_action_done(void *self, ss_ctx_t *ctx, uint64_t handle, ssi_handle *h, void *ptr) {
    (void)self; (void)ctx; (void)handle;
    fake_tensor *t = h->exec;
    if (!t || !t->want_alloc) return SS_ERR_STATE;
    t->want_alloc = 0;
    t->in = ptr;
    if (ptr) memcpy(ptr, t->host, t->bytes);   /* the "H2D copy" */
    return SS_OK;
}

static ss_status fx_load(void *self, ss_ctx_t *ctx, uint64_t handle, ssi_handle *h,
                         ss_stream_t *stream, void **ptr) {
    fake_exec *fx = self;
    (void)ctx; (void)handle;
    fx->loads++;
    if (stream != fx->expect_stream) fx->wrong_stream++;
    fake_tensor *t = h->exec;
    if (!t) return SS_OK;             /* resident: *ptr is already h->ptr */
    if (!t->in) return SS_ERR_STATE;  /* the test always answers ALLOC before loading */
    *ptr = t->in;
    return SS_OK;
}

static ss_status fx_release(void *self, ss_ctx_t *ctx, uint64_t handle, ssi_handle *h) {
    fake_exec *fx = self;
    (void)ctx; (void)handle;
    fx->releases++;
    fake_tensor *t = h->exec;
    if (t) { free(t->host); free(t); h->exec = NULL; }
    return SS_OK;
}

static ss_status fx_iter_end(void *self, ss_ctx_t *ctx, ss_iter_report *rep) {
    (void)self; (void)ctx;
    rep->swapped_out_bytes = 1;   /* marks that the slot filled the report */
    return SS_OK;
}

/* ---- the adapter's side -------------------------------------------------------------------- */

enum { LAYERS = 6, BIG = 4096, SMALL = 64, ITERS = 8 };

typedef struct adapter {
    ss_ctx_t *ctx;
    uint32_t  id_fwd, id_bwd;
    /* the framework's tensors: per layer one big and one small saved tensor */
    unsigned char *buf[2 * LAYERS];
    uint64_t       handle[2 * LAYERS];
    uint64_t       bytes[2 * LAYERS];
    unsigned char *swapped_in[2 * LAYERS];   /* buffers the adapter allocated for ALLOC */
    int            bad_bytes, bad_calls, drops_done, allocs_done;
    int            iter;
} adapter;

static int slot_of(adapter *ad, uint64_t handle) {
    for (int i = 0; i < 2 * LAYERS; i++) if (ad->handle[i] == handle) return i;
    return -1;
}

/* Executes every pending action, as the adapter does at each pack and unpack. */
static void poll_actions(adapter *ad) {
    ss_action a[4];
    uint32_t n;
    do {
        if (ss_ctx_actions(ad->ctx, a, 4, &n)) { ad->bad_calls++; return; }
        for (uint32_t k = 0; k < n; k++) {
            int s = slot_of(ad, a[k].handle);
            if (s < 0) { ad->bad_calls++; continue; }
            if (a[k].kind == SS_ACTION_DROP) {
                /* drop the reference: the framework's allocator may reuse the memory */
                memset(ad->buf[s], 0xEE, ad->bytes[s]);
                free(ad->buf[s]);
                ad->buf[s] = NULL;
                ad->drops_done++;
            } else if (a[k].kind == SS_ACTION_ALLOC) {
                ad->swapped_in[s] = malloc(a[k].bytes);
                if (ss_ctx_action_done(ad->ctx, a[k].handle, ad->swapped_in[s])) ad->bad_calls++;
                ad->allocs_done++;
            } else {
                ad->bad_calls++;
            }
        }
    } while (n == 4);
}

static unsigned char pattern_byte(int iter, int slot, uint64_t i) {
    return (unsigned char)(iter * 31 + slot * 7 + (int)i);
}

static void forward(adapter *ad) {
    int64_t shape[1];
    for (int l = 0; l < LAYERS; l++) {
        if (ss_ctx_op(ad->ctx, ad->id_fwd, 1000 + (uint64_t)l)) ad->bad_calls++;
        for (int k = 0; k < 2; k++) {
            int s = 2 * l + k;
            ad->bytes[s] = k == 0 ? BIG : SMALL;
            ad->buf[s] = malloc(ad->bytes[s]);
            ad->swapped_in[s] = NULL;
            for (uint64_t i = 0; i < ad->bytes[s]; i++) ad->buf[s][i] = pattern_byte(ad->iter, s, i);
            shape[0] = (int64_t)ad->bytes[s];
            if (ss_ctx_save(ad->ctx, ad->buf[s], ad->bytes[s], SS_DTYPE_U8, 1, shape, 0, &ad->handle[s]))
                ad->bad_calls++;
            poll_actions(ad);   /* the pack hook polls */
        }
    }
}

/* autograd's thread: one backward operator per layer, in reverse, unpacking both tensors */
static void *backward_thread(void *arg) {
    adapter *ad = arg;
    if (ss_ctx_phase(ad->ctx, SS_OP_BWD)) ad->bad_calls++;   /* a backward pre-hook says so */
    for (int l = LAYERS - 1; l >= 0; l--) {
        ss_status st = ss_ctx_op(ad->ctx, ad->id_bwd, 2000 + (uint64_t)l);
        if (st) { ad->bad_calls++; fprintf(stderr, "bwd op: %s\n", ss_status_str(st)); }
        for (int k = 1; k >= 0; k--) {
            int s = 2 * l + k;
            poll_actions(ad);   /* the unpack hook polls, then unpacks */
            void *p = NULL;
            st = ss_ctx_load(ad->ctx, ad->handle[s], NULL, &p);
            if (st) { ad->bad_calls++; fprintf(stderr, "load: %s\n", ss_status_str(st)); continue; }
            const unsigned char *q = p;
            int ok = q != NULL;
            for (uint64_t i = 0; ok && i < ad->bytes[s]; i++) ok = q[i] == pattern_byte(ad->iter, s, i);
            if (!ok) ad->bad_bytes++;
        }
    }
    return NULL;
}

typedef struct gc_job { adapter *ad; uint64_t handle[2 * LAYERS]; unsigned char *mem[4 * LAYERS]; } gc_job;

/* the garbage collector's thread: the packed objects die, handles are released */
static void *gc_thread(void *arg) {
    gc_job *g = arg;
    for (int s = 0; s < 2 * LAYERS; s++)
        if (ss_ctx_release(g->ad->ctx, g->handle[s])) g->ad->bad_calls++;
    for (int s = 0; s < 4 * LAYERS; s++) free(g->mem[s]);
    return NULL;
}

static _Atomic int monitor_stop;
static void *monitor_thread(void *arg) {
    ss_ctx_t *ctx = arg;
    long reads = 0;
    while (!monitor_stop || reads < 100) {
        ss_ctx_stats st;
        ss_iter_report r;
        if (ss_ctx_get_stats(ctx, &st) == SS_OK && ss_ctx_last_report(ctx, &r) == SS_OK &&
            ss_ctx_stage(ctx) < SS_STAGE_COUNT)
            reads++;
    }
    return (void *)reads;
}

static void t_adapter(void) {
    ss_device_t *dev = NULL;
    ss_stream_t *torch_stream = NULL;
    ss_options o = ss_options_default();
    CHECK_OK(ss_device_open("cpu-sim", &o, &dev));
    if (!dev) return;
    CHECK_OK(ss_stream_wrap(dev, NULL, &torch_stream));   /* the framework's stream */
    ss_ctx_config c = ss_ctx_config_default();
    c.mem_owner = SS_MEM_FRAMEWORK;
    c.device = dev;
    c.compute = torch_stream;
    adapter ad;
    memset(&ad, 0, sizeof ad);
    CHECK_OK(ss_ctx_new(&c, &ad.ctx));
    fake_exec fx;
    memset(&fx, 0, sizeof fx);
    fx.min_bytes = 1024;
    fx.expect_stream = torch_stream;
    ssi_exec_ops ops = {&fx, fx_iter_begin, fx_op, fx_save, fx_load, fx_release, fx_action_done,
                        fx_iter_end, NULL, NULL};
    CHECK_OK(ssi_ctx_set_exec(ad.ctx, &ops));
    CHECK_OK(ss_ctx_intern(ad.ctx, "layer_fwd", &ad.id_fwd));
    CHECK_OK(ss_ctx_intern(ad.ctx, "layer_bwd", &ad.id_bwd));

    pthread_t mon, gc = 0;
    monitor_stop = 0;
    CHECK(pthread_create(&mon, NULL, monitor_thread, ad.ctx) == 0);
    gc_job jobs[ITERS];
    memset(jobs, 0, sizeof jobs);
    for (int it = 0; it < ITERS; it++) {
        ad.iter = it;
        CHECK_OK(ss_ctx_iter_begin(ad.ctx));
        forward(&ad);                         /* while the previous iteration's GC runs */
        if (gc) { CHECK(pthread_join(gc, NULL) == 0); gc = 0; }
        pthread_t bw;
        CHECK(pthread_create(&bw, NULL, backward_thread, &ad) == 0);
        CHECK(pthread_join(bw, NULL) == 0);   /* "backward()" returns */
        ss_iter_report r;
        CHECK_OK(ss_ctx_iter_end(ad.ctx, &r));
        CHECK_EQ_U64(r.nops, 2 * LAYERS);
        CHECK_EQ_U64(r.nsaves, 2 * LAYERS);
        CHECK_EQ_U64(r.nloads, 2 * LAYERS);
        CHECK_EQ_U64(r.swapped_out_bytes, 1);
        /* the packed objects die on the GC thread while the next forward runs */
        jobs[it].ad = &ad;
        for (int s = 0; s < 2 * LAYERS; s++) {
            jobs[it].handle[s] = ad.handle[s];
            jobs[it].mem[2 * s] = ad.buf[s];
            jobs[it].mem[2 * s + 1] = ad.swapped_in[s];
        }
        CHECK(pthread_create(&gc, NULL, gc_thread, &jobs[it]) == 0);
    }
    if (gc) CHECK(pthread_join(gc, NULL) == 0);
    monitor_stop = 1;
    void *reads = NULL;
    CHECK(pthread_join(mon, &reads) == 0);
    CHECK(reads != NULL);

    CHECK_EQ_INT(ad.bad_calls, 0);
    CHECK_EQ_INT(ad.bad_bytes, 0);
    CHECK_EQ_INT(ad.drops_done, ITERS * LAYERS);    /* the big tensors only */
    CHECK_EQ_INT(ad.allocs_done, ITERS * LAYERS);
    CHECK_EQ_INT(fx.saves, ITERS * 2 * LAYERS);
    CHECK_EQ_INT(fx.loads, ITERS * 2 * LAYERS);
    CHECK_EQ_INT(fx.releases, ITERS * 2 * LAYERS);
    CHECK_EQ_INT(fx.wrong_stream, 0);
    CHECK_EQ_INT(fx.iters, ITERS);
    ss_ctx_stats st;
    CHECK_OK(ss_ctx_get_stats(ad.ctx, &st));
    CHECK_EQ_U64(st.actions, 2 * ITERS * LAYERS);
    CHECK_EQ_U64(st.releases, ITERS * 2 * LAYERS);
    CHECK_EQ_U64(st.detailed_iters, 1);   /* backward on another thread is one sequence */
    CHECK_EQ_U64(st.divergences, 0);
    CHECK_EQ_INT(ss_ctx_stage(ad.ctx), SS_STAGE_STABLE);
    /* the GenPolicy profile saw the loads made on the backward thread */
    const ss_profile *p = ad.ctx->st.cache[ad.ctx->st.cur].prof;
    CHECK_EQ_U64(p->ntensors, 2 * LAYERS);
    CHECK_EQ_U64(p->nuses, 2 * LAYERS);
    CHECK_EQ_U64(p->ops[LAYERS].phase, SS_PHASE_BWD);
    CHECK_EQ_U64(p->ops[0].phase, SS_PHASE_FWD);
    ss_ctx_free(ad.ctx);
    CHECK_OK(ss_stream_free(dev, torch_stream));
    CHECK_OK(ss_device_close(dev));
}

static void t_trainer(void) {
    ss_device_t *dev = NULL;
    ss_alloc_t *al = NULL;
    ss_options o = ss_options_default();
    o.sim_capacity_bytes = 64 << 20;
    CHECK_OK(ss_device_open("cpu-sim", &o, &dev));
    if (!dev) return;
    ss_alloc_config ac = ss_alloc_config_default();
    CHECK_OK(ss_alloc_new(dev, &ac, &al));
    ss_stream_t *compute = NULL;
    CHECK_OK(ss_stream_wrap(dev, NULL, &compute));
    ss_ctx_config c = ss_ctx_config_default();
    c.opts.warmup_iters = 1;
    c.mem_owner = SS_MEM_SMARTSWAP;
    c.device = dev;
    c.compute = compute;
    c.alloc = al;
    ss_ctx_t *ctx = NULL;
    CHECK_OK(ss_ctx_new(&c, &ctx));
    uint32_t mm, mmb, opt;
    CHECK_OK(ss_ctx_intern(ctx, "matmul", &mm));
    CHECK_OK(ss_ctx_intern(ctx, "matmul_bwd", &mmb));
    CHECK_OK(ss_ctx_intern(ctx, "adamw", &opt));
    ss_block_t *weights = NULL;
    CHECK_OK(ss_alloc_malloc(al, 1 << 20, &weights));   /* the model's own state */
    enum { NL = 4 };
    for (int it = 0; it < 5; it++) {
        uint64_t h[NL];
        CHECK_OK(ss_ctx_iter_begin(ctx));
        for (int l = 0; l < NL; l++) {
            ss_block_t *act = NULL;
            CHECK_OK(ss_ctx_op(ctx, mm, 10 + (uint64_t)l));
            CHECK_OK(ss_alloc_malloc(al, 65536, &act));
            float *x = ss_block_ptr(act);
            for (int i = 0; i < 16384; i++) x[i] = (float)(it * 1000 + l * 100 + i % 97);
            int64_t shape[2] = {128, 128};
            CHECK_OK(ss_ctx_save_block(ctx, act, SS_DTYPE_F32, 2, shape, 0, &h[l]));
        }
        for (int l = NL - 1; l >= 0; l--) {
            CHECK_OK(ss_ctx_op(ctx, mmb, 20 + (uint64_t)l));
            void *p = NULL;
            CHECK_OK(ss_ctx_load(ctx, h[l], NULL, &p));
            const float *x = p;
            int ok = x != NULL;
            for (int i = 0; ok && i < 16384; i++) ok = x[i] == (float)(it * 1000 + l * 100 + i % 97);
            CHECK(ok);
            CHECK_OK(ss_ctx_release(ctx, h[l]));   /* returns the block to the allocator */
        }
        CHECK_OK(ss_ctx_op(ctx, opt, 30));
        ss_iter_report r;
        CHECK_OK(ss_ctx_iter_end(ctx, &r));
        CHECK_EQ_INT(r.stage, it == 0 ? SS_STAGE_WARMUP : it == 1 ? SS_STAGE_GENPOLICY : SS_STAGE_STABLE);
        CHECK_EQ_U64(r.saved_bytes, NL * 65536);
        if (it == 1) CHECK_EQ_U64(r.peak_bytes, (1 << 20) + NL * 65536);
        ss_alloc_stats as;
        CHECK_OK(ss_alloc_get_stats(al, &as));
        CHECK_EQ_U64(as.in_use_bytes, 1 << 20);   /* every activation went back */
    }
    /* memory in the profile: the allocator's in-use bytes, no ss_ctx_set_mem needed */
    const ss_profile *p = ctx->st.cache[ctx->st.cur].prof;
    CHECK_EQ_U64(p->base_bytes, 1 << 20);
    for (int l = 0; l < NL; l++) CHECK_EQ_U64(p->ops[l].mem_after, (1 << 20) + (uint64_t)(l + 1) * 65536);
    CHECK_EQ_U64(p->ops[NL].mem_after, (1 << 20) + (NL - 1) * 65536);
    CHECK_EQ_U64(p->ops[2 * NL].mem_after, 1 << 20);
    ss_ctx_stats st;
    CHECK_OK(ss_ctx_get_stats(ctx, &st));
    CHECK_EQ_U64(st.iters_warmup, 1);
    CHECK_EQ_U64(st.detailed_iters, 1);
    CHECK_EQ_U64(st.iters_stable, 3);

    /* blocks still saved when the context goes are returned to the allocator */
    uint64_t hh;
    ss_block_t *left = NULL;
    CHECK_OK(ss_ctx_iter_begin(ctx));
    CHECK_OK(ss_ctx_op(ctx, mm, 10));
    CHECK_OK(ss_alloc_malloc(al, 4096, &left));
    CHECK_OK(ss_ctx_save_block(ctx, left, SS_DTYPE_F32, 0, NULL, 0, &hh));
    CHECK_OK(ss_ctx_iter_end(ctx, NULL));
    ss_ctx_free(ctx);
    CHECK_OK(ss_alloc_free(al, weights));
    CHECK_OK(ss_alloc_destroy(al));           /* fails with live blocks */
    CHECK_OK(ss_stream_free(dev, compute));
    CHECK_OK(ss_device_close(dev));
}

static void t_errors(void) {
    ss_ctx_config c = ss_ctx_config_default();
    ss_ctx_t *ctx = NULL;
    c.mem_owner = 7;
    CHECK_STATUS(ss_ctx_new(&c, &ctx), SS_ERR_INVALID);
    c.mem_owner = SS_MEM_SMARTSWAP;   /* without an allocator */
    CHECK_STATUS(ss_ctx_new(&c, &ctx), SS_ERR_INVALID);
    CHECK(ctx == NULL);
    CHECK_STATUS(ss_ctx_new(NULL, NULL), SS_ERR_INVALID);
    c = ss_ctx_config_default();
    CHECK_OK(ss_ctx_new(&c, &ctx));
    uint32_t id;
    CHECK_OK(ss_ctx_intern(ctx, "x", &id));
    CHECK_STATUS(ss_ctx_intern(ctx, NULL, &id), SS_ERR_INVALID);
    char b[16];
    uint64_t h = 0;
    void *p = NULL;
    CHECK_STATUS(ss_ctx_op(ctx, id, 0), SS_ERR_STATE);              /* outside an iteration */
    CHECK_STATUS(ss_ctx_iter_end(ctx, NULL), SS_ERR_STATE);
    CHECK_STATUS(ss_ctx_save(ctx, b, 16, SS_DTYPE_U8, 0, NULL, 0, &h), SS_ERR_STATE);
    CHECK_OK(ss_ctx_iter_begin(ctx));
    CHECK_STATUS(ss_ctx_iter_begin(ctx), SS_ERR_STATE);
    CHECK_STATUS(ss_ctx_save(ctx, b, 16, SS_DTYPE_U8, 0, NULL, 0, &h), SS_ERR_STATE);   /* no op yet */
    CHECK_STATUS(ss_ctx_op(ctx, id + 1, 0), SS_ERR_INVALID);        /* unknown name id */
    CHECK_OK(ss_ctx_op(ctx, id, 0));
    CHECK_STATUS(ss_ctx_save(ctx, b, 0, SS_DTYPE_U8, 0, NULL, 0, &h), SS_ERR_INVALID);
    CHECK_STATUS(ss_ctx_save(ctx, b, 16, 99, 0, NULL, 0, &h), SS_ERR_INVALID);
    CHECK_STATUS(ss_ctx_save(ctx, b, 16, SS_DTYPE_U8, 9, NULL, 0, &h), SS_ERR_INVALID);
    CHECK_STATUS(ss_ctx_save(ctx, b, 16, SS_DTYPE_U8, 1, NULL, 0, &h), SS_ERR_INVALID);
    int64_t neg = -1;
    CHECK_STATUS(ss_ctx_save(ctx, b, 16, SS_DTYPE_U8, 1, &neg, 0, &h), SS_ERR_INVALID);
    CHECK_STATUS(ss_ctx_save_block(ctx, (ss_block_t *)b, SS_DTYPE_U8, 0, NULL, 0, &h), SS_ERR_INVALID);
    CHECK(h == 0);
    CHECK_OK(ss_ctx_save(ctx, b, 16, SS_DTYPE_U8, 0, NULL, 0, &h));
    CHECK(h != 0);
    CHECK_STATUS(ss_ctx_load(ctx, h + 1, NULL, &p), SS_ERR_STATE);   /* never issued */
    CHECK_STATUS(ss_ctx_load(ctx, 0, NULL, &p), SS_ERR_STATE);
    CHECK_STATUS(ss_ctx_phase(ctx, 9), SS_ERR_INVALID);
    CHECK_OK(ss_ctx_release(ctx, h));
    CHECK_STATUS(ss_ctx_release(ctx, h), SS_ERR_STATE);              /* twice */
    CHECK_STATUS(ss_ctx_load(ctx, h, NULL, &p), SS_ERR_STATE);       /* after release */
    /* a slot is reused with a new generation: the old handle stays dead */
    uint64_t h2;
    CHECK_OK(ss_ctx_save(ctx, b, 16, SS_DTYPE_U8, 0, NULL, 0, &h2));
    CHECK(h2 != h);
    CHECK_EQ_U64(h2 & 0xFFFFFFFFu, h & 0xFFFFFFFFu);
    CHECK_STATUS(ss_ctx_load(ctx, h, NULL, &p), SS_ERR_STATE);
    CHECK_OK(ss_ctx_load(ctx, h2, NULL, &p));
    CHECK(p == b);
    /* no executor: no action is ever pending, and answering one is refused */
    ss_action a[2];
    uint32_t n = 9;
    CHECK_OK(ss_ctx_actions(ctx, a, 2, &n));
    CHECK_EQ_U64(n, 0);
    CHECK_STATUS(ss_ctx_action_done(ctx, h2, b), SS_ERR_STATE);
    CHECK_STATUS(ssi_ctx_set_exec(ctx, NULL), SS_ERR_STATE);          /* mid-iteration */
    CHECK_OK(ss_ctx_iter_end(ctx, NULL));
    ss_iter_report r;
    CHECK_OK(ss_ctx_last_report(ctx, &r));
    CHECK_EQ_U64(r.nsaves, 2);
    CHECK_EQ_U64(r.nreleases, 1);
    ss_ctx_free(ctx);   /* with h2 still live */
    ss_ctx_free(NULL);
    CHECK(strcmp(ss_stage_name(SS_STAGE_GENPOLICY), "genpolicy") == 0);
    CHECK(strcmp(ss_stage_name(99), "?") == 0);
}

/* The action queue keeps order across its growth. */
static void t_action_queue(void) {
    ss_ctx_t *ctx = NULL;
    ss_ctx_config c = ss_ctx_config_default();
    CHECK_OK(ss_ctx_new(&c, &ctx));
    ss_action a[7];
    uint32_t n, next = 0, got = 0;
    int ok = 1;
    for (uint32_t round = 0; round < 10; round++) {
        pthread_mutex_lock(&ctx->lock);
        for (uint32_t k = 0; k < 13; k++) {
            next++;
            CHECK_OK(ssi_ctx_push_action(ctx, SS_ACTION_DROP, next, next * 2));
        }
        pthread_mutex_unlock(&ctx->lock);
        CHECK_OK(ss_ctx_actions(ctx, a, 7, &n));   /* drain a little less than pushed */
        for (uint32_t k = 0; k < n; k++) ok &= a[k].handle == ++got && a[k].bytes == got * 2;
    }
    do {
        CHECK_OK(ss_ctx_actions(ctx, a, 7, &n));
        for (uint32_t k = 0; k < n; k++) ok &= a[k].handle == ++got && a[k].kind == SS_ACTION_DROP;
    } while (n);
    CHECK(ok);
    CHECK_EQ_U64(got, 130);
    ss_ctx_free(ctx);
}

static void t_disabled_passthrough(void) {
    ss_ctx_config c = ss_ctx_config_default();
    c.opts.disable = 1;
    ss_ctx_t *ctx = NULL;
    CHECK_OK(ss_ctx_new(&c, &ctx));
    fake_exec fx;
    memset(&fx, 0, sizeof fx);
    ssi_exec_ops ops = {&fx, fx_iter_begin, fx_op, fx_save, fx_load, fx_release, fx_action_done,
                        fx_iter_end, NULL, NULL};
    CHECK_OK(ssi_ctx_set_exec(ctx, &ops));   /* not even an executor is called */
    uint32_t id;
    CHECK_OK(ss_ctx_intern(ctx, "x", &id));
    char b[64];
    uint64_t h;
    void *p;
    for (int it = 0; it < 3; it++) {
        CHECK_OK(ss_ctx_iter_begin(ctx));
        CHECK_OK(ss_ctx_save(ctx, b, 64, SS_DTYPE_U8, 0, NULL, 0, &h));   /* before any op: fine */
        CHECK_OK(ss_ctx_op(ctx, id, 1));
        CHECK_OK(ss_ctx_load(ctx, h, NULL, &p));
        CHECK(p == b);
        CHECK_OK(ss_ctx_release(ctx, h));
        ss_iter_report r;
        CHECK_OK(ss_ctx_iter_end(ctx, &r));
        CHECK_EQ_INT(r.stage, SS_STAGE_DISABLED);
    }
    CHECK_EQ_INT(fx.saves + fx.loads + fx.releases + fx.iters, 0);
    CHECK_EQ_INT(ss_ctx_stage(ctx), SS_STAGE_DISABLED);
    ss_ctx_free(ctx);
}

int main(void) {
    RUN(t_adapter);
    RUN(t_trainer);
    RUN(t_errors);
    RUN(t_action_queue);
    RUN(t_disabled_passthrough);
    return test_summary();
}

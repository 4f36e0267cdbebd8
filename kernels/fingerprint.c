/* fingerprint.c — fingerprint_bytes (fingerprint.h) on the host.
 *
 * Words are read with memcpy (any alignment) and assembled little-endian explicitly, so
 * the result is the documented one on a big-endian host too. The last partial word is
 * zero-padded.
 *
 * Large inputs (a 1 GiB upload's fingerprint took 0.24 s on one core of the H200 machine,
 * a quarter of the upload) are split into word ranges summed by up to FINGERPRINT_THREADS
 * threads: the terms are independent and the sum is order-free, so the result is the same
 * bit for bit. A thread that cannot be started leaves its range to the caller. */
#include "kernels/fingerprint.h"

#include <pthread.h>
#include <string.h>
#include <unistd.h>

enum { FINGERPRINT_THREADS = 8 };
#define FINGERPRINT_PARALLEL_BYTES ((size_t)32 << 20) /* below: one thread (start-up > gain) */

static uint64_t fingerprint_load_le(const unsigned char *b, size_t len)
{
    unsigned char w[8] = {0};
    uint64_t x = 0;
    memcpy(w, b, len);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(&x, w, 8);
#else
    for (int j = 7; j >= 0; j--) x = (x << 8) | w[j];
#endif
    return x;
}

/* Σ of the terms of the whole words first..end-1 of b. */
static uint64_t fingerprint_word_sum(const unsigned char *b, size_t first, size_t end)
{
    uint64_t sum = 0;
    for (size_t i = first; i < end; i++) sum += fingerprint_term(fingerprint_load_le(b + 8 * i, 8), i);
    return sum;
}

typedef struct fingerprint_range {
    const unsigned char *b;
    size_t first, end;
    uint64_t sum;
} fingerprint_range;

static void *fingerprint_range_thread(void *arg)
{
    fingerprint_range *r = arg;
    r->sum = fingerprint_word_sum(r->b, r->first, r->end);
    return NULL;
}

/* The word sum of b's first `words` words, on up to FINGERPRINT_THREADS threads. */
static uint64_t fingerprint_word_sum_parallel(const unsigned char *b, size_t words)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int k = cpus < 1 ? 1 : cpus > FINGERPRINT_THREADS ? FINGERPRINT_THREADS : (int)cpus;
    fingerprint_range ranges[FINGERPRINT_THREADS];
    pthread_t threads[FINGERPRINT_THREADS];
    int started[FINGERPRINT_THREADS] = {0};
    uint64_t sum = 0;

    for (int t = 0; t < k; t++) {
        ranges[t].b = b;
        ranges[t].first = words / (size_t)k * (size_t)t;
        ranges[t].end = t == k - 1 ? words : words / (size_t)k * (size_t)(t + 1);
        ranges[t].sum = 0;
        /* range 0 is the caller's own share */
        started[t] = t > 0 && pthread_create(&threads[t], NULL, fingerprint_range_thread, &ranges[t]) == 0;
    }
    for (int t = 0; t < k; t++)
        if (!started[t]) fingerprint_range_thread(&ranges[t]);
    for (int t = 0; t < k; t++) {
        if (started[t]) pthread_join(threads[t], NULL); /* cannot fail: a joinable thread of ours */
        sum += ranges[t].sum;
    }
    return sum;
}

uint64_t fingerprint_bytes(const void *bytes, size_t n)
{
    const unsigned char *b = bytes;
    size_t words = n / 8;
    uint64_t sum = n >= FINGERPRINT_PARALLEL_BYTES ? fingerprint_word_sum_parallel(b, words)
                                                    : fingerprint_word_sum(b, 0, words);
    if (n % 8) sum += fingerprint_term(fingerprint_load_le(b + 8 * words, n % 8), words);
    return fingerprint_finish(sum, (uint64_t)n);
}

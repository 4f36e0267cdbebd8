/* fingerprint.c — fingerprint_bytes (fingerprint.h) on the host.
 *
 * Words are read with memcpy (any alignment) and assembled little-endian explicitly, so
 * the result is the documented one on a big-endian host too. The last partial word is
 * zero-padded.
 *
 * Large inputs (a 1 GiB upload's fingerprint took 0.24 s on one core of the H200 machine,
 * a quarter of the upload) are split into ranges of FINGERPRINT_RANGE_WORDS words, claimed by
 * up to FINGERPRINT_THREADS threads (host_threads.h's parked helpers): the terms are
 * independent and the sum is order-free (mod 2^64), so the result is the same bit for bit
 * whichever thread sums which range. */
#include "kernels/fingerprint.h"

#include <stdatomic.h>
#include <string.h>

#include "kernels/cpu/host_threads.h"

enum { FINGERPRINT_THREADS = 8 };
#define FINGERPRINT_PARALLEL_BYTES ((size_t)32 << 20) /* below: one thread (start-up > gain) */
#define FINGERPRINT_RANGE_WORDS ((size_t)1 << 17)     /* 1 MiB a claim */

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

/* Σ of the terms of the whole words first..end-1 of b, word i of b being word base + i of its
 * tensor. */
static uint64_t fingerprint_word_sum(const unsigned char *b, size_t first, size_t end, uint64_t base)
{
    uint64_t sum = 0;
    for (size_t i = first; i < end; i++) sum += fingerprint_term(fingerprint_load_le(b + 8 * i, 8), base + i);
    return sum;
}

typedef struct fingerprint_job {
    const unsigned char *b;
    size_t words;
    uint64_t base;         /* b's first word is this word of its tensor */
    atomic_size_t next;    /* the first word of the next unclaimed range */
    _Atomic uint64_t sum;  /* the ranges' sums, added as each thread finishes */
} fingerprint_job;

/* One thread's part: ranges claimed until none is left, their sum added to the job's. */
static void fingerprint_part(void *arg)
{
    fingerprint_job *job = arg;
    uint64_t sum = 0;

    for (;;) {
        size_t first = atomic_fetch_add(&job->next, FINGERPRINT_RANGE_WORDS), end;
        if (first >= job->words) break;
        end = job->words - first < FINGERPRINT_RANGE_WORDS ? job->words : first + FINGERPRINT_RANGE_WORDS;
        sum += fingerprint_word_sum(job->b, first, end, job->base);
    }
    atomic_fetch_add(&job->sum, sum);
}

/* The word sum of b's first `words` words, on up to FINGERPRINT_THREADS threads. */
static uint64_t fingerprint_word_sum_parallel(const unsigned char *b, size_t words, uint64_t base)
{
    fingerprint_job job;
    int cores = host_threads_cores();

    job.b = b, job.words = words, job.base = base;
    atomic_init(&job.next, 0);
    atomic_init(&job.sum, 0);
    host_threads_run(cores < FINGERPRINT_THREADS ? cores : FINGERPRINT_THREADS, fingerprint_part, &job);
    return atomic_load(&job.sum);
}

uint64_t fingerprint_piece_sum(const void *bytes, size_t n, uint64_t first_word)
{
    const unsigned char *b = bytes;
    size_t words = n / 8;
    uint64_t sum = n >= FINGERPRINT_PARALLEL_BYTES ? fingerprint_word_sum_parallel(b, words, first_word)
                                                    : fingerprint_word_sum(b, 0, words, first_word);
    if (n % 8) sum += fingerprint_term(fingerprint_load_le(b + 8 * words, n % 8), first_word + words);
    return sum;
}

uint64_t fingerprint_bytes(const void *bytes, size_t n) { return fingerprint_finish(fingerprint_piece_sum(bytes, n, 0), (uint64_t)n); }

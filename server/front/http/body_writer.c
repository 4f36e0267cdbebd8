/* body_writer.c — a streamed body's writer thread (body_writer.h).
 *
 * A ring of BODY_WRITER_SLOTS slots. The connection's thread fills the slot at `head` with
 * no lock held (no one else touches a slot outside [tail, tail + count)), hands it over
 * when it is full (count + 1), and waits only when every slot is handed over. The writer
 * takes the slot at `tail`, writes it with no lock held, and gives it back (count − 1). A
 * failed write is kept in `error`; the ring is dropped and the connection's thread sees it
 * at its next handover or at the end.
 */
#include "server/front/http/body_writer.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* 8 × 256 KiB: four of libmicrohttpd's pieces to a slot (one write each), and 2 MiB per
 * upload in flight, small enough to stay in cache between the two copies. 4 slots measured no
 * better than no writer thread at all (2-core machine, one alternation). */
#define BODY_WRITER_SLOTS 8
#define BODY_WRITER_SLOT_BYTES ((size_t)256 << 10)

struct body_writer {
    int fd;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t handed, returned; /* a slot handed to the writer; a slot given back */
    char *ring;
    size_t used[BODY_WRITER_SLOTS]; /* bytes in each handed-over slot */
    int head, tail, count;          /* the slot being filled; the next to write; handed over */
    size_t fill;                    /* bytes in the slot at head (the connection's thread's) */
    int closing, aborting;          /* nothing more will be handed over; drop everything */
    int error;                      /* errno of the write that failed; 0 */
};

static char *slot_of(body_writer *w, int i) { return w->ring + (size_t)i * BODY_WRITER_SLOT_BYTES; }

/* n bytes to the fd, whole: 0, or the errno of the write that failed. */
static int write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return k < 0 ? errno : EIO;
        p += k, n -= (size_t)k;
    }
    return 0;
}

static void *body_writer_main(void *arg)
{
    body_writer *w = arg;

    pthread_mutex_lock(&w->mu);
    for (;;) {
        int slot, err;
        size_t n;
        while (w->count == 0 && !w->closing && !w->aborting) pthread_cond_wait(&w->handed, &w->mu);
        if (w->aborting || w->count == 0) break;
        slot = w->tail, n = w->used[slot];
        pthread_mutex_unlock(&w->mu);
        err = write_all(w->fd, slot_of(w, slot), n);
        pthread_mutex_lock(&w->mu);
        if (err) {
            w->error = err;
            w->count = 0; /* the rest can never land in order: dropped */
            pthread_cond_broadcast(&w->returned);
            break;
        }
        w->tail = (w->tail + 1) % BODY_WRITER_SLOTS;
        w->count--;
        pthread_cond_broadcast(&w->returned);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

body_writer *body_writer_start(int fd)
{
    body_writer *w = calloc(1, sizeof *w);

    if (!w) return NULL;
    w->fd = fd;
    w->ring = malloc(BODY_WRITER_SLOTS * BODY_WRITER_SLOT_BYTES);
    if (!w->ring) goto fail_ring;
    if (pthread_mutex_init(&w->mu, NULL) != 0) goto fail_mu;
    if (pthread_cond_init(&w->handed, NULL) != 0) goto fail_handed;
    if (pthread_cond_init(&w->returned, NULL) != 0) goto fail_returned;
    if (pthread_create(&w->thread, NULL, body_writer_main, w) != 0) goto fail_thread;
    return w;

fail_thread:
    pthread_cond_destroy(&w->returned);
fail_returned:
    pthread_cond_destroy(&w->handed);
fail_handed:
    pthread_mutex_destroy(&w->mu);
fail_mu:
    free(w->ring);
fail_ring:
    free(w);
    return NULL;
}

/* The slot at head to the writer; waits for a free slot when none is left. 0, or -1 (a write
 * failed). Under w->mu. */
static int hand_over_locked(body_writer *w)
{
    if (w->error) return -1;
    w->used[w->head] = w->fill;
    w->head = (w->head + 1) % BODY_WRITER_SLOTS;
    w->count++;
    w->fill = 0;
    pthread_cond_signal(&w->handed);
    while (w->count == BODY_WRITER_SLOTS && !w->error) pthread_cond_wait(&w->returned, &w->mu);
    return w->error ? -1 : 0;
}

int body_writer_put(body_writer *w, const char *data, size_t n, char *err, size_t err_len)
{
    while (n > 0) {
        size_t k = BODY_WRITER_SLOT_BYTES - w->fill;
        if (k > n) k = n;
        memcpy(slot_of(w, w->head) + w->fill, data, k);
        w->fill += k, data += k, n -= k;
        if (w->fill == BODY_WRITER_SLOT_BYTES) {
            int rc;
            pthread_mutex_lock(&w->mu);
            rc = hand_over_locked(w);
            if (rc != 0) snprintf(err, err_len, "%s", strerror(w->error));
            pthread_mutex_unlock(&w->mu);
            if (rc != 0) return -1;
        }
    }
    return 0;
}

/* Free w, its thread joined. */
static void body_writer_free(body_writer *w)
{
    pthread_cond_destroy(&w->returned);
    pthread_cond_destroy(&w->handed);
    pthread_mutex_destroy(&w->mu);
    free(w->ring);
    free(w);
}

int body_writer_finish(body_writer *w, char *err, size_t err_len)
{
    int rc = 0, error;

    pthread_mutex_lock(&w->mu);
    if (w->fill > 0) rc = hand_over_locked(w);
    w->closing = 1;
    pthread_cond_signal(&w->handed);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    error = w->error;
    body_writer_free(w);
    if (rc == 0 && !error) return 0;
    snprintf(err, err_len, "%s", strerror(error ? error : EIO));
    return -1;
}

void body_writer_abort(body_writer *w)
{
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->aborting = 1;
    pthread_cond_signal(&w->handed);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    body_writer_free(w);
}

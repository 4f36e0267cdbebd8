/* test_body_writer.c — a streamed body written to its memfd on the writer's thread
 * (server/front/http/body_writer.c): pieces of every size (1 byte, a slot's size, more than
 * the whole ring, ragged ones) land whole and in order; a write that fails is reported by a
 * later put or by finish, never hangs the sender; an abort mid-body returns at once, with the
 * ring full or empty. */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "server/front/http/body_writer.h"
#include "tests/unit/check.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static unsigned char pattern_byte(size_t i) { return (unsigned char)((i * 2654435761u) >> 13); }

/* Send total bytes in pieces of the sizes given (cycled) and check the memfd holds them. */
static void send_and_check(size_t total, const size_t *sizes, int nsizes, const char *what)
{
    int fd = memfd_create("test-body", 0);
    unsigned char *src = malloc(total), *back = malloc(total);
    body_writer *w = body_writer_start(fd);
    size_t sent = 0;
    int i = 0, ok = 1;
    char err[128] = "";

    CHECK(fd >= 0 && src && back && w, "%s: set up", what);
    if (fd < 0 || !src || !back || !w) return;
    for (size_t k = 0; k < total; k++) src[k] = pattern_byte(k);
    while (sent < total) {
        size_t n = sizes[i++ % nsizes];
        if (n > total - sent) n = total - sent;
        ok &= body_writer_put(w, (const char *)src + sent, n, err, sizeof err) == 0;
        sent += n;
    }
    CHECK(ok, "%s: every put taken (%s)", what, err);
    CHECK(body_writer_finish(w, err, sizeof err) == 0, "%s: finished (%s)", what, err);
    CHECK(lseek(fd, 0, SEEK_END) == (off_t)total, "%s: %zu bytes in the memfd", what, total);
    CHECK(pread(fd, back, total, 0) == (ssize_t)total && memcmp(src, back, total) == 0, "%s: the same bytes, in order",
          what);
    close(fd);
    free(src);
    free(back);
}

static void test_pieces_land_whole_and_in_order(void)
{
    const size_t one[] = {1}, slot[] = {256 << 10}, mhd[] = {64 << 10}, big[] = {5 << 20};
    const size_t ragged[] = {1, 65535, 262145, 7, 300000, 4096, 131072};

    send_and_check(100000, one, 1, "1-byte pieces");
    send_and_check((size_t)3 << 20, slot, 1, "pieces of exactly a slot");
    send_and_check(((size_t)9 << 20) + 123, mhd, 1, "64 KiB pieces past the ring's size");
    send_and_check((size_t)11 << 20, big, 1, "pieces larger than the whole ring");
    send_and_check(((size_t)13 << 20) + 5, ragged, 7, "ragged pieces");
    send_and_check(10, one, 1, "a body smaller than a slot");
}

static void test_a_failed_write_is_reported(void)
{
    int fd = open("/dev/null", O_RDONLY); /* writes fail: EBADF */
    body_writer *w = body_writer_start(fd);
    size_t n = (size_t)1 << 20;
    char *buf = calloc(1, n), err[128] = "";
    int refused = 0, i;

    CHECK(fd >= 0 && w && buf, "set up");
    if (fd < 0 || !w || !buf) return;
    for (i = 0; i < 64 && !refused; i++) refused = body_writer_put(w, buf, n, err, sizeof err) != 0;
    CHECK(refused && strstr(err, "Bad file descriptor"), "a put after the failed write says so: '%s'", err);
    err[0] = '\0';
    CHECK(body_writer_finish(w, err, sizeof err) != 0 && strstr(err, "Bad file descriptor"), "so does finish: '%s'",
          err);

    w = body_writer_start(fd); /* a body smaller than a slot fails at finish */
    CHECK(w && body_writer_put(w, buf, 10, err, sizeof err) == 0, "a small put is only queued");
    err[0] = '\0';
    CHECK(w && body_writer_finish(w, err, sizeof err) != 0 && strstr(err, "Bad file descriptor"),
          "finish reports its write: '%s'", err);
    close(fd);
    free(buf);
}

static void test_abort_returns(void)
{
    int fd = memfd_create("test-abort", 0);
    size_t n = (size_t)3 << 20;
    char *buf = calloc(1, n), err[128];
    body_writer *w = body_writer_start(fd);

    double t0, took;

    CHECK(w && buf && body_writer_put(w, buf, n, err, sizeof err) == 0, "3 MiB queued");
    t0 = now_s();
    body_writer_abort(w);
    body_writer_abort(body_writer_start(fd)); /* nothing queued */
    body_writer_abort(NULL);
    took = now_s() - t0;
    CHECK(took < 1.0, "three aborts returned in %.3f s", took);
    close(fd);
    free(buf);
}

int main(void)
{
    test_pieces_land_whole_and_in_order();
    test_a_failed_write_is_reported();
    test_abort_returns();
    return CHECK_DONE();
}

/* http_linger.c — a lingering close (nginx's lingering_close) for connections answered before
 * their body was read: the answer is sent, the sending side shut (FIN), and what the client
 * still sends is read and thrown away until it stops, for HTTP_LINGER_S at most and
 * HTTP_LINGER_BYTES at most. Closed at once instead, the socket would answer the client's
 * next bytes with a reset, and a client that reads only after sending its whole body (Python's
 * urllib and requests, curl -T - from a pipe) would lose the answer in it.
 *
 * One thread and one epoll set hold every lingering socket; at most HTTP_LINGER_MAX at a time
 * (more are closed at once), so lingering cannot hold more than that many descriptors.
 */
#include "server/front/http/http_linger.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"

#define HTTP_LINGER_S 10.0                     /* the longest a socket lingers */
#define HTTP_LINGER_IDLE_S 2.0                 /* … or this long without a byte from the client */
#define HTTP_LINGER_BYTES (1ull << 30)         /* … or until this much was thrown away */
#define HTTP_LINGER_MAX 256                    /* sockets lingering at once */

typedef struct http_lingering {
    int fd;              /* -1: a free slot */
    double until_s;      /* clock_monotonic_s: HTTP_LINGER_S after it began */
    double idle_until_s; /* … HTTP_LINGER_IDLE_S after its last byte */
    unsigned long long bytes;
} http_lingering;

static http_lingering http_lingering_slots[HTTP_LINGER_MAX];
static int http_linger_epoll = -1, http_linger_wake = -1;
static pthread_mutex_t http_linger_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_t http_linger_thread;
static int http_linger_started, http_linger_stopping;

/* Close slot s (under http_linger_mu). */
static void http_linger_end_locked(http_lingering *s)
{
    close(s->fd); /* also leaves the epoll set */
    s->fd = -1;
}

/* Read and drop what the socket of slot s holds; end it at the end of the stream, an error
 * or its byte bound (under http_linger_mu). */
static void http_linger_drain_locked(http_lingering *s, double now)
{
    char sink[65536];

    for (;;) {
        ssize_t n = recv(s->fd, sink, sizeof sink, MSG_DONTWAIT);
        if (n > 0) {
            s->bytes += (unsigned long long)n;
            s->idle_until_s = now + HTTP_LINGER_IDLE_S;
            if (s->bytes < HTTP_LINGER_BYTES) continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return;
        } else if (n < 0 && errno == EINTR) {
            continue;
        }
        http_linger_end_locked(s);
        return;
    }
}

static void *http_linger_loop(void *arg)
{
    struct epoll_event events[64];

    (void)arg;
    for (;;) {
        int n = epoll_wait(http_linger_epoll, events, 64, 200), i;
        double now = clock_monotonic_s();

        pthread_mutex_lock(&http_linger_mu);
        if (http_linger_stopping) {
            pthread_mutex_unlock(&http_linger_mu);
            return NULL;
        }
        for (i = 0; i < n; i++) {
            http_lingering *s = events[i].data.ptr;
            if (s && s->fd >= 0) http_linger_drain_locked(s, now);
        }
        for (i = 0; i < HTTP_LINGER_MAX; i++) {
            http_lingering *s = &http_lingering_slots[i];
            if (s->fd >= 0 && (now >= s->until_s || now >= s->idle_until_s)) http_linger_end_locked(s);
        }
        pthread_mutex_unlock(&http_linger_mu);
    }
}

void http_linger(int fd)
{
    struct epoll_event ev;
    http_lingering *s = NULL;
    int i;

    /* The answer is in the socket's send buffer: the FIN follows it. */
    if (shutdown(fd, SHUT_WR) != 0 && errno != ENOTCONN) log_warn("shutdown of a lingering socket: %s", strerror(errno));
    pthread_mutex_lock(&http_linger_mu);
    for (i = 0; http_linger_started && i < HTTP_LINGER_MAX && !s; i++)
        if (http_lingering_slots[i].fd < 0) s = &http_lingering_slots[i];
    if (!s) {
        pthread_mutex_unlock(&http_linger_mu);
        close(fd);
        return;
    }
    s->fd = fd;
    s->bytes = 0;
    s->until_s = clock_monotonic_s() + HTTP_LINGER_S;
    s->idle_until_s = clock_monotonic_s() + HTTP_LINGER_IDLE_S;
    memset(&ev, 0, sizeof ev);
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.ptr = s;
    if (epoll_ctl(http_linger_epoll, EPOLL_CTL_ADD, fd, &ev) != 0) {
        log_warn("epoll_ctl for a lingering socket: %s", strerror(errno));
        http_linger_end_locked(s);
    }
    pthread_mutex_unlock(&http_linger_mu);
}

int http_linger_start(char *err, size_t err_len)
{
    struct epoll_event ev;
    int i, rc;

    for (i = 0; i < HTTP_LINGER_MAX; i++) http_lingering_slots[i].fd = -1;
    http_linger_epoll = epoll_create1(EPOLL_CLOEXEC);
    http_linger_wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    memset(&ev, 0, sizeof ev);
    ev.events = EPOLLIN;
    ev.data.ptr = NULL;
    if (http_linger_epoll < 0 || http_linger_wake < 0 ||
        epoll_ctl(http_linger_epoll, EPOLL_CTL_ADD, http_linger_wake, &ev) != 0) {
        snprintf(err, err_len, "cannot set up lingering closes: %s", strerror(errno));
        http_linger_stop();
        return -1;
    }
    http_linger_stopping = 0;
    if ((rc = pthread_create(&http_linger_thread, NULL, http_linger_loop, NULL)) != 0) {
        snprintf(err, err_len, "cannot start the lingering-close thread: %s", strerror(rc));
        http_linger_stop();
        return -1;
    }
    pthread_mutex_lock(&http_linger_mu);
    http_linger_started = 1;
    pthread_mutex_unlock(&http_linger_mu);
    return 0;
}

void http_linger_stop(void)
{
    uint64_t one = 1;
    int i, joined;

    pthread_mutex_lock(&http_linger_mu);
    joined = http_linger_started;
    http_linger_started = 0;
    http_linger_stopping = 1;
    pthread_mutex_unlock(&http_linger_mu);
    if (joined) {
        if (write(http_linger_wake, &one, sizeof one) != (ssize_t)sizeof one) log_warn("waking the lingering thread");
        pthread_join(http_linger_thread, NULL);
    }
    for (i = 0; i < HTTP_LINGER_MAX; i++)
        if (http_lingering_slots[i].fd >= 0) http_linger_end_locked(&http_lingering_slots[i]);
    if (http_linger_epoll >= 0) close(http_linger_epoll);
    if (http_linger_wake >= 0) close(http_linger_wake);
    http_linger_epoll = http_linger_wake = -1;
}

/* ipc.c — framed messages over a SOCK_STREAM socketpair (ipc.h).
 *
 * Wire format: 4-byte little-endian length, then that many bytes of JSON text. A file
 * descriptor, when there is one, rides as SCM_RIGHTS on the same sendmsg as the first bytes
 * of its frame. On a Unix stream socket the kernel delivers the descriptor with the first
 * read that consumes any of those bytes, and never merges them into a read of the previous
 * frame's bytes, so the receiver collects it while reading the 4-byte header.
 *
 * Every read and write loops over EINTR and partial I/O. A timeout or error in the middle of
 * a frame leaves the stream unusable: the caller must close it (the pool kills the worker).
 */
#include "common/ipc.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"

/* ------------------------------------------------------------------------------ send -- */

int ipc_send(int sock, const char *text, size_t len, int fd)
{
    unsigned char header[4];
    struct iovec iov[2];
    struct msghdr mh;
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } control;
    size_t total, sent = 0;

    if (len > IPC_MAX_FRAME) {
        errno = EMSGSIZE;
        return IPC_ERROR;
    }
    header[0] = (unsigned char)(len & 0xff);
    header[1] = (unsigned char)((len >> 8) & 0xff);
    header[2] = (unsigned char)((len >> 16) & 0xff);
    header[3] = (unsigned char)((len >> 24) & 0xff);
    total = sizeof header + len;

    while (sent < total) {
        ssize_t n;
        int iovcnt = 0;

        /* Rebuild the iovec from where the last partial write stopped. */
        if (sent < sizeof header) {
            iov[iovcnt].iov_base = header + sent;
            iov[iovcnt].iov_len = sizeof header - sent;
            iovcnt++;
            if (len > 0) {
                iov[iovcnt].iov_base = (void *)text;
                iov[iovcnt].iov_len = len;
                iovcnt++;
            }
        } else {
            iov[iovcnt].iov_base = (void *)(text + (sent - sizeof header));
            iov[iovcnt].iov_len = total - sent;
            iovcnt++;
        }
        memset(&mh, 0, sizeof mh);
        mh.msg_iov = iov;
        mh.msg_iovlen = (size_t)iovcnt;
        if (sent == 0 && fd >= 0) { /* the descriptor goes with the first byte(s) only */
            struct cmsghdr *cm;
            memset(&control, 0, sizeof control);
            mh.msg_control = control.buf;
            mh.msg_controllen = sizeof control.buf;
            cm = CMSG_FIRSTHDR(&mh);
            cm->cmsg_level = SOL_SOCKET;
            cm->cmsg_type = SCM_RIGHTS;
            cm->cmsg_len = CMSG_LEN(sizeof(int));
            memcpy(CMSG_DATA(cm), &fd, sizeof(int));
        }
        n = sendmsg(sock, &mh, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR) continue;
            return IPC_ERROR;
        }
        sent += (size_t)n;
    }
    return IPC_OK;
}

int ipc_send_json(int sock, const cJSON *msg, int fd)
{
    char *text = cJSON_PrintUnformatted(msg);
    int rc;

    if (!text) {
        errno = ENOMEM;
        return IPC_ERROR;
    }
    rc = ipc_send(sock, text, strlen(text), fd);
    cJSON_free(text);
    return rc;
}

/* --------------------------------------------------------------------------- receive -- */


/* Wait until sock is readable or the deadline (< 0: none) passes. */
static int ipc_wait_readable(int sock, long long deadline_ms)
{
    for (;;) {
        struct pollfd p = {.fd = sock, .events = POLLIN, .revents = 0};
        int timeout = -1, rc;

        if (deadline_ms >= 0) {
            long long left = deadline_ms - clock_monotonic_ms();
            if (left <= 0) return IPC_TIMEOUT;
            timeout = left > 0x7fffffff ? 0x7fffffff : (int)left;
        }
        rc = poll(&p, 1, timeout);
        if (rc < 0) {
            if (errno == EINTR) continue;
            return IPC_ERROR;
        }
        if (rc == 0) continue; /* loop re-checks the deadline */
        /* POLLHUP/POLLERR: let recvmsg report EOF or the error. */
        return IPC_OK;
    }
}

/* Read exactly n bytes into buf, collecting any passed descriptor into *fd (a second one is
 * closed: one frame carries at most one). at_start: EOF before any byte is IPC_EOF (a clean
 * end between frames); otherwise EOF is a torn frame (IPC_ERROR). */
static int ipc_read_full(int sock, void *buf, size_t n, int *fd, long long deadline_ms, int at_start)
{
    size_t got = 0;

    while (got < n) {
        struct iovec iov = {.iov_base = (char *)buf + got, .iov_len = n - got};
        struct msghdr mh;
        union {
            char buf[CMSG_SPACE(sizeof(int) * 4)];
            struct cmsghdr align;
        } control;
        struct cmsghdr *cm;
        ssize_t r;
        int rc = ipc_wait_readable(sock, deadline_ms);

        if (rc != IPC_OK) return rc;
        memset(&mh, 0, sizeof mh);
        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        mh.msg_control = control.buf;
        mh.msg_controllen = sizeof control.buf;
        r = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
        if (r < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
            return IPC_ERROR;
        }
        for (cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
            if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
                size_t k, count = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                for (k = 0; k < count; k++) {
                    int passed;
                    memcpy(&passed, CMSG_DATA(cm) + k * sizeof(int), sizeof(int));
                    if (*fd < 0)
                        *fd = passed;
                    else
                        close(passed);
                }
            }
        }
        if (r == 0) {
            if (at_start && got == 0) return IPC_EOF;
            errno = ECONNRESET;
            return IPC_ERROR;
        }
        got += (size_t)r;
    }
    return IPC_OK;
}

int ipc_recv_json(int sock, cJSON **msg, int *fd, int timeout_ms)
{
    unsigned char header[4];
    long long deadline_ms = timeout_ms < 0 ? -1 : clock_monotonic_ms() + timeout_ms;
    uint32_t len;
    char *text;
    cJSON *parsed;
    int passed_fd = -1, rc;

    *msg = NULL;
    if (fd) *fd = -1;
    rc = ipc_read_full(sock, header, sizeof header, &passed_fd, deadline_ms, 1);
    if (rc != IPC_OK) goto fail;
    len = (uint32_t)header[0] | (uint32_t)header[1] << 8 | (uint32_t)header[2] << 16 |
          (uint32_t)header[3] << 24;
    if (len > IPC_MAX_FRAME || len == 0) {
        errno = EMSGSIZE;
        rc = IPC_ERROR;
        goto fail;
    }
    text = malloc(len);
    if (!text) {
        errno = ENOMEM;
        rc = IPC_ERROR;
        goto fail;
    }
    rc = ipc_read_full(sock, text, len, &passed_fd, deadline_ms, 0);
    if (rc != IPC_OK) {
        free(text);
        goto fail;
    }
    parsed = cJSON_ParseWithLength(text, len);
    free(text);
    if (!parsed || !cJSON_IsObject(parsed)) {
        cJSON_Delete(parsed);
        errno = EPROTO;
        rc = IPC_ERROR;
        goto fail;
    }
    *msg = parsed;
    if (fd)
        *fd = passed_fd;
    else if (passed_fd >= 0)
        close(passed_fd); /* the caller expects none */
    return IPC_OK;

fail:
    if (passed_fd >= 0) close(passed_fd);
    return rc;
}

/* ----------------------------------------------------------------------------- memfd -- */

int ipc_memfd_from(const char *name, const void *buf, size_t n)
{
    size_t done = 0;
    int fd = memfd_create(name ? name : "attnd", MFD_CLOEXEC);

    if (fd < 0) return -1;
    while (done < n) {
        ssize_t w = write(fd, (const char *)buf + done, n - done);
        if (w < 0) {
            if (errno == EINTR) continue;
            goto fail;
        }
        done += (size_t)w;
    }
    if (lseek(fd, 0, SEEK_SET) != 0) goto fail;
    return fd;

fail: {
    int saved = errno;
    close(fd);
    errno = saved;
    return -1;
}
}

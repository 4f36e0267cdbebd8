/* test_ipc.c — frames over a socketpair: round trip, a passed memfd, large frames through
 * partial I/O, the size limit, timeout and EOF. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/unit/check.h"
#include "common/ipc.h"

typedef struct big_sender {
    int sock;
    size_t bytes;
    int rc;
} big_sender;

/* A frame much larger than the socket buffer must be written while the peer reads. */
static void *send_big(void *arg)
{
    big_sender *b = arg;
    char *text = malloc(b->bytes + 16);
    size_t n;
    memcpy(text, "{\"s\":\"", 6);
    memset(text + 6, 'x', b->bytes);
    memcpy(text + 6 + b->bytes, "\"}", 2);
    n = b->bytes + 8;
    b->rc = ipc_send(b->sock, text, n, -1);
    free(text);
    return NULL;
}

int main(void)
{
    int sv[2], fd = -2, rc;
    cJSON *msg = NULL, *out;
    char buf[64];

    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, "socketpair: %s", strerror(errno));

    /* Round trip, no descriptor. */
    out = cJSON_CreateObject();
    cJSON_AddStringToObject(out, "type", "hello");
    cJSON_AddNumberToObject(out, "job", 42);
    CHECK(ipc_send_json(sv[0], out, -1) == IPC_OK, "send");
    rc = ipc_recv_json(sv[1], &msg, &fd, 1000);
    CHECK(rc == IPC_OK, "recv rc %d", rc);
    CHECK(fd == -1, "no fd expected, got %d", fd);
    CHECK(msg && strcmp(cJSON_GetObjectItem(msg, "type")->valuestring, "hello") == 0, "type");
    CHECK(msg && cJSON_GetObjectItem(msg, "job")->valuedouble == 42, "job");
    cJSON_Delete(msg);

    /* Two frames back to back, the second with a memfd: the fd arrives with its frame only. */
    {
        int mfd = ipc_memfd_from("test", "hello bytes", 11);
        struct stat stt;
        CHECK(mfd >= 0, "memfd: %s", strerror(errno));
        CHECK(ipc_send_json(sv[0], out, -1) == IPC_OK, "send 1");
        CHECK(ipc_send_json(sv[0], out, mfd) == IPC_OK, "send 2 with fd");
        close(mfd); /* the receiver holds its own copy */
        rc = ipc_recv_json(sv[1], &msg, &fd, 1000);
        CHECK(rc == IPC_OK && fd == -1, "frame 1 rc %d fd %d", rc, fd);
        cJSON_Delete(msg);
        rc = ipc_recv_json(sv[1], &msg, &fd, 1000);
        CHECK(rc == IPC_OK && fd >= 0, "frame 2 rc %d fd %d", rc, fd);
        cJSON_Delete(msg);
        CHECK(fstat(fd, &stt) == 0 && stt.st_size == 11, "memfd size");
        memset(buf, 0, sizeof buf);
        CHECK(read(fd, buf, sizeof buf) == 11 && memcmp(buf, "hello bytes", 11) == 0, "memfd content at offset 0");
        close(fd);
    }
    cJSON_Delete(out);

    /* A large frame (8 MiB) goes through partial writes and reads. */
    {
        big_sender b = {.sock = sv[0], .bytes = 8u << 20, .rc = -9};
        pthread_t t;
        pthread_create(&t, NULL, send_big, &b);
        rc = ipc_recv_json(sv[1], &msg, &fd, 10000);
        pthread_join(t, NULL);
        CHECK(b.rc == IPC_OK, "big send rc %d", b.rc);
        CHECK(rc == IPC_OK, "big recv rc %d", rc);
        CHECK(msg && strlen(cJSON_GetObjectItem(msg, "s")->valuestring) == (8u << 20), "big payload length");
        cJSON_Delete(msg);
    }

    /* Over the limit: refused on send; a forged header is refused on receive. */
    CHECK(ipc_send(sv[0], "x", (size_t)IPC_MAX_FRAME + 1, -1) == IPC_ERROR && errno == EMSGSIZE, "send limit");
    {
        unsigned char hdr[4] = {0xff, 0xff, 0xff, 0x7f};
        CHECK(write(sv[0], hdr, 4) == 4, "write forged header");
        rc = ipc_recv_json(sv[1], &msg, &fd, 1000);
        CHECK(rc == IPC_ERROR, "oversized frame refused, rc %d", rc);
    }
    close(sv[0]);
    close(sv[1]);

    /* Timeout, then not-JSON, then EOF. */
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, "socketpair 2");
    rc = ipc_recv_json(sv[1], &msg, &fd, 50);
    CHECK(rc == IPC_TIMEOUT, "timeout rc %d", rc);
    CHECK(ipc_send(sv[0], "not json", 8, -1) == IPC_OK, "send garbage");
    rc = ipc_recv_json(sv[1], &msg, &fd, 1000);
    CHECK(rc == IPC_ERROR && msg == NULL, "garbage refused rc %d", rc);
    close(sv[0]);
    rc = ipc_recv_json(sv[1], &msg, &fd, 1000);
    CHECK(rc == IPC_EOF, "eof rc %d", rc);
    close(sv[1]);

    return CHECK_DONE();
}

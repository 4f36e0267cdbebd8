/* ipc.h — framed messages between the front and a worker over a socketpair.
 *
 * A frame is a 4-byte little-endian length, then that many bytes of JSON text. Bulk bytes
 * never go through the socket: a file descriptor (a memfd) rides along with the frame as
 * SCM_RIGHTS ancillary data. Frames larger than IPC_MAX_FRAME are refused.
 *
 * Messages (DESIGN.md):
 *   worker → front  {"type":"hello","device":{…}}  or  {"type":"hello","error":"…"}
 *   front → worker  {"type":"run","job":ID,"request":{run_request}}
 *   worker → front  {"type":"result","job":ID,"result":{timing,kernels,output,verify,perf}}
 *                   [+ fd: output bytes, when the cpu device must verify]
 *                   {"type":"error","job":ID,"error":{status,code,message,field}}
 *                     (the request cannot run here; nothing ran)
 *                   {"type":"failed","job":ID,"message":"…","fatal":true|false}
 *                     (it ran and broke; fatal: the worker exits next)
 *   front → cpu     {"type":"verify","job":ID,"request":{…},"bytes":N} + fd
 *   cpu → front     {"type":"verify_result","job":ID,"verify":{…}}  (or error/failed)
 */
#ifndef IPC_H
#define IPC_H

#include <stddef.h>

#include <cjson/cJSON.h>

#define IPC_MAX_FRAME (64u << 20)

enum { IPC_OK = 0, IPC_EOF = -1, IPC_TIMEOUT = -2, IPC_ERROR = -3 };

/* Send one frame; fd < 0 sends none. Returns IPC_OK or IPC_ERROR (errno set). */
int ipc_send(int sock, const char *text, size_t len, int fd);

/* Send a JSON object (printed unformatted). */
int ipc_send_json(int sock, const cJSON *msg, int fd);

/* Receive one frame, waiting at most timeout_ms (< 0: forever). On IPC_OK *msg is the parsed
 * object (caller deletes) and *fd the passed descriptor or -1 (caller closes). */
int ipc_recv_json(int sock, cJSON **msg, int *fd, int timeout_ms);

/* A memfd holding n bytes copied from buf (name shows in /proc). -1 on failure. */
int ipc_memfd_from(const char *name, const void *buf, size_t n);

#endif

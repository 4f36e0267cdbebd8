/* http_guard.h — connection guards for libmicrohttpd's daemon (http_guard.c): a deadline for
 * every request's head (header_timeout_s) and body (body_timeout_s and body_min_rate_bytes),
 * and shedding of connections still sending one when max_connections is nearly reached.
 * http.c and http_body.c wire them into the daemon. */
#ifndef HTTP_GUARD_H
#define HTTP_GUARD_H

#include <stddef.h>

#include <microhttpd.h>

#include "common/settings.h"

/* Start the watchdog thread; s must outlive http_guard_stop. 0, or -1 with err filled. */
int http_guard_start(const settings *s, char *err, size_t err_len);

/* Stop and join the watchdog (after the daemon stopped). */
void http_guard_stop(void);

/* MHD_OPTION_NOTIFY_CONNECTION: list a connection when it starts, unlist it when it closes. */
void http_guard_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                       enum MHD_ConnectionNotificationCode code);

/* The access handler's first call: conn's request head is in; its deadline no longer applies. */
void http_guard_head_in(struct MHD_Connection *conn);

/* conn's request body is awaited (begins), n more bytes of it came (piece), it is all in or
 * refused (ends): until it ends, the body's deadline applies and conn may be shed. */
void http_guard_body_begins(struct MHD_Connection *conn);
void http_guard_body_piece(struct MHD_Connection *conn, size_t n);
void http_guard_body_ends(struct MHD_Connection *conn);

/* conn was answered before its body was read: when it closes, it lingers (http_linger.h). */
void http_guard_linger(struct MHD_Connection *conn);

/* A request completed on conn and it stays open: the next head's deadline starts now. */
void http_guard_waiting(struct MHD_Connection *conn);

#endif

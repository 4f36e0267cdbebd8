/* http_guard.h — connection guards for libmicrohttpd's daemon (http_guard.c): a deadline for
 * every request's head (header_timeout_s) and shedding of connections still waiting for one
 * when max_connections is nearly reached. http.c wires them into the daemon. */
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

/* A request completed on conn and it stays open: the next head's deadline starts now. */
void http_guard_waiting(struct MHD_Connection *conn);

#endif

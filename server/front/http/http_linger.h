/* http_linger.h — lingering closes (http_linger.c): a connection answered before its body
 * was read keeps reading and throwing away that body for a bounded time, so that the client
 * reads the answer instead of a reset. */
#ifndef HTTP_LINGER_H
#define HTTP_LINGER_H

#include <stddef.h>

/* Start the thread that drains lingering sockets. 0, or -1 with err filled. */
int http_linger_start(char *err, size_t err_len);

/* Stop it and close every socket still lingering (after the daemon stopped). */
void http_linger_stop(void);

/* Take fd, a socket whose answer has been written: shut its sending side, drain it, close it.
 * Closed at once when too many linger already or the thread is not running. */
void http_linger(int fd);

#endif

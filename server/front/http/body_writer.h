/* body_writer.h — a streamed body's bytes written to its memfd on a thread of their own.
 *
 * The connection's thread receives a body piece by piece (a recv into libmicrohttpd's buffer
 * each). Written to the memfd on that same thread, every byte is copied twice in a row, and
 * the second copy (the memfd's fresh pages) costs as much as the first: the upload arrives at
 * half the rate the socket could give. Here the connection's thread only copies each piece
 * into a small ring, whose slots stay in cache, and a writer thread empties the ring into the
 * memfd meanwhile.
 */
#ifndef BODY_WRITER_H
#define BODY_WRITER_H

#include <stddef.h>

typedef struct body_writer body_writer;

/* A writer to fd (which stays the caller's), its thread started; NULL when there is no
 * memory or thread for it (then write on the caller's thread). */
body_writer *body_writer_start(int fd);

/* Queue n bytes, copied out of data before it returns; waits while the ring is full. 0, or
 * -1 once a write has failed (errno's text in err). */
int body_writer_put(body_writer *w, const char *data, size_t n, char *err, size_t err_len);

/* Everything queued written, the thread joined and w freed. 0, or -1 with err when a write
 * failed. */
int body_writer_finish(body_writer *w, char *err, size_t err_len);

/* What is queued dropped, the thread joined and w freed (a body refused or cut off). */
void body_writer_abort(body_writer *w);

#endif

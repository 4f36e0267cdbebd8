/* tensor_io.h — tensor bytes on their way between the front, its memfds and the workers:
 * one tensor_* message to a device's worker and its reply, reading a memfd back, and the
 * rates the tensor log lines give. For the tensor_*.c files of the front.
 */
#ifndef TENSOR_IO_H
#define TENSOR_IO_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "common/api_error.h"

/* Send msg (and fd, -1 for none) to device's worker through its queue (pool_tensor_op). 0 with
 * *reply a tensor_result (caller deletes), *reply_fd the fd it sent back (-1 when none;
 * caller closes) and *gen the worker generation that answered; or -1 with e, nothing held. */
int tensor_exchange(const char *device, cJSON *msg, int fd, cJSON **reply, int *reply_fd, int *gen, api_error *e);

/* The worker's error or failed reply (status: pool_tensor_op's) as an api_error. */
void tensor_reply_error(const cJSON *reply, int status, api_error *e);

/* Read n bytes of fd at off. 0, or -1: an error (errno) or the end of the file first. */
int tensor_pread_all(int fd, void *buf, size_t n, uint64_t off);

/* bytes / seconds in GB/s, for the log lines (0 when no time passed). */
double tensor_gbps(double bytes, double seconds);

#endif

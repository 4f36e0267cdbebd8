/* host_memory.h — how much host memory the cpu device may still take. */
#ifndef HOST_MEMORY_H
#define HOST_MEMORY_H

/* MemAvailable from /proc/meminfo (free pages alone would refuse work that fits on a host
 * whose page cache is full), else free pages × page size. Bytes. */
double host_memory_available_bytes(void);

#endif

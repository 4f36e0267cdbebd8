/* host_memory.c — see host_memory.h. */
#include "common/host_memory.h"

#include <stdio.h>
#include <unistd.h>

double host_memory_available_bytes(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    double kib = -1.0;

    if (f) {
        while (fgets(line, sizeof line, f)) {
            unsigned long long v;
            if (sscanf(line, "MemAvailable: %llu kB", &v) == 1) {
                kib = (double)v;
                break;
            }
        }
        fclose(f);
    }
    if (kib >= 0.0) return kib * 1024.0;
    return (double)sysconf(_SC_AVPHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
}

/* bench/nvml_cost.c — what each NVML query the worker makes costs the calling thread.
 *
 * A GPU run reads the SM clock, the board's power and the clock-event reasons once a batch,
 * and the energy counter once a millisecond (the instantaneous power field every 20th time)
 * while the energy sampler runs. On a small run (ten forwards of 20 us) those reads can cost
 * more than the forwards: this program times each one, so the worker's per-run budget can be
 * set from measurements, not guesses.
 *
 *   cc -O2 -o build/nvml_cost bench/nvml_cost.c -ldl && build/nvml_cost [--reads 200] [--index 0]
 *
 * NVML is loaded with dlopen, as the worker loads it (no nvml.h needed). Prints one row a
 * query: median, p90 and max microseconds over --reads calls.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int nvml_return;
typedef struct nvml_device_st *nvml_device;
/* nvmlFieldValue_t: the instantaneous power is field 186 (NVML_FI_DEV_POWER_INSTANT) */
typedef struct {
    unsigned field_id, scope_id;
    long long timestamp_us, latency_us;
    int value_type, nvml_return;
    unsigned long long value;
} nvml_field;

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* dlsym's void * into a function pointer: ISO C has no such conversion, memcpy is exact. */
static void *sym(void *lib, const char *name)
{
    void *p = dlsym(lib, name);
    if (!p) fprintf(stderr, "nvml_cost: %s missing: its row is left out\n", name);
    return p;
}

enum { QUERY_CLOCK, QUERY_POWER, QUERY_REASONS, QUERY_ENERGY, QUERY_POWER_LIMIT, QUERY_POWER_INSTANT, QUERIES };
static const char *query_names[QUERIES] = {"nvmlDeviceGetClockInfo(SM)", "nvmlDeviceGetPowerUsage",
                                           "nvmlDeviceGetCurrentClocksEventReasons",
                                           "nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetEnforcedPowerLimit",
                                           "nvmlDeviceGetFieldValues(POWER_INSTANT)"};

int main(int argc, char **argv)
{
    int reads = 200, index = 0, i, q;
    void *lib, *p;
    nvml_device dev;
    nvml_return (*init)(void), (*by_index)(unsigned, nvml_device *);
    nvml_return (*get_clock)(nvml_device, int, unsigned *) = NULL;
    nvml_return (*get_u32)(nvml_device, unsigned *);
    nvml_return (*get_u64)(nvml_device, unsigned long long *);
    nvml_return (*get_fields)(nvml_device, int, nvml_field *);
    double *us;

    for (i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--reads")) reads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--index")) index = atoi(argv[i + 1]);
    }
    if (reads < 1) reads = 1;
    lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return fprintf(stderr, "nvml_cost: %s\n", dlerror()), 1;
    p = sym(lib, "nvmlInit_v2");
    memcpy(&init, &p, sizeof p);
    p = sym(lib, "nvmlDeviceGetHandleByIndex_v2");
    memcpy(&by_index, &p, sizeof p);
    if (!init || !by_index || init() != 0 || by_index((unsigned)index, &dev) != 0)
        return fprintf(stderr, "nvml_cost: NVML has no device %d\n", index), 1;
    us = malloc(sizeof *us * (size_t)reads);
    if (!us) return 1;

    printf("| query | median us | p90 us | max us |\n| --- | --- | --- | --- |\n");
    for (q = 0; q < QUERIES; q++) {
        unsigned u32;
        unsigned long long u64;
        const char *name = q == QUERY_CLOCK           ? "nvmlDeviceGetClockInfo"
                           : q == QUERY_POWER_INSTANT ? "nvmlDeviceGetFieldValues"
                                                      : query_names[q];
        nvml_field field;
        p = sym(lib, name);
        if (!p && q == QUERY_REASONS) p = sym(lib, "nvmlDeviceGetCurrentClocksThrottleReasons");
        if (!p) continue;
        memcpy(&get_clock, &p, sizeof p);
        memcpy(&get_u32, &p, sizeof p);
        memcpy(&get_u64, &p, sizeof p);
        memcpy(&get_fields, &p, sizeof p);
        for (i = 0; i < reads; i++) {
            double t0 = now_us();
            int rc;
            memset(&field, 0, sizeof field);
            field.field_id = 186;
            rc = q == QUERY_CLOCK                                ? get_clock(dev, 1, &u32)
                 : q == QUERY_POWER || q == QUERY_POWER_LIMIT   ? get_u32(dev, &u32)
                 : q == QUERY_POWER_INSTANT                     ? get_fields(dev, 1, &field) || field.nvml_return
                                                                : get_u64(dev, &u64);
            us[i] = now_us() - t0;
            if (rc != 0) {
                fprintf(stderr, "nvml_cost: %s failed (NVML %d)\n", query_names[q], rc);
                break;
            }
        }
        if (i < reads) continue;
        qsort(us, (size_t)reads, sizeof *us, by_value);
        printf("| %s | %.1f | %.1f | %.1f |\n", query_names[q], us[reads / 2], us[reads * 9 / 10], us[reads - 1]);
    }
    free(us);
    return 0;
}

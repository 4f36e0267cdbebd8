/* clocks.c — SM clocks, power, energy and the driver version through NVML, loaded with dlopen (clocks.h).
 *
 * NVML ships with the driver, not the toolkit, and some containers lack it: attnd must run
 * there all the same, so nothing links against it and every failure just means "unknown"
 * (0 or ""), never an error. The few prototypes used are declared here (no nvml.h needed);
 * they are NVML's stable ABI (the _v2 names are the current ones).
 *
 * The CUDA ordinal and NVML's index can disagree (CUDA_VISIBLE_DEVICES, CUDA's "fastest
 * first" order), so the device is found by PCI bus id, which both agree on.
 */
#include "server/worker/clocks.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "common/log.h"

typedef int clocks_nvml_return;        /* nvmlReturn_t: 0 is NVML_SUCCESS */
typedef struct clocks_nvml_device_st *clocks_nvml_device; /* nvmlDevice_t */
enum { CLOCKS_NVML_SUCCESS = 0, CLOCKS_NVML_ERROR_NOT_SUPPORTED = 3 };
enum { CLOCKS_NVML_CLOCK_SM = 1, CLOCKS_NVML_CLOCK_MEM = 2 }; /* nvmlClockType_t */
/* nvmlFieldValue_t, and the field and value types read from it (nvml.h's NVML_FI_DEV_POWER_INSTANT,
 * nvmlValueType_t) */
typedef struct {
    unsigned field_id, scope_id;
    long long timestamp_us, latency_us;
    int value_type, nvml_return;
    union {
        double d;
        unsigned u32;
        unsigned long ul;
        unsigned long long u64;
        long long s64;
        int s32;
        unsigned short u16;
    } value;
} clocks_nvml_field;
enum { CLOCKS_NVML_FI_POWER_INSTANT = 186 };
enum { CLOCKS_NVML_VALUE_DOUBLE = 0, CLOCKS_NVML_VALUE_U32 = 1, CLOCKS_NVML_VALUE_UL = 2, CLOCKS_NVML_VALUE_U64 = 3 };

static struct {
    void *lib;
    clocks_nvml_device dev;
    int ok;
    unsigned sm_max_mhz, mem_max_mhz, bus_bits;
    char driver[96];
    clocks_nvml_return (*get_clock)(clocks_nvml_device, int, unsigned *);
    /* Optional: older drivers or parts may lack them; each is NULL then. */
    clocks_nvml_return (*get_energy)(clocks_nvml_device, unsigned long long *);  /* mJ since driver load */
    clocks_nvml_return (*get_power)(clocks_nvml_device, unsigned *);             /* mW */
    clocks_nvml_return (*get_reasons)(clocks_nvml_device, unsigned long long *); /* clock event bits */
    clocks_nvml_return (*get_power_limit)(clocks_nvml_device, unsigned *);       /* mW, enforced */
    clocks_nvml_return (*get_fields)(clocks_nvml_device, int, clocks_nvml_field *);
} clocks_nvml;

/* A symbol of NVML, or NULL. dlsym returns void *: ISO C has no conversion to a function
 * pointer, so the caller memcpy's it. */
static void *clocks_sym(const char *name) { return clocks_nvml.lib ? dlsym(clocks_nvml.lib, name) : NULL; }

/* One check per NVML call: a failure is logged at debug level (it is expected on machines
 * without NVML) and makes clocks_open give up. */
#define NVML_TRY(call)                                                                         \
    do {                                                                                       \
        clocks_nvml_return r_ = (call);                                                        \
        if (r_ != CLOCKS_NVML_SUCCESS) {                                                       \
            log_debug("%s failed at %s:%d: NVML error %d", #call, __FILE__, __LINE__, r_);     \
            return -1;                                                                         \
        }                                                                                      \
    } while (0)

int clocks_open(int cuda_device)
{
    clocks_nvml_return (*init)(void);
    clocks_nvml_return (*by_bus_id)(const char *, clocks_nvml_device *);
    clocks_nvml_return (*max_clock)(clocks_nvml_device, int, unsigned *);
    clocks_nvml_return (*driver_version)(char *, unsigned);
    char bus_id[64];
    cudaError_t ce;

    if (clocks_nvml.ok) return 0;
    if (!clocks_nvml.lib) clocks_nvml.lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!clocks_nvml.lib) {
        log_debug("NVML not loaded (%s): clocks are reported as 0", dlerror());
        return -1;
    }
    /* dlsym returns void *: ISO C has no conversion to a function pointer, memcpy is exact. */
    {
        void *p;
        p = dlsym(clocks_nvml.lib, "nvmlInit_v2");
        memcpy(&init, &p, sizeof p);
        p = dlsym(clocks_nvml.lib, "nvmlDeviceGetHandleByPciBusId_v2");
        memcpy(&by_bus_id, &p, sizeof p);
        p = dlsym(clocks_nvml.lib, "nvmlDeviceGetClockInfo");
        memcpy(&clocks_nvml.get_clock, &p, sizeof p);
        p = dlsym(clocks_nvml.lib, "nvmlDeviceGetMaxClockInfo");
        memcpy(&max_clock, &p, sizeof p);
        p = dlsym(clocks_nvml.lib, "nvmlSystemGetDriverVersion");
        memcpy(&driver_version, &p, sizeof p);
    }
    if (!init || !by_bus_id || !clocks_nvml.get_clock || !max_clock || !driver_version) {
        log_debug("NVML lacks a needed symbol: clocks are reported as 0");
        clocks_nvml.get_clock = NULL;
        return -1;
    }
    ce = cudaDeviceGetPCIBusId(bus_id, (int)sizeof bus_id, cuda_device);
    if (ce != cudaSuccess) {
        log_debug("cudaDeviceGetPCIBusId failed at %s:%d: %s", __FILE__, __LINE__, cudaGetErrorString(ce));
        return -1;
    }
    NVML_TRY(init());
    NVML_TRY(by_bus_id(bus_id, &clocks_nvml.dev));
    NVML_TRY(max_clock(clocks_nvml.dev, CLOCKS_NVML_CLOCK_SM, &clocks_nvml.sm_max_mhz));
    if (max_clock(clocks_nvml.dev, CLOCKS_NVML_CLOCK_MEM, &clocks_nvml.mem_max_mhz) != CLOCKS_NVML_SUCCESS)
        clocks_nvml.mem_max_mhz = 0;
    {
        clocks_nvml_return (*bus_width)(clocks_nvml_device, unsigned *);
        void *p = clocks_sym("nvmlDeviceGetMemoryBusWidth");
        memcpy(&bus_width, &p, sizeof p);
        if (!bus_width || bus_width(clocks_nvml.dev, &clocks_nvml.bus_bits) != CLOCKS_NVML_SUCCESS)
            clocks_nvml.bus_bits = 0;
        p = clocks_sym("nvmlDeviceGetTotalEnergyConsumption");
        memcpy(&clocks_nvml.get_energy, &p, sizeof p);
        p = clocks_sym("nvmlDeviceGetPowerUsage");
        memcpy(&clocks_nvml.get_power, &p, sizeof p);
        /* The current name (driver 535+), else the one it replaced: the same bits. */
        p = clocks_sym("nvmlDeviceGetCurrentClocksEventReasons");
        if (!p) p = clocks_sym("nvmlDeviceGetCurrentClocksThrottleReasons");
        memcpy(&clocks_nvml.get_reasons, &p, sizeof p);
        p = clocks_sym("nvmlDeviceGetEnforcedPowerLimit");
        memcpy(&clocks_nvml.get_power_limit, &p, sizeof p);
        p = clocks_sym("nvmlDeviceGetFieldValues");
        memcpy(&clocks_nvml.get_fields, &p, sizeof p);
    }
    if (driver_version(clocks_nvml.driver, (unsigned)sizeof clocks_nvml.driver) != CLOCKS_NVML_SUCCESS)
        clocks_nvml.driver[0] = '\0';
    clocks_nvml.ok = 1;
    return 0;
}

unsigned clocks_sm_mhz(void)
{
    unsigned mhz = 0;
    if (!clocks_nvml.ok) return 0;
    if (clocks_nvml.get_clock(clocks_nvml.dev, CLOCKS_NVML_CLOCK_SM, &mhz) != CLOCKS_NVML_SUCCESS) return 0;
    return mhz;
}

unsigned clocks_sm_max_mhz(void) { return clocks_nvml.ok ? clocks_nvml.sm_max_mhz : 0; }

const char *clocks_driver_version(void) { return clocks_nvml.ok ? clocks_nvml.driver : ""; }

unsigned clocks_mem_max_mhz(void) { return clocks_nvml.ok ? clocks_nvml.mem_max_mhz : 0; }

unsigned clocks_bus_bits(void) { return clocks_nvml.ok ? clocks_nvml.bus_bits : 0; }

int clocks_energy_mj(unsigned long long *mj, const char **why)
{
    int r;
    if (!clocks_nvml.ok) return *why = "NVML is not available in this container", -1;
    if (!clocks_nvml.get_energy) return *why = "this driver's NVML has no energy counter", -1;
    r = clocks_nvml.get_energy(clocks_nvml.dev, mj);
    if (r == CLOCKS_NVML_ERROR_NOT_SUPPORTED) return *why = "this GPU has no energy counter (NVML: not supported)", -1;
    if (r != CLOCKS_NVML_SUCCESS) return *why = "NVML failed to read the energy counter", -1;
    return 0;
}

unsigned clocks_power_mw(void)
{
    unsigned mw = 0;
    if (!clocks_nvml.ok || !clocks_nvml.get_power) return 0;
    return clocks_nvml.get_power(clocks_nvml.dev, &mw) == CLOCKS_NVML_SUCCESS ? mw : 0;
}

unsigned clocks_power_instant_mw(void)
{
    clocks_nvml_field f;
    if (!clocks_nvml.ok || !clocks_nvml.get_fields) return 0;
    memset(&f, 0, sizeof f);
    f.field_id = CLOCKS_NVML_FI_POWER_INSTANT;
    if (clocks_nvml.get_fields(clocks_nvml.dev, 1, &f) != CLOCKS_NVML_SUCCESS || f.nvml_return != CLOCKS_NVML_SUCCESS)
        return 0;
    switch (f.value_type) {
    case CLOCKS_NVML_VALUE_U32: return f.value.u32;
    case CLOCKS_NVML_VALUE_UL: return (unsigned)f.value.ul;
    case CLOCKS_NVML_VALUE_U64: return (unsigned)f.value.u64;
    case CLOCKS_NVML_VALUE_DOUBLE: return f.value.d > 0.0 ? (unsigned)f.value.d : 0;
    default: return 0;
    }
}

unsigned clocks_power_limit_mw(void)
{
    unsigned mw = 0;
    if (!clocks_nvml.ok || !clocks_nvml.get_power_limit) return 0;
    return clocks_nvml.get_power_limit(clocks_nvml.dev, &mw) == CLOCKS_NVML_SUCCESS ? mw : 0;
}

int clocks_event_reasons(unsigned long long *bits)
{
    if (!clocks_nvml.ok || !clocks_nvml.get_reasons) return -1;
    return clocks_nvml.get_reasons(clocks_nvml.dev, bits) == CLOCKS_NVML_SUCCESS ? 0 : -1;
}

/* nvmlClocksEventReasons bits, as NVML's header names them. */
static const struct {
    unsigned long long bit;
    const char *name;
} clocks_reason_names[] = {
    {0x1ULL, "gpu_idle"},           {0x2ULL, "applications_clocks_setting"}, {0x4ULL, "sw_power_cap"},
    {0x8ULL, "hw_slowdown"},        {0x10ULL, "sync_boost"},                 {0x20ULL, "sw_thermal_slowdown"},
    {0x40ULL, "hw_thermal_slowdown"}, {0x80ULL, "hw_power_brake_slowdown"},  {0x100ULL, "display_clock_setting"},
};

cJSON *clocks_reasons_json(unsigned long long bits)
{
    cJSON *a = cJSON_CreateArray();
    size_t i;
    if (!a) return NULL;
    for (i = 0; i < sizeof clocks_reason_names / sizeof clocks_reason_names[0]; i++)
        if (bits & clocks_reason_names[i].bit) cJSON_AddItemToArray(a, cJSON_CreateString(clocks_reason_names[i].name));
    return a;
}

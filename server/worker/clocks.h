/* clocks.h — clocks, power, energy and the memory's shape through NVML, loaded at run time
 * (dlopen libnvidia-ml.so.1), so that attnd runs where NVML is missing and simply reports
 * them as unknown. */
#ifndef CLOCKS_H
#define CLOCKS_H

#include <cjson/cJSON.h>

/* 0 when NVML loaded and the device is found; -1 otherwise (clocks then read 0). */
int clocks_open(int cuda_device);

/* Current SM clock in MHz, 0 when unknown. Cheap enough to call between forwards. */
unsigned clocks_sm_mhz(void);

/* The card's maximum SM clock in MHz, 0 when unknown. */
unsigned clocks_sm_max_mhz(void);

/* Driver version string from NVML ("580.159.04"), "" when unknown. */
const char *clocks_driver_version(void);

/* The memory's maximum clock in MHz and its bus width in bits, 0 when unknown. */
unsigned clocks_mem_max_mhz(void);
unsigned clocks_bus_bits(void);

/* The board's energy counter in mJ (since the driver loaded). 0; or -1 with *why (static
 * text) when there is none: no NVML, an old driver, or a GPU without the counter.
 * Thread-safe (NVML is), so the energy sampler's thread may call it while timing. */
int clocks_energy_mj(unsigned long long *mj, const char **why);

/* The board's power draw in mW, 0 when unknown: NVML's power reading, which on Ampere and
 * later is an average over the last second (cheap: the driver caches it). */
unsigned clocks_power_mw(void);

/* The board's power draw now, in mW (NVML's instantaneous power field), 0 when this driver or
 * GPU lacks it. Not cached by the driver: read off the measuring thread. */
unsigned clocks_power_instant_mw(void);

/* The power limit the board enforces now (nvidia-smi -pl may have changed it), in mW; 0 when
 * unknown. */
unsigned clocks_power_limit_mw(void);

/* The reasons the clocks are held below their maximum now (nvmlClocksEventReasons bits).
 * 0, or -1 when unknown. */
int clocks_event_reasons(unsigned long long *bits);

/* Those bits as an array of names ("sw_power_cap", "hw_thermal_slowdown", …). */
cJSON *clocks_reasons_json(unsigned long long bits);

#endif

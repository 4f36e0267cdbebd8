/* clocks.h — the SM clock through NVML, loaded at run time (dlopen libnvidia-ml.so.1), so
 * that attnd runs where NVML is missing and simply reports no clock. */
#ifndef CLOCKS_H
#define CLOCKS_H

/* 0 when NVML loaded and the device is found; -1 otherwise (clocks then read 0). */
int clocks_open(int cuda_device);

/* Current SM clock in MHz, 0 when unknown. Cheap enough to call between forwards. */
unsigned clocks_sm_mhz(void);

/* The card's maximum SM clock in MHz, 0 when unknown. */
unsigned clocks_sm_max_mhz(void);

/* Driver version string from NVML ("580.159.04"), "" when unknown. */
const char *clocks_driver_version(void);

#endif

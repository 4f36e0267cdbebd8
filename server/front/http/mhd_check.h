/* mhd_check.h — the check of every libmicrohttpd call in the front. */
#ifndef MHD_CHECK_H
#define MHD_CHECK_H

#include "common/log.h"

/* Log a failed libmicrohttpd call that returns MHD_NO / NULL; evaluates to 1 when it failed. */
#define MHD_FAILED(ok, call) ((ok) ? 0 : (log_error("%s failed at %s:%d", call, __FILE__, __LINE__), 1))

#endif

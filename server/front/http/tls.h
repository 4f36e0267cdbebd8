/* tls.h — optional HTTPS for the front (tls.c), through libmicrohttpd's GnuTLS support.
 *
 * With settings.tls_cert_file and tls_key_file both set, tls_prepare reads the two PEM files
 * and fills the libmicrohttpd option array http_start passes with MHD_OPTION_ARRAY; with
 * neither set it leaves HTTP as it is. One without the other, an unreadable file or a
 * libmicrohttpd built without TLS stops the start with a message.
 */
#ifndef TLS_H
#define TLS_H

#include <stddef.h>

#include <microhttpd.h>

#include "common/settings.h"

#define TLS_OPTIONS_MAX 3 /* cert, key, MHD_OPTION_END */

/* Fill opts (TLS_OPTIONS_MAX items, always ended by MHD_OPTION_END) and add MHD_USE_TLS to
 * *flags when TLS is configured; *on says whether it is. The PEM texts stay allocated until
 * tls_release. 0, or -1 with err filled. */
int tls_prepare(const settings *s, struct MHD_OptionItem *opts, unsigned *flags, int *on, char *err,
                size_t err_len);

/* Free the PEM texts (after MHD_stop_daemon). */
void tls_release(void);

#endif

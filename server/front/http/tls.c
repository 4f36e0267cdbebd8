/* tls.c — optional HTTPS (tls.h).
 *
 * libmicrohttpd takes the certificate and key as PEM text in memory
 * (MHD_OPTION_HTTPS_MEM_CERT / _KEY) and keeps pointing at it while the daemon runs, so the
 * texts live in statics until tls_release.
 */
#include "server/front/http/tls.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *tls_cert_pem, *tls_key_pem;

/* The whole file as a NUL-terminated string (PEM files are small: at most 1 MiB). */
static char *tls_read_pem(const char *what, const char *path, char *err, size_t err_len)
{
    FILE *f = fopen(path, "rb");
    char *text;
    size_t n;

    if (!f) {
        snprintf(err, err_len, "%s %s: %s", what, path, strerror(errno));
        return NULL;
    }
    text = malloc((1 << 20) + 1);
    if (!text) {
        fclose(f);
        snprintf(err, err_len, "%s %s: out of memory", what, path);
        return NULL;
    }
    n = fread(text, 1, 1 << 20, f);
    if (ferror(f) || n == 0 || !feof(f)) {
        snprintf(err, err_len, "%s %s: %s", what, path,
                 ferror(f) ? strerror(errno) : n == 0 ? "empty file" : "larger than 1 MiB");
        fclose(f);
        free(text);
        return NULL;
    }
    fclose(f);
    text[n] = '\0';
    if (!strstr(text, "-----BEGIN ")) {
        snprintf(err, err_len, "%s %s: not a PEM file (no -----BEGIN line)", what, path);
        free(text);
        return NULL;
    }
    return text;
}

void tls_release(void)
{
    free(tls_cert_pem);
    free(tls_key_pem);
    tls_cert_pem = tls_key_pem = NULL;
}

int tls_prepare(const settings *s, struct MHD_OptionItem *opts, unsigned *flags, int *on, char *err,
                size_t err_len)
{
    int n = 0;

    *on = 0;
    opts[0].option = MHD_OPTION_END;
    opts[0].value = 0;
    opts[0].ptr_value = NULL;
    if (!s->tls_cert_file[0] && !s->tls_key_file[0]) return 0;
    if (!s->tls_cert_file[0] || !s->tls_key_file[0]) {
        snprintf(err, err_len, "TLS needs both tls_cert_file and tls_key_file (got only %s)",
                 s->tls_cert_file[0] ? "tls_cert_file" : "tls_key_file");
        return -1;
    }
    if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
        snprintf(err, err_len, "this libmicrohttpd is built without TLS; unset tls_cert_file/tls_key_file");
        return -1;
    }
    tls_release();
    tls_cert_pem = tls_read_pem("tls_cert_file", s->tls_cert_file, err, err_len);
    if (!tls_cert_pem) return -1;
    tls_key_pem = tls_read_pem("tls_key_file", s->tls_key_file, err, err_len);
    if (!tls_key_pem) {
        tls_release();
        return -1;
    }
    opts[n].option = MHD_OPTION_HTTPS_MEM_CERT;
    opts[n].value = 0;
    opts[n++].ptr_value = tls_cert_pem;
    opts[n].option = MHD_OPTION_HTTPS_MEM_KEY;
    opts[n].value = 0;
    opts[n++].ptr_value = tls_key_pem;
    opts[n].option = MHD_OPTION_END;
    opts[n].value = 0;
    opts[n].ptr_value = NULL;
    *flags |= MHD_USE_TLS;
    *on = 1;
    return 0;
}

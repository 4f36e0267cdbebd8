/* fingerprint.c — fingerprint_bytes (fingerprint.h) on the host.
 *
 * Words are read with memcpy (any alignment) and assembled little-endian explicitly, so
 * the result is the documented one on a big-endian host too. The last partial word is
 * zero-padded. */
#include "fingerprint.h"

#include <string.h>

static uint64_t fingerprint_load_le(const unsigned char *b, size_t len)
{
    unsigned char w[8] = {0};
    uint64_t x = 0;
    memcpy(w, b, len);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(&x, w, 8);
#else
    for (int j = 7; j >= 0; j--) x = (x << 8) | w[j];
#endif
    return x;
}

uint64_t fingerprint_bytes(const void *bytes, size_t n)
{
    const unsigned char *b = bytes;
    size_t words = n / 8, i;
    uint64_t sum = 0;

    for (i = 0; i < words; i++) sum += fingerprint_term(fingerprint_load_le(b + 8 * i, 8), i);
    if (n % 8) sum += fingerprint_term(fingerprint_load_le(b + 8 * words, n % 8), words);
    return fingerprint_finish(sum, (uint64_t)n);
}

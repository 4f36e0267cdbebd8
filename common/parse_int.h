/* parse_int.h — the one parser of integers written as text (query strings, settings, ids,
 * command lines): strict decimal, nothing around it, no overflow. */
#ifndef PARSE_INT_H
#define PARSE_INT_H

/* Parse s as a decimal integer: an optional sign ('-' or '+'), then digits, then the end of
 * the string (no spaces). 0 with *out, or -1 (not such an integer, or out of long long). */
int parse_int(const char *s, long long *out);

/* parse_int of unsigned digits only (no sign) with lo ≤ value ≤ hi: ids, counts, ordinals,
 * file descriptors. 0 with *out, or -1. */
int parse_int_in(const char *s, long long lo, long long hi, long long *out);

#endif

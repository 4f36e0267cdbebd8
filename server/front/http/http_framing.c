/* http_framing.c — where a request's body ends, read from its head (RFC 9112, section 6), and
 * the heads a proxy in front could read another way refused before anything else is done
 * with the request.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <microhttpd.h>

#include "server/front/http/http.h"
#include "server/front/http/http_conn.h"

/* The framing headers: every Content-Length and the Transfer-Encoding, the Host headers, and
 * the first header whose name is no token. */
typedef struct framing_ctx {
    const char *length, *encoding; /* the first of each; NULL when absent */
    int lengths_differ;
    int hosts;
    const char *bad_name;          /* a name with a byte no header name has (RFC 9110 tchar) */
    const char *line_end;          /* where the line before the next header ended (its NUL) */
    const char *bare_lf;           /* the name of the first header after a line ended by a bare LF */
    const char *folded;            /* the name of the first header with a folded line near it */
    const char *bad_value;         /* the name of the first header whose value holds a control byte */
} framing_ctx;

/* The most NULs a line's end may span in the read buffer: its CR LF, and the white space
 * libmicrohttpd may cut from the end of a value. */
#define HTTP_LINE_END_MAX 1024

/* How the line that ended at line_end (the NUL of its last string) was ended, the next
 * header's name starting at key. libmicrohttpd parses the head in place: it writes a NUL over
 * each of CR and LF, so a line ended by CR LF leaves two or more NULs before the next name
 * (more where it cut white space from a value), a bare LF one; the bytes of a folded line
 * (one that starts with white space, joined to the header before it) stay between them. */
typedef enum { LINE_CRLF, LINE_BARE_LF, LINE_FOLDED } http_line_end;

static http_line_end http_line_end_of(const char *line_end, const char *key)
{
    uintptr_t from = (uintptr_t)line_end, to = (uintptr_t)key;
    const char *p;

    if (to == from + 1) return LINE_BARE_LF;
    if (to < from + 2 || to - from > HTTP_LINE_END_MAX) return LINE_FOLDED;
    for (p = line_end; p < key; p++)
        if (*p != '\0') return LINE_FOLDED;
    return LINE_CRLF;
}

/* Whether name is an RFC 9110 token: no white space (so none before the colon), no separators. */
static int http_token(const char *name, size_t len)
{
    size_t i;

    if (len == 0) return 0;
    for (i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)name[i];
        if (ch <= ' ' || ch >= 127 || strchr("\"(),/:;<=>?@[\\]{}", ch)) return 0;
    }
    return 1;
}

/* Whether a value holds a control byte other than HTAB (RFC 9110, 5.5): a CR that is no line
 * end is kept in the value by libmicrohttpd, and a proxy may end the line there. */
static int http_value_has_control(const char *value, size_t len)
{
    size_t i;

    for (i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)value[i];
        if ((ch < ' ' && ch != '\t') || ch == 127) return 1;
    }
    return 0;
}

/* Whether value still lies where it was read, right after its name, its colon and white
 * space: libmicrohttpd moves a value it joins a folded line to. */
static int http_value_beside_its_name(const char *key, size_t key_len, const char *value)
{
    uintptr_t from = (uintptr_t)(key + key_len), to = (uintptr_t)value;
    const char *p;

    if (to < from + 1 || to - from > HTTP_LINE_END_MAX) return 0;
    for (p = key + key_len + 1; p < value; p++)
        if (*p != ' ' && *p != '\t') return 0;
    return 1;
}

static enum MHD_Result http_framing_add(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_len,
                                        const char *value, size_t value_len)
{
    framing_ctx *f = cls;

    if (!key) return MHD_YES;
    if (!f->bad_name && !http_token(key, key_len)) f->bad_name = key;
    if (f->line_end && !f->bare_lf && !f->folded) {
        http_line_end end = http_line_end_of(f->line_end, key);
        if (end == LINE_BARE_LF) f->bare_lf = key;
        if (end == LINE_FOLDED) f->folded = key;
    }
    if (value && !f->folded && !http_value_beside_its_name(key, key_len, value)) f->folded = key;
    f->line_end = value ? value + value_len : NULL;
    if (!f->bad_value && value && http_value_has_control(value, value_len)) f->bad_value = key;
    if (!strcasecmp(key, MHD_HTTP_HEADER_HOST)) f->hosts++;
    if (!value) return MHD_YES;
    if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) {
        if (!f->length) f->length = value;
        else if (strcmp(f->length, value) != 0) f->lengths_differ = 1;
    } else if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) && !f->encoding) {
        f->encoding = value;
    }
    return MHD_YES;
}

/* The body's declared length: its Content-Length, HTTP_LENGTH_CHUNKED, or 0 without a body.
 * libmicrohttpd has refused (400/413, HTML) a Content-Length that is not a number below
 * 2^64, and reads by the first one; a head a proxy in front could read another way is
 * refused here (RFC 9112's MUSTs): a header name that is no token (white space before its
 * colon: "Content-Length : 5" names another header to libmicrohttpd, a length to some
 * proxies), no Host or two in HTTP/1.1, two Content-Lengths that differ, both framings.
 * 0, or -1 with e filled. */
static int http_declared_length(struct MHD_Connection *conn, const char *version, unsigned long long *declared,
                                api_error *e)
{
    framing_ctx f;

    memset(&f, 0, sizeof f);
    f.line_end = version ? version + strlen(version) : NULL; /* the request line's end */
    *declared = 0;
    if (MHD_get_connection_values_n(conn, MHD_HEADER_KIND, http_framing_add, &f) < 0)
        return api_fail(e, 500, "internal", "", "cannot read the request headers");
    if (f.bare_lf)
        return api_fail(e, 400, "bad_header", "", "the line before header '%.40s' ends in a bare LF, not CR LF",
                        f.bare_lf);
    if (f.folded)
        return api_fail(e, 400, "bad_header", "", "a folded header line (one that starts with white space) at "
                        "header '%.40s'", f.folded);
    if (f.bad_value)
        return api_fail(e, 400, "bad_header", "", "header '%.40s' holds a control character (a bare CR?)",
                        f.bad_value);
    if (f.bad_name)
        return api_fail(e, 400, "bad_header", "", "header name '%.40s' is not a token (white space before a colon, "
                        "or a folded line)", f.bad_name);
    if (f.hosts > 1 || (f.hosts == 0 && version && !strcmp(version, MHD_HTTP_VERSION_1_1)))
        return api_fail(e, 400, "bad_header", "", "an HTTP/1.1 request has exactly one Host header; this one has %d",
                        f.hosts);
    if (f.lengths_differ)
        return api_fail(e, 400, "bad_header", "", "two different Content-Length headers");
    if (f.encoding && f.length)
        return api_fail(e, 400, "bad_header", "", "both Transfer-Encoding and Content-Length are given");
    if (f.encoding) {
        /* libmicrohttpd would read any other coding until the connection closes. */
        if (strcasecmp(f.encoding, "chunked") != 0)
            return api_fail(e, 400, "bad_header", "", "Transfer-Encoding '%.40s' is not supported; only chunked",
                            f.encoding);
        *declared = HTTP_LENGTH_CHUNKED;
    } else if (f.length) {
        *declared = strtoull(f.length, NULL, 10);
    }
    return 0;
}

void http_frame(struct MHD_Connection *conn, const char *version, http_conn *c)
{
    if (http_declared_length(conn, version, &c->declared_length, &c->refusal) != 0) c->close_after = 1;
}


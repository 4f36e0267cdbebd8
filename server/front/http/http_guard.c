/* http_guard.c — the connection guards libmicrohttpd lacks (http_guard.h, docs/operations.md,
 * "Security model").
 *
 * libmicrohttpd enforces max_connections, max_connections_per_ip and idle_timeout_s. It has
 * no deadline for a request's head or body, so every open connection is in a table
 * (http_peer, from its STARTED to its CLOSED notification) and a watchdog thread shuts down
 * one whose head is not complete header_timeout_s after it began waiting for it (its accept,
 * or the end of the previous request on a keep-alive connection), or whose body falls behind
 * body_timeout_s plus one second per body_min_rate_bytes received (Apache's mod_reqtimeout:
 * a trickle of a byte a second is cut after ~20 s, a slow honest upload never is). When more
 * than 90% of max_connections are open, a newly accepted connection sheds ones still sending a
 * head or a body, so that clients whose requests arrive at once (probes, real clients) still
 * get in while many addresses flood.
 */
#include "server/front/http/http_guard.h"

#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "server/front/http/http_linger.h"
#include "server/front/http/mhd_check.h"

#define HTTP_HEADROOM_DIVISOR 10    /* shed waiting connections past max - max/10 open */
#define HTTP_WATCHDOG_PERIOD_MS 100 /* how late past header_timeout_s a head may be cut */
#define HTTP_CUT_LOG_PERIOD_S 10.0  /* the watchdog sums up its cuts at most this often */

static const settings *guard_cfg; /* http_guard_start's, until http_guard_stop */


/* A client address with open connections: IPv4, or an IPv6 /64 (what one client is
 * usually given). Guarded by http_peers_mu, like everything in this section. */
typedef struct http_addr {
    unsigned char key[8];
    size_t key_len;
    int peers;   /* its listed connections */
    int waiting; /* … of them still sending a request head or body, not cut: sheddable */
    unsigned bucket;        /* in http_addrs */
    struct http_addr *next; /* hash chain */
} http_addr;

/* One open connection: its socket_context from libmicrohttpd's STARTED notification to its
 * CLOSED one.
 *
 * fd reuse: the watchdog calls shutdown(fd) only under http_peers_mu and only on a listed
 * peer, and CLOSED unlists it under that mutex. libmicrohttpd (0.9.75 to 1.0) notifies
 * CLOSED before it closes the socket, so a listed fd is always still this connection's. */
typedef struct http_peer {
    int fd;
    http_addr *addr;
    double waiting_since_s; /* clock_monotonic_s when it began waiting for a request head */
    int head_in;            /* a request's head is in: it is being served, never cut … */
    int in_body;            /* … unless its body is still arriving (then as if waiting) */
    double body_since_s;    /* clock_monotonic_s when the body's first byte was awaited */
    unsigned long long body_bytes; /* received so far */
    int cut;                /* shut down here (deadline or shed); closing */
    int linger;             /* answered before its body was read: a lingering close */
    struct http_peer *prev, *next;
} http_peer;

#define HTTP_ADDR_BUCKETS 1024

/* Oldest waiting first: a peer goes to the tail when it starts waiting for a head (accept,
 * end of a request), so the waiting peers are in order of their deadlines. */
static http_peer *http_peers_head, *http_peers_tail;
static http_addr *http_addrs[HTTP_ADDR_BUCKETS];
static int http_peers_open; /* listed peers not cut */
static unsigned long long http_heads_cut, http_bodies_cut, http_peers_shed, http_peers_refused; /* since start, for the log */
static pthread_mutex_t http_peers_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t http_watchdog_cv;
static pthread_t http_watchdog_thread;
static int http_watchdog_started, http_watchdog_stopping;

/* The record of sa's address, created with no peers when new; NULL when out of memory. An
 * address libmicrohttpd did not give (sa NULL) or of another family shares one record. */
static http_addr *http_addr_get_locked(const struct sockaddr *sa)
{
    unsigned char key[8];
    size_t n = 0, i;
    unsigned h = 2166136261u; /* FNV-1a */
    http_addr *a;

    if (sa && sa->sa_family == AF_INET) {
        memcpy(key, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        n = 4;
    } else if (sa && sa->sa_family == AF_INET6) {
        memcpy(key, &((const struct sockaddr_in6 *)sa)->sin6_addr, 8);
        n = 8;
    }
    for (i = 0; i < n; i++) h = (h ^ key[i]) * 16777619u;
    h %= HTTP_ADDR_BUCKETS;
    for (a = http_addrs[h]; a; a = a->next)
        if (a->key_len == n && memcmp(a->key, key, n) == 0) return a;
    a = calloc(1, sizeof *a);
    if (!a) return NULL;
    memcpy(a->key, key, n);
    a->key_len = n;
    a->bucket = h;
    a->next = http_addrs[h];
    http_addrs[h] = a;
    return a;
}

/* One peer of a fewer; the record goes with its last one. */
static void http_addr_put_locked(http_addr *a)
{
    http_addr **q;

    if (--a->peers > 0) return;
    for (q = &http_addrs[a->bucket]; *q; q = &(*q)->next)
        if (*q == a) {
            *q = a->next;
            free(a);
            return;
        }
}

static void http_peer_unlink_locked(http_peer *p)
{
    if (p->prev) p->prev->next = p->next;
    else http_peers_head = p->next;
    if (p->next) p->next->prev = p->prev;
    else http_peers_tail = p->prev;
    p->prev = p->next = NULL;
}

static void http_peer_append_locked(http_peer *p)
{
    p->prev = http_peers_tail;
    p->next = NULL;
    if (http_peers_tail) http_peers_tail->next = p;
    else http_peers_head = p;
    http_peers_tail = p;
}

/* Whether p may be shed: still sending a head or a body, not cut. */
static int http_peer_sheddable(const http_peer *p) { return !p->cut && (!p->head_in || p->in_body); }

/* Move p to state (head_in, in_body, cut), keeping the counts. */
static void http_peer_set_locked(http_peer *p, int head_in, int in_body, int cut)
{
    int was = http_peer_sheddable(p);

    if (cut && !p->cut) http_peers_open--;
    p->head_in = head_in;
    p->in_body = in_body;
    p->cut = cut;
    p->addr->waiting += http_peer_sheddable(p) - was;
}

/* Close p's connection: libmicrohttpd's thread sees the socket end and closes it. */
static void http_peer_cut_locked(http_peer *p)
{
    if (shutdown(p->fd, SHUT_RDWR) != 0 && errno != ENOTCONN)
        log_warn("shutdown of connection socket %d: %s", p->fd, strerror(errno));
    http_peer_set_locked(p, p->head_in, p->in_body, 1);
}

/* Past 90% of max_connections open, cut connections still sending a request head or body
 * (slow heads, trickled bodies, idle keep-alive): each time one of the address with the most
 * of them, its oldest first. Never fresh (just accepted), and never one with bytes not yet
 * read from its socket (a request that came at once, its thread not yet run). A flood from
 * fewer addresses than there are connections always has an address with two or more of
 * them, so a client that holds one connection and sends its request at once is never shed,
 * however fast the flood turns the others over. Called on every accept, and on every
 * watchdog tick (one skipped for its unread bytes may be a candidate by then). */
static void http_shed_locked(const http_peer *fresh)
{
    int keep = guard_cfg->max_connections - guard_cfg->max_connections / HTTP_HEADROOM_DIVISOR;

    while (http_peers_open > keep) {
        http_peer *p, *victim = NULL;
        for (p = http_peers_head; p; p = p->next) {
            int unread = 0;
            if (p == fresh || !http_peer_sheddable(p)) continue;
            if (victim && p->addr->waiting <= victim->addr->waiting) continue;
            if (ioctl(p->fd, FIONREAD, &unread) == 0 && unread > 0) continue;
            victim = p;
        }
        if (!victim) return;
        http_peer_cut_locked(victim);
        http_peers_shed++;
    }
}

/* MHD_OPTION_NOTIFY_CONNECTION: STARTED on the daemon's thread before the connection's
 * thread starts; CLOSED after that thread ended, before the socket is closed. */
void http_guard_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                                   enum MHD_ConnectionNotificationCode code)
{
    http_peer *p;

    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *fd = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *sa = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        if (MHD_FAILED(fd != NULL, "MHD_get_connection_info(MHD_CONNECTION_INFO_CONNECTION_FD)")) return;
        (void)MHD_FAILED(sa != NULL, "MHD_get_connection_info(MHD_CONNECTION_INFO_CLIENT_ADDRESS)");
        pthread_mutex_lock(&http_peers_mu);
        p = calloc(1, sizeof *p);
        if (p) p->addr = http_addr_get_locked(sa ? sa->client_addr : NULL);
        if (!p || !p->addr) { /* untracked, it would escape the head deadline: refuse it */
            pthread_mutex_unlock(&http_peers_mu);
            free(p);
            log_error("out of memory for a connection");
            if (shutdown(fd->connect_fd, SHUT_RDWR) != 0) log_warn("shutdown: %s", strerror(errno));
            return;
        }
        p->fd = fd->connect_fd;
        p->addr->peers++;
        p->addr->waiting++;
        p->waiting_since_s = clock_monotonic_s();
        http_peer_append_locked(p);
        http_peers_open++;
        http_shed_locked(p);
        if (http_peers_open > guard_cfg->max_connections) { /* all busy: refuse this one */
            http_peer_cut_locked(p);
            http_peers_refused++;
        }
        pthread_mutex_unlock(&http_peers_mu);
        *socket_context = p;
        return;
    }
    if (code != MHD_CONNECTION_NOTIFY_CLOSED || !(p = *socket_context)) return;
    /* libmicrohttpd closes its descriptor next; a duplicate keeps the socket for the linger. */
    if (p->linger && !p->cut) {
        int lingering = dup(p->fd);
        if (lingering >= 0) http_linger(lingering);
        else log_warn("dup for a lingering close: %s", strerror(errno));
    }
    pthread_mutex_lock(&http_peers_mu);
    http_peer_set_locked(p, 1, 0, 1); /* neither waiting nor open */
    http_peer_unlink_locked(p);
    http_addr_put_locked(p->addr);
    pthread_mutex_unlock(&http_peers_mu);
    free(p);
    *socket_context = NULL;
}

static http_peer *http_peer_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

    if (MHD_FAILED(info != NULL, "MHD_get_connection_info(MHD_CONNECTION_INFO_SOCKET_CONTEXT)")) return NULL;
    return info->socket_context;
}

/* The access handler's first call: the head is in, the deadline no longer applies. */
void http_guard_head_in(struct MHD_Connection *conn)
{
    http_peer *p = http_peer_of(conn);

    if (!p) return;
    pthread_mutex_lock(&http_peers_mu);
    http_peer_set_locked(p, 1, 0, p->cut);
    pthread_mutex_unlock(&http_peers_mu);
}

void http_guard_body_begins(struct MHD_Connection *conn)
{
    http_peer *p = http_peer_of(conn);

    if (!p) return;
    pthread_mutex_lock(&http_peers_mu);
    p->body_since_s = clock_monotonic_s();
    p->body_bytes = 0;
    http_peer_set_locked(p, 1, 1, p->cut);
    pthread_mutex_unlock(&http_peers_mu);
}

void http_guard_body_piece(struct MHD_Connection *conn, size_t n)
{
    http_peer *p = http_peer_of(conn);

    if (!p) return;
    pthread_mutex_lock(&http_peers_mu);
    p->body_bytes += n;
    pthread_mutex_unlock(&http_peers_mu);
}

void http_guard_body_ends(struct MHD_Connection *conn)
{
    http_peer *p = http_peer_of(conn);

    if (!p) return;
    pthread_mutex_lock(&http_peers_mu);
    if (p->in_body) http_peer_set_locked(p, 1, 0, p->cut);
    pthread_mutex_unlock(&http_peers_mu);
}

void http_guard_linger(struct MHD_Connection *conn)
{
    http_peer *p = http_peer_of(conn);

    if (!p) return;
    pthread_mutex_lock(&http_peers_mu);
    p->linger = 1;
    pthread_mutex_unlock(&http_peers_mu);
}

/* A request completed on a connection that stays open: the next head's deadline starts. */
void http_guard_waiting(struct MHD_Connection *conn)
{
    http_peer *p = http_peer_of(conn);

    if (!p) return;
    pthread_mutex_lock(&http_peers_mu);
    http_peer_set_locked(p, 0, 0, p->cut);
    p->waiting_since_s = clock_monotonic_s();
    http_peer_unlink_locked(p);
    http_peer_append_locked(p);
    pthread_mutex_unlock(&http_peers_mu);
}

/* The watchdog: every HTTP_WATCHDOG_PERIOD_MS, cut the connections whose head is late. */
static void *http_watchdog(void *arg)
{
    unsigned long long logged_cut = 0, logged_shed = 0, logged_refused = 0, logged_bodies = 0;
    double logged_s = 0;

    pthread_mutex_lock(&http_peers_mu);
    while (!http_watchdog_stopping) {
        double now = clock_monotonic_s(), due = now - guard_cfg->header_timeout_s;
        struct timespec until;
        http_peer *p;

        for (p = http_peers_head; p; p = p->next) {
            if (p->head_in || p->cut) continue;
            if (p->waiting_since_s > due) break; /* the rest are younger */
            http_peer_cut_locked(p);
            http_heads_cut++;
        }
        for (p = http_peers_head; p; p = p->next) /* bodies: in no order of deadlines, all looked at */
            if (p->in_body && !p->cut &&
                now - p->body_since_s >
                    guard_cfg->body_timeout_s + (double)p->body_bytes / guard_cfg->body_min_rate_bytes) {
                http_peer_cut_locked(p);
                http_bodies_cut++;
            }
        http_shed_locked(NULL);
        if (now - logged_s >= HTTP_CUT_LOG_PERIOD_S &&
            (http_heads_cut != logged_cut || http_peers_shed != logged_shed || http_peers_refused != logged_refused ||
             http_bodies_cut != logged_bodies)) {
            unsigned long long cut = http_heads_cut - logged_cut, shed = http_peers_shed - logged_shed,
                               refused = http_peers_refused - logged_refused, bodies = http_bodies_cut - logged_bodies;
            int open = http_peers_open;
            logged_cut = http_heads_cut, logged_shed = http_peers_shed, logged_refused = http_peers_refused;
            logged_bodies = http_bodies_cut;
            logged_s = now;
            pthread_mutex_unlock(&http_peers_mu);
            log_warn("connections: %llu closed for a request head not in within header_timeout_s=%d, %llu for a body "
                     "slower than body_timeout_s=%d + 1 s per %d bytes, %llu sending one shed past 90%% of "
                     "max_connections=%d, %llu refused at it; %d open now",
                     cut, guard_cfg->header_timeout_s, bodies, guard_cfg->body_timeout_s,
                     guard_cfg->body_min_rate_bytes, shed, guard_cfg->max_connections, refused, open);
            pthread_mutex_lock(&http_peers_mu);
        }
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += HTTP_WATCHDOG_PERIOD_MS * 1000000L;
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&http_watchdog_cv, &http_peers_mu, &until);
    }
    pthread_mutex_unlock(&http_peers_mu);
    return NULL;
}

int http_guard_start(const settings *s, char *err, size_t err_len)
{
    pthread_condattr_t a;
    int rc;

    if ((rc = pthread_condattr_init(&a)) != 0) {
        snprintf(err, err_len, "cannot set up the connection watchdog: %s", strerror(rc));
        return -1;
    }
    if ((rc = pthread_condattr_setclock(&a, CLOCK_MONOTONIC)) == 0) rc = pthread_cond_init(&http_watchdog_cv, &a);
    pthread_condattr_destroy(&a);
    if (rc != 0) {
        snprintf(err, err_len, "cannot set up the connection watchdog: %s", strerror(rc));
        return -1;
    }
    guard_cfg = s;
    http_watchdog_stopping = 0;
    if (http_linger_start(err, err_len) != 0) {
        pthread_cond_destroy(&http_watchdog_cv);
        return -1;
    }
    if ((rc = pthread_create(&http_watchdog_thread, NULL, http_watchdog, NULL)) != 0) {
        snprintf(err, err_len, "cannot start the connection watchdog: %s", strerror(rc));
        pthread_cond_destroy(&http_watchdog_cv);
        http_linger_stop();
        return -1;
    }
    http_watchdog_started = 1;
    return 0;
}

void http_guard_stop(void)
{
    if (!http_watchdog_started) return;
    pthread_mutex_lock(&http_peers_mu);
    http_watchdog_stopping = 1;
    pthread_cond_signal(&http_watchdog_cv);
    pthread_mutex_unlock(&http_peers_mu);
    pthread_join(http_watchdog_thread, NULL);
    pthread_cond_destroy(&http_watchdog_cv);
    http_linger_stop();
    http_watchdog_started = 0;
}

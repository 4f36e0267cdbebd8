/* settings.c — every setting of attnd from one table (settings.h).
 *
 * The table below is the only list of settings. It drives, in this order of precedence:
 *   1. defaults (the `def` column, parsed by the same code as every other source),
 *   2. the JSON config file (--config FILE, else ATTND_CONFIG, else config/attnd.json when
 *      it exists in the current directory); an unknown key is an error,
 *   3. the environment, ATTND_<NAME> (ATTND_QUEUE_DEPTH),
 *   4. the flags, --queue-depth N or --queue-depth=N (underscores become dashes),
 * and `attnd --help`. Every value goes through setting_apply, so bounds and spelling are
 * checked the same way whatever the source, and every error names the source, the setting,
 * the value and what was expected.
 */
#include "common/settings.h"
#include "common/grow.h"
#include "common/parse_int.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <cjson/cJSON.h>

typedef enum setting_type { SETTING_STRING, SETTING_INT, SETTING_INT64, SETTING_BOOL } setting_type;

typedef struct setting_def {
    const char *name;   /* config key; env ATTND_<UPPER>; flag --<dashed> */
    setting_type type;
    size_t offset;      /* into struct settings */
    size_t size;        /* bytes of the field (strings: the buffer, NUL included) */
    const char *def;    /* the default, spelled as a flag value would be */
    long long min, max; /* inclusive bounds of numbers */
    const char *units;  /* shown by --help; "" when none */
    const char *help;
    /* Further checks of a string value; NULL when any string fits. 0 or -1 with why. */
    int (*check)(const char *value, char *why, size_t why_len);
} setting_def;

static int check_listen(const char *value, char *why, size_t why_len);
static int check_devices(const char *value, char *why, size_t why_len);
static int check_log_level(const char *value, char *why, size_t why_len);
static int check_price(const char *value, char *why, size_t why_len);
static int check_store(const char *value, char *why, size_t why_len);
static int check_node(const char *value, char *why, size_t why_len);

#define FIELD(f) offsetof(settings, f), sizeof(((settings *)0)->f)

static const setting_def setting_table[] = {
    {"listen", SETTING_STRING, FIELD(listen), "127.0.0.1:8080", 0, 0, "host:port",
     "address to serve HTTP on: IPv4 host:port or [IPv6]:port; port 0 picks a free one", check_listen},
    {"data_dir", SETTING_STRING, FIELD(data_dir), "./data", 0, 0, "path",
     "directory of the SQLite database (attnd.db) and other state; created when missing", NULL},
    {"config", SETTING_STRING, FIELD(config), "", 0, 0, "path",
     "JSON config file; default: config/attnd.json when it exists in the current directory", NULL},
    {"devices", SETTING_STRING, FIELD(devices), "all", 0, 0, "list",
     "GPUs to serve: all, none, or CUDA ordinals such as 0,2; the cpu device is always served",
     check_devices},
    {"queue_depth", SETTING_INT, FIELD(queue_depth), "64", 1, 100000, "jobs",
     "jobs that may wait per device; one more gets 429 with Retry-After", NULL},
    {"job_timeout_s", SETTING_INT, FIELD(job_timeout_s), "300", 1, 86400, "s",
     "a job running longer is failed and its worker killed and restarted", NULL},
    {"max_body_bytes", SETTING_INT64, FIELD(max_body_bytes), "1048576", 1024, 64LL << 30, "bytes",
     "request bodies larger than this get 413", NULL},
    {"max_upload_bytes", SETTING_INT64, FIELD(max_upload_bytes), "68719476736", 1024, 1LL << 40, "bytes",
     "tensor uploads (streamed bodies) larger than this get 413 before any byte is read", NULL},
    {"max_connections", SETTING_INT, FIELD(max_connections), "512", 16, 65536, "connections",
     "open HTTP connections (one thread each); beyond it new connections are refused, and under "
     "pressure the oldest ones still sending their request head are closed first", NULL},
    {"max_connections_per_ip", SETTING_INT, FIELD(max_connections_per_ip), "64", 1, 65536, "connections",
     "open HTTP connections from one client address; more are closed as they are accepted", NULL},
    {"header_timeout_s", SETTING_INT, FIELD(header_timeout_s), "60", 1, 3600, "s",
     "a request's whole head (request line and headers) must arrive within this, however it "
     "trickles; else the connection is closed (nginx's client_header_timeout)", NULL},
    {"body_timeout_s", SETTING_INT, FIELD(body_timeout_s), "20", 1, 3600, "s",
     "a request body must arrive within this plus one second for every body_min_rate_bytes it brought, "
     "however it trickles; else the connection is closed (Apache's mod_reqtimeout body=20,MinRate)", NULL},
    {"body_min_rate_bytes", SETTING_INT, FIELD(body_min_rate_bytes), "1024", 1, 1 << 30, "bytes/s",
     "the slowest average rate a body may arrive at once body_timeout_s has passed", NULL},
    {"idle_timeout_s", SETTING_INT, FIELD(idle_timeout_s), "75", 1, 86400, "s",
     "a connection that sends or takes no byte this long is closed: keep-alive, a stalled body "
     "or a stalled reader (nginx's keepalive_timeout)", NULL},
    {"memory_budget_bytes", SETTING_INT64, FIELD(memory_budget_bytes), "0", 0, 1LL << 50, "bytes",
     "device memory a worker may hold per device; 0: the device's free memory", NULL},
    {"max_tensors", SETTING_INT, FIELD(max_tensors), "4096", 1, 1000000, "tensors",
     "resident tensors held at once, gone ones included until deleted; an upload past it gets 507 "
     "before anything is stored", NULL},
    {"token_file", SETTING_STRING, FIELD(token_file), "", 0, 0, "path",
     "file of bearer tokens, one a line; empty: no authentication", NULL},
    {"public_reads", SETTING_BOOL, FIELD(public_reads), "false", 0, 1, "",
     "with token_file: GET and HEAD requests need no token (POST still does)", NULL},
    {"tls_cert_file", SETTING_STRING, FIELD(tls_cert_file), "", 0, 0, "path",
     "PEM certificate (chain) to serve HTTPS with, together with tls_key_file; empty: plain HTTP", NULL},
    {"tls_key_file", SETTING_STRING, FIELD(tls_key_file), "", 0, 0, "path",
     "PEM private key of tls_cert_file", NULL},
    {"log_level", SETTING_STRING, FIELD(log_level), "info", 0, 0, "level",
     "error, warn, info or debug", check_log_level},
    {"verify_cpu_max_macs", SETTING_INT64, FIELD(verify_cpu_max_macs), "1000000000", 0,
     1000000000000000LL, "MACs",
     "verify on the cpu fp64 reference up to this many B*H*Sq*Skv*D; above, a GPU fp32 reference", NULL},
    {"cpu_max_macs", SETTING_INT64, FIELD(cpu_max_macs), "10000000000", 0, 1000000000000000LL, "MACs",
     "a run on the cpu device whose forwards together cost more than this many multiply-accumulates "
     "((warmup + iters, or max_iters under the stopping rule, + 1) * H*D * the sum over sequences of "
     "Sq*Skv, B*Sq*Skv when every sequence has the same lengths) is refused 422 with the estimate and an "
     "iters and a seq (or shorter lengths) that fit, before it holds the one cpu worker (the default, "
     "seconds of fp64 on two cores, refuses the study's default shape even at iters=1); 0: no limit", NULL},
    {"cpu_threads", SETTING_INT, FIELD(cpu_threads), "0", 0, 1024, "threads",
     "threads a worker's CPU work may use: the cpu reference, output fingerprints, the download's fills; "
     "0: one per core", NULL},
    {"enable_fault_injection", SETTING_BOOL, FIELD(enable_fault_injection), "false", 0, 1, "",
     "accept the `fault` run parameter (crash|hang|sticky); for tests only", NULL},
    {"pending_features", SETTING_BOOL, FIELD(pending_features), "false", 0, 1, "",
     "offer the features whose kernels are written but not yet validated on a GPU (GET /v1/variants lists "
     "them as pending_features): for the run on a GPU that validates them, never in service", NULL},
    {"models_file", SETTING_STRING, FIELD(models_file), "", 0, 0, "path",
     "the model presets that model=NAME takes (GET /v1/models); default: config/models.json found in the "
     "current directory or beside the binary", NULL},
    {"dashboard_dir", SETTING_STRING, FIELD(dashboard_dir), "", 0, 0, "path",
     "static files of the dashboard (GET /); empty: clients/dashboard in the cwd or beside the binary", NULL},
    {"cudnn_library", SETTING_STRING, FIELD(cudnn_library), "", 0, 0, "path",
     "cuDNN for the cudnn variant: a libcudnn.so.9 or a directory holding it, whose sub-libraries "
     "are loaded from the same directory; empty: the dynamic loader's search for libcudnn.so.9", NULL},
    {"flashinfer_library", SETTING_STRING, FIELD(flashinfer_library), "", 0, 0, "path",
     "attnd's FlashInfer module for the flashinfer variant (make flashinfer builds it); empty: "
     "lib/libattnd_flashinfer.so beside attnd-worker", NULL},
    {"price_per_hour", SETTING_STRING, FIELD(price_per_hour), "", 0, 0, "amount",
     "what this machine costs an hour, e.g. 2.49 or \"2.49 USD\": GPU runs then report "
     "energy.cost_per_million_forwards; empty: not reported", check_price},
    {"cupti", SETTING_BOOL, FIELD(cupti), "true", 0, 1, "",
     "GPU workers load CUPTI for the kernel table and the trace; false: they never load it "
     "(profile=true runs fail), to measure host cost without it", NULL},
    {"nvtx_to_cupti", SETTING_BOOL, FIELD(nvtx_to_cupti), "true", 0, 1, "",
     "route the workers' NVTX ranges into CUPTI, so traces show the variants' phases "
     "(user_annotation events)", NULL},
    {"store", SETTING_STRING, FIELD(store), "sqlite", 0, 0, "where",
     "where the run history lives: sqlite (data_dir/attnd.db, this machine only) or PostgreSQL, "
     "shared by a fleet: postgresql://user@host/db, key=value words, or just postgresql to take "
     "everything from the PG* environment; records wait in data_dir's outbox while it is unreachable",
     check_store},
    {"node", SETTING_STRING, FIELD(node), "", 0, 0, "name",
     "this attnd's name in the fleet, stored in every run and tensor; empty: the host name", check_node},
    {"heartbeat_s", SETTING_INT, FIELD(heartbeat_s), "5", 1, 3600, "s",
     "how often this node writes its heartbeat (devices, version) for GET /v1/nodes", NULL},
};

#define SETTING_COUNT (sizeof setting_table / sizeof setting_table[0])

/* ---------------------------------------------------------------- names and spellings -- */

static void setting_env_name(const setting_def *d, char *out, size_t out_len)
{
    size_t i, n = 0;
    const char *prefix = "ATTND_";

    for (i = 0; prefix[i] && n + 1 < out_len; i++) out[n++] = prefix[i];
    for (i = 0; d->name[i] && n + 1 < out_len; i++) out[n++] = (char)toupper((unsigned char)d->name[i]);
    out[n] = '\0';
}

static void setting_flag_name(const setting_def *d, char *out, size_t out_len)
{
    size_t i, n = 0;

    for (i = 0; i < 2 && n + 1 < out_len; i++) out[n++] = '-';
    for (i = 0; d->name[i] && n + 1 < out_len; i++) out[n++] = d->name[i] == '_' ? '-' : d->name[i];
    out[n] = '\0';
}

static const setting_def *setting_by_name(const char *name)
{
    size_t i;
    for (i = 0; i < SETTING_COUNT; i++)
        if (strcmp(setting_table[i].name, name) == 0) return &setting_table[i];
    return NULL;
}

/* The setting whose flag is `--flag` (flag holds the text between "--" and any "="). */
static const setting_def *setting_by_flag(const char *flag, size_t flag_len)
{
    size_t i, j;

    for (i = 0; i < SETTING_COUNT; i++) {
        const char *n = setting_table[i].name;
        if (strlen(n) != flag_len) continue;
        for (j = 0; j < flag_len; j++)
            if ((n[j] == '_' ? '-' : n[j]) != flag[j]) break;
        if (j == flag_len) return &setting_table[i];
    }
    return NULL;
}

/* ----------------------------------------------------------------- value parsing -------- */

static int parse_bool_word(const char *v, int *out)
{
    static const char *const yes[] = {"true", "1", "yes"}, *const no[] = {"false", "0", "no"};
    size_t i;

    for (i = 0; i < 3; i++) {
        if (strcasecmp(v, yes[i]) == 0) return *out = 1, 0;
        if (strcasecmp(v, no[i]) == 0) return *out = 0, 0;
    }
    return -1;
}

/* Set one setting from its text form. `source` names where the value came from, for the
 * message ("flag --queue-depth", "ATTND_QUEUE_DEPTH", "config file x.json"). */
static int setting_apply(settings *s, const setting_def *d, const char *value, const char *source, char *err,
                         size_t err_len)
{
    char *field = (char *)s + d->offset;
    char why[256];
    long long x;
    int b;

    switch (d->type) {
    case SETTING_STRING:
        if (strlen(value) >= d->size) {
            snprintf(err, err_len, "%s: %s is %zu characters long; at most %zu fit", source, d->name,
                     strlen(value), d->size - 1);
            return -1;
        }
        if (d->check && d->check(value, why, sizeof why) != 0) {
            snprintf(err, err_len, "%s: %s '%s' is not valid: %s", source, d->name, value, why);
            return -1;
        }
        memcpy(field, value, strlen(value) + 1);
        return 0;
    case SETTING_BOOL:
        if (parse_bool_word(value, &b) != 0) {
            snprintf(err, err_len, "%s: %s must be true/false/1/0/yes/no, got '%s'", source, d->name, value);
            return -1;
        }
        *(int *)field = b;
        return 0;
    case SETTING_INT:
    case SETTING_INT64:
        if (parse_int(value, &x) != 0) {
            snprintf(err, err_len, "%s: %s must be a decimal integer, got '%s'", source, d->name, value);
            return -1;
        }
        if (x < d->min || x > d->max) {
            snprintf(err, err_len, "%s: %s %lld is out of range (%lld..%lld%s%s)", source, d->name, x, d->min,
                     d->max, d->units[0] ? " " : "", d->units);
            return -1;
        }
        if (d->type == SETTING_INT)
            *(int *)field = (int)x;
        else
            *(long long *)field = x;
        return 0;
    }
    snprintf(err, err_len, "%s: %s has an unknown type", source, d->name);
    return -1;
}

/* ----------------------------------------------------------------- string checks -------- */

static int check_listen(const char *value, char *why, size_t why_len)
{
    const char *colon, *port;
    long long p;

    if (value[0] == '[') {
        const char *close = strchr(value, ']');
        if (!close || close == value + 1 || close[1] != ':') {
            snprintf(why, why_len, "an IPv6 address is written [addr]:port");
            return -1;
        }
        port = close + 2;
    } else {
        colon = strrchr(value, ':');
        if (!colon || colon == value) {
            snprintf(why, why_len, "expected host:port");
            return -1;
        }
        if (memchr(value, ':', (size_t)(colon - value))) {
            snprintf(why, why_len, "write IPv6 addresses in brackets, [addr]:port");
            return -1;
        }
        port = colon + 1;
    }
    if (port[0] == '-' || port[0] == '+' || parse_int(port, &p) != 0 || p < 0 || p > 65535) {
        snprintf(why, why_len, "the port must be 0..65535 (0: any free port)");
        return -1;
    }
    return 0;
}

static int check_devices(const char *value, char *why, size_t why_len)
{
    const char *p = value;

    if (strcmp(value, "all") == 0 || strcmp(value, "none") == 0) return 0;
    for (;;) {
        const char *start = p;
        while (isdigit((unsigned char)*p)) p++;
        if (p == start || p - start > 4) break;
        if (*p == '\0') return 0;
        if (*p != ',') break;
        p++;
    }
    snprintf(why, why_len, "expected all, none, or CUDA ordinals separated by commas such as 0,2");
    return -1;
}

/* "2.49" or "2.49 USD": a positive finite decimal, then optionally one space and a
 * three-letter currency code. */
static int price_parse(const char *value, double *amount, char currency[4])
{
    char *end;
    double x;

    if (!value[0] || !(isdigit((unsigned char)value[0]) || value[0] == '.')) return -1;
    errno = 0;
    x = strtod(value, &end);
    if (errno || !isfinite(x) || x <= 0.0) return -1;
    currency[0] = '\0';
    if (*end == ' ' && isupper((unsigned char)end[1]) && isupper((unsigned char)end[2]) &&
        isupper((unsigned char)end[3]) && end[4] == '\0') {
        memcpy(currency, end + 1, 3);
        currency[3] = '\0';
    } else if (*end != '\0') {
        return -1;
    }
    *amount = x;
    return 0;
}

static int check_price(const char *value, char *why, size_t why_len)
{
    double amount;
    char currency[4];
    if (!value[0] || price_parse(value, &amount, currency) == 0) return 0;
    snprintf(why, why_len, "'%s' is not a price: a positive number, optionally followed by a space and a "
             "currency code (2.49 or \"2.49 USD\")", value);
    return -1;
}

static int check_store(const char *value, char *why, size_t why_len)
{
    if (!strcmp(value, "sqlite") || !strcmp(value, "postgresql") || !strcmp(value, "postgres") ||
        !strncmp(value, "postgresql://", 13) || !strncmp(value, "postgres://", 11) || strchr(value, '='))
        return 0;
    snprintf(why, why_len, "'%.80s' is not a store: sqlite, postgresql (the PG* environment), a "
             "postgresql:// URI or key=value connection words", value);
    return -1;
}

/* A node name goes into URLs' query strings and the dashboard: keep it to a host name's letters. */
static int check_node(const char *value, char *why, size_t why_len)
{
    const char *p;
    for (p = value; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr("-_.", *p)) {
            snprintf(why, why_len, "'%.80s' is not a node name: letters, digits, '-', '_' and '.' only", value);
            return -1;
        }
    return 0;
}

int settings_store_is_postgresql(const settings *s) { return strcmp(s->store, "sqlite") != 0; }

int settings_price(const settings *s, double *amount, char currency[4])
{
    return s->price_per_hour[0] && price_parse(s->price_per_hour, amount, currency) == 0 ? 0 : -1;
}

static int check_log_level(const char *value, char *why, size_t why_len)
{
    if (!strcmp(value, "error") || !strcmp(value, "warn") || !strcmp(value, "info") || !strcmp(value, "debug"))
        return 0;
    snprintf(why, why_len, "expected error, warn, info or debug");
    return -1;
}

/* ----------------------------------------------------------------- the config file ------ */

static char *read_file_text(const char *path, char *err, size_t err_len)
{
    FILE *f = fopen(path, "rb");
    char *text = NULL;
    size_t len = 0, cap = 0;

    if (!f) {
        snprintf(err, err_len, "cannot open config file %s: %s", path, strerror(errno));
        return NULL;
    }
    for (;;) {
        size_t n;
        if (cap - len < 4096) {
            if (cap > (16u << 20)) {
                snprintf(err, err_len, "config file %s is larger than 16 MiB", path);
                goto fail;
            }
            if (grow_array(&text, &cap, cap + 4096, 1, 8192) != 0) {
                snprintf(err, err_len, "out of memory reading config file %s", path);
                goto fail;
            }
        }
        n = fread(text + len, 1, cap - len - 1, f);
        len += n;
        if (n == 0) break;
    }
    if (ferror(f)) {
        snprintf(err, err_len, "cannot read config file %s: %s", path, strerror(errno));
        goto fail;
    }
    fclose(f);
    text[len] = '\0';
    return text;
fail:
    fclose(f);
    free(text);
    return NULL;
}

static int settings_apply_file(settings *s, const char *path, char *err, size_t err_len)
{
    char source[600], num[64];
    const char *end = NULL;
    char *text = read_file_text(path, err, err_len);
    cJSON *root, *item;
    int rc = -1;

    if (!text) return -1;
    root = cJSON_ParseWithOpts(text, &end, 1);
    if (!root || !cJSON_IsObject(root)) {
        if (!root)
            snprintf(err, err_len, "config file %s is not valid JSON (at byte %ld)", path,
                     end ? (long)(end - text) : -1L);
        else
            snprintf(err, err_len, "config file %s must hold one JSON object", path);
        goto out;
    }
    snprintf(source, sizeof source, "config file %s", path);
    cJSON_ArrayForEach(item, root) {
        const setting_def *d = setting_by_name(item->string ? item->string : "");
        const char *value = NULL;

        if (!d) {
            snprintf(err, err_len, "%s: unknown key '%s' (attnd --help lists the settings)", source,
                     item->string ? item->string : "");
            goto out;
        }
        if (strcmp(d->name, "config") == 0) {
            snprintf(err, err_len, "%s: 'config' cannot be set inside a config file", source);
            goto out;
        }
        /* JSON types map onto the text a flag would carry, so one parser checks them all. */
        if (cJSON_IsString(item)) {
            value = item->valuestring;
        } else if (cJSON_IsBool(item) && d->type == SETTING_BOOL) {
            value = cJSON_IsTrue(item) ? "true" : "false";
        } else if (cJSON_IsNumber(item) && (d->type == SETTING_INT || d->type == SETTING_INT64)) {
            double x = item->valuedouble;
            if (x != floor(x) || fabs(x) > 9007199254740992.0) {
                snprintf(err, err_len, "%s: %s must be an integer, got %g", source, d->name, x);
                goto out;
            }
            snprintf(num, sizeof num, "%.0f", x);
            value = num;
        } else {
            snprintf(err, err_len, "%s: %s must be a JSON %s", source, d->name,
                     d->type == SETTING_STRING ? "string" : d->type == SETTING_BOOL ? "boolean" : "integer");
            goto out;
        }
        if (setting_apply(s, d, value, source, err, err_len) != 0) goto out;
    }
    rc = 0;
out:
    cJSON_Delete(root);
    free(text);
    return rc;
}

/* ----------------------------------------------------------------- load ----------------- */

static int is_help_flag(const char *a) { return !strcmp(a, "--help") || !strcmp(a, "-h"); }

int settings_load(settings *s, int argc, char **argv, char *err, size_t err_len)
{
    const char *config_path = NULL;
    char name[80], source[120];
    size_t i;
    int a;

    memset(s, 0, sizeof *s);
    for (i = 0; i < SETTING_COUNT; i++)
        if (setting_apply(s, &setting_table[i], setting_table[i].def, "default", err, err_len) != 0) return -1;

    /* --help wins over everything, even over a broken config file. */
    for (a = 1; a < argc; a++)
        if (is_help_flag(argv[a])) {
            settings_print_help(stdout);
            return 1;
        }

    /* Which config file: the flag, else the environment, else the conventional path. */
    for (a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--config")) {
            if (a + 1 >= argc) {
                snprintf(err, err_len, "flag --config needs a value");
                return -1;
            }
            config_path = argv[++a];
        } else if (!strncmp(argv[a], "--config=", 9)) {
            config_path = argv[a] + 9;
        }
    }
    if (!config_path) config_path = getenv("ATTND_CONFIG");
    if (!config_path && access("config/attnd.json", R_OK) == 0) config_path = "config/attnd.json";
    if (config_path && config_path[0]) {
        if (setting_apply(s, setting_by_name("config"), config_path, "config", err, err_len) != 0) return -1;
        if (settings_apply_file(s, config_path, err, err_len) != 0) return -1;
    }

    for (i = 0; i < SETTING_COUNT; i++) {
        const char *v;
        setting_env_name(&setting_table[i], name, sizeof name);
        v = getenv(name);
        if (!v || !strcmp(setting_table[i].name, "config")) continue;
        if (setting_apply(s, &setting_table[i], v, name, err, err_len) != 0) return -1;
    }

    for (a = 1; a < argc; a++) {
        const char *arg = argv[a], *eq, *value;
        const setting_def *d;
        size_t flag_len;

        if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0') {
            snprintf(err, err_len, "unexpected argument '%s' (attnd --help lists the flags)", arg);
            return -1;
        }
        eq = strchr(arg + 2, '=');
        flag_len = eq ? (size_t)(eq - (arg + 2)) : strlen(arg + 2);
        d = setting_by_flag(arg + 2, flag_len);
        if (!d) {
            snprintf(err, err_len, "unknown flag '%.*s' (attnd --help lists the flags)", (int)(flag_len + 2), arg);
            return -1;
        }
        setting_flag_name(d, name, sizeof name);
        snprintf(source, sizeof source, "flag %s", name);
        if (eq) {
            value = eq + 1;
        } else if (d->type == SETTING_BOOL) {
            /* A bare boolean flag means true; it takes the next argument only when that is a
             * boolean word (--enable-fault-injection false). */
            int b;
            if (a + 1 < argc && parse_bool_word(argv[a + 1], &b) == 0)
                value = argv[++a];
            else
                value = "true";
        } else {
            if (a + 1 >= argc) {
                snprintf(err, err_len, "flag %s needs a value", name);
                return -1;
            }
            value = argv[++a];
        }
        if (setting_apply(s, d, value, source, err, err_len) != 0) return -1;
    }
    return 0;
}

void settings_print_help(FILE *out)
{
    char flag[80], env[80], spelled[120];
    size_t i;

    fprintf(out,
            "usage: attnd [flags]                        serve attention benchmarks over HTTP (docs/api.md)\n"
            "       attnd batch PLAN.json [--out FILE] [flags]\n"
            "                                            run a plan's runs here, no listener (attnd batch --help)\n"
            "       attnd --version                      what built this binary\n"
            "\n"
            "Every setting is read, in increasing precedence, from its default, the JSON config\n"
            "file (key), the environment (ATTND_*) and the flag. Booleans: true/false/1/0/yes/no;\n"
            "a bare boolean flag means true.\n"
            "\n");
    for (i = 0; i < SETTING_COUNT; i++) {
        const setting_def *d = &setting_table[i];
        setting_flag_name(d, flag, sizeof flag);
        setting_env_name(d, env, sizeof env);
        if (d->type == SETTING_BOOL) {
            snprintf(spelled, sizeof spelled, "%s [BOOL]", flag);
        } else if (d->type == SETTING_STRING) {
            size_t k, n = (size_t)snprintf(spelled, sizeof spelled, "%s ", flag);
            for (k = 0; d->units[k] && n + 1 < sizeof spelled; k++)
                spelled[n++] = (char)toupper((unsigned char)d->units[k]);
            spelled[n] = '\0';
        } else {
            snprintf(spelled, sizeof spelled, "%s N", flag);
        }
        fprintf(out, "  %-32s %s\n", spelled, d->help);
        fprintf(out, "  %-32s env %s, key \"%s\", default ", "", env, d->name);
        if (d->type == SETTING_STRING)
            fprintf(out, "\"%s\"", d->def);
        else
            fprintf(out, "%s", d->def);
        if (d->units[0]) fprintf(out, " (%s", d->units);
        if (d->type == SETTING_INT || d->type == SETTING_INT64)
            fprintf(out, "%s%lld..%lld", d->units[0] ? ", " : " (", d->min, d->max);
        if (d->units[0] || d->type == SETTING_INT || d->type == SETTING_INT64) fputc(')', out);
        fputc('\n', out);
    }
    fprintf(out,
            "\n"
            "  %-32s show this help and exit\n"
            "\n"
            "attnd starts attnd-worker, from its own folder, for each device (docs/architecture.md).\n",
            "--help, -h");
}

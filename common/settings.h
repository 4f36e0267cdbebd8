/* settings.h — every setting of attnd, from one table (settings.c) that drives the config
 * file, the ATTND_* environment, the command-line flags and `attnd --help` alike.
 * Precedence: defaults < config file < environment < flags. */
#ifndef SETTINGS_H
#define SETTINGS_H

#include <stdio.h>

typedef struct settings {
    char listen[128];             /* host:port; 127.0.0.1:8080 */
    char data_dir[512];           /* SQLite file (attnd.db) and other state; ./data */
    char config[512];             /* the config file read; "" for none */
    char devices[128];            /* GPUs to serve: "all", "none" or "0,2"; cpu always */
    int queue_depth;              /* jobs waiting per device before 429 */
    int job_timeout_s;            /* a job running longer is killed with its worker */
    long long max_body_bytes;     /* request bodies larger get 413 */
    long long max_upload_bytes;   /* a streamed body (tensor upload) larger gets 413 */
    int max_connections;          /* open HTTP connections (one thread each) */
    int max_connections_per_ip;   /* open HTTP connections from one client address */
    int header_timeout_s;         /* a request's whole head must arrive within this */
    int idle_timeout_s;           /* a connection silent this long is closed */
    int body_timeout_s;           /* a body's allowance: this, plus its bytes at body_min_rate_bytes */
    int body_min_rate_bytes;      /* … a second */
    int max_tensors;              /* resident tensors in the table at once */
    long long cpu_max_macs;       /* a cpu run whose forwards together cost more is refused 422 */
    long long memory_budget_bytes;/* per device; 0: the device's free memory */
    char token_file[512];         /* bearer tokens, one a line; "": no auth */
    int public_reads;             /* with token_file: GET/HEAD need no token */
    char tls_cert_file[512];      /* PEM certificate: serve HTTPS; "": plain HTTP */
    char tls_key_file[512];       /* PEM private key of tls_cert_file */
    char log_level[16];           /* error|warn|info|debug */
    long long verify_cpu_max_macs;/* verify on the cpu device up to this many B·H·Sq·Skv·D */
    int cpu_threads;              /* threads of the cpu reference; 0: one per core */
    int enable_fault_injection;   /* accept the `fault` run parameter (tests only) */
    int pending_features;         /* offer the variants' pending_features (the run on a GPU that validates them) */
    char dashboard_dir[512];      /* static files of GET /; "": found beside the binary or cwd */
    char models_file[512];        /* model presets (model=NAME); "": config/models.json beside the binary or cwd */
    char cudnn_library[512];      /* libcudnn.so.9 or its directory; "": the loader's search */
    char flashinfer_library[512]; /* libattnd_flashinfer.so; "": lib/ beside the worker */
    char price_per_hour[32];      /* what the box costs an hour, "2.49" or "2.49 USD"; "": unknown */
    int cupti;                    /* GPU workers load CUPTI (kernel table, trace); 0: never */
    int nvtx_to_cupti;            /* NVTX ranges reach CUPTI, so traces show them */
    char store[1024];             /* "sqlite" (data_dir/attnd.db) or a PostgreSQL connection string */
    char node[128];               /* this attnd's name in the fleet; "": the host name */
    int heartbeat_s;              /* how often the node's heartbeat is written to the store */
} settings;

/* Whether s->store names PostgreSQL (anything but "sqlite"). */
int settings_store_is_postgresql(const settings *s);

/* price_per_hour as an amount (> 0) and its currency ("" when none was given). 0, or -1
 * when no price is set. */
int settings_price(const settings *s, double *amount, char currency[4]);

/* Fill s: defaults, then the config file (--config / ATTND_CONFIG, or config/attnd.json when
 * present), then ATTND_* variables, then flags. Returns 0; 1 when --help was printed (exit
 * 0); -1 with err filled for an unknown flag, a bad value or an unreadable config file. */
int settings_load(settings *s, int argc, char **argv, char *err, size_t err_len);

void settings_print_help(FILE *out);

#endif

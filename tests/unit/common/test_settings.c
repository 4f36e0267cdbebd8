/* test_settings.c — settings_load: defaults < config file < ATTND_* < flags, the errors
 * that name the setting and value, and --help.
 *
 * Runs in a fresh temporary directory (no config/attnd.json there) with every ATTND_*
 * variable removed first, so the machine's environment cannot leak in. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/settings.h"
#include "tests/unit/check.h"

extern char **environ;

static char tmpdir[256];

static int load(settings *s, char *err, size_t len, int argc, char **argv)
{
    err[0] = '\0';
    return settings_load(s, argc, argv, err, len);
}

#define ARGV(...) ((char *[]){"attnd", __VA_ARGS__, NULL})
#define ARGC(...) ((int)(sizeof((char *[]){"attnd", __VA_ARGS__}) / sizeof(char *)))
#define LOAD(s, err, ...) load((s), (err), sizeof(err), ARGC(__VA_ARGS__), ARGV(__VA_ARGS__))

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
        perror(path);
        exit(2);
    }
}

static void clear_attnd_env(void)
{
    char name[256];
    int again = 1;
    while (again) {
        char **e;
        again = 0;
        for (e = environ; *e; e++)
            if (!strncmp(*e, "ATTND_", 6)) {
                size_t n = strcspn(*e, "=");
                snprintf(name, sizeof name, "%.*s", (int)n, *e);
                unsetenv(name);
                again = 1;
                break;
            }
    }
}

static void test_defaults(void)
{
    settings s;
    char err[512];
    char *argv[] = {"attnd", NULL};

    CHECK(load(&s, err, sizeof err, 1, argv) == 0, "defaults: %s", err);
    CHECK(!strcmp(s.listen, "127.0.0.1:8080"), "listen %s", s.listen);
    CHECK(!strcmp(s.data_dir, "./data"), "data_dir %s", s.data_dir);
    CHECK(!strcmp(s.config, ""), "config '%s'", s.config);
    CHECK(!strcmp(s.devices, "all"), "devices %s", s.devices);
    CHECK(s.queue_depth == 64, "queue_depth %d", s.queue_depth);
    CHECK(s.job_timeout_s == 300, "job_timeout_s %d", s.job_timeout_s);
    CHECK(s.max_body_bytes == 1048576, "max_body_bytes %lld", s.max_body_bytes);
    CHECK(s.memory_budget_bytes == 0, "memory_budget_bytes");
    CHECK(!strcmp(s.token_file, ""), "token_file");
    CHECK(!strcmp(s.log_level, "info"), "log_level");
    CHECK(s.verify_cpu_max_macs == 1000000000LL, "verify_cpu_max_macs");
    CHECK(s.cpu_threads == 0, "cpu_threads");
    CHECK(s.enable_fault_injection == 0, "enable_fault_injection");
    CHECK(!strcmp(s.cudnn_library, ""), "cudnn_library '%s'", s.cudnn_library);
    CHECK(s.cupti == 1, "cupti %d", s.cupti);
    CHECK(s.nvtx_to_cupti == 1, "nvtx_to_cupti %d", s.nvtx_to_cupti);
}

/* The profiler switches, once environment variables read by the worker, are settings: the
 * same names in the environment as before (ATTND_NVTX_TO_CUPTI=0 still works), a flag each. */
static void test_profiler_switches(void)
{
    settings s;
    char err[512];
    char *bare[] = {"attnd", NULL};

    setenv("ATTND_NVTX_TO_CUPTI", "0", 1);
    CHECK(load(&s, err, sizeof err, 1, bare) == 0 && s.nvtx_to_cupti == 0 && s.cupti == 1, "env: %s nvtx %d", err,
          s.nvtx_to_cupti);
    CHECK(LOAD(&s, err, "--nvtx-to-cupti") == 0 && s.nvtx_to_cupti == 1, "bare flag over env: %s", err);
    unsetenv("ATTND_NVTX_TO_CUPTI");
    setenv("ATTND_CUPTI", "false", 1);
    CHECK(load(&s, err, sizeof err, 1, bare) == 0 && s.cupti == 0, "ATTND_CUPTI=false: %s", err);
    unsetenv("ATTND_CUPTI");
    CHECK(LOAD(&s, err, "--cupti=no") == 0 && s.cupti == 0, "--cupti=no: %s", err);
    CHECK(LOAD(&s, err, "--cupti=maybe") == -1 && strstr(err, "cupti"), "bad value: %s", err);
}

/* cudnn_library in its three spellings: any string (the loader reports a bad one in
 * /v1/variants, it does not stop the server). */
static void test_cudnn_library(void)
{
    settings s;
    char err[512], path[300];

    snprintf(path, sizeof path, "%s/c.json", tmpdir);
    write_file(path, "{\"cudnn_library\": \"/from/file\"}");
    CHECK(LOAD(&s, err, "--config", path) == 0 && !strcmp(s.cudnn_library, "/from/file"), "file: %s '%s'", err,
          s.cudnn_library);
    setenv("ATTND_CUDNN_LIBRARY", "/from/env/libcudnn.so.9", 1);
    CHECK(LOAD(&s, err, "--config", path) == 0 && !strcmp(s.cudnn_library, "/from/env/libcudnn.so.9"),
          "env over file: %s '%s'", err, s.cudnn_library);
    CHECK(LOAD(&s, err, "--cudnn-library", "/from/flag") == 0 && !strcmp(s.cudnn_library, "/from/flag"),
          "flag over env: %s '%s'", err, s.cudnn_library);
    CHECK(LOAD(&s, err, "--cudnn-library=") == 0 && !strcmp(s.cudnn_library, ""), "empty flag: the search");
    unsetenv("ATTND_CUDNN_LIBRARY");
    unlink(path);
}

static void test_precedence(void)
{
    settings s;
    char err[512], path[300];

    snprintf(path, sizeof path, "%s/a.json", tmpdir);
    write_file(path, "{\"queue_depth\": 10, \"job_timeout_s\": 11, \"cpu_threads\": 12, \"log_level\": \"debug\","
                     " \"enable_fault_injection\": true, \"max_body_bytes\": 4096, \"listen\": \"[::1]:0\"}");
    setenv("ATTND_JOB_TIMEOUT_S", "21", 1);
    setenv("ATTND_CPU_THREADS", "22", 1);
    CHECK(LOAD(&s, err, "--config", path, "--cpu-threads=32", "--data-dir", "/tmp/x") == 0, "load: %s", err);
    CHECK(s.queue_depth == 10, "file over default: %d", s.queue_depth);
    CHECK(s.job_timeout_s == 21, "env over file: %d", s.job_timeout_s);
    CHECK(s.cpu_threads == 32, "flag over env: %d", s.cpu_threads);
    CHECK(!strcmp(s.data_dir, "/tmp/x"), "flag with a separate value");
    CHECK(!strcmp(s.log_level, "debug") && s.enable_fault_injection == 1, "file string and bool");
    CHECK(s.max_body_bytes == 4096 && !strcmp(s.listen, "[::1]:0"), "file int64 and listen");
    CHECK(!strcmp(s.config, path), "config records the file: %s", s.config);

    /* ATTND_CONFIG names the file when no flag does; the flag wins over it. */
    setenv("ATTND_CONFIG", path, 1);
    unsetenv("ATTND_JOB_TIMEOUT_S");
    CHECK(LOAD(&s, err, "--queue-depth", "5") == 0 && s.queue_depth == 5 && s.job_timeout_s == 11,
          "ATTND_CONFIG: %s", err);
    CHECK(LOAD(&s, err, "--config=") == 0 && s.queue_depth == 64 && !strcmp(s.config, ""),
          "--config= reads no file: %s (queue_depth %d)", err, s.queue_depth);
    unsetenv("ATTND_CONFIG");
    unsetenv("ATTND_CPU_THREADS");

    /* config/attnd.json in the current directory when nothing names a file. */
    CHECK(mkdir("config", 0755) == 0, "mkdir config");
    write_file("config/attnd.json", "{\"queue_depth\": 77}");
    CHECK(LOAD(&s, err, "--job-timeout-s", "9") == 0 && s.queue_depth == 77 && s.job_timeout_s == 9,
          "config/attnd.json: %s", err);
    CHECK(!strcmp(s.config, "config/attnd.json"), "config %s", s.config);
    CHECK(unlink("config/attnd.json") == 0 && rmdir("config") == 0, "cleanup");

    /* Booleans: every spelling, bare flags, a bare flag followed by a word. */
    setenv("ATTND_ENABLE_FAULT_INJECTION", "yes", 1);
    CHECK(LOAD(&s, err, "--queue-depth=3") == 0 && s.enable_fault_injection == 1, "env yes");
    setenv("ATTND_ENABLE_FAULT_INJECTION", "0", 1);
    CHECK(LOAD(&s, err, "--queue-depth=3") == 0 && s.enable_fault_injection == 0, "env 0");
    CHECK(LOAD(&s, err, "--enable-fault-injection") == 0 && s.enable_fault_injection == 1, "bare flag");
    CHECK(LOAD(&s, err, "--enable-fault-injection", "--queue-depth", "2") == 0 && s.enable_fault_injection == 1 &&
              s.queue_depth == 2,
          "bare flag then another flag: %s", err);
    CHECK(LOAD(&s, err, "--enable-fault-injection", "false") == 0 && s.enable_fault_injection == 0, "flag false");
    CHECK(LOAD(&s, err, "--enable-fault-injection=TRUE") == 0 && s.enable_fault_injection == 1, "flag =TRUE");
    unsetenv("ATTND_ENABLE_FAULT_INJECTION");
}

static void expect_error(const char *what, int rc, const char *err, const char *must1, const char *must2)
{
    CHECK(rc == -1, "%s: accepted", what);
    CHECK(strstr(err, must1) != NULL, "%s: '%s' lacks '%s'", what, err, must1);
    if (must2) CHECK(strstr(err, must2) != NULL, "%s: '%s' lacks '%s'", what, err, must2);
}

static void test_errors(void)
{
    settings s;
    char err[512], path[300];

    expect_error("range", LOAD(&s, err, "--queue-depth", "0"), err, "queue_depth", "1..100000");
    expect_error("range high", LOAD(&s, err, "--queue-depth=100001"), err, "100001", "--queue-depth");
    expect_error("not a number", LOAD(&s, err, "--job-timeout-s", "10s"), err, "job_timeout_s", "10s");
    expect_error("overflow", LOAD(&s, err, "--max-body-bytes", "99999999999999999999"), err, "max_body_bytes", NULL);
    expect_error("below min", LOAD(&s, err, "--max-body-bytes", "1023"), err, "1024..", NULL);
    expect_error("bool", LOAD(&s, err, "--enable-fault-injection=maybe"), err, "enable_fault_injection", "maybe");
    expect_error("unknown flag", LOAD(&s, err, "--queue-depht", "3"), err, "--queue-depht", NULL);
    expect_error("positional", LOAD(&s, err, "serve"), err, "serve", NULL);
    expect_error("missing value", LOAD(&s, err, "--queue-depth"), err, "--queue-depth", NULL);
    expect_error("log level", LOAD(&s, err, "--log-level", "loud"), err, "log_level", "loud");
    expect_error("listen", LOAD(&s, err, "--listen", "8080"), err, "listen", NULL);
    expect_error("listen port", LOAD(&s, err, "--listen", "127.0.0.1:70000"), err, "listen", NULL);
    expect_error("listen v6", LOAD(&s, err, "--listen", "::1:80"), err, "listen", NULL);
    expect_error("devices", LOAD(&s, err, "--devices", "0,x"), err, "devices", NULL);
    CHECK(LOAD(&s, err, "--devices", "0,2", "--listen", "0.0.0.0:0") == 0 && !strcmp(s.devices, "0,2"),
          "devices list: %s", err);

    setenv("ATTND_QUEUE_DEPTH", "-5", 1);
    expect_error("env range", LOAD(&s, err, "--cpu-threads", "1"), err, "ATTND_QUEUE_DEPTH", "-5");
    unsetenv("ATTND_QUEUE_DEPTH");

    snprintf(path, sizeof path, "%s/bad.json", tmpdir);
    write_file(path, "{\"queue_depth\": 4, \"queue_dpeth\": 5}");
    expect_error("unknown key", LOAD(&s, err, "--config", path), err, "queue_dpeth", path);
    write_file(path, "{\"queue_depth\": 4.5}");
    expect_error("fractional", LOAD(&s, err, "--config", path), err, "queue_depth", NULL);
    write_file(path, "{\"queue_depth\": \"many\"}");
    expect_error("string int", LOAD(&s, err, "--config", path), err, "queue_depth", "many");
    write_file(path, "{\"listen\": 8080}");
    expect_error("number for string", LOAD(&s, err, "--config", path), err, "listen", NULL);
    write_file(path, "{\"queue_depth\": 4,}");
    expect_error("bad json", LOAD(&s, err, "--config", path), err, "JSON", NULL);
    write_file(path, "[1]");
    expect_error("not an object", LOAD(&s, err, "--config", path), err, "object", NULL);
    write_file(path, "{\"config\": \"x.json\"}");
    expect_error("config in file", LOAD(&s, err, "--config", path), err, "config", NULL);
    expect_error("missing file", LOAD(&s, err, "--config", "/nonexistent/attnd.json"), err, "/nonexistent/attnd.json",
                 NULL);
}

static void test_price(void)
{
    settings s;
    char err[512], currency[4];
    double amount = 0;

    CHECK(LOAD(&s, err, "--listen", "127.0.0.1:1") == 0 && settings_price(&s, &amount, currency) == -1,
          "no price by default");
    CHECK(LOAD(&s, err, "--price-per-hour", "2.49") == 0 && settings_price(&s, &amount, currency) == 0 &&
              amount == 2.49 && currency[0] == '\0', "a bare amount");
    CHECK(LOAD(&s, err, "--price-per-hour", "3.10 EUR") == 0 && settings_price(&s, &amount, currency) == 0 &&
              amount == 3.10 && !strcmp(currency, "EUR"), "an amount and a currency");
    CHECK(LOAD(&s, err, "--price-per-hour", "-1") == -1 && strstr(err, "price_per_hour") && strstr(err, "not a price"),
          "negative refused: %s", err);
    CHECK(LOAD(&s, err, "--price-per-hour", "2.49 dollars") == -1, "a word that is not a code refused");
    CHECK(LOAD(&s, err, "--price-per-hour", "nan") == -1, "nan refused");
}

static void test_store_and_node(void)
{
    settings s;
    char err[512];

    CHECK(LOAD(&s, err, "--listen", "127.0.0.1:1") == 0 && !strcmp(s.store, "sqlite") && !settings_store_is_postgresql(&s) &&
              s.node[0] == '\0' && s.heartbeat_s == 5,
          "defaults: sqlite, the host name, 5 s");
    CHECK(LOAD(&s, err, "--store", "postgresql://attnd@db.internal/attnd?sslmode=require") == 0 &&
              settings_store_is_postgresql(&s), "a URI");
    CHECK(LOAD(&s, err, "--store", "host=/tmp/pg dbname=attnd") == 0 && settings_store_is_postgresql(&s),
          "key=value words");
    CHECK(LOAD(&s, err, "--store", "postgresql") == 0 && settings_store_is_postgresql(&s), "the PG* environment");
    CHECK(LOAD(&s, err, "--store", "mysql://db/attnd") == -1 && strstr(err, "store") && strstr(err, "not a store"),
          "another database refused: %s", err);
    CHECK(LOAD(&s, err, "--node", "gpu-07.rack_2") == 0 && !strcmp(s.node, "gpu-07.rack_2"), "a node name");
    CHECK(LOAD(&s, err, "--node", "gpu 07") == -1 && strstr(err, "node"), "a space refused: %s", err);
    CHECK(LOAD(&s, err, "--node", "a\"b") == -1, "a quote refused");
    CHECK(LOAD(&s, err, "--heartbeat-s", "0") == -1, "heartbeat_s 0 refused");
}

static void test_help(void)
{
    settings s;
    char err[512], path[300], *text;
    FILE *f;
    long n;
    int saved, fd, rc;
    static const char *const must[] = {"--listen",      "ATTND_LISTEN",        "--queue-depth",   "ATTND_QUEUE_DEPTH",
                                       "64",            "1..100000",           "--data-dir",      "--max-body-bytes",
                                       "--token-file",  "--log-level",         "--verify-cpu-max-macs",
                                       "--cpu-threads", "--enable-fault-injection", "--devices", "--job-timeout-s",
                                       "--memory-budget-bytes", "--config", "127.0.0.1:8080",
                                       "--cudnn-library PATH", "ATTND_CUDNN_LIBRARY", "--cupti",
                                       "ATTND_NVTX_TO_CUPTI", "--nvtx-to-cupti"};
    size_t i;

    /* --help prints on stdout and returns 1, even with a broken setting beside it. */
    snprintf(path, sizeof path, "%s/help.txt", tmpdir);
    fflush(stdout);
    saved = dup(STDOUT_FILENO);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(saved >= 0 && fd >= 0 && dup2(fd, STDOUT_FILENO) >= 0, "redirect stdout");
    rc = LOAD(&s, err, "--queue-depth", "0", "--help");
    CHECK(LOAD(&s, err, "-h") == 1, "-h");
    fflush(stdout);
    dup2(saved, STDOUT_FILENO);
    close(saved);
    close(fd);
    CHECK(rc == 1, "--help returns %d", rc);

    f = fopen(path, "r");
    CHECK(f != NULL, "help file");
    if (!f) return;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    text = calloc(1, (size_t)n + 1);
    CHECK(fread(text, 1, (size_t)n, f) == (size_t)n, "read help");
    fclose(f);
    for (i = 0; i < sizeof must / sizeof must[0]; i++) CHECK(strstr(text, must[i]) != NULL, "help lacks %s", must[i]);
    free(text);
}

int main(void)
{
    char cwd[512];
    char tmpl[] = "/tmp/attnd-test-settings-XXXXXX";
    char *dir = mkdtemp(tmpl);

    if (!dir || !getcwd(cwd, sizeof cwd) || chdir(dir) != 0) {
        perror("temporary directory");
        return 2;
    }
    snprintf(tmpdir, sizeof tmpdir, "%s", dir);
    clear_attnd_env();

    test_defaults();
    test_precedence();
    test_cudnn_library();
    test_profiler_switches();
    test_errors();
    test_price();
    test_store_and_node();
    test_help();

    {
        char p[300];
        snprintf(p, sizeof p, "%s/a.json", tmpdir), unlink(p);
        snprintf(p, sizeof p, "%s/bad.json", tmpdir), unlink(p);
        snprintf(p, sizeof p, "%s/help.txt", tmpdir), unlink(p);
    }
    if (chdir(cwd) != 0 || rmdir(tmpdir) != 0) perror("cleanup");
    return CHECK_DONE();
}

/* main.c — the attnd-worker executable, started by the front's pool (server/front/pool/pool.c), never by
 * hand:
 *
 *   attnd-worker --device DEVICE --ipc-fd N [settings flags]   serve one device over fd N
 *   attnd-worker --probe                                       print {"gpus":N} on stdout
 *   attnd-worker --version                                     the build, as attnd prints it
 *
 * The settings flags are the front's own command line, so both read the same settings.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/build_info.h"
#include "common/log.h"
#include "common/parse_int.h"
#include "common/settings.h"
#include "common/variant_info.h"
#include "server/worker/loop.h"

static int usage(void)
{
    fprintf(stderr, "usage: attnd-worker --device DEVICE --ipc-fd N [settings flags] | --probe | --version\n"
                    "(the front, attnd, starts it; it is not meant to be run by hand)\n");
    return 2;
}

static int main_serve(int argc, char **argv)
{
    settings s;
    sigset_t none;
    char err[512];
    long long fd;
    int rc;

    /* The front's blocked signals survive exec: a worker takes its signals normally (the pool
     * ends it with SIGKILL, its parent's death with a signal). */
    sigemptyset(&none);
    if (sigprocmask(SIG_SETMASK, &none, NULL) != 0) {
        fprintf(stderr, "attnd-worker: sigprocmask: %s\n", strerror(errno));
        return 2;
    }
    if (argc < 5 || strcmp(argv[1], "--device") != 0 || strcmp(argv[3], "--ipc-fd") != 0) return usage();
    if (parse_int_in(argv[4], 0, 65535, &fd) != 0) {
        fprintf(stderr, "attnd-worker: --ipc-fd needs a file descriptor number, got '%s'\n", argv[4]);
        return 2;
    }
    /* argv[4] plays argv[0]: settings_load reads the flags after it. */
    rc = settings_load(&s, argc - 4, argv + 4, err, sizeof err);
    if (rc != 0) {
        if (rc < 0) fprintf(stderr, "attnd-worker %s: %s\n", argv[2], err);
        return rc < 0 ? 2 : 0;
    }
    log_init(argv[2], s.log_level);
    variant_info_offer_pending(s.pending_features);
    return worker_main(&s, argv[2], (int)fd);
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "--probe") == 0) return worker_probe_main();
    if (argc >= 2 && strcmp(argv[1], "--version") == 0) {
        char line[512];
        build_info_line(line, sizeof line);
        printf("%s\n", line);
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "--device") == 0) return main_serve(argc, argv);
    return usage();
}

/* test_cudnn_library.c — the setting cudnn_library in cudnn_loader.c: which cuDNN is opened,
 * what is reported about it, and every way a chosen directory or file can be wrong.
 *
 * cuDNN loads once per process and is never unloaded, so each case runs in a forked child
 * that sets the library, loads, and writes what it saw into a pipe; the parent checks it.
 * Cases that need a real cuDNN (found by the loader's own search, as the server does
 * without the setting) are skipped with a message where there is none. No GPU is needed:
 * loading and cudnnGetVersion touch no device.
 *
 * Directories are built in a temporary directory from symbolic links to the real files,
 * so a case can leave a sub-library out, or load one from elsewhere, without copying
 * hundreds of MiB.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/cudnn/cudnn_loader.h"
#include "tests/unit/check.h"

/* What a child saw. */
typedef struct outcome {
    int ran;               /* the child answered */
    int rc;                /* cudnn_load */
    int check_rc;          /* cudnn_check_loaded after the extra step, if any */
    int set_again_same;    /* cudnn_set_library(same value) after loading */
    int set_again_other;   /* cudnn_set_library(another value) after loading */
    size_t version;
    char why[2048];
    char check_why[2048];
    char requested[512];
    char path[PATH_MAX];
} outcome;

/* In the child, before loading: dlopen this file by its own path (a copy of a cuDNN
 * library loaded from outside the chosen directory). After loading: this one. */
typedef struct extra {
    const char *before;
    const char *after;
} extra;

static int write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w, n -= (size_t)w;
    }
    return 0;
}

static int read_all(int fd, void *buf, size_t n)
{
    char *p = buf;
    while (n > 0) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        p += r, n -= (size_t)r;
    }
    return 0;
}

static outcome load_in_child(const char *setting, const extra *x)
{
    outcome o;
    int fds[2];
    pid_t pid;

    memset(&o, 0, sizeof o);
    if (pipe(fds) != 0) return o;
    fflush(NULL);
    pid = fork();
    if (pid == 0) {
        outcome c;
        close(fds[0]);
        memset(&c, 0, sizeof c);
        if (x && x->before && !dlopen(x->before, RTLD_NOW | RTLD_GLOBAL))
            fprintf(stderr, "test setup: dlopen %s: %s\n", x->before, dlerror());
        if (cudnn_set_library(setting) != 0) _exit(3);
        c.rc = cudnn_load(c.why, sizeof c.why);
        if (x && x->after && !dlopen(x->after, RTLD_NOW | RTLD_GLOBAL))
            fprintf(stderr, "test setup: dlopen %s: %s\n", x->after, dlerror());
        c.check_rc = cudnn_check_loaded(c.check_why, sizeof c.check_why);
        c.version = cudnn_version();
        snprintf(c.requested, sizeof c.requested, "%s", cudnn_library_requested());
        snprintf(c.path, sizeof c.path, "%s", cudnn_library_path());
        c.set_again_same = cudnn_set_library(setting);
        c.set_again_other = cudnn_set_library("/somewhere/else");
        c.ran = 1;
        _exit(write_all(fds[1], &c, sizeof c) == 0 ? 0 : 2);
    }
    close(fds[1]);
    if (pid > 0 && read_all(fds[0], &o, sizeof o) != 0) memset(&o, 0, sizeof o);
    close(fds[0]);
    if (pid > 0) waitpid(pid, NULL, 0);
    return o;
}

/* A fresh directory of links to the libcudnn*.so.9 files of real_dir, leaving out the
 * names in `without` (NULL-terminated). Returns 0 and the path in out. */
static int link_dir(const char *real_dir, const char *const *without, char *out, size_t len)
{
    DIR *d;
    struct dirent *e;
    char tmpl[] = "/tmp/attnd-cudnn-XXXXXX";

    if (!mkdtemp(tmpl)) return -1;
    snprintf(out, len, "%s", tmpl);
    d = opendir(real_dir);
    if (!d) return -1;
    while ((e = readdir(d)) != NULL) {
        char from[PATH_MAX], to[PATH_MAX];
        const char *const *w;
        int skip = 0;
        size_t n = strlen(e->d_name);
        if (strncmp(e->d_name, "libcudnn", 8) != 0 || n < 5 || strcmp(e->d_name + n - 5, ".so.9") != 0) continue;
        for (w = without; w && *w; w++) skip |= strcmp(*w, e->d_name) == 0;
        if (skip) continue;
        snprintf(from, sizeof from, "%s/%s", real_dir, e->d_name);
        snprintf(to, sizeof to, "%s/%s", out, e->d_name);
        if (symlink(from, to) != 0) {
            closedir(d);
            return -1;
        }
    }
    closedir(d);
    return 0;
}

static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    if (!d) return;
    while ((e = readdir(d)) != NULL) {
        char p[PATH_MAX];
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static void expect_refused(const char *what, const outcome *o, const char *setting, const char *needle)
{
    CHECK(o->ran, "%s: the child did not answer", what);
    CHECK(o->rc == -1, "%s: loaded, but should not have", what);
    CHECK(strstr(o->why, setting) != NULL, "%s: the reason does not name %s: %s", what, setting, o->why);
    CHECK(!needle || strstr(o->why, needle) != NULL, "%s: the reason lacks '%s': %s", what, needle, o->why);
    CHECK(o->version == 0 && o->path[0] == '\0', "%s: version %zu, path '%s' after a failed load", what, o->version,
          o->path);
    CHECK(strcmp(o->requested, setting) == 0, "%s: requested '%s'", what, o->requested);
    printf("  %s: %s\n", what, o->why);
}

/* Without cuDNN at hand: only the refusals. */
static void test_refusals(void)
{
    char dir[] = "/tmp/attnd-cudnn-XXXXXX", file[PATH_MAX], missing[PATH_MAX];
    outcome o;
    FILE *f;

    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp: %s", strerror(errno));
        return;
    }
    o = load_in_child(dir, NULL);
    expect_refused("empty directory", &o, dir, "libcudnn.so.9");

    snprintf(file, sizeof file, "%s/notes.txt", dir);
    f = fopen(file, "w");
    CHECK(f != NULL, "create %s", file);
    if (f) {
        fputs("not a library\n", f);
        fclose(f);
    }
    o = load_in_child(file, NULL);
    expect_refused("a text file", &o, file, "not a shared library");

    /* A text file under the front's own name, in a directory: the same answer. */
    snprintf(file, sizeof file, "%s/libcudnn.so.9", dir);
    f = fopen(file, "w");
    if (f) {
        fputs("not a library either\n", f);
        fclose(f);
    }
    o = load_in_child(dir, NULL);
    expect_refused("a text libcudnn.so.9", &o, dir, "not a shared library");
    unlink(file);

    snprintf(missing, sizeof missing, "%s/no/such/libcudnn.so.9", dir);
    o = load_in_child(missing, NULL);
    expect_refused("a path that does not exist", &o, missing, "No such file");

    snprintf(file, sizeof file, "%s/notes.txt", dir);
    unlink(file);
    rmdir(dir);
}

/* dirname of path into out. */
static void dir_of(const char *path, char *out, size_t len)
{
    const char *slash = strrchr(path, '/');
    snprintf(out, len, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
}

static void test_with_real_cudnn(void)
{
    outcome def, o;
    char real_dir[PATH_MAX], links[PATH_MAX], file[PATH_MAX + 32], lib_path[PATH_MAX + 32];
    static const char *const no_graph[] = {"libcudnn_graph.so.9", NULL};
    static const char *const no_legacy[] = {"libcudnn_cnn.so.9", "libcudnn_adv.so.9", "libcudnn_ops.so.9", NULL};
    extra x;

    def = load_in_child("", NULL);
    CHECK(def.ran, "default: the child did not answer");
    if (def.rc != 0) {
        printf("no cuDNN found by the loader's search (%s): the cases with a real cuDNN are skipped\n", def.why);
        return;
    }
    CHECK(def.version >= 90000 && def.version < 100000, "default version %zu", def.version);
    CHECK(def.path[0] == '/', "default path '%s' is not absolute", def.path);
    CHECK(strcmp(def.requested, "libcudnn.so.9") == 0, "default requested '%s'", def.requested);
    CHECK(def.check_rc == 0, "default: check_loaded: %s", def.check_why);
    CHECK(def.set_again_same == 0 && def.set_again_other == -1, "set after load: same %d, other %d",
          def.set_again_same, def.set_again_other);
    printf("  default search: cuDNN %zu from %s\n", def.version, def.path);
    dir_of(def.path, real_dir, sizeof real_dir);

    /* The directory itself, and the file by its path: the same cuDNN. */
    o = load_in_child(real_dir, NULL);
    CHECK(o.rc == 0, "directory %s: %s", real_dir, o.why);
    CHECK(o.version == def.version && strcmp(o.path, def.path) == 0, "directory: %zu %s", o.version, o.path);
    CHECK(strcmp(o.requested, real_dir) == 0, "directory: requested %s", o.requested);
    CHECK(o.check_rc == 0, "directory: check_loaded: %s", o.check_why);
    snprintf(file, sizeof file, "%s/libcudnn.so.9", real_dir);
    o = load_in_child(file, NULL);
    CHECK(o.rc == 0, "file %s: %s", file, o.why);
    CHECK(o.version == def.version && strcmp(o.path, def.path) == 0, "file: %zu %s", o.version, o.path);

    /* A directory of links: loads, and path is the real file behind the link. */
    if (link_dir(real_dir, NULL, links, sizeof links) != 0) {
        CHECK(0, "cannot build a directory of links: %s", strerror(errno));
        return;
    }
    o = load_in_child(links, NULL);
    CHECK(o.rc == 0, "links: %s", o.why);
    CHECK(strcmp(o.path, def.path) == 0, "links: path %s, want the real file %s", o.path, def.path);
    CHECK(o.check_rc == 0, "links: check_loaded: %s", o.check_why);

    /* Another copy of a sub-library already in the process (here: the real file under its
     * real path, which is outside the chosen directory): refused. */
    snprintf(lib_path, sizeof lib_path, "%s/libcudnn_graph.so.9", real_dir);
    x.before = lib_path, x.after = NULL;
    o = load_in_child(links, &x);
    expect_refused("graph loaded from elsewhere first", &o, links, real_dir);
    remove_dir(links);

    /* No graph library beside the front: refused, naming it. */
    if (link_dir(real_dir, no_graph, links, sizeof links) == 0) {
        o = load_in_child(links, NULL);
        expect_refused("no libcudnn_graph.so.9", &o, links, "libcudnn_graph.so.9");
        remove_dir(links);
    }

    /* The legacy sub-libraries are optional; one loaded later from elsewhere is caught by
     * cudnn_check_loaded (what cudnn_sdpa.c asks after planning). */
    if (link_dir(real_dir, no_legacy, links, sizeof links) == 0) {
        o = load_in_child(links, NULL);
        CHECK(o.rc == 0, "without cnn/adv/ops: %s", o.why);
        CHECK(o.check_rc == 0, "without cnn/adv/ops: check_loaded: %s", o.check_why);
        snprintf(lib_path, sizeof lib_path, "%s/libcudnn_ops.so.9", real_dir);
        x.before = NULL, x.after = lib_path;
        o = load_in_child(links, &x);
        CHECK(o.rc == 0, "ops later: load %s", o.why);
        CHECK(o.check_rc == -1 && strstr(o.check_why, "libcudnn_ops.so.9") && strstr(o.check_why, links),
              "ops loaded later from outside: check_loaded %d: %s", o.check_rc, o.check_why);
        printf("  a stray sub-library after loading: %s\n", o.check_why);
        remove_dir(links);
    }
}

int main(void)
{
    test_refusals();
    test_with_real_cudnn();
    return CHECK_DONE();
}

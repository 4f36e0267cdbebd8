#!/usr/bin/env python3
"""A throwaway PostgreSQL server for the tests: one cluster in DIR/data, reachable only
through a unix socket in DIR (no TCP port is opened), fsync off, trust authentication for
the user attnd.

    python3 tests/pg/pg_server.py run DIR -- CMD ARGS...   start a fresh server, run CMD with
                                                           ATTND_TEST_PG=<conninfo>, stop it,
                                                           exit with CMD's status
    python3 tests/pg/pg_server.py start DIR | stop DIR     by hand (start prints the conninfo)
    python3 tests/pg/pg_server.py createdb CONNINFO NAME   print the conninfo of a new database

From Python: start(dir) -> conninfo, stop(dir), kill(dir) and restart(dir) for outage tests,
create_database(conninfo, name) -> conninfo.

PostgreSQL refuses to run as root: when root, the server runs as the `postgres` user and DIR
is given to it.
"""
import glob
import os
import re
import shutil
import signal
import subprocess
import sys

PORT = 5432  # with no TCP it only names the socket file, DIR/.s.PGSQL.5432
USER = "attnd"
MISSING = "PostgreSQL server programs (initdb, pg_ctl) not found: sh scripts/install-deps.sh test installs postgresql"
# A unix socket's path must fit sockaddr_un.sun_path (108 bytes with its NUL).
SOCKET_PATH_MAX = 107


def bindir():
    """The folder of initdb and pg_ctl: pg_config's, else the newest /usr/lib/postgresql/*/bin."""
    try:
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=True).stdout.strip()
        if os.path.exists(os.path.join(out, "initdb")):
            return out
    except (OSError, subprocess.CalledProcessError):
        pass

    def version(path):
        return [int(p) for p in re.findall(r"\d+", path.split("/")[-3])]

    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=version)
    if not found:
        raise RuntimeError(MISSING)
    return os.path.dirname(found[-1])


def _as_server_user(argv):
    """argv run as the user the server runs as: `postgres` when we are root."""
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--"] + argv
    return argv


def _run(argv, what):
    r = subprocess.run(_as_server_user(argv), capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{what} failed ({r.returncode}): {(r.stderr or r.stdout).strip()}")
    return r


def conninfo(dir, dbname="postgres"):
    return f"host={os.path.abspath(dir)} port={PORT} user={USER} dbname={dbname}"


def _running(dir):
    data = os.path.join(dir, "data")
    if not os.path.exists(os.path.join(data, "postmaster.pid")):
        return False
    return subprocess.run(_as_server_user([os.path.join(bindir(), "pg_ctl"), "status", "-D", data]),
                          capture_output=True).returncode == 0


def _initdb(dir):
    data = os.path.join(dir, "data")
    _run([os.path.join(bindir(), "initdb"), "-D", data, "-A", "trust", "-U", USER, "--no-sync", "-E", "UTF8",
          "--no-locale"], "initdb")
    # Settings live in the cluster, so restart() brings the same server back.
    with open(os.path.join(data, "postgresql.conf"), "a") as f:
        f.write("\n# tests/pg/pg_server.py: a disposable test server\n"
                "listen_addresses = ''\n"
                f"unix_socket_directories = '{dir}'\n"
                f"port = {PORT}\n"
                # fsync off is safe for a crash of the server alone (the kernel keeps what
                # was written); synchronous_commit stays on: an acknowledged commit must
                # survive kill(), or the outage tests would count the server's losses.
                "fsync = off\n"
                "full_page_writes = off\n"
                "shared_buffers = 32MB\n")


def start(dir, fresh=False):
    """Start the server of dir (initdb first when dir has no cluster, or when fresh: any
    earlier cluster there is stopped and removed). Returns the conninfo of database postgres."""
    dir = os.path.abspath(dir)
    bindir()  # the clear message when PostgreSQL is missing, before anything is made
    socket = os.path.join(dir, f".s.PGSQL.{PORT}")
    if len(socket) > SOCKET_PATH_MAX:
        raise RuntimeError(f"{socket}: too long for a unix socket ({len(socket)} > {SOCKET_PATH_MAX} bytes)")
    if fresh:
        if _running(dir):
            stop(dir)
        shutil.rmtree(dir, ignore_errors=True)
    os.makedirs(dir, exist_ok=True)
    if os.geteuid() == 0:
        shutil.chown(dir, "postgres", "postgres")
        if subprocess.run(["runuser", "-u", "postgres", "--", "test", "-w", dir]).returncode != 0:
            raise RuntimeError(f"{dir}: the postgres user cannot reach it (a folder above it is closed to others)")
    if not os.path.exists(os.path.join(dir, "data", "PG_VERSION")):
        _initdb(dir)
    if not _running(dir):
        _run([os.path.join(bindir(), "pg_ctl"), "start", "-w", "-t", "60", "-D", os.path.join(dir, "data"),
              "-l", os.path.join(dir, "server.log")], "pg_ctl start (see " + os.path.join(dir, "server.log") + ")")
    return conninfo(dir)


def stop(dir, mode="fast"):
    """Stop the server of dir (nothing when none runs). mode: fast, or immediate (a crash)."""
    dir = os.path.abspath(dir)
    if _running(dir):
        _run([os.path.join(bindir(), "pg_ctl"), "stop", "-w", "-m", mode, "-D", os.path.join(dir, "data")],
             "pg_ctl stop")


def kill(dir):
    """Take the server away as a crash would: no checkpoint, clients cut off."""
    stop(dir, mode="immediate")


def restart(dir):
    """Bring the server of dir back on the same socket, with its data (crash recovery runs)."""
    return start(dir)


def create_database(conninfo_text, name):
    """Create database name (letters, digits, _) on the server of conninfo_text; its conninfo."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,62}", name):
        raise ValueError(f"database name {name!r}: letters, digits and _ only")
    r = subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", conninfo_text, "-c",
                        f'CREATE DATABASE "{name}"'], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"CREATE DATABASE {name} failed: {r.stderr.strip()}")
    words = [w for w in conninfo_text.split() if not w.startswith("dbname=")]
    return " ".join(words + [f"dbname={name}"])


def run(dir, argv):
    """Start a fresh server, run argv with ATTND_TEST_PG set, stop the server; argv's status."""
    try:
        info = start(dir, fresh=True)
    except RuntimeError as e:
        print(f"pg_server: {e}", file=sys.stderr)
        return 1
    # SIGTERM (a CI runner cancelling) stops the server too: turned into an exception here.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    child = None
    try:
        # close_fds=False: a make under us keeps its parent's jobserver descriptors.
        child = subprocess.Popen(argv, env=dict(os.environ, ATTND_TEST_PG=info), close_fds=False)
        status = child.wait()
        return 128 - status if status < 0 else status
    except KeyboardInterrupt:  # Ctrl-C reached the child too (one process group)
        return 130
    finally:
        if child and child.poll() is None:
            child.terminate()
            child.wait()
        stop(dir)


def main(argv):
    usage = f"usage: {argv[0]} run DIR -- CMD ARGS... | start DIR | stop DIR | createdb CONNINFO NAME"
    if len(argv) >= 5 and argv[1] == "run" and argv[3] == "--":
        return run(argv[2], argv[4:])
    try:
        if len(argv) == 3 and argv[1] == "start":
            print(start(argv[2]))
            return 0
        if len(argv) == 3 and argv[1] == "stop":
            stop(argv[2])
            return 0
        if len(argv) == 4 and argv[1] == "createdb":
            print(create_database(argv[2], argv[3]))
            return 0
    except RuntimeError as e:
        print(f"pg_server: {e}", file=sys.stderr)
        return 1
    print(usage, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))

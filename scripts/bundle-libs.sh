#!/bin/sh
# Copy the front's libraries that a GPU machine may lack beside the binary ($1/lib):
# libmicrohttpd, libcJSON, and libpq with everything it loads (OpenLDAP, Kerberos, SASL:
# a Debian 12 libpq asks for libldap-2.5, which Ubuntu 24.04 does not have). glibc's own
# libraries stay the machine's. The front is linked with DT_RPATH $ORIGIN/lib (Makefile:
# --disable-new-dtags), which, unlike RUNPATH, also serves the bundled libraries' own needs.
set -e
dir=${1:-build}
mkdir -p "$dir/lib"
copy() {
    path=$(ldconfig -p | awk -v l="$1" '$1 == l { print $NF; exit }')
    [ -n "$path" ] || { echo "bundle: $1 not found" >&2; exit 1; }
    cp -L "$path" "$dir/lib/$1"
}
for lib in libmicrohttpd.so.12 libcjson.so.1 libpq.so.5; do copy "$lib"; done
# libpq's closure, glibc excluded.
for lib in $(ldd "$dir/lib/libpq.so.5" | awk '$2 == "=>" { print $1 }'); do
    case "$lib" in
    libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|libresolv.so.*|ld-linux*) ;;
    *) copy "$lib" ;;
    esac
done
echo "bundled into $dir/lib: $(ls "$dir/lib" | tr '\n' ' ')"

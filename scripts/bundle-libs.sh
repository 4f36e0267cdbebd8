#!/bin/sh
# Copy libmicrohttpd and libcJSON beside the binary ($1/lib), for GPU machines that lack
# them; the binary's rpath ($ORIGIN/lib) finds them there.
set -e
dir=${1:-build}
mkdir -p "$dir/lib"
for lib in libmicrohttpd.so.12 libcjson.so.1; do
    path=$(ldconfig -p | awk -v l="$lib" '$1 == l { print $NF; exit }')
    [ -n "$path" ] || { echo "bundle: $lib not found" >&2; exit 1; }
    cp -L "$path" "$dir/lib/$lib"
done
echo "bundled into $dir/lib: $(ls "$dir/lib" | tr '\n' ' ')"

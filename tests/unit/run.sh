#!/bin/sh
# Run each unit-test binary; sum their "N passed, N failed" lines into one.
passed=0; failed=0; status=0
for t in "$@"; do
    out=$("$t") || status=1
    echo "$out" | grep -v '^$' | sed 's/^/  /'
    p=$(echo "$out" | sed -n 's/.*: \([0-9]*\) passed, \([0-9]*\) failed$/\1/p' | tail -1)
    f=$(echo "$out" | sed -n 's/.*: \([0-9]*\) passed, \([0-9]*\) failed$/\2/p' | tail -1)
    [ -n "$p" ] || { echo "  $t: no summary line"; status=1; f=1; p=0; }
    passed=$((passed + p)); failed=$((failed + f))
done
echo "unit: $passed passed, $failed failed"
exit $status

set -u; BIN=$PWD/build/test/attnd
for mode in cupti nocupti; do
  D=$(mktemp -d)
  if [ $mode = nocupti ]; then $BIN --data-dir $D --cupti false >$D/o 2>$D/e & else $BIN --data-dir $D >$D/o 2>$D/e & fi
  P=$!; for _ in $(seq 1 100); do curl -sf localhost:8080/readyz >/dev/null && break; sleep 0.2; done
  for b in naive naive_inplace flash; do for g in false true; do
    curl -s -X POST "localhost:8080/run?backend=$b&profile=false&graph=$g" | python3 -c "import json,sys; r=json.load(sys.stdin); print('$mode','$b','graph=$g','host_us',round(r['timing']['host_us'],2),'gpu',round(r['timing']['median_us'],1))"
  done; done
  kill -TERM $P; wait $P
done

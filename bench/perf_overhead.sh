#!/bin/sh
# bench/perf_overhead.sh BASE_LIB_DIR [MiB] [ROUNDS] -- the stage counters' cost (BENCHMARKS.md,
# "Stage counters"): bench/perf_overhead.c built against this tree's library and against
# BASE_LIB_DIR (a tree of the library from before the counters: its include/ and lib/), run
# alternately ROUNDS times on a dense file of MiB MiB (bench/gen.py), one sweep each at the
# defaults, with minibatches of 256 and of 16 samples. Prints every run, then the medians.
set -e
BASE=$1; MB=${2:-256}; ROUNDS=${3:-7}
CC=${CC:-cc}
mkdir -p build/ovh
for t in new base; do
  if [ $t = new ]; then src=.; else src=$BASE; fi
  objs=
  for f in "$src"/lib/*/*.c; do
    o=build/ovh/$t-$(basename "$(dirname "$f")")-$(basename "$f" .c).o
    $CC -std=c11 -D_GNU_SOURCE -O2 -I"$src"/include -I"$src"/lib -pthread -c "$f" -o "$o"
    objs="$objs $o"
  done
  ar rcs build/ovh/lib$t.a $objs
  $CC -O2 -I"$src"/include bench/perf_overhead.c build/ovh/lib$t.a -lm -pthread \
    -o build/ovh/perf_overhead_$t
done
FILE=$(python3 bench/gen.py --mb "$MB" --kinds dense | awk '{print $1}')
for k in 256 16; do
  : > build/ovh/runs_$k
  i=0
  while [ $i -lt "$ROUNDS" ]; do
    for t in new base; do
      echo "$t $(build/ovh/perf_overhead_$t "$FILE" 100 $k)" | tee -a build/ovh/runs_$k
    done
    i=$((i + 1))
  done
  python3 - "$k" build/ovh/runs_$k <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[2]):
    t, wall, cpu, _ = line.split()
    runs.setdefault(t, []).append((float(wall), float(cpu)))
med = {t: [statistics.median(x[i] for x in v) for i in (0, 1)] for t, v in runs.items()}
print("mb %s: median wall new %.3f base %.3f (new/base %.4f); median cpu new %.3f base %.3f "
      "(new/base %.4f)" % (sys.argv[1], med["new"][0], med["base"][0],
                           med["new"][0] / med["base"][0], med["new"][1], med["base"][1],
                           med["new"][1] / med["base"][1]))
PY
done

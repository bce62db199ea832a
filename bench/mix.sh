#!/bin/sh
# bench/mix.sh -- a mix of two files against one file of the same samples (bench/mix_bench.c):
# generates the dense benchmark file (bench/gen.py, --mb MiB, default 64), splits it at the
# middle line into A and B, and prints the median times and the ratios one ÷ mix.
#   sh bench/mix.sh [MB] [RUNS] [THREADS] [CHUNK_BYTES] [SWEEPS]
set -e
MB=${1:-64}
RUNS=${2:-5}
THREADS=${3:-2}
CHUNK=${4:-4194304}
SWEEPS=${5:-3}
DIR=bench/data/mix
mkdir -p "$DIR"
make -s build/libctfio.a
make -s build/mix_bench
python3 bench/gen.py --mb "$MB" --kinds dense --out "$DIR" >/dev/null
ALL=$(ls "$DIR"/dense_*.ctf | head -n 1)
LINES=$(wc -l < "$ALL")
head -n $((LINES / 2)) "$ALL" > "$DIR/a.ctf"
tail -n +$((LINES / 2 + 1)) "$ALL" > "$DIR/b.ctf"
build/mix_bench "$ALL" "$DIR/a.ctf" "$DIR/b.ctf" 100 1024 "$RUNS" "$THREADS" "$CHUNK" "$SWEEPS"

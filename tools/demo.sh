#!/bin/sh
# make demo: generate a sample CTF file, check it, show its statistics, dump it in file order,
# then read randomized minibatches (with the stage counters and their verdict), save a
# checkpoint and resume from it; read it split into a corpus of shards by two workers, mixed
# 3:1 with a second data set on one timeline, and (in Python) as a composite of two files
# joined by key. Given a Python with the ctfio package installed (make passes
# .venv/bin/python), it then trains a model on scikit-learn's digits through training_session
# (examples/train_digits.py).
# Usage: demo.sh [CTFIO] [PYTHON]
set -eu
CTFIO=${1:-build/ctfio}
PY=${2:-}
D=build/demo
mkdir -p $D
python3 tools/make_sample.py $D/sample.ctf 200
CFG="--config examples/demo.cntk DataDir=$D"

echo "== ctfio check: every problem and a summary"
$CTFIO check $CFG
echo
echo "== ctfio stats"
$CTFIO stats $CFG
echo
echo "== ctfio dump: the first 3 sequences in file order (JSON lines)"
$CTFIO dump $CFG --count 3 --line
echo
echo "== ctfio dump --mb 16: randomized minibatches of 16 samples, 2 workers, rank 0"
$CTFIO dump $CFG --mb 16 --count 3 --workers 2 --rank 0 | cut -c1-160
echo
echo "== ctfio dump --stats: where one run's time went, and the stage that limits it"
$CTFIO dump $CFG --mb 16 --count 40 --stats 2>&1 >/dev/null
echo
echo "== checkpoint after 4 minibatches, then resume: minibatches 5-6 must match"
$CTFIO dump $CFG --mb 16 --count 6 > $D/full.jsonl
$CTFIO dump $CFG --mb 16 --count 4 --state | grep '^state ' | tail -n 1 | cut -c7- > $D/state.json
echo "state: $(cat $D/state.json)"
$CTFIO dump $CFG --mb 16 --count 2 --restore @$D/state.json > $D/resumed.jsonl
tail -n 2 $D/full.jsonl | sed 's/"index": [0-9]*, //' > $D/a.jsonl
sed 's/"index": [0-9]*, //' $D/resumed.jsonl > $D/b.jsonl
if cmp -s $D/a.jsonl $D/b.jsonl; then
    echo "resumed minibatches are identical to the uninterrupted run"
else
    echo "MISMATCH between resumed and uninterrupted run" >&2
    exit 1
fi

echo
echo "== a sharded corpus: sample.ctf split into 4 files, read as one data set by 2 workers"
mkdir -p $D/shards
python3 - $D <<'PY'
import sys
d = sys.argv[1]
lines = open(d + "/sample.ctf").read().splitlines(True)
keys = []
for l in lines:
    k = l.split(" ", 1)[0]
    if not keys or keys[-1] != k:
        keys.append(k)
per = (len(keys) + 3) // 4
outs = [open("%s/shards/part-%05d.ctf" % (d, i), "w") for i in range(4)]
for l in lines:
    outs[keys.index(l.split(" ", 1)[0]) // per].write(l)
PY
set -f # the pattern goes to ctfio, which expands it (byte-wise sorted)
SHARDS="--file $D/shards/part-*.ctf --input features:4:dense --input labels:3:sparse"
$CTFIO stats $SHARDS | sed -n '1,11p'
for r in 0 1; do
    $CTFIO dump $SHARDS --mb 32 --workers 2 --rank $r --seed 1 --window 4 --chunk-size 512 \
        --max-sweeps 1 > $D/shards/rank$r.jsonl
done
echo "rank 0, first minibatch: $(head -n 1 $D/shards/rank0.jsonl | cut -c1-150)..."
grep -o '"key": [0-9]*, "file": [0-9]*' $D/shards/rank0.jsonl $D/shards/rank1.jsonl |
    cut -d: -f2- | sort > $D/shards/seen.txt
total=$($CTFIO stats $SHARDS | sed -n 's/^sequences: //p')
if [ "$(wc -l < $D/shards/seen.txt)" -eq "$total" ] && [ -z "$(uniq -d $D/shards/seen.txt)" ]; then
    echo "one sweep over 2 workers delivered each of the $total sequences of the 4 files" \
        "exactly once"
else
    echo "MISMATCH: the workers did not deliver every sequence exactly once" >&2
    exit 1
fi
set +f

echo
echo "== a mix of two data sets on one timeline: sample.ctf (weight 3) and a smaller set (weight 1)"
python3 tools/make_sample.py $D/small.ctf 40
MIX="--mix 3:$D/sample.ctf --mix 1:$D/small.ctf --input features:4:dense --input labels:3:sparse"
$CTFIO dump $MIX --mb 8 --count 1 --seed 2 | cut -c1-150
echo "..."
$CTFIO dump $MIX --mb 32 --seed 2 --max-sweeps 1 > $D/mix.jsonl
python3 - $D/mix.jsonl <<'PY'
import json, sys
taken = [0, 0]
for line in open(sys.argv[1]):
    for s in json.loads(line)["sequences"]:
        taken[s["file"]] += len(s["streams"]["features"])
total = sum(taken)
print("one sweep of the mix (until both parts finished theirs): %d samples, %d from sample.ctf "
      "(%.1f%%), %d from small.ctf (%.1f%%); weights 3:1 ask for 75%% / 25%%"
      % (total, taken[0], 100.0 * taken[0] / total, taken[1], 100.0 * taken[1] / total))
# sequences of at most 5 samples: within 0.75 * max(5 / 0.75, 5 / 0.25) = 15 of the share
if abs(taken[0] - 0.75 * total) > 15:
    sys.exit("MISMATCH: the mix does not hold its proportions")
PY

if [ -n "$PY" ]; then
    echo
    echo "== Python: a composite source, features and labels in two files joined by key" \
        "(examples/composite.py)"
    "$PY" examples/composite.py $D
fi

if [ -n "$PY" ]; then
    echo
    echo "== Python: training on scikit-learn's digits with training_session" \
        "(examples/train_digits.py)"
    "$PY" examples/train_digits.py $D
fi

# PyTorch part, when torch imports: an MLP on sample.ctf through ctfio.torch, checkpoint and resume.
if [ -n "$PY" ] && "$PY" -c "import torch" >/dev/null 2>&1; then
    echo
    echo "== PyTorch: an MLP on $D/sample.ctf through ctfio.torch, checkpoint and resume" \
        "(examples/torch_mlp.py)"
    "$PY" examples/torch_mlp.py $D
fi

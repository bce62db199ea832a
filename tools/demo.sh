#!/bin/sh
# make demo: generate a sample CTF file, check it, show its statistics, dump it in file order,
# then read randomized minibatches, save a checkpoint and resume from it. Given a Python with
# the ctfio package installed (make passes .venv/bin/python), it then trains a model on
# scikit-learn's digits through training_session (examples/train_digits.py).
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

if [ -n "$PY" ]; then
    echo
    echo "== Python: training on scikit-learn's digits with training_session (examples/train_digits.py)"
    "$PY" examples/train_digits.py $D
fi

# PyTorch part, when torch imports: an MLP on sample.ctf through ctfio.torch, checkpoint and resume.
if [ -n "$PY" ] && "$PY" -c "import torch" >/dev/null 2>&1; then
    echo
    echo "== PyTorch: an MLP on $D/sample.ctf through ctfio.torch, checkpoint and resume (examples/torch_mlp.py)"
    "$PY" examples/torch_mlp.py $D
fi

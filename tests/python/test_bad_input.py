"""Bad input at scale: seeded corpora of malformed CTF files with known injected
errors of every kind of rules 1-2 -- at chunk boundaries, in the first and the last line, with LF,
CRLF and mixed line ends, with and without a UTF-8 BOM and a final newline, in id and line mode.

The generator keeps an independent pure-Python model of every line it writes: which samples are
good (with their values), which are in error and where (line, column, byte offset), which rows
yield nothing and which sequences are dropped. Then, for every file:

* max_errors = N (the number injected) reads to the end: stats() counts exactly N errors and the
  model's dropped rows / sequences / samples, and the delivered data equals the model's good data
  -- the file minus exactly the dropped samples and rows;
* max_errors = k for every k < N stops with ctfio.ParseError at the (k+1)-th injected error's
  line, column and byte offset;
* the result does not depend on the number of prefetch threads.

Fatal problems (rules 2.4) stop the reader whatever max_errors says, at their exact location.
"""
import random

import numpy as np
import pytest

import ctfio

DIM_A, DIM_B = 3, 5
CHUNK = 240                       # chunk_size_in_bytes: many chunks per file
GOOD_NUMBERS = ["0", "7", "-3", "12.5", "-0.25", "45.", "1e2", "2.5E-1", "+4", "1024", "3.0e+1"]
BAD_NUMBERS = ["x", ".5", "1.e5", "1e", "inf", "nan", "0x1F", "1,5", "--1", "1e+", "abc", "+"]
SEPS = [" ", "\t", "  ", " \t"]


# ---------------------------------------------------------------------------------------------
# Items: the parts of a row, each knowing where its error is (if any)
# ---------------------------------------------------------------------------------------------

class Item:
    """A part of a row. stream: 'a', 'b' or None (junk, empty alias); err: offset of the error
    inside text or None; value: the sample the reader delivers when the item is good; glue: no
    separator after it."""

    def __init__(self, text, stream=None, err=None, value=None, glue=False, kind="ok"):
        self.text, self.stream, self.err, self.value, self.glue, self.kind = (
            text, stream, err, value, glue, kind)


def good_a(rng):
    vals = [rng.choice(GOOD_NUMBERS) for _ in range(DIM_A)]
    text = "|a" + "".join(rng.choice(SEPS) + v for v in vals)
    return Item(text, "a", value=[float(v) for v in vals])


def bad_a(rng):
    kind = rng.choice(["badnum", "oversize"])
    vals = [rng.choice(GOOD_NUMBERS) for _ in range(DIM_A + (1 if kind == "oversize" else 0))]
    bad = DIM_A if kind == "oversize" else rng.randrange(DIM_A)
    if kind == "badnum":
        vals[bad] = rng.choice(BAD_NUMBERS)
    text, err = "|a", None
    for i, v in enumerate(vals):
        text += rng.choice(SEPS)
        if i == bad:
            err = len(text)
        text += v
    return Item(text, "a", err=err, kind="a_" + kind)


def good_b(rng):
    idx = sorted(rng.sample(range(DIM_B), rng.randint(0, 3)))
    ent = [(i, rng.choice(GOOD_NUMBERS)) for i in idx]
    text = "|b" + "".join(rng.choice(SEPS) + "%d:%s" % e for e in ent)
    return Item(text, "b", value=[(i, float(v)) for i, v in ent])


def bad_b(rng):
    kind = rng.choice(["range", "nocolon", "novalue", "negative"])
    n = rng.randint(1, 3)
    bad = rng.randrange(n)
    text, err = "|b", None
    for k in range(n):
        text += rng.choice(SEPS)
        i = rng.randrange(DIM_B)
        if k != bad:
            text += "%d:%s" % (i, rng.choice(GOOD_NUMBERS))
            continue
        start = len(text)
        if kind == "range":
            text += "%d:1" % rng.choice([DIM_B, DIM_B + 1, 99, 4294967296])
            err = start
        elif kind == "nocolon":
            text += str(i) + rng.choice(["", "=1", ";2", ".5"])
            err = start + len(str(i))
        elif kind == "novalue":
            text += "%d:%s" % (i, rng.choice(["", "x", ".5", "+", "1x", "1.e5"]))
            err = start + len(str(i)) + 1
        else:
            text += rng.choice(["-1:1", "-0:2", "x:1", ":1"])
            err = start
    return Item(text, "b", err=err, kind="b_" + kind)


def junk(rng):  # text where '|' and an input name are expected (only at the start of a row)
    return Item(rng.choice(["junk", "x", "a", "#"]), err=0, kind="nobar")


def empty_alias(rng):  # '|' without a name: "| 5", or "||b ..." (glued to the next item)
    if rng.random() < 0.5:
        return Item("|" + rng.choice(SEPS) + rng.choice(["5", "x 1", "a"]), err=0,
                    kind="empty_alias")
    return Item("|", err=0, glue=True, kind="empty_alias")


# ---------------------------------------------------------------------------------------------
# Rows, sequences, files and the model
# ---------------------------------------------------------------------------------------------

class Row:
    """One physical line: a prefix (the sequence id) and items; or an `empty` row (blank,
    comment-only, unknown inputs only)."""

    def __init__(self, prefix, items, empty=False):
        self.prefix, self.items, self.empty = prefix, items, empty

    def render(self):
        out = self.prefix
        cols = []  # per item: 1-based column of its first byte
        for k, it in enumerate(self.items):
            if k and not self.items[k - 1].glue:
                out += " "
            cols.append(len(out) + 1)
            out += it.text
        return out, cols


class Model:
    """What the reader must report and deliver for a rendered file."""

    def __init__(self):
        self.errors = []        # (line, column, offset, what) in the reader's commit order
        self.delivered = []     # (key, [a samples], [b samples]) of every delivered sequence
        self.dropped_rows = 0
        self.dropped_sequences = 0
        self.dropped_samples = {"a": 0, "b": 0}
        self.boundary_errors = 0  # errors in the first or last line of a chunk


def data_row(rng, prefix, err_rate, force_error=False):
    """A row with streams a and b in random order, with injected errors at rate err_rate."""
    inject = force_error or rng.random() < err_rate
    kinds = set()
    if inject:
        kinds = set(rng.sample(["a", "b", "twice", "junk", "empty_alias", "a+b"],
                               rng.choice([1, 1, 1, 2])))
    a = bad_a(rng) if kinds & {"a", "a+b"} else good_a(rng)
    b = bad_b(rng) if kinds & {"b", "a+b"} else good_b(rng)
    order = [a, b] if rng.random() < 0.5 else [b, a]
    if "empty_alias" in kinds:
        order.insert(rng.randrange(len(order) + 1), empty_alias(rng))
        if order[-1].glue:  # "|" at the end of the line is an empty alias too, keep it simple
            order[-1] = Item("|" + " 5", err=0, kind="empty_alias")
    if "twice" in kinds:
        order.append(good_a(rng) if rng.random() < 0.5 else good_b(rng))
    if "junk" in kinds:
        order.insert(0, junk(rng))
    return Row(prefix, order)


def empty_row(rng, key, first_of_seq, line_mode):
    """A row that yields no sample. In id mode it belongs to the current sequence (an error);
    in line mode it is skipped. Without an id it cannot open a sequence."""
    with_id = ["%d" % key, "%d |# a comment" % key, "%d |zz 1 2" % key, "%d\t|#c|#d" % key]
    no_id = ["", "\t", "  ", "|# only a comment", "|zz 3", " |#x"]
    if line_mode:
        return Row(rng.choice(no_id[:3] + ["|# c", "|zz 1", "17 |zz 2"]), [], empty=True)
    forms = with_id if first_of_seq else with_id + no_id
    return Row(rng.choice(forms), [], empty=True)


def build(seed, line_mode=False, newline="lf", bom=False, final_newline=True, n_seqs=70,
          err_rate=0.12):
    """A seeded malformed file: returns (bytes, Model). Errors are injected at random and, on
    purpose, into the first row of the file, the last row of the file and the first and last rows
    of chunks (computed on a first rendering of the good layout)."""
    rng = random.Random(seed)
    # Pass 1: the layout of sequences (row counts), to find chunk boundary rows.
    lengths = [1 if line_mode else rng.choice([1, 1, 2, 3, 4]) for _ in range(n_seqs)]
    approx = [sum(40 for _ in range(n)) for n in lengths]  # rows are ~40 bytes
    first_rows, last_rows = set(), set()
    size = None
    for s, nbytes in enumerate(approx):
        if size is None or size + nbytes > CHUNK:
            first_rows.add((s, 0))
            if s:
                last_rows.add((s - 1, lengths[s - 1] - 1))
            size = 0
        size += nbytes
    first_rows.add((0, 0))
    last_rows.add((n_seqs - 1, lengths[-1] - 1))
    targets = {t for t in first_rows | last_rows if rng.random() < 0.6}
    targets |= {(0, 0), (n_seqs - 1, lengths[-1] - 1)}

    # Pass 2: rows.
    seqs = []  # (key or None, [Row])
    key = 0
    for s in range(n_seqs):
        key += rng.randint(1, 3)

        def pre(key=key, s=s):
            return ("%d" % key) + rng.choice(SEPS + ["", "  "]) if not line_mode else (
                rng.choice(["", "", "5 ", "123\t"]) if s else "")
        if not line_mode and rng.random() < 0.05:
            # rules 2.2: a sequence whose longest stream has fewer samples than it has rows.
            rows = [Row(pre(), [good_a(rng)]), Row(pre(), [good_b(rng)])]
            rows[0].longest_error = True
            seqs.append((key, rows))
            continue
        rows = [data_row(rng, pre(), err_rate, force_error=(s, j) in targets)
                for j in range(lengths[s])]
        # A sequence must keep a and b somewhere (else it is a fatal error, tested apart):
        # make sure each stream has a good sample or an error in the sequence.
        if not line_mode and rng.random() < 0.15:
            at = rng.randint(0, len(rows))
            rows.insert(at, empty_row(rng, key, at == 0, False))
        seqs.append((key, rows))
        if line_mode and rng.random() < 0.15:
            seqs.append((None, [empty_row(rng, 0, False, True)]))
    # The file's first row must decide the mode: a data row or an id (no blank first line in id
    # mode; '|' first in line mode).
    if line_mode:
        seqs[0][1][0].prefix = ""
        if seqs[0][1][0].items and seqs[0][1][0].items[0].kind == "nobar":
            seqs[0][1][0].items.pop(0)
            seqs[0][1][0].items.append(good_a(rng) if rng.random() < .5 else good_b(rng))
    if not final_newline:
        # An unterminated run of blanks is not a line: end with a data row.
        last = seqs[-1][1][-1]
        if last.empty:
            seqs[-1][1].pop()
            if not seqs[-1][1]:
                seqs.pop()
    return render(seqs, rng, line_mode, newline, bom, final_newline)


def render(seqs, rng, line_mode, newline, bom, final_newline):
    out = bytearray(b"\xef\xbb\xbf" if bom else b"")
    model = Model()
    line_no = 0
    placed = []  # (seq index, row, line_no, offset) for the model pass
    for si, (_key, rows) in enumerate(seqs):
        for row in rows:
            text, cols = row.render()
            nl = {"lf": "\n", "crlf": "\r\n", "mixed": rng.choice(["\n", "\r\n"])}[newline]
            placed.append((si, row, line_no, len(out), cols))
            out += (text + nl).encode()
            line_no += 1
    if not final_newline:
        out = out[:-2] if out.endswith(b"\r\n") else out[:-1]

    # Chunks as the indexer builds them (rules 4.2): sequence spans from first byte to the next
    # sequence's first byte; a new chunk when the next would make the span exceed CHUNK.
    starts = []  # (seq index, first line, first offset) of data sequences
    for si, row, ln, off, _cols in placed:
        if line_mode:
            if not row.empty:
                starts.append((si, ln, off))
        elif not starts or starts[-1][0] != si:
            starts.append((si, ln, off))
    ends = [s[2] for s in starts[1:]] + [len(out)]
    chunk_first_lines, chunk_last_lines = set(), set()
    size = None
    for k, (_si, ln, off) in enumerate(starts):
        span = ends[k] - off
        if size is None or size + span > CHUNK:
            chunk_first_lines.add(ln)
            if k:
                chunk_last_lines.add(ln - 1)
            size = 0
        size += span
    chunk_last_lines.add(line_no - 1)

    # The model: per sequence, rows in order, items in order (the parser's rules, rules 1-2).
    by_seq = {}
    for p in placed:
        by_seq.setdefault(p[0], []).append(p)
    for si, (key, _rows) in enumerate(seqs):
        if line_mode and key is None:
            continue
        prows = by_seq[si]
        seq_key = prows[0][2] if line_mode else key
        good = {"a": [], "b": []}
        bad = {"a": 0, "b": 0}
        errs = []
        nonempty = 0
        for _, row, ln, off, cols in prows:
            seen = set()
            got = 0
            row_errs = 0
            for it, col in zip(row.items, cols):
                if it.stream in seen:
                    errs.append((ln + 1, col, off + col - 1, "twice"))
                    bad[it.stream] += 1
                    row_errs += 1
                elif it.err is not None:
                    errs.append((ln + 1, col + it.err, off + col - 1 + it.err, it.kind))
                    if it.stream:
                        bad[it.stream] += 1
                    row_errs += 1
                else:
                    good[it.stream].append(it.value)
                    seen.add(it.stream)
                    got += 1
            if got:
                nonempty += 1
            else:
                model.dropped_rows += 1
                if not row_errs:
                    errs.append((ln + 1, 1, off, "empty_row"))
        dropped = False
        for s in ("a", "b"):
            if not good[s]:
                assert bad[s], "the generator made a sequence without stream %s" % s
                dropped = True
                break
        if dropped:
            model.dropped_sequences += 1
            for s in ("a", "b"):
                model.dropped_samples[s] += len(good[s])
        elif max(len(good["a"]), len(good["b"])) < nonempty:
            errs.append((prows[0][2] + 1, 1, prows[0][3], "longest"))
        for s in ("a", "b"):
            model.dropped_samples[s] += bad[s]
        model.errors += errs
        if not dropped:
            model.delivered.append((seq_key, good["a"], good["b"]))
    model.boundary_errors = sum(1 for e in model.errors
                                if e[0] - 1 in chunk_first_lines or e[0] - 1 in chunk_last_lines)
    model.first_line_errors = sum(1 for e in model.errors if e[0] == 1)
    model.last_line_errors = sum(1 for e in model.errors if e[0] == line_no)
    return bytes(out), model


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------

def source(path, max_errors, line_mode=False, threads=2):
    return ctfio.MinibatchSource(
        ctfio.CTFDeserializer(path, ctfio.StreamDefs(
            a=ctfio.StreamDef(field="a", shape=DIM_A),
            b=ctfio.StreamDef(field="b", shape=DIM_B, is_sparse=True))),
        randomize=False, max_sweeps=1, max_errors=max_errors, precision="double",
        chunk_size_in_bytes=CHUNK, num_threads=threads, prefetch_chunks=3, trace_level=0,
        skip_sequence_ids=line_mode)


def read_all(src, mb_size=7):
    """Every delivered sequence as (key, [dense rows], [[(index, value)] per sample])."""
    out = []
    while True:
        mb = src.next_minibatch(mb_size)
        if not mb:
            return out
        a, b = mb[src.streams.a], mb[src.streams.b]
        keys = [int(k) for k in a.keys]
        la, lb = np.asarray(a.lengths), np.asarray(b.lengths)
        av = np.asarray(a.values)
        bptr, bidx, bval = np.asarray(b.indptr), np.asarray(b.indices), np.asarray(b.values)
        ia = ib = 0
        for i, key in enumerate(keys):
            rows = [list(map(float, av[ia + j])) for j in range(int(la[i]))]
            ia += int(la[i])
            samples = []
            for j in range(int(lb[i])):
                lo, hi = int(bptr[ib + j]), int(bptr[ib + j + 1])
                samples.append([(int(bidx[t]), float(bval[t])) for t in range(lo, hi)])
            ib += int(lb[i])
            out.append((key, rows, samples))


VARIANTS = [
    # (seed, line_mode, newline, bom, final_newline)
    (1, False, "lf", False, True),
    (2, False, "crlf", True, True),
    (3, False, "mixed", False, False),
    (4, False, "mixed", True, False),
    (5, False, "crlf", False, False),
    (6, True, "lf", False, True),
    (7, True, "crlf", True, False),
    (8, True, "mixed", True, True),
]


@pytest.mark.parametrize("seed,line_mode,newline,bom,final_newline", VARIANTS)
def test_exact_error_counts_locations_and_data(tmp_path, seed, line_mode, newline, bom,
                                               final_newline):
    data, model = build(seed, line_mode, newline, bom, final_newline)
    path = str(tmp_path / "bad.ctf")
    with open(path, "wb") as f:
        f.write(data)
    n = len(model.errors)
    # The corpus really covers what it claims.
    assert n >= 10
    assert model.first_line_errors >= 1 and model.last_line_errors >= 1
    assert model.boundary_errors >= 4
    kinds = {e[3] for e in model.errors}
    assert len(kinds) >= 8, kinds

    # max_errors = N: the whole file is read; counts and data are exact.
    for threads in (2, 0):
        src = source(path, n, line_mode, threads)
        got = read_all(src)
        st = src.stats()
        assert st["errors"] == n
        assert st["dropped_rows"] == model.dropped_rows
        assert st["dropped_sequences"] == model.dropped_sequences
        assert [s["dropped_samples"] for s in st["streams"]] == [
            model.dropped_samples["a"], model.dropped_samples["b"]]
        assert st["sequences"] == len(model.delivered)
        assert [s["samples"] for s in st["streams"]] == [
            sum(len(d[1]) for d in model.delivered), sum(len(d[2]) for d in model.delivered)]
        assert got == model.delivered
        src.close()

    # max_errors = k < N: stops at the (k+1)-th error, with its exact location.
    for k in range(n):
        src = source(path, k, line_mode, threads=2 if k % 2 else 0)
        with pytest.raises(ctfio.ParseError) as ei:
            read_all(src, mb_size=5)
        e = ei.value
        line, col, off, what = model.errors[k]
        assert (e.line, e.column, e.offset) == (line, col, off), (k, what, str(e))
        assert e.path == path and e.code == "CTF_EPARSE"
        assert "reached the maximum number of allowed errors (%d)" % k in str(e)
        src.close()


def test_error_location_does_not_depend_on_chunking(tmp_path):
    data, model = build(11, False, "mixed", True, False)
    path = str(tmp_path / "bad.ctf")
    with open(path, "wb") as f:
        f.write(data)
    n = len(model.errors)
    for chunk in (1, 97, 1 << 20):
        src = ctfio.MinibatchSource(
            ctfio.CTFDeserializer(path, ctfio.StreamDefs(
                a=ctfio.StreamDef(field="a", shape=DIM_A),
                b=ctfio.StreamDef(field="b", shape=DIM_B, is_sparse=True))),
            randomize=False, max_sweeps=1, max_errors=n, precision="double",
            chunk_size_in_bytes=chunk, trace_level=0)
        assert read_all(src) == model.delivered
        assert src.stats()["errors"] == n


# ---------------------------------------------------------------------------------------------
# Fatal problems (rules 2.4): whatever max_errors says
# ---------------------------------------------------------------------------------------------

GOOD = ["%d |a 1 2 3 |b 0:1\n" % i for i in range(1, 31)]


def _fatal(tmp_path, data, max_errors, at_open):
    path = str(tmp_path / "fatal.ctf")
    with open(path, "wb") as f:
        f.write(data)
    delivered = []
    with pytest.raises(ctfio.ParseError) as ei:
        src = source(path, max_errors)
        assert not at_open, "the problem must be found when the file is indexed"
        while True:
            mb = src.next_minibatch(1)
            if not mb:
                break
            delivered += [int(k) for k in mb[src.streams.a].keys]
    e = ei.value
    assert e.path == path
    return e, delivered


@pytest.mark.parametrize("max_errors", [0, 1000])
@pytest.mark.parametrize("case", [
    # (name, bytes, line, column, offset, message part)
    ("empty", b"", None, None, None, "empty"),
    ("blank", b"  \n\r\n\t\n", None, None, None, "only blank lines"),
    ("utf16", b"\xff\xfe1\x00 \x00|\x00", 1, 1, 0, "UTF-16"),
    ("utf16be", b"\xfe\xff\x001", 1, 1, 0, "UTF-16"),
    ("first_char", b"x |a 1 2 3 |b 0:1\n", 1, 1, 0, "expected a sequence id"),
    ("first_char_bom", b"\xef\xbb\xbf\r\n  # |a 1\n", 2, 3, 7, "expected a sequence id"),
    ("leading_blank", b"  1 |a 1 2 3 |b 0:1\n", 1, 1, 0, "found a blank"),
    ("overflow_mid", "".join(GOOD[:11]).encode() + b"18446744073709551616 |a 1 2 3 |b 0:1\n"
     + "".join(GOOD[12:]).encode(), 12, 1, len("".join(GOOD[:11])), "64 bits"),
    ("overflow_last", "".join(GOOD).encode() + b"99999999999999999999999 |a 1", 31, 1,
     len("".join(GOOD)), "64 bits"),
])
def test_fatal_at_index_time(tmp_path, case, max_errors):
    name, data, line, col, off, what = case
    e, _ = _fatal(tmp_path, data, max_errors, at_open=True)
    assert (e.line, e.column, e.offset) == (line, col, off), str(e)
    assert what in str(e)


@pytest.mark.parametrize("max_errors", [0, 1000])
@pytest.mark.parametrize("where", ["first", "chunk_start", "chunk_end", "last"])
def test_fatal_stream_absent_from_a_sequence(tmp_path, where, max_errors):
    """A stream absent from a whole sequence is fatal (CNTK: "Malformed input file"); earlier
    sequences are delivered, and with max_errors = 0 the error still is the fatal one."""
    lines = list(GOOD)
    # One-line sequences: chunks of CHUNK bytes as the indexer cuts them (rules 4.2).
    firsts, size = [], None
    for i, ln in enumerate(lines):
        if size is None or size + len(ln) > CHUNK:
            firsts.append(i)
            size = 0
        size += len(ln)
    assert len(firsts) >= 2
    at = {"first": 0, "chunk_start": firsts[1],
          "chunk_end": firsts[2 if len(firsts) > 2 else 1] - 1,
          "last": len(lines) - 1}[where]
    lines[at] = "%d |a 4 5 6\n" % (at + 1)  # shorter: the chunks before it do not move
    e, delivered = _fatal(tmp_path, "".join(lines).encode(), max_errors, at_open=False)
    assert (e.line, e.column, e.offset) == (at + 1, 1, len("".join(lines[:at]))), str(e)
    assert "stream 'b' is absent from sequence %d" % (at + 1) in str(e)
    assert e.code == "CTF_EPARSE"
    # A chunk is committed before any of its sequences is delivered: exactly the sequences of
    # the chunks before the bad one arrive.
    chunk_first = max(f for f in firsts if f <= at)
    assert delivered == list(range(1, chunk_first + 1))

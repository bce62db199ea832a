"""Type stubs for ctfio._ctfio, the C core of ctfio (python/ctfio/_ctfio.c)."""

import os
from collections.abc import Sequence
from typing import Any, Callable, Literal, TypedDict

__version__: str
INFINITELY_REPEAT: int  # 2**64 - 1, the library's CTF_INFINITELY_REPEAT
FULL_DATA_SWEEP: int  # 2**64 - 2, the library's CTF_FULL_DATA_SWEEP
DEFAULT_RANDOMIZATION_WINDOW_IN_CHUNKS: int  # the library's default randomization_window

_Path = str | bytes | os.PathLike[str] | os.PathLike[bytes]
# (name, alias or None for the name, dim, is_sparse, defines_mb_size)
StreamTuple = tuple[str, str | None, int, bool, bool]
# log(severity 0 error / 1 warning / 2 info, formatted line, path, line, column, byte offset)
# a deserializer joined by key: (paths, streams, skip_sequence_ids)
JoinTuple = tuple[Sequence[_Path], Sequence[StreamTuple], bool]
# a part of a mix: (paths, streams or None, joins or None, skip_sequence_ids, weight)
MixTuple = tuple[
    Sequence[_Path], Sequence[StreamTuple] | None, Sequence[JoinTuple] | None, bool, float
]
LogCallback = Callable[[int, str, str | None, int | None, int | None, int | None], Any]

class CTFError(Exception):
    code: str | None  # the CTF_E* name, e.g. "CTF_EPARSE"
    path: str | None
    line: int | None  # 1-based; None if unknown
    column: int | None  # 1-based, in bytes; None if unknown
    offset: int | None  # 0-based absolute byte offset; None if unknown
    message: str | None  # the message without the location

class ParseError(CTFError, ValueError): ...
class StateError(CTFError, ValueError): ...
class DataChangedError(ParseError): ...  # CTF_ECHANGED: the file changed after indexing

class Buffer:
    """Read-only, C-contiguous, zero-copy buffer over a Minibatch's memory (keeps it alive)."""

    @property
    def shape(self) -> tuple[int] | tuple[int, int]: ...
    @property
    def format(self) -> str: ...  # "f", "d", "I" (uint32), "q" (int64), "i" (int32), "Q" (uint64)
    @property
    def itemsize(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def obj(self) -> Minibatch: ...
    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...

class StreamView(TypedDict):
    name: str
    is_sparse: bool
    dim: int
    num_samples: int
    num_sequences: int
    nnz: int  # sparse: stored entries; dense: num_samples * dim
    precision: Literal["float", "double"]
    values: Buffer  # dense (num_samples, dim); sparse (nnz,)
    lengths: Buffer  # (num_sequences,) uint32
    indptr: Buffer | None  # sparse: (num_samples + 1,) int64
    indices: Buffer | None  # sparse: (nnz,) int32

class Minibatch:
    @property
    def num_sequences(self) -> int: ...
    @property
    def num_samples(self) -> int: ...  # index samples of this share
    @property
    def num_streams(self) -> int: ...
    @property
    def end_of_sweep(self) -> bool: ...
    @property
    def position(self) -> int: ...
    @property
    def sweep(self) -> int: ...
    @property
    def global_samples(self) -> int: ...  # index samples of the global minibatch
    @property
    def samples_per_sweep(self) -> int: ...
    @property
    def keys(self) -> Buffer: ...  # (num_sequences,) uint64
    @property
    def lines(self) -> Buffer: ...  # (num_sequences,) uint64, 1-based
    @property
    def files(self) -> Buffer: ...  # (num_sequences,) uint32, index into Reader.files
    def stream(self, i: int, /) -> StreamView: ...
    # {keys[i]: cls object} per stream, made without __init__ (MinibatchSource.next_minibatch)
    def stream_data(self, cls: type, keys: tuple, frame_mode: bool, /) -> dict: ...
    # part 0 values, 1 lengths, 2 indptr, 3 indices (None for a dense stream's 2 and 3)
    def buffer(self, i: int, part: int, /) -> Buffer | None: ...

class Stats(TypedDict):
    sequences: int
    errors: int
    warnings: int
    dropped_rows: int
    dropped_sequences: int
    chunks_loaded: int
    chunks_resident: int
    chunks_resident_peak: int
    bytes_resident: int
    bytes_resident_peak: int
    num_streams: int
    keys_missing: int  # joins: primary sequences a joined deserializer lacks (dropped)
    keys_unmatched: int  # joins: joined sequences whose key the primary lacks
    bad_records: int  # records written to the bad-records file
    streams: list[dict[str, Any]]  # {"name", "samples", "nonzeros", "dropped_samples"}

class IndexInfo(TypedDict):
    file_size: int
    sequences: int
    samples: int
    lines: int
    chunks: int
    max_sequence_samples: int
    line_mode: bool
    from_cache: bool

class Reader:
    def __new__(
        cls,
        path: _Path | Sequence[_Path] | None,  # a list, or a pattern: a corpus; None: mix
        streams: Sequence[StreamTuple],
        *,
        # The reader parameters: None (or left out) is the library's default.
        # BEGIN reader keywords (tools/gen_stub.py; edit lib/config/params.def)
        # sweep k shuffles with seed + k; default 0
        randomization_seed: int | None = None,
        # randomization window in chunks (or samples); 0: off; default 128
        randomization_window: int | None = None,
        # the window counts samples, not chunks; default False
        window_in_samples: bool | None = None,
        # target chunk span in bytes; default 33554432
        chunk_size_bytes: int | None = None,
        # every line is its own sequence; default False
        skip_sequence_ids: bool | None = None,
        # every sequence is one sample per stream; default False
        frame_mode: bool | None = None,
        # element type: float or double; default "float"
        precision: Literal["float", "float32", "double", "float64"] | None = None,
        # false: file order in every sweep; default True
        randomize: bool | None = None,
        # errors tolerated over the reader's life; default 0
        max_errors: int | None = None,
        # 0 errors, 1 also warnings, 2 also info; default 1
        trace_level: int | None = None,
        # keep parsed chunks once read; default False
        keep_data_in_memory: bool | None = None,
        # write and load the index cache next to the file; default False
        cache_index: bool | None = None,
        # end after this many samples (or FULL_DATA_SWEEP: one sweep); default INFINITELY_REPEAT
        max_samples: int | None = None,
        # end after this many sweeps; default INFINITELY_REPEAT
        max_sweeps: int | None = None,
        # truncated BPTT length; 0: off; default 0
        truncation_length: int | None = None,
        # workers sharing the data; default 1
        num_workers: int | None = None,
        # this worker, < num_workers; default 0
        worker_rank: int | None = None,
        # background parse threads; 0: the caller's; default one per core
        num_threads: int | None = None,
        # chunks parsed ahead; default 2 * num_threads + 2
        prefetch_chunks: int | None = None,
        # bytes the chunk cache directory may hold; 0: no limit; default 0
        chunk_cache_limit: int | None = None,
        # END reader keywords
        log: LogCallback | None = None,  # None: logging.getLogger("ctfio")
        # deserializers joined by key: (paths, streams, skip_sequence_ids)
        joins: Sequence[JoinTuple] | None = None,
        # a mix: (paths, streams or None, joins or None, skip_sequence_ids, weight) per part
        mix: Sequence[MixTuple] | None = None,
        remote: dict[str, Any] | None = None,
        chunk_cache: _Path | None = None,  # a directory of parsed chunks (CBF layout)
        bad_records: _Path | None = None,  # the bad-records file (JSON lines; max_errors > 0)
    ) -> Reader: ...
    def next(
        self,
        num_samples: int,
        num_workers: int | None = None,
        worker_rank: int | None = None,
        period: int | None = None,
    ) -> Minibatch | None: ...  # period: no minibatch crosses a multiple of it
    def undo(self) -> None: ...  # takes back the last next()
    def get_state(self) -> str: ...
    def state_at(self, position: int, /) -> str: ...  # not for a mix or truncated BPTT
    def restore_state(self, state: str | bytes, /) -> None: ...
    def skip(self, num_samples: int, /) -> None: ...  # ctf_reader_skip
    @property
    def position(self) -> int: ...
    @position.setter
    def position(self, value: int) -> None: ...
    @property
    def closed(self) -> bool: ...
    @property
    def path(self) -> str: ...
    @property
    def files(self) -> list[str]: ...  # the data files, patterns expanded
    @property
    def samples_per_sweep(self) -> int: ...  # every file of a corpus; joined sequences
    def stats(self) -> Stats: ...
    def io_counters(self) -> dict[str, int]: ...
    def perf(self) -> dict[str, Any]: ...
    def index_info(self) -> IndexInfo: ...
    def close(self) -> None: ...
    def __enter__(self) -> Reader: ...
    def __exit__(self, *args: object) -> Literal[False]: ...

class ReaderArgs(TypedDict):
    path: str | None
    streams: list[StreamTuple]
    # BEGIN reader arguments (tools/gen_stub.py; edit lib/config/params.def)
    randomization_seed: int
    randomization_window: int
    window_in_samples: bool
    chunk_size_bytes: int
    skip_sequence_ids: bool
    frame_mode: bool
    precision: Literal["float", "double"]
    randomize: bool
    max_errors: int
    trace_level: int
    keep_data_in_memory: bool
    cache_index: bool
    max_samples: int
    max_sweeps: int
    truncation_length: int
    num_workers: int
    worker_rank: int
    num_threads: int
    prefetch_chunks: int | None  # None: 2 * num_threads + 2
    chunk_cache_limit: int
    # END reader arguments
    log: None

# The reader parameter table (lib/config/params.def), one dict per row.
def reader_params() -> list[dict[str, Any]]: ...
def bsconfig_load(
    path: _Path, section: str | None = None, overrides: Sequence[str] = ()
) -> ReaderArgs: ...

# Provider records, batches and passes (_provider.c over lib/format/record.c and
# lib/reader/pool.c; used by ctfio.paddle).
# A slot is (name, kind, seq_type, dim); kinds and seq_type numbers are shared with
# ctfio/paddle/types.py (DataType, SequenceType).
_Slot = tuple[str, int, int, int]
_PackedSlot = tuple[
    int,  # steps (samples in the batch for this slot)
    bytearray,  # data: dense values, int64 ids or sparse values
    bytearray | None,  # indptr (int64, steps + 1) for sparse slots
    bytearray | None,  # indices (int32) for sparse slots
    bytearray | None,  # seq_starts (int64) for sequence slots
    bytearray | None,  # sub_seq_starts (int64) for sub-sequence slots
]

def provider_encode(
    sample: Any, slots: Sequence[_Slot], check: bool = False, double: bool = False
) -> bytes: ...
def provider_pack(
    records: Sequence[bytes], slots: Sequence[_Slot], double: bool = False
) -> list[_PackedSlot]: ...

# One pass of a provider (lib/reader/pool.c). fill() pushes (record, units) items taken from
# the file the pool picks and returns True once the pass has no more data.
class SamplePool:
    def __init__(
        self,
        slots: Sequence[_Slot],
        double: bool,
        seed: int,
        pass_index: int,
        shuffle: bool,
        min_pool_size: int,
        pool_size: int,
        can_over: bool,
    ) -> None: ...
    def files(self, n: int, workers: int, rank: int) -> list[int]: ...
    def pick(self, n: int) -> int: ...
    def push(self, items: Sequence[tuple[bytes, int]]) -> None: ...
    # (units, samples, empty, goal, room, peak_units, peak_samples, delivered, batches)
    def info(self) -> tuple[int, int, bool, int, int, int, int, int, int]: ...
    def next(
        self, size: int, fill: Callable[[], bool]
    ) -> tuple[list[_PackedSlot], int, int] | None: ...
    def at_end(self, fill: Callable[[], bool]) -> bool: ...
    def skip(self, count: int, fill: Callable[[], bool]) -> int: ...

# The command-line tool (tools/ctfio.c compiled in, see _tools.c): runs it with argv (argv[0]
# is the program name) and returns its exit status; it may end the process itself.
def cli_main(argv: list[str]) -> int: ...

# The timeline (ctf_sweep_cut / ctf_sweep_boundary): starts is a uint64 buffer.
def sweep_cut(
    starts: Any, position: int, request: int, limit: int | None, workers: int, rank: int
) -> tuple[bytes, int, bool]: ...
def sweep_boundary(starts: Any, position: int) -> int: ...
def convert_file(
    src: _Path,
    dst: _Path,
    format: Literal["libsvm", "csv"],
    dim: int = 0,
    index_base: int = -1,
    classes: int = 0,
    label_columns: str | None = None,
    delimiter: str = ",",
    header: bool = False,
    features: str | None = None,
    labels: str | None = None,
    progress: Callable[[int, int], Any] | None = None,
) -> dict[str, Any]: ...  # a library error raises as a reader's does

# A CBF file's streams: [(name, dim, is_sparse, "float" | "double"), ...].
def cbf_streams(
    path: _Path,
    remote: dict[str, Any] | None = ...,
) -> list[tuple[str, int, bool, str]]: ...

# ctf_cbf_write: the CTF file (path, streams as for Reader) as the CBF file dst.
def cbf_write(
    path: Any,
    streams: Any,
    dst: _Path,
    chunk_size: int,
    precision: Literal["float", "double"],
    skip_sequence_ids: bool = False,
) -> dict[str, Any]: ...

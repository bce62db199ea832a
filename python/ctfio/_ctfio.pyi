"""Type stubs for ctfio._ctfio, the C core of ctfio (python/ctfio/_ctfio.c)."""

import os
from typing import Any, Callable, Dict, List, Literal, Optional, Sequence, Tuple, TypedDict, Union

__version__: str
INFINITELY_REPEAT: int  # 2**64 - 1, the library's CTF_INFINITELY_REPEAT
FULL_DATA_SWEEP: int  # 2**64 - 2, the library's CTF_FULL_DATA_SWEEP
DEFAULT_RANDOMIZATION_WINDOW_IN_CHUNKS: int  # the library's default randomization_window

_Path = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]
# (name, alias or None for the name, dim, is_sparse, defines_mb_size)
StreamTuple = Tuple[str, Optional[str], int, bool, bool]
# log(severity 0 error / 1 warning / 2 info, formatted line, path, line, column, byte offset)
LogCallback = Callable[[int, str, Optional[str], Optional[int], Optional[int], Optional[int]], Any]

class CTFError(Exception):
    code: Optional[str]  # the CTF_E* name, e.g. "CTF_EPARSE"
    path: Optional[str]
    line: Optional[int]  # 1-based; None if unknown
    column: Optional[int]  # 1-based, in bytes; None if unknown
    offset: Optional[int]  # 0-based absolute byte offset; None if unknown
    message: Optional[str]  # the message without the location

class ParseError(CTFError, ValueError): ...
class StateError(CTFError, ValueError): ...
class DataChangedError(ParseError): ...  # CTF_ECHANGED: the file changed after indexing

class Buffer:
    """Read-only, C-contiguous, zero-copy buffer over a Minibatch's memory (keeps it alive)."""

    @property
    def shape(self) -> Union[Tuple[int], Tuple[int, int]]: ...
    @property
    def format(self) -> str: ...  # "f", "d", "I" (uint32), "q" (int64), "i" (int32), "Q" (uint64)
    @property
    def itemsize(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def obj(self) -> "Minibatch": ...
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
    indptr: Optional[Buffer]  # sparse: (num_samples + 1,) int64
    indices: Optional[Buffer]  # sparse: (nnz,) int32

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
    def buffer(self, i: int, part: int, /) -> Optional[Buffer]: ...

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
    streams: List[Dict[str, Any]]  # {"name", "samples", "nonzeros", "dropped_samples"}

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
        path: Union[_Path, Sequence[_Path], None],  # a list, or a pattern: a corpus; None: mix
        streams: Sequence[StreamTuple],
        *,
        # The reader parameters: None (or left out) is the library's default.
        # BEGIN reader keywords (tools/gen_stub.py; edit lib/config/params.def)
        # sweep k shuffles with seed + k; default 0
        randomization_seed: Optional[int] = None,
        # randomization window in chunks (or samples); 0: off; default 128
        randomization_window: Optional[int] = None,
        # the window counts samples, not chunks; default False
        window_in_samples: Optional[bool] = None,
        # target chunk span in bytes; default 33554432
        chunk_size_bytes: Optional[int] = None,
        # every line is its own sequence; default False
        skip_sequence_ids: Optional[bool] = None,
        # every sequence is one sample per stream; default False
        frame_mode: Optional[bool] = None,
        # element type: float or double; default "float"
        precision: Optional[Literal["float", "float32", "double", "float64"]] = None,
        # false: file order in every sweep; default True
        randomize: Optional[bool] = None,
        # errors tolerated over the reader's life; default 0
        max_errors: Optional[int] = None,
        # 0 errors, 1 also warnings, 2 also info; default 1
        trace_level: Optional[int] = None,
        # keep parsed chunks once read; default False
        keep_data_in_memory: Optional[bool] = None,
        # write and load the index cache next to the file; default False
        cache_index: Optional[bool] = None,
        # end after this many samples (or FULL_DATA_SWEEP: one sweep); default INFINITELY_REPEAT
        max_samples: Optional[int] = None,
        # end after this many sweeps; default INFINITELY_REPEAT
        max_sweeps: Optional[int] = None,
        # truncated BPTT length; 0: off; default 0
        truncation_length: Optional[int] = None,
        # workers sharing the data; default 1
        num_workers: Optional[int] = None,
        # this worker, < num_workers; default 0
        worker_rank: Optional[int] = None,
        # background parse threads; 0: the caller's; default one per core
        num_threads: Optional[int] = None,
        # chunks parsed ahead; default 2 * num_threads + 2
        prefetch_chunks: Optional[int] = None,
        # bytes the chunk cache directory may hold; 0: no limit; default 0
        chunk_cache_limit: Optional[int] = None,
        # END reader keywords
        log: Optional[LogCallback] = None,  # None: logging.getLogger("ctfio")
        # deserializers joined by key: (paths, streams, skip_sequence_ids)
        joins: Optional[Sequence[Tuple[Sequence[_Path], Sequence[StreamTuple], bool]]] = None,
        # a mix: (paths, streams or None, joins or None, skip_sequence_ids, weight) per part
        mix: Optional[Sequence[Tuple[Sequence[_Path], Optional[Sequence[StreamTuple]],
                                     Optional[Sequence[Tuple[Sequence[_Path],
                                                             Sequence[StreamTuple], bool]]],
                                     bool, float]]] = None,
        remote: Optional[Dict[str, Any]] = None,
        chunk_cache: Optional[_Path] = None,  # a directory of parsed chunks (CBF layout)
    ) -> "Reader": ...
    def next(
        self, num_samples: int, num_workers: Optional[int] = None,
        worker_rank: Optional[int] = None, period: Optional[int] = None,
    ) -> Optional[Minibatch]: ...  # period: no minibatch crosses a multiple of it
    def undo(self) -> None: ...  # takes back the last next()
    def get_state(self) -> str: ...
    def state_at(self, position: int, /) -> str: ...  # not for a mix or truncated BPTT
    def restore_state(self, state: Union[str, bytes], /) -> None: ...
    @property
    def position(self) -> int: ...
    @position.setter
    def position(self, value: int) -> None: ...
    @property
    def closed(self) -> bool: ...
    @property
    def path(self) -> str: ...
    @property
    def files(self) -> List[str]: ...  # the data files, patterns expanded
    @property
    def samples_per_sweep(self) -> int: ...  # every file of a corpus; joined sequences
    def stats(self) -> Stats: ...
    def io_counters(self) -> Dict[str, int]: ...
    def perf(self) -> Dict[str, Any]: ...
    def index_info(self) -> IndexInfo: ...
    def close(self) -> None: ...
    def __enter__(self) -> "Reader": ...
    def __exit__(self, *args: object) -> Literal[False]: ...

class ReaderArgs(TypedDict):
    path: Optional[str]
    streams: List[StreamTuple]
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
    prefetch_chunks: Optional[int]  # None: 2 * num_threads + 2
    chunk_cache_limit: int
    # END reader arguments
    log: None

def bsconfig_load(
    path: _Path, section: Optional[str] = None, overrides: Sequence[str] = ()
) -> ReaderArgs: ...

# Provider records, batches and passes (_provider.c over lib/format/record.c and
# lib/reader/pool.c; used by ctfio.paddle).
# A slot is (name, kind, seq_type, dim); kinds and seq_type numbers are shared with
# ctfio/paddle/types.py (DataType, SequenceType).
_Slot = Tuple[str, int, int, int]
_PackedSlot = Tuple[
    int,                    # steps (samples in the batch for this slot)
    bytearray,              # data: dense values, int64 ids or sparse values
    Optional[bytearray],    # indptr (int64, steps + 1) for sparse slots
    Optional[bytearray],    # indices (int32) for sparse slots
    Optional[bytearray],    # seq_starts (int64) for sequence slots
    Optional[bytearray],    # sub_seq_starts (int64) for sub-sequence slots
]

def provider_encode(
    sample: Any, slots: Sequence[_Slot], check: bool = False, double: bool = False
) -> bytes: ...
def provider_pack(
    records: Sequence[bytes], slots: Sequence[_Slot], double: bool = False
) -> List[_PackedSlot]: ...

# One pass of a provider (lib/reader/pool.c). fill() pushes (record, units) items taken from
# the file the pool picks and returns True once the pass has no more data.
class SamplePool:
    def __init__(
        self, slots: Sequence[_Slot], double: bool, seed: int, pass_index: int, shuffle: bool,
        min_pool_size: int, pool_size: int, can_over: bool
    ) -> None: ...
    def files(self, n: int, workers: int, rank: int) -> List[int]: ...
    def pick(self, n: int) -> int: ...
    def push(self, items: Sequence[Tuple[bytes, int]]) -> None: ...
    # (units, samples, empty, goal, room, peak_units, peak_samples, delivered, batches)
    def info(self) -> Tuple[int, int, bool, int, int, int, int, int, int]: ...
    def next(
        self, size: int, fill: Callable[[], bool]
    ) -> Optional[Tuple[List[_PackedSlot], int, int]]: ...
    def at_end(self, fill: Callable[[], bool]) -> bool: ...
    def skip(self, count: int, fill: Callable[[], bool]) -> int: ...

# The command-line tool (tools/ctfio.c compiled in, see _tools.c): runs it with argv (argv[0]
# is the program name) and returns its exit status; it may end the process itself.
def cli_main(argv: List[str]) -> int: ...

# The timeline (ctf_sweep_cut / ctf_sweep_boundary): starts is a uint64 buffer.
def sweep_cut(
    starts: Any, position: int, request: int, limit: Optional[int], workers: int, rank: int
) -> Tuple[bytes, int, bool]: ...
def sweep_boundary(starts: Any, position: int) -> int: ...

def convert_file(
    src: _Path,
    dst: _Path,
    format: Literal["libsvm", "csv"],
    dim: int = 0,
    index_base: int = -1,
    classes: int = 0,
    label_columns: Optional[str] = None,
    delimiter: str = ",",
    header: bool = False,
    features: Optional[str] = None,
    labels: Optional[str] = None,
    progress: Optional[Callable[[int, int], Any]] = None,
) -> Dict[str, Any]: ...  # a library error raises as a reader's does

# A CBF file's streams: [(name, dim, is_sparse, "float" | "double"), ...].
def cbf_streams(
    path: _Path,
    remote: Optional[Dict[str, Any]] = ...,
) -> List[Tuple[str, int, bool, str]]: ...

# ctf_cbf_write: the CTF file (path, streams as for Reader) as the CBF file dst.
def cbf_write(
    path: Any,
    streams: Any,
    dst: _Path,
    chunk_size: int,
    precision: Literal["float", "double"],
    skip_sequence_ids: bool = False,
) -> Dict[str, Any]: ...

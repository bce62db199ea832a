"""ctfio: a fast, deterministic reader for the CNTK Text Format, with CNTK's ``cntk.io`` names.

    import ctfio as io        # instead of: import cntk.io as io
    src = io.MinibatchSource(io.CTFDeserializer("train.ctf", io.StreamDefs(
        features=io.StreamDef(field="x", shape=784), labels=io.StreamDef(field="y", shape=10))))
    mb = src.next_minibatch(256)

NumPy is imported only when arrays are requested; ``import ctfio`` pulls in neither NumPy nor
PyTorch.
"""

from . import provider  # the module; also callable as the @provider decorator (rules 12)
from ._ctfio import CTFError, DataChangedError, ParseError, StateError, __version__
from .convert import ConvertResult, convert
from .data import MinibatchSourceFromData
from .provider import (
    CacheType,
    DataProvider,
    SequenceType,
    dense_vector,
    dense_vector_sequence,
    dense_vector_sub_sequence,
    integer_value,
    integer_value_sequence,
    integer_value_sub_sequence,
    sparse_binary_vector,
    sparse_binary_vector_sequence,
    sparse_binary_vector_sub_sequence,
    sparse_vector,
    sparse_vector_sequence,
    sparse_vector_sub_sequence,
)
from .source import (
    DEFAULT_RANDOMIZATION_WINDOW_IN_CHUNKS,
    FULL_DATA_SWEEP,
    INFINITELY_REPEAT,
    CBFDeserializer,
    CTFDeserializer,
    MinibatchData,
    MinibatchSource,
    Mix,
    StreamDef,
    StreamDefs,
    StreamInformation,
    UserMinibatchSource,
    Value,
    mix,
)
from .training import CheckpointConfig, CrossValidationConfig, TrainingSession, training_session
from .writer import sequence_to_cntk_text_format, write_ctf

__all__ = [
    "CTFError",
    "ParseError",
    "DataChangedError",
    "StateError",
    "__version__",
    "DEFAULT_RANDOMIZATION_WINDOW_IN_CHUNKS",
    "FULL_DATA_SWEEP",
    "INFINITELY_REPEAT",
    "CBFDeserializer",
    "CTFDeserializer",
    "Mix",
    "mix",
    "MinibatchData",
    "MinibatchSource",
    "StreamDef",
    "StreamDefs",
    "StreamInformation",
    "UserMinibatchSource",
    "Value",
    "MinibatchSourceFromData",
    "training_session",
    "TrainingSession",
    "CheckpointConfig",
    "CrossValidationConfig",
    "sequence_to_cntk_text_format",
    "write_ctf",
    "convert",
    "ConvertResult",
    "provider",
    "CacheType",
    "SequenceType",
    "DataProvider",
    "dense_vector",
    "dense_vector_sequence",
    "dense_vector_sub_sequence",
    "integer_value",
    "integer_value_sequence",
    "integer_value_sub_sequence",
    "sparse_binary_vector",
    "sparse_binary_vector_sequence",
    "sparse_binary_vector_sub_sequence",
    "sparse_vector",
    "sparse_vector_sequence",
    "sparse_vector_sub_sequence",
]

"""Reading and writing the safetensors format (Hugging Face), in NumPy.

The format is an 8-byte little-endian header length, a JSON header mapping
each tensor name to `{"dtype", "shape", "data_offsets"}` (offsets into the
data block; an optional `"__metadata__"` string map), and the raw
little-endian, C-ordered tensor bytes. Writing it takes a page of code,
so it is not worth the `safetensors` dependency.
"""

import json
import struct

import numpy as np

_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64,
           "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}
_NAMES = {np.dtype(v): k for k, v in _DTYPES.items()}
_MAX_HEADER = 100 * 1024 * 1024


def save_file(tensors, path, metadata=None):
    """Writes a dict of NumPy arrays as a safetensors file (names in sorted order)."""
    header, offset, blobs = {}, 0, []
    for name in sorted(tensors):
        array = np.ascontiguousarray(tensors[name])
        if array.dtype not in _NAMES:
            raise ValueError(f"Tensor {name!r}: unsupported dtype {array.dtype}")
        data = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": _NAMES[array.dtype], "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for data in blobs:
            f.write(data)


def load_file(path):
    """Reads a safetensors file into `(dict of NumPy arrays, metadata dict)`.

    BF16 tensors are widened to float32. Raises ValueError naming the file on
    a malformed header or truncated data.
    """
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError(f"{path}: not a safetensors file (too short)")
    (size,) = struct.unpack("<Q", blob[:8])
    if size > min(_MAX_HEADER, len(blob) - 8):
        raise ValueError(f"{path}: not a safetensors file (header size {size})")
    try:
        header = json.loads(blob[8:8 + size].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: unreadable safetensors header ({e})") from e
    metadata = header.pop("__metadata__", {}) or {}
    data = memoryview(blob)[8 + size:]
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        if not 0 <= begin <= end <= len(data):
            raise ValueError(f"{path}: tensor {name!r} lies outside the file (truncated?)")
        dtype = info["dtype"]
        if dtype == "BF16":
            bits = np.frombuffer(data[begin:end], "<u2").astype(np.uint32) << 16
            array = bits.view(np.float32)
        elif dtype in _DTYPES:
            array = np.frombuffer(data[begin:end], np.dtype(_DTYPES[dtype]).newbyteorder("<"))
        else:
            raise ValueError(f"{path}: tensor {name!r} has unsupported dtype {dtype}")
        shape = tuple(info["shape"])
        if array.size != int(np.prod(shape)):
            raise ValueError(f"{path}: tensor {name!r} has {array.size} values for shape {shape}")
        tensors[name] = array.reshape(shape).astype(array.dtype.newbyteorder("="))
    return tensors, metadata

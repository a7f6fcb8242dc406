"""GGUF model files (llama.cpp, Ollama, LM Studio) read with the standard library: metadata and tensor table only.

Layout (GGUF v2/v3, little-endian; ggml's docs/gguf.md): magic "GGUF", version u32, tensor count u64, metadata
count u64; each metadata entry is a key (u64 length + UTF-8) and a typed value (arrays: element type u32,
count u64, elements); each tensor is a name, n_dims u32, dims u64 each (fastest first), a ggml type u32 and
an offset u64. The file is memory-mapped and parsed in place; large arrays (the vocabulary, merges, scores)
are skipped, not decoded. A tensor's bytes come from its type's block: (elements / block size) x bytes per
block (ggml's type table, as gguf-py's GGML_QUANT_SIZES has it).
"""

from __future__ import annotations

import mmap
import re
import struct
from pathlib import Path
from typing import Any, NamedTuple

from roofline.errors import RooflineError, UsageError, shown

# ggml type id -> (name, elements per block, bytes per block). Source: ggml/include/ggml.h (enum ggml_type) and
# gguf-py/gguf/constants.py (GGML_QUANT_SIZES); K-quants use super-blocks of QK_K = 256.
TYPES = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),
    3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34),
    9: ("Q8_1", 32, 40),
    10: ("Q2_K", 256, 84),
    11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210),
    15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66),
    17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18),
    21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82),
    23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1),
    25: ("I16", 1, 2),
    26: ("I32", 1, 4),
    27: ("I64", 1, 8),
    28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2),
    34: ("TQ1_0", 256, 54),
    35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17),
    40: ("NVFP4", 64, 36),
}
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9
SMALL_ARRAY = 64  # arrays longer than this (vocabulary, merges, scores) are skipped, their length kept
SPLIT = re.compile(r"^(.*)-(\d{5})-of-(\d{5})\.gguf$")


class Tensor(NamedTuple):
    name: str
    dims: tuple[int, ...]  # as stored: fastest-varying first (a weight of out x in is (in, out))
    type: int

    @property
    def elements(self) -> int:
        n = 1
        for d in self.dims:
            n *= d
        return n

    @property
    def bytes(self) -> int:
        """Stored bytes: whole blocks of the type (ggml requires rows in whole blocks)."""
        _, block, size = TYPES[self.type]
        return -(-self.elements // block) * size


class Header(NamedTuple):
    metadata: dict[str, Any]  # small values; a skipped array reads as ("array", length)
    tensors: list[Tensor]


def split_files(path: Path) -> list[Path]:
    """All files of a split model (NAME-00001-of-0000N.gguf), given any one of them; else [path]."""
    match = SPLIT.match(path.name)
    if not match:
        return [path]
    count = int(match.group(3))
    files = [path.with_name(f"{match.group(1)}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]
    missing = [f.name for f in files if not f.is_file()]
    if missing:
        raise UsageError(f"{path}: split file {missing[0]} is missing (a split model needs all {count} files)")
    return files


def read(path: Path) -> Header:
    """The metadata and tensor table of a GGUF file (all its splits)."""
    metadata: dict[str, Any] = {}
    tensors: list[Tensor] = []
    for i, part in enumerate(split_files(path)):
        meta, found = _read_one(part)
        if i == 0:
            metadata = meta
        tensors += found
    return Header(metadata, tensors)


def _read_one(path: Path) -> tuple[dict[str, Any], list[Tensor]]:
    try:
        with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            return _parse(m, str(path))
    except (OSError, ValueError) as e:  # ValueError: mmap of an empty file
        raise RooflineError(f"{path}: cannot read as GGUF ({getattr(e, 'strerror', None) or e})") from None


class _Reader:
    def __init__(self, buffer, where: str):
        self.b, self.at, self.where = buffer, 0, where

    def take(self, fmt: str):
        size = struct.calcsize(fmt)
        if self.at + size > len(self.b):
            raise RooflineError(
                f"{self.where}: GGUF header ends early at byte {self.at} (a truncated or non-GGUF file)"
            )
        value = struct.unpack_from(fmt, self.b, self.at)[0]
        self.at += size
        return value

    def string(self) -> str:
        n = self.take("<Q")
        if self.at + n > len(self.b):
            raise RooflineError(f"{self.where}: GGUF string of {n} bytes runs past the end of the file")
        raw = bytes(self.b[self.at : self.at + n])
        self.at += n
        return raw.decode("utf-8", errors="replace")

    def skip_strings(self, count: int) -> None:
        b, at, end = self.b, self.at, len(self.b)
        unpack = struct.Struct("<Q").unpack_from
        for _ in range(count):
            if at + 8 > end:
                raise RooflineError(f"{self.where}: GGUF string array runs past the end of the file")
            at += 8 + unpack(b, at)[0]
        self.at = at

    def value(self, kind: int):
        if kind in SCALARS:
            return self.take(SCALARS[kind])
        if kind == STRING:
            return self.string()
        if kind == ARRAY:
            inner, count = self.take("<I"), self.take("<Q")
            if count > SMALL_ARRAY:
                if inner == STRING:
                    self.skip_strings(count)
                elif inner in SCALARS:
                    self.at += count * struct.calcsize(SCALARS[inner])
                else:
                    raise RooflineError(f"{self.where}: GGUF array of element type {inner} is not readable")
                return ("array", count)
            return [self.value(inner) for _ in range(count)]
        raise RooflineError(f"{self.where}: unknown GGUF metadata value type {kind}")


def _parse(buffer, where: str) -> tuple[dict[str, Any], list[Tensor]]:
    r = _Reader(buffer, where)
    if r.take("<4s") != b"GGUF":
        raise RooflineError(f"{where}: not a GGUF file (expected the magic bytes 'GGUF')")
    version = r.take("<I")
    if version not in (2, 3):
        raise RooflineError(f"{where}: GGUF version {version} is not supported (expected 2 or 3)")
    n_tensors, n_meta = r.take("<Q"), r.take("<Q")
    if n_tensors > 1_000_000 or n_meta > 1_000_000:
        raise RooflineError(f"{where}: implausible GGUF counts ({n_tensors} tensors, {n_meta} metadata entries)")
    metadata = {}
    for _ in range(n_meta):
        key = r.string()
        metadata[key] = r.value(r.take("<I"))
    tensors, ends = [], []
    for _ in range(n_tensors):
        name = r.string()
        n_dims = r.take("<I")
        if n_dims > 8:
            raise RooflineError(f"{where}: tensor {shown(name)} has {n_dims} dimensions (GGUF allows up to 4)")
        dims = tuple(r.take("<Q") for _ in range(n_dims))
        kind = r.take("<I")
        offset = r.take("<Q")  # into the data section
        if kind not in TYPES:
            raise RooflineError(
                f"{where}: tensor {shown(name)} has unknown ggml type id {kind} (known: "
                f"{', '.join(map(str, sorted(TYPES)))})"
            )
        tensors.append(Tensor(name, dims, kind))
        ends.append((offset + tensors[-1].bytes, name))
    _check_data(len(buffer), r.at, metadata.get("general.alignment", 32), ends, where)
    return metadata, tensors


def _check_data(size: int, header_end: int, alignment: Any, ends: list[tuple[int, str]], where: str) -> None:
    """Every tensor's bytes lie inside the file: the data section starts at the header's end rounded up to
    general.alignment (default 32; ggml's docs/gguf.md), and a tensor ends at its offset + its bytes."""
    if isinstance(alignment, bool) or not isinstance(alignment, int) or alignment <= 0:
        raise RooflineError(f"{where}: general.alignment: expected a positive integer, got {shown(alignment)}")
    data = -(-header_end // alignment) * alignment
    end, name = max(ends, default=(0, ""))
    if data + end > size:
        raise RooflineError(
            f"{where}: tensor {shown(name)} ends at byte {data + end:,} but the file has {size:,} "
            "(a truncated or partly downloaded file)"
        )

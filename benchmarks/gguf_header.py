"""Reading a Llama-3.1-70B Q4_K_M-shaped GGUF header: time and memory of roofline's reader (target <= 0.3 s, <= 50 MB).

The file is written with the gguf package (header, metadata and tensor table, then a sparse, unwritten data
section): a 128,256-token
vocabulary with scores and types, 280,147 merges, 80 layers = 724 tensors, types as llama.cpp's Q4_K_M mix.
Run: python benchmarks/gguf_header.py   (needs the gguf package: pip install gguf)
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

VOCAB, MERGES, LAYERS, HIDDEN, KV, FFN = 128_256, 280_147, 80, 8192, 1024, 28672


def write(path: Path) -> None:
    import gguf

    T = gguf.GGMLQuantizationType
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("Llama-3.1-70B-shaped")
    for add, value in (
        (w.add_block_count, LAYERS),
        (w.add_embedding_length, HIDDEN),
        (w.add_head_count, 64),
        (w.add_head_count_kv, 8),
        (w.add_feed_forward_length, FFN),
        (w.add_context_length, 131072),
    ):
        add(value)
    w.add_token_list([f"token{i}" for i in range(VOCAB)])
    w.add_token_scores([0.0] * VOCAB)
    w.add_token_types([1] * VOCAB)
    w.add_token_merges([f"a{i} b{i}" for i in range(MERGES)])

    import numpy as np

    data = [0]  # tensor bytes, each padded to the 32-byte alignment as gguf lays them out

    def info(name: str, shape: tuple[int, ...], qtype) -> None:
        """A tensor entry without data: quantized types are given by their byte shape (rows, blocks x bytes)."""
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        if qtype == T.F32:
            nbytes = 4 * shape[-1] * (shape[0] if len(shape) > 1 else 1)
            w.add_tensor_info(name, shape, np.float32, nbytes)
        else:
            rows, cols = shape
            nbytes = rows * cols // block * size
            w.add_tensor_info(name, (rows, cols // block * size), np.uint8, nbytes, raw_dtype=qtype)
        data[0] += -(-nbytes // 32) * 32

    info("token_embd.weight", (VOCAB, HIDDEN), T.Q4_K)
    info("output_norm.weight", (HIDDEN,), T.F32)
    info("output.weight", (VOCAB, HIDDEN), T.Q6_K)
    for i in range(LAYERS):
        heavy = T.Q6_K if i % 2 == 0 else T.Q4_K  # Q4_K_M: half the layers' attn_v and ffn_down at Q6_K
        for name, shape, qtype in (
            ("attn_norm", (HIDDEN,), T.F32),
            ("ffn_norm", (HIDDEN,), T.F32),
            ("attn_q", (HIDDEN, HIDDEN), T.Q4_K),
            ("attn_k", (KV, HIDDEN), T.Q4_K),
            ("attn_v", (KV, HIDDEN), heavy),
            ("attn_output", (HIDDEN, HIDDEN), T.Q4_K),
            ("ffn_gate", (FFN, HIDDEN), T.Q4_K),
            ("ffn_up", (FFN, HIDDEN), T.Q4_K),
            ("ffn_down", (HIDDEN, FFN), heavy),
        ):
            info(f"blk.{i}.{name}.weight", shape, qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    with path.open("r+b") as f:  # a sparse data section: the reader checks that every tensor lies inside the file
        f.truncate(-(-path.stat().st_size // 32) * 32 + data[0])


def main() -> None:
    from roofline.specs.checkpoint import gguf_model

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "llama-70b-q4_k_m-header.gguf"
        write(path)
        times = []
        for _ in range(5):  # timed without tracemalloc, which slows every allocation
            start = time.perf_counter()
            keys, weights = gguf_model(path)
            times.append(time.perf_counter() - start)
        tracemalloc.start()
        gguf_model(path)
        peaks = [tracemalloc.get_traced_memory()[1]]
        tracemalloc.stop()
        print(
            f"header file {path.stat().st_size / 1e6:.1f} MB; {keys['layers']} layers, vocab {keys['vocab_size']}, "
            f"{weights.total_bytes / 1e9:.2f} GB of weights at {weights.bits_per_weight:.3f} bits per weight"
        )
        print(
            f"read in {statistics.median(times) * 1e3:.0f} ms median ({min(times) * 1e3:.0f}-{max(times) * 1e3:.0f} ms "
            "over 5), "
            f"peak Python allocations {max(peaks) / 1e6:.1f} MB (target <= 300 ms, <= 50 MB)"
        )


if __name__ == "__main__":
    sys.exit(main())

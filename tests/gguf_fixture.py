"""Tiny llama-shaped GGUF files written with the gguf package (a test dependency only)."""

from pathlib import Path

# hidden 256, 2 layers, 4 heads / 2 KV heads (head_dim 64), MLP 512, vocab 1000: shapes divisible by every block.
HIDDEN, LAYERS, HEADS, KV_HEADS, FFN, VOCAB = 256, 2, 4, 2, 512, 1024


def tensors(tied: bool) -> list[tuple[str, tuple[int, int] | tuple[int]]]:
    """(name, (rows, cols)) as PyTorch orders them; norms are vectors."""
    kv = KV_HEADS * HIDDEN // HEADS
    out = [("token_embd.weight", (VOCAB, HIDDEN)), ("output_norm.weight", (HIDDEN,))]
    if not tied:
        out.append(("output.weight", (VOCAB, HIDDEN)))
    for i in range(LAYERS):
        out += [
            (f"blk.{i}.attn_norm.weight", (HIDDEN,)),
            (f"blk.{i}.ffn_norm.weight", (HIDDEN,)),
            (f"blk.{i}.attn_q.weight", (HIDDEN, HIDDEN)),
            (f"blk.{i}.attn_k.weight", (kv, HIDDEN)),
            (f"blk.{i}.attn_v.weight", (kv, HIDDEN)),
            (f"blk.{i}.attn_output.weight", (HIDDEN, HIDDEN)),
            (f"blk.{i}.ffn_gate.weight", (FFN, HIDDEN)),
            (f"blk.{i}.ffn_up.weight", (FFN, HIDDEN)),
            (f"blk.{i}.ffn_down.weight", (HIDDEN, FFN)),
        ]
    return out


def write(path: Path, qtype_name: str, tied: bool = False, vocab_in_metadata: bool = True) -> Path:
    """A GGUF whose matrices are stored as `qtype_name` (norms in F32), with zero bytes as data."""
    import gguf
    import numpy as np

    qtype = gguf.GGMLQuantizationType[qtype_name]
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny-llama")
    w.add_block_count(LAYERS)
    w.add_embedding_length(HIDDEN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_feed_forward_length(FFN)
    w.add_context_length(2048)
    if vocab_in_metadata:
        w.add_vocab_size(VOCAB)
    w.add_token_list([f"t{i}" for i in range(VOCAB)])  # a long array the reader must skip
    for name, shape in tensors(tied):
        if len(shape) == 1:
            w.add_tensor(name, np.ones(shape, dtype=np.float32))
            continue
        rows, cols = shape
        raw = np.zeros((rows, cols // block * size), dtype=np.uint8)
        w.add_tensor(name, raw, raw_dtype=qtype)  # the byte shape: gguf derives (rows, cols) from the block size
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path

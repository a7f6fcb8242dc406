"""The hand audit's figures (issue "Audit"): each expected number is derived here from the architecture and the
datasheet, by the formula written beside it, never from roofline's own output.

Shapes used below (config.json of each model, as in models/):
- Llama-3.1-8B: 32 layers, hidden 4096, 32 heads, 8 KV heads, head_dim 128, MLP 14336, vocab 128256, untied.
  Per layer: attention 4096 x (4096 + 2 x 1024) + 4096 x 4096 = 41,943,040; MLP 3 x 4096 x 14336 = 176,160,768.
  Matmul params per token = 32 x 218,103,808 + lm_head 525,336,576 = 7,504,658,432; streamed per step = those
  + norms (2 x 32 + 1) x 4096 = 7,504,924,672 params = 15,009,849,344 B in bf16; stored 8,030,261,248 params.
  KV: 2 x 32 x 8 x 128 x 2 B = 131,072 B/token.
- Llama-3.2-1B: 16 layers, hidden 2048, 32 heads, 8 KV heads, head_dim 64, MLP 8192, vocab 128256, tied.
  Stored = streamed = 16 x (10,485,760 + 50,331,648) + 262,668,288 + 33 x 2048 = 1,235,814,400 params.
  KV: 2 x 16 x 8 x 64 x 2 B = 32,768 B/token.
- H100 SXM: 989.4 TFLOP/s bf16 dense, 3.35 TB/s, 80 GiB, NVLink 450 GB/s (NVIDIA datasheet).
"""

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from roofline import estimate, load_hardware, load_model
from roofline.calc.fit import fit
from roofline.cli import app
from roofline.errors import RooflineError

F_H100, W_H100, CAP_H100 = 989.4e12, 3.35e12, 80 * 2**30
L8_MATMUL, L8_HEAD, L8_STREAMED_B, L8_STORED = 7_504_658_432, 525_336_576, 15_009_849_344, 8_030_261_248
L8_KV = 131_072
L1_PARAMS, L1_KV = 1_235_814_400, 32_768
PAIR_L8 = 4 * 32 * 128 * 32  # attention FLOPs per (query, key) pair, all 32 layers: 4 x heads x head_dim x layers

M8, H100 = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
runner = CliRunner()


def chunked_ttft_by_hand(B: int, P: int, O: int, C: int) -> tuple[float, int, float]:
    """Llama-3.1-8B on one H100: the sum over a prompt's chunks of max(FLOPs / F, bytes / W), each step carrying the
    B running decodes at the mean context and one chunk that attends over every earlier prompt token."""
    ctx = P + (O - 2) / 2  # mean cached context of the decode steps j = 0..O-2
    decode_flops = B * (2 * L8_MATMUL + PAIR_L8 * (ctx + 1))
    decode_kv = B * L8_KV * (ctx + 1)  # read at ctx, one token written
    room = C - B
    total, n = 0.0, math.ceil(P / room)
    for i in range(n):
        s, t = i * room, min(room, P - i * room)
        flops = decode_flops + 2 * (L8_MATMUL - L8_HEAD) * t + PAIR_L8 * (t * s + t * (t + 1) / 2)
        flops += 2 * L8_HEAD if s + t == P else 0  # logits on the prompt's last position only
        nbytes = L8_STREAMED_B + decode_kv + L8_KV * (s + t)  # earlier chunks' KV read, this chunk's written
        total += max(flops / F_H100, nbytes / W_H100)
    decode_step = max(decode_flops / F_H100, (L8_STREAMED_B + decode_kv) / W_H100)  # memory-bound throughout here
    return total, n, decode_step


def test_chunked_prefill_attends_over_earlier_chunks():
    # Audit item 1: B = 1, P = 100,000, C = 8,192 -> 13 chunks of up to 8,191 tokens, the last 1,708.
    e = estimate(M8, H100, batch=1, prompt_tokens=100_000, output_tokens=512, chunk_tokens=8192)
    ttft, n, decode_step = chunked_ttft_by_hand(1, 100_000, 512, 8192)
    assert n == 13 and e.chunked.steps_to_first_token == 13
    assert e.ttft_s == pytest.approx(ttft, rel=1e-9)
    # Never faster than the one-pass prefill of the same prompt (4.06 s: compute-bound, ~P^2 attention).
    one_pass = estimate(M8, H100, batch=1, prompt_tokens=100_000, output_tokens=512)
    assert e.ttft_s >= one_pass.ttft_s
    # TPOT: a share min(1, n B / O) = 13 / 512 of the steps carries a chunk (the mean chunk step = TTFT / 13).
    share = 13 / 512
    assert e.tpot_s == pytest.approx(share * ttft / 13 + (1 - share) * decode_step, rel=1e-6)


def test_chunked_prefill_prices_the_last_partial_chunk_at_its_size():
    # The README's example: B = 32, P = 1024, C = 1024 -> room 992: a chunk of 992 tokens, then one of 32.
    e = estimate(M8, H100, batch=32, prompt_tokens=1024, output_tokens=256, chunk_tokens=1024)
    ttft, n, _ = chunked_ttft_by_hand(32, 1024, 256, 1024)
    assert n == 2 and e.ttft_s == pytest.approx(ttft, rel=1e-9)


def test_shared_prefix_with_sliding_windows_by_hand():
    # Audit item 2. Mistral-7B on an L40S (48 GiB), every layer windowed at 4,096: 131,072 B/token (as Llama's KV),
    # 7,241,732,096 params = 14,483,464,192 B. P = 6,000, O = 100, a 5,000-token shared prefix: the prefix is held
    # once, capped at the window (4,096 tokens); each sequence's own 1,100 tokens are its own.
    m, h = load_model("mistral-7b"), load_hardware("l40s")
    e = estimate(m, h, batch=1, prompt_tokens=6000, output_tokens=100, shared_prefix=5000)
    budget = 0.9 * 46_068 * 2**20 - 14_483_464_192 - 4096 * 131_072  # the L40S's 46,068 MiB with ECC
    assert e.max_batch == math.floor(budget / (1100 * 131_072))  # 197, not "unbounded"
    # Gemma-2-9B: 42 layers (21 windowed at 4,096), 8 KV heads x 256 x 2 x 2 B = 8,192 B per layer and token,
    # 9,241,705,984 params (tied) = 18,483,411,968 B. Own: 21 x 1,100 + 21 x 1,100 tokens of layers; once: the
    # prefix on full layers (21 x 5,000) and on windowed ones capped (21 x 4,096).
    g = load_model("gemma-2-9b")
    e = estimate(g, h, batch=1, prompt_tokens=6000, output_tokens=100, shared_prefix=5000)
    budget = 0.9 * 46_068 * 2**20 - 18_483_411_968 - 8192 * 21 * (5000 + 4096)
    assert e.max_batch == math.floor(budget / (8192 * 21 * (1100 + 1100)))  # 61, not 139 (69 at 48 GiB)


def test_draft_max_batch_counts_target_and_draft_kv_per_sequence():
    # Audit item 3: Llama-3.1-8B drafted by Llama-3.2-1B (same vocabulary), P = 1024, O = 256 (1,280 tokens).
    # Held once: both models' weights; per sequence: 1,280 x (131,072 + 32,768) B.
    budget = 0.9 * CAP_H100 - 2 * L8_STORED - 2 * L1_PARAMS
    expected = math.floor(budget / (1280 * (L8_KV + L1_KV)))
    draft = load_model("llama-3.2-1b")
    for batch in (1, 16, expected):
        e = estimate(M8, H100, batch=batch, draft=draft)
        assert e.max_batch == expected and e.fits
    assert not estimate(M8, H100, batch=expected + 1, draft=draft).fits


def test_speculative_utilization_is_an_iterations_work_over_its_time():
    # Audit items 4 and 10: B = 16, k = 4 drafts, mean context 1024 + 127 = 1151. Every step is memory-bound here:
    # a draft step moves 2,471,628,800 + 16 x 32,768 x 1,152 B in ~0.92 ms against ~42 us of compute; the
    # verification of 5 tokens moves 15,009,849,344 + 16 x 131,072 x (1,151 + 5) B (~5.2 ms) against ~1.26 ms.
    # So the iteration moves bytes at exactly the peak bandwidth: MBU = 1.
    draft = load_model("llama-3.2-1b")
    e = estimate(M8, H100, batch=16, draft=draft, draft_tokens=4)
    draft_bytes = 2 * L1_PARAMS + 16 * L1_KV * 1152
    verify_bytes = L8_STREAMED_B + 16 * L8_KV * (1151 + 5)
    iteration = (4 * draft_bytes + verify_bytes) / W_H100
    E = (1 - 0.7**5) / 0.3
    assert e.tpot_s == pytest.approx(iteration / E, rel=1e-9)
    assert e.decode.mbu == pytest.approx(1.0, rel=1e-9)
    # TTFT = the target's prefill + the drafter's own prefill of the 16 prompts (both compute-bound):
    # draft FLOPs = 16 x (2 x 16 layers x 60,817,408 x 1024 + 2 x lm_head + 4 x 32 x 64 x 16 x 1024 x 1025 / 2).
    plain = estimate(M8, H100, batch=16)
    flops = 16 * (2 * 16 * 60_817_408 * 1024 + 2 * 262_668_288 + 4 * 32 * 64 * 16 * 1024 * 1025 / 2)
    nbytes = 2 * L1_PARAMS + 16 * L1_KV * 1024
    assert e.ttft_s - plain.ttft_s == pytest.approx(max(flops / F_H100, nbytes / W_H100), rel=1e-9)


def test_mtp_module_is_one_moe_block_sharing_the_head():
    # Audit item 5. DeepSeek-V3's MTP module (sec. 2.2): one MoE block + norms + a 2h x h projection, no embedding or
    # head of its own. By hand (hidden 7168, 128 heads, MLA ranks 1536 / 512, rope 64, nope 128, v 128):
    #   attention: q 7168 x 1536 + 1536 + 1536 x 128 x 192 = 48,760,320; kv 7168 x 576 + 512 + 512 x 128 x 256 =
    #   20,906,496; o 128 x 128 x 7168 = 117,440,512 -> 187,107,328
    #   experts 256 x 3 x 7168 x 2048 = 11,274,289,152; shared 44,040,192; router 7168 x 256 = 1,835,008
    #   norms 2 + 1 (the block's, and the clone's final) + 2 (the module's) = 5 x 7168 = 35,840; projection 102,760,448
    #   = 11,610,067,968 params at 8 bits (fp8), split over tp 8: 1,451,258,496 B per device.
    m, h = load_model("deepseek-v3"), load_hardware("h200")
    plain = estimate(m, h, tp=8, batch=8)
    e = estimate(m, h, tp=8, batch=8, mtp=1)
    assert plain.kv_budget_bytes - e.kv_budget_bytes == pytest.approx(11_610_067_968 / 8, rel=1e-12)
    # Each sequence brings the model's latent KV (61 layers) and the module's (1 layer): (512 + 64) x 2 B each,
    # replicated on every device (MLA's latent is shared by all heads).
    assert e.max_batch == math.floor(e.kv_budget_bytes / (62 * 576 * 2 * 1280))


def test_expert_parallelism_equal_to_tp_adds_no_all_to_all():
    # Audit item 6: with ep = tp every device already holds every token after tp's all-reduce; the experts split
    # over the same 8 devices as tp would split them, so the step is the same as tp 8 alone.
    m, h = load_model("deepseek-v3"), load_hardware("h200")
    tp = estimate(m, h, tp=8, batch=64)
    ep = estimate(m, h, tp=8, ep=8, batch=64)
    assert ep.comm["ep_s"] == 0 and ep.ttft_s == pytest.approx(tp.ttft_s) and ep.tpot_s == pytest.approx(tp.tpot_s)


def test_expert_parallelism_wider_than_tp_runs_attention_data_parallel():
    # Audit item 7: Qwen3-30B-A3B (48 layers, hidden 2048, 128 experts, 8 a token, KV 2 x 48 x 4 x 128 x 2 B =
    # 98,304 B/token) on 4 H200s, tp 1, ep 4, batch 64: 4 attention groups of 16 sequences each.
    m, h = load_model("qwen3-30b-a3b"), load_hardware("h200")
    e = estimate(m, h, tp=1, ep=4, batch=64)
    # Per device: the dense and attention work of 16 sequences, and the routed experts' work of all 64 tokens over 4
    # devices (16 tokens' worth): the FLOPs of batch 16 on one device.
    assert e.decode.flops == pytest.approx(estimate(m, h, batch=16).decode.flops, rel=1e-12)
    # All-to-all: each device sends its 64 / 4 = 16 tokens, 8 copies of 2,048 x 2 B, 3 / 4 of them off the device,
    # in a dispatch and a combine per MoE layer at 450 GB/s + 10 us.
    per = 16 * 8 * 2048 * 2 * 3 / 4 / 450e9 + 10e-6
    assert e.comm["ep_s"] == pytest.approx(48 * 2 * per, rel=1e-12)
    # Memory: each group holds its share of the sequences, so the max batch is 4 x what one device's budget holds.
    assert e.max_batch == 4 * math.floor(e.kv_budget_bytes / (98_304 * 1280))
    assert e.decode.tokens_per_s == pytest.approx(64 / e.tpot_s)  # the batch is counted once


def test_disaggregated_single_output_token_is_valid_json_and_csv():
    # Audit item 8: --output 1 has no decode step, so the decode pool never limits: null, not infinity.
    r = runner.invoke(
        app,
        ["estimate", "--disagg", "1P:1D", "--output", "1", "-b", "1", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--json"],
    )
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)["disagg"]
    assert d["decode_requests_per_s"] is None and d["bottleneck"] == "prefill"
    assert d["requests_per_s"] == pytest.approx(d["prefill_requests_per_s"])
    r = runner.invoke(
        app,
        ["estimate", "--disagg", "1P:1D", "--output", "1", "-b", "1", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--csv"],
    )
    assert r.exit_code == 0 and "inf" not in r.stdout


@pytest.mark.parametrize(
    "flags, message",
    [
        (["-m", "llama-3.1-8b", "--pp", "33"], "32 layers.*valid: 1 to 32"),
        (["-m", "llama-3.1-8b", "--pp", "1000000000"], "32 layers"),
        (["-m", "qwen2.5-7b", "--tp", "8"], "28 attention heads and 4 KV heads.*valid: 1, 2, 4, 28"),
        (["-m", "mixtral-8x7b", "--ep", "3"], "8 experts.*valid: 1, 2, 4, 8"),
        (["-m", "llama-3.1-8b", "--mtp", "1"], "no multi-token-prediction module"),
        (["-m", "llama-3.1-8b", "--draft", "qwen2.5-7b"], "vocabulary of 152,064 tokens, llama-3.1-8b 128,256"),
    ],
)
def test_impossible_layouts_and_drafters_are_refused(flags, message):
    # Audit items 9 and 14: one line on stderr naming the flag, the model's count and the valid values.
    r = runner.invoke(app, ["estimate", "-H", "h100-sxm", *flags])
    assert r.exit_code == 2 and r.stdout == ""
    line = r.stderr.strip()
    assert "\n" not in line and line.startswith("roofline: error: --") and __import__("re").search(message, line), line


def test_a_draft_larger_than_the_target_is_warned():
    e = estimate(M8, H100, batch=1, draft=load_model("llama-3.1-70b"))
    assert any("not smaller than llama-3.1-8b" in w for w in e.warnings)


def test_notes_name_the_group_that_spans_nodes():
    # Audit item 11: tp 4 x pp 4 is 16 devices (two nodes of 8); 2P:4D pools of tp 4 are 24 devices.
    m = load_model("llama-3.1-70b")
    notes = estimate(m, H100, tp=4, pp=4, batch=8).notes
    assert any(n.startswith("pp 4 x tp 4 = 16 devices spans nodes") for n in notes) and not any(
        "tp 16" in n for n in notes
    )
    notes = estimate(m, H100, tp=4, disagg="2P:4D", batch=8).notes
    assert any(n.startswith("the 2P:4D pools' 24 devices spans nodes") for n in notes) and not any(
        "tp 24" in n for n in notes
    )


def test_a_truncated_gguf_is_refused(tmp_path):
    # Audit item 12: the first 2,000 bytes of a real file hold the header but no tensor data.
    pytest.importorskip("gguf")
    from gguf_fixture import write

    from roofline.specs.checkpoint import gguf_model

    path = write(tmp_path / "tiny.gguf", "Q8_0")
    gguf_model(path)  # whole: reads
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(path.read_bytes()[:-1])  # one byte short of the last tensor's end
    with pytest.raises(RooflineError, match="truncated or partly downloaded"):
        gguf_model(cut)


def test_fit_answers_within_the_models_max_context():
    # Audit item 13: Llama-3.1-8B on an H100 would hold one sequence of ~467k tokens, but its max_context is 131,072;
    # Mistral-7B's cache stops growing at its 4,096 window: memory is not the limit, its max_context (32,768) is.
    f = fit(M8, H100)
    assert f.max_context_tokens == 131_072 and "max_context" in f.max_context_reason
    f = fit(load_model("mistral-7b"), load_hardware("rtx-4090"))
    assert f.max_context_tokens == 32_768 and "memory is not the limit" in f.max_context_reason


def test_a_spec_with_a_long_comment_loads(tmp_path):
    # Also in the audit: a valid spec over 1 MiB (a long comment) is a spec; the cap only guards against runaways.
    body = tmp_path / "big.yaml"
    body.write_text("# " + "x" * (2 << 20) + "\nname: Big\nsource: test\ndtype: bf16\nparams: 7e9\n")
    assert load_model(str(body)).params == 7e9


def test_qwen2_use_sliding_window_must_be_a_boolean(tmp_path):
    config = {
        "model_type": "qwen2",
        "hidden_size": 896,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "num_hidden_layers": 24,
        "intermediate_size": 4864,
        "vocab_size": 151936,
        "use_sliding_window": "false",
        "sliding_window": 4096,
        "torch_dtype": "bfloat16",
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(RooflineError, match="use_sliding_window.*true or false"):
        load_model(str(tmp_path))


# ---- properties the audit asked for


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 64), st.integers(1, 40_000), st.integers(1, 2048), st.integers(1, 16_384))
def test_chunking_never_makes_a_prompts_prefill_faster_than_one_pass(batch, prompt, output, room):
    e = estimate(M8, H100, batch=batch, prompt_tokens=prompt, output_tokens=output, chunk_tokens=batch + room)
    one_pass = estimate(M8, H100, batch=1, prompt_tokens=prompt, output_tokens=output)
    assert e.ttft_s >= one_pass.prefill.time_s * (1 - 1e-12)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 256),
    st.integers(1, 16_384),
    st.integers(2, 2048),
    st.integers(1, 8),
    st.floats(0, 1),
    st.sampled_from([None, 4096, 65_536]),
)
def test_utilization_never_exceeds_one_at_the_bound(batch, prompt, output, k, a, chunk):
    draft = load_model("llama-3.2-1b")
    chunk = chunk if chunk is None or chunk > batch * (k + 1) else None
    for e in (
        estimate(
            M8,
            H100,
            batch=batch,
            prompt_tokens=prompt,
            output_tokens=output,
            draft=draft,
            draft_tokens=k,
            acceptance=a,
            chunk_tokens=chunk,
        ),
        estimate(
            M8,
            H100,
            batch=batch,
            prompt_tokens=prompt,
            output_tokens=output,
            chunk_tokens=chunk if chunk and chunk > batch else None,
        ),
    ):
        assert 0 < e.decode.mbu <= 1 + 1e-9 and 0 < e.decode.mfu <= 1 + 1e-9


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 4096),
    st.integers(1, 4096),
    st.integers(0, 4096),
    st.integers(0, 8192),
    st.sampled_from([{}, {"draft": "llama-3.2-1b"}, {"ep": 4}, {"tp": 2, "ep": 8}]),
)
def test_max_batch_never_depends_on_the_requested_batch(a, b, prompt, shared, knobs):
    m = load_model("qwen3-30b-a3b") if "ep" in knobs else M8
    knobs = {**knobs, "draft": load_model(knobs["draft"])} if "draft" in knobs else knobs
    first = estimate(m, H100, batch=a, prompt_tokens=prompt + 1, shared_prefix=shared, **knobs)
    second = estimate(m, H100, batch=b, prompt_tokens=prompt + 1, shared_prefix=shared, **knobs)
    assert first.max_batch == second.max_batch


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 4, 8]), st.integers(1, 512), st.integers(1, 8192))
def test_ep_never_raises_a_steps_bytes_per_device_above_tps(tp, multiple, batch, prompt):
    m = load_model("qwen3-30b-a3b")
    plain = estimate(m, H100, tp=tp, batch=batch, prompt_tokens=prompt)
    ep = estimate(m, H100, tp=tp, ep=tp * multiple, batch=batch, prompt_tokens=prompt)
    assert ep.decode.bytes <= plain.decode.bytes * (1 + 1e-12)
    assert ep.prefill.bytes <= plain.prefill.bytes * (1 + 1e-12)


def test_the_engine_line_calls_the_table_a_bound_only_when_it_is_one():
    # At efficiencies of 0.5 the table above is not the roofline bound, and a preset may predict faster than it
    # (the audit: bound TPOT 11.8 ms, vllm preset 8.29 ms beside "the bound above is what no engine can beat").
    base = ["estimate", "--engine", "vllm", "-b", "32"]
    bound = CliRunner().invoke(app, base)
    slowed = CliRunner().invoke(app, [*base, "--compute-efficiency", "0.5", "--bandwidth-efficiency", "0.5"])
    bound, slowed = (" ".join(r.stdout.split()) for r in (bound, slowed))  # the terminal's width wraps lines
    assert "what no engine can beat" in bound and "what no engine can beat" not in slowed
    assert "at the efficiencies given, not the bound" in slowed


# A second new user's audit (a helper following the docs, 2026-12-07): flags that did nothing without a word, and
# messages that named the wrong thing.


def test_a_flag_that_would_do_nothing_says_so_or_is_refused():
    run = CliRunner().invoke
    # --engine eager on datasheet figures: no calibration to predict from; it said nothing
    eager = run(app, ["estimate", "--engine", "eager", "-q"])
    assert eager.exit_code == 0 and "eager: no prediction: h100-sxm holds no measured calibration" in eager.stdout
    # --quant mxfp4-moe quantizes routed experts only: on a dense model it left 16 bits a weight while saying fp4
    dense = run(app, ["estimate", "--quant", "mxfp4-moe", "-q"])
    assert dense.exit_code == 2 and "--quant" in dense.stderr and "has none" in dense.stderr
    # a shared prefix longer than the prompt is the whole prompt (1024 tokens x 131,072 B = 134 MB held once)
    longer = run(app, ["estimate", "--shared-prefix", "5000", "--json", "-q"])
    out = json.loads(longer.stdout)
    assert out["held_once_bytes"] == 1024 * 2 * 32 * 8 * 128 * 2  # Llama-3.1-8B: 2 x 32 layers x 8 x 128 x 2 B
    assert any("the whole prompt: --shared-prefix 5000 is longer" in n for n in out["notes"])


def test_messages_name_the_flag_and_the_thing_at_fault():
    run = CliRunner().invoke
    acceptance = run(app, ["estimate", "--acceptance", "0.5"])
    assert acceptance.exit_code == 2 and acceptance.stderr.startswith("roofline: error: --acceptance:")
    mtp = run(
        app, ["estimate", "-m", "deepseek-v3", "-H", "h200", "--tp", "8", "--mtp", "1", "-q"], env={"COLUMNS": "400"}
    )
    assert "held once (the drafter)" in mtp.stdout and "()" not in mtp.stdout
    slo = run(app, ["sweep", "--tpot-slo", "50us", "-q"])  # every batch fits; none is that fast
    assert "no batch meets the SLOs" in slo.stdout and "fits and meets" not in slo.stdout
    bare = run(app, ["sweep", "--tpot-slo", "50"])
    assert "units: h, min, s, ms, us or ns" in bare.stderr


# A third audit (the written contract: references, README, the Python API; 2026-12-07).


def test_output_paths_are_checked_before_the_work(tmp_path):
    # A missing folder was found only after the run: a whole simulation, a measure's timing, every bench request.
    run, missing = CliRunner().invoke, str(tmp_path / "no" / "r.csv")
    simulated = run(app, ["simulate", "--rate", "20/s", "--requests", "20000", "--per-request", missing])
    assert simulated.exit_code == 2 and simulated.stderr.count("\n") == 1 and "no such folder" in simulated.stderr
    bench = ["bench", "http://127.0.0.1:9", "--concurrency", "1", "--requests", "3"]
    benched = run(app, [*bench, "--per-request", missing])
    assert benched.exit_code == 2 and benched.stderr.count("\n") == 1 and "--per-request" in benched.stderr
    measured = run(app, ["measure", "--save", missing])
    assert measured.exit_code == 2 and measured.stderr.count("\n") == 1 and "--save" in measured.stderr


def test_usage_errors_stay_one_short_line_and_name_their_flag(tmp_path, capsys):
    from roofline.cli import run as command_line

    assert command_line(["estimate", "-b", "9" * 5000]) == 2  # click quotes the value whole: 5,115 bytes before
    huge = capsys.readouterr().err
    assert huge.count("\n") == 1 and len(huge) < 300 and "--batch" in huge
    run = CliRunner().invoke
    for command in (["measure", "--engine", "bogus"], ["validate", "-m", "gpt2", "--engine", "bogus"]):
        r = run(app, command)
        assert r.exit_code == 2 and "eager, transformers, llamacpp" in r.stderr  # llamacpp was left out
    draft = run(app, ["estimate", "--draft", "nosuch"])
    assert draft.exit_code == 2 and draft.stderr.startswith("roofline: error: --draft: unknown model id")
    broken = tmp_path / "broken.yaml"
    broken.write_text("a: [\n")
    imported = run(app, ["models", "import", str(broken)])
    assert imported.exit_code == 2 and "no such" not in imported.stderr and "config.json" in imported.stderr
    speed = run(app, ["fit", "--compute-efficiency", "0.5"])  # fit is memory only: it took and ignored them
    assert speed.exit_code == 2 and "No such option" in speed.stderr
    one = run(app, ["estimate", "--output", "1", "--json", "-q"])
    assert any(n.startswith("output 1: no decode step runs") for n in json.loads(one.stdout)["notes"])


def test_the_python_api_takes_ids_and_names_a_misused_argument():
    import roofline

    m, h = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
    assert estimate("llama-3.1-8b", "h100-sxm").tpot_s == estimate(m, h).tpot_s  # ids, as the command line takes
    assert roofline.compare(m, h).rows == roofline.compare([m], [h]).rows  # one of each, or lists
    for call, name in (
        (lambda: estimate(h, m), "model"),  # swapped
        (lambda: roofline.compare([h], [m]), "models"),
        (lambda: estimate(m, h, knobs={"tp": 2}), "knobs"),
        (lambda: roofline.sweep(m, h, tpot_slo="50ms"), "tpot_slo"),
        (lambda: roofline.sweep(m, h, batches=8), "batches"),
        (lambda: load_model(None), "model"),
        (lambda: load_hardware(""), "hardware"),
    ):
        with pytest.raises(roofline.UsageError) as caught:
            call()
        assert caught.value.param == name
    drafted = estimate(m, h, batch=8, draft="llama-3.2-1b")  # a drafter by id
    assert drafted.speculative is not None
    assert roofline.sweep("llama-3.1-8b", "h100-sxm", batches=[8]).rows == roofline.sweep(m, h, batches=[8]).rows
    compared = roofline.compare(m, h, batch=8, draft="llama-3.2-1b").rows[0]
    assert compared.tpot_s == pytest.approx(drafted.tpot_s)
    from pathlib import Path

    import numpy as np

    spec = Path(__file__).parent.parent / "hardware" / "h100-sxm.yaml"
    assert estimate(m, spec).tpot_s == estimate(m, h).tpot_s and load_hardware(spec).id == "h100-sxm"
    assert roofline.sweep(m, h, batches=np.array([1, 8]), tpot_slo=np.float32(0.05)).summary.best_batch == 8

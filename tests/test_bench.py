"""`roofline bench` against a fake OpenAI-compatible streaming server on loopback, whose timing the test sets:
each request's first token after FIRST seconds, then one token every GAP seconds, one slot per request."""

import csv
import io
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from typer.testing import CliRunner

from roofline.cli import app

pytest.importorskip("httpx")

FIRST, GAP = 0.040, 0.010


class Server(BaseHTTPRequestHandler):
    mode = "ok"  # ok, http500, http400 (with llama-server's message), malformed
    bodies: list = []

    def log_message(self, *args):  # quiet
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Server.bodies.append(body)
        if self.mode == "http500":
            self.send_response(500)
            self.end_headers()
            return
        if self.mode == "http400":  # llama-server's answer to a prompt longer than its context (its JSON shape)
            said = {"error": {"code": 400, "message": "the request exceeds the available context size", "type": "x"}}
            payload = json.dumps(said).encode()
            self.send_response(400)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        time.sleep(FIRST)
        try:
            for k in range(body["max_tokens"]):
                if k:
                    time.sleep(GAP)
                event = "{not json" if self.mode == "malformed" else json.dumps({"choices": [{"text": f"t{k}"}]})
                self.wfile.write(f"data: {event}\n\n".encode())
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client hung up on a malformed stream, as it should


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Server)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    Server.mode, Server.bodies = "ok", []
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def run(*args):
    return CliRunner().invoke(app, ["bench", *args])


def test_a_closed_loop_is_timed_from_the_stream(server):
    # Two clients, six requests of 8 output tokens: TTFT = FIRST (the fake server has a slot per request, so no
    # queue), TPOT = GAP (7 gaps between 8 tokens), E2E = FIRST + 7 GAP = 110 ms. Loopback and the threads add
    # a millisecond or two, never less (the upper bounds leave room for a busy machine).
    r = run(
        server, "--concurrency", "2", "--requests", "6", "--warmup", "0", "--prompt", "16", "--output", "8", "--json"
    )
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["requests"] == 6 and out["errors"] == {}
    assert FIRST <= out["ttft_s"]["p50"] < FIRST + 0.05
    assert GAP <= out["tpot_s"]["p50"] < 1.5 * GAP
    assert FIRST + 7 * GAP <= out["e2e_s"]["mean"] < FIRST + 7 * GAP + 0.08
    assert set(out["ttft_s"]) == {"mean", "p50", "p90", "p95", "p99", "max"}
    assert out["saturated"] is None and out["schema_version"] == 1
    body = Server.bodies[0]
    assert body["stream"] and body["ignore_eos"] and body["max_tokens"] == 8
    assert len(body["prompt"]) == 16 and all(isinstance(t, int) for t in body["prompt"])  # token ids


def test_an_open_loop_sends_at_the_arrival_times(server, tmp_path):
    # Constant arrivals at 20/s are at k / 20 s (k = 0..4). Each request takes FIRST + 7 GAP = 110 ms, longer than
    # the 50 ms between arrivals, so an open loop sends request k+1 before request k has finished, which a closed
    # loop never does; no request is sent before its arrival. TTFT counts from the arrival (a late send is the
    # client's queue, not hidden), and the run spans at least the last arrival plus one request. Only lower bounds
    # on time: a busy machine makes everything later, never earlier (an upper bound of 80 ms had failed in CI).
    path = tmp_path / "requests.csv"
    r = run(server, "--rate", "20/s", "--arrival", "constant", "--requests", "5", "--warmup", "0", "--output", "8",
            "--prompt", "8", "--per-request", str(path), "--json")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["requests"] == 5 and out["errors"] == {}
    rows = list(csv.DictReader(path.open()))
    arrival, sent, first, finish = (
        [float(row[k]) for row in rows] for k in ("arrival_s", "sent_s", "first_token_s", "finish_s")
    )
    assert arrival == pytest.approx([0.0, 0.05, 0.10, 0.15, 0.20])
    assert all(s >= a for s, a in zip(sent, arrival))
    assert all(sent[k + 1] < finish[k] for k in range(4))
    assert all(f - s >= FIRST for f, s in zip(first, sent))
    assert out["ttft_s"]["max"] == pytest.approx(max(f - a for f, a in zip(first, arrival)))
    assert out["wall_s"] >= 4 / 20 + FIRST + 7 * GAP


@pytest.mark.parametrize("mode, kind", [("http500", "HTTP 500"), ("malformed", "malformed stream")])
def test_server_errors_are_counted_not_raised(server, mode, kind):
    Server.mode = mode
    r = run(server, "--concurrency", "2", "--requests", "4", "--output", "3", "--json")
    assert r.exit_code == 1, r.stderr  # nothing measured: the run failed, its report still on stdout
    out = json.loads(r.stdout)
    assert out["errors"] == {kind: 4} and out["requests"] == 0
    assert f"4 of 4 requests failed (4 {kind})" in r.stderr and "Traceback" not in r.stderr


def test_an_http_error_says_what_the_server_said(server, tmp_path):
    # A new user (2026-12-07): --prompt 5000 against a 4096-token llama-server gave "4 HTTP 400" and nothing of why.
    Server.mode = "http400"
    table = tmp_path / "r.csv"
    r = run(server, "--concurrency", "1", "--requests", "2", "--output", "3", "--per-request", str(table), "--json")
    assert json.loads(r.stdout)["errors"] == {"HTTP 400": 2}  # counted by kind, as before
    assert "the first said 'HTTP 400: the request exceeds the available context size'" in r.stderr
    assert "HTTP 400: the request exceeds the available context size" in table.read_text()
    v1 = run(f"{server}/v1", "--concurrency", "1", "--requests", "1", "--output", "3")  # the usual OpenAI base URL
    assert "drop /v1" in v1.stderr


def test_a_compare_checks_its_model_before_the_run(server):
    r = run(server, "--concurrency", "2", "--requests", "4", "--output", "3", "--compare", "-m", "nosuch")
    assert r.exit_code == 2 and "unknown model id" in r.stderr and Server.bodies == []  # no request sent


def test_a_server_that_is_not_there_is_a_counted_connection_error():
    r = run("http://127.0.0.1:9", "--concurrency", "1", "--requests", "2", "--json")  # port 9: discard, closed
    assert r.exit_code == 1, r.stderr
    assert json.loads(r.stdout)["errors"] == {"ConnectError": 2}


def test_bad_bench_input_is_one_line():
    r = run("localhost:8080", "--concurrency", "1")
    assert r.exit_code != 0 and "expected an http:// or https:// URL" in r.stderr
    r = run("http://127.0.0.1:9", "--rate", "1:3:1/s")
    assert r.exit_code != 0 and "bench runs one rate at a time" in r.stderr
    # flags a run would ignore are refused before any request is sent (nothing listens on port 9 either way)
    r = run("http://127.0.0.1:9", "--concurrency", "2", "--cv", "3")
    assert r.exit_code == 2 and "--cv: the burstiness of gamma arrivals" in r.stderr
    # the simulation's flags without --compare (an audit, 2026-12-07: --max-num-seqs 4 changed nothing, silently)
    for flags in (["--max-num-seqs", "4"], ["-m", "gpt2"], ["--no-kv-unified"], ["--engine", "llamacpp"]):
        r = run("http://127.0.0.1:9", "--concurrency", "1", *flags)
        assert r.exit_code == 2 and "give it with --compare" in r.stderr and flags[0].split("-")[-1] in r.stderr


def test_a_trace_sets_the_lengths_and_its_means_are_reported(server, tmp_path):
    # lengths (8, 4) and (16, 2): the run's inputs report their means, 12 and 3 tokens, and the trace's kind
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"prompt_tokens": 8, "output_tokens": 4}\n{"prompt_tokens": 16, "output_tokens": 2}\n')
    refused = run(server, "--trace", str(trace), "--concurrency", "1", "--requests", "3")
    assert refused.exit_code == 2 and "--requests: a trace gives" in refused.stderr and Server.bodies == []
    r = run(server, "--trace", str(trace), "--concurrency", "1", "--warmup", "0", "--json")
    assert r.exit_code == 0, r.stderr
    i = json.loads(r.stdout)["inputs"]
    assert (i["prompt_tokens"], i["output_tokens"], i["prompt_dist"], i["trace"]) == (12.0, 3.0, "trace", True)
    assert sorted(len(b["prompt"]) for b in Server.bodies) == [8, 16]


def test_compare_prints_the_simulation_of_the_same_requests_beside_the_measurement(server):
    # The predicted side is `roofline simulate` of the same workload (the same seed: the same requests), so its
    # figures equal simulate's; each ratio is predicted / measured.
    flags = ["--rate", "50/s", "--requests", "4", "--warmup", "0", "--prompt", "16", "--output", "8"]
    r = run(server, *flags, "--compare", "-m", "gpt2", "-H", "h100-sxm", "--max-num-seqs", "2", "--json", "-q")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    sim = CliRunner().invoke(app, ["simulate", "-m", "gpt2", "-H", "h100-sxm", *flags, "--max-num-seqs", "2", "--json"])
    expected = json.loads(sim.stdout)
    assert out["predicted"]["tpot_s"] == expected["tpot_s"] and out["predicted"]["ttft_s"] == expected["ttft_s"]
    measured, predicted = out["measured"]["tpot_s"]["p50"], out["predicted"]["tpot_s"]["p50"]
    assert out["ratio"]["tpot_s"]["p50"] == pytest.approx(predicted / measured)
    table = run(server, *flags, "--compare", "-m", "gpt2", "-H", "h100-sxm", "-q")
    assert table.exit_code == 0 and "predicted / measured" in table.stdout and "TPOT p99" in table.stdout
    rows = list(
        csv.DictReader(io.StringIO(run(server, *flags, "--compare", "-m", "gpt2", "-H", "h100-sxm", "--csv").stdout))
    )
    tpot = next(r for r in rows if (r["metric"], r["statistic"]) == ("tpot_s", "p50"))  # the values, not only ratios
    assert float(tpot["ratio"]) == pytest.approx(float(tpot["predicted"]) / float(tpot["measured"]))


def test_compare_starts_a_closed_loops_clients_when_they_were_sent(server, tmp_path):
    # The simulated closed loop starts each client's first request at the time bench sent it, from the first; the
    # later requests go when their client's last finishes (arrival None). The prediction printed is that simulation.
    from roofline import load_hardware, load_model
    from roofline.bench import Bench, client_starts
    from roofline.calc.prepare import prepare
    from roofline.calc.replica import Scheduler
    from roofline.calc.simulate import engine_scheduler, run_simulation
    from roofline.calc.workload import Request

    flags = ["--concurrency", "2", "--requests", "4", "--warmup", "0", "--prompt", "16", "--output", "8"]
    per_request = tmp_path / "m.csv"
    r = run(server, *flags, "--per-request", str(per_request), "--compare", "-m", "gpt2", "-H", "h100-sxm", "--json")
    assert r.exit_code == 0, r.stderr
    sent = [float(row["arrival_s"]) for row in csv.DictReader(per_request.open())][:2]
    measured = Bench(*[None] * 13, per_request=[{"arrival_s": s} for s in sent])
    chosen = client_starts([Request(None, 16, 8)] * 4, measured, 2)
    assert [q.arrival_s for q in chosen] == [sent[0] - min(sent), sent[1] - min(sent), None, None]
    assert client_starts(chosen, measured._replace(per_request=[{"arrival_s": None}] * 2), 2) == chosen
    p = prepare(load_model("gpt2"), load_hardware("h100-sxm"))
    sched = engine_scheduler(p, Scheduler(None, None, None))
    expected = run_simulation(p, chosen, concurrency=2, scheduler=sched, capacity=False)
    assert json.loads(r.stdout)["predicted"]["ttft_s"] == pytest.approx(expected.ttft_s, rel=1e-9)


def test_a_time_limit_says_what_it_cut_apart_from_failures(server):
    # A new user (2026-12-07): 8 requests finished within --time-limit, all in the warm-up (a tenth of 100), and the
    # report said "92 of 100 requests failed (92 time limit)": requests never sent counted as failures.
    flags = ["--concurrency", "2", "--requests", "100", "--output", "8", "--time-limit", "300ms"]
    warm = run(server, *flags)
    assert warm.exit_code == 1 and "the time limit cut" in warm.stderr and "raise --time-limit" in warm.stderr
    assert "failed" not in warm.stderr
    measured = run(server, *flags, "--warmup", "0", "--json")
    assert measured.exit_code == 0 and json.loads(measured.stdout)["requests"] > 0
    assert "warning: the time limit cut" in measured.stderr and "failed" not in measured.stderr

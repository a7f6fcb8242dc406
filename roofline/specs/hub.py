"""Hugging Face Hub ids as model inputs (`-m org/name`, `-m org/name@revision`): the local cache first, with the
standard library; on a miss, huggingface_hub (optional extra [hub]) fetches config.json and the safetensors
headers only — never the weights.

Cache layout (huggingface_hub's docs, "Manage the cache"): HUB/models--ORG--NAME/refs/REVISION holds a commit
hash; HUB/models--ORG--NAME/snapshots/HASH/ holds the files. HUB is HF_HUB_CACHE, else HUGGINGFACE_HUB_CACHE,
else HF_HOME/hub, else XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from roofline.errors import RooflineError, UsageError

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}(@[\w./-]{1,100})?$")


def is_hub_id(ref: str) -> bool:
    """ORG/NAME or ORG/NAME@REVISION, and not a path that exists here."""
    return bool(HUB_ID.match(ref)) and not ref.endswith((".yaml", ".yml", ".json", ".gguf"))


def cache_dir(env: dict[str, str] | None = None) -> Path:
    """The hub cache folder, as huggingface_hub resolves it from the environment."""
    env = os.environ if env is None else env
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"]).expanduser()
    if env.get("HUGGINGFACE_HUB_CACHE"):
        return Path(env["HUGGINGFACE_HUB_CACHE"]).expanduser()
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser() / "hub"
    if env.get("XDG_CACHE_HOME"):
        return Path(env["XDG_CACHE_HOME"]).expanduser() / "huggingface" / "hub"
    return Path("~/.cache/huggingface/hub").expanduser()


def cached_snapshot(ref: str, env: dict[str, str] | None = None) -> Path | None:
    """The cached snapshot folder holding config.json for `ref`, or None."""
    repo, _, revision = ref.partition("@")
    org, name = repo.split("/", 1)
    base = cache_dir(env) / f"models--{org}--{name}"
    revision = revision or "main"
    ref_file = base / "refs" / revision
    commit = ref_file.read_text().strip() if ref_file.is_file() else revision
    folder = base / "snapshots" / commit
    return folder if (folder / "config.json").is_file() else None


def snapshot(ref: str) -> Path:
    """A folder with the model's config.json (and safetensors headers when fetched): the cache, else the Hub."""
    found = cached_snapshot(ref)
    if found is not None:
        return found
    try:
        import huggingface_hub as hf
    except ImportError:
        raise UsageError(
            f"{ref}: not in the local Hugging Face cache ({cache_dir()}); pip install 'roofline[hub]' to fetch "
            f"its config.json, or run `hf download {ref.partition('@')[0]} config.json`"
        ) from None
    repo, _, revision = ref.partition("@")
    endpoint = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    offline = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
    if not offline and not reachable(endpoint):
        raise UsageError(_hub_error(ref, ConnectionError()))
    hf.logging.set_verbosity_error()  # its retry warnings are not ours to print: one line on failure (_hub_error)
    try:
        path = hf.hf_hub_download(repo, "config.json", revision=revision or None)
    except Exception as e:  # noqa: BLE001 - huggingface_hub's error classes moved between releases; name them by class name
        raise UsageError(_hub_error(ref, e)) from None
    return Path(path).parent


def reachable(endpoint: str, timeout_s: float = 3.0) -> bool:
    """Whether the Hub's host answers a TCP connection within `timeout_s` (without a network, huggingface_hub
    retries five times over ~24 s before it says so); True behind a proxy for it, which huggingface_hub goes
    through and a direct connection may not (its own errors then say why)."""
    import socket
    import urllib.parse
    import urllib.request

    try:
        url = urllib.parse.urlsplit(endpoint)
        host, port = url.hostname or "", url.port or (80 if url.scheme == "http" else 443)
        if urllib.request.getproxies().get(url.scheme) and not urllib.request.proxy_bypass(host):
            return True
        socket.create_connection((host, port), timeout=timeout_s).close()
    except (OSError, ValueError):  # no route, refused, a timeout; a malformed URL or port
        return False
    return True


def _hub_error(ref: str, e: Exception) -> str:
    kind = type(e).__name__
    if kind == "GatedRepoError":
        return f"{ref}: a gated repository: accept its licence on the Hub and set HF_TOKEN"
    if kind in ("RepositoryNotFoundError", "RevisionNotFoundError", "EntryNotFoundError", "RemoteEntryNotFoundError"):
        return f"{ref}: not found on the Hub ({kind}; check the id and revision, and HF_TOKEN for a private repository)"
    if kind in ("LocalEntryNotFoundError", "OfflineModeIsEnabled", "ConnectionError", "ConnectTimeout"):
        return (
            f"{ref}: offline and not in the cache ({cache_dir()}); run `hf download {ref.partition('@')[0]} "
            "config.json` where there is a network"
        )
    raise RooflineError(f"{ref}: the Hub answered {kind}: {' '.join(str(e).split())[:200]}")


def remote_weight_bytes(ref: str):
    """Exact weight bytes of a Hub checkpoint without its weights: huggingface_hub reads each shard's safetensors
    header with HTTP range requests (get_safetensors_metadata); bytes are the data_offsets spans, as for a folder."""
    from roofline.specs.checkpoint import weight_bytes, weight_elements

    try:
        import huggingface_hub as hf
    except ImportError:
        raise UsageError(
            f"{ref}: exact bytes of a checkpoint not in the cache need huggingface_hub: pip install 'roofline[hub]'"
        ) from None
    repo, _, revision = ref.partition("@")
    try:
        meta = hf.get_safetensors_metadata(repo, revision=revision or None)
    except Exception as e:  # noqa: BLE001 - see snapshot()
        raise UsageError(_hub_error(ref, e)) from None
    tensors = []
    for file in meta.files_metadata.values():
        for name, info in file.tensors.items():
            start, end = info.data_offsets
            elements = 1
            for d in info.shape:
                elements *= int(d)
            tensors.append((name, str(info.dtype), weight_elements(name, str(info.dtype), elements), end - start))
    if not tensors:
        raise UsageError(f"{ref}: the Hub lists no safetensors tensors for it")
    return weight_bytes("safetensors", tensors)

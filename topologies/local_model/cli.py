"""The embedded models' command line: ``--prepare`` assembles and verifies the weights, ``--smoke``
starts the server and sends one chat request through the project's own client. It sits above both
``topologies.local_model`` (the server) and ``topologies.models`` (the client), so neither imports
the other's command line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from lcb.errors import LcbError
from topologies.local_model import DEFAULT_MODEL, EMBEDDED_MODELS, EmbeddedModel, assemble_weights


def _smoke(model: EmbeddedModel) -> str:
    from topologies import aio
    from topologies.models import make_client, resolve_model
    from topologies.types import Decoding

    client = make_client(resolve_model(model.alias))
    messages = [
        ("system", "You write short, correct Python programs. Answer with one fenced python block."),
        ("user", "Write a program that reads two integers a and b, one per line, and prints a + b."),
    ]

    async def ask() -> str:
        try:
            reply = await client.complete("smoke", messages, decoding=Decoding(max_tokens=200))
        finally:
            await client.aclose()
        return str(reply.content)

    return aio.run(ask())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m topologies.local_model",
        description="The embedded models (llama.cpp server): "
        + ", ".join(f"{m.alias} = {m.id}" for m in EMBEDDED_MODELS.values()) + ".",
    )
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--prepare", action="store_true", help="assemble and verify the weights")
    action.add_argument("--smoke", action="store_true", help="start the server and send one request")
    parser.add_argument("--model", choices=tuple(EMBEDDED_MODELS), default=DEFAULT_MODEL.alias,
                        help=f"which embedded model (default {DEFAULT_MODEL.alias})")
    args = parser.parse_args(argv)
    model = EMBEDDED_MODELS[args.model]
    try:
        if args.prepare:
            started = time.monotonic()
            path = assemble_weights(model=model)
            print(f"weights ok: {path} ({time.monotonic() - started:.1f} s)", file=sys.stderr)
            print(json.dumps({"weights": str(path), "sha256": model.sha256}))
        else:
            started = time.monotonic()
            reply = _smoke(model)
            print(f"reply in {time.monotonic() - started:.1f} s (server start included)", file=sys.stderr)
            print(reply)
    except LcbError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - e.g. ModelCallError: one line, no traceback
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

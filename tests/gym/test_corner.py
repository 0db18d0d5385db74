"""The first gym as an exact corner of the new one, and the corner knobs changing nothing by default.

- Default worlds keep their digests and their draws: world digests, and a fingerprint of what a
  job's evaluator, team model, probe, judge and reflector produce on default worlds (through the
  real runner, with a test method that does no search), pinned to values recorded on main before
  the corner knobs existed (854f843).
- With the corner knobs, ``legacy_*`` jobs equal the first gym's code run with today's methods
  (``docs/gym/corner_reference.json``, provenance inside) exactly: regret, charged rollouts and
  deployed candidate. Positive controls: with each knob reverted, some pinned job differs.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from optimizers.base import OptimizationResult, Optimizer
from optimizers.gym.runner import GymJob, run_job, world_digest
from optimizers.registry import register_optimizer

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "gym" / "corner_reference.json"

# Recorded on main at 854f843 (before the corner knobs).
DIGESTS = {
    "credit@0": "3f1bd527e78f0c50", "credit@1": "eb4968070a9c9aa2", "joint@0": "0213ec82e70f184b",
    "joint@2": "359b16b0f7918325", "noisy@0": "f34cc9acee24fa7e", "noisy@5": "6d3b217855284583",
    "seed_optimal@0": "66d6dc82b3afcc6d", "seed_optimal@3": "e4d711ff3a1595df",
    "legacy_credit@0": "e74c51bb23a31cbd", "legacy_joint@0": "f1640eeb6fcf03c1",
    "legacy_noisy@0": "16dd63d9519ae03c", "legacy_seed_optimal@0": "68d43c67363f83bc",
}
FINGERPRINTS = {"credit@1": "455bfed5fe12d453", "noisy@0": "3b23c6fca284958b", "legacy_joint@2": "31cf4b62832c53cd"}


@register_optimizer("gym_test_fingerprint")
class Fingerprint(Optimizer):
    """No search: scores the seed and a candidate whose main prompt carries every concept of the
    language (two samples), asks one probe, one judge and one reflection, and deploys the
    candidate. What it saw is written to ``native/seen.json``."""

    async def optimize(self, seed, *, train, val, ctx) -> OptimizationResult:
        from optimizers.judge import JUDGE_SYSTEM
        from optimizers.reflection import REFLECTION_SYSTEM
        from topologies.types import Decoding

        main = next(iter(seed.components))
        words = ctx.method_params["words"]
        loaded = seed.with_component(main, seed.components[main] + "\n" + " ".join(words))
        rollouts = []
        for sample in (0, 1):
            rollouts += await ctx.evaluator.evaluate(seed, train[:3], sample=sample)
            rollouts += await ctx.evaluator.evaluate(loaded, train[:3], sample=sample)
        rollouts += await ctx.evaluator.evaluate(loaded, val[:2], phase="val")
        said = "\n".join(str(m.get("content", "")) for r in rollouts for m in r.trace)
        case = f"Case {train[0]}." if "~" in train[0] else ctx.method_params["statement"]

        async def ask(system: str, user: str) -> str:
            reply = await ctx.task_model.complete("fingerprint", [{"role": "system", "content": system},
                                                                   {"role": "user", "content": user}],
                                                  decoding=Decoding(temperature=0.7, seed=7))
            return str(reply.content)

        seen = {
            "rollouts": [[r.problem_id, r.phase, r.sample, r.seed, r.score] for r in rollouts],
            "said": hashlib.sha256(said.encode()).hexdigest(),
            "probe": await ask(seed.components[main], case),
            "judge": await ask(JUDGE_SYSTEM + "\nTask: gepa/judge.", "=== REPLY ===\n" + said[:4000]),
            "reflection": await ask(REFLECTION_SYSTEM + "\nTask: random/propose.", said[:6000]),
        }
        (ctx.workdir / "seen.json").write_text(json.dumps(seen, sort_keys=True))
        return OptimizationResult(best=loaded, stop_reason="done")


def fingerprint(world: str, out: Path, knobs: tuple = ()) -> str:
    from lcb.data import load_problems
    from optimizers.gym.worlds import make_world

    lex = make_world(world).lex
    params = (("statement", load_problems("builtin").problems[0].statement),
              ("words", tuple(lex.concept(k).forms[0] for k in lex.keys)))
    job = GymJob(world, "gym_test_fingerprint", 40, 2, params, knobs)
    result = run_job(job, out, keep_journals=True)
    seen = json.loads((job.directory(out) / "native" / "seen.json").read_text())
    kept = {k: result[k] for k in ("regret", "charged", "deployed_candidate_id", "world_digest", "curve")}
    return hashlib.sha256(json.dumps([seen, kept], sort_keys=True).encode()).hexdigest()[:16]


def test_default_world_digests_are_unchanged() -> None:
    assert {w: world_digest(GymJob(w, "identity", 50, 0)) for w in DIGESTS} == DIGESTS


@pytest.mark.parametrize("world", sorted(FINGERPRINTS))
def test_default_draws_are_unchanged(world: str, tmp_path: Path) -> None:
    assert fingerprint(world, tmp_path) == FINGERPRINTS[world]


# ------------------------------------------------------------------------------------------------
# The corner: the first gym draw for draw

# legacy_credit mapro seed 1 depends on every corner knob (its probes, reading, draws and split);
# legacy_joint gepa seed 0 is a second, probe-free job.
PINNED = (("legacy_credit", "mapro", 1), ("legacy_joint", "gepa", 0))
EXACT = ("regret", "charged", "deployed_candidate_id")


def corner_job(world: str, method: str, seed: int, out: Path, *, without: str | None = None) -> dict:
    from optimizers.gym.worlds import CORNER

    knobs = tuple((k, v) for k, v in CORNER if k != without)
    result = run_job(GymJob(f"{world}@{seed}", method, 150, seed, (), knobs), out)
    assert result["status"] == "completed", result.get("error")
    return {k: result[k] for k in EXACT}


def first_gym(world: str, method: str, seed: int) -> dict:
    reference = json.loads(REFERENCE.read_text())
    assert "0eea35e" in reference["provenance"]
    return reference["jobs"][world][method]["150"][str(seed)]


@pytest.mark.parametrize(("world", "method", "seed"), PINNED)
def test_the_corner_is_the_first_gym_draw_for_draw(world: str, method: str, seed: int, tmp_path: Path) -> None:
    assert corner_job(world, method, seed, tmp_path) == first_gym(world, method, seed)


@pytest.mark.parametrize("knob", ["legacy_draws", "legacy_probe", "legacy_reading", "legacy_salt"])
def test_each_corner_knob_is_needed(knob: str, tmp_path: Path) -> None:
    """Positive control: with any one knob reverted the pinned job is no longer the first gym's."""
    world, method, seed = PINNED[0]
    assert corner_job(world, method, seed, tmp_path, without=knob) != first_gym(world, method, seed)


def test_corner_knobs_refuse_bad_input() -> None:
    from optimizers.gym.worlds import UnknownWorld, make_world

    with pytest.raises(UnknownWorld, match="legacy_salt.*not one of the first gym"):
        make_world("credit@0", {"legacy_salt": "1"})
    with pytest.raises(UnknownWorld, match="legacy_probe must be on or off"):
        make_world("legacy_credit", {"legacy_probe": "maybe"})
    world = make_world("legacy_credit", {"legacy_salt": "1", "legacy_draws": "0"})
    assert (world.draw_name, world.legacy_draws) == ("credit-sequential", False)
    assert make_world("legacy_credit", {"legacy_salt": "off"}).draw_name == "legacy_credit-sequential"


def test_the_corner_command_counts_exact_cells(tmp_path: Path) -> None:
    """``benchmarks.gym.corner`` against a two-job reference: one exact, one altered by hand."""
    from benchmarks.gym.corner import compare, counts

    results = [{"world": "legacy_joint@0~x", "method": "gepa", "budget": 150, "seed": 0,
                **first_gym("legacy_joint", "gepa", 0)},
               {"world": "legacy_credit@1~x", "method": "mapro", "budget": 150, "seed": 1,
                **first_gym("legacy_credit", "mapro", 1)}]
    jobs = {"legacy_joint": {"gepa": {"150": {"0": dict(first_gym("legacy_joint", "gepa", 0))}}},
            "legacy_credit": {"mapro": {"150": {"1": {**first_gym("legacy_credit", "mapro", 1), "charged": -1}}}}}
    regret = {w: {m: {"150": [r["regret"]] * 3 for r in results if r["method"] == m} for m in jobs[w]} for w in jobs}
    rows = compare(results, {"regret": regret, "jobs": jobs}, resamples=20)
    assert counts(rows) == {"cells": 2, "within_ci": 2, "exact": 1, "jobs": 2, "exact_jobs": 1}


def test_the_legacy_probe_reads_the_optimum_without_noise() -> None:
    from optimizers.gym.models import shows_correct_program
    from optimizers.gym.slots import GymProblems
    from optimizers.gym.system import GymSystem, seed_candidate
    from optimizers.gym.worlds import make_world

    world = make_world("legacy_credit", {"legacy_probe": "1"})
    seed, spec, roster = seed_candidate(world)
    system = GymSystem(world, spec, roster)
    statement = GymProblems()[world.problems[0]].statement
    facts = [world.text(f.concept) for f in world.facts]
    lacks = [world.lex.concept(f.concept).lack[0] for f in world.facts]
    bare = {system.probe(seed.components, "Be brief.", statement, s) for s in range(30)}
    (answer,) = bare  # the same answer whatever the seed: no draw
    assert all(line in answer for line in lacks) and not shows_correct_program(answer)
    full = system.probe(seed.components, " ".join(facts), statement, 3)
    assert shows_correct_program(full) and not any(line in full for line in lacks)
    harmful = system.probe(seed.components, " ".join([*facts, world.text(world.distractors[0].concept)]), statement, 3)
    assert world.lex.concept(world.distractors[0].concept).excess[0] in harmful and not shows_correct_program(harmful)
    # Positive control: without the knob the probe is a stochastic rollout (answers vary with the seed).
    plain = GymSystem(make_world("legacy_credit"), spec, roster)
    assert len({plain.probe(seed.components, "Be brief.", statement, s) for s in range(30)}) > 1


def test_the_legacy_reading_lists_what_it_reads_in_vocabulary_order() -> None:
    from optimizers.gym.models import proposal
    from optimizers.gym.worlds import make_world

    world = make_world("legacy_credit", {"legacy_reading": "1"})
    first, second = (world.text(f.concept) for f in world.facts)
    text = f"{second}\n{first}"  # the second fact written first
    ordered = {proposal(world.lex, world.channel, text, "s", i) for i in range(40)}
    assert all(p.startswith(f"{first} {second}") for p in ordered)
    appearance = make_world("legacy_credit").channel  # positive control: order of appearance
    assert all(proposal(world.lex, appearance, text, "s", i).startswith(f"{second} {first}") for i in range(40))

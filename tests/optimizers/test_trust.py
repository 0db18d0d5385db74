"""Results a reviewer can trust: cut replies are seen and never parsed, a job never resumes under
other code versions silently, and held-out selection rows never reach the method.

The model is the scripted server (honest stand-in); teams, grader, methods and job are real.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from scripted_world import MARKER, fast_runtime, world_job_config, world_script

from optimizers.journal import read_jsonl, read_sealed
from optimizers.protocol.job.errors import VersionMismatch
from optimizers.protocol.job.engine import run_job


def _serve(script: Any) -> Any:
    from topologies.scripted import ScriptedServer

    return ScriptedServer(script).start()


def _with_rule_first(rule: Callable[[Any], Any], **world: Any) -> Any:
    from topologies.scripted import FunctionRule, Script

    base = world_script(**world)
    return Script([FunctionRule("first", rule), *base.rules], default=None)


@pytest.fixture
def serve() -> Any:
    servers: list[Any] = []

    def start(script: Any) -> Any:
        server = _serve(script)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


# ------------------------------------------------------------------------------------------------
# 1. Truncated replies


def test_a_cut_reflection_reply_is_a_failed_call_and_never_becomes_an_instruction(tmp_path: Path, serve) -> None:
    from optimizers.reflection import REFLECTION_SYSTEM
    from topologies.scripted import Reply

    cut_text = f"You are a meticulous competitive programmer.\n{MARKER}\nKeep the final program comp"

    def cut_proposals(request: Any) -> Any:
        # MIPRO accepts an unfenced reply as an instruction; this one was cut at the token limit.
        if REFLECTION_SYSTEM in request.system and "Task: mipro/propose." in request.system:
            return Reply(content=cut_text, finish_reason="length", template=False)
        return None

    server = serve(_with_rule_first(cut_proposals, world="useful"))
    out = tmp_path / "job"
    result = run_job(world_job_config(out, server.base_url, method="mipro", budget=30,
                                      method_params={"num_trials": 2}), fast_runtime())

    candidates = list(read_jsonl(out / "optimization" / "candidates.jsonl"))
    assert candidates and all(MARKER not in json.dumps(c["components"]) for c in candidates)
    optimization = read_sealed(out / "optimization.json")
    assert optimization["metadata"]["instruction_candidates"] == {"solver": 1}  # only the seed's
    journal = [r for r in read_jsonl(out / "optimization" / "native" / "reflection.jsonl")
               if r["purpose"] == "propose"]
    assert len(journal) == 2
    for record in journal:
        assert record["ok"] is False and record["reply"] is None and record["finish_reason"] == "length"
        assert record["truncated_reply"] == cut_text and "token limit" in record["error"]
    usage = optimization["usage"]["reflection"]
    assert usage["truncated_calls"] == 2 and usage["by_purpose"]["propose"]["failed_calls"] == 2
    reflection = result["truncation"]["reflection"]
    assert reflection["propose"] == {"calls": 2, "truncated": 2, "rate": 1.0}
    assert reflection["summary"] == {"calls": 1, "truncated": 0, "rate": 0.0}
    assert result["selection"]["selected_candidate"] == "seed"


def test_a_cut_team_reply_is_recorded_as_cut_and_its_unfinished_program_is_not_graded(
    tmp_path: Path, serve
) -> None:
    from topologies.scripted import Reply

    base = world_script(world="useful", seed_solves={"builtin_kth_distinct", "builtin_binary_strings"})
    solve = next(rule for rule in base.rules if rule.name == "solve")

    def cut_answers(request: Any) -> Any:
        # Every team reply is cut halfway through its program, as a reply at max_tokens would be.
        text = solve.function(request)
        if text is None:
            return None
        return Reply(content=text[: len(text) // 2], finish_reason="length", template=False)

    from topologies.scripted import FunctionRule, Script

    server = serve(Script([FunctionRule("cut", cut_answers), *base.rules], default=None))
    out = tmp_path / "job"
    result = run_job(world_job_config(out, server.base_url, method="scripted_search",
                                      method_params={"variants": 1}), fast_runtime())
    truncation = result["truncation"]["task"]
    # Search: seed and one variant on the 6 train problems, one solver reply each, all cut.
    assert truncation["optimize"]["solver"] == {"replies": 12, "truncated": 12, "rate": 1.0}
    # Validation: nothing scored, so the seed stays (one evaluation of 4); test likewise.
    assert truncation["validation"]["solver"] == {"replies": 4, "truncated": 4, "rate": 1.0}
    assert truncation["test"]["all"] == {"replies": 4, "truncated": 4, "rate": 1.0}
    assert result["selection"]["baseline_validation_score"] == 0.0  # even the "solved" ones: cut
    for record in read_jsonl(out / "optimization" / "rollouts.jsonl"):
        assert [m.get("finish_reason") for m in record["trace"] if m["kind"] == "ai"] == ["length"]
        assert record["details"]["replies_by_role"] == {"solver": {"replies": 1, "truncated": 1}}
        assert record["verdict"]["outcome"] == "no_code" and record["score"] == 0.0


# ------------------------------------------------------------------------------------------------
# 2. Code versions


def test_resuming_after_a_scorer_version_bump_is_refused_unless_forced(tmp_path: Path, serve, monkeypatch) -> None:
    import lcb.version

    server = serve(world_script(world="useful"))
    out = tmp_path / "job"
    config = world_job_config(out, server.base_url, method="identity", phase="optimize")
    run_job(config, fast_runtime())
    before = read_sealed(out / "job.json")
    assert before["code_versions"]["scorer"] == lcb.version.SCORER_VERSION

    monkeypatch.setattr(lcb.version, "SCORER_VERSION", "bumped")
    resume = world_job_config(out, server.base_url, method="identity")
    with pytest.raises(VersionMismatch) as refused:
        run_job(resume, fast_runtime())
    message = str(refused.value)
    assert "\n" not in message and "scorer=bumped" in message and "--force-resume" in message
    assert not (out / "selection.json").exists()  # nothing ran

    forced = world_job_config(out, server.base_url, method="identity", force_resume=True)
    result = run_job(forced, fast_runtime())
    assert result["job_id"] == before["job_id"]  # continued under the stored identity
    assert result["forced_resume"]["code_versions"]["scorer"] == "bumped"
    assert result["conformant"] is False
    assert len(list(read_jsonl(out / "forced_resumes.jsonl"))) == 1


def test_method_and_runtime_versions_enter_job_and_condition_ids(tmp_path: Path, monkeypatch) -> None:
    import topologies.version
    from optimizers.identity import IdentityOptimizer
    from optimizers.protocol.job.engine import Job

    config = world_job_config(tmp_path / "job", "http://127.0.0.1:9/v1", method="identity")
    first = Job(config).identity
    monkeypatch.setattr(IdentityOptimizer, "version", "2")
    second = Job(config).identity
    assert second.job_id != first.job_id and second.condition_id == first.condition_id
    monkeypatch.setattr(topologies.version, "TEAM_RUNTIME_VERSION", topologies.version.TEAM_RUNTIME_VERSION + "-next")
    third = Job(config).identity
    assert third.condition_id != second.condition_id and third.job_id != second.job_id


# ------------------------------------------------------------------------------------------------
# 3. Held-out selection


def test_a_heldout_selection_job_never_shows_its_selection_rows_to_the_method(tmp_path: Path, serve) -> None:
    server = serve(world_script(world="useful"))
    out = tmp_path / "job"
    result = run_job(world_job_config(out, server.base_url, method="gepa", budget=30, selection="heldout",
                                      selection_size=2, method_params={"use_merge": False}), fast_runtime())
    selection = read_sealed(out / "selection.json")
    held = set(selection["validation_ids"])
    assert len(held) == 2 and selection["selection_mode"] == "heldout"
    optimization = read_sealed(out / "optimization.json")
    assert set(optimization["validation_ids"]).isdisjoint(held) and len(optimization["validation_ids"]) == 2
    # The evaluator's journal: every attempt and rollout of the search is on other problems.
    attempts = list(read_jsonl(out / "optimization" / "attempts.jsonl"))
    rollouts = list(read_jsonl(out / "optimization" / "rollouts.jsonl"))
    assert attempts and rollouts
    assert {r["problem_id"] for r in attempts + rollouts}.isdisjoint(held)
    assert any(r["phase"] == "val" for r in rollouts)  # GEPA did search on (the rest of) validation
    gap = result["selection"]["optimism"]
    assert gap["incumbent_selection_score"] == selection["incumbent_validation_score"]
    assert result["selection"]["mode"] == "heldout" and result["cell"]["selection"]["size"] == 2


def test_the_optimism_gap_is_search_score_minus_selection_score(tmp_path: Path, serve) -> None:
    server = serve(world_script(world="useful"))
    out = tmp_path / "job"
    result = run_job(world_job_config(out, server.base_url, method="gepa", budget=30,
                                      method_params={"use_merge": False}), fast_runtime())
    gap = result["selection"]["optimism"]
    rollouts = list(read_jsonl(out / "optimization" / "rollouts.jsonl"))
    incumbent = result["optimization"]["incumbent_candidate_id"]
    mine = [r["score"] for r in rollouts if r["candidate_id"] == incumbent and r["status"] != "infrastructure_failure"]
    assert gap["incumbent_search_rollouts"] == len(mine)
    assert gap["incumbent_search_score"] == pytest.approx(sum(mine) / len(mine))
    assert gap["optimism_gap_pp"] == pytest.approx(
        100 * (gap["incumbent_search_score"] - result["selection"]["incumbent_validation_score"]))

"""MAMUT-GEPA: end to end on the scripted world (CLI and run_job), its reflective records, its
no-op rule and its incumbent rule."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from optimizers.candidate import Candidate
from optimizers.gepa.adapter import CandidateBook
from optimizers.journal import read_json, read_jsonl, read_sealed
from optimizers.mamut_gepa.adapter import read_proposal
from optimizers.mamut_gepa.optimizer import choose_incumbent
from optimizers.protocol.job.engine import run_job
from scripted_world import (MARKER, MODEL_ID, REFLECTION_ID, fast_runtime, run_cli, start_world, world_job_config,
                            world_script)

METHOD = "mamut_gepa"


@pytest.fixture(scope="module")
def useful() -> Any:
    server = start_world(world="useful")
    yield server
    server.stop()


def reflection_prompts(out: Path) -> list[str]:
    return [r["prompt"] for r in read_jsonl(out / "optimization" / "native" / "reflection.jsonl")]


def test_cli_centralized_team_finds_the_marker_and_deploys_it(tmp_path: Path, useful: Any,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from optimizers.protocol.report.tracking import offline_run_dirs, read_offline_run

    monkeypatch.setenv("WANDB_MODE", "offline")
    out = tmp_path / "job"
    first_request = len(useful.requests)
    done = run_cli(useful.base_url, out, METHOD, "--team-size", "2", "--tracker", "wandb", budget=40,
                   topology="centralized")
    assert done.returncode == 0, done.stderr[-3000:]
    line = json.loads(done.stdout.strip().splitlines()[-1])
    assert line["status"] == "completed" and line["fallback_reason"] is None
    assert line["deployed_mean"] > line["baseline_mean"]
    selection = read_sealed(out / "selection.json")
    assert selection["selected_candidate"] == "incumbent"
    assert MARKER in selection["deployed_candidate"]["components"]["role/manager"]
    optimization = read_sealed(out / "optimization.json")
    metadata = optimization["metadata"]
    assert metadata["components"] == ["role/coder_worker", "role/manager"]  # every role, jointly
    assert metadata["incumbent_rule"] == "gepa_best" and metadata["incumbent_val_score"] > metadata["seed_val_score"]
    assert metadata["params"]["reflection_temperature"] == 0.7
    # Derived from the schedule (every engine call a fresh charged rollout): the seed on validation
    # (4); iteration 1 updates the worker, which never acts in this world, so there is nothing to
    # reflect on and no child (3: the seed's minibatch); iteration 2 updates the manager: the seed
    # and the marked child on a minibatch (3 + 3), the child wins and runs on validation (4): 17.
    # From then on the child is the only parent and every minibatch it draws is perfect, so each
    # iteration charges its 3 rollouts and proposes nothing, until fewer than the 6 an iteration
    # may need are left of B=40: 17 + 6 x 3 = 35 (the cap min(600, 40) is never reached).
    skipped = ((40 - 17) - 6) // 3 + 1  # iterations that start with at least 6 of B left
    charged = 4 + 3 + (3 + 3 + 4) + skipped * 3
    assert optimization["budget"]["charged"] == charged == 35
    assert optimization["stop_reason"] == "rollout_budget_spent"
    assert metadata["metric_call_cap_used"] == metadata["metric_calls"] == charged and metadata["proposals"] == 1
    # The proposer ran at the method's temperature, with the job's reflection model.
    records = list(read_jsonl(out / "optimization" / "native" / "reflection.jsonl"))
    assert records and all(r["temperature"] == 0.7 and r["purpose"] == "propose" for r in records)
    proposals = [r.body for r in useful.requests[first_request:] if r.rule == "reflect"]
    assert len(proposals) == len(records)  # --reflection-model is the model that was asked
    assert all(b["model"] == REFLECTION_ID and b["temperature"] == 0.7 and b["top_p"] == 1.0 for b in proposals)
    assert all(r.body["model"] == MODEL_ID for r in useful.requests[first_request:] if r.rule == "solve")
    # result.json and W&B carry charged rollouts, reflection calls and tokens.
    result = read_json(out / "result.json")
    reflection = result["optimization"]["usage"]["reflection"]
    assert result["optimization"]["budget"]["charged"] == optimization["budget"]["charged"] > 0
    assert reflection["calls"] == len(records) and reflection["total_tokens"] > 0
    [run_dir] = offline_run_dirs(out)
    summary = read_offline_run(run_dir).summary
    assert summary["budget/charged"] == optimization["budget"]["charged"]
    assert summary["usage/reflection/calls"] == len(records)
    assert summary["usage/reflection/prompt_tokens"] == reflection["prompt_tokens"] > 0
    print(f"\n[mamut_gepa figure] charged={optimization['budget']['charged']} reflection_calls={len(records)} "
          f"reflection_tokens={reflection['total_tokens']} stop={optimization['stop_reason']}")


def test_useless_reflection_keeps_the_seed(tmp_path: Path) -> None:
    server = start_world(world="useless")
    try:
        result = run_job(world_job_config(tmp_path / "job", server.base_url, method=METHOD, budget=24),
                         fast_runtime())
    finally:
        server.stop()
    optimization = read_sealed(tmp_path / "job" / "optimization.json")
    # Derived from the schedule: the seed on validation (4 charged); then each iteration charges 6
    # (the parent, always the seed, and the child on a minibatch of 3; the child never scores
    # better, so it never runs on validation): 4 + 3 x 6 = 22, and a fourth iteration (6) does
    # not fit in the 2 rollouts left. One proposal per iteration, each a changed text.
    iterations = (24 - 4) // (2 * 3)
    assert optimization["metadata"]["proposal_outcomes"]["changed"] == iterations == 3
    assert optimization["budget"]["charged"] == 4 + iterations * 6 == 22
    assert optimization["stop_reason"] == "rollout_budget_spent"
    assert optimization["incumbent_candidate"]["id"] == optimization["seed_candidate"]["id"]
    assert result["selection"]["selected_candidate"] == "seed"
    assert result["test"]["delta_pp"] == 0.0


def _hidden_only_texts(problem_ids: list[str]) -> list[str]:
    """Hidden-test inputs/outputs long enough to be unmistakable and shown nowhere public."""
    from lcb.data import load_problems

    problems = {p.id: p for p in load_problems("builtin").problems}
    texts = []
    for problem_id in problem_ids:
        problem = problems[problem_id]
        public = problem.statement + "".join(t.input + t.output for t in problem.public_tests)
        for test in problem.private_tests:
            texts += [t.strip() for t in (test.input, test.output) if len(t.strip()) >= 12 and t.strip() not in public]
    return texts


def _records(prompt: str) -> list[tuple[dict[str, Any], dict[str, Any], str]]:
    """(Inputs, Generated Outputs, Feedback) of each example in a proposal prompt (gepa renders
    a string value as it is; ours are one-line JSON)."""
    found = re.findall(r"^## Inputs\n(.*)\n\n## Generated Outputs\n(.*)\n\n## Feedback\n(.*)$", prompt, flags=re.MULTILINE)
    return [(json.loads(inputs), json.loads(outputs), feedback) for inputs, outputs, feedback in found]


def test_reflective_records_carry_the_whole_tagged_team_trajectory_and_no_hidden_tests(tmp_path: Path,
                                                                                      useful: Any) -> None:
    out = tmp_path / "job"
    config = world_job_config(out, useful.base_url, method=METHOD, topology="sequential", team_size=2, budget=30,
                              method_params={"use_merge": False})
    run_job(config, fast_runtime())
    prompts = reflection_prompts(out)
    assert prompts
    # The runs the records come from, by task: the team's trajectory without its system prompts.
    runs = {}
    for row in read_jsonl(out / "optimization" / "rollouts.jsonl"):
        task = next(m["content"] for m in row["trace"] if m["kind"] == "user")
        runs.setdefault(task, []).append([m for m in row["trace"] if m["kind"] != "system"])
    targets = set()
    for prompt in prompts:
        records = _records(prompt)
        assert records and prompt.count("# Example ") == len(records)
        for inputs, outputs, feedback in records:
            target = inputs["target_component"]
            targets.add(target)
            role = target.split("/", 1)[1]
            # Whole, as the reference sends it: the task and every message of the run, uncut,
            # each tagged with its source role and kind.
            trajectory = inputs["source_tagged_trajectory"]
            assert [(m["source"], m["kind"], m["content"]) for m in trajectory] in [
                [(m["source"], m["kind"], m["content"]) for m in run] for run in runs[inputs["task"]]]
            assert {m["source"] for m in trajectory if m["kind"] == "ai"} == {"coder", "debugger"}
            assert max(len(m["content"]) for m in trajectory) > 800  # longer than the old cut
            # Generated Outputs: the target role's own messages, nobody else's.
            assert outputs["component"] == target and outputs["invocations"]
            assert outputs["invocations"] == [m for m in trajectory if m["source"] == role and m["kind"] == "ai"]
            # The reference's feedback: the team's global score and status, no verdict details.
            assert re.fullmatch(r"Global team score=[01]\.000000; status=(success|semantic_failure)", feedback)
            assert "submitted_program" not in inputs
        assert "BEGIN_PROMPT" in prompt and "output contract" in prompt
        assert "a team of 2 agents with the role prompt(s): coder, debugger" in prompt
    assert targets == {"role/coder", "role/debugger"}  # round robin over every role
    optimization = read_sealed(out / "optimization.json")
    seen = sorted(set(optimization["training_ids"]) | set(optimization["validation_ids"]))
    hidden = _hidden_only_texts(seen)
    assert hidden, "the check needs hidden-test texts to look for"
    leaked = [text for text in hidden for prompt in prompts if text in prompt]
    assert not leaked, f"hidden-test content reached the reflection model: {leaked[:3]}"


def _echo_world() -> Any:
    """The useless world whose MAMUT proposer hands back the current text unchanged."""
    from optimizers.reflection import REFLECTION_SYSTEM
    from topologies.scripted import FunctionRule, Script, ScriptedServer

    def echo(request: Any) -> str | None:
        if REFLECTION_SYSTEM not in request.system or f"Task: {METHOD}/propose." not in request.system:
            return None
        return f"Same as before:\nBEGIN_PROMPT\n{read_proposal(request.last_user)}\nEND_PROMPT"

    base = world_script(world="useless")
    return ScriptedServer(Script([FunctionRule("echo", echo), *base.rules], default=None)).start()


def test_a_proposal_that_changes_nothing_is_not_evaluated(tmp_path: Path) -> None:
    server = _echo_world()
    out = tmp_path / "job"
    try:
        run_job(world_job_config(out, server.base_url, method=METHOD, budget=30), fast_runtime())
    finally:
        server.stop()
    optimization = read_sealed(out / "optimization.json")
    # Derived: the seed on validation (4); each iteration then runs the seed on a minibatch (3,
    # charged even where it ran that row before) and its proposal changes nothing, so no child
    # runs. An iteration starts while 6 (parent + child) fit in what is left of 30: at 26, 23,
    # ..., 8 left, 7 iterations, 4 + 7 x 3 = 25 charged.
    iterations = ((30 - 4) - 6) // 3 + 1
    outcomes = optimization["metadata"]["proposal_outcomes"]
    assert outcomes["asked"] == iterations == 7
    assert outcomes["unchanged"] == outcomes["asked"] and outcomes["changed"] == 0
    assert outcomes["skipped_proposals"] == outcomes["asked"]
    seed_id = optimization["seed_candidate"]["id"]
    attempts = [a for a in read_jsonl(out / "optimization" / "attempts.jsonl") if a["charged"]]
    assert {a["candidate_id"] for a in attempts} == {seed_id}  # no child ever ran
    assert len(attempts) == 4 + iterations * 3 == 25
    assert optimization["metadata"]["candidates"] == 1
    assert optimization["stop_reason"] == "rollout_budget_spent"
    assert optimization["incumbent_candidate"]["id"] == seed_id


def test_metric_call_cap_stops_the_engine_before_a_batch_would_cross_it(tmp_path: Path, useful: Any) -> None:
    # seed on val (4) + parent and child minibatches (3 + 3) = 10; the winning child's validation
    # pass (4) would make 14 > 12: refused, so nothing is charged for it.
    out = tmp_path / "job"
    run_job(world_job_config(out, useful.base_url, method=METHOD, budget=30,
                             method_params={"metric_call_limit": 12}), fast_runtime())
    optimization = read_sealed(out / "optimization.json")
    assert optimization["stop_reason"] == "metric_call_cap"
    assert optimization["metadata"]["metric_call_cap"] == 12
    assert optimization["metadata"]["metric_calls"] <= 12
    assert optimization["budget"]["charged"] == 10
    assert optimization["incumbent_candidate"]["id"] == optimization["seed_candidate"]["id"]


# ------------------------------------------------------------------------------------------------
# Pure pieces


def test_incumbent_is_gepa_best_only_if_it_differs_and_is_not_below_the_seed() -> None:
    seed = Candidate({"role/a": "seed", "role/b": "b"})
    book = CandidateBook(seed=seed, keys=("role/a", "role/b"))
    book.candidate({"role/a": "seed", "role/b": "b"})
    child = book.candidate({"role/a": "child", "role/b": "b"})
    val = ["v1", "v2"]
    assert choose_incumbent(book, val) == (seed, "gepa_best_is_seed")  # nothing validated yet
    book.val_scores = {seed.id: {"v1": 1.0, "v2": 0.0}, child.id: {"v1": 1.0, "v2": 0.0}}
    assert choose_incumbent(book, val) == (seed, "gepa_best_is_seed")  # a tie keeps the seed
    book.val_scores[child.id]["v2"] = 1.0
    assert choose_incumbent(book, val) == (child, "gepa_best")
    book.val_incomplete = {seed.id}  # no complete seed aggregate to compare with
    assert choose_incumbent(book, val) == (seed, "gepa_best_below_seed")


def test_proposal_reader_reads_as_the_reference_does() -> None:
    assert read_proposal("x\nBEGIN_PROMPT\n  new text\nline 2\nEND_PROMPT\ny") == "new text\nline 2"
    # the first marked block, as the reference's re.search takes it
    assert read_proposal("BEGIN_PROMPT\nfirst\nEND_PROMPT\nthen\nBEGIN_PROMPT\nsecond\nEND_PROMPT") == "first"
    assert read_proposal("```\nshort\n```\nand\n```python\nlast fenced\n```") == "last fenced"
    assert read_proposal("BEGIN_PROMPT\ncut off before the end marker") == "cut off before the end marker"
    assert read_proposal("no markers at all") is None


@pytest.mark.parametrize(("components", "keys"), [("roles", ["role/debater"]),
                                                  ("all", ["protocol/handoff", "role/debater"])])
def test_decentralized_peers_share_one_prompt_and_components_is_a_knob(tmp_path: Path, useful: Any,
                                                                       components: str, keys: list[str]) -> None:
    out = tmp_path / "job"
    config = world_job_config(out, useful.base_url, method=METHOD, topology="decentralized", team_size=2, budget=24,
                              method_params={"use_merge": False, "components": components})
    run_job(config, fast_runtime())
    optimization = read_sealed(out / "optimization.json")
    assert optimization["metadata"]["components"] == keys
    assert MARKER in optimization["incumbent_candidate"]["components"]["role/debater"]
    prompts = reflection_prompts(out)
    assert prompts and all("a team of 2 agents sharing the role prompt(s): debater" in p for p in prompts)


# ------------------------------------------------------------------------------------------------
# Step by step (issue 21, item 14) and the metric-call cap in charged rollouts (item 11)

VAL = ["builtin_kth_distinct", "builtin_binary_strings", "builtin_max_window_sum", "builtin_shortest_route"]
# gepa's epoch-shuffled minibatches of 3 over the 6 train problems (its RNG seeded with the job seed 0):
# epoch 1 is the first two, epoch 2 is reshuffled.
FIRST_MINIBATCH = ["builtin_longest_climb", "builtin_count_prefixed", "builtin_job_scheduling"]
SECOND_MINIBATCH = ["builtin_travel_time", "builtin_temperature_swing", "builtin_merge_intervals"]
THIRD_MINIBATCH = ["builtin_job_scheduling", "builtin_temperature_swing", "builtin_longest_climb"]
# (candidate, phase, problems, score of each): every charged rollout in order. Worked out from the
# spec, with the cap at 20 and every engine call a fresh charged rollout (the reference's
# cache_evaluation=False):
#   the seed on all of validation (4 charged, 4 in all);
#   iteration 1: the seed (parent) on a minibatch (3, 7), the proposal (child, with the marker) on
#     the same minibatch (3, 10): 3/3 > 0/3, so the child runs on all of validation (4, 14), the
#     new best;
#   iteration 2: the child is the Pareto front's only parent; it runs on its next minibatch (3, 17,
#     charged again although nothing changed), which is perfect, so gepa skips the proposal;
#   iteration 3: the same on the first minibatch of epoch 2 (3, 20), perfect, skipped; the child
#     already ran all three rows (two in iteration 1, one in iteration 2): they run again, new seeds;
#   iteration 4: its minibatch (3) would make 23 > 20: refused before it runs, stop metric_call_cap.
# So 20 engine calls, all charged (with a rollout cache the old trace took 77 calls for 17).
TRACE = [("seed", "val", VAL, 0.0), ("seed", "train", FIRST_MINIBATCH, 0.0), ("child", "train", FIRST_MINIBATCH, 1.0),
         ("child", "val", VAL, 1.0), ("child", "train", SECOND_MINIBATCH + THIRD_MINIBATCH, 1.0)]
CHARGED = 4 + 3 + 3 + 4 + 3 + 3


def _trace_job(out: Path, server: Any, **method_params: Any) -> dict[str, Any]:
    config = world_job_config(out, server.base_url, method=METHOD, budget=30, concurrency=1,
                              method_params=method_params)
    run_job(config, fast_runtime())
    return read_sealed(out / "optimization.json")


def test_the_first_iterations_follow_the_hand_worked_trace(tmp_path: Path, useful: Any) -> None:
    out = tmp_path / "job"
    optimization = _trace_job(out, useful, metric_call_limit=20)
    seed_id, best_id = optimization["seed_candidate"]["id"], optimization["incumbent_candidate"]["id"]
    names = {seed_id: "seed", best_id: "child"}
    steps: list[tuple[str, str, list[str], float]] = []
    for attempt in read_jsonl(out / "optimization" / "attempts.jsonl"):
        assert attempt["charged"]
        step = (names[attempt["candidate_id"]], attempt["phase"])
        score = 1.0 if attempt["outcome"] == "success" else 0.0
        if steps and steps[-1][:2] == step and steps[-1][3] == score:
            steps[-1][2].append(attempt["problem_id"])
        else:
            steps.append((*step, [attempt["problem_id"]], score))
    assert steps == TRACE
    history = [(row["event"], row["iteration"], names[row["candidate_id"]], row["val_score"], row["charged"])
               for row in optimization["history"]]
    assert history == [("seed_validation", 0, "seed", 0.0, 4), ("validation", 1, "child", 1.0, 14)]
    metadata = optimization["metadata"]
    assert (metadata["proposals"], metadata["merge_attempts"], metadata["candidates"]) == (1, 0, 2)
    assert optimization["stop_reason"] == "metric_call_cap" and optimization["budget"]["charged"] == CHARGED == 20
    # As in the reference, the engine's calls are its charged rollouts: no call is served free.
    assert metadata["metric_calls"] == metadata["metric_call_cap_used"] == CHARGED
    assert metadata["metric_call_cap"] == 20
    attempts = [a for a in read_jsonl(out / "optimization" / "attempts.jsonl")]
    repeats = [a for a in attempts if a["sample"] > 0]  # the child again on rows it already ran
    assert [a["problem_id"] for a in repeats] == THIRD_MINIBATCH
    assert len({(a["candidate_id"], a["problem_id"], a["seed"]) for a in attempts}) == CHARGED  # new seeds
    curve = [(row["reason"], row["charged_rollouts"], row["incumbent_candidate_id"], row["incumbent_score"])
             for row in read_jsonl(out / "optimization" / "learning_curve.jsonl")]
    assert curve[:4] == [("initial_state", 0, seed_id, None), ("grid", 10, seed_id, 0.0), ("stop", 20, best_id, 1.0),
                         ("grid", 20, best_id, 1.0)]


def test_rich_feedback_is_a_knob(tmp_path: Path, useful: Any) -> None:
    out = tmp_path / "job"
    _trace_job(out, useful, rich_feedback=True)
    [prompt] = reflection_prompts(out)
    feedback = prompt.split("## Feedback", 1)[1]
    assert feedback.startswith("\nGlobal team score=0.000000; status=semantic_failure\nscore 0 (outcome wrong_answer")
    runs = {r["answer"] for r in read_jsonl(out / "optimization" / "rollouts.jsonl")}
    programs = [inputs["submitted_program"] for inputs, _, _ in _records(prompt)]
    assert programs and all(program in runs for program in programs)  # whole, as the team submitted it


def test_the_cap_counts_charged_rollouts_and_refuses_a_batch_that_would_cross_it() -> None:
    from optimizers.budget import Budget, Outcome
    from optimizers.gepa.adapter import GEPAWatch, MetricCallCapReached

    def watch(counts_charged: bool) -> tuple[GEPAWatch, Budget]:
        budget = Budget(100)
        for _ in range(8):
            budget.commit(budget.reserve(), Outcome.SUCCESS)
        return GEPAWatch(budget=budget, min_budget_for_iteration=6, plateau_patience=None, metric_call_cap=10,
                         max_idle_iterations=20, hard_metric_cap=True, cap_counts_charged=counts_charged,
                         charged_at_start=2), budget

    charged, _ = watch(True)  # 8 - 2 = 6 charged since the engine started
    charged.admit(9, new_rollouts=4)  # 6 + 4 = 10: fits, although the engine asks for 9
    with pytest.raises(MetricCallCapReached):
        charged.admit(3, new_rollouts=5)  # 6 + 5 > 10
    assert charged.stop_reason == "max_full_evals"
    calls, _ = watch(False)  # positive control: counted in engine calls, the same 9-call batch fits ...
    calls.admit(9, new_rollouts=4)
    with pytest.raises(MetricCallCapReached):
        calls.admit(3, new_rollouts=0)  # ... and then a batch of cache hits alone crosses the cap


def test_the_reference_engine_version_takes_the_same_steps(old_gepa_dir: Path) -> None:
    # Item 10 (issue 21): the reference pins gepa 0.0.27; ours (pyproject) must make the same
    # proposals, acceptances, charges and stop on the scripted world (benchmarks/gepa_engine_versions.py).
    # The old engine comes from the package registry, hash-pinned (requirements-gepa-old.txt).
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "gepa_engine_versions.py"
    done = subprocess.run([sys.executable, str(script), "--old-gepa", str(old_gepa_dir), "--scenarios",
                           "mamut_single_useful,mamut_centralized_useful_cap,mamut_single_echo,mamut_single_silent"],
                          capture_output=True, text=True, timeout=1200, check=False)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 4 and {line["old"] for line in lines} == {"0.0.27"}, done.stderr[-2000:]
    assert all(line["same"] for line in lines), lines
    assert done.returncode == 0


def test_a_proposal_call_without_a_usable_reply_is_asked_once(tmp_path: Path) -> None:
    # An empty (or failed, or cut off) proposal reply leaves the component as it is. gepa 0.1.x
    # asks a proposer that raises a second time; ours does not raise, so each proposal is one call.
    from optimizers.reflection import REFLECTION_SYSTEM
    from topologies.scripted import FunctionRule, Script, ScriptedServer

    def silent(request: Any) -> str | None:
        if REFLECTION_SYSTEM in request.system and f"Task: {METHOD}/propose." in request.system:
            return " "
        return None

    server = ScriptedServer(Script([FunctionRule("silent", silent), *world_script(world="useful").rules],
                                   default=None)).start()
    out = tmp_path / "job"
    try:
        run_job(world_job_config(out, server.base_url, method=METHOD, budget=30, concurrency=1), fast_runtime())
        calls = sum(1 for r in server.requests if r.rule == "silent")
    finally:
        server.stop()
    optimization = read_sealed(out / "optimization.json")
    outcomes = optimization["metadata"]["proposal_outcomes"]
    # Derived as in the echo test: no child ever runs, so 7 iterations of 3 charged rollouts
    # after the seed's validation (4) fit in 30, one proposal call each.
    iterations = ((30 - 4) - 6) // 3 + 1
    assert outcomes["asked"] == outcomes["no_reply"] == outcomes["skipped_proposals"] == calls == iterations
    assert optimization["metadata"]["candidates"] == 1 and optimization["budget"]["charged"] == 4 + 3 * iterations

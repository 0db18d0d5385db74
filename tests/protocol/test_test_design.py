"""Test designs: the conf/test group, the window's stratified draw, samples and their seeds."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from lcb.rows import encode_test_blob
from optimizers.protocol.grid import cells
from optimizers.protocol.grid.config import JobConfig, ModelSpec, TestDesign
from optimizers.protocol.job.errors import JobError
from optimizers.protocol.job.jobspec import validate_config
from optimizers.protocol.job.seeds import evaluation_seed
from optimizers.protocol.job.test_sets import WindowRow, resolve_split_ids, stratified_draw
from optimizers.protocol.run.hydra_config import ConfigError, job_config, parse_test_design


def compose(*overrides: str) -> JobConfig:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(cells.CONF_DIR), version_base="1.3"):
        return job_config(hydra_compose(config_name="config", overrides=list(overrides)))


def test_the_group_default_is_lcb50_and_window_reads_the_model_cutoff() -> None:
    assert compose("method=gepa", "topology=single", "seed=0").test == TestDesign()
    llama = compose("method=gepa", "topology=single", "seed=0", "model=llama", "test=window", "test.size=40")
    assert llama.test == TestDesign("window", after="2023-12-31", size=40) and llama.model.cutoff == "2023-12-31"
    powered = compose("experiment=lcb_grid_powered", "method=gepa", "topology=sequential", "seed=0")
    assert powered.test.design == "window" and powered.test.size == 800 and powered.test.after == "2023-04-30"
    sampled = compose("method=gepa", "topology=single", "seed=0", "test.samples=10", "test.temperature=0.2")
    assert sampled.test.samples == 10 and sampled.eval_decoding.temperature == 0.2
    assert not cells.conformance(sampled).conformant  # only the reference's design is conformant


@pytest.mark.parametrize(("mapping", "message"), [
    ({"design": "window", "after": "cutoff"}, "no training cutoff"),
    ({"design": "window", "after": "2024/01/01"}, "ISO date"),
    ({"design": "lcb50", "size": 10}, "use test=window"),
    ({"design": "window", "after": "2024-02-01", "before": "2024-01-01"}, "window is empty"),
    ({"design": "nope"}, "test.design"),
    ({"design": "window", "sample": 3}, "unknown setting"),
])
def test_bad_designs_are_one_line_errors(mapping: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_test_design(mapping, None)


def test_samples_need_a_temperature(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="temperature above 0"):
        compose("method=gepa", "topology=single", "seed=0", "test.samples=10")
    cfg = JobConfig(method="identity", topology="single", model=ModelSpec("m", "m"), seed=0, out=tmp_path,
                    team_size=1, test=TestDesign(samples=3))
    with pytest.raises(JobError, match="temperature 0"):
        validate_config(cfg)


def rows(n_per: dict[tuple[str, str], int]) -> list[WindowRow]:
    out = []
    for (platform, difficulty), n in n_per.items():
        out += [WindowRow(f"{platform}-{difficulty}-{i}", platform, difficulty, f"2024-0{1 + i % 9}-01T00:00:00")
                for i in range(n)]
    return out


def test_stratified_draw_is_proportional_deterministic_and_seeded() -> None:
    pool = rows({("atcoder", "easy"): 40, ("atcoder", "hard"): 20, ("leetcode", "medium"): 30, ("codeforces", "easy"): 10})
    drawn = stratified_draw(pool, 20, seed=0)
    counts = Counter(r.stratum for r in drawn)
    assert counts == {("atcoder", "easy"): 8, ("atcoder", "hard"): 4, ("leetcode", "medium"): 6, ("codeforces", "easy"): 2}
    assert drawn == stratified_draw(list(reversed(pool)), 20, seed=0)  # order-free
    assert drawn != stratified_draw(pool, 20, seed=1)
    assert [r.contest_date for r in drawn] == sorted(r.contest_date for r in drawn)
    assert len(stratified_draw(pool, 7, seed=0)) == 7  # largest remainders fill the places
    assert len(stratified_draw(pool, None, seed=0)) == len(pool)


def test_window_ids_are_disjoint_from_train_and_val(tmp_path: Path) -> None:
    tests = [{"input": "1\n", "output": "1\n", "testtype": "stdin"}]

    def row(qid: str, date: str) -> str:
        return json.dumps({"question_title": qid, "question_content": "q", "platform": "atcoder", "question_id": qid,
                           "contest_id": "c", "contest_date": date, "starter_code": "", "difficulty": "easy",
                           "public_test_cases": json.dumps(tests), "private_test_cases": encode_test_blob(tests),
                           "metadata": "{}"})

    data = tmp_path / "rows.jsonl"
    dated = {"t1": "2023-06-01", "v1": "2024-05-01", "x1": "2024-05-02", "x2": "2024-06-01", "x3": "2023-01-01"}
    data.write_text("\n".join(row(q, d + "T00:00:00") for q, d in dated.items()) + "\n", encoding="utf-8")
    splits = tmp_path / "splits.json"
    splits.write_text(json.dumps({"train": ["t1"], "val": ["v1"], "test": ["x3"]}), encoding="utf-8")
    cfg = JobConfig(method="identity", topology="single", model=ModelSpec("m", "m"), seed=0, out=tmp_path / "job",
                    team_size=1, data=str(data), splits=splits, test=TestDesign("window", after="2024-01-01"))
    ids = resolve_split_ids(cfg)
    assert ids.test == ("x1", "x2") and ids.train == ("t1",) and ids.val == ("v1",)  # v1 is in the window
    with pytest.raises(JobError, match="holds no problem"):
        resolve_split_ids(JobConfig(**{**{f: getattr(cfg, f) for f in ("method", "topology", "model", "seed", "out",
                                                                        "team_size", "data", "splits")},
                                       "test": TestDesign("window", after="2025-01-01")}))
    # The reference design keeps the split file's test ids.
    assert resolve_split_ids(JobConfig(method="identity", topology="single", model=ModelSpec("m", "m"), seed=0,
                                       out=tmp_path, team_size=1, data=str(data), splits=splits)).test == ("x3",)


def test_sample_seeds_are_distinct_and_sample_zero_keeps_the_old_seed() -> None:
    seeds = [evaluation_seed("c", "test", "p", 0, sample) for sample in range(10)]
    assert len(set(seeds)) == 10
    assert seeds[0] == evaluation_seed("c", "test", "p", 0)

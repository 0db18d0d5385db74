"""The comparison report: from handwritten job folders (numbers, panels, partial/empty roots) and
opened in headless Chromium (non-blank, every panel present)."""

from __future__ import annotations

import base64
import json
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from report_fixtures import CHROMIUM, assert_rendered, screenshot, write_grid, write_job  # noqa: E402

from optimizers.protocol.report import page as report  # noqa: E402
from optimizers.protocol.report.data import load  # noqa: E402
from optimizers.protocol.report.plots import PANELS  # noqa: E402

def _png_ok(data: bytes) -> tuple[int, int]:
    import io

    from PIL import Image

    image = Image.open(io.BytesIO(data))
    image.load()
    return image.size


def test_cells_carry_the_aggregate_statistics(tmp_path: Path) -> None:
    write_grid(tmp_path)
    data = load([tmp_path], replicates=200)
    by_key = {(c.method, c.runtime): c for c in data.cells}
    gepa = by_key[("gepa", "sequential")]
    assert gepa.complete and gepa.seeds == (0, 1, 2)
    # gains per seed: 1, 1, 2 problems of 6 -> 16.67, 16.67, 33.33 pp
    assert gepa.comparison is not None
    assert gepa.comparison.mean_delta_pp == pytest.approx((100 / 6 + 100 / 6 + 200 / 6) / 3)
    low, high = gepa.comparison.ci95_pp
    assert low <= gepa.comparison.mean_delta_pp <= high
    mipro = by_key[("mipro", "decentralized")]
    assert not mipro.complete and mipro.comparison is not None  # partial: drawn from seed 0 only
    assert any("missing seed(s) 1, 2" in note for note in data.notes)
    tavo = [j for j in data.jobs if j.method == "tavo"]
    assert sum(j.fell_back for j in tavo) == 2
    assert all(j.curve and j.curve[0][0] == 10 for j in data.jobs)
    assert {d for j in data.jobs for d in j.difficulty.values()} <= {"easy", "medium", "hard"}


def test_cli_writes_html_pngs_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_grid(tmp_path / "runs")
    out = tmp_path / "report"
    assert report.main([str(tmp_path / "runs"), "--out", str(out), "--bootstrap", "200"]) == 0
    assert json.loads(capsys.readouterr().out) == {"html": str(out / "report.html"), "cells": 5, "jobs": 13}
    html = (out / "report.html").read_text()
    summary = json.loads((out / "report.json").read_text())
    drawn, idle = set(summary["panels"]), set(summary["idle_panels"])
    assert drawn | idle == set(PANELS) and not drawn & idle
    # The fixtures record no optimism gap and no reply counts: those two panels say so in one line.
    assert idle == {"optimism_gap", "truncation"}
    for panel_id in PANELS:
        assert f'id="panel-{panel_id}"' in html
        assert (out / f"{panel_id}.png").exists() is (panel_id in drawn)
    for panel_id in drawn:
        width, height = _png_ok((out / f"{panel_id}.png").read_bytes())
        assert width > 300 and height > 150
    embedded = re.findall(r'src="data:image/png;base64,([^"]+)"', html)
    assert len(embedded) == len(drawn)
    for payload in embedded:
        _png_ok(base64.b64decode(payload))
    assert "src=\"http" not in html and "<script" not in html  # self-contained
    gepa = next(c for c in summary["cells"] if c["method"] == "gepa" and c["runtime"] == "sequential")
    assert gepa["delta_pp"] == pytest.approx(22.222, abs=1e-3) and gepa["complete"]
    # Every job has its page, linked from the Cells table (its seed) and from the Jobs table.
    assert len(summary["job_pages"]) == 13
    for page in summary["job_pages"].values():
        assert (out / page).is_file() and html.count(f'href="{page}"') == 2


def test_a_folder_of_nonconformant_jobs_only_renders_marked_once_per_page(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = tmp_path / "runs"
    for seed in (0, 1):
        write_job(runs, method="tavo", topology="single", seed=seed, gain=1, conformant=False)
    out = tmp_path / "report"
    assert report.main([str(runs), "--out", str(out), "--bootstrap", "100"]) == 0
    assert json.loads(capsys.readouterr().out)["jobs"] == 2
    html = (out / "report.html").read_text()
    warning = "NON-CONFORMANT: all job(s) ran off the grid protocol"
    assert html.count(warning) == 1 and html.index(warning) < html.index('id="panel-summary"')
    sections = re.findall(r'<section id="panel-([^"]+)"[^>]*>(.*?)</section>', html, flags=re.S)
    assert not any(warning in body for _, body in sections)
    summary = json.loads((out / "report.json").read_text())
    assert summary["nonconformant_jobs"] == 2 and summary["cells"][0]["seeds"] == [0, 1]
    for page in summary["job_pages"].values():  # each job page says it once too
        assert (out / page).read_text().count("NON-CONFORMANT") == 1


def test_the_stamp_is_drawn_into_each_png(tmp_path: Path) -> None:
    write_job(tmp_path / "runs", method="tavo", topology="single", seed=0, gain=1, conformant=False)
    data = load([tmp_path / "runs"], replicates=100)
    plain = load([tmp_path / "runs"], replicates=100)
    plain.nonconformant_jobs = 0  # the same figures without the stamp
    for panel in PANELS.values():
        stamped = [t.get_text() for t in report.mark_nonconformant(panel.draw(data), data.nonconformant_label).texts]
        assert any(text.startswith("NON-CONFORMANT") for text in stamped)
        assert not any(t.get_text().startswith("NON-CONFORMANT")
                       for t in report.mark_nonconformant(panel.draw(plain), plain.nonconformant_label).texts)


def test_conformant_results_alone_are_drawn_once_there_are_any(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_job(tmp_path, method="gepa", topology="sequential", seed=0, gain=1, conformant=True)
    write_job(tmp_path / "local", method="tavo", topology="single", seed=0, gain=1, conformant=False)
    data = load([tmp_path], replicates=100)
    assert [j.method for j in data.jobs] == ["gepa"] and data.nonconformant_label is None
    assert any("non-conformant (use --include-nonconformant)" in s for s in data.skipped)
    both = load([tmp_path], include_nonconformant=True, replicates=100)
    assert both.nonconformant_label.startswith("NON-CONFORMANT: 1 of 2 job(s)")
    assert report.main([str(tmp_path), "--out", str(tmp_path / "r"), "--bootstrap", "100"]) == 0
    assert "NON-CONFORMANT" not in (tmp_path / "r" / "report.html").read_text()


def test_empty_and_broken_roots_say_so_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert report.main([str(tmp_path / "nothing"), "--out", str(tmp_path / "r")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: no usable result.json under")
    broken = tmp_path / "broken" / "job"
    broken.mkdir(parents=True)
    (broken / "result.json").write_text("{not json")
    assert report.main([str(tmp_path / "broken"), "--out", str(tmp_path / "r")]) == 1
    assert "1 unreadable result(s) skipped" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        report.main([str(tmp_path), "--out", str(tmp_path / "r"), "--seeds", "a,b"])
    assert exit_info.value.code == 2


def test_a_run_without_curves_or_test_difficulty_still_gets_every_panel(tmp_path: Path) -> None:
    folder = write_job(tmp_path, method="gepa", topology="sequential", seed=0, gain=1)
    (folder / "optimization" / "learning_curve.jsonl").unlink()
    (folder / "job.json").unlink()  # no data source known: difficulty 'unknown'
    written = report.write_report(load([tmp_path], replicates=100), tmp_path / "out", [tmp_path])
    summary = json.loads(written["json"].read_text())
    assert set(summary["panels"]) | set(summary["idle_panels"]) == set(PANELS)
    assert "no curve to draw" in summary["idle_panels"]["learning_curves"]
    html = written["html"].read_text()
    assert all(f'id="panel-{panel_id}"' in html for panel_id in PANELS)
    data = load([tmp_path], replicates=100)
    assert set(data.jobs[0].difficulty.values()) == {"unknown"}


def test_wandb_flag_offline_is_one_clear_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    write_grid(tmp_path / "runs")
    assert report.main([str(tmp_path / "runs"), "--out", str(tmp_path / "r"), "--wandb", "--bootstrap", "100"]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("--wandb")]
    assert lines == ["--wandb: W&B is offline (WANDB_MODE=offline); sync the runs (wandb sync) and rerun online"]
    assert (tmp_path / "r" / "report.html").is_file()


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)")
def test_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    write_grid(tmp_path / "runs")
    written = report.write_report(load([tmp_path / "runs"], replicates=200), tmp_path / "out", [tmp_path / "runs"])
    dom = screenshot(written["html"], tmp_path / "shot.png")
    assert_rendered(dom, tmp_path / "shot.png")

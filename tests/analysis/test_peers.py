"""Peer rows (TRL's SFTTrainer on the same samples) and the convergence check of a recommendation."""

from __future__ import annotations

import math

import pytest

from nbhelpers.analysis.convergence import (
    KIND,
    MEAN_RTOL,
    STEP_RTOL,
    compare_curves,
    convergence_configs,
    convergence_of,
)
from nbhelpers.analysis.peers import export_gap, export_gap_text, parse_peers, peer_configs, peer_table
from nbhelpers.analysis.recommend import recommend
from nbhelpers.analysis.records import choose_baselines, group_key
from nbhelpers.analysis.speedup import waterfall_steps
from nbhelpers.kernels.registry import cpu_tolerance
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.runner import run_configs
from nbhelpers.validation import ConfigError

CPU = {"device_name": "cpu", "hostname": "ci", "device_type": "cpu"}


def _records(make_record):
    base = make_record("static", 100.0)
    best = make_record("token budget", 400.0, padding="token_budget", kernels="liger", parity="pass")
    trl_defaults = make_record("TRL defaults", 150.0, padding="static", engine="trl_defaults")
    trl_export = make_record("TRL export", 390.0, padding="token_budget", kernels="liger", engine="trl")
    trl_fastest = make_record("TRL other", 900.0, padding="static", engine="trl_best", parity="pass")
    return [trl_fastest, base, best, trl_defaults, trl_export]


def test_peer_rows_are_compared_never_recommended_nor_a_baseline(make_record):
    records = _records(make_record)
    rec = recommend(records)
    assert rec.label == "token budget" and rec.baseline_label == "static"  # the TRL rows: neither
    assert all("TRL" not in p["label"] for p in rec.passed_over)
    assert [b.config["label"] for b in choose_baselines(records).values()] == ["static"]
    assert not waterfall_steps(records)["label"].str.contains("TRL").any()
    table = peer_table(records, rec).set_index("label")
    assert list(table.index) == ["TRL other", "TRL defaults", "TRL export", "token budget"]
    assert table.loc["TRL defaults", "speedup"] == pytest.approx(1.5)
    assert table.loc["TRL defaults", "recommended vs this"] == pytest.approx(400 / 150)
    assert table.loc["TRL defaults", "gradient checkpointing"] == "off"  # the record's config says none
    gap = export_gap(records, rec)
    assert gap["trl_over_workbook"] == pytest.approx(390 / 400) and gap["within_goal"]
    assert "within the 5% goal" in export_gap_text(gap)
    assert "over the epoch's wall clock" not in export_gap_text(gap)  # this record has no epoch timing
    assert "TRL timed over its epoch's wall clock" in export_gap_text(gap)  # a record from before step timing


def test_export_gap_text_adds_what_trl_spent_between_its_steps(make_record):
    records = _records(make_record)
    records[-1].metrics.update(timed_epoch_s=2.0, time_outside_steps_s=0.1, real_tokens_per_s_epoch_wall=370.5)
    gap = export_gap(records, recommend(records))
    assert (gap["trl_timed_epoch_s"], gap["trl_time_outside_steps_s"]) == (2.0, 0.1)
    assert export_gap_text(gap).endswith(
        "TRL spent 0.10 s of its 2.00 s timed epoch (5.0%): 370 real tok/s over the epoch's wall clock."
    )


def test_export_gap_text_names_the_timed_steps_wall_under_step_timing(make_record):
    records = _records(make_record)
    records[-1].metrics.update(timed_wall_s=4.0, time_outside_steps_s=0.2, real_tokens_per_s_wall=250.0)
    gap = export_gap(records, recommend(records))
    assert (gap["trl_timed_epoch_s"], gap["trl_timed_span"]) == (4.0, "steps")
    assert export_gap_text(gap).endswith(
        "TRL spent 0.20 s of its 4.00 s timed steps (5.0%): 250 real tok/s over their wall clock."
    )


def test_on_a_cpu_the_export_gap_is_shown_but_the_goal_is_left_to_a_gpu(make_record):
    records = _records(make_record)
    for record in records:
        record.environment["device_type"] = "cpu"
    records[-1].metrics["real_tokens_per_s"] = 130.0  # TRL's own LM head on a CPU: about a third of the loop
    gap = export_gap(records, recommend(records))
    assert not gap["goal_judged"] and not gap["within_goal"]
    text = export_gap_text(gap)
    assert "(32.5% of it)" in text and "goal is judged on a GPU" in text and "outside" not in text


def test_export_gap_needs_the_same_settings(make_record):
    records = _records(make_record)
    records[-1].config["kernels"] = "eager"  # TRL measured with other kernels than the recommendation's
    assert export_gap(records, recommend(records)) is None
    assert "not measured" in export_gap_text(None)


def test_peer_configs_are_the_recommendation_s_workload(make_record):
    rec = recommend(_records(make_record))
    configs = peer_configs(rec, "trl_defaults, trl")
    assert [c.engine for c in configs] == ["trl_defaults", "trl"]
    assert configs[1].label == "TRL from the export of token budget" and configs[1].padding == "token_budget"
    assert configs[0].label == "TRL SFTTrainer defaults, b4x128"
    assert parse_peers("") == []
    with pytest.raises(ConfigError, match="PEER_ROWS='trl, torchtune'.*trl_defaults"):
        parse_peers("trl, torchtune")
    with pytest.raises(ConfigError, match="PEER_ROWS=None"):
        parse_peers(None)


def test_compare_curves_tolerances():
    base = [12.0 - 0.2 * i for i in range(10)]
    noisy = [x * (1 + (STEP_RTOL / 2) * (-1) ** i) for i, x in enumerate(base)]  # per-step noise that averages out
    assert compare_curves(noisy, base).passed
    drift = compare_curves([x * (1 + 2 * MEAN_RTOL) for x in base], base)  # every step off the same way
    assert not drift.passed and drift.max_step_rel_diff < STEP_RTOL and drift.mean_rel_diff > MEAN_RTOL
    spike = compare_curves([*base[:9], base[9] * (1 + 1.25 * STEP_RTOL)], base)  # one step too far off
    assert not spike.passed and spike.mean_rel_diff < MEAN_RTOL
    diverged = compare_curves([*base[:9], math.nan], base)
    assert not diverged.passed and "fail over 10 steps" in diverged.summary()


def test_convergence_of_reads_the_last_pair(make_record):
    """Records of kind "convergence" with their role; the notebook test runs the real pair on the tiny preset."""
    def run(role, losses):
        record = make_record(role, 100.0, kind=KIND, extra={KIND: role})
        record.metrics["losses"] = losses
        return record

    assert convergence_of([run("recommended", [12.0, 11.0])]) is None
    older = run("recommended", [1.0, 1.0])
    result = convergence_of([older, run("recommended", [12.0, 11.0]), run("baseline", [12.0, 11.0])])
    assert result.passed and result.step_rel_diff == [0.0, 0.0]


def test_convergence_baseline_follows_the_same_plan(make_record):
    token = recommend([make_record("tb", 100.0, padding="token_budget", kernels="liger", attn="torch_varlen")])
    mine, base = convergence_configs(token, 50)
    assert (mine.steps, mine.warmup, mine.timing) == (50, 0, "steps")
    assert (base.kernels, base.attn_implementation, base.padding) == ("eager", "sdpa", "token_budget")
    packed = recommend([make_record("p", 100.0, padding="packed", kernels="liger")])
    assert convergence_configs(packed, 50)[1].padding == "static"  # the same samples in every step
    with pytest.raises(ConfigError, match="CONVERGENCE_STEPS"):
        convergence_configs(packed, 0)


TINY = RunConfig(run_name="peers", num_samples=4, batch_size=2, max_length=128, timing="epoch", padding="packed",
                 extra={"parity_probe_samples": 0})  # fmt: skip


def test_trl_peer_row_counts_the_same_tokens_as_the_workbook(runs_root):
    """TRL run from the export on the same samples: a record of the same workload whose timed epoch holds the
    same real tokens in the same number of steps as the workbook's."""
    pytest.importorskip("trl", reason="TRL is in the test extras: pip install trl")
    workbook, trl = run_configs([TINY, TINY.replace(engine="trl", label="trl")], isolate=False, progress=False)
    assert workbook.ok and trl.ok, trl.reason
    assert group_key(workbook) == group_key(trl)
    # 2 steps an epoch: both time whole epochs again up to the floor of 10 timed steps
    assert trl.metrics["timed_batches"] == workbook.metrics["timed_batches"] == 10
    assert trl.metrics["timed_passes"] == workbook.metrics["timed_passes"] == 5 and not trl.metrics["thin"]
    assert trl.metrics["timed_real_tokens"] == workbook.metrics["timed_real_tokens"]
    assert trl.metrics["sft_config"]["padding_free"] is True
    assert trl.metrics["real_tokens_per_s"] > 0 and len(trl.metrics["losses"]) == 12  # 1 + 5 epochs of 2 steps
    # Timed as the workbook times its loop (the sum of the steps); the epoch's wall clock is kept beside it.
    m = trl.metrics
    steps = sum(m["step_times_s"])
    assert m["real_tokens_per_s"] == pytest.approx(sum(m["timed_real_tokens"]) / steps)
    assert m["time_outside_steps_s"] == pytest.approx(m["timed_epoch_s"] - steps) and m["time_outside_steps_s"] >= 0
    assert m["real_tokens_per_s_epoch_wall"] == pytest.approx(sum(m["timed_real_tokens"]) / m["timed_epoch_s"])
    # the same first step through another loop: the baseline's cpu_tolerance (spec.SAME_KERNELS_CPU says why)
    assert trl.metrics["losses"][0] == pytest.approx(workbook.metrics["losses"][0], rel=cpu_tolerance("eager").rel)


def test_under_step_timing_trl_times_the_workloads_steps_on_the_workbooks_batches(runs_root):
    """The workload's step timing: TRL's first step and ``warmup`` untimed, then ``steps`` timed (it stops at
    max_steps, mid-epoch), on the batches the workbook times (both cycle over the same plan in order)."""
    pytest.importorskip("trl", reason="TRL is in the test extras: pip install trl")
    workload = TINY.replace(timing="steps", steps=5, warmup=1)
    workbook, trl = run_configs([workload, workload.replace(engine="trl", label="trl")], isolate=False,
                                progress=False)  # fmt: skip
    assert workbook.ok and trl.ok, trl.reason
    m = trl.metrics
    assert m["timed_steps"] == m["timed_batches"] == 5 and m["timed_passes"] == 1
    assert m["timed_real_tokens"] == workbook.metrics["timed_real_tokens"]
    assert len(m["losses"]) == 7  # the first step, one warm-up, five timed: no whole epochs
    assert "timed_epoch_s" not in m and "first_epoch_s" not in m
    steps = sum(m["step_times_s"])
    assert m["real_tokens_per_s"] == pytest.approx(sum(m["timed_real_tokens"]) / steps)
    assert m["time_outside_steps_s"] == pytest.approx(m["timed_wall_s"] - steps) and m["time_outside_steps_s"] >= 0
    assert m["real_tokens_per_s_wall"] == pytest.approx(sum(m["timed_real_tokens"]) / m["timed_wall_s"])
    assert m["first_steps_s"] > 0


def test_report_shows_peers_export_gap_and_convergence(make_record, tmp_path):
    from bs4 import BeautifulSoup

    from nbhelpers.views.report import write_html_report

    records = _records(make_record)
    records[-1].metrics.update(timed_epoch_s=2.0, time_outside_steps_s=0.1, real_tokens_per_s_epoch_wall=370.5)
    for role, losses in (("recommended", [12.0, 11.9]), ("baseline", [12.0, 11.91])):
        record = make_record(f"convergence {role}", 100.0, kind=KIND, extra={KIND: role})
        record.metrics["losses"] = losses
        records.append(record)
    text = write_html_report(records, tmp_path / "report.html").read_text()
    assert "{{convergence_0}}" not in text and "Loss per step: pass" in text  # the curves' plot is embedded
    soup = BeautifulSoup(text, "html.parser")
    labels = [td.get_text() for td in soup.select('table.peers td[data-col="label"]')]
    assert labels == ["TRL other", "TRL defaults", "TRL export", "token budget"]
    gap_text = soup.select_one("p.export-gap").get_text()
    assert "97.5% of it), both timed over their steps: within the 5% goal" in gap_text
    assert "TRL spent 0.10 s of its 2.00 s timed epoch (5.0%)" in gap_text
    assert soup.select_one("p.convergence").get_text().startswith("Convergence pass over 2 steps")
    losses = soup.select("table.convergence tbody tr")[1]  # both curves' losses beside their difference
    shown = {td["data-col"]: td.get_text() for td in losses.select("td[data-col]")}
    assert (shown["recommended loss"], shown["baseline loss"]) == ("11.90000", "11.91000")
    records_labels = [td.get_text() for td in soup.select('table.records td[data-col="label"]')]
    assert "TRL defaults" in records_labels and "convergence baseline" not in records_labels  # not a timed step


@pytest.mark.parametrize("padding", ["packed", "token_budget"])
def test_every_trl_engine_builds_an_sft_config_with_checkpointing_as_named(padding, tmp_path):
    trl = pytest.importorskip("trl")
    from nbhelpers.measure.engines import ENGINES, TRL_ENGINES

    config = RunConfig(padding=padding).to_dict()
    for name in TRL_ENGINES:
        flags, _ = ENGINES[name].sft_flags(config, "cpu")
        sft = trl.SFTConfig(**{"output_dir": str(tmp_path)} | dict(flags) | {"use_cpu": True, "bf16": False})
        assert sft.gradient_checkpointing is (name == "trl_defaults"), name  # only TRL's defaults keep it on
        assert sft.per_device_train_batch_size >= 1

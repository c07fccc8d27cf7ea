"""Padding arithmetic from lengths, checked against direct counts and the collators' real output; the explorer."""

import pytest

from nbhelpers.data.collate import collate, count_tokens
from nbhelpers.data.strategies import PADDING_STRATEGIES, PaddingSettings, plan_batches
from nbhelpers.data.waste import compare_strategies, length_stats, waste_summary, waste_table
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.store import RunRecord, RunStore
from nbhelpers.views.widgets import find_widget, padding_text, waste_explorer

LENGTHS = [3, 5, 2, 8, 1]


def test_waste_table_by_hand():
    static = waste_table(LENGTHS, PaddingSettings("static", batch_size=2, max_length=6))
    assert static[["sequences", "real", "positions", "padding", "width"]].values.tolist() == [
        [2, 8, 12, 4, 6], [2, 8, 12, 4, 6], [1, 1, 6, 5, 6]
    ]  # fmt: skip
    dynamic = waste_table(LENGTHS, PaddingSettings("dynamic", 2, 6))
    assert dynamic["width"].tolist() == [5, 6, 1] and dynamic["positions"].tolist() == [10, 12, 1]
    multiple = waste_table(LENGTHS, PaddingSettings("multiple", 2, 6, pad_to_multiple_of=4))
    assert multiple["width"].tolist() == [6, 6, 4] and multiple["positions"].sum() == 28
    packed = waste_table(LENGTHS, PaddingSettings("packed", 2, 6))
    assert packed["positions"].tolist() == [8, 8, 1] and packed["padding"].sum() == 0


def test_summary_padding_fraction_positions_and_steps():
    s = waste_summary(LENGTHS, PaddingSettings("static", 2, 6))
    assert (s.steps_per_epoch, s.real_tokens, s.positions) == (3, 17, 30)
    assert s.padding_fraction == pytest.approx(13 / 30)
    assert s.positions_per_step == pytest.approx(10.0) and s.max_positions_per_step == 12
    assert s.truncated_fraction == pytest.approx(2 / 19)  # the 8-token sequence loses 2 of 19 tokens
    assert waste_summary(LENGTHS, PaddingSettings("dynamic", 2, 6)).padding_fraction == pytest.approx(6 / 23)
    budget = waste_summary(LENGTHS, PaddingSettings("token_budget", 2, 6, token_budget=10))
    assert (budget.steps_per_epoch, budget.padding_fraction, budget.positions_per_step) == (2, 0.0, 8.5)
    assert waste_summary(LENGTHS, PaddingSettings("token_budget", 2, 6)).steps_per_epoch == 2  # budget 0 = 2 x 6


def _direct_count(lengths, strategy, batch_size, max_length, multiple, buckets, budget):
    """Padding fraction counted position by position from the plan, without waste.py."""
    pad = real = 0
    settings = PaddingSettings(strategy, batch_size, max_length, num_buckets=buckets, token_budget=budget)
    for batch in plan_batches(lengths, settings):
        clipped = [min(lengths[i], max_length) for i in batch]
        if strategy in ("packed", "token_budget"):
            width = None
        elif strategy == "static":
            width = max_length
        elif strategy == "multiple":
            width = min(-(-max(clipped) // multiple) * multiple, max_length)
        else:
            width = max(clipped)
        for n in clipped:
            for position in range(width or n):
                if position < n:
                    real += 1
                else:
                    pad += 1
    return pad / (pad + real)


@pytest.mark.parametrize("strategy", PADDING_STRATEGIES)
@pytest.mark.parametrize(("batch_size", "max_length", "multiple", "buckets"), [(4, 64, 8, 2), (3, 50, 7, 5)])
def test_padding_fraction_equals_direct_count(strategy, batch_size, max_length, multiple, buckets):
    lengths = [(i * 37) % 97 + 1 for i in range(53)]
    got = waste_summary(lengths, PaddingSettings(strategy, batch_size, max_length, multiple, buckets)).padding_fraction
    assert got == pytest.approx(_direct_count(lengths, strategy, batch_size, max_length, multiple, buckets, 0))


@pytest.fixture(scope="module")
def real_lengths():
    from nbhelpers.data.loading import token_lengths
    from nbhelpers.data.tokenizer import load_tokenizer

    lengths = token_lengths("default", load_tokenizer())
    assert len(lengths) == 1000
    return lengths[:120]


@pytest.mark.parametrize("strategy", PADDING_STRATEGIES)
def test_explorer_numbers_equal_the_collated_tensors(strategy, real_lengths):
    """waste_table's per-step positions and real tokens are exactly count_tokens of collate's output."""
    batch_size, max_length, multiple, buckets, budget = 6, 384, 48, 3, 1500
    examples = [{"input_ids": [7] * n, "labels": [-100] + [7] * (n - 1)} for n in real_lengths]
    settings = PaddingSettings(strategy, batch_size, max_length, multiple, buckets, budget)
    plan = plan_batches(real_lengths, settings)
    counted = [count_tokens(collate([examples[i] for i in batch], settings, 0)) for batch in plan]
    table = waste_table(real_lengths, settings)
    assert table["positions"].tolist() == [c.positions for c in counted]
    assert table["real"].tolist() == [c.real for c in counted]
    summary = waste_summary(real_lengths, settings)
    assert summary.padding_fraction == pytest.approx(
        1 - sum(c.real for c in counted) / sum(c.positions for c in counted)
    )


def test_compare_strategies_on_real_lengths(real_lengths):
    frame = compare_strategies(real_lengths, PaddingSettings(batch_size=4, max_length=512))
    assert list(frame.index) == list(PADDING_STRATEGIES)
    assert frame.loc["static", "positions"] == 30 * 4 * 512
    assert frame.loc["packed", "padding_fraction"] == 0 == frame.loc["token_budget", "padding_fraction"]
    assert frame.loc["static", "padding_fraction"] > frame.loc["dynamic", "padding_fraction"] > 0.2
    assert frame.loc["dynamic", "padding_fraction"] > frame.loc["bucketed", "padding_fraction"]
    assert frame.loc["packed", "positions_vs_static"] == pytest.approx(frame.loc["packed", "real_tokens"] / 61440)
    stats = length_stats([1, 2, 3, 4, 100])
    assert (stats["min"], stats["median"], stats["max"], stats["mean"]) == (1, 3, 100, 22)


def test_widget_slider_changes_the_padding_fraction_text(real_lengths):
    box = waste_explorer(real_lengths, PaddingSettings("dynamic", batch_size=4, max_length=512), plot=False)
    html = find_widget(box, css_class="nbh-padding-fraction")
    before = html.value
    assert before == padding_text(waste_summary(real_lengths, PaddingSettings("dynamic", 4, 512)))
    find_widget(box, description="batch size").value = 16
    assert html.value != before
    assert html.value == padding_text(waste_summary(real_lengths, PaddingSettings("dynamic", 16, 512)))
    find_widget(box, description="strategy").value = "packed"
    assert html.value == "<span>padding fraction: <b>0.0%</b></span>"
    find_widget(box, description="strategy").value = "multiple"
    find_widget(box, description="pad to multiple of").value = 128
    find_widget(box, description="max length").value = 256
    assert html.value == padding_text(waste_summary(real_lengths, PaddingSettings("multiple", 16, 256, 128)))
    find_widget(box, description="strategy").value = "bucketed"
    find_widget(box, description="buckets").value = 8
    assert html.value == padding_text(waste_summary(real_lengths, PaddingSettings("bucketed", 16, 256, 128, 8)))
    summary = find_widget(box, css_class="nbh-waste-summary").value
    steps = waste_summary(real_lengths, PaddingSettings("bucketed", 16, 256, 128, 8)).steps_per_epoch
    assert f"steps/epoch: <b>{steps}" in summary


def test_widget_plot_and_measure_button(real_lengths, tmp_path):
    seen = []

    def fake_run(config: RunConfig) -> RunRecord:
        seen.append(config)
        metrics = {
            "real_tokens_per_s": 1234.5, "padding_fraction": 0.25, "positions_per_step": 512.0,
            "step_time_median_s": 0.4,
        }  # fmt: skip
        return RunRecord(config=config.to_dict() | {"label": config.name}, metrics=metrics)

    store = RunStore(tmp_path / "records.jsonl")
    base = RunConfig(run_name="explorer", num_samples=8, steps=1, warmup=0)
    start = PaddingSettings("static", 4, 256)
    box = waste_explorer(real_lengths, start, base_config=base, run=fake_run, store=store, plot=True)
    find_widget(box, description="strategy").value = "packed"
    find_widget(box, description="measure this setting").click()
    assert [(c.padding, c.batch_size, c.max_length, c.num_samples, c.run_name) for c in seen] == [
        ("packed", 4, 256, 8, "explorer")
    ]
    measured = find_widget(box, css_class="nbh-measured").value
    assert "1,234 real tok/s" in measured or "1,235 real tok/s" in measured
    assert "padding 25.0%" in measured
    assert [r.label for r in store.load()] == ["explorer: packed b4x256"]
    find_widget(box, description="token budget").value = 64  # below max length: RunConfig refuses it
    find_widget(box, description="measure this setting").click()
    assert len(seen) == 1 and "cannot measure: token_budget=64" in find_widget(box, css_class="nbh-measured").value


def test_measured_table_packing_gain_and_verdict(make_record):
    from nbhelpers.analysis.padding import failures, measured_table, packing_gain
    from nbhelpers.views.padding_plots import skip_verdict

    records = [
        make_record("static sdpa", 1000.0, padding="static", attn="sdpa", kernels_per_step=700, padding_fraction=0.6),
        make_record("packed sdpa", 1100.0, padding="packed", attn="sdpa", padding_fraction=0.0),
        make_record("static flex", 1000.0, padding="static", attn="flex_attention"),
        make_record("packed flex", 2500.0, padding="packed", attn="flex_attention"),
        make_record("cpu packed", 80.0, padding="packed", device_type="cpu", kernels_per_step=650, device_name="cpu"),
        make_record("flex cpu", None, padding="packed", attn="flex_attention", status="failed", reason="no backward"),
    ]
    table = measured_table(records)
    assert table["label"].tolist()[:2] == ["static sdpa", "packed sdpa"]
    assert table.loc[0, ["real tok/s", "kernels/step", "kernel unit", "padding fraction"]].tolist() == [
        1000.0, 700.0, "kernels (GPU)", 0.6
    ]  # fmt: skip
    assert table.loc[4, "kernel unit"] == "aten ops (CPU)"
    assert failures(table).values.tolist() == [["flex cpu", "packed", "flex_attention", "no backward"]]
    gain = packing_gain(records[:4]).set_index("attention")
    assert gain.loc["sdpa", "packed / static"] == pytest.approx(1.1)
    assert gain.loc["flex_attention", "packed / static"] == pytest.approx(2.5)
    verdict = skip_verdict(packing_gain(records[:4])).data
    assert "`flex_attention` (eager) 2.50x, `sdpa` (eager) 1.10x" in verdict
    assert "`flex_attention` (eager) gains the most from packing" in verdict
    assert "the fastest packed step is `flex_attention` (eager) at 2,500 real tok/s" in verdict


def test_packing_gain_keeps_workloads_apart_and_borrows_the_workloads_static(make_record):
    from nbhelpers.analysis.padding import packing_gain

    categories = [{"category": "attention", "time_per_step_us": 8200.0}]
    records = [
        make_record("static, 5 steps", 5800.0, padding="static", attn="sdpa"),
        make_record("static, epoch", 4750.0, padding="static", attn="sdpa", timing="epoch"),
        make_record("packed sdpa, epoch", 14336.0, padding="packed", attn="sdpa", timing="epoch"),
        make_record("packed flex, epoch", 16053.0, padding="packed", attn="flex_attention", timing="epoch"),
    ]
    records[3].metrics["trace_top_categories"] = categories
    gain = packing_gain(records)
    epoch = gain[gain["workload"].str.contains("whole epochs")].set_index("attention")
    assert epoch.loc["flex_attention", "static from"] == "static, epoch"  # not the 5-step record
    assert epoch.loc["flex_attention", "packed / static"] == pytest.approx(16053 / 4750)
    assert epoch.loc["sdpa", "packed / static"] == pytest.approx(14336 / 4750)
    assert epoch.loc["flex_attention", "packed attention ms/step"] == pytest.approx(8.2)
    steps = gain[~gain["workload"].str.contains("whole epochs")]
    assert steps["packed tok/s"].isna().all() and steps["static tok/s"].tolist() == [5800.0]


def test_packing_gain_keeps_liger_switch_sets_apart(make_record):
    from nbhelpers.analysis.padding import packing_gain

    no_flce = ["rope", "rms_norm", "swiglu", "cross_entropy"]
    records = [
        make_record("static", 4750.0, padding="static", attn="sdpa"),
        make_record("liger packed", 10202.0, padding="packed", attn="flex_attention", kernels="liger"),
        make_record("liger packed, no FLCE", 17146.0, padding="packed", attn="flex_attention", kernels="liger",
                    liger_kernels=no_flce),
    ]  # fmt: skip
    gain = packing_gain(records).set_index("kernels")
    flce = "liger (rope, rms_norm, swiglu, fused_linear_cross_entropy)"  # the default set no longer has FLCE
    assert gain.loc[flce, "packed tok/s"] == 10202.0
    assert gain.loc["liger", "packed tok/s"] == 17146.0
    assert gain.loc["liger", "static from"] == "static"


def test_gpu_records_marked_invalid_never_enter_the_verdict(make_record, tmp_path):
    import json

    from nbhelpers.analysis.padding import packing_gain, padding_records
    from nbhelpers.views.padding_plots import gpu_overview, gpu_validity, skip_verdict

    static = make_record("static sdpa", 5800.0, padding="static", attn="sdpa")
    packed = make_record("packed flex", 17000.0, padding="packed", attn="flex_attention")
    notes = {
        static.record_id: {"source": "padding.jsonl", "label": static.label, "validity": "valid"},
        packed.record_id: {"source": "padding.jsonl", "validity": "invalid for speed claims: crossed boundaries"},
    }
    (tmp_path / "validity.json").write_text(json.dumps(notes))
    validity = gpu_validity(tmp_path)
    assert validity == {static.record_id: "valid", packed.record_id: "invalid for speed claims: crossed boundaries"}
    records = padding_records([static, packed, static])  # a record listed twice counts once
    assert [r.label for r in records] == ["static sdpa", "packed flex"]
    gain = packing_gain(records, validity)
    assert gain["packed tok/s"].isna().all() and gain["static tok/s"].tolist() == [5800.0]
    verdict = skip_verdict(gain, records, validity).data
    assert verdict.startswith("**No valid packed-vs-static pair")
    assert "left out: `packed flex` (NVIDIA H200 @ gpu-01): invalid for speed claims: crossed boundaries" in verdict
    table = gpu_overview(records, tmp_path, validity)
    assert table["validity"].tolist() == ["valid", "invalid for speed claims: crossed boundaries"]
    assert gpu_validity(tmp_path / "absent") == {}


def test_the_explorer_first_shows_its_starting_point_as_plain_html_for_saved_copies(real_lengths, monkeypatch):
    import IPython.display


    shown: list = []
    monkeypatch.setattr(IPython.display, "display", lambda *objs, **kw: shown.extend(objs))
    start = PaddingSettings("dynamic", batch_size=4, max_length=512)
    box = waste_explorer(real_lengths, start, plot=False)
    html = [o.data for o in shown if isinstance(o, IPython.display.HTML)]
    assert len(html) == 1 and "nbh-explorer-start" in html[0]
    assert "dynamic, batch size 4, max length 512" in html[0]
    assert find_widget(box, css_class="nbh-padding-fraction").value in html[0]  # the same figure as the widget
    shown.clear()
    waste_explorer(real_lengths, start, plot=False, snapshot=False)
    assert not [o for o in shown if isinstance(o, IPython.display.HTML)]

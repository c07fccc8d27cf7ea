"""A whole job's hours and money from records (``analysis.job_projection``): hand-computed arithmetic, the token
count's interval, the parameters' errors, the missing rows, and real records on the real default dataset."""

from __future__ import annotations

import math
import statistics

import pytest

from nbhelpers.analysis import job_projection as jp
from nbhelpers.analysis.records import speedup_interval
from nbhelpers.analysis.references import NOT_MEASURED, WITHOUT_WORKBOOK, WITHOUT_WORKBOOK_ENGINE
from nbhelpers.data.loading import token_lengths
from nbhelpers.data.tokenizer import load_tokenizer
from nbhelpers.formatting import fmt_hours, fmt_money
from nbhelpers.validation import ConfigError

MILLION = jp.JobTokens(1_000_000, 1_000_000, 1_000_000, "as given")


def _with_interval(record, low: float, high: float):
    record.metrics["real_tokens_per_s_interval"] = [low, high]
    return record


def test_hours_gpu_hours_and_cost_by_hand():
    # 1,000,000 tokens x 2 epochs at 500 tok/s (400-600) on 1 GPU = 4000 s (3333-5000 s); 2.5 per GPU-hour.
    spec = jp.JobSpec(tokens=1_000_000, epochs=2, price=2.5)
    out = jp.job_hours(MILLION, 500.0, (400.0, 600.0), 1, spec)
    assert out["hours"] * 3600 == pytest.approx(4000.0) and out["hours"] == pytest.approx(1.1111, abs=1e-4)
    assert [h * 3600 for h in out["hours interval"]] == pytest.approx([2e6 / 600, 5000.0])
    assert out["GPU-hours"] == pytest.approx(out["hours"]) and out["GPU-hours interval"] == out["hours interval"]
    assert out["cost"] == pytest.approx(4000 / 3600 * 2.5)  # $2.78
    assert out["cost interval"] == pytest.approx((2e6 / 600 / 3600 * 2.5, 5000 / 3600 * 2.5))  # $2.31-$3.47
    free = jp.job_hours(MILLION, 500.0, None, 1, jp.JobSpec(tokens=1_000_000, epochs=2))
    assert free["cost"] is None and free["cost interval"] is None and free["hours interval"] is None


def test_the_table_and_its_markdown_by_hand(make_record):
    record = _with_interval(make_record("baseline", 500.0, num_samples=32), 400.0, 600.0)
    spec = jp.JobSpec(tokens=1_000_000, epochs=2, price=2.5)
    frame = jp.project_job({jp.BASELINE: record}, spec, lengths=[1, 2, 3])
    row = frame.iloc[0]
    assert row["tokens per epoch"] == 1_000_000 and row["tokens interval"] is None
    assert row["hours"] * 3600 == pytest.approx(4000.0) and row["vs baseline"] == pytest.approx(1.0)
    assert row["hours saved"] == 0 and row["note"] == ""
    text = jp.projection_markdown(frame, jp.assumptions(spec, frame))
    assert "1 h 7 min (56 min – 1 h 23 min)" in text and "$2.78 ($2.31-$3.47)" in text
    assert "500 (400-600)" in text and "1,000,000 tokens per epoch x 2 epoch(s) on 1 GPU(s)" in text
    cheap = jp.project_job({jp.BASELINE: record}, jp.JobSpec(tokens=1_000_000), lengths=[1])
    assert jp.NO_PRICE in jp.projection_markdown(cheap, [])


def test_human_durations_and_money():
    assert fmt_hours(7 + 52 / 60) == "7 h 52 min" and fmt_hours(2.0) == "2 h" and fmt_hours(0.5) == "30 min"
    assert fmt_hours(10 / 3600) == "10 s" and fmt_hours(-0.25) == "-15 min" and fmt_hours(math.inf) == "unbounded"
    assert fmt_hours(None) == "—" and fmt_money(12.3) == "$12.30" and fmt_money(1234.5) == "$1,234.50"


def test_mean_length_interval_by_hand():
    lengths = [100, 200, 300, 400, 5000]  # truncated to 1000: 100, 200, 300, 400, 1000 -> mean 400
    # sample variance: (300² + 200² + 100² + 0 + 600²) / 4 = 125,000; half-width 1.96 x sqrt(125,000 / 5)
    half = 1.96 * math.sqrt(125_000 / 5)
    counted = jp.job_tokens(lengths, 1000, jp.JobSpec(rows=10))
    assert counted.tokens == pytest.approx(4000.0)
    assert (counted.low, counted.high) == pytest.approx((10 * (400 - half), 10 * (400 + half)))
    assert half == pytest.approx(1.96 * statistics.stdev([100, 200, 300, 400, 1000]) / math.sqrt(5))
    assert "JOB_ROWS=10" in counted.how and "max_length=1,000" in counted.how


def test_truncation_and_exact_counts():
    lengths = [100, 200, 300, 400, 5000]
    for spec in (jp.JobSpec(), jp.JobSpec(rows=5)):  # the full size, or exactly the dataset's rows
        counted = jp.job_tokens(lengths, 1000, spec)
        assert (counted.tokens, counted.low, counted.high) == (2000, 2000, 2000)
    assert jp.job_tokens(lengths, 150, jp.JobSpec()).tokens == 100 + 4 * 150
    given = jp.job_tokens(lengths, 1000, jp.JobSpec(tokens=123))
    assert (given.tokens, given.low, given.high) == (123, 123, 123)
    with pytest.raises(ValueError, match="no rows"):
        jp.job_tokens([], 1000, jp.JobSpec())


def test_other_gpu_counts_scale_linearly_and_say_so(make_record):
    one = _with_interval(make_record("baseline", 1000.0), 900.0, 1100.0)
    frame = jp.project_job({jp.BASELINE: one}, jp.JobSpec(tokens=3_600_000, gpus=4), lengths=[1])
    row = frame.iloc[0]
    assert row["hours"] == pytest.approx(3_600_000 / (1000 * 4) / 3600)  # 4x the measured one-GPU rate
    assert row["GPU-hours"] == pytest.approx(4 * row["hours"]) and "scaled linearly to JOB_GPUS=4" in row["note"]
    assert any("linear scaling" in line for line in jp.assumptions(jp.JobSpec(gpus=4), frame))
    two = _with_interval(make_record("baseline", 1000.0, gpus=2, sharding="fsdp2"), 900.0, 1100.0)
    frame = jp.project_job({jp.BASELINE: two}, jp.JobSpec(tokens=3_600_000, gpus=2), lengths=[1])
    assert frame.iloc[0]["hours"] == pytest.approx(1.0) and frame.iloc[0]["note"] == ""  # the total rate of 2 GPUs
    assert not any("linear scaling" in line for line in jp.assumptions(jp.JobSpec(gpus=2), frame))


@pytest.mark.parametrize(
    ("parameters", "name"),
    [
        ({"JOB_ROWS": -1}, "JOB_ROWS"),
        ({"JOB_ROWS": 1.5}, "JOB_ROWS"),
        ({"JOB_ROWS": True}, "JOB_ROWS"),
        ({"JOB_TOKENS": -5}, "JOB_TOKENS"),
        ({"JOB_TOKENS": "1e6"}, "JOB_TOKENS"),
        ({"JOB_ROWS": 10, "JOB_TOKENS": 1000}, "JOB_TOKENS"),
        ({"JOB_EPOCHS": 0}, "JOB_EPOCHS"),
        ({"JOB_EPOCHS": math.inf}, "JOB_EPOCHS"),
        ({"JOB_EPOCHS": math.nan}, "JOB_EPOCHS"),
        ({"JOB_GPUS": 0}, "JOB_GPUS"),
        ({"JOB_GPUS": 2.0}, "JOB_GPUS"),
        ({"GPU_HOUR_PRICE": -1.0}, "GPU_HOUR_PRICE"),
        ({"GPU_HOUR_PRICE": math.inf}, "GPU_HOUR_PRICE"),
    ],
)
def test_each_bad_parameter_is_named(parameters, name):
    with pytest.raises(ConfigError) as error:
        jp.JobSpec.from_parameters(parameters)
    assert error.value.parameter == name and name in str(error.value)


def test_rows_and_tokens_exclude_each_other_and_parameters_read_globals():
    with pytest.raises(ConfigError, match="rows or as tokens, not both"):
        jp.JobSpec(rows=10, tokens=1000)
    spec = jp.JobSpec.from_parameters({"JOB_ROWS": 50_000, "JOB_EPOCHS": 3, "GPU_HOUR_PRICE": 2.5, "RUN_NAME": "r"})
    assert spec == jp.JobSpec(rows=50_000, epochs=3, gpus=1, price=2.5)


def test_missing_rows_say_why(make_record, tmp_path):
    failed = [make_record("baseline", None, status="failed", reason="CUDA out of memory")]
    frame = jp.project_sweep_point(failed, jp.JobSpec(tokens=1000), lengths=[1])
    notes = dict(zip(frame["role"], frame["note"]))
    assert notes[jp.BASELINE] == "No measured baseline: baseline failed: CUDA out of memory."
    assert notes[jp.RECOMMENDATION].startswith("No recommendation: no configuration to recommend")
    assert notes[WITHOUT_WORKBOOK] == NOT_MEASURED and frame["hours"].isna().all()
    text = jp.projection_markdown(frame, jp.assumptions(jp.JobSpec(tokens=1000), frame))
    assert text.startswith("**No job projection:**") and "CUDA out of memory" in text and "|" not in text

    unverified = [make_record("baseline", 1000.0, parity="fail")]  # measured, but nothing may be recommended
    frame = jp.project_sweep_point(unverified, jp.JobSpec(tokens=1000), lengths=[1]).set_index("role")
    assert frame.loc[jp.BASELINE, "hours"] == pytest.approx(1000 / 1000 / 3600)
    assert frame.loc[jp.RECOMMENDATION, "note"].startswith("No recommendation:")
    text = jp.projection_markdown(frame.reset_index(), [])
    assert "| baseline |" in text and "Missing rows:" in text and "fewer hours" not in text

    peer = make_record("trl", None, engine=WITHOUT_WORKBOOK_ENGINE, status="failed", reason="OOM in TRL")
    frame = jp.project_sweep_point([make_record("baseline", 1000.0), peer], jp.JobSpec(tokens=1), lengths=[1])
    assert frame.set_index("role").loc[WITHOUT_WORKBOOK, "note"] == f"'{WITHOUT_WORKBOOK}' failed: OOM in TRL"
    frame = jp.project_job({jp.BASELINE: peer}, jp.JobSpec(tokens=1), lengths=[1])
    assert frame.iloc[0]["note"] == "trl has no measured throughput (OOM in TRL)"
    moved = make_record("baseline", 1000.0, dataset=str(tmp_path / "gone.jsonl"))
    frame = jp.project_job({jp.BASELINE: moved}, jp.JobSpec())  # no lengths given: read from the dataset named
    assert frame.iloc[0]["note"].startswith("tokens not counted:") and "gone.jsonl" in frame.iloc[0]["note"]


def test_real_records_on_the_real_default_dataset(make_record):
    records = [
        _with_interval(make_record("baseline", 1000.0, num_samples=32), 900.0, 1100.0),
        _with_interval(make_record("packed", 3000.0, padding="packed", parity="pass", num_samples=32), 2800.0, 3200.0),
        _with_interval(make_record("trl defaults", 1200.0, engine=WITHOUT_WORKBOOK_ENGINE, num_samples=32), 1e3, 1.4e3),
    ]
    spec = jp.JobSpec(epochs=2, price=2.5)
    frame = jp.project_sweep_point(records, spec).set_index("role")  # lengths from the dataset the records name
    kept = [min(n, 128) for n in token_lengths("default", load_tokenizer())]  # max_length 128, as trained
    tokens = sum(kept)
    assert list(frame.index) == [jp.BASELINE, jp.RECOMMENDATION, WITHOUT_WORKBOOK]
    assert list(frame["configuration"]) == ["baseline", "packed", "trl defaults"]
    assert (frame["tokens per epoch"] == tokens).all() and frame["tokens interval"].isna().all()
    for role, rate in ((jp.BASELINE, 1000.0), (jp.RECOMMENDATION, 3000.0), (WITHOUT_WORKBOOK, 1200.0)):
        assert frame.loc[role, "hours"] == pytest.approx(tokens * 2 / rate / 3600)
        assert frame.loc[role, "cost"] == pytest.approx(frame.loc[role, "hours"] * 2.5)
    assert frame.loc[jp.RECOMMENDATION, "hours interval"] == pytest.approx((tokens * 2 / 3200 / 3600,
                                                                             tokens * 2 / 2800 / 3600))  # fmt: skip
    assert frame.loc[jp.RECOMMENDATION, "vs baseline"] == pytest.approx(3.0)
    assert frame.loc[jp.RECOMMENDATION, "vs baseline interval"] == speedup_interval(records[1], records[0])
    assert frame.loc[jp.RECOMMENDATION, "hours saved"] == pytest.approx(tokens * 2 / 3600 * (1 / 1000 - 1 / 3000))
    lines = jp.assumptions(spec, frame.reset_index())
    assert "measured on 32 samples" in lines[0] and "every one of the dataset's 1,000 rows" in lines[1]
    text = jp.projection_markdown(frame.reset_index(), lines)
    assert "3.00x (2.55-3.56x) fewer hours" in text and "Missing rows" not in text
    sampled = jp.project_sweep_point(records, jp.JobSpec(rows=100)).set_index("role")
    half = 1.96 * statistics.stdev(kept) / math.sqrt(len(kept))  # the mean row's interval, over all 1,000 rows
    assert sampled.loc[jp.BASELINE, "tokens per epoch"] == pytest.approx(100 * tokens / len(kept))
    assert sampled.loc[jp.BASELINE, "tokens interval"] == pytest.approx(
        (100 * (tokens / len(kept) - half), 100 * (tokens / len(kept) + half))
    )

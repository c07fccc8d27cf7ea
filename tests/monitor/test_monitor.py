"""The monitor: token counts of padded, dynamic and packed batches, a plain loop, a real SFTTrainer run on CPU,
its records in the run store, and the warnings (one that fires, one that does not)."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import pytest

from nbhelpers.measure.metrics import model_flops
from nbhelpers.measure.store import RunStore
from nbhelpers.models.families import model_shape
from nbhelpers.monitor import MONITOR_KIND, Monitor, MonitorCallback, MonitorWarning, attach, count_batch
from nbhelpers.monitor.alerts import (
    FALLBACK_KERNEL,
    HIGH_PADDING,
    KERNEL_BOUND,
    fallback_alert,
    kernel_bound_alert,
    padding_alert,
)
from nbhelpers.monitor.records import monitor_frame
from nbhelpers.profiling.parse import CPU_UNIT, GPU_UNIT

torch = pytest.importorskip("torch")
PAD = 0


def _padded(lengths: list[int], width: int) -> dict:
    """Rows of ``lengths`` real tokens padded to ``width``; labels mask the first (prompt) token and the padding."""
    ids = torch.full((len(lengths), width), PAD)
    mask = torch.zeros((len(lengths), width), dtype=torch.long)
    labels = torch.full((len(lengths), width), -100)
    for row, n in enumerate(lengths):
        ids[row, :n] = torch.arange(1, n + 1)
        mask[row, :n] = 1
        labels[row, 1:n] = ids[row, 1:n]
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def test_counts_a_statically_padded_batch():
    count = count_batch(_padded([3, 5], width=8))
    # 16 positions; 3 + 5 real; labels on 2 + 4 tokens, all after the shift
    assert (count.positions, count.real, count.loss) == (16, 8, 6)
    assert count.sequence_lengths == (3, 5) and count.padding_fraction == pytest.approx(0.5)


def test_counts_a_dynamically_padded_batch():
    count = count_batch(_padded([3, 5], width=5))  # padded to the longest row
    assert (count.positions, count.real, count.loss) == (10, 8, 6)
    assert count.padding_fraction == pytest.approx(0.2)


def test_counts_a_packed_padding_free_batch():
    batch = {  # sequences of 3, 2 and 4 tokens in one row, no attention mask, first token of each out of the loss
        "input_ids": torch.arange(1, 10)[None],
        "position_ids": torch.tensor([[0, 1, 2, 0, 1, 0, 1, 2, 3]]),
        "labels": torch.tensor([[-100, 2, 3, -100, 5, -100, 7, 8, 9]]),
    }
    count = count_batch(batch)
    assert (count.positions, count.real, count.loss) == (9, 9, 2 + 1 + 3)  # each sequence: its length - 1
    assert count.sequence_lengths == (3, 2, 4) and count.padding_fraction == 0.0


def test_trailing_pads_of_a_padding_free_row_padded_to_a_multiple_are_not_real_tokens():
    """TRL's collator with padding_free and pad_to_multiple_of pads the flat row with position id 0."""
    trl = pytest.importorskip("trl.trainer.sft_trainer", reason="TRL is in the test extras: pip install trl")
    collator = trl.DataCollatorForLanguageModeling(pad_token_id=0, padding_free=True, pad_to_multiple_of=8)
    batch = collator([{"input_ids": [5, 6, 7]}, {"input_ids": [8, 9]}])  # 5 real tokens padded to 8
    assert batch["position_ids"].tolist() == [[0, 1, 2, 0, 1, 0, 0, 0]] and "attention_mask" not in batch
    count = count_batch(batch)
    assert (count.positions, count.real, count.loss) == (8, 5, 2 + 1)
    assert count.sequence_lengths == (3, 2) and count.padding_fraction == pytest.approx(3 / 8)


def test_a_batch_without_labels_has_no_loss_count_and_one_without_input_ids_is_refused():
    count = count_batch({"input_ids": torch.ones(2, 4, dtype=torch.long)})
    assert (count.positions, count.real, count.loss, count.sequence_lengths) == (8, 8, None, (4, 4))
    with pytest.raises(ValueError, match="input_ids"):
        count_batch({"labels": torch.ones(2, 4)})


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"profile_every": -1}, "profile_every=-1"),
        ({"log_every": 0}, "log_every=0"),
        ({"peak_flops": 0}, "peak_flops=0"),
        ({"peak_flops": "989e12"}, "peak_flops='989e12'"),
        ({"profile_every": 2, "profile_warmup": 1, "profile_steps": 2}, "windows never overlap"),
        ({"run_name": "../x"}, "run_name"),
    ],
)
def test_bad_options_name_the_parameter(runs_root, options, message):
    with pytest.raises(ValueError, match=message):
        Monitor(**options)


def test_alert_rules_fire_above_their_thresholds_only():
    assert padding_alert(0.4).code == HIGH_PADDING and "notebook 03" in padding_alert(0.4).message
    assert padding_alert(0.1) is None
    assert kernel_bound_alert(0.97, 0.05, GPU_UNIT).code == KERNEL_BOUND
    assert "notebook 01" in kernel_bound_alert(0.97, 0.05, GPU_UNIT).message
    assert kernel_bound_alert(0.97, 0.40, GPU_UNIT) is None  # busy and useful
    assert kernel_bound_alert(0.50, 0.05, GPU_UNIT) is None  # idle, not kernel-bound
    assert kernel_bound_alert(0.99, 0.01, CPU_UNIT) is None  # a CPU trace's busy share says nothing of a GPU


@pytest.fixture(scope="module")
def tiny_model():
    from nbhelpers.models.loading import build_model

    return build_model("qwen3-tiny", "sdpa", seed=0)


def test_plain_loop_hook_counts_times_profiles_and_stores(runs_root, tiny_model):
    model = tiny_model
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    peak = 1e12
    monitor = Monitor("loop", model=model, log_every=2, profile_every=2, profile_warmup=0, peak_flops=peak)
    batches = [_padded([12, 30], 32), _padded([20, 25], 32), _padded([31, 32], 32), _padded([8, 32], 32)]
    logs = []
    with pytest.warns(MonitorWarning, match="padding"):  # 87 real of 128 positions in steps 1-2
        for batch in batches:
            with monitor.step(batch) as step:
                model(**batch).loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            logs.append(step.logs)
    assert [bool(log) for log in logs] == [False, True, False, True]  # an interval closes every 2 steps
    first = logs[1]
    assert (first["real_tokens"], first["positions"], first["loss_tokens"]) == (87, 128, 83)
    assert (first["steps"], first["profiled_steps"], first["rated_steps"]) == (2, 1, 1)
    # the rates and MFU cover the unprofiled step 1 only: 42 real tokens over its time
    assert first["real_tokens_per_s"] == pytest.approx(42 / first["time_s"])
    assert first["model_flops"] == pytest.approx(model_flops(model_shape(model.config), [12, 30]))
    assert first["mfu"] == pytest.approx(first["model_flops"] / first["time_s"] / peak)
    assert first["launches_per_step"] > 100 and first["trace_unit"] == CPU_UNIT  # step 2 ran under the profiler
    assert first["window_step"] == 2 and first["window_time_s"] > 0 and first["window_cost_s"] is not None
    assert first["trace"] is None and not list(runs_root.rglob("*.trace.json.gz"))  # not kept by default
    assert first["peak_memory_gib"] is None and "CUDA" in first["memory_note"]
    stored = RunStore.for_run("loop").load()
    assert [r.kind for r in stored] == [MONITOR_KIND] * 2 and [r.metrics["step"] for r in stored] == [2, 4]
    assert sum(r.metrics["real_tokens"] for r in stored) == 12 + 30 + 20 + 25 + 31 + 32 + 8 + 32
    frame = monitor_frame(stored)
    assert list(frame["step"]) == [2, 4] and frame["launches_per_step"].notna().all()


class _FakeEvent:
    """A CUDA event's timing interface on the host clock; counts the waits on it."""

    waits = 0

    def record(self, stream=None):
        import time

        self.at = time.perf_counter()

    def synchronize(self):
        _FakeEvent.waits += 1

    def elapsed_time(self, end):
        return (end.at - self.at) * 1e3


def test_event_timed_steps_never_sync_the_device_and_are_read_when_the_interval_closes(
    runs_root, tiny_model, monkeypatch
):
    import nbhelpers.monitor.core as core
    import nbhelpers.monitor.timing as timing

    syncs, counted = [], []
    monkeypatch.setattr(timing, "sync_device", lambda device: syncs.append("timer"))
    monkeypatch.setattr(core, "sync_device", lambda device: syncs.append("interval"))
    monkeypatch.setattr(core, "count_batch", lambda batch: counted.append(1) or count_batch(batch))
    monitor = Monitor("events", model=tiny_model, log_every=3, profile_every=3, profile_warmup=0)
    monitor.timer = timing.StepTimer("cpu", event_factory=_FakeEvent)  # as on CUDA, with host-clock events
    _FakeEvent.waits = 0
    batch = _padded([30, 32], 32)
    logs = []
    for _ in range(3):
        with monitor.step(batch) as step:
            tiny_model(**batch).loss.backward()
        logs.append(step.logs)
        if not logs[-1]:  # steps 1 and 2: timed by events; nothing waited on, synced, or read off the batch
            assert (_FakeEvent.waits, syncs, counted) == (0, [], [])
    # step 3 ran under the profiler: timed on the host after a sync at its start and end, and counted then; the
    # interval then synced once, counted steps 1 and 2 and read their events
    assert syncs == ["timer", "timer", "interval"] and len(counted) == 3 and _FakeEvent.waits == 2
    figures = logs[-1]
    assert (figures["steps"], figures["rated_steps"]) == (3, 2) and figures["time_s"] > 0
    assert figures["real_tokens_per_s"] == pytest.approx(2 * 62 / figures["time_s"])
    assert figures["window_cost_s"] is not None
    with pytest.raises(ValueError, match="not both"):
        timing.StepTime(1.0, events=(_FakeEvent(), _FakeEvent()))


def test_a_packed_loop_raises_no_padding_warning_and_a_padded_one_does(runs_root, tiny_model):
    packed = {"input_ids": torch.arange(1, 41)[None], "position_ids": torch.cat([torch.arange(20)] * 2)[None]}
    packed["labels"] = packed["input_ids"].clone()
    monitor = Monitor("quiet", model=tiny_model, log_every=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", MonitorWarning)
        with monitor.step(packed) as step:
            tiny_model(**packed).loss.backward()
    assert step.logs["padding_fraction"] == 0.0 and step.logs["warnings"] == []
    padded = _padded([4, 30], 32)  # 34 real of 64 positions: 47% padding
    monitor = Monitor("loud", model=tiny_model, log_every=1)
    with pytest.warns(MonitorWarning, match="notebook 03"), monitor.step(padded) as step:
        tiny_model(**padded).loss.backward()
    assert [w["code"] for w in step.logs["warnings"]] == [HIGH_PADDING]


def test_a_hybrid_on_the_pytorch_fallback_is_flagged(runs_root):
    from nbhelpers.kernels.hybrid_paths import TORCH, layer_paths
    from nbhelpers.models.loading import build_model

    hybrid = build_model("qwen3.5-tiny", "sdpa", seed=0)
    paths = layer_paths(hybrid)
    if not any(row["delta_rule"] == TORCH for row in paths):
        pytest.skip("flash-linear-attention is installed here: the hybrid runs fused kernels")
    with pytest.warns(MonitorWarning, match="flash-linear-attention"):
        Monitor("hybrid", model=hybrid)
    assert fallback_alert(paths, TORCH).code == FALLBACK_KERNEL
    fused = [dict(row, delta_rule="fla chunk_gated_delta_rule", conv="fla causal_conv1d") for row in paths]
    assert fallback_alert(fused, TORCH) is None


def test_callback_passed_after_the_reporters_says_to_use_attach(runs_root, tiny_model):
    callback = MonitorCallback("late")
    state = SimpleNamespace(global_step=0, log_history=[])
    with pytest.warns(UserWarning, match="attach"):
        callback.on_train_begin(SimpleNamespace(report_to=["tensorboard"]), state, None, model=tiny_model)
    callback.on_step_begin(None, state, None)
    callback.monitor.add_batch(_padded([6, 8], 8))
    callback.on_step_end(None, state, None)
    state.global_step = 1
    evaluation, training = {"eval_loss": 1.0}, {"loss": 1.0}
    callback.on_log(None, state, None, logs=evaluation)
    callback.on_log(None, state, None, logs=training)
    assert "monitor/real_tokens" not in evaluation and training["monitor/real_tokens"] == 14  # the training log
    callback.on_train_end(None, state, None)
    with pytest.raises(ValueError, match="log_every"):
        MonitorCallback("late", log_every=3)


TEXT_LENGTHS = (3, 15, 4, 20, 6, 2, 12, 5)  # words of each example: very unequal rows


def _sft_run(tmp_path, run_name: str, lengths=TEXT_LENGTHS, **config):
    """A real TRL SFTTrainer run of one epoch (batches of 2) on CPU (qwen3-tiny, random weights), the monitor
    attached, a reporter standing where TensorBoard and MLflow stand (after the Trainer's own callbacks)."""
    trl = pytest.importorskip("trl")
    from datasets import Dataset
    from transformers import TrainerCallback

    from nbhelpers.data.tokenizer import load_tokenizer
    from nbhelpers.models.loading import build_model

    class Reporter(TrainerCallback):
        def __init__(self) -> None:
            self.seen: list[dict] = []

        def on_log(self, args, state, control, logs=None, **kwargs):
            self.seen.append(dict(logs or {}))

    texts = [" ".join(["word"] * n) for n in lengths]
    settings = dict(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=2, logging_steps=1,
        report_to="none", save_strategy="no", use_cpu=True, max_length=64, gradient_checkpointing=False,
        disable_tqdm=True, seed=0,
    )  # fmt: skip
    settings |= config
    per_step = settings["per_device_train_batch_size"] * settings.get("gradient_accumulation_steps", 1)
    args = trl.SFTConfig(max_steps=len(lengths) // per_step, **settings)
    reporter = Reporter()
    trainer = trl.SFTTrainer(
        model=build_model("qwen3-tiny", "sdpa", seed=0), args=args, processing_class=load_tokenizer("qwen3-tiny"),
        train_dataset=Dataset.from_list([{"text": t} for t in texts]), callbacks=[reporter],
    )  # fmt: skip
    callback = attach(trainer, run_name, profile_every=2, profile_warmup=0, profile_steps=1)
    trainer.train()
    lengths = [len(ids) for ids in trainer.train_dataset["input_ids"]]  # one epoch: every example once
    logged = [entry for entry in trainer.state.log_history if "monitor/real_tokens" in entry]
    return callback, reporter, lengths, logged


@pytest.mark.slow
def test_monitor_runs_in_a_real_sft_trainer_run(runs_root, tmp_path):
    with pytest.warns(MonitorWarning, match="notebook 03"):  # pad-to-longest batches of very unequal rows
        callback, reporter, lengths, logged = _sft_run(tmp_path, "sft")
    assert len(logged) == 4 and reporter.seen[0]["monitor/real_tokens"] == logged[0]["monitor/real_tokens"]
    assert sum(entry["monitor/real_tokens"] for entry in logged) == sum(lengths)
    assert sum(entry["monitor/loss_tokens"] for entry in logged) == sum(n - 1 for n in lengths)
    assert sum(entry["monitor/positions"] for entry in logged) > sum(lengths)  # rows padded to the longest
    assert all(e["monitor/real_tokens_per_s"] > 0 and 0 <= e["monitor/padding_fraction"] < 1 for e in logged)
    assert 0 < logged[0]["monitor/mfu"] < 1  # on a CPU, the matmul peak measured once for this machine's records
    assert [("monitor/launches_per_step" in entry) for entry in logged] == [False, True, False, True]
    shares = {key: value for key, value in logged[1].items() if key.startswith("monitor/time_share/")}
    assert shares and all(0 < value <= 1 for value in shares.values())  # kernel-time categories of the window
    stored = RunStore.for_run("sft").load()
    assert stored == callback.monitor.records and [r.metrics["step"] for r in stored] == [1, 2, 3, 4]
    assert all(r.kind == MONITOR_KIND and r.config["source"] == "trainer" for r in stored)
    assert stored[0].metrics["mfu_note"] == "" and stored[0].metrics["peak_flops_source"].startswith("measured: ")


@pytest.mark.slow
def test_monitor_counts_a_padding_free_accumulating_sft_run_without_warning(runs_root, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error", MonitorWarning)
        callback, _, lengths, logged = _sft_run(  # 2 optimizer steps of 2 accumulated micro-batches of 1 row each
            tmp_path, "sftpacked", lengths=(15, 2, 6, 12), padding_free=True, max_length=None,
            per_device_train_batch_size=1, gradient_accumulation_steps=2,
        )  # fmt: skip
    assert len(logged) == 2  # every micro-batch of a step counted into it
    assert sum(entry["monitor/real_tokens"] for entry in logged) == sum(lengths)
    assert sum(entry["monitor/positions"] for entry in logged) == sum(lengths)  # one packed row, no padding
    assert sum(entry["monitor/loss_tokens"] for entry in logged) == sum(n - 1 for n in lengths)
    assert all(entry["monitor/padding_fraction"] == 0.0 for entry in logged)
    assert all(r.metrics["warnings"] == [] for r in callback.monitor.records)


def _monitor_record(step: int, session: str, launches: float | None, mfu: float | None = None):
    from nbhelpers.measure.store import RunRecord

    metrics = {"step": step, "real_tokens_per_s": 100.0 * step, "padding_fraction": 0.3, "mfu": mfu,
               "mfu_note": "" if mfu is not None else "no datasheet peak on cpu: pass peak_flops= (FLOP/s) for MFU",
               "launches_per_step": launches, "warnings": [{"code": HIGH_PADDING, "message": "..."}]}  # fmt: skip
    return RunRecord(config={"run_name": "p", "session": session}, kind=MONITOR_KIND, metrics=metrics)


def test_monitor_plot_draws_the_series_over_steps_and_says_why_one_is_missing():
    hv = pytest.importorskip("holoviews")
    from nbhelpers.measure.store import RunRecord
    from nbhelpers.views.monitor_plots import monitor_plot

    records = [_monitor_record(4, "b", None), _monitor_record(2, "b", 900.0), RunRecord(config={}, kind="step")]
    frame = monitor_frame(records)
    assert list(frame["step"]) == [2, 4] and list(frame["warnings"]) == [HIGH_PADDING] * 2  # step records left out
    plot = monitor_plot(records)
    assert isinstance(plot, hv.Layout) and len(plot) == 4
    tok_s, mfu_panel, _, launches = plot
    curve = next(element for element in tok_s if isinstance(element, hv.Curve))
    assert list(curve.data["step"]) == [2, 4] and list(curve.data["real tok/s"]) == [200.0, 400.0]
    assert isinstance(mfu_panel, hv.Text) and "peak_flops=" in mfu_panel.text  # MFU None on a CPU: the reason shows
    points = next(element for element in launches if isinstance(element, hv.Scatter))
    assert list(points.data["step"]) == [2]  # only the interval with a profiler window
    hv.render(plot, backend="bokeh")
    assert isinstance(monitor_plot([]), hv.Text)


def test_notebook_04_section_says_how_to_get_monitor_records_when_there_are_none():
    pytest.importorskip("holoviews")
    from nbhelpers.views.monitor_plots import monitor_view

    shown = monitor_view([], "mine")
    assert "No monitor records" in shown.data and "attach(trainer, 'mine')" in shown.data


def test_a_model_without_a_decoder_config_is_counted_without_mfu(runs_root):
    monitor = Monitor("noconfig", model=torch.nn.Linear(4, 4), log_every=1, peak_flops=1e12)
    with monitor.step({"input_ids": torch.ones(2, 3, dtype=torch.long)}) as step:
        pass
    assert (step.logs["real_tokens"], step.logs["loss_tokens"]) == (6, None)
    assert step.logs["mfu"] is None and "no config" in step.logs["mfu_note"]
    with pytest.raises(RuntimeError, match="begin_step"):
        monitor.end_step()


def test_frozen_weights_of_a_lora_style_run_lose_their_weight_gradient_flops(runs_root):
    from nbhelpers.models.adapters import frozen_matmul_parameters
    from nbhelpers.models.loading import build_model

    model = build_model("qwen3-tiny", "sdpa", seed=0)
    assert frozen_matmul_parameters(model) == 0
    for parameter in model.parameters():  # the base frozen as LoRA freezes it, norms left trainable
        parameter.requires_grad_(parameter.dim() < 2)
    weights = {id(p): p for p in model.parameters() if p.dim() >= 2}
    lookup = model.get_input_embeddings().weight
    tied = lookup is model.get_output_embeddings().weight
    expected = sum(p.numel() for i, p in weights.items() if tied or i != id(lookup))
    assert frozen_matmul_parameters(model) == expected
    monitor = Monitor("lora", model=model, log_every=1, peak_flops=1e12)
    batch = _padded([20, 32], 32)
    with monitor.step(batch) as step:
        model(**batch).loss.backward()
    shape = model_shape(model.config)
    assert step.logs["frozen_parameters"] == expected
    assert step.logs["model_flops"] == pytest.approx(model_flops(shape, [20, 32]) - 2 * expected * 52)
    # A hybrid's short convolutions (3-D weights) are no weight matmuls: frozen, they are not counted.
    hybrid = build_model("qwen3.5-tiny", "sdpa", seed=0).requires_grad_(False)
    convs = sum(p.numel() for n, p in hybrid.named_parameters() if p.dim() == 3)
    linears = {id(m.weight): m.weight.numel() for m in hybrid.modules() if isinstance(m, torch.nn.Linear)}
    assert convs > 0 and frozen_matmul_parameters(hybrid) == sum(linears.values())


def test_a_kept_trace_lands_in_the_run_folder_and_its_record(runs_root, tiny_model):
    from nbhelpers.profiling.parse import load_trace

    monitor = Monitor("kept", model=tiny_model, log_every=2, profile_every=2, profile_warmup=0, keep_traces=True)
    batch = _padded([8, 8], 8)
    for _ in range(2):
        with monitor.step(batch) as step:
            tiny_model(**batch).loss.backward()
    trace = step.logs["trace"]
    assert trace and trace.startswith(str(runs_root / "kept" / "traces")) and load_trace(trace).num_steps == 1
    assert RunStore.for_run("kept").load()[-1].artifacts == {"trace": trace}

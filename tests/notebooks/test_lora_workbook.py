"""LoRA as a notebook parameter: ADAPTER and LORA_* in notebooks 01-05, the sweep, run-all, the GPU command and
``nbhelpers tune``; the recommendation of one adapter's workloads, notebook 05's one-GPU rule, the LoRA fit shown."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from test_tuner import RATES, FakeClock, FakeMeasure

from nbhelpers import sweep
from nbhelpers.analysis import adapter_plan, multi_gpu_export, scaling
from nbhelpers.analysis.recommend import other_adapters_note, recommend_all, recommendations_markdown
from nbhelpers.cli import main
from nbhelpers.measure.config import RunConfig
from nbhelpers.models.adapters import AdapterSettings
from nbhelpers.tuning import tuner

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("0[1-5]_*.ipynb"))
LORA_PARAMETERS = {"ADAPTER": "str", "LORA_RANK": "int", "LORA_ALPHA": "int", "LORA_TARGETS": "str"}
LORA = AdapterSettings("lora", 16, 32, "all-linear")


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_every_notebook_declares_the_adapter_parameters_with_their_defaults(notebook):
    declared = sweep.notebook_parameters(notebook)
    assert {name: declared[name]["inferred_type_name"] for name in LORA_PARAMETERS} == LORA_PARAMETERS
    defaults = [declared[name]["default"] for name in LORA_PARAMETERS]
    assert defaults == ['"none"', "16", "32", '"all-linear"']  # RunConfig's own: "none" is full fine-tuning


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_a_grid_over_the_adapter_reaches_every_notebook_typed(notebook):
    declared = sweep.notebook_parameters(notebook)
    grid = sweep.parse_grid(["adapter=none,lora", "lora_rank=8", "lora_alpha=16", "lora_targets=[q_proj,v_proj]"])
    sweep.check_grid(grid, {notebook: declared})
    points = sweep.grid_points(grid)
    assert [sweep.point_name(p) for p in points][0].startswith("adapter-none_lora_rank-8")
    params = sweep.parameters_for(notebook, declared, points[1], "r")
    assert params == {"RUN_NAME": "r", "ADAPTER": "lora", "LORA_RANK": 8, "LORA_ALPHA": 16,
                      "LORA_TARGETS": "q_proj,v_proj"}  # fmt: skip


def test_settings_give_run_config_fields_and_match_records():
    assert RunConfig(**LORA.config_fields()).adapter_settings == LORA
    assert RunConfig(**AdapterSettings().config_fields()) == RunConfig()  # "none" builds today's config
    assert LORA.matches({"adapter": "lora"}) and LORA.matches({"adapter": "lora", "lora_targets": "all-linear"})
    assert not LORA.matches({}) and not LORA.matches({"adapter": "lora", "lora_rank": 8})
    assert AdapterSettings().matches({}) and AdapterSettings().matches({"adapter": "none", "lora_rank": 8})
    assert not AdapterSettings().matches({"adapter": "lora"})
    two = AdapterSettings("lora", targets="q_proj,v_proj")
    assert two.matches({"adapter": "lora", "lora_targets": "q_proj, v_proj"}) and not LORA.matches(two.config_fields())


def test_the_recommendation_keeps_one_adapters_workloads_and_names_the_rest(make_record):
    lora = {"adapter": "lora", "lora_rank": 16, "lora_alpha": 32, "lora_targets": "all-linear"}
    records = [
        make_record("full baseline", 1000.0),
        make_record("full packed", 2000.0, padding="packed", parity="pass"),
        make_record("lora baseline", 3000.0, **lora),
        make_record("lora packed", 9000.0, padding="packed", parity="pass", **lora),
    ]
    assert [r.label for r in recommend_all(records)] == ["lora packed"]  # no adapter given: every workload
    assert [r.label for r in recommend_all(records, adapter=AdapterSettings())] == ["full packed"]
    picked = recommend_all(records, adapter=LORA)
    assert [(r.label, r.baseline_label, r.speedup) for r in picked] == [("lora packed", "lora baseline", 3.0)]
    note = other_adapters_note(records, LORA)
    assert note.startswith("Left out: 2 measured step record(s) of another adapter (none (full fine-tuning): 2)")
    assert "lora-r16: 2" in other_adapters_note(records, AdapterSettings()) and other_adapters_note(records, None) == ""
    assert note in recommendations_markdown(picked, records, LORA).data
    assert recommendations_markdown(picked).data == recommendations_markdown(picked, records, None).data
    none = recommendations_markdown([], records[:2], LORA).data
    assert none.startswith("**No recommendation for ADAPTER='lora'.** Left out: 2")
    assert recommendations_markdown([]).data.startswith("**No recommendation:** no configuration")


def test_notebook_05_runs_an_adapter_on_one_gpu_and_refuses_more_at_once():
    base = RunConfig(run_name="s", device="cpu", padding="packed")
    full = scaling.scaling_configs(base, 2)
    assert [(c.gpus, c.sharding) for c in full] == [(1, "fsdp2"), (2, "fsdp2")] and not scaling.refused_scaling(base, 2)
    lora = base.replace(**LORA.config_fields())
    assert [(c.gpus, c.sharding, c.adapter) for c in scaling.scaling_configs(lora, 2)] == [(1, "none", "lora")]
    assert scaling.refused_scaling(lora, 1) == []
    (refused,) = scaling.refused_scaling(lora, 4, notebook="05")
    assert refused.status == "failed" and refused.reason == scaling.ADAPTER_ON_ONE_GPU and refused.notebook == "05"
    assert (refused.config["gpus"], refused.config["sharding"], refused.config["adapter"]) == (4, "fsdp2", "lora")
    assert refused.label.endswith("/lora-r16 · FSDP2 on 4") and refused.environment
    assert multi_gpu_export.export_markdown([refused]).startswith("No multi-GPU configuration to export")


def test_notebook_05_exports_a_full_fine_tuning_run_as_before(make_record):
    record = make_record("fsdp2", 1000.0, gpus=2, sharding="fsdp2", model="qwen3-8b")
    exported = multi_gpu_export.export_multi_gpu(record.config)
    expected = (f"`{multi_gpu_export.CONFIG_FILE}`:\n```yaml\n{exported[multi_gpu_export.CONFIG_FILE]}```\n\n"
                f"```bash\n{exported['command']}\n```")  # fmt: skip
    assert multi_gpu_export.export_markdown([record]) == expected
    assert "--model_name_or_path Qwen/Qwen3-8B" in exported["command"]
    tiny = make_record("fsdp2", 1000.0, gpus=2, sharding="fsdp2", model="qwen3-tiny")  # no released checkpoint
    text = multi_gpu_export.export_markdown([tiny])
    assert "--model_name_or_path YOUR-CHECKPOINT" in text and text.endswith("no released model has the shape of.")


def test_the_lora_fit_is_shown_only_with_an_adapter():
    assert adapter_plan.lora_fit_for("qwen3-8b", AdapterSettings(), 2048, 8192) is None
    fit = adapter_plan.lora_fit_for("qwen3-8b", AdapterSettings("lora", 8, 16, "all-linear"), 2048, 8192, 139.0)
    frame = adapter_plan.lora_fit_frame("qwen3-8b", 2048, 8192, rank=8, capacity_gib=139.0)
    assert fit.frame.equals(frame) and fit.sentence == adapter_plan.lora_fit_sentence(frame)
    assert fit.sentence.startswith("qwen3-8b with LoRA r8 (all-linear) on 139 GiB")
    html = fit._repr_html_()
    assert html.startswith("<p>qwen3-8b with LoRA r8") and "largest_batch_x2048" in html
    assert repr(fit).splitlines()[0] == fit.sentence


def test_the_gpu_command_hands_the_adapter_to_every_notebook(tmp_path):
    """The script's run-all arguments, read through a stand-in interpreter on a stand-in GPU."""
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    echo = 'if [ "$1" = "-c" ]; then exit 0; fi\nprintf "%s\\n" "$@"'  # torch's check passes; run-all's arguments
    for name, body in (("nvidia-smi", "exit 0"), ("python", echo)):
        (fake_bin / name).write_text(f"#!/bin/sh\n{body}\n")
        (fake_bin / name).chmod(0o755)
    script = ROOT / "scripts" / "run_workbook_gpu.sh"
    env = {"PATH": f"{fake_bin}:/usr/bin:/bin", "HOME": str(tmp_path), "WORKBOOK_PYTHON": str(fake_bin / "python")}

    def arguments(**extra: str) -> list[str]:
        done = subprocess.run(["bash", str(script)], env=env | extra, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines()

    defaults = arguments()
    for value in ("MODEL=qwen3-1.7b", "BATCH_SIZE=8", "ADAPTER=none", "LORA_RANK=16", "LORA_TARGETS=all-linear"):
        assert value in defaults
    lora = arguments(MODEL="qwen3.8-27b", ADAPTER="lora", LORA_TARGETS="q_proj,v_proj")
    assert "MODEL=qwen3.8-27b" in lora and "ADAPTER=lora" in lora and "LORA_TARGETS=q_proj,v_proj" in lora
    assert lora[lora.index("ADAPTER=lora") - 1] == "-p"  # unscoped: every notebook that declares it


def test_tune_takes_the_adapter(monkeypatch, capsys, tmp_path):
    measure = FakeMeasure(FakeClock(), RATES)
    monkeypatch.setattr(tuner, "default_measure", lambda notebook="", progress=False: measure)
    argv = ["tune", "--run-name", "lora-tune", "--out", str(tmp_path), "--device", "cpu", "--no-progress",
            "--kernels", "eager", "--strategies", "static,packed", "--batch-size", "2", "--max-length", "64",
            "--adapter", "lora", "--lora-rank", "8", "--lora-targets", "q_proj,v_proj"]  # fmt: skip
    assert main(argv) == 0
    assert {(c.adapter, c.lora_rank, c.lora_alpha, c.lora_targets) for c in measure.calls} == {
        ("lora", 8, 32, "q_proj,v_proj")
    }  # fmt: skip
    assert main([*argv[:-6], "--adapter", "qlora"]) == 2 and "adapter='qlora'" in capsys.readouterr().err

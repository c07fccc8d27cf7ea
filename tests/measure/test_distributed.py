"""Several GPUs on a CPU: per-rank records merged, loss scaling, checkpointing parity, GPU-count refusals."""

from __future__ import annotations

import json

import pytest

from nbhelpers.analysis.records import GpuCountError, scaling_efficiency, speedup
from nbhelpers.kernels.registry import cpu_tolerance
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.distributed import launch_command, merge_rank_records, needs_launch, rank_failure
from nbhelpers.measure.parallel import loss_scale
from nbhelpers.measure.store import RunRecord
from nbhelpers.models.checkpointing import recomputed_layers


def _rank_record(rank: int, times: list[float], real: list[int], loss_tokens: list[int], losses: list[float],
                 memory: float, device_type: str = "cpu") -> RunRecord:  # fmt: skip
    metrics = {
        "rank": rank, "step_times_s": times, "timed_real_tokens": real, "timed_loss_tokens": loss_tokens[1:],
        "loss_tokens_first": loss_tokens[0], "losses": losses, "loss_first": losses[0], "timed_batches": len(times),
        "positions_per_step": sum(real) / len(real) + 10, "timed_flops": [1e9] * len(times), "peak_flops": 1e10,
        "peak_memory_gib": memory, "first_step_s": 1.0 + rank, "real_tokens_per_s": sum(real) / sum(times),
        "grad_norm_first": 2.0,
    }  # fmt: skip
    return RunRecord(config=RunConfig(gpus=2, sharding="fsdp2").to_dict(), metrics=metrics,
                     environment={"device_name": device_type, "hostname": "h", "device_type": device_type},
                     artifacts={"trace": f"t{rank}"})  # fmt: skip


def test_merge_takes_the_slowest_rank_per_step_and_weights_losses_by_tokens():
    a = _rank_record(0, [1.0, 2.0], [100, 100], [10, 30, 50], [1.0, 2.0, 3.0], 5.0)
    b = _rank_record(1, [1.5, 1.0], [50, 150], [30, 10, 50], [2.0, 4.0, 1.0], 7.0)
    merged = merge_rank_records([b, a]).metrics
    assert merged["step_times_s"] == [1.5, 2.0]
    assert merged["real_tokens_per_s"] == pytest.approx(400 / 3.5)
    assert merged["real_tokens_per_s_per_gpu"] == pytest.approx(200 / 3.5)
    assert merged["losses"] == pytest.approx([(10 * 1 + 30 * 2) / 40, (30 * 2 + 10 * 4) / 40, 2.0])
    assert merged["peak_memory_gib"] == 7.0 and merged["peak_memory_gib_per_gpu"] == [5.0, 7.0]
    assert merged["mfu"] == pytest.approx(4e9 / 3.5 / 2e10)
    assert merged["world_size"] == 2 and [r["rank"] for r in merged["per_rank"]] == [0, 1]
    assert merged["first_step_s"] == 2.0 and merged["real_tokens_per_step"] == 200
    low, high = merged["real_tokens_per_s_interval"]  # the world's steps (150 / 1.5, 250 / 2.0), not rank 0's
    assert low <= merged["real_tokens_per_s"] <= high and (low, high) == pytest.approx((100.0, 125.0))
    assert merged["timed_steps"] == 2 and merged["timed_real_tokens_total"] == 400
    with pytest.raises(ValueError, match="different numbers of steps"):
        merge_rank_records([a, _rank_record(1, [1.0], [5], [1, 1], [1.0, 1.0], 1.0)])


def test_ranks_that_were_cpu_processes_say_their_per_gpu_figures_are_per_process(monkeypatch):
    """gpus=N resolved to the CPU runs N gloo processes: the merged record and the scaling table say so (and that
    they share the cores), where a GPU run says nothing of the kind."""
    from nbhelpers.analysis.scaling import scaling_frame
    from nbhelpers.measure import distributed

    monkeypatch.setattr(distributed, "available_cpus", lambda: 2)
    ranks = [_rank_record(r, [1.0], [100], [10, 10], [1.0, 1.0], 5.0) for r in range(3)]
    cpu = merge_rank_records(ranks)
    assert cpu.metrics["rank_device"] == "cpu" and cpu.metrics["cpu_cores"] == 2
    note = cpu.metrics["per_gpu_note"]
    assert note.startswith("3 CPU process(es) (gloo), no GPU: the per-GPU figures are per process, on 2 CPU core(s)")
    assert "more processes than cores" in note
    gpu = merge_rank_records([_rank_record(r, [1.0], [100], [10, 10], [1.0, 1.0], 5.0, "cuda") for r in range(2)])
    assert gpu.metrics["rank_device"] == "cuda" and "per_gpu_note" not in gpu.metrics
    old_cpu = RunRecord(config=RunConfig(gpus=2, sharding="fsdp2").to_dict(), metrics={"real_tokens_per_s": 10.0},
                        environment={"device_type": "cpu"})  # fmt: skip  # written before the note existed
    table = scaling_frame([cpu, gpu, old_cpu])
    assert list(table["ran_on"]) == ["CPU", "GPU", "CPU"]
    notes = list(table["note"])
    assert notes[0] == note and notes[1] == "" and notes[2].startswith("2 CPU process(es) (gloo), no GPU")


def test_loss_scale_makes_the_rank_average_the_global_token_mean():
    local = [(1.0, 10), (4.0, 30)]  # (mean loss, loss tokens) per rank
    total = sum(n for _, n in local)
    averaged = sum(loss * loss_scale(n, total, 2) for loss, n in local) / 2
    assert averaged == pytest.approx((1.0 * 10 + 4.0 * 30) / total)


def test_sharded_configs_launch_under_torchrun():
    config = RunConfig(gpus=4, sharding="fsdp2")
    assert needs_launch(config) and not needs_launch(RunConfig())
    command = launch_command(config, "c.json", "r.json")
    assert command[1:4] == ["-m", "torch.distributed.run", "--standalone"] and "--nproc_per_node=4" in command


def test_a_failed_rank_says_which_and_why(tmp_path):
    result = tmp_path / "record.json"
    failed = RunRecord.failed({"label": "x"}, "out of memory: CUDA out of memory")
    (tmp_path / "record.json.rank1").write_text(json.dumps(failed.to_dict()))
    assert rank_failure(result) == "rank 1: out of memory: CUDA out of memory"
    assert rank_failure(tmp_path / "other.json") == ""


def test_activation_checkpointing_gives_the_same_loss_and_gradients():
    import torch

    from nbhelpers.measure.parallel import apply_checkpointing
    from nbhelpers.models.loading import build_model

    batch = {"input_ids": torch.randint(0, 1000, (2, 24)), "labels": torch.randint(0, 1000, (2, 24))}
    import copy

    results = []
    template = build_model("qwen3-tiny", "sdpa", seed=0)
    for mode in ("none", "full", "every_k", "offload"):
        model = copy.deepcopy(template)
        model.train()
        chosen = apply_checkpointing(model, mode, 2)
        assert chosen == recomputed_layers(2, mode, 2)
        flags = [layer.gradient_checkpointing for layer in model.model.layers]
        assert flags == [i in chosen for i in range(2)]
        loss = model(**batch).loss
        loss.backward()
        results.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
    # exact: recomputing a layer runs the same kernels on the same inputs, so its activations and gradients are the
    # same bits
    for loss, grads in results[1:]:
        torch.testing.assert_close(loss, results[0][0], rtol=0, atol=0)
        for grad, reference in zip(grads, results[0][1]):
            torch.testing.assert_close(grad, reference, rtol=0, atol=0)


def test_speedup_refuses_other_gpu_counts_and_scaling_efficiency_divides_per_gpu(make_record):
    one = make_record("fsdp2 x1", 1000.0, gpus=1, sharding="fsdp2")
    two = make_record("fsdp2 x2", 1900.0, gpus=2, sharding="fsdp2")
    with pytest.raises(GpuCountError, match="scaling efficiency"):
        speedup(two, one)
    assert scaling_efficiency(two, one) == pytest.approx(0.95)
    with pytest.raises(ValueError, match="more GPUs"):
        scaling_efficiency(one, two)
    with pytest.raises(ValueError, match="one workload per GPU"):
        scaling_efficiency(make_record("x2 b8", 1900.0, gpus=2, batch_size=8), one)


@pytest.mark.slow
def test_two_gloo_ranks_match_one_process_on_the_same_global_batch(runs_root):
    from nbhelpers.measure.runner import run_config, run_isolated

    base = RunConfig(run_name="gloo", model="qwen3-tiny", batch_size=2, max_length=48, num_samples=8, padding="packed",
                     steps=2, warmup=0, device="cpu", timeout_s=1800)  # fmt: skip
    two = run_isolated(base.replace(gpus=2, sharding="fsdp2"))
    one = run_config(base.replace(batch_size=4), isolate=False)
    assert two.ok, two.reason
    assert one.ok, one.reason
    m = two.metrics
    assert m["world_size"] == 2 and len(m["per_rank"]) == 2 and len(m["peak_memory_gib_per_gpu"]) == 2
    assert m["real_tokens_per_step"] == one.metrics["real_tokens_per_step"]  # the same global batch
    assert m["real_tokens_per_s_per_gpu"] == pytest.approx(m["real_tokens_per_s"] / 2)
    assert m["parallel"]["sharded_layers"] == 2
    # the same kernels, the global batch split across two ranks and summed by the all-reduce: the baseline's
    # cpu_tolerance (spec.SAME_KERNELS_CPU; measured 1.3e-7 on the losses, 1.4e-6 on the gradient norm)
    same_kernels = cpu_tolerance("eager").rel
    assert m["losses"] == pytest.approx(one.metrics["losses"], rel=same_kernels)
    assert m["grad_norm_first"] == pytest.approx(one.metrics["grad_norm_first"], rel=same_kernels)
    assert m["rank_device"] == "cpu"  # no GPU was used, and the record says so beside its per-GPU figures
    assert m["per_gpu_note"].startswith("2 CPU process(es) (gloo), no GPU: the per-GPU figures are per process")


@pytest.mark.slow
def test_liger_fused_linear_cross_entropy_under_fsdp2_matches_one_process(runs_root):
    """Liger under FSDP2 (its fused lm head + loss reads the lm head's weight inside the root
    module's all-gather), the patch report verified on the sharded model, losses equal to one process."""
    from nbhelpers.measure.runner import run_config, run_isolated

    # Few steps: under FSDP2 each of Liger's kernel launches in Triton's interpreter costs ~20x what it costs in one
    # process (~60 s a step here against ~3 s).
    base = RunConfig(run_name="gloo-liger", model="qwen3-tiny", batch_size=1, max_length=48, num_samples=4,
                     padding="packed", steps=1, warmup=0, device="cpu", timeout_s=1800, kernels="liger",
                     liger_kernels=("fused_linear_cross_entropy",), extra={"parity_probe_samples": 0})  # fmt: skip
    two = run_isolated(base.replace(gpus=2, sharding="fsdp2"))
    one = run_config(base.replace(batch_size=2), isolate=True)
    assert two.ok, two.reason
    assert one.ok, one.reason
    assert two.metrics["patch_report"]["fused_linear_cross_entropy"]  # rank 0's, verified on its sharded model
    assert len(two.metrics["losses"]) == 2  # the first step and the timed one
    # Liger's kernels on both sides, the batch split across ranks: the baseline's same-kernels cpu_tolerance
    assert two.metrics["losses"] == pytest.approx(one.metrics["losses"], rel=cpu_tolerance("eager").rel)


def test_more_gpus_than_the_machine_has_is_a_failed_record_before_anything_starts(monkeypatch, runs_root):
    from nbhelpers.measure import distributed, runner

    config = RunConfig(run_name="short", gpus=2, sharding="fsdp2")
    monkeypatch.setattr(distributed, "resolve_device", lambda device: "cuda")
    assert distributed.gpu_shortfall(config, cuda_devices=2) == ""
    assert distributed.gpu_shortfall(config.replace(gpus=1), cuda_devices=0) == ""
    why = distributed.gpu_shortfall(config, cuda_devices=1)
    assert why.startswith("gpus=2: this machine has 1 CUDA device(s)")
    monkeypatch.undo()  # the failed record describes this (CPU) machine
    monkeypatch.setattr(runner, "gpu_shortfall", lambda config: why)
    monkeypatch.setattr(runner, "launch_command", lambda *a, **k: pytest.fail("torchrun must not start"))
    record = runner.run_isolated(config)
    assert record.status == "failed" and record.reason == why


def test_kernel_checks_see_through_fsdp2_s_wrapper_class(monkeypatch):
    """fully_shard turns Qwen3ForCausalLM into torch's FSDPQwen3ForCausalLM: the Liger rope check (and a hybrid's
    path check) must still read the model's own modeling module (the 2-GPU suite's rehearsal caught this)."""
    import socket

    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    from nbhelpers.kernels.backends import apply_backend
    from nbhelpers.models.loading import build_model, modeling_module

    if dist.is_initialized():
        pytest.skip("a process group is already initialized in this process")
    model = build_model("qwen3-tiny", "sdpa", seed=0)
    modeling = modeling_module(model)
    assert modeling.__name__ == "transformers.models.qwen3.modeling_qwen3"
    monkeypatch.setattr(modeling, "apply_rotary_pos_emb", modeling.apply_rotary_pos_emb)  # restored afterwards
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # Liger on a CPU (LIGER_CPU_ENV)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        fully_shard(model)
        assert type(model).__module__.startswith("torch.distributed") and modeling_module(model) is modeling
        report = apply_backend(model, "liger", ("rope",), "cpu")  # raised "patch did not replace: rope" before
        assert report["rope"] is True
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_the_two_gpu_suite_rehearses_on_a_cpu(tmp_path):
    """``nbhelpers bench qwen3-8b/fsdp2-scaling/plain --rehearse``: its configurations at a CPU's sizes, end to end
    under torchrun (2 gloo ranks), records and manifest lines stored, before any GPU time is spent on it."""
    import json
    import subprocess
    import sys

    command = [sys.executable, "-m", "nbhelpers.bench", "qwen3-8b/fsdp2-scaling/plain", "--rehearse", "--out",
               str(tmp_path)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    folder = tmp_path / "qwen3-8b" / "fsdp2-scaling"
    plain = [json.loads(line) for line in (folder / "plain.jsonl").read_text().splitlines()]
    assert [r["status"] for r in plain] == ["ok"] * 2, [r.get("reason") for r in plain]
    assert [r["config"]["gpus"] for r in plain] == [1, 2] and plain[1]["metrics"]["world_size"] == 2
    assert plain[0]["config"]["model"] == "qwen3-tiny"
    manifest = [json.loads(line) for line in (folder / "manifest.jsonl").read_text().splitlines()]
    assert [m["record_id"] for m in manifest] == [r["record_id"] for r in plain]

"""The kernel doctor: the known-bad table's version ranges, the probe comparison against broken fake kernels,
absent paths reported as absent on a CPU, and the verdict as a record (the broken paths it skips: test_planning)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
import torch

from nbhelpers.kernels.attention import ATTENTION_TABLE
from nbhelpers.kernels.doctor import (
    ABSENT,
    BROKEN_PATH,
    DOCTOR_KIND,
    NOT_HERE,
    OK,
    REFERENCE,
    VERDICTS,
    FusedPath,
    broken_paths,
    check_path,
    describe_machine,
    doctor_table,
    fused_paths,
    installed_versions,
    run_doctor,
)
from nbhelpers.kernels.known_bad import BROKEN, KNOWN_BAD, SLOW, KnownBad, applies, matching, version_in
from nbhelpers.kernels.probes import FAIL, NOT_RUNNABLE, PASS, compare_kernels, rms_norm_reference
from nbhelpers.kernels.registry import ELEMENTARY_BACKENDS
from nbhelpers.measure.doctor_records import broken_here, doctor_record, latest_doctor
from nbhelpers.measure.store import RunRecord, RunStore
from nbhelpers.models.frozen_base import FROZEN_BASES

FLA_HOPPER = next(e for e in KNOWN_BAD if e.name == "fla-gated-backward-hopper-triton")
FLA_STACK = {"flash-linear-attention": "0.6.0", "triton": "3.6.0", "tilelang": None}


# ---------------------------------------------------------------------------------------------- known-bad table


@pytest.mark.parametrize(
    "changes, capability, expected",
    [
        ({}, (9, 0), True),  # the H200 seen: Triton 3.6, no tilelang
        ({"triton": "3.4.0"}, (9, 0), True),  # first broken version
        ({"triton": "3.7.0+git1a2b"}, (9, 0), True),  # a local label does not hide it
        ({"triton": "3.7.1"}, (9, 0), False),  # fixed
        ({"triton": "3.3.1"}, (9, 0), False),  # before the regression
        ({"tilelang": "0.1.15"}, (9, 0), False),  # fla routes the backward through tilelang
        ({}, (8, 0), False),  # Ampere is not affected
        ({}, None, False),  # no GPU at all
        ({"flash-linear-attention": None}, (9, 0), False),  # no fla, nothing to break
        ({"triton": "not-a-version"}, (9, 0), False),
    ],
)
def test_fla_hopper_entry_matches_its_version_range(changes, capability, expected):
    assert applies(FLA_HOPPER, FLA_STACK | changes, capability) is expected


def test_version_ranges_follow_pep_440():
    assert version_in("2.13.0+cpu", ">=2.9")
    assert not version_in("2.8.1", ">=2.9")
    assert version_in("3.7.0rc1", ">=3.4.0,<3.7.1")  # a nightly counts as what it is
    assert not version_in(None, ">=0")


def test_table_entries_are_complete_and_point_at_known_paths():
    paths = {p.path for p in fused_paths()}
    for entry in KNOWN_BAD:
        assert entry.path in paths, entry.name
        assert entry.source and entry.fix and entry.effect and entry.severity in (BROKEN, SLOW)
    assert "issues/640" in FLA_HOPPER.source and "tilelang" in FLA_HOPPER.fix
    assert matching(FLA_STACK, (9, 0), (FLA_HOPPER,)) == [FLA_HOPPER]
    assert matching(FLA_STACK, (8, 0), (FLA_HOPPER,)) == []


def test_a_bad_table_entry_is_refused_naming_what_is_wrong():
    with pytest.raises(ValueError, match="severity='fatal'"):
        KnownBad("x", "kernels fla", "e", "f", "s", severity="fatal")
    with pytest.raises(ValueError, match=r"versions\['triton'\]='>>3'"):
        KnownBad("x", "kernels fla", "e", "f", "s", versions={"triton": ">>3"})


# ---------------------------------------------------------------------------------------------- the probe comparison


class _WrongBackward(torch.autograd.Function):
    """RMSNorm whose forward is right and whose backward is scaled: caught only through the gradients."""

    @staticmethod
    def forward(ctx, x, weight):
        with torch.enable_grad():
            x_, w_ = x.detach().requires_grad_(), weight.detach().requires_grad_()
            out = rms_norm_reference(x_, w_)
        ctx.save_for_backward(x_, w_, out)
        return out.detach()

    @staticmethod
    def backward(ctx, grad):
        x_, w_, out = ctx.saved_tensors
        gx, gw = torch.autograd.grad(out, (x_, w_), grad)
        return gx * 1.01, gw


def _inputs():
    generator = torch.Generator().manual_seed(1)
    return [torch.randn(4, 32, generator=generator), torch.randn(32, generator=generator)]


def test_probe_passes_the_reference_against_itself():
    result = compare_kernels("rms", rms_norm_reference, rms_norm_reference, _inputs(), 1e-6, 1e-7)
    assert result.status == PASS and result.max_abs_diff == 0.0


def test_probe_catches_a_wrong_forward():
    def off(x, w):
        return rms_norm_reference(x, w, eps=0.5)  # a kernel that adds the wrong epsilon

    result = compare_kernels("rms", off, rms_norm_reference, _inputs(), 1e-4, 1e-5)
    assert result.status == FAIL and "output" in result.detail and result.max_abs_diff > 1e-3


def test_probe_catches_a_wrong_backward_with_a_right_forward():
    result = compare_kernels("rms", _WrongBackward.apply, rms_norm_reference, _inputs(), 1e-4, 1e-5)
    assert result.status == FAIL
    assert "gradient of input 0" in result.detail and "output" not in result.detail
    named = compare_kernels("rms", _WrongBackward.apply, rms_norm_reference, _inputs(), 1e-4, 1e-5,
                            input_names=("the activations",))  # fmt: skip
    assert "gradient of the activations" in named.detail and "input 0" not in named.detail


def test_probe_reports_a_kernel_that_raises_as_failed():
    def refuses(x, w):
        raise RuntimeError("Triton >= 3.4.0 and < 3.7.1 on Hopper GPUs produces incorrect results")

    result = compare_kernels("rms", refuses, rms_norm_reference, _inputs(), 1e-4, 1e-5)
    assert result.status == FAIL and "RuntimeError: Triton >= 3.4.0" in result.detail


def test_probe_refuses_a_negative_tolerance():
    with pytest.raises(ValueError, match="rtol=-1"):
        compare_kernels("rms", rms_norm_reference, rms_norm_reference, _inputs(), -1, 0)
    with pytest.raises(ValueError, match="norm_rtol=-0.1"):
        compare_kernels("rms", rms_norm_reference, rms_norm_reference, _inputs(), 0, 0, norm_rtol=-0.1)
    with pytest.raises(ValueError, match="more names than the 2 inputs"):
        compare_kernels("rms", rms_norm_reference, rms_norm_reference, _inputs(), 0, 0, input_names=("a", "b", "c"))


# ---------------------------------------------------------------------------------------------- verdicts on a CPU


def test_every_table_entry_is_a_doctor_path():
    paths = [p.path for p in fused_paths()]
    quantized = [f"frozen_base {b.name}" for b in FROZEN_BASES.values() if b.quantized]
    assert paths == [f"kernels {b.name}" for b in ELEMENTARY_BACKENDS] + [f"attention {a}" for a in ATTENTION_TABLE] + (
        quantized
    )
    assert quantized == ["frozen_base nf4", "frozen_base nf4_bf16", "frozen_base float8"]


def test_doctor_on_a_cpu_reports_absent_packages_as_absent_never_as_errors(monkeypatch):
    versions = installed_versions() | {"flash-linear-attention": None, "flash-attn": None}
    monkeypatch.setattr("nbhelpers.kernels.doctor.installed_versions", lambda: versions)
    report = run_doctor("cpu", run_probes=False)
    verdicts = {p.path: p for p in report.paths}
    assert {p.verdict for p in report.paths} <= set(VERDICTS)
    assert verdicts["kernels fla"].verdict == ABSENT
    assert "not installed: flash-linear-attention" in verdicts["kernels fla"].reason
    assert verdicts["attention flash_attention_2"].verdict == ABSENT
    assert verdicts["kernels eager"].verdict == REFERENCE and verdicts["attention eager"].verdict == REFERENCE
    assert verdicts["attention torch_varlen"].verdict == NOT_HERE  # needs a CUDA GPU
    assert report.gpu["name"] is None and "no CUDA GPU" in describe_machine(report)
    assert not broken_paths(report) and not broken_paths(doctor_record(report).metrics)


def test_runnable_probes_run_on_a_cpu_and_liger_is_not_runnable_here():
    versions = installed_versions()
    paths = {p.path: p for p in fused_paths()}
    sdpa = check_path(paths["attention sdpa"], "cpu", versions, [])
    assert (sdpa.verdict, sdpa.probes[0]["status"]) == (OK, PASS)
    if versions["liger-kernel"] is not None:
        liger = check_path(paths["kernels liger"], "cpu", versions, [])
        assert liger.verdict == NOT_HERE and liger.probes[0]["status"] == NOT_RUNNABLE
        assert "no CUDA GPU" in liger.reason


def _fake_path(kernel, probe_name="fake rms_norm"):
    def probe(device):
        return [compare_kernels(probe_name, kernel, rms_norm_reference, _inputs(), 1e-4, 1e-5)]

    return FusedPath("kernels fake", (), (), lambda device: "", probe)


def test_a_fake_broken_kernel_is_caught_and_marked_broken():
    verdict = check_path(_fake_path(_WrongBackward.apply), "cpu", {}, [])
    assert verdict.verdict == BROKEN_PATH and verdict.correct.startswith("fail")
    assert "probe failed: fake rms_norm: outside rtol" in verdict.reason
    assert check_path(_fake_path(rms_norm_reference), "cpu", {}, []).verdict == OK


def test_a_probe_that_crashes_while_setting_up_is_a_failed_probe():
    def probe(device):
        raise ImportError("undefined symbol in the extension")

    verdict = check_path(FusedPath("kernels fake", (), (), lambda d: "", probe), "cpu", {}, [])
    assert verdict.verdict == BROKEN_PATH and "ImportError: undefined symbol" in verdict.reason


def test_a_known_bad_combination_marks_the_path_broken_with_its_fix_and_a_slow_one_only_notes():
    path = FusedPath("kernels fla", ("flash-linear-attention", "triton"), ("tilelang",), lambda d: "", None)
    slow = KnownBad("slow-one", "kernels fla", "slower", "do this", "NOTES.md", severity=SLOW)
    verdict = check_path(path, "cuda", FLA_STACK, [FLA_HOPPER, slow])
    assert verdict.verdict == BROKEN_PATH
    assert "pip install tilelang" in verdict.reason and "issues/640" in verdict.reason
    assert verdict.compatible == "known bad: fla-gated-backward-hopper-triton"
    only_slow = check_path(path, "cuda", FLA_STACK, [slow])
    assert only_slow.verdict == REFERENCE and only_slow.notes == ["slow-one: slower; fix: do this (source: NOTES.md)"]


# ---------------------------------------------------------------------------------------------- record and skipping


def test_the_verdict_is_a_doctor_record_that_round_trips_through_the_store(runs_root, monkeypatch):
    report = run_doctor("cpu", run_probes=False)
    report.paths.append(check_path(_fake_path(_WrongBackward.apply), "cpu", {}, []))
    store = RunStore.for_run("doc")
    store.append(doctor_record(report, "doc", notebook="test"))
    record = latest_doctor(store.load(), hostname=socket.gethostname())
    assert record is not None and record.kind == DOCTOR_KIND and record.config["run_name"] == "doc"
    assert list(broken_paths(record.metrics)) == ["kernels fake"] == list(broken_paths(report))
    assert broken_here(store.load()) == broken_paths(record.metrics)
    later = {"record_id": "other", "environment": {"hostname": "gpu-9"}, "created_at": "2999-01-01T00:00:00+00:00"}
    elsewhere = RunRecord.from_dict(record.to_dict() | later)
    store.append(elsewhere)  # a newer verdict of another machine does not speak for this one
    assert latest_doctor(store.load()).record_id == "other"
    assert latest_doctor(store.load(), hostname="another-host") is None
    assert broken_here(store.load()) == broken_paths(record.metrics)
    table = doctor_table(record.metrics)
    assert list(table.columns) == ["path", "installed", "compatible", "correct", "verdict", "reason", "notes"]
    assert table.set_index("path").loc["kernels fake", "verdict"] == BROKEN_PATH


@pytest.mark.slow
def test_a_real_fused_kernel_passes_its_probe_under_tritons_cpu_interpreter():
    # A subprocess: TRITON_INTERPRET must be set before Triton loads. About 5 s on 2 cores.
    pytest.importorskip("liger_kernel")
    code = (
        "import torch\n"
        "from liger_kernel.transformers import functional as liger\n"
        "from nbhelpers.kernels.probes import compare_kernels, cross_entropy_reference\n"
        "g = torch.Generator().manual_seed(0)\n"
        "logits, labels = torch.randn(16, 64, generator=g), torch.randint(0, 64, (16,), generator=g)\n"
        "labels[:3] = -100\n"
        "print(compare_kernels('cross_entropy', liger.liger_cross_entropy, cross_entropy_reference,\n"
        "                      [logits, labels], 1e-4, 1e-5).status)\n"
    )
    env = os.environ | {"TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == PASS


def test_doctor_json_stays_parseable_when_a_kernel_library_prints(monkeypatch, capfd):
    """tilelang logs its compiles to stdout (seen on the H200): --json moves all of it to stderr."""
    import json

    from nbhelpers import cli
    from nbhelpers.kernels import doctor

    real = doctor.run_doctor

    def noisy(*args, **kwargs):
        print("compile log from Python")
        os.write(1, b"compile log from native code\n")
        return real(*args, **kwargs)

    monkeypatch.setattr(doctor, "run_doctor", noisy)
    assert cli.main(["doctor", "--json", "--no-probes", "--device", "cpu"]) == 0
    out, err = capfd.readouterr()
    assert json.loads(out)["kind"] == "doctor"
    assert "compile log from Python" in err and "compile log from native code" in err


def test_the_terminal_verdict_fits_100_columns_and_ends_with_its_verdict():
    from nbhelpers.kernels.doctor import doctor_text

    report = run_doctor("cpu", run_probes=False)
    clean = doctor_text(report)
    assert clean.splitlines()[-1] == "verdict: nothing broken"
    report.paths.append(check_path(_fake_path(_WrongBackward.apply), "cpu", {}, []))
    slow = KnownBad("slow-one", "kernels fake", "slower " * 30, "do this", "NOTES.md", severity=SLOW)
    report.paths[-1].notes.append(f"{slow.name}: {slow.effect}")
    text = doctor_text(report)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 100, max(lines, key=len)
    assert lines[-1] == "verdict: 1 broken (kernels fake)"
    assert lines[-2].startswith("paths: 1 broken,") and lines[-2].endswith(f"(of {len(report.paths)})")
    assert any(line.startswith("kernels fake") and BROKEN_PATH in line for line in lines)
    assert sum(line.lstrip().startswith("note: slow-one") for line in lines) == 1


def test_the_doctor_checks_bitsandbytes_and_the_quantized_frozen_bases_on_a_cpu():
    versions = installed_versions()
    assert "bitsandbytes" in versions
    paths = {p.path: p for p in fused_paths()}
    float8 = check_path(paths["frozen_base float8"], "cpu", versions, [])
    assert float8.verdict == NOT_HERE and "compute capability 8.9" in float8.reason
    absent = check_path(paths["frozen_base nf4"], "cpu", versions | {"bitsandbytes": None}, [])
    assert absent.verdict == ABSENT and "not installed: bitsandbytes" in absent.reason
    if versions["bitsandbytes"] is None:
        return
    nf4 = check_path(paths["frozen_base nf4"], "cpu", versions, [])  # bitsandbytes' CPU backend runs NF4
    assert (nf4.verdict, nf4.probes[0]["status"]) == (OK, PASS), nf4.reason
    assert 0 < nf4.probes[0]["max_abs_diff"] <= FROZEN_BASES["nf4"].parity_rtol

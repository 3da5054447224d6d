"""The fakegpu CLI: show, profiles, mig, inject, heal, reset, and its errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import fakegpu
from fakegpu.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_show_fresh_machine_without_state_dir(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "show", "--profile", "dgx-h100")
    assert code == 0
    assert out.count("NVIDIA H100 80GB HBM3") == 8
    assert "(not saved)" in out


def test_show_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "show", "--profile", "mixed", "--json", "--node-name", "n7")
    snap = json.loads(out)
    assert code == 0
    assert snap["node_name"] == "n7"
    assert [g["model"] for g in snap["gpus"]] == ["h100-80gb", "h100-80gb", "a100-40gb", "l4", "l4", "t4"]


def test_profiles_lists_shipped(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "profiles")
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()] == fakegpu.available_profiles()


def test_change_a_machine(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    d = str(tmp_path)
    assert run(capsys, "--state-dir", d, "show", "--profile", "dgx-a100-80gb")[0] == 0
    assert run(capsys, "--state-dir", d, "mig", "enable", "0")[1] == "GPU 0: MIG enabled\n"
    assert (
        run(capsys, "--state-dir", d, "mig", "create", "0", "3g.40gb")[1] == "GPU 0: created GPU instance 2\n"
    )
    assert (
        run(
            capsys, "--state-dir", d, "mig", "create", "0", "19", "--placement", "0", "--no-compute-instance"
        )[0]
        == 0
    )
    _, out, _ = run(capsys, "--state-dir", d, "show")
    assert "GI  2 3g.40gb" in out and "GI  7 1g.10gb" in out and "no compute instance" in out
    assert run(capsys, "--state-dir", d, "mig", "destroy", "0", "7")[0] == 0
    assert run(capsys, "--state-dir", d, "inject", "xid", "1", "48")[1] == "GPU 1: XID 48 raised (event 1)\n"
    assert run(capsys, "--state-dir", d, "inject", "ecc", "1", "double", "--count", "3")[0] == 0
    uuid = fakegpu.FakeMachine.attach(d).state.gpus[2].uuid
    assert run(capsys, "--state-dir", d, "inject", "lost", uuid)[0] == 0
    snap = json.loads(run(capsys, "--state-dir", d, "show", "--json")[1])
    assert snap["gpus"][2]["lost"] and snap["gpus"][1]["ecc"]["volatile"]["double"] == 3
    assert [e["data"] for e in snap["events"]] == [48, 0, 79]
    assert run(capsys, "--state-dir", d, "heal", "2")[0] == 0
    assert run(capsys, "--state-dir", d, "mig", "clear")[0] == 0
    assert run(capsys, "--state-dir", d, "mig", "disable", "0")[0] == 0
    assert run(capsys, "--state-dir", d, "reset")[1] == "reset every GPU\n"
    snap = json.loads(run(capsys, "--state-dir", d, "show", "--json")[1])
    assert not snap["gpus"][2]["lost"]
    assert snap["gpus"][0]["mig"]["gpu_instances"] == []


def test_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FAKEGPU_STATE_DIR", raising=False)
    code, _, err = run(capsys, "inject", "xid", "0", "48")
    assert code == 2 and "needs --state-dir" in err
    code, _, err = run(capsys, "show", "--profile", "dgx-h300")
    assert code == 1 and "available: dgx-a100-40gb" in err
    code, _, err = run(capsys, "--state-dir", str(tmp_path), "heal", "0")
    assert code == 1 and "no fake machine in" in err
    run(capsys, "--state-dir", str(tmp_path), "show", "--profile", "l4x4")
    code, _, err = run(capsys, "--state-dir", str(tmp_path), "heal", "9")
    assert code == 1 and "no GPU 9" in err
    code, _, err = run(capsys, "--state-dir", str(tmp_path), "mig", "enable", "0")
    assert code == 1 and "does not support MIG" in err
    code, _, err = run(capsys, "--state-dir", str(tmp_path), "inject", "xid", "0", "-1")
    assert code == 2 and "non-negative integer" in err
    code, _, err = run(capsys, "--state-dir", str(tmp_path), "inject", "ecc", "0", "single", "--count", "0")
    assert code == 2 and "count is an integer >= 1" in err


def test_python_dash_m_and_console_script(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "fakegpu", "show", "--profile", "t4"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "Tesla T4" in out
    script = Path(sys.executable).parent / "fakegpu"
    if script.exists():
        out = subprocess.run([str(script), "profiles"], capture_output=True, text=True, check=True).stdout
        assert "dgx-h200" in out


def test_mig_mode_change_that_waits_for_reset(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    d = str(tmp_path)
    profile = tmp_path / "needs-reset.yaml"
    profile.write_text("name: nr\ngpus:\n  - {model: h100-80gb, needs_reset: true}\n  - {model: h100-80gb}\n")
    assert run(capsys, "--state-dir", d, "show", "--profile", str(profile))[0] == 0
    out = run(capsys, "--state-dir", d, "mig", "enable", "0")[1]
    assert out == (
        "GPU 0: MIG enabled (pending: this GPU needs a reset for every MIG change; "
        "`fakegpu reset` applies it)\n"
    )
    assert "MIG off (pending on)" in run(capsys, "--state-dir", d, "show")[1]
    run(capsys, "--state-dir", d, "mig", "enable", "1")
    run(capsys, "--state-dir", d, "mig", "create", "1", "7g.80gb")
    out = run(capsys, "--state-dir", d, "mig", "disable", "1")[1]
    assert out == "GPU 1: MIG disabled (pending: the GPU has MIG instances; `fakegpu reset` applies it)\n"
    assert run(capsys, "--state-dir", d, "reset")[0] == 0
    snap = json.loads(run(capsys, "--state-dir", d, "show", "--json")[1])
    assert [(g["mig"]["current"], g["mig"]["pending"]) for g in snap["gpus"]] == [(1, 1), (0, 0)]

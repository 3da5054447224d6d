"""What the local tier says about a driver that exits at start: its binary, the cause read from its
log and its first log lines (of this start only)."""

from __future__ import annotations

import time
from pathlib import Path

from clusters.local.driverproc import early_exit_message
from clusters.local.processes import ManagedProcess


def test_the_message_names_the_binary_the_cause_and_quotes_the_first_lines() -> None:
    head = 'I1205 starting\npanic: could not parse "unknown" as version\n\ngoroutine 1 [running]:'
    message = early_exit_message(
        "node-0", ["env", "NODE_NAME=node-0", "/x/gpu-kubelet-plugin", "-v"], 2, 0.4, head
    )
    first, *quoted = message.splitlines()
    assert first == (
        "the driver on node-0 (/x/gpu-kubelet-plugin) exited with status 2 0.4 s after its start, before it "
        'registered: panic: could not parse "unknown" as version'
    )
    assert quoted == [
        "its first log lines:",
        "  | I1205 starting",
        '  | panic: could not parse "unknown" as version',
        "  | goroutine 1 [running]:",
    ]


def test_without_a_recognised_cause_the_last_line_is_the_cause() -> None:
    message = early_exit_message("n", ["/bin/drv"], -9, 1.0, "loading\nout of luck")
    assert (
        "(/bin/drv) was killed by SIGKILL 1.0 s after its start, before it registered: out of luck" in message
    )
    assert early_exit_message("n", ["/bin/drv"], 1, 1.0, "").endswith(
        "it wrote nothing\nits first log lines:\n  | (nothing)"
    )


def test_a_cli_error_and_an_exec_failure_are_causes() -> None:
    assert (
        early_exit_message("n", ["d"], 1, 0, "I0 a\nError: invalid CLI flags: x\nI0 shutdown")
        .split("\n")[0]
        .endswith("Error: invalid CLI flags: x")
    )
    exec_failed = "setpriv: failed to execute /x/drv: Permission denied"
    assert early_exit_message("n", ["d"], 127, 0, exec_failed).split("\n")[0].endswith(exec_failed)


def test_head_reads_this_start_of_the_process_only(tmp_path: Path) -> None:
    proc = ManagedProcess("p", ["sh", "-c", "echo first run"], tmp_path / "p.log")
    proc.start()
    _wait_exit(proc)
    proc.argv = ["sh", "-c", "echo second run; echo more"]
    proc.start()
    _wait_exit(proc)
    assert proc.head(5) == "second run\nmore"
    assert proc.head(1) == "second run"


def test_a_port_taken_is_read_from_this_start_only(tmp_path: Path) -> None:
    taken = "echo 'bind: address already in use'; exit 1"
    proc = ManagedProcess("p", ["sh", "-c", taken], tmp_path / "p.log")
    proc.start()
    _wait_exit(proc)
    assert proc.lost_its_port()
    assert proc.this_start(5) == "bind: address already in use"
    proc.argv = ["sh", "-c", "echo 'some other failure'; exit 1"]
    proc.start()
    _wait_exit(proc)
    assert not proc.lost_its_port()  # the first start's line is history


def _wait_exit(proc: ManagedProcess) -> None:
    deadline = time.monotonic() + 10
    while proc.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not proc.alive()

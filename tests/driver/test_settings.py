"""Settings: flags, env vars, defaults, precedence, errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from driver.errors import SettingsError
from driver.faults import DEFAULT_IGNORED_XIDS
from driver.settings import build_parser, device_classes_driver_name, from_args


def test_defaults() -> None:
    s = from_args(["--node-name", "n1"], {})
    assert s.driver_name == "gpu.dra-conformance.io"
    assert s.kubelet.registry_dir == Path("/var/lib/kubelet/plugins_registry")
    assert s.kubelet.plugin_dir == Path("/var/lib/kubelet/plugins/gpu.dra-conformance.io")
    assert s.kubelet.cdi_dir == Path("/var/run/cdi")
    assert s.backend.kind == "nvml" and s.backend.device_kinds == {"gpu"}
    assert s.health.enabled and s.health.ignored_xids == DEFAULT_IGNORED_XIDS
    assert s.log_format == "text" and not s.keep_slices and s.break_rules == frozenset()
    assert s.kubeconfig is None
    assert s.registration_socket == Path("/var/lib/kubelet/plugins_registry/gpu.dra-conformance.io-reg.sock")
    assert s.dra_socket == Path("/var/lib/kubelet/plugins/gpu.dra-conformance.io/dra.sock")
    assert s.pool_name == "n1"


def test_plugin_dir_follows_the_driver_name() -> None:
    s = from_args(["--node-name", "n", "--driver-name", "x.example.com"], {})
    assert s.kubelet.plugin_dir == Path("/var/lib/kubelet/plugins/x.example.com")


def test_env_vars_and_fallbacks() -> None:
    env = {
        "NODE_NAME": "from-node-name",
        "KUBECONFIG": "/k",
        "DRA_GPU_BACKEND": "fake",
        "DRA_GPU_FAKE_PROFILE": "dgx-h100",
        "DRA_GPU_FAKE_STATE_DIR": "/state",
        "DRA_GPU_DEVICE_KINDS": "gpu, partitionable-mig",
        "DRA_GPU_HEALTH": "false",
        "DRA_GPU_IGNORED_XIDS": "13,31",
        "DRA_GPU_LOG_FORMAT": "json",
        "DRA_GPU_KEEP_SLICES": "true",
        "DRA_GPU_CDI_DIR": "/cdi",
        "DRA_GPU_TESTING_BREAK_RULES": "no-health,ignore-config",
    }
    s = from_args([], env)
    assert s.node_name == "from-node-name" and s.kubeconfig == Path("/k")
    assert s.backend.kind == "fake" and s.backend.fake_profile == "dgx-h100"
    assert s.backend.fake_state_dir == Path("/state")
    assert s.backend.device_kinds == {"gpu", "partitionable-mig"}
    assert not s.health.enabled and s.health.ignored_xids == {13, 31}
    assert s.log_format == "json" and s.keep_slices and s.kubelet.cdi_dir == Path("/cdi")
    assert s.breaks("no-health") and s.breaks("ignore-config") and not s.breaks("oversized-slice")


def test_gpu_sharing_is_exclusive_unless_turned_on() -> None:
    s = from_args(["--node-name", "n"], {})
    assert s.backend.gpu_sharing == "exclusive" and s.backend.consumable_gpus is None
    s = from_args(["--node-name", "n", "--gpu-sharing", "consumable"], {})
    assert s.backend.gpu_sharing == "consumable" and s.backend.consumable_gpus is None  # every GPU
    env = {"DRA_GPU_GPU_SHARING": "consumable", "DRA_GPU_CONSUMABLE_GPUS": "0, 4-6"}
    s = from_args(["--node-name", "n"], env)
    assert s.backend.gpu_sharing == "consumable" and s.backend.consumable_gpus == frozenset({0, 4, 5, 6})
    s = from_args(["--node-name", "n", "--consumable-gpus", "7"], env)
    assert s.backend.consumable_gpus == frozenset({7})


def test_empty_env_vars_count_as_unset() -> None:
    names = [
        "DRA_GPU_HEALTH",
        "DRA_GPU_KEEP_SLICES",
        "DRA_GPU_BACKEND",
        "DRA_GPU_IGNORED_XIDS",
        "DRA_GPU_LOG_FORMAT",
    ]
    s = from_args(["--node-name", "n"], dict.fromkeys(names, ""))
    assert s.health.enabled and not s.keep_slices and s.backend.kind == "nvml"
    assert s.health.ignored_xids == DEFAULT_IGNORED_XIDS and s.log_format == "text"


def test_fake_machine_falls_back_to_fakegpus_env_vars() -> None:
    env = {"FAKEGPU_PROFILE": "l4x4", "FAKEGPU_STATE_DIR": "/fg"}
    s = from_args(["--node-name", "n", "--backend", "fake"], env)
    assert s.backend.fake_profile == "l4x4" and s.backend.fake_state_dir == Path("/fg")
    s = from_args(["--node-name", "n", "--fake-profile", "t4"], {**env, "DRA_GPU_FAKE_STATE_DIR": "/d"})
    assert s.backend.fake_profile == "t4" and s.backend.fake_state_dir == Path("/d")


def test_flags_win_over_env() -> None:
    env = {"DRA_GPU_NODE_NAME": "env", "NODE_NAME": "other", "DRA_GPU_HEALTH": "false",
           "DRA_GPU_TESTING_BREAK_RULES": "no-health"}  # fmt: skip
    s = from_args(["--node-name", "flag", "--health", "--testing-break-rule", "oversized-slice"], env)
    assert s.node_name == "flag" and s.health.enabled
    assert s.break_rules == {"oversized-slice"}
    assert from_args([], env).node_name == "env"
    assert not from_args(["--no-health"], {"NODE_NAME": "n"}).health.enabled


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        ([], {}, "no node name"),
        (["--node-name", "n", "--device-kinds", "gpu,tpu"], {}, "tpu"),
        (["--node-name", "n", "--ignored-xids", "a,b"], {}, "--ignored-xids"),
        (["--node-name", "n"], {"DRA_GPU_BACKEND": "cuda"}, "DRA_GPU_BACKEND"),
        (["--node-name", "n"], {"DRA_GPU_HEALTH": "maybe"}, "DRA_GPU_HEALTH"),
        (["--node-name", "n", "--testing-break-rule", "everything"], {}, "everything"),
        (["--node-name", "n"], {"DRA_GPU_GPU_SHARING": "timeslice"}, "DRA_GPU_GPU_SHARING"),
        (["--node-name", "n", "--consumable-gpus", "4-7"], {}, "only with --gpu-sharing consumable"),
        (["--node-name", "n", "--gpu-sharing", "consumable", "--consumable-gpus", "a"], {}, "'a' is not"),
        (["--node-name", "n", "--gpu-sharing", "consumable", "--consumable-gpus", "7-4"], {}, "'7-4'"),
        (["--node-name", "n", "--gpu-sharing", "consumable", "--consumable-gpus", ","], {}, "names no GPU"),
    ],
)
def test_bad_values(argv: list[str], env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        from_args(argv, env)


def test_help_explains_every_flag_and_its_env_var() -> None:
    text = build_parser().format_help()
    flags = [
        "--driver-name",
        "--node-name",
        "--kubeconfig",
        "--registry-dir",
        "--plugin-dir",
        "--cdi-dir",
        "--backend",
        "--fake-profile",
        "--fake-state-dir",
        "--device-kinds",
        "--gpu-sharing",
        "--consumable-gpus",
        "--health",
        "--log-format",
        "--keep-slices",
        "--testing-break-rule",
    ]
    for flag in flags:
        assert flag in text
        env = "DRA_GPU_" + flag[2:].replace("-", "_").upper()
        assert env in text.replace("\n", " ").replace(" ", "") or flag == "--testing-break-rule"
    assert "device-classes" in text
    assert "FOR TESTING" in text


def test_unknown_rule_query_is_a_bug() -> None:
    with pytest.raises(ValueError, match="unknown break rule"):
        from_args(["--node-name", "n"], {}).breaks("no-such-rule")


def test_device_classes_reads_the_driver_name_like_the_driver() -> None:
    assert device_classes_driver_name([], {}) == "gpu.dra-conformance.io"
    assert device_classes_driver_name([], {"DRA_GPU_DRIVER_NAME": "gpu.env.io"}) == "gpu.env.io"
    flag = ["--driver-name", "gpu.flag.io"]
    assert device_classes_driver_name(flag, {"DRA_GPU_DRIVER_NAME": "gpu.env.io"}) == "gpu.flag.io"


def test_a_pod_uid_names_the_sockets_of_one_instance() -> None:
    uid = "83d265d9-95eb-4dc4-88aa-932cebd84ff5"
    s = from_args(["--node-name", "n", "--pod-uid", uid, "--registry-dir", "/r", "--plugin-dir", "/p"], {})
    assert s.registration_socket == Path("/r/gpu.dra-conformance.io-83d265d995eb-reg.sock")
    assert s.dra_socket == Path("/p/dra-83d265d995eb.sock")
    alone = from_args(["--node-name", "n", "--registry-dir", "/r", "--plugin-dir", "/p"], {})
    assert alone.registration_socket == Path("/r/gpu.dra-conformance.io-reg.sock")
    assert alone.dra_socket == Path("/p/dra.sock")
    assert from_args(["--node-name", "n"], {"DRA_GPU_POD_UID": uid}).pod_uid == uid
    with pytest.raises(SettingsError, match="not a pod UID"):
        from_args(["--node-name", "n", "--pod-uid", "../../etc"], {})

"""Driver profiles: the shipped ones load; a bad one is refused naming file, field, value, what is allowed."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from conformance import manifests
from conformance.config import SuiteConfig
from conformance.errors import ProfileError, UsageError
from conformance.profiles import SHIPPED_DIR, TestPods, load, parse, shipped

README = SHIPPED_DIR / "README.md"


def _good() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((SHIPPED_DIR / "reference-gpu.yaml").read_text())
    return data


def test_shipped_profiles_load() -> None:
    assert shipped() == [
        "example-cpu",
        "example-gpu",
        "example-net",
        "nvidia-gpu",
        "nvidia-gpu-local",
        "nvidia-gpu-local-mig",
        "reference-gpu",
        "reference-l4",
        "reference-mig",
        "reference-mixed",
    ]
    for name in shipped():
        profile = load(name)
        assert profile.name == name
        if name == "nvidia-gpu":  # real nodes only: no local command, commands for external clusters
            assert profile.local is None and set(profile.external.given()) == {
                "restartDriver",
                "restartKubelet",
                "cdiSpecs",
            }
        else:
            assert profile.local is not None and "{node}" in profile.local.command
        assert profile.devices.in_class <= profile.devices.per_node


def test_nvidia_gpu_local_runs_the_binary_you_bring_on_fake_nvml(tmp_path: Path) -> None:
    """nvidia-gpu-local: fake NVML nodes; the run refuses without --driver-bin, names a bad one,
    and puts a good one where {driver_bin} stands."""
    from conformance import SuiteConfig
    from conformance.errors import UsageError

    profile = load("nvidia-gpu-local")
    assert profile.local is not None and profile.local.nvml == "fake"
    assert "{driver_root}" in profile.local.command and "{driver_bin}" in profile.local.command
    config = SuiteConfig.build("nvidia-gpu-local")
    assert config.fake_nvml == "dgx-h100"
    with pytest.raises(UsageError, match="--driver-bin PATH"):
        config.start_command  # noqa: B018
    bad = tmp_path / "plugin"
    bad.write_text("")
    with pytest.raises(UsageError, match="not an executable file"):
        SuiteConfig.build("nvidia-gpu-local", driver_bin=bad).start_command  # noqa: B018
    bad.chmod(0o755)
    filled = SuiteConfig.build("nvidia-gpu-local", driver_bin=bad).start_command
    assert filled.startswith(f"env NODE_NAME={{node}} {bad.resolve()} --node-name")
    assert SuiteConfig.build("reference-gpu").fake_nvml is None


def test_local_nvml_takes_fake_or_none() -> None:
    data = _good()
    data["local"]["nvml"] = "real"
    with pytest.raises(ProfileError, match=r"local.nvml: 'real' is not valid; expected fake"):
        parse(data, "x.yaml")


def test_readme_lists_every_shipped_profile_and_its_example_validates() -> None:
    text = README.read_text()
    for name in shipped():
        assert f"`{name}`" in text, f"{name} is not in {README}"
    block = re.search(r"```yaml\n(.*?)```", text, re.S)
    assert block is not None
    example = yaml.safe_load(block.group(1))
    profile = parse(example, "README example")
    assert profile.devices.select is not None and profile.known_failures
    assert profile.install is not None and profile.install.pods_container == "plugin"


def test_mig_profile_reads_its_class_file_next_to_it() -> None:
    profile = load("reference-mig")
    assert profile.device_classes.file == SHIPPED_DIR / "reference-mig-classes.yaml"
    assert profile.device_classes.default == "mig-1g.dra-conformance.io"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"name": "Bad Name"}, r"name: 'Bad Name' is not valid; expected lower-case letters"),
        ({"driver": "-bad-"}, r"driver: '-bad-' is not valid; expected a DNS subdomain"),
        ({"capabilities": ["teleport"]}, r"capabilities: 'teleport' is not valid; expected one of v1beta1"),
        ({"colour": "red"}, r"unknown field 'colour'; the fields here are name, description"),
        ({"knownFailures": {"REG-NOPE": "x"}}, r"knownFailures: 'REG-NOPE' is not valid; expected a rule id"),
        ({"knownFailures": {"REG-FUZZ": ""}}, r"knownFailures.REG-FUZZ: '' is not valid; expected a reason"),
        ({"idempotentPrepares": 1}, r"idempotentPrepares: 1 is not valid; expected at least 2"),
        (
            {"external": {"reboot": "x"}},
            r"external: unknown field 'reboot'; the fields here are restartDriver",
        ),
        (
            {"external": {"restartDriver": "x {root}"}},
            r"external.restartDriver: 'x \{root\}' is not valid; expected placeholders among \{node\}",
        ),
        ({"external": {"cdiSpecs": "x {mode}"}}, r"external.cdiSpecs: 'x \{mode\}' is not valid"),
        (
            {"external": {"probeAddress": "where {mode}"}},
            r"external.probeAddress: 'where \{mode\}' is not valid; expected placeholders among \{node\}, "
            r"\{kubeconfig\}, \{driver\}; \{mode\} is not one",
        ),
        (
            {"external": {"probeNamespace": "Probe_NS"}},
            r"external.probeNamespace: 'Probe_NS' is not valid; expected a namespace name",
        ),
        (
            {"external": {"probeAddress": "where {node}", "probeNamespace": "dra-probe"}},
            r"external.probeNamespace: 'dra-probe' is not valid; expected no probeNamespace beside "
            r"probeAddress",
        ),
        (
            {"external": {"restartKubelet": "'open"}},
            r"external.restartKubelet: \"'open\" is not valid; expected shell",
        ),
        ({"timeouts": {"pod": 0}}, r"timeouts.pod: 0 is not valid; expected a number of at least 1"),
        (
            {"checkpoint": {"path": "{home}/checkpoint.json", "log": "corrupt"}},
            r"checkpoint.path: '\{home\}/checkpoint.json' is not valid; expected placeholders among \{root\}",
        ),
        (
            {"checkpoint": {"path": "/c.json"}},
            r"checkpoint.setAside: None is not valid; expected setAside or log",
        ),
        ({"checkpoint": {"path": "/c.json", "setAside": "old/c.json"}}, r"checkpoint.setAside: 'old/c.json'"),
        (
            {"checkpoint": {"path": "/c.json", "log": "("}},
            r"checkpoint.log: '\(' is not valid; expected a regular",
        ),
        ({"container": {"env": "("}}, r"container.env: '\(' is not valid; expected a regular expression"),
        (
            {"container": {"deviceNodes": {"path": "^/dev/nvidia[0-9]+$", "device": "gpu-{value}"}}},
            r"container.deviceNodes.path: '\^/dev/nvidia\[0-9\]\+\$' is not valid; expected a regular "
            r"expression with a group \(\?P<value>...\) around the part that names the device, e\.g\. "
            r"\^/dev/nvidia\(\?P<value>\[0-9\]\+\)\$$",
        ),
        (
            {"container": {"mounts": {"containerPath": "(?P<value>", "device": "{value}"}}},
            r"container.mounts.containerPath: '\(\?P<value>' is not valid; expected a regular expression "
            r"\(missing \), unterminated subpattern",
        ),
        (
            {"container": {"deviceNodes": {"path": "^/dev/nvidia(?P<value>[0-9]+)$", "attribute": "minor"}}},
            r"container.deviceNodes.attribute: 'minor' is not valid; expected an attribute the profile lists "
            r"\(type, productName, index, cudaComputeCapability, driverVersion\): add it to "
            r"devices.attributes with its type, or name the device with device: '\{value\}'$",
        ),
        (
            {"container": {"netDevices": {"name": "^(?P<value>net[0-9])$"}}},
            r"container.netDevices: \{'name': .*\} is not valid; expected attribute \(the device attribute "
            r"the value equals\) or device \(the device name, \{value\} standing for the value: "
            r"gpu-\{value\}\), one of them$",
        ),
        (
            {
                "container": {
                    "cdiDevices": {"id": "=(?P<value>.+)$", "attribute": "index", "device": "{value}"}
                }
            },
            r"container.cdiDevices: .* is not valid; expected attribute .*, one of them$",
        ),
        (
            {"container": {"netDevices": {"name": "(?P<value>a)", "hostInterfaceName": "(?P<value>b)"}}},
            r"container.netDevices: .* is not valid; expected one pattern, in name or hostInterfaceName, "
            r"not both \(e.g. name: '\^net\(\?P<value>\[0-9\]\+\)\$'\)$",
        ),
        (
            {"container": {"deviceNodes": {"attribute": "index"}}},
            r"container.deviceNodes: \{'attribute': 'index'\} is not valid; expected one pattern, in path "
            r"\(e.g. path: .*\)$",
        ),
        (
            {"container": {"deviceNodes": {"path": "(?P<value>[0-9]+)$", "device": "gpu-{minor}"}}},
            r"container.deviceNodes.device: 'gpu-\{minor\}' is not valid; expected the device name with "
            r"\{value\} where the value goes \(gpu-\{value\}, \{value\}\)$",
        ),
        (
            {"container": {"mounts": {"hostPath": "(?P<value>.+)", "device": "{value}"}}},
            r"container.mounts: unknown field 'hostPath'; the fields here are containerPath, attribute, "
            r"device$",
        ),
        (
            {"container": {"cdiDevices": "k8s.gpu/*"}},
            r"container.cdiDevices: 'k8s.gpu/\*' is not valid; expected a mapping$",
        ),
        (
            {"container": {"capacityEnv": {"memory": "GPU MEMORY"}}},
            r"container.capacityEnv.memory: 'GPU MEMORY' is not valid; expected an env var name",
        ),
        (
            {"faults": {"kinds": ["lost 0"], "healable": ["ecc 0 double"]}},
            r"faults.healable: 'ecc 0 double' is not valid; expected one of kinds \('lost 0'\)",
        ),
        (
            {"faults": {"inject": "tool {nope}"}},
            r"faults.inject: 'tool \{nope\}' is not valid; expected placeholders among \{node\}, .*; "
            r"\{nope\} is not one",
        ),
        ({"faults": {"heal": "tool heal {fault}"}}, r"faults.heal: .*; \{fault\} is not one"),
        (
            {"pods": {"image": "busy box"}},
            r"pods.image: 'busy box' is not valid; expected an image reference",
        ),
        ({"pods": {"imagePullSecrets": ["Reg_Cred"]}}, r"pods.imagePullSecrets: 'Reg_Cred' .*a Secret name"),
        ({"pods": {"tolerations": [{"key": "a", "op": "Exists"}]}}, r"pods.tolerations\[0\]: .*a toleration"),
        ({"pods": {"tolerations": [{"operator": "In"}]}}, r"pods.tolerations\[0\].operator: 'In' .*Equal or"),
        (
            {"pods": {"tolerations": [{"effect": "Never"}]}},
            r"pods.tolerations\[0\].effect: 'Never' .*NoSchedule",
        ),
        (
            {"pods": {"nodeSelector": {"gpu pool": "a"}}},
            r"pods.nodeSelector: 'gpu pool=a' is not a label key=value",
        ),
        ({"faults": {"kinds": ["xid {attr:} 48"]}}, r"faults.kinds: .*; \{attr:\} is not one"),
    ],
)
def test_bad_values_are_named(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ProfileError, match=r"^mine.yaml: " + message):
        parse({**_good(), **change}, "mine.yaml")


def test_nested_errors_name_the_path() -> None:
    data = _good()
    data["devices"]["attributes"]["index"] = "integer"
    with pytest.raises(
        ProfileError, match=r"devices.attributes.index: 'integer' is not valid; expected one of"
    ):
        parse(data, "mine.yaml")
    data = _good()
    del data["devices"]["perNode"]
    with pytest.raises(
        ProfileError, match=r"devices.perNode: None is not valid; expected an integer \(the field"
    ):
        parse(data, "mine.yaml")
    data = _good()
    data["devices"]["perNodeInClass"] = 42
    with pytest.raises(ProfileError, match=r"devices.perNodeInClass: 42 .* from 1 to perNode \(41\)"):
        parse(data, "mine.yaml")


def test_a_missing_required_section_is_named() -> None:
    data = _good()
    del data["deviceClasses"]
    with pytest.raises(ProfileError, match=r"deviceClasses: None is not valid; expected this field"):
        parse(data, "mine.yaml")


def test_class_file_must_exist_and_not_come_with_a_command(tmp_path: Path) -> None:
    data = _good()
    data["deviceClasses"]["file"] = "nowhere.yaml"
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ProfileError, match=r"deviceClasses.file: 'nowhere.yaml' .* a file that exists"):
        load(path)
    (tmp_path / "nowhere.yaml").write_text("")
    with pytest.raises(ProfileError, match=r"command or file, not both"):
        load(path)


def test_unknown_name_lists_the_shipped_ones(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match=r"no profile named 'nvidia'.*reference-gpu, reference-l4"):
        load("nvidia")
    with pytest.raises(ProfileError, match=r"profile file 'x/y.yaml' does not exist"):
        load("x/y.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [unclosed\n")
    with pytest.raises(ProfileError, match=r"broken.yaml: not valid YAML at line 2"):
        load(broken)


def test_config_env_names_may_hold_the_per_device_part() -> None:
    from conformance.profiles.schema import ExampleConfig

    config = ExampleConfig({}, {"GPU_DEVICE_{device}_SHARING_STRATEGY": "TimeSlicing", "PLAIN": "1"})
    env = {"GPU_DEVICE_3_SHARING_STRATEGY": "TimeSlicing", "PLAIN": "1", "GPU_DEVICE_3": "gpu-3"}
    for source in ("class", "claim"):  # env: wherever the config came from
        assert config.missing(env, source) == []
        assert config.shown(env, source) == {"GPU_DEVICE_3_SHARING_STRATEGY": "TimeSlicing", "PLAIN": "1"}
    wrong = {"GPU_DEVICE_3_SHARING_STRATEGY": "MPS", "XGPU_DEVICE_3_SHARING_STRATEGY": "TimeSlicing"}
    assert [m.split(" ")[0] for m in config.missing(wrong, "claim")] == [
        "GPU_DEVICE_{device}_SHARING_STRATEGY=TimeSlicing",
        "PLAIN=1",
    ]
    assert config.shown(wrong, "claim") == {}


def test_container_ways_parse_into_patterns() -> None:
    data = _good()
    data["devices"]["attributes"]["minor"] = "int"
    data["container"] = {
        "env": "^GPU_DEVICE_(?P<device>[A-Z0-9_]+)$",
        "deviceNodes": {"path": "^/dev/nvidia(?P<value>[0-9]+)$", "attribute": "minor"},
        "netDevices": {"hostInterfaceName": "^(?P<value>ens[0-9]+)$", "device": "nic-{value}"},
        "mounts": {"containerPath": "^/var/run/dra-gpu/(?P<value>.+)\\.json$", "device": "{value}"},
        "cdiDevices": {"id": "/gpu=(?P<value>.+)$", "attribute": "index"},
    }
    container = parse(data, "mine.yaml").container
    assert container.ways == ("env", "deviceNodes", "netDevices", "mounts", "cdiDevices")
    assert container.device_nodes is not None and container.device_nodes.attribute == "minor"
    assert container.net_devices is not None
    assert (container.net_devices.key, container.net_devices.device) == ("hostInterfaceName", "nic-{value}")
    assert container.cdi_devices is not None and container.cdi_devices.field_name == "container.cdiDevices.id"
    data["container"] = {"env": "^GPU_DEVICE_[0-9]+$"}  # as before: env alone, no group needed
    assert parse(data, "mine.yaml").container.ways == ("env",)
    del data["container"]
    assert parse(data, "mine.yaml").container.ways == ()


def test_readme_ways_of_the_container_section_validate() -> None:
    """The README's commented-out ways (``# netDevices: {...}``) parse, each in the README's example."""
    text = README.read_text()
    block = re.search(r"```yaml\n(.*?)```", text, re.S)
    assert block is not None
    example = yaml.safe_load(block.group(1))
    lines = re.findall(
        r"^ *# (?:NVIDIA's driver, say: )?((?:deviceNodes|netDevices|mounts|cdiDevices): \{.*\})", text, re.M
    )
    assert {line.split(":")[0] for line in lines} == {"deviceNodes", "netDevices", "mounts", "cdiDevices"}
    for line in lines:
        way = yaml.safe_load(line.rstrip("."))
        profile = parse({**example, "container": way}, f"README: {line}")
        assert profile.container.patterns, line


def test_capacity_env_tells_whether_a_container_shows_its_share() -> None:
    from conformance.profiles.schema import ContainerSpec

    names = {"memory": "GPU_MEMORY_LIMIT", "cores": "CPU_DEVICE_{device}_CONSUMED_CPU"}
    spec = ContainerSpec(capacity_env=names)
    consumed = {"memory": "40Gi", "cores": "2", "other": "1"}
    env = {"GPU_MEMORY_LIMIT": str(40 * 2**30), "CPU_DEVICE_3_CONSUMED_CPU": "2", "GPU_DEVICE_GPU_0": "x"}
    assert spec.share_problems(env, consumed) == []
    assert spec.share_problems(env, {"memory": "42949672960"}) == []  # quantities, not strings
    wrong = {"GPU_MEMORY_LIMIT": "80Gi", "CPU_DEVICE_3_CONSUMED_CPU": "lots"}
    assert [p.split(" ")[0] for p in spec.share_problems(wrong, consumed)] == [
        "CPU_DEVICE_{device}_CONSUMED_CPU",
        "GPU_MEMORY_LIMIT",
    ]
    assert (
        "should show memory 40Gi (saw {'GPU_MEMORY_LIMIT': '80Gi'})"
        in spec.share_problems(wrong, consumed)[1]
    )
    assert ContainerSpec("").share_problems(wrong, consumed) == []  # nothing said: nothing checked


def test_pods_say_how_test_pods_run_and_which_nodes_are_tested() -> None:
    assert parse(_good(), "mine.yaml").pods == TestPods()  # busybox, nothing else
    data = {
        **_good(),
        "pods": {
            "image": "my-mirror/busybox:1.36",
            "imagePullSecrets": ["regcred"],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "nodeSelector": {"nvidia.com/gpu.present": "true", "pool": "a"},
        },
    }
    pods = parse(data, "mine.yaml").pods
    assert pods.image == "my-mirror/busybox:1.36" and pods.image_pull_secrets == ("regcred",)
    assert pods.tolerations == ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},)
    assert pods.selector() == "nvidia.com/gpu.present=true,pool=a"
    pod = manifests.pod(
        "p",
        {"gpu": "c"},
        image=pods.image,
        tolerations=pods.tolerations,
        pull_secrets=pods.image_pull_secrets,
    )
    assert pod["spec"]["containers"][0]["image"] == "my-mirror/busybox:1.36"
    assert pod["spec"]["tolerations"] == list(pods.tolerations)
    assert pod["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    assert "tolerations" not in manifests.pod("p", {})["spec"]


def test_run_options_override_the_pods_section() -> None:
    config = SuiteConfig.build("reference-gpu", image="mirror/bb:1", node_selector="pool=a,zone=b")
    assert config.profile.pods.image == "mirror/bb:1"
    assert config.profile.pods.node_selector == {"pool": "a", "zone": "b"}
    assert SuiteConfig.build("reference-gpu", node_selector="").profile.pods.node_selector == {}
    with pytest.raises(UsageError, match=r"^--node-selector: 'pool' is not a label key=value"):
        SuiteConfig.build("reference-gpu", node_selector="pool")
    with pytest.raises(UsageError, match=r"^--image 'a b': give an image reference without spaces"):
        SuiteConfig.build("reference-gpu", image="a b")


def test_run_takes_the_local_node_kind() -> None:
    assert SuiteConfig.build("reference-gpu", node_kind="agent,kubelet").node_kind == "agent,kubelet"
    with pytest.raises(UsageError, match=r"^--node-kind: node kind 'robot' is not agent or kubelet"):
        SuiteConfig.build("reference-gpu", node_kind="robot")
    with pytest.raises(UsageError, match=r"^--node-kind is for the local tier"):
        SuiteConfig.build("reference-gpu", cluster="kind", node_kind="kubelet")


def test_auto_workers_are_two_per_node_at_least_one_per_cpu_at_most_twelve(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from conformance.config import MAX_AUTO_WORKERS, auto_workers

    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert [auto_workers(n) for n in (1, 2, 4, 10)] == [2, 4, 8, MAX_AUTO_WORKERS]
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    assert auto_workers(4) == 16
    config = SuiteConfig.build("reference-gpu")
    assert config.workers == "auto" and config.worker_count == str(auto_workers(config.local_nodes))
    assert SuiteConfig.build("reference-gpu", rules="REG-EMPTY").worker_count == "1"  # one rule: one worker
    assert SuiteConfig.build("reference-gpu", workers="3").worker_count == "3"


@pytest.mark.parametrize(
    ("declared", "capabilities_kept", "message"),
    [
        (
            {"overhead": {"memory": {"perPod": "lots"}}},
            True,
            r"devices.nodeAllocatable.overhead.memory.perPod: 'lots'",
        ),
        (
            {"overhead": {"memory": {"perPod": "0"}}},
            True,
            r".*perPod: '0' is not valid; expected a quantity greater",
        ),
        (
            {"overhead": {"memory": {"perNode": "1Gi"}}},
            True,
            r"devices.nodeAllocatable.overhead.memory: .*perPod and/or",
        ),
        (
            {"overhead": {}},
            True,
            r"devices.nodeAllocatable.overhead: \{\} is not valid; expected at least one",
        ),
        (
            {"where": {"attribute": "type", "value": "mig"}},
            True,
            r"devices.nodeAllocatable.overhead: None .*required",
        ),
        (
            {"overhead": {"memory": {"perPod": "1Gi"}}},
            False,
            r"devices.nodeAllocatable: .*exactly when the profile",
        ),
        (None, True, r"devices.nodeAllocatable: None is not valid; .*exactly when the profile claims"),
    ],
)
def test_node_allocatable_overhead_is_a_positive_quantity_given_with_its_capability(
    declared: dict[str, Any] | None, capabilities_kept: bool, message: str
) -> None:
    data = _good()
    data["devices"] = {**data["devices"], "nodeAllocatable": declared}
    if declared is None:
        del data["devices"]["nodeAllocatable"]
    if not capabilities_kept:
        data["capabilities"] = [c for c in data["capabilities"] if c != "node-allocatable"]
    with pytest.raises(ProfileError, match=r"^mine.yaml: " + message):
        parse(data, "mine.yaml")


def test_the_skipping_class_comes_with_its_capability() -> None:
    assert load("reference-gpu").device_classes.skip_node_operations == "license.dra-conformance.io"
    assert load("reference-l4").device_classes.skip_node_operations == ""
    data = _good()
    data["capabilities"] = [c for c in data["capabilities"] if c != "skip-node-operations"]
    with pytest.raises(ProfileError, match=r"^mine.yaml: deviceClasses.skipNodeOperations: .*exactly when"):
        parse(data, "mine.yaml")
    data = _good()
    del data["deviceClasses"]["skipNodeOperations"]
    with pytest.raises(ProfileError, match=r"^mine.yaml: deviceClasses.skipNodeOperations: None .*exactly"):
        parse(data, "mine.yaml")


def test_node_allocatable_overhead_is_read_as_declared() -> None:
    declared = load("reference-gpu").devices.node_allocatable
    assert declared is not None and declared.overhead == {"memory": {"perPod": "256Mi"}}
    assert declared.where is not None and (declared.where.attribute, declared.where.value) == ("type", "mig")
    assert load("example-gpu").devices.node_allocatable is None

"""A profile's example configs: the env a container shows for each, wherever the config came from
(``env``) or by place (``classEnv``, ``claimEnv``), and the config rules reading the env of the
place they give a config in.

The rules run here against :class:`_TestDriver`, a stand-in for a cluster with Kubernetes' own test
driver (k8s.io/kubernetes test/e2e/dra/test-driver/app/kubeletplugin.go ``extractParameters``): it
shows each key of a class config as ``admin_<key>``, of a claim config as ``user_<key>``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from clusters.base import ContainerView
from conformance import manifests
from conformance.cli import main
from conformance.errors import ProfileError
from conformance.harness import Harness, bare_configs, gaps, meta
from conformance.profiles import SHIPPED_DIR, DriverProfile, load, parse, shipped
from conformance.suite import test_preparation as prep
from conformance.suite import test_sharing as sharing

Obj = dict[str, Any]


def _good() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((SHIPPED_DIR / "reference-gpu.yaml").read_text())
    return data


def _by_place(mode: str) -> dict[str, Any]:
    """A config of the test driver, as a profile says it."""
    return {
        "parameters": {"mode": mode},
        "classEnv": {"admin_mode": mode},
        "claimEnv": {"user_mode": mode},
    }


def _profile(**configs: dict[str, Any]) -> DriverProfile:
    data = _good()
    data["configs"] = {"valid": configs}
    return parse(data, "test-driver.yaml")


def test_shipped_profiles_show_one_env_wherever_the_config_came_from() -> None:
    for name in shipped():
        for config_name, config in load(name).configs.valid.items():
            assert not config.class_env and not config.claim_env, f"{name}: {config_name}"
            assert config.env_from("class") == config.env_from("claim") == config.env


def test_class_and_claim_env_say_what_shows_from_each_place() -> None:
    config = _profile(fast=_by_place("fast")).configs.valid["fast"]
    assert config.shows_env and not config.env
    assert config.env_from("class") == {"admin_mode": "fast"}
    assert config.env_from("claim") == {"user_mode": "fast"}
    shown = {"admin_mode": "fast", "claim_c_gpu": "true"}
    assert config.missing(shown, "class") == []
    assert config.missing(shown, "claim") == ["user_mode=fast (saw None)"]
    assert config.shown(shown, "class") == {"admin_mode": "fast"}
    assert config.shown(shown, "claim") == {}
    # one place by name, env for the other; names may hold {device} as in env
    mixed = {"parameters": {}, "env": {"MODE": "x"}, "classEnv": {"ADMIN_{device}_MODE": "x"}}
    config = _profile(mixed=mixed).configs.valid["mixed"]
    assert config.env_from("claim") == {"MODE": "x"}
    assert config.missing({"ADMIN_GPU_3_MODE": "x"}, "class") == []
    with pytest.raises(ValueError, match=r"config source 'pod': expected one of class, claim"):
        config.env_from("pod")  # type: ignore[arg-type]


def test_readme_example_gives_a_config_by_place() -> None:
    text = (SHIPPED_DIR / "README.md").read_text()
    block = re.search(r"```yaml\n(.*?)```", text, re.S)
    assert block is not None
    config = parse(yaml.safe_load(block.group(1)), "README example").configs.valid["admin-or-user"]
    assert config.env_from("class") == {"admin_mode": "fast"}
    assert config.env_from("claim") == {"user_mode": "fast"}


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"parameters": {}, "classEnv": {"admin_mode": "x"}},
            r"configs.valid.c.claimEnv: None is not valid; expected what a container shows when the "
            r"config comes from a claim, as classEnv says it for the other place: give claimEnv, or "
            r"env for both places$",
        ),
        (
            {"parameters": {}, "claimEnv": {"user_mode": "x"}},
            r"configs.valid.c.classEnv: None is not valid; expected what a container shows when the "
            r"config comes from a DeviceClass, as claimEnv says it for the other place: give classEnv",
        ),
        (
            {"parameters": {}, "env": {"M": "x"}, "classEnv": {"A": "x"}, "claimEnv": {"U": "x"}},
            r"configs.valid.c.env: \{'M': 'x'\} is not valid; expected no env beside both classEnv and "
            r"claimEnv \(each replaces env for its place, so env would never be looked for\): drop "
            r"env, or one of classEnv and claimEnv$",
        ),
        (
            {"parameters": {}, "env": {"M": "x"}, "classEnv": {}},
            r"configs.valid.c.classEnv: \{\} is not valid; expected the env vars a container shows "
            r"when the config comes from a DeviceClass \(NAME: value\); leave classEnv out where env "
            r"says it$",
        ),
        (
            {"parameters": {}, "env": {"{source}_mode": "x"}},
            r"configs.valid.c.env: '\{source\}_mode' is not valid; expected an env var name \(no '='\), "
            r"\{device\} its only placeholder; \{source\} is not one \(for env that depends on where "
            r"the config came from, give classEnv and claimEnv\)$",
        ),
        (
            {"parameters": {}, "claimEnv": {"A=B": "x"}, "env": {"M": "x"}},
            r"configs.valid.c.claimEnv: 'A=B' is not valid; expected an env var name \(no '='\), "
            r"\{device\} its only placeholder$",
        ),
        (
            {"parameters": {}, "env": {"M": {"x": 1}}},
            r"configs.valid.c.env.M: \{'x': 1\} is not valid; expected a value \(text or a number\)$",
        ),
        (
            {"parameters": {}, "classEnv": "admin_mode=x"},
            r"configs.valid.c.classEnv: 'admin_mode=x' is not valid; expected a mapping$",
        ),
        (
            {"parameters": {}, "class_env": {"admin_mode": "x"}},
            r"configs.valid.c: unknown field 'class_env'; the fields here are parameters, env, "
            r"classEnv, claimEnv$",
        ),
    ],
    ids=[
        "classEnv-alone",
        "claimEnv-alone",
        "env-beside-both",
        "empty-classEnv",
        "source-placeholder",
        "equals-in-name",
        "mapping-value",
        "not-a-mapping",
        "misspelt-key",
    ],
)
def test_bad_config_env_is_named_with_the_fix(config: dict[str, Any], message: str) -> None:
    with pytest.raises(ProfileError, match=r"^test-driver.yaml: " + message):
        _profile(c=config)


def test_a_config_by_place_leaves_no_gap_and_one_by_none_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = _profile(fast=_by_place("fast"), slow=_by_place("slow"))
    assert bare_configs(profile) == [] and gaps(profile) == {}
    bare = _profile(fast=_by_place("fast"), quiet={"parameters": {"mode": "quiet"}})
    assert bare_configs(bare) == ["quiet"] and "PREP-CONFIG-CLASS" in gaps(bare)
    data = _good()
    data["name"] = "test-driver"
    data["configs"] = {"valid": {"fast": _by_place("fast"), "slow": _by_place("slow")}}
    path = tmp_path / "test-driver.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["profiles", "--check", str(path), "--cluster", "local"]) == 0
    out = capsys.readouterr().out
    assert "test-driver: driver gpu.dra-conformance.io" in out
    assert "lacks:" not in out and "partial" not in out


# --- the config rules against a driver that shows a config by where it came from ------------------


@dataclass
class _TestDriver:
    """Just what the config rules ask of a :class:`~conformance.harness.Harness`, over a cluster
    whose driver shows configs as Kubernetes' test driver does: every pod runs at once, and a
    container sees, for each request it uses, ``admin_<key>`` of its class's configs and
    ``user_<key>`` of the claim's configs for that request (or for all)."""

    profile: DriverProfile
    namespace: str = "t"
    objects: dict[tuple[str, str], Obj] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.create(manifests.device_class(self.device_class))

    @property
    def driver(self) -> str:
        return self.profile.driver

    @property
    def device_class(self) -> str:
        return self.profile.device_classes.default

    def create(self, obj: Obj) -> Obj:
        self.objects[obj["kind"], meta(obj)["name"]] = obj
        return obj

    def get(self, kind: str, name: str) -> Obj | None:
        return self.objects.get((kind, name))

    def _name(self, kind: str) -> str:
        return f"{kind}-{len(self.objects)}"

    def claim(self, name: str | None = None, **spec: Any) -> Obj:
        device_class = spec.pop("device_class", self.device_class)
        return self.create(manifests.claim(name or self._name("claim"), device_class, **spec))

    def pod(self, name: str | None = None, claims: Mapping[str, str] | None = None, **spec: Any) -> Obj:
        return self.create(manifests.pod(name or self._name("pod"), claims or {}, **spec))

    def run_pod(self, claim_spec: Mapping[str, Any] | None = None) -> tuple[Obj, Obj]:
        claim = self.claim(**dict(claim_spec or {}))
        return self.pod(claims={"gpu": meta(claim)["name"]}), claim

    def wait_running(self, name: str) -> Obj:
        return self.objects["Pod", name]

    def view(self, pod: str, container: str = "ctr") -> ContainerView:
        spec = self.objects["Pod", pod]["spec"]
        claims = {e["name"]: e["resourceClaimName"] for e in spec["resourceClaims"]}
        [ctr] = [c for c in spec["containers"] if c["name"] == container]
        env: dict[str, str] = {}
        for used in ctr["resources"]["claims"]:
            devices = self.objects["ResourceClaim", claims[used["name"]]]["spec"]["devices"]
            for request in devices["requests"]:
                if used.get("request", request["name"]) != request["name"]:
                    continue
                device_class = self.objects["DeviceClass", request["exactly"]["deviceClassName"]]
                given = [("admin", c) for c in device_class["spec"].get("config", [])]
                given += [
                    ("user", c)
                    for c in devices.get("config", [])
                    if request["name"] in c.get("requests", [request["name"]])
                ]
                for kind, config in given:
                    env.update({f"{kind}_{k}": str(v) for k, v in config["opaque"]["parameters"].items()})
        return ContainerView(env=env)


_RULES: dict[str, Callable[[Harness], None]] = {
    "PREP-CONFIG-CLASS": prep.test_class_config,
    "PREP-CONFIG-PRECEDENCE": prep.test_claim_config_wins,
    "PREP-CONFIG-SCOPE": prep.test_config_scoped_to_request,
    "SHARE-STRATEGY": sharing.test_sharing_configs,
}


def _check(rule: str, profile: DriverProfile) -> str:
    """Run ``rule``'s test against the test driver: '' when it passes, else its message."""
    try:
        _RULES[rule](cast(Harness, _TestDriver(profile)))
    except AssertionError as e:
        return str(e)
    return ""


@pytest.mark.parametrize("rule", sorted(_RULES))
def test_config_rules_pass_the_test_driver_told_by_place(rule: str) -> None:
    assert _check(rule, _profile(fast=_by_place("fast"), slow=_by_place("slow"))) == ""


def _one_env(kind: str) -> DriverProfile:
    """The test driver's configs told by one env: what shows of a config given where ``kind`` says."""
    return _profile(**{m: {"parameters": {"mode": m}, "env": {f"{kind}_mode": m}} for m in ("fast", "slow")})


def test_one_env_cannot_tell_what_the_test_driver_shows() -> None:
    as_claimed = _one_env("user")
    assert "the class's config 'fast' does not show in the container: ['user_mode=fast" in _check(
        "PREP-CONFIG-CLASS", as_claimed
    )
    assert _check("PREP-CONFIG-SCOPE", as_claimed) == ""
    as_classed = _one_env("admin")
    assert _check("PREP-CONFIG-CLASS", as_classed) == ""
    for rule in ("PREP-CONFIG-PRECEDENCE", "PREP-CONFIG-SCOPE", "SHARE-STRATEGY"):
        assert "admin_mode=" in _check(rule, as_classed), rule


def test_each_rule_reads_the_env_of_the_place_it_gives_the_config_in() -> None:
    swapped = {
        m: {"parameters": {"mode": m}, "classEnv": {"user_mode": m}, "claimEnv": {"admin_mode": m}}
        for m in ("fast", "slow")
    }
    profile = _profile(**swapped)
    for rule in _RULES:
        assert _check(rule, profile), f"{rule} passed with classEnv and claimEnv swapped"

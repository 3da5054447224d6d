"""The ``fakegpu`` command: look at and change a fake machine kept in a state directory.

Examples::

    fakegpu show --profile dgx-h100                      # a fresh machine, nothing saved
    fakegpu --state-dir /tmp/node1 show --profile dgx-h100 --node-name node1   # create or attach
    fakegpu --state-dir /tmp/node1 mig enable 0
    fakegpu --state-dir /tmp/node1 mig create 0 3g.40gb --placement 4
    fakegpu --state-dir /tmp/node1 inject xid 0 48
    fakegpu --state-dir /tmp/node1 inject ecc 1 double
    fakegpu --state-dir /tmp/node1 inject lost 2
    fakegpu --state-dir /tmp/node1 inject fabric 3
    fakegpu --state-dir /tmp/node1 inject remap 3
    fakegpu --state-dir /tmp/node1 heal 2
    fakegpu --state-dir /tmp/node1 reset            # every GPU; or `reset 3`
    fakegpu lib                                     # the dir of the fake libnvidia-ml.so.1 (built once)
    fakegpu --state-dir /tmp/node1 root /tmp/node1/driver   # a fake driver root for that machine
    fakegpu nvidia-smi --fetch                      # NVIDIA's nvidia-smi 535.261.03 (Debian non-free)
    fakegpu --state-dir /tmp/node1 nvidia-smi -- -q # ... run over the fake library on that machine

``--state-dir`` defaults to ``$FAKEGPU_STATE_DIR``. Exit status: 0 done, 1 refused (the message
says why), 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from . import _codes, _nvsmi
from ._driverroot import make_driver_root
from ._errors import FakeGpuError, FaultError
from ._install import DEFAULT_PROFILE, ENV_NODE_NAME, ENV_PROFILE, ENV_STATE_DIR, EnvDefaults, env_defaults
from ._libbuild import library_dir
from ._machine import ECC_KINDS, FakeMachine
from ._profiles import available_profiles, load_profile
from ._store import STATE_FILE

_PENDING = {
    _codes.ERROR_IN_USE: "the GPU has MIG instances",
    _codes.ERROR_RESET_REQUIRED: "this GPU needs a reset for every MIG change",
}


def _say(message: str) -> None:
    print(message, file=sys.stderr)


def _gpu(text: str) -> int | str:
    return int(text) if text.isdigit() else text


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fakegpu", description="Look at and change a fake GPU machine.")
    p.add_argument("--state-dir", help=f"the machine's state directory (default ${ENV_STATE_DIR})")
    sub = p.add_subparsers(dest="command", required=True)

    show = sub.add_parser("show", help="describe the machine (creates it in --state-dir if new)")
    show.add_argument(
        "--profile", help=f"profile name or YAML path (default ${ENV_PROFILE} or {DEFAULT_PROFILE})"
    )
    show.add_argument("--node-name", help=f"node name seeding the UUIDs (default ${ENV_NODE_NAME})")
    show.add_argument("--json", action="store_true", help="print the snapshot as JSON")
    show.add_argument(
        "--list", action="store_true", help="one line per GPU and MIG device, as `nvidia-smi -L`"
    )

    sub.add_parser("profiles", help="list the shipped profiles")

    mig = sub.add_parser("mig", help="MIG mode and instances")
    msub = mig.add_subparsers(dest="mig_command", required=True)
    for name in ("enable", "disable"):
        m = msub.add_parser(name, help=f"{name} MIG mode on a GPU")
        m.add_argument("gpu", type=_gpu)
    create = msub.add_parser("create", help="create a GPU instance (and a compute instance spanning it)")
    create.add_argument("gpu", type=_gpu)
    create.add_argument("profile", help="profile name (3g.40gb) or driver profile id (9)")
    create.add_argument("--placement", type=int, help="start slice (default: where the driver would put it)")
    create.add_argument("--no-compute-instance", action="store_true", help="leave the GPU instance empty")
    destroy = msub.add_parser("destroy", help="destroy a GPU instance and its compute instances")
    destroy.add_argument("gpu", type=_gpu)
    destroy.add_argument("gpu_instance", type=int)
    clear = msub.add_parser("clear", help="destroy every MIG instance (on one GPU or all)")
    clear.add_argument("gpu", type=_gpu, nargs="?")

    inject = sub.add_parser("inject", help="inject a fault")
    isub = inject.add_subparsers(dest="fault", required=True)
    xid = isub.add_parser("xid", help="raise an XID (an XidCriticalError event)")
    xid.add_argument("gpu", type=_gpu)
    xid.add_argument("xid", type=int)
    xid.add_argument("--gpu-instance", type=int)
    xid.add_argument("--compute-instance", type=int)
    ecc = isub.add_parser("ecc", help="count ECC errors and raise the event")
    ecc.add_argument("gpu", type=_gpu)
    ecc.add_argument("kind", choices=ECC_KINDS)
    ecc.add_argument("--count", type=int, default=1)
    remap = isub.add_parser("remap", help="remap a memory row (pending until reset)")
    remap.add_argument("gpu", type=_gpu)
    remap.add_argument("--correctable", action="store_true", help="for a correctable error")
    remap.add_argument("--failure", action="store_true", help="the remap failed (no spare row)")
    lost = isub.add_parser("lost", help="the GPU falls off the bus (XID 79, then GPU_IS_LOST)")
    lost.add_argument("gpu", type=_gpu)
    fabric = isub.add_parser(
        "fabric", help="the GPU's NVSwitch fabric registration fails (GpuFabricInfo status an error)"
    )
    fabric.add_argument("gpu", type=_gpu)

    lib = sub.add_parser(
        "lib",
        help="print the directory of the fake libnvidia-ml.so.1 (for C, Go, any NVML client), built once",
        description="Print the absolute path of a directory holding libnvidia-ml.so.1 and the "
        "libnvidia-ml.so link: put it on LD_LIBRARY_PATH and any NVML client (C, go-nvml, pynvml "
        "without fakegpu.install) sees the machine of FAKEGPU_PROFILE / FAKEGPU_STATE_DIR / "
        "FAKEGPU_NODE_NAME. Built with cc against this Python on first use, then cached in "
        "$XDG_CACHE_HOME/dra-conformance/fakegpu/nvml/<digest>/.",
    )
    lib.add_argument("--rebuild", action="store_true", help="build again even when the cache has it")
    lib.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    root = sub.add_parser(
        "root",
        help="lay out a fake driver root (dev/nvidia*, nvidia-smi, the driver's libraries) for the machine",
    )
    root.add_argument("dir", help="the directory to make (created; files already there are replaced)")
    root.add_argument(
        "--profile", help="the machine's profile when --state-dir holds none yet (default $FAKEGPU_PROFILE)"
    )

    smi = sub.add_parser(
        "nvidia-smi",
        help=f"run NVIDIA's own nvidia-smi ({_nvsmi.VERSION}) over the fake library",
        description=f"Run NVIDIA's nvidia-smi {_nvsmi.VERSION} on the machine of --state-dir (or "
        f"${ENV_STATE_DIR} / ${ENV_PROFILE}) through the fake libnvidia-ml.so.1; its arguments follow "
        "`--` (fakegpu nvidia-smi -- -q). It is fetched once with --fetch (apt-get download from "
        "Debian bookworm non-free, its own sources list; the host's apt setup is not changed) into "
        f"$XDG_CACHE_HOME/dra-conformance/fakegpu/nvidia-smi/{_nvsmi.VERSION}/; an nvidia-smi of that "
        "version on PATH is used as well.",
    )
    smi.add_argument("--fetch", action="store_true", help="download it (once) and print its path")
    smi.add_argument(
        "--profile", help=f"the machine's profile when there is no state dir (default ${ENV_PROFILE})"
    )
    smi.add_argument("args", nargs="*", help="nvidia-smi's arguments, after --")

    heal = sub.add_parser("heal", help="clear a GPU's faults")
    heal.add_argument("gpu", type=_gpu)
    reset = sub.add_parser(
        "reset", help="reset a GPU (or all): pending MIG mode applies, instances and faults clear"
    )
    reset.add_argument("gpu", type=_gpu, nargs="?")
    return p


def _describe(snap: dict[str, Any]) -> str:
    lines = [
        f"profile {snap['profile']}  node {snap['node_name'] or '-'}  driver {snap['driver_version']}  "
        f"CUDA {snap['cuda_driver_version'] // 1000}.{snap['cuda_driver_version'] % 1000 // 10}  "
        f"state {snap['state_dir'] or '(not saved)'}"
    ]
    for g in snap["gpus"]:
        mem = f"{g['memory_total'] // (1 << 20)} MiB" if g["memory_total"] else "-"
        flags = []
        if g["lost"]:
            flags.append("LOST")
        if g.get("fabric_failed"):
            flags.append("FABRIC-FAILED")
        ecc = g["ecc"]["volatile"]
        if ecc["single"] or ecc["double"]:
            flags.append(f"ECC sbe={ecc['single']} dbe={ecc['double']}")
        mig = g.get("mig")
        if mig:
            on = "on" if mig["current"] else "off"
            pending = "on" if mig["pending"] else "off"
            pend = "" if mig["current"] == mig["pending"] else f" (pending {pending})"
            flags.append(f"MIG {on}{pend}")
        head = f"GPU {g['index']:>2}  {g['name']:<24} {g['uuid']}  {g['pci_bus_id']}  {mem}"
        lines.append(f"{head}  {' '.join(flags)}".rstrip())
        for gi in (mig or {}).get("gpu_instances", []):
            cis = ", ".join(f"CI {ci['id']} {ci['uuid']}" for ci in gi["compute_instances"])
            cis = cis or "no compute instance"
            lines.append(
                f"        GI {gi['id']:>2} {gi['profile']:<11} (profile {gi['profile_id']:>2}) "
                f"at {gi['placement']['start']}+{gi['placement']['size']}  {cis}"
            )
    return "\n".join(lines)


def _list(snap: dict[str, Any]) -> str:
    """The machine as ``nvidia-smi -L`` lists it."""
    lines = []
    for g in snap["gpus"]:
        lines.append(f"GPU {g['index']}: {g['name']} (UUID: {g['uuid']})")
        devices = [
            (gi, ci) for gi in (g.get("mig") or {}).get("gpu_instances", []) for ci in gi["compute_instances"]
        ]
        for n, (gi, ci) in enumerate(devices):
            # the profile padded to 11, as NVIDIA's nvidia-smi 535.261.03 prints it (test_nvidia_smi)
            lines.append(f"  MIG {gi['profile']:<11} Device {n:>2}: (UUID: {ci['uuid']})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status."""
    args = _parser().parse_args(argv)
    env = env_defaults()
    state_dir = args.state_dir or env.state_dir
    try:
        if args.command == "profiles":
            for name in available_profiles():
                print(f"{name:<16} {load_profile(name).description}")
            return 0
        if args.command == "lib":
            say = None if args.quiet else (lambda m: print(f"fakegpu: {m}", file=sys.stderr))
            print(library_dir(env.cache_root, progress=say, rebuild=args.rebuild))
            return 0
        if args.command == "root":
            profile = args.profile or env.profile
            if state_dir and not profile and (Path(state_dir) / STATE_FILE).exists():
                machine = FakeMachine.attach(state_dir)
            else:
                machine = FakeMachine(
                    profile or DEFAULT_PROFILE, state_dir=state_dir, node_name=env.node_name
                )
            lib_dir = library_dir(env.cache_root, progress=lambda m: print(f"fakegpu: {m}", file=sys.stderr))
            print(make_driver_root(Path(args.dir), machine, lib_dir, warn=_say))
            return 0
        if args.command == "nvidia-smi":
            return _nvidia_smi(args, env, state_dir)
        if args.command == "show":
            profile = args.profile or env.profile
            node = args.node_name or env.node_name
            if state_dir and not profile and (Path(state_dir) / STATE_FILE).exists():
                machine = FakeMachine.attach(state_dir)
            else:
                machine = FakeMachine(profile or DEFAULT_PROFILE, state_dir=state_dir, node_name=node)
            snap = machine.snapshot()
            print(json.dumps(snap, indent=2) if args.json else _list(snap) if args.list else _describe(snap))
            return 0
        if not state_dir:
            print(f"fakegpu: error: {args.command} needs --state-dir (or ${ENV_STATE_DIR})", file=sys.stderr)
            return 2
        machine = FakeMachine.attach(state_dir)
        return _change(machine, args)
    except FaultError as e:
        print(f"fakegpu: error: {e}", file=sys.stderr)
        return 2
    except FakeGpuError as e:
        print(f"fakegpu: error: {e}", file=sys.stderr)
        return 1


def _nvidia_smi(args: argparse.Namespace, env: EnvDefaults, state_dir: str | None) -> int:
    if args.fetch:
        print(_nvsmi.fetch(env.cache_root))
        return 0
    binary = _nvsmi.find(env.cache_root, os.environ.get("PATH"))
    if binary is None:
        print(
            f"fakegpu: error: NVIDIA's nvidia-smi {_nvsmi.VERSION} is neither in "
            f"{_nvsmi.cached(env.cache_root)} nor on PATH: fetch it with `fakegpu nvidia-smi --fetch`",
            file=sys.stderr,
        )
        return 1
    lib_dir = library_dir(env.cache_root, progress=lambda m: print(f"fakegpu: {m}", file=sys.stderr))
    run_env = _nvsmi.environment(lib_dir, os.environ, state_dir=state_dir, profile=args.profile)
    return _nvsmi.run(binary, args.args, run_env)


def _change(machine: FakeMachine, args: argparse.Namespace) -> int:
    if args.command == "mig":
        cmd = args.mig_command
        if cmd in ("enable", "disable"):
            status = machine.set_mig_mode(args.gpu, cmd == "enable")
            why = _PENDING.get(status, f"activation status {status}")
            pending = f" (pending: {why}; `fakegpu reset` applies it)" if status else ""
            print(f"GPU {args.gpu}: MIG {cmd}d{pending}")
        elif cmd == "create":
            gi = machine.create_gpu_instance(
                args.gpu, args.profile, args.placement, with_compute_instance=not args.no_compute_instance
            )
            print(f"GPU {args.gpu}: created GPU instance {gi}")
        elif cmd == "destroy":
            machine.destroy_gpu_instance(args.gpu, args.gpu_instance)
            print(f"GPU {args.gpu}: destroyed GPU instance {args.gpu_instance}")
        else:
            machine.clear_mig(args.gpu)
            print("MIG instances cleared")
    elif args.command == "inject":
        if args.fault == "xid":
            seq = machine.inject_xid(
                args.gpu, args.xid, gpu_instance=args.gpu_instance, compute_instance=args.compute_instance
            )
            print(f"GPU {args.gpu}: XID {args.xid} raised (event {seq})")
        elif args.fault == "ecc":
            seq = machine.inject_ecc(args.gpu, args.kind, args.count)
            print(f"GPU {args.gpu}: {args.count} {args.kind}-bit ECC error(s) (event {seq})")
        elif args.fault == "remap":
            machine.inject_row_remap(args.gpu, uncorrectable=not args.correctable, failure=args.failure)
            state = "failed" if args.failure else "pending until reset"
            print(f"GPU {args.gpu}: row remap {state}")
        elif args.fault == "fabric":
            machine.fail_fabric(args.gpu)
            print(f"GPU {args.gpu}: fabric registration failed")
        else:
            machine.mark_lost(args.gpu)
            print(f"GPU {args.gpu}: lost (fallen off the bus)")
    elif args.command == "heal":
        machine.heal(args.gpu)
        print(f"GPU {args.gpu}: healed")
    else:
        machine.reset(args.gpu)
        print("reset " + ("every GPU" if args.gpu is None else f"GPU {args.gpu}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

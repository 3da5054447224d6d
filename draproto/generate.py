"""Regenerate (or check) the committed Python stubs of the kubelet plugin protocols.

Run ``python -m draproto.generate`` after editing a ``.proto`` file, and
``python -m draproto.generate --check`` in tests to catch stale stubs. Needs
``grpcio-tools`` and ``mypy-protobuf`` (both pinned in the ``dev`` extra): protoc writes the
messages, their ``.pyi`` and the gRPC modules, mypy-protobuf the gRPC modules' ``.pyi``, so that
mypy sees typed stubs and servicers on both sides of the protocol.
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
import tempfile
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
PROTOS = sorted(p.name for p in PACKAGE_DIR.glob("*.proto"))
SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")


def _grpc_stub_plugin() -> str:
    """mypy-protobuf's protoc plugin, beside this interpreter (a venv) or on PATH."""
    name = "protoc-gen-mypy_grpc"
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if found is None:
        raise SystemExit(f"{name} not found: pip install -e '.[dev]' (it comes with mypy-protobuf)")
    return found


def _generate(out_root: Path) -> Path:
    from grpc_tools import protoc  # dev-only dependency

    src_root = out_root / "src"
    (src_root / "draproto" / "_gen").mkdir(parents=True)
    for name in PROTOS:
        shutil.copy(PACKAGE_DIR / name, src_root / "draproto" / "_gen" / name)
    args = [
        "protoc",
        f"-I{src_root}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        f"--grpc_python_out={out_root}",
        f"--plugin=protoc-gen-mypy_grpc={_grpc_stub_plugin()}",
        f"--mypy_grpc_out={out_root}",
        "--mypy_grpc_opt=quiet",
        *[f"draproto/_gen/{name}" for name in PROTOS],
    ]
    if protoc.main(args) != 0:
        raise SystemExit(f"protoc failed: {' '.join(args)}")
    return out_root / "draproto" / "_gen"


def _outputs(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(SUFFIXES))


def main(argv: list[str] | None = None) -> int:
    """Write the stubs into ``draproto/_gen``, or with ``--check`` compare them."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if the committed stubs are stale")
    args = parser.parse_args(argv)
    target = PACKAGE_DIR / "_gen"
    with tempfile.TemporaryDirectory() as tmp:
        fresh = _generate(Path(tmp))
        names = _outputs(fresh)
        if args.check:
            stale = [
                n
                for n in names
                if not (target / n).exists() or not filecmp.cmp(fresh / n, target / n, shallow=False)
            ]
            extra = sorted(set(_outputs(target)) - set(names))
            if stale or extra:
                print(
                    f"stale generated stubs: {stale + extra}; run: python -m draproto.generate",
                    file=sys.stderr,
                )
                return 1
            return 0
        for n in names:
            shutil.copy(fresh / n, target / n)
    print(f"wrote {len(names)} files to {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

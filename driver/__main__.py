"""``python -m driver`` / ``dra-gpu-driver``: the reference DRA driver process.

``dra-gpu-driver [flags]`` runs the driver until SIGTERM or SIGINT (see ``--help`` and
``driver.settings``); ``dra-gpu-driver device-classes [--driver-name NAME]`` prints the
DeviceClass manifests and exits; ``dra-gpu-driver access-manifests`` prints the driver's identity
(service account, RBAC, admission policy) as the Helm chart installs it. Logging handlers are
configured here and nowhere else, in the log format of every process of ours (``draproto.logs``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from types import FrameType
from typing import NoReturn

from draproto.apiconn import Connection, KubeconfigError, connect
from draproto.logs import configure_logging
from driver.breakage import parse_rules
from driver.errors import DriverError, SettingsError
from driver.settings import BREAK_RULES_ENV, Settings, device_classes_driver_name, from_args

__all__ = ["handle_signals", "main", "run"]

log = logging.getLogger("driver")


def _connection(settings: Settings) -> Connection:
    try:
        return connect(settings.kubeconfig)
    except KubeconfigError as e:
        if settings.kubeconfig is not None:
            raise SettingsError(f"--kubeconfig {settings.kubeconfig}: {e}") from e
        raise SettingsError(f"no --kubeconfig given and no in-cluster config ({e}); pass --kubeconfig") from e


def run(settings: Settings, stop: threading.Event) -> int:
    """Run the driver until ``stop`` is set; returns the exit code."""
    from draproto.rest import Rest
    from driver import devices
    from driver.binding import Attacher, attach_on_demand
    from driver.breaking import interceptors
    from driver.breaking_cdi import spec_store
    from driver.breaking_slices import slice_builder, taint_source
    from driver.claims import ApiClaimSource
    from driver.consumable import make_consumable
    from driver.consumers import POD_SWITCHES, ApiPodSource
    from driver.health import HealthMonitor
    from driver.kubeslices import KubeSliceStore
    from driver.plugin import PluginServer, slices_left_to
    from driver.slices import SlicePublisher
    from driver.slicing import DeviceTaint, taints_from_faults
    from driver.state import DeviceState

    api = Rest(_connection(settings))
    if settings.backend.kind == "fake":
        import fakegpu

        try:
            fakegpu.install(
                settings.backend.fake_profile,
                state_dir=settings.backend.fake_state_dir,
                node_name=settings.node_name,
            )
        except fakegpu.FakeGpuError as e:
            raise SettingsError(f"--backend fake: {e}") from e
    inventory = devices.discover(settings.backend.device_kinds)
    if settings.backend.gpu_sharing == "consumable":
        inventory = make_consumable(inventory, settings.backend.consumable_gpus)
    if settings.backend.compatibility_groups:
        from driver.compatibility import group_by_mode

        inventory = group_by_mode(inventory)
    if settings.backend.list_attributes:
        from driver.listattrs import with_list_attributes

        inventory = with_list_attributes(inventory)
    if settings.backend.host_memory_overhead:
        from driver.nodealloc import with_host_memory_overhead

        inventory = with_host_memory_overhead(inventory, settings.backend.host_memory_overhead)
    inventory = attach_on_demand(inventory, settings.backend.attached_gpus)
    if settings.backend.license_seats:
        from driver.licenses import with_license_seats

        inventory = with_license_seats(inventory)
    pods = ApiPodSource(api) if settings.break_rules & POD_SWITCHES else None
    state = DeviceState(settings, inventory, ApiClaimSource(api), pods=pods, specs=spec_store(settings))
    # its own connection: the publisher's stop interrupts every watch of its Rest
    watcher = Rest(_connection(settings)) if settings.backend.attached_gpus else None
    attacher = Attacher(watcher, ApiClaimSource(api), settings, inventory)
    state.restore()
    monitor = HealthMonitor.from_settings(inventory, settings)
    publisher = SlicePublisher(
        KubeSliceStore(api),
        driver_name=settings.driver_name,
        node_name=settings.node_name,
        pool_name=settings.pool_name,
        keep=settings.keep_slices,
        build=slice_builder(settings.breaks),
        breaks=settings.breaks,
    )

    def node_taints() -> dict[str, list[DeviceTaint]]:
        return taints_from_faults(monitor.faults(), settings.driver_name)

    taints = taint_source(settings.breaks, node_taints)

    publisher.update(inventory=inventory, taints=taints())
    monitor.subscribe(lambda: publisher.update(taints=taints()))
    health = monitor if settings.health.enabled else None
    server = PluginServer(settings, state, health, interceptors=interceptors(settings, state))
    started: list[Callable[[], None]] = []
    try:
        # on shutdown the kubelet loses the plugin first, then health, then the slices go
        publisher.start()

        def stop_publishing() -> None:
            others = slices_left_to(settings)
            if others:
                log.info(
                    "another instance serves the node: its slices are left to it", extra={"others": others}
                )
                publisher.keep = True
            publisher.stop()

        started.append(stop_publishing)
        attacher.start()
        started.append(attacher.stop)
        if settings.metrics_address:
            from driver.metrics import MetricsServer

            metrics = MetricsServer(
                settings,
                settings.metrics_address,
                lambda: {
                    "dra_gpu_devices": ("Devices the driver publishes.", len(inventory)),
                    "dra_gpu_prepared_claims": ("Claims prepared on the node.", len(state.prepared())),
                    "dra_gpu_unhealthy_devices": ("Devices a fault made unhealthy.", len(monitor.faults())),
                },
            )
            metrics.start()
            started.append(metrics.stop)
        monitor.start()
        started.append(monitor.stop)
        server.start()
        started.append(server.stop)
        started.append(state.stop)
        log.info(
            "driver running",
            extra={"driver": settings.driver_name, "node": settings.node_name, "devices": len(inventory),
                   "backend": settings.backend.kind, "breaks": sorted(settings.break_rules)},
        )  # fmt: skip
        # in slices: a signal that lands on another thread wakes no untimed wait of this one, and
        # Python runs its handler only here (seen: SIGTERM under load, no "signal received" in 30 s)
        while not stop.wait(0.5):
            pass
    finally:
        log.info("shutting down")
        for stop_part in reversed(started):
            stop_part()
    return 0


def _device_classes(argv: Sequence[str]) -> int:
    from driver import deviceclasses

    switches = parse_rules([os.environ.get(BREAK_RULES_ENV, "")])
    misnamed = "misnamed-device-classes" in switches
    sys.stdout.write(deviceclasses.render(device_classes_driver_name(argv), misnamed=misnamed))
    return 0


def _access_manifests(argv: Sequence[str]) -> int:
    from driver import access
    from driver.settings import access_options

    try:
        opts = access_options(argv)
    except SettingsError as e:
        print(f"dra-gpu-driver access-manifests: error: {e}", file=sys.stderr)
        return 2
    sys.stdout.write(access.printed(opts))
    return 0


def handle_signals(settings: Settings, handler: Callable[[int, FrameType | None], None]) -> None:
    """SIGTERM and SIGINT stop the driver cleanly (``handler``); under the ``no-sigterm-handler``
    switch SIGTERM keeps its default action, which ends the process at once, with no cleanup."""
    # the seam: the suite's rule-breaking switch (driver/breakage.py); a real driver has none
    if not settings.breaks("no-sigterm-handler"):
        signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m driver`` and ``dra-gpu-driver``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["device-classes"]:
        return _device_classes(args[1:])
    if args[:1] == ["access-manifests"]:
        return _access_manifests(args[1:])
    try:
        settings = from_args(args)
    except SettingsError as e:
        print(f"dra-gpu-driver: error: {e}", file=sys.stderr)
        return 2
    configure_logging(settings.log_format)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("signal received", extra={"signal": signal.Signals(signum).name})
        stop.set()

    handle_signals(settings, on_signal)
    try:
        return run(settings, stop)
    except DriverError as e:
        log.error("driver failed", extra={"error": str(e)})
        return 1
    except Exception:
        log.exception("driver crashed")
        return 1


def _exit_now(code: int) -> NoReturn:
    """End the process without the interpreter's teardown, once ``main`` has cleaned up.

    Tearing down the interpreter (modules, the kubernetes client's models, gRPC) costs a few
    tenths of a CPU second after the work is done; with dozens of drivers stopped at once on
    a small machine that alone ran past the SIGTERM grace period. Logs and stdio are flushed.
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    _exit_now(main())

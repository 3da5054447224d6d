"""NodePrepareResources / NodeUnprepareResources calls, with the kubelet's checks on the answer.

A gRPC error discards the whole response. Every claim of the request must be
in the response, a UID that was not asked for is an error, and a per-claim
``error`` fails that claim. Any of these fails the batch: the caller keeps the
pod Pending and retries the whole batch (drivers are idempotent).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import grpc

from nodeagent.checkpoint import PreparedDevice
from nodeagent.claims import ClaimRef
from nodeagent.errors import PrepareError
from nodeagent.plugins import DRAClient

__all__ = ["prepare", "unprepare"]

log = logging.getLogger(__name__)


def _names(claims: Sequence[ClaimRef]) -> str:
    return ", ".join(f"{c.namespace}/{c.name} (uid {c.uid})" for c in claims)


def _rpc_error(call: str, driver: str, claims: Sequence[ClaimRef], e: grpc.RpcError) -> PrepareError:
    code = e.code() if hasattr(e, "code") else None
    details = e.details() if hasattr(e, "details") else str(e)
    name = code.name if code is not None else "UNKNOWN"
    return PrepareError(f"{call} of driver {driver} failed for claims {_names(claims)}: {name}: {details}")


def _check_keys(call: str, driver: str, claims: Sequence[ClaimRef], answered: set[str]) -> list[str]:
    asked = {c.uid for c in claims}
    problems = []
    for c in claims:
        if c.uid not in answered:
            problems.append(
                f"claim {c.namespace}/{c.name} (uid {c.uid}) is missing from the {call} "
                f"response of driver {driver}"
            )
    for uid in sorted(answered - asked):
        problems.append(f"the {call} response of driver {driver} names unknown claim uid {uid}")
    return problems


def prepare(client: DRAClient, claims: Sequence[ClaimRef]) -> dict[str, list[PreparedDevice]]:
    """Prepare ``claims`` with one call; devices by claim UID, or PrepareError naming claim and driver."""
    driver = client.driver
    try:
        response = client.node_prepare([c.as_tuple() for c in claims])
    except grpc.RpcError as e:
        raise _rpc_error("NodePrepareResources", driver, claims, e) from e
    except Exception as e:  # a plugin that answers garbage
        raise PrepareError(
            f"NodePrepareResources of driver {driver} failed for claims {_names(claims)}: {e}"
        ) from e
    problems = _check_keys("NodePrepareResources", driver, claims, set(response.claims))
    out: dict[str, list[PreparedDevice]] = {}
    for c in claims:
        result = response.claims.get(c.uid)
        if result is None:
            continue
        if result.error:
            problems.append(
                f"driver {driver} failed to prepare claim {c.namespace}/{c.name} "
                f"(uid {c.uid}): {result.error}"
            )
            continue
        out[c.uid] = [
            PreparedDevice(
                driver=driver,
                pool=d.pool_name,
                device=d.device_name,
                request_names=tuple(d.request_names),
                cdi_device_ids=tuple(d.cdi_device_ids),
                share_id=d.share_id if d.HasField("share_id") else None,
            )
            if "share_id" in d.DESCRIPTOR.fields_by_name
            else PreparedDevice(
                driver=driver,
                pool=d.pool_name,
                device=d.device_name,
                request_names=tuple(d.request_names),
                cdi_device_ids=tuple(d.cdi_device_ids),
            )
            for d in result.devices
        ]
    if problems:
        raise PrepareError("; ".join(problems))
    return out


def unprepare(client: DRAClient, claims: Sequence[ClaimRef]) -> None:
    """Unprepare ``claims`` with one call; PrepareError naming claim and driver on any failure."""
    driver = client.driver
    try:
        response = client.node_unprepare([c.as_tuple() for c in claims])
    except grpc.RpcError as e:
        raise _rpc_error("NodeUnprepareResources", driver, claims, e) from e
    except Exception as e:
        raise PrepareError(
            f"NodeUnprepareResources of driver {driver} failed for claims {_names(claims)}: {e}"
        ) from e
    problems = _check_keys("NodeUnprepareResources", driver, claims, set(response.claims))
    for c in claims:
        result = response.claims.get(c.uid)
        if result is not None and result.error:
            problems.append(
                f"driver {driver} failed to unprepare claim {c.namespace}/{c.name} "
                f"(uid {c.uid}): {result.error}"
            )
    if problems:
        raise PrepareError("; ".join(problems))

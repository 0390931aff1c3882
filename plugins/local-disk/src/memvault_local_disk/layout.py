"""Where a document lives below the root: the folder of its partition plus its label.

A document's path below ``<root>/<workspace>/{agents,crews}/<owner>/`` is its
contract label (P4) as :func:`memvault.contract.models.label_for` spells it: ``AGENT.md``,
``daily/2026-01-31.md``. The fixed file names and the sub-folders of the keyed
tiers are derived from that one function, so the files and the labels cannot
drift apart.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from memvault.contract.errors import UpstreamError
from memvault.contract.models import Partition, Tier, label_for
from memvault_local_disk import fs

__all__ = ["FIXED_FILES", "SUBFOLDERS", "decode", "describe", "location", "partition_parts"]


def _split(label: str) -> tuple[str, str]:
    """``("daily", "2026-01-31.md")`` for a keyed label, ``("", "AGENT.md")`` for a fixed one."""
    folder, _, name = label.rpartition("/")
    return folder, name


#: The file name of each tier that holds one document per partition (``AGENT.md``).
FIXED_FILES: Final = {tier: label_for(tier) for tier in Tier if not _split(label_for(tier))[0]}
#: The sub-folder of each keyed tier (``daily``), whose documents are named ``<key>.md``.
SUBFOLDERS: Final = {tier: _split(label_for(tier))[0] for tier in Tier if tier not in FIXED_FILES}


def partition_parts(partition: Partition) -> tuple[str, ...]:
    """The folder components of a partition below the root."""
    folder = "agents" if partition.kind == "agent" else "crews"
    return (partition.workspace_id, folder, partition.owner_id)


def location(partition: Partition, tier: Tier, key: str) -> tuple[tuple[str, ...], str]:
    """The folder components below the root and the file name of one document."""
    parts = partition_parts(partition)
    sub, name = _split(label_for(tier, key))
    if sub:
        return (*parts, sub), fs.safe_component(name)
    return parts, name


def describe(partition: Partition, label: str) -> str:
    """A document, for messages: ``pins.md of agent 'ada' in workspace 'w1'``."""
    return f"{label} of {partition.kind} {partition.owner_id!r} in workspace {partition.workspace_id!r}"


def decode(data: bytes, partition: Partition, label: str, root: Path | None = None) -> str:
    """A document's text.

    :param root: the memory root, to name the file in the message.
    :raises UpstreamError: when the file is not valid UTF-8, saying which file and how to repair it.
    """
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        where = "" if root is None else f" ({root.joinpath(*partition_parts(partition), *label.split('/'))})"
        raise UpstreamError(
            f"{describe(partition, label)}{where} is not valid UTF-8 on disk (byte {exc.start}); "
            "re-save the file as UTF-8, or replace it with a retain in mode 'replace'"
        ) from exc

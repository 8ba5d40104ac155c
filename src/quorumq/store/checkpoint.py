"""The checkpoint file: how far the commit log was fsynced and the consume queues were made durable.

Recovery scans the commit log from the checkpoint's segment and dispatches records into the consume
queues from its dispatched offset. The file is replaced atomically, so it is always one whole
version; a file that does not parse is corruption, not something to guess around.
"""

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from quorumq.errors import Error, QuorumqError
from quorumq.store.atomic_file import write_atomically


@dataclass(frozen=True, slots=True)
class Checkpoint:
    flushed_offset: int  # the commit log is fsynced below this offset
    dispatched_offset: int  # consume-queue entries of every record below this offset are fsynced


def load_checkpoint(path: Path) -> Checkpoint | None:
    try:
        data = json.loads(path.read_bytes())
        checkpoint = Checkpoint(int(data["flushed_offset"]), int(data["dispatched_offset"]))
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as exc:
        raise QuorumqError(Error.STORE_CORRUPTED, f"unreadable checkpoint {path}: {exc}") from None
    if checkpoint.flushed_offset < 0 or checkpoint.dispatched_offset < 0:
        raise QuorumqError(Error.STORE_CORRUPTED, f"negative offset in checkpoint {path}: {checkpoint}")
    return checkpoint


def save_checkpoint(path: Path, checkpoint: Checkpoint) -> None:
    write_atomically(path, json.dumps(asdict(checkpoint)).encode())

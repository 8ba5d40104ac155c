"""Every gRPC channel quorumq opens goes through client/routes.open_channel, so each reconnects
within about a second of its peer coming back (limits.GRPC_RECONNECT_BACKOFF_MS_MAX): the broker's
channels to its name servers, opened with gRPC's defaults, waited out a backoff grown to 120 s."""

from pathlib import Path

import quorumq

PACKAGE_ROOT = Path(quorumq.__file__).parent
OPENER = Path("client/routes.py")


def test_only_open_channel_opens_a_channel():
    opened = [f"{path.relative_to(PACKAGE_ROOT)}:{number}" for path in sorted(PACKAGE_ROOT.rglob("*.py"))
              if path.relative_to(PACKAGE_ROOT) != OPENER
              for number, line in enumerate(path.read_text().splitlines(), 1) if "secure_channel(" in line]
    assert not opened, "open channels with client/routes.open_channel:\n" + "\n".join(opened)

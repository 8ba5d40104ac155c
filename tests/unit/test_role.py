"""core/role.py: every state against every event, at an older, the same and a newer master epoch."""

import pytest

from quorumq.core.role import (
    Elected,
    Follow,
    HandOverBegins,
    HandOverEnds,
    Phase,
    Registered,
    Role,
    RoleRefused,
    transition,
)

ME, OTHER = 1, 2
EPOCH = 5
STATES = {
    "fenced": Role(Phase.FENCED, 0, 0, ME),
    "slave": Role(Phase.SLAVE, EPOCH, OTHER, ME),
    "master": Role(Phase.MASTER, EPOCH, ME, ME),
    "handing over": Role(Phase.HANDING_OVER, EPOCH, ME, ME),
}


def events(epoch: int):
    return {"elected": Elected(epoch), "follow": Follow(epoch, OTHER), "hand-over begins": HandOverBegins(epoch),
            "hand-over ends": HandOverEnds(epoch)}


# (state, event, epoch relative to the state's) -> the role after it; missing pairs are refused.
ALLOWED = {
    ("fenced", "elected", "newer"): Role(Phase.MASTER, EPOCH + 1, ME, ME),
    ("fenced", "follow", "newer"): Role(Phase.SLAVE, EPOCH + 1, OTHER, ME),
    ("fenced", "elected", "same"): Role(Phase.MASTER, EPOCH, ME, ME),  # fenced sits at epoch 0: EPOCH is newer
    ("fenced", "follow", "same"): Role(Phase.SLAVE, EPOCH, OTHER, ME),
    ("fenced", "elected", "older"): Role(Phase.MASTER, EPOCH - 1, ME, ME),
    ("fenced", "follow", "older"): Role(Phase.SLAVE, EPOCH - 1, OTHER, ME),
    ("slave", "elected", "newer"): Role(Phase.MASTER, EPOCH + 1, ME, ME),
    ("slave", "follow", "newer"): Role(Phase.SLAVE, EPOCH + 1, OTHER, ME),
    ("master", "elected", "newer"): Role(Phase.MASTER, EPOCH + 1, ME, ME),
    ("master", "follow", "newer"): Role(Phase.SLAVE, EPOCH + 1, OTHER, ME),
    ("master", "follow", "same"): Role(Phase.SLAVE, EPOCH, OTHER, ME),
    ("master", "hand-over begins", "same"): Role(Phase.HANDING_OVER, EPOCH, ME, ME),
    ("handing over", "elected", "newer"): Role(Phase.MASTER, EPOCH + 1, ME, ME),
    ("handing over", "follow", "newer"): Role(Phase.SLAVE, EPOCH + 1, OTHER, ME),
    ("handing over", "follow", "same"): Role(Phase.SLAVE, EPOCH, OTHER, ME),
    ("handing over", "hand-over ends", "same"): Role(Phase.MASTER, EPOCH, ME, ME),
}


@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("event", events(0))
@pytest.mark.parametrize("when", ["older", "same", "newer"])
def test_every_state_against_every_event(state, event, when):
    epoch = EPOCH + {"older": -1, "same": 0, "newer": 1}[when]
    expected = ALLOWED.get((state, event, when))
    if expected is None:
        with pytest.raises(RoleRefused):
            transition(STATES[state], events(epoch)[event])
    else:
        assert transition(STATES[state], events(epoch)[event]) == expected


@pytest.mark.parametrize("state", STATES)
def test_a_broker_registers_once_before_any_role(state):
    assert transition(Role(), Registered(ME)) == Role(Phase.FENCED, 0, 0, ME)
    with pytest.raises(RoleRefused):
        transition(STATES[state], Registered(ME))
    with pytest.raises(RoleRefused):
        transition(Role(), Registered(0))


def test_an_unregistered_broker_is_never_master_and_never_follows_itself():
    with pytest.raises(RoleRefused, match="unregistered"):
        transition(Role(), Elected(1))
    with pytest.raises(RoleRefused):
        transition(STATES["slave"], Follow(EPOCH + 1, ME))
    with pytest.raises(RoleRefused):
        transition(STATES["slave"], Follow(EPOCH + 1, 0))

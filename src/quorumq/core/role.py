"""A controller-mode broker's role (spec rocketmq-ha.md 2.7) as a transition table.

The broker starts fenced: a slave without a master, refusing sends. The controller link turns what
the controller says into events, each checked against the newest master epoch applied:

    state \\ event   Registered   Elected(e)     Follow(e, m)     HandOverBegins(e)  HandOverEnds(e)
    FENCED          FENCED (1)   MASTER e>E(2)  SLAVE e>E        -                  -
    SLAVE           -            MASTER e>E(2)  SLAVE e>E        -                  -
    MASTER          -            MASTER e>E     SLAVE e>=E       HANDING_OVER e==E  -
    HANDING_OVER    -            MASTER e>E     SLAVE e>=E       -                  MASTER e==E

E is the epoch applied. (1) once, before any role. (2) once registered: the master is named by
this broker's controller id. A master told of another master at its own epoch steps down (the
controller elected that one; this broker missed it). A newer election ends a hand-over. Any other
event is refused (`RoleRefused`), never applied: the broker keeps the role it had.
"""

from dataclasses import dataclass, replace
from enum import Enum


class Phase(Enum):
    FENCED = "fenced"  # no master known yet
    SLAVE = "slave"  # follows master `master_id` of `epoch`
    MASTER = "master"  # elected at `epoch`; takes sends
    HANDING_OVER = "handing over"  # a master refusing sends while its preferred broker catches up


@dataclass(frozen=True, slots=True)
class Role:
    phase: Phase = Phase.FENCED
    epoch: int = 0  # the newest master epoch applied
    master_id: int = 0  # the controller's id of the master of `epoch` (0: none known)
    broker_id: int = 0  # this broker's id at the controller (0: not registered yet)

    @property
    def is_master(self) -> bool:
        return self.phase in (Phase.MASTER, Phase.HANDING_OVER)


@dataclass(frozen=True, slots=True)
class Registered:
    broker_id: int


@dataclass(frozen=True, slots=True)
class Elected:
    epoch: int


@dataclass(frozen=True, slots=True)
class Follow:
    epoch: int
    master_id: int


@dataclass(frozen=True, slots=True)
class HandOverBegins:
    epoch: int


@dataclass(frozen=True, slots=True)
class HandOverEnds:
    epoch: int


Event = Registered | Elected | Follow | HandOverBegins | HandOverEnds


class RoleRefused(Exception):
    """An event the table does not allow in the current role; the role is unchanged."""


def transition(role: Role, event: Event) -> Role:
    """The role after `event`; raises RoleRefused when the table does not allow it."""
    if isinstance(event, Registered):
        if role.phase is Phase.FENCED and role.broker_id == 0 and event.broker_id > 0:
            return replace(role, broker_id=event.broker_id)
    elif isinstance(event, Elected):
        if role.broker_id > 0 and event.epoch > role.epoch:
            return replace(role, phase=Phase.MASTER, epoch=event.epoch, master_id=role.broker_id)
    elif isinstance(event, Follow):
        newer = event.epoch > role.epoch or role.is_master and event.epoch == role.epoch
        if newer and event.master_id > 0 and event.master_id != role.broker_id:
            return replace(role, phase=Phase.SLAVE, epoch=event.epoch, master_id=event.master_id)
    elif isinstance(event, HandOverBegins):
        if role.phase is Phase.MASTER and event.epoch == role.epoch:
            return replace(role, phase=Phase.HANDING_OVER)
    elif isinstance(event, HandOverEnds):
        if role.phase is Phase.HANDING_OVER and event.epoch == role.epoch:
            return replace(role, phase=Phase.MASTER)
    raise RoleRefused(f"{event} is not a transition of a broker {role.phase.value} at master epoch {role.epoch}"
                      f" (broker id {role.broker_id or 'unregistered'})")

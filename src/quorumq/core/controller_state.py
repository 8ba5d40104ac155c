"""The controller's decisions: RocketMQ's ReplicasInfoManager and DefaultElectPolicy (spec
rocketmq-ha.md 2.2 to 2.6, 2.10 and 3). Pure decision logic: no I/O, no asyncio, no clock reads;
time comes in as numbers read by the caller from its own clock.

The controller process keeps one `BrokerSet` per broker name (a JSON node in ZooKeeper). For each
request it reads (state, version), calls `decide`, folds the returned events with `fold`, and
writes the result only if the node is still at that version; on a conflict it reads and decides
again. `apply` is the only thing that changes a broker set. Live data (`LiveBroker`, from
heartbeats) is never stored: the leader keeps it in memory and passes it to every call.

Decisions on RocketMQ's quirks, KEEP or FIX:

1. KEEP. Every handler checks in RocketMQ's order (spec 2.4) and answers with RocketMQ's
   ResponseCode numbers (2000 to 2014).
2. KEEP. The first election of a set (master epoch 0) elects the broker that asks, without a
   liveness check. FIX: only a registered broker. An election at epoch 0 that names no registered
   broker changes nothing; RocketMQ would record "not elected" at epoch 1 with an empty
   SyncStateSet, after which no broker could ever be elected (unclean off).
3. FIX (#10578). Candidates rank by epoch (higher first), max offset (higher first), then
   brokerElectionPriority (lower first), compared as plain integers, and a full tie goes to the
   lowest broker id. RocketMQ casts the offset difference to int and leaves ties to hash order.
4. FIX. A heartbeat's report replaces the previous one, even with a lower offset. RocketMQ keeps a
   stale higher offset after a truncation until the entry expires, which can rank a broker above
   one that holds more. Heartbeats arrive in order on one stream, so the latest report is the truth.
5. KEEP. A controller-triggered election that finds no candidate records "not elected" (master
   epoch + 1, SyncStateSet kept), so the lost master is fenced; a broker- or admin-triggered one
   answers CONTROLLER_ELECT_MASTER_FAILED and changes nothing. FIX: when no master is recorded
   already, nothing is recorded again; otherwise the leader's scan would raise the epoch on every
   pass while the set waits for a SyncStateSet member to return.
6. KEEP. Unclean election is off by default (spec 2.10); when on, the registered live brokers are
   ranked once no SyncStateSet member is alive, and a designated broker may win among them. FIX:
   only then. RocketMQ also runs that pass when a designated broker is outside the set while
   members live, so an admin could hand the role to a broker that is not in sync.
7. FIX (spec 3, "Design cautions"). The preferred master is NOT elected inside alterSyncStateSet
   as PR 5694 does: that moves the role without fencing the old master, and sends it acknowledged
   after the preferred broker's last ack are cut when it rejoins as a slave. `handover_target`
   only names the broker; the master fences its writes, waits until that broker holds every byte,
   and asks for its designated election (Trigger.ADMIN), which elects it only if it is alive and
   in the SyncStateSet. alterSyncStateSet keeps refusing an unchanged set (2013) with
   enablePreferredMaster too: the master reports only changes.
8. FIX. registerBroker names the recorded master when it is alive, as RocketMQ, or when it is the
   broker registering (it is talking to us). RocketMQ hides it until that broker's first
   heartbeat lands; a broker told "no master" asks for an election at once, which could move the
   role to a slave for no reason.
9. FIX. Broker ids are at least 1 (RocketMQ accepts 0, the old master id, in a known set); the next
   id handed out is above every id taken (RocketMQ adds one per id applied, so after a broker
   applied a higher id it hands out taken ids); a set holds at most BROKERS_PER_SET_MAX ids.
10. FIX. cleanBrokerData refuses ids that are not registered or still alive. Cleaning the whole
    set is refused while a master is recorded (KEEP) and while any of its brokers is alive
    (RocketMQ looks only at the master record). Removing the master's id records "not elected"
    (master epoch + 1) instead of keeping a master id that no longer exists. The set is gone when
    its last id goes; RocketMQ drops it when its SyncStateSet empties, ids left or not. Removing
    a member moves the SyncStateSet's epoch, so its master takes the new set (to a master, a set
    of the epoch it holds is older news).
11. FIX. Malformed requests answer CONTROLLER_INVALID_REQUEST and change nothing: a controller
    trigger that names a broker, a broker or admin trigger that names none, texts longer than
    TEXT_LENGTH_MAX.
12. FIX. A BrokerSet cannot be built in a state that breaks its invariants (ValueError), so
    `from_json` refuses a malformed or inconsistent node, and one with unknown keys: a node from a
    newer format is refused rather than rewritten without its new fields.
13. FIX (#10013). A broker whose heartbeats say asyncLearner is never a candidate: not in the
    first election it asks for, not among the SyncStateSet (it never joins it), not in an unclean
    election. RocketMQ's controller knows nothing of learners and can elect one.
14. FIX (reliability spec F10). A broker whose heartbeats say its store is damaged (recovery or
    a read found a record failing its check, or recovery cut a tail, and it has not yet copied
    that much back from a master) ranks below every sound candidate, and a damaged master is
    lost while a sound member of the SyncStateSet is active: the leader's scan elects that
    member, and the old master repairs its log as a slave. With no sound member alive a damaged
    broker can still win: it holds what it acknowledged up to the damage, and refusing every
    candidate would leave the set without a master after a power loss of all its brokers.
"""

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum, IntEnum
from types import MappingProxyType

from quorumq import limits

PREFERRED_PRIORITY = 0  # brokerElectionPriority of the preferred master (seed 004)
PRIORITY_DEFAULT = 2**31 - 1  # brokerElectionPriority's default, Integer.MAX_VALUE: the least preferred
TEXT_LENGTH_MAX = 512  # characters of an address, check code, cluster or broker name
JSON_BYTES_MAX = 1 << 20  # a broker set's node; ZooKeeper's default jute.maxbuffer is 1 MiB

assert PREFERRED_PRIORITY == limits.PREFERRED_MASTER_PRIORITY
assert PRIORITY_DEFAULT == limits.ELECTION_PRIORITY_DEFAULT
# 32 ids with the longest address and check code stay far below the node size.
assert limits.BROKERS_PER_SET_MAX * 4 * TEXT_LENGTH_MAX < JSON_BYTES_MAX


class Code(IntEnum):
    """RocketMQ's ResponseCode values for the controller."""

    SUCCESS = 0
    CONTROLLER_FENCED_MASTER_EPOCH = 2000
    CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH = 2001
    CONTROLLER_INVALID_MASTER = 2002
    CONTROLLER_INVALID_REPLICAS = 2003
    CONTROLLER_MASTER_NOT_AVAILABLE = 2004
    CONTROLLER_INVALID_REQUEST = 2005
    CONTROLLER_BROKER_NOT_ALIVE = 2006
    CONTROLLER_NOT_LEADER = 2007
    CONTROLLER_BROKER_METADATA_NOT_EXIST = 2008
    CONTROLLER_INVALID_CLEAN_BROKER_METADATA = 2009
    CONTROLLER_BROKER_NEED_TO_BE_REGISTERED = 2010
    CONTROLLER_MASTER_STILL_EXIST = 2011
    CONTROLLER_ELECT_MASTER_FAILED = 2012
    CONTROLLER_ALTER_SYNC_STATE_SET_FAILED = 2013
    CONTROLLER_BROKER_ID_INVALID = 2014


@dataclass(frozen=True)
class ControllerSettings:
    enable_elect_unclean_master: bool = False  # enableElectUncleanMaster
    enable_preferred_master: bool = False  # enablePreferredMaster (PR 5694, decision 7)


# The stored state.

def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def _is_int(value: object) -> bool:
    return type(value) is int  # bool is an int subclass and is refused


def _is_text(value: object) -> bool:
    return type(value) is str and len(value) <= TEXT_LENGTH_MAX


@dataclass(frozen=True)
class BrokerSet:
    """One broker name's replica metadata (RocketMQ's BrokerReplicaInfo and SyncStateInfo)."""

    cluster: str
    name: str
    next_id: int = 1  # the id GetNextBrokerId hands out
    # broker id -> (address, check code); a read-only copy, left out of the hash
    brokers: Mapping[int, tuple[str, str]] = field(default_factory=dict, hash=False)
    master_id: int | None = None
    master_epoch: int = 0  # 0: never elected
    sync_state_set: frozenset[int] = frozenset()
    sync_state_set_epoch: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "brokers", MappingProxyType(dict(self.brokers)))  # nobody edits it in place
        object.__setattr__(self, "sync_state_set", frozenset(self.sync_state_set))
        _require(_is_text(self.cluster) and _is_text(self.name) and self.name != "", "bad cluster or name")
        _require(_is_int(self.next_id) and self.next_id >= 1, f"bad next id {self.next_id!r}")
        _require(len(self.brokers) <= limits.BROKERS_PER_SET_MAX, f"{len(self.brokers)} brokers")
        for broker_id, value in self.brokers.items():
            _require(_is_int(broker_id) and 1 <= broker_id < self.next_id, f"bad broker id {broker_id!r}")
            _require(type(value) is tuple and len(value) == 2 and all(map(_is_text, value)),
                     f"bad address and check code {value!r}")
        _require(_is_int(self.master_epoch) and self.master_epoch >= 0, "bad master epoch")
        _require(_is_int(self.sync_state_set_epoch) and self.sync_state_set_epoch >= 0,
                 "bad SyncStateSet epoch")
        _require(all(map(_is_int, self.sync_state_set)) and self.sync_state_set <= self.brokers.keys(),
                 "SyncStateSet members must be registered")
        _require(self.master_id is None or self.master_id in self.sync_state_set and _is_int(self.master_id),
                 f"master {self.master_id!r} is not in the SyncStateSet")
        _require(self.master_epoch > 0 or (self.master_id is None and not self.sync_state_set
                                           and self.sync_state_set_epoch == 0),
                 "a set never elected has no master and no SyncStateSet")

    def address(self, broker_id: int | None) -> str:
        """The registered address of `broker_id`; "" for None or an unknown id."""
        return self.brokers[broker_id][0] if broker_id is not None and broker_id in self.brokers else ""

    def to_json(self) -> bytes:
        """The node's bytes: stable, with sorted keys."""
        return json.dumps({
            "cluster": self.cluster, "name": self.name, "nextId": self.next_id,
            "brokers": {str(broker_id): list(self.brokers[broker_id]) for broker_id in sorted(self.brokers)},
            "masterId": self.master_id, "masterEpoch": self.master_epoch,
            "syncStateSet": sorted(self.sync_state_set), "syncStateSetEpoch": self.sync_state_set_epoch,
        }, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> "BrokerSet":
        """Parse a node written by `to_json`; ValueError on anything malformed (decision 12)."""
        _require(isinstance(data, (bytes, bytearray)) and len(data) <= JSON_BYTES_MAX,
                 "not a broker set node")
        try:
            raw = json.loads(data)
        except (ValueError, RecursionError) as exc:
            raise ValueError(f"not JSON: {exc}") from None
        _require(type(raw) is dict and raw.keys() == _JSON_KEYS, "not a broker set object")
        _require(all(_is_int(raw[key]) for key in ("nextId", "masterEpoch", "syncStateSetEpoch")),
                 "bad nextId or epoch")
        _require(raw["masterId"] is None or _is_int(raw["masterId"]), "bad masterId")
        members = raw["syncStateSet"]
        _require(type(members) is list and all(map(_is_int, members)) and len(set(members)) == len(members),
                 "bad syncStateSet")
        return cls(raw["cluster"], raw["name"], raw["nextId"], _parse_brokers(raw["brokers"]),
                   raw["masterId"], raw["masterEpoch"], frozenset(members), raw["syncStateSetEpoch"])


_JSON_KEYS = {"cluster", "name", "nextId", "brokers", "masterId", "masterEpoch", "syncStateSet",
              "syncStateSetEpoch"}
_ID_TEXT = re.compile(r"[1-9][0-9]{0,18}")  # ASCII digits only: int() would also take other scripts' digits


def _parse_brokers(raw: object) -> dict[int, tuple[str, str]]:
    if type(raw) is not dict:
        raise ValueError("bad brokers")
    brokers = {}
    for key, value in raw.items():
        _require(_ID_TEXT.fullmatch(key) is not None, f"bad broker id {key!r}")
        _require(type(value) is list and len(value) == 2, f"bad broker entry {value!r}")
        brokers[int(key)] = (value[0], value[1])  # BrokerSet checks they are texts
    return brokers


# Live data.

@dataclass(frozen=True)
class LiveBroker:
    """What the leader knows from one broker's latest heartbeat (RocketMQ's BrokerLiveInfo)."""

    broker_id: int
    address: str
    last_heartbeat_ms: int  # the leader's clock when the heartbeat arrived
    timeout_ms: int  # controllerHeartBeatTimeoutMills, carried in the heartbeat
    epoch: int  # the broker's last master epoch
    max_offset: int
    confirm_offset: int
    priority: int = PRIORITY_DEFAULT  # brokerElectionPriority: lower is preferred
    async_learner: bool = False  # asyncLearner: copies the log, never joins the SyncStateSet or wins
    store_damaged: bool = False  # its log has damage it has not yet repaired (decision 14)

    def active(self, now_ms: int) -> bool:
        """isBrokerActive: heard from within its timeout (the bound is inclusive)."""
        return self.last_heartbeat_ms + self.timeout_ms >= now_ms


def on_heartbeat(previous: LiveBroker | None, report: LiveBroker) -> LiveBroker:
    """The live entry after a heartbeat: the latest report wins (decision 4)."""
    assert previous is None or previous.broker_id == report.broker_id, (previous, report)
    return report


def _is_active(live: Mapping[int, LiveBroker], broker_id: int | None, now_ms: int) -> bool:
    entry = live.get(broker_id) if broker_id is not None else None
    if entry is None:
        return False
    assert entry.broker_id == broker_id, (broker_id, entry)
    return entry.active(now_ms)


# Requests.

@dataclass(frozen=True)
class GetNextBrokerId:
    cluster: str
    name: str


@dataclass(frozen=True)
class ApplyBrokerId:
    cluster: str
    name: str
    broker_id: int
    check_code: str  # "address;timestamp": tells a crashed broker's retry from another broker
    address: str


@dataclass(frozen=True)
class RegisterBroker:
    cluster: str
    name: str
    broker_id: int
    address: str


@dataclass(frozen=True)
class AlterSyncStateSet:
    name: str
    master_id: int
    master_epoch: int
    new_set: frozenset[int]
    sync_state_set_epoch: int  # the epoch of the set the master changes


class Trigger(Enum):
    BROKER = "broker"  # a broker asks (ofBrokerTrigger): the best candidate wins, not necessarily it
    CONTROLLER = "controller"  # the leader lost the master (ofControllerTrigger); names no broker
    ADMIN = "admin"  # designated election (ofAdminTrigger): only the named broker may win


@dataclass(frozen=True)
class ElectMaster:
    cluster: str
    name: str
    broker_id: int = -1  # -1 with Trigger.CONTROLLER; the requester or the designated broker otherwise
    trigger: Trigger = Trigger.CONTROLLER


@dataclass(frozen=True)
class CleanBrokerData:
    cluster: str
    name: str
    broker_ids: frozenset[int] | None = None  # None: the whole set


@dataclass(frozen=True)
class GetReplicaInfo:
    name: str


Request = (GetNextBrokerId | ApplyBrokerId | RegisterBroker | AlterSyncStateSet | ElectMaster
           | CleanBrokerData | GetReplicaInfo)


# Events.

@dataclass(frozen=True)
class BrokerIdApplied:
    cluster: str
    name: str
    broker_id: int
    address: str
    check_code: str


@dataclass(frozen=True)
class BrokerAddressUpdated:
    broker_id: int
    address: str


@dataclass(frozen=True)
class MasterElected:
    master_id: int | None  # None: not elected; the master epoch moves on, the SyncStateSet stays


@dataclass(frozen=True)
class SyncStateSetAltered:
    members: frozenset[int]


@dataclass(frozen=True)
class BrokerDataCleaned:
    broker_ids: frozenset[int] | None  # None: the whole set


Event = BrokerIdApplied | BrokerAddressUpdated | MasterElected | SyncStateSetAltered | BrokerDataCleaned
Decision = tuple["Reply", tuple[Event, ...]]


# Replies.

@dataclass(frozen=True)
class Reply:
    """A decision's answer, with the set's state after its events (defaults when there is no set).

    `master_id` None means no master is known (none recorded, or, in a register reply, one that
    is not alive: the broker should ask for an election).
    """

    code: Code
    message: str = ""
    master_id: int | None = None
    master_address: str = ""  # the master's address as registered in the set
    master_epoch: int = 0
    sync_state_set: frozenset[int] = frozenset()
    sync_state_set_epoch: int = 0
    broker_id: int | None = None  # GetNextBrokerId's and ApplyBrokerId's id
    brokers: Mapping[int, str] = field(default_factory=dict, hash=False)  # every registered id -> address

    @property
    def in_sync_ids(self) -> frozenset[int]:
        return frozenset(self.brokers.keys() & self.sync_state_set)

    @property
    def out_of_sync_ids(self) -> frozenset[int]:
        return frozenset(self.brokers.keys() - self.sync_state_set)


def _reply(code: Code, broker_set: BrokerSet | None, message: str = "", *, broker_id: int | None = None,
           show_master: bool = True) -> Reply:
    if broker_set is None:
        return Reply(code, message, broker_id=broker_id)
    master = broker_set.master_id if show_master else None
    return Reply(code, message, master, broker_set.address(master), broker_set.master_epoch,
                 broker_set.sync_state_set, broker_set.sync_state_set_epoch, broker_id,
                 MappingProxyType({member: value[0] for member, value in broker_set.brokers.items()}))


def _decided(broker_set: BrokerSet | None, events: tuple[Event, ...], code: Code = Code.SUCCESS,
             message: str = "", **reply_fields) -> Decision:
    """The reply on the state after `events`, with the events."""
    return _reply(code, fold(broker_set, events), message, **reply_fields), events


def _refused(code: Code, broker_set: BrokerSet | None, message: str) -> Decision:
    assert code is not Code.SUCCESS, message
    return _reply(code, broker_set, message), ()


# Applying events.

def apply(broker_set: BrokerSet | None, event: Event) -> BrokerSet | None:
    """The set after one event; None when the set is gone. Business rules were checked by `decide`;
    this asserts only what keeps the set consistent, and BrokerSet checks the rest."""
    if isinstance(event, BrokerIdApplied):
        after = _apply_broker_id(broker_set, event)
    else:
        applier = _APPLIERS.get(type(event))
        if applier is None:
            raise TypeError(f"not a controller event: {event!r}")
        assert broker_set is not None, event  # only an applied id creates a set
        after = applier(broker_set, event)
    if broker_set is not None and after is not None:
        assert after.master_epoch >= broker_set.master_epoch, (broker_set, event)
        assert after.sync_state_set_epoch >= broker_set.sync_state_set_epoch, (broker_set, event)
        assert after.next_id >= broker_set.next_id, (broker_set, event)
    return after


def fold(broker_set: BrokerSet | None, events: Iterable[Event]) -> BrokerSet | None:
    """The set after applying `events` in order."""
    for event in events:
        broker_set = apply(broker_set, event)
    return broker_set


def _apply_broker_id(broker_set: BrokerSet | None, event: BrokerIdApplied) -> BrokerSet:
    base = broker_set if broker_set is not None else BrokerSet(event.cluster, event.name)
    assert base.name == event.name and event.broker_id not in base.brokers, (base, event)
    return replace(base, brokers={**base.brokers, event.broker_id: (event.address, event.check_code)},
                   next_id=max(base.next_id, event.broker_id + 1))  # decision 9


def _apply_address(broker_set: BrokerSet, event: BrokerAddressUpdated) -> BrokerSet:
    assert event.broker_id in broker_set.brokers, event
    check_code = broker_set.brokers[event.broker_id][1]
    return replace(broker_set, brokers={**broker_set.brokers, event.broker_id: (event.address, check_code)})


def _apply_election(broker_set: BrokerSet, event: MasterElected) -> BrokerSet:
    epoch = broker_set.master_epoch + 1
    if event.master_id is None:
        assert broker_set.master_epoch > 0, "a set never elected records no 'not elected' (decision 2)"
        return replace(broker_set, master_id=None, master_epoch=epoch)
    assert event.master_id in broker_set.brokers, event
    return replace(broker_set, master_id=event.master_id, master_epoch=epoch,
                   sync_state_set=frozenset({event.master_id}),
                   sync_state_set_epoch=broker_set.sync_state_set_epoch + 1)


def _apply_alter(broker_set: BrokerSet, event: SyncStateSetAltered) -> BrokerSet:
    assert broker_set.master_id is not None and broker_set.master_id in event.members, event
    assert event.members <= broker_set.brokers.keys(), event
    return replace(broker_set, sync_state_set=frozenset(event.members),
                   sync_state_set_epoch=broker_set.sync_state_set_epoch + 1)


def _apply_clean(broker_set: BrokerSet, event: BrokerDataCleaned) -> BrokerSet | None:
    if event.broker_ids is None:
        return None
    assert event.broker_ids and event.broker_ids <= broker_set.brokers.keys(), event
    brokers = {broker_id: value for broker_id, value in broker_set.brokers.items()
               if broker_id not in event.broker_ids}
    if not brokers:
        return None
    members = broker_set.sync_state_set - event.broker_ids
    set_epoch = broker_set.sync_state_set_epoch + (members != broker_set.sync_state_set)
    if broker_set.master_id in event.broker_ids:  # decision 10: the master is gone, as "not elected"
        return replace(broker_set, brokers=brokers, sync_state_set=members, sync_state_set_epoch=set_epoch,
                       master_id=None, master_epoch=broker_set.master_epoch + 1)
    return replace(broker_set, brokers=brokers, sync_state_set=members, sync_state_set_epoch=set_epoch)


_APPLIERS: dict[type, Callable] = {
    BrokerAddressUpdated: _apply_address,
    MasterElected: _apply_election,
    SyncStateSetAltered: _apply_alter,
    BrokerDataCleaned: _apply_clean,
}


# Elections (spec 2.5).

def _rank(live: Mapping[int, LiveBroker], broker_id: int) -> tuple[bool, int, int, int, int]:
    """Sort key, best first: sound before damaged (decision 14), epoch and offset descending,
    priority ascending, then id (decision 3)."""
    entry = live[broker_id]
    return entry.store_damaged, -entry.epoch, -entry.max_offset, entry.priority, broker_id


def _is_damaged(live: Mapping[int, LiveBroker], broker_id: int | None) -> bool:
    return broker_id is not None and broker_id in live and live[broker_id].store_damaged


def _is_learner(live: Mapping[int, LiveBroker], broker_id: int) -> bool:
    return broker_id in live and live[broker_id].async_learner


def _try_elect(candidates: Iterable[int], live: Mapping[int, LiveBroker], now_ms: int, old: int | None,
               prefer: int | None) -> int | None:
    """One pass of the policy: a designated broker if it is an active candidate; otherwise the
    old master while it is active and sound (or nobody is), else the best-ranked active
    candidate. Learners never are."""
    active = [broker_id for broker_id in candidates
              if _is_active(live, broker_id, now_ms) and not _is_learner(live, broker_id)]
    if prefer is not None:
        return prefer if prefer in active else None
    if old in active and not (_is_damaged(live, old) and _has_sound(active, live)):
        return old
    return min(active, key=lambda broker_id: _rank(live, broker_id), default=None)


def _has_sound(broker_ids: Iterable[int], live: Mapping[int, LiveBroker]) -> bool:
    return any(not _is_damaged(live, broker_id) for broker_id in broker_ids)


def _elect(broker_set: BrokerSet, live: Mapping[int, LiveBroker], now_ms: int, prefer: int | None,
           settings: ControllerSettings) -> int | None:
    """The SyncStateSet pass; with unclean election, when no member is alive, every registered
    broker (decision 6)."""
    old = broker_set.master_id
    if any(_is_active(live, member, now_ms) for member in broker_set.sync_state_set):
        return _try_elect(broker_set.sync_state_set, live, now_ms, old, prefer)
    if settings.enable_elect_unclean_master:
        return _try_elect(broker_set.brokers.keys(), live, now_ms, old, prefer)
    return None


def _decide_elect(broker_set: BrokerSet | None, live: Mapping[int, LiveBroker], request: ElectMaster,
                  now_ms: int, settings: ControllerSettings) -> Decision:
    controller = request.trigger is Trigger.CONTROLLER
    if controller != (request.broker_id == -1) or (not controller and request.broker_id < 1):
        return _refused(Code.CONTROLLER_INVALID_REQUEST, broker_set, f"a {request.trigger.value} election "
                        f"for broker {request.broker_id}: only the controller's names none (-1)")
    if broker_set is None:
        return _refused(Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, None, f"{request.name} has no brokers")
    if broker_set.master_epoch == 0:
        return _first_election(broker_set, live, request)
    prefer = request.broker_id if request.trigger is Trigger.ADMIN else None
    elected = _elect(broker_set, live, now_ms, prefer, settings)
    old = broker_set.master_id
    if elected is not None and elected == old:
        return _refused(Code.CONTROLLER_MASTER_STILL_EXIST, broker_set, f"master {old} is still alive")
    if elected is not None:
        return _decided(broker_set, (MasterElected(elected),))
    if not controller:
        why = f"broker {prefer} is dead or outside the SyncStateSet" if prefer else "no candidate is alive"
        return _refused(Code.CONTROLLER_ELECT_MASTER_FAILED, broker_set, why)
    events = (MasterElected(None),) if old is not None else ()  # decision 5
    return _decided(broker_set, events, Code.CONTROLLER_MASTER_NOT_AVAILABLE,
                    "the master is lost and no broker of the SyncStateSet is alive")


def _first_election(broker_set: BrokerSet, live: Mapping[int, LiveBroker], request: ElectMaster) -> Decision:
    """Master epoch 0: the registered broker that asks wins, alive or not (decision 2), unless
    its heartbeats say it is a learner (decision 13)."""
    if _is_learner(live, request.broker_id):
        return _refused(Code.CONTROLLER_ELECT_MASTER_FAILED, broker_set,
                        f"broker {request.broker_id} is an asyncLearner")
    if request.broker_id in broker_set.brokers:
        return _decided(broker_set, (MasterElected(request.broker_id),))
    if request.trigger is Trigger.CONTROLLER:
        return _refused(Code.CONTROLLER_MASTER_NOT_AVAILABLE, broker_set,
                        "never elected: the first master is the first broker that asks")
    return _refused(Code.CONTROLLER_ELECT_MASTER_FAILED, broker_set,
                    f"broker {request.broker_id} is not registered")


# The other handlers (spec 2.4).

def _decide_next_id(broker_set: BrokerSet | None, live, request: GetNextBrokerId, now_ms,
                    settings) -> Decision:
    return _reply(Code.SUCCESS, broker_set, broker_id=1 if broker_set is None else broker_set.next_id), ()


def _decide_apply_id(broker_set: BrokerSet | None, live, request: ApplyBrokerId, now_ms,
                     settings) -> Decision:
    texts = (request.cluster, request.name, request.check_code, request.address)
    if not all(map(_is_text, texts)) or request.name == "" or request.address == "":
        return _refused(Code.CONTROLLER_INVALID_REQUEST, broker_set, "bad name, address or check code")
    broker_id = request.broker_id
    if not _is_int(broker_id) or broker_id < 1:
        return _refused(Code.CONTROLLER_BROKER_ID_INVALID, broker_set,
                        f"broker ids start at 1, not {broker_id!r}")
    if broker_set is None and broker_id != 1:
        return _refused(Code.CONTROLLER_BROKER_ID_INVALID, None,
                        f"the first broker of {request.name} takes id 1")
    if broker_set is not None and broker_id in broker_set.brokers:
        if broker_set.brokers[broker_id][1] != request.check_code:
            return _refused(Code.CONTROLLER_BROKER_ID_INVALID, broker_set,
                            f"id {broker_id} belongs to another broker")
        return _reply(Code.SUCCESS, broker_set, broker_id=broker_id), ()  # a crashed broker's retry
    if broker_set is not None and len(broker_set.brokers) >= limits.BROKERS_PER_SET_MAX:
        return _refused(Code.CONTROLLER_BROKER_ID_INVALID, broker_set,
                        f"{request.name} holds {limits.BROKERS_PER_SET_MAX} brokers already")
    event = BrokerIdApplied(request.cluster, request.name, broker_id, request.address, request.check_code)
    return _decided(broker_set, (event,), broker_id=broker_id)


def _decide_register(broker_set: BrokerSet | None, live: Mapping[int, LiveBroker], request: RegisterBroker,
                     now_ms: int, settings) -> Decision:
    if not _is_text(request.address) or request.address == "":
        return _refused(Code.CONTROLLER_INVALID_REQUEST, broker_set, "bad address")
    if broker_set is None or request.broker_id not in broker_set.brokers:
        return _refused(Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, broker_set,
                        f"broker {request.broker_id} of {request.name} must apply for its id first")
    events: tuple[Event, ...] = ()
    if broker_set.address(request.broker_id) != request.address:
        events = (BrokerAddressUpdated(request.broker_id, request.address),)
    master = broker_set.master_id
    show = master == request.broker_id or _is_active(live, master, now_ms)  # decision 8
    return _decided(broker_set, events, show_master=show)


def _decide_alter(broker_set: BrokerSet | None, live: Mapping[int, LiveBroker], request: AlterSyncStateSet,
                  now_ms: int, settings) -> Decision:
    """RocketMQ's checks in order; with enablePreferredMaster too (decision 7)."""
    failed = Code.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED
    if broker_set is None:
        return _refused(failed, None, f"{request.name} has no brokers")
    new_set = frozenset(request.new_set)
    if new_set == broker_set.sync_state_set:
        return _refused(failed, broker_set, "the SyncStateSet is unchanged")
    if request.master_id != broker_set.master_id:
        return _refused(Code.CONTROLLER_INVALID_MASTER, broker_set,
                        f"the master is {broker_set.master_id}, not {request.master_id}")
    if request.master_epoch != broker_set.master_epoch:
        return _refused(Code.CONTROLLER_FENCED_MASTER_EPOCH, broker_set,
                        f"the master epoch is {broker_set.master_epoch}, not {request.master_epoch}")
    if request.sync_state_set_epoch != broker_set.sync_state_set_epoch:
        return _refused(Code.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH, broker_set,
                        f"the SyncStateSet epoch is {broker_set.sync_state_set_epoch}, "
                        f"not {request.sync_state_set_epoch}")
    unknown = sorted(new_set - broker_set.brokers.keys())
    if unknown:
        return _refused(Code.CONTROLLER_INVALID_REPLICAS, broker_set, f"brokers {unknown} are not registered")
    dead = sorted(member for member in new_set if not _is_active(live, member, now_ms))
    if dead:
        return _refused(Code.CONTROLLER_BROKER_NOT_ALIVE, broker_set, f"brokers {dead} are not alive")
    if broker_set.master_id not in new_set:
        return _refused(failed, broker_set, f"the SyncStateSet must hold master {broker_set.master_id}")
    return _decided(broker_set, (SyncStateSetAltered(new_set),))


def _decide_clean(broker_set: BrokerSet | None, live: Mapping[int, LiveBroker], request: CleanBrokerData,
                  now_ms: int, settings) -> Decision:
    invalid = Code.CONTROLLER_INVALID_CLEAN_BROKER_METADATA
    if broker_set is None:
        return _refused(invalid, None, f"{request.name} does not exist")
    whole = request.broker_ids is None
    if whole and broker_set.master_id is not None:
        return _refused(invalid, broker_set, f"{request.name} still has master {broker_set.master_id}")
    ids = frozenset(broker_set.brokers) if request.broker_ids is None else frozenset(request.broker_ids)
    unknown = sorted(ids - broker_set.brokers.keys())
    if not ids or unknown:
        why = f"brokers {unknown} are not registered" if ids else "no broker ids given"
        return _refused(invalid, broker_set, why)
    alive = sorted(broker_id for broker_id in ids if _is_active(live, broker_id, now_ms))
    if alive:
        return _refused(invalid, broker_set, f"brokers {alive} are still alive")
    return _decided(broker_set, (BrokerDataCleaned(None if whole else ids),))


def _decide_replica_info(broker_set: BrokerSet | None, live, request: GetReplicaInfo, now_ms,
                         settings) -> Decision:
    if broker_set is None:
        return _refused(Code.CONTROLLER_BROKER_METADATA_NOT_EXIST, None, f"{request.name} does not exist")
    return _reply(Code.SUCCESS, broker_set), ()


_DECIDERS: dict[type, Callable[..., Decision]] = {
    GetNextBrokerId: _decide_next_id,
    ApplyBrokerId: _decide_apply_id,
    RegisterBroker: _decide_register,
    AlterSyncStateSet: _decide_alter,
    ElectMaster: _decide_elect,
    CleanBrokerData: _decide_clean,
    GetReplicaInfo: _decide_replica_info,
}


def decide(broker_set: BrokerSet | None, live: Mapping[int, LiveBroker], request: Request, now_ms: int,
           settings: ControllerSettings) -> Decision:
    """One request against the stored set of its broker name (None: no such set) and the leader's
    live data of that set's brokers (broker id -> entry), at `now_ms` on the clock that stamped
    the entries: the reply, and the events that make the change (none when it changes nothing).
    The reply carries the state after the events."""
    decider = _DECIDERS.get(type(request))
    if decider is None:
        raise TypeError(f"not a controller request: {request!r}")
    if broker_set is not None and broker_set.name != request.name:
        raise ValueError(f"a request for {request.name!r} decided on the set of {broker_set.name!r}")
    reply, events = decider(broker_set, live, request, now_ms, settings)
    # Only a success changes the set, and the lost master's "not elected" record.
    assert reply.code in (Code.SUCCESS, Code.CONTROLLER_MASTER_NOT_AVAILABLE) or not events, reply
    return reply, events


# The leader's scans.

def inactive_master(broker_set: BrokerSet, live: Mapping[int, LiveBroker], now_ms: int) -> bool:
    """Whether the leader should ask for a controller-triggered election (spec 2.6.3): the set has
    been elected, its master is not active (or none is recorded), and a registered broker is;
    or its master reports a damaged store and a sound member of the SyncStateSet is active
    (decision 14)."""
    master = broker_set.master_id
    if broker_set.master_epoch == 0:
        return False
    if _is_active(live, master, now_ms):
        sound = [member for member in broker_set.sync_state_set - {master}
                 if _is_active(live, member, now_ms) and not _is_learner(live, member)]
        return _is_damaged(live, master) and _has_sound(sound, live)
    return any(_is_active(live, broker_id, now_ms) for broker_id in broker_set.brokers)


def handover_target(broker_set: BrokerSet, live: Mapping[int, LiveBroker], now_ms: int,
                    settings: ControllerSettings) -> int | None:
    """With enablePreferredMaster: the preferred broker the active master should hand its role to
    (an active SyncStateSet member with priority PREFERRED_PRIORITY, the lowest id of several),
    unless the master is preferred itself; else None. Decision 7 says how the hand-over goes."""
    master = broker_set.master_id
    if master is None or not settings.enable_preferred_master or not _is_active(live, master, now_ms):
        return None
    if live[master].priority == PREFERRED_PRIORITY:
        return None
    preferred = [broker_id for broker_id in broker_set.sync_state_set - {master}
                 if _is_active(live, broker_id, now_ms) and live[broker_id].priority == PREFERRED_PRIORITY
                 and not _is_damaged(live, broker_id)]
    return min(preferred, default=None)

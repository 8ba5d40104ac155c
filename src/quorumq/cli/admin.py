"""`quorumq admin COMMAND -n ACCESS_POINT`: cluster administration in the spirit of RocketMQ's mqadmin.
Controller commands (getSyncStateSet, electMaster, ...) take `-a CONTROLLER` instead. With
`--ak AK --sk SK`, or QUORUMQ_ACCESS_KEY and QUORUMQ_SECRET_KEY in the environment, every call is
signed, as a cluster with authenticationEnabled requires.

Output is readable text, or JSON with --json. A failed command prints the error with its catalogue
name and exits 1 (bad input too, refused before anything is sent); sendMessage exits 0 only for
SEND_OK.
"""

import argparse
import asyncio
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any, Awaitable, Callable

import grpc

from quorumq.cli.dashboard import ACCESS_KEY_ENV, SECRET_KEY_ENV
from quorumq.client import AdminClient, ClientError, Message, Producer, PullConsumer
from quorumq.client.admin import message_type_name
from quorumq.client.consumer import NO_NEW_MSG
from quorumq.client.controller import ControllerClient, controller_addresses
from quorumq.client.errors import FanOutError
from quorumq.cluster import cluster_pb2 as pb
from quorumq.core.auth import Credentials, credentials_of
from quorumq.core.controller_state import Code
from quorumq.core.message_types import MESSAGE_TYPE_ATTRIBUTE, parse_attributes
from quorumq.core.subscription import (
    DEFAULT_RETRY_POLICY,
    RETRY_MAX_TIMES_DEFAULT,
    SubscriptionGroup,
    group_data,
    parse_bool,
    parse_retry_max_times,
    retry_policy_from_json,
)
from quorumq.errors import QuorumqError
from quorumq.protocol.configs import group_from_pb, group_to_pb

CONSUME_BATCH = 32
TOOLS_GROUP = "TOOLS_CONSUMER"  # mqadmin's group for reading messages


@dataclass
class Output:
    data: Any  # what --json prints
    text: str  # what a person reads
    ok: bool = True


Handler = Callable[[argparse.Namespace, AdminClient], Awaitable[Output]]
COMMANDS: dict[str, tuple[str, list[tuple[tuple, dict]], Handler]] = {}
# Commands answered by the controllers (`-a`), their handlers given a ControllerClient.
CONTROLLER_COMMANDS: dict[str, tuple[str, list[tuple[tuple, dict]], Callable]] = {}


def arg(*flags: str, **options: Any) -> tuple[tuple, dict]:
    return flags, options


def command(name: str, help_text: str, *arguments: tuple[tuple, dict],
            controller: bool = False) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        (CONTROLLER_COMMANDS if controller else COMMANDS)[name] = (help_text, list(arguments), handler)
        return handler

    return register


def table(headers: list[str], rows: list[list[Any]]) -> str:
    cells = [headers] + [[str(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in cells)


def key_values(entries: dict[str, str]) -> str:
    width = max((len(key) for key in entries), default=0)
    return "\n".join(f"{key:<{width}} = {entries[key]}" for key in sorted(entries))


async def target_brokers(admin: AdminClient, args: argparse.Namespace) -> list[str]:
    """-b ADDRESS, or every master of -c CLUSTER (of every cluster when neither is given)."""
    if args.broker:
        return [args.broker]
    return [b.address for b in await admin.brokers(args.cluster, masters_only=True)]


BROKER_OR_CLUSTER = (arg("-b", "--broker", help="one broker's address"),
                     arg("-c", "--cluster", help="the brokers of this cluster"))
TOPIC = arg("-t", "--topic", required=True)
GROUP = arg("-g", "--group", required=True)


@command("updateTopic", "create or change a topic on brokers", TOPIC, *BROKER_OR_CLUSTER,
         arg("-r", "--read-queue-nums", type=int, default=8),
         arg("-w", "--write-queue-nums", type=int, default=8),
         arg("-p", "--perm", type=int, default=6, help="4 read, 2 write, 6 read and write"),
         arg("-a", "--attributes", help="+message.type=TYPE (NORMAL, FIFO, DELAY, TRANSACTION, MIXED) sets the "
                                        "topic's type, -message.type makes it NORMAL; without -a it is kept"))
async def update_topic(args: argparse.Namespace, admin: AdminClient) -> Output:
    message_type = None
    if args.attributes is not None:
        message_type = parse_attributes(args.attributes)[MESSAGE_TYPE_ATTRIBUTE] or "NORMAL"
    addresses = await target_brokers(admin, args)
    await admin.update_topic_on(addresses, args.topic, args.read_queue_nums, args.write_queue_nums, args.perm,
                                message_type)
    data = {"topic": args.topic, "read_queue_nums": args.read_queue_nums,
            "write_queue_nums": args.write_queue_nums, "perm": args.perm, "message_type": message_type,
            "brokers": addresses}
    shown = f", type {message_type}" if message_type else ""
    return Output(data, "\n".join(
        f"updated topic {args.topic} (read {args.read_queue_nums}, write {args.write_queue_nums}, "
        f"perm {args.perm}{shown}) on {a}" for a in addresses))


@command("topicList", "list the topics the name server knows, with their message types")
async def topic_list(args: argparse.Namespace, admin: AdminClient) -> Output:
    topics = await admin.topic_types()
    return Output(topics, table(["topic", "message type"], [[topic, kind] for topic, kind in topics.items()]))


@command("topicRoute", "show a topic's queues and brokers", TOPIC)
async def topic_route(args: argparse.Namespace, admin: AdminClient) -> Output:
    route = await admin.route(args.topic)
    queues = [{"broker_name": q.broker_name, "read_queue_nums": q.read_queue_nums,
               "write_queue_nums": q.write_queue_nums, "perm": q.perm,
               "message_type": message_type_name(q.message_type)} for q in route.queues]
    brokers = [{"cluster": b.cluster, "broker_name": b.broker_name,
                "addresses": {str(i): a for i, a in sorted(b.addresses.items())}} for b in route.brokers]
    text = table(["broker", "read queues", "write queues", "perm", "message type"],
                 [list(q.values()) for q in queues])
    text += "\n\n" + table(["cluster", "broker", "id", "address"], [
        [b["cluster"], b["broker_name"], i, a] for b in brokers for i, a in b["addresses"].items()])
    return Output({"topic": route.topic, "queues": queues, "brokers": brokers}, text)


@command("clusterList", "list the brokers registered with the name server")
async def cluster_list(args: argparse.Namespace, admin: AdminClient) -> Output:
    brokers = [{"cluster": b.cluster, "broker_name": b.broker_name, "broker_id": b.broker_id,
                "address": b.address, "role": b.role, "max_offset": b.max_offset,
                "since_heard_ms": b.since_heard_ms} for b in await admin.brokers()]
    return Output(brokers, table(["cluster", "broker", "id", "address", "role", "max offset", "ms since heard"],
                                 [list(b.values()) for b in brokers]))


@command("brokerStatus", "show a broker's runtime status", arg("-b", "--broker", required=True))
async def broker_status(args: argparse.Namespace, admin: AdminClient) -> Output:
    status = await admin.broker_status(args.broker)
    return Output(status, key_values(status))


@command("getBrokerConfig", "show a broker's config", arg("-b", "--broker", required=True))
async def get_broker_config(args: argparse.Namespace, admin: AdminClient) -> Output:
    entries = await admin.broker_config(args.broker)
    return Output(entries, key_values(entries))


@command("updateBrokerConfig", "change a config key live on one broker or on every broker of the cluster",
         arg("-k", "--key", required=True), arg("-v", "--value", required=True), *BROKER_OR_CLUSTER)
async def update_broker_config(args: argparse.Namespace, admin: AdminClient) -> Output:
    addresses = await admin.update_broker_config(args.key, args.value, args.broker, args.cluster)
    return Output({"key": args.key, "value": args.value, "brokers": addresses},
                  "\n".join(f"updated {args.key}={args.value} on {a}" for a in addresses))


def lag(queue: pb.QueueProgress) -> int:
    """Messages the group has not consumed; a group without an offset has the whole queue left."""
    start = queue.consumer_offset if queue.consumer_offset >= 0 else queue.min_offset
    return max(0, queue.max_offset - start)


@command("consumerProgress", "show a consumer group's offsets and lag per queue, and its dead letters", GROUP,
         arg("-t", "--topic", default="", help="only this topic"))
async def consumer_progress(args: argparse.Namespace, admin: AdminClient) -> Output:
    answers = await admin.consumer_progress(args.group, args.topic)
    rows = [{"topic": q.topic, "broker_name": progress.broker_name, "queue_id": q.queue_id,
             "min_offset": q.min_offset, "broker_offset": q.max_offset, "consumer_offset": q.consumer_offset,
             "lag": lag(q), "inflight": q.inflight}
            for progress in answers for q in progress.queues]
    rows.sort(key=lambda r: (r["topic"], r["broker_name"], r["queue_id"]))
    total = sum(r["lag"] for r in rows)
    dead_letters = sum(progress.dead_letters for progress in answers)  # in %DLQ%<group>, on every master
    text = table(["topic", "broker", "queue", "min offset", "broker offset", "consumer offset", "lag",
                  "inflight"], [list(r.values()) for r in rows])
    return Output({"group": args.group, "queues": rows, "total_lag": total, "dead_letters": dead_letters},
                  f"{text}\n\ntotal lag: {total}\ndead letters: {dead_letters} (topic %DLQ%{args.group})")


@command("sendMessage", "send one message and print its send status",
         TOPIC, arg("-p", "--body", required=True), arg("-k", "--keys", default="", help="space-separated keys"),
         arg("--tag"), arg("-b", "--broker-name", help="send to this broker"),
         arg("-i", "--queue-id", type=int, help="send to this queue"))
async def send_message(args: argparse.Namespace, admin: AdminClient) -> Output:
    async with Producer(args.namesrv, credentials=args.credentials) as producer:
        result = await producer.send(args.topic, Message(args.body.encode(), args.tag, tuple(args.keys.split())),
                                     args.queue_id, args.broker_name)
    text = (f"{result.status} msgId={result.message_id} broker={result.broker_name} queue={result.queue_id} "
            f"offset={result.queue_offset}" + (f" epoch={result.master_epoch}" if result.master_epoch else "")
            + (f" ({result.detail})" if result.detail else ""))
    return Output(asdict(result), text, ok=result.ok)


def message_record(message: Any) -> dict:
    record = asdict(message)
    record["body"] = message.body.decode(errors="replace")
    return record


@command("consumeMessage", "print messages of a topic without committing offsets",
         TOPIC, arg("-g", "--group", default=TOOLS_GROUP), arg("-b", "--broker-name"),
         arg("-q", "--queue-id", type=int), arg("-o", "--offset", type=int, help="default: each queue's min"),
         arg("-c", "--count", type=int, default=128, help="at most this many messages in all"))
async def consume_message(args: argparse.Namespace, admin: AdminClient) -> Output:
    records = []
    async with PullConsumer(args.namesrv, args.group, credentials=args.credentials) as consumer:
        for queue in await consumer.queues(args.topic):
            if args.queue_id not in (None, queue.queue_id) or args.broker_name not in (None, queue.broker_name):
                continue
            offset = args.offset
            if offset is None:
                offset = await consumer.query_offset(args.topic, queue.queue_id, "BEGINNING",
                                                     broker_name=queue.broker_name)
            while len(records) < args.count:
                result = await consumer.pull(args.topic, queue.queue_id, offset,
                                             min(CONSUME_BATCH, args.count - len(records)),
                                             broker_name=queue.broker_name)
                records.extend(message_record(m) for m in result.messages)
                if result.status == NO_NEW_MSG or not result.messages:
                    break
                offset = result.next_offset
    text = "\n".join(f"{r['broker_name']}:{r['queue_id']}@{r['queue_offset']} msgId={r['message_id']} "
                     f"tag={r['tag']} keys={','.join(r['keys'])} body={r['body']}" for r in records)
    return Output(records, text)


@command("deleteTopic", "delete a topic from its brokers and the name server", TOPIC,
         arg("-c", "--cluster", help="only this cluster's brokers"))
async def delete_topic(args: argparse.Namespace, admin: AdminClient) -> Output:
    addresses = await admin.delete_topic(args.topic, args.cluster)
    return Output({"topic": args.topic, "brokers": addresses},
                  "\n".join([f"deleted topic {args.topic} on {a}" for a in addresses]
                            + [f"deleted the route of {args.topic} on the name server"]))


# Subscription groups (mqadmin's updateSubGroup, deleteSubGroup, getConsumerConfig).

@command("updateSubGroup", "create or replace a consumer group's subscription config on brokers (fields "
         "left out get their defaults, as mqadmin's updateSubGroup)", GROUP, *BROKER_OR_CLUSTER,
         arg("-s", "--consume-enable", default="true", help="true: the group may receive (default)"),
         arg("-o", "--consume-message-orderly", default="false", help="true: the group is FIFO on FIFO topics"),
         arg("-r", "--retry-max-times", default=str(RETRY_MAX_TIMES_DEFAULT),
             help="redeliveries after the first, 0..64 (default 16)"),
         arg("-p", "--group-retry-policy", help='JSON, e.g. {"type":"EXPONENTIAL","exponentialRetryPolicy":'
                                                '{"initial":5000,"max":7200000,"multiplier":2}} or {"type":'
                                                '"CUSTOMIZED","customizedRetryPolicy":{"next":[1000,5000]}}'))
async def update_sub_group(args: argparse.Namespace, admin: AdminClient) -> Output:
    group = SubscriptionGroup(
        args.group, consume_enable=parse_bool(args.consume_enable, "-s"),
        consume_message_orderly=parse_bool(args.consume_message_orderly, "-o"),
        retry_max_times=parse_retry_max_times(args.retry_max_times),
        retry_policy=DEFAULT_RETRY_POLICY if args.group_retry_policy is None
        else retry_policy_from_json(args.group_retry_policy))
    addresses = await target_brokers(admin, args)
    await admin.update_subscription_group(addresses, group_to_pb(group))
    data = group_data(group)
    return Output({"group": data, "brokers": addresses},
                  "\n".join([f"create subscription group to {a} success." for a in addresses]
                            + [json.dumps(data)]))


@command("deleteSubGroup", "drop a consumer group's subscription config on brokers (the group has the "
         "defaults again; its offsets stay)", GROUP, *BROKER_OR_CLUSTER)
async def delete_sub_group(args: argparse.Namespace, admin: AdminClient) -> Output:
    addresses = await target_brokers(admin, args)
    await admin.delete_subscription_group(addresses, args.group)
    return Output({"group": args.group, "brokers": addresses},
                  "\n".join(f"delete subscription group [{args.group}] from broker [{a}] success."
                            for a in addresses))


# ACL 2.0 (mqadmin's names and flags). Each change goes to -b one broker or every master of -c a
# cluster, as RocketMQ's; a user's password is shown as ******.

USER = arg("-u", "--username", required=True)
SUBJECT = arg("-s", "--subject", required=True, help="User:NAME")
HIDDEN = "******"


def user_record(user: pb.AuthUser) -> dict[str, str]:
    return {"username": user.username, "password": HIDDEN,
            "userType": user.user_type, "userStatus": user.user_status}


def acl_record(rule: pb.Acl) -> dict[str, Any]:
    return {"subject": rule.subject, "policies": [{"resource": e.resource, "actions": list(e.actions),
                                                   "sourceIps": list(e.source_ips), "decision": e.decision}
                                                  for e in rule.entries]}


async def change_access(args: argparse.Namespace, admin: AdminClient, method: str, request: Any,
                        what: str) -> Output:
    addresses = await target_brokers(admin, args)
    await admin.change_access(addresses, method, request)
    return Output({"brokers": addresses}, "\n".join(f"{what} on {a}" for a in addresses))


PASSWORD_HELP = "the user's password; - reads it from the first line of the input, where ps cannot show it"


def _user_change(args: argparse.Namespace) -> pb.AuthUser:
    password = sys.stdin.readline().rstrip("\r\n") if args.password == "-" else args.password or ""
    return pb.AuthUser(username=args.username, password=password, user_type=args.user_type or "",
                       user_status=getattr(args, "user_status", None) or "")


@command("createUser", "create a user on brokers", USER, arg("-p", "--password", required=True, help=PASSWORD_HELP),
         arg("-t", "--user-type", help="Super or Normal (default)"), *BROKER_OR_CLUSTER)
async def create_user(args: argparse.Namespace, admin: AdminClient) -> Output:
    return await change_access(args, admin, "CreateUser", _user_change(args), f"created user {args.username}")


@command("updateUser", "change a user's password, type or status on brokers", USER,
         arg("-p", "--password", help=PASSWORD_HELP),
         arg("-t", "--user-type", help="Super or Normal"), arg("-s", "--user-status", help="enable or disable"),
         *BROKER_OR_CLUSTER)
async def update_user(args: argparse.Namespace, admin: AdminClient) -> Output:
    return await change_access(args, admin, "UpdateUser", _user_change(args), f"updated user {args.username}")


@command("deleteUser", "delete a user and its rules on brokers", USER, *BROKER_OR_CLUSTER)
async def delete_user(args: argparse.Namespace, admin: AdminClient) -> Output:
    return await change_access(args, admin, "DeleteUser", pb.UserRequest(username=args.username),
                               f"deleted user {args.username}")


async def _access_by_broker(args: argparse.Namespace, admin: AdminClient) -> dict[str, pb.AccessControl]:
    return {address: await admin.access(address) for address in await target_brokers(admin, args)}


@command("getUser", "show a user on brokers", USER, *BROKER_OR_CLUSTER)
async def get_user(args: argparse.Namespace, admin: AdminClient) -> Output:
    found = {address: [user_record(u) for u in access.users if u.username == args.username]
             for address, access in (await _access_by_broker(args, admin)).items()}
    rows = [[address, *user.values()] for address, users in found.items() for user in users]
    return Output(found, table(["broker", "username", "password", "type", "status"], rows), ok=bool(rows))


@command("listUser", "list the users on brokers (the config's two aside)", *BROKER_OR_CLUSTER,
         arg("-f", "--filter", default="", help="only names starting with this"))
async def list_user(args: argparse.Namespace, admin: AdminClient) -> Output:
    found = {address: [user_record(u) for u in access.users if u.username.startswith(args.filter)]
             for address, access in (await _access_by_broker(args, admin)).items()}
    return Output(found, table(["broker", "username", "password", "type", "status"],
                               [[address, *user.values()] for address, users in found.items() for user in users]))


def _entry(args: argparse.Namespace) -> pb.Acl:
    return pb.Acl(subject=args.subject, entries=[pb.AclEntry(
        resource=resource, actions=args.actions.split(","), decision=args.decision,
        source_ips=args.source_ip.split(",") if args.source_ip else []) for resource in args.resources.split(",")])


ACL_ENTRY = (SUBJECT, arg("-r", "--resources", required=True, help="Topic:NAME, Group:NAME*, Cluster:*, *, "
                                                                     "separated by commas"),
             arg("-a", "--actions", required=True, help="Pub, Sub, Create, Update, Delete, Get, List, All, "
                                                         "separated by commas"),
             arg("-d", "--decision", required=True, help="Allow or Deny"),
             arg("-i", "--source-ip", help="addresses or CIDR blocks, separated by commas (default: any)"),
             *BROKER_OR_CLUSTER)


@command("createAcl", "give a user rules on brokers (an entry replaces the user's for its resource)", *ACL_ENTRY)
async def create_acl(args: argparse.Namespace, admin: AdminClient) -> Output:
    return await change_access(args, admin, "CreateAcl", _entry(args), f"rules of {args.subject} set")


@command("updateAcl", "change a user's rules on brokers (an entry replaces the user's for its resource)",
         *ACL_ENTRY)
async def update_acl(args: argparse.Namespace, admin: AdminClient) -> Output:
    return await change_access(args, admin, "UpdateAcl", _entry(args), f"rules of {args.subject} set")


@command("deleteAcl", "delete a user's rules on brokers: those of the resources named, else all", SUBJECT,
         arg("-r", "--resources", help="resource patterns, separated by commas"), *BROKER_OR_CLUSTER)
async def delete_acl(args: argparse.Namespace, admin: AdminClient) -> Output:
    request = pb.AclRequest(subject=args.subject, resources=args.resources.split(",") if args.resources else [])
    return await change_access(args, admin, "DeleteAcl", request, f"rules of {args.subject} deleted")


def _acl_rows(found: dict[str, list[dict[str, Any]]]) -> list[list[Any]]:
    return [[address, rule["subject"], entry["resource"], ",".join(entry["actions"]),
             ",".join(entry["sourceIps"]) or "*", entry["decision"]]
            for address, rules in found.items() for rule in rules for entry in rule["policies"]]


ACL_HEADERS = ["broker", "subject", "resource", "actions", "source IPs", "decision"]


@command("getAcl", "show a user's rules on brokers", SUBJECT, *BROKER_OR_CLUSTER)
async def get_acl(args: argparse.Namespace, admin: AdminClient) -> Output:
    found = {address: [acl_record(rule) for rule in access.acls if rule.subject == args.subject]
             for address, access in (await _access_by_broker(args, admin)).items()}
    rows = _acl_rows(found)
    return Output(found, table(ACL_HEADERS, rows), ok=bool(rows))


@command("listAcl", "list the rules on brokers", *BROKER_OR_CLUSTER,
         arg("-s", "--subject", default="", help="only subjects starting with this"))
async def list_acl(args: argparse.Namespace, admin: AdminClient) -> Output:
    found = {address: [acl_record(rule) for rule in access.acls if rule.subject.startswith(args.subject)]
             for address, access in (await _access_by_broker(args, admin)).items()}
    return Output(found, table(ACL_HEADERS, _acl_rows(found)))


def consumer_config(config: pb.SubscriptionGroupConfig) -> dict[str, Any]:
    """The fields mqadmin's getConsumerConfig prints, with RocketMQ's names, and whether the group
    was configured (false: the defaults every group has)."""
    return {**group_data(group_from_pb(config)), "configured": config.configured}


@command("getConsumerConfig", "show a consumer group's subscription config on every master", GROUP,
         arg("-c", "--cluster", help="only this cluster's brokers"))
async def get_consumer_config(args: argparse.Namespace, admin: AdminClient) -> Output:
    rows = [{"cluster": broker.cluster, "broker_name": broker.broker_name, "address": broker.address,
             **consumer_config(config)} for broker, config in await admin.subscription_groups(args.group,
                                                                                                  args.cluster)]
    text = []
    for row in rows:
        text.append(f"============================={row['cluster']}:{row['broker_name']}=============================")
        for key, value in row.items():
            if key not in ("cluster", "broker_name", "address"):
                shown = json.dumps(value) if isinstance(value, (bool, dict)) else value
                text.append(f"{key:<40}=  {shown}")
    return Output(rows, "\n".join(text))


# Controller mode (mqadmin's controller commands).

BROKER_NAME = arg("-b", "--broker-name", required=True, help="the broker set's brokerName")
CLUSTER_NAME = arg("-c", "--cluster", default="", help="brokerClusterName")


def replica_info(reply: pb.ControllerReply) -> dict:
    return {"master_id": reply.master_id, "master_address": reply.master_address,
            "master_epoch": reply.master_epoch, "sync_state_set": list(reply.sync_state_set),
            "sync_state_set_epoch": reply.sync_state_set_epoch,
            "brokers": {str(broker_id): address for broker_id, address in sorted(reply.brokers.items())}}


def controller_output(reply: pb.ControllerReply, what: str) -> Output:
    """A controller answer: its replica info, or its refusal with RocketMQ's code."""
    if reply.code != 0:
        raise ClientError(Code(reply.code).name, reply.message or what)
    info = replica_info(reply)
    rows = [[broker_id, address, "master" if int(broker_id) == reply.master_id else "slave",
             int(broker_id) in reply.sync_state_set] for broker_id, address in info["brokers"].items()]
    text = (f"master {reply.master_id} at {reply.master_address or '-'}, master epoch {reply.master_epoch}, "
            f"SyncStateSet {sorted(reply.sync_state_set)} (epoch {reply.sync_state_set_epoch})\n"
            + table(["id", "address", "role", "in sync"], rows))
    return Output(info, text)


@command("getSyncStateSet", "show a broker set's master, epochs and SyncStateSet", BROKER_NAME, controller=True)
async def get_sync_state_set(args: argparse.Namespace, controller: ControllerClient) -> Output:
    reply = await controller.call("GetReplicaInfo", pb.BrokerSetRequest(broker_name=args.broker_name))
    return controller_output(reply, f"no broker set {args.broker_name}")


@command("electMaster", "elect this broker master of its set (it must be alive and in the SyncStateSet)",
         BROKER_NAME, CLUSTER_NAME, arg("-i", "--broker-id", required=True, type=int), controller=True)
async def elect_master(args: argparse.Namespace, controller: ControllerClient) -> Output:
    reply = await controller.call("ElectMaster", pb.ElectMasterRequest(
        cluster=args.cluster, broker_name=args.broker_name, broker_id=args.broker_id, designated=True))
    return controller_output(reply, f"broker {args.broker_id} was not elected")


@command("cleanBrokerData", "forget dead brokers of a set (all of them when no id is given)", BROKER_NAME,
         CLUSTER_NAME, arg("-i", "--broker-ids", default="", help="ids separated by ;"), controller=True)
async def clean_broker_data(args: argparse.Namespace, controller: ControllerClient) -> Output:
    ids = [int(part) for part in args.broker_ids.split(";") if part.strip()]
    reply = await controller.call("CleanBrokerData", pb.CleanBrokerDataRequest(
        cluster=args.cluster, broker_name=args.broker_name, broker_ids=ids))
    if reply.code != 0:
        return controller_output(reply, "refused")
    return Output({"broker_name": args.broker_name, "broker_ids": ids},
                  f"cleaned {'brokers ' + args.broker_ids if ids else 'every broker'} of {args.broker_name}")


@command("getControllerMetaData", "show the controllers and which one leads", controller=True)
async def get_controller_metadata(args: argparse.Namespace, controller: ControllerClient) -> Output:
    meta = await controller.metadata()
    data = {"leader": meta.leader_address, "controllers": list(meta.controllers), "zookeeper": meta.zookeeper}
    return Output(data, key_values({"leader": data["leader"], "controllers": ";".join(data["controllers"]),
                                    "zookeeper": data["zookeeper"]}))


@command("getControllerConfig", "show the leading controller's config", controller=True)
async def get_controller_config(args: argparse.Namespace, controller: ControllerClient) -> Output:
    await controller.metadata()  # find the leader
    entries = dict((await controller.stub().GetControllerConfig(pb.Empty(), timeout=3.0)).entries)
    return Output(entries, key_values(entries))


@command("updateControllerConfig", "change a config key live on every controller",
         arg("-k", "--key", required=True), arg("-v", "--value", required=True), controller=True)
async def update_controller_config(args: argparse.Namespace, controller: ControllerClient) -> Output:
    meta = await controller.metadata()
    for address in meta.controllers:
        try:
            await controller.stub(address).UpdateControllerConfig(pb.ConfigUpdate(key=args.key, value=args.value),
                                                                  timeout=3.0)
        except grpc.aio.AioRpcError as exc:
            raise ClientError.from_rpc(exc) from None
    return Output({"key": args.key, "value": args.value, "controllers": list(meta.controllers)},
                  "\n".join(f"updated {args.key}={args.value} on {a}" for a in meta.controllers))


@command("getBrokerEpoch", "show a controller-mode broker's master epochs", arg("-b", "--broker", required=True))
async def get_broker_epoch(args: argparse.Namespace, admin: AdminClient) -> Output:
    epochs = await admin.broker_epochs(args.broker)
    rows = [{"epoch": e.epoch, "start_offset": e.start_offset, "end_offset": e.end_offset} for e in epochs.entries]
    return Output({"broker_name": epochs.broker_name, "broker_id": epochs.broker_id,
                   "max_offset": epochs.max_offset, "epochs": rows},
                  f"{epochs.broker_name} broker {epochs.broker_id}, max offset {epochs.max_offset}\n"
                  + table(["epoch", "start", "end"], [list(r.values()) for r in rows]))


def timestamp_ms(text: str) -> int:
    if text == "now":
        return time.time_ns() // 1_000_000
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a timestamp in ms or 'now', got {text!r}") from None


@command("resetOffsetByTime", "move a group's offsets on a topic to the first message stored at or after a time",
         GROUP, TOPIC, arg("-s", "--timestamp", required=True, type=timestamp_ms, help="ms since the epoch, or now"))
async def reset_offset_by_time(args: argparse.Namespace, admin: AdminClient) -> Output:
    rows = [{"broker_name": progress.broker_name, "queue_id": q.queue_id, "consumer_offset": q.consumer_offset}
            for progress in await admin.reset_offset_by_time(args.group, args.topic, args.timestamp)
            for q in progress.queues]
    rows.sort(key=lambda r: (r["broker_name"], r["queue_id"]))
    return Output({"group": args.group, "topic": args.topic, "timestamp_ms": args.timestamp, "queues": rows},
                  table(["broker", "queue", "new offset"], [list(r.values()) for r in rows]))


def fan_out_report(args: argparse.Namespace, error: FanOutError) -> str:
    """Per broker, whether a change sent to several of them applied."""
    if args.json:
        return json.dumps({"brokers": {address: "applied" if failure is None else str(failure)
                                       for address, failure in error.outcomes.items()}}, indent=2)
    return "\n".join(f"{args.admin_command} applied on {address}" if failure is None
                     else f"{args.admin_command} FAILED on {address}: {failure}"
                     for address, failure in error.outcomes.items())


def credentials(args: argparse.Namespace) -> Credentials | None:
    """--ak/--sk, each else from the environment; None when neither names an access key."""
    return credentials_of(args.ak or os.environ.get(ACCESS_KEY_ENV, ""), args.sk or os.environ.get(SECRET_KEY_ENV, ""),
                          f"--ak and --sk, or {ACCESS_KEY_ENV} and {SECRET_KEY_ENV}")


async def execute(args: argparse.Namespace) -> int:
    try:
        args.credentials = credentials(args)
        if hasattr(args, "controller"):
            client = ControllerClient(controller_addresses(args.controller), credentials=args.credentials)
            try:
                output = await args.handler(args, client)
            finally:
                await client.close()
        else:
            async with AdminClient(args.namesrv, credentials=args.credentials) as admin:
                output = await args.handler(args, admin)
    except FanOutError as error:
        print(fan_out_report(args, error))
        print(f"quorumq admin {args.admin_command}: {error}", file=sys.stderr)
        return 1
    except (ClientError, QuorumqError) as error:  # QuorumqError: input refused before anything was sent
        print(f"quorumq admin {args.admin_command}: {error}", file=sys.stderr)
        return 1
    print(json.dumps(output.data, indent=2) if args.json else output.text)
    return 0 if output.ok else 1


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("admin", help="administer a cluster (mqadmin-style commands)",
                                 description=__doc__)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-n", "--namesrv", required=True, metavar="ACCESS_POINT",
                        help="the name server's host:port")
    common.add_argument("--json", action="store_true", help="print JSON")
    signing = argparse.ArgumentParser(add_help=False)
    signing.add_argument("--ak", default="", metavar="ACCESS_KEY",
                         help=f"sign every call as this user (default: ${ACCESS_KEY_ENV})")
    signing.add_argument("--sk", default="", metavar="SECRET_KEY",
                         help=f"the user's secret key (default: ${SECRET_KEY_ENV}, which ps does not show)")
    controller_common = argparse.ArgumentParser(add_help=False)
    controller_common.add_argument("-a", "--controller", required=True, metavar="ADDRESSES",
                                   help="controller host:port entries, separated by ;")
    controller_common.add_argument("--json", action="store_true", help="print JSON")
    subcommands = parser.add_subparsers(dest="admin_command", required=True, metavar="COMMAND")
    for commands_of_kind, parent in ((COMMANDS, common), (CONTROLLER_COMMANDS, controller_common)):
        for name, (help_text, arguments, handler) in commands_of_kind.items():
            sub = subcommands.add_parser(name, help=help_text, description=help_text, parents=[parent, signing])
            for flags, options in arguments:
                sub.add_argument(*flags, **options)
            sub.set_defaults(handler=handler)
    parser.set_defaults(run=lambda args: asyncio.run(execute(args)))

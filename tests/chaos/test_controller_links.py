"""A broker's links to the controllers, through the chaos suite's proxies (network.py): a broker
reaches the controllers only at the addresses it is configured with, so cutting those cuts it off
whichever controller leads. A controller names the leader by its own address; brokers that
followed that name went round the proxies whenever the second controller led, and the master
cut off from the controllers kept its role (found in an F13 run: no election in 9 s of
"master-controllers")."""

import signal

from controller_group import FAILOVER_S, SETTLE_S, started_group
from harness import check_for, free_base_port, start_process, stop_process
from network import Network


def test_a_master_cut_off_from_its_configured_controller_addresses_is_replaced(tmp_path):
    base_port = free_base_port()
    network = Network(base_port, replicas=3, controllers=2)
    try:
        with started_group(tmp_path, controllers=2, base_port=base_port,
                           broker_sets=network.broker_sets()) as group:
            group.wait_in_sync()
            first, second = group.controllers
            if group.admin_json("getControllerMetaData")["leader"] == first["address"]:
                stop_process(first, signal.SIGKILL)  # the second leads from now on
                check_for(SETTLE_S, 0.2, lambda: group.admin_json("getControllerMetaData")["leader"]
                          == second["address"], "the second controller leading")
                start_process(first)
            for broker in group.brokers:  # each starts by asking the first, which names the second
                stop_process(broker, signal.SIGKILL)
                start_process(broker)
                group.wait_in_sync()
            master = group.master()
            network.impair(network.links_of(master["address"], "controllers"))
            check_for(FAILOVER_S, 0.2, lambda: any(group.says_master(broker) for broker in group.brokers
                                                   if broker is not master), "another broker elected")
    finally:
        network.close()

"""Where a controller client asks next (client/controller.py next_address): a controller names the
leader by its own address, which a broker may not reach that way, so a configured address wins."""

from quorumq.client.controller import next_address

PROXIES = ["127.0.0.1:41001", "127.0.0.1:41002", "127.0.0.1:41003"]  # how this broker reaches them
LEADER_SELF = "10.0.0.3:9878"  # the leader's own address, as the others name it


def test_a_named_leader_that_is_configured_is_asked_next():
    assert next_address(PROXIES, PROXIES[0], PROXIES[2]) == PROXIES[2]


def test_a_named_leader_that_is_not_configured_sends_the_client_round_its_own_addresses():
    assert next_address(PROXIES, PROXIES[0], LEADER_SELF) == PROXIES[1]
    assert next_address(PROXIES, PROXIES[2], LEADER_SELF) == PROXIES[0]


def test_a_single_configured_address_may_be_a_name_for_every_controller():
    """controllerAddr may be one DNS name in front of every controller: the name alone does not
    reach the leader for sure, its own address does."""
    assert next_address(["controllers.example:9878"], "controllers.example:9878", LEADER_SELF) == LEADER_SELF


def test_a_controller_naming_itself_or_nobody_sends_the_client_to_the_next_configured_address():
    """A controller that stepped down still names itself the leader."""
    assert next_address(PROXIES, PROXIES[1], PROXIES[1]) == PROXIES[2]
    assert next_address(PROXIES, PROXIES[2], "") == PROXIES[0]
    assert next_address(PROXIES, LEADER_SELF, "") == PROXIES[0]  # the named one failed
    assert next_address(["c:1"], "c:1", "c:1") == "c:1"

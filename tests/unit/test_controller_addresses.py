"""Where a controller client asks next (client/controller.py next_address): a controller names the
leader by its own address, which a broker may not reach that way, so a configured address wins."""

from quorumq.client.controller import next_address

PROXIES = ["127.0.0.1:41001", "127.0.0.1:41002", "127.0.0.1:41003"]  # how this broker reaches them
LEADER_SELF = "10.0.0.3:9878"  # the leader's own address, as the others name it


def test_a_named_leader_that_is_configured_is_asked_next():
    assert next_address(PROXIES, PROXIES[0], PROXIES[2], redirects=1) == PROXIES[2]


def test_a_named_leader_that_is_not_configured_sends_the_client_round_its_own_addresses():
    assert next_address(PROXIES, PROXIES[0], LEADER_SELF, redirects=1) == PROXIES[1]
    assert next_address(PROXIES, PROXIES[1], LEADER_SELF, redirects=2) == PROXIES[2]


def test_the_named_address_is_asked_once_every_configured_one_sent_the_client_on():
    """controllerAddr may be one DNS name in front of every controller: the name alone never
    reaches the leader for sure, its own address does."""
    assert next_address(PROXIES, PROXIES[2], LEADER_SELF, redirects=3) == LEADER_SELF
    assert next_address(["controllers.example:9878"], "controllers.example:9878", LEADER_SELF,
                        redirects=1) == LEADER_SELF


def test_no_answer_or_no_leader_named_moves_to_the_next_configured_address():
    assert next_address(PROXIES, PROXIES[2], "", redirects=5) == PROXIES[0]
    assert next_address(PROXIES, LEADER_SELF, "", redirects=1) == PROXIES[0]  # the named one failed

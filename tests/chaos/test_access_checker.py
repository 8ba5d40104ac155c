"""C15 (W8's users and rules) on small hand-made histories: it passes what the changes can leave
behind, an unknown change either way, and catches a lost user, a stale password, a lost rule and
a deleted user that came back."""

from checkers import access_changes

RULE = ("Topic:ChaosTopic", "Pub Allow")


def changes(*steps):
    """W8 records from (f, user, outcome[, password]) steps, one change at a time, in time order."""
    records = []
    for op, (f, user, outcome, *password) in enumerate(steps):
        extra = {"password": password[0]} if password else {}
        if f == "create-acl":
            extra = {"resource": RULE[0], "grant": RULE[1]}
        records.append({"time": op, "process": "access", "type": "invoke", "f": f, "op": op, "value": user, **extra})
        if outcome is not None:  # None: the change never ended
            records.append({"time": op + 0.5, "process": "access", "type": outcome, "f": f, "op": op, "value": user,
                            **extra})
    return records


def held(password, *rules):
    return (password, frozenset(rules))


def verdict(records, **replicas):
    return access_changes(records, replicas)


MADE = changes(("create-user", "u0", "ok", "p0"), ("create-acl", "u0", "ok"), ("create-user", "u1", "ok", "p1"),
               ("update-user", "u1", "ok", "p1b"), ("create-user", "u2", "ok", "p2"), ("delete-user", "u2", "ok"))


def test_c15_passes_every_acknowledged_change_on_every_replica_read():
    final = {"u0": held("p0", RULE), "u1": held("p1b")}
    result = verdict(MADE, m=final, s=final)
    assert result.ok, result
    assert result.counts["acked create-users"] == 3 and result.counts["acked delete-users"] == 1
    assert result.counts["replicas read"] == 2


def test_c15_catches_a_lost_user_a_stale_password_and_a_lost_rule():
    result = verdict(MADE, m={"u0": held("p0"), "u1": held("p1")})
    assert result.counts["wrong rules"] == 1 and result.counts["wrong password"] == 1
    assert not result.ok
    assert verdict(MADE, m={"u0": held("p0", RULE)}).counts["lost"] == 1


def test_c15_judges_each_in_sync_replica_read_like_the_master():
    result = verdict(MADE, m={"u0": held("p0", RULE), "u1": held("p1b")}, s={"u0": held("p0", RULE)})
    assert result.examples == [("s", "u1")] and result.counts["lost"] == 1


def test_c15_catches_a_deleted_user_that_came_back_and_one_never_made():
    result = verdict(MADE, m={"u0": held("p0", RULE), "u1": held("p1b"), "u2": held("p2"), "x": held("px")})
    assert result.counts["came back"] == 2, result


def test_c15_lets_a_change_of_unknown_outcome_go_either_way():
    records = changes(("create-user", "u0", "ok", "p0"), ("update-user", "u0", "info", "p0b"),
                      ("create-user", "u1", "info", "p1"), ("create-acl", "u1", None),
                      ("create-user", "u2", "ok", "p2"), ("delete-user", "u2", "info"))
    for u0 in ("p0", "p0b"):
        for u1 in (None, held("p1"), held("p1", RULE)):
            for u2 in (None, held("p2")):
                final = {user: state for user, state in (("u0", held(u0)), ("u1", u1), ("u2", u2)) if state}
                assert verdict(records, m=final).ok, final


def test_c15_lets_an_unknown_update_land_after_a_later_acknowledged_one():
    records = changes(("create-user", "u0", "ok", "p0"), ("update-user", "u0", "info", "p1"),
                      ("update-user", "u0", "ok", "p2"))
    assert verdict(records, m={"u0": held("p1")}).ok
    assert verdict(records, m={"u0": held("p0")}).counts["wrong password"] == 1


def test_c15_a_refused_change_never_happened_and_a_later_create_may_bring_a_user_back():
    refused = changes(("create-user", "u0", "fail", "p0"))
    assert verdict(refused, m={"u0": held("p0")}).counts["came back"] == 1
    again = changes(("create-user", "u0", "ok", "p0"), ("delete-user", "u0", "ok"), ("create-user", "u0", "info", "p1"))
    assert verdict(again, m={"u0": held("p1")}).ok and verdict(again, m={}).ok
    assert verdict(again, m={"u0": held("p0")}).counts["wrong password"] == 1


def test_c15_a_delete_acknowledged_after_an_unknown_create_removed_it_for_good():
    """The delete found the user, so the create had landed already: it cannot land again."""
    records = changes(("create-user", "u0", "info", "p0"), ("delete-user", "u0", "ok"))
    assert verdict(records, m={}).ok
    assert verdict(records, m={"u0": held("p0")}).counts["came back"] == 1

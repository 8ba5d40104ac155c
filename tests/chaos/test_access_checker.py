"""C15 (W8's users and rules) on small hand-made histories: it passes what the changes can leave
behind, an unknown change either way, and catches a lost user, a stale password, type or status,
a lost, stale or resurrected rule and a deleted user that came back."""

from checkers import access_changes

RULE = ("Topic:ChaosTopic", "Pub Allow")


GROUP_RULE = ("Group:chaos-w8", "Sub Allow")


def changes(*steps):
    """W8 records from (f, user, outcome[, password or what the change sets]) steps, one change at
    a time, in time order; an ACL change without one is RULE's."""
    records = []
    for op, (f, user, outcome, *sets) in enumerate(steps):
        extra = ({"password": sets[0]} if isinstance(sets[0], str) else sets[0]) if sets else {}
        if f.endswith("-acl") and not sets:
            extra = {"resource": RULE[0], "grant": RULE[1]}
        records.append({"time": op, "process": "access", "type": "invoke", "f": f, "op": op, "value": user, **extra})
        if outcome is not None:  # None: the change never ended
            records.append({"time": op + 0.5, "process": "access", "type": outcome, "f": f, "op": op, "value": user,
                            **extra})
    return records


def held(password, *rules, user_type="Normal", user_status="enable"):
    return (password, user_type, user_status, frozenset(rules))


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


def test_c15_follows_type_and_status_updates_and_catches_a_stale_one():
    records = changes(("create-user", "u0", "ok", "p0"), ("update-user", "u0", "ok", {"user_status": "disable"}),
                      ("update-user", "u0", "ok", {"user_type": "Super"}), ("update-user", "u0", "ok", "p1"))
    assert verdict(records, m={"u0": held("p1", user_type="Super", user_status="disable")}).ok
    stale = verdict(records, m={"u0": held("p1", user_type="Super")})
    assert stale.counts["wrong type or status"] == 1 and not stale.ok
    unknown = changes(("create-user", "u0", "ok", "p0"), ("update-user", "u0", "info", {"user_status": "disable"}))
    assert verdict(unknown, m={"u0": held("p0")}).ok
    assert verdict(unknown, m={"u0": held("p0", user_status="disable")}).ok


def test_c15_follows_acl_updates_and_deletes_by_resource():
    sub = {"resource": GROUP_RULE[0], "grant": GROUP_RULE[1]}
    records = changes(("create-user", "u0", "ok", "p0"), ("create-acl", "u0", "ok"), ("update-acl", "u0", "ok", sub),
                      ("delete-acl", "u0", "ok", {"resource": RULE[0]}))
    assert verdict(records, m={"u0": held("p0", GROUP_RULE)}).ok
    assert verdict(records, m={"u0": held("p0", RULE, GROUP_RULE)}).counts["wrong rules"] == 1  # the delete lost
    assert verdict(records[:-2], m={"u0": held("p0", RULE, GROUP_RULE)}).ok


def test_c15_an_acl_change_on_a_user_without_rules_or_absent_changes_nothing():
    """The broker refuses deleteAcl of a subject with no rules and createAcl for a missing user: an
    acknowledgement of either cannot have made a rule."""
    records = changes(("create-user", "u0", "ok", "p0"), ("delete-acl", "u0", "info", {"resource": RULE[0]}),
                      ("create-acl", "u1", "info"))
    assert verdict(records, m={"u0": held("p0")}).ok
    assert verdict(records, m={"u0": held("p0"), "u1": held("p1", RULE)}).counts["came back"] == 1

"""What a membership entry and a dump carry of a member: pysyncobj's own TCPNode with the
member's name and HTTP address beside its Raft address, so a node of the previous release
reads it and this one gets the names back."""

from __future__ import annotations

import pysyncobj.pickle as syncobj_pickle
from pysyncobj.node import TCPNode

from replication.members import Member, MemberNode, Membership, before_change, member_of, named

N4 = Member(id="n4", raft="10.0.0.4:7101", http="10.0.0.4:8101")


def test_a_membership_entry_names_no_ripple_class_and_reads_back_whole() -> None:
    entry = syncobj_pickle.dumps(["add", N4.raft, MemberNode(N4)])
    assert b"replication" not in entry and b"pysyncobj.node" in entry
    kind, node_id, node = syncobj_pickle.loads(entry)
    assert (kind, node_id, type(node)) == ("add", N4.raft, TCPNode)
    assert node == MemberNode(N4)  # pysyncobj's equality: the Raft address
    assert named(node) == N4


def test_a_node_without_a_name_is_known_by_the_table_or_its_address() -> None:
    plain = TCPNode("10.0.0.1:7101")
    assert named(plain) is None
    n1 = Member(id="n1", raft="10.0.0.1:7101", http="10.0.0.1:8101")
    assert member_of(plain, {n1.raft: n1}) == n1
    assert member_of(plain, {}) == Member(id=plain.address, raft=plain.address, http="")


def test_a_view_finds_voters_by_id_and_learners_by_address_only() -> None:
    n1 = Member(id="n1", raft="10.0.0.1:7101", http="10.0.0.1:8101")
    view = Membership(voters=(n1,), committed=(n1,), voter=True, pending_index=None, learners=(N4,))
    assert view.by_id("n1") == n1 and view.by_id("n4") is None
    assert view.by_raft(N4.raft) == N4 and view.by_raft("10.0.0.9:1") is None


def test_the_voters_before_a_change_lack_an_addition_and_keep_a_removal() -> None:
    n1 = Member(id="n1", raft="10.0.0.1:7101", http="10.0.0.1:8101")
    n2 = Member(id="n2", raft="10.0.0.2:7101", http="10.0.0.2:8101")
    added = ["add", N4.raft, MemberNode(N4)]
    assert before_change((n1, n2, N4), added, {}) == (n1, n2)
    removed = ["rem", n2.raft, MemberNode(n2)]
    assert before_change((n1,), removed, {}) == (n1, n2)
    # A removal whose node carries no name is named by the table, else by its address.
    bare = ["rem", n2.raft, TCPNode(n2.raft)]
    assert before_change((n1,), bare, {n2.raft: n2}) == (n1, n2)
    assert {m.id for m in before_change((n1,), bare, {})} == {"n1", n2.raft}

"""The controller builds each Update in place and sends WriteRequests it assembles from
each update's bytes; both must give exactly what the plain protobuf way gives."""

from __future__ import annotations

import functools
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from p4.v1 import p4runtime_pb2

from control.entries import ActionCall, EntryKey, Exact, Lpm, WriteStep, batches, to_table_entry
from control.p4runtime_client import P4Names, election_id_of, update, write_request_bytes
from softswitch.frontend import compile_file

BEAMER_P4 = Path(__file__).resolve().parent.parent / "p4src" / "beamer.p4"

Update = p4runtime_pb2.Update


@st.composite
def updates(draw: st.DrawFn) -> p4runtime_pb2.Update:
    update = Update(type=draw(st.sampled_from([Update.INSERT, Update.MODIFY, Update.DELETE])))
    entry = update.entity.table_entry
    entry.table_id = draw(st.integers(0, 2**32 - 1))
    entry.priority = draw(st.integers(0, 2**31 - 1))
    # Up to a few hundred bytes, so that update lengths need one- and two-byte varints.
    for field_id, value in draw(
        st.lists(st.tuples(st.integers(1, 2**32 - 1), st.binary(max_size=80)), max_size=4)
    ):
        entry.match.add(field_id=field_id).exact.value = value
    entry.action.action.action_id = draw(st.integers(0, 2**32 - 1))
    entry.metadata = draw(st.binary(max_size=200))
    return update


@settings(max_examples=150, deadline=None)
@given(
    st.integers(0, 2**64 - 1),
    st.integers(1, 2**128 - 1),
    st.sampled_from([0, 1, 2]),
    st.lists(updates(), max_size=6),
)
def test_write_request_bytes_are_what_protobuf_serialises(
    device_id: int, election_id: int, atomicity: int, batch: list[p4runtime_pb2.Update]
) -> None:
    request = p4runtime_pb2.WriteRequest(
        device_id=device_id, election_id=election_id_of(election_id), atomicity=atomicity
    )
    request.updates.extend(batch)
    data = write_request_bytes(device_id, election_id, atomicity, batch)
    assert data == request.SerializeToString()
    assert p4runtime_pb2.WriteRequest.FromString(data) == request


@functools.cache
def beamer_names() -> P4Names:
    return P4Names.build(compile_file(BEAMER_P4).p4info)


@st.composite
def named_updates(draw: st.DrawFn) -> tuple[int, EntryKey, ActionCall]:
    kind = draw(st.sampled_from([Update.INSERT, Update.MODIFY, Update.DELETE]))
    if draw(st.booleans()):
        table = beamer_names().table("MyIngress.coflow_class")
        fields = sorted(table.match_fields.values(), key=lambda ref: ref.id)
        match = tuple(
            (ref.name, Exact(draw(st.integers(0, (1 << ref.bitwidth) - 1)))) for ref in fields
        )
        klass = draw(st.integers(0, 7))
        return (
            kind,
            EntryKey(table.name, match),
            ActionCall("MyIngress.set_class", (("class_id", klass),)),
        )
    length = draw(st.integers(1, 32))
    prefix = draw(st.integers(0, 2**32 - 1)) >> (32 - length) << (32 - length)
    key = EntryKey("MyIngress.ipv4_lpm", (("hdr.ipv4.dstAddr", Lpm(prefix, length)),))
    action = ActionCall(
        "MyIngress.ipv4_forward",
        (("dstAddr", draw(st.integers(0, 2**48 - 1))), ("port", draw(st.integers(0, 511)))),
    )
    return kind, key, action


@settings(max_examples=60, deadline=None)
@given(st.lists(named_updates(), min_size=1, max_size=7), st.integers(1, 3))
def test_batches_build_the_updates_the_plain_way_would(
    changes: list[tuple[int, EntryKey, ActionCall]], limit: int
) -> None:
    names = beamer_names()
    built = batches(WriteStep("make", tuple(changes)), names, limit=limit)
    plain = [update(kind, to_table_entry(key, action, names)) for kind, key, action in changes]
    assert [len(rpc) for rpc in built] == [
        len(plain[i : i + limit]) for i in range(0, len(plain), limit)
    ]
    assert [u.SerializeToString() for rpc in built for u in rpc] == [
        u.SerializeToString() for u in plain
    ]


def test_update_errors_a_switch_garbled_are_no_errors_not_a_crash() -> None:
    """A Write refused with status details that do not decode: the call's own status
    still says it failed; the details are left out, not a DecodeError."""
    from control.p4runtime_client import STATUS_DETAILS_KEY, _update_errors

    class Refused:
        def trailing_metadata(self) -> tuple[tuple[str, bytes], ...]:
            return ((STATUS_DETAILS_KEY, b"\xff\xff"),)

    assert _update_errors(Refused()) == []  # type: ignore[arg-type]

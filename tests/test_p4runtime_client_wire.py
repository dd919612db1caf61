"""The controller's client sends WriteRequests it assembles from each update's bytes;
they must be exactly what protobuf would serialise for the same request."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from p4.v1 import p4runtime_pb2

from control.p4runtime_client import election_id_of, write_request_bytes

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

"""The device's forwarding-pipeline configs: the committed one, and one saved for COMMIT.

The device config is our own JSON (``CompiledProgram.device_config()``); a P4Info that
does not mean the same program is refused, so every later request is checked against the
P4Info the data plane really runs. "The same" ignores what compilers are free to choose
(see :func:`canonical_p4info`): p4c's P4Info for a program is accepted with our device
config for it. Reads and writes go to the saved config's fresh state
between VERIFY_AND_SAVE and COMMIT (spec §15): they fill the saved, not yet running
pipeline, which COMMIT then swaps in. A saved config lasts as long as the primary that
saved it: a new primary finds only the committed one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from google.protobuf.message import Message
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2

from control.errors import UserError
from softswitch.frontend import CompiledProgram
from softswitch.p4rt.p4info_index import P4InfoIndex
from softswitch.p4rt.status import failed_precondition, invalid, not_found, shorten
from softswitch.p4rt.transfer import copy_runtime_state
from softswitch.pipeline import Pipeline
from softswitch.runtime import RuntimeState, RuntimeStateError

log = logging.getLogger(__name__)

SetAction = p4runtime_pb2.SetForwardingPipelineConfigRequest
GetType = p4runtime_pb2.GetForwardingPipelineConfigRequest

_VERIFYING_ACTIONS = (
    SetAction.VERIFY,
    SetAction.VERIFY_AND_SAVE,
    SetAction.VERIFY_AND_COMMIT,
    SetAction.RECONCILE_AND_COMMIT,
)


class PipelineHost(Protocol):
    """What the server needs of the switch (``softswitch.switch.Switch``): its pipeline,
    and an atomic swap to a new one that the server has already filled."""

    @property
    def pipeline(self) -> Pipeline | None: ...

    def set_pipeline(self, pipeline: Pipeline) -> None: ...


@dataclass
class PipelineConfig:
    """One verified config: the program, what the client sent, and the P4Info index."""

    program: CompiledProgram
    device_config: bytes
    cookie: int | None
    index: P4InfoIndex

    @property
    def p4info(self) -> p4info_pb2.P4Info:
        return self.index.p4info


@dataclass
class VerifiedConfig:
    """A config together with the pipeline built from it, not yet running."""

    config: PipelineConfig
    pipeline: Pipeline


@dataclass
class ActivePipeline:
    """What Read and Write work on: the P4Info to check against and the state to change."""

    index: P4InfoIndex
    runtime: RuntimeState


class PipelineConfigs:
    """Committed and saved configs of one device, over the switch that runs them.

    Callers serialise every method but :meth:`verify` and :meth:`prepare` with the
    server's state lock.
    """

    def __init__(
        self, switch: PipelineHost, still_primary: Callable[[str, int], bool] | None = None
    ) -> None:
        self._switch = switch
        self._committed: PipelineConfig | None = None
        self._saved: VerifiedConfig | None = None
        self._saved_in: tuple[str, int] | None = None
        """The role and primary term (:meth:`Arbitrator.is_term`) the config was saved in."""
        self._still_primary = still_primary

    def _drop_stale_save(self) -> None:
        """Forget a saved config once the primary that saved it is gone: Get reports only
        the committed config, so a new primary could not see that its Reads and Writes
        went to a pipeline that never runs (until a COMMIT it has no reason to send)."""
        if self._saved is None or self._saved_in is None or self._still_primary is None:
            return
        if not self._still_primary(*self._saved_in):
            log.info("the primary that saved a pipeline config left; the saved config is dropped")
            self._saved = None
            self._saved_in = None

    def committed(self) -> PipelineConfig | None:
        """The running config; a pipeline loaded by other means (a CONFIG file) counts too."""
        pipeline = self._switch.pipeline
        if pipeline is None:
            return None
        if self._committed is None or self._committed.program is not pipeline.program:
            program = pipeline.program
            self._committed = PipelineConfig(
                program=program,
                device_config=program.device_config(),
                cookie=None,
                index=P4InfoIndex.build(program.p4info),
            )
        return self._committed

    def active(self) -> ActivePipeline:
        """FAILED_PRECONDITION before any pipeline is set (spec §12 and §13)."""
        self._drop_stale_save()
        if self._saved is not None:
            return ActivePipeline(self._saved.config.index, self._saved.pipeline.runtime)
        committed = self.committed()
        pipeline = self._switch.pipeline
        if committed is None or pipeline is None:
            raise failed_precondition("no forwarding pipeline config has been set")
        return ActivePipeline(committed.index, pipeline.runtime)

    @staticmethod
    def verify(request: p4runtime_pb2.SetForwardingPipelineConfigRequest) -> VerifiedConfig:
        """Load the device config, match its P4Info, build its pipeline (INVALID_ARGUMENT).

        Reads nothing of the device, so it needs no lock: the server verifies while writes
        go on. What costs nothing comes first: a config without a P4Info can match no
        program, and is refused before its device config is compiled."""
        if not request.HasField("config"):
            raise invalid("the request carries no forwarding pipeline config")
        config = request.config
        if not config.HasField("p4info"):
            raise invalid("the forwarding pipeline config carries no P4Info")
        try:
            program = CompiledProgram.from_device_config(config.p4_device_config)
        except UserError as error:
            raise invalid(f"device config cannot be loaded: {shorten(str(error), 512)}") from None
        difference = p4info_difference(config.p4info, program.p4info)
        if difference:
            raise invalid(f"P4Info does not match the device config's program: {difference}")
        try:
            pipeline = Pipeline(program)
        except UserError as error:
            raise invalid(f"the target cannot run this program: {error}") from None
        return VerifiedConfig(
            PipelineConfig(
                program=program,
                device_config=config.p4_device_config,
                cookie=config.cookie.cookie if config.HasField("cookie") else None,
                # Get returns the P4Info as the client sent it (p4c's order and annotations).
                index=P4InfoIndex.build(config.p4info),
            ),
            pipeline,
        )

    def prepare(
        self, request: p4runtime_pb2.SetForwardingPipelineConfigRequest
    ) -> VerifiedConfig | None:
        """What :meth:`apply` needs of ``request``: its config verified, None for COMMIT.
        Needs no lock (see :meth:`verify`); refuses what no device state could make
        right (an unknown action, COMMIT with a config)."""
        action = request.action
        if action == SetAction.COMMIT:
            if request.HasField("config"):
                raise invalid("COMMIT takes no config; it commits the saved one")
            return None
        if action not in _VERIFYING_ACTIONS:
            raise invalid(f"unknown pipeline config action {action}")
        return self.verify(request)

    def apply(
        self,
        request: p4runtime_pb2.SetForwardingPipelineConfigRequest,
        verified: VerifiedConfig | None,
        term: tuple[str, int] | None = None,
    ) -> None:
        """Carry out ``request``, ``verified`` by :meth:`prepare`, for the primary of
        ``term`` (role, primary term). Under the state lock: this is where the device's
        state is read and changed."""
        self._drop_stale_save()
        action = request.action
        if action == SetAction.COMMIT:
            if self._saved is None:
                raise not_found("no saved config to commit (send VERIFY_AND_SAVE first)")
            self._commit(self._saved)
            return
        assert verified is not None, "prepare verifies every action but COMMIT"
        if action == SetAction.VERIFY_AND_SAVE:
            self._saved = verified
            self._saved_in = term
        elif action == SetAction.VERIFY_AND_COMMIT:
            self._commit(verified)
        elif action == SetAction.RECONCILE_AND_COMMIT:
            self._reconcile(verified)

    def set(
        self,
        request: p4runtime_pb2.SetForwardingPipelineConfigRequest,
        term: tuple[str, int] | None = None,
    ) -> None:
        """:meth:`prepare` and :meth:`apply` in one (the caller holds the state lock)."""
        self.apply(request, self.prepare(request), term)

    def get(self, response_type: int) -> p4runtime_pb2.ForwardingPipelineConfig | None:
        if response_type not in (
            GetType.ALL,
            GetType.COOKIE_ONLY,
            GetType.P4INFO_AND_COOKIE,
            GetType.DEVICE_CONFIG_AND_COOKIE,
        ):
            raise invalid(f"unknown response type {response_type}")
        committed = self.committed()
        if committed is None:
            return None
        reply = p4runtime_pb2.ForwardingPipelineConfig()
        if committed.cookie is not None:
            reply.cookie.cookie = committed.cookie
        if response_type in (GetType.ALL, GetType.P4INFO_AND_COOKIE):
            reply.p4info.CopyFrom(committed.p4info)
        if response_type in (GetType.ALL, GetType.DEVICE_CONFIG_AND_COOKIE):
            reply.p4_device_config = committed.device_config
        return reply

    def _commit(self, verified: VerifiedConfig) -> None:
        """Swap the (already filled) pipeline in; packets never see a half-built state."""
        self._switch.set_pipeline(verified.pipeline)
        self._committed = verified.config
        self._saved = None
        self._saved_in = None

    def _reconcile(self, verified: VerifiedConfig) -> None:
        """Keep the forwarding state under the new config, or change nothing.

        The same program keeps running untouched (only the cookie changes); another
        program gets a copy of every entry, default, counter and register first.
        """
        committed = self.committed()
        current = self._switch.pipeline
        if committed is None or current is None:
            self._commit(verified)
            return
        if verified.config.device_config == committed.device_config:
            # The P4Info as sent (it may differ from the old one in order or annotations).
            self._committed = PipelineConfig(
                committed.program,
                committed.device_config,
                verified.config.cookie,
                verified.config.index,
            )
            self._saved = None
            self._saved_in = None
            return
        try:
            with current.runtime.lock:
                copy_runtime_state(current.runtime, verified.pipeline.runtime)
        except RuntimeStateError as error:
            raise invalid(
                f"the forwarding state cannot be kept under the new config: {error}"
            ) from None
        self._commit(verified)


def _strip_annotations(message: Message) -> None:
    """Clear annotations and documentation, here and in every nested message."""
    for descriptor, value in list(message.ListFields()):
        if descriptor.name in ("annotations", "structured_annotations", "doc"):
            message.ClearField(descriptor.name)
        elif descriptor.message_type is not None:
            if descriptor.label == descriptor.LABEL_REPEATED:
                if descriptor.message_type.GetOptions().map_entry:
                    continue
                for item in value:
                    _strip_annotations(item)
            else:
                _strip_annotations(value)


def _sort_repeated(message: Message) -> None:
    """Order every repeated message field by its items' id (or preamble id), recursively."""
    for descriptor, value in list(message.ListFields()):
        if descriptor.message_type is None or descriptor.message_type.GetOptions().map_entry:
            continue
        items = list(value) if descriptor.label == descriptor.LABEL_REPEATED else [value]
        for item in items:
            _sort_repeated(item)
        if descriptor.label != descriptor.LABEL_REPEATED or not items:
            continue
        fields = descriptor.message_type.fields_by_name
        if "preamble" in fields:
            key = lambda item: item.preamble.id  # noqa: E731
        elif "id" in fields:
            key = lambda item: item.id  # noqa: E731
        else:
            continue
        ordered = [type(item)() for item in items]
        for target, source in zip(ordered, sorted(items, key=key), strict=True):
            target.CopyFrom(source)
        del value[:]
        value.extend(ordered)


def canonical_p4info(p4info: p4info_pb2.P4Info) -> p4info_pb2.P4Info:
    """What a P4Info means to this target, in one form.

    Two P4Infos of the same program can differ in what the spec leaves free: the
    order of objects, annotations and documentation (compilers add their own, e.g.
    p4c's ``@noWarn("unused")`` on NoAction), package details beyond the
    architecture, and an empty ``type_info``. All of that is cleared or sorted by id;
    ids, names, aliases, match fields, parameters, scopes, sizes and resources stay.
    """
    canonical = p4info_pb2.P4Info()
    canonical.CopyFrom(p4info)
    arch = canonical.pkg_info.arch
    canonical.ClearField("pkg_info")
    if arch:
        canonical.pkg_info.arch = arch
    if canonical.HasField("type_info") and canonical.type_info.ByteSize() == 0:
        canonical.ClearField("type_info")
    _strip_annotations(canonical)
    # Direct resources of a table are a set.
    for table in canonical.tables:
        resources = sorted(table.direct_resource_ids)
        del table.direct_resource_ids[:]
        table.direct_resource_ids.extend(resources)
    _sort_repeated(canonical)
    return canonical


def _objects_difference(sent: p4info_pb2.P4Info, program: p4info_pb2.P4Info) -> str:
    """The first top-level object (by field, then id) that one P4Info has and the other
    lacks, or an id given twice; empty when both hold the same ids. Compared before the
    canonical forms are built, which copy and sort everything: a P4Info padded with
    100,000 bogus tables took 15 s to refuse."""
    for descriptor in p4info_pb2.P4Info.DESCRIPTOR.fields:
        if descriptor.label != descriptor.LABEL_REPEATED or "preamble" not in (
            descriptor.message_type.fields_by_name
        ):
            continue
        name = descriptor.name
        mine = {item.preamble.id: item.preamble.name for item in getattr(program, name)}
        theirs = {item.preamble.id: item.preamble.name for item in getattr(sent, name)}
        if len(theirs) != len(getattr(sent, name)):
            return f"'{name}' differs: an id is given to more than one object"
        if mine.keys() == theirs.keys():
            continue
        object_id = min(mine.keys() ^ theirs.keys())
        if object_id in theirs:
            extra = f"{shorten(theirs[object_id])} (id {object_id})"
            return f"'{name}' differs: {extra} is not in the program"
        return f"'{name}' differs: {mine[object_id]} (id {object_id}) is missing"
    return ""


def p4info_difference(sent: p4info_pb2.P4Info, program: p4info_pb2.P4Info) -> str:
    """Empty when both mean the same program; otherwise what differs first.

    Names the top-level P4Info field and, for its objects, the first one (by id)
    that is missing, extra or different.
    """
    if sent == program:
        return ""
    objects = _objects_difference(sent, program)
    if objects:
        return objects
    ours, theirs = canonical_p4info(program), canonical_p4info(sent)
    if ours == theirs:
        return ""
    for descriptor in p4info_pb2.P4Info.DESCRIPTOR.fields:
        name = descriptor.name
        mine, other = getattr(ours, name), getattr(theirs, name)
        if mine == other:
            continue
        if descriptor.label == descriptor.LABEL_REPEATED and "preamble" in (
            descriptor.message_type.fields_by_name
        ):
            by_id_mine = {item.preamble.id: item for item in mine}
            by_id_other = {item.preamble.id: item for item in other}
            for object_id in sorted(by_id_mine.keys() | by_id_other.keys()):
                a, b = by_id_mine.get(object_id), by_id_other.get(object_id)
                if a == b:
                    continue
                if a is None:
                    assert b is not None
                    extra = f"{b.preamble.name} (id {object_id})"
                    return f"'{name}' differs: {extra} is not in the program"
                if b is None:
                    return f"'{name}' differs: {a.preamble.name} (id {object_id}) is missing"
                return f"'{name}' differs: {a.preamble.name} (id {object_id})"
        return f"'{name}' differs"
    return "the messages differ"

"""Control-plane state of a loaded P4 program, in P4Runtime terms.

Tables, counters and registers are keyed by their P4Info ids; match fields by
P4Info field id; values are plain integers. The P4Runtime server translates
protobuf messages into these calls, the pipeline reads the same objects on the
packet path. Writers take ``RuntimeState.lock``; the packet path reads without
it because every update swaps or mutates a dict/tuple in one step, which
CPython makes atomic (a packet sees the table before or after a write, never
half of it).

Writes come in two kinds. The public methods (``insert``, ``modify``, ``delete``,
``get`` and the ``RuntimeState.*_entry`` wrappers) validate what they are given, for
callers that hold plain integers. The P4Runtime server validates each update against
the P4Info while decoding it, so it uses the methods for valid entries (``key_of``,
``insert_valid``, ``delete_valid``, ``find``), which check only what depends on the
table's contents: each write is validated once.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

from p4.config.v1 import p4info_pb2

MATCH_EXACT = p4info_pb2.MatchField.EXACT
MATCH_LPM = p4info_pb2.MatchField.LPM
MATCH_TERNARY = p4info_pb2.MatchField.TERNARY
MATCH_RANGE = p4info_pb2.MatchField.RANGE
MATCH_OPTIONAL = p4info_pb2.MatchField.OPTIONAL


class RuntimeStateError(Exception):
    """Base of the errors a control-plane write can raise.

    ``status`` names the matching gRPC/P4Runtime status code, so the server
    can map every error without knowing each class.
    """

    status = "UNKNOWN"


class EntryExistsError(RuntimeStateError):
    status = "ALREADY_EXISTS"


class EntryNotFoundError(RuntimeStateError):
    status = "NOT_FOUND"


class TableFullError(RuntimeStateError):
    status = "RESOURCE_EXHAUSTED"


class InvalidEntryError(RuntimeStateError):
    """A value too wide, an unknown id, a bad prefix, a forbidden action, ..."""

    status = "INVALID_ARGUMENT"


class ImmutableError(RuntimeStateError):
    """Writes to a ``const entries`` table or a ``const default_action``."""

    status = "PERMISSION_DENIED"


# --------------------------------------------------------------------------- match values


@dataclass(frozen=True, slots=True)
class ExactMatch:
    value: int


@dataclass(frozen=True, slots=True)
class LpmMatch:
    value: int
    prefix_len: int


@dataclass(frozen=True, slots=True)
class TernaryMatch:
    value: int
    mask: int


@dataclass(frozen=True, slots=True)
class RangeMatch:
    low: int
    high: int


@dataclass(frozen=True, slots=True)
class OptionalMatch:
    value: int


FieldMatch = ExactMatch | LpmMatch | TernaryMatch | RangeMatch | OptionalMatch


@dataclass(frozen=True, slots=True)
class ActionCall:
    """An action with its arguments in P4Info parameter order."""

    action_id: int
    params: tuple[int, ...] = ()


@dataclass(slots=True)
class CounterData:
    """Byte and packet count of one counter cell (or one table entry)."""

    byte_count: int = 0
    packet_count: int = 0

    def add(self, length_bytes: int) -> None:
        self.byte_count += length_bytes
        self.packet_count += 1


@dataclass(slots=True)
class TableEntry:
    """One installed entry. ``matches`` omits don't-care fields (P4Runtime rule)."""

    matches: dict[int, FieldMatch]
    action: ActionCall
    priority: int = 0
    counter: CounterData = field(default_factory=CounterData)
    controller_metadata: int = 0
    metadata: bytes = b""
    is_const: bool = False


EntryKey = tuple[int, ...]
"""Identity of an entry in its table (match key plus priority) as plain integers.

Built by :meth:`TableState.key_of`; its layout depends on the table's lookup mode, so
keys of different tables are not comparable. Exact tables use the tuple of key values
itself, the same tuple the packet path looks up.
"""


_NO_ENTRIES: dict[tuple[int, ...], TableEntry] = {}


def _mask(width_bits: int) -> int:
    return (1 << width_bits) - 1


# --------------------------------------------------------------------------- tables


@dataclass(frozen=True, slots=True)
class KeyField:
    field_id: int
    name: str
    bitwidth: int
    match_type: int


@dataclass(frozen=True, slots=True)
class ActionSpec:
    action_id: int
    name: str
    param_bitwidths: tuple[int, ...]
    param_ids: tuple[int, ...]


class TableState:
    """Entries, default action and the lookup structure of one table.

    Lookup structure by key kinds: all exact → one dict; exact plus one LPM →
    one dict per prefix length, tried longest first; anything else → a list in
    match order (highest priority first, then insertion order).
    """

    def __init__(
        self,
        info: p4info_pb2.Table,
        actions: Mapping[int, ActionSpec],
        default_action: ActionCall,
    ) -> None:
        self.info = info
        self.table_id: int = info.preamble.id
        self.name: str = info.preamble.name
        self.key_fields: tuple[KeyField, ...] = tuple(
            KeyField(mf.id, mf.name, mf.bitwidth, mf.match_type) for mf in info.match_fields
        )
        self._field_ids = tuple(k.field_id for k in self.key_fields)
        self.size: int = info.size if info.size > 0 else 1024
        self.is_const: bool = info.is_const_table
        self.const_default: bool = info.const_default_action_id != 0
        self.has_direct_counter: bool = False
        self._actions = dict(actions)
        self._table_only = {
            ref.id for ref in info.action_refs if ref.scope == p4info_pb2.ActionRef.TABLE_ONLY
        }
        self._default_only = {
            ref.id for ref in info.action_refs if ref.scope == p4info_pb2.ActionRef.DEFAULT_ONLY
        }
        self._allowed = {ref.id for ref in info.action_refs}
        kinds = [k.match_type for k in self.key_fields]
        self.needs_priority = any(k in (MATCH_TERNARY, MATCH_RANGE, MATCH_OPTIONAL) for k in kinds)
        if all(k == MATCH_EXACT for k in kinds):
            self.mode = "exact"
        elif kinds.count(MATCH_LPM) == 1 and all(k in (MATCH_EXACT, MATCH_LPM) for k in kinds):
            self.mode = "lpm"
        else:
            self.mode = "list"
        self._lpm_index = kinds.index(MATCH_LPM) if self.mode == "lpm" else -1
        self.initial_default = default_action
        self.default_action = default_action
        self.default_counter = CounterData()
        self.entries: dict[EntryKey, TableEntry] = {}
        # lookup structures (see class docstring)
        self._exact: dict[tuple[int, ...], TableEntry] = {}
        self._lpm: dict[int, dict[tuple[int, ...], TableEntry]] = {}
        self._lpm_lengths: tuple[int, ...] = ()
        self._lpm_masks: tuple[tuple[int, int], ...] = ()
        self._list: list[tuple[tuple[int, int], TableEntry, tuple[tuple[int, int, int], ...]]] = []
        self._sequence = 0
        # The packet path calls ``lookup(key_values)``: the bound lookup of this
        # table's structure (for exact tables the dict's own ``get``).
        self.lookup: Callable[[tuple[int, ...]], TableEntry | None]
        if self.mode == "exact":
            self.lookup = self._exact.get
        elif self.mode == "lpm":
            self.lookup = self._lookup_lpm
        else:
            self.lookup = self._lookup_list

    # ---------------------------------------------------------------- validation

    def _check_action(self, action: ActionCall, *, as_default: bool) -> ActionCall:
        spec = self._actions.get(action.action_id)
        if spec is None or action.action_id not in self._allowed:
            raise InvalidEntryError(
                f"{self.name}: action id {action.action_id:#x} is not an action of this table"
            )
        if as_default and action.action_id in self._table_only:
            raise InvalidEntryError(f"{self.name}: {spec.name} cannot be the default action")
        if not as_default and action.action_id in self._default_only:
            raise InvalidEntryError(f"{self.name}: {spec.name} is a default-only action")
        if len(action.params) != len(spec.param_bitwidths):
            raise InvalidEntryError(
                f"{self.name}: {spec.name} takes {len(spec.param_bitwidths)} parameters, "
                f"got {len(action.params)}"
            )
        for index, (value, width) in enumerate(
            zip(action.params, spec.param_bitwidths, strict=True)
        ):
            if value < 0 or value >> width:
                raise InvalidEntryError(
                    f"{self.name}: {spec.name} parameter {index + 1} value {value} "
                    f"does not fit in {width} bits"
                )
        return action

    def _check_matches(self, matches: Mapping[int, FieldMatch], priority: int) -> None:
        known = {k.field_id: k for k in self.key_fields}
        for field_id, match in matches.items():
            key = known.get(field_id)
            if key is None:
                raise InvalidEntryError(f"{self.name}: no match field with id {field_id}")
            self._check_one_match(key, match)
        for key in self.key_fields:
            if key.match_type == MATCH_EXACT and key.field_id not in matches:
                raise InvalidEntryError(f"{self.name}: exact field {key.name} needs a value")
        if self.needs_priority and priority <= 0:
            raise InvalidEntryError(f"{self.name}: entries of this table need a priority > 0")
        if not self.needs_priority and priority != 0:
            raise InvalidEntryError(f"{self.name}: entries of this table take no priority")

    def _check_one_match(self, key: KeyField, match: FieldMatch) -> None:
        width = key.bitwidth
        expected = {
            MATCH_EXACT: ExactMatch,
            MATCH_LPM: LpmMatch,
            MATCH_TERNARY: TernaryMatch,
            MATCH_RANGE: RangeMatch,
            MATCH_OPTIONAL: OptionalMatch,
        }.get(key.match_type)
        if expected is None or not isinstance(match, expected):
            raise InvalidEntryError(f"{self.name}: wrong match kind for field {key.name}")

        def fits(value: int) -> bool:
            return value >= 0 and not value >> width

        if isinstance(match, ExactMatch | OptionalMatch):
            values = [match.value]
        elif isinstance(match, LpmMatch):
            values = [match.value]
            if not 0 < match.prefix_len <= width:
                raise InvalidEntryError(
                    f"{self.name}: prefix length {match.prefix_len} of {key.name} "
                    f"is not in 1..{width} (omit the field for a zero-length prefix)"
                )
            host_bits = width - match.prefix_len
            if match.value & _mask(host_bits):
                raise InvalidEntryError(
                    f"{self.name}: {key.name} value has bits set beyond its /{match.prefix_len}"
                )
        elif isinstance(match, TernaryMatch):
            values = [match.value, match.mask]
            if match.mask == 0:
                raise InvalidEntryError(
                    f"{self.name}: ternary mask 0 for {key.name} (omit the field instead)"
                )
            if match.value & ~match.mask:
                raise InvalidEntryError(f"{self.name}: {key.name} value has bits outside its mask")
        else:
            values = [match.low, match.high]
            if match.low > match.high:
                raise InvalidEntryError(f"{self.name}: empty range for {key.name}")
        for value in values:
            if not fits(value):
                raise InvalidEntryError(
                    f"{self.name}: value {value} of {key.name} does not fit in {width} bits"
                )

    # ---------------------------------------------------------------- keys and lookup index

    def key_of(self, matches: Mapping[int, FieldMatch], priority: int) -> EntryKey:
        """The :data:`EntryKey` of a key that is already valid for this table.

        No checks: callers validate first, with :meth:`check_key` or (the P4Runtime
        server) against the P4Info, so that each write is validated exactly once.
        """
        if self.mode == "exact":
            return tuple([cast(ExactMatch, matches[fid]).value for fid in self._field_ids])
        if self.mode == "lpm":
            return (*self._exact_tuple(matches), self._lpm_length(matches))
        flat: list[int] = []
        for field_id in self._field_ids:
            match = matches.get(field_id)
            if match is None:
                flat += (-1, -1)  # present fields never hold negative values
            elif isinstance(match, ExactMatch | OptionalMatch):
                flat += (match.value, 0)
            elif isinstance(match, LpmMatch):
                flat += (match.value, match.prefix_len)
            elif isinstance(match, TernaryMatch):
                flat += (match.value, match.mask)
            else:
                flat += (match.low, match.high)
        flat.append(priority)
        return tuple(flat)

    def check_key(self, matches: Mapping[int, FieldMatch], priority: int) -> EntryKey:
        """Validate a match key and priority; return its :data:`EntryKey`."""
        self._check_matches(matches, priority)
        return self.key_of(matches, priority)

    def check_action(self, action: ActionCall, *, as_default: bool = False) -> ActionCall:
        """Validate an action call for an entry (or for the default entry)."""
        return self._check_action(action, as_default=as_default)

    def _exact_tuple(self, matches: Mapping[int, FieldMatch]) -> tuple[int, ...]:
        values: list[int] = []
        for key in self.key_fields:
            match = matches.get(key.field_id)
            if isinstance(match, ExactMatch | LpmMatch):
                values.append(match.value)
            else:  # zero-length prefix
                values.append(0)
        return tuple(values)

    def _lpm_length(self, matches: Mapping[int, FieldMatch]) -> int:
        key = self.key_fields[self._lpm_index]
        match = matches.get(key.field_id)
        return match.prefix_len if isinstance(match, LpmMatch) else 0

    def _ternary_spec(self, matches: Mapping[int, FieldMatch]) -> tuple[tuple[int, int, int], ...]:
        """Per key field: (kind, a, b): 0 = value/mask, 1 = range low/high."""
        spec: list[tuple[int, int, int]] = []
        for key in self.key_fields:
            match = matches.get(key.field_id)
            full = _mask(key.bitwidth)
            if match is None:
                spec.append((0, 0, 0))
            elif isinstance(match, ExactMatch | OptionalMatch):
                spec.append((0, match.value, full))
            elif isinstance(match, LpmMatch):
                mask = full ^ _mask(key.bitwidth - match.prefix_len)
                spec.append((0, match.value, mask))
            elif isinstance(match, TernaryMatch):
                spec.append((0, match.value, match.mask))
            else:
                spec.append((1, match.low, match.high))
        return tuple(spec)

    def _index_add(self, key: EntryKey, entry: TableEntry) -> None:
        if self.mode == "exact":
            self._exact[key] = entry
        elif self.mode == "lpm":
            length = key[-1]
            bucket = self._lpm.get(length)
            if bucket is None:
                bucket = {}
                self._lpm[length] = bucket
                self._set_lpm_lengths()
            bucket[key[:-1]] = entry
        else:
            self._sequence += 1
            # Highest priority first; among equals, first installed first.
            order = (-entry.priority, self._sequence)
            item = (order, entry, self._ternary_spec(entry.matches))
            new_list = list(self._list)
            bisect.insort(new_list, item, key=lambda it: it[0])
            self._list = new_list

    def _set_lpm_lengths(self) -> None:
        width = self.key_fields[self._lpm_index].bitwidth
        lengths = tuple(sorted(self._lpm, reverse=True))
        self._lpm_masks = tuple((n, _mask(width) ^ _mask(width - n)) for n in lengths)
        self._lpm_lengths = lengths

    def _index_remove(self, key: EntryKey, entry: TableEntry) -> None:
        if self.mode == "exact":
            self._exact.pop(key, None)
        elif self.mode == "lpm":
            length = key[-1]
            bucket = self._lpm.get(length, {})
            bucket.pop(key[:-1], None)
            if not bucket:
                self._lpm.pop(length, None)
                self._set_lpm_lengths()
        else:
            self._list = [item for item in self._list if item[1] is not entry]

    def _lookup_lpm(self, key_values: tuple[int, ...]) -> TableEntry | None:
        # Masks and buckets are read once; a concurrent write swaps them whole.
        buckets = self._lpm
        if len(key_values) == 1:
            (value,) = key_values
            for length, mask in self._lpm_masks:
                hit = buckets.get(length, _NO_ENTRIES).get((value & mask,))
                if hit is not None:
                    return hit
            return None
        index = self._lpm_index
        lpm_value = key_values[index]
        for length, mask in self._lpm_masks:
            probe = (*key_values[:index], lpm_value & mask, *key_values[index + 1 :])
            hit = buckets.get(length, _NO_ENTRIES).get(probe)
            if hit is not None:
                return hit
        return None

    def _lookup_list(self, key_values: tuple[int, ...]) -> TableEntry | None:
        for _order, entry, spec in self._list:
            for value, (kind, a, b) in zip(key_values, spec, strict=True):
                if kind == 0:
                    if value & b != a:
                        break
                elif not a <= value <= b:
                    break
            else:
                return entry
        return None

    # ---------------------------------------------------------------- writes of valid entries
    # The P4Runtime server validates each update against the P4Info and then calls
    # these with the entry's key; nothing is checked twice. Const tables are the
    # caller's to refuse.

    def find(self, key: EntryKey) -> TableEntry | None:
        return self.entries.get(key)

    def insert_valid(self, key: EntryKey, entry: TableEntry, *, sized: bool = True) -> None:
        """Install a validated ``entry`` whose key is ``key``; only duplicates and size fail
        (not the size with ``sized`` off: a program's const entries may outnumber it)."""
        entries = self.entries
        if key in entries:
            raise EntryExistsError(f"{self.name}: the entry already exists")
        if sized and len(entries) >= self.size:
            raise TableFullError(f"{self.name} is full ({self.size} entries)")
        entries[key] = entry
        self._index_add(key, entry)

    def delete_valid(self, key: EntryKey) -> TableEntry:
        """Remove the entry of ``key`` (a validated key) and return it."""
        entry = self.entries.pop(key, None)
        if entry is None:
            raise EntryNotFoundError(f"{self.name}: no such entry")
        self._index_remove(key, entry)
        return entry

    # ---------------------------------------------------------------- checked writes

    def insert(self, entry: TableEntry, *, allow_const: bool = False) -> None:
        if self.is_const and not allow_const:
            raise ImmutableError(f"{self.name} has const entries and cannot be written")
        key = self.check_key(entry.matches, entry.priority)
        self._check_action(entry.action, as_default=False)
        self.insert_valid(key, entry, sized=not allow_const)

    def _existing(self, matches: Mapping[int, FieldMatch], priority: int) -> TableEntry:
        entry = self.entries.get(self.check_key(matches, priority))
        if entry is None:
            raise EntryNotFoundError(f"{self.name}: no such entry")
        return entry

    def modify(
        self,
        matches: Mapping[int, FieldMatch],
        priority: int,
        action: ActionCall,
        *,
        reset_counter: bool = False,
    ) -> None:
        if self.is_const:
            raise ImmutableError(f"{self.name} has const entries and cannot be written")
        entry = self._existing(matches, priority)
        entry.action = self._check_action(action, as_default=False)
        if reset_counter:
            entry.counter = CounterData()

    def delete(self, matches: Mapping[int, FieldMatch], priority: int) -> TableEntry:
        if self.is_const:
            raise ImmutableError(f"{self.name} has const entries and cannot be written")
        return self.delete_valid(self.check_key(matches, priority))

    def get(self, matches: Mapping[int, FieldMatch], priority: int) -> TableEntry:
        return self._existing(matches, priority)

    def set_default_action(self, action: ActionCall | None) -> None:
        """Change the default action; None restores the program's initial default."""
        if self.const_default:
            raise ImmutableError(f"{self.name} has a const default action")
        if action is None:
            self.default_action = self.initial_default
            return
        self.default_action = self._check_action(action, as_default=True)

    def clear(self) -> None:
        """Remove every non-const entry and restore the initial default action."""
        for key, entry in list(self.entries.items()):
            if not entry.is_const:
                del self.entries[key]
                self._index_remove(key, entry)
        self.default_action = self.initial_default
        self.default_counter = CounterData()


# --------------------------------------------------------------------------- externs


class CounterState:
    """An indirect counter array (``counter(size, CounterType.x)``)."""

    def __init__(self, info: p4info_pb2.Counter) -> None:
        self.counter_id: int = info.preamble.id
        self.name: str = info.preamble.name
        self.unit: int = info.spec.unit
        self.size: int = info.size
        self.cells: list[CounterData] = [CounterData() for _ in range(info.size)]

    def _check(self, index: int) -> None:
        if not 0 <= index < self.size:
            raise InvalidEntryError(f"{self.name}: index {index} is not in 0..{self.size - 1}")

    def read(self, index: int) -> CounterData:
        self._check(index)
        cell = self.cells[index]
        return CounterData(cell.byte_count, cell.packet_count)

    def write(self, index: int, data: CounterData) -> None:
        self._check(index)
        self.cells[index] = CounterData(data.byte_count, data.packet_count)


class RegisterState:
    """A register array; values are unsigned integers of ``bitwidth`` bits."""

    def __init__(self, info: p4info_pb2.Register) -> None:
        self.register_id: int = info.preamble.id
        self.name: str = info.preamble.name
        self.size: int = info.size
        self.bitwidth: int = info.type_spec.bitstring.bit.bitwidth or (
            info.type_spec.bitstring.int.bitwidth
        )
        self.cells: list[int] = [0] * info.size

    def _check(self, index: int) -> None:
        if not 0 <= index < self.size:
            raise InvalidEntryError(f"{self.name}: index {index} is not in 0..{self.size - 1}")

    def read(self, index: int) -> int:
        self._check(index)
        return self.cells[index]

    def write(self, index: int, value: int) -> None:
        self._check(index)
        if value < 0 or value >> self.bitwidth:
            raise InvalidEntryError(
                f"{self.name}: value {value} does not fit in {self.bitwidth} bits"
            )
        self.cells[index] = value


# --------------------------------------------------------------------------- the whole state


class RuntimeState:
    """All control-plane-visible state of one loaded program.

    Built from the P4Info plus what P4Info cannot carry: the initial default
    action arguments and the ``const entries`` of each table.
    """

    def __init__(
        self,
        p4info: p4info_pb2.P4Info,
        initial_defaults: Mapping[int, ActionCall] | None = None,
        const_entries: Mapping[int, Sequence[TableEntry]] | None = None,
    ) -> None:
        self.lock = threading.RLock()
        self.p4info = p4info
        self.actions: dict[int, ActionSpec] = {
            a.preamble.id: ActionSpec(
                a.preamble.id,
                a.preamble.name,
                tuple(p.bitwidth for p in a.params),
                tuple(p.id for p in a.params),
            )
            for a in p4info.actions
        }
        defaults = dict(initial_defaults or {})
        self.tables: dict[int, TableState] = {}
        for info in p4info.tables:
            default = defaults.get(info.preamble.id)
            if default is None:
                default = self._fallback_default(info)
            self.tables[info.preamble.id] = TableState(info, self.actions, default)
        self.tables_by_name = {t.name: t for t in self.tables.values()}
        self.counters: dict[int, CounterState] = {
            c.preamble.id: CounterState(c) for c in p4info.counters
        }
        self.registers: dict[int, RegisterState] = {
            r.preamble.id: RegisterState(r) for r in p4info.registers
        }
        # direct counter id -> table id
        self.direct_counters: dict[int, int] = {
            d.preamble.id: d.direct_table_id for d in p4info.direct_counters
        }
        for table_id in self.direct_counters.values():
            self.tables[table_id].has_direct_counter = True
        for table_id, entries in (const_entries or {}).items():
            for entry in entries:
                entry.is_const = True
                self.tables[table_id].insert(entry, allow_const=True)

    def _fallback_default(self, info: p4info_pb2.Table) -> ActionCall:
        """Without an explicit default the program's default is NoAction."""
        if info.initial_default_action.action_id:
            return ActionCall(
                info.initial_default_action.action_id,
                tuple(
                    int.from_bytes(arg.value, "big")
                    for arg in info.initial_default_action.arguments
                ),
            )
        for ref in info.action_refs:
            if self.actions[ref.id].name == "NoAction":
                return ActionCall(ref.id)
        return ActionCall(info.action_refs[0].id) if info.action_refs else ActionCall(0)

    # ---------------------------------------------------------------- lookups

    def table(self, table_id: int) -> TableState:
        table = self.tables.get(table_id)
        if table is None:
            raise InvalidEntryError(f"no table with id {table_id:#x}")
        return table

    def counter(self, counter_id: int) -> CounterState:
        counter = self.counters.get(counter_id)
        if counter is None:
            raise InvalidEntryError(f"no counter with id {counter_id:#x}")
        return counter

    def register(self, register_id: int) -> RegisterState:
        register = self.registers.get(register_id)
        if register is None:
            raise InvalidEntryError(f"no register with id {register_id:#x}")
        return register

    def action_call(self, action_id: int, params_by_id: Mapping[int, int]) -> ActionCall:
        """Order P4Runtime ``(param_id, value)`` pairs into an :class:`ActionCall`."""
        spec = self.actions.get(action_id)
        if spec is None:
            raise InvalidEntryError(f"no action with id {action_id:#x}")
        unknown = set(params_by_id) - set(spec.param_ids)
        if unknown:
            raise InvalidEntryError(f"{spec.name}: no parameter with id {min(unknown)}")
        missing = [pid for pid in spec.param_ids if pid not in params_by_id]
        if missing:
            raise InvalidEntryError(f"{spec.name}: parameter id {missing[0]} is missing")
        return ActionCall(action_id, tuple(params_by_id[pid] for pid in spec.param_ids))

    # ---------------------------------------------------------------- writes (locked)

    def insert_entry(self, table_id: int, entry: TableEntry) -> None:
        with self.lock:
            self.table(table_id).insert(entry)

    def modify_entry(
        self,
        table_id: int,
        matches: Mapping[int, FieldMatch],
        priority: int,
        action: ActionCall,
        *,
        counter: CounterData | None = None,
    ) -> None:
        with self.lock:
            table = self.table(table_id)
            table.modify(matches, priority, action)
            if counter is not None:
                table.get(matches, priority).counter = CounterData(
                    counter.byte_count, counter.packet_count
                )

    def delete_entry(
        self, table_id: int, matches: Mapping[int, FieldMatch], priority: int
    ) -> TableEntry:
        with self.lock:
            return self.table(table_id).delete(matches, priority)

    def set_default_action(self, table_id: int, action: ActionCall | None) -> None:
        with self.lock:
            self.table(table_id).set_default_action(action)

    def read_entries(self, table_id: int) -> list[TableEntry]:
        """Snapshot of a table's entries (copies, safe to serialise outside the lock)."""
        with self.lock:
            return [
                TableEntry(
                    dict(e.matches),
                    e.action,
                    e.priority,
                    CounterData(e.counter.byte_count, e.counter.packet_count),
                    e.controller_metadata,
                    e.metadata,
                    e.is_const,
                )
                for e in self.table(table_id).entries.values()
            ]

    def read_default_action(self, table_id: int) -> ActionCall:
        with self.lock:
            return self.table(table_id).default_action

    def read_direct_counter(
        self, table_id: int, matches: Mapping[int, FieldMatch], priority: int
    ) -> CounterData:
        with self.lock:
            table = self.table(table_id)
            if not table.has_direct_counter:
                raise InvalidEntryError(f"{table.name} has no direct counter")
            counter = table.get(matches, priority).counter
            return CounterData(counter.byte_count, counter.packet_count)

    def write_direct_counter(
        self, table_id: int, matches: Mapping[int, FieldMatch], priority: int, data: CounterData
    ) -> None:
        with self.lock:
            table = self.table(table_id)
            if not table.has_direct_counter:
                raise InvalidEntryError(f"{table.name} has no direct counter")
            table.get(matches, priority).counter = CounterData(data.byte_count, data.packet_count)

    def read_counter(self, counter_id: int, index: int | None = None) -> list[CounterData]:
        """One cell (``index``) or every cell of an indirect counter."""
        with self.lock:
            counter = self.counter(counter_id)
            indexes: Iterable[int] = range(counter.size) if index is None else (index,)
            return [counter.read(i) for i in indexes]

    def write_counter(self, counter_id: int, index: int, data: CounterData) -> None:
        with self.lock:
            self.counter(counter_id).write(index, data)

    def read_register(self, register_id: int, index: int | None = None) -> list[int]:
        with self.lock:
            register = self.register(register_id)
            indexes: Iterable[int] = range(register.size) if index is None else (index,)
            return [register.read(i) for i in indexes]

    def write_register(self, register_id: int, index: int, value: int) -> None:
        with self.lock:
            self.register(register_id).write(index, value)

    def clear(self) -> None:
        """Forget all control-plane writes (a new pipeline config with the same program)."""
        with self.lock:
            for table in self.tables.values():
                table.clear()
            for counter in self.counters.values():
                counter.cells = [CounterData() for _ in range(counter.size)]
            for register in self.registers.values():
                register.cells = [0] * register.size

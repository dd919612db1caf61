"""Sweep grid files: which settings, seeds and policies ``beamer sweep`` runs.

A grid is YAML or JSON (a document that starts with ``{`` and is valid JSON is read
as JSON). See ``docs/sweep.md`` for the format; in short::

    policies: [beamer, sincronia, fair]   # the first is the reference of the ratios
    seeds: [1, 2, 3]
    defaults: {load: 0.8, queues: ideal}  # every setting starts from these
    figures:
      - name: load                        # one CSV file and one plot per figure
        vary: {load: [0.5, 0.8, 1.0]}     # one setting per value (product if several)
        fixed: {queues: 8}                # optional, for this figure only

Setting parameters (:data:`PARAMETERS`): ``workload`` (``hp-tuning``, ``fb2010``
or a file, a relative path starting at the grid file's directory), ``load``,
``queues`` (``ideal`` or K classes), ``quantize``, and for the HP-tuning generator
the workload shape of ``beamer workload generate``: ``mix``, ``models``, ``eta``,
``max_trials``, ``sync``, ``jobs``, ``hosts``. Policies are named as ``beamer
simulate --policies`` names them. Numbers are plain decimal (YAML 1.1's octal,
hexadecimal, sexagesimal and ``_`` forms are refused) and only ``true``/``false``
are booleans. Errors name the file, line and field.

Limits, checked when the grid is read so that a mistake never runs for hours
or fills the memory first: at most :data:`MAX_RUNS` runs (settings × seeds ×
policies), nesting at most :data:`MAX_DEPTH` levels deep, integers Python can
print (``sys.get_int_max_str_digits``) and figure names of at most
:data:`MAX_FIGURE_NAME` characters.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import hashlib
import itertools
import json
import math
import re
import reprlib
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, TypeGuard

import yaml

from control.errors import UserError
from control.files import file_path, parse_json, read_bytes, read_text, text_bytes
from control.policies import POLICIES
from control.policies.spec import parse_policy_list, policy_from_spec
from control.quantize import STRATEGIES, Strategy
from workloads.coflow_benchmark import default_trace_path
from workloads.hp_tuning import HpTuningConfig
from workloads.limits import MAX_FILE_BYTES, SettingError
from workloads.loader import SEEDED_WORKLOADS
from workloads.shapes import MIXES, Mix, Shape, parse_models, parse_sync

PARAMETERS: tuple[str, ...] = (
    "workload",
    "load",
    "queues",
    "quantize",
    "mix",
    "models",
    "eta",
    "max_trials",
    "sync",
    "jobs",
    "hosts",
)
SHAPE_PARAMETERS = ("mix", "models", "eta", "max_trials", "sync", "jobs", "hosts")
_FIGURE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")

MAX_RUNS = 100_000
"""Runs one grid may ask for (settings × seeds × policies, settings counted per figure).

The paper-scale grid is about a thousand runs; at several seconds each, 100,000 runs
are days of a whole cluster. Far beyond that lies a mistake (one more parameter
varied, a range typed out), and expanding it would take minutes and gigabytes before
the first run: such a grid is refused before any setting is made.
"""

MAX_GRID_BYTES = 1 << 20
"""Largest grid file. The repository's grids take a few hundred bytes; a grid at
:data:`MAX_RUNS` with every seed typed out takes under 1 MB. The YAML reader costs
hundreds of bytes of memory and microseconds per value, so 27 MB of seeds took 2 GB
and more than a minute before the run limit could refuse it."""

MAX_DEPTH = 32
"""Deepest nesting of lists and mappings in a grid file. A grid needs six levels (a
list of models in a figure's ``vary``); the limit keeps the YAML reader, which
recurses per level, far from Python's recursion limit."""

MAX_FIGURE_NAME = 100
"""Longest figure name: it names ``NAME.csv`` and ``NAME.png``, written through
temporary files ``.NAME.png.XXXXXXXX.tmp``; file systems allow 255 bytes per name."""


@dataclass(frozen=True, slots=True)
class Point:
    """One setting of the grid (a workload and a simulator configuration), seeds aside.

    ``None`` keeps the default: load 0.8 for hp-tuning (a file's own arrivals
    otherwise), ideal classes, every model, both synchronisation patterns.
    ``workload`` is ``hp-tuning``, ``fb2010`` or a file's absolute path, and
    ``workload_sha256`` the digest of that file's content when the grid was read: a
    run's key holds it, so results of a file since edited are not taken for its own.
    """

    workload: str = "hp-tuning"
    load: float | None = None
    queues: int | None = None
    quantize: Strategy = "rank"
    mix: Mix = "mixed"
    models: tuple[str, ...] | None = None
    eta: int | None = None
    max_trials: int | None = None
    sync: tuple[str, ...] | None = None
    jobs: int | None = None
    hosts: int | None = None
    workload_sha256: str | None = None

    def key(self) -> str:
        """Canonical text of the point: equal points (from any figure) share runs."""
        return json.dumps(self.as_dict(), sort_keys=True, separators=(",", ":"))

    def as_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        if out["workload_sha256"] is None:  # hp-tuning: keys as before there was a digest
            del out["workload_sha256"]
        for name in ("models", "sync"):
            if out[name] is not None:
                out[name] = list(out[name])
        return out

    def shape(self) -> Shape:
        return Shape(
            mix=self.mix,
            models=self.models,
            eta=self.eta,
            max_trials=self.max_trials,
            sync=self.sync,  # type: ignore[arg-type]
        )

    def hp_config(self) -> HpTuningConfig:
        """The generator's configuration (seed and load are set per run)."""
        config = HpTuningConfig()
        if self.jobs is not None:
            config = dataclasses.replace(config, num_jobs=self.jobs)
        if self.hosts is not None:
            config = dataclasses.replace(config, num_hosts=self.hosts)
        return self.shape().apply(config)


@dataclass(frozen=True, slots=True)
class Setting:
    """A point as a figure shows it: ``label`` names the varied values."""

    label: str
    values: tuple[tuple[str, str], ...]
    point: Point


@dataclass(frozen=True, slots=True)
class Figure:
    name: str
    varied: tuple[str, ...]
    settings: tuple[Setting, ...]


@dataclass(frozen=True, slots=True)
class Grid:
    path: Path
    policies: tuple[str, ...]
    seeds: tuple[int, ...]
    figures: tuple[Figure, ...]

    @property
    def reference(self) -> str:
        return self.policies[0]

    def points(self) -> list[Point]:
        """Every distinct point, in figure order."""
        found: dict[str, Point] = {}
        for figure in self.figures:
            for setting in figure.settings:
                found.setdefault(setting.point.key(), setting.point)
        return list(found.values())


# --- reading YAML with line numbers ---------------------------------------------------


class _Map(dict[Any, Any]):
    line: int = 0
    lines: dict[Any, int]


class _List(list[Any]):
    line: int = 0
    lines: list[int]


class _FieldError(Exception):
    """A problem at ``line``; ``field`` is its path (``figures[0].vary.load[1]``).

    Raised while the YAML is constructed, ``field`` is relative to the container
    being built, and each enclosing mapping or list prefixes its own key or index.
    """

    def __init__(self, line: int, field: str, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.field = field
        self.message = message

    def within(self, name: str) -> _FieldError:
        if not self.field:
            self.field = name
        elif self.field.startswith("["):
            self.field = name + self.field
        elif name:
            self.field = f"{name}.{self.field}"
        return self

    def user_error(self, path: Path) -> UserError:
        field = _one_line(self.field, 200)
        where = f"{path}:{self.line}: {field + ': ' if field else ''}"
        return UserError(where + _one_line(self.message, 400))


def _one_line(text: str, limit: int) -> str:
    """``text`` for a one-line message: control characters escaped, at most ``limit`` long
    (names and values come from the user's file and may be anything)."""
    if not text.isprintable():
        text = repr(text)[1:-1]
    return text if len(text) <= limit else text[: limit - 3] + "..."


_MERGE_TAG = "tag:yaml.org,2002:merge"


class _Loader(yaml.SafeLoader):
    """Builds :class:`_Map` and :class:`_List` with lines, at most :data:`MAX_DEPTH` deep."""

    _depth = 0

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.merged_pairs: dict[yaml.MappingNode, int] = {}
        """Per mapping, how many of its pairs (the first ones) a merge (``<<``) gave it."""

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        """PyYAML's merge, which puts the merged pairs before the mapping's own; counted
        the first time (a mapping merged into another is flattened again, with no ``<<``
        left to count)."""
        own = sum(1 for key_node, _ in node.value if key_node.tag != _MERGE_TAG)
        super().flatten_mapping(node)
        self.merged_pairs.setdefault(node, len(node.value) - own)

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                line = self.peek_event().start_mark.line + 1
                message = f"nested deeper than {MAX_DEPTH} levels of lists and mappings"
                raise _FieldError(line, "", message)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _child(loader: _Loader, node: yaml.Node, name: str) -> Any:
    """Construct ``node``, an item of a container; its errors are prefixed with ``name``."""
    try:
        return loader.construct_object(node, deep=True)
    except _FieldError as error:
        raise error.within(name) from None
    except (ValueError, OverflowError):  # a scalar that is not what its tag says (!!float x)
        kind = node.tag.rsplit(":", 1)[-1]
        text = f": {_brief.repr(node.value)}" if isinstance(node, yaml.ScalarNode) else ""
        raise _FieldError(node.start_mark.line + 1, name, f"not a valid {kind}{text}") from None


def _construct_map(loader: _Loader, node: yaml.MappingNode) -> _Map:
    """A mapping with its lines. A key the mapping names itself overrides one merged in
    (``<<: *anchor``, YAML's way to reuse a mapping), but may not appear twice."""
    loader.flatten_mapping(node)
    merged = loader.merged_pairs.get(node, 0)
    out = _Map()
    out.line = node.start_mark.line + 1
    out.lines = {}
    own: set[str] = set()
    for position, (key_node, value_node) in enumerate(node.value):
        key = _child(loader, key_node, "")
        line = key_node.start_mark.line + 1
        if not isinstance(key, str):
            raise _FieldError(line, "", f"key {_brief.repr(key)} is not a name")
        if position >= merged:
            if key in own:
                raise _FieldError(line, key, "appears twice")
            own.add(key)
        out[key] = _child(loader, value_node, key)
        out.lines[key] = line
    return out


def _construct_list(loader: _Loader, node: yaml.SequenceNode) -> _List:
    out = _List()
    out.line = node.start_mark.line + 1
    out.lines = []
    for index, item in enumerate(node.value):
        out.append(_child(loader, item, f"[{index}]"))
        out.lines.append(item.start_mark.line + 1)
    return out


_PLAIN_INT = re.compile(r"-?(?:0|[1-9][0-9]*)")
_PLAIN_FLOAT = re.compile(
    r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|-?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)"
)


def _construct_int(loader: _Loader, node: yaml.ScalarNode) -> int:
    """An integer in plain decimal digits: YAML 1.1 reads ``010`` as 8, ``0b11`` as 3,
    ``1:30`` as 90 and ``1_0`` as 10, which a grid must not run silently. Refused (with
    its line) too when longer than Python converts."""
    limit = sys.get_int_max_str_digits()
    if limit and len(node.value) > limit:
        raise _FieldError(node.start_mark.line + 1, "", f"an integer of more than {limit} digits")
    value = loader.construct_yaml_int(node)  # ValueError for !!int x: "not a valid int"
    if not _PLAIN_INT.fullmatch(node.value):
        raise _FieldError(node.start_mark.line + 1, "", _not_plain(node.value, value, "integer"))
    return value


def _construct_float(loader: _Loader, node: yaml.ScalarNode) -> float:
    """A float in decimal digits, with or without exponent: YAML 1.1 reads ``1:30.0`` as
    90.0 and ``1_0.5`` as 10.5."""
    value = loader.construct_yaml_float(node)  # ValueError for !!float x: "not a valid float"
    if not _PLAIN_FLOAT.fullmatch(node.value):
        raise _FieldError(node.start_mark.line + 1, "", _not_plain(node.value, value, "number"))
    return value


def _not_plain(text: str, value: float, kind: str) -> str:
    read = f" (YAML 1.1 reads it as {value!r})" if abs(value) < 1e30 else ""
    return (
        f"{_brief.repr(text)} is not a plain decimal {kind}{read}: write decimal digits, "
        "or quote it for text"
    )


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_map)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_list)
_Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)
_Loader.add_constructor("tag:yaml.org,2002:float", _construct_float)
# YAML 1.1, which PyYAML reads, takes 5e-1, 0.5e0 and 1e-05 (JSON numbers, YAML 1.2
# floats) for strings: a float needs a dot there, and a sign in its exponent.
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+.0123456789"),
)
# YAML 1.1 also reads yes/no/on/off (any case) as booleans and 2001-12-14 as a date: a
# figure named ``on`` or a workload file ``no`` would become False. As in YAML 1.2 and
# JSON, only true and false are booleans here, and the rest text (no field takes a
# boolean or a date, so either is refused where it does not belong).
_BOOL_TAG = "tag:yaml.org,2002:bool"
_Loader.yaml_implicit_resolvers = {
    first: [
        (tag, regexp)
        for tag, regexp in resolvers
        if tag not in (_BOOL_TAG, "tag:yaml.org,2002:timestamp")
    ]
    for first, resolvers in _Loader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    _BOOL_TAG, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


class _Brief(reprlib.Repr):
    """Values in messages: a long string or a large structure (YAML aliases can make one
    of a billion items from a few lines) is shown cut short."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel = 1
        self.maxlist = self.maxdict = 4
        self.maxstring = 60
        self.maxother = 60

    def repr__List(self, value: list[Any], level: int) -> str:
        return self.repr_list(value, level)

    def repr__Map(self, value: dict[Any, Any], level: int) -> str:
        return self.repr_dict(value, level)


_brief = _Brief()


def _line(container: object, key: str | int) -> int:
    if isinstance(container, _Map) and isinstance(key, str):
        return container.lines.get(key, container.line)
    if isinstance(container, _List) and isinstance(key, int) and key < len(container.lines):
        return container.lines[key]
    return getattr(container, "line", 0)


# --- validation -------------------------------------------------------------------------


def load_grid(path: Path) -> Grid:
    """Read and check a grid file; any problem is one :class:`UserError` line."""
    text = read_text(path, what="grid file", missing="no such grid file", max_bytes=MAX_GRID_BYTES)
    document = _document(path, text)
    try:
        return _grid(path, document)
    except _FieldError as error:
        raise error.user_error(path) from None


def _document(path: Path, text: str) -> object:
    """The grid file's document. JSON (a document that starts with ``{`` and is valid
    JSON) is read as JSON: YAML 1.1, which PyYAML reads, refuses some of it (tabs
    between tokens); anything else is read as YAML."""
    if not text.lstrip().startswith("{"):
        return _yaml_document(path, text)
    try:
        parse_json(text, str(path))  # duplicate keys, NaN, syntax: one line with its place
    except UserError as json_error:
        try:
            return _yaml_document(path, text)  # YAML's flow style starts with "{" too
        except UserError:
            if path.suffix.lower() == ".json":
                raise json_error from None
            raise
    try:
        return _JsonDocument(text).value(0, 1)[0]
    except _FieldError as error:
        raise error.user_error(path) from None


def _yaml_document(path: Path, text: str) -> object:
    try:
        return yaml.load(text, Loader=_Loader)
    except _FieldError as error:
        raise error.user_error(path) from None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise UserError(f"{where}: not valid YAML or JSON: {error.problem}") from None
    except yaml.YAMLError as error:
        raise UserError(f"{path}: not valid YAML or JSON: {error}") from None
    except (ValueError, OverflowError) as error:  # a document that is one bad scalar
        raise UserError(f"{path}: not valid YAML or JSON: {error}") from None
    except RecursionError:  # not reached within MAX_DEPTH; kept as a last guard
        raise UserError(f"{path}: not valid YAML or JSON: nested too deeply") from None


_JSON_SPACE = re.compile(r"[ \t\n\r]*")
_JSON_SCALARS = json.JSONDecoder()


class _JsonDocument:
    """A JSON document that :func:`parse_json` has accepted, read again into :class:`_Map`
    and :class:`_List` with the lines of their keys and items, as from YAML."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.newlines = [match.start() for match in re.finditer("\n", text)]

    def line(self, index: int) -> int:
        return bisect.bisect_left(self.newlines, index) + 1

    def space(self, index: int) -> int:
        match = _JSON_SPACE.match(self.text, index)
        return match.end() if match else index

    def value(self, index: int, depth: int) -> tuple[Any, int]:
        """The value at ``index`` (spaces before it skipped) and the index after it."""
        index = self.space(index)
        char = self.text[index]
        if char not in "{[":
            return _JSON_SCALARS.raw_decode(self.text, index)
        if depth > MAX_DEPTH:
            message = f"nested deeper than {MAX_DEPTH} levels of lists and mappings"
            raise _FieldError(self.line(index), "", message)
        return self.mapping(index, depth) if char == "{" else self.sequence(index, depth)

    def mapping(self, index: int, depth: int) -> tuple[_Map, int]:
        out = _Map()
        out.line = self.line(index)
        out.lines = {}
        index = self.space(index + 1)
        while self.text[index] != "}":
            key, after = json.decoder.scanstring(self.text, index + 1)  # type: ignore[attr-defined]
            out.lines[key] = self.line(index)
            try:
                out[key], index = self.value(self.space(after) + 1, depth + 1)  # past ":"
            except _FieldError as error:
                raise error.within(key) from None
            index = self.space(index)
            if self.text[index] == ",":
                index = self.space(index + 1)
        return out, index + 1

    def sequence(self, index: int, depth: int) -> tuple[_List, int]:
        out = _List()
        out.line = self.line(index)
        out.lines = []
        index = self.space(index + 1)
        while self.text[index] != "]":
            out.lines.append(self.line(index))
            try:
                item, index = self.value(index, depth + 1)
            except _FieldError as error:
                raise error.within(f"[{len(out)}]") from None
            out.append(item)
            index = self.space(index)
            if self.text[index] == ",":
                index = self.space(index + 1)
        return out, index + 1


def _grid(path: Path, document: object) -> Grid:
    if not isinstance(document, _Map):
        raise _FieldError(1, "grid", "must be a mapping with policies, seeds and figures")
    unknown = sorted(set(document) - {"policies", "seeds", "defaults", "figures"})
    if unknown:
        raise _FieldError(_line(document, unknown[0]), unknown[0], "unknown field")
    for required in ("policies", "seeds", "figures"):
        if required not in document:
            raise _FieldError(document.line, required, "missing")
    policies = _policies(document)
    seeds = _seeds(document)
    context = _Context(path.parent)
    defaults = document.get("defaults", _Map())
    if not isinstance(defaults, _Map):
        raise _FieldError(_line(document, "defaults"), "defaults", "must be a mapping")
    base = _parameters(defaults, "defaults", context)
    figures_doc = document["figures"]
    if not isinstance(figures_doc, _List) or not figures_doc:
        raise _FieldError(_line(document, "figures"), "figures", "must be a non-empty list")
    figures: list[Figure] = []
    for index, item in enumerate(figures_doc):
        settings_before = sum(len(figure.settings) for figure in figures)
        where = f"figures[{index}]"
        line = _line(figures_doc, index)
        figure = _figure(
            item, where, line, base, settings_before, len(seeds), len(policies), context
        )
        for known in figures:
            if known.name == figure.name:
                message = f"{figure.name!r} appears twice"
            elif known.name.casefold() == figure.name.casefold():
                message = (
                    f"{figure.name!r} differs from {known.name!r} only in case "
                    "(the same files where file names ignore case)"
                )
            else:
                continue
            raise _FieldError(_line(item, "name"), f"{where}.name", message)
        figures.append(figure)
    _check_seeds_matter(document, seeds, figures)
    return Grid(path, tuple(policies), tuple(seeds), tuple(figures))


def _policies(document: _Map) -> list[str]:
    """The policies, named as ``beamer simulate --policies`` names them (a registered name
    or a variant such as ``beamer:split_trials=true``) and checked by the same parser."""
    policies = _names(document, "policies")
    given = document["policies"]
    for index, name in enumerate(policies):
        line = _line(given, index) if isinstance(given, _List) else _line(document, "policies")
        try:
            policy_from_spec(name)
        except UserError as error:
            message = str(error)
            if ":" not in name:  # the registry's message, with a long name cut short
                message = f"unknown policy {_brief.repr(name)} (known: {', '.join(POLICIES)})"
            raise _FieldError(line, f"policies[{index}]", message) from None
    try:  # one policy in two spellings (beamer, beamer:split_trials=false) would run twice
        parse_policy_list(",".join(policies), "policies", check=lambda name: None)
    except UserError as error:
        message = str(error).removeprefix("policies: ")
        raise _FieldError(_line(document, "policies"), "policies", message) from None
    return policies


def _check_seeds_matter(document: _Map, seeds: list[int], figures: list[Figure]) -> None:
    """Only hp-tuning draws its workload from the seed: a file or fb2010 on three seeds
    runs the same thing three times and reports it as three independent seeds."""
    if len(seeds) < 2:
        return
    for figure in figures:
        for setting in figure.settings:
            workload = setting.point.workload
            if workload not in SEEDED_WORKLOADS:
                raise _FieldError(
                    _line(document, "seeds"),
                    "seeds",
                    f"{len(seeds)} seeds, but the workload {workload} (figure {figure.name}) "
                    f"is the same on every seed (only {', '.join(SEEDED_WORKLOADS)} is drawn "
                    "from the seed): give one seed, or put that workload in a grid of its own",
                )


def _names(document: _Map, field: str) -> list[str]:
    value = document[field]
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise _FieldError(_line(document, field), field, "must be a non-empty list of names")
    if len(set(value)) != len(value):
        raise _FieldError(_line(document, field), field, "names a policy twice")
    return list(value)


def _seeds(document: _Map) -> list[int]:
    value = document["seeds"]
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        raise _FieldError(
            _line(document, "seeds"), "seeds", "must be a non-empty list of integers >= 0"
        )
    for index, seed in enumerate(value):
        if seed < 0:  # it would draw the same workload as -seed (random.Random takes abs)
            raise _FieldError(
                _line(value, index), f"seeds[{index}]", f"{seed} is negative (seeds are >= 0)"
            )
    if len(set(value)) != len(value):
        raise _FieldError(_line(document, "seeds"), "seeds", "names a seed twice")
    return list(value)


def _figure(
    item: object,
    where: str,
    line: int,
    base: dict[str, _Value],
    settings_before: int,
    seeds: int,
    policies: int,
    context: _Context,
) -> Figure:
    """A figure's settings; refused before they are made if with the ``settings_before``
    settings of the figures above, on ``seeds`` seeds and ``policies`` policies, the grid
    has more than :data:`MAX_RUNS` runs."""
    if not isinstance(item, _Map):
        raise _FieldError(line, where, "must be a mapping with name and vary")
    unknown = sorted(set(item) - {"name", "vary", "fixed"})
    if unknown:
        raise _FieldError(_line(item, unknown[0]), f"{where}.{unknown[0]}", "unknown field")
    name = item.get("name")
    if not isinstance(name, str) or not _FIGURE_NAME.fullmatch(name):
        raise _FieldError(
            _line(item, "name"),
            f"{where}.name",
            "must be a name of letters, digits, '.', '_' or '-' (it names the figure's files)",
        )
    if len(name) > MAX_FIGURE_NAME:
        raise _FieldError(
            _line(item, "name"),
            f"{where}.name",
            f"{len(name)} characters, more than the {MAX_FIGURE_NAME} a figure name may have "
            "(it names the figure's files)",
        )
    fixed_doc = item.get("fixed", _Map())
    if not isinstance(fixed_doc, _Map):
        raise _FieldError(_line(item, "fixed"), f"{where}.fixed", "must be a mapping")
    fixed = {**base, **_parameters(fixed_doc, f"{where}.fixed", context)}
    vary = item.get("vary")
    if not isinstance(vary, _Map) or not vary:
        raise _FieldError(
            _line(item, "vary"), f"{where}.vary", "must map parameters to lists of values"
        )
    for parameter, values in vary.items():
        field = f"{where}.vary.{parameter}"
        if parameter not in PARAMETERS:
            raise _FieldError(
                _line(vary, parameter), field, f"unknown parameter (known: {', '.join(PARAMETERS)})"
            )
        if not isinstance(values, _List) or not values:
            raise _FieldError(_line(vary, parameter), field, "must be a non-empty list of values")
    count = math.prod(len(values) for values in vary.values())
    runs = (settings_before + count) * seeds * policies
    if runs > MAX_RUNS:
        above = f" ({settings_before + count:,} with the figures above)" if settings_before else ""
        raise _FieldError(
            _line(item, "vary"),
            f"{where}.vary",
            f"{_count(count, 'setting')}{above} × {_count(seeds, 'seed')} × "
            f"{_count(policies, 'policy', 'policies')} = {runs:,} runs, over the limit of "
            f"{MAX_RUNS:,} runs per grid",
        )
    axes: list[list[tuple[str, str, _Value]]] = []
    for parameter, values in vary.items():
        field = f"{where}.vary.{parameter}"
        axis: list[tuple[str, str, _Value]] = []
        seen: set[Any] = set()  # parsed values are hashable: a set keeps this linear
        for index, value in enumerate(values):
            given = _parameter(parameter, value, _line(values, index), f"{field}[{index}]", context)
            if given.parsed in seen:
                # The same setting twice would be run twice and count twice in the table.
                raise _FieldError(given.line, given.field, "repeats a value")
            seen.add(given.parsed)
            axis.append((parameter, _show(value), given))
        axes.append(axis)
    settings: list[Setting] = []
    for combination in itertools.product(*axes):
        chosen = dict(fixed)
        chosen.update({parameter: given for parameter, _, given in combination})
        point = _point(chosen, _line(item, "vary"), f"{where}.vary")
        label = ", ".join(
            shown if len(combination) == 1 else f"{parameter} {shown}"
            for parameter, shown, _ in combination
        )
        values_shown = tuple((parameter, shown) for parameter, shown, _ in combination)
        settings.append(Setting(label, values_shown, point))
    return Figure(name, tuple(vary), tuple(settings))


def _count(number: int, one: str, many: str = "") -> str:
    return f"{number:,} {one if number == 1 else many or one + 's'}"


def _show(value: object) -> str:
    """A value as the figure's labels show it (CSV, table, plot). A file name's bytes that
    are no UTF-8 (lone surrogates) are escaped: no file or font could take them."""
    text = ",".join(map(str, value)) if isinstance(value, list) else str(value)
    return text_bytes(text).decode("utf-8")


def _parameters(document: _Map, where: str, context: _Context) -> dict[str, _Value]:
    out: dict[str, _Value] = {}
    for parameter, value in document.items():
        field = f"{where}.{parameter}"
        if parameter not in PARAMETERS:
            raise _FieldError(
                _line(document, parameter),
                field,
                f"unknown parameter (known: {', '.join(PARAMETERS)})",
            )
        out[parameter] = _parameter(parameter, value, _line(document, parameter), field, context)
    return out


class _Value(NamedTuple):
    """A parameter's value, checked and normalised (``None`` = the default), and where the
    grid gives it: errors found in a whole setting point there."""

    parsed: Any
    line: int
    field: str


def _parameter(name: str, value: object, line: int, field: str, context: _Context) -> _Value:
    """One parameter's value, checked and normalised."""
    try:
        return _Value(_parse_parameter(name, value, context), line, field)
    except UserError as error:
        message = str(error)
        prefix = f"{name}: "
        raise _FieldError(line, field, message.removeprefix(prefix)) from None


class _Workload(NamedTuple):
    """A ``workload`` value: ``hp-tuning``, ``fb2010`` or a file's absolute path, and the
    digest of the file's content (``None`` for hp-tuning)."""

    name: str
    sha256: str | None


_HP_TUNING = _Workload("hp-tuning", None)


@dataclass(slots=True)
class _Context:
    """What a parameter's check needs beyond its value: the grid file's directory, where
    a relative workload path starts (not the current directory, which changes with where
    the command runs), and the workload files read so far (each is read once)."""

    directory: Path
    workloads: dict[str, _Workload] = dataclasses.field(default_factory=dict)

    def workload(self, value: str) -> _Workload:
        """The workload named ``value``; a file is loaded as a run would load it, so that
        a missing or malformed one is refused at the grid's line, not when the runs start."""
        if value == "hp-tuning":
            return _HP_TUNING
        if "\0" in value:  # shown as written: no file has such a name, wherever it starts
            raise UserError(f"{_brief.repr(value)}: not a file name (it holds a NUL character)")
        if value == "fb2010":
            name, path = value, default_trace_path()
        else:
            path = (self.directory / file_path(value)).absolute()
            name = str(path)
        if name not in self.workloads:
            from workloads.loader import load_workload

            if not load_workload(name).experiments:
                raise UserError(f"{name}: no experiments, so no SCT to compare")
            data = read_bytes(path, what="workload file", max_bytes=MAX_FILE_BYTES)
            self.workloads[name] = _Workload(name, hashlib.sha256(data).hexdigest())
        return self.workloads[name]


def _parse_parameter(name: str, value: object, context: _Context) -> Any:
    shown = _brief.repr(value)

    def integer(minimum: int) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise UserError(f"must be an integer >= {minimum}, not {shown}")
        return value

    if name == "workload":
        if not isinstance(value, str) or not value:
            raise UserError("must be hp-tuning, fb2010 or a workload file")
        return context.workload(value)
    if name == "load":
        try:
            number = float(value) if isinstance(value, int | float) else math.nan
        except OverflowError:  # an integer beyond any float
            number = math.inf
        if isinstance(value, bool) or not (math.isfinite(number) and number > 0):
            raise UserError(f"must be a positive number, not {shown}")
        return number
    if name == "queues":
        if value == "ideal":
            return None
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 64:
            raise UserError(f"must be 'ideal' or a number of classes in 1..64, not {shown}")
        return value
    if name == "quantize":
        if value not in STRATEGIES:
            raise UserError(f"must be one of {', '.join(STRATEGIES)}, not {shown}")
        return value
    if name == "mix":
        if value not in MIXES:
            raise UserError(f"must be one of {', '.join(MIXES)}, not {shown}")
        return value
    if name == "models":
        if not _text_or_texts(value):
            raise UserError("must be 'all', a model name or a list of model names")
        return parse_models(value)
    if name == "sync":
        if not _text_or_texts(value):
            raise UserError("must be ring, ps or both")
        return parse_sync(value)
    if name == "eta":
        return integer(2)
    if name in ("max_trials", "jobs"):
        return integer(1)
    if name == "hosts":
        return integer(2)
    raise UserError(f"unknown parameter {name!r}")


def _text_or_texts(value: object) -> TypeGuard[str | list[str]]:
    return isinstance(value, str) or (
        isinstance(value, list) and all(isinstance(item, str) for item in value)
    )


def _point(chosen: Mapping[str, _Value], line: int, field: str) -> Point:
    """The setting of the ``chosen`` parameters; a combination the generator refuses is
    reported at the parameter that holds the offending value (``line`` and ``field``, the
    figure's ``vary``, when the grid does not set it)."""
    values = {name: given.parsed for name, given in chosen.items()}
    workload, workload_sha256 = values.get("workload", _HP_TUNING)
    if workload != "hp-tuning":
        shaped = sorted(set(values) & set(SHAPE_PARAMETERS))
        if shaped:
            raise _FieldError(
                line, field, f"{shaped[0]} applies to the hp-tuning workload only, not {workload!r}"
            )
    load = values.get("load")
    if load is None and workload == "hp-tuning":
        load = HpTuningConfig().load
    point = Point(
        workload=workload,
        load=load,
        queues=values.get("queues"),
        quantize=values.get("quantize", "rank"),
        mix=values.get("mix", "mixed"),
        models=values.get("models"),
        eta=values.get("eta"),
        max_trials=values.get("max_trials"),
        sync=values.get("sync"),
        jobs=values.get("jobs"),
        hosts=values.get("hosts"),
        workload_sha256=workload_sha256,
    )
    if workload == "hp-tuning":
        try:
            _check_shape(dataclasses.replace(point, load=None, queues=None, quantize="rank"))
        except UserError as error:
            raise _blame(error, chosen, line, field) from None
    return point


@functools.lru_cache(maxsize=256)
def _check_shape(shape: Point) -> None:
    """The generator checks combinations (workers against hosts, sizes against limits),
    once per workload shape: a figure of thousands of loads has one shape."""
    shape.hp_config()


_PARAMETERS_OF_SETTING: dict[str, tuple[str, ...]] = {
    "num_hosts": ("hosts",),
    "num_jobs": ("jobs",),
    "jobs": ("max_trials", "eta", "mix"),
}
"""The grid parameters that set a generator setting (:class:`SettingError`'s ``field``);
the others are named alike."""


def _blame(error: UserError, chosen: Mapping[str, _Value], line: int, field: str) -> _FieldError:
    """``error`` at the first parameter behind it that the grid sets, without the
    generator's name for it; at ``line`` and ``field``, whole, otherwise."""
    setting, _, detail = str(error).partition(": ")
    if isinstance(error, SettingError):
        setting, detail = error.field, error.detail
    for parameter in _PARAMETERS_OF_SETTING.get(setting, (setting,)):
        if parameter in chosen and detail:
            given = chosen[parameter]
            return _FieldError(given.line, given.field, detail)
    return _FieldError(line, field, str(error))


def run_key(point: Point, seed: int, policy: str) -> str:
    """Canonical text of one run: what ``runs.jsonl`` records are found by."""
    return json.dumps(
        {"point": point.as_dict(), "seed": seed, "policy": policy},
        sort_keys=True,
        separators=(",", ":"),
    )


def describe(point: Point, keys: Sequence[str] = PARAMETERS) -> str:
    """A grid point as ``name=value`` pairs, for messages (the parameters among ``keys``:
    a workload's digest names nothing the user wrote)."""
    values = point.as_dict()
    return " ".join(
        f"{name}={_show(values[name]) if values[name] is not None else 'default'}"
        for name in keys
        if name in PARAMETERS
    )

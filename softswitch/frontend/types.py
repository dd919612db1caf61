"""Types of the P4-16 subset, as the checker and the code generator see them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class P4Type:
    def __str__(self) -> str:
        return type(self).__name__


@dataclass(frozen=True)
class Bits(P4Type):
    width: int

    def __str__(self) -> str:
        return f"bit<{self.width}>"


@dataclass(frozen=True)
class IntLiteral(P4Type):
    """An unsized integer constant; takes the width of the other operand."""

    def __str__(self) -> str:
        return "int"


@dataclass(frozen=True)
class Bool(P4Type):
    def __str__(self) -> str:
        return "bool"


@dataclass(frozen=True)
class Varbit(P4Type):
    max_width: int

    def __str__(self) -> str:
        return f"varbit<{self.max_width}>"


@dataclass(frozen=True)
class StringT(P4Type):
    def __str__(self) -> str:
        return "string"


@dataclass(frozen=True)
class Void(P4Type):
    def __str__(self) -> str:
        return "void"


@dataclass(frozen=True)
class ErrorT(P4Type):
    def __str__(self) -> str:
        return "error"


@dataclass(frozen=True)
class MatchKindT(P4Type):
    def __str__(self) -> str:
        return "match_kind"


@dataclass(frozen=True)
class EnumT(P4Type):
    name: str
    members: tuple[str, ...]
    underlying: Bits | None = None

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class HeaderT(P4Type):
    name: str
    fields: tuple[tuple[str, P4Type], ...]

    def __str__(self) -> str:
        return self.name

    def field_type(self, name: str) -> P4Type | None:
        return next((t for n, t in self.fields if n == name), None)

    @property
    def fixed_bits(self) -> int:
        return sum(t.width for _, t in self.fields if isinstance(t, Bits))

    @property
    def varbit_field(self) -> tuple[str, Varbit] | None:
        return next(((n, t) for n, t in self.fields if isinstance(t, Varbit)), None)


@dataclass(frozen=True)
class StructT(P4Type):
    name: str
    fields: tuple[tuple[str, P4Type], ...]

    def __str__(self) -> str:
        return self.name

    def field_type(self, name: str) -> P4Type | None:
        return next((t for n, t in self.fields if n == name), None)


@dataclass(frozen=True)
class ExternT(P4Type):
    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class TupleT(P4Type):
    """The type of ``{a, b, c}`` list expressions (checksum and hash data)."""

    items: tuple[P4Type, ...]


def width_of(t: P4Type) -> int:
    if isinstance(t, Bits):
        return t.width
    if isinstance(t, Bool):
        return 1
    if isinstance(t, EnumT) and t.underlying is not None:
        return t.underlying.width
    raise TypeError(f"{t} has no fixed width")

"""Syntax tree of the P4-16 subset; every node knows where it came from."""

from __future__ import annotations

from dataclasses import dataclass, field

from softswitch.frontend.errors import SourceLocation

# ----------------------------------------------------------------------------- types


@dataclass
class TypeRef:
    loc: SourceLocation


@dataclass
class BitType(TypeRef):
    width: int
    signed: bool = False


@dataclass
class VarbitType(TypeRef):
    max_width: int


@dataclass
class BoolType(TypeRef):
    pass


@dataclass
class VoidType(TypeRef):
    pass


@dataclass
class NamedType(TypeRef):
    name: str
    args: list[TypeRef] = field(default_factory=list)


# ----------------------------------------------------------------------------- expressions


@dataclass
class Expr:
    loc: SourceLocation


@dataclass
class IntLit(Expr):
    value: int
    width: int | None = None
    signed: bool = False


@dataclass
class BoolLit(Expr):
    value: bool


@dataclass
class StringLit(Expr):
    value: str


@dataclass
class Name(Expr):
    name: str


@dataclass
class Member(Expr):
    """``base.member``; ``loc`` is where the expression starts, ``member_loc`` the name."""

    base: Expr
    member: str
    member_loc: SourceLocation | None = None


@dataclass
class Index(Expr):
    base: Expr
    index: Expr


@dataclass
class Slice(Expr):
    base: Expr
    high: Expr
    low: Expr


@dataclass
class Unary(Expr):
    op: str
    operand: Expr


@dataclass
class Binary(Expr):
    op: str
    left: Expr
    right: Expr


@dataclass
class Ternary(Expr):
    cond: Expr
    then: Expr
    other: Expr


@dataclass
class Cast(Expr):
    type: TypeRef
    operand: Expr


@dataclass
class Call(Expr):
    func: Expr
    args: list[Expr]
    type_args: list[TypeRef] = field(default_factory=list)


@dataclass
class ListExpr(Expr):
    items: list[Expr]


@dataclass
class Default(Expr):
    """``default`` or ``_`` in a select case or key set."""


@dataclass
class Mask(Expr):
    value: Expr
    mask: Expr


@dataclass
class Range(Expr):
    low: Expr
    high: Expr


# ----------------------------------------------------------------------------- statements


@dataclass
class Stmt:
    loc: SourceLocation


@dataclass
class Block(Stmt):
    stmts: list[Stmt]


@dataclass
class Assign(Stmt):
    target: Expr
    value: Expr


@dataclass
class ExprStmt(Stmt):
    expr: Expr


@dataclass
class If(Stmt):
    cond: Expr
    then: Stmt
    other: Stmt | None


@dataclass
class SwitchCase:
    loc: SourceLocation
    labels: list[Expr]  # Name of an action, IntLit, or Default
    body: Block | None  # None = fall through to the next case


@dataclass
class Switch(Stmt):
    subject: Expr
    cases: list[SwitchCase]


@dataclass
class VarDecl(Stmt):
    type: TypeRef
    name: str
    init: Expr | None
    is_const: bool = False


@dataclass
class Return(Stmt):
    pass


@dataclass
class Exit(Stmt):
    pass


@dataclass
class Empty(Stmt):
    pass


@dataclass
class Transition(Stmt):
    """``transition state;`` or ``transition select (...) {...}``."""

    target: str | None
    select_on: list[Expr] = field(default_factory=list)
    cases: list[tuple[Expr, str, SourceLocation]] = field(default_factory=list)


# ----------------------------------------------------------------------------- declarations


@dataclass
class Annotation:
    loc: SourceLocation
    name: str
    args: list[Expr]
    text: str = ""  # as written, e.g. '@noWarn("unused")' (P4Info carries it so)


@dataclass
class Decl:
    loc: SourceLocation
    name: str
    annotations: list[Annotation] = field(default_factory=list, kw_only=True)

    def annotation(self, name: str) -> Annotation | None:
        return next((a for a in self.annotations if a.name == name), None)


@dataclass
class Field:
    loc: SourceLocation
    type: TypeRef
    name: str


@dataclass
class HeaderDecl(Decl):
    fields: list[Field]


@dataclass
class StructDecl(Decl):
    fields: list[Field]


@dataclass
class TypedefDecl(Decl):
    type: TypeRef


@dataclass
class EnumDecl(Decl):
    members: list[str]
    underlying: TypeRef | None = None
    values: list[Expr | None] = field(default_factory=list)


@dataclass
class ErrorDecl(Decl):
    members: list[str]


@dataclass
class MatchKindDecl(Decl):
    members: list[str]


@dataclass
class ConstDecl(Decl):
    type: TypeRef
    value: Expr


@dataclass
class Param:
    loc: SourceLocation
    direction: str  # "", "in", "out", "inout"
    type: TypeRef
    name: str


@dataclass
class ExternFunctionDecl(Decl):
    return_type: TypeRef
    type_params: list[str]
    params: list[Param]


@dataclass
class ExternDecl(Decl):
    type_params: list[str]
    methods: list[ExternFunctionDecl]


@dataclass
class ParserTypeDecl(Decl):
    """``parser P<H>(...);`` and ``control C<H>(...);`` declarations in arch files."""

    kind: str
    type_params: list[str]
    params: list[Param]


@dataclass
class PackageDecl(Decl):
    type_params: list[str]
    params: list[Param]


@dataclass
class Instantiation(Decl):
    type: TypeRef
    args: list[Expr]


@dataclass
class ActionDecl(Decl):
    params: list[Param]
    body: Block


@dataclass
class KeyElement:
    loc: SourceLocation
    expr: Expr
    match_kind: str
    annotations: list[Annotation]


@dataclass
class ActionRefDecl:
    loc: SourceLocation
    name: str
    args: list[Expr]
    annotations: list[Annotation]


@dataclass
class TableEntryDecl:
    loc: SourceLocation
    keys: list[Expr]
    action: ActionRefDecl
    priority: int | None


@dataclass
class TableDecl(Decl):
    keys: list[KeyElement] | None = None
    actions: list[ActionRefDecl] | None = None
    default_action: ActionRefDecl | None = None
    default_is_const: bool = False
    size: Expr | None = None
    counters: Expr | None = None
    entries: list[TableEntryDecl] | None = None
    entries_loc: SourceLocation | None = None
    other: dict[str, Expr] = field(default_factory=dict)


@dataclass
class ParserState:
    loc: SourceLocation
    name: str
    stmts: list[Stmt]
    transition: Transition | None


@dataclass
class ParserDecl(Decl):
    params: list[Param]
    locals: list[Decl | Stmt]
    states: list[ParserState]


@dataclass
class ControlDecl(Decl):
    params: list[Param]
    locals: list[Decl | Stmt]
    apply: Block


@dataclass
class FunctionDecl(Decl):
    return_type: TypeRef
    params: list[Param]
    body: Block


@dataclass
class Program:
    decls: list[Decl]

"""Lexer and recursive-descent parser for the P4-16 subset the target runs.

Hand-written rather than generated: P4's ``<`` is both a comparison and the
start of type arguments (``bit<8>``, ``lookahead<T>()``), which a
recursive-descent parser settles by context, and every error can name the
exact token it stopped at.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from softswitch.frontend import ast
from softswitch.frontend.errors import CompileError, SourceLocation
from softswitch.frontend.limits import MAX_BIT_WIDTH, MAX_NESTING, MAX_TOKENS
from softswitch.frontend.preprocess import Line

_TOKEN = re.compile(
    r"""
    (?P<ws>[ \t\r\f\v]+)
  | (?P<num>\d+[wsWS]\d[0-9a-fA-FxXbBoO_]*|0[xX][0-9a-fA-F_]+|0[bB][01_]+|0[oO][0-7_]+|\d[\d_]*)
  | (?P<id>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<str>"(?:[^"\\\n]|\\.)*")
  | (?P<op>&&&|\|\+\||\|-\||<<=|>>=|\.\.|\+\+|<<|==|!=|<=|>=|&&|\|\||[-+*/%&|^~!<>=?:;,.(){}\[\]@#])
    """,
    re.VERBOSE,
)

KEYWORDS = {
    "action", "apply", "bit", "bool", "const", "control", "default", "else", "entries",
    "enum", "error", "exit", "extern", "false", "header", "if", "in", "inout", "int",
    "key", "match_kind", "out", "package", "parser", "return", "select", "state",
    "struct", "switch", "table", "transition", "true", "typedef", "varbit", "void",
    "actions", "header_union", "tuple", "list", "abstract", "priority",
}  # fmt: skip

_UNSUPPORTED_KEYWORDS = {"header_union", "abstract"}

# Tokens after which a new declaration or statement may start.
_ENDS_A_CONSTRUCT = {";", "{", "}"}


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # "id", "num", "str", "op", "kw", "eof"
    text: str
    loc: SourceLocation


def _parse_number(text: str, loc: SourceLocation) -> tuple[int, int | None, bool]:
    width: int | None = None
    signed = False
    match = re.fullmatch(r"(\d+)([wsWS])(.+)", text)
    if match:
        width = int(match.group(1))
        signed = match.group(2) in "sS"
        text = match.group(3)
        if width == 0:
            raise CompileError(loc, "a width-prefixed literal needs a width > 0")
        if width > MAX_BIT_WIDTH:
            raise CompileError(
                loc, f"width {width} is above the widest supported, {MAX_BIT_WIDTH} bits"
            )
    clean = text.replace("_", "")
    try:
        if clean[:2] in ("0x", "0X"):
            value = int(clean[2:], 16)
        elif clean[:2] in ("0b", "0B"):
            value = int(clean[2:], 2)
        elif clean[:2] in ("0o", "0O"):
            value = int(clean[2:], 8)
        else:
            value = int(clean, 10)
    except ValueError:
        shown = (
            text if len(text) <= 40 else f"{text[:20]}...{text[-10:]} ({len(text):,} characters)"
        )
        raise CompileError(loc, f"malformed number {shown}") from None
    return value, width, signed


def tokenize(lines: list[Line]) -> list[Token]:
    tokens: list[Token] = []
    for line in lines:
        text = line.text
        pos = 0
        while pos < len(text):
            match = _TOKEN.match(text, pos)
            loc = SourceLocation(line.file, line.number, pos + 1)
            if not match:
                raise CompileError(loc, f"unexpected character {text[pos]!r}")
            kind = match.lastgroup or ""
            value = match.group(0)
            pos = match.end()
            if kind == "ws":
                continue
            if kind == "id" and value in KEYWORDS:
                kind = "kw"
            if len(tokens) == MAX_TOKENS:
                # Checked as tokens are made, not after: the list itself is the memory.
                raise CompileError(loc, f"the program has more than {MAX_TOKENS:,} tokens")
            tokens.append(Token(kind, value, loc))
    last = lines[-1] if lines else Line("", "<empty>", 1)
    tokens.append(Token("eof", "", SourceLocation(last.file, last.number, len(last.text) + 1)))
    return tokens


# Binary operator precedence, loosest first (P4-16 spec, like C).
_BINARY_LEVELS: list[set[str]] = [
    {"||"},
    {"&&"},
    {"==", "!="},
    {"<", ">", "<=", ">="},
    {"|"},
    {"^"},
    {"&"},
    {"<<", ">>"},
    {"++"},
    {"+", "-", "|+|", "|-|"},
    {"*", "/", "%"},
]


_BINARY_LEVEL = {op: level for level, ops in enumerate(_BINARY_LEVELS) for op in ops}


class _Nesting:
    """Counts how deep the parser is in recursive constructs; past MAX_NESTING the
    program is refused at the construct that went too deep."""

    def __init__(self, parser: Parser) -> None:
        self.parser = parser

    def __enter__(self) -> None:
        self.parser.deeper(self.parser.tok.loc)

    def __exit__(self, *exc: object) -> None:
        self.parser.depth -= 1


class Parser:
    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = tokens
        self.pos = 0
        self.depth = 0
        # A '>>' split into two '>' while closing nested type arguments.
        self.pending_gt: Token | None = None

    def deeper(self, loc: SourceLocation) -> None:
        """One level deeper (the caller restores ``depth``); refused at ``loc`` past the limit."""
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise CompileError(
                loc,
                f"nested more than {MAX_NESTING} levels deep (parenthesised expressions, "
                "binary operators (each one of a chain like a - b - c), slices and indexes, "
                "unary operators and casts, statements inside if/else and blocks, and type "
                "arguments count together); split it up",
            )

    # ------------------------------------------------------------------ token helpers

    @property
    def tok(self) -> Token:
        if self.pending_gt is not None:
            return self.pending_gt
        return self.tokens[self.pos]

    def peek(self, offset: int = 1) -> Token:
        index = min(self.pos + offset, len(self.tokens) - 1)
        return self.tokens[index]

    def advance(self) -> Token:
        if self.pending_gt is not None:
            token = self.pending_gt
            self.pending_gt = None
            return token
        token = self.tokens[self.pos]
        if token.kind != "eof":
            self.pos += 1
        return token

    def at(self, *texts: str) -> bool:
        token = self.tok
        return token.kind in ("op", "kw") and token.text in texts

    def accept(self, text: str) -> bool:
        if self.at(text):
            self.advance()
            return True
        return False

    def error(self, message: str, token: Token | None = None) -> CompileError:
        token = token or self.tok
        found = "end of input" if token.kind == "eof" else repr(token.text)
        previous = self.previous_token(token)
        if (
            previous is not None
            and previous.loc.file != token.loc.file
            and not (previous.kind == "op" and previous.text in _ENDS_A_CONSTRUCT)
        ):
            # The construct `previous` is part of is left unfinished where the text of
            # another file takes over (an #include starts or ends there): the mistake is
            # in `previous`'s file, not at the first token of the other one (a user's
            # 'garbage' before '#include <core.p4>' is not core.p4's fault).
            loc = previous.loc
            after = SourceLocation(loc.file, loc.line, loc.column + len(previous.text))
            return CompileError(
                after,
                f"{message} after {previous.text!r}, found {found} at {token.loc}, in another file",
            )
        return CompileError(token.loc, f"{message}, found {found}")

    def previous_token(self, token: Token) -> Token | None:
        """The token before ``token`` when that is the current one (else None)."""
        if self.pending_gt is not None or self.pos == 0 or token is not self.tokens[self.pos]:
            return None
        return self.tokens[self.pos - 1]

    def expect(self, text: str) -> Token:
        if text == ">" and self.at(">>"):
            token = self.advance()
            split = SourceLocation(token.loc.file, token.loc.line, token.loc.column + 1)
            self.pending_gt = Token("op", ">", split)
            return Token("op", ">", token.loc)
        if not self.at(text):
            raise self.error(f"expected {text!r}")
        return self.advance()

    def ident(self, what: str = "a name") -> Token:
        token = self.tok
        # Some keywords double as names where P4 allows it (apply, key, actions, ...).
        if token.kind == "id" or (
            token.kind == "kw" and token.text in ("apply", "key", "actions", "entries", "priority")
        ):
            return self.advance()
        if token.kind == "kw" and token.text in _UNSUPPORTED_KEYWORDS:
            raise CompileError(token.loc, f"'{token.text}' is not supported by this target")
        raise self.error(f"expected {what}")

    # ------------------------------------------------------------------ program

    def program(self) -> ast.Program:
        decls: list[ast.Decl] = []
        while self.tok.kind != "eof":
            if self.accept(";"):
                continue
            decls.append(self.declaration())
        return ast.Program(decls)

    def annotations(self) -> list[ast.Annotation]:
        result: list[ast.Annotation] = []
        while self.at("@"):
            at = self.advance()
            name = self.ident("an annotation name").text
            args: list[ast.Expr] = []
            body: list[str] = []
            if self.at("("):
                self.advance()
                while not self.at(")"):
                    if self.tok.kind == "eof":
                        raise self.error("unterminated annotation")
                    body.append(self.tok.text)
                    if self.tok.kind in ("str", "num") or self.at("true", "false"):
                        args.append(self.primary())
                    else:
                        self.advance()
                    if self.accept(","):
                        body.append(", ")
                self.expect(")")
            text = f"@{name}({''.join(body)})" if body else f"@{name}"
            result.append(ast.Annotation(at.loc, name, args, text))
        return result

    def declaration(self) -> ast.Decl:
        annotations = self.annotations()
        decl = self._declaration()
        decl.annotations = annotations
        return decl

    def _declaration(self) -> ast.Decl:
        token = self.tok
        text = token.text if token.kind == "kw" else ""
        if text == "header":
            return self.header_or_struct(header=True)
        if text == "struct":
            return self.header_or_struct(header=False)
        if text == "typedef":
            self.advance()
            type_ = self.type_ref()
            name = self.ident("a type name")
            self.expect(";")
            return ast.TypedefDecl(token.loc, name.text, type_)
        if text == "const":
            self.advance()
            type_ = self.type_ref()
            name = self.ident()
            self.expect("=")
            value = self.expression()
            self.expect(";")
            return ast.ConstDecl(token.loc, name.text, type_, value)
        if text == "enum":
            return self.enum()
        if text in ("error", "match_kind"):
            self.advance()
            members = self.name_list()
            if text == "error":
                return ast.ErrorDecl(token.loc, "error", members)
            return ast.MatchKindDecl(token.loc, "match_kind", members)
        if text == "extern":
            return self.extern()
        if text == "parser":
            return self.parser_decl()
        if text == "control":
            return self.control_decl()
        if text == "package":
            self.advance()
            name = self.ident()
            type_params = self.type_params()
            params = self.params()
            self.expect(";")
            return ast.PackageDecl(token.loc, name.text, type_params, params)
        if text == "action":
            return self.action()
        if text in _UNSUPPORTED_KEYWORDS:
            raise CompileError(token.loc, f"'{text}' declarations are not supported by this target")
        if token.kind in ("id", "kw") and text not in ("table", "state"):
            return self.function_or_instance()
        raise self.error("expected a declaration")

    def name_list(self) -> list[str]:
        self.expect("{")
        names: list[str] = []
        while not self.at("}"):
            names.append(self.ident().text)
            if not self.accept(","):
                break
        self.expect("}")
        return names

    def header_or_struct(self, header: bool) -> ast.Decl:
        start = self.advance()
        name = self.ident("a type name")
        if self.at("<"):
            raise CompileError(self.tok.loc, "generic headers and structs are not supported")
        self.expect("{")
        fields: list[ast.Field] = []
        while not self.at("}"):
            self.annotations()
            field_type = self.type_ref()
            if self.at("["):
                raise CompileError(self.tok.loc, "header stacks are not supported by this target")
            field_name = self.ident("a field name")
            if self.at("["):
                raise CompileError(self.tok.loc, "header stacks are not supported by this target")
            self.expect(";")
            fields.append(ast.Field(field_name.loc, field_type, field_name.text))
        self.expect("}")
        if header:
            return ast.HeaderDecl(start.loc, name.text, fields)
        return ast.StructDecl(start.loc, name.text, fields)

    def enum(self) -> ast.EnumDecl:
        start = self.advance()
        underlying: ast.TypeRef | None = None
        if self.at("bit", "int"):
            underlying = self.type_ref()
        name = self.ident("an enum name")
        self.expect("{")
        members: list[str] = []
        values: list[ast.Expr | None] = []
        while not self.at("}"):
            members.append(self.ident().text)
            values.append(self.expression() if self.accept("=") else None)
            if not self.accept(","):
                break
        self.expect("}")
        if underlying is not None and any(v is None for v in values):
            raise CompileError(
                start.loc, f"every member of serializable enum {name.text} needs a value"
            )
        return ast.EnumDecl(start.loc, name.text, members, underlying, values)

    def type_params(self) -> list[str]:
        names: list[str] = []
        if self.accept("<"):
            while True:
                names.append(self.ident("a type parameter").text)
                if not self.accept(","):
                    break
            self.expect(">")
        return names

    def params(self) -> list[ast.Param]:
        self.expect("(")
        params: list[ast.Param] = []
        while not self.at(")"):
            self.annotations()
            loc = self.tok.loc
            direction = ""
            if self.at("in", "out", "inout"):
                direction = self.advance().text
            param_type = self.type_ref()
            name = self.ident("a parameter name")
            if self.at("="):
                raise CompileError(self.tok.loc, "default parameter values are not supported")
            params.append(ast.Param(loc, direction, param_type, name.text))
            if not self.accept(","):
                break
        self.expect(")")
        return params

    def extern(self) -> ast.Decl:
        start = self.advance()
        # extern object: ``extern Name {`` or ``extern Name<T> {``; otherwise a function.
        is_object = self.tok.kind == "id" and self.peek().text in ("{", "<")
        if not is_object:
            ret = self.type_ref()
            name = self.ident()
            type_params = self.type_params()
            params = self.params()
            self.expect(";")
            return ast.ExternFunctionDecl(start.loc, name.text, ret, type_params, params)
        name = self.ident("an extern name")
        type_params = self.type_params()
        self.expect("{")
        methods: list[ast.ExternFunctionDecl] = []
        while not self.at("}"):
            self.annotations()
            loc = self.tok.loc
            if self.tok.text == name.text and self.peek().text == "(":
                self.advance()
                params = self.params()
                self.expect(";")
                methods.append(
                    ast.ExternFunctionDecl(loc, name.text, ast.VoidType(loc), [], params)
                )
                continue
            self.accept("abstract")
            ret = self.type_ref()
            method = self.ident("a method name")
            method_type_params = self.type_params()
            params = self.params()
            self.expect(";")
            methods.append(
                ast.ExternFunctionDecl(loc, method.text, ret, method_type_params, params)
            )
        self.expect("}")
        return ast.ExternDecl(start.loc, name.text, type_params, methods)

    def open_block_body(self, kind: str, start: Token, type_params: list[str]) -> None:
        """After a parser or control signature: the subset has no generic blocks and no
        constructor parameters; then the body opens."""
        if type_params:
            raise CompileError(start.loc, f"generic {kind}s are not supported")
        if self.at("("):
            raise CompileError(self.tok.loc, "constructor parameters are not supported")
        self.expect("{")

    def parser_decl(self) -> ast.Decl:
        start = self.advance()
        name = self.ident("a parser name")
        type_params = self.type_params()
        params = self.params()
        if self.accept(";"):
            return ast.ParserTypeDecl(start.loc, name.text, "parser", type_params, params)
        self.open_block_body("parser", start, type_params)
        local_decls: list[ast.Decl | ast.Stmt] = []
        states: list[ast.ParserState] = []
        while not self.at("}"):
            annotations = self.annotations()
            if self.at("state"):
                states.append(self.parser_state())
            elif self.at("const") or self.tok.kind in ("id", "kw"):
                local = self.local_declaration()
                if isinstance(local, ast.Decl):
                    local.annotations = annotations
                local_decls.append(local)
            else:
                raise self.error("expected a state or a local declaration")
        self.expect("}")
        return ast.ParserDecl(start.loc, name.text, params, local_decls, states)

    def parser_state(self) -> ast.ParserState:
        start = self.expect("state")
        name = self.ident("a state name")
        self.expect("{")
        stmts: list[ast.Stmt] = []
        transition: ast.Transition | None = None
        while not self.at("}"):
            if self.at("transition"):
                transition = self.transition()
                if not self.at("}"):
                    raise self.error("the transition must be the last statement of a state")
                break
            stmts.append(self.statement())
        self.expect("}")
        return ast.ParserState(start.loc, name.text, stmts, transition)

    def transition(self) -> ast.Transition:
        start = self.expect("transition")
        if self.accept("select"):
            self.expect("(")
            on: list[ast.Expr] = []
            while True:
                on.append(self.expression())
                if not self.accept(","):
                    break
            self.expect(")")
            self.expect("{")
            cases: list[tuple[ast.Expr, str, SourceLocation]] = []
            while not self.at("}"):
                keyset = self.keyset()
                self.expect(":")
                target = self.ident("a state name")
                self.expect(";")
                cases.append((keyset, target.text, target.loc))
            self.expect("}")
            return ast.Transition(start.loc, None, on, cases)
        target = self.ident("a state name or select")
        self.expect(";")
        return ast.Transition(start.loc, target.text)

    def keyset(self) -> ast.Expr:
        if self.at("("):
            # A tuple keyset (a, b) or a parenthesised expression.
            loc = self.advance().loc
            items = [self.simple_keyset()]
            while self.accept(","):
                items.append(self.simple_keyset())
            self.expect(")")
            return items[0] if len(items) == 1 else ast.ListExpr(loc, items)
        return self.simple_keyset()

    def simple_keyset(self) -> ast.Expr:
        loc = self.tok.loc
        if self.accept("default") or (self.tok.text == "_" and self.advance()):
            return ast.Default(loc)
        value = self.expression()
        if self.accept("&&&"):
            return ast.Mask(loc, value, self.expression())
        if self.accept(".."):
            return ast.Range(loc, value, self.expression())
        return value

    def control_decl(self) -> ast.Decl:
        start = self.advance()
        name = self.ident("a control name")
        type_params = self.type_params()
        params = self.params()
        if self.accept(";"):
            return ast.ParserTypeDecl(start.loc, name.text, "control", type_params, params)
        self.open_block_body("control", start, type_params)
        local_decls: list[ast.Decl | ast.Stmt] = []
        apply: ast.Block | None = None
        while not self.at("}"):
            annotations = self.annotations()
            if self.at("apply"):
                self.advance()
                apply = self.block()
                continue
            local: ast.Decl | ast.Stmt
            if self.at("action"):
                local = self.action()
            elif self.at("table"):
                local = self.table()
            else:
                local = self.local_declaration()
            if isinstance(local, ast.Decl):
                local.annotations = annotations
            local_decls.append(local)
        end = self.expect("}")
        if apply is None:
            raise CompileError(end.loc, f"control {name.text} has no apply block")
        return ast.ControlDecl(start.loc, name.text, params, local_decls, apply)

    def local_declaration(self) -> ast.Decl | ast.Stmt:
        """A variable, constant or extern instance inside a parser or control."""
        if self.at("const"):
            decl = self._declaration()
            return decl
        loc = self.tok.loc
        type_ = self.type_ref()
        if self.at("("):
            args = self.call_args()
            name = self.ident("an instance name")
            self.expect(";")
            return ast.Instantiation(loc, name.text, type_, args)
        name = self.ident("a variable name")
        init = self.expression() if self.accept("=") else None
        self.expect(";")
        return ast.VarDecl(loc, type_, name.text, init)

    def function_or_instance(self) -> ast.Decl:
        loc = self.tok.loc
        type_ = self.type_ref()
        if self.at("("):
            args = self.call_args()
            name = self.ident("an instance name")
            self.expect(";")
            return ast.Instantiation(loc, name.text, type_, args)
        name = self.ident()
        if self.at("(", "<"):
            self.type_params()
            params = self.params()
            body = self.block()
            return ast.FunctionDecl(loc, name.text, type_, params, body)
        raise self.error("expected a declaration")

    def action(self) -> ast.ActionDecl:
        start = self.expect("action")
        name = self.ident("an action name")
        params = self.params()
        body = self.block()
        return ast.ActionDecl(start.loc, name.text, params, body)

    def table(self) -> ast.TableDecl:
        start = self.expect("table")
        name = self.ident("a table name")
        table = ast.TableDecl(start.loc, name.text)
        self.expect("{")
        while not self.at("}"):
            self.annotations()
            is_const = self.accept("const")
            prop = self.ident("a table property")
            if prop.text == "key":
                self.expect("=")
                table.keys = self.table_keys()
            elif prop.text == "actions":
                self.expect("=")
                table.actions = self.table_actions()
            elif prop.text == "default_action":
                self.expect("=")
                table.default_action = self.action_ref()
                table.default_is_const = is_const
                self.expect(";")
            elif prop.text == "entries":
                if not is_const:
                    raise CompileError(prop.loc, "only 'const entries' are supported")
                self.expect("=")
                table.entries_loc = prop.loc
                table.entries = self.table_entries()
            elif prop.text in ("size", "counters", "meters", "implementation", "support_timeout"):
                self.expect("=")
                value = self.expression()
                self.expect(";")
                if prop.text == "size":
                    table.size = value
                elif prop.text == "counters":
                    table.counters = value
                else:
                    raise CompileError(prop.loc, f"table property {prop.text} is not supported")
            else:
                raise CompileError(prop.loc, f"unknown table property {prop.text}")
        self.expect("}")
        return table

    def table_keys(self) -> list[ast.KeyElement]:
        self.expect("{")
        keys: list[ast.KeyElement] = []
        while not self.at("}"):
            loc = self.tok.loc
            expr = self.expression()
            self.expect(":")
            kind = self.ident("a match kind")
            annotations = self.annotations()
            self.expect(";")
            keys.append(ast.KeyElement(loc, expr, kind.text, annotations))
        self.expect("}")
        return keys

    def table_actions(self) -> list[ast.ActionRefDecl]:
        self.expect("{")
        refs: list[ast.ActionRefDecl] = []
        while not self.at("}"):
            annotations = self.annotations()
            ref = self.action_ref()
            ref.annotations = annotations
            refs.append(ref)
            self.expect(";")
        self.expect("}")
        return refs

    def action_ref(self) -> ast.ActionRefDecl:
        name = self.ident("an action name")
        args = self.call_args() if self.at("(") else []
        return ast.ActionRefDecl(name.loc, name.text, args, [])

    def table_entries(self) -> list[ast.TableEntryDecl]:
        self.expect("{")
        entries: list[ast.TableEntryDecl] = []
        while not self.at("}"):
            loc = self.tok.loc
            priority: int | None = None
            if self.at("priority"):
                self.advance()
                self.expect("=")
                number = self.tok
                if number.kind != "num":
                    raise self.error("expected a priority number")
                self.advance()
                priority = _parse_number(number.text, number.loc)[0]
                self.expect(":")
            keyset = self.keyset()
            keys = keyset.items if isinstance(keyset, ast.ListExpr) else [keyset]
            self.expect(":")
            action = self.action_ref()
            self.expect(";")
            entries.append(ast.TableEntryDecl(loc, keys, action, priority))
        self.expect("}")
        self.accept(";")
        return entries

    # ------------------------------------------------------------------ types

    def type_ref(self) -> ast.TypeRef:
        with self.nested():
            return self._type_ref()

    def _type_ref(self) -> ast.TypeRef:
        token = self.tok
        if self.at("bit", "int", "varbit"):
            self.advance()
            if token.text == "int" and not self.at("<"):
                raise CompileError(
                    token.loc, "arbitrary-precision 'int' variables are not supported"
                )
            width = 1
            if self.accept("<"):
                number = self.tok
                if number.kind != "num":
                    raise self.error("expected a width")
                self.advance()
                width = _parse_number(number.text, number.loc)[0]
                if width > MAX_BIT_WIDTH:
                    raise CompileError(
                        number.loc,
                        f"{token.text}<{width}>: widths above {MAX_BIT_WIDTH} bits are not "
                        "supported (p4c's limit too)",
                    )
                self.expect(">")
            elif token.text == "varbit":
                raise self.error("expected '<' after varbit")
            if token.text == "varbit":
                return ast.VarbitType(token.loc, width)
            return ast.BitType(token.loc, width, signed=token.text == "int")
        if self.accept("bool"):
            return ast.BoolType(token.loc)
        if self.accept("void"):
            return ast.VoidType(token.loc)
        if self.at("error", "match_kind"):
            self.advance()
            return ast.NamedType(token.loc, token.text)
        if self.at("tuple", "list"):
            raise CompileError(token.loc, f"'{token.text}' types are not supported")
        name = self.ident("a type")
        args: list[ast.TypeRef] = []
        if self.at("<"):
            self.advance()
            while True:
                args.append(self.type_ref())
                if not self.accept(","):
                    break
            self.expect(">")
        return ast.NamedType(name.loc, name.text, args)

    # ------------------------------------------------------------------ statements

    def block(self) -> ast.Block:
        start = self.expect("{")
        stmts: list[ast.Stmt] = []
        while not self.at("}"):
            if self.tok.kind == "eof":
                raise self.error("expected '}'")
            stmts.append(self.statement())
        self.expect("}")
        return ast.Block(start.loc, stmts)

    def _looks_like_declaration(self) -> bool:
        token = self.tok
        if self.at("bit", "int", "varbit", "bool", "const"):
            return True
        if token.kind != "id":
            return False
        nxt = self.peek()
        if nxt.kind == "id":
            return True
        # Generic type: Name<...> name
        return (
            nxt.text == "<"
            and self.peek(2).kind in ("id", "kw")
            and self.peek(3).text
            in (
                ">",
                "<",
                ",",
            )
        )

    def statement(self) -> ast.Stmt:
        with self.nested():
            return self._statement()

    def _statement(self) -> ast.Stmt:
        self.annotations()
        token = self.tok
        if self.at("{"):
            return self.block()
        if self.accept(";"):
            return ast.Empty(token.loc)
        if self.accept("if"):
            return self.if_chain(token)
        if self.accept("return"):
            if not self.at(";"):
                raise CompileError(self.tok.loc, "returning a value is not supported")
            self.expect(";")
            return ast.Return(token.loc)
        if self.accept("exit"):
            self.expect(";")
            return ast.Exit(token.loc)
        if self.accept("switch"):
            return self.switch(token)
        if self.at("transition"):
            raise CompileError(
                token.loc, "'transition' is only allowed at the end of a parser state"
            )
        if self._looks_like_declaration():
            if self.accept("const"):
                var_type = self.type_ref()
                name = self.ident()
                self.expect("=")
                init = self.expression()
                self.expect(";")
                return ast.VarDecl(token.loc, var_type, name.text, init, is_const=True)
            var_type = self.type_ref()
            name = self.ident("a variable name")
            initial = self.expression() if self.accept("=") else None
            self.expect(";")
            return ast.VarDecl(token.loc, var_type, name.text, initial)
        expr = self.expression()
        if self.accept("="):
            value = self.expression()
            self.expect(";")
            return ast.Assign(token.loc, expr, value)
        if not isinstance(expr, ast.Call):
            raise CompileError(token.loc, "expected an assignment or a call")
        self.expect(";")
        return ast.ExprStmt(token.loc, expr)

    def switch(self, start: Token) -> ast.Switch:
        self.expect("(")
        subject = self.expression()
        self.expect(")")
        self.expect("{")
        cases: list[ast.SwitchCase] = []
        while not self.at("}"):
            loc = self.tok.loc
            labels: list[ast.Expr] = []
            label = ast.Default(loc) if self.accept("default") else self.expression()
            labels.append(label)
            self.expect(":")
            body = self.block() if self.at("{") else None
            cases.append(ast.SwitchCase(loc, labels, body))
        self.expect("}")
        return ast.Switch(start.loc, subject, cases)

    # ------------------------------------------------------------------ expressions

    def if_chain(self, start: Token) -> ast.If:
        """``if (a) x else if (b) y ... else z``, after the ``if``: one level of nesting
        however many ``else if`` follow (p4c takes any number), read in a loop. Each
        ``else if`` becomes the ``other`` of the link before it; the lowering walks
        the chain in a loop too."""
        links: list[tuple[SourceLocation, ast.Expr, ast.Stmt]] = []
        loc = start.loc
        other: ast.Stmt | None = None
        while True:
            self.expect("(")
            cond = self.expression()
            self.expect(")")
            links.append((loc, cond, self.statement()))
            if not self.accept("else"):
                break
            if not self.at("if"):
                other = self.statement()
                break
            loc = self.advance().loc
        for loc, cond, then in reversed(links):
            other = ast.If(loc, cond, then, other)
        assert isinstance(other, ast.If)
        return other

    def nested(self) -> _Nesting:
        """``with self.nested():`` around every construct that recurses."""
        return _Nesting(self)

    def expression(self) -> ast.Expr:
        with self.nested():
            cond = self.binary(0)
            if self.at("?"):
                loc = self.advance().loc
                then = self.expression()
                self.expect(":")
                other = self.expression()
                return ast.Ternary(loc, cond, then, other)
            return cond

    def binary(self, min_level: int) -> ast.Expr:
        """Precedence climbing: one call per operator of a higher level, not per level.

        Each operator counts one level of nesting until the chain ends: ``a - b - c`` is
        ``(a - b) - c``, and the lowered Python nests a chain of n operands n deep."""
        left = self.unary()
        depth = self.depth
        try:
            while True:
                token = self.tok
                operator = ">>" if self._at_shift_right() else token.text
                level = _BINARY_LEVEL.get(operator) if token.kind == "op" else None
                if level is None or level < min_level:
                    return left
                self.advance()
                if operator == ">>":
                    self.advance()
                self.deeper(token.loc)
                right = self.binary(level + 1)
                left = ast.Binary(token.loc, operator, left, right)
        finally:
            self.depth = depth

    def _at_shift_right(self) -> bool:
        """Two adjacent '>' in an expression: the lexer keeps them apart so that
        nested type arguments (``bit<16>>``) close, and the operator joins them."""
        token = self.tok
        if self.pending_gt is not None or token.kind != "op" or token.text != ">":
            return False
        after = self.peek()
        return (
            after.kind == "op"
            and after.text == ">"
            and after.loc.line == token.loc.line
            and after.loc.column == token.loc.column + 1
        )

    def unary(self) -> ast.Expr:
        token = self.tok
        if self.at("!", "~", "-", "+"):
            self.advance()
            with self.nested():
                operand = self.unary()
            if token.text == "+":
                return operand
            return ast.Unary(token.loc, token.text, operand)
        if self.at("(") and self._is_cast():
            self.advance()
            cast_type = self.type_ref()
            self.expect(")")
            with self.nested():
                return ast.Cast(token.loc, cast_type, self.unary())
        return self.postfix(self.primary())

    def _is_cast(self) -> bool:
        nxt = self.peek()
        if nxt.kind == "kw" and nxt.text in ("bit", "int", "varbit", "bool"):
            return True
        # (TypeName) expr: a name followed by ')' and then something that starts an operand.
        if nxt.kind == "id" and self.peek(2).text == ")":
            after = self.peek(3)
            return after.kind in ("id", "num") or after.text in ("(", "true", "false", "~", "!")
        return False

    def call_args(self) -> list[ast.Expr]:
        self.expect("(")
        args: list[ast.Expr] = []
        while not self.at(")"):
            if self.tok.kind == "id" and self.peek().text == "=":
                raise CompileError(self.tok.loc, "named arguments are not supported")
            args.append(self.expression())
            if not self.accept(","):
                break
        self.expect(")")
        return args

    def postfix(self, expr: ast.Expr) -> ast.Expr:
        """Member accesses, calls, indexes and slices; each index or slice nests the
        expression it applies to one level deeper (``x[7:0][3:0]`` like ``a - b - c``)."""
        depth = self.depth
        try:
            return self._postfix(expr)
        finally:
            self.depth = depth

    def _postfix(self, expr: ast.Expr) -> ast.Expr:
        while True:
            token = self.tok
            if self.accept("."):
                member = self.ident("a member name")
                expr = ast.Member(expr.loc, expr, member.text, member.loc)
                if self.at("<") and member.text in ("lookahead", "extract", "emit"):
                    self.advance()
                    type_args = [self.type_ref()]
                    self.expect(">")
                    args = self.call_args()
                    expr = ast.Call(expr.loc, expr, args, type_args)
            elif self.at("("):
                expr = ast.Call(expr.loc, expr, self.call_args())
            elif self.accept("["):
                self.deeper(token.loc)
                index = self.expression()
                if self.accept(":"):
                    low = self.expression()
                    self.expect("]")
                    expr = ast.Slice(token.loc, expr, index, low)
                else:
                    self.expect("]")
                    expr = ast.Index(token.loc, expr, index)
            else:
                return expr

    def primary(self) -> ast.Expr:
        token = self.tok
        if token.kind == "num":
            self.advance()
            value, width, signed = _parse_number(token.text, token.loc)
            return ast.IntLit(token.loc, value, width, signed)
        if token.kind == "str":
            self.advance()
            return ast.StringLit(token.loc, token.text[1:-1])
        if self.accept("true"):
            return ast.BoolLit(token.loc, True)
        if self.accept("false"):
            return ast.BoolLit(token.loc, False)
        if self.accept("("):
            expr = self.expression()
            self.expect(")")
            return expr
        if self.accept("{"):
            items: list[ast.Expr] = []
            while not self.at("}"):
                items.append(self.expression())
                if not self.accept(","):
                    break
            self.expect("}")
            return ast.ListExpr(token.loc, items)
        if self.at("error"):
            self.advance()
            return ast.Name(token.loc, "error")
        if token.kind == "id" or (token.kind == "kw" and token.text in ("apply", "key")):
            self.advance()
            return ast.Name(token.loc, token.text)
        raise self.error("expected an expression")


def parse(lines: list[Line]) -> ast.Program:
    return Parser(tokenize(lines)).program()

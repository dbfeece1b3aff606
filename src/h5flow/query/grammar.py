"""The text grammar of ``h5flow query`` (docs/QUERY.md), parsed into :mod:`h5flow.query.expr` objects.

::

    query      := or_expr
    or_expr    := and_expr { ("|" | "or") and_expr }
    and_expr   := atom { ("&" | "and") atom }
    atom       := "(" or_expr ")" | function | comparison
    function   := ("attr_name" | "link_name") "(" STRING ")"
    comparison := operand OP operand [ OP operand ]        # a range: 3.5 < temp <= 7
    operand    := subject | literal
    subject    := PATH | NAME | "@" (NAME | STRING) | "*"  # dataset, bare name, attribute, every dataset
    literal    := NUMBER | STRING | "true" | "false" | "inf" | "nan"
    OP         := "==" | "!=" | "<" | "<=" | ">" | ">="

Each comparison has exactly one subject. ``/a/b`` is a dataset path; a bare ``name`` is bound when the query
meets a file (the one dataset with that link name, else an attribute); ``@name`` is always an attribute;
``*`` is every numeric dataset (H5Q's data-element query without a dataset). Errors carry the position.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache

from h5flow.query.expr import FLIPPED, And, AttrName, AttrValue, DataCond, LinkName, Name, Op, Or, Query


class QuerySyntaxError(ValueError):
    """A malformed query expression; ``pos`` is the 0-based character position of the problem."""

    def __init__(self, message: str, text: str, pos: int) -> None:
        self.message, self.text, self.pos = message, text, pos
        super().__init__(f"{message} at position {pos}\n    {text}\n    {' ' * pos}^")


@dataclass(frozen=True)
class Token:
    kind: str  # NUMBER STRING PATH NAME ATTR STAR OP AND OR LPAREN RPAREN FUNC BOOL END
    text: str
    pos: int
    value: object = None


_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:\-]*")
_PATH = re.compile(r"/[^\s()&|<>=!\"'*]*")
_OPS = ("==", "!=", "<=", ">=", "<", ">")
_WORDS = {"and": "AND", "or": "OR", "attr_name": "FUNC", "link_name": "FUNC"}


def _string(text: str, pos: int) -> tuple[str, int]:
    quote = text[pos]
    out: list[str] = []
    i = pos + 1
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            out.append(text[i + 1])
            i += 2
            continue
        if c == quote:
            return "".join(out), i + 1
        out.append(c)
        i += 1
    raise QuerySyntaxError(f"unterminated string (opened with {quote})", text, pos)


def tokenize(text: str) -> list[Token]:
    toks: list[Token] = []
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
            continue
        if c in "\"'":
            s, j = _string(text, i)
            toks.append(Token("STRING", text[i:j], i, s))
            i = j
            continue
        op = next((o for o in _OPS if text.startswith(o, i)), None)
        if op is not None:
            toks.append(Token("OP", op, i))
            i += len(op)
            continue
        if c == "=":
            raise QuerySyntaxError("'=' is not an operator: write '==' to compare", text, i)
        if c == "!":
            raise QuerySyntaxError("'!' must be followed by '=' ('!='); there is no negation", text, i)
        single = {"&": "AND", "|": "OR", "(": "LPAREN", ")": "RPAREN", "*": "STAR"}
        if c in single:
            if text.startswith(c * 2, i) and c in "&|":
                raise QuerySyntaxError(f"write a single '{c}' (not '{c * 2}')", text, i)
            toks.append(Token(single[c], c, i))
            i += 1
            continue
        m = _NUMBER.match(text, i)
        if m and (c.isdigit() or c == "." or (c in "+-" and (not toks or toks[-1].kind in ("OP",)))):
            j = m.end()
            if j < n and (text[j].isalpha() or text[j] == "_"):
                raise QuerySyntaxError(f"malformed number {text[i:j + 1]!r}", text, i)
            s = m.group(0)
            value: float | int = float(s) if any(ch in s for ch in ".eE") else int(s)
            toks.append(Token("NUMBER", s, i, value))
            i = j
            continue
        if c in "+-" and text[i + 1:i + 4].lower() in ("inf",) and (not toks or toks[-1].kind == "OP"):
            toks.append(Token("NUMBER", text[i:i + 4], i, float(c + "inf")))
            i += 4
            continue
        if c == "/":
            m = _PATH.match(text, i)
            assert m is not None
            toks.append(Token("PATH", m.group(0), i, m.group(0)))
            i = m.end()
            continue
        if c == "@":
            if i + 1 < n and text[i + 1] in "\"'":
                s, j = _string(text, i + 1)
            else:
                m = _NAME.match(text, i + 1)
                if m is None:
                    raise QuerySyntaxError("'@' must be followed by an attribute name (or a quoted one)", text, i)
                s, j = m.group(0), m.end()
            toks.append(Token("ATTR", text[i:j], i, s))
            i = j
            continue
        m = _NAME.match(text, i)
        if m:
            word = m.group(0)
            low = word.lower()
            if low in ("true", "false"):
                toks.append(Token("BOOL", word, i, low == "true"))
            elif low in ("inf", "nan"):
                toks.append(Token("NUMBER", word, i, float(low)))
            elif low in _WORDS:
                toks.append(Token(_WORDS[low], word, i, low))
            else:
                toks.append(Token("NAME", word, i, word))
            i = m.end()
            continue
        raise QuerySyntaxError(f"unexpected character {c!r}", text, i)
    toks.append(Token("END", "", n))
    return toks


_SUBJECTS = ("PATH", "NAME", "ATTR", "STAR")
_LITERALS = ("NUMBER", "STRING", "BOOL")


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = tokenize(text)
        self.i = 0

    def peek(self) -> Token:
        return self.toks[self.i]

    def take(self) -> Token:
        t = self.toks[self.i]
        self.i += 1
        return t

    def error(self, msg: str, tok: Token | None = None) -> QuerySyntaxError:
        tok = tok or self.peek()
        return QuerySyntaxError(msg, self.text, tok.pos)

    def expect(self, kind: str, what: str) -> Token:
        t = self.peek()
        if t.kind != kind:
            found = "the end of the expression" if t.kind == "END" else repr(t.text)
            raise self.error(f"expected {what}, found {found}")
        return self.take()

    def parse(self) -> Query:
        if self.peek().kind == "END":
            raise self.error("empty query: write a condition such as 'temp > 3.5'")
        q = self.or_expr()
        t = self.peek()
        if t.kind != "END":
            hint = " (combine conditions with & or |)" if t.kind in _SUBJECTS + _LITERALS + ("LPAREN", "FUNC") else ""
            raise self.error(f"unexpected {t.text!r}{hint}")
        return q

    def or_expr(self) -> Query:
        q = self.and_expr()
        while self.peek().kind == "OR":
            self.take()
            q = Or(q, self.and_expr())
        return q

    def and_expr(self) -> Query:
        q = self.atom()
        while self.peek().kind == "AND":
            self.take()
            q = And(q, self.atom())
        return q

    def atom(self) -> Query:
        t = self.peek()
        if t.kind == "LPAREN":
            self.take()
            if self.peek().kind == "RPAREN":
                raise self.error("empty parentheses")
            q = self.or_expr()
            if self.peek().kind != "RPAREN":
                raise self.error(f"expected ')' to close the '(' at position {t.pos}")
            self.take()
            return q
        if t.kind == "FUNC":
            self.take()
            self.expect("LPAREN", f"'(' after {t.text}")
            arg = self.expect("STRING", f"a quoted pattern for {t.text}, e.g. {t.text}(\"calib*\")")
            self.expect("RPAREN", f"')' to close {t.text}(")
            return AttrName(str(arg.value)) if t.value == "attr_name" else LinkName(str(arg.value))
        return self.comparison()

    def operand(self) -> Token:
        t = self.peek()
        if t.kind in _SUBJECTS or t.kind in _LITERALS:
            return self.take()
        found = "the end of the expression" if t.kind == "END" else repr(t.text)
        raise self.error(f"expected a dataset, attribute or value, found {found}")

    def comparison(self) -> Query:
        first = self.operand()
        if self.peek().kind != "OP":
            t = self.peek()
            found = "the end of the expression" if t.kind == "END" else repr(t.text)
            raise self.error(f"expected a comparison operator (== != < <= > >=) after {first.text!r}, found {found}")
        op1 = self.take()
        second = self.operand()
        if self.peek().kind == "OP":  # a range: lit op subject op lit
            op2 = self.take()
            third = self.operand()
            if second.kind not in _SUBJECTS:
                raise self.error("a range needs a dataset in the middle, e.g. '3.5 < temp <= 7'", second)
            if first.kind not in _LITERALS or third.kind not in _LITERALS:
                bad = first if first.kind not in _LITERALS else third
                raise self.error("the ends of a range must be values", bad)
            for op in (op1, op2):
                if op.text in ("==", "!="):
                    raise self.error(f"'{op.text}' cannot be chained in a range; use & instead", op)
            if (op1.text[0] == "<") != (op2.text[0] == "<"):
                raise self.error("a range's operators must point the same way (a < x < b or a > x > b)", op2)
            return And(self.make(second, FLIPPED[op1.text], first, op1), self.make(second, op2.text, third, op2))  # type: ignore[arg-type]
        if first.kind in _SUBJECTS and second.kind in _LITERALS:
            return self.make(first, op1.text, second, op1)  # type: ignore[arg-type]
        if first.kind in _LITERALS and second.kind in _SUBJECTS:
            return self.make(second, FLIPPED[op1.text], first, op1)
        if first.kind in _SUBJECTS:
            raise self.error("compare a dataset or attribute with a value, not with another dataset", second)
        raise self.error("a comparison needs a dataset or attribute on one side", first)

    def make(self, subject: Token, op: Op, lit: Token, op_tok: Token) -> Query:
        value = lit.value
        if subject.kind == "ATTR":
            return AttrValue(str(subject.value), op, value, subject.pos)  # type: ignore[arg-type]
        if subject.kind == "NAME":
            return Name(str(subject.value), op, value, subject.pos)  # type: ignore[arg-type]
        if lit.kind == "STRING":
            raise self.error("a dataset's elements compare with numbers; for an attribute write @name", lit)
        num = int(value) if isinstance(value, bool) else value
        assert isinstance(num, (int, float))
        if isinstance(num, float) and math.isnan(num) and op not in ("==", "!="):
            raise self.error(f"'{op} nan' never holds; use '!= nan' (every element) or test ranges", lit)
        path = None if subject.kind == "STAR" else str(subject.value)
        return DataCond(path, op, num, subject.pos)


def parse(text: str) -> Query:
    """Parse a query expression; raises :class:`QuerySyntaxError` with the position of the problem."""
    if not isinstance(text, str):
        raise TypeError(f"parse() takes the expression as a string, got {type(text).__name__}")
    return _parse_cached(text)


@lru_cache(maxsize=256)
def _parse_cached(text: str) -> Query:
    """Parsed trees are immutable (frozen dataclasses): the same text gives the same tree, parsed once.
    Errors are raised again on every call (lru_cache keeps only results)."""
    return _Parser(text).parse()

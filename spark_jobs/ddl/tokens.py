"""Statements as tokens (sqlglot's MySQL tokenizer) and the cursor the parsers walk them with."""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlglot.dialects.mysql import MySQL
from sqlglot.errors import TokenError
from sqlglot.tokens import TokenType

from spark_jobs.ddl.model import _NotUnderstood

_EXECUTABLE_COMMENT = re.compile(r"/\*(?:!\d{0,6}|T!(?:\[[^\]]*\])?)(.*?)\*/", re.S)

_TOKEN_KINDS = {
    TokenType.IDENTIFIER: "name",
    TokenType.STRING: "string",
    TokenType.NATIONAL_STRING: "string",
    TokenType.NUMBER: "number",
    TokenType.BIT_STRING: "bits",
    TokenType.HEX_STRING: "hex",
    TokenType.INTRODUCER: "introducer",
}

_WORDS = re.compile(r"[\w$]+(?:\s+[\w$]+)*")


class _Tokenizer(MySQL.Tokenizer):
    COMMANDS = set()  # sqlglot reads the rest of a RENAME/REPLACE statement as one string


@dataclass(frozen=True)
class _Token:
    kind: str  # word, name (quoted identifier), string, number, bits, hex, introducer, punct
    text: str  # words as written; strings and names unquoted
    start: int
    end: int  # inclusive, in the statement text the tokens were read from

    @property
    def word(self) -> str:
        return self.text.upper() if self.kind == "word" else ""


def _tokenize(sql: str) -> list[_Token]:
    """sqlglot's MySQL tokens; multi-word keywords (`PRIMARY KEY`) split into words."""
    try:
        raw = _Tokenizer().tokenize(sql)
    except TokenError as exc:
        raise _NotUnderstood(f"cannot tokenize: {exc}") from None
    tokens = []
    for t in raw:
        kind = _TOKEN_KINDS.get(t.token_type)
        if kind is not None:
            tokens.append(_Token(kind, t.text, t.start, t.end))
        elif _WORDS.fullmatch(t.text):
            tokens.extend(_Token("word", w, t.start, t.end) for w in t.text.split())
        else:
            tokens.append(_Token("punct", t.text, t.start, t.end))
    return tokens


def _without_comments(sql: str) -> tuple[str, list[_Token]]:
    """The statement with executable comments (`/*T! … */`, `/*!50100 … */`) opened, as TiDB runs it.

    Comments sit only between tokens, so only those gaps are searched: a comment-like string stays a string.
    """
    tokens = _tokenize(sql)
    spans = sorted({(t.start, t.end + 1) for t in tokens})  # the words of `PRIMARY KEY` share one span
    bounds = [0] + [b for span in spans for b in span] + [len(sql)]
    gaps = [(bounds[i], bounds[i + 1]) for i in range(0, len(bounds), 2)]
    if not any(_EXECUTABLE_COMMENT.search(sql, a, b) for a, b in gaps):
        return sql, tokens
    parts, done = [], 0
    for a, b in gaps:
        parts.append(sql[done:a])
        parts.append(_EXECUTABLE_COMMENT.sub(lambda m: f" {m.group(1)} ", sql[a:b]))
        done = b
    opened = "".join(parts)
    return opened, _tokenize(opened)


class _Cursor:
    """Reading position in a statement's tokens."""

    def __init__(self, sql: str, tokens: list[_Token]):
        self.sql = sql
        self.tokens = tokens
        self.i = 0

    def peek(self, ahead: int = 0) -> _Token | None:
        j = self.i + ahead
        return self.tokens[j] if j < len(self.tokens) else None

    def word(self, ahead: int = 0) -> str:
        t = self.peek(ahead)
        return t.word if t is not None else ""

    def at(self, *words: str) -> bool:
        return all(self.word(k) == w for k, w in enumerate(words))

    def accept(self, *words: str) -> bool:
        if self.at(*words):
            self.i += len(words)
            return True
        return False

    def expect(self, *words: str) -> None:
        if not self.accept(*words):
            raise _NotUnderstood(f"expected {' '.join(words)} {self.where()}")

    def kind(self, ahead: int = 0) -> str:
        t = self.peek(ahead)
        return t.kind if t is not None else ""

    def at_punct(self, text: str) -> bool:
        t = self.peek()
        return t is not None and t.kind == "punct" and t.text == text

    def accept_punct(self, text: str) -> bool:
        if self.at_punct(text):
            self.i += 1
            return True
        return False

    def at_end(self) -> bool:
        return self.i >= len(self.tokens)

    def at_element_end(self) -> bool:
        return self.at_end() or self.at_punct(",") or self.at_punct(")")

    def next(self) -> _Token:
        t = self.peek()
        if t is None:
            raise _NotUnderstood("statement ends too early")
        self.i += 1
        return t

    def where(self) -> str:
        t = self.peek()
        return f"at {t.text!r}" if t is not None else "at the end"

    def name(self) -> str:
        t = self.next()
        if t.kind in ("name", "word"):
            return t.text
        raise _NotUnderstood(f"expected a name, got {t.text!r}")

    def table_name(self, default_database: str | None) -> tuple[str | None, str]:
        first = self.name()
        if self.accept_punct("."):
            return first, self.name()
        return default_database, first

    def optional_name(self) -> str | None:
        """A name that may be left out (an index name before its column list)."""
        t = self.peek()
        if t is not None and (t.kind == "name" or (t.kind == "word" and t.word not in ("USING", "TYPE"))):
            self.i += 1
            return t.text
        return None

    def group(self) -> _Cursor:
        """The tokens inside the parenthesised group that starts here."""
        if not self.accept_punct("("):
            raise _NotUnderstood(f"expected ( {self.where()}")
        start, depth = self.i, 1
        while depth:
            t = self.next()
            if t.kind == "punct":
                depth += {"(": 1, ")": -1}.get(t.text, 0)
        return _Cursor(self.sql, self.tokens[start : self.i - 1])

    def skip_element(self) -> None:
        """Skip to the next top-level comma or closing parenthesis (options that change no schema)."""
        while not self.at_element_end():
            if self.at_punct("("):
                self.group()
            else:
                self.i += 1

    def text(self, start: int) -> str:
        """The statement text from token `start` to the current position."""
        if start >= self.i:
            return ""
        return self.sql[self.tokens[start].start : self.tokens[self.i - 1].end + 1]

    def value(self) -> None:
        """Skip an option value: one token or one parenthesised group."""
        self.accept_punct("=")
        if self.at_punct("("):
            self.group()
        else:
            self.next()


def _index_columns(cur: _Cursor) -> list[str | None]:
    """An index's key parts: column names; None for an expression or a prefix (not a handle key)."""
    if cur.accept("USING") or cur.accept("TYPE"):
        cur.next()
    inner = cur.group()
    parts: list[str | None] = []
    while not inner.at_end():
        if inner.at_punct("("):
            inner.group()
            parts.append(None)
        else:
            name = inner.name()
            parts.append(None if inner.at_punct("(") else name)
            if inner.at_punct("("):
                inner.group()
        inner.accept("ASC") or inner.accept("DESC")
        inner.accept_punct(",")
    return parts


def _skip_rest(cur: _Cursor) -> None:
    while not cur.at_end():
        if cur.at_punct("("):
            cur.group()
        else:
            cur.next()

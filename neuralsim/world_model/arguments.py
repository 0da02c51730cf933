"""Command-line options generated from a config dataclass: each field documented once, in its docstring.

    @dataclass
    class TrainConfig:
        steps: int = 1000
        '''Total optimiser steps of this stage.'''

    add_arguments(parser, TrainConfig)   # --steps STEPS  Total optimiser steps of this stage. (default: 1000)
    cfg = TrainConfig(**given(parser.parse_args()))

A field becomes ``--field-name``; its type sets the parsing: ``bool`` fields (and ``bool | None``) become a
``--name/--no-name`` pair, ``Literal[...]`` fields a choice, ``X | None`` fields parse as ``X``.  A field's
``metadata`` may add ``cli=False`` (a field of recipe files only), ``positional=True``, ``type`` (a parser function
for the value), ``choices`` (a tuple, or a function returning one, for choices that live elsewhere) and
``metavar``.  The help text is the docstring's first paragraph with its reST roles reduced to their names.

Options the user did not give stay out of the parsed namespace (``argparse.SUPPRESS``), so :func:`given` returns
exactly what was typed: a caller can lay it over other values (a recipe's) or let the dataclass fill the defaults.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import re
import textwrap
import types
import typing
from typing import Any

_ROLE = re.compile(r":\w+:`(~?)([^`]+)`")  # :meth:`a.b.name` -> a.b.name, :meth:`~a.b.name` -> name


def field_docs(cls: type) -> dict[str, str]:
    """The docstring of each field of dataclass ``cls``: the string literal right after its annotation."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body
    docs = {}
    for node, nxt in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str)):
            docs[node.target.id] = inspect.cleandoc(nxt.value.value)
    return docs


def help_text(doc: str) -> str:
    """A field docstring as ``--help`` prints it: its first paragraph, reST roles and literals made plain."""
    first = doc.split("\n\n")[0].replace("\n", " ")
    first = _ROLE.sub(lambda m: m[2].rsplit(".", 1)[-1] if m[1] else m[2], first).replace("``", "")
    return first.replace("%", "%%")


def flag(name: str) -> str:
    """The option of field ``name``: ``--init-from`` for ``init_from``."""
    return "--" + name.replace("_", "-")


def add_arguments(parser: argparse.ArgumentParser, cls: type) -> None:
    """Add one option per field of dataclass ``cls`` (module docstring) to ``parser``."""
    hints = typing.get_type_hints(cls, include_extras=True)
    docs = field_docs(cls)
    for f in dataclasses.fields(cls):
        meta = f.metadata
        if not meta.get("cli", True):
            continue
        kind = _unwrap(hints[f.name])  # an optional field parses as its inner type: None is what "not given" leaves
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        default = f.default if f.default is not dataclasses.MISSING else None
        text = help_text(docs.get(f.name, ""))
        if has_default and default is not None and kind is not bool:
            text += f" (default: {default})".replace("%", "%%")
        kwargs: dict[str, Any] = {"help": text, "default": argparse.SUPPRESS}
        choices = meta.get("choices")
        if callable(choices):
            choices = choices()
        if typing.get_origin(kind) is typing.Literal:
            choices, kind = typing.get_args(kind), type(typing.get_args(kind)[0])
        if kind is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs["type"] = meta.get("type", kind)
            if choices is not None:
                kwargs["choices"] = choices
            if "metavar" in meta:
                kwargs["metavar"] = meta["metavar"]
        if meta.get("positional"):
            kwargs.pop("default")
            if has_default:
                kwargs["nargs"] = "?"
                kwargs["default"] = argparse.SUPPRESS
            parser.add_argument(f.name, **kwargs)
        else:
            if not has_default:
                kwargs["required"] = True
            parser.add_argument(flag(f.name), dest=f.name, **kwargs)


def given(namespace: argparse.Namespace, cls: type | None = None) -> dict[str, Any]:
    """The options the user gave (module docstring); with ``cls``, only those that are fields of it."""
    values = dict(vars(namespace))
    if cls is not None:
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in values.items() if k in names}
    return values


def _unwrap(hint: Any) -> Any:
    """``X | None`` -> X; any other hint as it is."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return rest[0] if len(rest) == 1 else typing.Union[tuple(rest)]
    return hint

"""The instruction as tokens: task family, target colour and base colour, parsed from the instruction text.

A visuomotor policy never sees a task id from the simulator: it reads the same instruction a person (or
openpi's ``prompt``) gives, in one of SimDROID's three phrasings::

    put the red cube in the blue bowl        -> (put_in_bowl, red, none)
    push the red cube onto the yellow pad    -> (push_to_pad, red, none)
    stack the red cube on the green cube     -> (stack, red, green)

Matching ignores case and surrounding whitespace.  A colour outside the vocabulary becomes the ``<unk>``
token (index 1), so an out-of-distribution colour still runs; an instruction in none of the three
phrasings raises :class:`InstructionError`.
"""

from __future__ import annotations

import re

#: Task families in token order (SimDROID's ``TASK_FAMILIES``).
FAMILIES = ("put_in_bowl", "push_to_pad", "stack")
#: Colour words in token order after ``<none>`` (0) and ``<unk>`` (1): SimDROID's training palette, then its
#: out-of-distribution palette.
COLOURS = ("red", "green", "orange", "purple", "white", "black", "pink", "cyan",
           "grey", "olive", "maroon", "teal", "lavender")
NONE, UNKNOWN = 0, 1

_PATTERNS = (
    ("put_in_bowl", re.compile(r"^put the (\w+) cube in the blue bowl$")),
    ("push_to_pad", re.compile(r"^push the (\w+) cube onto the yellow pad$")),
    ("stack", re.compile(r"^stack the (\w+) cube on the (\w+) cube$")),
)


class InstructionError(ValueError):
    """An instruction that is not one of SimDROID's three phrasings."""


def colour_token(word: str | None, colours: tuple[str, ...] = COLOURS) -> int:
    """0 for None, 2 + the colour's index in ``colours``, or 1 (``<unk>``) for a word not in it."""
    if word is None:
        return NONE
    return 2 + colours.index(word) if word in colours else UNKNOWN


def parse_instruction(text: str) -> tuple[str, str, str | None]:
    """``(family, target colour, base colour or None)`` of an instruction.

    Raises:
        InstructionError: ``text`` matches none of the phrasings (quoted in the message).
    """
    if not isinstance(text, str):
        raise InstructionError(f"the instruction must be a string, got {type(text).__name__}")
    clean = " ".join(text.lower().split())
    for family, pattern in _PATTERNS:
        m = pattern.match(clean)
        if m:
            return family, m.group(1), (m.group(2) if family == "stack" else None)
    raise InstructionError(f"cannot read the instruction {text!r}; a visuomotor policy knows 'put the <colour> cube "
                           "in the blue bowl', 'push the <colour> cube onto the yellow pad' and 'stack the <colour> "
                           "cube on the <colour> cube'")


def instruction_tokens(text: str, families: tuple[str, ...] = FAMILIES,
                       colours: tuple[str, ...] = COLOURS) -> tuple[int, int, int]:
    """The three tokens (family index, target colour token, base colour token) of an instruction."""
    family, target, base = parse_instruction(text)
    if family not in families:
        raise InstructionError(f"task family {family!r} of {text!r} is not in the model's vocabulary {families}")
    return families.index(family), colour_token(target, colours), colour_token(base, colours)

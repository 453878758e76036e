"""A layout memo for the folded ladder's pieces: one ``dot`` run serves every piece that is the same graph
up to the digits in its names, labels and ids.

Why: a repetitive net (a chain, an unrolled RNN) cuts into pieces that differ only in numbers
(``op312``/``op1312``, ``Relu (op#312)``, ``b313_grad``, ``id="n313"``); ``dot`` spends ~200 µs an op
laying each of them out again.  ``Helvetica`` (what pango resolves it to: DejaVu Sans here) has tabular
digits and no kerning among them, so two DOT texts that differ only in same-length digit runs inside
names, labels and ids get the same layout, and ``dot``'s SVG of one is the other's with those digits
changed.  Measured on graphviz 2.43: every two- and three-digit run in 17 label contexts gave the same
widths, and each memo-made SVG of the chain's pieces is byte for byte what ``dot`` gives for that piece
laid out alone (``tests/netviz/test_ladder_memo.py``).  :func:`digits_are_tabular` checks the font once
per process, when a piece first repeats; where it fails, or where a piece has HTML or non-ASCII text (another font may draw it), every
piece goes to ``dot`` as before.

A piece's key is its DOT text with every digit zeroed.  Equal keys give the same graph only if the digits
that differ are texts: each digit run is classed once per key (:class:`_Rep`) as a text (a name, a
``label``/``xlabel``), a node id (``n<i>``), an edge id (``e<i>``) or fixed (any other attribute: a font
size, a colour); a piece whose fixed runs differ from its key's first piece, or whose runs of a class do not
map one to one onto the first piece's, goes to ``dot``.  The
SVG of a piece served by the memo is the first piece's SVG with the digit runs of its texts (titles,
comments, ``<text>``, node and edge group ids) mapped, entity references (``&#45;``) left alone.

It helps repetitive nets only: the 10k-op chain with its backward pass lays out a handful of its 154
pieces; ResNet-50's pieces are all different graphs.
"""
from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Iterable, Iterator
from functools import lru_cache
from operator import itemgetter

from netviz import style as S
from netviz.graphviz_support import find_program

__all__ = ["memoized", "piece_key", "digits_are_tabular", "DIGIT_RUN", "FONT", "Stream", "Served", "Template"]

Stream = Callable[[Iterable[str], Callable[[int, "bytes | str | Served"], None]], None]

_ZERO = str.maketrans("123456789", "000000000")
DIGIT_RUN = re.compile(r"\d+")  # NOTE: ladder_svg.reread maps names by it too
#: a quoted DOT string with the attribute it is the value of (none: a node, edge end, graph or cluster name)
_DOT_TOKEN = re.compile(r'(?:\b(\w+)=)?"((?:[^"\\]|\\.)*)"|(\d+)')
#: attributes whose digits are text drawn in the font (the layout does not read them as numbers)
TEXT_ATTRS = frozenset({"label", "xlabel"})
#: where a graphviz SVG writes the DOT's texts and ids after its head: element comments, titles, texts, the
#: node and edge group ids (the head's title comment is cut by hand: :meth:`_Rep._learn`)
_SVG_TEXT = re.compile(r'<!-- (.*?) -->|<title>([^<]*)</title>|<text[^>]*>([^<]*)</text>'
                       r'|<g id="([ne]\d+)" class="(?:node|edge)"')
_TEXT_RUN = re.compile(r"&#?\w+;|(\d+)")
#: a piece holding one of these goes to ``dot``: an HTML label (its digits are not classed here), an entity
#: reference in a text (graphviz keeps ``&#45;`` as it is, and the SVG's own are skipped), or an attribute
#: graphviz writes into an SVG attribute (a link or tooltip: only group ids are mapped there)
_UNSAFE = ("=<", "&#", "URL=", "href=", "tooltip=", "target=")
_TEXT, _NODE, _EDGE, _FIXED = 0, 1, 2, 3
#: the font the drawings use and :func:`digits_are_tabular` probes; a piece naming another goes to ``dot``
FONT = S.NODE_DEFAULTS["fontname"]
_FONT_ATTR = f'fontname="{FONT}"'


def piece_key(dot: str) -> str | None:
    """The memo key of one piece's DOT text: the text with every digit zeroed; None when the piece must go
    to ``dot`` whatever: non-ASCII text (pango may draw it in another font, digits included), a font other than
    :data:`FONT` (the one probed), a graph without
    a quoted name (graphviz titles it ``%3``: a number not in the DOT), or one of :data:`_UNSAFE`."""
    if not dot.isascii() or not dot.startswith('digraph "') or any(mark in dot for mark in _UNSAFE) \
            or dot.count("fontname=") != dot.count(_FONT_ATTR):  # NOTE: only the probed font's digits are known
        return None
    return dot.translate(_ZERO)


def _classes(dot: str) -> list[int]:
    """The class of each digit run of `dot`, in order (``DIGIT_RUN.findall``'s runs)."""
    out: list[int] = []
    one, more, runs = out.append, out.extend, DIGIT_RUN.findall
    for attr, body, bare in _DOT_TOKEN.findall(dot):
        if bare:
            one(_FIXED)  # NOTE: a bare number outside quotes
        elif n := len(runs(body)):
            if attr == "id":
                more(((_NODE if body[0] == "n" else _EDGE if body[0] == "e" else _FIXED),) * n)
            else:
                more(((_TEXT if not attr or attr in TEXT_ATTRS else _FIXED),) * n)
    return out


def _picker(positions: list[int]) -> Callable[[list[str]], tuple[str, ...]]:
    """A C-speed ``lambda runs: tuple(runs[i] for i in positions)``."""
    if len(positions) == 1:
        only = positions[0]
        return lambda runs: (runs[only],)
    return itemgetter(*positions) if positions else (lambda runs: ())


class _Rep:
    """The first piece of a key: its DOT text, classed into digit runs when a second piece with its key comes
    (:meth:`maps`), and its SVG, cut into a template when a second piece needs it (:meth:`fill`).  Both are
    done lazily: at 1k ops half of the chain's keys have one piece."""

    def __init__(self, dot: str, piece: int) -> None:
        self.dot, self.piece = dot, piece
        self.pick: list[Callable[[list[str]], tuple[str, ...]]] = []
        self.values: list[tuple[str, ...]] = []
        self.waiting: list[tuple[int, list[dict[str, str]]]] = []
        self.svg: bytes | str | None = None
        self.template: Template | None = None
        self._known: list[set[str]] = []

    def maps(self, dot: str) -> list[dict[str, str]] | None:
        """For a piece with this key: per class, the first piece's digit run → this piece's; None when a fixed
        run differs or the runs do not map one to one (``312`` twice in the first piece where this one has
        ``1312`` and ``1400``, or ``op1``/``op2`` where this one has ``op7`` twice: one node, not two)."""
        if not self.pick:
            runs, classes = DIGIT_RUN.findall(self.dot), _classes(self.dot)
            assert len(runs) == len(classes)  # NOTE: every run is quoted or bare; none straddles a quote
            self.pick = [_picker([i for i, c in enumerate(classes) if c == k]) for k in (_TEXT, _NODE, _EDGE, _FIXED)]
            self.values, self.dot = [p(runs) for p in self.pick], ""
        runs = DIGIT_RUN.findall(dot)
        if self.pick[_FIXED](runs) != self.values[_FIXED]:
            return None
        out = []
        for k in (_TEXT, _NODE, _EDGE):
            mine = self.pick[k](runs)
            m = dict(zip(self.values[k], mine))
            # NOTE: one to one, both ways: names equal in one piece and not in the other are other graphs
            if len(m) != len(set(zip(self.values[k], mine))) or len(m) != len(set(mine)):
                return None
            out.append(m)
        return out

    def _learn(self, svg: str) -> Template:
        """The first piece's SVG cut into literal parts and the digit runs of its texts and ids.

        The head is graphviz's: its comment (a version number), then ``<!-- Title: NAME Pages: 1 -->``,
        whose NAME alone is the DOT's; after it, :data:`_SVG_TEXT` finds the rest."""
        title = svg.index("<!-- Title: ", svg.index("-->") + 3) + 12
        head_end = svg.index(" -->\n<svg", title)
        return Template(svg, self.known(), head_end, [(_TEXT, title, svg.rindex(" Pages: ", title, head_end))])

    def known(self) -> list[set[str]]:
        """The first piece's digit runs of each mapped class (texts, node ids, edge ids), made once."""
        if not self._known:
            self._known = [set(v) for v in self.values[:3]]
        return self._known

    def fill(self, maps: list[dict[str, str]]) -> str:
        """The SVG of the piece `maps` describes: the first piece's with its texts' digit runs mapped."""
        if self.template is None:
            assert self.svg is not None
            self.template = self._learn(self.svg.decode() if isinstance(self.svg, bytes) else self.svg)
        return self.template.fill(maps)


class Template:
    """A graphviz SVG text (or one element group's body) cut into its literal parts and the digit runs, with
    their class, of the DOT's texts and ids in it (found by :data:`_SVG_TEXT` from `start`, and in the
    `regions` given), so that another piece's text is one join (:meth:`fill`).  A run not among `known`
    (its class's runs in the DOT) stays as it is."""

    __slots__ = ("segments", "slots")

    def __init__(self, text: str, known: list[set[str]], start: int = 0,
                 regions: list[tuple[int, int, int]] | None = None) -> None:
        regions = list(regions or [])
        for m in _SVG_TEXT.finditer(text, start):
            g = m.lastindex
            regions.append(((_NODE if text[m.start(g)] == "n" else _EDGE) if g == 4 else _TEXT, m.start(g), m.end(g)))
        segments, slots, at = [], [], 0
        for cls, begin, end in regions:
            for r in _TEXT_RUN.finditer(text, begin, end):
                if (s := r.start(1)) >= 0 and r.group(1) in known[cls]:  # NOTE: other numbers stay as they are
                    segments.append(text[at:s])
                    slots.append((cls, r.group(1)))
                    at = r.end(1)
        segments.append(text[at:])
        self.segments, self.slots = segments, slots

    def fill(self, maps: list[dict[str, str]]) -> str:
        """The text with each run mapped by its class's map in `maps`."""
        if not self.slots:
            return self.segments[0]
        parts = [""] * (2 * len(self.slots) + 1)
        parts[0::2] = self.segments
        parts[1::2] = [maps[c][v] for c, v in self.slots]
        return "".join(parts)


class Served:
    """A piece the memo serves: its key's first piece (``source``, its number in the stream), the digit maps
    from that piece's runs to this one's (``maps``: texts, node ids, edge ids), and its SVG (:meth:`text`).
    A reader that has read the first piece's SVG can map what it read instead of reading this one
    (:func:`netviz.ladder_svg.draw_svg`)."""

    __slots__ = ("_rep", "maps")

    def __init__(self, rep: _Rep, maps: list[dict[str, str]]) -> None:
        self._rep, self.maps = rep, maps

    @property
    def source(self) -> int:
        return self._rep.piece

    def text(self) -> str:
        """The piece's SVG: its key's first piece's with the digit runs of its texts and ids mapped."""
        return self._rep.fill(self.maps)

    def cut(self, text: str) -> Template:
        """A text read from the source piece's SVG (an element's body) as a :class:`Template` for :meth:`fill`."""
        return Template(text, self._rep.known())

    def fill(self, template: Template) -> str:
        """`template`'s text as in this piece."""
        return template.fill(self.maps)


def memoized(stream: Stream) -> Stream:
    """`stream` (:func:`netviz.layout.run_graphviz_stream`, bound to its limits) with the layout memo: a piece
    whose key (:func:`piece_key`) came before is not sent; it is served from its key's first piece's SVG once
    that comes back.  ``take`` gets each piece under its own number, as `stream` would give it: ``dot``'s SVG
    (bytes), or a :class:`Served` piece, always after its source."""
    def run(dots: Iterable[str], take: Callable[[int, bytes | str | Served], None]) -> None:
        reps: dict[str, _Rep] = {}
        sent: list[tuple[int, _Rep | None]] = []  # NOTE: what went to dot, in order: (piece number, its _Rep)

        def route() -> Iterator[str]:
            for k, dot in enumerate(dots):
                key = piece_key(dot)
                rep = reps.get(key) if key is not None else None
                maps = rep.maps(dot) if rep is not None else None
                # NOTE: the font is probed when a piece repeats, not before: a net of all-different pieces
                # (ResNet-50) pays nothing
                if rep is not None and maps is not None and digits_are_tabular():
                    if rep.svg is None:
                        rep.waiting.append((k, maps))
                    else:
                        take(k, Served(rep, maps))
                    continue
                if key is not None and rep is None:
                    rep = reps[key] = _Rep(dot, k)
                else:
                    rep = None  # NOTE: a piece its key's first one does not serve goes to dot on its own
                sent.append((k, rep))
                yield dot

        def took(j: int, out: bytes | str) -> None:
            k, rep = sent[j]
            take(k, out)
            if rep is not None:
                rep.svg = out
                for w, maps in rep.waiting:
                    take(w, Served(rep, maps))
                rep.waiting.clear()

        stream(route(), took)
    return run


#: a probe graph: each digit 40 times, and all 100 ordered digit pairs (a de Bruijn sequence), at three sizes
_DE_BRUIJN = "".join(f"{a}{b}" for a in range(10) for b in range(a, 10)) + "".join(
    f"{b}{a}" for a in range(10) for b in range(a + 1, 10))


@lru_cache(maxsize=1)
def digits_are_tabular(fontname: str = FONT) -> bool:
    """Whether ``dot`` draws every digit as wide as every other in `fontname`, with no kerning between two
    digits (the memo's premise), measured once per process: one ``dot`` run of a probe graph (~10 ms)."""
    exe = find_program("dot")
    if exe is None:
        return False
    texts = [d * 40 for d in "0123456789"] + [_DE_BRUIJN, "0" * len(_DE_BRUIJN)]
    lines = [f'digraph probe {{ node [shape=box, margin=0, width=0, height=0, fontname="{fontname}"];']
    lines += [f'n{s}_{i} [label="{t}", fontsize="{s}"];' for s in (8, 10, 14) for i, t in enumerate(texts)]
    try:
        out = subprocess.run([exe, "-Tplain"], input="\n".join(lines + ["}"]).encode(), capture_output=True,
                             timeout=30, check=True).stdout.decode()
    except (OSError, subprocess.SubprocessError):
        return False
    widths: dict[str, set[str]] = {}
    for line in out.splitlines():
        f = line.split()
        if f[:1] == ["node"]:
            group = f[1].split("_")[0] + ("pair" if int(f[1].split("_")[1]) >= 10 else "")
            widths.setdefault(group, set()).add(f[4])
    return bool(widths) and all(len(w) == 1 for w in widths.values())

"""How nodes, edges and clusters look: the one table both ``netviz export`` and the TUI canvas read.

Forward ops and blobs copy Caffe2's ``net_drawer`` (ops: green filled boxes with white text,
labelled ``<name>/<type> (op#i)``; blobs: plain octagons).  netviz adds: generated backward ops
and gradient blobs in red, optimizer ops in gold, dashed edges from a backward op to its forward op,
control-flow ops in blue, a double outline on in-place ops, and clusters for subnets and name scopes;
:data:`LEGEND` says so in every export and on the canvas.  The TUI canvas colours
forward ops by category (conv, norm, activation, …: :data:`CATEGORY_FILLS`); exports keep
net_drawer's green.

A :class:`Style` is colour names plus a graphviz shape; :meth:`Style.attrs` gives the graphviz
attribute dict, and the TUI reads ``color`` / ``fill`` / ``fontcolor`` / ``dashed`` directly
(hex colours work in Rich markup as they are).
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Style", "OP", "BLOB", "BACKWARD_OP", "GRAD_BLOB", "CONTROL_OP", "DATA_EDGE", "BACKWARD_EDGE",
           "FORWARD_LINK_EDGE", "SUBNET_CLUSTER", "SCOPE_CLUSTER", "FOCUS_NODE", "op_label", "op_style",
           "blob_style", "blob_label", "cluster_style", "GRAPH_ATTRS", "NODE_DEFAULTS", "CATEGORY_FILLS",
           "category_fill", "category_style", "plain", "OPTIMIZER_OP", "OPTIMIZER_BLOB", "OPTIMIZER_EDGE", "GOLD",
           "INPLACE", "FIX_MARK", "edge_style", "READ_EDGE", "LEGEND", "legend_html", "legend_text"]

GREEN = "#0F9D58"      # net_drawer's op colour
RED = "#DB4437"        # generated backward ops and gradient blobs
BLUE = "#4285F4"       # control flow (If/While/Do/RecurrentNetwork) and subnet clusters
GOLD = "#B8860B"       # optimizer ops (SGD, Adam, Iter, LearningRate) and the parameters they write
GREY = "#9AA0A6"       # name-scope clusters
AMBER = "#F4B400"      # the --focus node
WHITE = "#FFFFFF"
BLACK = "#000000"


@dataclass(frozen=True, slots=True)
class Style:
    """Look of one node, edge or cluster.

    ``fill`` is None for outline-only shapes (blobs); ``dashed`` draws the outline or line dashed.
    """

    shape: str = ""
    color: str = BLACK
    fill: str | None = None
    fontcolor: str = BLACK
    dashed: bool = False
    extra: tuple[tuple[str, str], ...] = ()

    def attrs(self) -> dict[str, str]:
        """graphviz attributes (``shape``, ``color``, ``style``, ``fontcolor``, …) for pygraphviz."""
        styles = (["filled"] if self.fill else []) + (["dashed"] if self.dashed else [])
        a = {"color": self.color, "fontcolor": self.fontcolor}
        if self.shape:
            a["shape"] = self.shape
        if self.fill:
            a["fillcolor"] = self.fill
        if styles:
            a["style"] = ",".join(styles)
        a.update(self.extra)
        return a


# NOTE: net_drawer sets color=#0F9D58 with style=filled, so the fill is the same green.
OP = Style("box", GREEN, GREEN, WHITE)
BLOB = Style("octagon")
BACKWARD_OP = Style("box", RED, RED, WHITE)
GRAD_BLOB = Style("octagon", RED, None, RED)
CONTROL_OP = Style("box", BLUE, BLUE, WHITE)
OPTIMIZER_OP = Style("box", GOLD, GOLD, WHITE)
OPTIMIZER_BLOB = Style("octagon", GOLD, None, GOLD)
#: an op that writes a blob it reads (``Relu(X) -> X``): a double outline, in any column
INPLACE = (("peripheries", "2"),)
#: the mark of an op Caffe2 computes differently or refuses (engine.analysis.lint), as the op list shows it
FIX_MARK = "⚑"
FOCUS_NODE = Style("", AMBER, None, BLACK, extra=(("penwidth", "3"),))
DATA_EDGE = Style()
BACKWARD_EDGE = Style(color=RED)
OPTIMIZER_EDGE = Style(color=GOLD)
#: a gradient or optimizer op reading a forward blob (an activation, a weight): faint, across the columns
READ_EDGE = Style(color=RED + "66", extra=(("penwidth", "0.6"),))
#: backward op → the forward op it differentiates; ``constraint=false`` keeps ranks as data flow sets them.
FORWARD_LINK_EDGE = Style(color=RED, dashed=True, extra=(("constraint", "false"), ("arrowhead", "dot")))
SUBNET_CLUSTER = Style("", BLUE, None, BLUE, dashed=True)
SCOPE_CLUSTER = Style("", GREY, "#F1F3F4", BLACK)

#: Graph-level defaults of every exported graph (net_drawer leaves rankdir LR).
GRAPH_ATTRS = {"rankdir": "LR", "fontname": "Helvetica", "newrank": "true"}
NODE_DEFAULTS = {"fontname": "Helvetica", "fontsize": "10"}


def op_label(op_type: str, index: int, name: str = "", outputs: list[str] | None = None) -> str:
    """net_drawer's op label: ``"<name>/<type> (op#i)"``, or ``"<type> (op#i)"`` for unnamed ops.

    With `outputs` (net_drawer's ``append_output``) each output name follows on its own line.

    Examples
    --------
    >>> op_label("Conv", 0, "conv1")
    'conv1/Conv (op#0)'
    >>> op_label("Relu", 3, outputs=["Y"])
    'Relu (op#3)\\nY'
    """
    label = f"{name}/{op_type} (op#{index})" if name else f"{op_type} (op#{index})"
    return "\n".join([label, *(outputs or [])])


def blob_label(name: str, version: int, ssa: bool = False) -> str:
    """A blob node's label: its name, or ``name@version`` in SSA mode.

    Examples
    --------
    >>> blob_label("conv1", 2), blob_label("conv1", 2, ssa=True)
    ('conv1', 'conv1@2')
    """
    return f"{name}@{version}" if ssa else name


#: Fill colour per op category (engine.catalogue.CATEGORIES) in the TUI graph; white text on each.
CATEGORY_FILLS = {
    "conv": GREEN, "pool": "#558B2F", "norm": "#7B1FA2", "activation": "#E65100", "elementwise": "#5D4037",
    "linear": "#283593", "reduce": "#9E9D24", "tensor": "#546E7A", "sparse": "#00695C", "rnn": "#00838F",
    "loss": "#C2185B", "optimizer": "#B8860B", "detection": "#D84315", "quantized": "#37474F",
    "fill": "#757575", "control": BLUE, "io": "#4E342E", "utility": "#616161", "unknown": BLACK,
}


def category_fill(category: str) -> str:
    """The graph fill colour of an op category (net_drawer's green for unlisted ones)."""
    return CATEGORY_FILLS.get(category, GREEN)


def category_style(category: str) -> str:
    """A Rich style for naming a category in text: its fill colour, bold."""
    return f"bold {category_fill(category)}"


def op_style(op_type: str, backward: bool = False, control: bool = False, role: str = "",
             inplace: bool = False) -> Style:
    """Style of an op node: optimizer, then backward, then control flow, then the net_drawer green;
    an in-place op gets a double outline (:data:`INPLACE`)."""
    st = OPTIMIZER_OP if role == "optimizer" else BACKWARD_OP if backward else CONTROL_OP if control else OP
    return Style(st.shape, st.color, st.fill, st.fontcolor, st.dashed, st.extra + INPLACE) if inplace else st


def blob_style(gradient: bool = False, role: str = "") -> Style:
    """Style of a blob node; `gradient` for blobs written only by backward ops (gold: by an optimizer)."""
    return OPTIMIZER_BLOB if gradient and role == "optimizer" else GRAD_BLOB if gradient else BLOB


def edge_style(role: str) -> Style:
    """The data edges of a backward-pass op: red from a gradient op, gold from an optimizer op."""
    return OPTIMIZER_EDGE if role == "optimizer" else BACKWARD_EDGE


#: The one legend (exports and canvas): what each look means, as (name, fill, text colour, note).
LEGEND = (("forward op", GREEN, WHITE, ""), ("gradient op", RED, WHITE, "runs upward"),
          ("optimizer op", GOLD, WHITE, ""), ("control flow", BLUE, WHITE, "If/While/Do/RNN"),
          ("in-place", WHITE, BLACK, "double outline"), (f"{FIX_MARK} Caffe2 fix", WHITE, AMBER, "netviz differs"))


def legend_text() -> "Text":
    """:data:`LEGEND`'s colours for the canvas's breadcrumb: ``■ forward op ■ gradient op …``, each square in
    its fill.  In-place ops (a double-line border) and ``⚑`` (on the top border) are marked on the canvas's bordered
    boxes (detail and ops zoom); the canvas adds their legend entries itself when the net has them."""
    from rich.text import Text
    text = Text("", "dim")
    for name, fill, _, _ in LEGEND:
        if fill != WHITE:  # NOTE: short names: the legend shows whole at 80 columns (the breadcrumb's notes give way first)
            text.append("■", fill)
            text.append(f" {_SHORT[name]} ", "dim")
    return text


_SHORT = {"forward op": "fwd", "gradient op": "grad", "optimizer op": "opt", "control flow": "ctrl"}


def legend_html() -> str:
    """:data:`LEGEND` as a graphviz HTML-like label: one row of swatches (the graph label of every export)."""
    cells = []
    for name, fill, ink, note in LEGEND:
        extra = ' border="3"' if name == "in-place" else ""
        text = name + (f'<font point-size="8"> ({note})</font>' if note else "")
        cells.append(f'<td bgcolor="{fill}"{extra}><font color="{ink}">{text}</font></td>')
    return ('<<table border="0" cellborder="1" cellspacing="4" cellpadding="3"><tr><td border="0">legend:</td>'
            + "".join(cells) + "</tr></table>>")


def cluster_style(kind: str) -> Style:
    """``"subnet"`` (If/While/Do/RecurrentNetwork nets) or ``"scope"`` (name scopes)."""
    return {"subnet": SUBNET_CLUSTER, "scope": SCOPE_CLUSTER}[kind]


def plain(text: object, style: str = "") -> "Text":
    """Text from a model (a blob, op or net name, an argument, a message quoting them) for Rich:
    shown exactly, never read as markup (``_[mask]_pool5_int8`` stays itself; a ``str`` given to
    a Table cell, Label or Option would lose ``[mask]``).  The one helper every widget uses."""
    from rich.text import Text
    return Text(str(text), style=style)

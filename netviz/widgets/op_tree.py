"""OpTree: every op of the model, nested by subnet, split into forward and backward sections.

Markers: ``→`` next op (program counter), ``●`` breakpoint, ``✓`` executed.  With name-scope
grouping (``N``) the ops nest by scope (:func:`scope_tree`): ``inception_3a/`` is one collapsed block
holding ``inception_3a/1x1/`` (shown as ``1x1/`` under it) and so on, as deep as the names go; a
block with one child is shown as that child (``a/b/`` once), and each block counts its ops.  Stepping, search and breakpoints select
ops inside collapsed blocks: the blocks holding the op open.

Big sections (more than :data:`SECTION_MAX` ops) are split into collapsed blocks of
:data:`BLOCK` ops whose nodes are made when a block is first expanded (or the cursor goes
there): a 10k-op net costs a few dozen nodes at start.  Stepping relabels only the ops whose
marker changed (:meth:`OpTree.update_markers`), never every node.
"""
from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain, islice
from os.path import commonprefix
from typing import Any

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.message import Message
from textual.strip import Strip
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from engine.model.optypes import CONTROL_FLOW
from engine.runtime.plan_view import STEP_OP, step_summary
from netviz.errorlog import Guarded
from netviz.messages import DrillRequested, OpSelected
from netviz.overlays import value_of
from netviz.widgets.scrolling import SteadyScrollbars
from netviz.session import NetPath, OpRef, Session, from_oppath
from netviz.style import plain

CHUNK = 120
SECTION_MAX, BLOCK = 300, 200
#: with scope grouping, sections up to this size are grouped whole (scope blocks start collapsed)
SCOPED_SECTION_MAX = 3000
PC_MARK = "→"  # NOTE: not ▶, which the tree uses for a collapsed node
SKIP_MARK = "↷"  # skipped (K): its outputs were given, its kernel did not run
MARK_STYLE = {PC_MARK: "bold yellow", "✓": "green", "!": "bold magenta", "✗": "bold red", SKIP_MARK: "bold #F4B400"}
TYPE_STYLE = {"backward": "#DB4437", "control": "bold #4285F4", "op": "#0F9D58"}


def n_ops(n: int) -> str:
    """``1 op`` / ``3 ops``: a While's one-op cond_net read "cond_net · 1 ops"."""
    return f"{n} op" if n == 1 else f"{n} ops"


def ratio_text(v: float) -> str:
    """An update ratio ‖ΔW‖/‖W‖ as a tag; ``Δ/0`` when ‖W‖ was 0 (a zero-initialised bias's first
    update: there is no ratio, and ``Δinf`` read as a blow-up)."""
    return f"Δ{v:.2g}" if math.isfinite(v) else "Δ/0"


def _overlay_tag(mode: str, rec: Any, stale: bool) -> tuple[str, str] | None:
    """One op's overlay marker in the tree: colour and tag (its own value, not a quantile)."""
    if mode == "NaN":
        return ("#CE93D8", "NaN") if rec.has_inf_or_nan else None
    v = value_of(mode, rec)
    if v is None:
        return None
    text = (f"{v * 1e3:.2g}ms" if mode == "time" else ratio_text(v) if getattr(rec, "update_ratio", None) is not None
            else f"‖{v:.2g}‖") + ("~" if stale else "")
    return ("#616161" if stale else "#F4B400", text)


#: an op's name keeps at least this many cells in a narrow list (its type is cut first, to TYPE_MIN)
NAME_MIN, TYPE_MIN = 8, 4


def strip_scope(name: str, scope: str) -> str:
    """`name` without the `scope` every name shares (``gpu_0/``), also after a generated name's
    leading ``_`` (the backward pass's ``_gpu_0/…_autosplit_0``)."""
    if scope and name.startswith(scope):
        return name[len(scope):]
    if scope and name.startswith("_" + scope):
        return "_" + name[len(scope) + 1:]
    return name


def elide_middle(name: str, room: int) -> str:
    """`name` in `room` cells, its middle dropped so the tail that tells similar names apart stays:
    ``res2_0_branch2a_bn`` in 14 → ``res…branch2a_bn``; in under 10 only the tail (``…h2a_bn``)."""
    if len(name) <= room:
        return name
    if room <= 1:
        return "…"[:max(room, 0)]
    head = room // 4 if room >= 10 else 0
    return name[:head] + "…" + name[len(name) - (room - head - 1):]


def _shared(a: str, b: str) -> int:
    """How many leading characters `a` and `b` share."""
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def differs_at(name: str, names: Sequence[str], backwards: Sequence[str]) -> tuple[int, int] | None:
    """Where `name` differs from the names most like it: (p, q), `p` the first character that tells it
    from the closest name by beginning, `q` the last that tells it from the closest by ending.
    `names` sorted, `backwards` the reversed names sorted (neighbours in sort order are the closest).
    None: a twin (another op of the same name), or `name` is not among them."""
    def closest(seq: Sequence[str], key: str) -> int | None:
        k = bisect_left(seq, key)
        if k >= len(seq) or seq[k] != key:
            return None
        near = [seq[j] for j in (k - 1, k + 1) if 0 <= j < len(seq)]
        return max((_shared(key, other) for other in near), default=None)  # NOTE: alone of its type: None
    p, rev = closest(names, name), name[::-1]
    s = closest(backwards, rev)
    if p is None or s is None or p >= len(name) or s >= len(name):
        return None
    return p, len(name) - s - 1


def elide_distinct(name: str, room: int, where: tuple[int, int] | None) -> str:
    """`name` in `room` cells keeping where it differs from its closest names (:func:`differs_at`):
    four ``SpatialBNGradient`` lines read ``…2c_grad`` alike (res2_0 / res2_1 / res3_0 …); kept, in 8
    cells they read ``…2_0…2c…``, ``res2_1_…``.  Without a place (or when the middle elision shows
    both), as :func:`elide_middle`."""
    plain = elide_middle(name, room)
    if where is None or len(name) <= room or room < 6:
        return plain
    p, q = where
    head = room // 4 if room >= 10 else 0
    tail_from = len(name) - (room - head - 1)
    if all(i < head or i >= tail_from for i in (p, q)):
        return plain
    if q >= p - 4:  # one place (or two close together): from a little before it, as much as fits
        start = max(0, min(q, p) - 4)
        seg = name[start:]
        lead = "…" if start else ""
        return lead + (seg if len(lead) + len(seg) <= room else seg[:room - len(lead) - 1] + "…")
    # NOTE: the place and a little around it (res2_0, not es2), then the name's end from the other place on;
    # tight, the place alone (2_0), and the end cut only if even then it would not reach the other place
    for left in (name[max(0, q - 3):min(q + 3, p - 1)], name[q:min(q + 3, p - 1)]):
        fit = room - len(left) - 2  # "…" left "…" tail
        if fit >= 3 and len(name) - fit <= p:
            return "…" + left + "…" + name[len(name) - fit:]
    return "…" + left + "…" + name[p - 1:p + fit - 2] + "…" if fit >= 3 else plain


class _Fitted:
    """A tree node seen through another label (what :meth:`OpTree.render_label` draws)."""

    def __init__(self, node: TreeNode[Any], label: Text) -> None:
        self._node, self._label = node, label

    def __getattr__(self, name: str) -> Any:
        return getattr(self._node, name)


#: the label an op's leaf is added with: made when first read (_OpNode)
_UNMADE = Text()


class _OpNode(TreeNode[Any]):
    """An op's node.  A move marks the nodes whose marker changed stale (:meth:`OpTree.update_markers`)
    and their label is made again when first read: drawn (only the lines on screen are), measured,
    or read by anyone, so a continue through 668 ops relabels the ~40 lines in view, not ~200 nodes."""

    _stale = False

    @property  # type: ignore[override]
    def _label(self) -> Text:
        if self._stale:
            self._stale = False
            self.__dict__["_text"] = self._tree.label_of(self.data)  # type: ignore[attr-defined]
        return self.__dict__["_text"]

    @_label.setter
    def _label(self, text: Text) -> None:
        self.__dict__["_text"], self._stale = text, False


def name_of(op: Any) -> str:
    """What names an op in the tree: its name, else its first output."""
    return op.name or (op.output[0] if op.output else "")


@dataclass(slots=True)
class ScopeBlock:
    """A name scope in the tree: its full name with the separator (``gpu_0/res2_0_``, the shared scope
    included), what it holds in execution order (op indices and nested blocks), and how many ops."""

    name: str
    items: list[ScopeBlock | int] = field(default_factory=list)
    count: int = 0


def scope_tree(names: Sequence[tuple[int, str]]) -> list[ScopeBlock | int]:
    """Ops (``(index, name)`` in execution order) nested by name scope, as the tree shows them.

    The scope every name shares (``gpu_0/``) is dropped.  Scopes are the ``/``-separated parts before
    a name's last; when no name has one (ResNet-50's ``gpu_0/res2_0_branch2a``), the ``_``-separated
    parts are used instead (``res2_`` › ``res2_0_`` › ``res2_0_branch2a_``).  Consecutive ops of a
    scope share its block; a block holding one thing is replaced by it (an op, or its only block:
    ``a/`` › ``a/b/`` is shown as ``a/b/``).
    """
    common = commonprefix([n for _, n in names])
    common = common[:common.rfind("/") + 1]
    rest = [(i, n[len(common):]) for i, n in names]
    sep = "/" if any("/" in n for _, n in rest) else "_"
    root = ScopeBlock(common)
    stack: list[tuple[str, ScopeBlock]] = [("", root)]
    for i, n in rest:
        parts = n.split(sep)[:-1]
        keep = 0
        while keep < len(parts) and keep + 1 < len(stack) and stack[keep + 1][0] == parts[keep]:
            keep += 1
        del stack[keep + 1:]
        for part in parts[keep:]:
            block = ScopeBlock(stack[-1][1].name + part + sep)
            stack[-1][1].items.append(block)
            stack.append((part, block))
        stack[-1][1].items.append(i)
    return [_fold(item) for item in root.items]


def _fold(item: ScopeBlock | int) -> ScopeBlock | int:
    """Count a block's ops and replace every block that holds one thing by that thing."""
    if isinstance(item, int):
        return item
    item.items = [_fold(x) for x in item.items]
    if len(item.items) == 1:
        return item.items[0]
    item.count = sum(1 if isinstance(x, int) else x.count for x in item.items)
    return item


class OpTree(Guarded, SteadyScrollbars, Tree[Any]):
    """The op list; highlighting an op posts :class:`OpSelected`, a subnet node DrillRequested."""

    _room_for: tuple[Any, int] | None = None  # (size and scrollbars, the content width they give): _room

    def __init__(self, session: Session, **kwargs: Any) -> None:
        super().__init__(plain(session.name), **kwargs)
        self.session = session
        self.group_scopes = False
        self.nodes_by_ref: dict[OpRef, TreeNode[Any]] = {}
        self._block_of: dict[OpRef, str] = {}
        self._opened: list[TreeNode[Any]] = []  # scope blocks select_ref opened (it closes them again)
        self.guide_depth = 2
        self._generation = 0
        self.populated = False
        self.overlay = "none"
        self.linked: set[OpRef] = set()

    class Populated(Message):
        """Every op is in the tree."""

    def on_mount(self) -> None:
        # NOTE: the first frame waits for the whole list (MainScreen holds it until Populated): one
        # batch, measured once, with no held refresh between two batches (ResNet-50: 160 ops)
        self.rebuild(at_once=True)

    def rebuild(self, at_once: bool = False) -> None:
        """(Re)build from the session: forward section, backward section when shown.  Later
        rebuilds (scope grouping, the backward pass) show a first screenful before the rest."""
        s = self.session
        self.populated = False
        self.clear()
        self.nodes_by_ref.clear()
        self._block_of: dict[OpRef, str] = {}  # op → the scope block it is shown in (scope grouping)
        self._opened = []
        self._blocks: list[tuple[range, TreeNode[Any]]] = []
        self._marks = self._mark_state()
        self.root.expand()
        view = s.view(())
        if view.sections is not None:  # a training net: its own forward / backward / optimizer runs
            steps = self._add_training_sections(view.sections, s.loss)
        else:
            # NOTE: a str label is read as markup: this one was the first frame's first, and imported Rich's
            # emoji table (7 ms)
            fwd = self.root.add(plain(f"forward · {n_ops(view.n_forward)}"), data=None, expand=True)
            steps = self._add_section(fwd, range(view.n_forward))
        if s.plan:  # a plan file: its step tree above the net being stepped
            node = self.root.add(plain(f"plan · {s.plan[0]}"), data=None, expand=False)
            for line in s.plan[1:]:
                node.add_leaf(plain(line), data=None)
        if s.show_backward and s.backward is not None and view.sections is None:
            bwd = self.root.add(plain(f"backward · {n_ops(len(view.net.op) - view.n_forward)} (loss {s.loss})"),
                                data=None, expand=True)
            steps = chain(steps, self._add_section(bwd, range(view.n_forward, len(view.net.op))))
        self._generation += 1
        self._pump(steps, self._generation, first=not at_once)

    def _add_training_sections(self, sections: list[str], loss: str | None) -> Iterator[None]:
        """One tree section per run of consecutive ops of one section (usually three)."""
        steps: Iterator[None] = iter(())
        start = 0
        for i in range(1, len(sections) + 1):
            if i == len(sections) or sections[i] != sections[start]:
                note = f" (loss {loss})" if sections[start] == "backward" and loss else ""
                node = self.root.add(plain(f"{sections[start]} · {n_ops(i - start)}{note}"), data=None, expand=True)
                steps = chain(steps, self._add_section(node, range(start, i)))
                start = i
        return steps

    def _add_section(self, parent: TreeNode[Any], indices: range) -> Iterator[None]:
        """A section's ops, or for a big one collapsed blocks filled on first expand."""
        if len(indices) <= (SCOPED_SECTION_MAX if self.group_scopes else SECTION_MAX):
            return self._add_ops(parent, (), indices)
        for start in range(indices.start, indices.stop, BLOCK):
            block = range(start, min(start + BLOCK, indices.stop))
            node = parent.add(plain(f"ops {block.start}–{block.stop - 1}"), data=("block", block))
            self._blocks.append((block, node))
        return iter(())

    def _fill_block(self, node: TreeNode[Any]) -> None:
        block = node.data[1]
        if OpRef((), block.start) in self.nodes_by_ref:
            return
        for _ in self._add_ops(node, (), block):
            pass

    def _ensure(self, ref: OpRef) -> None:
        """Make the node of `ref` (filling the block of the main-net op that holds it)."""
        if ref in self.nodes_by_ref:
            return
        top = ref.path[0][0] if ref.path else ref.index
        for block, node in self._blocks:
            if top in block:
                self._fill_block(node)
                return

    def on_tree_node_expanded(self, event: Tree.NodeExpanded[Any]) -> None:
        data = event.node.data
        if isinstance(data, tuple) and data[0] == "block":
            self._fill_block(event.node)

    def _add_node(self, parent: TreeNode[Any] | None, label: Text, data: Any, expand: bool = False) -> TreeNode[Any]:
        if not isinstance(data, OpRef):
            return super()._add_node(parent, label, data, expand)
        # NOTE: Tree._add_node, with an op's node (label remade lazily after a move)
        node = _OpNode(self, parent, self._new_id(), label, data, expanded=expand)
        self._tree_nodes[node._id] = node
        self._updates += 1
        return node

    def process_label(self, label: Any) -> Text:
        # NOTE: Tree splits every label into lines; ours are one line, and Text.split is not cheap
        if isinstance(label, Text) and "\n" not in label.plain:
            return label
        return super().process_label(label)

    def _pump(self, steps: Iterator[None], generation: int, first: bool = True) -> None:
        """Add a first screenful of ops at once, the rest after the first refresh (all of them at
        once unless `first`).  (Each batch makes Tree measure every line again, so there are only two.)
        """
        if generation != self._generation:
            return
        if sum(1 for _ in islice(steps, CHUNK if first else None)) == CHUNK and first:
            self.call_after_refresh(self._pump, steps, generation, False)
            return
        self.populated = True
        self.post_message(self.Populated())

    def _add_ops(self, parent: TreeNode[Any], path: NetPath, indices: range) -> Iterator[None]:
        """The ops `indices` of the net at `path` under `parent` (nested by scope when grouping); one
        yield per op, so :meth:`_pump` can add them in batches."""
        if not self.group_scopes:
            for i in indices:
                self._add_op(parent, OpRef(path, i))
                yield
            return
        net = self.session.view(path).net
        yield from self._add_items(parent, path, scope_tree([(i, name_of(net.op[i])) for i in indices]))

    def _add_items(self, parent: TreeNode[Any], path: NetPath, items: list[ScopeBlock | int],
                   block: str = "") -> Iterator[None]:
        """Scope blocks (collapsed) and ops; an op's label drops the name of the `block` it is in."""
        shared = block or self._scope(path)  # NOTE: a nested block reads `1x1/` under `inception_3a/`
        for item in items:
            if isinstance(item, int):
                if block:
                    self._block_of[OpRef(path, item)] = block
                self._add_op(parent, OpRef(path, item))
                yield
            else:
                shown = item.name[len(shared):] if item.name.startswith(shared) else item.name
                node = parent.add(Text.assemble((shown, "bold"), (f" · {n_ops(item.count)}", "dim")),
                                  data=("scope", item.name))
                yield from self._add_items(node, path, item.items, item.name)

    def _add_op(self, parent: TreeNode[Any], ref: OpRef) -> None:
        subnets = self.session.subnets(ref)
        if not subnets:
            # NOTE: its label is made when first read (_OpNode): drawn or measured with the list's room
            # unknown; a block of 200 ops shows ~45 (label_of was half of DenseNet-121's first block)
            leaf = self.nodes_by_ref[ref] = parent.add_leaf(_UNMADE, data=ref)
            leaf._stale = True
            return
        node = self.nodes_by_ref[ref] = parent.add(self.label_of(ref), data=ref)
        for arg, sub in subnets:
            child = node.add(Text(f"{arg} · {n_ops(len(sub.op))}", style="italic"), data=("net", ref, arg))
            for _ in self._add_ops(child, ref.path + ((ref.index, arg),), range(len(sub.op))):
                pass

    def label_of(self, ref: OpRef, room: int | None = None) -> Text:
        """An op's line: marker, index, type, marks, then its name without the shared scope.  In
        `room` cells the name keeps its distinguishing tail (``res2…branch2a_bn``); when even that
        leaves the name under :data:`NAME_MIN` cells the type gives way first (``Spati…``)."""
        s, op = self.session, self.session.op(ref)
        view = s.view(ref.path)
        kind = ("backward" if view.is_backward(ref.index) and (view.sections is None or view.sections[ref.index]
                                                                == "backward")
                else "control" if op.type in CONTROL_FLOW or op.type == STEP_OP else "op")
        rec = s.record(ref)
        marker = ("✗" if s.failed(ref) else PC_MARK if s.pc == ref else "●" if ref in s.breakpoints
                  else "!" if rec is not None and rec.has_inf_or_nan else SKIP_MARK if rec is not None and rec.skipped
                  else "✓" if rec is not None else " ")
        text = Text.assemble((marker, MARK_STYLE.get(marker, "red")), (f"{ref.index:>3} ", "dim"))
        type_at = len(text)
        text.append(op.type, TYPE_STYLE[kind])
        if ref in self.linked:
            text.append(" ↔", "bold #CE93D8")
        if not ref.path and ref.index in s.lint_ready():  # NOTE: none until the screen's lint worker is done
            text.append(" ⚑", "bold #F4B400")  # NOTE: Caffe2 computes other values or refuses (engine.analysis.lint)
        if self.overlay != "none" and rec is not None:
            tag = _overlay_tag(self.overlay, rec, s.stale(ref))
            if tag:
                text.append(f" {tag[1]}", f"bold {tag[0]}")
        what = strip_scope(name_of(op), self._block_of.get(ref) or self._scope(ref.path))
        if op.type == STEP_OP and step_summary(op):  # a plan's step: how it repeats
            what = f"{what} ({step_summary(op)})".strip()
        if room is not None and what and text.cell_len + 1 + len(what) > room:
            short = max(0, min(len(what), NAME_MIN) - (room - text.cell_len - 1))  # cells the type gives up
            if short:
                cut = max(len(op.type) - short, TYPE_MIN)
                if cut < len(op.type):
                    text = text[:type_at + cut - 1] + Text("…", TYPE_STYLE[kind]) + text[type_at + len(op.type):]
            what = elide_distinct(what, room - text.cell_len - 1, self._differs(ref.path, op.type, what))
        if what:  # the distinguishing tail: the scope every name of the net (or its block) shares is dropped
            text.append(f" {what}", "dim")
        return text

    def _differs(self, path: NetPath, op_type: str, what: str) -> tuple[int, int] | None:
        """Where `what` (a shown name of an `op_type` op of the net at `path`) differs from the names of
        the net's other ops of that type most like it (the lines that look alike); sorted both ways
        once per net shown (a backward view is another net)."""
        view = self.session.view(path)
        cache = self.__dict__.setdefault("_names", {})
        key = (path, id(view.net))
        if key not in cache:
            scope, by_type = self._scope(path), {}
            for op in view.net.op:
                by_type.setdefault(op.type, []).append(strip_scope(name_of(op), scope))
            cache[key] = ({t: (sorted(ns), sorted(n[::-1] for n in ns)) for t, ns in by_type.items()},
                          view.net)  # NOTE: the net kept, so its id stays its own
        return differs_at(what, *cache[key][0].get(op_type, ((), ())))

    def _scope(self, path: NetPath) -> str:
        """The name scope all blobs of the net at `path` share (``gpu_0/``), computed once.  Of the
        main net's forward ops: the backward pass's ``_gpu_0/…_autosplit_0`` blobs would leave none."""
        cache = self.__dict__.setdefault("_scopes", {})
        if path not in cache:
            view = self.session.view(path) if path else self.session.forward
            ops = view.net.op[:view.n_forward] if not path else view.net.op
            names = sorted({b for op in ops for b in (*op.input, *op.output)})
            prefix = commonprefix(names[:1] + names[-1:]) if len(names) > 1 else ""
            cache[path] = prefix[:prefix.rfind("/") + 1]
        return cache[path]

    _pass: dict[Any, Any] | None = None  # what every line of one render_lines pass asks again (render_line)

    def render_lines(self, crop: Any) -> list[Any]:
        # NOTE: Tree asks per line for the widget's rich_style (0.09 ms) and three component styles
        # (a RenderStyles made each time): they cannot change within one pass, so once per pass.
        # After c through DenseNet-121 every line in view is new (all gain a ✓): 46 lines, 12 ms
        self._pass = {}
        try:
            return super().render_lines(crop)
        finally:
            self._pass = None

    def render_line(self, y: int) -> Any:
        memo = self._pass
        if memo is None:
            return super().render_line(y)
        style = memo.get("rich_style")
        if style is None:
            style = memo["rich_style"] = self.rich_style
        scroll_x, scroll_y = self.scroll_offset
        return self._render_line(y + scroll_y, scroll_x, scroll_x + self._pass_size().width, style)

    def _pass_size(self) -> Any:
        """The list's size, read once per render pass: ``Widget.size`` looks the widget up in the
        screen's map on each read, and a line asked for it four times (~1.5 ms of 46 new lines)."""
        memo = self._pass
        if memo is None:
            return self.size
        size = memo.get("size")
        if size is None:
            size = memo["size"] = self.size
        return size

    def _render_line(self, y: int, x1: int, x2: int, base_style: Style) -> Strip:
        """An op's line as Tree draws it (same segments, styles and mouse meta), made from its label's
        spans with their combined styles looked up per render pass: after c through DenseNet-121 every
        line in view is new, and Tree's way (Rich Text copies, stylize, render; a per-line meta Style in
        every combination) took ~0.17 ms a line.  Other lines (sections, blocks, subnets): Tree's."""
        memo, lines = self._pass, self._tree_lines
        line = lines[y] if memo is not None and y < len(lines) else None
        node = line.path[-1] if line is not None else None
        if node is None or node._allow_expand or not isinstance(node.data, OpRef):
            return super()._render_line(y, x1, x2, base_style)
        is_hover = self.hover_line >= 0 and any(n._hover for n in line.path)
        key = (y, is_hover, self._pass_size().width, self._updates, self._pseudo_class_state,
               tuple(n._updates for n in line.path))
        strip = self._line_cache.get(key)
        if strip is None:
            segments = self._op_line(memo, line, node, y, is_hover, base_style)
            if segments is None:
                return super()._render_line(y, x1, x2, base_style)
            strip = self._line_cache[key] = Strip(segments)
        return strip.crop(x1, x2)

    def _op_line(self, memo: dict[Any, Any], line: Any, node: TreeNode[Any], y: int, is_hover: bool,
                 base_style: Style) -> list[Segment] | None:
        """The segments of Tree._render_line for an op's (leaf) line, or None where its label is not
        one run of styled pieces (then Tree draws it)."""
        g = memo.get("guides")
        if g is None:
            g = memo["guides"] = (
                self.get_component_styles("tree--guides").color.a == 0,
                self.get_component_styles("tree--guides-hover").color.a == 0,
                self.get_component_styles("tree--guides-selected").color.a == 0,
                base := self.get_component_rich_style("tree--guides", partial=True),
                base + self.get_component_rich_style("tree--guides-hover", partial=True),
                base + self.get_component_rich_style("tree--guides-selected", partial=True),
                self.get_component_rich_style("tree--label", partial=True), self.has_focus)
        base_hidden, hover_hidden, selected_hidden, base_guide, hover_guide, selected_guide, label_style, focus = g
        room = self._room(node)
        if room is not None and node.__dict__.get("_stale"):
            # NOTE: a label not made since the op's marker changed (or ever): made fitted, once. Made
            # whole first, measured, then made again fitted (most names are cut) was 2 label_of a line
            text = self.label_of(node.data, room)
        else:
            text = node._label
            if room is not None and text.cell_len > room:
                text = self.label_of(node.data, room)
        plain, spans = text.plain, text.spans
        if text.style or not spans or spans[0].start != 0 or spans[-1].end != len(plain) \
                or any(a.end != b.start for a, b in zip(spans, spans[1:])):
            return None
        line_style = self.get_component_rich_style("tree--highlight-line") if is_hover else base_style
        line_meta = line_style + Style(meta={"line": y})
        hover, selected = line.path[0]._hover, line.path[0]._selected and focus
        guide_style, hidden, pieces = base_guide, True, []
        for n in line.path[1:]:
            hidden = base_hidden
            if hover:
                guide_style, hidden = hover_guide, hover_hidden
            if selected:
                guide_style, hidden = selected_guide, selected_hidden
            if n != line.path[-1]:
                pieces.append((self._guides(memo, guide_style, hidden)[0 if n.is_last else 1], guide_style))
            hover = hover or n._hover
            selected = (selected or n._selected) and focus
        if len(line.path) > 1:
            pieces.append((self._guides(memo, guide_style, hidden)[2 if line.last else 3], guide_style))
        segments = [Segment(t, line_meta + st) for t, st in pieces if t]
        if self.hover_line == y:
            label_style = label_style + self.get_component_rich_style("tree--highlight", partial=True)
        if self.cursor_line == y:
            label_style = label_style + self.get_component_rich_style("tree--cursor", partial=False)
        # NOTE: Rich's order: the line's style, the span's, the label style, the node's meta; the meta
        # (line and node) is added last here: it merges the same way, and the rest is shared by lines
        meta = Style(meta={"line": y, "node": node._id})
        styles = memo.setdefault("label", {})
        get_style = self.app.console.get_style
        for span in spans:
            if span.start == span.end:
                continue
            k = (span.style, line_style, label_style)
            st = styles.get(k)
            if st is None:
                st = styles[k] = line_style + get_style(span.style, default=Style.null()) + label_style
            segments.append(Segment(plain[span.start:span.end], st + meta))
        pad = max(self.virtual_size.width, self._pass_size().width) - cell_len("".join(t for t, _ in pieces)) - text.cell_len
        if pad:  # NOTE: as Tree's line_pad: a negative width gives an empty blank
            segments.append(Segment(" " * pad, line_meta))
        return segments

    def _guides(self, memo: dict[Any, Any], style: Style, hidden: bool) -> tuple[str, str, str, str]:
        """Tree's guide strings (space, vertical, terminator, cross) for a guide style, per pass."""
        k = ("g", style, hidden)
        got = memo.get(k)
        if got is None:
            if self.show_guides and not hidden:
                lines = self.LINES["bold"] if style.bold else self.LINES["double"] if style.underline2 \
                    else self.LINES["default"]
            else:
                lines = ("  ", "  ", "  ", "  ")
            depth = max(0, self.guide_depth - 2)
            got = memo[k] = tuple(f"{c[0]}{c[1] * depth} " for c in lines)
        return got

    def get_component_styles(self, *names: str) -> Any:
        memo = self._pass
        if memo is None:
            return super().get_component_styles(*names)
        styles = memo.get(names)
        if styles is None:
            styles = memo[names] = super().get_component_styles(*names)
        return styles

    def render_label(self, node: TreeNode[Any], base_style: Any, style: Any) -> Text:
        """An op's line fitted to the list's width, its name's tail kept (a resize re-fits it)."""
        ref, room = node.data, self._room(node)
        if isinstance(ref, OpRef) and room is not None and node._label.cell_len > room:
            node = _Fitted(node, self.label_of(ref, room))
        return super().render_label(node, base_style, style)

    def get_label_width(self, node: TreeNode[Any]) -> int:
        # NOTE: Tree renders every label to measure it on each rebuild: the plain length is enough.
        # And it rebuilds six times before ResNet-50's first frame (149 lines each): a label's width is
        # kept on its node, measured again only when the node changed (its _updates: label, expanded,
        # children) or the list's width did
        key = (node._updates, self._content_width())
        got = node.__dict__.get("_width_for")
        if got is not None and got[0] == key:
            return got[1]
        icon = len(self.ICON_NODE_EXPANDED if node.is_expanded else self.ICON_NODE) if node.allow_expand else 0
        room = self._room(node) if isinstance(node.data, OpRef) else None
        if node.__dict__.get("_stale"):
            # NOTE: a label not made yet is measured as the room it may fill (what an op's line is drawn
            # in anyway: the list pads every line to its width), not made for it; before the list is laid
            # out (no room yet) as nothing: its first size rebuilds the lines (Tree._on_resize)
            width = (room or 0) + icon
        else:
            width = node._label.cell_len + icon
            if room is not None:
                width = min(width, room + icon)
        node.__dict__["_width_for"] = (key, width)
        return width

    _build_width: int | None = None  # the list's content width during one _build (it cannot change there)

    def _build(self) -> None:
        self._build_width = None
        self._build_width = self._content_width()
        try:
            super()._build()
        finally:
            self._build_width = None

    def _content_width(self) -> int:
        """The cells the list's lines have (its width less the scrollbars)."""
        if self._build_width is not None:
            return self._build_width
        # NOTE: scrollable_content_region is recomputed on each read (0.4 ms under load): asked per
        # label, it was 0.27 s of ResNet-50's first frame; the width changes with these only
        key = (self._pass_size(), self.show_vertical_scrollbar, self.show_horizontal_scrollbar)
        if self._room_for is None or self._room_for[0] != key:
            self._room_for = (key, self.scrollable_content_region.width)
        return self._room_for[1]

    def _room(self, node: TreeNode[Any]) -> int | None:
        """Cells an op's label has beside its guides (None before layout)."""
        width = self._content_width()
        if width <= 0:
            return None
        depth = node.__dict__.get("_depth")
        if depth is None:  # NOTE: a node never moves
            depth, parent = 0, node.parent
            while parent is not None:
                depth, parent = depth + 1, parent.parent
            node.__dict__["_depth"] = depth
        icon = len(self.ICON_NODE) if node.allow_expand else 0
        return max(8, width - depth * self.guide_depth - icon - 1)

    def set_linked(self, refs: set[OpRef]) -> None:
        """Mark the forward/backward partners of the selected op (``↔``)."""
        changed, self.linked = self.linked ^ refs, refs
        self.update_markers(changed)

    def refresh_markers(self) -> None:
        """Relabel every op made so far (overlay or breakpoints changed)."""
        self._marks = self._mark_state()
        self.update_markers(self.nodes_by_ref)

    def _mark_state(self) -> tuple[OpRef | None, OpRef | None, dict[Any, Any]]:
        """What the markers depend on: pc, failed op, the debugger's records (by identity), as of
        the last move's end (the session's copy: never the dict a running move is filling)."""
        s = self.session
        return s.pc, s.pc if s.failed(s.pc) else None, s.state.records

    def refresh_after_step(self) -> None:
        """Relabel only the ops whose marker changed since the last call: old and new pc, ops
        that ran (or were undone) since; all of them when an overlay shows per-op values."""
        old_pc, old_failed, old_records = self._marks
        self._marks = pc, failed, records = self._mark_state()
        if self.overlay != "none":
            self.refresh_markers()
            return
        changed = {old_pc, pc, old_failed, failed}
        paths = {k for k, r in records.items() if old_records.get(k) is not r}
        paths.update(old_records.keys() - records.keys())
        # NOTE: after c through DenseNet-121 that is all 668 ops: each path's OpRef made once, not per move
        refs = self.__dict__.setdefault("_refs", {})
        for p in paths:
            ref = refs.get(p)
            if ref is None:
                ref = refs[p] = from_oppath(p)
            changed.add(ref)
        self.update_markers(changed)

    def relabel(self, refs: Any) -> None:
        """Relabel `refs` whose labels may have grown (the lint's ``⚑``, added after the first frame):
        the list's width is measured again, as if they had had those labels from the start."""
        self.update_markers(refs)
        if refs:
            self._invalidate()  # NOTE: Tree keeps its width when a label changes

    def update_markers(self, refs: Any) -> None:
        """Relabel the ops `refs`: each label is remade when next read (:class:`_OpNode`); the lines on
        screen repaint once (those of unchanged ops come from Tree's line cache)."""
        nodes = self.nodes_by_ref
        changed = False
        for ref in refs:
            node = nodes.get(ref) if ref is not None else None
            if node is not None:
                node._stale = True
                node._updates += 1  # NOTE: what set_label does, less a queued repaint per node
                changed = True
        if changed:
            self.refresh()

    def select_ref(self, ref: OpRef) -> None:
        """Move the cursor to an op, expanding what holds it."""
        self._ensure(ref)
        node = self.nodes_by_ref.get(ref)
        if node is None or self.cursor_node is node:
            return
        holders, parent = [], node.parent
        while parent is not None:
            holders.append(parent)
            if not parent.is_expanded:  # NOTE: expand() rebuilds and repaints the whole tree, even when open
                parent.expand()
                if isinstance(parent.data, tuple) and parent.data[0] == "scope":
                    self._opened.append(parent)
            parent = parent.parent
        # scope blocks opened only to show an earlier cursor close again: stepping keeps the tree folded
        for block in [b for b in self._opened if b not in holders]:
            self._opened.remove(block)
            block.collapse()
        _ = self._tree_lines  # NOTE: rebuilds the lines now, so node._line is right for move_cursor
        self.cursor_line = node._line
        if not self.size.height:
            # NOTE: not laid out yet (the first op, selected at mount): the blocks holding it are open and
            # the cursor is on it in the first frame; only the scroll waits (now it would hide the top lines)
            self.call_after_refresh(self._keep_in_view, node)
            return
        self._keep_in_view(node)

    def _keep_in_view(self, node: TreeNode[Any]) -> None:
        """Keep the cursor's line a few lines off the edges, and jump a third of a page when it gets
        there (stepping then scrolls, and repaints the whole list, once every ~third of a page)."""
        if node is not self.cursor_node:
            return
        top, height = round(self.scroll_y), self.scrollable_content_region.height
        margin = min(3, max(0, (height - 1) // 2))
        if not top + margin <= node._line < top + height - margin:
            above = height // 3 if node._line >= top + height - margin else height - height // 3 - 1
            self.scroll_to(y=max(0, node._line - above), animate=False, force=True)

    @property
    def selected_ref(self) -> OpRef | None:
        data = self.cursor_node.data if self.cursor_node is not None else None
        return data if isinstance(data, OpRef) else None

    def watch_cursor_line(self, previous_line: int, line: int) -> None:
        """The cursor moved: the screen shows its op now (issue 42 item 21).  Told by message (the
        highlight, then OpSelected: two hops), the screen drew the moved cursor line alone in a frame
        and the canvas, inspector and status line in the next: two repaints per move."""
        super().watch_cursor_line(previous_line, line)
        node = self.cursor_node
        shown = getattr(self.screen, "on_op_selected", None) if previous_line != line and self.is_attached else None
        if shown is not None and node is not None and isinstance(node.data, OpRef):
            shown(OpSelected(node.data))  # NOTE: a step's select_ref moves the cursor too: the screen ignores its own op

    def on_tree_node_highlighted(self, event: Tree.NodeHighlighted[Any]) -> None:
        event.stop()
        if event.node is not self.cursor_node:
            return  # NOTE: a stale highlight (the cursor moved on since): acting on it would undo a step
        data = event.node.data
        if isinstance(data, OpRef):
            self.post_message(OpSelected(data))
        elif isinstance(data, tuple) and data[0] == "net":
            self.post_message(DrillRequested(data[1], data[2]))

"""SearchScreen: type to filter every op (by type, category as ``cat:norm``, name, output, index as
``#12``) and blob; exact matches first; Enter jumps there.

``? EXPR`` is a query (issue 45): Enter runs the breakpoint DSL over the recording (replay) or the run so
far (live) in a worker and lists the stops where it holds (op #, place, blob@version, iteration,
value); Enter on one moves the pc there (:mod:`netviz.timetravel_ui`)."""
from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, OptionList
from textual.widgets.option_list import Option

from engine.catalogue import category
from netviz.errorlog import Guarded
from netviz.screens.prompt import TypeAhead
from netviz.session import BlobRef, OpRef, Session
from netviz.style import category_style
from netviz.timetravel_ui import QueryHit, query_hits

LIMIT = 200


class SearchScreen(TypeAhead, Guarded, ModalScreen[Any]):
    BINDINGS = [Binding("escape", "cancel", "Cancel", id="search.cancel"),
                Binding("down", "move(1)", "Next", show=False, id="search.next"),
                Binding("up", "move(-1)", "Previous", show=False, id="search.previous")]

    def __init__(self, session: Session) -> None:
        super().__init__()
        self.session, self.queried = session, None
        self.entries: list[tuple[str, Text, Any]] = []
        for ref in session.walk():
            op = session.op(ref)
            where = f" in {session.path_label(ref.path)}" if ref.path else ""
            cat = category(op.type)
            label = Text.assemble(("op ", "dim"), f"#{ref.index} {op.type} ", (f"[{cat}] ", category_style(cat)),
                                  (op.name or ", ".join(op.output), "dim"), (where, "dim italic"))
            self.entries.append((f"op #{ref.index} {op.type} cat:{cat} {op.name} {' '.join(op.output)}".lower(), label,
                                 ref))
        paths = [()] + sorted({r.path for r in session.walk() if r.path}, key=len)
        seen: set[str] = set()
        for path in paths:  # NOTE: a subnet's own blobs too (Mask R-CNN's _[mask]_… live in an If's branches)
            where = f" in {session.path_label(path)}" if path else ""
            for name in session.all_blobs(path):
                if name not in seen:
                    seen.add(name)
                    self.entries.append((f"blob {name}".lower(), Text.assemble(("blob ", "dim"), name,
                                                                               (where, "dim italic")),
                                         BlobRef(path, name)))

    def compose(self) -> ComposeResult:
        with Vertical(id="search-box"):
            yield Input(placeholder="search ops (type, cat:conv, name) and blobs; ? EXPR queries the run",
                        id="search-input")
            yield OptionList(id="search-results")

    def on_mount(self) -> None:
        self.filter("")
        self.take_type_ahead(self.query_one(Input))

    def filter(self, text: str) -> None:
        """Entries holding every word; those where more words are whole (a type, a name, ``#12``, a
        blob) first, so ``relu`` lists the Relu ops before ``relu1``'s readers and ``#1`` op 1 before #10."""
        words = text.lower().split()
        hits = [e for e in self.entries if all(w in e[0] for w in words)]
        if words:
            hits.sort(key=lambda e: -sum(w in e[0].split() for w in words))  # NOTE: stable: net order within
        found, hits = len(hits), hits[:LIMIT]
        # NOTE: a note line (disabled, Enter does nothing) when nothing matches or the list is cut: an
        # empty box read as "still searching", and 200 rows of 700 as all of them
        if not hits and words:
            hits = [("", Text(f"no op or blob matches {text.strip()!r}", style="dim"), None)]
        elif found > LIMIT:
            hits.append(("", Text(f"the first {LIMIT} of {found} matches: type more to narrow", style="dim"), None))
        results = self.query_one(OptionList)
        results.clear_options()
        results.add_options([Option(label, id=str(k), disabled=ref is None) for k, (_, label, ref) in enumerate(hits)])
        self.hits = hits
        if hits and hits[0][2] is not None:
            results.highlighted = 0

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.value.lstrip().startswith("?"):
            self.show([], Text("Enter runs the query over every op run (e.g. ? max_abs(x) > 1e3, ? has_inf_or_nan)",
                               style="dim"))
        else:
            self.filter(event.value)

    def show(self, hits: list[tuple[str, Text, Any]], note: Text) -> None:
        """A query's rows under a note line (the note is no stop: Enter on it does nothing)."""
        results = self.query_one(OptionList)
        results.clear_options()
        results.add_options([Option(note, id="note", disabled=True)] + [Option(label, id=str(k))
                                                                         for k, (_, label, _) in enumerate(hits)])
        self.hits = [("", note, None)] + hits
        results.highlighted = 1 if hits else None

    def run_query(self, expr: str) -> None:
        """Run `expr` in a worker; the rows replace the list when it is done."""
        from engine.errors import NetvizError  # noqa: PLC0415

        self.queried = expr
        self.show([], Text(f"querying {expr} …", style="dim"))

        def work() -> None:
            try:  # NOTE: a blob the net lacks is never true: "0 stops where … holds" hid the typo
                self.session.check_condition(expr)
                hits, where = query_hits(self.session, expr)
            except NetvizError as e:
                self.app.call_from_thread(self.show, [], Text(str(e), style="bold red"))
                return
            rows = [(h.label(), Text(h.label()), h) for h in hits[:LIMIT]]
            more = f" (first {LIMIT} shown)" if len(hits) > LIMIT else ""
            note = Text(f"{len(hits)} stop{'s' if len(hits) != 1 else ''} where {expr} holds{more}, {where}; "
                        "Enter jumps there", style="dim")
            self.app.call_from_thread(self.show, rows, note)
        self.run_worker(work, thread=True, group="query", exclusive=True)

    def choose(self, hit: Any) -> None:
        """A query row moves the pc (the main screen's move worker); an op or blob goes back to the caller."""
        if isinstance(hit, QueryHit):
            self.app.main.jump_to_hit(hit)
            self.dismiss(None)
        elif hit is not None:
            self.dismiss(hit)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        text = event.value.strip()
        if text.startswith("?") and text[1:].strip() != self.queried:
            if text[1:].strip():
                self.run_query(text[1:].strip())
            return
        results = self.query_one(OptionList)
        hit = self.hits[results.highlighted][2] if self.hits and results.highlighted is not None else None
        if hit is None and not text.startswith("?"):
            self.dismiss(None)
        self.choose(hit)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.choose(self.hits[event.option_index][2])

    def action_move(self, delta: int) -> None:
        results = self.query_one(OptionList)
        if self.hits:
            results.highlighted = ((results.highlighted or 0) + delta) % len(self.hits)
            if self.hits[results.highlighted][2] is None and len(self.hits) > 1:  # a query's note line
                results.highlighted = (results.highlighted + delta) % len(self.hits)

    def action_cancel(self) -> None:
        self.dismiss(None)

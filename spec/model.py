"""The parsed spec: frozen dataclasses that every backend (proofs, runtime, diagrams) reads."""

from __future__ import annotations

from dataclasses import dataclass, field

from .expr import Expr, Loc

PAGE = "page"
SYSTEM = "system"
READER = "reader"
READER_PAGE = "reader_page"
SCOPES = (SYSTEM, READER, PAGE, READER_PAGE)
SCOPE_ARGS: dict[str, tuple[str, ...]] = {SYSTEM: (), READER: ("r",), PAGE: ("p",), READER_PAGE: ("r", "p")}
"""The subscripts a name of each scope takes, in order: ``x``, ``x[r]``, ``x[p]``, ``x[r, p]``."""
RULES = ("admission", "diversion", "toctou", "topology")
PATHS = ("in_place", "compress", "recompute", "prefetch")


@dataclass(frozen=True)
class VarDecl:
    """A typed variable with a finite domain or bounds.

    ``scope``: system (one), reader (one per reader), page (one per page) or reader_page (one per
    reader and page).  ``ghost``: the variable records what is physically so (what a slot holds,
    whether a copy is intact); the design's guards may never read it, properties are stated over it.
    """

    name: str
    type: str  # "int" | "bool"
    scope: str
    init: int | bool
    min: int | None = None
    max: int | None = None
    owner: str | None = None
    loc: Loc = field(default=Loc(), compare=False)
    min_expr: Expr | None = field(default=None, compare=False)
    max_expr: Expr | None = field(default=None, compare=False)
    """The bounds as written (free names: constants, ``pages``, ``readers``), for instances of other sizes."""
    ghost: bool = False


@dataclass(frozen=True)
class Effect:
    """``target := value`` at ``index``.

    ``index`` is None for a system name, else the subscripts as written, comma-separated: ``"p"``
    (the event's page), ``"r"`` (its reader), ``"r,p"``; ``*`` stands for every page (bound as
    ``q`` in the value) or every reader (bound as ``s``): ``"*"``, ``"r,*"``, ``"*,p"``, ``"*,*"``.
    """

    target: str
    index: str | None
    value: Expr
    loc: Loc = field(default=Loc(), compare=False)


@dataclass(frozen=True)
class Param:
    """An event argument beyond the page: a bounded integer chosen by the caller (``min``/``max``
    folded at the checked instance; ``min_expr``/``max_expr`` as written, for the runtime's constants)."""

    name: str
    min: int
    max: int
    min_expr: Expr | None = field(default=None, compare=False)
    max_expr: Expr | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Event:
    """A transition of one object: from any of ``sources`` to ``target`` when ``guard`` holds.

    ``args``: ``r`` (the reader acting) and/or ``p`` (the page), as the owner's scope and the
    guard and effects need them.  ``env``: an environment event, something the world does (a
    copy corrupts, a file is lost); the runtime never fires it, the proofs range over it.
    ``observes``: ghost variables the event measures (a checksum reads the bytes): its effects,
    never its guard, may read them.
    """

    name: str
    owner: str
    scope: str
    sources: tuple[str, ...]
    target: str
    guard: Expr
    effects: tuple[Effect, ...]
    params: tuple[Param, ...] = ()
    description: str = ""
    loc: Loc = field(default=Loc(), compare=False)
    args: tuple[str, ...] = ()
    env: bool = False
    observes: tuple[str, ...] = ()

    @property
    def arg_names(self) -> tuple[str, ...]:
        """The event's arguments in call order: ``r`` and/or ``p``, then its params."""
        return self.args + tuple(prm.name for prm in self.params)

    @property
    def takes_reader(self) -> bool:
        """Whether the event acts for a reader ``r``."""
        return "r" in self.args

    @property
    def takes_page(self) -> bool:
        """Whether the event acts on a page ``p``."""
        return "p" in self.args


@dataclass(frozen=True)
class ObjectSpec:
    """One cache-object lifecycle: its states, its own variables and its events."""

    name: str
    scope: str
    states: tuple[str, ...]
    initial: str
    vars: tuple[str, ...]
    events: tuple[Event, ...]
    description: str = ""


@dataclass(frozen=True)
class Property:
    """A property to prove.

    kind ``invariant``: ``expr`` holds in every reachable state.  kind ``step``: whenever ``event``
    fires, ``expr`` holds in the state it fires from (``p`` and the event's params are bound).
    kind ``lemma``: a strengthening invariant, proved like the others and assumed by induction.
    """

    name: str
    kind: str
    expr: Expr
    rule: str | None = None
    event: str | None = None
    description: str = ""
    loc: Loc = field(default=Loc(), compare=False)


@dataclass(frozen=True)
class Lookup:
    """The lookup: which pages each object needs for a hit at ``pos``, when it is ready, and its paths.

    ``needed[obj]`` has free names ``p`` and ``pos``; ``ready[obj]`` and every
    ``recovery[obj][path]`` have free name ``p``.
    """

    objects: tuple[str, ...]
    needed: dict[str, Expr]
    ready: dict[str, Expr]
    recovery: dict[str, dict[str, Expr]]


@dataclass(frozen=True)
class Layout:
    """A memory pool a kernel reads: ``entries`` entries of ``entry_bytes`` at ``base + i * stride``."""

    name: str
    dtype: str
    entry_shape: tuple[int, ...]
    entries: int
    entry_bytes: int
    stride: int
    base: int
    align: int
    pool_bytes: int
    loc: Loc = field(default=Loc(), compare=False)


@dataclass(frozen=True)
class Spec:
    """A whole design: the instance, the objects, the properties, the lookup and the layouts."""

    name: str
    path: str
    description: str
    pages: int
    constants: dict[str, int]
    vars: dict[str, VarDecl]
    objects: dict[str, ObjectSpec]
    properties: tuple[Property, ...]
    lookup: Lookup
    layouts: tuple[Layout, ...]
    refutes: tuple[str, ...] = ()
    readers: int = 1

    @property
    def events(self) -> tuple[Event, ...]:
        """Every event of every object, in declaration order."""
        return tuple(ev for obj in self.objects.values() for ev in obj.events)

    def event(self, name: str) -> Event:
        """The event called ``name``."""
        for ev in self.events:
            if ev.name == name:
                return ev
        raise KeyError(name)

    def page_range(self) -> range:
        """The page ids of the checked instance."""
        return range(self.pages)

    def reader_range(self) -> range:
        """The reader ids of the checked instance."""
        return range(self.readers)

    def scope_of(self, name: str) -> str:
        """The scope of a variable or object called ``name``."""
        if name in self.vars:
            return self.vars[name].scope
        return self.objects[name].scope

    @property
    def ghosts(self) -> frozenset[str]:
        """Names of the ghost variables."""
        return frozenset(n for n, d in self.vars.items() if d.ghost)

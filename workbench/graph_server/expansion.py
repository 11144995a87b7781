"""Which layers of a graph Model Explorer opens unfolded: as many levels as still fit one screen, so a model
does not open as one closed box (Model Explorer's own default); the inputs and parameters stay folded. Stdlib
only.
"""

from __future__ import annotations

GROUP_SUFFIX = "___group___"  # Model Explorer's id of a layer (group node): its namespace and this
FOLDED = frozenset({"inputs"})  # parameters and buffers: dozens of nodes that say little drawn one by one
# nodes on screen at most: a taller chain no longer reads at the zoom that fits the Graph tab
VISIBLE_LIMIT = 16


def initial_expansion(graph: dict, limit: int = VISIBLE_LIMIT) -> list[str]:
    """The ids of the deepest layers to open (Model Explorer opens their parents too): the deepest level `d`
    at which the graph, with every layer at most `d` deep open, shows at most `limit` nodes (a closed layer
    counts once, an op inside open layers once each). [] when even the first level shows more, or there are no
    layers."""
    paths = [path[:1] if path and path[0] in FOLDED else path for path in _op_layers(graph)]
    deepest: list[str] = []
    for depth in range(1, max((len(p) for p in paths), default=0) + 1):
        shown: set = set()
        for index, path in enumerate(paths):
            if path[:1] and path[0] in FOLDED:
                shown.add(path)  # the closed box
            elif len(path) <= depth:
                shown.add(index)  # an op whose layers are all open
            else:
                shown.add(path[: depth + 1])  # the closed layer it sits in
        if len(shown) > limit:
            break
        opened = {path[:depth] for path in paths if path and path[0] not in FOLDED}
        deepest = sorted(
            "/".join(p) + GROUP_SUFFIX
            for p in opened
            if not any(len(q) > len(p) and q[: len(p)] == p for q in opened)
        )
    return deepest


def _op_layers(graph: dict) -> list[tuple[str, ...]]:
    """Each op's layer path as Model Explorer draws it: a layer holding a single op and nothing else is no
    layer there (the op moves up into the parent, again and again), so its id would open nothing."""
    paths = [
        tuple(part for part in str(node.get("namespace") or "").split("/") if part)
        for node in graph.get("nodes") or []
        if isinstance(node, dict)
    ]
    while True:
        children: dict[tuple, list] = {}
        for index, path in enumerate(paths):
            if path:
                children.setdefault(path, []).append(index)
            for depth in range(1, len(path)):
                children.setdefault(path[:depth], [])
        for layer in list(children):  # a layer inside another is one child of it, however many ops it holds
            if len(layer) > 1:
                children.setdefault(layer[:-1], []).append(layer)
        single = [
            kids[0] for layer, kids in children.items() if len(set(kids)) == 1 and isinstance(kids[0], int)
        ]
        if not single:
            return paths
        for index in single:
            paths[index] = paths[index][:-1]

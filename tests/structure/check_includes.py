#!/usr/bin/env python3
"""Checks the include graph of the C sources: no two modules of one folder include each
other, directly or in a longer circle, and folders depend one way only: proxy/ may use
tiers/ and store/, tiers/ may use store/, store/ uses nothing of the others. Inside
store/, its rooms depend one way too: the root (the limiter interface and what backends
share) uses none of them; catalog/, memory/, redis/ and fallback/ use only the root;
cluster/ may use redis/ as well.

A module is a .c/.h pair (proxy/forward.c and proxy/forward.h are module proxy/forward),
with its private header X_impl.h if it has one (store/limiter_impl.h is store/limiter's);
an edge A -> B is an #include "B.h" in A's .c or .h. Prints every offending edge or
circle and exits 1, or prints a one-line summary and exits 0.

Usage: check_includes.py [SOURCE_ROOT]   (default: the repository this file is in)
"""
import pathlib
import re
import sys

FOLDERS = ("proxy", "tiers", "store")
MAY_USE = {"proxy": {"proxy", "tiers", "store"}, "tiers": {"tiers", "store"}, "store": {"store"}}
ROOM_MAY_USE = {"store": {"store"}, "store/catalog": {"store"}, "store/memory": {"store"},
                "store/redis": {"store"}, "store/fallback": {"store"},
                "store/cluster": {"store", "store/redis"}}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def module_name(stem):
    return stem[: -len("_impl")] if stem.endswith("_impl") else stem


def module_graph(root):
    graph = {}
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*.[ch]")):
            module = str(path.relative_to(root).parent / module_name(path.stem))
            edges = graph.setdefault(module, set())
            for target in INCLUDE.findall(path.read_text(errors="replace")):
                target_path = pathlib.PurePosixPath(target)
                target_module = str(target_path.parent / module_name(target_path.stem))
                if target_module.split("/")[0] in FOLDERS and target_module != module:
                    edges.add(target_module)
    return graph


def circles(graph):
    """Every elementary circle found by a depth-first search (one per back edge)."""
    found, state, stack = [], {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                found.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return found


def main():
    root = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[2]
    graph = module_graph(root)
    problems = []
    for module, edges in sorted(graph.items()):
        folder = module.split("/")[0]
        for target in sorted(edges):
            if target.split("/")[0] not in MAY_USE[folder]:
                problems.append(f"{module} includes {target}.h: {folder}/ must not use {target.split('/')[0]}/")
        room = module.rsplit("/", 1)[0]
        for target in sorted(edges):
            target_room = target.rsplit("/", 1)[0]
            if room in ROOM_MAY_USE and target_room.startswith("store") and target_room != room \
                    and target_room not in ROOM_MAY_USE[room]:
                problems.append(f"{module} includes {target}.h: {room}/ must not use {target_room}/")
    for circle in circles(graph):
        problems.append("include circle: " + " -> ".join(circle))
    if problems:
        print("\n".join(problems))
        return 1
    edges = sum(len(e) for e in graph.values())
    print(f"include graph: {len(graph)} modules, {edges} edges, no circle, proxy -> tiers -> store only, store's rooms one way")
    return 0


if __name__ == "__main__":
    sys.exit(main())

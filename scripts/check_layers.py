#!/usr/bin/env python3
"""Checks that every source and public header includes only what its layer may use.

Usage: check_layers.py SOURCE_DIR BUILD_DIR/layers.txt

layers.txt is written by CMakeLists.txt (attnkit_layer()), one line per layer:
    name: folder [folder ...] | dependency [dependency ...]
A layer owns src/<folder>/ and include/attnkit/<folder>/ for each of its folders; the layer named
`base` also owns the headers directly in include/attnkit/. A file may include headers of its own
layer and of every layer it depends on, directly or through others. Files of LibTorch-free
layers (base, text, kernels, formats, metrics, data) may not include LibTorch, and no public header includes
<torch/torch.h> (only sources get it, through the precompiled header).
Prints one line per violation and exits 1 if there is any."""
import re
import sys
from pathlib import Path

TORCH_FREE = {"base", "text", "kernels", "formats", "metrics", "data"}
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
TORCH_HEADER = re.compile(r"^(torch|ATen|c10|caffe2)/")


def read_table(path):
    layers = {}
    for line in Path(path).read_text().splitlines():
        if not line.strip():
            continue
        name, rest = line.split(":", 1)
        folders, _, deps = rest.partition("|")
        layers[name.strip()] = (folders.split(), deps.split())
    return layers


def closure(layers, name, seen=None):
    seen = set() if seen is None else seen
    for dep in layers[name][1]:
        if dep not in seen:
            seen.add(dep)
            closure(layers, dep, seen)
    return seen


def layer_of(path, root, owners):
    """The layer that owns a file (the longest folder that contains it), or None."""
    rel = path.relative_to(root).as_posix()
    if rel.startswith("include/attnkit/") and rel.count("/") == 2:
        return "base"
    best, best_len = None, -1
    for folder, name in owners.items():
        for prefix in (f"src/{folder}/", f"include/attnkit/{folder}/"):
            if rel.startswith(prefix) and len(prefix) > best_len:
                best, best_len = name, len(prefix)
    return best


def main():
    root = Path(sys.argv[1]).resolve()
    layers = read_table(sys.argv[2])
    owners = {folder: name for name, (folders, _) in layers.items() for folder in folders}
    allowed = {name: closure(layers, name) | {name} for name in layers}
    problems = []
    files = [p for p in (root / "src").rglob("*") if p.suffix in (".cpp", ".h")]
    files += [p for p in (root / "include" / "attnkit").rglob("*.h")]
    checked = 0
    for path in sorted(files):
        layer = layer_of(path, root, owners)
        if layer is None:
            continue  # src/pch.*, src/torch_ops: outside the layers
        checked += 1
        public = path.is_relative_to(root / "include")
        for bracket, header in INCLUDE.findall(path.read_text(encoding="utf-8")):
            where = f"{path.relative_to(root)}: includes {header}"
            if TORCH_HEADER.match(header):
                if layer in TORCH_FREE:
                    problems.append(f"{where}, but layer '{layer}' is LibTorch-free")
                elif public and header == "torch/torch.h":
                    problems.append(f"{where}; public headers include only the LibTorch parts they need")
                continue
            if bracket == "<":
                continue
            if header.startswith("attnkit/"):
                target = root / "include" / header
            else:
                target = (path.parent / header).resolve()
            if not target.exists():
                continue  # generated or system header found through another include path
            used = layer_of(target, root, owners)
            if used is not None and used not in allowed[layer]:
                problems.append(f"{where}: layer '{layer}' may not use layer '{used}' "
                                f"(it may use: {', '.join(sorted(allowed[layer] - {layer})) or 'nothing'})")
    for problem in problems:
        print(problem)
    print(f"layering: {checked} files checked, {len(problems)} violation(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

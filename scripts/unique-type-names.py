#!/usr/bin/env python3
"""Fails when two public types of the workspace share a name.

Reads what `cargo doc --workspace --all-features --no-deps` wrote (run it first; scripts/test.sh
does): each crate's list of all items (`all.html`), which holds exactly what a docs.rs reader
sees, so private modules and `#[doc(hidden)]` ones are already left out. Structs, enums, unions,
traits and type aliases count as types. One item shown at two paths (re-exported, also from
another crate of the workspace) is one type: items are told apart by their source location.

    scripts/unique-type-names.py           # checks; exit 1 on a duplicate
    scripts/unique-type-names.py --list    # every public type name, by crate

The documentation is read from $CARGO_TARGET_DIR/doc (target/doc by default).
"""

import html
import os
import re
import sys
from collections import defaultdict
from pathlib import Path

TYPE_KINDS = {"struct", "enum", "union", "trait", "type", "traitalias"}
ROOT = Path(__file__).resolve().parent.parent


def workspace_crates():
    """The library crates of the workspace, by the name their docs are written under."""
    crates = []
    for manifest in sorted(ROOT.glob("crates/*/Cargo.toml")):
        match = re.search(r'^\s*name\s*=\s*"([^"]+)"', manifest.read_text(), re.M)
        if match and (manifest.parent / "src" / "lib.rs").exists():
            crates.append(match.group(1).replace("-", "_"))
    return crates


def source_of(page):
    """Where an item's page says the item is defined (`src/crate/file.rs.html#line`), or
    `None` when it links no source of the workspace. Rustdoc links the source of every item a
    crate defines; a page without such a link shows a type re-exported from elsewhere, which
    its own crate's docs count if that is a workspace crate (a third party's type is not
    ours). Links into the standard library (`https://...`: a derived trait's methods) are not
    the item's own."""
    for href in re.findall(r'<a class="src" href="([^"]+)"', page.read_text()):
        if not href.startswith(("http://", "https://")):
            # An item inlined from another crate names its first line only.
            return re.sub(r"^(\.\./)+|-\d+$", "", href)
    return None


def public_types(doc, crate):
    """(name, path, kind, page) of every type the crate's docs list."""
    listing = doc / crate / "all.html"
    if not listing.exists():
        sys.exit(
            f"{listing} is missing: run `cargo doc --workspace --all-features --no-deps` first"
        )
    for href, path in re.findall(r'<li><a href="([^"]+)">([^<]+)</a></li>', listing.read_text()):
        kind = href.rsplit("/", 1)[-1].split(".", 1)[0]
        if kind in TYPE_KINDS:
            path = html.unescape(path)
            yield path.rsplit("::", 1)[-1], f"{crate}::{path}", kind, doc / crate / href


def main():
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    doc = target / "doc"
    by_name = defaultdict(dict)
    for crate in workspace_crates():
        for name, path, kind, page in public_types(doc, crate):
            source = source_of(page)
            if source is not None:
                by_name[name].setdefault(source, []).append(f"{path} ({kind})")
    if "--list" in sys.argv[1:]:
        for name in sorted(by_name):
            for paths in by_name[name].values():
                print(f"{name}: {', '.join(paths)}")
        return 0
    clashes = {name: items for name, items in by_name.items() if len(items) > 1}
    for name in sorted(clashes):
        print(f"{name} names {len(clashes[name])} different public types:", file=sys.stderr)
        for paths in clashes[name].values():
            print(f"  {', '.join(paths)}", file=sys.stderr)
    if clashes:
        print("give each a name that says what it is", file=sys.stderr)
        return 1
    count = sum(len(items) for items in by_name.values())
    if count == 0:
        # Nothing read is a change in rustdoc's pages, not a workspace without types.
        print("no public types read from the docs: has rustdoc's HTML changed?", file=sys.stderr)
        return 1
    print(f"{count} public types, no two with the same name")
    return 0


if __name__ == "__main__":
    sys.exit(main())

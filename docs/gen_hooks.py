"""Generate docs/plugin-authors/hooks.md from memvault.hooks.

Run `python docs/gen_hooks.py` after changing a hook spec; core/tests/test_meta.py
fails while the page and the code differ.
"""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path

PAGE = Path(__file__).parent / "plugin-authors" / "hooks.md"

_INTRO = """# Hook reference

Every hook memvault calls, generated from `memvault.hooks` by
`python docs/gen_hooks.py` (a test fails when this page and the code differ).
The marker project and the entry-point group are both `memvault`; mark
implementations with `@memvault.hookimpl`. An implementation may accept a
subset of a hook's arguments.

`firstresult` hooks stop at the first implementation that returns something
other than `None`. Cross-cutting plugins wrap the provider verbs with
`@memvault.hookimpl(wrapper=True)`. The interface is append-only: hooks and
optional arguments are added, never removed or renamed (contract D4).
"""

_GROUPS = (
    ("Registration (the registry's plugin manager)", ("memvault_register_", "memvault_vault_plugins")),
    (
        "Provider verbs (a vault's plugin manager)",
        ("memvault_retain", "memvault_recall", "memvault_read", "memvault_forget", "memvault_health"),
    ),
    ("Many retains at once (optional: `Vault.retain_many`)", ("memvault_write_group", "memvault_retain_many")),
    ("Enumeration (providers with the `list_documents` capability)", ("memvault_list_documents",)),
    ("Quarantine (providers with the `quarantine` capability)", ("memvault_quarantine_",)),
    ("Recall by meaning (providers with the `vectors` capability)", ("memvault_vectors_",)),
    ("Memory over time (providers with the `expiry` capability)", ("memvault_sweep_",)),
    ("Lifecycle (per slot)", ("memvault_recall_", "memvault_capture_", "memvault_tools")),
)


def _specs() -> list[tuple[str, object]]:
    from memvault.hooks import lifecycle, provider, registration

    found = []
    for order, module in enumerate((registration, provider, lifecycle)):
        for name, fn in vars(module).items():
            if name.startswith("memvault_") and inspect.isfunction(fn):
                found.append((order, inspect.getsourcelines(fn)[1], name, fn))
    return [(name, fn) for _, _, name, fn in sorted(found, key=lambda item: item[:2])]


def _group(name: str) -> int:
    # Later groups first: "memvault_recall_turn_started" is lifecycle, "memvault_recall" a verb.
    for index in reversed(range(len(_GROUPS))):
        for prefix in _GROUPS[index][1]:
            if name == prefix or (prefix.endswith("_") and name.startswith(prefix)):
                return index
    raise ValueError(f"hook {name} belongs to no group in docs/gen_hooks.py")


def _markdown(text: str) -> str:
    text = re.sub(r":(?:class|func|meth|mod|attr):`~?([^`]+)`", r"`\1`", text)
    return text.replace("``", "`")


def _render_doc(doc: str) -> str:
    out: list[str] = []
    for line in _markdown(inspect.cleandoc(doc)).splitlines():
        param = re.match(r":param (\w+):\s*(.*)", line)
        ret = re.match(r":return:\s*(.*)", line)
        if param:
            out.append(f"- **`{param.group(1)}`**: {param.group(2)}")
        elif ret:
            out.append(f"- **returns**: {ret.group(1)}")
        elif line.startswith("    ") and out and out[-1].startswith("- "):
            out[-1] += " " + line.strip()
        else:
            out.append(line)
    return "\n".join(out)


def render() -> str:
    sections: list[list[str]] = [[] for _ in _GROUPS]
    for name, fn in _specs():
        opts = getattr(fn, "memvault_spec", {})
        marker = "@hookspec(firstresult=True)" if opts.get("firstresult") else "@hookspec"
        signature = f"def {name}{inspect.signature(fn)}".replace("'", "")  # type: ignore[arg-type]
        body = _render_doc(fn.__doc__ or "")  # type: ignore[attr-defined]
        sections[_group(name)].append(f"### `{name}`\n\n```python\n{marker}\n{signature}\n```\n\n{body}\n")
    parts = [_INTRO]
    for (title, _), entries in zip(_GROUPS, sections, strict=True):
        parts.append(f"## {title}\n\n" + "\n".join(entries))
    return "\n".join(parts)


if __name__ == "__main__":
    PAGE.write_text(render())
    print(f"wrote {PAGE}", file=sys.stderr)

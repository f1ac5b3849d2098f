"""Config choices as users type them. Hydra knows a choice only by its file's name, while a model
is spelled the hub's way (`model=meta-llama/Llama-3.1-8B-Instruct`, `model=Llama-3.1-8B`): the
command line's choices are rewritten to file names before Hydra composes, and a name that matches
none is one line naming the key and the closest choices."""

from __future__ import annotations

import difflib
import re

import yaml

from specbench import ROOT
from specbench.errors import ConfigError

CONF_DIR = ROOT / "conf"
# a value Hydra computes (a sweep function, an interpolation, a list): left for Hydra to read
COMPUTED = re.compile(r"[()\[\]{}$]")


def fold(name: str) -> str:
    """`Llama-3.1-8B` and `llama3.1-8b` alike: case, '-', '_' and '.' do not count."""
    return re.sub(r"[-_.]", "", name.casefold())


def aliases(group: str) -> dict[str, set[str]]:
    """Each folded spelling of a choice in conf/<group>, with the file names it may mean: the
    name, and for a model its hub id (`id:`) and the id's last part."""
    found: dict[str, set[str]] = {}
    for path in sorted((CONF_DIR / group).glob("*.yaml")):
        spellings = [path.stem]
        if group == "model" and (hub_id := yaml.safe_load(path.read_text()).get("id")):
            spellings += [hub_id, hub_id.rsplit("/", 1)[-1]]
        for spelling in spellings:
            found.setdefault(fold(spelling), set()).add(path.stem)
    return found


def choice_name(key: str, group: str, value: str) -> str:
    """The file name in conf/<group> that `value` means; ConfigError where it means none, or more than one."""
    names = sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))
    if value in names:
        return value
    table = aliases(group)
    meant = sorted(table.get(fold(value), ()))
    if len(meant) == 1:
        return meant[0]
    if meant:
        raise ConfigError(f"{key}: {value!r} could be {' or '.join(meant)}; name one")
    close = [*dict.fromkeys(n for a in difflib.get_close_matches(fold(value), table, n=5) for n in sorted(table[a]))]
    what = " (neither a conf/model name nor a hub id in one)" if group == "model" else ""
    hint = f"did you mean {' or '.join(close[:3])}?" if close else f"choose one of {', '.join(names)}"
    raise ConfigError(f"{key}: unknown {group} {value!r}{what}; {hint}")


def choice_names(argv: list[str]) -> list[str]:
    """`argv` with each config group choice (a sweep's `a,b` too) as its file name in conf/."""
    groups = {p.parent.name for p in CONF_DIR.glob("*/*.yaml")}
    rewritten = []
    for arg in argv:
        key, sep, value = arg.partition("=")
        name = key.lstrip("+~")
        group = name.split("@")[0]
        if sep and group in groups and not arg.startswith("-") and not COMPUTED.search(value):
            values = [v.strip().strip("'\"") for v in value.split(",")]
            arg = f"{key}={','.join(choice_name(name, group, v) for v in values)}"
        rewritten.append(arg)
    return rewritten

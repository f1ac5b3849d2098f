"""`make install`'s last step: every model config whose weights ship as a GGUF in an
installed pip package (the embedded default, SmolLM2-135M-Instruct) converted once into
dense safetensors beside the environment (registry.installed_dir), so a first run loads
them instead of converting for 15-30 s. A package that is not installed is skipped."""

from __future__ import annotations

import time

import yaml

from specbench import ROOT
from specbench.models import registry
from specbench.package_data import package_dir


def main() -> None:
    for path in sorted((ROOT / "conf" / "model").glob("*.yaml")):
        entry = yaml.safe_load(path.read_text())
        if not (entry.get("gguf_file") and entry.get("package") and package_dir(entry["package"])):
            continue
        start = time.perf_counter()
        out = registry.convert_installed(entry)
        print(f"{entry['name']}: {out} ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()

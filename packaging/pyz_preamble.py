"""Run by origin.pyz after unpacking, before Origin is imported.

The pyz carries compiled wheels for a few CPython minors of one platform.  On
any other Python, say which ones it carries instead of failing with an import
error deep inside a dependency.
"""

import importlib.machinery
import platform
import sys
from pathlib import Path

here = Path(site_packages) / "zstandard"  # noqa: F821 (given by shiv's bootstrap)
suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
if sys.implementation.name != "cpython" or not (here / f"backend_c{suffix}").exists():
    # backend_c.cpython-312-x86_64-linux-gnu.so -> ("3.12", "x86_64-linux-gnu")
    tags = sorted({tuple(p.name.split(".")[1].split("-", 2)[1:]) for p in here.glob("backend_c.cpython-*.so")})
    carried = ", ".join(f"{t[0][0]}.{t[0][1:]}" for t in tags) or "none"
    platforms = ", ".join(sorted({t[1] for t in tags if len(t) > 1}))
    sys.stderr.write(
        f"origin: this origin.pyz carries compiled modules for CPython {carried} on {platforms or '?'}, "
        f"not for {platform.python_implementation()} {platform.python_version()} ({suffix.strip('.')}): "
        "run it with one of those, build one for this Python (make pyz PYZ_PYTHONS=3.X), "
        "or install the wheel with pipx.\n"
    )
    sys.exit(2)

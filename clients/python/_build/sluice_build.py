"""A PEP 517 build backend for sluice_client, standard library only, so that
``pip install ./clients/python`` needs nothing from a package index (not
even setuptools). It builds a pure-Python wheel of the sluice_client
package, an sdist, and an editable wheel (PEP 660)."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import tarfile
import zipfile

NAME = "sluice_client"
DIST = "sluice-client"
VERSION = "0.1.0"
HERE = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
TAG = "py3-none-any"

METADATA = f"""Metadata-Version: 2.1
Name: {DIST}
Version: {VERSION}
Summary: Client of the sluice rate-limit service: one shared budget for every process (standard library only)
License: Apache-2.0
Requires-Python: >=3.9
Description-Content-Type: text/markdown

"""

WHEEL = f"""Wheel-Version: 1.0
Generator: sluice_build {VERSION}
Root-Is-Purelib: true
Tag: {TAG}
"""


def _readme() -> str:
    with open(os.path.join(HERE, "README.md"), encoding="utf-8") as f:
        return f.read()


def _files():
    pkg = os.path.join(HERE, NAME)
    for name in sorted(os.listdir(pkg)):
        if name.endswith(".py") or name == "py.typed":
            yield f"{NAME}/{name}", os.path.join(pkg, name)


def _write_wheel(directory: str, entries) -> str:
    wheel = f"{NAME}-{VERSION}-{TAG}.whl"
    info = f"{NAME}-{VERSION}.dist-info"
    records = []
    with zipfile.ZipFile(os.path.join(directory, wheel), "w", zipfile.ZIP_DEFLATED) as z:
        def add(arc: str, data: bytes) -> None:
            z.writestr(arc, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            records.append(f"{arc},sha256={digest},{len(data)}")
        for arc, data in entries:
            add(arc, data)
        add(f"{info}/METADATA", (METADATA + _readme()).encode())
        add(f"{info}/WHEEL", WHEEL.encode())
        records.append(f"{info}/RECORD,,")
        z.writestr(f"{info}/RECORD", "\n".join(records) + "\n")
    return wheel


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    entries = []
    for arc, path in _files():
        with open(path, "rb") as f:
            entries.append((arc, f.read()))
    return _write_wheel(wheel_directory, entries)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, [(f"{NAME}.pth", (HERE + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    base = f"{NAME}-{VERSION}"
    out = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, out), "w:gz") as t:
        for rel in ["pyproject.toml", "README.md", "_build/sluice_build.py"] + [a for a, _ in _files()]:
            t.add(os.path.join(HERE, rel), arcname=f"{base}/{rel}")
        pkg_info = (METADATA + _readme()).encode()
        ti = tarfile.TarInfo(f"{base}/PKG-INFO")
        ti.size = len(pkg_info)
        t.addfile(ti, io.BytesIO(pkg_info))
    return out

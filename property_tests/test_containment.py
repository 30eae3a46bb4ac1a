"""Invariant 9 (Containment): nothing a data file names is read from outside its dataset's root.

Hypothesis generates the names a hostile data file may hold for a file: paths with ``..``
segments anywhere (``/`` or ``\\`` separated), absolute paths outside the root, URLs
(``file://``, ``s3://``, ``file:/``) and drives, paths through a symbolic link leading out;
each is refused by :func:`fpipe.storage.paths.contained`, the one check every reader makes.
Names inside the root (relative, ``./`` segments, absolute inside it, through a link that stays
inside) are accepted, and lead where they say. Through a real reader (a JSONL table's media
column), a refused name is a ``BadSampleError`` naming the table, the row and the name, and no
file outside the root is opened; an accepted one gives the file's bytes.
"""

from __future__ import annotations

import builtins
import io
import json
import os
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fpipe.core.errors import BadSampleError
from fpipe.storage.paths import (
    PathEscapeError,
    allowed_folders,
    contained,
    contained_or_allowed,
)

SEGMENT = st.text(alphabet="ab._-", min_size=1, max_size=4).filter(lambda s: s not in (".", ".."))
RELATIVE = st.lists(SEGMENT, min_size=1, max_size=4)


@pytest.fixture(scope="module")
def place(tmp_path_factory):
    """``(root, outside)``: ``root/sub/`` with ``root/in`` a link to it (stays inside) and
    ``root/out`` a link to ``outside`` (leads out); ``outside/x`` and ``root/sub/x`` exist."""
    base = tmp_path_factory.mktemp("containment")
    root, outside = base / "root", base / "outside"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "x").write_bytes(b"secret")
    (root / "sub" / "x").write_bytes(b"inside")
    os.symlink(root / "sub", root / "in", target_is_directory=True)
    os.symlink(outside, root / "out", target_is_directory=True)
    return root, outside


@st.composite
def hostile(draw, root, outside) -> str:
    """A name of a file outside ``root``."""
    kind = draw(st.sampled_from(["dotdot", "absolute", "url", "link"]))
    parts = draw(RELATIVE)
    if kind == "dotdot":  # `..` anywhere, as many as wanted, either separator
        at = draw(st.integers(0, len(parts)))
        ups = draw(st.integers(1, 3))
        sep = draw(st.sampled_from(["/", "\\"]))
        return sep.join(parts[:at] + [".."] * ups + parts[at:])
    if kind == "absolute":
        return str(outside.joinpath(*parts)) if draw(st.booleans()) else "/" + "/".join(parts)
    if kind == "url":
        scheme = draw(st.sampled_from(["file://", "file:/", "s3://", "http://", "c:\\", "C:"]))
        return scheme + "/".join(parts)
    return "out/" + "/".join(parts)  # through a link leading out


@st.composite
def inside(draw, root) -> str:
    """A name of a file inside ``root``."""
    parts = draw(RELATIVE)
    kind = draw(st.sampled_from(["relative", "dotted", "absolute", "link"]))
    if kind == "dotted":
        return "./" + "/./".join(parts)
    if kind == "absolute":
        return str(root.joinpath(*parts))
    if kind == "link":
        return "in/" + "/".join(parts)  # through a link staying inside
    return "/".join(parts)


@given(data=st.data())
def test_names_leading_out_are_refused_and_names_inside_accepted(place, data):
    root, outside = place
    bad = data.draw(hostile(root, outside), "hostile")
    with pytest.raises(PathEscapeError) as e:
        contained(root, bad, where="t.jsonl", what="column 'image': path")
    assert e.value.name == bad and f"path {bad!r} leaves the dataset folder" in str(e.value)
    good = data.draw(inside(root), "inside")
    path = contained(root, good)
    real, base = os.path.realpath(path), os.path.realpath(root)
    assert real == base or real.startswith(base + os.sep)
    assert os.path.realpath(os.path.join(root, good)) == real  # where the name says


@given(data=st.data())
def test_a_recorded_folder_leading_out_needs_a_folder_the_user_allows(place, data):
    """A folder a data file names (a prepared table's media folder) is accepted outside the
    root only inside a folder the user allowed (then at its real path), and never as a URL
    or a drive."""
    root, outside = place
    bad = data.draw(hostile(root, outside), "hostile")
    pathlike = "\\" not in bad and not re.match(r"^[A-Za-z][\w+.-]*:/|^[A-Za-z]:", bad)
    real = os.path.realpath(os.path.join(root, bad))
    for folder in (None, root / "sub", outside, "/"):
        allowed = allowed_folders(folder)
        holds = [a for a in allowed if real == a or real.startswith(a.rstrip("/") + "/")]
        if pathlike and holds:
            assert contained_or_allowed(root, bad, allowed) == real
            continue
        with pytest.raises(PathEscapeError, match=f"the folder {re.escape(repr(bad))} leads"):
            contained_or_allowed(root, bad, allowed)
    good = data.draw(inside(root), "inside")
    assert contained_or_allowed(root, good, allowed_folders(outside)) == os.path.join(root, good)


@settings(max_examples=max(10, settings.default.max_examples // 4))  # a file per example
@given(data=st.data())
def test_a_reader_never_opens_a_name_leading_out(place, data, monkeypatch_module):
    from fpipe.storage import open_dataset

    root, outside = place
    bad = data.draw(hostile(root, outside), "hostile")
    table = root / "t.jsonl"
    rows = [{"image": "sub/x", "caption": "a"}, {"image": bad, "caption": "b"}]
    table.write_text("".join(json.dumps(r) + "\n" for r in rows))
    opened = monkeypatch_module
    opened.clear()
    ds = open_dataset(table, media_columns=["image"])
    assert ds.read(0)["image"] == b"inside"
    with pytest.raises(BadSampleError) as e:
        ds.read(1)
    assert e.value.path == str(table) and e.value.key == "t/1" and repr(bad) in e.value.reason
    base = os.path.realpath(root)  # the table and sub/x: nothing else, nothing outside
    assert opened and all(p.startswith(base + os.sep) for p in opened), opened


@pytest.fixture(scope="module")
def monkeypatch_module():
    """Real paths of the files opened for reading with ``open`` during the module's tests."""
    seen: list[str] = []
    real = builtins.open

    def spy(file, mode="r", *args, **kwargs):
        if isinstance(file, (str, bytes, os.PathLike)) and not set(mode) & set("wax"):
            seen.append(os.path.realpath(file))
        return real(file, mode, *args, **kwargs)

    mp = pytest.MonkeyPatch()
    mp.setattr(builtins, "open", spy)
    mp.setattr(io, "open", spy)
    yield seen
    mp.undo()

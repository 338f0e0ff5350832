"""rules/catalogue.json holds the catalogue's TOML files already parsed (catalogue.load_data): a file's copy there is
used only while the file's bytes are the ones it was made from; otherwise the TOML is parsed as it is now."""

from __future__ import annotations

import json
import shutil
import sys

import pytest

from neuron_migrate import catalogue
from neuron_migrate.catalogue import SNAPSHOT, CatalogueError, load_data, snapshot_text
from neuron_migrate.engine import store

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

PARSE = tomllib.loads  # what the tests expect; `parsed` spies on the calls that load_data makes
FOLDER = catalogue.data_dir()
NAMES = sorted(p.name for p in FOLDER.glob("*.toml"))
RULES = catalogue.catalogue()
SAMPLE = 'version = "2.11.1"\n\n[table]\nnames = ["a", "b"]\n'  # sample.toml, beside a copy of the catalogue


def _same(a: object, b: object) -> bool:
    """Equal, with the same types and the same key order all the way down (== alone ignores both: 1 == 1.0 == True,
    and tables compare as sets of keys)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(map(_same, a, b))
    return a == b


def _parse(path) -> dict:
    return PARSE(path.read_bytes().decode())


def _forget() -> None:
    catalogue.load_data.cache_clear()
    catalogue._snapshot.cache_clear()
    catalogue.catalogue.cache_clear()


@pytest.fixture
def parsed(monkeypatch):
    """The TOML texts `load_data` parses (rather than taking them from the snapshot)."""
    texts: list[str] = []
    monkeypatch.setattr(tomllib, "loads", lambda text: texts.append(text) or PARSE(text))
    return texts


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A copy of the catalogue folder plus sample.toml, with their snapshot, as the catalogue's folder."""
    copy = tmp_path / "rules"
    copy.mkdir()
    for name in NAMES:
        shutil.copy(FOLDER / name, copy / name)
    (copy / "sample.toml").write_text(SAMPLE)
    (copy / SNAPSHOT).write_text(snapshot_text(copy), encoding="utf-8")
    monkeypatch.setattr(store, "data_dir", lambda: str(copy))
    _forget()
    yield copy
    _forget()


def test_the_checked_in_snapshot_is_the_one_the_toml_files_give():
    in_step = (FOLDER / SNAPSHOT).read_text(encoding="utf-8") == snapshot_text(FOLDER)  # no 250 kB diff printed
    assert in_step, f"rules/{SNAPSHOT} is stale (a rules/*.toml file changed): run `{catalogue.WRITE_SNAPSHOT}`"


@pytest.mark.parametrize("name", NAMES)
def test_the_snapshot_holds_what_tomllib_gives(name):
    entry = json.loads((FOLDER / SNAPSHOT).read_bytes())["files"][name]
    assert _same(entry["data"], _parse(FOLDER / name))


def test_every_file_of_the_catalogue_is_taken_from_the_snapshot(parsed):
    _forget()
    try:
        for name in NAMES:
            assert _same(load_data(name), _parse(FOLDER / name)), name
    finally:
        _forget()
    assert parsed == []


def test_an_entry_made_from_the_same_bytes_is_used(folder, parsed):
    document = json.loads((folder / SNAPSHOT).read_bytes())
    document["files"]["sample.toml"]["data"] = {"from": "the snapshot"}
    (folder / SNAPSHOT).write_text(json.dumps(document))
    assert load_data("sample.toml") == {"from": "the snapshot"}  # what the spoiled snapshots below would give
    assert parsed == []


@pytest.mark.parametrize("edited", [
    pytest.param('version = "2.11.2"\n\n[table]\nnames = ["a", "b"]\n', id="same size"),
    pytest.param(SAMPLE + 'more = ["c"]\n', id="appended"),
    pytest.param('version = "2.11.1"\n', id="truncated"),
])
def test_a_file_edited_after_the_snapshot_is_parsed_as_it_is_now(folder, parsed, edited):
    (folder / "sample.toml").write_text(edited)
    assert _same(load_data("sample.toml"), PARSE(edited))
    assert _same(load_data("versions.toml"), _parse(folder / "versions.toml"))
    assert parsed == [edited]


def _without_sample(document: dict) -> str:
    del document["files"]["sample.toml"]
    return json.dumps(document)


def _respelled(key: str, value: object):
    def spoil(document: dict) -> str:
        document["files"]["sample.toml"][key] = value
        return json.dumps(document)
    return spoil


@pytest.mark.parametrize("spoil", [
    pytest.param(lambda document: json.dumps(document)[:-2], id="truncated JSON"),
    pytest.param(lambda document: json.dumps(document).replace('"files"', "files"), id="not JSON"),
    pytest.param(lambda document: "\udcff" + json.dumps(document), id="not UTF-8"),
    pytest.param(lambda document: json.dumps(list(document["files"].items())), id="an array"),
    pytest.param(lambda document: json.dumps({"files": list(document["files"].items())}), id="files not a table"),
    pytest.param(_without_sample, id="no entry for the file"),
    pytest.param(_respelled("digest", store.digest(b"another text")), id="wrong digest"),
    pytest.param(_respelled("size", len(SAMPLE) + 1), id="wrong size"),
    pytest.param(_respelled("data", [["from", "the snapshot"]]), id="data not a table"),
])
def test_a_spoiled_snapshot_is_not_used(folder, parsed, spoil):
    document = json.loads((folder / SNAPSHOT).read_bytes())
    document["files"]["sample.toml"]["data"] = {"from": "the snapshot"}
    (folder / SNAPSHOT).write_bytes(spoil(document).encode("utf-8", "surrogateescape"))
    assert _same(load_data("sample.toml"), PARSE(SAMPLE))
    assert parsed == [SAMPLE]


def test_without_a_snapshot_every_file_is_parsed(folder, parsed):
    (folder / SNAPSHOT).unlink()
    assert _same(load_data("sample.toml"), PARSE(SAMPLE))
    assert _same(load_data("core.toml"), _parse(folder / "core.toml"))
    assert parsed == [SAMPLE, (folder / "core.toml").read_text()]


def test_the_catalogue_is_the_same_and_its_errors_too(folder):
    assert catalogue.catalogue() == RULES  # its folder holds the snapshot; only the TOML files are rules
    with open(folder / "suppressions.toml", "a") as fh:
        fh.write('\n[[rule]]\ncode = "NM998"\nname = "added-after-the-snapshot"\n')
    _forget()
    with pytest.raises(CatalogueError, match="^suppressions.toml: rule NM998 lacks message, fix, link, summary, "
                                             "why, before, after$"):
        catalogue.catalogue()


def test_every_toml_type_json_holds_round_trips(tmp_path, monkeypatch):
    text = ('count = 3\nbig = 123456789012345678901234567890\nnegative = -0.0\nratio = 0.1\nexp = 6.02e23\n'
            'flag = false\none = 1\none_float = 1.0\nnested = [[1, "a"], [{ inline = true }]]\n'
            '"dotted.key" = "x"\nunicode = "→ é \\u0000"\n\n[[rows]]\nz = 1\na = 2\n\n[[rows]]\n')
    (tmp_path / "types.toml").write_text(text, encoding="utf-8")
    (tmp_path / SNAPSHOT).write_text(snapshot_text(tmp_path), encoding="utf-8")
    monkeypatch.setattr(store, "data_dir", lambda: str(tmp_path))
    monkeypatch.setattr(tomllib, "loads", None)  # load_data cannot parse: the snapshot is used
    _forget()
    try:
        assert _same(load_data("types.toml"), _parse(tmp_path / "types.toml"))
    finally:
        _forget()


@pytest.mark.parametrize("value, shown", [
    ("2024-01-31", "datetime.date(2024, 1, 31)"),
    ("07:32:00", "datetime.time(7, 32)"),
    ("2024-01-31T07:32:00", "datetime.datetime(2024, 1, 31, 7, 32)"),
    ("2024-01-31T07:32:00+01:00", "datetime.datetime(2024, 1, 31, 7, 32, tzinfo="),
    ("inf", "inf"),
    ("-inf", "-inf"),
    ("nan", "nan"),
])
def test_a_value_json_cannot_hold_is_refused(tmp_path, value, shown):
    (tmp_path / "dates.toml").write_text(f'[[release]]\nname = "2.28"\n\n[[release]]\nnotes = {{ since = {value} }}\n')
    with pytest.raises(CatalogueError) as raised:
        snapshot_text(tmp_path)
    assert str(raised.value).startswith(f"dates.toml: release[1].notes.since is {shown}")
    assert str(raised.value).endswith(f"which JSON does not hold as TOML does; {SNAPSHOT} was not written (write the "
                                      "value as a string, or teach catalogue.py to encode it)")


def test_write_snapshot_writes_it_the_same_each_time(folder, capsys):
    (folder / SNAPSHOT).unlink()
    assert catalogue.main(["--write-snapshot"]) == 0
    first = (folder / SNAPSHOT).read_bytes()
    assert catalogue.main(["--write-snapshot"]) == 0
    assert (folder / SNAPSHOT).read_bytes() == first
    assert first.decode() == snapshot_text(folder)
    assert first.count(b"\n") == len(NAMES) + 3  # the opening line, one line per file, the closing one
    assert capsys.readouterr().out == f"wrote {folder / SNAPSHOT}\n" * 2


def test_write_snapshot_refuses_a_date_and_writes_nothing(folder, capsys):
    (folder / SNAPSHOT).unlink()
    (folder / "sample.toml").write_text("since = 2024-01-31\n")
    assert catalogue.main(["--write-snapshot"]) == 1
    assert not (folder / SNAPSHOT).exists()
    assert capsys.readouterr().err.startswith("error: sample.toml: since is datetime.date(2024, 1, 31), which JSON")


def test_write_snapshot_needs_its_option(capsys):
    assert catalogue.main([]) == 2
    assert capsys.readouterr().err == f"usage: {catalogue.WRITE_SNAPSHOT}\n"

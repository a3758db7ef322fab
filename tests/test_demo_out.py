"""Attack 16 F8: ``demo --out .`` in a demo's folder emptied it (the marker with it), then failed with "error: .:
Invalid argument" (``rmtree`` cannot remove the working folder). The working folder and its parents are refused now,
in one line, before anything is deleted."""
from __future__ import annotations

import pytest


def _never(*args: object, **kwargs: object) -> None:
    raise AssertionError("the demo began its work in a folder it should have refused")


@pytest.mark.parametrize("out", [".", "..", "absolute"])
def test_demo_refuses_to_replace_the_folder_it_runs_in(tmp_path, run_cli, monkeypatch, out):
    fake = tmp_path / "fake"
    (fake / "sub").mkdir(parents=True)
    (fake / ".synthtrace-demo").write_text("made by synthtrace demo\n")
    (fake / "file.txt").write_text("keep\n")
    monkeypatch.chdir(fake if out != ".." else fake / "sub")
    monkeypatch.setattr("synthtrace.simulator.simulate_campaign", _never)
    code, _, err = run_cli("demo", "--out", fake if out == "absolute" else out, "--nights", "1")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "is the working folder or holds it" in err and "nothing was deleted" in err and "Invalid" not in err
    assert (fake / "file.txt").read_text() == "keep\n" and (fake / ".synthtrace-demo").is_file()
    assert (fake / "sub").is_dir()

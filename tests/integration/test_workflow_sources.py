"""The source files a workflow document names, looked up on disk (the rest of the document's
checks are pure: tests/unit/test_workflow.py)."""

from __future__ import annotations

from pathlib import Path

from simrun.workflow import parse_workflow, source_problems


def test_missing_source_files_are_reported(tmp_path: Path) -> None:
    """A source whose file does not exist, relative to the document, is named."""
    (tmp_path / "plate.json").write_text("{}")
    doc = parse_workflow("sources: {plate: plate.json, mesh: mesh.vtk}\ntasks: []\n")
    problems = source_problems(doc, tmp_path)
    assert [p.where() for p in problems] == ["sources.mesh"]
    assert "file not found" in problems[0].message

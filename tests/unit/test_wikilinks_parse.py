"""The wikilink reader (engine/cards/wikilinks.py) and the front-matter subset on malformed input (DT-8)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.cards import wikilinks
from engine.cli.importers import ImportFormatError, parse_markdown


def test_forms_obsidian_writes() -> None:
    body = (
        "[[Title]] [[Title|shown]] [[Other#Heading]] [[Folder/Deep.md#^block|x]] ![[Embedded note]]\n"
        "![[diagram.png]] [[paper.PDF]] [[Version 2.0]] [[Node.js]] [[#Local heading]] [[Title]]\n"
        "```\n[[In a fence]]\n```\nand `[[inline code]]`"
    )
    found = wikilinks.parse(body)
    assert found.notes == ["Title", "Other", "Folder/Deep.md", "Embedded note", "Version 2.0", "Node.js"]
    assert found.attachments == ["diagram.png", "paper.PDF"]


def test_name_variants() -> None:
    assert wikilinks.name_variants("Folder/Deep.md") == ["folder/deep.md", "folder/deep", "deep"]
    assert wikilinks.name_variants("长期记忆") == ["长期记忆"]


@given(st.text(max_size=400))
def test_parse_never_fails_and_names_are_bounded(text: str) -> None:
    found = wikilinks.parse(text)
    for name in found.notes + found.attachments:
        assert name and name == name.strip() and len(name) <= wikilinks.MAX_NAME
        assert "[" not in name and "]" not in name and "\n" not in name


@pytest.mark.parametrize(
    ("front", "expected"),
    [
        ("aliases: [a, \"b, c\", 'd''e']", {"aliases": '["a", "b, c", "d\'e"]'}),
        ('quote: "tab\\there \\u00e9"', {"quote": "tab\there é"}),
        ("empty_list:\n- x\n-\n- y", {"empty_list": "x, y"}),
    ],
)
def test_front_matter_values(front: str, expected: dict[str, str]) -> None:
    assert parse_markdown(f"---\n{front}\n---\nb", "x.md", "f")["meta"] == expected


@pytest.mark.parametrize(
    "front",
    [
        "k: |\n  block",
        "k: >\n  folded",
        "k: &anchor v",
        "k: *anchor",
        "k: {a: 1}",
        'k: "not closed',
        "k: 'not closed",
        "k: [a, [b]]",
        'k: [a, "b]',
        "k: 1\nk: 2",
        'k: "bad \\q escape"',
        "  indented: v",
    ],
)
def test_front_matter_refuses_what_it_does_not_know(front: str) -> None:
    """API-8: refused with the file and line named, never guessed."""
    with pytest.raises(ImportFormatError, match=r"x\.md: line \d+"):
        parse_markdown(f"---\n{front}\n---\nbody", "x.md", "f")


_values = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=40)


@given(
    st.dictionaries(st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True), _values, max_size=5), st.lists(_values, max_size=4)
)
def test_front_matter_reads_back_what_export_writes(meta: dict[str, str], items: list[str]) -> None:
    """Values written as JSON strings (what `export --format markdown` writes) read back exactly."""
    meta.pop("title", None), meta.pop("tags", None), meta.pop("tag", None)
    lines = [f"{k}: {json.dumps(v, ensure_ascii=False)}" for k, v in meta.items()]
    kept = [i for i in items if i.strip()]
    if kept:
        lines.append("zz_list: [" + ", ".join(json.dumps(i, ensure_ascii=False) for i in kept) + "]")
    parsed = parse_markdown("---\n" + "\n".join(lines) + "\n---\nbody", "x.md", "f")["meta"]
    assert {k: parsed[k] for k in meta} == meta
    if kept:
        got = parsed["zz_list"]  # quoted items keep their spaces, as YAML quotes do
        assert (json.loads(got) if any("," in i for i in kept) else got.split(", ")) == kept

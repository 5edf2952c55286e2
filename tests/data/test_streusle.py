"""STREUSLE CoNLL-U-Lex reader: fixture of real sentences (+ one with an empty node) and the real dev/test files."""

from __future__ import annotations

from pathlib import Path

import pytest

from probing.data.sources import StreusleSource, packaged_streusle_paths
from probing.data.splits import split_summary
from probing.data.streusle import NOTE_OTHER_CASE, NOUN_SUPERSENSES, SKIP_VERB, VERB_SUPERSENSES, read_streusle
from probing.errors import ConfigError, DataFormatError
from tests.helpers import FIXTURES

FIXTURE = FIXTURES / "data" / "streusle" / "mini.conllulex"
TOKEN_LINE = "\t".join(
    ["1", "cars", "car", "NOUN", "NNS", "Number=Plur", "0", "root", "0:root", "_", "_", "N", "car", "n.ARTIFACT"]
    + ["_", "_", "_", "_", "O-N-n.ARTIFACT"]
)


def test_class_inventories():
    assert len(NOUN_SUPERSENSES) == 26 and NOUN_SUPERSENSES[0] == "n.ACT" and NOUN_SUPERSENSES[-1] == "n.TIME"
    assert len(VERB_SUPERSENSES) == 15 and "v.stative" in VERB_SUPERSENSES


def test_noun_records_words_classes_and_targets():
    records, skips = read_streusle([FIXTURE])
    assert [(r.word, r.sclass) for r in records] == [
        ("buyer", "n.PERSON"),
        ("car", "n.ARTIFACT"),
        ("bisla_'s", "n.GROUP"),
        ("phone_call_return", "n.COMMUNICATION"),
        ("repair", "n.ACT"),
        ("week", "n.TIME"),
        ("pizza", "n.FOOD"),
        ("paris", "n.LOCATION"),
        ("night", "n.TIME"),
    ]
    assert skips.counts == {"verb supersense (include_verbs=False)": 10, "supersense '??' (annotator unsure)": 1}
    assert records[0].tokens == ("Buyer", "Beware", "!!") and records[0].target == (0,)
    assert records[1].target == (4,)


def test_strong_mwe_target_covers_its_group_around_a_multiword_token_line():
    records, _ = read_streusle([FIXTURE])
    phone = records[3]
    assert len(phone.tokens) == 18  # the "3-4 weren't" line is not a token, its parts are
    assert phone.tokens[:5] == ("Phone", "calls", "were", "n't", "returned")
    assert phone.target == (0, 1, 4)  # non-contiguous strong MWE "phone call return"
    bisla = records[2]
    assert bisla.tokens == ("it", "is", "now", "bisla", "s", ".") and bisla.target == (3, 4)


def test_empty_nodes_are_not_tokens():
    records, _ = read_streusle([FIXTURE])
    pizza = records[6]
    assert pizza.tokens == ("We", "ate", "pizza", "in", "Paris", "at", "night", ".")
    assert pizza.target == (2,)
    pizza_line = next(n for n, line in enumerate(FIXTURE.read_text().splitlines(), 1) if line.startswith("3\tpizza"))
    assert pizza.source == f"{FIXTURE}:{pizza_line}"


def test_verbs_included_on_request():
    records, skips = read_streusle([FIXTURE], include_verbs=True)
    verbs = [(r.word, r.sclass, r.target) for r in records if r.sclass.startswith("v.")]
    assert len(records) == 19 and len(verbs) == 10
    assert ("rust_out", "v.stative", (0, 1)) in verbs
    assert ("save_trip", "v.social", (0, 3)) in verbs
    assert skips.counts == {"supersense '??' (annotator unsure)": 1}


def write_sentence(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "bad.conllulex"
    path.write_text("# sent_id = x\n" + "\n".join(lines) + "\n\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "line, problem",
    [
        ("\t".join(TOKEN_LINE.split("\t")[:18]), "expected 19 tab-separated columns, got 18"),
        (TOKEN_LINE.replace("1\tcars", "one\tcars", 1), "token ID 'one' is not an integer"),
        (TOKEN_LINE.replace("\tn.ARTIFACT\t", "\tn.VEHICLE\t"), "unknown supersense 'n.VEHICLE'"),
        (TOKEN_LINE.replace("\tn.ARTIFACT\t", "\tv.dance\t"), "unknown supersense 'v.dance'"),
        (TOKEN_LINE.replace("\t_\tN\t", "\t1\tN\t"), "SMWE '1' is not 'group:position'"),
    ],
)
def test_format_errors_name_the_line(tmp_path, line, problem):
    path = write_sentence(tmp_path, TOKEN_LINE, line)
    with pytest.raises(DataFormatError) as caught:
        read_streusle([path])
    assert caught.value.line == 3
    assert problem in caught.value.problem


def test_source_end_to_end_on_fixture():
    data = StreusleSource([str(FIXTURE)], split={"seed": 0, "test_fraction": 0.25, "dev_fraction": 0.0}).load()
    assert data.name == "streusle"
    assert data.classes == list(NOUN_SUPERSENSES)
    assert data.files == [FIXTURE]
    summary = split_summary(data.splits)
    assert summary["test"]["words"] == 2  # round(0.25 * 9 words)
    assert summary["train"]["words"] == 7 and summary["dev"]["contexts"] == 0
    assert summary["train"]["contexts"] + summary["test"]["contexts"] == 9


def test_source_with_verbs_has_41_classes():
    data = StreusleSource([str(FIXTURE)], include_verbs=True).load()
    assert len(data.classes) == 41
    assert sum(len(r) for r in data.splits.values()) == 19


def test_packaged_paths_point_into_the_package():
    paths = packaged_streusle_paths()
    assert [p.name for p in paths] == ["streusle.ud_dev.conllulex", "streusle.ud_test.conllulex"]
    assert all(p.parent.parts[-3:] == ("probing", "resources", "streusle") for p in paths)


@pytest.mark.shared_data
def test_real_files_have_about_a_thousand_noun_units_each(shared_data):
    folder = shared_data / "streusle"
    dev, _ = read_streusle([folder / "streusle.ud_dev.conllulex"])
    test, _ = read_streusle([folder / "streusle.ud_test.conllulex"])
    assert (len(dev), len(test)) == (1040, 986)
    paths = [folder / "streusle.ud_dev.conllulex", folder / "streusle.ud_test.conllulex"]
    both, _ = read_streusle(paths, include_verbs=True)
    assert len(both) == 1040 + 986 + 660 + 697
    assert {r.sclass for r in both} <= set(NOUN_SUPERSENSES + VERB_SUPERSENSES)


def test_empty_sentence_is_a_counted_skip(tmp_path):
    from probing.data.streusle import SKIP_EMPTY_SENTENCE

    token = "1\tcars\tcar\tNOUN\tNNS\t_\t0\troot\t0:root\t_\t_\tN\tcar\tn.ARTIFACT\t_\t_\t_\t_\tO-N-n.ARTIFACT"
    path = tmp_path / "empty.conllulex"
    path.write_text(f"# sent_id = a\n# text =\n\n# sent_id = b\n{token}\n\n# sent_id = c\n", encoding="utf-8")
    records, skips = read_streusle([path])
    assert [r.word for r in records] == ["car"]
    assert skips.counts[SKIP_EMPTY_SENTENCE] == 2
    assert skips.examples[SKIP_EMPTY_SENTENCE] == f"{path}:1"


def token_line(token_id: int, form: str, lemma: str, supersense: str) -> str:
    columns = TOKEN_LINE.split("\t")
    columns[0], columns[1], columns[2], columns[12], columns[13] = str(token_id), form, lemma, lemma, supersense
    return "\t".join(columns)


@pytest.mark.parametrize("value", ["no", "false", 1, 0, None])
def test_include_verbs_accepts_only_a_boolean(value):
    with pytest.raises(ConfigError) as caught:
        StreusleSource([str(FIXTURE)], include_verbs=value)
    assert "include_verbs must be true or false" in str(caught.value)
    assert str(caught.value).endswith("Fix: include_verbs=true or include_verbs=false")


def test_supersense_in_another_case_is_read_as_its_canonical_class_and_counted(tmp_path):
    lines = [token_line(1, "idea", "idea", "N.COGNITION"), token_line(2, "thought", "thought", "n.cognition"),
             token_line(3, "walk", "walk", "V.BODY"), token_line(4, "car", "car", "n.ARTIFACT")]
    path = write_sentence(tmp_path, *lines)
    records, skips = read_streusle([path], include_verbs=True)
    assert [(r.word, r.sclass) for r in records] == [
        ("idea", "n.COGNITION"), ("thought", "n.COGNITION"), ("walk", "v.body"), ("car", "n.ARTIFACT")]
    assert skips.counts == {NOTE_OTHER_CASE: 3}
    assert skips.examples[NOTE_OTHER_CASE] == f"{path}:2"
    nouns, skips = read_streusle([path])
    assert [r.sclass for r in nouns] == ["n.COGNITION", "n.COGNITION", "n.ARTIFACT"]
    assert skips.counts == {NOTE_OTHER_CASE: 3, SKIP_VERB: 1}  # V.BODY: read as v.body, then skipped as a verb


@pytest.mark.parametrize("supersense", ["N.VEHICLE", "V.Dance"])
def test_unknown_supersense_in_another_case_is_still_an_error(tmp_path, supersense):
    path = write_sentence(tmp_path, token_line(1, "car", "car", supersense))
    with pytest.raises(DataFormatError, match=f":2: unknown supersense '{supersense}'"):
        read_streusle([path])


def test_a_single_path_string_is_one_file():
    data = StreusleSource(str(FIXTURE), split={"seed": 0}).load()
    assert data.files == [FIXTURE]
    assert sum(len(records) for records in data.splits.values()) == 9


def test_an_empty_path_list_is_a_config_error():
    with pytest.raises(ConfigError, match=r"^paths must be a path or a non-empty list"):
        StreusleSource([])


@pytest.mark.parametrize("text", ["", "\n\n", "# sent_id = a\n# text =\n\n# sent_id = b\n"])
def test_a_file_without_token_lines_is_refused_by_name(tmp_path, text):
    empty = tmp_path / "empty.conllulex"
    empty.write_text(text, encoding="utf-8")
    with pytest.raises(DataFormatError) as caught:
        read_streusle([FIXTURE, empty])
    assert caught.value.path == str(empty) and caught.value.line is None
    assert "no token lines" in caught.value.problem and "data.source.paths" in caught.value.fix
    with pytest.raises(DataFormatError, match="empty.conllulex: no token lines"):
        StreusleSource([str(FIXTURE), str(empty)]).load()


def test_a_source_whose_units_are_all_skipped_names_its_files_and_the_skips(tmp_path):
    path = write_sentence(tmp_path, token_line(1, "walk", "walk", "v.body"), token_line(2, "run", "run", "v.motion"))
    with pytest.raises(DataFormatError) as caught:
        StreusleSource([str(path)]).load()
    assert caught.value.path == str(path)
    assert "no records" in caught.value.problem and f"2 {SKIP_VERB}" in caught.value.problem
    assert "data.source.include_verbs=true" in caught.value.fix


def test_a_file_with_one_word_cannot_fill_the_test_split(tmp_path):
    path = write_sentence(tmp_path, TOKEN_LINE)
    with pytest.raises(ConfigError) as caught:
        StreusleSource([str(path)]).load()
    message = str(caught.value)
    assert "test split is empty" in message and " split.test_fraction=0.2 " in message
    assert str(path) in message and "Fix:" in message

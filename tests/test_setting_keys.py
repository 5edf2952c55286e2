"""A ConfigError names the settings it refuses by argument name; `probing.config.build` writes the user's key path."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from probing.config import build, keyed, keyed_errors, setting_key
from probing.data.splits import SplitConfig
from probing.errors import ConfigError, setting, settings_under
from probing.tasks.settings import with_data_settings
from tests.data.test_streusle import TOKEN_LINE, write_sentence
from tests.helpers import CONFIG_DIR
from tests.helpers.runs import compose_job, tiny_model


def refuse(seed: object = 0) -> None:
    raise ConfigError(f"{setting('seed')}={seed!r} is not an integer. Fix: {setting('seed')}=0")


def split_of(split: dict) -> SplitConfig:
    with settings_under("split"):
        return SplitConfig.from_any(split)


def test_built_in_python_the_message_names_the_argument():
    with pytest.raises(ConfigError) as raised:
        SplitConfig(seed="x")
    assert str(raised.value) == "seed must be an integer, got 'x'. Fix: seed=0"
    assert raised.value.settings == ("seed",)


def test_an_object_built_from_an_argument_names_it_under_that_argument():
    with pytest.raises(ConfigError) as raised:
        split_of({"seed": "x"})
    assert str(raised.value) == "split.seed must be an integer, got 'x'. Fix: split.seed=0"


def test_build_writes_the_key_path_of_the_node():
    node = OmegaConf.create({"source": {"_target_": f"{__name__}.refuse", "seed": "x"}})
    with pytest.raises(ConfigError) as raised:
        build(node.source, "source")
    assert str(raised.value) == "source.seed='x' is not an integer. Fix: source.seed=0"
    assert raised.value.settings == ()


def test_build_follows_an_interpolation_to_the_key_the_user_sets():
    source = {"_target_": f"{__name__}.split_of", "split": "${data.split}"}
    node = OmegaConf.create({"seed": "x", "data": {"split": {"seed": "x"}, "source": source},
                             "other": {"_target_": f"{__name__}.refuse", "seed": "${seed}"}})
    expected = r"^data\.split\.seed must be an integer, got 'x'\. Fix: data\.split\.seed=0$"
    with pytest.raises(ConfigError, match=expected):
        build(node.data.source, "data.source")
    with pytest.raises(ConfigError, match=r"^seed='x' is not an integer\. Fix: seed=0$"):
        build(node.other, "other")


def test_build_names_the_nested_node_that_refused():
    node = OmegaConf.create({"outer": {"_target_": "builtins.dict", "inner": {"_target_": f"{__name__}.refuse",
                                                                                "seed": "x"}}})
    with pytest.raises(ConfigError, match=r"^outer\.inner\.seed='x'"):
        build(node.outer, "outer")


def test_an_argument_the_job_passes_is_followed_from_the_key_it_comes_from():
    node = OmegaConf.create({"data": {"split": {"seed": "x"}, "source": {"split": "${data.split}"}},
                             "job": {"_target_": f"{__name__}.refuse"}})
    error = ConfigError(f"{setting('source.split.seed')}='x'. Fix: {setting('seed')}=0")
    assert str(keyed(error, node.job, "job", settings_from={"source": "data.source", "seed": "seed"})) == \
        "data.split.seed='x'. Fix: seed=0"
    with pytest.raises(ConfigError, match=r"^data\.split\.seed='x'"), keyed_errors(node.job, "job",
                                                                                {"source": "data.source"}):
        raise error


def test_setting_key_without_a_node_is_the_key_and_the_name():
    assert setting_key(None, "erase.eraser", "rank") == "erase.eraser.rank"


@pytest.mark.parametrize("overrides, message", [
    (["data.split.seed=x"], "data.split.seed must be an integer, got 'x'. Fix: data.split.seed=0"),
    (["data=conll2003", "data.split.dev_fraction=2"], "data.split.dev_fraction must be in [0, 1), got 2. Fix: "
                                                      "data.split.dev_fraction=0.2"),
    (["task=feats", "task.feature=null"], "task.feature=None is not a feature name, and column=feats needs one. Fix: "
                                          "task.feature=Number (a name of the FEATS column)"),
    (["task=feats", "data.source.column=upos"], "task.feature='Number' only applies to data.source.column=feats, not "
                                                "'upos'. Fix: data.source.column=feats, or task.feature=null"),
    (["task=jsonl"], "task.path is not set. Fix: task.path=/path/to/folder (train.jsonl, dev.jsonl, test.jsonl) or "
                     "task.path=/path/to/task.jsonl (a \"split\" on every line)"),
    (["task=pos", "data.source.format=ptb"], "data.source.paths is not set for format=ptb. Fix: "
                                             "data.source.paths=[DIR_OR_ZIP], e.g. nltk_data/corpora/treebank.zip"),
    (["task=ner", "+data.source.hub_name=''"], "data.source.hub_name='' is not a dataset name. "
                                               "Fix: data.source.hub_name=conll2003"),
    (["task=supersense", "data.source.dev_fraction=0.5", "data.source.test_fraction=0.5"],
     "data.source.dev_fraction + data.source.test_fraction = 1 leaves no training data. Fix: "
     "data.source.dev_fraction=0.2 data.source.test_fraction=0.2"),
])
def test_a_source_built_from_probe_py_names_the_keys_the_user_sets(overrides, message):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("probe", overrides=overrides)
    with pytest.raises(ConfigError) as raised:
        build(with_data_settings(cfg).data.source, "data.source")  # as the job builds it
    assert str(raised.value) == message


@pytest.mark.parametrize("overrides, message", [
    (["analysis=amnesic", "+erase.path=README.md"],
     "erase.path=README.md: analysis=amnesic fits its eraser on the analysed model's own hidden state. Fix: "
     "erase.path=null"),
    (["analysis=amnesic", "analysis.control_seeds=3"],
     "analysis.control_seeds=3 is not a list of seeds. Fix: analysis.control_seeds=[0,1,2]"),
    (["analysis=amnesic", "analysis.control_seeds=[a]"],
     "analysis.control_seeds='a' is not an integer. Fix: set analysis.control_seeds to an integer"),
    (["analysis=contextuality", "analysis/sentences=sts", "analysis.sentences.data_dir=null"],
     "analysis.sentences.data_dir is not set: the STS data is not bundled (per-source licences). Fix: "
     "analysis.sentences.data_dir=/path/to/sts (or STS_DIR), or the bundled sentences with analysis/sentences=pos"),
    (["analysis=isotropy", "analysis.name=contextuality"], "analysis.name='contextuality' is no analysis of Isotropy, "
     "whose runs are named 'isotropy' in results and reports. Fix: choose an analysis with analysis=<name> "
     "(conf/analysis/<name>.yaml) and leave analysis.name as it is"),
])
def test_an_analysis_names_the_keys_of_analyze_py(overrides, message):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("analyze", overrides=overrides)
    with pytest.raises(ConfigError) as raised:
        build(cfg.analysis, "analysis", _recursive_=False)
    assert str(raised.value) == message


def test_a_partial_names_the_keys_when_its_object_is_made():
    node = OmegaConf.create({"window": "x", "module": {"_target_": f"{__name__}.refuse", "_partial_": True,
                                                       "seed": "${window}"}})
    make = build(node.module, "module")
    with pytest.raises(ConfigError, match=r"^window='x' is not an integer\. Fix: window=0$"):
        make()


ONE_LABEL = "task.feature=Poss: the training split has only the label 'Yes'"


@pytest.mark.parametrize("job, overrides", [
    ("probe", ["logger=csv"]), ("extract", []), ("analyze", ["analysis=neurons", "layer=1"])])
def test_what_a_source_refuses_while_it_reads_names_the_keys_of_each_job(tmp_path, job, overrides):
    """The bundled EWT sample's Poss feature has one value: its source refuses it by its argument `feature`, read
    under each job's `data.source`, whose feature is task.feature. Refused from the data alone (the model path
    does not exist)."""
    from probing.tasks import analyze, extract, probe
    run = {"probe": probe.run, "extract": extract.run, "analyze": analyze.run}[job]
    cfg = compose_job(job, tmp_path, "task=feats", "task.feature=Poss", f"model.name_or_path={tmp_path / 'no-model'}",
                      *overrides)
    with pytest.raises(ConfigError) as raised:
        run(cfg)
    assert str(raised.value).startswith(ONE_LABEL)


@pytest.mark.parametrize("job", ["probe", "extract"])
def test_a_split_that_its_settings_leave_empty_is_named_by_the_keys_of_each_job(tmp_path, tiny_bert_path, job):
    """make_splits names its own arguments, the source names them as its `split`, and each job as `data.split`,
    where the source's split comes from (conf/data/streusle.yaml)."""
    from probing.tasks import extract, probe
    path = write_sentence(tmp_path, TOKEN_LINE)  # one word: 0.2 of it rounds to no test word
    model = [override for override in tiny_model(tiny_bert_path) if job == "probe" or "logger" not in override]
    cfg = compose_job(job, tmp_path, *model, *(["layer=1"] if job == "probe" else []), f"data.source.paths=[{path}]")
    with pytest.raises(ConfigError) as raised:
        (probe.run if job == "probe" else extract.run)(cfg)
    assert str(raised.value) == ("the test split is empty: data.split.test_fraction=0.2 of 1 words rounds to 0 test "
                                 f"words (from {path}). Fix: use more data, or raise data.split.test_fraction")


def test_a_source_that_reads_no_word_task_is_named_as_the_probing_s_source(tmp_path):
    """read_word_task names the paths of its argument `source`; where probe.py's probing reads it, that is
    data.source."""
    from probing.data.word_tasks import read_word_task
    from probing.tasks.probe import PROBING_KEYS

    expected = ("data=ewt is not the data of a word task. Fix: leave data= out, as each word task reads its own data "
                "({}=... for other files)")
    with pytest.raises(ConfigError) as raised:
        read_word_task(object(), "ewt")
    assert str(raised.value) == expected.format("source.paths")
    cfg = compose_job("probe", tmp_path, "task=upos")
    with pytest.raises(ConfigError) as raised, keyed_errors(cfg.probing, "probing", PROBING_KEYS):
        read_word_task(object(), "ewt")
    assert str(raised.value) == expected.format("data.source.paths")

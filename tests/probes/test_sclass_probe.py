"""SClassProbe: trains with a real Lightning Trainer and separates a toy s-class problem."""

from __future__ import annotations

import json
from functools import partial

import lightning
import numpy as np
import pytest
import torch
from safetensors import safe_open
from torch.nn import functional as F
from torch.utils.data import DataLoader

from probing.errors import ConfigError, ProbingError
from probing.probes import controls
from probing.probes.bits.parts import OnlineCodePart
from probing.probes.bits.prefix_probes import PrefixProbes
from probing.probes.saved import save_probes
from probing.probes.sclass_probe import SClassProbe

CLASSES = ["food", "art", "location", "organization"]
DIM = 16


def prefix_probes(module) -> PrefixProbes:
    """The MDL prefix probes of a module with the online code."""
    return module.parts[OnlineCodePart.NAME].probes


def adam(**options):
    return partial(torch.optim.Adam, **options)


def toy_split(first_word: int, words_per_class: int, seed: int) -> list[dict]:
    """Contexts of word-s-class combinations; every class is a Gaussian cluster far from the others.

    Each class gets `words_per_class` words of its own plus one word shared with the next class, so some
    words occur in two combinations. Word (and combination) ids start at `first_word`: splits built with
    disjoint ranges are word-disjoint.
    """
    generator = torch.Generator().manual_seed(seed)
    centres = 6.0 * torch.eye(len(CLASSES), DIM)
    combinations = []
    word = first_word
    for k in range(len(CLASSES)):
        combinations += [(word + i, k) for i in range(words_per_class)]
        shared = word + words_per_class
        combinations += [(shared, k), (shared, (k + 1) % len(CLASSES))]
        word += words_per_class + 1
    contexts = []
    for combination_id, (_word, label) in enumerate(combinations, start=first_word * 10):
        n_contexts = int(torch.randint(1, 6, (1,), generator=generator))
        features = centres[label] + torch.randn(n_contexts, DIM, generator=generator)
        contexts += [{"features": f, "label": label, "combination": combination_id} for f in features]
    return contexts


def loader(contexts: list[dict], shuffle: bool = False) -> DataLoader:
    return DataLoader(contexts, batch_size=32, shuffle=shuffle)


def trainer(max_epochs: int, precision: str = "32-true") -> lightning.Trainer:
    return lightning.Trainer(
        max_epochs=max_epochs, accelerator="cpu", precision=precision, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False,
    )


@pytest.fixture(scope="module")
def splits():
    return {"train": toy_split(0, 6, seed=0), "dev": toy_split(100, 3, seed=1), "test": toy_split(200, 3, seed=2)}


def test_probe_separates_word_disjoint_toy_classes(splits):
    lightning.seed_everything(0, verbose=False)
    model = SClassProbe.from_settings(input_dim=DIM, labels=CLASSES, hidden_dim=32, optimizer=adam(lr=1e-2))
    run = trainer(max_epochs=10)

    run.validate(model, loader(splits["dev"]), verbose=False)
    untrained = model.split_metrics["dev"]["micro_f1"]

    run.fit(model, loader(splits["train"], shuffle=True), loader(splits["dev"]))
    assert {"train/loss", "dev/micro_f1", "dev/context_accuracy"} <= set(run.callback_metrics)
    run.test(model, loader(splits["test"]), verbose=False)
    assert {"test/micro_f1", "test/context_accuracy"} <= set(run.callback_metrics)

    dev, test = model.split_metrics["dev"], model.split_metrics["test"]
    assert untrained < 0.6
    assert dev["micro_f1"] >= 0.99 and test["micro_f1"] >= 0.99
    assert dev["n_combinations"] == 4 * (3 + 2) and dev["n_contexts"] == len(splits["dev"])
    assert json.loads(json.dumps(model.split_metrics)) == model.split_metrics  # plain Python, ready for results.json


def test_bf16_mixed_trains_in_bf16_and_scores_like_float32(splits):
    """trainer.precision=bf16-mixed: the probes' products run in bfloat16 (autocast), the weights stay float32, and
    the toy is separated as well as in float32 (probe.py's note on an emulated bf16: tests/tasks/test_common.py)."""
    scores, dtypes = {}, set()
    for precision in ("32-true", "bf16-mixed"):
        lightning.seed_everything(0, verbose=False)
        model = SClassProbe.from_settings(input_dim=DIM, labels=CLASSES, hidden_dim=32, optimizer=adam(lr=1e-2))
        if precision == "bf16-mixed":
            model.probes.mlps.register_forward_hook(lambda module, args, output: dtypes.add(output.dtype))
        run = trainer(max_epochs=10, precision=precision)
        run.fit(model, loader(splits["train"], shuffle=True), loader(splits["dev"]))
        run.test(model, loader(splits["test"]), verbose=False)
        scores[precision] = model.split_metrics["test"]["micro_f1"]
        assert model.probes.mlps.w1.dtype == torch.float32
    assert dtypes == {torch.bfloat16}
    assert scores["bf16-mixed"] >= 0.99 and abs(scores["bf16-mixed"] - scores["32-true"]) <= 0.01


def test_loss_is_sum_of_each_probes_own_mean_cross_entropy():
    torch.manual_seed(0)
    model = SClassProbe.from_settings(input_dim=DIM, labels=CLASSES, hidden_dim=8)
    features, labels = torch.randn(5, DIM), torch.tensor([0, 2, 2, 3, 1])
    by_hand = sum(
        F.cross_entropy(model.probes.mlps.as_sequential(k)(features), (labels == k).long()) for k in range(len(CLASSES))
    )
    torch.testing.assert_close(model.probe_loss(model(features), model.one_hot(labels)), by_hand)


def test_training_with_the_one_reduction_loss_gives_the_weights_of_a_mean_per_probe():
    """The loss as one sum over all decisions divided by B against the earlier form, a mean per probe then their sum,
    each training a copy of the same probes with fused Adam on the same 30 batches: the backward of both gives every
    decision's cross-entropy the gradient 1/B, so the weights come out the same floats; the losses agree to float32
    rounding (the same terms summed in another order)."""
    torch.manual_seed(0)
    features, labels = torch.randn(300, DIM), torch.randint(len(CLASSES), (300,))
    model = SClassProbe.from_settings(input_dim=DIM, labels=CLASSES, hidden_dim=8)
    earlier = SClassProbe.from_settings(input_dim=DIM, labels=CLASSES, hidden_dim=8)
    earlier.load_state_dict(model.state_dict())
    initial = model.probes.mlps.w1.detach().clone()

    def mean_per_probe(logits, targets):
        per_example = F.cross_entropy(logits.flatten(0, 1), targets.long().flatten(), reduction="none")
        return per_example.view_as(targets).mean(dim=0).sum()

    optimizers = [model.configure_optimizers(), earlier.configure_optimizers()]
    for rows in torch.randperm(300, generator=torch.Generator().manual_seed(1)).split(10):
        targets = model.one_hot(labels[rows])
        losses = [model.probe_loss(model(features[rows]), targets), mean_per_probe(earlier(features[rows]), targets)]
        torch.testing.assert_close(losses[0], losses[1], rtol=1e-6, atol=0)
        for loss, optimizer in zip(losses, optimizers):
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    for (name, trained), reference in zip(model.probes.named_parameters(), earlier.probes.parameters()):
        assert torch.equal(trained, reference), name
    assert (model.probes.mlps.w1 - initial).abs().max() > 1e-3  # trained: 30 Adam steps of lr 1e-3 moved them


def test_predict_positive_prob_is_softmax_of_positive_logit():
    torch.manual_seed(0)
    model = SClassProbe.from_settings(input_dim=DIM, labels=CLASSES, hidden_dim=8)
    features = torch.randn(3, DIM)
    prob = model.predict_positive_prob(features)
    logits = model(features)
    assert prob.shape == (3, len(CLASSES))
    torch.testing.assert_close(prob, torch.sigmoid(logits[..., 1] - logits[..., 0]))


def with_control(contexts: list[dict], seed: int) -> list[dict]:
    """Each word gets a random control class (here the combination stands for the word), as probing.probes.controls
    does."""
    generator = torch.Generator().manual_seed(seed)
    classes: dict[int, int] = {}
    out = []
    for context in contexts:
        word = context["combination"]
        classes.setdefault(word, int(torch.randint(len(CLASSES), (1,), generator=generator)))
        out.append({**context, "control_label": classes[word], "control_combination": word})
    return out


def test_control_head_learns_alongside_and_selectivity_is_the_difference(splits):
    lightning.seed_everything(0, verbose=False)
    data = {name: with_control(contexts, seed) for seed, (name, contexts) in enumerate(splits.items())}
    model = SClassProbe.from_settings(input_dim=DIM, labels=CLASSES, hidden_dim=32, optimizer=adam(lr=1e-2),
                                      control=True)
    run = trainer(max_epochs=10)
    run.fit(model, loader(data["train"], shuffle=True), loader(data["dev"]))
    assert {"dev/control_micro_f1", "dev/selectivity"} <= set(run.callback_metrics)
    run.test(model, loader(data["test"]), verbose=False)
    test = model.split_metrics["test"]
    assert test["selectivity"] == pytest.approx(test["micro_f1"] - test["control_micro_f1"])
    assert test["selectivity_context_accuracy"] == pytest.approx(
        test["context_accuracy"] - test["control_context_accuracy"])
    # Unseen words' random classes cannot be read off the features: the control probes fail where the real succeed.
    assert test["micro_f1"] >= 0.99 and test["control_micro_f1"] < 0.5 and test["selectivity"] > 0.5
    # The heads share no parameter, and each has its own optimizer state.
    real, control = set(map(id, model.probes.parameters())), set(map(id, model.parts["control"].probes.parameters()))
    assert not real & control


def with_identity(contexts: list[dict], num_words: int) -> list[dict]:
    """Features gain a one-hot of the word (its combination id) for training words 0..num_words-1 and zeros for
    others: a representation from which a probe can memorise any property of a training word."""
    out = []
    for context in contexts:
        identity = torch.zeros(num_words)
        if context["combination"] < num_words:
            identity[context["combination"]] = 3.0
        out.append({**context, "features": torch.cat([context["features"], identity])})
    return out


def test_seen_split_selectivity_exposes_a_probe_that_memorises_words(splits):
    """Hewitt & Liang's reading: on contexts of training words the control probe memorises each word's random
    class, so selectivity there is low; on unseen (test) words it cannot, and the control score stays low."""
    lightning.seed_everything(0, verbose=False)
    num_words = len({c["combination"] for c in splits["train"]})
    data = {name: with_identity(with_control(contexts, seed), num_words)
            for seed, (name, contexts) in enumerate(splits.items())}
    held = controls.seen_rows(np.array([c["combination"] for c in data["train"]]), fraction=0.5, seed=0)
    train = [c for c, out in zip(data["train"], held) if not out]
    seen = [c for c, out in zip(data["train"], held) if out]
    model = SClassProbe.from_settings(input_dim=DIM + num_words, labels=CLASSES, hidden_dim=64, optimizer=adam(lr=1e-2),
                                      control=True)
    run = trainer(max_epochs=40)
    run.fit(model, loader(train, shuffle=True), loader(data["dev"]))
    run.test(model, [loader(data["test"]), loader(seen)], verbose=False)  # dataloader 1 is the seen split
    test, seen_scores = model.split_metrics["test"], model.split_metrics["seen"]
    assert seen_scores["n_contexts"] == len(seen) and test["n_contexts"] == len(data["test"])
    assert seen_scores["selectivity"] == pytest.approx(seen_scores["micro_f1"] - seen_scores["control_micro_f1"])
    assert test["micro_f1"] >= 0.95 and seen_scores["micro_f1"] >= 0.95
    assert seen_scores["control_micro_f1"] > 0.8 and test["control_micro_f1"] < 0.5
    assert seen_scores["selectivity"] < test["selectivity"] - 0.3
    assert {"seen/selectivity", "test/selectivity"} <= set(run.callback_metrics)


def layered(contexts: list[dict], signal_layer: int, num_layers: int, seed: int) -> list[dict]:
    """(num_layers, DIM) features per context: the class clusters at `signal_layer`, pure noise elsewhere."""
    generator = torch.Generator().manual_seed(seed)
    out = []
    for context in contexts:
        layers = 3.0 * torch.randn(num_layers, DIM, generator=generator)
        layers[signal_layer] = context["features"]
        out.append({**context, "features": layers})
    return out


def test_mix_learns_to_weight_the_informative_layer(splits):
    lightning.seed_everything(0, verbose=False)
    data = {name: layered(contexts, 2, 4, seed) for seed, (name, contexts) in enumerate(splits.items())}
    mix = {"l2_lambda": 0.0, "lr": 0.05}
    model = SClassProbe.from_settings(input_dim=DIM, labels=CLASSES, hidden_dim=32, optimizer=adam(lr=1e-2),
                                      num_layers=4, mix=mix)
    assert model.mix_summary()["mix_weights"] == pytest.approx([0.25] * 4)  # uniform before training
    run = trainer(max_epochs=15)
    run.fit(model, loader(data["train"], shuffle=True), loader(data["dev"]))
    summary = model.mix_summary()
    assert max(range(4), key=summary["mix_weights"].__getitem__) == 2
    assert summary["mix_weights"][2] > 0.4 and sum(summary["mix_weights"]) == pytest.approx(1.0)
    assert {f"mix/weight_{j}" for j in range(4)} | {"mix/gamma"} <= set(run.callback_metrics)


def test_mix_parameters_form_their_own_group_without_weight_decay():
    model = SClassProbe.from_settings(input_dim=DIM, labels=CLASSES, hidden_dim=8,
                                      optimizer=adam(lr=1e-3, weight_decay=0.1), num_layers=3,
                                      mix={"lr": 0.05, "l2_lambda": 0.5})
    groups = model.configure_optimizers().param_groups
    mix_group = next(g for g in groups if any(p is model.probes.mix.weights for p in g["params"]))
    assert mix_group["lr"] == 0.05 and mix_group["weight_decay"] == 0.0
    assert any(g["weight_decay"] == 0.1 and g["lr"] == 1e-3 for g in groups)
    with torch.no_grad():
        model.probes.mix.weights.copy_(torch.tensor([1.0, -2.0, 0.0]))
    assert float(model.probes.penalty()) == pytest.approx(0.5 * 5.0)  # lambda * sum w^2 on pre-softmax weights


def test_type_level_probe_scores_every_word_class_decision():
    """Words with several classes (Fig. 1): features are the sum of their class centres."""
    lightning.seed_everything(0, verbose=False)
    generator = torch.Generator().manual_seed(0)
    centres = 4.0 * torch.eye(len(CLASSES), DIM)

    def words(n: int) -> list[dict]:
        out = []
        for _ in range(n):
            targets = torch.rand(len(CLASSES), generator=generator) < 0.4
            features = targets.float() @ centres + 0.3 * torch.randn(DIM, generator=generator)
            out.append({"features": features, "targets": targets})
        return out

    model = SClassProbe.from_settings(input_dim=DIM, labels=CLASSES, hidden_dim=32, optimizer=adam(lr=1e-2),
                                      level="type")
    run = trainer(max_epochs=20)
    run.fit(model, loader(words(400), shuffle=True), loader(words(100)))
    test_words = words(100)
    run.test(model, loader(test_words), verbose=False)
    test = model.split_metrics["test"]
    assert test["micro_f1"] > 0.95
    assert test["n_contexts"] == 100 and test["n_combinations"] == int(sum(w["targets"].sum() for w in test_words))


def test_a_non_finite_loss_stops_training_with_a_clear_error(splits):
    """Broken features (a NaN in one training row) must stop the run, never end in a score."""
    broken = [dict(context) for context in splits["train"]]
    broken[3]["features"] = broken[3]["features"].clone()
    broken[3]["features"][0] = float("nan")
    model = SClassProbe.from_settings(input_dim=DIM, labels=CLASSES, hidden_dim=8)
    with pytest.raises(ProbingError, match="the training loss became nan at epoch 0"):
        trainer(max_epochs=2).fit(model, loader(broken), loader(splits["dev"]))
    assert "test" not in model.split_metrics


@pytest.mark.parametrize("settings,message", [
    ({"level": "words"}, r"^probe.level='words' is not one of context, type"),
    ({"hidden_dim": 0}, r"^hidden_dim=0 is not an integer >= 1"),  # the family's own arguments
    ({"dropout": 1.0}, r"^dropout=1.0 is not a number in \[0, 1\)"),
    ({"num_layers": 3, "mix": {"l2_lambda": -1.0}}, r"^probe.mix.l2_lambda=-1.0 is not a number"),
])
def test_the_constructor_refuses_bad_settings_naming_the_config_key(settings, message):
    with pytest.raises(ConfigError, match=message):
        SClassProbe.from_settings(input_dim=4, labels=["a", "b"], **settings)


def test_repeated_validation_passes_score_alike_and_keep_the_metric_state_size(splits):
    """Evaluation keeps no per-batch tensor: the dev metric's state is as large after three passes as after one."""
    lightning.seed_everything(0, verbose=False)
    data = with_control(splits["dev"], seed=1)
    model = SClassProbe.from_settings(input_dim=DIM, labels=CLASSES, hidden_dim=8, control=True)
    run = trainer(max_epochs=1)
    scores, sizes = [], []
    for _ in range(3):
        run.validate(model, loader(data), verbose=False)
        scores.append(model.split_metrics["dev"])
        metrics = (model.metrics["dev"], model.parts["control"].metrics["dev"])
        sizes.append(sum(t.nbytes for metric in metrics for t in metric.table))
    assert scores[0] == scores[1] == scores[2] and scores[0]["n_contexts"] == len(data)
    assert sizes[0] == sizes[1] == sizes[2] > 0


def test_the_online_code_of_the_sclass_task_sends_c_binary_decisions_per_context():
    # prefix probes whose output layer gives p(no) = 3/4, p(yes) = 1/4 whatever the input: a context of class k costs
    # -log2(1/4) for probe k and -log2(3/4) for each other probe; the first block costs one bit per decision
    c, n = 3, 8
    module = SClassProbe.from_settings(input_dim=DIM, labels=CLASSES[:c], hidden_dim=4, control=True,
                                       mdl_block_ends=[2, 4, 8])
    with torch.no_grad():
        for head in prefix_probes(module).heads:  # C task probes, then C control probes, of each prefix
            head.probes.w2.zero_()
            head.probes.b2.copy_(torch.tensor([np.log(3.0), 0.0]))
    label = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    data = [{"features": torch.randn(DIM), "label": label[i], "control_label": (label[i] + 1) % c,
             "order": torch.tensor(i)} for i in range(n)]
    result = module.codelength(DataLoader(data, batch_size=3, shuffle=True))
    per_context = -np.log2(0.25) - (c - 1) * np.log2(0.75)
    assert result["uniform_codelength_bits"] == pytest.approx(n * c)
    assert result["block_bits"] == pytest.approx([2 * per_context, 4 * per_context])
    assert result["codelength_bits"] == pytest.approx(2 * c + 6 * per_context)
    assert result["control_codelength_bits"] == pytest.approx(2 * c + 6 * per_context)
    assert result["compression"] == pytest.approx(n * c / (2 * c + 6 * per_context))
    assert len(result["prefix_best_epochs"]) == 2 and len(result["prefix_best_epochs"][0]) == c


def test_mdl_prefix_probes_train_beside_the_probes_and_are_not_saved(tmp_path):
    torch.manual_seed(0)
    module = SClassProbe.from_settings(input_dim=DIM, labels=CLASSES, hidden_dim=8, mdl_block_ends=[1, 3, 6])
    batch = {"features": torch.randn(6, DIM), "label": torch.tensor([0, 1, 2, 3, 0, 1]),
             "combination": torch.arange(6), "order": torch.arange(6)}
    module.training_step(batch, 0).backward()
    first_prefix = prefix_probes(module).heads[0].probes.w1.grad
    assert first_prefix is not None and first_prefix.shape[0] == len(CLASSES)
    with safe_open(str(save_probes(module, tmp_path / "probes.safetensors", {})), framework="pt") as saved:
        names = saved.keys()
    assert {name.split(".")[0] for name in names} == {"probes"}
    with pytest.raises(ProbingError, match="`order`"):
        module.training_step({key: value for key, value in batch.items() if key != "order"}, 0)

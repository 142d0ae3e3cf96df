"""train_small: a given tokenizer is reused unchanged, so a rerun reproduces the weights; the
data folder it needs is named when absent."""
from __future__ import annotations

import json

import pytest
from safetensors.torch import load_file

from dllm.api.model import default_model_path
from dllm.train.train_small import main
from tests.pb_data import require_data

TINY_RUN = ["--steps", "2", "--batch-size", "4", "--d-model", "32", "--n-layers", "1", "--n-heads", "2",
            "--mlp-hidden", "64", "--eval-every", "2", "--heldout-per-task", "1",
            "--tasks", "waiting_line/copy", "--threads", "1"]


def test_reused_tokenizer_keeps_its_ids_and_reruns_give_the_same_weights(tmp_path):
    data = require_data()
    shipped = default_model_path()
    runs = [tmp_path / "a", tmp_path / "b"]
    for out in runs:
        main(["--out", str(out), "--data", str(data), "--tokenizer", str(shipped), *TINY_RUN])
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (runs[0] / name).read_bytes() == (shipped / name).read_bytes()
    shipped_config = json.loads((shipped / "config.json").read_text())
    config = json.loads((runs[0] / "config.json").read_text())
    for key in ("vocab_size", "mask_token_id", "eos_token_id", "pad_token_id"):
        assert config[key] == shipped_config[key], key
    first, second = (load_file(str(out / "model.safetensors")) for out in runs)
    assert first.keys() == second.keys()
    assert all(first[k].equal(second[k]) for k in first)


def test_tokenizer_with_init_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path / "o"), "--init", str(default_model_path()),
              "--tokenizer", str(default_model_path())])
    assert "--init already brings its checkpoint's tokenizer and weights; drop --tokenizer" in capsys.readouterr().err


def test_missing_data_folder_is_named(tmp_path):
    with pytest.raises(SystemExit, match="no ParallelBench data at .*Pass --data DIR or set DLLM_PARALLELBENCH_DIR"):
        main(["--out", str(tmp_path / "o"), "--data", str(tmp_path / "absent"), *TINY_RUN])


def test_best_evaluation_is_kept_as_a_loadable_checkpoint(tmp_path):
    """``out/best`` holds the weights of the evaluation with the highest held-out mean, with
    the tokenizer and the step it came from, so a run that ends past its best loses nothing."""
    from dllm.models.loading import load_model

    out = tmp_path / "run"
    main(["--out", str(out), "--data", str(require_data()), "--tokenizer", str(default_model_path()),
          *TINY_RUN, "--steps", "4"])
    best = json.loads((out / "best" / "best.json").read_text())
    evals = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    evals = [r for r in evals if "eval" in r]
    assert [r["step"] for r in evals] == [2, 4]
    top = max(evals, key=lambda r: r["eval"]["mean"])  # the first of equal means
    assert best["step"] == top["step"] and best["mean"] == top["eval"]["mean"]
    assert load_model(out / "best") is not None
    if best["step"] == 4:  # the last evaluation won: best/ and the run's own checkpoint agree
        assert (out / "best" / "model.safetensors").read_bytes() == (out / "model.safetensors").read_bytes()


def test_name_part_masking_masks_one_half_of_every_name_in_chosen_rows():
    """Rate 1: on top of the i.i.d. mask, each row masks every first name or every last name of
    its answer; the prompt's names and every other token keep the i.i.d. mask."""
    import torch

    from dllm.models.tokenizer import load_tokenizer
    from dllm.train.corpus import TaskCorpus
    from dllm.train.train_small import make_batch, name_classes

    task = "waiting_line/shuffle"
    tokenizer = load_tokenizer(default_model_path())
    batches = []
    for name_parts in (None, "classes"):
        corpus = TaskCorpus(require_data(), seed=3, tasks=(task,))
        classes = name_classes(tokenizer, corpus)
        batches.append(make_batch(tokenizer, corpus, 16, torch.Generator().manual_seed(0), tokenizer.mask_token_id,
                                  None if name_parts is None else (classes, 1.0)))
    (_, _, _, ids, iid), (_, _, _, same_ids, masked) = batches
    assert torch.equal(ids, same_ids)  # the same rows and the same i.i.d. draw; only the extra masks differ
    firsts, lasts = (torch.isin(ids, c) for c in classes)
    answer = torch.zeros_like(iid)
    answer[:, -corpus.specs[task].max_tokens:] = True  # left-padded rows: every answer ends the row
    assert torch.equal(masked & ~((firsts | lasts) & answer), iid & ~((firsts | lasts) & answer))
    assert bool((masked | ~iid).all())  # nothing the i.i.d. mask hid is shown
    every_first = ((firsts & answer) & ~masked).sum(-1) == 0
    every_last = ((lasts & answer) & ~masked).sum(-1) == 0
    assert bool((every_first | every_last).all())
    assert bool((firsts & answer).any(-1).all())  # every answer names someone: the check is not empty
    assert bool((~every_first | ~every_last).any())  # not everything masked either way


def test_name_part_classes_last_masks_every_last_name_and_no_extra_first_name():
    import torch

    from dllm.models.tokenizer import load_tokenizer
    from dllm.train.corpus import TaskCorpus
    from dllm.train.train_small import make_batch, name_classes, name_part_option

    task = "waiting_line/shuffle"
    tokenizer = load_tokenizer(default_model_path())
    corpus = TaskCorpus(require_data(), seed=3, tasks=(task,))
    firsts_ids, lasts_ids = name_classes(tokenizer, corpus)
    assert name_part_option(tokenizer, corpus, 0.0, "last") is None
    option = name_part_option(tokenizer, corpus, 1.0, "last")
    _, _, _, ids, iid = make_batch(tokenizer, TaskCorpus(require_data(), seed=3, tasks=(task,)), 16,
                                   torch.Generator().manual_seed(0), tokenizer.mask_token_id)
    _, _, _, same_ids, masked = make_batch(tokenizer, corpus, 16, torch.Generator().manual_seed(0),
                                           tokenizer.mask_token_id, option)
    assert torch.equal(ids, same_ids)
    answer = torch.zeros_like(iid)
    answer[:, -corpus.specs[task].max_tokens:] = True
    lasts = torch.isin(ids, lasts_ids) & answer
    assert bool(lasts.any(-1).all()) and bool(masked[lasts].all())  # every answer's last names hidden
    assert torch.equal(masked & ~lasts, iid & ~lasts)  # first names and the rest: the i.i.d. mask only


def test_name_part_masking_rate_is_checked(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path / "o"), "--name-part-masking", "1.5", *TINY_RUN])
    assert "--name-part-masking 1.5: a share of rows, between 0 and 1" in capsys.readouterr().err


def test_fixed_pairs_draw_people_from_one_pairing_and_leave_the_default_stream_alone():
    """--fixed-pairs 1: every person of every waiting-line example has their first name's fixed
    last name (one distinct last name per first name); rate 0 draws exactly the stream of a
    corpus built without the option, so earlier recipes reproduce."""
    import json as json_

    from dllm.train.corpus import TaskCorpus, fixed_pair_names

    data = require_data()
    plain, zero = TaskCorpus(data, seed=9), TaskCorpus(data, seed=9, fixed_pairs=0.0)
    assert [plain.sample().answer for _ in range(40)] == [zero.sample().answer for _ in range(40)]
    paired = fixed_pair_names(plain.names)
    partner = dict(name.split(" ", 1) for name in paired)
    assert len(partner) == len(paired) and len(set(partner.values())) == len(paired)
    corpus = TaskCorpus(data, seed=9, tasks=("waiting_line/shuffle", "waiting_line/insert_random"), fixed_pairs=1.0)
    people = [name for _ in range(40) for name in json_.loads(corpus.sample().sample["input"]["context"])]
    assert all(partner[name.split(" ", 1)[0]] == name.split(" ", 1)[1] for name in people)
    assert len(set(people)) > 20


def test_fixed_pairs_rate_is_checked(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path / "o"), "--fixed-pairs", "-0.1", *TINY_RUN])
    assert "--fixed-pairs -0.1: a share of examples, between 0 and 1" in capsys.readouterr().err


def _weights(out):
    return load_file(str(out / "model.safetensors"))


def test_stop_after_writes_the_full_schedules_checkpoint_at_that_step(tmp_path):
    """A run stopped with --stop-after equals the same run's checkpoint at that step: same
    learning-rate schedule (that of --steps), so a curriculum stage can start from it."""
    data, shipped = str(require_data()), str(default_model_path())
    run = ["--data", data, "--tokenizer", shipped, *TINY_RUN, "--steps", "4", "--eval-every", "2"]
    main(["--out", str(tmp_path / "stopped"), *run, "--stop-after", "2"])
    logged = [json.loads(line) for line in (tmp_path / "stopped" / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in logged if "step" in r] == [1, 2]
    main(["--out", str(tmp_path / "short"), *run, "--steps", "2"])  # same steps, other schedule
    short = _weights(tmp_path / "short")
    stopped = _weights(tmp_path / "stopped")
    assert any(not stopped[k].equal(short[k]) for k in stopped)
    full_lrs = [r["lr"] for r in logged if "step" in r]
    main(["--out", str(tmp_path / "full"), *run])
    full = [json.loads(line) for line in (tmp_path / "full" / "train_log.jsonl").read_text().splitlines()]
    assert [r["lr"] for r in full if "step" in r][:2] == full_lrs


@pytest.mark.parametrize("stop", ["3", "5"])
def test_stop_after_must_be_an_evaluation_step_within_the_run(tmp_path, capsys, stop):
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path / "o"), *TINY_RUN, "--steps", "4", "--eval-every", "2", "--stop-after", stop])
    assert f"--stop-after {stop}: an evaluation step" in capsys.readouterr().err


def test_frozen_layers_keep_their_starting_weights_and_the_others_train(tmp_path):
    data, shipped = str(require_data()), str(default_model_path())
    start = tmp_path / "start"
    main(["--out", str(start), "--data", data, "--tokenizer", shipped, *TINY_RUN, "--n-layers", "2"])
    out = tmp_path / "frozen"
    main(["--out", str(out), "--data", data, "--init", str(start), *TINY_RUN, "--freeze-layers", "1"])
    before, after = _weights(start), _weights(out)
    frozen = [k for k in before if ".1." in k]
    assert frozen and all(before[k].equal(after[k]) for k in frozen)
    assert any(not before[k].equal(after[k]) for k in before if ".0." in k)


def test_freeze_layers_names_the_blocks_the_model_has(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path / "o"), "--data", str(require_data()), *TINY_RUN, "--freeze-layers", "1"])
    assert "--freeze-layers [1]: the model has blocks 0 to 0" in capsys.readouterr().err

"""PipelineRL (``async=pipeline_rl``, the default recipe) with several trainer ranks: rank 0
owns the generator processes and hands each rank its share of the scored batch
(``train/schedules/pipeline.py``). A rank's share by hand; what validation still refuses; the default
recipe through ``torchrun ... -m scalerl.sweep``. That N ranks with generators reproduce the
1-rank synchronous run (samples and weights), and resume exactly, is tested beside the other
rank-count equivalences in ``tests/test_distributed.py``."""
from __future__ import annotations

import json

import pytest
import torch
from helpers import ANSWERS_ONLY, read_rows, torchrun

from scalerl.config import ConfigError, check_ranks, compose, validate
from scalerl.config.derive import derive
from scalerl.generation import Generation
from scalerl.train.rollout import Rollout, rollout_share


def test_a_ranks_share_is_what_it_would_have_sampled_itself():
    # P=2 prompts, G=2: prompt 0 is [5, 6, 7], prompt 1 is [8], left-padded to width 3 (pad 0).
    # Completion lengths 3, 1 (prompt 0) and 2, 1 (prompt 1), right-padded to width 3.
    lengths = torch.tensor([3, 1, 2, 1])
    present = torch.arange(3)[None, :] < lengths[:, None]  # (4, 3)
    tokens = torch.tensor([[1, 2, 3], [4, 0, 0], [5, 6, 0], [7, 0, 0]])
    gen = Generation(tokens=tokens, logprobs=-tokens.float() * present, sampled=present.clone(), present=present,
                     truncated=torch.tensor([True, False, False, True]),
                     interrupted=torch.tensor([False, False, True, False]), version=torch.full((4, 3), 2) * present)
    ro = Rollout([11, 42], torch.tensor([[5, 6, 7], [0, 0, 8]]), torch.tensor([[1, 1, 1], [0, 0, 1]]), gen,
                 correct=torch.tensor([[1.0, 0.0], [0.0, 1.0]]), rewards=torch.tensor([[1.0, 0.0], [0.0, 0.9]]),
                 gen_tokens=4 + 7, flags={"timeout": torch.tensor([[0.0, 1.0], [1.0, 0.0]])})
    share = rollout_share(ro, slice(1, 2))  # rank 1 of 2
    assert share.prompt_index == [42]
    assert share.prompt_ids.tolist() == [[8]] and share.prompt_mask.tolist() == [[1]]  # its own left padding
    assert share.gen.tokens.tolist() == [[5, 6], [7, 0]]  # rows 2, 3, cut to the share's longest (2)
    assert share.gen.present.tolist() == [[True, True], [True, False]]
    assert share.gen.logprobs.tolist() == [[-5.0, -6.0], [-7.0, 0.0]]
    assert share.gen.version.tolist() == [[2, 2], [2, 0]]
    assert share.gen.truncated.tolist() == [False, True] and share.gen.interrupted.tolist() == [True, False]
    assert share.correct.tolist() == [[0.0, 1.0]] and share.rewards.tolist() == [[0.0, pytest.approx(0.9)]]
    assert share.flags["timeout"].tolist() == [[1.0, 0.0]]
    assert share.gen_tokens == 1 + 3  # its prompt once, then its 2 + 1 completion tokens
    first = rollout_share(ro, slice(0, 1))
    assert first.gen_tokens + share.gen_tokens == ro.gen_tokens  # the shares add up to the batch
    assert first.prompt_ids.tolist() == [[5, 6, 7]] and first.gen.tokens.shape == (2, 3)


def test_generators_with_several_ranks_validate_but_refills_and_tensor_parallel_do_not():
    assert derive(validate(compose([]), 2), 2).prompts_per_rank == validate(compose([])).batch.prompts // 2
    validate(compose(["async=pipeline_rl", "async.generators=2"]), world_size=4)
    validate(compose(["filter=dapo_dynamic"]))  # one rank refills
    with pytest.raises(ConfigError) as e:  # rank 0 would draw the refill prompts alone
        validate(compose(["filter=dapo_dynamic"]), world_size=2)
    assert e.value.key == "filter"
    with pytest.raises(ConfigError) as e:  # the rule holds for the ranks a run really got (torchrun)
        check_ranks(validate(compose(["batch.prompts=6"])), 4)
    assert e.value.key == "batch.prompts"
    with pytest.raises(ConfigError) as e:  # a generator process drives one device
        validate(compose(["generation=vllm", "generation.tensor_parallel_size=2", "async=pipeline_rl"]), world_size=2)
    assert e.value.key == "generation.tensor_parallel_size"


@pytest.mark.slow
def test_the_default_recipe_on_two_ranks_through_the_entry_point(tmp_path):
    """``torchrun --nproc_per_node 2 -m scalerl.sweep`` with the default recipe (pipeline_rl,
    PipelineRL-8, one generator process): it used to stop at start-up. Rank 0's one generator
    makes the whole batch, split across the ranks unlike the generator shards. Every eval row
    is written once, by rank 0."""
    run_dir = tmp_path / "default"
    torchrun(["logger=none", "train.threads=1", *ANSWERS_ONLY, "batch.prompts=8", "batch.generations=4",
              "batch.minibatches=2", "train.eval_samples=1", "train.steps=4", "train.eval_every=2",
              "async.timeout_s=120"], run_dir)
    derived = json.loads((run_dir / "derived.json").read_text())
    assert derived["world_size"] == 2 and derived["prompts_per_rank"] == 4 and derived["generator_devices"] == 1
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["axes"]["async"] == "pipeline_rl" and summary["status"] == "done"
    assert [r["step"] for r in read_rows(run_dir / "metrics.jsonl")] == [0, 2, 4]  # unique, increasing
    steps = read_rows(run_dir / "steps.jsonl")
    assert [r["step"] for r in steps] == [1, 2, 3, 4]
    assert all(r["staleness_max"] <= 8 and r["lag_dropped"] == 0 for r in steps)
    assert sum(r["response_length"] for r in steps) > 0
    assert any((run_dir / "checkpoints").glob("step_00000004/.metadata"))  # sharded (DCP), every rank


def _scatter_worker(rank: int, init: str, out: str) -> None:
    import torch.distributed as td

    from scalerl.train.distributed import Dist

    td.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    d = Dist(rank=rank, world=2)
    parts = [{"rows": torch.tensor([[1, 2], [3, 4]]), "n": 2}, ("second", [0.5, None])] if rank == 0 else None
    got = d.scatter_data(parts)
    row = d.from_main({"pass_rate": 0.625, "pass_rate/add3": 0.75} if rank == 0 else None)
    torch.save({"got": got, "row": row}, f"{out}/{rank}.pt")
    td.destroy_process_group()


def test_ranks_exchange_plain_data_in_the_wire_format_not_pickle(tmp_path):
    # Rank 0 hands rank k its item (the batch shares of scatter_batch) and every rank its eval row,
    # as JSON plus raw tensors: a tuple stays a tuple, a tensor keeps its values and dtype.
    import torch.multiprocessing as mp

    mp.spawn(_scatter_worker, args=(f"file://{tmp_path}/rdzv", str(tmp_path)), nprocs=2)
    r0, r1 = (torch.load(tmp_path / f"{k}.pt", weights_only=False) for k in (0, 1))
    assert r0["got"]["n"] == 2 and r0["got"]["rows"].tolist() == [[1, 2], [3, 4]]
    assert r0["got"]["rows"].dtype == torch.int64
    assert r1["got"] == ("second", [0.5, None])
    assert r0["row"] == r1["row"] == {"pass_rate": 0.625, "pass_rate/add3": 0.75}

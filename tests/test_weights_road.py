"""The road the weights take (train/weights.py): the in-process engine gets every version, the
generators elsewhere only those the interleaving pushes, and a start reaches every end; the one
table that picks the road's ends, and the schedule each async mode names."""
from __future__ import annotations

import pytest
import torch

from scalerl.asynchrony.base import Interleaving
from scalerl.config import compose, validate
from scalerl.registry import async_node
from scalerl.train.run_plan import road_kind
from scalerl.train.schedules import schedule_class
from scalerl.train.schedules.local import LocalSchedule
from scalerl.train.schedules.pipeline import PipelineSchedule
from scalerl.train.weights import Copy, LoadWeights, Road, SharedModule


class Engine:
    """A generator that records what it was handed."""

    def __init__(self):
        self.version, self.loads = 0, []

    def load_weights(self, named_tensors, version):
        self.loads.append((version, {k: v.clone() for k, v in named_tensors}))
        self.version = version


class Ends:
    """A road end that records the versions it was published."""

    def __init__(self, held: float = 0.0):
        self.seen, self.held = [], held

    def publish(self, version):
        self.seen.append(version)
        return self.held


def test_the_engine_gets_every_version_and_the_batches_every_push():
    ppo3 = Interleaving(max_lag=2, push_every=3, in_flight=False, generators=0)  # pushes after 3, 6
    engine, batches = Ends(), Ends(held=0.25)
    road = Road(engine, batches, ppo3.push_every)
    held = [road.publish(v) for v in range(1, 7)]
    assert engine.seen == [1, 2, 3, 4, 5, 6] and batches.seen == [3, 6]
    assert held == [0.0, 0.0, 0.25, 0.0, 0.0, 0.25]  # only the push to the batches holds the trainer up
    assert road.start(4) == 0.25 and engine.seen[-1] == 4 and batches.seen[-1] == 4  # a resume at 4: every end


def test_shared_module_moves_the_version_and_load_weights_copies_the_trainers_tensors():
    model = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, -2.0]]))
    gen = Engine()
    assert SharedModule(gen).publish(5) == 0.0 and gen.version == 5 and gen.loads == []
    LoadWeights(model, gen).publish(6)
    (version, state), = gen.loads
    assert version == 6 and gen.version == 6 and torch.equal(state["weight"], torch.tensor([[1.0, -2.0]]))


def test_copy_writes_the_trainers_weights_into_the_engines_own_model():
    from types import SimpleNamespace

    trainer = torch.nn.Linear(2, 2, bias=False)
    own = torch.nn.Linear(2, 2, bias=False).to(torch.bfloat16)
    with torch.no_grad():
        trainer.weight.copy_(torch.tensor([[0.5, 1.5], [-3.0, 2.0]]))  # exact in bf16
    own.get_output_embeddings = lambda: own  # an HF model's head accessor, on the toy
    policy = SimpleNamespace(model=own, head_weight=own.weight)  # no separate head weight
    gen = Engine()
    Copy(trainer, policy, gen).publish(2)
    assert gen.version == 2 and own.weight.dtype == torch.bfloat16
    assert torch.equal(own.weight.float(), torch.tensor([[0.5, 1.5], [-3.0, 2.0]]))


# The one table from the plan to the road (run_plan.road_kind; docs/architecture.md, 'The road for the weights').
@pytest.mark.parametrize("generators,samples_policy,sharded,own_dtype,engine,batches", [
    (1, False, False, False, "version", "remote"),    # vLLM in generator processes: only the version here
    (2, False, True, True, "version", "remote"),
    (1, True, False, True, "shared", "remote"),       # the torch engine: its own dtype goes to the generators
    (1, True, True, False, "copy", "remote"),
    (0, False, False, True, "load_weights", None),    # vLLM in the trainer's process samples the batches too
    (0, True, False, False, "shared", None),          # the default's sync run in fp32: one module, no copy
    (0, True, False, True, "shared", "own_sampler"),  # precision.generator_body=engine: bf16-rounded sampler
    (0, True, True, False, "copy", None),
    (0, True, True, True, "copy", "own_sampler"),
])
def test_the_road_table_row_by_row(generators, samples_policy, sharded, own_dtype, engine, batches):
    kind = road_kind(generators=generators, samples_policy=samples_policy, sharded=sharded, own_dtype=own_dtype)
    assert (kind.engine, kind.batches) == (engine, batches)


@pytest.mark.parametrize("option,generators,schedule", [
    ("sync", 0, LocalSchedule), ("sync", 2, PipelineSchedule), ("ppo_off_policy", 0, LocalSchedule),
    ("ppo_off_policy", 1, PipelineSchedule), ("pipeline_rl", 1, PipelineSchedule)])
def test_each_async_mode_names_the_schedule_that_carries_it_out(option, generators, schedule):
    node = async_node(validate(compose([f"async={option}", f"async.generators={generators}"])))
    assert schedule_class(node.schedule()) is schedule
    with pytest.raises(LookupError, match="scalerl/train/schedules/local.py"):
        schedule_class("local.NoSuchSchedule")

"""Config tests: registries == YAML files, every option composes and validates,
an option's settings exist on that option alone, every study expands, and bad
values fail before launch naming the key."""
import dataclasses

import pytest
from helpers import REPO, cli as run_cli  # cli: the entry point in a forked process, without re-importing scalerl
from omegaconf import OmegaConf

from scalerl.config import ConfigError, as_config_error, compose, validate
from scalerl.config.derive import derive
from scalerl.config.groups import OPTION_GROUPS, PRESET_GROUPS
from scalerl.core.paths import sweeps_dir
from scalerl.launch.studies import find_study, load_study, read_spec, study_size
from scalerl.registry import AXES


@pytest.fixture(scope="module")
def hf_ckpt(tmp_path_factory):
    """A directory that passes model.path's check (validation reads only its config.json's presence)."""
    path = tmp_path_factory.mktemp("hf-ckpt")
    (path / "config.json").write_text("{}")
    return path


def extra(group: str, option: str, files: dict, hf_ckpt) -> list[str]:
    """Required values of an option: a checkpoint directory for model=hf, and the task files
    written by the ``task_files`` fixture for the file-based tasks."""
    needs = {("model", "hf"): [f"model.path={hf_ckpt}"],
             ("task", "math"): [f"task.path={files['math']}"], ("task", "code"): [f"task.path={files['code']}", "model.warmstart.enabled=false"],
             ("task", "mix"): [f"task.tasks.math.path={files['math']}", f"task.tasks.code.path={files['code']}"],
             ("generation", "vllm"): ["async=sync"],  # pipeline_rl's generator processes run the torch engine
             ("routing", "replay"): ["model=tiny_moe"]}  # replay needs an MoE (a dense model is refused)
    return needs.get((group, option), [])


def yaml_options(group: str) -> set[str]:
    return {p.stem for p in (REPO / "conf" / group).glob("*.yaml")}


@pytest.mark.parametrize("group", sorted(OPTION_GROUPS))
def test_registry_keys_equal_yaml_names(group):
    assert set(OPTION_GROUPS[group]) == yaml_options(group)


def all_group_options():
    for group in [*sorted(OPTION_GROUPS), *PRESET_GROUPS]:
        for option in sorted(yaml_options(group)):
            yield group, option


@pytest.mark.parametrize("group,option", list(all_group_options()))
def test_every_option_composes_and_validates(group, option, task_files, hf_ckpt):
    cfg = validate(compose([f"{group}={option}", *extra(group, option, task_files, hf_ckpt)]))
    node = getattr(cfg, group, None)
    if group == "recipe":
        assert cfg.recipe == option
    else:
        assert node.name == option
    if group in OPTION_GROUPS:  # the node is the option's own schema, named by its registry key
        assert type(node) is OPTION_GROUPS[group][option].schema
    derive(cfg)


def foreign_settings():
    """(group, option, key): for every option, one setting that another option of the group has and
    this one lacks. One per option is enough: what refuses it is the option's node being typed by its
    own schema (``test_every_option_composes_and_validates`` checks that type for every option), and
    a typed node refuses every key its schema lacks alike; the keys it lacks are the schemas' fields."""
    for group, options in OPTION_GROUPS.items():
        fields = {name: {f.name for f in dataclasses.fields(o.schema)} for name, o in options.items()}
        for name in options:
            foreign = sorted(set().union(*fields.values()) - fields[name])
            if foreign:
                yield group, name, foreign[len(name) % len(foreign)]  # varies which key is tried, deterministically


@pytest.mark.parametrize("group,option,key", list(foreign_settings()))
def test_a_setting_of_another_option_fails_at_compose_naming_the_key(group, option, key, task_files, hf_ckpt):
    # e.g. `filter=none filter.npr_threshold=0.5` must not train with NPR while labelled `none`.
    with pytest.raises(Exception) as e:
        compose([f"{group}={option}", f"{group}.{key}=1", *extra(group, option, task_files, hf_ckpt)])
    err = as_config_error(e.value)
    assert err.key == f"{group}.{key}" and f"{group}={option}" in str(err)


def test_filter_none_rejects_npr_threshold():
    with pytest.raises(Exception) as e:
        compose(["filter=none", "filter.npr_threshold=0.5"])
    assert str(as_config_error(e.value)).startswith("filter.npr_threshold: `npr_threshold` is not a setting of filter=none")


@pytest.mark.parametrize("group", sorted(OPTION_GROUPS))
def test_an_option_name_cannot_be_overridden(group):
    other = sorted(OPTION_GROUPS[group])[0]
    with pytest.raises(Exception) as e:
        compose([f"{group}.name={other}"])
    assert as_config_error(e.value).key == f"{group}.name"


def test_default_is_the_scalerl_recipe():
    cfg = validate(compose())
    assert (cfg.loss.name, cfg.precision.name, cfg.aggregation.name, cfg.adv_norm.name, cfg.filter.name,
            cfg.length.name) == ("cispo", "fp32_head", "prompt", "batch", "zero_variance_npr", "interrupt")
    assert cfg.filter.npr_threshold == 0.9 and cfg.loss.eps_max == 4.0 and cfg.loss.eps_min is None


def test_command_line_beats_recipe():
    cfg = validate(compose(["recipe=deepseek_grpo", "loss=cispo"]))
    assert cfg.loss.name == "cispo" and cfg.aggregation.name == "sample" and cfg.recipe == "deepseek_grpo"


@pytest.mark.parametrize("override,key", [
    ("loss.eps_max=-1", "loss.eps_max"),
    ("batch.generations=0", "batch.generations"),
    ("batch.minibatches=3", "batch.minibatches"),
    ("length.answer_budget=100", "length.answer_budget"),
    ("train.lr=0", "train.lr"),
    ("filter.npr_threshold=1.5", "filter.npr_threshold"),
    ("+task.mix.div9=1.0", "task.mix"),
    ("train.device=tpu", "train.device"),
])
def test_bad_values_name_the_key(override, key):
    extra = ["filter=zero_variance_npr"] if key.startswith("filter") else []
    with pytest.raises(ConfigError) as e:
        validate(compose([override, *extra]))
    assert e.value.key == key and key in str(e.value)


@pytest.mark.parametrize("override,key", [
    ("generation.kv_cache_gb=0", "generation.kv_cache_gb"),
    ("generation.dtype=fp8", "generation.dtype"),
    ("generation.tensor_parallel_size=0", "generation.tensor_parallel_size"),
    ("generation.gpu_memory_utilization=1.5", "generation.gpu_memory_utilization"),
])
def test_bad_vllm_settings_name_the_key(override, key):
    with pytest.raises(ConfigError) as e:
        validate(compose(["generation=vllm", override]))
    assert e.value.key == key


def test_vllm_settings_belong_to_the_vllm_option():
    with pytest.raises(Exception) as e:
        compose(["generation.kv_cache_gb=2"])  # the default engine is torch
    assert as_config_error(e.value).key == "generation.kv_cache_gb"


def test_negative_dapo_eps_names_the_key():
    with pytest.raises(ConfigError, match="loss.eps_low"):
        validate(compose(["loss=dapo", "loss.eps_low=-0.1"]))


def test_unknown_option_fails_at_compose():
    with pytest.raises(Exception) as e:
        compose(["loss=foo"])
    err = as_config_error(e.value)
    assert err.key == "loss" and "cispo" in str(err) and "'foo'" in str(err)


EXPECTED_ARMS = {"loss": 4, "loo": 9, "recipes": 5, "batch": 6, "length": 3, "precision": 5, "filter": 4, "seeds": 3,
                 "async": 5, "correction": 4, "generations": 3, "budget": 3, "model_size": 3,
                 "model_scale": 2, "routing": 4, "moe_mismatch": 4}


def test_every_shipped_study_is_checked_below():
    assert sorted(p.stem for p in sweeps_dir().glob("*.yaml")) == sorted(EXPECTED_ARMS)


@pytest.mark.parametrize("study", sorted(EXPECTED_ARMS))
def test_every_study_expands_and_validates(study):
    name, arms = load_study([study])
    assert name == study and len(arms) == EXPECTED_ARMS[study]
    assert study_size(read_spec(find_study(study))) == len(arms)   # the count the arm cap checks, before expanding
    assert len({tuple(a) for a in arms}) == len(arms)
    hashes = set()
    for arm in arms:
        cfg = compose(arm)
        validate(cfg)
        hashes.add(OmegaConf.to_yaml(cfg))
    assert len(hashes) == len(arms)  # every arm is a distinct config


def test_loo_reverts_exactly_one_axis():
    _, arms = load_study(["loo"])
    base = validate(compose([]))
    axes = list(AXES)
    for arm in arms[1:]:
        cfg = validate(compose(arm))
        changed = [a for a in axes if getattr(cfg, a).name != getattr(base, a).name]
        assert len(changed) == 1, (arm, changed)


def test_crossed_studies_multiply():
    _, arms = load_study(["loss", "seeds"])
    assert len(arms) == 12 and {a[-1] for a in arms} == {"seed=0", "seed=1", "seed=2"}


def test_dry_run_of_a_study_validates_every_arm(tmp_path):
    proc = run_cli(["-m", "sweep=loo", "--dry-run"], tmp_path)
    assert proc.stdout.count("pending") == 9 and "launching" not in proc.stdout
    assert not any(tmp_path.rglob("metrics.jsonl"))


def test_dry_run_rejects_a_world_size_that_does_not_divide_the_batch(tmp_path):
    # 16 prompts over 3 SLURM tasks: caught for every arm before anything is submitted.
    proc = run_cli(["-m", "loss=cispo,dapo", "hydra/launcher=slurm", "hydra.launcher.tasks_per_node=3", "--dry-run"],
                   tmp_path, check=False)
    assert proc.returncode != 0
    assert "batch.prompts" in proc.stderr and "ranks (3)" in proc.stderr and "nothing was launched" in proc.stderr
    assert not any(tmp_path.rglob("launch.json"))


def test_bad_value_in_a_sweep_fails_before_launch(tmp_path):
    proc = run_cli(["-m", "loss=cispo,dapo", "batch.generations=0"], tmp_path, check=False)
    assert proc.returncode != 0
    assert "batch.generations" in proc.stderr and "nothing was launched" in proc.stderr
    assert not any(tmp_path.rglob("metrics.jsonl"))


def test_single_run_config_error_names_key(tmp_path):
    proc = run_cli(["loss.eps_max=-1"], tmp_path, check=False)
    assert proc.returncode != 0 and "loss.eps_max" in proc.stderr


def test_reward_values_are_a_task_setting():
    cfg = validate(compose(["task.wrong_reward=-1"]))  # the paper's ±1
    assert (cfg.task.correct_reward, cfg.task.wrong_reward) == (1.0, -1.0)
    with pytest.raises(ConfigError) as e:
        validate(compose(["task.correct_reward=0", "task.wrong_reward=0"]))
    assert e.value.key == "task.correct_reward"


@pytest.mark.parametrize("recipe", ["qwen_dapo", "minimax"])
def test_dapo_and_minimax_recipes_average_per_prompt(recipe):
    """arXiv 2510.13786 describes both with prompt-level loss averaging (they were token-level)."""
    assert validate(compose([f"recipe={recipe}"])).aggregation.name == "prompt"


def test_every_recipe_cites_the_paper():
    for path in (REPO / "conf" / "recipe").glob("*.yaml"):
        assert "arXiv 2510.13786 §" in path.read_text(), path.name


def test_pipeline_rl_runs_the_vllm_engine_but_refuses_a_sharded_one_naming_the_key():
    validate(compose(["generation=vllm", "async=pipeline_rl"]))  # each generator process runs vLLM
    validate(compose(["generation=vllm", "generation.tensor_parallel_size=2", "async=sync"]))
    with pytest.raises(ConfigError) as e:  # a generator process drives one device
        validate(compose(["generation=vllm", "generation.tensor_parallel_size=2", "async=pipeline_rl"]))
    assert e.value.key == "generation.tensor_parallel_size"


def test_vllm_takes_its_body_dtype_from_generation_dtype_not_precision_generator_body():
    # A torch sampler would otherwise replace vLLM for the training batches (train/run_plan.py::road_kind).
    validate(compose(["generation=vllm", "generation.dtype=bfloat16", "precision=bf16", "async=sync"]))
    validate(compose(["precision=bf16", "precision.generator_body=float32", "async=sync"]))  # torch: fine
    with pytest.raises(ConfigError) as e:
        validate(compose(["generation=vllm", "precision=bf16", "precision.generator_body=float32", "async=sync"]))
    assert e.value.key == "precision.generator_body" and "generation.dtype" in str(e.value)


def test_a_warm_start_on_a_task_without_answers_fails_before_the_run(task_files):
    # Code is graded by tests: no reference answer for a supervised warm start to imitate. The
    # default model warm-starts, so task=code alone is refused at validation, naming the key.
    with pytest.raises(ConfigError) as e:
        validate(compose(["task=code", f"task.path={task_files['code']}"]))
    assert e.value.key == "model.warmstart.enabled" and "task=code" in str(e.value)
    validate(compose(["task=code", f"task.path={task_files['code']}", "model.warmstart.enabled=false"]))
    # A mix imitates the entries that have answers (math here): no error.
    validate(compose(["task=mix", f"task.tasks.math.path={task_files['math']}", f"task.tasks.code.path={task_files['code']}"]))


def test_the_schemas_are_stored_again_only_when_a_registry_changed(monkeypatch):
    """``compose`` stores the option schemas once per state of the registries: a replaced option's
    schema is what the next composition validates against; an unchanged registry stores nothing."""
    from hydra.core.config_store import ConfigStore

    from scalerl.losses import LOSSES

    compose(["loss=dapo"])
    stores = []
    real_store = ConfigStore.store
    monkeypatch.setattr(ConfigStore, "store", lambda self, *a, **k: stores.append(k.get("name")) or real_store(self, *a, **k))
    assert "extra" not in compose(["loss=dapo"]).loss and stores == []

    real = LOSSES["dapo"]
    mine = dataclasses.make_dataclass("MineDapo", [("extra", int, 7)], bases=(real.schema,))
    monkeypatch.setitem(LOSSES, "dapo", type(real)(mine, real.fn))
    assert compose(["loss=dapo"]).loss.extra == 7 and "dapo" in stores
    monkeypatch.undo()
    assert "extra" not in compose(["loss=dapo"]).loss

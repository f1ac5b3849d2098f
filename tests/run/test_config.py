"""Every config group composes, and every method config builds its parts."""

import importlib
import inspect
import pkgutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import get_object
from omegaconf import OmegaConf

from specbench import drafters
from specbench.engine import methods
from specbench.engine.candidates import auto_keys, candidates
from specbench.engine.loop import Method
from specbench.engine.parts import DrafterLoader, TreePolicy, Verifier
from specbench.errors import ConfigError
from specbench.run.config import config_hash
from specbench.trees.entmtp import TaskTrees, save_bank

CONF = Path(__file__).resolve().parents[2] / "conf"
WEIGHTLESS = ("ar", "pld", "lookahead")  # methods whose drafter (if any) loads no weights


def choices(group):
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def composed(*overrides):
    with initialize_config_dir(str(CONF), version_base="1.3"):
        return OmegaConf.to_container(compose("config", overrides=list(overrides)), resolve=True)


@pytest.mark.parametrize("group", ["model", "dataset", "method", "hardware"])
def test_every_choice_composes(group):
    for choice in choices(group):
        cfg = composed(f"{group}={choice}")
        assert cfg[group]["name"] == choice or group == "model"
        assert cfg[group]["name"]


def test_models_name_their_source():
    for choice in choices("model"):
        model = composed(f"model={choice}")["model"]
        assert model["name"] == choice
        assert model.get("id") or model.get("package")
        for part in ("sps_draft", "eagle3", "medusa", "hydra"):
            entry = model.get(part)
            assert entry is None or entry.get("id") or entry.get("package")


def with_tree_bank(choice: str, tmp_path: Path) -> list[str]:
    """Overrides giving an EntMTP method a bank of three trees for the default dataset (its
    trees come from a search run, so it has none by default), and its ladder two thresholds."""
    if not choice.startswith("entmtp"):
        return []
    bank = tmp_path / "bank.json"
    shapes = [[[0]], [[0], [0, 0]], [[0], [1], [0, 0]]]
    save_bank(
        bank,
        {
            composed()["dataset"]["name"]: TaskTrees(
                [{"choices": c} for c in shapes], static=1, conservative=0, aggressive=2
            )
        },
        {},
    )
    return [f"method.tree.bank={bank}"] + (["method.tree.ladder=[0.1,0.5]"] if choice == "entmtp_ladder" else [])


@pytest.mark.parametrize("choice", choices("method"))
def test_every_method_config_builds_its_parts(choice, tmp_path, target):
    """Its verifier and tree (an auto tree at its first candidate shape) build as their base
    classes, and its drafter config names a loader taking its keys. Drafter weights are
    not loaded, so only a method whose drafter has none is assembled whole."""
    cfg = composed(f"method={choice}", *with_tree_bank(choice, tmp_path))
    method = cfg["method"]
    tree_cfg = candidates(method["tree"])[0] if auto_keys(method["tree"]) else method["tree"]
    assert isinstance(methods.instantiate_part(method["verifier"], "method.verifier"), Verifier)
    assert isinstance(methods.instantiate_part(tree_cfg, "method.tree"), TreePolicy)
    if method["drafter"] is not None:
        loader = methods.drafter_loader(method["drafter"])
        inspect.signature(loader.func.build).bind(
            target=target, hardware=cfg["hardware"], compiled=None, **loader.keywords
        )
    if choice in WEIGHTLESS:
        assert isinstance(methods.assemble({**method, "tree": tree_cfg}, target, cfg["hardware"]), Method)


def test_a_rebuilt_method_keeps_the_drafter_it_was_given(target):
    """A method rebuilt with another tree shape (the dtype weighing) reuses its loaded
    drafter: with no head configured, loading one would fail."""
    cfg = composed(
        "method=eagle3",
        "method.drafter.head=null",
        "method.tree.top_k=2",
        "method.tree.depth=2",
        "method.tree.total_tokens=4",
    )
    loaded = object()
    assert (
        methods.assemble(cfg["method"], target, {"dtype": "float32", "device": "cpu"}, drafter=loaded).drafter is loaded
    )


@pytest.mark.parametrize(
    "method, what, published",
    [
        ("medusa", "Medusa heads", "FasterDecoding/medusa-vicuna-7b-v1.3"),
        ("hydra", "Hydra heads", "ankner/hydra-vicuna-7b-v1.3"),
    ],
)
def test_heads_on_a_target_without_them_say_how_to_give_them(method, what, published, target):
    cfg = composed(f"method={method}", "model=llama3.1-8b")  # no such heads configured for it
    assert cfg["method"]["drafter"]["heads"] is None
    with pytest.raises(
        ConfigError, match=rf"^method.drafter.heads: this target has no {what} configured; set method.drafter.heads="
    ):
        methods.assemble(cfg["method"], target, {"dtype": "float32", "device": "cpu"})
    heads = composed(f"method={method}", "model=vicuna-7b")["method"]["drafter"]["heads"]
    assert heads["id"] == published


def test_auto_shapes_are_the_defaults_and_need_a_run_to_choose(target):
    for choice in (
        "pld",
        "sps",
        "sps_tree",
        "eagle",
        "eagle2",
        "eagle3",
        "talon",
        "mars",
        "cast",
        "medusa",
        "hydra",
        "lookahead",
        "opt_tree",
    ):
        assert "auto" in composed(f"method={choice}")["method"]["tree"].values()
    with pytest.raises(ConfigError, match="method.tree: gamma = auto"):
        methods.assemble(composed("method=pld")["method"], target, {"dtype": "float32", "device": "cpu"})
    assert composed()["hardware"]["dtype"] == "auto"


def test_every_method_checks_before_a_model_loads():
    for choice in choices("method"):
        method = composed(f"method={choice}")["method"]
        if method["tree"].get("bank", "") is None:  # EntMTP's trees come from a search run first
            with pytest.raises(ConfigError, match="^method.tree.bank: no tree bank given"):
                methods.check(method)
        else:
            methods.check(method)
    for override, key in (
        ("method=pld method.tree.gamma=0", "method.tree.gamma"),
        ("method=talon method.tree.mu=1.5", "method.tree.mu"),
        ("method=mars method.verifier.theta=0", "method.verifier.theta"),
        (
            "method=talon method.tree.mu=auto",
            r"method.tree: budget, mu, top_k cannot be auto .* supported for: \[.budget., .top_k.\]",
        ),
        ("method=eagle3 method.drafter.head=null", "method.drafter.head: this target has no EAGLE-3 head configured"),
        ("method=medusa model.medusa.path=/nowhere", "method.drafter.heads.path: /nowhere has no config.json"),
        ("method=sps method.drafter.model=null", "method.drafter.model: this target has no default SpS draft"),
    ):
        with pytest.raises(ConfigError, match=f"^{key}"):
            methods.check(composed(*override.split())["method"])


def drafter_targets(node) -> list[str]:
    """Every drafter `_target_` in a parsed config file."""
    if not isinstance(node, dict):
        return []
    drafter = node.get("drafter")
    found = [drafter["_target_"]] if isinstance(drafter, dict) and "_target_" in drafter else []
    return found + [target for value in node.values() for target in drafter_targets(value)]


def test_every_drafter_target_is_a_drafter_loader():
    """methods.check asks what a drafter's `_target_` names for its check, so every drafter
    config and every drafter module's `load` must be a DrafterLoader."""
    configured = {
        target
        for group in ("method", "model")
        for path in (CONF / group).glob("*.yaml")
        for target in drafter_targets(OmegaConf.to_container(OmegaConf.load(path)))
    }
    modules = {
        f"{drafters.__name__}.{m.name}.load"
        for m in pkgutil.iter_modules(drafters.__path__)
        if hasattr(importlib.import_module(f"{drafters.__name__}.{m.name}"), "load")
    }
    assert configured and configured <= modules
    for target in modules:
        assert isinstance(get_object(target), DrafterLoader), target


def test_hash_changes_with_what_changes_results():
    base = composed()
    assert config_hash(base) == config_hash(composed())
    assert config_hash(base) != config_hash(composed("gen.temperature=1.0"))
    assert config_hash(base) != config_hash(composed("method=pld"))
    assert config_hash(base) != config_hash(composed("engine.int8_drafts=off"))  # same ids, other speed: not a resume
    # other numbers where auto rounds weights
    assert config_hash(base) != config_hash(composed("engine.fp16_weights=off"))
    assert config_hash(base) == config_hash(composed("output_root=elsewhere"))
    # what is timed for the summary's prediction only (the replications turn it off: their finished runs stay valid)
    assert config_hash(base) == config_hash(composed("costs.calibrate_tree=false"))
    # the model's drafter entries the method does not use are not part of the run
    assert config_hash(base) == config_hash(composed("model.eagle=null", "model.medusa.path=/x"))
    eagle3 = composed("method=eagle3")
    # the one it uses is
    assert config_hash(eagle3) != config_hash(composed("method=eagle3", "model.eagle3.path=/elsewhere"))
    # a dataset's notes for people (where its data comes from) are not part of the run; its data is
    assert config_hash(base) == config_hash(composed("dataset.offline_hint=reworded", "dataset.source=reworded"))
    assert config_hash(base) != config_hash(composed("dataset.path=/a/copy.jsonl"))


def test_an_emulated_isa_is_a_run_of_its_own(monkeypatch):
    native = config_hash(composed())
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    emulated = config_hash(composed())
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert len({native, emulated, config_hash(composed())}) == 3
    monkeypatch.delenv("ATEN_CPU_CAPABILITY")
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    assert config_hash(composed()) == native


def test_a_retrained_head_under_the_same_name_is_a_new_run(tmp_path):
    """Shipping a retrained head keeps its config entry: the run's identity follows its
    weights (a re-run must not resume the old head's samples), not its model card."""
    head = tmp_path / "head"
    head.mkdir()
    (head / "config.json").write_text("{}")
    (head / "model.safetensors").write_bytes(b"v1" * 1000)
    before = config_hash(composed("method=eagle3", f"model.eagle3.path={head}"))
    (head / "README.md").write_text("a new model card")
    assert config_hash(composed("method=eagle3", f"model.eagle3.path={head}")) == before
    (head / "model.safetensors").write_bytes(b"v2" * 1000)
    assert config_hash(composed("method=eagle3", f"model.eagle3.path={head}")) != before
    # methods without local drafter weights hash as before (AR, PLD; a hub head is named by its id)
    assert config_hash(composed("method=pld")) == config_hash(composed("method=pld", f"model.eagle3.path={head}"))


def test_a_model_converted_by_two_processes_at_once_keeps_the_first(tmp_path, monkeypatch):
    """Corpus shards (or a test beside a training job) may convert the GGUF together: the
    one that finishes second keeps the first's copy instead of failing on the rename."""
    from specbench.models import registry

    class Saved:
        def __init__(self, name):
            self.name, self.config, self.hf_quantizer = name, SimpleNamespace(quantization_config=None), None

        def save_pretrained(self, path):
            Path(path).mkdir(parents=True, exist_ok=True)
            (Path(path) / "model.safetensors").write_text(self.name)

    monkeypatch.setattr(registry.AutoTokenizer, "from_pretrained", lambda *a, **k: Saved("tokenizer"))
    monkeypatch.setattr(registry.AutoModelForCausalLM, "from_pretrained", lambda *a, **k: Saved("second"))
    out = tmp_path / "models" / "smollm2-135m"
    out.mkdir(parents=True)
    (out / "model.safetensors").write_text("first")
    registry._convert_gguf(tmp_path, "model.gguf", out)
    assert (out / "model.safetensors").read_text() == "first"
    assert [p.name for p in out.parent.iterdir()] == ["smollm2-135m"]  # no partial left behind

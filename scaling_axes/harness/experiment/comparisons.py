"""What a comparison holds equal: the arms a claim sets against each other (`Comparison`) and the recipe each trains
under, field by field (`recipe_of`), so that a test can hold a comparison's arms to one recipe (`mismatches`), a
sound one (`unsound`), and REPORT.md can print it (`write_recipes`, read back by `report`).

The architecture always differs between a comparison's arms; any recipe field that differs besides must be one its
record names in `differs`, with the reason in `why` (a paper's own protocol, run beside the matched one).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from scaling_axes.harness.runs import Run, passes
from scaling_axes.io import write_csv
from scaling_axes.modules.flops import non_embedding_params

COMPARED = (
    "parametrisation",
    "optimiser",
    "clipping",
    "z_loss",
    "warmup",
    "schedule",
    "weight_decay",
    "batch",
    "seq_len",
    "steps",
    "corpus",
    "tokenizer",
    "data_order",
    "evaluation_tokens",
    "tuning",
)
DESCRIBED = (
    "architecture",
    "model",
    "lr",
    "rate_from",
    "non_embedding",
    "tokens_per_parameter",
    "passes",
    "validations",
)
SIZED = ("batch", "steps")  # what a token rule sets per size
RECIPE_COLUMNS = ("comparison", "arm", "field", "value")
MIN_WARMUP = 0.1  # of the steps, with an Adam-family optimiser
MAX_MOMENTUM_WARMUP = 0.1  # Muon's, of the steps
SMALL_BATCH_TOKENS = 8192  # at or below this many tokens a step AdamW's beta2 is 0.99 (0.95 averages too few steps)


@dataclasses.dataclass(frozen=True)
class Comparison:
    """Arms (run names) a claim compares; `differs`, the recipe fields (of COMPARED) its claim is about besides the
    architecture, and `why`; `token_rule`, where its arms span sizes, the one rule that sets each size's batch and
    steps (SIZED); `min_tokens_per_parameter`, what a from-scratch comparison trains each arm to at least (issue 83:
    about 20 shows a mechanism; 0: no floor declared)."""

    name: str
    arms: tuple[str, ...]
    differs: tuple[str, ...] = ()
    why: str = ""
    token_rule: str = ""
    min_tokens_per_parameter: float = 0.0

    def __post_init__(self) -> None:
        if unknown := sorted(set(self.differs) - set(COMPARED)):
            raise ValueError(f"comparison {self.name}: differs names {unknown}; allowed: {', '.join(COMPARED)}")
        if self.differs and not self.why:
            raise ValueError(f"comparison {self.name}: its arms differ in {self.differs}; say why")


@functools.cache
def _defaults(module: type) -> dict[str, Any]:
    return {
        name: p.default for name, p in inspect.signature(module.__init__).parameters.items() if p.default is not p.empty
    }


def hyperparameters(run: Run) -> dict[str, Any]:
    """The training module's arguments as `run` sets them, its defaults filled in."""
    if run.classifies_images:
        from scaling_axes.modules.tasks.classifier import ImageClassifier as module
    else:
        from scaling_axes.modules.tasks.lm import LanguageModel as module
    return {**_defaults(module), **run.lm}


def parametrisation(config: Any) -> str:
    """muP (its base width: a proxy's, or the model's own; its init and multipliers) or standard (its init rule);
    multipliers other than 1 named. The RMT code's own init is muP's rules with every base dimension its own
    (reference rmt.md section 2), the same as a Transformer's muP at its own width."""
    names = (("input_multiplier", "input_alpha"), ("attention_multiplier", "attention_alpha"))
    names += (("output_multiplier", "output_alpha"),)
    multipliers = [getattr(config, a, getattr(config, b, 1.0)) for a, b in names]
    shown = "" if all(m == 1 for m in multipliers) else ", multipliers " + "/".join(f"{m:g}" for m in multipliers)
    init, numerics = getattr(config, "init", ""), getattr(config, "numerics", "")
    shown += f", the {numerics.upper()} code's numerics" if numerics else ""  # the Tokenformer's embedding and logits
    own = getattr(config, "mup_base_width", None) in (None, getattr(config, "d_model", None))
    if getattr(config, "mup", False) or init == "official":
        base = "its own width" if own else f"base width {config.mup_base_width}"
        zero = getattr(config, "mup", False) or getattr(config, "zero_init_unembedding", False)
        return f"muP at {base} (init {config.init_std:g}{shown}{'' if zero else ', unembedding random'})"
    return f"standard{' (lecun)' if init == 'lecun' else ''}{shown}"


def _optimiser(hp: dict[str, Any]) -> str:
    if hp["optimizer"] == "muon":
        warmup = hp["momentum_warmup"]
        warmup = f"{warmup:.0%} of the steps" if warmup < 1 else f"{warmup:g} steps"
        return f"Muon + Adam (the record's groups, Adam betas 0.8, 0.95; momentum warmup {warmup})"
    return f"AdamW (betas {hp['betas'][0]:g}, {hp['betas'][1]:g}; eps {hp['eps']:g})"


def _schedule(hp: dict[str, Any], steps: int) -> tuple[str, str]:
    """(warmup, schedule) in words."""
    if hp.get("schedule") == "constant_then_linear":
        return "none", f"constant, then linear to 0 over the last {hp['cooldown_fraction']:.0%}"
    return f"{hp['warmup_steps'] / steps:.0%}", f"cosine to {hp['min_lr_ratio']:g} x"


def _decay(hp: dict[str, Any]) -> str:
    if hp["optimizer"] == "muon":
        return "Muon's 0.01 x lr on matrices, none on the Adam groups"
    per_step = hp["decay_per_step"]
    rule = f"{per_step:g} a step at the peak" if per_step is not None else f"{hp['weight_decay']:g} x lr"
    spared = "embeddings decayed" if hp["decay_embeddings"] else "embeddings spared"
    return f"{rule}, {spared}" + ("" if hp["lr_scaled_decay"] else ", whatever a parameter's lr scale")


def _rate(run: Run, hp: dict[str, Any], lr: float | str | None) -> str:
    if isinstance(lr, str):
        return lr
    option = run.sweep.rate_option if run.sweep else None
    if option is not None:
        return f"{hp[option] if lr is None else lr:g} x the declared rates ({option})"
    return f"{run.budget.lr if lr is None else lr:g}"


def _tuning(run: Run) -> tuple[str, str]:
    """(the tuning budget, where the rate comes from)."""
    sweep = run.sweep
    if sweep is None:
        return "none", "declared"
    if sweep.anchor:  # trains no sweep of its own: its rate is another run's, carried by a rule
        checked = " (its two neighbours checked, one draw each)" if sweep.check else ""
        return f"none of its own{checked}", f"carried from {sweep.anchor}: {sweep.rule}"
    return f"{len(sweep.grid)} rates x {sweep.draws} draws", f"its own sweep, grid ratio {sweep.step:.3g}"


def recipe_of(run: Run, lr: float | str | None = None, whole_final: bool = False) -> dict[str, str]:
    """`run`'s recipe, COMPARED then DESCRIBED fields in words; `lr` the rate it trained at (else its declared);
    `whole_final`: its scale's final figures read the whole validation and test splits
    (`Scale.whole_final_evaluation`), its curve the subset."""
    hp, budget = hyperparameters(run), run.budget
    hp = {**hp, "warmup_steps": budget.warmup_steps, "min_lr_ratio": budget.min_lr_ratio}
    warmup, schedule = _schedule(hp, budget.steps)
    tuning, rate_from = _tuning(run)
    data_seed = f"pinned {run.data['seed']}" if "seed" in run.data else "the run's"
    windows = budget.val_windows
    non_embedding = non_embedding_params(run.config)
    try:
        passes_made = f"{passes(run)[0]:.2f}"
    except FileNotFoundError:
        passes_made = "corpus not prepared"
    return {
        "parametrisation": parametrisation(run.config),
        "optimiser": _optimiser(hp),
        "clipping": f"{run.trainer.get('gradient_clip_val', 1.0)}",
        "z_loss": f"{hp['z_loss']:g}",
        "warmup": warmup,
        "schedule": schedule,
        "weight_decay": _decay(hp),
        "batch": f"{budget.batch_size}",
        "seq_len": f"{budget.seq_len}",
        "steps": f"{budget.steps}",
        "corpus": run.corpus,
        "tokenizer": run.tokenizer or "the corpus's",
        "data_order": f"{run.data.get('order', 'shuffled')}, data seed {data_seed}",
        "evaluation_tokens": ("the whole split" if windows is None else f"{windows * budget.seq_len} a curve point")
        + ("; the final figures the whole validation and test splits" if whole_final else ""),
        "tuning": tuning,
        "architecture": type(run.config).__name__,
        "model": run.model,
        "lr": _rate(run, hp, lr),
        "rate_from": rate_from,
        "non_embedding": f"{non_embedding}",
        "tokens_per_parameter": f"{budget.tokens / non_embedding:.2f}",
        "passes": passes_made,
        "validations": f"every {budget.val_every} steps" if budget.val_every else "at the end",
    }


def mismatches(comparison: Comparison, runs: dict[str, Run]) -> list[str]:
    """Each COMPARED field that differs between `comparison`'s arms and that it does not name, in one line each."""
    missing = [arm for arm in comparison.arms if arm not in runs]
    if missing:
        return [f"{comparison.name}: arms {missing} are not runs of the experiment"]
    recipes = {arm: recipe_of(runs[arm]) for arm in comparison.arms}
    allowed = set(comparison.differs) | (set(SIZED) if comparison.token_rule else set())
    out = []
    for field in COMPARED:
        values = {arm: recipe[field] for arm, recipe in recipes.items()}
        if field not in allowed and len(set(values.values())) > 1:
            out.append(f"{comparison.name}: {field} differs, " + "; ".join(f"{a} {v}" for a, v in values.items()))
    return out


def short_of_tokens(comparison: Comparison, runs: dict[str, Run]) -> list[str]:
    """Each arm of `comparison` trained on fewer tokens per non-embedding parameter than it declares."""
    from scaling_axes.modules.flops import non_embedding_params

    floor = comparison.min_tokens_per_parameter
    out = []
    for arm in comparison.arms:
        if (per := runs[arm].budget.tokens / non_embedding_params(runs[arm].config)) < floor:
            out.append(f"{comparison.name}: {arm} trains {per:.1f} tokens per non-embedding parameter, below {floor:g}")
    return out


def unsound(run: Run) -> list[str]:
    """Where `run`'s recipe breaks the rules a recipe below paper scale keeps: a warmup of at least MIN_WARMUP of
    the steps (Adam), Muon's momentum warmup at most MAX_MOMENTUM_WARMUP of them, AdamW's beta2 0.99 at small
    batches."""
    from scaling_axes.modules.tasks.lm import momentum_warmup_steps  # torch: not for a listing

    hp, budget = hyperparameters(run), run.budget
    out = []
    if hp["optimizer"] == "muon":
        if (warmup := momentum_warmup_steps(hp["momentum_warmup"], budget.steps)) > MAX_MOMENTUM_WARMUP * budget.steps:
            out.append(f"{run.name}: Muon's momentum warms up over {warmup} of {budget.steps} steps")
        return out
    if budget.warmup_steps < MIN_WARMUP * budget.steps:
        out.append(f"{run.name}: warmup {budget.warmup_steps} of {budget.steps} steps, below {MIN_WARMUP:.0%}")
    if budget.batch_size * budget.seq_len <= SMALL_BATCH_TOKENS and hp["betas"][1] < 0.99:
        out.append(f"{run.name}: AdamW beta2 {hp['betas'][1]:g} at {budget.batch_size * budget.seq_len} tokens a step")
    return out


def write_recipes(
    experiment: str,
    comparisons: Iterable[Comparison],
    runs: dict[str, Run],
    rates: dict[str, Any],
    table_dir: Path,
    whole_final: bool = False,
) -> Path:
    """`recipes/<experiment>.csv` under `table_dir`: every field of every arm of every comparison, each arm at the
    rate in `rates` (else its declared one), checksummed; REPORT.md prints it. `whole_final`: as `recipe_of`."""
    rows = [
        {"comparison": c.name, "arm": arm, "field": field, "value": value}
        for c in comparisons
        for arm in c.arms
        for field, value in recipe_of(runs[arm], rates.get(arm), whole_final).items()
    ]
    rows += [{"comparison": c.name, "arm": "", "field": "differs", "value": ", ".join(c.differs)} for c in comparisons]
    rows += [{"comparison": c.name, "arm": "", "field": "why", "value": c.why} for c in comparisons if c.why]
    rows += [{"comparison": c.name, "arm": "", "field": "token_rule", "value": c.token_rule} for c in comparisons]
    path = Path(table_dir) / "recipes" / f"{experiment}.csv"
    write_csv(path, RECIPE_COLUMNS, rows, checksum=True)
    return path

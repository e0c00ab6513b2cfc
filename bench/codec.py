"""Envelope encode/decode speed and size: the project codec vs raw msgpack vs json.

Run: ``.venv/bin/python bench/codec.py`` (about 30 s). All candidates run in this one
process on the same seeded corpus:

* ``ours``  ``alicia.protocol.encode(Envelope)`` / ``alicia.protocol.decode(bytes)``: typed, with
  encode-side checks and full decode validation (msgspec Structs);
* ``raw``   ``msgpack.packb(dict)`` / ``msgpack.unpackb(bytes)`` of the equivalent plain
  dict: no types, no validation; the floor the issue names;
* ``json``  ``json.dumps(dict).encode()`` / ``json.loads(bytes)``.

An informational line also shows msgpack encoding with one reused ``Packer`` (faster
than ``packb``, which builds a Packer per call); the RESULT ratios use ``packb``, the
floor the issue names.

The corpus is 1000 ReasoningStep envelopes (300-character reasoning text drawn from a
seeded vocabulary, NanoID-shaped ids, server stanzaIds, stepIndex 1..8 per chain), as
the worker sends them. Each rate is the best of several ``timeit`` repeats (sized by
``autorange``, GC collected before and disabled during timing) of one pass over the
corpus; the loop overhead is the same for every candidate. A second, informational
corpus (StartAnswer with ``meta={"model": …}``) shows a small body with meta, where
our fixed per-call cost weighs more. Caveats: a shared 2-core machine; rates move by a
few percent between runs, the ratios less.

Last line: ``RESULT encode_vs_raw=<x> decode_vs_raw=<x> encode_vs_json=<x>
decode_vs_json=<x>`` (ratios of rates on the ReasoningStep corpus, >1 = ours faster).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import sys
import timeit
from collections.abc import Callable, Sequence
from importlib.metadata import version
from typing import Any

import msgpack

from alicia import protocol
from alicia.protocol import Envelope, ReasoningStep, StartAnswer, envelope

SEED = 20250101
ID_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"
WORDS = (  # noqa: SIM905 (a sentence reads better than a list of words)
    "the user asks about a restaurant near the station so I should check the opening "
    "hours first then compare prices and distance maybe search the database for italian "
    "places with good reviews — if none match relax the filter to include pizza or "
    "pasta and consider dietary constraints mentioned earlier like vegetarian options "
    "also the budget was around 30 euros per person which rules out the expensive ones "
    "wait the previous answer recommended Carbone so avoid repeating it unless asked"
).split()


def _id(rng: random.Random, prefix: str) -> str:
    return prefix + "_" + "".join(rng.choice(ID_ALPHABET) for _ in range(21))


def _text(rng: random.Random, length: int) -> str:
    out: list[str] = []
    size = 0
    while size < length:
        word = rng.choice(WORDS)
        out.append(word)
        size += len(word) + 1
    return " ".join(out)[:length].rstrip() + "."


def reasoning_corpus(n: int, seed: int = SEED) -> list[Envelope[Any]]:
    """``n`` ReasoningStep envelopes with 300-character content, as a worker sends them."""
    rng = random.Random(seed)
    conv = _id(rng, "conv")
    out: list[Envelope[Any]] = []
    user_msg, index = _id(rng, "msg"), 0
    for sid in range(1, n + 1):
        if index == 8:
            user_msg, index = _id(rng, "msg"), 0
        index += 1
        body = ReasoningStep(
            id=_id(rng, "rs"),
            conversation_id=conv,
            previous_id=user_msg,
            content=_text(rng, 299).ljust(300, "."),
            step_index=index,
        )
        out.append(envelope(body, stanza_id=-sid, conversation_id=conv))
    assert all(len(e.body.content) == 300 for e in out)
    return out


def start_answer_corpus(n: int, seed: int = SEED + 1) -> list[Envelope[Any]]:
    """``n`` StartAnswer envelopes carrying ``meta={"model": …}`` (informational)."""
    rng = random.Random(seed)
    conv = _id(rng, "conv")
    return [
        envelope(
            StartAnswer(
                id=_id(rng, "msg"),
                previous_id=_id(rng, "msg"),
                conversation_id=conv,
                answer_type="text",
            ),
            stanza_id=-sid,
            conversation_id=conv,
            meta={"model": "qwen3-32b"},
        )
        for sid in range(1, n + 1)
    ]


def best_rate(fn: Callable[[], object], items: int, repeat: int) -> float:
    """Items per second: best of ``repeat`` timeit runs sized by autorange."""
    timer = timeit.Timer(fn)
    gc.collect()
    number, _ = timer.autorange()
    gc.collect()
    best = min(timer.repeat(repeat=repeat, number=number)) / number
    return items / best


def over(fn: Callable[[Any], object], corpus: Sequence[Any]) -> Callable[[], None]:
    """One pass of ``fn`` over the corpus (the same loop for every candidate)."""

    def run() -> None:
        for item in corpus:
            fn(item)

    return run


def json_dumps(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def measure(corpus: list[Envelope[Any]], repeat: int) -> dict[str, dict[str, float]]:
    """Encode/decode rates and mean sizes of the three candidates on one corpus."""
    ours_bytes = [protocol.encode(e) for e in corpus]
    dicts = [msgpack.unpackb(b, raw=False) for b in ours_bytes]  # the equivalent plain dicts
    raw_bytes = [msgpack.packb(d) for d in dicts]
    json_bytes = [json_dumps(d) for d in dicts]
    # Same data in every form: each decodes back to the same content.
    for e, o, r, j in zip(corpus, ours_bytes, raw_bytes, json_bytes, strict=True):
        assert protocol.decode(o) == e
        assert msgpack.unpackb(r) == json.loads(j) == msgpack.unpackb(o)
    n = len(corpus)
    rows = {
        "ours": (over(protocol.encode, corpus), over(protocol.decode, ours_bytes), ours_bytes),
        "raw": (over(msgpack.packb, dicts), over(msgpack.unpackb, raw_bytes), raw_bytes),
        "json": (over(json_dumps, dicts), over(json.loads, json_bytes), json_bytes),
    }
    out: dict[str, dict[str, float]] = {}
    for name, (enc, dec, encoded) in rows.items():
        out[name] = {
            "encode": best_rate(enc, n, repeat),
            "decode": best_rate(dec, n, repeat),
            "bytes": sum(map(len, encoded)) / n,
        }
    # Informational: msgpack with one Packer reused for every envelope (not the issue's
    # floor, which is packb; shown because reused codecs are the fair comparison).
    packer = msgpack.Packer()
    out["raw_packer"] = {"encode": best_rate(over(packer.pack, dicts), n, repeat)}
    return out


def print_table(title: str, res: dict[str, dict[str, float]]) -> None:
    print(f"\n{title}")
    print(f"  {'codec':<6} {'encode/s':>12} {'decode/s':>12} {'bytes':>8}  vs raw (enc/dec)")
    raw = res["raw"]
    for name in ("ours", "raw", "json"):
        r = res[name]
        ratio = f"{r['encode'] / raw['encode']:.2f}x / {r['decode'] / raw['decode']:.2f}x"
        print(
            f"  {name:<6} {r['encode']:>12,.0f} {r['decode']:>12,.0f} {r['bytes']:>8.1f}  {ratio}"
        )
    packer = res["raw_packer"]["encode"]
    print(
        f"  (msgpack with one reused Packer: encode {packer:,.0f}/s;"
        f" ours is {res['ours']['encode'] / packer:.2f}x of it)"
    )


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print the table and the RESULT line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=1000, help="envelopes per corpus")
    parser.add_argument("--repeat", type=int, default=7, help="timeit repeats (best is kept)")
    parser.add_argument("--json", action="store_true", help="also print the results as JSON")
    args = parser.parse_args(argv)

    impl, machine = platform.python_implementation(), platform.machine()
    print(f"Python {sys.version.split()[0]} ({impl}) on {machine}, {os.cpu_count()} CPUs")
    libs = ", ".join(f"{lib} {version(lib)}" for lib in ("msgspec", "msgpack", "alicia-reasoning"))
    print(f"{libs}; json stdlib; seed {SEED}, {args.n} envelopes, best of {args.repeat}")

    steps = measure(reasoning_corpus(args.n), args.repeat)
    print_table("ReasoningStep, 300-char content (no meta):", steps)
    starts = measure(start_answer_corpus(args.n), args.repeat)
    print_table("StartAnswer with meta (informational):", starts)
    if args.json:
        print(json.dumps({"reasoning_step": steps, "start_answer_meta": starts}))

    ours, raw, js = steps["ours"], steps["raw"], steps["json"]
    print(
        f"RESULT encode_vs_raw={ours['encode'] / raw['encode']:.2f}"
        f" decode_vs_raw={ours['decode'] / raw['decode']:.2f}"
        f" encode_vs_json={ours['encode'] / js['encode']:.2f}"
        f" decode_vs_json={ours['decode'] / js['decode']:.2f}"
    )


if __name__ == "__main__":
    main()

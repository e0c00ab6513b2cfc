"""What an encrypted reasoning value costs per step: encrypt + encode against encode alone.

Run: ``.venv/bin/python bench/crypto.py`` (about 10 s). Both candidates run in this one
process on the same seeded corpus of ReasoningSteps (300-character text, as the worker
sends them):

* ``encode``          ``alicia.protocol.encode(envelope(step))`` of the plaintext step: what a
  ``full`` participant's step costs today;
* ``encrypt_encode``  the ``encrypted`` rendition: ``ReasoningSealer.seal`` (JWE ``dir``
  + ``A256GCM`` through joserfc, bound to the conversation) of the text, the step with
  empty content and that ``encryptedValue``, then ``alicia.protocol.encode``;
* ``floor``           a raw AES-256-GCM encryption of the same text with ``cryptography``
  (a fresh 96-bit nonce, the conversation id as associated data): the cipher's own cost,
  with no JOSE header, no base64url, no envelope.

``ratio`` = encrypt_encode / (encode + floor): how far the sealed step is from the least
any encrypted step can cost.

Each figure is the best of several ``timeit`` repeats (GC collected before, disabled
while timing) of one pass over the corpus, divided by its size. Caveats: a shared 2-core
machine; absolute microseconds move by some percent between runs.

Last line: ``RESULT encode_us=<x> encrypt_encode_us=<x> added_us=<x> floor_us=<x>
ratio=<x>`` (per step; target: added <= 50).
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sys
from importlib.metadata import version
from pathlib import Path

import msgspec
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from alicia.agent.engine.sealing import ReasoningSealer
from alicia.protocol import ReasoningStep, encode, envelope, new_id
from bench._stats import best_per_item

SEED = 20261123
VOCABULARY = (
    "the user asks about opening hours so I should check which restaurants near the "
    "station are open tonight and whether they take reservations for four people"
)


def corpus(n: int) -> list[ReasoningStep]:
    """``n`` seeded steps with 300-character text, stepIndex 1..8 per chain."""
    rng = random.Random(SEED)
    words = VOCABULARY.split()
    steps = []
    for i in range(n):
        text = ""
        while len(text) < 300:
            text += rng.choice(words) + " "
        steps.append(
            ReasoningStep(
                id=new_id("rs"),
                conversation_id="conv_bench",
                previous_id=f"msg_{i // 8}",
                content=text[:300],
                step_index=i % 8 + 1,
            )
        )
    return steps


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print the RESULT line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=500, help="steps in the corpus")
    parser.add_argument("--repeat", type=int, default=7, help="timeit repeats (best is kept)")
    args = parser.parse_args(argv)
    print(
        f"Python {sys.version.split()[0]} ({platform.python_implementation()}) on "
        f"{platform.machine()}, {os.cpu_count()} CPUs; joserfc {version('joserfc')}, "
        f"msgspec {version('msgspec')}; seed {SEED}, {args.n} steps, best of {args.repeat}"
    )
    steps = corpus(args.n)
    sealer = ReasoningSealer([("k1", bytes(range(32)))])
    replace = msgspec.structs.replace

    def encode_only() -> None:
        for step in steps:
            encode(envelope(step, stanza_id=-1, conversation_id="conv_bench"))

    def encrypt_encode() -> None:
        for step in steps:
            sealed = sealer.seal("conv_bench", step.content)
            body = replace(step, content="", encrypted_value=sealed)
            encode(envelope(body, stanza_id=-1, conversation_id="conv_bench"))

    cipher = AESGCM(bytes(range(32)))
    aad = b"conv_bench"

    def floor() -> None:
        for step in steps:
            cipher.encrypt(os.urandom(12), step.content.encode(), aad)

    base = best_per_item(encode_only, args.n, args.repeat) * 1e6
    sealed = best_per_item(encrypt_encode, args.n, args.repeat) * 1e6
    raw = best_per_item(floor, args.n, args.repeat) * 1e6
    ratio = sealed / (base + raw)
    print(f"encode alone        {base:8.2f} us/step")
    print(f"encrypt + encode    {sealed:8.2f} us/step")
    print(f"raw AES-256-GCM     {raw:8.2f} us/step (floor)")
    print(
        f"RESULT encode_us={base:.2f} encrypt_encode_us={sealed:.2f} added_us={sealed - base:.2f}"
        f" floor_us={raw:.2f} ratio={ratio:.2f}"
    )


if __name__ == "__main__":
    main()

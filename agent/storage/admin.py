"""``alicia-admin``: erasure requests and reading back what was stored.

* ``alicia-admin erase --conversation ID`` destroys the conversation's data key
  (crypto-shredding): reasoning stored encrypted with it can never be read again.
* ``alicia-admin reasoning --conversation ID`` prints the conversation's stored steps in
  order, decrypting those stored encrypted (zero data retention) with its data key.
* ``alicia-admin remarks --conversation ID`` prints the progress remarks the agent spoke
  in the conversation, in order (``spoken_at``, target message, text), decrypting those
  stored sealed (zero data retention) with its data key.

Reads ``DATABASE_URL`` and ``ALICIA_REASONING_KEYS`` (the master keys that wrap data
keys). Exit codes: 0 ok, 2 usage or configuration, 3 the data key is erased or missing,
4 no such conversation.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence

__all__ = ["main"]

EXIT_USAGE, EXIT_ERASED, EXIT_MISSING = 2, 3, 4


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    p = argparse.ArgumentParser(prog="alicia-admin", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    for name, text in (
        ("erase", "destroy a conversation's data key (crypto-shredding)"),
        ("reasoning", "print a conversation's stored reasoning steps"),
        ("remarks", "print the progress remarks spoken in a conversation"),
    ):
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("--conversation", required=True, help="conversation id (room name)")
    return p


async def _run(args: argparse.Namespace, url: str, keys_spec: str) -> int:
    from sqlalchemy import text

    from alicia.agent.engine.sealing import KeyConfigError, ReasoningSealer, SealError, parse_keys

    from .engine import create_engine
    from .keys import KeyStore

    try:
        master = ReasoningSealer(parse_keys(keys_spec))
    except KeyConfigError as exc:
        print(f"alicia-admin: ALICIA_REASONING_KEYS: {exc}", file=sys.stderr)
        return EXIT_USAGE
    cid = args.conversation
    async with KeyStore(url, master) as store:
        if args.command == "erase":
            erased = await store.erase(cid)
            print(f"{cid}: data key {'erased' if erased else 'already erased or never made'}")
            return 0
        remarks = args.command == "remarks"
        engine = create_engine(url, pooled=False)
        try:
            async with engine.connect() as conn:
                rows = (
                    await conn.execute(
                        text(
                            "SELECT id, target_id, spoken_at, content, sealed "
                            "FROM alicia_remarks WHERE conversation_id = :cid "
                            "AND deleted_at IS NULL ORDER BY spoken_at, sequence_number"
                            if remarks
                            else "SELECT message_id, sequence_number, content "
                            "FROM alicia_reasoning_steps WHERE conversation_id = :cid "
                            "AND deleted_at IS NULL ORDER BY sent_at, sequence_number"
                        ),
                        {"cid": cid},
                    )
                ).all()
        finally:
            await engine.dispose()
        if not rows:
            what = "remarks" if remarks else "reasoning"
            print(f"alicia-admin: no stored {what} for {cid!r}", file=sys.stderr)
            return EXIT_MISSING
        key = await store.data_key(cid, create=False)
        sealer = ReasoningSealer([(f"data:{cid}", key)]) if key is not None else None
        if remarks:
            for rid, target, spoken_at, content, sealed in rows:
                if sealed is not None:
                    if sealer is None:
                        print(f"alicia-admin: the data key of {cid!r} is erased", file=sys.stderr)
                        return EXIT_ERASED
                    try:
                        content = sealer.open(sealed, cid, knd="remark", ref=rid)
                    except SealError as exc:
                        print(f"alicia-admin: remark {rid}: {exc}", file=sys.stderr)
                        return EXIT_ERASED
                print(f"{spoken_at}\t{target or ''}\t{content or ''}")
            return 0
        for message_id, index, content in rows:
            if content.startswith("eyJ") and content.count(".") == 4:  # JWE compact
                if sealer is None:
                    print(f"alicia-admin: the data key of {cid!r} is erased", file=sys.stderr)
                    return EXIT_ERASED
                try:
                    content = sealer.open(content, cid)
                except SealError as exc:
                    print(f"alicia-admin: step {index} of {message_id}: {exc}", file=sys.stderr)
                    return EXIT_ERASED
            print(f"{message_id}\t{index}\t{content}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``alicia-admin`` console script."""
    args = build_parser().parse_args(argv)
    url = os.environ.get("DATABASE_URL", "").strip()
    keys_spec = os.environ.get("ALICIA_REASONING_KEYS", "").strip()
    if not url or not keys_spec:
        print("alicia-admin: DATABASE_URL and ALICIA_REASONING_KEYS are required", file=sys.stderr)
        return EXIT_USAGE
    return asyncio.run(_run(args, url, keys_spec))


if __name__ == "__main__":
    sys.exit(main())

"""python -m tokpos: the command-line tool's demo, from Python.

    python -m tokpos demo [--text T] [--dim D] [--vocab V] [--context L]
                          [--seed S] [--base B] [--json]

The options, their defaults and their ranges are those of the C++ tool's
`tokpos demo` (apps/tokpos/cli.cc), and the report is printed by the same C++
code (tokpos._core.demo_report), so both print the same bytes. A bad option
exits with status 2 and argparse's message; a library error (for example a
text longer than --context) prints "tokpos: error: ..." on stderr and exits
with status 1, as the C++ tool does. --text must be UTF-8 (the C++ tool also
takes other bytes).
"""

from __future__ import annotations

import argparse
import math
import sys

from . import __version__, _core

# The C++ tool's defaults (apps/tokpos/demo.h).
DEFAULT_TEXT = "Hello, transformer!"
DEFAULT_VOCAB = 260
DEFAULT_DIM = 64
DEFAULT_CONTEXT = 128
DEFAULT_SEED = 0
DEFAULT_BASE = 10000.0


def _int_in(lo: int, hi: int):
    """An argparse type: a decimal integer in [lo, hi]."""

    def parse(s: str) -> int:
        try:
            v = int(s, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{s}' is not an integer") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"value {v} not in range {lo} to {hi}")
        return v

    return parse


def _seed(s: str) -> int:
    """Decimal digits only, in [0, 2^64): no sign, no wrap-around."""
    if not s or not s.isascii() or not s.isdigit() or int(s) >= 1 << 64:
        raise argparse.ArgumentTypeError(f"'{s}' is not an integer in [0, 2^64 - 1 = {(1 << 64) - 1}]")
    return int(s)


def _positive_finite(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{s}' is not a number") from None
    if not (v > 0 and math.isfinite(v)):
        raise argparse.ArgumentTypeError(f"'{s}' must be > 0 and finite")
    return v


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m tokpos",
        description="tokpos: token and position embeddings, the input stage of a transformer",
    )
    p.add_argument("--version", action="version", version=__version__)
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    demo = sub.add_parser(
        "demo",
        help="Embed a text with learned and sinusoidal positions and compare them",
        description="Embed a text with learned and sinusoidal positions and compare them",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    demo.add_argument("--text", default=DEFAULT_TEXT, help="Text to embed (byte tokenizer: id = byte + 4)")
    demo.add_argument("--dim", type=_int_in(1, 1 << 20), default=DEFAULT_DIM, help="Model width D")
    demo.add_argument("--vocab", type=_int_in(1, 1 << 24), default=DEFAULT_VOCAB, help="Vocabulary size V")
    demo.add_argument("--context", type=_int_in(1, 1 << 20), default=DEFAULT_CONTEXT, help="Max context L")
    demo.add_argument(
        "--seed", type=_seed, default=DEFAULT_SEED, help="Seed of the Philox initialiser, in [0, 2^64)"
    )
    demo.add_argument(
        "--base",
        type=_positive_finite,
        default=DEFAULT_BASE,
        help="Sinusoidal base (> 1, for the wavelength bands)",
    )
    demo.add_argument("--json", action="store_true", help="Print one JSON object instead of the report")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_usage(sys.stderr)
        print("python -m tokpos: error: a command is required (demo)", file=sys.stderr)
        return 2
    try:
        args.text.encode("utf-8")
    except UnicodeEncodeError:
        # argv held bytes that are not UTF-8 (decoded with surrogateescape);
        # the core takes text as UTF-8 str.
        print("tokpos: error: --text is not valid UTF-8; python -m tokpos takes UTF-8 text only", file=sys.stderr)
        return 1
    try:
        report = _core.demo_report(args.text, args.vocab, args.dim, args.context, args.seed, args.base, args.json)
    except (ValueError, IndexError, OSError, MemoryError, RuntimeError) as e:
        print(f"tokpos: error: {e}", file=sys.stderr)
        return 1
    # The report's bytes as the C++ tool writes them, whatever stdout's encoding.
    data = report.encode("utf-8")
    stream = getattr(sys.stdout, "buffer", None)
    if stream is None:
        sys.stdout.write(report)
    else:
        sys.stdout.flush()
        stream.write(data)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())

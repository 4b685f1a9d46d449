"""python -m tokpos: the command-line tool's demo, from Python.

    python -m tokpos demo [--text T] [--dim D] [--vocab V] [--context L]
                          [--seed S] [--base B] [--json]

The options, their defaults and their rules are the C++ tool's `tokpos
demo`: the defaults are read from the core (tokpos._core.DemoOptions), each
value is checked by the core's rule for its parameter (the one the CLI and
tokpos serve use, with the same message), and the report is printed by the
same C++ code (tokpos._core.demo_report), so both print the same bytes. A
bad option exits with status 2 and argparse's usage line above the rule's
message; a library error (for example a text longer than --context) prints
"tokpos: error: ..." on stderr and exits with status 1, as the C++ tool
does. --text must be UTF-8 (the C++ tool also takes other bytes).
"""

from __future__ import annotations

import argparse
import sys

from . import __version__, _core

DEFAULTS = _core.DemoOptions()  # the C++ tool's defaults (src/frontend/demo_report.h)


def _rule(name: str):
    """An argparse type: the text checked by the core's rule for parameter `name`."""

    def parse(s: str):
        # Bytes of argv that are not UTF-8 (surrogate-escaped) become U+FFFD: no rule accepts them.
        text = s.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        try:
            return _core.parse_param(name, text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    parse.__name__ = name  # argparse names the type in its own messages
    return parse


def _help(text: str, name: str) -> str:
    return f"{text}: {_core.describe_param(name)}"


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
    demo.add_argument("--text", default=DEFAULTS.text, help="Text to embed (byte tokenizer: id = byte + 4)")
    demo.add_argument("--dim", type=_rule("dim"), default=DEFAULTS.dim, help=_help("Model width D", "dim"))
    demo.add_argument("--vocab", type=_rule("vocab"), default=DEFAULTS.vocab_size,
                      help=_help("Vocabulary size V", "vocab"))
    demo.add_argument("--context", type=_rule("context"), default=DEFAULTS.max_context,
                      help=_help("Max context L", "context"))
    demo.add_argument("--seed", type=_rule("seed"), default=DEFAULTS.seed,
                      help=_help("Seed of the Philox initialiser", "seed"))
    demo.add_argument("--base", type=_rule("base"), default=DEFAULTS.base, help=_help("Sinusoidal base", "base"))
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

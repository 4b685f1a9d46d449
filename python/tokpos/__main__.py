"""python -m tokpos: the command-line tool's demo and lab kits, from Python.

    python -m tokpos demo [--text T] [--dim D] [--vocab V] [--context L]
                          [--seed S] [--base B] [--json] [--lang zh|en]
                          [--weights FILE --preset gpt2|bert [--map ROLE=NAME ...]]
    python -m tokpos lab c DIR [--lang zh|en]
    python -m tokpos lab pytorch DIR [--lang zh|en] [--exercise]
    python -m tokpos train [--steps N] [--every K] [--seed S] [--threads T]
                           [--scheme learned|sinusoidal|both] [--out RUN.safetensors]
                           [--json] [--lang zh|en] [--no-progress] [model settings]

`lab` writes a lesson's kit into DIR (new or empty) as `tokpos lab` does,
through the same C++ code (tokpos._core.write_lab), and prints the same
lines; without --lang, tokpos._core.default_lang() picks zh or en from
LC_ALL, LC_MESSAGES and LANG. A refused DIR prints "tokpos: error: ..." and
exits with status 1.

The options, their defaults and their rules are the C++ tool's `tokpos
demo`: the defaults are read from the core (tokpos._core.DemoOptions), each
value is checked by the core's rule for its parameter (the one the CLI and
tokpos serve use, with the same message), and the report is printed by the
same C++ code (tokpos._core.demo_report), so both print the same bytes. A
bad option exits with status 2 and argparse's usage line above the rule's
message; a library error (for example a text longer than --context) prints
"tokpos: error: ..." on stderr and exits with status 1, as the C++ tool
does. --text must be UTF-8 (the C++ tool also takes other bytes).
--lang, --weights, --preset and --map are the C++ tool's too: the report's
language (without it, tokpos._core.default_lang()), and a checkpoint whose
trained position table the report shows beside the fresh ones; the checks
that tie them together (--weights needs --preset, and excludes --dim and
--context) are the core's, with its messages.

`train` runs tokpos.lesson.train: a small byte-level decoder trained with a
learned and with a sinusoidal position table from the same seed and batches,
a progress bar on stderr, then a summary on stdout (--lang) or, with --json,
everything recorded as one JSON object. --out writes the run file (the
learned table every K steps; tokpos plot and tokpos serve --weights read
it). A bad setting exits with status 2 and names the value and its limit.
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


class _Given(argparse.Action):
    """Stores the value and records that the option was given (NAME_given),
    so that the core can refuse --dim or --context beside --weights."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        setattr(namespace, self.dest + "_given", True)


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
    demo.add_argument("--dim", type=_rule("dim"), default=DEFAULTS.dim, action=_Given,
                      help=_help("Model width D", "dim"))
    demo.add_argument("--vocab", type=_rule("vocab"), default=DEFAULTS.vocab_size,
                      help=_help("Vocabulary size V", "vocab"))
    demo.add_argument("--context", type=_rule("context"), default=DEFAULTS.max_context, action=_Given,
                      help=_help("Max context L", "context"))
    demo.add_argument("--seed", type=_rule("seed"), default=DEFAULTS.seed,
                      help=_help("Seed of the Philox initialiser", "seed"))
    demo.add_argument("--base", type=_rule("base"), default=DEFAULTS.base, help=_help("Sinusoidal base", "base"))
    demo.add_argument("--json", action="store_true", help="Print one JSON object instead of the report")
    demo.add_argument("--lang", choices=("zh", "en"), default=None,
                      help="Language of the report (default: zh when LC_ALL, LC_MESSAGES or LANG starts with zh, "
                           "else en); the numbers and --json are the same in both")
    demo.add_argument("--weights", metavar="FILE", default="",
                      help="FILE.safetensors: show its trained position table beside a fresh learned and a "
                           "sinusoidal one of its (L, D) (needs --preset; excludes --dim and --context)")
    demo.add_argument("--preset", choices=("gpt2", "bert"), default="", help="How to read --weights")
    demo.add_argument("--map", metavar="ROLE=NAME", nargs="+", action="extend", default=[],
                      help="Read a role (wte, wpe, word, position, token_type, ln_weight, ln_bias) from NAME")
    lab = sub.add_parser(
        "lab",
        help="Write a lesson's kit: the C lab to do, or the PyTorch lesson to read and run",
        description="Write a lesson's kit: the C lab to do, or the PyTorch lesson to read and run",
    )
    kinds = lab.add_subparsers(dest="kind", metavar="KIND", required=True)
    lang_help = "Language of the kit's texts (default: zh when LC_ALL, LC_MESSAGES or LANG starts with zh, else en)"
    for kind, text in (("c", "The C lab: TASK.md, a Makefile, framework/student.c to write"),
                       ("pytorch", "The PyTorch lesson: main.py, its tests, a README")):
        k = kinds.add_parser(kind, help=text, description=text)
        k.add_argument("dir", metavar="DIR", help="A new or empty directory")
        k.add_argument("--lang", choices=("zh", "en"), default=None, help=lang_help)
        if kind == "pytorch":
            k.add_argument("--exercise", action="store_true",
                           help="The modules' bodies left to write (raise NotImplementedError)")
    _train_parser(sub)
    return p


def _setting(name: str, minimum: int):
    """An argparse type: an integer setting of tokpos.lesson.train, >= minimum."""

    def parse(s: str) -> int:
        try:
            value = int(s, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} = {s!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{name} = {value} must be >= {minimum}")
        return value

    parse.__name__ = name
    return parse


def _train_parser(sub) -> None:
    from . import lesson  # numpy only; torch is imported when the run starts

    d = lesson.DEFAULTS
    text = "Train a small model with learned and with sinusoidal positions and record the learned table"
    t = sub.add_parser("train", help=text, description=text, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    t.add_argument("--steps", type=_setting("steps", 1), default=d["steps"], help="Optimizer steps per scheme (>= 1)")
    t.add_argument("--every", type=_setting("every", 1), default=d["every"],
                   help="Record the learned table, the losses and the diagnostics every K steps (1 <= K <= --steps)")
    t.add_argument("--seed", type=_setting("seed", 0), default=d["seed"],
                   help="Seed of the weights and of the batches (the same for both schemes)")
    t.add_argument("--threads", type=_setting("threads", 1), default=d["threads"],
                   help="Threads of torch and of tokpos's kernels: the run is bitwise reproducible for a given "
                        "seed and thread count")
    t.add_argument("--scheme", choices=("learned", "sinusoidal", "both"), default="both",
                   help="Which position schemes to train (--out needs both)")
    t.add_argument("--out", metavar="RUN.safetensors", default=None,
                   help="Write the run file here (the learned table at every recorded step, the sinusoidal table, "
                        "the losses); without it nothing is written")
    t.add_argument("--json", action="store_true",
                   help="Print everything recorded as one JSON object instead of the summary")
    t.add_argument("--lang", choices=("zh", "en"), default=None,
                   help="Language of the summary and the progress bar (default: zh when LC_ALL, LC_MESSAGES or "
                        "LANG starts with zh, else en); --json is the same in both")
    t.add_argument("--no-progress", action="store_true", help="No progress bar on stderr")
    model = t.add_argument_group("model settings")
    model.add_argument("--layers", type=_setting("layers", 1), default=d["layers"], help="Transformer blocks")
    model.add_argument("--heads", type=_setting("heads", 1), default=d["heads"], help="Attention heads")
    model.add_argument("--dim", type=_setting("dim", 2), default=d["dim"],
                       help="Model width D (even, a multiple of --heads)")
    model.add_argument("--context", type=_setting("context", 2), default=d["context"], help="Max context L")
    model.add_argument("--batch", type=_setting("batch", 1), default=d["batch"], help="Windows per batch")
    model.add_argument("--lr", type=float, default=d["lr"], help="AdamW learning rate, in (0, 1]")
    t.set_defaults(train_parser=t)


def _write(text: str) -> None:
    """Writes text as UTF-8 bytes, whatever stdout's encoding."""
    stream = getattr(sys.stdout, "buffer", None)
    if stream is None:
        sys.stdout.write(text)
    else:
        sys.stdout.flush()
        stream.write(text.encode("utf-8"))
    sys.stdout.flush()


def _lab(args: argparse.Namespace) -> int:
    lang = args.lang or _core.default_lang()
    exercise = getattr(args, "exercise", False)
    try:
        written = _core.write_lab(args.kind, args.dir, lang, exercise)
    except (ValueError, OSError) as e:
        print(f"tokpos: error: {e}", file=sys.stderr)
        return 1
    _write(_core.lab_report(args.kind, args.dir, lang, written))
    return 0


def _train(args: argparse.Namespace) -> int:
    import json

    from . import lesson

    lang = args.lang or _core.default_lang()
    settings = {k: getattr(args, k) for k in ("steps", "every", "seed", "threads", "layers", "heads", "dim",
                                                "context", "batch", "lr")}
    try:
        lesson.check_settings(**settings)
        lesson.check_output(args.scheme, args.out)
    except ValueError as e:
        args.train_parser.error(str(e))  # usage and the message on stderr, status 2, as argparse's own checks
    try:
        run = lesson.train(**settings, scheme=args.scheme, out=args.out, progress=not args.no_progress, lang=lang)
    except (ValueError, OSError, RuntimeError) as e:
        print(f"tokpos: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ntokpos: interrupted; nothing was written", file=sys.stderr)
        return 130
    if args.json:
        _write(json.dumps(run.to_json(), ensure_ascii=False) + "\n")
    else:
        _write(lesson.summary(run, lang, out=args.out))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_usage(sys.stderr)
        print("python -m tokpos: error: a command is required (demo, lab, train)", file=sys.stderr)
        return 2
    if args.command == "lab":
        return _lab(args)
    if args.command == "train":
        return _train(args)
    try:
        args.text.encode("utf-8")
    except UnicodeEncodeError:
        # argv held bytes that are not UTF-8 (decoded with surrogateescape);
        # the core takes text as UTF-8 str.
        print("tokpos: error: --text is not valid UTF-8; python -m tokpos takes UTF-8 text only", file=sys.stderr)
        return 1
    try:
        report = _core.demo_report(
            args.text, args.vocab, args.dim, args.context, args.seed, args.base, args.json,
            lang=args.lang or _core.default_lang(),
            weights=args.weights,
            preset=args.preset,
            map=[m for item in args.map for m in item.split(",")],  # as the C++ tool: --map a=b,c=d
            dim_given=getattr(args, "dim_given", False),
            context_given=getattr(args, "context_given", False),
        )
    except (ValueError, IndexError, OSError, MemoryError, RuntimeError) as e:
        print(f"tokpos: error: {e}", file=sys.stderr)
        return 1
    # The report's bytes as the C++ tool writes them, whatever stdout's encoding.
    _write(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The `iofeed` command line: arguments parsed (`cli/parser.py`), the subcommand run
(`cli/commands.py`), bad input as one line and an exit status."""
from __future__ import annotations

import sys

from ..errors import IofeedError
from .parser import build_parser
from .printing import print_manifest, print_preprocess_summary

__all__ = ["build_parser", "main", "print_manifest", "print_preprocess_summary"]


def main(argv: list[str] | None = None) -> int:
    """Run the command line; bad input prints one line and returns a non-zero status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    child = None
    if argv[:1] == ["doctor"] and "--" in argv:  # `iofeed doctor ... -- COMMAND ...`: the command to trace
        argv, child = argv[:argv.index("--")], argv[argv.index("--") + 1:]
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command == "doctor" and not extra[0].startswith("-"):  # `cli/doctor SRC python x.py`: no `--`
        print(f"iofeed doctor: error: unrecognized arguments: {' '.join(extra)}: put the command to trace after "
              f"`--`: iofeed doctor {' '.join(a for a in argv[1:] if a not in extra)} -- {' '.join(extra)}",
              file=sys.stderr)
        return 2
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if child is not None:
        args.child = child
    try:
        status = args.func(args)
    except IofeedError as exc:
        print(f"iofeed: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("iofeed: interrupted", file=sys.stderr)
        return 130
    except OSError as exc:  # one the command did not expect: still one line, with the file
        where = f": {exc.filename}" if exc.filename else ""
        print(f"iofeed: error: {exc.strerror or str(exc) or type(exc).__name__}{where}", file=sys.stderr)
        return 1
    return status or 0  # a command's own status (doctor: the traced command's)


if __name__ == "__main__":
    sys.exit(main())

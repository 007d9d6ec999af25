"""FlexibleArgumentParser, as vLLM's example scripts import it: an ArgumentParser that also
accepts option names with underscores (--max_tokens as --max-tokens), as vLLM's does."""

import argparse
import sys


class FlexibleArgumentParser(argparse.ArgumentParser):
    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        args = sys.argv[1:] if args is None else list(args)
        fixed = []
        for arg in args:
            if arg.startswith("--") and "_" in arg.split("=", 1)[0]:
                name, eq, value = arg.partition("=")
                arg = name.replace("_", "-") + eq + value
            fixed.append(arg)
        return super().parse_args(fixed, namespace)

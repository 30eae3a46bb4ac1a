"""``fpipe view TARGET``: a local, read-only web server to look at a dataset and its plan.

TARGET is what ``fpipe plan`` takes: a dataset folder (or table), a metadataset.yaml, or a plan
YAML, with the same flags (``--batch-size``, ``--world-size``, ``--mix-history`` ...). The
pages: each dataset (splits, shards, fields, index columns, a paged grid of samples with
thumbnails, playable video and audio, captions; a sample's members and the sample as the
TaskEncoder receives it), the mix (each dataset's share of samples and tokens per window of
steps, with weight changes, batch sizes and skipped steps marked), a step (the samples of step N
on each rank) and the reverse (the steps of a sample key), and, with ``--state FILE``, what a
saved loader state says. Only the plan runs for the mix and step pages; no payload is read.

The server binds to 127.0.0.1 unless ``--host`` is given, and serves only what TARGET's
datasets hold. Thumbnails are made on request and kept in ``--cache`` (default
~/.cache/fpipe/view; delete it any time). Ctrl-C stops it. See docs/view.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading

from fpipe.core.errors import FpipeError

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the ``view`` sub-command."""
    from fpipe.cli._plan import add_config_arguments

    p = sub.add_parser(
        "view",
        help="a local web page of a dataset, its mix, the samples of a step, a saved state",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("target", help="dataset folder, metadataset.yaml or plan YAML (as fpipe plan)")
    p.add_argument("--state", metavar="FILE", help="a saved loader state (as fpipe state show)")
    p.add_argument(
        "--mix-history",
        metavar="FILE",
        help="JSON of loader.mix_history(): the run's online weight changes",
    )
    p.add_argument("--host", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8765, help="port (default 8765; 0: any free one)")
    p.add_argument("--cache", metavar="DIR", help="thumbnail folder (default ~/.cache/fpipe/view)")
    p.add_argument("--log", action="store_true", help="print one line per request")
    add_config_arguments(p)
    return p


def run(args: argparse.Namespace) -> int:
    """Serve until interrupted; exit status 2 if TARGET or the state cannot be read."""
    from fpipe.cli._plan import plan_overrides
    from fpipe.cli._state import read_snapshot_file, show_envelope
    from fpipe.view import make_server, open_target
    from fpipe.view.media import default_cache_dir

    try:
        overrides = plan_overrides(args)
        if args.mix_history:
            overrides["mix_history"] = os.path.abspath(args.mix_history)
        state = info = None
        if args.state:
            state = read_snapshot_file(args.state)
            info = show_envelope(state)
        view = open_target(
            args.target, overrides, state=state, state_info=info, state_name=args.state or ""
        )
    except (FpipeError, OSError) as e:
        print(f"fpipe view: error: {e}", file=sys.stderr)
        return 2
    cache = args.cache or str(default_cache_dir())
    try:
        server = make_server(view, host=args.host, port=args.port, cache_dir=cache, log=args.log)
    except OSError as e:
        print(f"fpipe view: cannot listen on port {args.port}: {e}", file=sys.stderr)
        return 2
    if view.plan_error:
        print(f"fpipe view: no plan pages: {view.plan_error}", file=sys.stderr)
    print(
        f"fpipe view: serving {args.target} at {server.url} (thumbnails in {cache}; Ctrl-C stops)"
    )
    sys.stdout.flush()
    threading.Thread(target=view.warm, daemon=True).start()
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0

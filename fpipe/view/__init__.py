"""``fpipe view``: a local, read-only web server showing a dataset, a blend's plan, the samples
of a step and a saved loader state (see docs/view.md).

Example::

    from fpipe.view import make_server, open_target
    server = make_server(open_target("data/plan.yaml"), port=8000, cache_dir="/tmp/thumbs")
    print(server.url)
    server.serve_forever()
"""

from fpipe.view.server import make_server
from fpipe.view.target import ViewTarget, open_target

__all__ = ["ViewTarget", "make_server", "open_target"]

import subprocess
import sys

import pytest


@pytest.mark.slow
def test_demo_runs_and_resumes_exactly(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "fpipe.cli.main",
        "demo",
        "--dir",
        str(tmp_path),
        "--steps",
        "4",
        "--after",
        "3",
        "--workers",
        "1",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "the stream continued exactly" in out.stdout
    assert out.stdout.count(" same") == 3

"""The command line, run as a user runs it."""

import subprocess
import sys


def run(*args):
    return subprocess.run([sys.executable, "-m", "qkv", *args], capture_output=True, text=True,
                          timeout=120)


def test_demo_agrees_with_the_lesson():
    result = run("demo")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for expected in ("0.434", "0.214", "0.351", "(1.219, 0.779)", "(1.2202, 0.7798)",
                     "[0.9997, 0.0003]", "[0.731, 0.269]", "8.00", "1.00", "(10, 10)",
                     "All numbers agree with the lesson"):
        assert expected in out, expected
    assert "✗" not in out


def test_help_lists_commands():
    result = run("--help")
    assert result.returncode == 0 and "demo" in result.stdout


def test_version():
    import qkv

    result = run("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"qkv {qkv.__version__}"

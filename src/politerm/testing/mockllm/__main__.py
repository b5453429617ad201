"""``python -m politerm.testing.mockllm [--token T] [--reply TEXT]``: serve until Ctrl-C."""

from __future__ import annotations

import argparse
import threading

from politerm.testing.mockllm import MockLLM, Rule


def main(argv: list[str] | None = None) -> None:
    """Run the mock server in the foreground, printing its URL and token."""
    parser = argparse.ArgumentParser(prog="python -m politerm.testing.mockllm")
    parser.add_argument("--token", default=None, help="API key clients must send")
    parser.add_argument("--reply", default="OK.", help="answer to every main request")
    args = parser.parse_args(argv)
    llm = MockLLM([Rule(".*", args.reply)], token=args.token).start()
    print(f"url={llm.url} token={llm.token}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        llm.stop()


if __name__ == "__main__":
    main()

"""How each agent CLI runs offline against the loopback model server, at its default settings.

:func:`prepare` seeds a scratch home for one agent (the configs that skip first-run dialogs
and point the CLI at the mock server) and returns its command line and environment. The
display settings stay the CLIs' defaults: the canary checks what users see.

opencode npm-installs ``@opencode-ai/plugin`` into its config directory on every start whose
directory has no ``node_modules`` (about 64 MB from the npm registry), and while a plugin is
configured (politerm's hooks are one) it draws nothing until that install is over. An
installer that puts those dependencies once next to the binary (:func:`opencode_seed`, as
``tests/realcli/install.py`` does) spares every start the registry: :func:`prepare` links
them into the scratch home. Without them opencode installs as it would for a user.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import shutil
import subprocess
import typing as t

from politerm.agents.profile import load_profile

if t.TYPE_CHECKING:
    from politerm.testing.mockllm import MockLLM

# Tool names the mock's tool calls use, and the API each CLI speaks.
API = {
    "claude": "anthropic",
    "codex": "responses",
    "gemini": "gemini",
    "opencode": "chat",
    "aider": "chat",
}
AIDER_MODEL = "openai/mock"
# Beside ``node_modules`` in the npm prefix opencode was installed into: a copy of what
# opencode itself installs into ``~/.config/opencode`` (package.json, package-lock.json,
# node_modules) when it starts.
OPENCODE_SEED = "opencode-config"


@dataclasses.dataclass(frozen=True)
class Spec:
    """One agent ready to launch: its profile, command line, environment and directories."""

    cli: str
    profile: str
    argv: list[str]
    env: dict[str, str]
    home: pathlib.Path
    workdir: pathlib.Path


@dataclasses.dataclass(frozen=True)
class Options:
    """What a test changes in the standard set-up.

    Attributes
    ----------
    dialogs
        Leave out the seeding that skips first-run dialogs.
    ask
        Make the CLI ask before running a shell command where it would not by default
        (Codex asks only for escalated commands: the mock's rule decides that).
    subscription
        Claude Code only: sign in as a subscriber (``CLAUDE_CODE_OAUTH_TOKEN``) instead of
        with an API key, so it reads the plan's usage-limit headers.
    """

    dialogs: bool = False
    ask: bool = False
    subscription: bool = False


def _write(path: pathlib.Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _git_init(workdir: pathlib.Path, env: dict[str, str]) -> None:
    for argv in (
        ["git", "init", "-q", "-b", "main"],
        ["git", "config", "user.name", "politerm tests"],
        ["git", "config", "user.email", "tests@politerm.invalid"],
        ["git", "config", "commit.gpgsign", "false"],
    ):
        subprocess.run(argv, cwd=workdir, env=env, check=True, capture_output=True, timeout=30)


def opencode_seed(binary: pathlib.Path) -> pathlib.Path | None:
    """The config-directory dependencies installed for an opencode ``binary``, if any.

    They are looked for in ``<prefix>/opencode-config`` for a binary at
    ``<prefix>/node_modules/.bin/opencode`` (an ``npm install --prefix``); complete means
    ``node_modules`` and the ``package-lock.json`` that opencode reads to see it is done.

    Examples
    --------
    >>> opencode_seed(pathlib.Path("/usr/bin/opencode")) is None
    True
    """
    bin_dir = binary.parent
    if bin_dir.name != ".bin" or bin_dir.parent.name != "node_modules":
        return None
    seed = bin_dir.parent.parent / OPENCODE_SEED
    if (seed / "node_modules").is_dir() and (seed / "package-lock.json").is_file():
        return seed
    return None


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another filesystem, or links not allowed here
        shutil.copy2(src, dst)


def _seed_opencode(seed: pathlib.Path, config_dir: pathlib.Path) -> None:
    """Put opencode's dependencies into ``config_dir`` so that it does not install them.

    opencode skips its install when ``node_modules`` exists and the lock file's root lists
    every dependency of ``package.json``. The files are hard links (about 3,900 entries,
    64 MB: 0.6 s where a copy took 3.4 s, on a loaded machine), which nothing writes into
    as opencode installs nothing; a copy where linking fails. The two JSON files are
    copies: an install would rewrite them in place.
    """
    if (config_dir / "node_modules").exists():  # a second agent sharing this home
        return
    config_dir.mkdir(parents=True, exist_ok=True)
    modules = config_dir / "node_modules"
    shutil.copytree(seed / "node_modules", modules, symlinks=True, copy_function=_link_or_copy)
    for name in ("package.json", "package-lock.json"):
        shutil.copyfile(seed / name, config_dir / name)


def _base_env(home: pathlib.Path) -> dict[str, str]:
    return {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "TERM": "xterm-256color",
        "NO_UPDATE_NOTIFIER": "1",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
    }


def prepare(
    cli: str,
    binary: pathlib.Path,
    llm: MockLLM,
    home: pathlib.Path,
    workdir: pathlib.Path,
    options: Options | None = None,
    profile_name: str | None = None,
) -> Spec:
    """Seed ``home`` for ``cli`` and return how to launch it in ``workdir``.

    The command line is the profile's (``profile_name``, default the CLI's own), with the
    installed binary in place of the program name. opencode's home gets the dependencies
    its installer put beside it (:func:`opencode_seed`), when there are any.
    """
    opts = options or Options()
    home.mkdir(parents=True, exist_ok=True)
    workdir.mkdir(parents=True, exist_ok=True)
    profile = load_profile(profile_name or cli)
    argv = [str(binary), *profile.command[1:]]
    env = {**_base_env(home)}
    wd = str(workdir.resolve())
    if cli == "claude":
        cfg = home / ".claude"
        env |= {
            "CLAUDE_CONFIG_DIR": str(cfg),
            "ANTHROPIC_BASE_URL": llm.url,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
        }
        key = "CLAUDE_CODE_OAUTH_TOKEN" if opts.subscription else "ANTHROPIC_API_KEY"
        env[key] = llm.token
        state: dict[str, t.Any] = {"hasCompletedOnboarding": True, "theme": "dark"}
        if not opts.dialogs:
            state["customApiKeyResponses"] = {"approved": [llm.token[-20:]], "rejected": []}
            state["projects"] = {wd: {"hasTrustDialogAccepted": True}}
        _write(cfg / ".claude.json", json.dumps(state))
    elif cli == "codex":
        codex_home = home / ".codex"
        env |= {"CODEX_HOME": str(codex_home), "MOCK_API_KEY": llm.token}
        toml = (
            'model = "mock-model"\nmodel_provider = "mock"\ncheck_for_update_on_startup = false\n'
            "[model_providers.mock]\n"
            f'name = "Mock"\nbase_url = "{llm.url}/v1"\nenv_key = "MOCK_API_KEY"\n'
            'wire_api = "responses"\n'
        )
        if not opts.dialogs:
            toml += f'[projects."{wd}"]\ntrust_level = "trusted"\n'
        _write(codex_home / "config.toml", toml)
    elif cli == "gemini":
        env |= {
            "GEMINI_API_KEY": llm.token,
            "GOOGLE_GEMINI_BASE_URL": llm.url,
            "COLORTERM": "truecolor",
        }
        settings: dict[str, t.Any] = {
            "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
            "privacy": {"usageStatisticsEnabled": False},
            "model": {"disableLoopDetection": True},
        }
        if not opts.dialogs:
            settings["security"] = {"auth": {"selectedType": "gemini-api-key"}}
            _write(home / ".gemini" / "trustedFolders.json", json.dumps({wd: "TRUST_FOLDER"}))
        _write(home / ".gemini" / "settings.json", json.dumps(settings))
    elif cli == "opencode":
        env |= {
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_SHARE": "1",
            "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        }
        if opts.ask:
            env["OPENCODE_PERMISSION"] = json.dumps({"bash": "ask"})
        config = {
            "provider": {
                "mock": {
                    "npm": "@ai-sdk/openai-compatible",
                    "name": "Mock LLM",
                    "options": {"baseURL": f"{llm.url}/v1", "apiKey": llm.token},
                    "models": {"mock-model": {"name": "Mock Model"}},
                }
            },
            "model": "mock/mock-model",
            "small_model": "mock/mock-model",
            "autoupdate": False,
            "share": "disabled",
        }
        _write(home / ".config" / "opencode" / "opencode.json", json.dumps(config))
        seed = opencode_seed(binary)
        if seed is not None:
            _seed_opencode(seed, home / ".config" / "opencode")
        # The one display setting changed from the default; the opencode profile says why.
        _write(home / ".local" / "state" / "opencode" / "kv.json", json.dumps({"sidebar": "hide"}))
    elif cli == "aider":
        env |= {
            "OPENAI_API_BASE": f"{llm.url}/v1",
            "OPENAI_API_KEY": llm.token,
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "GIT_CONFIG_NOSYSTEM": "1",
        }
        meta = {
            AIDER_MODEL: {
                "max_tokens": 8192,
                "max_input_tokens": 128000,
                "max_output_tokens": 8192,
                "input_cost_per_token": 0,
                "output_cost_per_token": 0,
                "litellm_provider": "openai",
                "mode": "chat",
            }
        }
        meta_file = home / ".aider-model-metadata.json"
        _write(meta_file, json.dumps(meta))
        _write(home / ".aider" / "caches" / "model_prices_and_context_window.json", "{}")
        argv += [
            "--model",
            AIDER_MODEL,
            "--no-show-model-warnings",
            "--no-check-update",
            "--no-show-release-notes",
            "--analytics-disable",
            "--no-auto-commits",
            "--model-metadata-file",
            str(meta_file),
        ]
        if not opts.dialogs:
            argv.append("--no-gitignore")
        _git_init(workdir, {**os.environ, **env})
    else:
        msg = f"no recipe for CLI {cli!r}"
        raise ValueError(msg)
    return Spec(cli, profile.name, argv, env, home, workdir)

"""The task bridge's data: tasks, their instructions, the prepared action, and status enums.

The shape follows the original Cursor bridge's ``task_queue.json``: each task has a
``task_id``, a ``status``, ``instruction_details`` (what the requester wants) and, once the
bridge prepared it, ``agent_action_details`` (what the executor must do). The original's
spellings are read too: a single file modification flat in ``instruction_details``
(``file_path``, ``action``, …), the list as ``files_to_modify``, ``instruction`` for the
description, ``content_to_insert`` for ``content``, ``command`` for ``command_string``,
the timeouts nested in ``rth_timeout_config`` and ``outputs_to_capture`` as an object of
file names.

The lifecycle is data: :data:`TRANSITIONS` lists every allowed move and
:func:`check_transition` is the one place that accepts or rejects one.
"""

from __future__ import annotations

import enum
import typing as t

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from politerm.errors import BridgeTaskInvalid


class TaskStatus(str, enum.Enum):
    """Where a task stands; see :data:`TRANSITIONS`."""

    PENDING = "pending"
    PENDING_AGENT_ACTION = "pending_agent_action"
    PROCESSING_BY_AGENT = "processing_by_agent"
    COMPLETED_BY_AGENT = "completed_by_agent"
    FAILED_BY_AGENT = "failed_by_agent"
    COMPLETED = "completed"
    FAILED = "failed"

    @property
    def is_final(self) -> bool:
        """Finalized by the bridge (archived, then pruned from the queue).

        Examples
        --------
        >>> TaskStatus.COMPLETED.is_final, TaskStatus.COMPLETED_BY_AGENT.is_final
        (True, False)
        """
        return self in (TaskStatus.COMPLETED, TaskStatus.FAILED)

    @property
    def is_handed(self) -> bool:
        """Handed to an executor that has not reported yet (never handed over again).

        Examples
        --------
        >>> TaskStatus.PROCESSING_BY_AGENT.is_handed, TaskStatus.PENDING.is_handed
        (True, False)
        """
        return self in (TaskStatus.PENDING_AGENT_ACTION, TaskStatus.PROCESSING_BY_AGENT)


TRANSITIONS: t.Final[t.Mapping[TaskStatus, frozenset[TaskStatus]]] = {
    # pending -> failed: the task is invalid and never reaches an executor.
    TaskStatus.PENDING: frozenset({TaskStatus.PENDING_AGENT_ACTION, TaskStatus.FAILED}),
    # pending_agent_action -> failed: the executor was lost (e.g. its process died) and the
    # evidence says the work may be half done; running it again could do it twice.
    TaskStatus.PENDING_AGENT_ACTION: frozenset(
        {
            TaskStatus.PROCESSING_BY_AGENT,
            TaskStatus.COMPLETED_BY_AGENT,
            TaskStatus.FAILED_BY_AGENT,
            TaskStatus.FAILED,
        }
    ),
    # processing_by_agent (optional, as in the original): the agent says it has started.
    TaskStatus.PROCESSING_BY_AGENT: frozenset(
        {TaskStatus.COMPLETED_BY_AGENT, TaskStatus.FAILED_BY_AGENT, TaskStatus.FAILED}
    ),
    # completed_by_agent -> failed: the bridge's verification disagrees with the agent.
    TaskStatus.COMPLETED_BY_AGENT: frozenset({TaskStatus.COMPLETED, TaskStatus.FAILED}),
    TaskStatus.FAILED_BY_AGENT: frozenset({TaskStatus.FAILED}),
    TaskStatus.COMPLETED: frozenset(),
    TaskStatus.FAILED: frozenset(),
}
"""Every allowed status change; anything else is refused by :func:`check_transition`."""


def check_transition(task_id: str, old: TaskStatus, new: TaskStatus) -> None:
    """Accept the move ``old`` → ``new`` or raise.

    Raises
    ------
    BridgeTaskInvalid
        The move is not in :data:`TRANSITIONS`.

    Examples
    --------
    >>> check_transition("t1", TaskStatus.PENDING, TaskStatus.PENDING_AGENT_ACTION)
    >>> check_transition("t1", TaskStatus.COMPLETED, TaskStatus.PENDING)
    Traceback (most recent call last):
    ...
    politerm.errors.BridgeTaskInvalid: task t1: cannot go from completed to pending
    """
    if new not in TRANSITIONS[old]:
        msg = f"task {task_id}: cannot go from {old.value} to {new.value}"
        raise BridgeTaskInvalid(msg)


class FileAction(str, enum.Enum):
    """What a file modification does."""

    CREATE_FILE = "create_file"
    REPLACE_CONTENT = "replace_content"
    APPEND_CONTENT = "append_content"
    INSERT_BEFORE_LINE = "insert_before_line"
    INSERT_AFTER_LINE = "insert_after_line"
    DELETE_LINES = "delete_lines"
    REPLACE_LINES = "replace_lines"


MARKER_ACTIONS: t.Final = frozenset({FileAction.INSERT_BEFORE_LINE, FileAction.INSERT_AFTER_LINE})
RANGE_ACTIONS: t.Final = frozenset({FileAction.DELETE_LINES, FileAction.REPLACE_LINES})


class Tool(str, enum.Enum):
    """The tool an executor is told to call."""

    EDIT_FILE = "edit_file"
    EXECUTE_COMMANDS_SEQUENTIALLY = "execute_commands_sequentially"
    # A task with only an instruction: the agent is given the text to follow (the builtin
    # executor has nothing to do and completes it, as the original bridge did).
    FOLLOW_INSTRUCTION = "follow_instruction"


class CaptureStream(str, enum.Enum):
    """An output of a command the runner keeps."""

    STDOUT = "stdout"
    STDERR = "stderr"


class _Model(BaseModel):
    # Unknown keys are kept: requesters and agents may annotate tasks, and a bridge must
    # never drop what it did not write.
    model_config = ConfigDict(extra="allow", populate_by_name=True)


def _or_lines(schema: dict[str, t.Any]) -> None:
    """The schema of a text field also admits the original's list of lines."""
    schema.setdefault("anyOf", []).append({"type": "array", "items": {"type": "string"}})


class FileModificationInstruction(_Model):
    """One change to one file.

    Lines are numbered from 1; ranges include both ends. A ``line_marker`` matches every line
    that contains it; ``marker_occurrence`` picks which (1 = first, ``"all"`` = each one).
    """

    file_path: str = Field(min_length=1, description="the file to change")
    action: FileAction
    content: str | None = Field(
        default=None,
        validation_alias=AliasChoices("content", "content_to_insert"),
        description="text to write or insert ('content_to_insert' is accepted as an alias; "
        "a list of lines is joined with newlines)",
        json_schema_extra=_or_lines,
    )
    line_marker: str | None = Field(default=None, description="a substring of the target line")
    marker_occurrence: int | t.Literal["all"] = Field(
        default=1, description="which matching line (1-based) or 'all'"
    )
    start_line_number: int | None = None
    end_line_number: int | None = None
    replacement_content: str | None = Field(
        default=None,
        description="new text for replace_lines (content is accepted too)",
        json_schema_extra=_or_lines,
    )
    create_if_missing: bool = Field(
        default=False,
        validation_alias=AliasChoices("create_if_missing", "create_if_not_exists"),
        description="replace_content/append_content may create the file "
        "('create_if_not_exists' is accepted as an alias)",
    )

    @model_validator(mode="before")
    @classmethod
    def _join_line_lists(cls, data: t.Any) -> t.Any:
        # The original's template lets text be a list of lines; they are joined with "\n".
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for key in ("content", "content_to_insert", "replacement_content"):
            value = data.get(key)
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                data[key] = "\n".join(value)
        if data.get("action") == FileAction.CREATE_FILE.value:
            data.setdefault("content", "")
        return data

    @model_validator(mode="after")
    def _parameters_fit_action(self) -> t.Self:
        a = self.action
        needs_content = a in (FileAction.REPLACE_CONTENT, FileAction.APPEND_CONTENT)
        if (needs_content or a in MARKER_ACTIONS) and self.content is None:
            msg = f"{a.value} needs content"
            raise ValueError(msg)
        if a in MARKER_ACTIONS:
            if not self.line_marker:
                msg = f"{a.value} needs a non-empty line_marker"
                raise ValueError(msg)
            if isinstance(self.marker_occurrence, int) and self.marker_occurrence < 1:
                msg = (
                    f"marker_occurrence must be 1 or more, or 'all' (got {self.marker_occurrence})"
                )
                raise ValueError(msg)
        if a in RANGE_ACTIONS:
            s, e = self.start_line_number, self.end_line_number
            if s is None or e is None:
                msg = f"{a.value} needs start_line_number and end_line_number"
                raise ValueError(msg)
            if s < 1 or e < s:
                msg = (
                    f"bad line range {s}-{e}: lines start at 1 and the end is not before the start"
                )
                raise ValueError(msg)
        if a is FileAction.REPLACE_LINES and self.new_lines_text is None:
            msg = "replace_lines needs replacement_content"
            raise ValueError(msg)
        return self

    @property
    def new_lines_text(self) -> str | None:
        """The text replace_lines puts in place of the range."""
        return self.replacement_content if self.replacement_content is not None else self.content


TIMEOUT_KEYS: t.Final = ("launch_timeout", "activity_timeout", "total_timeout")


def _or_file_names(schema: dict[str, t.Any]) -> None:
    """The schema of ``outputs_to_capture`` also admits the original's object of file names."""
    listed = {k: schema.pop(k) for k in ("type", "items") if k in schema}
    names = {
        "type": "object",
        "properties": {f"{k}_file": {"type": "string"} for k in ("stdout", "stderr", "status")},
    }
    schema["anyOf"] = [listed, names]


def _command_or_alias(schema: dict[str, t.Any]) -> None:
    """The schema of a command needs ``command_string`` or its alias ``command``."""
    props = schema["properties"]
    props["command"] = {**props["command_string"], "description": "alias of command_string"}
    # command_id is optional in a task too: a command without one is named cmd_<index>.
    optional = ("command_string", "command_id")
    schema["required"] = [r for r in schema["required"] if r not in optional]
    schema["anyOf"] = [{"required": ["command_string"]}, {"required": ["command"]}]


class CommandExecutionInstruction(_Model):
    """One command to run with the bridge's runner (see :mod:`politerm.bridge.runner`).

    The original's ``rth_timeout_config`` object of timeouts is read (a timeout given at the
    top level wins), and so is ``outputs_to_capture`` as an object of file names
    (``stdout_file``, ``stderr_file``, ``status_file``): the streams it names are captured,
    both when it names neither. The files themselves are always politerm's own, beside the
    task (``commands/<command_id>.stdout.log``, …), so a task cannot write outside them.

    Examples
    --------
    >>> c = CommandExecutionInstruction.model_validate({"command_id": "b", "command": "make",
    ...     "rth_timeout_config": {"total_timeout": 300, "launch_timeout": 30},
    ...     "outputs_to_capture": {"stdout_file": "out.txt", "status_file": "s.json"}})
    >>> c.command_string, c.launch_timeout, c.total_timeout, [o.value for o in c.outputs_to_capture]
    ('make', 30.0, 300.0, ['stdout'])
    """

    model_config = ConfigDict(json_schema_extra=_command_or_alias)

    command_id: str = Field(
        min_length=1,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="names its files; a task's command without one is cmd_<index>",
    )
    command_string: str = Field(
        min_length=1,
        validation_alias=AliasChoices("command_string", "command"),
        description="run by /bin/sh -c; 'command' is accepted as an alias",
    )
    working_directory: str | None = None
    launch_timeout: float = Field(
        default=30.0, gt=0, description="seconds until the process must have printed something"
    )
    activity_timeout: float = Field(
        default=300.0, gt=0, description="seconds of silence after which it is killed"
    )
    total_timeout: float = Field(default=3600.0, gt=0, description="seconds it may run at all")
    outputs_to_capture: list[CaptureStream] = Field(
        default_factory=lambda: [CaptureStream.STDOUT, CaptureStream.STDERR],
        json_schema_extra=_or_file_names,
    )
    env: dict[str, str] = Field(default_factory=dict)
    continue_on_failure: bool = False

    @model_validator(mode="before")
    @classmethod
    def _read_original_spellings(cls, data: t.Any) -> t.Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        nested = data.get("rth_timeout_config")
        if isinstance(nested, dict):
            data.pop("rth_timeout_config")
            for key in TIMEOUT_KEYS:
                if key in nested and key not in data:
                    data[key] = nested[key]
        outputs = data.get("outputs_to_capture")
        if isinstance(outputs, dict):
            named = [s.value for s in CaptureStream if f"{s.value}_file" in outputs]
            data["outputs_to_capture"] = named or [s.value for s in CaptureStream]
        return data


_MODIFICATION_KEYS: t.Final = frozenset(
    {*FileModificationInstruction.model_fields, "content_to_insert"}
)


def _with_command_ids(cmds: list[t.Any]) -> list[t.Any]:
    """The commands, each without a ``command_id`` given ``cmd_<index>`` (unique in the task).

    The original bridge requires only ``command_string``; the id names the command's files.

    Examples
    --------
    >>> [c["command_id"] for c in _with_command_ids([{"command": "a"},
    ...     {"command_id": "cmd_0", "command": "b"}, {"command": "c"}])]
    ['cmd_0_1', 'cmd_0', 'cmd_2']
    """
    taken = {c["command_id"] for c in cmds if isinstance(c, dict) and c.get("command_id")}
    out: list[t.Any] = []
    for i, c in enumerate(cmds):
        if isinstance(c, dict) and not c.get("command_id"):
            name, n = f"cmd_{i}", 0
            while name in taken:
                n += 1
                name = f"cmd_{i}_{n}"
            taken.add(name)
            c = {**c, "command_id": name}
        out.append(c)
    return out


class InstructionDetails(_Model):
    """What the requester wants: file modifications and/or commands, in that order.

    Examples
    --------
    >>> d = InstructionDetails.model_validate({"instruction": "append a line",
    ...     "files_to_modify": [{"file_path": "f", "action": "insert_after_line",
    ...                          "line_marker": "m", "content_to_insert": "x"}]})
    >>> d.description, d.file_modifications[0].content
    ('append a line', 'x')
    """

    description: str = Field(
        default="",
        validation_alias=AliasChoices("description", "instruction"),
        description="what the task is for ('instruction' is accepted as an alias)",
    )
    file_modifications: list[FileModificationInstruction] = Field(
        default_factory=list,
        description="applied in order ('files_to_modify' is accepted too)",
    )
    commands_to_execute: list[CommandExecutionInstruction] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _fold_original_forms(cls, data: t.Any) -> t.Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        mods = data.get("file_modifications", [])
        if not isinstance(mods, list):
            return data  # not a list: let validation say so
        mods = list(mods)
        listed = data.pop("files_to_modify", None)
        if listed is not None:
            mods += listed if isinstance(listed, list) else [listed]
        if "file_path" in data or "action" in data:
            mods.insert(0, {k: data.pop(k) for k in list(data) if k in _MODIFICATION_KEYS})
        if mods:
            data["file_modifications"] = mods
        cmds = data.get("commands_to_execute")
        if isinstance(cmds, list):
            data["commands_to_execute"] = _with_command_ids(cmds)
        return data

    @model_validator(mode="after")
    def _not_empty(self) -> t.Self:
        if not self.file_modifications and not self.commands_to_execute and not self.description:
            msg = "empty instructions (no file_modifications, commands_to_execute or instruction)"
            raise ValueError(msg)
        ids = [c.command_id for c in self.commands_to_execute]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            msg = f"command_id {dup[0]!r} appears more than once"
            raise ValueError(msg)
        return self


class AgentActionDetails(_Model):
    """What the bridge prepared for the executor: the tool to call and its parameters.

    A task the original bridge prepared (``target_file``, ``code_edit``, ``commands_list``,
    … beside ``tool_to_call``) reads too: its keys are kept, it names no executor (so this
    bridge leaves it to the agent it was handed to) and has no hashes to verify.
    """

    tool_to_call: Tool
    file_modifications: list[FileModificationInstruction] = Field(default_factory=list)
    commands_to_execute: list[CommandExecutionInstruction] = Field(default_factory=list)
    expected_sha256: dict[str, str | None] = Field(
        default_factory=dict,
        description="file path -> sha256 the file must have after the edits (verification)",
    )
    original_sha256: dict[str, str | None] = Field(
        default_factory=dict, description="file path -> sha256 before the edits (None: absent)"
    )
    executor: str = Field(
        default="", description="'builtin' or 'agent:NAME' ('': prepared by another bridge)"
    )
    handed_at: float | None = None
    work_dir: str = Field(default="", description="where the task's logs and command outputs go")


class CommandResult(_Model):
    """How one command of a task ended (a summary of the runner's status file)."""

    command_id: str
    state: str
    exit_code: int | None = None
    timeout_fired: str | None = None
    status_path: str = ""


class TaskResult(_Model):
    """What the executor reported."""

    message: str = ""
    commands: list[CommandResult] = Field(default_factory=list)
    files_changed: list[str] = Field(default_factory=list)


class Task(_Model):
    """One task of the queue."""

    task_id: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    status: TaskStatus = TaskStatus.PENDING
    instruction_details: InstructionDetails
    agent_action_details: AgentActionDetails | None = None
    result: TaskResult | None = None
    error: str | None = None
    created_at: float | None = None
    updated_at: float | None = None

    @field_validator("task_id")
    @classmethod
    def _no_dot_names(cls, value: str) -> str:
        if value.strip(".") == "":
            msg = "task_id must not be only dots"
            raise ValueError(msg)
        return value


class QueueFile(_Model):
    """The whole ``task_queue.json``."""

    tasks: list[Task] = Field(default_factory=list)


SCHEMA_MODELS: t.Final[tuple[type[BaseModel], ...]] = (
    QueueFile,
    Task,
    InstructionDetails,
    FileModificationInstruction,
    CommandExecutionInstruction,
    AgentActionDetails,
    TaskResult,
)


def json_schemas() -> dict[str, dict[str, t.Any]]:
    """The JSON Schema of every bridge model, by model name (``poli bridge schema``).

    Examples
    --------
    >>> s = json_schemas()
    >>> sorted(s)[:3]
    ['AgentActionDetails', 'CommandExecutionInstruction', 'FileModificationInstruction']
    >>> "task_id" in s["Task"]["properties"]
    True
    """
    return {m.__name__: m.model_json_schema() for m in SCHEMA_MODELS}


def describe_error(exc: ValidationError, task_id: str) -> str:
    """One line for a task that does not validate: the first problem and where it is.

    Examples
    --------
    >>> try:
    ...     Task.model_validate({"task_id": "t1", "instruction_details": {}})
    ... except ValidationError as e:
    ...     print(describe_error(e, "t1").split(" (")[0])
    task t1: instruction_details: empty instructions
    """
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"])
    text = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] == "enum":
        expected = err.get("ctx", {}).get("expected", "")
        text = f"unknown value {err.get('input')!r} (expected {expected})"
    more = len(exc.errors()) - 1
    tail = f" (+{more} more)" if more > 0 else ""
    return f"task {task_id}: {where + ': ' if where else ''}{text}{tail}"


def parse_task(raw: t.Any) -> Task:
    """Validate one raw task from the queue.

    Raises
    ------
    BridgeTaskInvalid
        With one line naming the task and its first problem.
    """
    task_id = str(raw.get("task_id", "?")) if isinstance(raw, dict) else "?"
    if not isinstance(raw, dict):
        msg = f"task {task_id}: a task must be a JSON object, not {type(raw).__name__}"
        raise BridgeTaskInvalid(msg)
    try:
        return Task.model_validate(raw)
    except ValidationError as e:
        raise BridgeTaskInvalid(describe_error(e, task_id)) from None

"""Bridge models: validation with one clear error per bad task, transitions, JSON Schemas."""

from __future__ import annotations

import json
import typing as t

import jsonschema
import pytest

from politerm.bridge.models import (
    TRANSITIONS,
    CaptureStream,
    CommandExecutionInstruction,
    FileAction,
    Task,
    TaskStatus,
    check_transition,
    json_schemas,
    parse_task,
)
from politerm.errors import BridgeTaskInvalid


class BadCase(t.NamedTuple):
    test_id: str
    details: dict[str, t.Any]
    error: str


BAD: list[BadCase] = [
    BadCase("empty", {}, "empty instructions"),
    BadCase(
        "unknown-action",
        {"file_path": "f", "action": "frobnicate", "content": "x"},
        "action: unknown value 'frobnicate'",
    ),
    BadCase(
        "insert-without-marker",
        {"file_path": "f", "action": "insert_after_line", "content": "x"},
        "insert_after_line needs a non-empty line_marker",
    ),
    BadCase(
        "insert-without-content",
        {"file_path": "f", "action": "insert_before_line", "line_marker": "m"},
        "insert_before_line needs content",
    ),
    BadCase(
        "range-reversed",
        {"file_path": "f", "action": "delete_lines", "start_line_number": 5, "end_line_number": 2},
        "bad line range 5-2",
    ),
    BadCase(
        "range-zero",
        {
            "file_path": "f",
            "action": "replace_lines",
            "start_line_number": 0,
            "end_line_number": 2,
            "replacement_content": "x",
        },
        "bad line range 0-2",
    ),
    BadCase(
        "range-missing",
        {"file_path": "f", "action": "delete_lines", "start_line_number": 1},
        "needs start_line_number and end_line_number",
    ),
    BadCase(
        "replace-lines-without-text",
        {"file_path": "f", "action": "replace_lines", "start_line_number": 1, "end_line_number": 1},
        "replace_lines needs replacement_content",
    ),
    BadCase(
        "duplicate-command-id",
        {
            "commands_to_execute": [
                {"command_id": "a", "command": "x"},
                {"command_id": "a", "command": "y"},
            ]
        },
        "command_id 'a' appears more than once",
    ),
    BadCase(
        "command-without-string",
        {"commands_to_execute": [{"command_id": "a"}]},
        "command_string",
    ),
    BadCase(
        "bad-occurrence",
        {
            "file_path": "f",
            "action": "insert_after_line",
            "line_marker": "m",
            "content": "x",
            "marker_occurrence": 0,
        },
        "marker_occurrence must be 1 or more",
    ),
]


@pytest.mark.parametrize("case", BAD, ids=[c.test_id for c in BAD])
def test_a_bad_task_gives_one_line_naming_the_task_and_the_problem(case: BadCase) -> None:
    with pytest.raises(BridgeTaskInvalid) as info:
        parse_task({"task_id": "T9", "instruction_details": case.details})
    message = str(info.value)
    assert message.startswith("task T9: ")
    assert case.error in message
    assert "\n" not in message


def test_a_task_that_is_not_an_object_or_lacks_an_id_is_reported() -> None:
    with pytest.raises(BridgeTaskInvalid, match="must be a JSON object"):
        parse_task(["x"])
    with pytest.raises(BridgeTaskInvalid, match="task_id"):
        parse_task({"instruction_details": {"commands_to_execute": []}})


def test_original_shapes_are_accepted() -> None:
    flat = parse_task(
        {
            "task_id": "a",
            "status": "pending",
            "instruction_details": {
                "file_path": "x.py",
                "action": "replace_lines",
                "start_line_number": 2,
                "end_line_number": 3,
                "replacement_content": "y",
            },
        }
    )
    assert flat.instruction_details.file_modifications[0].action.value == "replace_lines"
    alias = parse_task(
        {
            "task_id": "b",
            "instruction_details": {
                "commands_to_execute": [{"command_id": "c1", "command": "ls -l"}]
            },
        }
    )
    assert alias.instruction_details.commands_to_execute[0].command_string == "ls -l"
    # Keys politerm does not know survive a round trip.
    extra = parse_task(
        {
            "task_id": "c",
            "priority": 3,
            "instruction_details": {"file_path": "f", "action": "append_content", "content": "z"},
        }
    )
    assert extra.model_dump()["priority"] == 3


def test_every_transition_in_the_table_is_accepted_and_every_other_refused() -> None:
    for old in TaskStatus:
        for new in TaskStatus:
            if new in TRANSITIONS[old]:
                check_transition("t", old, new)
            else:
                with pytest.raises(BridgeTaskInvalid, match=f"from {old.value} to {new.value}"):
                    check_transition("t", old, new)
    assert [s for s in TaskStatus if s.is_final] == [TaskStatus.COMPLETED, TaskStatus.FAILED]


def test_schemas_cover_every_model_and_validate_a_real_queue() -> None:
    schemas = json_schemas()
    assert set(schemas) == {
        "Task",
        "InstructionDetails",
        "FileModificationInstruction",
        "CommandExecutionInstruction",
        "AgentActionDetails",
        "QueueFile",
        "TaskResult",
    }
    # The status and action enums are in the schemas, every value of them.
    defs = schemas["QueueFile"]["$defs"]
    assert defs["TaskStatus"]["enum"] == [s.value for s in TaskStatus]
    assert defs["FileAction"]["enum"] == [a.value for a in FileAction]
    assert defs["Tool"]["enum"] == [
        "edit_file",
        "execute_commands_sequentially",
        "follow_instruction",
    ]
    assert defs["CaptureStream"]["enum"] == ["stdout", "stderr"]
    assert schemas["Task"]["$defs"]["TaskStatus"] == defs["TaskStatus"]
    assert set(schemas["AgentActionDetails"]["$defs"]) >= {"Tool", "FileAction"}
    queue = {
        "tasks": [
            {
                "task_id": "t1",
                "status": "pending",
                "instruction_details": {
                    "file_modifications": [
                        {"file_path": "f", "action": "append_content", "content": "x"}
                    ]
                },
            }
        ]
    }
    jsonschema.validate(queue, schemas["QueueFile"])
    # The original's shapes: create_file, text as a list of lines, a command without an id.
    original = {
        "tasks": [
            {
                "task_id": "t2",
                "instruction_details": {
                    "file_modifications": [
                        {"file_path": "f", "action": "create_file", "content": ["a", "b"]}
                    ],
                    "commands_to_execute": [{"command_string": "make"}],
                },
            }
        ]
    }
    jsonschema.validate(original, schemas["QueueFile"])
    bad = {"tasks": [{"task_id": "t1", "status": "nonsense", "instruction_details": {}}]}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schemas["QueueFile"])
    json.dumps(schemas)  # printable as-is by `poli bridge schema`


def test_a_task_round_trips_through_json() -> None:
    task = Task.model_validate(
        {
            "task_id": "r",
            "instruction_details": {
                "commands_to_execute": [
                    {"command_id": "c", "command_string": "true", "total_timeout": 5}
                ]
            },
        }
    )
    again = Task.model_validate_json(task.model_dump_json())
    assert again == task


def test_the_originals_spellings_are_read_and_top_level_values_win() -> None:
    task = parse_task(
        {
            "task_id": "o",
            "instruction_details": {
                "instruction": "why",
                "file_path": "a.txt",
                "action": "insert_after_line",
                "line_marker": "m",
                "content_to_insert": "flat",
                "files_to_modify": [
                    {"file_path": "b.txt", "action": "append_content", "content_to_insert": "z"}
                ],
                "commands_to_execute": [
                    {
                        "command_id": "c",
                        "command": "make",
                        "activity_timeout": 5,
                        "rth_timeout_config": {"activity_timeout": 99, "total_timeout": 7},
                        "outputs_to_capture": {"status_file": "s.json"},
                    }
                ],
            },
        }
    )
    ins = task.instruction_details
    assert ins.description == "why"
    assert [(m.file_path, m.content) for m in ins.file_modifications] == [
        ("a.txt", "flat"),
        ("b.txt", "z"),
    ]
    [cmd] = ins.commands_to_execute
    assert (cmd.activity_timeout, cmd.total_timeout, cmd.launch_timeout) == (5.0, 7.0, 30.0)
    assert [o.value for o in cmd.outputs_to_capture] == ["stdout", "stderr"]
    assert CommandExecutionInstruction.model_validate(
        {"command_id": "c", "command": "x", "outputs_to_capture": {"stderr_file": "e"}}
    ).outputs_to_capture == [CaptureStream.STDERR]
    with pytest.raises(BridgeTaskInvalid, match="file_modifications: Input should be a valid list"):
        parse_task({"task_id": "o", "instruction_details": {"file_modifications": "f.txt"}})


def test_the_schema_admits_a_queue_in_the_originals_spelling() -> None:
    original = {
        "tasks": [
            {
                "task_id": "t1",
                "status": "processing_by_agent",
                "notes": "",
                "history": [],
                "instruction_details": {
                    "instruction": "build",
                    "files_to_modify": [
                        {
                            "file_path": "f",
                            "action": "insert_before_line",
                            "line_marker": "m",
                            "content_to_insert": "x",
                        }
                    ],
                    "commands_to_execute": [
                        {
                            "command_id": "b",
                            "command": "make",
                            "rth_timeout_config": {"total_timeout": 300},
                            "outputs_to_capture": {"stdout_file": "o.txt", "status_file": "s"},
                        }
                    ],
                },
                "agent_action_details": {"tool_to_call": "edit_file", "target_file": "f"},
            }
        ]
    }
    jsonschema.validate(original, json_schemas()["QueueFile"])
    [task] = original["tasks"]
    assert parse_task(task).status is TaskStatus.PROCESSING_BY_AGENT
    assert TaskStatus.PROCESSING_BY_AGENT.is_handed

"""Task suites as data, and their loaders."""

from tasks import claw_gen
from tasks.loader import TaskError, list_suites, load_suite, load_task_file
from tasks.schema import Limits, Task, WriteFile

__all__ = [
    "Limits",
    "Task",
    "TaskError",
    "WriteFile",
    "claw_gen",
    "list_suites",
    "load_suite",
    "load_task_file",
]

"""Task suites as data, and their loaders."""

from tasks.loader import TaskError, list_suites, load_suite, load_task_file
from tasks.schema import Limits, Task, WriteFile

__all__ = [
    "Limits",
    "Task",
    "TaskError",
    "WriteFile",
    "list_suites",
    "load_suite",
    "load_task_file",
]

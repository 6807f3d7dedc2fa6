"""A template called inside `with DAG(...)` adds a Task to that DAG and returns it.

Hera types the call as `Step | Task | None` (the same call under Steps returns a Step; under a Workflow, nothing), so
the DAG builders call templates through `dag_task`, which says which one a DAG gets and fails at build time when
called anywhere else.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hera.workflows import Step, Task


def dag_task(template: Callable[..., Step | Task | None], **kwargs: Any) -> Task:
    """`template(**kwargs)` inside the active DAG: the Task it added."""
    task = template(**kwargs)
    if not isinstance(task, Task):
        raise TypeError(f"{kwargs.get('name', template)!r} must be called inside a `with DAG(...)` block")
    return task

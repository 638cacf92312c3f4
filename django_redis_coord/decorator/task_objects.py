"""Tasks of Django's tasks framework (``django.tasks`` in Django 6.0, ``django_tasks`` from the
``django-tasks`` backport) as ``@locked`` and :func:`~django_redis_coord.tasks.unique_task` see them.

Nothing is imported: a ``Task`` exists only once one of those modules was imported by its user.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["TASK_MODULES", "task_classes", "is_task", "with_func", "locked_task_object"]

#: Where each flavour of the framework defines ``Task``.
TASK_MODULES = ("django.tasks.base", "django_tasks.base")


def task_classes() -> tuple[type, ...]:
    """The ``Task`` classes of the flavours imported so far."""
    found = (getattr(sys.modules.get(module), "Task", None) for module in TASK_MODULES)
    return tuple(cls for cls in found if isinstance(cls, type))


def is_task(value: Any) -> bool:
    """Whether ``value`` is a ``Task`` (what ``@task`` returns)."""
    classes = task_classes()
    return bool(classes) and isinstance(value, classes)


def with_func(task: Any, func: Callable[..., Any], cls: Any = None) -> Any:
    """The same task (priority, queue, backend...) running ``func``, of class ``cls`` when given.

    ``func`` keeps the module and qualified name of the task's function (``functools.wraps``), so
    the task's ``module_path`` is unchanged: a worker imports the decorated task from there."""
    changed = dataclasses.replace(task, func=func)
    if cls is None or type(changed) is cls:
        return changed
    return cls(**{field.name: getattr(changed, field.name) for field in dataclasses.fields(changed) if field.init})


def locked_task_object(locked: Any, target: Any, decorate: Callable[[Callable[..., Any]], Any]) -> Any:
    """``@locked`` (the ``Locked`` object ``locked``) over a task object, or ``None`` when ``target``
    is none: a ``Task`` of Django's tasks framework gives the same Task running its function
    decorated with ``decorate`` (no ``on_contended="retry"``: the framework cannot retry); a Celery
    task runs its ``run`` under the lock (the key template sees the task's arguments by name; the
    default key is the task's name).  Celery is not imported: a Celery task exists only once it was."""
    if is_task(target):
        from .options import checked_on_contended

        checked_on_contended(locked.on_contended, locked.key, retry=False)
        return with_func(target, decorate(target.func))
    celery_task = getattr(sys.modules.get("celery.app.task"), "Task", None)
    if celery_task is not None and isinstance(target, celery_task):
        target.run = locked.decorate(target.run, target.name)
        return target
    return None

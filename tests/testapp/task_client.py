"""Enqueue a task of tests/testapp/tasks.py from a process of its own and print what happened.

    python -m tests.testapp.task_client TASK ARG [--count N] [--wait] [--pair]

Prints one JSON object: the ids accepted, how many enqueues were refused (TaskAlreadyEnqueued),
and with ``--wait`` the first accepted result once finished (status and return value).  With
``--pair`` the argument is the tuple ``(ARG, 1)``."""

import argparse
import json
import time

import django


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("task")
    parser.add_argument("arg")
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--wait", action="store_true")
    parser.add_argument("--pair", action="store_true")
    options = parser.parse_args()
    django.setup()
    from django_redis_coord.integrations.django_tasks import TaskAlreadyEnqueued
    from tests.testapp import tasks

    task = getattr(tasks, options.task)
    accepted, refused, states = [], 0, set()
    for _ in range(options.count):
        try:
            accepted.append(task.enqueue((options.arg, 1) if options.pair else options.arg))
        except TaskAlreadyEnqueued as exc:
            refused += 1
            states.add(exc.state)
    report = {"accepted": [result.id for result in accepted], "refused": refused, "states": sorted(states)}
    if options.wait and accepted:
        result = accepted[0]
        deadline = time.monotonic() + 60
        while not result.is_finished and time.monotonic() < deadline:
            time.sleep(0.05)
            result.refresh()
        report["status"] = str(result.status)
        report["return_value"] = result.return_value if result.status == "SUCCESSFUL" else None
        report["errors"] = [error.exception_class_path for error in result.errors]
    print(json.dumps(report))


if __name__ == "__main__":
    main()

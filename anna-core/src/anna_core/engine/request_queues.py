"""The scheduler's waiting queue and running list, and a request's moves between them (pure Python).

A request waits (first come first served), runs once admitted, goes back to the front of the waiting queue
when preempted by recompute, and leaves either list when it finishes. Preemption by recompute forgets what
the request computed (its blocks and slot are freed by the scheduler); when resumed it computes its prompt and
generated tokens again, so its output is unchanged. With ``hold_last`` (a model that declares
``recompute_holds_last``) the preempted request's last generated token is held back
(:attr:`~anna_core.engine.request.Request.held_token`) and put back once the recompute reaches it; a newest
token still pending (its step is in flight) is dropped first and the one before it held.
"""

from __future__ import annotations

from collections import deque

from anna_core.engine.request import Request, RequestStatus


class RequestQueues:
    """Requests waiting and running.

    Args:
        hold_last: a preempted request holds its last generated token back (see the module doc).
    """

    def __init__(self, *, hold_last: bool = False):
        self.hold_last = hold_last
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []

    def add(self, request: Request) -> None:
        """Queue a new request behind those waiting."""
        request.status = RequestStatus.WAITING
        self.waiting.append(request)

    def start_running(self) -> Request:
        """Admit the request at the head of the waiting queue; returns it."""
        request = self.waiting.popleft()
        request.status = RequestStatus.RUNNING
        request.admitted_once = True
        self.running.append(request)
        return request

    def requeue(self, request: Request) -> None:
        """Preempt the running ``request`` by recompute: back to the front of the waiting queue with nothing
        computed (its held token set under ``hold_last``; its ``num_preemptions`` counted)."""
        self.running.remove(request)
        request.status = RequestStatus.WAITING
        request.num_computed_tokens = 0
        if self.hold_last and request.held_token is None:
            request.drop_pending()  # its step in flight computed a token it holds no input for: computed again
            if request.output_token_ids:
                request.held_token = request.output_token_ids.pop()
        request.num_preemptions += 1
        self.waiting.appendleft(request)

    def remove(self, request: Request) -> None:
        """Take a running or waiting ``request`` out of its list (one in neither is left as it is)."""
        if request.status is RequestStatus.RUNNING:
            self.running.remove(request)
        else:
            try:
                self.waiting.remove(request)
            except ValueError:
                pass

    @staticmethod
    def put_back(request: Request) -> None:
        """Return ``request``'s held token to its output (the recompute reached it, or the request ends)."""
        request.output_token_ids.append(request.held_token)
        request.held_token = None

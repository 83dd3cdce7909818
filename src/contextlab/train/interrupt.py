"""Ctrl-C and SIGTERM during training as a request to stop at the next step, with a checkpoint.

A scheduler that preempts a job sends SIGTERM and waits a grace period; a user presses Ctrl-C.
Either used to end the run where it stood, so a rerun went back to the newest periodic checkpoint
and redid up to ``train.ckpt_every`` steps. While the loop runs, ``StopRequest`` takes the first
SIGINT or SIGTERM as a request: the step in flight finishes, a checkpoint of it is written, and
the command then ends as the signal would have ended it (Ctrl-C: interrupted, status 130;
SIGTERM: terminated, 143), so the rerun goes on from that very step. A second signal of the same
kind acts at once, as before (the newest checkpoint on disk is kept either way).

Under several processes every one must stop after the same step and write its part of one
checkpoint: the request is agreed with one all-reduce of a flag per step (``agreed``), so a
signal that reached the processes at slightly different moments stops them all after the first
step any of them saw it in. That is one scalar collective a step beside the gradients' own.

Trade-off: a step is finished rather than cut, so the stop waits for one step (and a validation
or checkpoint already under way); a process that must stop at once gets the second signal or
SIGKILL, and keeps what the newest checkpoint holds. Only the main thread receives signals, so a
loop run in another thread (and a signal that was ignored, or whose handler Python did not
install) is left as it was.
"""

from __future__ import annotations

import signal
import sys
import threading

from contextlab.train import distributed as D

SIGNUMS = (signal.SIGINT, signal.SIGTERM)


class StopRequest:
    """Install with ``with StopRequest(info) as stop:``; ``stop.agreed()`` after each step says
    whether to checkpoint and stop; ``stop.end()`` then ends the command as the signal would."""

    def __init__(self, info: D.DistInfo):
        self.info = info
        self.signum: int | None = None  # the first signal this process received
        self.previous: dict[int, object] = {}  # the handlers replaced, restored on the way out

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is not threading.main_thread():
            return self
        for s in SIGNUMS:
            handler = signal.getsignal(s)
            if handler is not None and handler != signal.SIG_IGN:  # an ignored signal stops nothing
                self.previous[s] = handler
                signal.signal(s, self._request)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None and self.signum is not None:  # came after the last step's check (during
            self.end()  # its checkpoint, or as the loop ended): the command still stops, not swallowed
        self._restore()

    def _restore(self) -> None:
        for s, handler in self.previous.items():
            signal.signal(s, handler)
        self.previous = {}

    def _request(self, signum: int, frame) -> None:
        if self.signum == signum:  # the same signal again: stop now, as the handler before would
            self._deliver(signum)
            return
        # frame None: delivered by a checkpoint's write when it was done (``signals_deferred``), which
        # said its own line ("finishing checkpoint ... first"); the loop stops right after it
        if self.signum is None and self.info.is_main and frame is not None:
            name = signal.Signals(signum).name
            again = "Ctrl-C again" if signum == signal.SIGINT else "a second SIGTERM"
            print(
                f"\n{name} received: finishing this step and saving a checkpoint of it, then stopping "
                f"({again} stops at once, keeping the newest checkpoint)",
                file=sys.stderr,
            )
        self.signum = signum

    def agreed(self) -> bool:
        """Whether any process received a stop signal by the end of this step (the same answer on
        every process: a flag summed across them)."""
        mine = float(self.signum is not None)
        return (D.all_reduce_sum([mine], self.info)[0] if self.info.world_size > 1 else mine) > 0

    def end(self) -> None:
        """End the command as the received signal would have (SIGINT: KeyboardInterrupt; SIGTERM:
        the command line's exit, or the default action); a process that received none, stopped
        because another did, ends as SIGTERM ends it."""
        signum = self.signum if self.signum is not None else signal.SIGTERM
        self._deliver(signum)
        raise SystemExit(143)  # a handler that returned (or none of ours): still stop, as SIGTERM

    def _deliver(self, signum: int) -> None:
        handler = self.previous.get(signum, signal.SIG_DFL)
        self._restore()
        if callable(handler):
            handler(signum, None)
        elif signum == signal.SIGINT:
            raise KeyboardInterrupt
        else:
            raise SystemExit(128 + signum)

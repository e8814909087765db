"""Child processes a run can stop cleanly: ``python -m kernels bench`` runs asv through this.

    run_command(argv, env=None, quiet=False)   run to its end -> exit status; on Ctrl-C
                                               (or SIGTERM, below) stop it, then go on
                                               with the KeyboardInterrupt
    sigterm_as_keyboard_interrupt()            a context in which SIGTERM is handled as
                                               Ctrl-C is
"""
import contextlib
import os
import signal
import subprocess
import sys
import threading

# After Ctrl-C, asv (which the terminal's SIGINT reached too) is given this long to stop
# before it is sent SIGINT itself (a SIGINT sent to this process alone), then as long
# again before SIGTERM, then SIGKILL.  After a SIGTERM it is sent SIGINT at once.
GRACE_SECONDS = 5.0


def run_command(argv, env=None, quiet=False):
    """Run ``argv`` to its end, its output on ours (none when ``quiet``); its exit status.

    On KeyboardInterrupt while it runs (Ctrl-C, which the terminal sent it too, or a
    SIGTERM that ``run`` turned into one, which it did not get) it is given
    ``GRACE_SECONDS`` to stop (not after SIGTERM), then sent SIGINT, SIGTERM and SIGKILL in
    turn, ``GRACE_SECONDS`` apart (another Ctrl-C skips to the next), and waited for; then
    the KeyboardInterrupt goes on.
    """
    sys.stdout.flush()
    process = subprocess.Popen(argv, env=None if env is None else {**os.environ, **env},
                               stdout=subprocess.DEVNULL if quiet else None)
    try:
        return process.wait()
    except KeyboardInterrupt as interrupt:
        _stop(process, signalled=not isinstance(interrupt, _Terminated))
        raise


def _stop(process, signalled=True):
    """Stop ``process`` and wait for it; ``signalled``: it got the SIGINT too."""
    steps = ((None, GRACE_SECONDS),) if signalled else ()
    for send, wait in steps + ((signal.SIGINT, GRACE_SECONDS), (signal.SIGTERM, GRACE_SECONDS),
                               (signal.SIGKILL, None)):
        try:
            if send is not None and process.poll() is None:
                process.send_signal(send)
            process.wait(wait)
            return
        except (subprocess.TimeoutExpired, KeyboardInterrupt):
            continue


class _Terminated(KeyboardInterrupt):
    """SIGTERM, handled as Ctrl-C is."""


def _raise_terminated(signum, frame):
    raise _Terminated()


@contextlib.contextmanager
def sigterm_as_keyboard_interrupt():
    """While entered, SIGTERM raises KeyboardInterrupt: a run stopped either way keeps what
    finished and writes the report.  Only in the main thread, where Python takes signals."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)

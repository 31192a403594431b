"""CUDA graphs from stream capture: record a sequence of launches once, replay it for one launch's
host cost.

    with capture(stream) as cap:
        k[grid, block](x, y, stream=stream)
        k2[grid, block](y, stream=stream)
    cap.graph.launch(stream)         # replays both

Arguments are baked in at capture (the driver copies them), so replays reuse the same buffers. The
host ops (collectives, fused ops) keep every number that changes between calls in device memory, so
their captured launches replay correctly any number of times; call each op once before capturing (its
first call builds a plan: kernels, flags, scratch, which a capture forbids). Captures work on any
stream of your own, blocking or not, and on a framework's (``torch.cuda.graph``: pass
``stream=torch.cuda.current_stream()`` to the ops inside it). Frees of pkptx arrays on a capturing
stream wait until the capture ends, and so does the destruction of a Graph dropped while any capture is
open: ``with capture(s) as cap:`` rebinds ``cap`` after the capture has begun, so the previous graph goes
then, and destroying an executable graph inside a capture invalidates it.
"""
from __future__ import annotations

from contextlib import contextmanager

from ..errors import CudaError, LaunchError
from .device import Stream, as_stream, release
from .driver import call, driver
from .pool import flush_deferred_frees

_MODES = ("global", "thread_local", "relaxed")
_open_captures = 0                   # captures begun by capture() and not yet ended, in this process
_doomed: list[tuple] = []            # (executable, graph) dropped while a capture was open


def _destroy(executable, graph) -> None:
    if _open_captures:
        _doomed.append((executable, graph))
        return
    release("cuGraphExecDestroy", executable)
    release("cuGraphDestroy", graph)


def _destroy_doomed() -> None:
    """Destroy the graphs dropped during captures, once none is open."""
    global _doomed
    if not _open_captures:
        doomed, _doomed = _doomed, []
        for executable, graph in doomed:
            _destroy(executable, graph)


class Graph:
    """An instantiated graph (``CUgraphExec``) and the graph it came from."""

    def __init__(self, graph, executable):
        self._graph, self._exec = graph, executable

    def launch(self, stream=None) -> None:
        call("cuGraphLaunch", self._exec, as_stream(stream).cu)

    def replay(self, times: int, stream=None) -> None:
        s = as_stream(stream).cu
        for _ in range(times):
            call("cuGraphLaunch", self._exec, s)

    def __del__(self):
        if getattr(self, "_exec", None) is not None:
            executable, graph, self._exec, self._graph = self._exec, self._graph, None, None
            _destroy(executable, graph)


class Capture:
    """Holds the :class:`Graph` once the ``with capture(...)`` block has ended without error."""
    graph: Graph | None = None


@contextmanager
def capture(stream: Stream, mode: str = "thread_local"):
    """Capture the work queued on ``stream`` inside the block into ``Capture.graph``.

    ``mode`` is the driver's capture mode: "thread_local" forbids unsafe calls (such as a
    synchronous cuMemAlloc) from this thread only, "global" from every thread, "relaxed" never.
    """
    s = as_stream(stream)
    if s.handle in (0, 1, 2):
        raise LaunchError(f"capture(stream={stream!r}): the default stream cannot be captured; expected a "
                          "Stream() of your own")
    if mode not in _MODES:
        raise LaunchError(f"capture(mode={mode!r}): expected one of {', '.join(_MODES)}")
    global _open_captures
    cu = driver()
    call("cuStreamBeginCapture", s.cu, getattr(cu.CUstreamCaptureMode, f"CU_STREAM_CAPTURE_MODE_{mode.upper()}"))
    _open_captures += 1
    holder = Capture()
    try:
        yield holder
    except BaseException:
        try:                                   # end the capture, then let the original error through
            release("cuGraphDestroy", call("cuStreamEndCapture", s.cu))
        except CudaError:
            pass                               # the capture was invalidated by that error
        _captures_ended()
        raise
    try:
        graph = call("cuStreamEndCapture", s.cu)
    finally:
        _captures_ended()
    try:
        holder.graph = Graph(graph, call("cuGraphInstantiate", graph, 0))
    except BaseException:
        release("cuGraphDestroy", graph)
        raise


def _captures_ended() -> None:
    """One capture ended: run what waited for it (frees, graph destruction)."""
    global _open_captures
    _open_captures -= 1
    flush_deferred_frees()
    _destroy_doomed()

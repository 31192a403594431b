"""The doctor's two-process check: GPU memory shared with a child process the two ways pkptx does.

- CUDA IPC: ``cuMemAlloc`` memory, its 64-byte ``cuIpcGetMemHandle`` handle given to the child, which
  opens it (``SymmetricHeap(path="ipc")``).
- VMM: ``cuMemCreate`` memory exported as a POSIX fd, sent to the child over an AF_UNIX socket with
  SCM_RIGHTS, imported, mapped and made readable there (``SymmetricHeap(path="vmm")``, the default).

The parent fills both with a known pattern; the child reads both back and reports what it found.
``python -m pkptx.doctor_sharing HANDLE_HEX NBYTES SOCKET_FD`` is the child.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import numpy as np

from .errors import PkptxError

TIMEOUT_S = 120
CHILD = (sys.executable, "-m", "pkptx.doctor_sharing")
IPC_FIX = ("CUDA IPC needs both processes in one IPC and PID namespace (containers: --ipc=host --pid=host) "
           "and on the same node")
VMM_FIX = ("fd sharing needs the driver's POSIX-fd memory handles and AF_UNIX sockets between the ranks; "
           "SymmetricHeap(path='ipc') works without them")


def pattern(words: int) -> np.ndarray:
    """A pattern no two nearby words share (Knuth's multiplicative hash of the index)."""
    return np.arange(words, dtype=np.uint32) * np.uint32(2654435761)


def verdict(got: np.ndarray, want: np.ndarray, how: str) -> tuple[bool, str]:
    wrong = int(np.count_nonzero(got != want))
    if wrong:
        return False, f"{how}: {wrong} of {want.size} words read back wrong in the child process"
    return True, f"{how}: {want.nbytes >> 10} KiB read back intact in a child process"


def _read(ptr: int, words: int) -> np.ndarray:
    from .launch import DeviceArray
    return DeviceArray.from_pointer(ptr, (words,), "uint32").to_numpy()


def _child_ipc(handle: bytes, want: np.ndarray) -> tuple[bool, str]:
    from .launch.driver import call, driver
    from .launch.ipc import handle_from_bytes
    lazy = driver().CUipcMem_flags.CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
    opened = int(call("cuIpcOpenMemHandle", handle_from_bytes(handle), lazy))
    try:
        return verdict(_read(opened, want.size), want, "cuIpcOpenMemHandle of the parent's cuMemAlloc memory")
    finally:
        call("cuIpcCloseMemHandle", opened)


def _child_vmm(sock_fd: int, nbytes: int, want: np.ndarray) -> tuple[bool, str]:
    from .launch.vmm import Transaction, import_fd, map_readwrite, reserve
    with socket.socket(fileno=sock_fd) as sock:
        _, fds, _, _ = socket.recv_fds(sock, 16, 1)
    if len(fds) != 1:
        return False, f"SCM_RIGHTS: {len(fds)} fds arrived, expected 1"
    tx = Transaction("pkptx doctor child: the parent's VMM memory")
    try:
        with tx:
            handle = import_fd(tx, fds[0], "the parent's memory")
            base = reserve(tx, nbytes, nbytes)
            map_readwrite(tx, base, nbytes, handle, 0)
            return verdict(_read(base, want.size), want, "cuMemCreate memory passed as an fd over SCM_RIGHTS")
    finally:
        tx.close()
        os.close(fds[0])


def child(argv: list[str]) -> int:
    """Read both shared buffers; print {"ipc": [ok, detail], "vmm": [ok, detail]} as one JSON line."""
    handle_hex, nbytes, sock_fd = argv[0], int(argv[1]), int(argv[2])
    from .launch import Device
    Device(0).set_current()
    want = pattern(nbytes // 4)
    found = {}
    for name, run in (("ipc", lambda: _child_ipc(bytes.fromhex(handle_hex), want)),
                      ("vmm", lambda: _child_vmm(sock_fd, nbytes, want))):
        try:
            found[name] = run()
        except (PkptxError, OSError) as exc:
            found[name] = (False, f"{type(exc).__name__}: {exc}".splitlines()[0])
    print(json.dumps(found))
    return 0


def check_sharing(child_command: tuple[str, ...] = CHILD) -> list[tuple[str, bool, str, str]]:
    """(name, ok, detail, fix) for CUDA IPC and for VMM fd sharing with a child process on GPU 0, the
    child started as ``child_command HANDLE_HEX NBYTES SOCKET_FD``."""
    from .launch import Device, DeviceArray
    from .launch.driver import call
    from .launch.ipc import handle_to_bytes
    from .launch.vmm import Transaction, allocation_granularity, create, export_fd, map_readwrite, reserve
    device = Device(0).set_current()
    nbytes = allocation_granularity(0)
    want = pattern(nbytes // 4)
    tx = Transaction("pkptx doctor: memory shared with the child")
    try:
        with tx:
            ptr = int(call("cuMemAlloc", nbytes))
            tx.push("cuMemFree", lambda: call("cuMemFree", ptr))
            memory = create(tx, 0, nbytes)
            base = reserve(tx, nbytes, nbytes)
            map_readwrite(tx, base, nbytes, memory, 0)
            for at in (ptr, base):
                DeviceArray.from_pointer(at, (want.size,), "uint32").copy_from_numpy(want)
            device.synchronize()
            handle = handle_to_bytes(call("cuIpcGetMemHandle", ptr))
            fd, _ = export_fd(tx, memory)
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            with ours:
                with theirs:
                    proc = subprocess.Popen([*child_command, handle.hex(), str(nbytes), str(theirs.fileno())],
                                            pass_fds=[theirs.fileno()],
                                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                socket.send_fds(ours, [b"m"], [fd])
                try:
                    out, err = proc.communicate(timeout=TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    out, err = proc.communicate()
                    err += f"\nno answer within {TIMEOUT_S} s"
    finally:
        tx.close()
    try:
        found = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        last = (err.strip().splitlines() or ["no output"])[-1]
        found = {name: (False, f"the child process failed (exit status {proc.returncode}): {last}")
                 for name in ("ipc", "vmm")}
    return [("ipc", *found["ipc"], IPC_FIX), ("vmm-fd", *found["vmm"], VMM_FIX)]


if __name__ == "__main__":
    sys.exit(child(sys.argv[1:]))

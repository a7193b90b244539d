"""A ferry worker process: runs the user's dataset or transform for the pipeline that started it.

Started by the pipeline as ``python -m ferry._worker`` (a new interpreter, never a fork), with its socket as
descriptor 3 (Note [Python workers] in io/workers/worker_pool.cpp has the messages). It writes each
sample's arrays straight into the shared memory the pipeline names, and ends when the socket closes or
the pipeline's process dies. Not for direct use."""

from __future__ import annotations

import ctypes
import importlib
import json
import mmap
import os
import pickle
import signal
import socket
import struct
import sys
import time
import traceback
from typing import Any

import numpy as np

from ferry import _sample

# Codes of the dtypes ferry delivers, as io/workers/ reads them.
_DTYPES = ["uint8", "int32", "int64", "float16", "bfloat16", "float32"]
_CODES = {name: code for code, name in enumerate(_DTYPES)}
_NUMPY = {name: np.dtype(name) for name in _DTYPES if name != "bfloat16"}
_NATIVE_CODES = {dtype: _CODES[name] for name, dtype in _NUMPY.items()}  # native byte order only
_BFLOAT16 = _CODES["bfloat16"]
_ALIGNMENT = 64
_MISSING = object()  # what a sample's dict gives for a field it lacks
_MAX_ERROR = 32 << 10  # characters of a traceback sent back

_CALL = struct.Struct("<B3xIQQQQ")
_INPUT = struct.Struct("<I4xQ")
_SLOT = struct.Struct("<B3xIQQ")
_MAP = struct.Struct("<B3xIQ")
_FIELD = struct.Struct("<BBH4xQ")
_WRITTEN = struct.Struct("<B3xIQ")
_NEED = struct.Struct("<B3xIQ")
_REPLIES = struct.Struct("<B3xI")
_LENGTH = struct.Struct("<I")
_PROGRESS = struct.Struct("<Q")
_FLUSH = 128 << 10  # bytes of replies sent before a request is done (tracebacks are large)


_FD_SPACE = socket.CMSG_SPACE(struct.calcsize("i"))


def _receive(sock: socket.socket, buffer: bytearray) -> tuple[memoryview, list[int]]:
    """The next message, in `buffer` (no allocation per message: socket.recv_fds would make a bytes of
    its full size each time), and the descriptor sent with it."""
    size, ancillary, _, _ = sock.recvmsg_into([buffer], _FD_SPACE)
    fds = []
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds += list(struct.unpack(f"{len(data) // 4}i", data[:len(data) - len(data) % 4]))
    return memoryview(buffer)[:size], fds


class SampleError(Exception):
    """A sample that does not match its fields: said as is, without a traceback."""


def _die_with_parent() -> None:
    # The kernel kills this process when the thread that started it ends (the pipeline's spawner thread,
    # which ends with the pipeline or its process), however that process dies.
    parent = int(os.environ.get("FERRY_WORKER_PARENT", "0"))
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (AttributeError, OSError):
        pass
    if parent and os.getppid() != parent:
        os._exit(0)  # it died before this process could ask


def _load_target(target: str, args: dict[str, Any]) -> Any:
    module_name, _, attribute = target.partition(":")
    module = importlib.import_module(module_name)
    value: Any = module
    for part in attribute.split("."):
        value = getattr(value, part)
    return value


def _load(setup: dict[str, Any], payload: bytes | None) -> Any:
    if setup.get("object"):
        held = pickle.loads(payload)
        # The modules the dataset's class comes from are found where the pipeline's process finds them.
        sys.path[:0] = [path for path in held.get("sys_path", []) if path not in sys.path]
        if held.get("main") is not None:
            # The dataset's class lives in the user's script: load it as multiprocessing's spawn does.
            import multiprocessing.spawn

            multiprocessing.spawn.prepare(held["main"])
        return pickle.loads(held["object"])
    made = _load_target(setup["target"], setup.get("args") or {})
    args = setup.get("args") or {}
    if setup["role"] == "dataset":
        if callable(made) and not hasattr(made, "__getitem__"):
            return made(**args)
        if isinstance(made, type):
            return made(**args)
        if args:
            raise TypeError(f"{setup['target']} is not callable, so it cannot take args")
        return made
    if not callable(made):
        raise TypeError(f"{setup['target']} is a {type(made).__name__}, not a function")
    if args:
        function = made
        return lambda sample: function(sample, **args)
    return made


class Field:
    """A field as declared or inferred: what each sample's value must be."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.name = spec["name"]
        self.dtype = spec["dtype"]
        self.code = _CODES[self.dtype]
        self.numpy = _NUMPY.get(self.dtype)
        shape = list(spec["shape"])
        self.max_length = spec.get("max_length")
        # Variable-length: declared with a max_length, or an input field whose source knows no maximum.
        self.variable = self.max_length is not None or (bool(shape) and shape[0] == -1)
        if self.variable and shape and shape[0] == -1:
            shape = shape[1:]
        self.rest = tuple(shape)  # the shape after dim 0 of a variable-length field; the whole shape otherwise

    def describe_shape(self) -> str:
        if self.variable:
            return "[<= " + str(self.max_length) + (", " + ", ".join(map(str, self.rest)) if self.rest else "") + "]"
        return "[" + ", ".join(map(str, self.rest)) + "]"

    def check(self, array: np.ndarray, code: int, where: str) -> None:
        if code != self.code:
            found = _DTYPES[code] if code >= 0 else str(array.dtype)
            raise SampleError(f"{where}: field '{self.name}' is {found}, expected {self.dtype}")
        shape = array.shape
        if self.variable:
            ok = len(shape) == len(self.rest) + 1 and shape[1:] == self.rest and (
                self.max_length is None or shape[0] <= self.max_length)
        else:
            ok = shape == self.rest
        if not ok:
            raise SampleError(f"{where}: field '{self.name}' has shape {list(shape)}, expected {self.describe_shape()}")


def _as_array(value: Any, field: Field | None, name: str, where: str) -> tuple[np.ndarray, int]:
    """`value` as an array and its dtype code (-1: not one ferry delivers). Python numbers, lists and bytes
    take the field's dtype; arrays and tensors must have it already."""
    if isinstance(value, np.ndarray):
        code = _NATIVE_CODES.get(value.dtype)
        if code is not None:
            return value, code
        if not value.dtype.isnative:  # ferry's tensors are in this machine's byte order
            value = value.astype(value.dtype.newbyteorder("="))
        return value, _CODES.get(value.dtype.name, -1)
    kind = type(value)
    if kind.__module__ == "torch" and hasattr(value, "numpy"):
        if value.device.type != "cpu":
            raise SampleError(f"{where}: field '{name}' is on {value.device}; return CPU tensors (ferry moves the batch)")
        value = value.detach()
        if str(value.dtype) == "torch.bfloat16":
            import torch

            return value.contiguous().view(torch.int16).numpy(), _BFLOAT16
        return value.numpy(), _CODES.get(str(value.dtype).replace("torch.", ""), -1)
    if isinstance(value, (bytes, bytearray, memoryview)):
        array = np.frombuffer(value, dtype=np.uint8)
        return array, _CODES["uint8"]
    if isinstance(value, (bool, int, float, list, tuple, np.generic)):
        if field is not None and field.numpy is not None:
            try:
                array = np.asarray(value, dtype=field.numpy)
            except (TypeError, ValueError, OverflowError) as e:
                raise SampleError(f"{where}: field '{name}' ({value!r:.80}) cannot be {field.dtype}: {e}") from None
            return array, field.code
        if isinstance(value, (bool, np.bool_)):
            return np.asarray(value, dtype=np.uint8), _CODES["uint8"]
        if isinstance(value, int):
            return np.asarray(value, dtype=np.int64), _CODES["int64"]
        if isinstance(value, float):
            return np.asarray(value, dtype=np.float32), _CODES["float32"]
        array = np.asarray(value)
        if array.dtype == np.float64:
            array = array.astype(np.float32)
        elif array.dtype.kind in "iu" and array.dtype.name not in _CODES:
            array = array.astype(np.int64)
        return array, _CODES.get(array.dtype.name, -1)
    raise SampleError(f"{where}: field '{name}' is a {kind.__name__}; a field is a numpy array, a CPU torch tensor, "
                      "a number, a list of numbers or bytes")


def _not_delivered(name: str, array: np.ndarray, where: str) -> SampleError:
    return SampleError(f"{where}: field '{name}' is {array.dtype}, which ferry does not deliver ("
                       f"{', '.join(_DTYPES)}): convert it (e.g. .astype(numpy.float32))")


class Worker:
    def __init__(self, sock: socket.socket, setup: dict[str, Any], made: Any) -> None:
        self.sock = sock
        self.setup = setup
        self.seed = int(setup["seed"])
        self.role = setup["role"]
        self.made = made
        self.segments: dict[int, mmap.mmap] = {}
        self.progress: tuple[mmap.mmap, int] | None = None  # where it says which call of a request it is on
        self.buffer = bytearray(1 << 20)
        self.fields = [Field(spec) for spec in setup["fields"]] if setup.get("fields") else None
        if self.role == "transform":
            self.inputs = {spec["name"]: Field(spec) for spec in setup["inputs"]}
            self.declared = {field.name: field for field in self.fields or []}

    # ---- the dataset's greeting ----
    def greeting(self) -> str:
        if self.role != "dataset":
            return ""
        dataset = self.made
        if not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
            raise TypeError(f"the dataset is a {type(dataset).__name__}, which has no "
                            f"{'__len__' if hasattr(dataset, '__getitem__') else '__getitem__'}: ferry needs a "
                            "map-style dataset (__len__ and __getitem__(index) returning a dict of arrays)")
        length = len(dataset)
        lines = [f"length {length}"]
        if self.fields is None and self.setup.get("worker") == 0 and length > 0:
            self.fields = self.infer(dataset, min(length, 4))
        for field in self.fields or []:
            dims = ",".join(str(size) for size in ((-1,) if field.variable else ()) + field.rest)
            maximum = "-" if field.max_length is None else str(field.max_length)
            lines.append(f"field\t{field.name}\t{field.dtype}\t{dims}\t{maximum}")
        return "\n".join(lines) + "\n"

    def infer(self, dataset: Any, count: int) -> list[Field]:
        """The fields of the first `count` samples that can be made (a sample that raises is passed over,
        as `on_error: skip` would; the first error is raised when none can)."""
        seen: dict[str, list[tuple[np.ndarray, int]]] = {}
        raw_bytes: set[str] = set()  # bytes vary in length: their maximum must be declared
        order: list[str] = []
        first_error = None
        made = 0
        for index in range(min(len(dataset), 8 * count)):
            if made == count:
                break
            where = f"dataset[{index}]"
            try:
                sample = self.call_user(lambda: dataset[index], 0, index)
            except Exception as e:
                first_error = first_error or e
                continue
            if not isinstance(sample, dict):
                raise SampleError(f"{where} is a {type(sample).__name__}; ferry needs a dict of fields")
            names = [str(name) for name in sample]
            if made == 0:
                order = names
            elif sorted(names) != sorted(order):
                raise SampleError(f"{where} has the fields {names}, the first sample had {order}: declare the "
                                  "fields (source.fields, or from_dataset's fields=)")
            for name, value in sample.items():
                if isinstance(value, (bytes, bytearray, memoryview)):
                    raw_bytes.add(name)
                array, code = _as_array(value, None, name, where)
                if code < 0:
                    raise _not_delivered(name, array, where)
                seen.setdefault(name, []).append((array, code))
            made += 1
        if made == 0:
            raise first_error
        count = made
        fields = []
        for name in order:
            arrays = seen[name]
            code = arrays[0][1]
            first = arrays[0][0]
            if any(c != code for _, c in arrays):
                raise SampleError(f"field '{name}' has several dtypes among the first {count} samples "
                                  f"({sorted({_DTYPES[c] for _, c in arrays})}): declare it")
            if name in raw_bytes or len({array.shape for array, _ in arrays}) > 1:
                if any(array.ndim == 0 or array.shape[1:] != first.shape[1:] for array, _ in arrays):
                    raise SampleError(f"field '{name}' has several shapes among the first {count} samples "
                                      f"({[list(array.shape) for array, _ in arrays]}): declare it")
                lengths = [array.shape[0] for array, _ in arrays]
                raise SampleError(f"field '{name}' may vary in length (the first {count} samples: {lengths}): "
                                  "declare it with its max_length (source.fields, or from_dataset's fields=)")
            fields.append(Field({"name": name, "dtype": _DTYPES[code], "shape": list(first.shape)}))
        for field in fields:
            if "\t" in field.name or "\n" in field.name:
                raise SampleError(f"field {field.name!r}: a field's name holds no tab or newline")
        return fields

    # ---- calls ----
    def call_user(self, function, epoch: int, index: int) -> Any:
        _sample._enter(self.seed, epoch, index)
        try:
            return function()
        finally:
            _sample._leave()

    def serve(self) -> None:
        sock = self.sock
        while True:
            message, fds = _receive(sock, self.buffer)
            if not message:
                return  # the pipeline closed the socket, or its process died
            op = message[0]
            if op == 4:
                _, segment, size = _MAP.unpack_from(message)
                self.segments[segment] = mmap.mmap(fds[0], size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
                os.close(fds[0])
                continue
            for fd in fds:
                os.close(fd)
            if op == 5:  # the fields the first worker inferred while this one loaded
                self.fields = [Field(spec) for spec in json.loads(bytes(message[1:]))["fields"]]
                continue
            if op == 6:  # where to say which call of a request this worker is on
                _, segment, offset = _MAP.unpack_from(message)
                self.progress = (self.segments[segment], offset)
                continue
            # A request: its calls, each replied to in one message at the end (Note [Python workers]). A larger
            # slot's messages may come meanwhile into the buffer that holds it.
            message = bytes(message)
            memory, offset = self.progress
            replies = []
            size = 0
            calls = range(0, len(message) - _CALL.size + 1, _CALL.size) if op == 1 else range(1)
            for ordinal, at in enumerate(calls):
                _PROGRESS.pack_into(memory, offset, 2 * ordinal + 1)
                reply = self.run_call(message, at, ordinal)
                _PROGRESS.pack_into(memory, offset, 2 * ordinal + 2)
                replies.append(_LENGTH.pack(len(reply)))
                replies.append(reply)
                size += len(reply)
                if size >= _FLUSH:
                    self.send_replies(replies)
                    replies, size = [], 0
            if replies:
                self.send_replies(replies)

    def send_replies(self, replies: list[bytes]) -> None:
        self.sock.send(_REPLIES.pack(3, len(replies) // 2) + b"".join(replies))

    def run_call(self, message: bytes, at: int, ordinal: int) -> bytes:
        """Makes call `ordinal` of a request (the record at `at`), and returns its reply."""
        op, segment, offset, capacity, index, epoch = _CALL.unpack_from(message, at)
        started = time.perf_counter_ns()
        try:
            if op == 1:
                where = f"dataset[{index}]"
                sample = self.call_user(lambda: self.made[index], epoch, index)
                arrays = self.dataset_arrays(sample, where)
            else:
                where = f"sample {index}"
                inputs = self.input_arrays(message)
                made = self.call_user(lambda: self.made(dict(inputs)), epoch, index)
                arrays = self.transform_arrays(made, inputs, where)
            return self.write(arrays, segment, offset, capacity, started, ordinal)
        except SampleError as e:
            return _error_reply(str(e))
        except (ConnectionError, EOFError):
            raise
        except BaseException as e:  # the user's code failed (sys.exit() too): its traceback goes back
            return _error_reply(f"{where} raised {_described(e)}\n" + traceback.format_exc())

    def dataset_arrays(self, sample: Any, where: str) -> list[tuple[str, np.ndarray, int]]:
        if not isinstance(sample, dict):
            raise SampleError(f"{where} is a {type(sample).__name__}; ferry needs a dict of fields")
        fields = self.fields
        arrays = []
        if len(sample) == len(fields):
            for field in fields:
                value = sample.get(field.name, _MISSING)
                if value is _MISSING:
                    break
                array, code = _as_array(value, field, field.name, where)
                field.check(array, code, where)
                arrays.append((field.name, array, code))
            else:
                return arrays
        names = [field.name for field in fields]
        missing = [name for name in names if name not in sample]
        extra = [str(name) for name in sample if name not in names]
        said = []
        if missing:
            said.append("lacks " + ", ".join(f"'{name}'" for name in missing))
        if extra:
            said.append("has " + ", ".join(f"'{name}'" for name in extra) + ", which the fields do not")
        raise SampleError(f"{where} {' and '.join(said)} (the fields: {', '.join(names)})")

    def input_arrays(self, message: bytes) -> dict[str, np.ndarray]:
        at = _CALL.size
        segment, offset = _INPUT.unpack_from(message, at)
        at += _INPUT.size
        (count,) = struct.unpack_from("<I", message, at)
        at += 4
        memory = self.segments[segment]
        inputs = {}
        for _ in range(count):
            code, ndim, length, field_offset = _FIELD.unpack_from(message, at)
            at += _FIELD.size
            shape = struct.unpack_from(f"<{ndim}q", message, at)
            at += 8 * ndim
            name = bytes(message[at:at + length]).decode()
            at += length
            dtype = np.dtype("int16") if code == _BFLOAT16 else _NUMPY[_DTYPES[code]]
            array = np.ndarray(shape, dtype=dtype, buffer=memory, offset=offset + field_offset)
            array.flags.writeable = False
            inputs[name] = array
        return inputs

    def transform_arrays(self, made: Any, inputs: dict[str, np.ndarray], where: str) -> list[tuple[str, np.ndarray, int]]:
        if not isinstance(made, dict):
            raise SampleError(f"{where}: the transform returned a {type(made).__name__}; it returns a dict of the "
                              "fields it makes or changes")
        arrays = []
        for name, value in made.items():
            if value is inputs.get(name):
                continue  # returned as it came: nothing to write
            field = self.declared.get(name) or self.inputs.get(name)
            if field is None:
                raise SampleError(f"{where}: the transform returned '{name}', which is neither a field of the sample "
                                  f"({', '.join(inputs)}) nor declared among its fields")
            array, code = _as_array(value, field, name, where)
            field.check(array, code, where)
            arrays.append((str(name), array, code))
        return arrays

    # ---- replies ----
    def write(self, arrays: list[tuple[str, np.ndarray, int]], segment: int, offset: int, capacity: int,
              started: int, ordinal: int) -> bytes:
        """Copies the arrays into the call's slot (asking for a larger one when they do not fit) and returns
        the reply that describes them."""
        placed = []
        end = 0
        for name, array, code in arrays:
            start = (end + _ALIGNMENT - 1) // _ALIGNMENT * _ALIGNMENT
            placed.append(start)
            end = start + array.nbytes
        if end > capacity:
            self.sock.send(_NEED.pack(1, ordinal, end))
            message, fds = _receive(self.sock, self.buffer)
            while message and message[0] == 4:  # the larger slot's segment comes first
                _, number, size = _MAP.unpack_from(message)
                self.segments[number] = mmap.mmap(fds[0], size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
                os.close(fds[0])
                message, fds = _receive(self.sock, self.buffer)
            if not message:
                sys.exit(0)
            _, segment, offset, capacity = _SLOT.unpack_from(message)
        memory = self.segments[segment]
        reply = [None]  # the header, once the copies are done: the call's time in this worker
        for (name, array, code), start in zip(arrays, placed):
            if array.nbytes:
                at = offset + start
                if array.flags.c_contiguous:
                    memory[at:at + array.nbytes] = array.data.cast("B")
                else:
                    target = np.ndarray(array.shape, dtype=array.dtype, buffer=memory, offset=at)
                    np.copyto(target, array, casting="no")
            encoded = name.encode()
            reply.append(_FIELD.pack(code, array.ndim, len(encoded), start))
            reply.append(struct.pack(f"<{array.ndim}q", *array.shape))
            reply.append(encoded)
        reply[0] = _WRITTEN.pack(0, len(arrays), time.perf_counter_ns() - started)
        return b"".join(reply)


def _error_reply(text: str) -> bytes:
    if len(text) > _MAX_ERROR:
        text = text[:_MAX_ERROR // 2] + "\n...\n" + text[-_MAX_ERROR // 2:]
    return b"\x02\x00\x00\x00" + text.encode("utf-8", "replace")


class InProcess(Worker):
    """The same code on the decode threads of the pipeline's own process (decode.workers: threads):
    io's in-process runner calls make() and transform() with the GIL held, and copies the arrays they
    return. Errors come back as text, as a worker's do."""

    def __init__(self, setup_json: str, payload: bytes | None) -> None:
        setup = json.loads(setup_json)
        super().__init__(None, setup, _load(setup, payload or None))

    def make(self, index: int, epoch: int):
        where = f"dataset[{index}]"
        try:
            arrays = self.dataset_arrays(self.call_user(lambda: self.made[index], epoch, index), where)
            return [(name, _contiguous(array), code) for name, array, code in arrays]
        except SampleError as e:
            return str(e)
        except Exception as e:
            return f"{where} raised {_described(e)}\n" + traceback.format_exc()

    def transform(self, inputs: dict[str, np.ndarray], index: int, epoch: int):
        where = f"sample {index}"
        try:
            for array in inputs.values():
                array.flags.writeable = False
            made = self.call_user(lambda: self.made(dict(inputs)), epoch, index)
            return [(name, _contiguous(array), code) for name, array, code in self.transform_arrays(made, inputs, where)]
        except SampleError as e:
            return str(e)
        except Exception as e:
            return f"{where} raised {_described(e)}\n" + traceback.format_exc()


def _described(error: BaseException) -> str:
    try:
        return f"{type(error).__name__}: {error}"
    except Exception:  # its str() fails too
        return type(error).__name__


def _contiguous(array: np.ndarray) -> np.ndarray:
    # Not np.ascontiguousarray, which makes a 0-d array 1-d.
    return array if array.flags.c_contiguous else array.copy(order="C")


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the pipeline's process's to handle
    _die_with_parent()
    sock = socket.socket(fileno=3)
    message, fds, _, _ = socket.recv_fds(sock, 1 << 20, 1)
    if not message:
        return
    try:
        setup = json.loads(message)
        payload = None
        if fds:  # a memory file the pipeline wrote (its offset at the end: read from the start)
            size = os.fstat(fds[0]).st_size
            parts = []
            while sum(map(len, parts)) < size:
                part = os.pread(fds[0], size - sum(map(len, parts)), sum(map(len, parts)))
                if not part:
                    break
                parts.append(part)
            os.close(fds[0])
            payload = b"".join(parts)
        worker = Worker(sock, setup, _load(setup, payload))
        greeting = worker.greeting()
    except SampleError as e:
        sock.send(b"error\n" + str(e).encode("utf-8", "replace"))
        return
    except BaseException as e:
        sock.send(b"error\n" + f"{type(e).__name__}: {e}\n{traceback.format_exc()}"[-_MAX_ERROR:].encode(
            "utf-8", "replace"))
        return
    sock.send(b"ok\n" + greeting.encode())
    try:
        worker.serve()
    except (ConnectionError, EOFError):
        pass  # the pipeline went away mid-message: nothing is waiting for this worker


if __name__ == "__main__":
    main()

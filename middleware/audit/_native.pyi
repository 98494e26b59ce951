# Types of the compiled module (_native.c); see native.py (its Native protocol says the same).
HARDWARE_CRC: int

def crc32c(data: bytes | bytearray | memoryview, value: int = 0, /) -> int: ...
def crc32c_table(data: bytes | bytearray | memoryview, value: int = 0, /) -> int: ...
def leaf_hashes(payloads: list[bytes], /) -> tuple[bytes, bytes]: ...
def encode_events(
    first_index: int,
    synced: int,
    time_ns: int,
    prev: bytes,
    payloads: list[bytes],
    leaves: bytes | None = None,
    version: int = 2,
    /,
) -> tuple[bytes, bytes, bytes]: ...
def reduce(hashes: bytes | bytearray | memoryview, levels: int, /) -> bytes: ...

_Frames = list[tuple[int, int, int, int, int]]

def scan_events(
    buf: bytes | bytearray | memoryview,
    off: int,
    chain: bytes,
    count: int,
    batch_last: int,
    want_frames: bool,
    records: bool,
    /,
) -> tuple[int, bytes, int, bytes, int | None, _Frames | None, _Frames | None]: ...
def scan_batches(
    buf: bytes | bytearray | memoryview,
    off: int,
    chain: bytes,
    count: int,
    want_frames: bool,
    records: bool,
    /,
) -> tuple[
    int, bytes, int, bytes, int | None, _Frames | None, list[tuple[int, int, int, bytes, bytes, bytes, int]]
]: ...
def record_ok(payload: bytes | bytearray | memoryview, /) -> bool: ...

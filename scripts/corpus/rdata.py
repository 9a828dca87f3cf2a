"""Reads character vectors out of an R lazy-load database (data/Rdata.rdx + data/Rdata.rdb), the
form in which R packages ship their data sets, without R.

The index (.rdx) is a gzip-compressed R serialisation of list(variables = list(<name> = c(offset,
length)), references = ..., compressed = ...). Each object in the database (.rdb) is, at its offset,
a 4-byte big-endian uncompressed length followed by a zlib stream holding one R serialisation.
R serialisations here are in XDR (big-endian binary) format, version 2 or 3. Only the types that
data sets of plain vectors use are decoded; anything else is an error naming the type, never a
silent guess.
"""

import gzip
import struct
import zlib

# SEXP type codes (R Internals, "Serialization formats").
NILSXP, SYMSXP, LISTSXP, CLOSXP, ENVSXP, PROMSXP, LANGSXP = 0, 1, 2, 3, 4, 5, 6
CHARSXP, LGLSXP, INTSXP, REALSXP, CPLXSXP, STRSXP, VECSXP, EXPRSXP = 9, 10, 13, 14, 15, 16, 19, 20
REFSXP, NILVALUE_SXP, GLOBALENV_SXP, EMPTYENV_SXP, BASEENV_SXP = 255, 254, 253, 242, 241
HAS_ATTR, HAS_TAG = 1 << 9, 1 << 10
NA_INTEGER = -(2 ** 31)


class RDataError(Exception):
    pass


class RVector(list):
    """An R vector: its elements plus its attributes (names, class, ...) as a dict."""

    def __init__(self, items, attributes=None):
        super().__init__(items)
        self.attributes = attributes or {}


class _Reader:
    def __init__(self, data, source):
        self.data, self.pos, self.source, self.refs = data, 0, source, []

    def fail(self, what):
        raise RDataError(f"{self.source}: {what} at byte {self.pos}")

    def take(self, n):
        if self.pos + n > len(self.data):
            self.fail(f"truncated serialisation (wanted {n} more bytes)")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def int(self):
        return struct.unpack(">i", self.take(4))[0]

    def length(self):
        n = self.int()
        if n == -1:  # long vector: two more ints, upper and lower 32 bits
            upper, lower = struct.unpack(">II", self.take(8))
            n = (upper << 32) | lower
        elif n < 0:
            self.fail(f"negative vector length {n}")
        return n

    def header(self):
        if self.take(2) != b"X\n":
            self.fail("not an XDR R serialisation (expected 'X\\n')")
        version = self.int()
        self.int(), self.int()  # the writer's R version and the oldest reader's
        if version == 3:
            self.take(self.int())  # the native encoding's name
        elif version != 2:
            self.fail(f"unsupported serialisation version {version}")

    def attributes(self, flags):
        if not flags & HAS_ATTR:
            return {}
        pairs = self.item()
        return dict(pairs) if isinstance(pairs, list) else {}

    def item(self):
        flags = self.int()
        kind = flags & 0xFF
        if kind in (NILVALUE_SXP, NILSXP):
            return None
        if kind in (GLOBALENV_SXP, EMPTYENV_SXP, BASEENV_SXP):
            return f"<environment {kind}>"
        if kind == REFSXP:
            index = flags >> 8 or self.int()
            if not 1 <= index <= len(self.refs):
                self.fail(f"reference {index} to an unknown object")
            return self.refs[index - 1]
        if kind == SYMSXP:
            name = self.item()
            self.refs.append(name)
            return name
        if kind == CHARSXP:
            n = self.int()
            return None if n == -1 else self.take(n).decode("utf-8")
        if kind in (LISTSXP, LANGSXP):  # a pairlist: [(tag, value), ...]
            pairs = []
            while kind in (LISTSXP, LANGSXP):
                if flags & HAS_ATTR:
                    self.item()  # a pairlist cell's own attributes: not needed
                tag = self.item() if flags & HAS_TAG else None
                pairs.append((tag, self.item()))
                flags = self.int()
                kind = flags & 0xFF
            if kind not in (NILVALUE_SXP, NILSXP):
                self.fail(f"pairlist ends in type {kind}, not NULL")
            return pairs
        if kind in (LGLSXP, INTSXP):
            n = self.length()
            values = [None if v == NA_INTEGER else v for v in struct.unpack(f">{n}i", self.take(4 * n))]
            return RVector(values, self.attributes(flags))
        if kind == REALSXP:
            n = self.length()
            return RVector(struct.unpack(f">{n}d", self.take(8 * n)), self.attributes(flags))
        if kind == STRSXP:
            n = self.length()
            strings = []
            for _ in range(n):
                element_flags = self.int()
                if element_flags & 0xFF != CHARSXP:
                    self.fail(f"character vector element of type {element_flags & 0xFF}")
                size = self.int()
                strings.append(None if size == -1 else self.take(size).decode("utf-8"))
            return RVector(strings, self.attributes(flags))
        if kind in (VECSXP, EXPRSXP):
            n = self.length()
            items = [self.item() for _ in range(n)]
            return RVector(items, self.attributes(flags))
        self.fail(f"unsupported R object type {kind}")


def unserialize(data, source):
    reader = _Reader(data, source)
    reader.header()
    value = reader.item()
    if reader.pos != len(data):
        reader.fail(f"{len(data) - reader.pos} trailing bytes after the object")
    return value


def _named(vector):
    names = vector.attributes.get("names")
    if names is None or len(names) != len(vector):
        raise RDataError("expected a named list")
    return dict(zip(names, vector))


def read_lazy_load_db(stem):
    """Every object of the database `stem`.rdx/.rdb, as {name: value}."""
    with open(stem + ".rdx", "rb") as f:
        index = _named(unserialize(gzip.decompress(f.read()), stem + ".rdx"))
    compressed = index.get("compressed")
    compressed = compressed[0] if isinstance(compressed, list) and compressed else compressed
    if compressed not in (True, 1):
        raise RDataError(f"{stem}.rdx: compression {compressed!r} is not zlib (only zlib is supported)")
    with open(stem + ".rdb", "rb") as db:
        blob = db.read()
    objects = {}
    for name, (offset, size) in _named(index["variables"]).items():
        record = blob[offset:offset + size]
        if len(record) != size or size < 4:
            raise RDataError(f"{stem}.rdb: object '{name}' at {offset}+{size} lies outside the file")
        expected = struct.unpack(">I", record[:4])[0]
        data = zlib.decompress(record[4:])
        if len(data) != expected:
            raise RDataError(f"{stem}.rdb: object '{name}' inflates to {len(data)} bytes, header says {expected}")
        objects[name] = unserialize(data, f"{stem}.rdb[{name}]")
    return objects

"""Tests of the corpus readers on small inputs built here (no packages needed):
    python3 -m unittest discover -s scripts/corpus
"""

import gzip
import os
import struct
import tempfile
import unittest
import zlib

import rdata
import sources
import sword


# ---- a minimal R XDR serialiser, enough for what rdata.py reads ----

def _int(v):
    return struct.pack(">i", v)


def _charsxp(s):
    if s is None:
        return _int(9) + _int(-1)
    b = s.encode("utf-8")
    return _int(9 | (1 << 15)) + _int(len(b)) + b  # (levels: UTF-8 flag; ignored by the reader)


def _strsxp(strings, names=None):
    flags = 16 | ((1 << 9) if names else 0)
    body = _int(flags) + _int(len(strings)) + b"".join(_charsxp(s) for s in strings)
    if names:
        body += _attributes({"names": _strsxp(names)})
    return body


def _intsxp(values):
    return _int(13) + _int(len(values)) + b"".join(_int(v) for v in values)


def _lglsxp(values):
    return _int(10) + _int(len(values)) + b"".join(_int(v) for v in values)


def _attributes(pairs):
    out = b""
    for tag, value in pairs.items():
        out += _int(2 | (1 << 10)) + _int(1) + _charsxp(tag) + value  # LISTSXP cell with a tag (a SYMSXP)
    return out + _int(254)


def _vecsxp(items, names):
    return _int(19 | (1 << 9)) + _int(len(items)) + b"".join(items) + _attributes({"names": _strsxp(names)})


def _serialize(item, version=3):
    header = b"X\n" + _int(version) + _int(0x40201) + _int(0x30500)
    if version == 3:
        header += _int(5) + b"UTF-8"
    return header + item


class RDataTest(unittest.TestCase):
    def test_reads_character_vectors_from_a_lazy_load_database(self):
        objects = {"novel": ["CHAPTER 1", "", "It was é.", None], "other": ["x"]}
        with tempfile.TemporaryDirectory() as folder:
            stem = os.path.join(folder, "Rdata")
            blob, index = b"", {}
            for name, lines in objects.items():
                data = _serialize(_strsxp(lines), version=2 if name == "other" else 3)
                record = struct.pack(">I", len(data)) + zlib.compress(data)
                index[name] = (len(blob), len(record))
                blob += record
            with open(stem + ".rdb", "wb") as f:
                f.write(blob)
            rdx = _vecsxp([_vecsxp([_intsxp(list(v)) for v in index.values()], list(index)), _lglsxp([1])],
                          ["variables", "compressed"])
            with open(stem + ".rdx", "wb") as f:
                f.write(gzip.compress(_serialize(rdx)))
            read = rdata.read_lazy_load_db(stem)
        self.assertEqual({k: list(v) for k, v in read.items()}, objects)

    def test_truncated_and_unknown_input_are_errors(self):
        good = _serialize(_strsxp(["a", "b"]))
        with self.assertRaisesRegex(rdata.RDataError, "truncated"):
            rdata.unserialize(good[:-1], "t")
        with self.assertRaisesRegex(rdata.RDataError, "trailing bytes"):
            rdata.unserialize(good + b"\0", "t")
        with self.assertRaisesRegex(rdata.RDataError, "unsupported R object type 3"):
            rdata.unserialize(_serialize(_int(3)), "t")
        with self.assertRaisesRegex(rdata.RDataError, "not an XDR"):
            rdata.unserialize(b"A\n" + good[2:], "t")


class SwordTest(unittest.TestCase):
    def _module(self, folder, entries):
        """Writes a one-block zText "ot" testament holding `entries`, plus its conf."""
        os.makedirs(os.path.join(folder, "mods.d"))
        data_dir = os.path.join(folder, "modules", "texts", "ztext", "test")
        os.makedirs(data_dir)
        plain = "".join(entries).encode("utf-8")
        block = zlib.compress(plain)
        verses, offset = b"", 0
        for entry in [""] + entries:
            size = len(entry.encode("utf-8"))
            verses += struct.pack("<IIH", 0, offset, size)
            offset += size
        for ext, content in (("bzs", struct.pack("<III", 0, len(block), len(plain))), ("bzv", verses), ("bzz", block)):
            with open(os.path.join(data_dir, "ot." + ext), "wb") as f:
                f.write(content)
        with open(os.path.join(folder, "mods.d", "test.conf"), "w") as f:
            f.write("[Test]\nDataPath=./modules/texts/ztext/test/\nModDrv=zText\nCompressType=ZIP\nSourceType=OSIS\n")

    def test_chapters_lose_markup_notes_and_added_headings(self):
        entries = [
            '<div type="book" osisID="Gen" sID="b1"/><title type="main">Genesis</title>',
            '<chapter osisID="Gen.1" sID="Gen.1"/><title>The Creation</title>',
            '<w lemma="H1">In</w> <w>the</w> beginning, God<note placement="foot">A <rdg>note</rdg></note>created',
            ' &amp; <l level="1" sID="x"/>light<l eID="x"/>.<chapter eID="Gen.1"/>',
            '<chapter osisID="Ps.3" sID="Ps.3"/><title canonical="true" type="psalm">A Psalm.</title> Yahweh!',
            '<d<chapter osisID="Ps.4" sID="Ps.4"/>Answer me.<chapter eID="Ps.4"/>',
        ]
        with tempfile.TemporaryDirectory() as folder:
            self._module(folder, entries)
            _, osis = sword.module_osis(folder, "test.conf")
        self.assertEqual(sword.osis_chapters(osis), [
            ("Gen.1", "In the beginning, God created & light."),
            ("Ps.3", "A Psalm. Yahweh!"),  # ended by the next chapter's start (a lost end milestone)
            ("Ps.4", "Answer me."),
        ])

    def test_unsupported_modules_are_errors(self):
        with tempfile.TemporaryDirectory() as folder:
            self._module(folder, ["<chapter sID='x'/>"])
            conf = os.path.join(folder, "mods.d", "test.conf")
            with open(conf, "a") as f:
                f.write("CipherKey=secret\n")
            with self.assertRaisesRegex(sword.SwordError, "enciphered"):
                sword.module_osis(folder, "test.conf")
        with self.assertRaisesRegex(sword.SwordError, "never closed"):
            sword.osis_chapters('<chapter sID="Gen.1"/>text')


class SourcesTest(unittest.TestCase):
    def test_kjv_verse_prefixes_are_stripped_and_a_short_bible_is_refused(self):
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "kjv.txt")
            with open(path, "w") as f:
                f.write("Ge1:1 In the beginning.\nGe1:2 And the earth.\n1Sam2:1 And Hannah prayed.\n")
            with self.assertRaisesRegex(sources.SourceError, "2 chapters, the KJV has 1189"):
                sources.kjv_chapters(path)
            with open(path, "a") as f:
                f.write("no prefix here\n")
            with self.assertRaisesRegex(sources.SourceError, "not a 'Book<chapter>:<verse> text' line"):
                sources.kjv_chapters(path)


if __name__ == "__main__":
    unittest.main()

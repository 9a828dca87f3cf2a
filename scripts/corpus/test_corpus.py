"""Tests of the corpus readers on small inputs built here (no packages needed):
    python3 -m unittest discover -s scripts/corpus
"""

import gzip
import os
import struct
import tempfile
import unittest
import zlib

import build
import html_text
import pod
import rdata
import rest
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
    def _module(self, folder, entries, driver="zText", links=0):
        """Writes a one-block "ot" testament holding `entries` (the last one linked from `links`
        more verses, as commentaries do), plus its conf: zText (.bz*, u16 sizes) or zCom4 with
        BlockType=CHAPTER (.cz*, u32 sizes)."""
        os.makedirs(os.path.join(folder, "mods.d"))
        data_dir = os.path.join(folder, "modules", "test")
        os.makedirs(data_dir)
        plain = "".join(entries).encode("utf-8")
        block = zlib.compress(plain)
        record, letter, block_type = ("<IIH", "b", "BOOK") if driver == "zText" else ("<III", "c", "CHAPTER")
        verses, offset = b"", 0
        for entry in [""] + entries:
            size = len(entry.encode("utf-8"))
            verses += struct.pack(record, 0, offset, size)
            offset += size
        verses += struct.pack(record, 0, offset - size, size) * links
        for ext, content in (("zs", struct.pack("<III", 0, len(block), len(plain))), ("zv", verses), ("zz", block)):
            with open(os.path.join(data_dir, f"ot.{letter}{ext}"), "wb") as f:
                f.write(content)
        with open(os.path.join(folder, "mods.d", "test.conf"), "w") as f:
            f.write(f"[Test]\nDataPath=./modules/test/\nModDrv={driver}\nBlockType={block_type}\n"
                    "CompressType=ZIP\nSourceType=OSIS\n")

    def test_commentary_entries_are_read_once_each_as_plain_text(self):
        entries = ['<title type="x-s">Psalm 1 OVERVIEW</title>Blessed <hi type="italic">is</hi> the man',
                   '<div sID="p1" type="x-p"/>Verse 2.<note>a note</note> The end']
        with tempfile.TemporaryDirectory() as folder:
            self._module(folder, entries, driver="zCom4", links=3)
            self.assertEqual(sources.commentary_entries(folder, "test.conf", 2),
                             ["Blessed is the man", "Verse 2. The end"])
            with self.assertRaisesRegex(sources.SourceError, "2 entries with text, expected 3"):
                sources.commentary_entries(folder, "test.conf", 3)

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
            with open(conf, "w") as f:
                f.write("[Test]\nDataPath=./modules/test/\nModDrv=RawGenBook\n")
            with self.assertRaisesRegex(sword.SwordError, "driver 'RawGenBook' is not one of"):
                sword.module_osis(folder, "test.conf")
            with open(conf, "w") as f:
                f.write("[Test]\nDataPath=./modules/test/\nModDrv=zCom\nBlockType=PAGE\n")
            with self.assertRaisesRegex(sword.SwordError, "BlockType 'PAGE'"):
                sword.module_osis(folder, "test.conf")
            with open(conf, "w") as f:
                f.write("[Test]\nDataPath=./modules/test/\nModDrv=zCom\nBlockType=VERSE\n")
            with self.assertRaisesRegex(sword.SwordError, r"no text in ot/nt\.vzs"):
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


class RestTest(unittest.TestCase):
    def test_markup_goes_and_text_stays(self):
        source = """.. SPDX-License-Identifier: GPL-2.0
   a comment's second line

.. _label:

=========
The Title
=========

Some *emphasis*, **strong**, ``a *literal*``, :ref:`the guide <guide>`, :c:func:`~mod.kmalloc`,
`a link <https://example.org>`_ and reference_ text. A backslash\\\\ stays; \\*stars\\*.

.. toctree::
   :maxdepth: 2

   intro

.. note::
   Take care.

.. versionadded:: 3.2
   The *flag*.

.. function:: open(file, mode='r')

   Opens a file.

Example::

    x = *p;  // ``kept``

Back to text ::

    literal

+-----+-----+
| a   | b   |
+=====+=====+
| one | two |
+-----+-----+

Sub
---
.. code-block:: c
   :caption: here

   int main(void);
"""
        lines = [line.strip() for line in rest.to_text(source).splitlines() if line.strip()]
        self.assertEqual(lines, [
            "The Title",
            "Some emphasis, strong, a *literal*, the guide, kmalloc,",
            "a link and reference text. A backslash\\ stays; *stars*.",
            "Note:", "Take care.",
            "New in version 3.2.", "The flag.",
            "open(file, mode='r')", "Opens a file.",
            "Example:", "x = *p;  // ``kept``",
            "Back to text", "literal",
            "a     b", "one   two",
            "Sub", "int main(void);",
        ])


    def test_inline_markup_may_span_lines(self):
        self.assertEqual(rest.to_text("See :ref:`the\n   guide <x>` and ``a\nb``.\n\nCode::\n\n   :ref:`kept`\n"),
                         "See the\n   guide and a\nb.\n\nCode:\n\n   :ref:`kept`")


class PodTest(unittest.TestCase):
    def test_formatting_codes_and_commands(self):
        source = """Code before POD is dropped.

=head1 NAME

B<perlfunc> - I<Perl> builtin C<< $a->{b} >> functions E<gt> X<index entry>Z<>

=over 4

=item * L<open|perlfunc/open>, L<perlipc/"Signals">, L<perlsyn>, L<https://perl.org>

=item 2.

=back

    verbatim C<code> stays

=begin html

<p>dropped</p>

=end html

=for comment dropped

S<non breaking> E<0x41>E<66>E<eacute>

=cut

sub code { 1 }
"""
        self.assertEqual(pod.to_text(source).split("\n\n"), [
            "NAME",
            "perlfunc - Perl builtin $a->{b} functions > ",
            'open, "Signals" in perlipc, perlsyn, https://perl.org',
            "    verbatim C<code> stays",
            "non breaking ABé",
        ])

    def test_unbalanced_begin_and_end_are_errors(self):
        with self.assertRaisesRegex(pod.PodError, "x.pod: =begin html is never ended"):
            pod.to_text("=pod\n\n=begin html\n\ntext\n", "x.pod")
        with self.assertRaisesRegex(pod.PodError, "x.pod: =end html without a =begin"):
            pod.to_text("=pod\n\n=end html\n", "x.pod")


class HtmlTextTest(unittest.TestCase):
    def test_visible_text_only(self):
        page = """<html><head><title>T</title><style>p {}</style></head><body>
<div class="navheader"><a href="x">Prev</a> <div>nested</div> Next</div>
<h1>Title</h1><p>One <b>bold</b>word&amp;more<br>next</p></span>
<script>var x = "<p>";</script><div id="footer">Last updated</div><ul><li>a</li><li>b</li></ul>
</body></html>"""
        text = html_text.page_text(page, hidden_classes=("navheader",), hidden_ids=("footer",))
        self.assertEqual(text.split(), ["Title", "One", "boldword&more", "next", "a", "b"])
        with self.assertRaisesRegex(html_text.HtmlTextError, "empty.html: no text"):
            html_text.page_text("<html><head><title>x</title></head></html>", name="empty.html")


class ManualPagesTest(unittest.TestCase):
    def test_pages_in_path_order_short_ones_dropped(self):
        with tempfile.TemporaryDirectory() as folder:
            os.makedirs(os.path.join(folder, "b"))
            for name, text in (("b/page.rst.gz", "Long " * 200), ("a.rst.gz", "Also long " * 100),
                               ("index.rst.gz", "Short"), ("notes.yaml", "ignored " * 100)):
                with gzip.open(os.path.join(folder, name), "wt") as f:
                    f.write(text)
            pages = sources._pages(folder, (".rst.gz",), sources._read_text)
            self.assertEqual([path for path, _ in pages], ["a.rst.gz", os.path.join("b", "page.rst.gz")])
            self.assertEqual(pages[1][1], ("Long " * 200).strip())
        with self.assertRaisesRegex(sources.SourceError, "absent: no such folder"):
            sources._pages("absent", (".html",), sources._read_text)


class BuildTest(unittest.TestCase):
    def test_held_out_subtree_and_deduplication(self):
        pages = [("a.rst", "A"), (os.path.join("howto", "b.rst"), "B"), ("c.rst", "B"), ("d.rst", "D")]
        train, validation = build.held_out(pages, "howto")
        self.assertEqual((train, validation), (["A", "B", "D"], ["B"]))
        with self.assertRaisesRegex(sources.SourceError, "no pages under faq/"):
            build.held_out(pages, "faq")
        corpus = {"train/x.txt": train + ["A"], "train/y.txt": ["D", "E"], "validation/v.txt": validation}
        dropped = build.deduplicate(corpus)
        self.assertEqual(corpus, {"train/x.txt": ["A", "D"], "train/y.txt": ["E"], "validation/v.txt": ["B"]})
        self.assertEqual(dropped, {"train/x.txt": 2, "train/y.txt": 1, "validation/v.txt": 0})

    def test_sample_spreads_documents_or_takes_the_shortest(self):
        documents = [f"{i:02d}" + "x" * 98 for i in range(20)]  # 101 bytes each with the line end
        self.assertEqual(build.spread(documents, 505), documents[::4])
        long_ones = ["a" * 1000, "b" * 10, "c" * 3000, "d" * 20, "e" * 30, "f" * 40]
        self.assertEqual(build.spread(long_ones, 500), ["b" * 10, "d" * 20, "e" * 30, "f" * 40])


if __name__ == "__main__":
    unittest.main()

